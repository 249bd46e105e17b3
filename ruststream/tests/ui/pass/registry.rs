//! Every `#[subscriber]` is registered (inventory) with where it was
//! written; `info()` says the same.

use ruststream::prelude::*;
use ruststream::{Subscriber, registered_subscribers};

#[derive(Debug, Deserialize)]
struct Ping {}

const LEDGER_LINE: u32 = line!() + 1;
#[subscriber(RedisStream::new("pings").group("ledger"))]
async fn ledger(_: &Ping) {}

mod nested {
    use ruststream::prelude::*;

    pub(crate) const AUDIT_LINE: u32 = line!() + 2;
    /// Docs between the line and the attribute do not count.
    #[subscriber(RedisStream::new("pings").group("audit"), workers(3))]
    pub(crate) async fn audit(_: &super::Ping) {}
}

fn main() {
    let info = ledger.info();
    assert_eq!(info.name, "ledger");
    // trybuild names the crate after the case number.
    let module = info.module;
    assert!(module.starts_with("trybuild"), "{module}");
    assert!(info.file.ends_with("registry.rs"), "{}", info.file);
    assert_eq!(info.line, LEDGER_LINE);

    let info = nested::audit.info();
    assert_eq!(info.name, "audit");
    assert_eq!(info.module, format!("{module}::nested"));
    assert_eq!(info.line, nested::AUDIT_LINE);

    let mut registered: Vec<_> = registered_subscribers()
        .map(|r| (r.info, (r.subscription)()))
        .collect();
    registered.sort_by_key(|(info, _)| info.name);
    assert_eq!(registered.len(), 2);
    assert_eq!(registered[0].0, nested::audit.info());
    assert_eq!(registered[0].1, nested::audit.subscription());
    assert_eq!(registered[1].0, ledger.info());
    assert_eq!(registered[1].1.workers, 1);
}

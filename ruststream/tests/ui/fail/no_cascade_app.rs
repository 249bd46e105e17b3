//! A `#[ruststream::app]` with a mistake reports it and nothing else: the
//! binary still has a `main`.

use ruststream::prelude::*;

#[ruststream::app]
async fn app() -> impl App {
    RustStream::new(AppInfo::new("pings", "0.1.0"))
}

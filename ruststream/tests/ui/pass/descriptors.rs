//! Every stream descriptor constructor and builder, written through every
//! accepted path, with constants from the surrounding module.

use ruststream::prelude::*;
use ruststream::{EntryId, Kind, Subscriber};

#[derive(Debug, Deserialize)]
struct Payment {}

const MIN_IDLE: Duration = Duration::from_secs(30);
const STREAM: &str = "payments";

#[subscriber(RedisStream::new("payments").group("ledger"))]
async fn new(_: &Payment) {}

#[subscriber(RedisStream::claiming(STREAM, MIN_IDLE).group("ledger").consumer("ledger-1"))]
async fn claiming(_: &Payment) {}

#[subscriber(RedisStream::reclaim(STREAM, Duration::from_millis(500)).group("ledger"))]
async fn reclaim(_: &Payment) {}

#[subscriber(Stream::new(STREAM).start_id(StreamStart::Beginning).group("audit"))]
async fn neutral_name(_: &Payment) {}

#[subscriber(
    ruststream::RedisStream::new(format!("{STREAM}.v2"))
        .group(String::from("replay"))
        .start_at(StreamStart::Id(EntryId::new(5, 0)))
)]
async fn qualified_path(_: &Payment) {}

#[subscriber(::ruststream::Stream::claiming("payments", MIN_IDLE).group("g"))]
async fn absolute_path(_: &Payment) {}

fn main() {
    let s = new.subscription().stream;
    assert_eq!(
        (s.stream_name(), s.group_name(), s.kind()),
        ("payments", Some("ledger"), Kind::New)
    );
    assert_eq!(s.start(), StreamStart::New);

    let s = claiming.subscription().stream;
    assert_eq!(s.kind(), Kind::Claiming { min_idle: MIN_IDLE });
    assert_eq!(s.consumer_name(), Some("ledger-1"));

    let s = reclaim.subscription().stream;
    assert_eq!(
        s.kind(),
        Kind::Reclaim {
            min_idle: Duration::from_millis(500)
        }
    );

    let s = neutral_name.subscription().stream;
    assert_eq!(
        (s.group_name(), s.start()),
        (Some("audit"), StreamStart::Beginning)
    );

    let s = qualified_path.subscription().stream;
    assert_eq!(
        (s.stream_name(), s.group_name()),
        ("payments.v2", Some("replay"))
    );
    assert_eq!(s.moved_to(), Some(StreamStart::Id(EntryId::new(5, 0))));

    assert_eq!(
        absolute_path.subscription().stream.kind(),
        Kind::Claiming { min_idle: MIN_IDLE }
    );
}

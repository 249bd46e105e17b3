use ruststream::prelude::*;

#[derive(Deserialize)]
struct Payment {}

#[subscriber(RedisStream::new("payments").group("ledger"))]
async fn returns_a_string(_: &Payment) -> String {
    String::new()
}

struct NotDisplay;

#[subscriber(RedisStream::new("payments").group("audit"))]
async fn error_not_display(_: &Payment) -> Result<(), NotDisplay> {
    Err(NotDisplay)
}

fn main() {}

use ruststream::prelude::*;

#[derive(Deserialize)]
struct Payment {}

#[derive(Serialize)]
struct Screened {}

#[subscriber(RedisStream::new("payments").group("fraud"), reply)]
async fn screen(_: &Payment) -> Screened {
    Screened {}
}

#[derive(Outgoing)]
#[outgoing(name = "payments.audited")]
struct Audited {}

#[subscriber(RedisStream::new("payments").group("audit"), reply)]
async fn audit(_: &Payment) -> Audited {
    Audited {}
}

fn main() {}

use ruststream::prelude::*;

#[derive(Deserialize)]
struct Payment {}

// Braces in a stream name would let two names share a broker's keys; an
// empty group and a control character in a consumer name are refused too.
#[subscriber(
    RedisStream::new("pay{ments}").group("").consumer("worker\n1"),
    workers(2)
)]
async fn bad_names(_: &Payment) {}

fn app() -> impl App {
    RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(MemoryBroker::new(), |b| {
        b.include(bad_names);
    })
}

fn main() {
    let _ = app();
}

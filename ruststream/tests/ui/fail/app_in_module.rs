//! `#[ruststream::app]` in a module of a binary whose crate root has no
//! `main`: the `main` it writes there does not start the program. (rustc
//! adds that the crate has no `main`.)

mod service {
    use ruststream::prelude::*;

    #[derive(Debug, Deserialize)]
    struct Ping {}

    #[subscriber(RedisStream::new("pings").group("pong"))]
    async fn pong(_: &Ping) {}

    #[ruststream::app]
    pub fn app() -> impl App {
        RustStream::new(AppInfo::new("pings", "0.1.0")).with_broker(MemoryBroker::new(), |b| {
            b.include(pong);
        })
    }
}

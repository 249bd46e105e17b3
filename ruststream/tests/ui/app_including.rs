// Shared by the fail cases (`include!("../app_including.rs");`): the app
// that uses their subscribers, so that an error cascading past a macro's
// own would show at the `app_including!(..)` line.

/// Writes the crate's `#[ruststream::app]`: an app on a memory broker that
/// includes each subscriber named.
macro_rules! app_including {
    ($($subscriber:ident),+ $(,)?) => {
        #[ruststream::app]
        fn app() -> impl ruststream::App {
            ruststream::RustStream::new(ruststream::AppInfo::new("ui", "0.1.0"))
                .with_broker(ruststream::MemoryBroker::new(), |b| {
                    $(b.include($subscriber);)+
                })
        }
    };
}

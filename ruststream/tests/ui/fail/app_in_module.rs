//! `#[ruststream::app]` in a module of a binary whose crate root has no
//! `main`: the `main` it writes there does not start the program. (rustc
//! adds that the crate has no `main`.)

mod service {
    use ruststream::prelude::*;

    #[ruststream::app]
    pub fn app() -> impl App {
        RustStream::new(AppInfo::new("pings", "0.1.0"))
    }
}

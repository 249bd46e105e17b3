mod with_params {
    use ruststream::prelude::*;

    #[ruststream::app]
    fn app(name: &str) -> impl App {
        RustStream::new(AppInfo::new(name, "0.1.0"))
    }
}

mod asynchronous {
    use ruststream::prelude::*;

    #[ruststream::app]
    async fn app() -> impl App {
        RustStream::new(AppInfo::new("payments", "0.1.0"))
    }
}

mod no_return_type {
    #[ruststream::app]
    fn app() {}
}

mod with_arguments {
    use ruststream::prelude::*;

    #[ruststream::app(workers = 4)]
    fn app() -> impl App {
        RustStream::new(AppInfo::new("payments", "0.1.0"))
    }
}

mod generic {
    use ruststream::prelude::*;

    #[ruststream::app]
    fn app<A: App + Default>() -> A {
        A::default()
    }
}

fn main() {}

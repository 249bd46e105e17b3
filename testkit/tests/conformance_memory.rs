//! The conformance suite against the memory broker, on a paused clock.

use std::sync::Arc;

use ruststream_memory::MemoryBroker;
use ruststream_testkit::conformance::Target;

async fn memory() -> Target {
    Target::paused(Arc::new(MemoryBroker::new()))
}

ruststream_testkit::conformance_suite!(paused, memory);

//! Why an app did not start.

use ruststream_core::BrokerError;

/// Why an app did not start. Each names the subscriber concerned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// A subscription is misconfigured.
    #[error("{subscriber} cannot start: {detail}")]
    Invalid {
        /// The subscriber, where it was written and what it reads.
        subscriber: String,
        /// What is wrong and how to fix it.
        detail: String,
    },
    /// The broker cannot serve the subscription's read mode.
    #[error("{subscriber} cannot start: {source}")]
    Unsupported {
        /// The subscriber, where it was written and what it reads.
        subscriber: String,
        /// The broker's explanation.
        #[source]
        source: BrokerError,
    },
    /// The admin endpoint could not listen on its address.
    #[error("the admin endpoint cannot listen on {addr}: {source}")]
    Admin {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// Why not (the port is taken, the address is not this host's).
        #[source]
        source: std::io::Error,
    },
    /// The broker failed while the subscription was being prepared.
    #[error("{subscriber} cannot start: {source}")]
    Broker {
        /// The subscriber, where it was written and what it reads.
        subscriber: String,
        /// The broker's error.
        #[source]
        source: BrokerError,
    },
}

//! The metrics the runtime reports through the [`metrics`] facade: their
//! names, labels and handles. Nothing is recorded unless the process
//! installs a recorder (the admin endpoint installs the Prometheus one);
//! without one every handle is a no-op. `docs/operations.md` lists them
//! with what each means.
//!
//! Handles are registered once per subscription (labels are built then,
//! not per entry), so recording costs one atomic operation with a recorder
//! and a branch without.

use std::sync::Arc;
use std::time::Duration;

use ::metrics::{Counter, Gauge, Histogram, Label};

/// Metric names, as exported (Prometheus style).
pub mod names {
    /// Counter: entries received from the broker.
    pub const RECEIVED: &str = "ruststream_received_total";
    /// Counter: entries settled, by `outcome` (`ack`, `retry`,
    /// `retry_after`, `dead_letter`, `handed_back`).
    pub const SETTLED: &str = "ruststream_settled_total";
    /// Counter: handler failures, by `kind` (`error`, `panic`, `decode`).
    pub const HANDLER_ERRORS: &str = "ruststream_handler_errors_total";
    /// Counter: entries published, by `stream`.
    pub const PUBLISHED: &str = "ruststream_published_total";
    /// Histogram: handler run time, in seconds.
    pub const HANDLER_DURATION: &str = "ruststream_handler_duration_seconds";
    /// Histogram: publish time (until the broker accepted it), in seconds.
    pub const PUBLISH_DURATION: &str = "ruststream_publish_duration_seconds";
    /// Gauge: entries read and not yet settled at the broker.
    pub const IN_FLIGHT: &str = "ruststream_in_flight";
    /// Gauge: the share of the read-ahead bound in use, 0 to 1.
    pub const READ_AHEAD_USED: &str = "ruststream_read_ahead_used_ratio";
    /// Gauge: entries of the stream the group has not read yet.
    pub const GROUP_LAG: &str = "ruststream_group_lag";
    /// Gauge: entries delivered to the group and not yet settled.
    pub const GROUP_PENDING: &str = "ruststream_group_pending";
    /// Gauge: how long the group's oldest pending entry has been idle, in
    /// seconds (0 with nothing pending).
    pub const GROUP_OLDEST_PENDING_AGE: &str = "ruststream_group_oldest_pending_age_seconds";
    /// Gauge: the group's dead letters.
    pub const GROUP_DEAD_LETTERS: &str = "ruststream_group_dead_letters";
    /// Gauge: the group's consumers.
    pub const GROUP_CONSUMERS: &str = "ruststream_group_consumers";
}

/// Defines the closed set of values of one metric label: the enum, `ALL`
/// (every value, in declaration order, so `value as usize` is its index
/// there) and `label` (the value as exported).
macro_rules! label_values {
    (
        $(#[$meta:meta])*
        $name:ident {
            $($(#[$variant_meta:meta])* $variant:ident => $label:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) enum $name {
            $($(#[$variant_meta])* $variant,)+
        }

        impl $name {
            const ALL: [$name; [$($label),+].len()] = [$($name::$variant),+];

            fn label(self) -> &'static str {
                match self {
                    $($name::$variant => $label,)+
                }
            }
        }
    };
}

label_values! {
    /// How a settled entry was settled, the `outcome` label.
    Outcome {
        Ack => "ack",
        Retry => "retry",
        RetryAfter => "retry_after",
        DeadLetter => "dead_letter",
        HandedBack => "handed_back",
    }
}

label_values! {
    /// What went wrong in a handler, the `kind` label.
    ErrorKind {
        /// It returned an error.
        Error => "error",
        /// It panicked.
        Panic => "panic",
        /// The payload could not be decoded.
        Decode => "decode",
    }
}

/// Describes every metric to the installed recorder (units and help
/// texts). Called when an app starts; harmless without a recorder.
pub(crate) fn describe() {
    use ::metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        names::RECEIVED,
        Unit::Count,
        "Entries received from the broker."
    );
    describe_counter!(
        names::SETTLED,
        Unit::Count,
        "Entries settled at the broker, by outcome."
    );
    describe_counter!(
        names::HANDLER_ERRORS,
        Unit::Count,
        "Handler failures, by kind (error, panic, decode)."
    );
    describe_counter!(names::PUBLISHED, Unit::Count, "Entries published.");
    describe_histogram!(
        names::HANDLER_DURATION,
        Unit::Seconds,
        "How long handlers ran."
    );
    describe_histogram!(
        names::PUBLISH_DURATION,
        Unit::Seconds,
        "How long publishing took, until the broker accepted the entry."
    );
    describe_gauge!(
        names::IN_FLIGHT,
        Unit::Count,
        "Entries read and not yet settled at the broker."
    );
    describe_gauge!(
        names::READ_AHEAD_USED,
        "The share of the read-ahead bound in use (0 to 1)."
    );
    describe_gauge!(
        names::GROUP_LAG,
        Unit::Count,
        "Entries of the stream the group has not read yet."
    );
    describe_gauge!(
        names::GROUP_PENDING,
        Unit::Count,
        "Entries delivered to the group and not yet settled."
    );
    describe_gauge!(
        names::GROUP_OLDEST_PENDING_AGE,
        Unit::Seconds,
        "Idle time of the group's oldest pending entry."
    );
    describe_gauge!(
        names::GROUP_DEAD_LETTERS,
        Unit::Count,
        "The group's dead letters."
    );
    describe_gauge!(
        names::GROUP_CONSUMERS,
        Unit::Count,
        "The group's consumers."
    );
}

/// The labels of one subscription: app, subscriber, stream, group.
pub(crate) fn subscription_labels(
    app: &str,
    subscriber: &'static str,
    stream: &str,
    group: &str,
) -> Vec<Label> {
    vec![
        Label::new("app", app.to_owned()),
        Label::new("subscriber", subscriber),
        Label::new("stream", stream.to_owned()),
        Label::new("group", group.to_owned()),
    ]
}

/// One subscription's metric handles.
#[derive(Debug)]
pub(crate) struct SubscriptionMetrics {
    received: Counter,
    settled: [Counter; Outcome::ALL.len()],
    errors: [Counter; ErrorKind::ALL.len()],
    handler_duration: Histogram,
    in_flight: Gauge,
    read_ahead_used: Gauge,
}

impl SubscriptionMetrics {
    /// Registers the handles with `labels` (see [`subscription_labels`]).
    pub(crate) fn new(labels: &[Label]) -> Self {
        let with = |name: &'static str, value: &'static str| {
            let mut l = labels.to_vec();
            l.push(Label::new(name, value));
            l
        };
        SubscriptionMetrics {
            received: ::metrics::counter!(names::RECEIVED, labels.iter()),
            settled: Outcome::ALL
                .map(|o| ::metrics::counter!(names::SETTLED, with("outcome", o.label()).iter())),
            errors: ErrorKind::ALL.map(|k| {
                ::metrics::counter!(names::HANDLER_ERRORS, with("kind", k.label()).iter())
            }),
            handler_duration: ::metrics::histogram!(names::HANDLER_DURATION, labels.iter()),
            in_flight: ::metrics::gauge!(names::IN_FLIGHT, labels.iter()),
            read_ahead_used: ::metrics::gauge!(names::READ_AHEAD_USED, labels.iter()),
        }
    }

    /// `n` entries received.
    pub(crate) fn received(&self, n: u64) {
        self.received.increment(n);
    }

    /// `n` entries settled with `outcome`.
    pub(crate) fn settled(&self, outcome: Outcome, n: u64) {
        self.settled[outcome as usize].increment(n);
    }

    /// A handler failed this way.
    pub(crate) fn handler_error(&self, kind: ErrorKind) {
        self.errors[kind as usize].increment(1);
    }

    /// A handler ran `nanos` nanoseconds.
    #[inline]
    pub(crate) fn handler_ran(&self, nanos: u64) {
        self.handler_duration.record(nanos as f64 / 1e9);
    }

    /// `n` entries are in flight out of a read-ahead bound of `bound`.
    pub(crate) fn in_flight(&self, n: u64, bound: usize) {
        self.in_flight.set(n as f64);
        self.read_ahead_used.set(n as f64 / bound.max(1) as f64);
    }
}

/// The publish metrics of one app (or of a publisher made by hand: its
/// `app` label is empty).
#[derive(Clone, Debug, Default)]
pub(crate) struct PublishMetrics {
    app: Option<Arc<str>>,
}

impl PublishMetrics {
    /// Publish metrics labelled with `app`.
    pub(crate) fn for_app(app: &str) -> Self {
        PublishMetrics {
            app: Some(Arc::from(app)),
        }
    }

    /// `n` entries published to `stream`, taking `took`.
    pub(crate) fn published(&self, stream: &str, n: u64, took: Duration) {
        let app = self.app.as_deref().unwrap_or_default().to_owned();
        let labels = [
            Label::new("app", app),
            Label::new("stream", stream.to_owned()),
        ];
        ::metrics::counter!(names::PUBLISHED, labels.iter()).increment(n);
        ::metrics::histogram!(names::PUBLISH_DURATION, labels.iter()).record(took.as_secs_f64());
    }
}

/// One group's gauges, set by the runtime's periodic poll.
#[derive(Debug)]
pub(crate) struct GroupGauges {
    lag: Gauge,
    pending: Gauge,
    oldest_pending_age: Gauge,
    dead_letters: Gauge,
    consumers: Gauge,
}

impl GroupGauges {
    /// Registers the gauges of `group` on `stream` for `app`.
    pub(crate) fn new(app: &str, stream: &str, group: &str) -> Self {
        let labels = [
            Label::new("app", app.to_owned()),
            Label::new("stream", stream.to_owned()),
            Label::new("group", group.to_owned()),
        ];
        GroupGauges {
            lag: ::metrics::gauge!(names::GROUP_LAG, labels.iter()),
            pending: ::metrics::gauge!(names::GROUP_PENDING, labels.iter()),
            oldest_pending_age: ::metrics::gauge!(names::GROUP_OLDEST_PENDING_AGE, labels.iter()),
            dead_letters: ::metrics::gauge!(names::GROUP_DEAD_LETTERS, labels.iter()),
            consumers: ::metrics::gauge!(names::GROUP_CONSUMERS, labels.iter()),
        }
    }

    /// Sets the gauges from a poll of the group.
    pub(crate) fn set(&self, info: &ruststream_core::GroupInfo, oldest_idle_ms: Option<u64>) {
        self.lag.set(info.lag as f64);
        self.pending.set(info.pending as f64);
        self.oldest_pending_age
            .set(oldest_idle_ms.unwrap_or(0) as f64 / 1000.0);
        self.dead_letters.set(info.dead_letters as f64);
        self.consumers.set(info.consumers as f64);
    }
}

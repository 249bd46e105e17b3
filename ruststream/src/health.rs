//! An app's health: whether it can do its work, and if not, why.

use std::fmt;

/// Whether a running app can do its work, as [`crate::Running::health`]
/// reports it.
///
/// An app is unhealthy while any of its brokers (read from or only
/// published to) has stopped taking writes (a file log that could not make a write durable stops for good, see
/// `docs/guarantees.md`). Each problem names the broker and, where one is
/// concerned, the subscriber.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Health {
    /// What is wrong; empty when the app is healthy.
    pub problems: Vec<Problem>,
}

impl Health {
    /// Whether nothing is wrong.
    pub fn is_healthy(&self) -> bool {
        self.problems.is_empty()
    }
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.problems.is_empty() {
            return f.write_str("healthy");
        }
        for (i, problem) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

/// One thing wrong with an app.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The broker concerned (`"filelog"`, `"redis"`, ...).
    pub broker: &'static str,
    /// The subscribers reading from that broker (none for a broker the app
    /// only publishes to).
    pub subscribers: Vec<&'static str>,
    /// What is wrong.
    pub detail: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} broker: {}", self.broker, self.detail)?;
        if !self.subscribers.is_empty() {
            write!(f, " (subscribers: {})", self.subscribers.join(", "))?;
        }
        Ok(())
    }
}

//! What a handler can see of its delivery.

use ruststream_core::{Delivery, EntryId, Headers};

use crate::Publisher;

/// Header: deliveries of this entry to the group before this one (0 for a
/// first delivery; a first recovery of a crashed worker's entry reports at
/// least 1). A retry copy carries its original's count.
pub const DELIVERY_COUNT_HEADER: &str = "ruststream-delivery-count";
/// Header: how long a claimed entry sat idle before this delivery, in
/// milliseconds (0 for a first delivery).
pub const IDLE_MS_HEADER: &str = "ruststream-idle-ms";
/// Header: the partition key set by the producer's `partition_key` step.
/// `workers(n, by_key)` keeps entries with the same key on one lane.
pub const PARTITION_KEY_HEADER: &str = "ruststream-partition-key";

/// A number written out in decimal, kept inline so that a header view can
/// lend it as `&str` without allocating.
#[derive(Clone, Copy)]
struct Decimal {
    digits: [u8; 20],
    start: u8,
}

impl Decimal {
    fn new(mut n: u64) -> Self {
        let mut digits = [b'0'; 20];
        let mut start = 20;
        loop {
            start -= 1;
            digits[start] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        Decimal {
            digits,
            start: start as u8,
        }
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.digits[self.start as usize..]).unwrap_or("0")
    }
}

/// The context of one delivery: the entry's headers, id, stream, group,
/// consumer and delivery count, and a publisher for further messages.
///
/// Handlers take it as an optional second parameter, `ctx: &mut
/// Context<'_>`.
pub struct Context<'a> {
    delivery: &'a Delivery,
    stream: &'a str,
    group: &'a str,
    consumer: &'a str,
    publisher: &'a Publisher,
    /// The delivery count and idle time as text, written on first use of
    /// [`Context::headers`] (most handlers never ask).
    texts: std::sync::OnceLock<(Decimal, Decimal)>,
}

impl<'a> Context<'a> {
    /// The context of `delivery`, read by `consumer` of `group` on `stream`.
    pub fn new(
        delivery: &'a Delivery,
        stream: &'a str,
        group: &'a str,
        consumer: &'a str,
        publisher: &'a Publisher,
    ) -> Self {
        Context {
            delivery,
            stream,
            group,
            consumer,
            publisher,
            texts: std::sync::OnceLock::new(),
        }
    }

    /// The entry's headers, plus [`DELIVERY_COUNT_HEADER`] and
    /// [`IDLE_MS_HEADER`] for this delivery.
    pub fn headers(&self) -> HeaderView<'_> {
        HeaderView {
            headers: self.delivery.entry.headers(),
            count: self.texts().0.as_str(),
            idle: self.texts().1.as_str(),
        }
    }

    fn texts(&self) -> &(Decimal, Decimal) {
        self.texts.get_or_init(|| {
            (
                Decimal::new(u64::from(self.delivery.delivery_count)),
                Decimal::new(self.delivery.idle_ms),
            )
        })
    }

    /// The entry's id.
    pub fn id(&self) -> EntryId {
        self.delivery.entry.id
    }

    /// The stream it was read from.
    pub fn stream(&self) -> &str {
        self.stream
    }

    /// The consumer group reading it.
    pub fn group(&self) -> &str {
        self.group
    }

    /// The consumer it was delivered to.
    pub fn consumer(&self) -> &str {
        self.consumer
    }

    /// Refreshes this consumer's claim on the entry: its idle time starts
    /// again, so no claiming reader takes it for another `min_idle`, and its
    /// delivery count stays as it is. A claiming or reclaim subscription
    /// does this by itself for every entry it holds; a handler on another
    /// kind of subscription (or one that wants to be sure) can call it
    /// during slow work. Returns whether the claim was refreshed (`false`:
    /// the entry is no longer pending under this consumer).
    ///
    /// # Errors
    ///
    /// The broker's error, if the call fails.
    pub async fn extend_claim(&self) -> Result<bool, ruststream_core::BrokerError> {
        let ids = [self.delivery.id()];
        let refreshed = self
            .publisher
            .broker()
            .extend_claim(self.stream, self.group, self.consumer, &ids)
            .await?;
        Ok(refreshed > 0)
    }

    /// Deliveries before this one (the value of [`DELIVERY_COUNT_HEADER`]).
    pub fn delivery_count(&self) -> u32 {
        self.delivery.delivery_count
    }

    /// How long the entry sat idle before this delivery, in milliseconds.
    pub fn idle_ms(&self) -> u64 {
        self.delivery.idle_ms
    }

    /// The producer's partition key, if it set one.
    pub fn partition_key(&self) -> Option<&str> {
        self.delivery.entry.headers().get_str(PARTITION_KEY_HEADER)
    }

    /// The raw payload.
    pub fn payload(&self) -> &'a [u8] {
        self.delivery.entry.payload()
    }

    /// The whole delivery.
    pub fn delivery(&self) -> &'a Delivery {
        self.delivery
    }

    /// A publisher on the broker this entry came from.
    pub fn publisher(&self) -> &Publisher {
        self.publisher
    }
}

impl std::fmt::Debug for Context<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("stream", &self.stream)
            .field("group", &self.group)
            .field("consumer", &self.consumer)
            .field("id", &self.id())
            .field("delivery_count", &self.delivery_count())
            .finish()
    }
}

/// A delivery's headers as a handler sees them: the entry's own headers,
/// with [`DELIVERY_COUNT_HEADER`] and [`IDLE_MS_HEADER`] answered from the
/// delivery.
#[derive(Clone, Copy, Debug)]
pub struct HeaderView<'c> {
    headers: &'c Headers,
    count: &'c str,
    idle: &'c str,
}

impl<'c> HeaderView<'c> {
    /// The value of `key`, if set.
    pub fn get_str(&self, key: &str) -> Option<&'c str> {
        match key {
            DELIVERY_COUNT_HEADER => Some(self.count),
            IDLE_MS_HEADER => Some(self.idle),
            _ => self.headers.get_str(key),
        }
    }

    /// The entry's own headers (without the delivery's).
    pub fn entry_headers(&self) -> &'c Headers {
        self.headers
    }
}

#[cfg(test)]
mod tests {
    use super::Decimal;

    #[test]
    fn decimals_print_like_display() {
        for n in [0, 1, 9, 10, 99, 1234567, u64::MAX] {
            assert_eq!(Decimal::new(n).as_str(), n.to_string());
        }
    }
}

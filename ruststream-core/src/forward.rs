//! [`forward_broker!`](crate::forward_broker): `Broker` methods that pass
//! the call on unchanged, for brokers that wrap another.

/// Writes, inside an `impl Broker for T`, the named [`Broker`](crate::Broker)
/// methods as calls to the same method of the field `inner` (any field name
/// given before the colon), so that a wrapper spells out only the methods
/// it changes.
///
/// Every method of the trait can be named, `name` and `publish` included
/// (a wrapper that forwards `publish` keeps the inner broker's own, which
/// may be cheaper than the trait's default).
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
///
/// use ruststream_core::{Broker, BrokerFuture, ReadBatch, ReadRequest, forward_broker};
///
/// /// Counts reads, and passes everything on.
/// struct Counted<B> {
///     inner: B,
///     reads: AtomicUsize,
/// }
///
/// impl<B: Broker> Broker for Counted<B> {
///     fn read<'a>(&'a self, request: ReadRequest<'a>) -> BrokerFuture<'a, ReadBatch> {
///         self.reads.fetch_add(1, Ordering::Relaxed);
///         self.inner.read(request)
///     }
///
///     forward_broker!(inner: name, check_mode, publish, publish_batch, ensure_group,
///         set_group_position, ack, retry, dead_letter, extend_claim, delete_consumer,
///         redrive, discard, group_info, consumers, pending, dead_letters, range,
///         stream_info, streams, trim);
/// }
/// ```
#[macro_export]
macro_rules! forward_broker {
    ($field:ident : $($method:ident),+ $(,)?) => {
        $( $crate::forward_broker!(@method $field $method); )+
    };
    (@method $f:ident name) => {
        fn name(&self) -> &'static str {
            self.$f.name()
        }
    };
    (@method $f:ident failure) => {
        fn failure(&self) -> Option<String> {
            self.$f.failure()
        }
    };
    (@method $f:ident check_mode) => {
        fn check_mode(&self, mode: $crate::ReadMode) -> $crate::BrokerFuture<'_, ()> {
            self.$f.check_mode(mode)
        }
    };
    (@method $f:ident publish) => {
        fn publish<'a>(
            &'a self,
            stream: &'a str,
            message: $crate::Message,
        ) -> $crate::BrokerFuture<'a, $crate::EntryId> {
            self.$f.publish(stream, message)
        }
    };
    (@method $f:ident publish_batch) => {
        fn publish_batch<'a>(
            &'a self,
            stream: &'a str,
            messages: Vec<$crate::Message>,
        ) -> $crate::BrokerFuture<'a, Vec<$crate::EntryId>> {
            self.$f.publish_batch(stream, messages)
        }
    };
    (@method $f:ident ensure_group) => {
        fn ensure_group<'a>(
            &'a self,
            stream: &'a str,
            group: &'a str,
            start: $crate::StreamStart,
        ) -> $crate::BrokerFuture<'a, bool> {
            self.$f.ensure_group(stream, group, start)
        }
    };
    (@method $f:ident set_group_position) => {
        fn set_group_position<'a>(
            &'a self,
            stream: &'a str,
            group: &'a str,
            start: $crate::StreamStart,
        ) -> $crate::BrokerFuture<'a, ()> {
            self.$f.set_group_position(stream, group, start)
        }
    };
    (@method $f:ident read) => {
        fn read<'a>(
            &'a self,
            request: $crate::ReadRequest<'a>,
        ) -> $crate::BrokerFuture<'a, $crate::ReadBatch> {
            self.$f.read(request)
        }
    };
    (@method $f:ident ack) => {
        fn ack<'a>(
            &'a self,
            stream: &'a str,
            group: &'a str,
            ids: &'a [$crate::EntryId],
        ) -> $crate::BrokerFuture<'a, u64> {
            self.$f.ack(stream, group, ids)
        }
    };
    (@method $f:ident retry) => {
        fn retry<'a>(
            &'a self,
            stream: &'a str,
            group: &'a str,
            ids: &'a [$crate::EntryId],
            how: $crate::Retry,
        ) -> $crate::BrokerFuture<'a, u64> {
            self.$f.retry(stream, group, ids, how)
        }
    };
    (@method $f:ident dead_letter) => {
        fn dead_letter<'a>(
            &'a self,
            stream: &'a str,
            group: &'a str,
            ids: &'a [$crate::EntryId],
            reason: &'a str,
        ) -> $crate::BrokerFuture<'a, u64> {
            self.$f.dead_letter(stream, group, ids, reason)
        }
    };
    (@method $f:ident extend_claim) => {
        fn extend_claim<'a>(
            &'a self,
            stream: &'a str,
            group: &'a str,
            consumer: &'a str,
            ids: &'a [$crate::EntryId],
        ) -> $crate::BrokerFuture<'a, u64> {
            self.$f.extend_claim(stream, group, consumer, ids)
        }
    };
    (@method $f:ident streams) => {
        fn streams(&self) -> $crate::BrokerFuture<'_, ::std::vec::Vec<::std::string::String>> {
            self.$f.streams()
        }
    };
    (@method $f:ident delete_consumer) => {
        fn delete_consumer<'a>(
            &'a self,
            stream: &'a str,
            group: &'a str,
            consumer: &'a str,
            min_idle: ::std::time::Duration,
        ) -> $crate::BrokerFuture<'a, bool> {
            self.$f.delete_consumer(stream, group, consumer, min_idle)
        }
    };
    (@method $f:ident redrive) => {
        fn redrive<'a>(
            &'a self,
            stream: &'a str,
            group: &'a str,
            ids: &'a [$crate::EntryId],
        ) -> $crate::BrokerFuture<'a, u64> {
            self.$f.redrive(stream, group, ids)
        }
    };
    (@method $f:ident discard) => {
        fn discard<'a>(
            &'a self,
            stream: &'a str,
            group: &'a str,
            ids: &'a [$crate::EntryId],
        ) -> $crate::BrokerFuture<'a, u64> {
            self.$f.discard(stream, group, ids)
        }
    };
    (@method $f:ident group_info) => {
        fn group_info<'a>(
            &'a self,
            stream: &'a str,
            group: &'a str,
        ) -> $crate::BrokerFuture<'a, $crate::GroupInfo> {
            self.$f.group_info(stream, group)
        }
    };
    (@method $f:ident consumers) => {
        fn consumers<'a>(
            &'a self,
            stream: &'a str,
            group: &'a str,
        ) -> $crate::BrokerFuture<'a, Vec<$crate::ConsumerInfo>> {
            self.$f.consumers(stream, group)
        }
    };
    (@method $f:ident pending) => {
        fn pending<'a>(
            &'a self,
            stream: &'a str,
            group: &'a str,
            from: $crate::EntryId,
            count: usize,
            consumer: Option<&'a str>,
        ) -> $crate::BrokerFuture<'a, Vec<$crate::PendingEntry>> {
            self.$f.pending(stream, group, from, count, consumer)
        }
    };
    (@method $f:ident dead_letters) => {
        fn dead_letters<'a>(
            &'a self,
            stream: &'a str,
            group: &'a str,
            from: $crate::EntryId,
            count: usize,
        ) -> $crate::BrokerFuture<'a, Vec<$crate::DeadLetter>> {
            self.$f.dead_letters(stream, group, from, count)
        }
    };
    (@method $f:ident range) => {
        fn range<'a>(
            &'a self,
            stream: &'a str,
            from: $crate::EntryId,
            to: $crate::EntryId,
            count: usize,
        ) -> $crate::BrokerFuture<'a, Vec<$crate::Entry>> {
            self.$f.range(stream, from, to, count)
        }
    };
    (@method $f:ident stream_info) => {
        fn stream_info<'a>(
            &'a self,
            stream: &'a str,
        ) -> $crate::BrokerFuture<'a, Option<$crate::StreamInfo>> {
            self.$f.stream_info(stream)
        }
    };
    (@method $f:ident trim) => {
        fn trim<'a>(&'a self, stream: &'a str, trim: $crate::Trim) -> $crate::BrokerFuture<'a, u64> {
            self.$f.trim(stream, trim)
        }
    };
}

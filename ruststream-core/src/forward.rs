//! [`forward_broker!`](crate::forward_broker),
//! [`delegate_broker!`](crate::delegate_broker) and
//! [`broker_methods!`](crate::broker_methods): `Broker` methods written
//! from their names, that pass the call on unchanged (to a wrapped broker,
//! or to functions by role) or wrap it the same way (a macro of the
//! caller's writes each body).
//!
//! All three write each method from one table of the trait's signatures
//! (`__broker_method!`), so a signature is spelled once here.

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
///         set_group_position, ack, retry, dead_letter, extend_claim, count_deliveries, delete_consumer,
///         redrive, discard, group_info, consumers, pending, dead_letters, range,
///         stream_info, streams, trim);
/// }
/// ```
#[macro_export]
macro_rules! forward_broker {
    ($field:ident : $($method:ident),+ $(,)?) => {
        $( $crate::__broker_method!(field $field $method); )+
    };
}

/// Writes, inside an `impl Broker for T`, the named [`Broker`](crate::Broker)
/// methods as calls to the functions of the same name in the module given
/// before the colon, each taking the broker first and returning a future
/// of the method's answer; for a broker whose methods live in modules by
/// role.
///
/// ```
/// use ruststream_core::{Broker, BrokerResult, EntryId, delegate_broker, forward_broker};
///
/// /// A broker that settles through functions of its own, and passes
/// /// everything else to `store`.
/// struct Settling<B> {
///     store: B,
/// }
///
/// mod settle {
///     use ruststream_core::{Broker, BrokerResult, EntryId};
///
///     /// Acknowledges in the store.
///     pub async fn ack<B: Broker>(
///         broker: &super::Settling<B>,
///         stream: &str,
///         group: &str,
///         ids: &[EntryId],
///     ) -> BrokerResult<u64> {
///         broker.store.ack(stream, group, ids).await
///     }
/// }
///
/// impl<B: Broker> Broker for Settling<B> {
///     delegate_broker!(settle: ack);
///
///     forward_broker!(store: name, check_mode, publish_batch, ensure_group,
///         set_group_position, read, retry, dead_letter, extend_claim, count_deliveries, redrive, discard,
///         group_info, consumers, pending, dead_letters, range, stream_info, trim);
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! delegate_broker {
    ($module:ident : $($method:ident),+ $(,)?) => {
        $( $crate::__broker_method!(module $module $method); )+
    };
}

/// Writes, inside an `impl Broker for T`, the named [`Broker`](crate::Broker)
/// methods with the trait's signatures, each body written by the macro
/// named before the colon: it is called as `body!(self, [extra] method(param,
/// ...))`, with the receiver, the tokens given in brackets after the
/// method's name (none: `[]`), the method's name and its parameters'
/// names, in the trait's order. For wrappers that treat many calls alike.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
///
/// use ruststream_core::{Broker, broker_methods, forward_broker};
///
/// /// Counts the calls that settle entries, by kind, and passes
/// /// everything on.
/// struct Counted<B> {
///     inner: B,
///     settles: [AtomicUsize; 2],
/// }
///
/// /// The body of a counted call: count it under `kind`, then pass it on.
/// macro_rules! counted {
///     ($this:ident, [$kind:expr] $method:ident($($param:ident),*)) => {{
///         $this.settles[$kind].fetch_add(1, Ordering::Relaxed);
///         $this.inner.$method($($param),*)
///     }};
/// }
///
/// impl<B: Broker> Broker for Counted<B> {
///     broker_methods!(counted: ack[0], dead_letter[1]);
///
///     forward_broker!(inner: name, check_mode, publish_batch, ensure_group,
///         set_group_position, read, retry, extend_claim, count_deliveries, redrive, discard,
///         group_info, consumers, pending, dead_letters, range, stream_info, trim);
/// }
/// ```
#[macro_export]
macro_rules! broker_methods {
    ($body:ident : $($method:ident $([$($extra:tt)*])?),+ $(,)?) => {
        $( $crate::__broker_method!(with [$body [$($($extra)*)?]] $method); )+
    };
}

/// The table of the [`Broker`](crate::Broker) methods' parameters and
/// answers, one line a method, for [`forward_broker!`](crate::forward_broker)
/// [`delegate_broker!`](crate::delegate_broker) and
/// [`broker_methods!`](crate::broker_methods): `$how` is `field`, `module`
/// or `with`, `$to` the field, the module, or the body macro with its
/// extra tokens.
#[doc(hidden)]
#[macro_export]
#[rustfmt::skip]
macro_rules! __broker_method {
    (field $f:ident name) => { fn name(&self) -> &'static str { self.$f.name() } };
    (field $f:ident failure) => { fn failure(&self) -> Option<String> { self.$f.failure() } };
    (field $f:ident read_now) => {
        fn read_now(&self, request: &$crate::ReadRequest<'_>, batch: &mut $crate::ReadBatch) -> Option<$crate::BrokerResult<()>> { self.$f.read_now(request, batch) }
    };
    (field $f:ident ack_now) => {
        fn ack_now(&self, stream: &str, group: &str, ids: &[$crate::EntryId]) -> Option<$crate::BrokerResult<u64>> { self.$f.ack_now(stream, group, ids) }
    };
    ($how:tt $to:tt check_mode) => { $crate::__broker_fn!($how $to check_mode(mode: $crate::ReadMode) -> ()); };
    ($how:tt $to:tt publish) => { $crate::__broker_fn!($how $to publish(stream: &'a str, message: $crate::Message) -> $crate::EntryId); };
    ($how:tt $to:tt publish_batch) => { $crate::__broker_fn!($how $to publish_batch(stream: &'a str, messages: Vec<$crate::Message>) -> Vec<$crate::EntryId>); };
    ($how:tt $to:tt ensure_group) => { $crate::__broker_fn!($how $to ensure_group(stream: &'a str, group: &'a str, start: $crate::StreamStart) -> bool); };
    ($how:tt $to:tt set_group_position) => { $crate::__broker_fn!($how $to set_group_position(stream: &'a str, group: &'a str, start: $crate::StreamStart) -> ()); };
    ($how:tt $to:tt read) => { $crate::__broker_fn!($how $to read(request: $crate::ReadRequest<'a>) -> $crate::ReadBatch); };
    ($how:tt $to:tt ack) => { $crate::__broker_fn!($how $to ack(stream: &'a str, group: &'a str, ids: &'a [$crate::EntryId]) -> u64); };
    ($how:tt $to:tt retry) => { $crate::__broker_fn!($how $to retry(stream: &'a str, group: &'a str, ids: &'a [$crate::EntryId], how: $crate::Retry) -> u64); };
    ($how:tt $to:tt dead_letter) => { $crate::__broker_fn!($how $to dead_letter(stream: &'a str, group: &'a str, ids: &'a [$crate::EntryId], reason: &'a str) -> u64); };
    ($how:tt $to:tt extend_claim) => { $crate::__broker_fn!($how $to extend_claim(stream: &'a str, group: &'a str, consumer: &'a str, ids: &'a [$crate::EntryId]) -> u64); };
    ($how:tt $to:tt count_deliveries) => { $crate::__broker_fn!($how $to count_deliveries(stream: &'a str, group: &'a str, consumer: &'a str, counts: &'a [($crate::EntryId, u32)]) -> u64); };
    ($how:tt $to:tt streams) => { $crate::__broker_fn!($how $to streams() -> Vec<String>); };
    ($how:tt $to:tt delete_consumer) => { $crate::__broker_fn!($how $to delete_consumer(stream: &'a str, group: &'a str, consumer: &'a str, min_idle: ::std::time::Duration) -> bool); };
    ($how:tt $to:tt redrive) => { $crate::__broker_fn!($how $to redrive(stream: &'a str, group: &'a str, ids: &'a [$crate::EntryId]) -> u64); };
    ($how:tt $to:tt discard) => { $crate::__broker_fn!($how $to discard(stream: &'a str, group: &'a str, ids: &'a [$crate::EntryId]) -> u64); };
    ($how:tt $to:tt group_info) => { $crate::__broker_fn!($how $to group_info(stream: &'a str, group: &'a str) -> $crate::GroupInfo); };
    ($how:tt $to:tt consumers) => { $crate::__broker_fn!($how $to consumers(stream: &'a str, group: &'a str) -> Vec<$crate::ConsumerInfo>); };
    ($how:tt $to:tt pending) => { $crate::__broker_fn!($how $to pending(stream: &'a str, group: &'a str, from: $crate::EntryId, count: usize, consumer: Option<&'a str>) -> Vec<$crate::PendingEntry>); };
    ($how:tt $to:tt dead_letters) => { $crate::__broker_fn!($how $to dead_letters(stream: &'a str, group: &'a str, from: $crate::EntryId, count: usize) -> Vec<$crate::DeadLetter>); };
    ($how:tt $to:tt range) => { $crate::__broker_fn!($how $to range(stream: &'a str, from: $crate::EntryId, to: $crate::EntryId, count: usize) -> Vec<$crate::Entry>); };
    ($how:tt $to:tt stream_info) => { $crate::__broker_fn!($how $to stream_info(stream: &'a str) -> Option<$crate::StreamInfo>); };
    ($how:tt $to:tt trim) => { $crate::__broker_fn!($how $to trim(stream: &'a str, trim: $crate::Trim) -> u64); };
}

/// Writes one method from its line of `__broker_method!`: a call to the
/// same method of a field, to the function of the same name in a module
/// (boxed), or the body a macro of the caller's writes.
#[doc(hidden)]
#[macro_export]
macro_rules! __broker_fn {
    (field $f:ident $name:ident($($p:ident: $t:ty),*) -> $answer:ty) => {
        fn $name<'a>(&'a self, $($p: $t),*) -> $crate::BrokerFuture<'a, $answer> {
            self.$f.$name($($p),*)
        }
    };
    (module $m:ident $name:ident($($p:ident: $t:ty),*) -> $answer:ty) => {
        fn $name<'a>(&'a self, $($p: $t),*) -> $crate::BrokerFuture<'a, $answer> {
            Box::pin($m::$name(self, $($p),*))
        }
    };
    (with [$body:ident $extra:tt] $name:ident($($p:ident: $t:ty),*) -> $answer:ty) => {
        fn $name<'a>(&'a self, $($p: $t),*) -> $crate::BrokerFuture<'a, $answer> {
            $body!(self, $extra $name($($p),*))
        }
    };
}

//! Unit tests of the engine: every consumer-group rule of
//! `docs/semantics.md` that a pure state machine can show, with explicit
//! times (no runtime, no clock). One file per role, as in the engine.

use std::sync::Arc;
use std::time::Duration;

use ruststream_core::{
    BrokerError, BrokerResult, ConsumerInfo, DeadLetter, Delivery, EntryId, GroupInfo, Message,
    PendingEntry, ReadBatch, ReadMode, ReadRequest, StreamStart, Trim,
};

use super::*;

const S: &str = "jobs";
const G: &str = "workers";
const T0: u64 = 1_000;

mod dead;
mod determinism;
mod groups;
mod info;
mod journal;
mod memory_bounds;
mod reads;
mod settle;
mod streams;

// ---------------------------------------------------------------- helpers

fn msg(payload: &str) -> Message {
    Message::new(payload.as_bytes().to_vec())
}

/// Publishes `n` messages `"<prefix>0"`, `"<prefix>1"`, ... at `now`.
fn publish_n(e: &mut Engine, prefix: &str, n: usize, now: u64) -> Vec<EntryId> {
    e.publish(S, (0..n).map(|i| msg(&format!("{prefix}{i}"))), now)
}

fn publish_one(e: &mut Engine, payload: &str, now: u64) -> EntryId {
    e.publish(S, [msg(payload)], now)[0]
}

/// An engine with group `G` on `S` starting at the beginning, and `n`
/// entries `m0..` published at `T0`.
fn setup(n: usize) -> (Engine, Vec<EntryId>) {
    let mut e = Engine::new();
    assert!(e.ensure_group(S, G, StreamStart::Beginning, T0));
    let ids = publish_n(&mut e, "m", n, T0);
    (e, ids)
}

/// As `setup`, with the first entry read by consumer "a" at `T0`.
fn held(n: usize) -> (Engine, Vec<EntryId>) {
    let (mut e, ids) = setup(n);
    read(&mut e, new_req("a", 1), T0);
    (e, ids)
}

/// As `held`, with the held entry owed back to the group at `T0`.
fn owed(n: usize) -> (Engine, Vec<EntryId>) {
    let (mut e, ids) = held(n);
    e.retry_after(S, G, &[ids[0]], 0, T0).unwrap();
    (e, ids)
}

/// As `setup`, on an engine that records its changes from the start.
fn setup_recorded(n: usize) -> (Engine, Vec<EntryId>) {
    let mut e = Engine::new();
    e.record_changes(true);
    e.ensure_group(S, G, StreamStart::Beginning, T0);
    let ids = publish_n(&mut e, "m", n, T0);
    (e, ids)
}

/// An engine with groups "g1" and "g2" on `S` starting at `start`, and
/// `n` entries `m0..` published at `T0`.
fn setup_two_groups(start: StreamStart, n: usize) -> (Engine, Vec<EntryId>) {
    let mut e = Engine::new();
    e.ensure_group(S, "g1", start, T0);
    e.ensure_group(S, "g2", start, T0);
    let ids = publish_n(&mut e, "m", n, T0);
    (e, ids)
}

/// Hands the first entry not yet delivered to consumer "c" of each of
/// "g1" and "g2" at `T0`.
fn read_one_in_both_groups(e: &mut Engine) {
    for g in ["g1", "g2"] {
        e.read(&ReadRequest::new(S, g, "c", ReadMode::New, 1), T0)
            .unwrap();
    }
}

fn new_req(consumer: &'static str, count: usize) -> ReadRequest<'static> {
    ReadRequest::new(S, G, consumer, ReadMode::New, count)
}

fn claiming_req(consumer: &'static str, min_idle_ms: u64, count: usize) -> ReadRequest<'static> {
    let min_idle = Duration::from_millis(min_idle_ms);
    ReadRequest::new(S, G, consumer, ReadMode::Claiming { min_idle }, count)
}

fn reclaim_req(consumer: &'static str, min_idle_ms: u64, count: usize) -> ReadRequest<'static> {
    let min_idle = Duration::from_millis(min_idle_ms);
    ReadRequest::new(S, G, consumer, ReadMode::Reclaim { min_idle }, count)
}

fn own_req(consumer: &'static str, after: EntryId, count: usize) -> ReadRequest<'static> {
    ReadRequest::new(S, G, consumer, ReadMode::own_pending(after), count)
}

/// A read as `consumer` of `count` entries in each mode (`min_idle_ms`
/// for the claiming ones, own pending from the start).
fn every_mode(consumer: &'static str, min_idle_ms: u64, count: usize) -> [ReadRequest<'static>; 4] {
    [
        new_req(consumer, count),
        claiming_req(consumer, min_idle_ms, count),
        reclaim_req(consumer, min_idle_ms, count),
        own_req(consumer, EntryId::ZERO, count),
    ]
}

fn read(e: &mut Engine, req: ReadRequest<'_>, now: u64) -> ReadBatch {
    e.read(&req, now).unwrap()
}

/// The ids `e.range(S, from, to, count)` returns.
fn range_ids(e: &Engine, from: EntryId, to: EntryId, count: usize) -> Vec<EntryId> {
    e.range(S, from, to, count).iter().map(|x| x.id).collect()
}

fn ids(batch: &ReadBatch) -> Vec<EntryId> {
    batch.deliveries.iter().map(Delivery::id).collect()
}

fn counts(batch: &ReadBatch) -> Vec<u32> {
    batch.deliveries.iter().map(|d| d.delivery_count).collect()
}

fn idles(batch: &ReadBatch) -> Vec<u64> {
    batch.deliveries.iter().map(|d| d.idle_ms).collect()
}

fn payloads(batch: &ReadBatch) -> Vec<String> {
    batch
        .deliveries
        .iter()
        .map(|d| String::from_utf8(d.entry.payload().to_vec()).unwrap())
        .collect()
}

fn all_pending(e: &Engine, now: u64) -> Vec<PendingEntry> {
    e.pending(S, G, EntryId::ZERO, usize::MAX, None, now)
        .unwrap()
}

fn pending_entry(e: &Engine, id: EntryId, now: u64) -> PendingEntry {
    let found = e.pending(S, G, id, 1, None, now).unwrap();
    match found.into_iter().next() {
        Some(p) if p.id == id => p,
        other => panic!("{id} is not pending (found {other:?})"),
    }
}

fn pending_ids(e: &Engine, now: u64) -> Vec<EntryId> {
    all_pending(e, now).iter().map(|p| p.id).collect()
}

fn dead(e: &Engine) -> Vec<DeadLetter> {
    e.dead_letters(S, G, EntryId::ZERO, usize::MAX).unwrap()
}

fn info(e: &Engine) -> GroupInfo {
    e.group_info(S, G).unwrap()
}

fn assert_no_group<T: std::fmt::Debug>(result: BrokerResult<T>, stream: &str, group: &str) {
    match result {
        Err(err @ BrokerError::NoGroup { .. }) => {
            let text = err.to_string();
            assert!(text.contains(stream), "{text:?} does not name {stream:?}");
            assert!(text.contains(group), "{text:?} does not name {group:?}");
            match err {
                BrokerError::NoGroup {
                    stream: s,
                    group: g,
                } => {
                    assert_eq!(s, stream);
                    assert_eq!(g, group);
                }
                _ => unreachable!(),
            }
        }
        other => panic!("expected NoGroup for {stream:?}/{group:?}, got {other:?}"),
    }
}

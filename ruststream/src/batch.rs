//! Batch handlers (`#[subscriber(.., batch(max = n, wait = d))]`): what a
//! batch handler's return value means for its entries, and the batch the
//! runtime hands the generated code. How batches are gathered and run is
//! in `runtime/batch.rs`; the rules are in `docs/batches.md`.

use std::fmt;

use ruststream_core::Delivery;

use crate::{HandlerOutcome, IntoSettle, Settle};

/// What a batch handler returns: one outcome for the whole batch, or one
/// per entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchSettle {
    /// The same outcome for every entry the handler was given.
    All(Settle),
    /// One outcome per entry, in the order the handler was given them.
    Each(Vec<Settle>),
}

/// Turns a batch handler's return value into a [`BatchSettle`]: for the
/// whole batch, `()`, [`HandlerOutcome`] and `Result<(), E>` (as a single
/// handler's); per entry, `Vec<HandlerOutcome>` and `Vec<Result<(), E>>`,
/// one element per entry the handler was given, in the same order.
///
/// ```
/// use ruststream::{BatchSettle, HandlerOutcome, IntoBatchSettle, Settle};
///
/// let each = vec![HandlerOutcome::ack(), HandlerOutcome::retry()].into_batch_settle();
/// assert_eq!(
///     each,
///     BatchSettle::Each(vec![
///         Settle::Outcome(HandlerOutcome::Ack),
///         Settle::Outcome(HandlerOutcome::Retry),
///     ])
/// );
/// assert_eq!(().into_batch_settle(), BatchSettle::All(Settle::Outcome(HandlerOutcome::Ack)));
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot settle a batch",
    label = "a batch subscriber returns `()`, `HandlerOutcome` or `Result<(), E: Display>` for the whole batch, or a `Vec` of `HandlerOutcome` or `Result<(), E>` with one element per entry",
    note = "see `docs/batches.md` for what each return type means"
)]
pub trait IntoBatchSettle {
    /// The settle decision for this value.
    fn into_batch_settle(self) -> BatchSettle;
}

impl IntoBatchSettle for () {
    fn into_batch_settle(self) -> BatchSettle {
        BatchSettle::All(self.into_settle())
    }
}

impl IntoBatchSettle for HandlerOutcome {
    fn into_batch_settle(self) -> BatchSettle {
        BatchSettle::All(self.into_settle())
    }
}

impl<E: fmt::Display> IntoBatchSettle for Result<(), E> {
    fn into_batch_settle(self) -> BatchSettle {
        BatchSettle::All(self.into_settle())
    }
}

impl IntoBatchSettle for Vec<HandlerOutcome> {
    fn into_batch_settle(self) -> BatchSettle {
        BatchSettle::Each(self.into_iter().map(IntoSettle::into_settle).collect())
    }
}

impl<E: fmt::Display> IntoBatchSettle for Vec<Result<(), E>> {
    fn into_batch_settle(self) -> BatchSettle {
        BatchSettle::Each(self.into_iter().map(IntoSettle::into_settle).collect())
    }
}

/// The entries of one batch, as the runtime hands them to a batch
/// subscriber's [`Subscriber::handle_batch`](crate::Subscriber::handle_batch),
/// and how each is to be settled. The code `#[subscriber]` writes decodes
/// the payloads ([`EntryBatch::decode`]), calls the handler with those that
/// decoded, and settles them ([`EntryBatch::settle`]).
#[derive(Debug)]
pub struct EntryBatch {
    deliveries: Vec<Delivery>,
    /// How each entry is settled, in the order of `deliveries`; `None`
    /// until decided.
    settles: Vec<Option<Settle>>,
    /// Set when the handler returned a per-entry outcome list of the wrong
    /// length: (outcomes returned, entries given).
    mismatch: Option<(usize, usize)>,
}

impl EntryBatch {
    /// A batch of `deliveries`, in the order the handler sees them.
    pub fn new(deliveries: Vec<Delivery>) -> Self {
        let settles = deliveries.iter().map(|_| None).collect();
        EntryBatch {
            deliveries,
            settles,
            mismatch: None,
        }
    }

    /// The deliveries of the batch.
    pub fn deliveries(&self) -> &[Delivery] {
        &self.deliveries
    }

    /// Decodes every payload with `decode`: the values that decoded, in
    /// order, for the handler; an entry whose payload does not decode is
    /// settled as [`Settle::Undecodable`] (dead-lettered on its own) and
    /// left out.
    pub fn decode<T>(&mut self, decode: impl Fn(&[u8]) -> Result<T, String>) -> Vec<T> {
        let mut values = Vec::with_capacity(self.deliveries.len());
        for (delivery, settle) in self.deliveries.iter().zip(&mut self.settles) {
            match decode(delivery.entry.payload()) {
                Ok(value) => values.push(value),
                Err(error) => *settle = Some(Settle::Undecodable(error)),
            }
        }
        values
    }

    /// Settles the entries the handler was given (those not settled by
    /// [`EntryBatch::decode`]) as it returned. A per-entry list whose
    /// length is not the number of entries given settles every one of them
    /// as [`Settle::Failed`] with an error saying so: the whole batch is
    /// retried.
    pub fn settle(&mut self, returned: BatchSettle) {
        let given = self.settles.iter().filter(|s| s.is_none()).count();
        let open = self.settles.iter_mut().filter(|s| s.is_none());
        match returned {
            BatchSettle::All(settle) => {
                for slot in open {
                    *slot = Some(settle.clone());
                }
            }
            BatchSettle::Each(settles) if settles.len() == given => {
                for (slot, settle) in open.zip(settles) {
                    *slot = Some(settle);
                }
            }
            BatchSettle::Each(settles) => {
                let error = length_mismatch(settles.len(), given);
                self.mismatch = Some((settles.len(), given));
                for slot in open {
                    *slot = Some(Settle::Failed(error.clone()));
                }
            }
        }
    }

    /// How many outcomes a per-entry list had and how many entries the
    /// handler was given, when the two differ.
    pub fn mismatch(&self) -> Option<(usize, usize)> {
        self.mismatch
    }

    /// How each entry is settled, in order; an entry nothing settled (the
    /// handler was never called) as [`Settle::Failed`].
    pub fn into_settles(self) -> Vec<Settle> {
        self.settles
            .into_iter()
            .map(|settle| {
                settle.unwrap_or_else(|| {
                    Settle::Failed("the batch handler settled no outcome for this entry".into())
                })
            })
            .collect()
    }
}

/// The examples of `docs/batches.md`, built and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/batches.md")]
pub struct BatchesDoctests;

/// The error of a per-entry outcome list of the wrong length.
fn length_mismatch(returned: usize, given: usize) -> String {
    format!(
        "the batch handler returned {returned} outcomes for {given} entries: a per-entry result must have one element per entry, in order; the whole batch is retried"
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ruststream_core::{Entry, EntryId, Message};

    use super::*;

    fn batch(payloads: &[&str]) -> EntryBatch {
        let deliveries = payloads
            .iter()
            .enumerate()
            .map(|(i, p)| Delivery {
                entry: Entry {
                    id: EntryId::new(1, i as u64),
                    message: Arc::new(Message::new(p.as_bytes().to_vec())),
                },
                delivery_count: 0,
                idle_ms: 0,
            })
            .collect();
        EntryBatch::new(deliveries)
    }

    fn number(payload: &[u8]) -> Result<u64, String> {
        crate::subscriber::decode::<u64>(payload)
    }

    #[test]
    fn undecodable_entries_are_left_out_and_settled_alone() {
        let mut b = batch(&["1", "x", "3"]);
        assert_eq!(b.decode(number), [1, 3]);
        b.settle(vec![HandlerOutcome::ack(), HandlerOutcome::retry()].into_batch_settle());
        let settles = b.into_settles();
        assert_eq!(settles[0], Settle::Outcome(HandlerOutcome::Ack));
        assert!(matches!(settles[1], Settle::Undecodable(_)));
        assert_eq!(settles[2], Settle::Outcome(HandlerOutcome::Retry));
    }

    #[test]
    fn a_list_of_the_wrong_length_fails_every_entry_given() {
        let mut b = batch(&["1", "2", "x"]);
        b.decode(number);
        b.settle(vec![HandlerOutcome::ack()].into_batch_settle());
        assert_eq!(b.mismatch(), Some((1, 2)));
        let settles = b.into_settles();
        for settle in &settles[..2] {
            let Settle::Failed(error) = settle else {
                panic!("{settle:?}")
            };
            assert!(
                error.contains("returned 1 outcomes for 2 entries"),
                "{error}"
            );
        }
        assert!(matches!(settles[2], Settle::Undecodable(_)));
    }

    #[test]
    fn one_outcome_settles_every_entry_given() {
        let mut b = batch(&["1", "2"]);
        b.decode(number);
        b.settle(Err::<(), _>("down").into_batch_settle());
        assert_eq!(
            b.into_settles(),
            [Settle::Failed("down".into()), Settle::Failed("down".into())]
        );
    }
}

//! Stream entry ids: `ms-seq`, ordered, as in Redis Streams.

use std::fmt;
use std::str::FromStr;

/// The id of a stream entry: a millisecond timestamp and a sequence number
/// within that millisecond, written `ms-seq` (for example `1700000000000-3`).
///
/// Ids are totally ordered (first by `ms`, then by `seq`) and strictly
/// increasing within a stream. `0-0` ([`EntryId::ZERO`]) sorts before every
/// real entry and is the position of a group that starts at the beginning.
///
/// ```
/// use ruststream_core::EntryId;
///
/// let id: EntryId = "1700000000000-3".parse().unwrap();
/// assert_eq!(id, EntryId::new(1_700_000_000_000, 3));
/// assert_eq!(id.to_string(), "1700000000000-3");
/// assert!(id < EntryId::new(1_700_000_000_001, 0));
/// assert!("12-x".parse::<EntryId>().is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct EntryId {
    /// Milliseconds part (a wall-clock time for generated ids).
    pub ms: u64,
    /// Sequence number within the millisecond.
    pub seq: u64,
}

impl EntryId {
    /// `0-0`: before every entry.
    pub const ZERO: EntryId = EntryId { ms: 0, seq: 0 };
    /// The largest id: after every entry.
    pub const MAX: EntryId = EntryId {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    /// An id from its two parts.
    pub const fn new(ms: u64, seq: u64) -> Self {
        EntryId { ms, seq }
    }

    /// The id right after this one (`ms-(seq+1)`, carrying into `ms`).
    /// Saturates at [`EntryId::MAX`].
    pub fn next(self) -> EntryId {
        match self.seq.checked_add(1) {
            Some(seq) => EntryId { ms: self.ms, seq },
            None => match self.ms.checked_add(1) {
                Some(ms) => EntryId { ms, seq: 0 },
                None => EntryId::MAX,
            },
        }
    }

    /// The id that a new entry appended at `now_ms` gets when the stream's
    /// last id is `self`: `now_ms-0` if the clock moved past `self.ms`,
    /// otherwise the next sequence number (so ids stay strictly increasing
    /// even if the clock steps back).
    pub fn successor_at(self, now_ms: u64) -> EntryId {
        if now_ms > self.ms {
            EntryId { ms: now_ms, seq: 0 }
        } else {
            self.next()
        }
    }
}

impl EntryId {
    /// Parses `ms-seq` (or a bare `ms`) from ASCII bytes in one pass, as a
    /// broker reads ids off the wire: `None` for anything [`str::parse`]
    /// would reject. Use `parse` where the reason matters.
    ///
    /// ```
    /// use ruststream_core::EntryId;
    ///
    /// assert_eq!(EntryId::parse_ascii(b"17-3"), Some(EntryId::new(17, 3)));
    /// assert_eq!(EntryId::parse_ascii(b"17"), Some(EntryId::new(17, 0)));
    /// assert_eq!(EntryId::parse_ascii(b"17-"), None);
    /// ```
    #[inline]
    pub fn parse_ascii(text: &[u8]) -> Option<EntryId> {
        let (ms, rest) = leading_number(text)?;
        match rest {
            [] => Some(EntryId { ms, seq: 0 }),
            [b'-', seq @ ..] => match leading_number(seq)? {
                (seq, []) => Some(EntryId { ms, seq }),
                _ => None,
            },
            _ => None,
        }
    }

    /// The id as `ms-seq` text, written without allocating: for sending
    /// many ids to a server.
    ///
    /// ```
    /// use ruststream_core::EntryId;
    ///
    /// let id = EntryId::new(1_700_000_000_000, 3);
    /// assert_eq!(id.to_text().as_str(), "1700000000000-3");
    /// assert_eq!(EntryId::MAX.to_text().as_str(), EntryId::MAX.to_string());
    /// ```
    #[inline]
    pub fn to_text(self) -> IdText {
        let mut text = IdText {
            bytes: [0; ID_TEXT_MAX],
            start: ID_TEXT_MAX,
        };
        text.push_number(self.seq);
        text.start -= 1;
        text.bytes[text.start] = b'-';
        text.push_number(self.ms);
        text
    }
}

/// The digits of a number at the start of `text`, and what follows them;
/// `None` if there are none or they overflow a `u64`.
#[inline]
fn leading_number(text: &[u8]) -> Option<(u64, &[u8])> {
    let digits = text.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let mut n: u64 = 0;
    for &b in &text[..digits] {
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some((n, &text[digits..]))
}

/// The longest id text: two 20-digit numbers and a dash.
const ID_TEXT_MAX: usize = 41;

/// An [`EntryId`] as `ms-seq` text on the stack ([`EntryId::to_text`]).
#[derive(Clone, Copy)]
pub struct IdText {
    bytes: [u8; ID_TEXT_MAX],
    /// The text is `bytes[start..]`: it is written from the end.
    start: usize,
}

impl IdText {
    /// Prepends `n`'s digits.
    #[inline]
    fn push_number(&mut self, mut n: u64) {
        loop {
            self.start -= 1;
            // `n % 10` is below 10, so the cast keeps it whole.
            self.bytes[self.start] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
    }

    /// The text's bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[self.start..]
    }

    /// The text.
    #[inline]
    pub fn as_str(&self) -> &str {
        // Only ASCII digits and a dash are ever written.
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }
}

impl fmt::Display for EntryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

impl fmt::Debug for EntryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a text is not an entry id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid entry id {text:?}: {reason} (expected `ms-seq`, two unsigned integers such as `1700000000000-0`)"
)]
pub struct ParseEntryIdError {
    /// The text that was given.
    pub text: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl FromStr for EntryId {
    type Err = ParseEntryIdError;

    /// Parses `ms-seq`. A bare `ms` (no `-seq`) is accepted as `ms-0`, as
    /// Redis does for range bounds; anything else is rejected.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if let Some(id) = EntryId::parse_ascii(text.as_bytes()) {
            return Ok(id);
        }
        // Not an id: find the reason.
        let err = |reason| ParseEntryIdError {
            text: text.to_owned(),
            reason,
        };
        let (ms, seq) = match text.split_once('-') {
            Some((ms, seq)) => (ms, Some(seq)),
            None => (text, None),
        };
        let number = |part: &str, what| {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err(what));
            }
            part.parse::<u64>()
                .map_err(|_| err("a part is larger than 2^64-1"))
        };
        let ms = number(ms, "the milliseconds part is not an unsigned integer")?;
        let seq = match seq {
            Some(seq) => number(seq, "the sequence part is not an unsigned integer")?,
            None => 0,
        };
        Ok(EntryId { ms, seq })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fast_parser_and_printer_agree_with_the_careful_ones() {
        let texts = [
            "0-0",
            "5-7",
            "42",
            "1700000000000-3",
            "18446744073709551615-18446744073709551615",
            "18446744073709551616-0",
            "1-18446744073709551616",
            "",
            "-",
            "-1",
            "1-",
            "1--2",
            "1-2-3",
            "a-1",
            "1-a",
            " 1-2",
            "1-2 ",
            "+1-2",
            "1-+2",
            "01-002",
        ];
        for text in texts {
            let careful = text.parse::<EntryId>().ok();
            assert_eq!(EntryId::parse_ascii(text.as_bytes()), careful, "{text:?}");
            if let Some(id) = careful {
                assert_eq!(id.to_text().as_str(), id.to_string(), "{text:?}");
            }
        }
        assert_eq!(EntryId::ZERO.to_text().as_str(), "0-0");
    }

    #[test]
    fn parses_and_prints() {
        let id: EntryId = "5-7".parse().unwrap();
        assert_eq!(id, EntryId::new(5, 7));
        assert_eq!(id.to_string(), "5-7");
        assert_eq!("42".parse::<EntryId>().unwrap(), EntryId::new(42, 0));
        assert_eq!(
            "18446744073709551615-18446744073709551615"
                .parse::<EntryId>()
                .unwrap(),
            EntryId::MAX
        );
    }

    #[test]
    fn rejects_malformed_text_with_a_reason() {
        for bad in [
            "", "-", "1-", "-1", "a-1", "1-b", "1-2-3", " 1-2", "+1-2", "1.5-0",
        ] {
            let err = bad.parse::<EntryId>().unwrap_err();
            assert_eq!(err.text, bad);
            assert!(err.to_string().contains("ms-seq"), "{err}");
        }
        let err = "99999999999999999999-0".parse::<EntryId>().unwrap_err();
        assert!(err.reason.contains("2^64"));
    }

    #[test]
    fn orders_by_ms_then_seq() {
        let mut ids = vec![EntryId::new(2, 0), EntryId::new(1, 9), EntryId::new(1, 10)];
        ids.sort();
        assert_eq!(
            ids,
            vec![EntryId::new(1, 9), EntryId::new(1, 10), EntryId::new(2, 0)]
        );
    }

    #[test]
    fn successor_never_goes_backwards() {
        let last = EntryId::new(100, 4);
        assert_eq!(last.successor_at(101), EntryId::new(101, 0));
        assert_eq!(last.successor_at(100), EntryId::new(100, 5));
        assert_eq!(last.successor_at(50), EntryId::new(100, 5));
        assert_eq!(EntryId::new(3, u64::MAX).next(), EntryId::new(4, 0));
        assert_eq!(EntryId::MAX.next(), EntryId::MAX);
    }
}

//! Stream, group and consumer names: the one place their rules live.
//!
//! Every broker checks the names it is given with [`check_name`] before it
//! changes anything, so a bad name is a clear error naming the name and the
//! rule, never a half-applied change or a key that collides with another.
//! A broker whose storage needs more (the Redis key layout, a file log's
//! directory names) adds its own rules with [`NameRules`].

use crate::{BrokerError, BrokerResult};

/// What a name names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NameKind {
    /// A stream.
    Stream,
    /// A consumer group.
    Group,
    /// A consumer within a group.
    Consumer,
}

impl NameKind {
    /// The word for it in messages: `"stream"`, `"group"`, `"consumer"`.
    pub fn as_str(self) -> &'static str {
        match self {
            NameKind::Stream => "stream",
            NameKind::Group => "group",
            NameKind::Consumer => "consumer",
        }
    }
}

impl std::fmt::Display for NameKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The longest name any broker accepts, in bytes.
pub const MAX_NAME_LEN: usize = 200;

/// Rules a name must meet.
///
/// [`NameRules::COMMON`] are the rules every broker applies. Stream and
/// group names may not contain braces on any broker: Redis uses them for
/// the hash tag that keeps a stream's keys in one cluster slot, and one
/// rule everywhere keeps an app portable between brokers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NameRules {
    /// Longest name in bytes.
    pub max_len: usize,
    /// Characters a name of this kind may not contain, besides control
    /// characters (never allowed).
    pub forbidden: &'static [char],
}

impl NameRules {
    /// What every broker requires: 1 to [`MAX_NAME_LEN`] bytes, no control
    /// characters, and no `{` or `}` in stream and group names.
    pub const COMMON: NameRules = NameRules {
        max_len: MAX_NAME_LEN,
        forbidden: &['{', '}'],
    };

    /// The rules for `kind`: consumer names may contain braces (they never
    /// become part of a key).
    pub fn common(kind: NameKind) -> NameRules {
        match kind {
            NameKind::Consumer => NameRules {
                forbidden: &[],
                ..NameRules::COMMON
            },
            NameKind::Stream | NameKind::Group => NameRules::COMMON,
        }
    }

    /// Checks `name` against these rules. The error is
    /// [`BrokerError::InvalidArgument`] naming the kind, the name and the
    /// rule it breaks.
    pub fn check(&self, kind: NameKind, name: &str) -> BrokerResult<()> {
        // Names are checked on every publish: a printable ASCII name (the
        // usual kind) passes in one walk of its bytes; anything else, and
        // every failure, goes through the checks below, which say why.
        if self.allows_printable_ascii(name) {
            return Ok(());
        }
        self.check_each_rule(kind, name)
    }

    /// [`NameRules::check`] rule by rule, naming the first one `name`
    /// breaks.
    fn check_each_rule(&self, kind: NameKind, name: &str) -> BrokerResult<()> {
        let bad = |rule: String| {
            Err(BrokerError::InvalidArgument(format!(
                "{kind} name {name:?} is not allowed: {rule}"
            )))
        };
        if name.is_empty() {
            return Err(BrokerError::InvalidArgument(format!(
                "{kind} name is empty: a {kind} needs a name"
            )));
        }
        if name.len() > self.max_len {
            let shown: String = name.chars().take(40).collect();
            return Err(BrokerError::InvalidArgument(format!(
                "{kind} name {shown:?}... is {} bytes long; the limit is {}",
                name.len(),
                self.max_len
            )));
        }
        if let Some(c) = name.chars().find(|c| c.is_control()) {
            return bad(format!("it contains the control character {c:?}"));
        }
        if let Some(c) = name.chars().find(|c| self.forbidden.contains(c)) {
            return bad(format!(
                "it contains {c:?}; {kind} names may not contain any of {:?}",
                self.forbidden
            ));
        }
        Ok(())
    }

    /// Whether `name` is within these rules and made of printable ASCII
    /// alone (no control character, no byte over 0x7E): `false` says
    /// nothing either way. A non-ASCII forbidden character cannot be in
    /// such a name.
    fn allows_printable_ascii(&self, name: &str) -> bool {
        let bytes = name.as_bytes();
        if bytes.is_empty() || bytes.len() > self.max_len {
            return false;
        }
        // Bit `b` is set when byte `b` may appear: 0x20 to 0x7E, less the
        // forbidden characters that are ASCII.
        let mut allowed: u128 = ((1 << 0x7F) - 1) & !((1 << 0x20) - 1);
        for &c in self.forbidden.iter().filter(|c| c.is_ascii()) {
            allowed &= !(1 << u32::from(c));
        }
        bytes.iter().all(|&b| b < 0x80 && (allowed >> b) & 1 == 1)
    }
}

/// Checks `name` against the rules every broker applies
/// ([`NameRules::common`]).
///
/// ```
/// use ruststream_core::{check_name, NameKind};
///
/// assert!(check_name(NameKind::Stream, "payments").is_ok());
/// let err = check_name(NameKind::Stream, "a}:due:b").unwrap_err();
/// assert!(err.to_string().contains("stream name \"a}:due:b\""));
/// assert!(check_name(NameKind::Group, "").is_err());
/// ```
pub fn check_name(kind: NameKind, name: &str) -> BrokerResult<()> {
    NameRules::common(kind).check(kind, name)
}

/// Checks a stream and group name pair, the stream first.
pub fn check_stream_group(stream: &str, group: &str) -> BrokerResult<()> {
    check_name(NameKind::Stream, stream)?;
    check_name(NameKind::Group, group)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_rules() {
        assert!(check_name(NameKind::Stream, "payments.screened").is_ok());
        assert!(check_name(NameKind::Group, "ledger:v2").is_ok());
        assert!(check_name(NameKind::Consumer, "host-{1}").is_ok());
        for bad in ["", "a\nb", "a{b", "x}"] {
            assert!(check_name(NameKind::Stream, bad).is_err(), "{bad:?}");
            assert!(check_name(NameKind::Group, bad).is_err(), "{bad:?}");
        }
        let long = "s".repeat(MAX_NAME_LEN + 1);
        let err = check_name(NameKind::Stream, &long).unwrap_err().to_string();
        assert!(err.contains("201 bytes long; the limit is 200"), "{err}");
        assert!(check_name(NameKind::Stream, &long[1..]).is_ok());
        let err = check_name(NameKind::Consumer, "c\u{7}")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("consumer name") && err.contains("control"),
            "{err}"
        );
    }

    #[test]
    fn the_printable_ascii_shortcut_agrees_with_each_rule() {
        let long = "s".repeat(MAX_NAME_LEN + 1);
        let names = [
            "orders",
            "payments.screened",
            "a b~!",
            "",
            "a{b",
            "x}",
            "a\x7Fb",
            "a\tb",
            "\u{85}c1",
            "ünï",
            "日本",
            &long,
            &long[1..],
        ];
        let custom = NameRules {
            max_len: 8,
            forbidden: &[':', 'é'],
        };
        for rules in [
            NameRules::COMMON,
            NameRules::common(NameKind::Consumer),
            custom,
        ] {
            for name in names.iter().chain(&["a:b", "abcdefgh", "abcdefghi", "é"]) {
                let each = rules.check_each_rule(NameKind::Stream, name);
                if rules.allows_printable_ascii(name) {
                    assert!(each.is_ok(), "{name:?} under {rules:?}: {each:?}");
                }
                assert_eq!(
                    rules.check(NameKind::Stream, name).is_ok(),
                    each.is_ok(),
                    "{name:?} under {rules:?}"
                );
            }
        }
    }
}

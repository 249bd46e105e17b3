//! Message headers: an ordered list of string pairs.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// Headers of a message: string keys and values, in the order they were
/// set, round-tripped exactly by every broker.
///
/// Names and values are UTF-8 text (`String`), so bytes that are not UTF-8
/// cannot be held here. Only an entry written by another client can have
/// them (a Redis field set with `XADD`): when the Redis broker reads such
/// an entry, each invalid byte sequence in a header's name or value becomes
/// U+FFFD `�`, as [`String::from_utf8_lossy`] does, without an error or a
/// log line, and the original bytes are not available to the handler. The
/// entry on the server keeps its bytes. Carry binary data in the payload,
/// which is kept byte for byte, or encode it (hex, base64) in a header.
///
/// Headers are usually few and short, so they are kept in a vector and
/// looked up by a linear scan, which is faster than hashing for a handful.
/// An entry written by another client can have thousands of fields, so
/// past a few dozen headers a hash index keeps building and reading them
/// linear in their number (a quadratic scan took seconds for 20,000).
///
/// ```
/// use ruststream_core::Headers;
///
/// let mut headers = Headers::new();
/// headers.insert("tenant", "acme");
/// headers.insert("tenant", "globex"); // replaces
/// assert_eq!(headers.get_str("tenant"), Some("globex"));
/// assert_eq!(headers.get_str("missing"), None);
/// assert_eq!(headers.len(), 1);
/// ```
#[derive(Clone, Debug, Default)]
pub struct Headers {
    pairs: Vec<(String, String)>,
    /// Each key's position in `pairs`, once there are more than
    /// `INDEX_FROM` of them.
    index: Option<HashMap<String, usize>>,
}

/// Past this many headers, lookups go through a hash index.
const INDEX_FROM: usize = 32;

impl PartialEq for Headers {
    fn eq(&self, other: &Self) -> bool {
        self.pairs == other.pairs
    }
}

impl Eq for Headers {}

impl Hash for Headers {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.pairs.hash(state);
    }
}

impl Headers {
    /// No headers.
    pub const fn new() -> Self {
        Headers {
            pairs: Vec::new(),
            index: None,
        }
    }

    /// The value of `key`, if set.
    ///
    /// A value (or name) that was not UTF-8 where the broker read it has
    /// had its invalid bytes replaced by U+FFFD `�` (see [`Headers`]): a
    /// value containing `'\u{FFFD}'` may not be what the writer sent.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.position(key).map(|at| self.pairs[at].1.as_str())
    }

    fn position(&self, key: &str) -> Option<usize> {
        match &self.index {
            Some(index) => index.get(key).copied(),
            None => self.pairs.iter().position(|(k, _)| k == key),
        }
    }

    /// Sets `key` to `value`, replacing an earlier value of the same key
    /// (which keeps its position).
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let key = key.into();
        let value = value.into();
        if let Some(at) = self.position(&key) {
            self.pairs[at].1 = value;
            return;
        }
        if let Some(index) = &mut self.index {
            index.insert(key.clone(), self.pairs.len());
        }
        self.pairs.push((key, value));
        if self.index.is_none() && self.pairs.len() > INDEX_FROM {
            self.reindex();
        }
    }

    /// Builds the index from `pairs` (or drops it for a few headers).
    fn reindex(&mut self) {
        self.index = (self.pairs.len() > INDEX_FROM).then(|| {
            self.pairs
                .iter()
                .enumerate()
                .map(|(at, (k, _))| (k.clone(), at))
                .collect()
        });
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let at = self.position(key)?;
        let (_, value) = self.pairs.remove(at);
        if self.index.is_some() {
            // Positions after `at` moved: rare enough to rebuild.
            self.reindex();
        }
        Some(value)
    }

    /// Whether `key` is set.
    pub fn contains(&self, key: &str) -> bool {
        self.get_str(key).is_some()
    }

    /// Number of headers.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Whether there are no headers.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// The headers in the order they were first set.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + '_ {
        self.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Headers {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut headers = Headers::new();
        for (k, v) in iter {
            headers.insert(k, v);
        }
        headers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_headers_stay_in_order_and_unique_through_the_index() {
        let mut h = Headers::new();
        for i in 0..20_000 {
            h.insert(format!("k{i}"), "a");
        }
        h.insert("k7", "b");
        h.insert("k19999", "c");
        assert_eq!(h.len(), 20_000);
        assert_eq!(h.get_str("k7"), Some("b"));
        assert_eq!(h.get_str("k19999"), Some("c"));
        assert_eq!(h.remove("k0"), Some("a".to_owned()));
        assert_eq!(h.get_str("k1"), Some("a"));
        assert_eq!(h.get_str("k0"), None);
        assert_eq!(h.iter().next(), Some(("k1", "a")));
        let small: Headers = [("a", "1"), ("b", "2")].into_iter().collect();
        let mut again = Headers::new();
        again.insert("a", "1");
        again.insert("b", "2");
        assert_eq!(small, again);
    }

    #[test]
    fn keeps_order_and_replaces_in_place() {
        let mut h: Headers = [("a", "1"), ("b", "2")].into_iter().collect();
        h.insert("a", "3");
        assert_eq!(h.iter().collect::<Vec<_>>(), vec![("a", "3"), ("b", "2")]);
        assert_eq!(h.remove("a").as_deref(), Some("3"));
        assert!(!h.contains("a"));
        assert_eq!(h.len(), 1);
    }
}

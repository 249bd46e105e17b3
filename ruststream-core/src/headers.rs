//! Message headers: an ordered list of string pairs.

/// Headers of a message: string keys and values, in the order they were
/// set, round-tripped exactly by every broker.
///
/// Headers are few and short, so they are kept in a vector and looked up by
/// a linear scan, which is faster than hashing for a handful of entries.
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
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Headers {
    pairs: Vec<(String, String)>,
}

impl Headers {
    /// No headers.
    pub const fn new() -> Self {
        Headers { pairs: Vec::new() }
    }

    /// The value of `key`, if set.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Sets `key` to `value`, replacing an earlier value of the same key
    /// (which keeps its position).
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let key = key.into();
        let value = value.into();
        match self.pairs.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => *v = value,
            None => self.pairs.push((key, value)),
        }
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let at = self.pairs.iter().position(|(k, _)| k == key)?;
        Some(self.pairs.remove(at).1)
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
    fn keeps_order_and_replaces_in_place() {
        let mut h: Headers = [("a", "1"), ("b", "2")].into_iter().collect();
        h.insert("a", "3");
        assert_eq!(h.iter().collect::<Vec<_>>(), vec![("a", "3"), ("b", "2")]);
        assert_eq!(h.remove("a").as_deref(), Some("3"));
        assert!(!h.contains("a"));
        assert_eq!(h.len(), 1);
    }
}

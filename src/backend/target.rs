//! [`Target`]: one lock as every request names it, whichever backend serves it.

use std::time::Duration;

use crate::protocol::millis;

/// One lock's keys and channel, and the settings every request on it carries.
pub(crate) struct Target {
    /// The keys every request touches, the lock's state hash first (see
    /// `lua/holds.lua` and `lua/legacy_layout.lua`); all in one slot.
    keys: Vec<String>,
    /// Where releases are announced, in the keys' slot.
    pub(crate) channel: String,
    /// Leases of original-design clients (read, write), in ms.
    pub(crate) original_ms: (u64, u64),
}

impl Target {
    /// The hash layout: the hash `"{prefix}:{name}"`.
    pub(crate) fn hash(prefix: &str, name: &str, original: (Duration, Duration)) -> Self {
        Self::new(vec![format!("{prefix}:{{{name}}}")], original)
    }

    /// The legacy layout: the two keys, and our state in a hash tagged like the read
    /// key (a key without a tag hashes like `{key}`), so all share one slot.
    pub(crate) fn legacy(read_key: &str, write_key: &str, original: (Duration, Duration)) -> Self {
        let tag = String::from_utf8_lossy(hash_tag(read_key.as_bytes())).into_owned();
        let state = format!("{{{tag}}}:rwlock:legacy");
        Self::new(
            vec![state, read_key.to_owned(), write_key.to_owned()],
            original,
        )
    }

    fn new(keys: Vec<String>, original: (Duration, Duration)) -> Self {
        Target {
            channel: format!("{}:released", keys[0]),
            keys,
            original_ms: (millis(original.0), millis(original.1)),
        }
    }

    /// Whether this is the legacy two-key layout (its two keys follow our hash).
    pub(crate) fn is_legacy(&self) -> bool {
        self.keys.len() > 1
    }

    /// Every key the lock itself uses, its state hash first.
    pub(crate) fn keys(&self) -> &[String] {
        &self.keys
    }

    /// The lock's state hash.
    pub(crate) fn key(&self) -> &str {
        &self.keys[0]
    }
}

/// The part of `key` that decides its slot: the part between the first `{` and
/// the next `}` when that part is non-empty, else the whole key.
pub(crate) fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        let rest = &key[open + 1..];
        if let Some(close) = rest.iter().position(|&b| b == b'}')
            && close > 0
        {
            return &rest[..close];
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_tag_is_the_first_non_empty_braced_part() {
        assert_eq!(hash_tag(b"{user1000}.following"), b"user1000");
        assert_eq!(hash_tag(b"rwlock:{inventory}:released"), b"inventory");
        assert_eq!(hash_tag(b"a{b}c{d}"), b"b");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        // An empty first tag, or none: the whole key decides.
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"open{only"), b"open{only");
        assert_eq!(hash_tag(b"plain"), b"plain");
    }
}

//! [`Target`]: one lock as every request names it, whichever backend serves it.

use std::time::Duration;

use crate::lock::options::{check_key_prefix, check_lock_name};
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
    /// The hash layout: the hash [`lock_key`] names.
    pub(crate) fn hash(prefix: &str, name: &str, original: (Duration, Duration)) -> Self {
        Self::new(vec![lock_key(prefix, name)], original)
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

/// The key of the lock `name` under `prefix` (both checked): `"{prefix}:{name}"`,
/// the name as the key's hash tag; or, for a name that starts with a hash tag of its
/// own (`{tag}rest`), the prefix, a colon and the name as it is, so the locks and
/// keys that share the tag share a slot.
pub(crate) fn lock_key(prefix: &str, name: &str) -> String {
    if name.starts_with('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// The prefix and lock name whose [`lock_key`] is `key`, if a valid prefix and
/// name make it. The prefix holds no brace and the name starts with one (its own
/// tag, or the one the key adds), so the key's first `{` starts the name's part
/// and the colon before it ends the prefix.
pub(crate) fn split_lock_key(key: &str) -> Option<(&str, &str)> {
    let open = key.find('{')?;
    let prefix = key[..open].strip_suffix(':')?;
    let part = &key[open..];
    // `{name}` is a plain name's part; a tagged name never ends with `}`.
    let name = part
        .strip_prefix('{')
        .and_then(|inner| inner.strip_suffix('}'))
        .filter(|inner| !inner.contains(['{', '}']))
        .unwrap_or(part);
    check_key_prefix(prefix).ok()?;
    check_lock_name(name).ok()?;
    (lock_key(prefix, name) == key).then_some((prefix, name))
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

    const NONE: (Duration, Duration) = (Duration::ZERO, Duration::ZERO);

    #[test]
    fn a_plain_name_is_the_key_s_hash_tag_and_a_tagged_name_brings_its_own() {
        let plain = Target::hash("rwlock", "inventory", NONE);
        assert_eq!(plain.key(), "rwlock:{inventory}");
        assert_eq!(plain.channel, "rwlock:{inventory}:released");
        let tagged = Target::hash("rwlock", "{order:42}:lines", NONE);
        assert_eq!(tagged.key(), "rwlock:{order:42}:lines");
        assert_eq!(tagged.channel, "rwlock:{order:42}:lines:released");
        // The tag decides the slot: the lock's key, its channel and the user's
        // keys tagged alike all hash by `order:42`.
        for key in [tagged.key(), &tagged.channel, "cache:{order:42}"] {
            assert_eq!(hash_tag(key.as_bytes()), b"order:42", "{key}");
        }
        assert_eq!(lock_key("a:b", "{t}x"), "a:b:{t}x");
        assert_eq!(lock_key("a:b", "t"), "a:b:{t}");
    }

    #[test]
    fn a_key_gives_back_exactly_the_prefix_and_name_that_made_it() {
        for (prefix, name) in [
            ("rwlock", "inventory"),
            ("rwlock", "a b/ü:c"),
            ("rwlock", "{order:42}:lines"),
            ("rwlock", "{a}b"),
            ("locks:v2", "{t}:x"),
            ("locks:v2", "x:y"),
            ("p", "{t}x:released"),
        ] {
            assert!(check_key_prefix(prefix).is_ok() && check_lock_name(name).is_ok());
            let key = lock_key(prefix, name);
            assert_eq!(split_lock_key(&key), Some((prefix, name)), "{key}");
        }
    }

    #[test]
    fn keys_no_valid_prefix_and_name_make_are_no_lock_keys() {
        for key in [
            "rwlock:{}",
            "rwlock:{a}x}",
            "rwlock:{a}{b}",
            "rwlock:{a",
            "rwlock:{}x",
            "rwlock:inventory",
            "rwlock{a}b",
            ":{a}",
            "{res}:rwlock:legacy",
            "rw}lock:{a}",
            "rwlock:{{a}}",
        ] {
            assert_eq!(split_lock_key(key), None, "{key}");
        }
        // A plain name's key is never read as the tag alone (a name refused).
        assert_eq!(split_lock_key("rwlock:{a}"), Some(("rwlock", "a")));
        // The prefix ends at the colon before the first brace, colons and all.
        assert_eq!(split_lock_key("a:b:{c}d"), Some(("a:b", "{c}d")));
    }

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

//! [`Target`]: one lock as every request names it, whichever backend serves it.

use std::time::Duration;

use crate::Error;
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

/// The longest lock name or key prefix, in bytes of UTF-8. A name travels in every
/// request for its lock (key, channel, wake-up messages), so a long one costs each
/// of them; this bound is far above any name a person would choose.
pub(crate) const MAX_NAME_LEN: usize = 1024;

/// A lock name is non-empty, at most [`MAX_NAME_LEN`] bytes, and either free of
/// `{`/`}` (the lock makes the whole name its key's hash tag) or a hash tag of its
/// own followed by the rest of the name, `{tag}rest`, with a non-empty tag and rest
/// and no other brace (the key is then the name as it is, after the prefix; see
/// `lock_key` in `backend/target.rs`). Every name gives another key.
pub(crate) fn check_lock_name(name: &str) -> Result<(), Error> {
    check_length("lock name", name)?;
    let Some(tagged) = name.strip_prefix('{') else {
        if name.contains(['{', '}']) {
            return Err(invalid(format!(
                "lock name {name:?} has a brace that does not open a hash tag at its start; \
                 drop the braces, or start the name with its tag, as in \"{{order:42}}:lines\""
            )));
        }
        return Ok(());
    };
    let Some((tag, rest)) = tagged.split_once('}') else {
        return Err(invalid(format!(
            "lock name {name:?} opens a hash tag that is never closed; \
             close it after the tag, as in \"{{order:42}}:lines\", or drop the brace"
        )));
    };
    if tag.is_empty() {
        return Err(invalid(format!(
            "lock name {name:?} starts with an empty hash tag; \
             put the tag between the braces, as in \"{{order:42}}:lines\""
        )));
    }
    if tag.contains('{') || rest.contains(['{', '}']) {
        return Err(invalid(format!(
            "lock name {name:?} has a brace besides its leading hash tag; \
             only the tag at the start may use braces, as in \"{{order:42}}:lines\""
        )));
    }
    if rest.is_empty() {
        return Err(invalid(format!(
            "lock name {name:?} is a hash tag with nothing after it, which would give the \
             key of the name {tag:?}; add the rest of the name after the tag, as in \
             \"{{{tag}}}:lines\", or drop the braces"
        )));
    }
    Ok(())
}

/// A key prefix is non-empty, at most [`MAX_NAME_LEN`] bytes and free of `{`/`}`,
/// so the first brace of a lock's key opens the hash tag that the name brings.
pub(crate) fn check_key_prefix(prefix: &str) -> Result<(), Error> {
    check_length("key_prefix", prefix)?;
    if prefix.contains(['{', '}']) {
        return Err(invalid(format!(
            "key_prefix {prefix:?} contains a brace; the lock adds its own hash tag"
        )));
    }
    Ok(())
}

/// Names and prefixes are not empty and at most [`MAX_NAME_LEN`] bytes long.
fn check_length(what: &str, name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(invalid(format!("{what} is empty")));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(invalid(format!(
            "{what} is {} bytes long, longer than {MAX_NAME_LEN}",
            name.len()
        )));
    }
    Ok(())
}

fn invalid(message: String) -> Error {
    Error::InvalidOptions(message)
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

    #[test]
    fn names_need_content_and_a_bounded_length() {
        assert!(check_lock_name("inventory 2 ✓").is_ok());
        assert!(check_lock_name("").is_err());
        assert!(check_lock_name(&"n".repeat(MAX_NAME_LEN)).is_ok());
        // Counted in bytes: 512 two-byte characters fit, one more does not.
        assert!(check_lock_name(&"é".repeat(MAX_NAME_LEN / 2)).is_ok());
        let err = check_lock_name(&"é".repeat(MAX_NAME_LEN / 2 + 1)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid options: lock name is 1026 bytes long, longer than 1024"
        );
        // A tagged name counts its braces too.
        let tagged = format!("{{t}}{}", "r".repeat(MAX_NAME_LEN - 3));
        assert!(check_lock_name(&tagged).is_ok());
        assert!(check_lock_name(&format!("{tagged}r")).is_err());
    }

    #[test]
    fn a_name_may_start_with_a_hash_tag_of_its_own() {
        for name in [
            "{order:42}:lines",
            "{a}b",
            "{ü ✓}/x",
            "{ }:",
            "{tag}rest with spaces",
        ] {
            assert!(check_lock_name(name).is_ok(), "{name:?} refused");
        }
    }

    #[test]
    fn braces_anywhere_but_a_leading_tag_are_refused_with_what_to_do() {
        let refused = |name: &str| match check_lock_name(name) {
            Err(Error::InvalidOptions(message)) => message,
            other => panic!("{name:?}: {other:?}"),
        };
        let alone = refused("{a}");
        assert!(
            alone.contains("nothing after it") && alone.contains(r#"the name "a""#),
            "{alone}"
        );
        assert!(refused("{}x").contains("empty hash tag"));
        assert!(refused("{}").contains("empty hash tag"));
        assert!(refused("{ab").contains("never closed"));
        assert!(refused("{a{b").contains("never closed"));
        for elsewhere in ["a{b}", "x}", "a}b", "a{b"] {
            assert!(
                refused(elsewhere).contains("does not open a hash tag at its start"),
                "{elsewhere:?}"
            );
        }
        for besides in ["{a}b}", "{a}{b}", "{a{b}c", "{a}}"] {
            assert!(
                refused(besides).contains("besides its leading hash tag"),
                "{besides:?}"
            );
        }
        // Every message is lowercase at its start and says what to do instead.
        for name in ["{a}", "{}x", "{ab", "a{b}", "{a}{b}"] {
            let message = refused(name);
            assert!(message.starts_with("lock name "), "{message}");
            assert!(message.contains("as in \"{"), "no example in: {message}");
        }
    }

    #[test]
    fn a_key_prefix_is_refused_with_any_brace() {
        assert!(check_key_prefix("locks:v2").is_ok());
        assert!(check_key_prefix("").is_err());
        assert!(check_key_prefix(&"p".repeat(MAX_NAME_LEN + 1)).is_err());
        for prefix in ["{a}", "{a}b", "a{", "}"] {
            let err = check_key_prefix(prefix).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "invalid options: key_prefix {prefix:?} contains a brace; \
                     the lock adds its own hash tag"
                )
            );
        }
    }
}

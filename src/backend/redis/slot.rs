//! Redis Cluster key slots, to check that keys a script touches together share a
//! slot before anything is sent. The driver computes slots; the hash tag itself,
//! which the driver keeps private, is worked out here.

use redis::cluster_routing::Slot;

/// The cluster slot of `key`, as `CLUSTER KEYSLOT` computes it.
pub(crate) fn key_slot(key: &[u8]) -> Slot {
    Slot::for_key(key)
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

    #[test]
    fn a_key_with_a_tag_lands_in_its_tags_slot() {
        for key in [
            &b"{user1000}.following"[..],
            b"rwlock:{inventory}",
            b"a{b}c{d}",
            b"foo{{bar}}zap",
        ] {
            assert_ne!(hash_tag(key), key);
            assert_eq!(key_slot(key), key_slot(hash_tag(key)), "{key:?}");
        }
        // Values from `CLUSTER KEYSLOT` on Redis 7.0.
        assert_eq!(Some(key_slot(b"foo")), Slot::new(12182));
        assert_eq!(Some(key_slot(b"{foo}bar")), Slot::new(12182));
    }
}

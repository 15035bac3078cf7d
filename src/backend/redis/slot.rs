//! Redis Cluster key slots, to check that keys a script touches together share a
//! slot before anything is sent. The driver computes slots; the hash tag itself,
//! which the driver keeps private, is the contract's (`backend/target.rs`): keys
//! carry it whichever backend keeps them.

use redis::cluster_routing::Slot;

/// The cluster slot of `key`, as `CLUSTER KEYSLOT` computes it.
pub(crate) fn key_slot(key: &[u8]) -> Slot {
    Slot::for_key(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::hash_tag;

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

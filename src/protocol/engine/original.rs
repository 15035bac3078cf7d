//! The original design's scripts, as its clients run them beside ours.

use super::*;

/// An original-design client's acquire (cluster version), with the caller's clock:
/// a reader needs `write` absent or stale by the write timeout, a writer also `read`
/// absent or stale by the read timeout; then it stamps its field and resets the
/// whole key's TTL to `key_ttl`. True when acquired (the stamp is its proof).
pub fn original_acquire(h: &mut Hash, p: &Params, now: Time, write: bool, key_ttl: Time) -> bool {
    h.expire_if_due(now);
    let stale = |field, timeout| h.int(field).is_none_or(|stamp| now - stamp > timeout);
    let free =
        stale(Field::Write, p.original_write) && (!write || stale(Field::Read, p.original_read));
    if free {
        let field = if write { Field::Write } else { Field::Read };
        h.hset(field, Val::Int(now));
        h.pexpire(now, key_ttl);
    }
    free
}

/// An original-design client's release: deletes its field if it still holds its stamp.
pub fn original_release(h: &mut Hash, now: Time, write: bool, stamp: Time) -> bool {
    h.expire_if_due(now);
    let field = if write { Field::Write } else { Field::Read };
    let mine = h.int(field) == Some(stamp);
    if mine {
        h.hdel(&[field]);
    }
    mine
}

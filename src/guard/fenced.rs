//! [`FencedWrites`]: writes to keys beside the lock that only a current writer can
//! make.

use std::time::Duration;

use crate::Error;
use crate::backend::hash_tag;
use crate::protocol::{Write, millis};

/// A batch of writes to your own keys that share the lock's hash tag (for the lock
/// `inventory`: `cache:{inventory}`, `{inventory}:etag`, ...), applied by
/// [`RwLockWriteGuard::fenced_write`](crate::RwLockWriteGuard::fenced_write) in one
/// atomic step together with the check that the guard still holds the lock.
///
/// This is what a cache refresher uses so that a writer paused past its lease (GC,
/// swap, SIGSTOP) cannot overwrite the value a newer holder wrote: the check and the
/// writes run as one script on the lock's node.
///
/// # Examples
///
/// ```no_run
/// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
/// use std::time::Duration;
/// use redis_rwlock::FencedWrites;
///
/// let writer = lock.write().await?; // lock "inventory"
/// let fresh = b"rebuilt value".to_vec();
/// writer
///     .fenced_write(
///         FencedWrites::new()
///             .set_with_expiry("cache:{inventory}", fresh, Duration::from_secs(300))
///             .delete("cache:{inventory}:stale"),
///     )
///     .await?;
/// writer.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FencedWrites {
    pub(crate) writes: Vec<Write>,
}

impl FencedWrites {
    /// An empty batch: applying it only checks that the guard still holds.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_rwlock::FencedWrites;
    ///
    /// let batch = FencedWrites::new();
    /// # let _ = (batch, Duration::ZERO);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// `SET key value`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_rwlock::FencedWrites;
    ///
    /// let batch = FencedWrites::new().set("cache:{inventory}", "value");
    /// # let _ = (batch, Duration::ZERO);
    /// ```
    pub fn set(self, key: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.push(key.into(), "set", value.into(), None)
    }

    /// `SET key value PX expiry` (an expiry under a millisecond is rejected when the
    /// batch is applied).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_rwlock::FencedWrites;
    ///
    /// let batch = FencedWrites::new().set_with_expiry("cache:{inventory}", b"bytes".to_vec(), Duration::from_secs(60));
    /// # let _ = (batch, Duration::ZERO);
    /// ```
    pub fn set_with_expiry(
        self,
        key: impl Into<String>,
        value: impl Into<Vec<u8>>,
        expiry: Duration,
    ) -> Self {
        self.push(key.into(), "set", value.into(), Some(expiry))
    }

    /// `DEL key`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_rwlock::FencedWrites;
    ///
    /// let batch = FencedWrites::new().delete("cache:{inventory}:old");
    /// # let _ = (batch, Duration::ZERO);
    /// ```
    pub fn delete(self, key: impl Into<String>) -> Self {
        self.push(key.into(), "del", Vec::new(), None)
    }

    fn push(
        mut self,
        key: String,
        op: &'static str,
        value: Vec<u8>,
        expiry: Option<Duration>,
    ) -> Self {
        self.writes.push(Write {
            key,
            op,
            value,
            expiry,
        });
        self
    }

    /// Every key must carry the hash tag of the lock's keys (`lock_keys`, its state
    /// first) and must not be one of them.
    pub(crate) fn check(&self, lock_keys: &[String]) -> Result<(), Error> {
        let lock_key = lock_keys.first().map_or("", String::as_str);
        let tag = hash_tag(lock_key.as_bytes());
        for write in &self.writes {
            if lock_keys.contains(&write.key) {
                return Err(Error::InvalidOptions(format!(
                    "a fenced write may not touch the lock's own key {:?}",
                    write.key
                )));
            }
            if hash_tag(write.key.as_bytes()) != tag {
                return Err(Error::CrossSlot {
                    key: write.key.clone(),
                    other: lock_key.to_owned(),
                });
            }
            if write.expiry.is_some_and(|expiry| millis(expiry) == 0) {
                return Err(Error::InvalidOptions(format!(
                    "the expiry of {:?} is less than one millisecond",
                    write.key
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock() -> Vec<String> {
        vec!["rwlock:{inventory}".to_owned()]
    }

    #[test]
    fn keys_must_share_the_lock_hash_tag() {
        let ok = FencedWrites::new()
            .set("cache:{inventory}", "v")
            .delete("{inventory}:old")
            .set_with_expiry("x:{inventory}:y", "v", Duration::from_secs(1));
        assert!(ok.check(&lock()).is_ok());
        for bad in [
            "cache:inventory",
            "cache:{other}",
            "{inventory",
            "cache:{}{inventory}",
        ] {
            let batch = FencedWrites::new().set(bad, "v");
            assert!(
                matches!(batch.check(&lock()), Err(Error::CrossSlot { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_lock_key_and_zero_expiries_are_refused() {
        let own = FencedWrites::new().set("rwlock:{inventory}", "v");
        assert!(matches!(own.check(&lock()), Err(Error::InvalidOptions(_))));
        let zero = FencedWrites::new().set_with_expiry("c:{inventory}", "v", Duration::ZERO);
        assert!(matches!(zero.check(&lock()), Err(Error::InvalidOptions(_))));
    }
}

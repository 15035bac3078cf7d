//! The crate's one error type.

use redis::RedisError;

/// Everything a lock operation can fail with.
///
/// Messages are lowercase and never repeat their source; the underlying
/// [`RedisError`](https://docs.rs/redis/1/redis/struct.RedisError.html) is reachable through [`std::error::Error::source`].
///
/// # Examples
///
/// ```no_run
/// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
/// use redis_rwlock::Error;
///
/// match lock.try_write().await {
///     Ok(guard) => guard.release().await?,
///     Err(Error::WouldBlock) => println!("busy, try later"),
///     Err(Error::Redis(err)) if err.is_timeout() => println!("redis is slow: {err}"),
///     Err(err) => return Err(err),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `try_read`/`try_write` found that the call would have to wait: the lock is
    /// held in a conflicting mode, or (writer preference) a writer is queued ahead.
    #[error("operation would block")]
    WouldBlock,

    /// The lock could not be taken within [`LockOptions::wait_timeout`](crate::LockOptions::wait_timeout).
    #[error("timed out waiting for the lock")]
    Timeout,

    /// The guard already knew its lease was gone before the call: a renewal found it
    /// missing, or its local deadline passed without a successful renewal.
    #[error("the lock's lease was lost")]
    LeaseLost,

    /// A lock name (empty, with a brace, over 1,024 bytes), an option or a URL (not a
    /// Redis URL) is unusable; nothing was sent to Redis. Also returned at connect
    /// when the server cannot serve the lock: the wrong kind (a cluster
    /// node given to [`LockClient::standalone`](crate::LockClient::standalone), or the
    /// reverse) or older than Redis 7.0, e.g. `invalid options: the cluster at
    /// 10.0.0.5:6379 runs redis 6.2.14, too old: sharded pub/sub (SPUBLISH/SSUBSCRIBE)
    /// needs redis 7.0 or newer`.
    #[error("invalid options: {0}")]
    InvalidOptions(String),

    /// The lock's key holds another Redis type; it was not modified.
    #[error("key {key:?} holds a value of another type than the lock uses")]
    WrongType {
        /// The offending key.
        key: String,
    },

    /// Keys that one script must touch together are not in one cluster slot: the two
    /// keys of a legacy lock, or a fenced write's key without the lock's hash tag.
    /// Nothing was written.
    #[error("keys {key:?} and {other:?} must share a hash tag (one cluster slot)")]
    CrossSlot {
        /// The key that does not fit.
        key: String,
        /// The key it must share a slot with.
        other: String,
    },

    /// Fewer replicas than
    /// [`LockOptions::min_replicas`](crate::LockOptions::min_replicas) acknowledged
    /// within the replica timeout. From an acquire: the hold was granted and released
    /// again. From a fenced write: the writes were applied on the master (the hold
    /// stays), and a failover now could lose them.
    #[error("only {acknowledged} of {required} replicas acknowledged in time")]
    NotReplicated {
        /// Replicas that acknowledged.
        acknowledged: u32,
        /// Replicas required.
        required: u32,
    },

    /// The client was shut down ([`LockClient::shutdown`](crate::LockClient::shutdown)):
    /// nothing more is acquired through it.
    #[error("the lock client is shut down")]
    Shutdown,

    /// Redis answered with an error, or could not be reached in time.
    #[error("redis request failed")]
    Redis(#[from] RedisError),
}

impl Error {
    /// Classifies a Redis error raised by a script on `keys`: WRONGTYPE names the
    /// key when the script said which one, else the first.
    pub(crate) fn from_script(err: RedisError, keys: &[String]) -> Self {
        if err.code() != Some("WRONGTYPE") {
            return Error::Redis(err);
        }
        let named = err
            .detail()
            .and_then(|detail| keys.iter().find(|key| detail.starts_with(key.as_str())));
        Error::WrongType {
            key: named.or(keys.first()).cloned().unwrap_or_default(),
        }
    }
}

/// An error with its whole chain of sources, `"a: b: c"`, for messages and logs.
///
/// This crate's errors, like the driver's, keep their cause in
/// [`source()`](std::error::Error::source) and leave it out of their own message:
/// `{err}` of an [`Error::Redis`] says only `redis request failed`. `ErrorChain(&err)`
/// displays the message and then each cause; a cause that the text before it already
/// ends with (some driver errors repeat their cause) is shown once.
///
/// # Examples
///
/// ```no_run
/// # async fn run(lock: redis_rwlock::RwLock) {
/// use redis_rwlock::ErrorChain;
///
/// if let Err(err) = lock.read().await {
///     // e.g. "read lock: redis request failed: Connection refused (os error 111)"
///     eprintln!("read lock: {}", ErrorChain(&err));
/// }
/// # }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a dyn std::error::Error);

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut shown = self.0.to_string();
        let mut source = self.0.source();
        while let Some(err) = source {
            let text = err.to_string();
            if !shown.ends_with(&text) {
                shown = format!("{shown}: {text}");
            }
            source = err.source();
        }
        f.write_str(&shown)
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_shows_every_source() {
        let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "no reply in 2 s");
        let err = Error::Redis(RedisError::from(io));
        let shown = ErrorChain(&err).to_string();
        assert!(shown.starts_with("redis request failed: "), "{shown}");
        assert!(shown.contains("no reply in 2 s"), "{shown}");
    }

    #[test]
    fn a_cause_the_message_already_ends_with_is_shown_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("request failed: refused")]
        struct Repeats(#[source] std::io::Error);
        let err = Repeats(std::io::Error::other("refused"));
        assert_eq!(ErrorChain(&err).to_string(), "request failed: refused");
    }
}

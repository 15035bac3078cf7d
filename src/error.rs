//! The crate's one error type.

use std::time::Duration;

use redis::RedisError;

/// Everything a lock operation can fail with.
///
/// Each message says what happened and, where there is one, to which lock: its name,
/// the mode, the limit that ran out and its value, what the call was doing, e.g.
/// `timed out after 1s waiting for the write lock on "inventory"`. Messages are
/// lowercase and never repeat their source: the underlying
/// [`RedisError`](https://docs.rs/redis/1/redis/struct.RedisError.html) is reachable
/// through [`std::error::Error::source`], and `{:#}` of an `anyhow`/`eyre` error,
/// or [`ErrorChain`], prints the message and then each cause once.
///
/// # Examples
///
/// ```no_run
/// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
/// use redis_rwlock::{Error, ErrorChain};
///
/// match lock.try_write().await {
///     Ok(guard) => guard.release().await?,
///     Err(Error::WouldBlock) => println!("busy, try later"),
///     // e.g. "redis request failed (timed out) while acquiring the write lock on
///     // "inventory": ..." (the cause follows the message)
///     Err(err @ Error::Redis { .. }) => println!("{}", ErrorChain(&err)),
///     Err(err) => return Err(err),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `try_read`/`try_write` found that the call would have to wait: the lock is
    /// held in a conflicting mode, or (writer preference) a writer is queued ahead.
    /// Control flow, handled where the lock is known: it carries no fields.
    #[error("operation would block")]
    WouldBlock,

    /// The lock could not be taken within
    /// [`LockOptions::wait_timeout`](crate::LockOptions::wait_timeout), e.g.
    /// `timed out after 1s waiting for the write lock on "inventory"`. An upgrade
    /// that times out waits for the [`Mode::Write`] lock. From
    /// [`LockClient::shutdown`](crate::LockClient::shutdown): an acquire of `lock`
    /// was still pending when the shutdown's `within` (`waited`) ran out.
    #[error("timed out after {} waiting for the {mode} lock on {lock:?}", humantime::format_duration(*.waited))]
    Timeout {
        /// The lock's name.
        lock: String,
        /// What the call waited for.
        mode: Mode,
        /// The limit that ran out.
        waited: Duration,
    },

    /// The guard already knew its lease was gone before the call: a renewal found it
    /// missing, or its local deadline passed without a successful renewal, e.g.
    /// `the write lock on "inventory" lost its lease`.
    #[error("the {mode} lock on {lock:?} lost its lease")]
    LeaseLost {
        /// The lock's name.
        lock: String,
        /// What the guard held.
        mode: Mode,
    },

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
    /// within [`LockOptions::replica_timeout`](crate::LockOptions::replica_timeout),
    /// e.g. `only 0 of 1 replicas acknowledged within 100ms while acquiring the write
    /// lock on "inventory"`. From an acquire: the hold was granted and released
    /// again. From a fenced write: the writes were applied on the master (the hold
    /// stays), and a failover now could lose them.
    #[error(
        "only {acknowledged} of {required} replicas acknowledged within {} while {doing} on {lock:?}",
        humantime::format_duration(*.waited)
    )]
    NotReplicated {
        /// The lock's name.
        lock: String,
        /// What had to reach the replicas: an acquire or a fenced write.
        doing: Operation,
        /// Replicas that acknowledged.
        acknowledged: u32,
        /// Replicas required.
        required: u32,
        /// How long the acknowledgements were waited for (the replica timeout).
        waited: Duration,
    },

    /// The client was shut down ([`LockClient::shutdown`](crate::LockClient::shutdown)):
    /// nothing more is acquired through it. It concerns the client, not one lock.
    #[error("the lock client is shut down")]
    Shutdown,

    /// Redis answered with an error, or could not be reached in time, e.g.
    /// `redis request failed (server error NOPERM) while acquiring the write lock on
    /// "inventory"`. The message names the error's kind (the server's error code,
    /// `timed out`, `connection refused`...); the driver's own message is the
    /// [`source`](std::error::Error::source).
    ///
    /// Built from a bare [`RedisError`](https://docs.rs/redis/1/redis/struct.RedisError.html)
    /// with `From` (`?`), without a lock or an operation; the crate's own calls fill
    /// both in. Match it as `Error::Redis(failure)`: the [`RedisFailure`] derefs to
    /// the driver's error (`failure.is_timeout()`, `failure.code()`...).
    #[error(transparent)]
    Redis(RedisFailure),
}

/// A Redis error, with the lock it concerned and what the call was doing
/// ([`Error::Redis`]). Displays as `redis request failed (<kind>) while <doing> on
/// "<lock>"`; the driver's error is its [`source`](std::error::Error::source), and
/// it derefs to it.
#[derive(Debug)]
pub struct RedisFailure {
    lock: Option<String>,
    doing: Option<Operation>,
    source: RedisError,
}

impl RedisFailure {
    /// The lock's name; `None` for a call that concerns no one lock (connecting,
    /// listing locks).
    pub fn lock(&self) -> Option<&str> {
        self.lock.as_deref()
    }

    /// What the call was doing.
    pub fn doing(&self) -> Option<Operation> {
        self.doing
    }

    /// The driver's error.
    pub fn redis_error(&self) -> &RedisError {
        &self.source
    }

    /// The driver's error, owned.
    pub fn into_redis_error(self) -> RedisError {
        self.source
    }
}

impl std::ops::Deref for RedisFailure {
    type Target = RedisError;

    fn deref(&self) -> &RedisError {
        &self.source
    }
}

impl std::fmt::Display for RedisFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&redis_message(
            &self.source,
            self.lock.as_deref(),
            self.doing,
        ))
    }
}

impl std::error::Error for RedisFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// What a call asks for, or what a guard holds, as [`Error`]'s messages name it.
///
/// [`LockMode`](crate::LockMode) (in [`LockState`](crate::LockState)) is what the
/// server sees: read or write; this one also tells an upgradable read apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mode {
    /// Shared with other readers (`read()`, `read_recursive()`...).
    Read,
    /// Exclusive (`write()`, or an upgrade's goal).
    Write,
    /// A read that may become the write (`upgradable_read()`).
    UpgradableRead,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::Read => "read",
            Mode::Write => "write",
            Mode::UpgradableRead => "upgradable read",
        })
    }
}

/// What a failed call was doing, as [`Error::Redis`] and [`Error::NotReplicated`]
/// name it: displayed as `acquiring the write lock`, `renewing the read lock`...
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// Taking the lock (`read()`, `try_write()`...).
    Acquire(Mode),
    /// Turning an upgradable read into the write (`upgrade()`, `try_upgrade()`).
    Upgrade,
    /// Renewing a guard's lease (`extend()`, or the background renewal).
    Renew(Mode),
    /// Releasing a guard (`release()`, a drop, a shutdown).
    Release(Mode),
    /// Turning a write, or an upgradable read, into a plain read.
    Downgrade(Mode),
    /// Writing under the write lock (`fenced_write()`).
    FencedWrite,
    /// Reading who holds the lock (`state()`).
    State,
    /// Deleting the lock whoever holds it (`force_release()`).
    ForceRelease,
    /// Connecting, and checking what the server can do.
    Connect,
    /// Listing the locks (`list()`).
    List,
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Operation::Acquire(mode) => write!(f, "acquiring the {mode} lock"),
            Operation::Upgrade => f.write_str("upgrading to the write lock"),
            Operation::Renew(mode) => write!(f, "renewing the {mode} lock"),
            Operation::Release(mode) => write!(f, "releasing the {mode} lock"),
            Operation::Downgrade(mode) => write!(f, "downgrading the {mode} lock"),
            Operation::FencedWrite => f.write_str("making a fenced write under the write lock"),
            Operation::State => f.write_str("reading the state of the lock"),
            Operation::ForceRelease => f.write_str("force-releasing the lock"),
            Operation::Connect => f.write_str("connecting"),
            Operation::List => f.write_str("listing the locks"),
        }
    }
}

/// `Error::Redis`'s message: the failure's kind, what was being done, to which lock.
fn redis_message(source: &RedisError, lock: Option<&str>, doing: Option<Operation>) -> String {
    let mut message = format!("redis request failed ({})", redis_kind(source));
    if let Some(doing) = doing {
        message.push_str(&format!(" while {doing}"));
    }
    if let Some(lock) = lock {
        message.push_str(&format!(" on {lock:?}"));
    }
    message
}

/// A short name for what went wrong: the server's error code, or the driver's class.
fn redis_kind(err: &RedisError) -> String {
    if let Some(code) = err.code().filter(|code| !code.is_empty()) {
        return format!("server error {code}");
    }
    let kind = if err.is_timeout() {
        "timed out"
    } else if err.is_connection_refusal() {
        "connection refused"
    } else if err.is_connection_dropped() {
        "connection dropped"
    } else if err.is_io_error() {
        "i/o error"
    } else {
        return err.category().to_lowercase();
    };
    kind.to_owned()
}

impl From<RedisError> for Error {
    /// An [`Error::Redis`] that names no lock and no operation yet.
    fn from(source: RedisError) -> Self {
        Error::Redis(RedisFailure {
            lock: None,
            doing: None,
            source,
        })
    }
}

impl Error {
    /// Classifies a Redis error raised by a script on `keys`: WRONGTYPE names the
    /// key when the script said which one, else the first.
    pub(crate) fn from_script(err: RedisError, keys: &[String]) -> Self {
        if err.code() != Some("WRONGTYPE") {
            return Error::from(err);
        }
        let named = err
            .detail()
            .and_then(|detail| keys.iter().find(|key| detail.starts_with(key.as_str())));
        Error::WrongType {
            key: named.or(keys.first()).cloned().unwrap_or_default(),
        }
    }

    /// Names the lock and the operation of an [`Error::Redis`] that does not name
    /// them yet (the innermost context wins); other errors pass unchanged.
    pub(crate) fn doing(self, lock: Option<&str>, operation: Operation) -> Self {
        match self {
            Error::Redis(RedisFailure {
                lock: named,
                doing,
                source,
            }) => Error::Redis(RedisFailure {
                lock: named.or_else(|| lock.map(str::to_owned)),
                doing: doing.or(Some(operation)),
                source,
            }),
            other => other,
        }
    }
}

/// Adds context to the Redis errors of a result (see [`Error::doing`]).
pub(crate) trait Doing<T> {
    /// The result, its [`Error::Redis`] naming `lock` and `operation`.
    fn doing(self, lock: &str, operation: Operation) -> Result<T>;
}

impl<T, E: Into<Error>> Doing<T> for std::result::Result<T, E> {
    fn doing(self, lock: &str, operation: Operation) -> Result<T> {
        self.map_err(|err| err.into().doing(Some(lock), operation))
    }
}

/// An error with its whole chain of sources, `"a: b: c"`, for messages and logs.
///
/// This crate's errors, like the driver's, keep their cause in
/// [`source()`](std::error::Error::source) and leave it out of their own message:
/// `{err}` of an [`Error::Redis`] says what failed and on which lock, not the
/// driver's words. `ErrorChain(&err)` displays the message and then each cause, as
/// `{:#}` of an `anyhow` or `eyre` error does; a cause that the text before it
/// already ends with (some driver errors repeat their cause) is shown once.
///
/// # Examples
///
/// ```no_run
/// # async fn run(lock: redis_rwlock::RwLock) {
/// use redis_rwlock::ErrorChain;
///
/// if let Err(err) = lock.read().await {
///     // e.g. "redis request failed (connection refused) while acquiring the read
///     // lock on \"inventory\": Connection refused (os error 111)"
///     eprintln!("{}", ErrorChain(&err));
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
        let err = Error::from(RedisError::from(io));
        let shown = ErrorChain(&err).to_string();
        assert!(
            shown.starts_with("redis request failed (timed out): "),
            "{shown}"
        );
        assert!(shown.contains("no reply in 2 s"), "{shown}");
    }

    /// A server's error reply as the driver hands it over.
    fn reply(line: &str) -> RedisError {
        redis::parse_redis_value(format!("-{line}\r\n").as_bytes())
            .and_then(redis::Value::extract_error)
            .expect_err("an error reply")
    }

    #[test]
    fn a_server_error_is_named_by_its_code() {
        let err = Error::from(reply(
            "NOPERM User app has no permissions to run the 'fcall' command",
        ))
        .doing(Some("inventory"), Operation::Acquire(Mode::UpgradableRead));
        assert_eq!(
            err.to_string(),
            "redis request failed (server error NOPERM) while acquiring the upgradable read \
             lock on \"inventory\""
        );
        let err = Error::from(reply("CLUSTERDOWN The cluster is down"))
            .doing(Some("inventory"), Operation::Release(Mode::Read));
        assert_eq!(
            err.to_string(),
            "redis request failed (server error CLUSTERDOWN) while releasing the read lock on \
             \"inventory\""
        );
    }

    #[test]
    fn the_innermost_context_wins() {
        let err = Error::from(reply("ERR oops"))
            .doing(Some("inventory"), Operation::Downgrade(Mode::Write))
            .doing(Some("other"), Operation::Release(Mode::Write));
        assert_eq!(
            err.to_string(),
            "redis request failed (server error ERR) while downgrading the write lock on \"inventory\""
        );
        let err = Error::from(reply("ERR oops")).doing(None, Operation::Connect);
        assert_eq!(
            err.to_string(),
            "redis request failed (server error ERR) while connecting"
        );
    }

    #[test]
    fn not_replicated_names_the_lock_the_operation_and_the_limit() {
        let err = Error::NotReplicated {
            lock: "inventory".into(),
            doing: Operation::FencedWrite,
            acknowledged: 0,
            required: 1,
            waited: std::time::Duration::from_millis(100),
        };
        assert_eq!(
            err.to_string(),
            "only 0 of 1 replicas acknowledged within 100ms while making a fenced write \
             under the write lock on \"inventory\""
        );
        assert_eq!(
            format!("{err:?}"),
            "NotReplicated { lock: \"inventory\", doing: FencedWrite, acknowledged: 0, \
             required: 1, waited: 100ms }"
        );
    }

    #[test]
    fn errors_cross_threads() {
        fn bounds<T: Send + Sync + 'static>() {}
        bounds::<Error>();
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

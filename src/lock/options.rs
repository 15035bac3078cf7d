//! Per-lock settings: leases, waiting, fairness, keys, replication.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::backend::check_key_prefix;

/// The longest lease or original-client timeout accepted: one day.
const MAX_LEASE: Duration = Duration::from_secs(24 * 60 * 60);
/// The longest `wait_timeout` accepted: thirty days (leave it unset to wait forever).
const MAX_WAIT: Duration = Duration::from_secs(30 * 24 * 60 * 60);
/// The longest a process may keep an idle read hold: a writer whose call-backs are
/// all lost waits this long for it.
const MAX_KEEP: Duration = Duration::from_secs(10 * 60);
/// The most replicas `min_replicas` may ask for.
const MAX_REPLICAS: u32 = 64;
/// The longest `replica_timeout` accepted: half the 2 s a reply may take, so the
/// `WAIT` ends with [`Error::NotReplicated`] rather than a timeout, and the process's
/// other requests to that node (renewals, releases), which queue behind a blocked
/// `WAIT` on the shared connection, are held up at most this long.
const MAX_REPLICA_TIMEOUT: Duration = Duration::from_secs(1);

/// Who goes first when readers and writers both wait.
///
/// # Examples
///
/// ```
/// use redis_rwlock::{Fairness, LockOptions};
///
/// // Readers never wait for a queued writer (a writer may wait long).
/// let opts = LockOptions::default().fairness(Fairness::ReaderPreferred);
/// assert_ne!(opts, LockOptions::default());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fairness {
    /// Fair both ways, in arrival order (phase-fair): a waiting writer keeps new
    /// readers out and writers are served in arrival order, so a refresher is never
    /// starved by a stream of readers; readers that arrive behind a writer wait in
    /// line and enter together when it leaves, before the writers that came after
    /// them, so readers are never starved by a stream of writers. The default.
    #[default]
    WriterPreferred,
    /// Readers enter whenever no writer holds, as in the original design; a writer
    /// may wait as long as readers keep overlapping.
    ReaderPreferred,
}

/// Settings of one lock, given to [`LockClient::rwlock_with`](crate::LockClient::rwlock_with).
///
/// Built from [`Default`] with consuming builder methods, or deserialized (every field
/// optional; durations as milliseconds, as text like `"30s"`, or as serde's
/// `{"secs", "nanos"}`; unknown fields rejected). Durations serialize as milliseconds.
///
/// ```
/// use std::time::Duration;
/// use redis_rwlock::{Fairness, LockOptions};
///
/// let opts = LockOptions::default()
///     .write_lease(Duration::from_secs(30))
///     .wait_timeout(Duration::from_secs(5))
///     .fairness(Fairness::WriterPreferred);
///
/// let same: LockOptions =
///     serde_json::from_str(r#"{"write_lease": 30000, "wait_timeout": 5000}"#).unwrap();
/// assert_eq!(opts, same);
/// ```
///
/// Options are checked when the lock is first used: a bad value makes every
/// operation return [`Error::InvalidOptions`] before anything is sent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LockOptions {
    #[serde(with = "millis")]
    pub(crate) read_lease: Duration,
    #[serde(with = "millis")]
    pub(crate) write_lease: Duration,
    #[serde(with = "opt_millis")]
    pub(crate) wait_timeout: Option<Duration>,
    pub(crate) auto_renew: bool,
    pub(crate) share_reads: bool,
    #[serde(with = "opt_millis")]
    pub(crate) keep_reads: Option<Duration>,
    pub(crate) fairness: Fairness,
    pub(crate) key_prefix: String,
    pub(crate) min_replicas: u32,
    #[serde(with = "millis")]
    pub(crate) replica_timeout: Duration,
    #[serde(with = "opt_pair_millis")]
    pub(crate) original_timeouts: Option<(Duration, Duration)>,
    #[serde(with = "millis")]
    pub(crate) release_timeout: Duration,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            read_lease: Duration::from_secs(10),
            write_lease: Duration::from_secs(10),
            wait_timeout: None,
            auto_renew: true,
            share_reads: true,
            keep_reads: None,
            fairness: Fairness::WriterPreferred,
            key_prefix: "rwlock".to_owned(),
            min_replicas: 0,
            replica_timeout: Duration::from_millis(500),
            original_timeouts: None,
            release_timeout: Duration::from_secs(4),
        }
    }
}

impl LockOptions {
    /// How long a read hold lasts without renewal (default 10 s; 1 ms to 1 day).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_rwlock::LockOptions;
    ///
    /// let options = LockOptions::default().read_lease(Duration::from_secs(30));
    /// ```
    pub fn read_lease(mut self, lease: Duration) -> Self {
        self.read_lease = lease;
        self
    }

    /// How long a write hold lasts without renewal (default 10 s; 1 ms to 1 day).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_rwlock::LockOptions;
    ///
    /// let options = LockOptions::default().write_lease(Duration::from_secs(30));
    /// ```
    pub fn write_lease(mut self, lease: Duration) -> Self {
        self.write_lease = lease;
        self
    }

    /// The longest `read()`/`write()` wait before [`Error::Timeout`] (default: no
    /// limit; at most 30 days).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_rwlock::LockOptions;
    ///
    /// let options = LockOptions::default().wait_timeout(Duration::from_secs(5));
    /// ```
    pub fn wait_timeout(mut self, timeout: Duration) -> Self {
        self.wait_timeout = Some(timeout);
        self
    }

    /// Whether guards renew their lease in the background (default `true`, every
    /// third of the lease; a shared read hold at least every second). Without it a
    /// hold simply ends when its lease does.
    ///
    /// # Examples
    ///
    /// ```
    /// use redis_rwlock::LockOptions;
    ///
    /// let options = LockOptions::default().auto_renew(false);
    /// ```
    pub fn auto_renew(mut self, renew: bool) -> Self {
        self.auto_renew = renew;
        self
    }

    /// Whether the tasks of one client share its plain read hold of the lock
    /// (default `true`): a [`read`](crate::RwLock::read) or
    /// [`try_read`](crate::RwLock::try_read) while the client holds one joins it,
    /// with no request (README, "Reads that cost nothing"). With `false` every read
    /// is a hold of its own on the server, as [`read_recursive`](crate::RwLock::read_recursive)'s is.
    ///
    /// # Examples
    ///
    /// ```
    /// use redis_rwlock::LockOptions;
    ///
    /// // Each task's read shows in `state()` as a reader of its own.
    /// let options = LockOptions::default().share_reads(false);
    /// ```
    pub fn share_reads(mut self, share: bool) -> Self {
        self.share_reads = share;
        self
    }

    /// Lets the client keep its shared read hold of the lock, idle, for up to
    /// `bound` after the last task left it (default: released at once). A `read`
    /// in that window joins the kept hold with no request. A writer or upgrade that
    /// waits elsewhere calls the hold back and the client releases it at once; if
    /// that call-back is lost, the hold's next renewal (a third of the read lease,
    /// at most a second) or `bound`, whichever comes first, ends it all the same
    /// (`bound` counts from the first time the hold was kept, however often reads
    /// take it up; 1 ms to 10 minutes). A `write()` on this client gives the client's idle kept hold back
    /// before it asks, and the release of its write hold keeps a read hold in its
    /// place (unless a writer waits behind it); dropping the client's last handle
    /// gives every kept hold back.
    ///
    /// Keeping needs shared reads: with [`share_reads(false)`](Self::share_reads),
    /// [`auto_renew(false)`](Self::auto_renew) or
    /// [`original_timeouts`](Self::original_timeouts), and on a legacy two-key
    /// lock, every operation of the lock fails with
    /// [`Error::InvalidOptions`](crate::Error::InvalidOptions) before any I/O,
    /// rather than keep nothing unseen (README, "Kept reads").
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_rwlock::LockOptions;
    ///
    /// // A hot cache entry: its readers pay for one read hold a second at most.
    /// let options = LockOptions::default().keep_reads(Duration::from_secs(1));
    /// ```
    pub fn keep_reads(mut self, bound: Duration) -> Self {
        self.keep_reads = Some(bound);
        self
    }

    /// The priority policy between readers and writers (default
    /// [`Fairness::WriterPreferred`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use redis_rwlock::{Fairness, LockOptions};
    ///
    /// let options = LockOptions::default().fairness(Fairness::ReaderPreferred);
    /// ```
    pub fn fairness(mut self, fairness: Fairness) -> Self {
        self.fairness = fairness;
        self
    }

    /// The first part of the lock's key, `"{prefix}:{name}"` (default `"rwlock"`).
    /// It must not be empty, hold `{` or `}`, or be longer than 1,024 bytes; else
    /// every operation fails with
    /// [`Error::InvalidOptions`](crate::Error::InvalidOptions), before any I/O.
    ///
    /// # Examples
    ///
    /// ```
    /// use redis_rwlock::LockOptions;
    ///
    /// let options = LockOptions::default().key_prefix("locks");
    /// ```
    pub fn key_prefix(mut self, prefix: &str) -> Self {
        prefix.clone_into(&mut self.key_prefix);
        self
    }

    /// After each acquire, wait until this many replicas have the hold (`WAIT`)
    /// before returning it (default 0: do not wait).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_rwlock::LockOptions;
    ///
    /// let options = LockOptions::default().min_replicas(1).replica_timeout(Duration::from_millis(200));
    /// ```
    pub fn min_replicas(mut self, replicas: u32) -> Self {
        self.min_replicas = replicas;
        self
    }

    /// How long the `WAIT` of [`min_replicas`](Self::min_replicas) may take
    /// (default 500 ms; 1 ms to 1 s). While it waits, the process's other requests
    /// to the same node queue behind it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_rwlock::LockOptions;
    ///
    /// let options = LockOptions::default().min_replicas(1).replica_timeout(Duration::from_millis(200));
    /// ```
    pub fn replica_timeout(mut self, timeout: Duration) -> Self {
        self.replica_timeout = timeout;
        self
    }

    /// The read and write timeouts of clients that still run the original design on
    /// the same keys: their `read`/`write` stamps count as holds for that long
    /// (default: this lock's own leases).
    ///
    /// They judge our stamps by the same timeouts, so a guard counts its hold for at
    /// most the matching timeout (write for a write hold, read for a read hold) after
    /// the request that granted or renewed it, even with a longer lease, and renews
    /// every third of that.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_rwlock::LockOptions;
    ///
    /// let options = LockOptions::default().original_timeouts(Duration::from_secs(1), Duration::from_secs(3));
    /// ```
    pub fn original_timeouts(mut self, read: Duration, write: Duration) -> Self {
        self.original_timeouts = Some((read, write));
        self
    }

    /// The longest a guard's `release()` waits for Redis to confirm (default 4 s, the
    /// client's limit for one request with its retries; 1 ms to 1 day). If the
    /// release is not confirmed by then, `release()` returns [`Error::Redis`] (a
    /// timeout) and the release goes on in the background until the hold's lease
    /// would have ended anyway; the hold ends at the latest with its lease.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis_rwlock::{Fairness, LockOptions};
    ///
    /// let options = LockOptions::default().release_timeout(Duration::from_millis(500));
    /// # let _ = (options, Duration::ZERO, Fairness::default());
    /// ```
    pub fn release_timeout(mut self, timeout: Duration) -> Self {
        self.release_timeout = timeout;
        self
    }

    /// Checks every value; the lock calls this before its first request.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        check_span("read_lease", self.read_lease, MAX_LEASE)?;
        check_span("write_lease", self.write_lease, MAX_LEASE)?;
        check_span("release_timeout", self.release_timeout, MAX_LEASE)?;
        if let Some(wait) = self.wait_timeout {
            check_span("wait_timeout", wait, MAX_WAIT)?;
        }
        if let Some(bound) = self.keep_reads {
            check_span("keep_reads", bound, MAX_KEEP)?;
            // Only a shared hold is kept: refused, rather than ignored.
            let unshared = [
                (!self.share_reads, "share_reads(false)"),
                (!self.auto_renew, "auto_renew(false)"),
                (self.original_timeouts.is_some(), "original_timeouts"),
            ];
            if let Some((_, why)) = unshared.iter().find(|(off, _)| *off) {
                return Err(invalid(format!(
                    "keep_reads needs shared reads, which {why} turns off"
                )));
            }
        }
        if let Some((read, write)) = self.original_timeouts {
            check_span("original read timeout", read, MAX_LEASE)?;
            check_span("original write timeout", write, MAX_LEASE)?;
        }
        if self.min_replicas > MAX_REPLICAS {
            return Err(invalid(format!(
                "min_replicas is {}, more than {MAX_REPLICAS}",
                self.min_replicas
            )));
        }
        if self.min_replicas > 0 {
            check_span("replica_timeout", self.replica_timeout, MAX_REPLICA_TIMEOUT)?;
        }
        check_key_prefix(&self.key_prefix)
    }

    /// The (read, write) timeouts of original-design clients the scripts assume: the
    /// configured [`original_timeouts`](Self::original_timeouts), else our own leases.
    pub(crate) fn original_timeouts_in_force(&self) -> (Duration, Duration) {
        self.original_timeouts
            .unwrap_or((self.read_lease, self.write_lease))
    }
}

fn invalid(message: String) -> Error {
    Error::InvalidOptions(message)
}

/// A time span must be at least a millisecond and at most `max`.
fn check_span(what: &str, span: Duration, max: Duration) -> Result<(), Error> {
    if span < Duration::from_millis(1) {
        return Err(invalid(format!(
            "{what} is {span:?}, less than one millisecond"
        )));
    }
    if span > max {
        return Err(invalid(format!("{what} is {span:?}, more than {max:?}")));
    }
    Ok(())
}

/// A duration as configuration files write it: whole milliseconds (`1500`), a human
/// string (`"1.5s"`, `"2m"`, `"500ms"`), or serde's own `{"secs", "nanos"}`.
/// Durations are always written back as whole milliseconds.
#[derive(Deserialize)]
#[serde(untagged)]
enum Span {
    Millis(u64),
    Text(String),
    Std(Duration),
}

impl Span {
    fn into_duration<E: serde::de::Error>(self) -> Result<Duration, E> {
        match self {
            Span::Millis(ms) => Ok(Duration::from_millis(ms)),
            Span::Std(d) => Ok(d),
            Span::Text(text) => humantime::parse_duration(&text)
                .map_err(|err| E::custom(format!("{text:?} is not a duration: {err}"))),
        }
    }
}

fn as_millis(d: &Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(super::as_millis(d))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        super::Span::deserialize(d)?.into_duration()
    }
}

mod opt_millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        d.as_ref().map(super::as_millis).serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Option::<super::Span>::deserialize(d)?
            .map(super::Span::into_duration)
            .transpose()
    }
}

mod opt_pair_millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<S: Serializer>(
        d: &Option<(Duration, Duration)>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        d.map(|(r, w)| (super::as_millis(&r), super::as_millis(&w)))
            .serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<(Duration, Duration)>, D::Error> {
        match Option::<(super::Span, super::Span)>::deserialize(d)? {
            Some((read, write)) => Ok(Some((read.into_duration()?, write.into_duration()?))),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert!(LockOptions::default().validate().is_ok());
    }

    #[test]
    fn zero_tiny_and_absurd_spans_are_rejected() {
        let bad = [
            LockOptions::default().read_lease(Duration::ZERO),
            LockOptions::default().write_lease(Duration::from_micros(999)),
            LockOptions::default().write_lease(Duration::MAX),
            LockOptions::default().wait_timeout(Duration::ZERO),
            LockOptions::default().wait_timeout(Duration::from_secs(u64::MAX)),
            LockOptions::default().original_timeouts(Duration::ZERO, Duration::from_secs(1)),
            LockOptions::default()
                .min_replicas(1)
                .replica_timeout(Duration::ZERO),
            LockOptions::default().min_replicas(1000),
            LockOptions::default().release_timeout(Duration::ZERO),
            LockOptions::default().keep_reads(Duration::ZERO),
            LockOptions::default().keep_reads(Duration::from_secs(3600)),
            LockOptions::default()
                .keep_reads(Duration::from_secs(1))
                .share_reads(false),
            LockOptions::default()
                .keep_reads(Duration::from_secs(1))
                .auto_renew(false),
            LockOptions::default().key_prefix(""),
            LockOptions::default().key_prefix("a{b"),
        ];
        for opts in bad {
            assert!(
                matches!(opts.validate(), Err(Error::InvalidOptions(_))),
                "{opts:?} passed"
            );
        }
    }

    #[test]
    fn serde_round_trips_in_milliseconds() {
        let opts = LockOptions::default()
            .read_lease(Duration::from_millis(1500))
            .wait_timeout(Duration::from_secs(2))
            .fairness(Fairness::ReaderPreferred)
            .original_timeouts(Duration::from_secs(1), Duration::from_secs(3));
        let json = serde_json::to_string(&opts).unwrap();
        assert!(json.contains(r#""read_lease":1500"#), "{json}");
        assert!(json.contains(r#""fairness":"reader_preferred""#), "{json}");
        assert_eq!(serde_json::from_str::<LockOptions>(&json).unwrap(), opts);
        assert_eq!(
            serde_json::from_str::<LockOptions>("{}").unwrap(),
            LockOptions::default()
        );
        assert!(serde_json::from_str::<LockOptions>(r#"{"read_leese": 1}"#).is_err());
    }

    #[test]
    fn durations_read_as_milliseconds_human_text_or_serde_structs() {
        let json = r#"{"read_lease": 1500, "write_lease": "2m", "wait_timeout": {"secs": 3, "nanos": 0},
                      "original_timeouts": ["1s", 3000], "keep_reads": "500ms"}"#;
        let opts: LockOptions = serde_json::from_str(json).unwrap();
        assert_eq!(opts.read_lease, Duration::from_millis(1500));
        assert_eq!(opts.write_lease, Duration::from_secs(120));
        assert_eq!(opts.wait_timeout, Some(Duration::from_secs(3)));
        assert_eq!(opts.keep_reads, Some(Duration::from_millis(500)));
        assert_eq!(
            opts.original_timeouts,
            Some((Duration::from_secs(1), Duration::from_secs(3)))
        );
        let err = serde_json::from_str::<LockOptions>(r#"{"read_lease": "soon"}"#).unwrap_err();
        assert!(
            err.to_string().contains("\"soon\" is not a duration"),
            "{err}"
        );
    }
}

//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (feature `metrics`).
//!
//! Every metric the crate records is recorded here, by the small functions and RAII
//! types below that the rest of the crate calls where things happen: one
//! acquisition ([`Acquiring`]), one hold ([`Holding`]), a renewal ([`renewal`]), a
//! script sent ([`script_sent`]), and the waiting loop's hooks ([`handed_over`],
//! [`woken`], [`refused`]). Without the feature their bodies are empty and the types
//! hold nothing (but a hold's mode, which its spans use too): the calls compile to
//! nothing.
//!
//! With the feature, each metric's keys (one per combination of its labels'
//! values) are built once, on first use: a record is a registry lookup by a
//! precomputed key in whatever recorder the application installed (none: a no-op
//! call). A lock's name as a label ([`crate::RwLock::with_metrics_name`]) has its
//! own keys, built once per name. Names, units and labels: README, "Observability".
#![cfg_attr(not(feature = "metrics"), allow(unused_variables, dead_code))]

use std::sync::atomic::{AtomicU8, Ordering};

use crate::Error;
use crate::protocol::Access;

/// The `mode` label: what an acquisition asks for, or what a hold is (a hold is
/// never `Upgrade`: an upgrade's hold is a write hold).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Read = 0,
    Write = 1,
    Upgradable = 2,
    Upgrade = 3,
}

impl Mode {
    const LABELS: &'static [&'static str] = &["read", "write", "upgradable", "upgrade"];

    /// An acquisition's mode.
    pub(crate) fn of(access: Access) -> Self {
        match access {
            Access::Read | Access::RecursiveRead => Mode::Read,
            Access::Write => Mode::Write,
            Access::UpgradableRead => Mode::Upgradable,
            Access::Upgrade => Mode::Upgrade,
        }
    }

    /// The mode of the hold `access` gets.
    pub(crate) fn of_hold(access: Access) -> Self {
        match Mode::of(access) {
            Mode::Upgrade => Mode::Write,
            mode => mode,
        }
    }

    /// The label's value, also the `mode` field of the hold and release spans.
    pub(crate) fn as_str(self) -> &'static str {
        Mode::LABELS[self as usize]
    }

    fn from_index(index: u8) -> Self {
        match index {
            0 => Mode::Read,
            1 => Mode::Write,
            2 => Mode::Upgradable,
            _ => Mode::Upgrade,
        }
    }
}

/// The `outcome` of an acquisition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Granted = 0,
    WouldBlock = 1,
    TimedOut = 2,
    Error = 3,
    Shutdown = 4,
}

impl Outcome {
    const LABELS: &'static [&'static str] =
        &["granted", "would_block", "timed_out", "error", "shutdown"];

    fn of<T>(result: &Result<T, Error>) -> Self {
        match result {
            Ok(_) => Outcome::Granted,
            Err(Error::WouldBlock) => Outcome::WouldBlock,
            Err(Error::Timeout { .. }) => Outcome::TimedOut,
            Err(Error::Shutdown) => Outcome::Shutdown,
            Err(_) => Outcome::Error,
        }
    }
}

/// Why a lease was lost: the `cause` label, and the `cause` field of the `warn`
/// event that says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LostCause {
    /// The server no longer had the hold (a renewal, a fenced write or a downgrade
    /// found it gone, or a client of the original design held beside it).
    Gone = 0,
    /// Redis could not be reached before the lease's local deadline.
    Unreachable = 1,
    /// With `auto_renew` off, the deadline passed without an `extend()`.
    Expired = 2,
    /// An upgrade granted on too few replicas was released again, with the hold.
    NotReplicated = 3,
}

impl LostCause {
    const LABELS: &'static [&'static str] = &["gone", "unreachable", "expired", "not_replicated"];

    pub(crate) fn as_str(self) -> &'static str {
        LostCause::LABELS[self as usize]
    }

    /// What happened, for the log line.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            LostCause::Gone => {
                "the hold was gone, or a client of the original design held beside it"
            }
            LostCause::Unreachable => "Redis unreachable until the lease ended",
            LostCause::Expired => "the lease ended without a renewal (auto_renew is off)",
            LostCause::NotReplicated => "released again: too few replicas acknowledged the upgrade",
        }
    }
}

/// The `outcome` of one renewal request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Renewal {
    Renewed = 0,
    /// The lease was found lost (and marked so).
    Lost = 1,
    /// This attempt failed; another may follow while the lease lasts.
    Error = 2,
}

impl Renewal {
    const LABELS: &'static [&'static str] = &["renewed", "lost", "error"];
}

/// The opt-in `lock` label of one lock handle and its guards (empty: none): with
/// the feature, the keys of every metric with that label, shared by every handle
/// labelled with the same name.
#[derive(Clone, Default)]
pub(crate) struct LockLabel {
    #[cfg(feature = "metrics")]
    keys: Option<std::sync::Arc<record::Keys>>,
}

impl LockLabel {
    /// Labels with `name`.
    pub(crate) fn named(name: &str) -> Self {
        LockLabel {
            #[cfg(feature = "metrics")]
            keys: Some(record::Keys::named(name)),
        }
    }
}

/// One acquisition in progress, from the call (the future's first poll): counts in
/// `redis_rwlock_waiters` while it lives, so a cancelled acquisition leaves too.
/// [`finish`](Self::finish) records its outcome and, when granted, its wait.
#[must_use]
pub(crate) struct Acquiring {
    #[cfg(feature = "metrics")]
    lock: LockLabel,
    #[cfg(feature = "metrics")]
    mode: Mode,
    #[cfg(feature = "metrics")]
    started: std::time::Instant,
}

impl Acquiring {
    pub(crate) fn start(lock: &LockLabel, mode: Mode) -> Self {
        #[cfg(feature = "metrics")]
        record::WAITERS.gauge(&[mode as usize], lock, 1.0);
        Acquiring {
            #[cfg(feature = "metrics")]
            lock: lock.clone(),
            #[cfg(feature = "metrics")]
            mode,
            #[cfg(feature = "metrics")]
            started: std::time::Instant::now(),
        }
    }

    /// The acquisition is counted elsewhere: it stops counting as a waiter here.
    pub(crate) fn forget(self) {}

    /// The acquisition returned `result`.
    pub(crate) fn finish<T>(self, result: &Result<T, Error>) {
        #[cfg(feature = "metrics")]
        {
            let outcome = Outcome::of(result);
            let (mode, lock) = (self.mode as usize, &self.lock);
            record::ACQUISITIONS.counter(&[mode, outcome as usize], lock);
            if outcome == Outcome::Granted {
                let waited = self.started.elapsed().as_secs_f64();
                record::WAIT.histogram(&[mode], lock, waited);
            }
        }
    }
}

#[cfg(feature = "metrics")]
impl Drop for Acquiring {
    fn drop(&mut self) {
        record::WAITERS.gauge(&[self.mode as usize], &self.lock, -1.0);
    }
}

/// One hold, from its grant until it ends (released, dropped, lost, or moved to
/// another mode by an upgrade or a downgrade): its mode, and with the feature its
/// place in `redis_rwlock_guards` and its duration, recorded in
/// `redis_rwlock_hold_seconds` once, when it ends.
pub(crate) struct Holding {
    mode: AtomicU8,
    #[cfg(feature = "metrics")]
    lock: LockLabel,
    /// When the hold (in its current mode) began; `None` once it ended.
    #[cfg(feature = "metrics")]
    since: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Holding {
    pub(crate) fn start(lock: &LockLabel, mode: Mode) -> Self {
        #[cfg(feature = "metrics")]
        record::GUARDS.gauge(&[mode as usize], lock, 1.0);
        Holding {
            mode: AtomicU8::new(mode as u8),
            #[cfg(feature = "metrics")]
            lock: lock.clone(),
            #[cfg(feature = "metrics")]
            since: std::sync::Mutex::new(Some(std::time::Instant::now())),
        }
    }

    /// The hold's mode now.
    pub(crate) fn mode(&self) -> Mode {
        Mode::from_index(self.mode.load(Ordering::Relaxed))
    }

    /// The hold ended (released, dropped, shut down, or moved by an upgrade or a
    /// write downgrade); later calls do nothing.
    pub(crate) fn end(&self) {
        #[cfg(feature = "metrics")]
        self.take_end();
    }

    /// The hold's lease was lost for `cause`; nothing if it had already ended.
    pub(crate) fn lost(&self, cause: LostCause) {
        #[cfg(feature = "metrics")]
        if let Some(mode) = self.take_end() {
            record::LOST.counter(&[mode as usize, cause as usize], &self.lock);
        }
    }

    /// The hold goes on in mode `to` (an upgradable hold became a plain one): the
    /// hold in the old mode ends and one in the new mode begins.
    pub(crate) fn switch(&self, to: Mode) {
        let from = Mode::from_index(self.mode.swap(to as u8, Ordering::Relaxed));
        #[cfg(feature = "metrics")]
        {
            let mut since = self.since();
            if let Some(start) = since.take() {
                self.ended(from, start);
                record::GUARDS.gauge(&[to as usize], &self.lock, 1.0);
                *since = Some(std::time::Instant::now());
            }
        }
    }

    #[cfg(feature = "metrics")]
    fn since(&self) -> std::sync::MutexGuard<'_, Option<std::time::Instant>> {
        self.since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Ends the hold if it has not ended; returns the mode it ended in.
    #[cfg(feature = "metrics")]
    fn take_end(&self) -> Option<Mode> {
        let mut since = self.since();
        let start = since.take()?;
        let mode = self.mode();
        self.ended(mode, start);
        Some(mode)
    }

    /// The hold in `mode` since `start` ended: the guard leaves the gauge and the
    /// hold's duration is recorded.
    #[cfg(feature = "metrics")]
    fn ended(&self, mode: Mode, start: std::time::Instant) {
        record::GUARDS.gauge(&[mode as usize], &self.lock, -1.0);
        let held = start.elapsed().as_secs_f64();
        record::HOLD.histogram(&[mode as usize], &self.lock, held);
    }
}

#[cfg(feature = "metrics")]
impl Drop for Holding {
    /// A hold whose every owner is gone has ended (normally it was ended before).
    fn drop(&mut self) {
        self.take_end();
    }
}

/// One renewal request of a hold on `lock` came back with `outcome`.
pub(crate) fn renewal(lock: &LockLabel, outcome: Renewal) {
    #[cfg(feature = "metrics")]
    record::RENEWALS.counter(&[outcome as usize], lock);
}

/// A script is being sent with `verb` (`FCALL`, `EVALSHA_RO`...); `script` names its
/// operation (`acquire_read`...), and is called only when metrics are recorded.
pub(crate) fn script_sent(verb: &'static str, script: impl FnOnce() -> &'static str) {
    #[cfg(feature = "metrics")]
    {
        let path = match verb {
            "FCALL" | "FCALL_RO" => 0,
            "EVALSHA" | "EVALSHA_RO" => 1,
            _ => 2,
        };
        record::script_sent(path, script());
    }
}

/// Hook for the waiting loop (`src/lock/waiting.rs`): a waiter was granted the lock by
/// another client's script, as a message told it (a writer's or an upgrade's
/// hand-over, or the grant of the batch of readers it waits in), without another
/// attempt of its own. Counts in `redis_rwlock_handovers_total`.
pub(crate) fn handed_over() {
    #[cfg(feature = "metrics")]
    record::HANDOVERS.counter(&[], &LockLabel::default());
}

/// Hook for the waiting loop (`src/lock/waiting.rs`): a waiter woke up, `by_message`
/// (a wake-up message on the lock's channel) or else by its re-check timer. Counts
/// in `redis_rwlock_wakeups_total`, label `by` = `message` | `timer`.
pub(crate) fn woken(by_message: bool) {
    #[cfg(feature = "metrics")]
    record::WAKEUPS.counter(&[usize::from(!by_message)], &LockLabel::default());
}

/// How a read was granted in the process, with no request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Local {
    /// It joined a read hold that other tasks hold.
    Joined = 0,
    /// It took up a hold the process kept, idle (`LockOptions::keep_reads`).
    Kept = 1,
}

impl Local {
    const LABELS: &'static [&'static str] = &["joined", "kept"];
}

/// Hook for shared reads (`src/lock/shared_reads/`): a read was granted in the
/// process, `how`, with no request (it counts in `redis_rwlock_acquisitions_total`
/// too, as a granted read, and its guard as a hold). Counts in
/// `redis_rwlock_shared_reads_total`; the server's grants are the granted reads
/// less these.
pub(crate) fn shared_read(lock: &LockLabel, how: Local) {
    #[cfg(feature = "metrics")]
    record::SHARED_READS.counter(&[how as usize], lock);
    #[cfg(not(feature = "metrics"))]
    let _ = (lock, how);
}

/// Hook for lock sets (`src/lock_set/`): a set's acquire returned `result` (its
/// members count in the acquisitions of their own locks). Counts in
/// `redis_rwlock_lock_set_acquisitions_total`, label `outcome`.
pub(crate) fn lock_set_acquired<T>(result: &Result<T, Error>) {
    #[cfg(feature = "metrics")]
    record::LOCK_SETS.counter(&[Outcome::of(result) as usize], &LockLabel::default());
    #[cfg(not(feature = "metrics"))]
    let _ = result;
}

/// Hook for the waiting loop (`src/lock/waiting.rs`): the server refused an acquire
/// attempt (someone else holds or is first in line), whether the caller then waits
/// or gets `WouldBlock`. Counts in `redis_rwlock_refusals_total`.
pub(crate) fn refused() {
    #[cfg(feature = "metrics")]
    record::REFUSALS.counter(&[], &LockLabel::default());
}

/// Describes every metric of the crate (unit and help text) to the recorder installed
/// now, for exporters that show them (Prometheus's `# HELP` lines). Call it once
/// after installing the recorder; metrics are recorded without it too. Only with
/// feature `metrics`.
///
/// # Examples
///
/// ```no_run
/// // After installing a recorder, e.g. metrics-exporter-prometheus's:
/// redis_rwlock::describe_metrics();
/// ```
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn describe_metrics() {
    use ::metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        record::ACQUISITIONS.name,
        Unit::Count,
        "Acquisitions returned, by mode (read, write, upgradable, upgrade) and outcome (granted, would_block, timed_out, error, shutdown)"
    );
    describe_histogram!(
        record::WAIT.name,
        Unit::Seconds,
        "Time from an acquisition's call to its grant, by mode"
    );
    describe_histogram!(
        record::HOLD.name,
        Unit::Seconds,
        "Time from a hold's grant to its release, drop or loss, by mode (read, write, upgradable)"
    );
    describe_counter!(
        record::LOST.name,
        Unit::Count,
        "Leases lost, by mode and cause (gone, unreachable, expired, not_replicated)"
    );
    describe_counter!(
        record::RENEWALS.name,
        Unit::Count,
        "Lease renewal requests, by outcome (renewed, lost, error)"
    );
    describe_counter!(
        record::SCRIPTS.name,
        Unit::Count,
        "Lock scripts sent, by path (fcall, evalsha, eval) and script (the operation)"
    );
    describe_gauge!(
        record::GUARDS.name,
        Unit::Count,
        "Holds this process has (guards that hold), by mode"
    );
    describe_gauge!(
        record::WAITERS.name,
        Unit::Count,
        "Acquisitions in progress, by mode"
    );
    describe_counter!(
        record::HANDOVERS.name,
        Unit::Count,
        "Waiting writers and upgrades handed the lock by a release"
    );
    describe_counter!(
        record::WAKEUPS.name,
        Unit::Count,
        "Waiters woken, by message or by their re-check timer"
    );
    describe_counter!(
        record::REFUSALS.name,
        Unit::Count,
        "Acquire attempts the server refused"
    );
    describe_counter!(
        record::SHARED_READS.name,
        Unit::Count,
        "Reads granted in this process with no request, by how (joined: a read hold other tasks hold; kept: a hold kept idle)"
    );
    describe_counter!(
        record::LOCK_SETS.name,
        Unit::Count,
        "Lock set acquisitions, by outcome (each member also counts as an acquisition of its lock)"
    );
}

/// The one recording mechanism: each metric a [`Family`] of keys, one per
/// combination of its labels' values, built once per label set ([`Keys`]).
#[cfg(feature = "metrics")]
mod record {
    use std::collections::HashMap;
    use std::sync::{Arc, LazyLock, Mutex, OnceLock, PoisonError};

    use ::metrics::{Key, Label, Level, Metadata, SharedString, with_recorder};

    use super::{Local, LockLabel, LostCause, Mode, Outcome, Renewal};

    static METADATA: Metadata<'static> =
        Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

    /// Labels and their values, in a family's key order.
    type Dimensions = &'static [(&'static str, &'static [&'static str])];

    /// One metric: its name and its labels (the `lock` label, when a lock has it,
    /// comes last). `id`: its place in [`Keys`].
    pub(super) struct Family {
        id: usize,
        pub(super) name: &'static str,
        dimensions: Dimensions,
    }

    const FAMILIES: usize = 14;

    pub(super) static ACQUISITIONS: Family = Family {
        id: 0,
        name: "redis_rwlock_acquisitions_total",
        dimensions: &[("mode", Mode::LABELS), ("outcome", Outcome::LABELS)],
    };
    pub(super) static WAIT: Family = Family {
        id: 1,
        name: "redis_rwlock_wait_seconds",
        dimensions: &[("mode", Mode::LABELS)],
    };
    pub(super) static HOLD: Family = Family {
        id: 2,
        name: "redis_rwlock_hold_seconds",
        dimensions: &[("mode", Mode::LABELS)],
    };
    pub(super) static LOST: Family = Family {
        id: 3,
        name: "redis_rwlock_leases_lost_total",
        dimensions: &[("mode", Mode::LABELS), ("cause", LostCause::LABELS)],
    };
    pub(super) static RENEWALS: Family = Family {
        id: 4,
        name: "redis_rwlock_renewals_total",
        dimensions: &[("outcome", Renewal::LABELS)],
    };
    const PATHS: &[&str] = &["fcall", "evalsha", "eval"];
    /// The scripts' operations (`lua/*.lua`, `Operation::name` in scripts.rs).
    const SCRIPTS_KNOWN: &[&str] = &[
        "acquire_read",
        "acquire_write",
        "release",
        "renew",
        "downgrade",
        "fenced_write",
        "force_release",
        "state",
        "acquire_set",
    ];
    pub(super) static SCRIPTS: Family = Family {
        id: 5,
        name: "redis_rwlock_scripts_total",
        dimensions: &[("path", PATHS), ("script", SCRIPTS_KNOWN)],
    };
    /// The same metric for an operation not in [`SCRIPTS_KNOWN`]: its `script`
    /// label is added per record.
    static SCRIPTS_OTHER: Family = Family {
        id: 6,
        name: "redis_rwlock_scripts_total",
        dimensions: &[("path", PATHS)],
    };
    pub(super) static GUARDS: Family = Family {
        id: 7,
        name: "redis_rwlock_guards",
        dimensions: &[("mode", Mode::LABELS)],
    };
    pub(super) static WAITERS: Family = Family {
        id: 8,
        name: "redis_rwlock_waiters",
        dimensions: &[("mode", Mode::LABELS)],
    };
    pub(super) static HANDOVERS: Family = Family {
        id: 9,
        name: "redis_rwlock_handovers_total",
        dimensions: &[],
    };
    pub(super) static WAKEUPS: Family = Family {
        id: 10,
        name: "redis_rwlock_wakeups_total",
        dimensions: &[("by", &["message", "timer"])],
    };
    pub(super) static REFUSALS: Family = Family {
        id: 11,
        name: "redis_rwlock_refusals_total",
        dimensions: &[],
    };
    pub(super) static SHARED_READS: Family = Family {
        id: 12,
        name: "redis_rwlock_shared_reads_total",
        dimensions: &[("how", Local::LABELS)],
    };
    pub(super) static LOCK_SETS: Family = Family {
        id: 13,
        name: "redis_rwlock_lock_set_acquisitions_total",
        dimensions: &[("outcome", Outcome::LABELS)],
    };

    /// Every family's keys for one label set: without a `lock` label, or with one
    /// lock's name. Each family's are built on its first record.
    pub(crate) struct Keys {
        lock: Option<SharedString>,
        families: [OnceLock<Vec<Key>>; FAMILIES],
    }

    /// The keys without a `lock` label.
    static UNLABELLED: Keys = Keys {
        lock: None,
        families: [const { OnceLock::new() }; FAMILIES],
    };

    impl Keys {
        /// The keys labelled with `name`: one set per name for the life of the
        /// process, shared by every handle labelled so (the names a process labels
        /// are few, by contract: see `RwLock::with_metrics_name`).
        pub(super) fn named(name: &str) -> Arc<Keys> {
            static NAMED: LazyLock<Mutex<HashMap<String, Arc<Keys>>>> =
                LazyLock::new(Mutex::default);
            let mut named = NAMED.lock().unwrap_or_else(PoisonError::into_inner);
            named
                .entry(name.to_owned())
                .or_insert_with(|| {
                    Arc::new(Keys {
                        lock: Some(Arc::<str>::from(name).into()),
                        families: [const { OnceLock::new() }; FAMILIES],
                    })
                })
                .clone()
        }
    }

    impl Family {
        /// The key for the label values at `at` (an index per dimension).
        fn key<'a>(&self, at: &[usize], lock: &'a LockLabel) -> &'a Key {
            let keys = lock.keys.as_deref().unwrap_or(&UNLABELLED);
            let table = keys.families[self.id].get_or_init(|| self.build(keys.lock.as_ref()));
            let index = self
                .dimensions
                .iter()
                .zip(at)
                .fold(0, |index, ((_, values), &at)| index * values.len() + at);
            &table[index]
        }

        /// Every combination of the dimensions' values (the last one varying
        /// fastest), each with `lock` as its last label when given.
        fn build(&self, lock: Option<&SharedString>) -> Vec<Key> {
            let count: usize = self
                .dimensions
                .iter()
                .map(|(_, values)| values.len())
                .product();
            (0..count)
                .map(|mut index| {
                    let mut labels: Vec<Label> = self
                        .dimensions
                        .iter()
                        .rev()
                        .map(|&(label, values)| {
                            let value = values[index % values.len()];
                            index /= values.len();
                            Label::from_static_parts(label, value)
                        })
                        .collect();
                    labels.reverse();
                    labels.extend(lock.map(|name| Label::new("lock", name.clone())));
                    Key::from_parts(self.name, labels)
                })
                .collect()
        }

        pub(super) fn counter(&self, at: &[usize], lock: &LockLabel) {
            let key = self.key(at, lock);
            with_recorder(|recorder| recorder.register_counter(key, &METADATA).increment(1));
        }

        pub(super) fn gauge(&self, at: &[usize], lock: &LockLabel, delta: f64) {
            let key = self.key(at, lock);
            with_recorder(|recorder| recorder.register_gauge(key, &METADATA).increment(delta));
        }

        pub(super) fn histogram(&self, at: &[usize], lock: &LockLabel, value: f64) {
            let key = self.key(at, lock);
            with_recorder(|recorder| recorder.register_histogram(key, &METADATA).record(value));
        }
    }

    /// A script sent by `path` (an index in [`PATHS`]) for the operation `script`.
    pub(super) fn script_sent(path: usize, script: &'static str) {
        let unlabelled = LockLabel::default();
        match SCRIPTS_KNOWN.iter().position(|&known| known == script) {
            Some(known) => SCRIPTS.counter(&[path, known], &unlabelled),
            None => {
                let extra = vec![Label::from_static_parts("script", script)];
                let key = SCRIPTS_OTHER
                    .key(&[path], &unlabelled)
                    .with_extra_labels(extra);
                with_recorder(|recorder| recorder.register_counter(&key, &METADATA).increment(1));
            }
        }
    }
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use std::collections::BTreeMap;

    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use super::*;

    /// Records `f`'s metrics on a recorder of its own: (name, labels) -> value.
    fn recorded(f: impl FnOnce()) -> BTreeMap<(String, Vec<String>), DebugValue> {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        ::metrics::with_local_recorder(&recorder, f);
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let key = key.key();
                let labels = key
                    .labels()
                    .map(|label| format!("{}={}", label.key(), label.value()))
                    .collect();
                ((key.name().to_owned(), labels), value)
            })
            .collect()
    }

    fn key(name: &str, labels: &[&str]) -> (String, Vec<String>) {
        (
            name.to_owned(),
            labels.iter().map(ToString::to_string).collect(),
        )
    }

    /// What the records of one acquire and release cost alone (no I/O), with no
    /// recorder and with metrics-exporter-prometheus's: `cargo test --release
    /// --features metrics --lib -- --ignored --nocapture record_cost`.
    #[test]
    #[ignore = "a measurement: run by hand, in release mode"]
    fn record_cost() {
        const N: u32 = 1_000_000;
        fn one_acquire_and_release(lock: &LockLabel) {
            let acquiring = Acquiring::start(lock, Mode::Read);
            script_sent("FCALL", || "acquire_read");
            let holding = Holding::start(lock, Mode::Read);
            acquiring.finish(&Ok::<(), Error>(()));
            holding.end();
            script_sent("FCALL", || "release");
            drop(holding);
        }
        let time = |what: &str, lock: &LockLabel| {
            let started = std::time::Instant::now();
            for _ in 0..N {
                one_acquire_and_release(std::hint::black_box(lock));
            }
            let ns = started.elapsed().as_secs_f64() * 1e9 / f64::from(N);
            println!("records of one acquire and release, {what}: {ns:.0} ns");
        };
        let (plain, named) = (LockLabel::default(), LockLabel::named("inventory"));
        time("no recorder", &plain);
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        ::metrics::with_local_recorder(&recorder, || {
            for _ in 0..3 {
                time("Prometheus", &plain);
                handle.run_upkeep();
                time("Prometheus, lock label", &named);
                handle.run_upkeep();
            }
        });
    }

    #[test]
    fn each_record_names_its_labels_values() {
        let lock = LockLabel::named("inventory");
        let seen = recorded(|| {
            Acquiring::start(&LockLabel::default(), Mode::Upgradable).finish(&Err::<(), _>(
                Error::Timeout {
                    lock: String::new(),
                    mode: crate::Mode::UpgradableRead,
                    waited: std::time::Duration::ZERO,
                },
            ));
            Acquiring::start(&lock, Mode::Write).finish(&Ok::<(), Error>(()));
            let holding = Holding::start(&LockLabel::default(), Mode::Upgradable);
            holding.switch(Mode::Read);
            holding.lost(LostCause::Expired);
            holding.end(); // once lost, the hold has ended already
            renewal(&lock, Renewal::Error);
            script_sent("EVALSHA_RO", || "state");
            script_sent("FCALL", || "a_new_operation");
            handed_over();
            woken(true);
            woken(false);
            woken(false);
            refused();
        });
        let counter = |n| DebugValue::Counter(n);
        let expected = [
            (
                key(
                    "redis_rwlock_acquisitions_total",
                    &["mode=upgradable", "outcome=timed_out"],
                ),
                counter(1),
            ),
            (
                key(
                    "redis_rwlock_acquisitions_total",
                    &["mode=write", "outcome=granted", "lock=inventory"],
                ),
                counter(1),
            ),
            (
                key(
                    "redis_rwlock_leases_lost_total",
                    &["mode=read", "cause=expired"],
                ),
                counter(1),
            ),
            (
                key(
                    "redis_rwlock_renewals_total",
                    &["outcome=error", "lock=inventory"],
                ),
                counter(1),
            ),
            (
                key(
                    "redis_rwlock_scripts_total",
                    &["path=evalsha", "script=state"],
                ),
                counter(1),
            ),
            (
                key(
                    "redis_rwlock_scripts_total",
                    &["path=fcall", "script=a_new_operation"],
                ),
                counter(1),
            ),
            (key("redis_rwlock_handovers_total", &[]), counter(1)),
            (
                key("redis_rwlock_wakeups_total", &["by=message"]),
                counter(1),
            ),
            (key("redis_rwlock_wakeups_total", &["by=timer"]), counter(2)),
            (key("redis_rwlock_refusals_total", &[]), counter(1)),
        ];
        for (key, value) in expected {
            assert_eq!(seen.get(&key), Some(&value), "{key:?} in {seen:#?}");
        }
        let samples = |name, labels: &[&str]| match seen.get(&key(name, labels)) {
            Some(DebugValue::Histogram(samples)) => samples.len(),
            None => 0,
            other => panic!("{name} {labels:?}: {other:?}"),
        };
        assert_eq!(
            samples("redis_rwlock_wait_seconds", &["mode=upgradable"]),
            0
        );
        assert_eq!(
            samples(
                "redis_rwlock_wait_seconds",
                &["mode=write", "lock=inventory"]
            ),
            1
        );
        assert_eq!(
            samples("redis_rwlock_hold_seconds", &["mode=upgradable"]),
            1
        );
        assert_eq!(samples("redis_rwlock_hold_seconds", &["mode=read"]), 1);
        for mode in ["mode=upgradable", "mode=read"] {
            let gauge = seen.get(&key("redis_rwlock_guards", &[mode]));
            assert_eq!(gauge, Some(&DebugValue::Gauge(0.0.into())), "{mode}");
        }
        let waiters = seen.get(&key("redis_rwlock_waiters", &["mode=upgradable"]));
        assert_eq!(waiters, Some(&DebugValue::Gauge(0.0.into())));
    }
}

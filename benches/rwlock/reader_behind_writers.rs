//! The `reader_behind_writers` scenario: a reader behind a continuous stream of
//! writers, the mirror image of `stream` (a writer behind readers). Four writers
//! loop without pause on one lock: `write()`, hold 5 ms, release, `write()` again,
//! so a writer always holds or waits. A reader asks for a read with a 3 s wait
//! limit, holds 1 ms, releases, pauses 50 ms, and asks again, 40 times (at most
//! for 10 s: a reader that is starved gives up after 3 s each time, and the run
//! would otherwise last two minutes). Measured: reads granted and timed out, the
//! reader's wait from asking to its grant (a timed-out read counts as its full
//! wait), and the writes completed per second while the reader asks.
//!
//! Three variants, each run of each implementation does all (their order
//! alternating from run to run): the writers on another client (instance) than the
//! reader, on the reader's own client, and on another client with the reader's
//! idle read holds kept (`keep_reads`, this crate only: the peers run as in the
//! first), so every writer's turn after a read first calls the kept hold back. For this crate the client decides what
//! a reader learns from its neighbours (its subscription, the refusals its other
//! waiters saw); for the peers, a client is a connection.
//!
//! Implementations with a read mode only: rslock is a mutex.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep};

use crate::locks::{Impl, Mode, Refused, Wait};
use crate::scenarios::{Bench, Exclusion, KEEP_READS, LONG_WAIT};
use crate::stats::percentile;

/// Writers looping on the lock.
pub const WRITERS: usize = 4;
/// How long each write hold lasts (the timer rounds it up to the next tick).
pub const WRITE_HOLD: Duration = Duration::from_millis(5);
/// How long each read hold lasts.
pub const READ_HOLD: Duration = Duration::from_millis(1);
/// The reader's pause between one read's end and its next request.
pub const READ_EVERY: Duration = Duration::from_millis(50);
/// How long a read may wait (the lock's `wait_timeout` for this crate).
pub const READ_WAIT: Duration = Duration::from_secs(3);
/// The reader asks no more after this long (a starved reader asks about 3 times).
pub const ASK_FOR: Duration = Duration::from_secs(10);
/// How long the writers run before the reader starts (queue and subscriptions settle).
const SETTLE: Duration = Duration::from_millis(300);

/// Metric names (per run).
pub mod metric {
    pub const ASKED: &str = "reads_asked";
    pub const GRANTED: &str = "reads_granted";
    pub const TIMED_OUT: &str = "reads_timed_out";
    /// Reads that ended in an error other than a timeout.
    pub const FAILED: &str = "reads_failed";
    pub const WAIT_P50: &str = "read_wait_p50";
    pub const WAIT_P99: &str = "read_wait_p99";
    pub const WAIT_MAX: &str = "read_wait_max";
    /// The run's first read (this crate: its client subscribes to the lock's
    /// channel on the way).
    pub const FIRST_WAIT: &str = "first_read_wait";
    /// Write holds granted while the reader asked, per second.
    pub const WRITES_PER_S: &str = "writes_per_s";
    pub const VIOLATIONS: &str = "violations";
}

/// Where the writers run, relative to the reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// On another client (another instance of the service).
    OtherClient,
    /// On the reader's own client.
    SameClient,
    /// On another client, the reader keeping its idle read holds.
    OtherKeeping,
}

impl Variant {
    pub const ALL: [Variant; 3] = [
        Variant::OtherClient,
        Variant::SameClient,
        Variant::OtherKeeping,
    ];

    /// The result file's scenario name.
    pub fn scenario(self) -> &'static str {
        match self {
            Variant::OtherClient => "reader_behind_writers_other_client",
            Variant::SameClient => "reader_behind_writers_same_client",
            Variant::OtherKeeping => "reader_behind_writers_kept_other_client",
        }
    }

    /// For the report.
    pub fn label(self) -> &'static str {
        match self {
            Variant::OtherClient => "writers on another client",
            Variant::SameClient => "writers on the reader's client",
            Variant::OtherKeeping => "writers on another client, reads kept",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Variant::OtherClient => "other",
            Variant::SameClient => "same",
            Variant::OtherKeeping => "kept",
        }
    }
}

/// What the writers share.
#[derive(Default)]
struct Writers {
    exclusion: Exclusion,
    /// True while the reader asks: grants are counted.
    counting: AtomicBool,
    writes: AtomicU64,
    failures: AtomicU64,
}

impl Bench {
    /// One run of one implementation in one variant (see the module's comment).
    pub async fn reader_behind_writers(&mut self, run: usize, imp: Impl, variant: Variant) {
        let scenario = variant.scenario();
        let name = self.name_on(run + 1, &format!("rbw-{}-{run}", variant.tag()));
        let instances = self.instances(2).await;
        let reader_clients = instances[0].clone();
        let writer_clients = match variant {
            Variant::OtherClient | Variant::OtherKeeping => match instances.get(1) {
                Some(other) => other.clone(),
                None => {
                    self.note(format!("{scenario}: no second client, skipped"));
                    return;
                }
            },
            Variant::SameClient => instances[0].clone(),
        };
        let reader_lock = match variant {
            Variant::OtherKeeping => reader_clients.kept_lock(imp, &name, READ_WAIT, KEEP_READS),
            _ => reader_clients.lock(imp, &name, READ_WAIT),
        };
        let writer_lock = writer_clients.lock(imp, &name, LONG_WAIT);
        let shared = Arc::new(Writers::default());
        let (stop, stopped) = watch::channel(false);
        let mut set = JoinSet::new();
        for _ in 0..WRITERS {
            let (clients, lock, shared, mut stopped) = (
                writer_clients.clone(),
                writer_lock.clone(),
                shared.clone(),
                stopped.clone(),
            );
            set.spawn(async move {
                loop {
                    let acquired = tokio::select! {
                        biased;
                        _ = stopped.wait_for(|stop| *stop) => break,
                        acquired = clients.acquire(&lock, Mode::Write, Wait::Upto(LONG_WAIT)) => acquired,
                    };
                    match acquired {
                        Ok(held) => {
                            if shared.counting.load(Ordering::SeqCst) {
                                shared.writes.fetch_add(1, Ordering::SeqCst);
                            }
                            shared.exclusion.enter(Mode::Write);
                            sleep(WRITE_HOLD).await;
                            shared.exclusion.leave(Mode::Write);
                            if clients.release(held).await.is_err() {
                                shared.failures.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(_) => {
                            shared.failures.fetch_add(1, Ordering::Relaxed);
                            sleep(Duration::from_millis(10)).await;
                        }
                    }
                }
            });
        }
        sleep(SETTLE).await;

        // The reader.
        let reads = self.cfg.reader_behind_writers_reads;
        let mut waits = Vec::with_capacity(reads);
        let (mut granted, mut timed_out, mut failed) = (0u64, 0u64, 0u64);
        let mut errors = Vec::new();
        shared.counting.store(true, Ordering::SeqCst);
        let opened = Instant::now();
        while waits.len() < reads && opened.elapsed() < ASK_FOR {
            let asked = Instant::now();
            let outcome = reader_clients
                .acquire(&reader_lock, Mode::Read, Wait::Upto(READ_WAIT))
                .await;
            let waited = asked.elapsed().as_secs_f64() * 1e3;
            match outcome {
                Ok(held) => {
                    waits.push(waited);
                    granted += 1;
                    shared.exclusion.enter(Mode::Read);
                    sleep(READ_HOLD).await;
                    shared.exclusion.leave(Mode::Read);
                    if let Err(err) = reader_clients.release(held).await {
                        errors.push(format!("release: {err}"));
                    }
                }
                Err(Refused::Timeout | Refused::WouldBlock) => {
                    waits.push(waited);
                    timed_out += 1;
                }
                Err(Refused::Failed(err)) => {
                    failed += 1;
                    errors.push(err);
                }
            }
            sleep(READ_EVERY).await;
        }
        shared.counting.store(false, Ordering::SeqCst);
        let seconds = opened.elapsed().as_secs_f64();
        stop.send_replace(true);
        let ended = tokio::time::timeout(LONG_WAIT, async {
            while set.join_next().await.is_some() {}
        })
        .await;
        if ended.is_err() {
            set.abort_all();
            self.note(format!(
                "{}: {scenario}: writers did not stop within {LONG_WAIT:?}",
                imp.label()
            ));
        }
        let writer_failures = shared.failures.load(Ordering::Relaxed);
        if writer_failures > 0 {
            self.note(format!(
                "{}: {scenario}: {writer_failures} failed/timed-out write acquires or releases",
                imp.label()
            ));
        }
        if let Some(err) = errors.first() {
            self.note(format!(
                "{}: {scenario}: {} reader errors, the first: {err}",
                imp.label(),
                errors.len()
            ));
        }
        let asked = granted + timed_out + failed;
        let r = &mut self.results;
        r.samples
            .entry((scenario, imp))
            .or_default()
            .push(waits.clone());
        if let Some(&first) = waits.first() {
            r.record(scenario, imp, metric::FIRST_WAIT, "ms", first);
        }
        r.record(scenario, imp, metric::ASKED, "count", asked as f64);
        r.record(scenario, imp, metric::GRANTED, "count", granted as f64);
        r.record(scenario, imp, metric::TIMED_OUT, "count", timed_out as f64);
        r.record(scenario, imp, metric::FAILED, "count", failed as f64);
        r.record(
            scenario,
            imp,
            metric::WAIT_P50,
            "ms",
            percentile(&mut waits, 50.0),
        );
        r.record(
            scenario,
            imp,
            metric::WAIT_P99,
            "ms",
            percentile(&mut waits, 99.0),
        );
        r.record(
            scenario,
            imp,
            metric::WAIT_MAX,
            "ms",
            percentile(&mut waits, 100.0),
        );
        r.record(
            scenario,
            imp,
            metric::WRITES_PER_S,
            "1/s",
            shared.writes.load(Ordering::SeqCst) as f64 / seconds,
        );
        r.record(
            scenario,
            imp,
            metric::VIOLATIONS,
            "count",
            shared.exclusion.violations() as f64,
        );
    }
}

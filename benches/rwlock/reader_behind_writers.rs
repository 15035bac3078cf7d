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

use std::time::Duration;

use tokio::time::{Instant, sleep};

use crate::locks::{Impl, Mode, Refused, Wait};
use crate::scenarios::{Bench, KEEP_READS, LONG_WAIT, Loopers};

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
}

impl Bench {
    /// One run of one implementation in one variant (see the module's comment).
    /// Per run: reads asked, granted, timed out and failed; the reader's wait p50,
    /// p99, max and the first read's (this crate's client subscribes to the lock's
    /// channel on the way); write holds granted per second while the reader asked.
    pub async fn reader_behind_writers(&mut self, run: usize, imp: Impl, variant: Variant) {
        let scenario = variant.scenario();
        let name = self.name_on(run + 1, &format!("rbw-{variant:?}-{run}"));
        let instances = self.instances(2).await;
        let reader = instances[0].clone();
        let writers = match (variant, instances.get(1)) {
            (Variant::SameClient, _) => reader.clone(),
            (_, Some(other)) => other.clone(),
            (_, None) => {
                self.note(format!("{scenario}: no second client, skipped"));
                return;
            }
        };
        let keep = (variant == Variant::OtherKeeping).then_some(KEEP_READS);
        let reader_lock = reader.lock_with(imp, &name, READ_WAIT, keep);
        let writer_lock = writers.lock(imp, &name, LONG_WAIT);
        let loopers = Loopers::start(&writers, &writer_lock, WRITERS, 100, WRITE_HOLD, run);
        sleep(SETTLE).await;

        let reads = self.cfg.reader_behind_writers_reads;
        let mut waits = Vec::with_capacity(reads);
        let (mut granted, mut timed_out, mut failed) = (0u64, 0u64, 0u64);
        let mut errors = Vec::new();
        loopers.count(true);
        let opened = Instant::now();
        while waits.len() < reads && opened.elapsed() < ASK_FOR {
            let asked = Instant::now();
            let outcome = reader
                .acquire(&reader_lock, Mode::Read, Wait::Upto(READ_WAIT))
                .await;
            let waited = asked.elapsed().as_secs_f64() * 1e3;
            match outcome {
                Ok(held) => {
                    waits.push(waited);
                    granted += 1;
                    loopers.exclusion().enter(Mode::Read);
                    sleep(READ_HOLD).await;
                    loopers.exclusion().leave(Mode::Read);
                    if let Err(err) = reader.release(held).await {
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
        loopers.count(false);
        let seconds = opened.elapsed().as_secs_f64();
        let (writes, violations) = (loopers.granted(), loopers.violations());
        match loopers.stop().await {
            Ok(0) => {}
            Ok(failures) => self.note(format!(
                "{}: {scenario}: {failures} failed/timed-out write acquires or releases",
                imp.label()
            )),
            Err(err) => self.note(format!("{}: {scenario}: writers: {err}", imp.label())),
        }
        if let Some(err) = errors.first() {
            self.note(format!(
                "{}: {scenario}: {} reader errors, the first: {err}",
                imp.label(),
                errors.len()
            ));
        }
        let samples = self.results.samples.entry((scenario, imp)).or_default();
        samples.push(waits.clone());
        let mut r = self.results.of(scenario, imp);
        if let Some(&first) = waits.first() {
            r.put("first_read_wait", "ms", first);
        }
        r.put(
            "reads_asked",
            "count",
            (granted + timed_out + failed) as f64,
        );
        r.put("reads_granted", "count", granted as f64);
        r.put("reads_timed_out", "count", timed_out as f64);
        r.put("reads_failed", "count", failed as f64);
        r.percentiles("read_wait", "ms", &mut waits, &[50, 99, 100]);
        r.put("writes_per_s", "1/s", writes as f64 / seconds);
        r.put("violations", "count", violations as f64);
    }
}

//! The read-heavy mix: many tasks, 95% reads / 5% writes, holds of one
//! `yield_now`, on one lock or spread over 64. Its throughput runs (against every
//! read-write implementation, `INFO commandstats` around them) and, for this crate,
//! a pass that sorts the scripts one acquisition costs by kind with MONITOR: read
//! attempts per read, write attempts per write, releases, and what else.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep};

use crate::cluster::{delta, monitor_during};
use crate::locks::{Clients, Impl, Lock, Mode, Wait};
use crate::scenarios::{
    Bench, Exclusion, LONG_WAIT, TASKS, WRITE_PERCENT, names::READ_HEAVY_SCRIPTS,
};

/// Metric names of the MONITOR pass (per acquisition unless said otherwise).
pub mod metric {
    /// Every script call.
    pub const SCRIPTS: &str = "scripts_per_acquisition";
    /// Read acquire calls per read acquisition (1: never refused).
    pub const READ_ATTEMPTS: &str = "read_attempts_per_read";
    /// Write acquire calls per write acquisition (a hand-over needs none after the
    /// refused one that queued it).
    pub const WRITE_ATTEMPTS: &str = "write_attempts_per_write";
    /// Refused read attempts, per acquisition of either kind.
    pub const REFUSED_READS: &str = "refused_reads_per_acquisition";
    /// Write attempts beyond one per write, per acquisition of either kind.
    pub const EXTRA_WRITES: &str = "extra_write_attempts_per_acquisition";
    pub const RELEASES: &str = "releases_per_acquisition";
    /// Any other script (renewals...).
    pub const OTHER: &str = "other_scripts_per_acquisition";
}

/// What one run of the mix did.
struct Mix {
    /// Acquisitions granted before the end of the run's time.
    in_window: u64,
    /// Every acquisition that completed, by mode (also those granted after the end).
    reads: u64,
    writes: u64,
    failures: u64,
    violations: u64,
}

/// Runs the mix: `tasks` tasks, each taking a random lock of `locks` in a random
/// mode, holding it for one `yield_now`, for `seconds`.
async fn run_mix(
    clients: &Arc<Clients>,
    run: usize,
    tasks: usize,
    locks: Arc<Vec<(Lock, Exclusion)>>,
    seconds: f64,
) -> Mix {
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let in_window = Arc::new(AtomicU64::new(0));
    let by_mode = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let failures = Arc::new(AtomicU64::new(0));
    let mut set = JoinSet::new();
    for task in 0..tasks {
        let clients = clients.clone();
        let locks = locks.clone();
        let (in_window, by_mode, failures) = (in_window.clone(), by_mode.clone(), failures.clone());
        set.spawn(async move {
            // Deterministic per run and task; each task its own, no locking.
            let mut rng = SmallRng::seed_from_u64((run * 1000 + task) as u64);
            while Instant::now() < end {
                let (lock, exclusion) = &locks[rng.random_range(0..locks.len())];
                let mode = if rng.random_range(0..100) < WRITE_PERCENT {
                    Mode::Write
                } else {
                    Mode::Read
                };
                match clients.acquire(lock, mode, Wait::Upto(LONG_WAIT)).await {
                    Ok(held) => {
                        let granted = Instant::now();
                        exclusion.enter(mode);
                        tokio::task::yield_now().await;
                        exclusion.leave(mode);
                        if clients.release(held).await.is_err() {
                            failures.fetch_add(1, Ordering::Relaxed);
                        }
                        by_mode[usize::from(mode == Mode::Write)].fetch_add(1, Ordering::Relaxed);
                        if granted < end {
                            in_window.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(_) => {
                        failures.fetch_add(1, Ordering::Relaxed);
                        sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        });
    }
    while set.join_next().await.is_some() {}
    Mix {
        in_window: in_window.load(Ordering::Relaxed),
        reads: by_mode[0].load(Ordering::Relaxed),
        writes: by_mode[1].load(Ordering::Relaxed),
        failures: failures.load(Ordering::Relaxed),
        violations: locks.iter().map(|(_, e)| e.violations()).sum(),
    }
}

impl Bench {
    /// The lock names of the read-heavy scenario: one lock on master 0, or 64 spread
    /// round robin over the masters.
    fn read_heavy_names(&self, run: usize, locks: usize, tag: &str) -> Vec<String> {
        if locks == 1 {
            vec![self.name_on(0, &format!("{tag}-{run}"))]
        } else {
            self.topology.names_spread(&format!("{tag}-{run}"), locks)
        }
    }

    /// `imp`'s locks of those names, each with its exclusion checker.
    fn read_heavy_locks(&self, imp: Impl, names: &[String]) -> Arc<Vec<(Lock, Exclusion)>> {
        let locks = names
            .iter()
            .map(|n| (self.clients.lock(imp, n, LONG_WAIT), Exclusion::default()))
            .collect();
        Arc::new(locks)
    }

    /// `tasks` tasks, 95% reads / 5% writes, holds of one `yield_now`, on `locks`
    /// locks (a random one per operation). Returns acquisitions per second.
    pub async fn read_heavy(
        &mut self,
        run: usize,
        imp: Impl,
        tasks: usize,
        locks: usize,
        seconds: f64,
        scenario: Option<&'static str>,
    ) -> f64 {
        let tag = format!("rh{locks}x{tasks}");
        let names = self.read_heavy_names(run, locks, &tag);
        let locks = self.read_heavy_locks(imp, &names);
        let before = self.masters.commandstats().await.ok();
        let mix = run_mix(&self.clients, run, tasks, locks, seconds).await;
        let after = self.masters.commandstats().await.ok();
        let (acquired, failures, violations) = (mix.in_window, mix.failures, mix.violations);
        let rate = acquired as f64 / seconds;
        if failures > 0 {
            self.note(format!(
                "{}: {failures} failed/timed-out acquires or releases in read-heavy ({} locks, {tasks} tasks)",
                imp.label(),
                names.len()
            ));
        }
        if let Some(scenario) = scenario {
            let r = &mut self.results;
            r.record(scenario, imp, "acquisitions_per_s", "1/s", rate);
            r.record(scenario, imp, "violations", "count", violations as f64);
            if let (Some(before), Some(after)) = (before, after) {
                let d = delta(&before, &after);
                if d.scripts > 0 {
                    r.record(
                        scenario,
                        imp,
                        "server_us_per_script",
                        "us",
                        d.script_usec as f64 / d.scripts as f64,
                    );
                    r.record(
                        scenario,
                        imp,
                        "scripts_per_acquisition",
                        "count",
                        d.scripts as f64 / (acquired.max(1)) as f64,
                    );
                }
                r.record(
                    scenario,
                    imp,
                    "subscriptions_per_acquisition",
                    "count",
                    d.subscriptions as f64 / (acquired.max(1)) as f64,
                );
            }
        }
        rate
    }

    /// This crate's scripts per acquisition in the one-lock mix, sorted by kind:
    /// the same run as the throughput's, watched with MONITOR on every master
    /// (which slows the server: this pass measures counts, not speed).
    pub async fn read_heavy_scripts(&mut self, run: usize, seconds: f64) {
        let imp = Impl::Ours;
        let names = self.read_heavy_names(run, 1, "rh-scripts");
        let locks = self.read_heavy_locks(imp, &names);
        let work = run_mix(&self.clients, run, TASKS, locks, seconds);
        let (sent, mix) = match monitor_during(&self.topology, &mut self.masters, work).await {
            Ok(watched) => watched,
            Err(err) => {
                self.note(format!("read-heavy scripts by kind: {err}"));
                return;
            }
        };
        if mix.failures > 0 || mix.violations > 0 {
            self.note(format!(
                "read-heavy scripts by kind: {} failures, {} violations",
                mix.failures, mix.violations
            ));
        }
        let acquisitions = (mix.reads + mix.writes).max(1) as f64;
        let (read_calls, write_calls) = (sent.calls("acquire_read"), sent.calls("acquire_write"));
        let releases = sent.calls("release");
        let other = sent.scripts - read_calls - write_calls - releases;
        let r = &mut self.results;
        let mut record = |metric: &'static str, value: f64| {
            r.record(READ_HEAVY_SCRIPTS, imp, metric, "count", value);
        };
        record(metric::SCRIPTS, sent.scripts as f64 / acquisitions);
        record(
            metric::READ_ATTEMPTS,
            read_calls as f64 / mix.reads.max(1) as f64,
        );
        record(
            metric::WRITE_ATTEMPTS,
            write_calls as f64 / mix.writes.max(1) as f64,
        );
        record(
            metric::REFUSED_READS,
            read_calls.saturating_sub(mix.reads) as f64 / acquisitions,
        );
        record(
            metric::EXTRA_WRITES,
            write_calls.saturating_sub(mix.writes) as f64 / acquisitions,
        );
        record(metric::RELEASES, releases as f64 / acquisitions);
        record(metric::OTHER, other as f64 / acquisitions);
    }
}

//! The read-heavy mix: many tasks, 95% reads / 5% writes, holds of one
//! `yield_now`, on one lock or spread over 64. Its throughput runs (against every
//! read-write implementation, `INFO commandstats` around them) and, for this crate,
//! a pass that sorts the scripts one acquisition costs by kind with MONITOR: read
//! attempts per read, write attempts per write, releases, and what else. Both also
//! run on one lock from 3 clients (3 instances of a service: the tasks dealt out
//! round robin), where readers of one client cannot learn from another's refusal.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep};

use crate::cluster::monitor_during;
use crate::locks::{Clients, Impl, Lock, Mode, Wait};
use crate::scenarios::{Bench, Exclusion, LONG_WAIT, TASKS, WRITE_PERCENT};

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

/// The locks of one run of the mix: each lock as every client names it (one
/// `Lock` per client, all on the same key), with one exclusion checker per lock.
struct MixLocks {
    /// `by_client[c][l]`: lock `l` as client `c` names it.
    by_client: Vec<Vec<Lock>>,
    exclusion: Vec<Exclusion>,
}

/// Runs the mix: `tasks` tasks, each taking a random lock of `locks` in a random
/// mode, holding it for one `yield_now`, for `seconds`. Task `i` uses client
/// `i % instances.len()`.
async fn run_mix(
    instances: &[Arc<Clients>],
    run: usize,
    tasks: usize,
    locks: Arc<MixLocks>,
    seconds: f64,
) -> Mix {
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let in_window = Arc::new(AtomicU64::new(0));
    let by_mode = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let failures = Arc::new(AtomicU64::new(0));
    let mut set = JoinSet::new();
    for task in 0..tasks {
        let client = task % instances.len();
        let clients = instances[client].clone();
        let locks = locks.clone();
        let (in_window, by_mode, failures) = (in_window.clone(), by_mode.clone(), failures.clone());
        set.spawn(async move {
            // Deterministic per run and task; each task its own, no locking.
            let mut rng = SmallRng::seed_from_u64((run * 1000 + task) as u64);
            let mine = &locks.by_client[client];
            while Instant::now() < end {
                let index = rng.random_range(0..mine.len());
                let (lock, exclusion) = (&mine[index], &locks.exclusion[index]);
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
        violations: locks.exclusion.iter().map(Exclusion::violations).sum(),
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

    /// `imp`'s locks of those names as each of `instances` names them, each lock
    /// with its exclusion checker.
    /// With `keep`, this crate's locks keep their idle read holds that long.
    fn read_heavy_locks(
        imp: Impl,
        names: &[String],
        instances: &[Arc<Clients>],
        keep: Option<Duration>,
    ) -> Arc<MixLocks> {
        let lock = |clients: &Clients, name: &str| clients.lock_with(imp, name, LONG_WAIT, keep);
        Arc::new(MixLocks {
            by_client: instances
                .iter()
                .map(|clients| names.iter().map(|n| lock(clients, n)).collect())
                .collect(),
            exclusion: names.iter().map(|_| Exclusion::default()).collect(),
        })
    }

    /// `tasks` tasks, 95% reads / 5% writes, holds of one `yield_now`, on `locks`
    /// locks (a random one per operation), from `clients` clients (instances);
    /// with `keep`, this crate's idle read holds are kept that long.
    /// Returns acquisitions per second.
    #[allow(clippy::too_many_arguments)]
    pub async fn read_heavy(
        &mut self,
        run: usize,
        imp: Impl,
        tasks: usize,
        locks: usize,
        clients: usize,
        seconds: f64,
        scenario: Option<&'static str>,
        keep: Option<Duration>,
    ) -> f64 {
        let kept = if keep.is_some() { "k" } else { "" };
        let tag = if clients == 1 {
            format!("rh{locks}x{tasks}{kept}")
        } else {
            format!("rh{locks}x{tasks}c{clients}{kept}")
        };
        let names = self.read_heavy_names(run, locks, &tag);
        let instances = self.instances(clients).await;
        let locks = Self::read_heavy_locks(imp, &names, &instances, keep);
        let before = self.masters.total().await;
        let mix = run_mix(&instances, run, tasks, locks, seconds).await;
        let after = self.masters.total().await;
        let rate = mix.in_window as f64 / seconds;
        if mix.failures > 0 {
            self.note(format!(
                "{}: {} failed/timed-out acquires or releases in read-heavy ({} locks, {tasks} tasks, {} clients)",
                imp.label(),
                mix.failures,
                names.len(),
                instances.len()
            ));
        }
        let Some(scenario) = scenario else {
            return rate;
        };
        let mut r = self.results.of(scenario, imp);
        r.put("acquisitions_per_s", "1/s", rate);
        r.put("violations", "count", mix.violations as f64);
        if let (Ok(before), Ok(after)) = (before, after) {
            // Every master's: the mix spreads its locks over them.
            let d = after.since(&before);
            let acquired = mix.in_window.max(1) as f64;
            r.put("cpu_us_per_acquisition", "us", d.cpu_us / acquired);
            if d.scripts > 0 {
                r.put("server_us_per_script", "us", d.us_per_script());
                r.put(
                    "scripts_per_acquisition",
                    "count",
                    d.scripts as f64 / acquired,
                );
            }
            r.put(
                "subscriptions_per_acquisition",
                "count",
                d.subscriptions as f64 / acquired,
            );
        }
        rate
    }

    /// This crate's scripts per acquisition in the one-lock mix, sorted by kind:
    /// the same run as the throughput's, from `clients` clients, watched with
    /// MONITOR on every master (which slows the server: this pass measures counts,
    /// not speed). Recorded under `scenario`.
    pub async fn read_heavy_scripts(
        &mut self,
        run: usize,
        seconds: f64,
        clients: usize,
        locks: usize,
        keep: Option<Duration>,
        scenario: &'static str,
    ) {
        let imp = Impl::Ours;
        let kept = if keep.is_some() { "k" } else { "" };
        let tag = format!("rh-scripts-c{clients}x{locks}{kept}");
        let names = self.read_heavy_names(run, locks, &tag);
        let instances = self.instances(clients).await;
        let locks = Self::read_heavy_locks(imp, &names, &instances, keep);
        let work = run_mix(&instances, run, TASKS, locks, seconds);
        let (sent, mix) = match monitor_during(&self.topology, &mut self.masters, work).await {
            Ok(watched) => watched,
            Err(err) => {
                self.note(format!("read-heavy scripts by kind ({scenario}): {err}"));
                return;
            }
        };
        if mix.failures > 0 || mix.violations > 0 {
            self.note(format!(
                "read-heavy scripts by kind ({scenario}): {} failures, {} violations",
                mix.failures, mix.violations
            ));
        }
        let acquisitions = (mix.reads + mix.writes).max(1) as f64;
        let (read_calls, write_calls) = (sent.calls("acquire_read"), sent.calls("acquire_write"));
        let releases = sent.calls("release");
        let other = sent.scripts - read_calls - write_calls - releases;
        // Per acquisition unless said otherwise. "Refused reads" are the read
        // attempts beyond one per read, per acquisition of either kind.
        let (reads, writes) = (mix.reads.max(1) as f64, mix.writes.max(1) as f64);
        let extra_reads = read_calls.saturating_sub(mix.reads) as f64;
        let extra_writes = write_calls.saturating_sub(mix.writes) as f64;
        let mut r = self.results.of(scenario, imp);
        for (metric, value) in [
            (
                "scripts_per_acquisition",
                sent.scripts as f64 / acquisitions,
            ),
            ("read_attempts_per_read", read_calls as f64 / reads),
            ("extra_read_attempts_per_read", extra_reads / reads),
            ("write_attempts_per_write", write_calls as f64 / writes),
            ("refused_reads_per_acquisition", extra_reads / acquisitions),
            (
                "extra_write_attempts_per_acquisition",
                extra_writes / acquisitions,
            ),
            ("releases_per_acquisition", releases as f64 / acquisitions),
            ("scripts_per_write", sent.scripts as f64 / writes),
            ("other_scripts_per_acquisition", other as f64 / acquisitions),
        ] {
            r.put(metric, "count", value);
        }
    }
}

//! Contention: what one acquisition costs the server as the tasks on one lock
//! grow, for this crate and the original design (which polls every 30 ms while it
//! waits). Two families, each a `BENCH_SCENARIOS` name:
//!
//! - `contention_writers`: 2, 16 and 64 tasks take the write lock of one lock in a
//!   loop;
//! - `contention_readers`: 8, 64 and 256 tasks on one lock, 98% reads / 2% writes.
//!
//! Each hold is `sleep(1 ms)` (about 2 ms: the timer's tick). The tasks run for
//! `contention_settle_secs` first (queues, subscriptions and polling reach their
//! steady state); then every master's main-thread CPU and `INFO commandstats` are
//! read before and after a window of `contention_secs`, and the acquisitions
//! granted inside the window are counted. Then the tasks stop: a waiting acquire
//! is dropped (this crate withdraws it; the original design just stops polling).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep};

use crate::cluster::ServerCounters;
use crate::locks::{Impl, Mode, Wait};
use crate::scenarios::{Bench, Exclusion, LONG_WAIT, secs};

/// How long each hold lasts.
pub const CONTENTION_HOLD: Duration = Duration::from_millis(1);
/// Writes among the read-heavy family's acquisitions, percent.
pub const CONTENTION_WRITE_PERCENT: u64 = 2;

/// Metric names of the contention scenarios, per size.
pub mod metric {
    pub const ACQ_PER_S: &str = "acquisitions_per_s";
    /// Main-thread CPU per acquisition on the lock's master.
    pub const CPU: &str = "cpu_us_per_acq";
    /// The same summed over every master.
    pub const CPU_ALL: &str = "cpu_us_per_acq_all_masters";
    /// Every `INFO commandstats` row (scripts and the commands they ran), lock's master.
    pub const COMMANDS: &str = "commands_per_acq";
    pub const COMMANDS_ALL: &str = "commands_per_acq_all_masters";
    /// EVAL*/FCALL* rows only, lock's master.
    pub const SCRIPTS: &str = "scripts_per_acq";
    pub const SCRIPT_US: &str = "script_us_per_acq";
    pub const VIOLATIONS: &str = "violations";
}

/// One family of contention scenarios.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Writers,
    Readers,
}

impl Family {
    pub const ALL: [Family; 2] = [Family::Writers, Family::Readers];
    /// The implementations compared.
    pub const IMPLS: [Impl; 2] = [Impl::Ours, Impl::Original];

    /// Its `BENCH_SCENARIOS` name.
    pub fn id(self) -> &'static str {
        match self {
            Family::Writers => "contention_writers",
            Family::Readers => "contention_readers",
        }
    }

    /// Task counts, smallest first.
    pub fn sizes(self) -> [usize; 3] {
        match self {
            Family::Writers => [2, 16, 64],
            Family::Readers => [8, 64, 256],
        }
    }

    /// The result file's scenario name of size `index`.
    pub fn scenario(self, index: usize) -> &'static str {
        let names = match self {
            Family::Writers => [
                "contention_writers_2",
                "contention_writers_16",
                "contention_writers_64",
            ],
            Family::Readers => [
                "contention_readers_8",
                "contention_readers_64",
                "contention_readers_256",
            ],
        };
        names[index]
    }

    /// Writes among the acquisitions, percent.
    pub fn write_percent(self) -> u64 {
        match self {
            Family::Writers => 100,
            Family::Readers => CONTENTION_WRITE_PERCENT,
        }
    }

    /// What runs, for the report.
    pub fn title(self) -> String {
        match self {
            Family::Writers => "writers on one lock".to_owned(),
            Family::Readers => format!(
                "read-heavy on one lock ({}% reads / {CONTENTION_WRITE_PERCENT}% writes)",
                100 - CONTENTION_WRITE_PERCENT
            ),
        }
    }
}

/// What every task of one measurement shares.
struct Shared {
    exclusion: Exclusion,
    /// True while the window is open: grants are counted.
    counting: AtomicBool,
    acquired: AtomicU64,
    failures: AtomicU64,
}

impl Bench {
    /// One size of one family, one implementation: tasks on one lock of master 0.
    pub async fn contention(&mut self, run: usize, imp: Impl, family: Family, index: usize) {
        let tasks = family.sizes()[index];
        let scenario = family.scenario(index);
        let name = self.name_on(0, &format!("{}-{run}", scenario.replace('_', "-")));
        let lock = self.clients.lock(imp, &name, LONG_WAIT);
        let master = self.topology.master_of(lock.key());
        let shared = Arc::new(Shared {
            exclusion: Exclusion::default(),
            counting: AtomicBool::new(false),
            acquired: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        });
        let (stop, stopped) = watch::channel(false);
        let mut set = JoinSet::new();
        for task in 0..tasks {
            let (clients, lock, shared, mut stopped) = (
                self.clients.clone(),
                lock.clone(),
                shared.clone(),
                stopped.clone(),
            );
            set.spawn(async move {
                let mut rng = SmallRng::seed_from_u64((run * 1000 + task) as u64);
                loop {
                    let mode = if rng.random_range(0..100) < family.write_percent() {
                        Mode::Write
                    } else {
                        Mode::Read
                    };
                    let acquired = tokio::select! {
                        biased;
                        _ = stopped.wait_for(|stop| *stop) => break,
                        acquired = clients.acquire(&lock, mode, Wait::Upto(LONG_WAIT)) => acquired,
                    };
                    match acquired {
                        Ok(held) => {
                            if shared.counting.load(Ordering::SeqCst) {
                                shared.acquired.fetch_add(1, Ordering::SeqCst);
                            }
                            shared.exclusion.enter(mode);
                            sleep(CONTENTION_HOLD).await;
                            shared.exclusion.leave(mode);
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
        sleep(secs(self.cfg.contention_settle_secs)).await;
        let before = self.masters.server_costs().await;
        shared.counting.store(true, Ordering::SeqCst);
        let opened = Instant::now();
        sleep(secs(self.cfg.contention_secs)).await;
        shared.counting.store(false, Ordering::SeqCst);
        let seconds = opened.elapsed().as_secs_f64();
        let after = self.masters.server_costs().await;
        stop.send_replace(true);
        let stopped = tokio::time::timeout(LONG_WAIT, async {
            while set.join_next().await.is_some() {}
        })
        .await;
        if stopped.is_err() {
            set.abort_all();
            self.note(format!(
                "{}: {scenario}: tasks did not stop within {LONG_WAIT:?}",
                imp.label()
            ));
        }
        let failures = shared.failures.load(Ordering::Relaxed);
        if failures > 0 {
            self.note(format!(
                "{}: {failures} failed/timed-out acquires or releases in {scenario}",
                imp.label()
            ));
        }
        let acquired = shared.acquired.load(Ordering::SeqCst);
        let r = &mut self.results;
        r.record(
            scenario,
            imp,
            metric::ACQ_PER_S,
            "1/s",
            acquired as f64 / seconds,
        );
        r.record(
            scenario,
            imp,
            metric::VIOLATIONS,
            "count",
            shared.exclusion.violations() as f64,
        );
        let (Ok(before), Ok(after)) = (before, after) else {
            self.note(format!("{scenario}: INFO on a master failed"));
            return;
        };
        if acquired == 0 {
            self.note(format!(
                "{}: {scenario}: no acquisition in the window",
                imp.label()
            ));
            return;
        }
        let on_master = after[master].since(&before[master]);
        let all = ServerCounters::sum(&after).since(&ServerCounters::sum(&before));
        let per = |v: f64| v / acquired as f64;
        for (name, unit, value) in [
            (metric::CPU, "us", on_master.cpu_us),
            (metric::CPU_ALL, "us", all.cpu_us),
            (metric::COMMANDS, "count", on_master.commands as f64),
            (metric::COMMANDS_ALL, "count", all.commands as f64),
            (metric::SCRIPTS, "count", on_master.scripts as f64),
            (metric::SCRIPT_US, "us", on_master.script_usec as f64),
        ] {
            r.record(scenario, imp, name, unit, per(value));
        }
    }
}

//! Contention: what one acquisition costs the server as the tasks on one lock
//! grow, for this crate and the original design (which polls every 30 ms while it
//! waits). Two families, each a `BENCH_SCENARIOS` name:
//!
//! - `contention_writers`: 2, 16 and 64 tasks take the write lock of one lock in a
//!   loop;
//! - `contention_readers`: 8, 64 and 256 tasks on one lock, 98% reads / 2% writes.
//!   The same tasks also run on two locks with no Redis, to show what the order
//!   itself allows: `tokio::sync::RwLock` ([`Impl::InProcess`]) and this crate on
//!   its in-memory store ([`Impl::InMemory`]).
//!
//! Each hold is `sleep(1 ms)` (about 2 ms: the timer's tick). The tasks run for
//! `contention_settle_secs` first (queues, subscriptions and polling reach their
//! steady state); then every master's main-thread CPU and `INFO commandstats` are
//! read before and after a window of `contention_secs`, and the acquisitions
//! granted inside the window are counted. Then the tasks stop: a waiting acquire
//! is dropped (this crate withdraws it; the original design just stops polling).

use std::time::Duration;

use tokio::time::{Instant, sleep};

use crate::cluster::Counters;
use crate::locks::Impl;
use crate::scenarios::{Bench, LONG_WAIT, Loopers, secs};

/// How long each hold lasts.
pub const CONTENTION_HOLD: Duration = Duration::from_millis(1);
/// Writes among the read-heavy family's acquisitions, percent.
pub const CONTENTION_WRITE_PERCENT: u64 = 2;

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

    /// The implementations that run: [`Family::IMPLS`], and for the readers the
    /// two with no Redis.
    pub fn impls(self) -> Vec<Impl> {
        let mut impls = Family::IMPLS.to_vec();
        if self == Family::Readers {
            impls.extend(Impl::REFERENCES);
        }
        impls
    }

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

impl Bench {
    /// One size of one family, one implementation: tasks on one lock of master 0.
    /// Per acquisition granted in the window, on the lock's master: main-thread CPU
    /// (`cpu_us_per_acq`), commands (every `INFO commandstats` row: scripts and the
    /// commands they ran), scripts and script time; CPU and commands also summed
    /// over every master (`..._all_masters`).
    pub async fn contention(&mut self, run: usize, imp: Impl, family: Family, index: usize) {
        let tasks = family.sizes()[index];
        let scenario = family.scenario(index);
        let name = self.name_on(0, &format!("{}-{run}", scenario.replace('_', "-")));
        let lock = self.clients.lock(imp, &name, LONG_WAIT);
        let master = self.topology.master_of(lock.key());
        let hold = CONTENTION_HOLD;
        let loopers = Loopers::start(
            &self.clients,
            &lock,
            tasks,
            family.write_percent(),
            hold,
            run,
        );
        sleep(secs(self.cfg.contention_settle_secs)).await;
        let before = self.masters.all().await;
        loopers.count(true);
        let opened = Instant::now();
        sleep(secs(self.cfg.contention_secs)).await;
        loopers.count(false);
        let seconds = opened.elapsed().as_secs_f64();
        let after = self.masters.all().await;
        let (acquired, violations) = (loopers.granted(), loopers.violations());
        match loopers.stop().await {
            Ok(0) => {}
            Ok(failures) => self.note(format!(
                "{}: {failures} failed/timed-out acquires or releases in {scenario}",
                imp.label()
            )),
            Err(err) => self.note(format!("{}: {scenario}: {err}", imp.label())),
        }
        let mut r = self.results.of(scenario, imp);
        r.put("acquisitions_per_s", "1/s", acquired as f64 / seconds);
        r.put("violations", "count", violations as f64);
        if Impl::REFERENCES.contains(&imp) {
            // No server: nothing to read off the masters.
            return;
        }
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
        let all = Counters::sum(&after).since(&Counters::sum(&before));
        let per = |v: f64| v / acquired as f64;
        for (name, unit, value) in [
            ("cpu_us_per_acq", "us", on_master.cpu_us),
            ("cpu_us_per_acq_all_masters", "us", all.cpu_us),
            ("commands_per_acq", "count", on_master.commands as f64),
            ("commands_per_acq_all_masters", "count", all.commands as f64),
            ("scripts_per_acq", "count", on_master.scripts as f64),
            ("script_us_per_acq", "us", on_master.script_usec as f64),
        ] {
            r.put(name, unit, per(value));
        }
    }
}

//! The `upgradable` scenario: what an upgradable read costs against a plain read,
//! and how an upgrade gets the write hold. This crate only (the peers have no
//! upgradable mode). Three parts per run:
//!
//! - **uncontended cost**: `try_upgradable_read` + release against `try_read` +
//!   release on a lock of master 0, in alternating blocks (the first mode rotates
//!   with the run): latency per pair, and per acquisition the master's script time
//!   and main-thread CPU, read before and after each block as `server_cost` does;
//! - **an upgrade with no other reader**: `try_upgradable_read`, then `upgrade()`
//!   timed, interleaved with a timed `try_write`; then a shorter loop that reads
//!   every master's `INFO commandstats` around each `upgrade()` and `try_write`:
//!   the scripts and (un)subscribes each sends, and their server time;
//! - **an upgrade behind 1 and 8 readers**: the upgradable hold and the readers
//!   hold, `upgrade()` is called and refused (its mark `u:upgrade` appears in the
//!   lock's hash; the benchmark polls the hash with `HEXISTS`, not a script), then
//!   the readers release one by one. Measured: from the last reader's release
//!   (sent, and its reply received) to the upgrade's return, and the scripts the
//!   upgrader sent meanwhile (every master's `INFO commandstats` around the wait,
//!   less the readers' releases). Each iteration is followed by its control on the
//!   same lock: a writer queued behind a writer, the same steps (poll for `q:head`,
//!   release, time the waiter's return), so the two hand-overs are compared under
//!   the same load. The first iteration of each run subscribes to the lock's
//!   channel (it stays subscribed 5 s after its last waiter); it is counted apart.

use std::time::Duration;

use redis_rwlock::redis;
use redis_rwlock::{Error, LockOptions, RwLock};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::cluster::{ServerCounters, StatsDelta, delta};
use crate::locks::Impl;
use crate::scenarios::{Bench, LONG_WAIT};
use crate::stats::percentile;

/// Pairs per block in the uncontended part (the master's counters are read around
/// each block).
pub const COST_BLOCK: usize = 250;
/// Upgrades counted one by one with `INFO commandstats` around each.
pub const COUNTED_UPGRADES: usize = 100;
/// A hand-over this slow was the re-check timer's, not a wake-up's.
pub const SLOW_HAND_OVER: Duration = Duration::from_millis(250);
/// How long the benchmark waits for a waiter's mark to appear in the hash.
const MARK_WAIT: Duration = Duration::from_secs(5);

/// Result names of the scenario's parts.
pub mod names {
    pub const UPGRADABLE_COST: &str = "upgradable_uncontended";
    pub const UPGRADE_ALONE: &str = "upgrade_alone";
}
use names::*;

/// One upgrade-behind-readers case: its result name and how many readers hold.
pub struct Behind {
    pub scenario: &'static str,
    pub readers: usize,
}

impl Behind {
    /// "1 reader", "8 readers".
    pub fn label(&self) -> String {
        match self.readers {
            1 => "1 reader".to_owned(),
            n => format!("{n} readers"),
        }
    }
}

pub const BEHIND: [Behind; 2] = [
    Behind {
        scenario: "upgrade_behind_1_reader",
        readers: 1,
    },
    Behind {
        scenario: "upgrade_behind_8_readers",
        readers: 8,
    },
];

/// Metric names of the uncontended part, per mode.
pub struct PairNames {
    pub acquire_p50: &'static str,
    pub pair_p50: &'static str,
    pub pair_p99: &'static str,
    pub script_us: &'static str,
    pub scripts: &'static str,
    /// Scripts and the commands they ran (every `INFO commandstats` row but INFO).
    pub commands: &'static str,
    pub cpu_us: &'static str,
}

impl PairNames {
    pub const READ: PairNames = PairNames {
        acquire_p50: "read_acquire_p50",
        pair_p50: "read_pair_p50",
        pair_p99: "read_pair_p99",
        script_us: "read_script_us_per_acq",
        scripts: "read_scripts_per_acq",
        commands: "read_commands_per_acq",
        cpu_us: "read_cpu_us_per_acq",
    };
    pub const UPGRADABLE: PairNames = PairNames {
        acquire_p50: "upgradable_acquire_p50",
        pair_p50: "upgradable_pair_p50",
        pair_p99: "upgradable_pair_p99",
        script_us: "upgradable_script_us_per_acq",
        scripts: "upgradable_scripts_per_acq",
        commands: "upgradable_commands_per_acq",
        cpu_us: "upgradable_cpu_us_per_acq",
    };
}

/// Metric names of the other parts.
pub mod metric {
    /// `upgrade()` with no other reader, and the interleaved `try_write` (us).
    pub const UPGRADE_P50: &str = "upgrade_p50";
    pub const UPGRADE_P99: &str = "upgrade_p99";
    pub const TRY_WRITE_P50: &str = "try_write_p50";
    pub const TRY_WRITE_P99: &str = "try_write_p99";
    /// Scripts and (un)subscribes per upgrade, every master (mean, and the most).
    pub const SCRIPTS_PER_UPGRADE: &str = "scripts_per_upgrade";
    pub const SCRIPTS_PER_UPGRADE_MAX: &str = "scripts_per_upgrade_max";
    pub const SUBSCRIPTIONS_PER_UPGRADE: &str = "subscriptions_per_upgrade";
    /// Server time per script call of the upgrade, and of `try_write` (every
    /// master's commandstats around each call).
    pub const UPGRADE_SCRIPT_US: &str = "upgrade_script_us";
    pub const TRY_WRITE_SCRIPT_US: &str = "try_write_script_us";

    /// Behind readers (ms): from the last reader's release sent / its reply
    /// received to the upgrade's return; the same for the control writer.
    pub const GAP_SENT_P50: &str = "gap_from_release_sent_p50";
    pub const GAP_SENT_P99: &str = "gap_from_release_sent_p99";
    pub const GAP_REPLY_P50: &str = "gap_from_release_reply_p50";
    pub const GAP_REPLY_P99: &str = "gap_from_release_reply_p99";
    pub const WRITER_GAP_SENT_P50: &str = "writer_gap_from_release_sent_p50";
    pub const WRITER_GAP_SENT_P99: &str = "writer_gap_from_release_sent_p99";
    pub const WRITER_GAP_REPLY_P50: &str = "writer_gap_from_release_reply_p50";
    /// Scripts the waiter sent from its call to its return (mean, the most), after
    /// the first iteration; and in the first (it subscribes).
    pub const WAITING_SCRIPTS: &str = "scripts_while_waiting";
    pub const WAITING_SCRIPTS_MAX: &str = "scripts_while_waiting_max";
    pub const WRITER_WAITING_SCRIPTS: &str = "writer_scripts_while_waiting";
    pub const FIRST_WAIT_SCRIPTS: &str = "first_wait_scripts";
    /// Iterations in which the upgrader sent a second script: it re-checked, or it
    /// found the client's subscription lock busy (another channel being
    /// (un)subscribed) and subscribed before trying again.
    pub const SECOND_ATTEMPTS: &str = "second_attempts";
    /// Iterations whose upgrade returned [`super::SLOW_HAND_OVER`] or more after
    /// the last release was sent: only the re-check timer (0.5-1.1 s after the
    /// refusal) takes that long; a wake-up takes well under a millisecond.
    pub const TIMER_WAKEUPS: &str = "timer_wakeups";
    /// (Un)subscribes on every master during the waits (also another lock's
    /// channel ending its linger), per wait.
    pub const SUBSCRIPTIONS_PER_WAIT: &str = "subscriptions_per_wait";
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// `later - earlier` in ms, negative when `later` came first.
fn signed_ms(later: Instant, earlier: Instant) -> f64 {
    match later.checked_duration_since(earlier) {
        Some(d) => d.as_secs_f64() * 1e3,
        None => -(earlier - later).as_secs_f64() * 1e3,
    }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// One acquire + release; (acquire, acquire + release) in us.
async fn pair(lock: &RwLock, upgradable: bool) -> Result<(f64, f64), Error> {
    let t0 = Instant::now();
    let acquired = if upgradable {
        let guard = lock.try_upgradable_read().await?;
        let t1 = Instant::now();
        guard.release().await?;
        t1
    } else {
        let guard = lock.try_read().await?;
        let t1 = Instant::now();
        guard.release().await?;
        t1
    };
    Ok((us(acquired - t0), us(t0.elapsed())))
}

/// One hand-over to a waiter: the gaps (ms) from the release that let it in, and
/// what it sent while it waited.
struct HandOver {
    gap_sent: f64,
    gap_reply: f64,
    scripts: u64,
    subscriptions: u64,
}

/// The hand-overs of one run's iterations, waiter by waiter.
#[derive(Default)]
struct HandOvers {
    gap_sent: Vec<f64>,
    gap_reply: Vec<f64>,
    scripts: Vec<f64>,
    second_attempts: u64,
    timer_wakeups: u64,
    subscriptions: u64,
}

impl HandOvers {
    fn push(&mut self, h: HandOver) {
        self.gap_sent.push(h.gap_sent);
        self.gap_reply.push(h.gap_reply);
        self.scripts.push(h.scripts as f64);
        self.second_attempts += u64::from(h.scripts > 1);
        self.timer_wakeups += u64::from(h.gap_sent >= SLOW_HAND_OVER.as_secs_f64() * 1e3);
        self.subscriptions += h.subscriptions;
    }
}

impl Bench {
    /// The `upgradable` scenario, one run.
    pub async fn upgradable(&mut self, run: usize) {
        self.upgradable_cost(run).await;
        self.upgrade_alone(run).await;
        for behind in &BEHIND {
            self.upgrade_behind(run, behind).await;
        }
    }

    fn upgradable_lock(&self, master: usize, base: &str) -> RwLock {
        let name = self.name_on(master, base);
        self.clients
            .ours
            .rwlock_with(&name, LockOptions::default().wait_timeout(LONG_WAIT))
    }

    fn master_of_lock(&self, lock: &RwLock) -> usize {
        self.topology
            .master_of(lock.key().expect("the benchmark's lock names are valid"))
    }

    /// Uncontended `try_upgradable_read` + release against `try_read` + release.
    async fn upgradable_cost(&mut self, run: usize) {
        let lock = self.upgradable_lock(0, &format!("upcost-{run}"));
        let master = self.master_of_lock(&lock);
        for upgradable in [false, true] {
            for _ in 0..50 {
                let _ = pair(&lock, upgradable).await;
            }
        }
        let blocks = (self.cfg.server_cost_iters / COST_BLOCK).max(1);
        let mut acquire: [Vec<f64>; 2] = Default::default();
        let mut pairs: [Vec<f64>; 2] = Default::default();
        let mut counters = [ServerCounters::default(); 2];
        let mut done = [0u64; 2];
        let mut failures = 0u64;
        let mut info_failed = false;
        let mut before = self.masters.server_cost(master).await;
        for block in 0..2 * blocks {
            let m = (block + run) % 2;
            let mut completed = 0u64;
            for _ in 0..COST_BLOCK {
                match pair(&lock, m == 1).await {
                    Ok((a, p)) => {
                        acquire[m].push(a);
                        pairs[m].push(p);
                        completed += 1;
                    }
                    Err(_) => failures += 1,
                }
            }
            let after = self.masters.server_cost(master).await;
            match (&before, &after) {
                (Ok(b), Ok(a)) => {
                    counters[m] = ServerCounters::sum([&counters[m], &a.since(b)]);
                    done[m] += completed;
                }
                _ => info_failed = true,
            }
            before = after;
        }
        if failures > 0 {
            self.note(format!(
                "upgradable: {failures} uncontended acquires/releases failed"
            ));
        }
        if info_failed {
            self.note("upgradable: INFO on the lock's master failed".to_owned());
        }
        for (m, names) in [(0, PairNames::READ), (1, PairNames::UPGRADABLE)] {
            let per = |v: f64| {
                if done[m] == 0 {
                    f64::NAN
                } else {
                    v / done[m] as f64
                }
            };
            let c = counters[m];
            let r = &mut self.results;
            let s = UPGRADABLE_COST;
            r.record(
                s,
                Impl::Ours,
                names.acquire_p50,
                "us",
                percentile(&mut acquire[m], 50.0),
            );
            r.record(
                s,
                Impl::Ours,
                names.pair_p50,
                "us",
                percentile(&mut pairs[m], 50.0),
            );
            r.record(
                s,
                Impl::Ours,
                names.pair_p99,
                "us",
                percentile(&mut pairs[m], 99.0),
            );
            r.record(
                s,
                Impl::Ours,
                names.script_us,
                "us",
                per(c.script_usec as f64),
            );
            r.record(s, Impl::Ours, names.scripts, "", per(c.scripts as f64));
            r.record(s, Impl::Ours, names.commands, "", per(c.commands as f64));
            r.record(s, Impl::Ours, names.cpu_us, "us", per(c.cpu_us));
        }
    }

    /// `upgrade()` with no other reader, against `try_write`; then the scripts and
    /// (un)subscribes each upgrade sends.
    async fn upgrade_alone(&mut self, run: usize) {
        let lock = self.upgradable_lock(run, &format!("upalone-{run}"));
        let mut upgrades = Vec::new();
        let mut writes = Vec::new();
        let mut failures = 0u64;
        for i in 0..self.cfg.uncontended_iters + 20 {
            let t0 = Instant::now();
            match lock.try_write().await {
                Ok(guard) => {
                    let took = us(t0.elapsed());
                    if guard.release().await.is_err() {
                        failures += 1;
                    }
                    if i >= 20 {
                        writes.push(took);
                    }
                }
                Err(_) => failures += 1,
            }
            let upgraded = async {
                let guard = lock.try_upgradable_read().await?;
                let t0 = Instant::now();
                let writer = guard.upgrade().await?;
                let took = us(t0.elapsed());
                writer.release().await?;
                Ok::<f64, Error>(took)
            };
            match upgraded.await {
                Ok(took) if i >= 20 => upgrades.push(took),
                Ok(_) => {}
                Err(_) => failures += 1,
            }
        }
        let mut scripts = Vec::new();
        let mut subscriptions = 0u64;
        let mut upgrade_us = 0u64;
        let (mut write_us, mut write_scripts) = (0u64, 0u64);
        for _ in 0..COUNTED_UPGRADES {
            let (written, d) = self.counted(lock.try_write()).await;
            match written {
                Ok(writer) => {
                    if writer.release().await.is_err() {
                        failures += 1;
                    }
                }
                Err(_) => failures += 1,
            }
            if let Some(d) = d {
                write_us += d.script_usec;
                write_scripts += d.scripts;
            }
            let Ok(guard) = lock.try_upgradable_read().await else {
                failures += 1;
                continue;
            };
            let (upgraded, d) = self.counted(guard.upgrade()).await;
            match upgraded {
                Ok(writer) => {
                    if writer.release().await.is_err() {
                        failures += 1;
                    }
                }
                Err(_) => failures += 1,
            }
            if let Some(d) = d {
                scripts.push(d.scripts as f64);
                subscriptions += d.subscriptions;
                upgrade_us += d.script_usec;
            }
        }
        if failures > 0 {
            self.note(format!(
                "upgradable: {failures} uncontended upgrades or writes failed"
            ));
        }
        use metric::*;
        let r = &mut self.results;
        let s = UPGRADE_ALONE;
        r.record(
            s,
            Impl::Ours,
            UPGRADE_P50,
            "us",
            percentile(&mut upgrades, 50.0),
        );
        r.record(
            s,
            Impl::Ours,
            UPGRADE_P99,
            "us",
            percentile(&mut upgrades, 99.0),
        );
        r.record(
            s,
            Impl::Ours,
            TRY_WRITE_P50,
            "us",
            percentile(&mut writes, 50.0),
        );
        r.record(
            s,
            Impl::Ours,
            TRY_WRITE_P99,
            "us",
            percentile(&mut writes, 99.0),
        );
        if !scripts.is_empty() {
            let counted = scripts.len() as f64;
            r.record(s, Impl::Ours, SCRIPTS_PER_UPGRADE, "", mean(&scripts));
            r.record(
                s,
                Impl::Ours,
                SCRIPTS_PER_UPGRADE_MAX,
                "",
                percentile(&mut scripts, 100.0),
            );
            r.record(
                s,
                Impl::Ours,
                SUBSCRIPTIONS_PER_UPGRADE,
                "",
                subscriptions as f64 / counted,
            );
            let total: f64 = scripts.iter().sum();
            r.record(
                s,
                Impl::Ours,
                UPGRADE_SCRIPT_US,
                "us",
                upgrade_us as f64 / total,
            );
        }
        if write_scripts > 0 {
            r.record(
                s,
                Impl::Ours,
                TRY_WRITE_SCRIPT_US,
                "us",
                write_us as f64 / write_scripts as f64,
            );
        }
    }

    /// Upgrades behind `behind.readers` readers, each followed by its control (a
    /// writer queued behind a writer).
    async fn upgrade_behind(&mut self, run: usize, behind: &Behind) {
        let lock = self.upgradable_lock(run + 1, &format!("upbehind{}-{run}", behind.readers));
        let mut upgrades = HandOvers::default();
        let mut writers = HandOvers::default();
        let mut first = None;
        let mut errors = Vec::new();
        for i in 0..=self.cfg.upgrade_iters {
            match self.one_upgrade_behind(&lock, behind.readers).await {
                Ok(h) if i == 0 => first = Some(h.scripts as f64),
                Ok(h) => upgrades.push(h),
                Err(err) => errors.push(err),
            }
            match self.one_writer_behind(&lock).await {
                Ok(_) if i == 0 => {}
                Ok(h) => writers.push(h),
                Err(err) => errors.push(err),
            }
        }
        if let Some(err) = errors.first() {
            self.note(format!(
                "upgradable, behind {} readers: {} iterations failed, first: {err}",
                behind.readers,
                errors.len()
            ));
        }
        use metric::*;
        let s = behind.scenario;
        let r = &mut self.results;
        let mut record = |name, unit, v| r.record(s, Impl::Ours, name, unit, v);
        record(GAP_SENT_P50, "ms", percentile(&mut upgrades.gap_sent, 50.0));
        record(GAP_SENT_P99, "ms", percentile(&mut upgrades.gap_sent, 99.0));
        record(
            GAP_REPLY_P50,
            "ms",
            percentile(&mut upgrades.gap_reply, 50.0),
        );
        record(
            GAP_REPLY_P99,
            "ms",
            percentile(&mut upgrades.gap_reply, 99.0),
        );
        record(
            WRITER_GAP_SENT_P50,
            "ms",
            percentile(&mut writers.gap_sent, 50.0),
        );
        record(
            WRITER_GAP_SENT_P99,
            "ms",
            percentile(&mut writers.gap_sent, 99.0),
        );
        record(
            WRITER_GAP_REPLY_P50,
            "ms",
            percentile(&mut writers.gap_reply, 50.0),
        );
        if !upgrades.scripts.is_empty() {
            let n = upgrades.scripts.len() as f64;
            record(WAITING_SCRIPTS, "", mean(&upgrades.scripts));
            record(
                WAITING_SCRIPTS_MAX,
                "",
                percentile(&mut upgrades.scripts, 100.0),
            );
            record(SECOND_ATTEMPTS, "count", upgrades.second_attempts as f64);
            record(TIMER_WAKEUPS, "count", upgrades.timer_wakeups as f64);
            record(
                SUBSCRIPTIONS_PER_WAIT,
                "",
                upgrades.subscriptions as f64 / n,
            );
        }
        if !writers.scripts.is_empty() {
            record(WRITER_WAITING_SCRIPTS, "", mean(&writers.scripts));
        }
        if let Some(scripts) = first {
            record(FIRST_WAIT_SCRIPTS, "", scripts);
        }
    }

    /// The upgradable hold and `readers` readers hold; `upgrade()` is called and
    /// refused; the readers leave one by one.
    async fn one_upgrade_behind(
        &mut self,
        lock: &RwLock,
        readers: usize,
    ) -> Result<HandOver, String> {
        let text = |e: Error| e.to_string();
        let upgradable = lock.try_upgradable_read().await.map_err(text)?;
        let mut held = Vec::with_capacity(readers);
        for _ in 0..readers {
            held.push(lock.try_read().await.map_err(text)?);
        }
        let before = self.masters.commandstats().await?;
        let upgrader = tokio::spawn(async move {
            let upgraded = upgradable.upgrade().await;
            (Instant::now(), upgraded)
        });
        self.wait_for_mark(lock, "u:upgrade", &upgrader).await?;
        let mut last = (Instant::now(), Instant::now());
        for guard in held {
            let sent = Instant::now();
            guard.release().await.map_err(text)?;
            last = (sent, Instant::now());
        }
        let (returned, upgraded) = upgrader.await.map_err(|e| e.to_string())?;
        let after = self.masters.commandstats().await?;
        upgraded.map_err(text)?.release().await.map_err(text)?;
        let d = delta(&before, &after);
        Ok(HandOver {
            gap_sent: signed_ms(returned, last.0),
            gap_reply: signed_ms(returned, last.1),
            scripts: d.scripts.saturating_sub(readers as u64),
            subscriptions: d.subscriptions,
        })
    }

    /// The control: a writer holds, another asks with `write()` and is queued, the
    /// holder releases.
    async fn one_writer_behind(&mut self, lock: &RwLock) -> Result<HandOver, String> {
        let text = |e: Error| e.to_string();
        let holder = lock.try_write().await.map_err(text)?;
        let before = self.masters.commandstats().await?;
        let waiter = {
            let lock = lock.clone();
            tokio::spawn(async move {
                let granted = lock.write().await;
                (Instant::now(), granted)
            })
        };
        self.wait_for_mark(lock, "q:head", &waiter).await?;
        let sent = Instant::now();
        holder.release().await.map_err(text)?;
        let replied = Instant::now();
        let (returned, granted) = waiter.await.map_err(|e| e.to_string())?;
        let after = self.masters.commandstats().await?;
        granted.map_err(text)?.release().await.map_err(text)?;
        let d = delta(&before, &after);
        Ok(HandOver {
            gap_sent: signed_ms(returned, sent),
            gap_reply: signed_ms(returned, replied),
            scripts: d.scripts.saturating_sub(1),
            subscriptions: d.subscriptions,
        })
    }

    /// Runs `call` between two reads of every master's `INFO commandstats`; what
    /// the masters did meanwhile (`None` if INFO failed).
    async fn counted<T>(&mut self, call: impl Future<Output = T>) -> (T, Option<StatsDelta>) {
        let before = self.masters.commandstats().await;
        let out = call.await;
        let after = self.masters.commandstats().await;
        let d = match (before, after) {
            (Ok(before), Ok(after)) => Some(delta(&before, &after)),
            _ => None,
        };
        (out, d)
    }

    /// Polls the lock's hash (`HEXISTS`, a plain command on the lock's master) until
    /// `field` shows the waiter was refused and is waiting.
    async fn wait_for_mark<T>(
        &mut self,
        lock: &RwLock,
        field: &str,
        waiter: &JoinHandle<T>,
    ) -> Result<(), String> {
        let key = lock.key().map_err(|e| e.to_string())?.to_owned();
        let master = self.topology.master_of(&key);
        let started = Instant::now();
        loop {
            let marked: i64 = self
                .masters
                .query(master, redis::cmd("HEXISTS").arg(&key).arg(field))
                .await?;
            if marked == 1 {
                return Ok(());
            }
            if waiter.is_finished() {
                return Err(format!("the waiter returned before {field} appeared"));
            }
            if started.elapsed() > MARK_WAIT {
                return Err(format!("{field} did not appear in {MARK_WAIT:?}"));
            }
        }
    }
}

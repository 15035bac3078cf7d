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

use crate::cluster::Counters;
use crate::locks::Impl;
use crate::scenarios::{Bench, LONG_WAIT};

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
        // Only the re-check timer (0.5-1.1 s after the refusal) takes this long; a
        // wake-up takes well under a millisecond.
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
        let mut counters = [Counters::default(); 2];
        let mut done = [0u64; 2];
        let mut failures = 0u64;
        let mut info_failed = false;
        let mut before = self.masters.counters(master).await;
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
            let after = self.masters.counters(master).await;
            match (&before, &after) {
                (Ok(b), Ok(a)) => {
                    counters[m] = Counters::sum([&counters[m], &a.since(b)]);
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
        // Per mode: latency, and per acquisition script time, scripts, commands
        // (scripts and the commands they ran) and main-thread CPU.
        for (m, mode) in [(0, "read"), (1, "upgradable")] {
            let per = |v: f64| {
                if done[m] == 0 {
                    f64::NAN
                } else {
                    v / done[m] as f64
                }
            };
            let c = counters[m];
            let mut r = self.results.of(UPGRADABLE_COST, Impl::Ours);
            r.percentiles(&format!("{mode}_acquire"), "us", &mut acquire[m], &[50]);
            r.percentiles(&format!("{mode}_pair"), "us", &mut pairs[m], &[50, 99]);
            r.put(
                format!("{mode}_script_us_per_acq"),
                "us",
                per(c.script_usec as f64),
            );
            r.put(format!("{mode}_scripts_per_acq"), "", per(c.scripts as f64));
            r.put(
                format!("{mode}_commands_per_acq"),
                "",
                per(c.commands as f64),
            );
            r.put(format!("{mode}_cpu_us_per_acq"), "us", per(c.cpu_us));
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
        // Latency (us), and per upgrade the scripts (mean and most), (un)subscribes
        // and server time per script call, against `try_write`'s.
        let mut r = self.results.of(UPGRADE_ALONE, Impl::Ours);
        r.percentiles("upgrade", "us", &mut upgrades, &[50, 99]);
        r.percentiles("try_write", "us", &mut writes, &[50, 99]);
        if !scripts.is_empty() {
            let counted = scripts.len() as f64;
            let total: f64 = scripts.iter().sum();
            r.put("scripts_per_upgrade", "", mean(&scripts));
            r.percentiles("scripts_per_upgrade", "", &mut scripts, &[100]);
            r.put(
                "subscriptions_per_upgrade",
                "",
                subscriptions as f64 / counted,
            );
            r.put("upgrade_script_us", "us", upgrade_us as f64 / total);
        }
        if write_scripts > 0 {
            r.put(
                "try_write_script_us",
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
        // Gaps (ms) from the last release sent / its reply received to the upgrade's
        // return, and the control writer's; the scripts the waiter sent from its call
        // to its return (mean and most), after the first iteration and in the first
        // (it subscribes); iterations with a second script (a re-check, or a
        // subscription first); hand-overs left to the re-check timer.
        let mut r = self.results.of(behind.scenario, Impl::Ours);
        r.percentiles(
            "gap_from_release_sent",
            "ms",
            &mut upgrades.gap_sent,
            &[50, 99],
        );
        r.percentiles(
            "gap_from_release_reply",
            "ms",
            &mut upgrades.gap_reply,
            &[50, 99],
        );
        r.percentiles(
            "writer_gap_from_release_sent",
            "ms",
            &mut writers.gap_sent,
            &[50, 99],
        );
        r.percentiles(
            "writer_gap_from_release_reply",
            "ms",
            &mut writers.gap_reply,
            &[50],
        );
        if !upgrades.scripts.is_empty() {
            let n = upgrades.scripts.len() as f64;
            r.put("scripts_while_waiting", "", mean(&upgrades.scripts));
            r.percentiles("scripts_while_waiting", "", &mut upgrades.scripts, &[100]);
            r.put("second_attempts", "count", upgrades.second_attempts as f64);
            r.put("timer_wakeups", "count", upgrades.timer_wakeups as f64);
            r.put(
                "subscriptions_per_wait",
                "",
                upgrades.subscriptions as f64 / n,
            );
        }
        if !writers.scripts.is_empty() {
            r.put("writer_scripts_while_waiting", "", mean(&writers.scripts));
        }
        if let Some(scripts) = first {
            r.put("first_wait_scripts", "", scripts);
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
        let before = self.masters.total().await?;
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
        let after = self.masters.total().await?;
        upgraded.map_err(text)?.release().await.map_err(text)?;
        let d = after.since(&before);
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
        let before = self.masters.total().await?;
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
        let after = self.masters.total().await?;
        granted.map_err(text)?.release().await.map_err(text)?;
        let d = after.since(&before);
        Ok(HandOver {
            gap_sent: signed_ms(returned, sent),
            gap_reply: signed_ms(returned, replied),
            scripts: d.scripts.saturating_sub(1),
            subscriptions: d.subscriptions,
        })
    }

    /// Runs `call` between two reads of every master's `INFO commandstats`; what
    /// the masters did meanwhile (`None` if INFO failed).
    async fn counted<T>(&mut self, call: impl Future<Output = T>) -> (T, Option<Counters>) {
        let before = self.masters.total().await;
        let out = call.await;
        let after = self.masters.total().await;
        let d = match (before, after) {
            (Ok(before), Ok(after)) => Some(after.since(&before)),
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

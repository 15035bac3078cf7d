//! The scenarios (the table in BENCHMARKS.md). Each takes one run of one
//! implementation and records its numbers in [`Results`]; `main` repeats them and
//! interleaves implementations.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use redis_rwlock::redis::{
    self,
    cluster_async::ClusterConnection,
    cluster_routing::{RoutingInfo, SingleNodeRoutingInfo},
};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep};

use crate::cluster::{
    Masters, RedisBenchmark, Topology, capture_script, monitor_window, redis_benchmark,
};
use crate::locks::{Clients, Impl, Lock, Mode, Refused, TRIVIAL, Wait};
use crate::stats::{Results, percentile};

/// Durations and sizes of one benchmark session.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Config {
    pub quick: bool,
    /// Repetitions of every scenario (medians and spread are over these).
    pub runs: usize,
    /// Repetitions of the task-count sweep (1, 4, 16 tasks; 64 comes from the main runs).
    pub sweep_runs: usize,
    pub round_trips: usize,
    pub uncontended_iters: usize,
    /// Acquisitions per mode in the server-cost scenario.
    pub server_cost_iters: usize,
    pub throughput_secs: f64,
    pub sweep_secs: f64,
    pub handoff_secs: f64,
    pub stream_secs: f64,
    /// A writer behind the reader stream gives up after this long (counted as starved).
    pub stream_cap_secs: f64,
    pub waiting_settle_secs: f64,
    pub waiting_secs: f64,
    pub redis_benchmark_requests: u64,
    /// Contention scenarios: the measured window per size and implementation, and
    /// the time the tasks run before it (queues and subscriptions settle).
    pub contention_secs: f64,
    pub contention_settle_secs: f64,
    /// Upgrades behind readers per reader count (and as many control hand-overs).
    pub upgrade_iters: usize,
    /// Reads the reader asks for behind the stream of writers (`reader_behind_writers`).
    pub reader_behind_writers_reads: usize,
}

impl Config {
    pub fn new(quick: bool) -> Config {
        let mut cfg = if quick {
            Config {
                quick,
                runs: 3,
                sweep_runs: 1,
                round_trips: 500,
                uncontended_iters: 300,
                server_cost_iters: 1000,
                throughput_secs: 0.7,
                sweep_secs: 0.5,
                handoff_secs: 1.5,
                stream_secs: 1.5,
                stream_cap_secs: 1.0,
                waiting_settle_secs: 0.5,
                waiting_secs: 1.5,
                redis_benchmark_requests: 30_000,
                contention_secs: 1.0,
                contention_settle_secs: 0.3,
                upgrade_iters: 100,
                reader_behind_writers_reads: 20,
            }
        } else {
            Config {
                quick,
                runs: 5,
                sweep_runs: 3,
                round_trips: 3000,
                uncontended_iters: 1000,
                server_cost_iters: 3000,
                throughput_secs: 3.0,
                sweep_secs: 2.0,
                handoff_secs: 5.0,
                stream_secs: 5.0,
                stream_cap_secs: 2.0,
                waiting_settle_secs: 0.5,
                waiting_secs: 2.0,
                redis_benchmark_requests: 100_000,
                contention_secs: 3.0,
                contention_settle_secs: 0.5,
                upgrade_iters: 300,
                reader_behind_writers_reads: 40,
            }
        };
        if let Some(runs) = std::env::var("BENCH_RUNS")
            .ok()
            .and_then(|r| r.parse().ok())
        {
            cfg.runs = runs;
            cfg.sweep_runs = cfg.sweep_runs.min(runs).max(1);
        }
        cfg
    }
}

/// What one uncontended loop measured (us per call).
#[derive(Default)]
struct Timed {
    acquire: Vec<f64>,
    pair: Vec<f64>,
    evalsha: Vec<f64>,
    failures: u64,
    trivial_calls: u64,
}

/// How long this crate's locks keep an idle read hold where a scenario keeps them.
pub const KEEP_READS: Duration = Duration::from_secs(1);

/// Scenario names, as used in the result file.
pub mod names {
    pub const LIMITS: &str = "limits";
    pub const UNCONTENDED: &str = "uncontended";
    pub const READ_HEAVY_1: &str = "read_heavy_1_lock";
    pub const READ_HEAVY_64: &str = "read_heavy_64_locks";
    /// The 64-lock mix with this crate's idle read holds kept ([`super::KEEP_READS`]).
    pub const READ_HEAVY_64_KEPT: &str = "read_heavy_64_locks_kept";
    pub const READ_HEAVY_SCRIPTS: &str = "read_heavy_scripts";
    /// The one-lock mix from [`super::INSTANCES`] clients: throughput, and the MONITOR pass.
    pub const READ_HEAVY_1_CLIENTS: &str = "read_heavy_1_lock_3_clients";
    pub const READ_HEAVY_SCRIPTS_CLIENTS: &str = "read_heavy_scripts_3_clients";
    /// The MONITOR pass over the 64-lock mix with reads kept.
    pub const READ_HEAVY_SCRIPTS_KEPT: &str = "read_heavy_scripts_kept";
    pub const HANDOFF: &str = "writer_handoff";
    pub const STREAM: &str = "writer_behind_readers";
    pub const WAITING: &str = "waiting_cost";
    pub const REDIS_BENCHMARK: &str = "redis_benchmark";
    pub const SERVER_COST: &str = "server_cost";
}
use names::*;

/// A mode's name in metric names: `read_...`, `write_...`.
pub fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Read => "read",
        Mode::Write => "write",
    }
}

/// The modes an implementation has: rslock is a mutex.
fn modes(imp: Impl) -> &'static [Mode] {
    if imp == Impl::Rslock {
        &[Mode::Write]
    } else {
        &[Mode::Read, Mode::Write]
    }
}

/// Task counts of the throughput sweep.
pub const SWEEP_TASKS: [usize; 4] = [1, 4, 16, 64];
/// Read-heavy mix.
pub const TASKS: usize = 64;
pub const WRITE_PERCENT: u64 = 5;
/// Clients (instances of a service) in the many-client variant of the one-lock mix.
pub const INSTANCES: usize = 3;
/// Writer handoff.
pub const WRITERS: usize = 20;
pub const HANDOFF_HOLD: Duration = Duration::from_millis(1);
/// Writer behind a stream of readers.
pub const STREAM_READERS: usize = 16;
pub const STREAM_READ_HOLD: Duration = Duration::from_millis(5);
pub const STREAM_WRITER_EVERY: Duration = Duration::from_millis(100);
/// Waiting cost: waiters per scenario (half readers, half writers where there is a read mode).
pub const WAITERS: usize = 20;
/// How long any waiting acquire in the scenarios may wait before it counts as a timeout.
pub const LONG_WAIT: Duration = Duration::from_secs(10);

/// Counts holds seen together in this process that the lock should never allow: a
/// writer beside a reader or another writer. A hold is counted from the moment its
/// grant is received until just before its release is sent, so every count is a real
/// overlap on the server (leases here are far longer than any hold).
#[derive(Default)]
pub struct Exclusion {
    readers: AtomicI64,
    writers: AtomicI64,
    violations: AtomicU64,
}

impl Exclusion {
    pub fn enter(&self, mode: Mode) {
        let clash = match mode {
            Mode::Read => {
                self.readers.fetch_add(1, Ordering::SeqCst);
                self.writers.load(Ordering::SeqCst) > 0
            }
            Mode::Write => {
                self.writers.fetch_add(1, Ordering::SeqCst) > 0
                    || self.readers.load(Ordering::SeqCst) > 0
            }
        };
        if clash {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
    }

    pub fn leave(&self, mode: Mode) {
        match mode {
            Mode::Read => self.readers.fetch_sub(1, Ordering::SeqCst),
            Mode::Write => self.writers.fetch_sub(1, Ordering::SeqCst),
        };
    }

    pub fn violations(&self) -> u64 {
        self.violations.load(Ordering::SeqCst)
    }
}

/// Tasks that loop on one lock until stopped: acquire (waiting), hold, release,
/// writing `write_percent` percent of the time. Their grants are counted while
/// [`Loopers::count`] is on.
pub struct Loopers {
    shared: Arc<Looping>,
    stop: watch::Sender<bool>,
    set: JoinSet<()>,
}

/// What the looping tasks share.
#[derive(Default)]
struct Looping {
    exclusion: Exclusion,
    counting: AtomicBool,
    granted: AtomicU64,
    failures: AtomicU64,
}

impl Loopers {
    /// `tasks` tasks of `clients` on `lock`; `seed` makes their random modes
    /// differ from run to run.
    pub fn start(
        clients: &Arc<Clients>,
        lock: &Lock,
        tasks: usize,
        write_percent: u64,
        hold: Duration,
        seed: usize,
    ) -> Loopers {
        let shared = Arc::new(Looping::default());
        let (stop, stopped) = watch::channel(false);
        let mut set = JoinSet::new();
        for task in 0..tasks {
            let (clients, lock, shared) = (clients.clone(), lock.clone(), shared.clone());
            let mut stopped = stopped.clone();
            set.spawn(async move {
                let mut rng = SmallRng::seed_from_u64((seed * 1000 + task) as u64);
                loop {
                    let mode = if rng.random_range(0..100) < write_percent {
                        Mode::Write
                    } else {
                        Mode::Read
                    };
                    let acquired = tokio::select! {
                        biased;
                        _ = stopped.wait_for(|stop| *stop) => break,
                        acquired = clients.acquire(&lock, mode, Wait::Upto(LONG_WAIT)) => acquired,
                    };
                    let Ok(held) = acquired else {
                        shared.failures.fetch_add(1, Ordering::Relaxed);
                        sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    if shared.counting.load(Ordering::SeqCst) {
                        shared.granted.fetch_add(1, Ordering::SeqCst);
                    }
                    shared.exclusion.enter(mode);
                    sleep(hold).await;
                    shared.exclusion.leave(mode);
                    if clients.release(held).await.is_err() {
                        shared.failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        Loopers { shared, stop, set }
    }

    /// Counts the grants from now on (`true`) or no more (`false`).
    pub fn count(&self, on: bool) {
        self.shared.counting.store(on, Ordering::SeqCst);
    }

    /// Grants counted so far.
    pub fn granted(&self) -> u64 {
        self.shared.granted.load(Ordering::SeqCst)
    }

    /// Exclusion violations among the tasks' holds and the [`Exclusion`] calls of
    /// whoever else holds the lock ([`Loopers::exclusion`]).
    pub fn violations(&self) -> u64 {
        self.shared.exclusion.violations()
    }

    /// The tasks' exclusion checker, for another holder of the same lock.
    pub fn exclusion(&self) -> &Exclusion {
        &self.shared.exclusion
    }

    /// Stops the tasks (a waiting acquire is dropped). Failed acquires and releases,
    /// or an error when the tasks did not stop within [`LONG_WAIT`] (then aborted).
    pub async fn stop(mut self) -> Result<u64, String> {
        self.stop.send_replace(true);
        let set = &mut self.set;
        let stopped = tokio::time::timeout(LONG_WAIT, async {
            while set.join_next().await.is_some() {}
        })
        .await;
        if stopped.is_err() {
            self.set.abort_all();
            return Err(format!("tasks did not stop within {LONG_WAIT:?}"));
        }
        Ok(self.shared.failures.load(Ordering::Relaxed))
    }
}

/// One hold in the handoff scenario: (granted, release sent, wait in ms, writer).
type Handoff = (Instant, Instant, f64, usize);

fn mean(samples: &[f64]) -> f64 {
    samples.iter().sum::<f64>() / samples.len() as f64
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// One acquire + release per mode on a scratch lock of `clients`: loads scripts
/// and opens connections. The error of a failed acquire, if one failed.
async fn warm_up(clients: &Clients, imp: Impl) -> Option<String> {
    let lock = clients.lock(imp, &format!("warmup-{}", imp.id()), LONG_WAIT);
    let mode = if imp == Impl::Rslock {
        Mode::Write
    } else {
        Mode::Read
    };
    let mut failed = None;
    for mode in [mode, Mode::Write] {
        match clients.acquire(&lock, mode, Wait::Upto(LONG_WAIT)).await {
            Ok(held) => {
                let _ = clients.release(held).await;
            }
            Err(err) => failed = Some(format!("{err:?}")),
        }
    }
    failed
}

/// Everything the scenarios share.
pub struct Bench {
    pub clients: Arc<Clients>,
    pub topology: Topology,
    pub masters: Masters,
    /// A cluster connection set up like the crate's, for PING/EVALSHA.
    pub raw: ClusterConnection,
    pub cfg: Config,
    pub results: Results,
    /// Problems met while running (errors, skipped parts), for the report.
    pub notes: Vec<String>,
    pub redis_benchmarks: Vec<RedisBenchmark>,
    /// The crate's read-acquire call as sent (captured with MONITOR).
    pub read_script: Option<Vec<String>>,
    /// The cluster's seed nodes, for clients connected later.
    pub nodes: Vec<String>,
    /// More clients (instances of a service) beside `clients`, connected when a
    /// scenario first asks for them ([`Bench::instances`]).
    pub more_clients: Vec<Arc<Clients>>,
}

impl Bench {
    pub fn note(&mut self, note: String) {
        eprintln!("  note: {note}");
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    /// `count` clients, as `count` instances of a service would have: `clients`
    /// first, then others of their own (own connections, own subscriptions, and
    /// for this crate its own `LockClient`), connected and warmed up the first time
    /// they are asked for. Fewer when one fails to connect (noted).
    pub async fn instances(&mut self, count: usize) -> Vec<Arc<Clients>> {
        while self.more_clients.len() + 1 < count {
            match Clients::connect(&self.nodes).await {
                Ok(clients) => {
                    let clients = Arc::new(clients);
                    for imp in Impl::ALL {
                        warm_up(&clients, imp).await;
                    }
                    self.more_clients.push(clients);
                }
                Err(err) => {
                    self.note(format!("cannot connect another client: {err}"));
                    break;
                }
            }
        }
        std::iter::once(self.clients.clone())
            .chain(
                self.more_clients
                    .iter()
                    .take(count.saturating_sub(1))
                    .cloned(),
            )
            .collect()
    }

    /// A name whose hash tag lands on master `master`, unique per `base`.
    pub fn name_on(&self, master: usize, base: &str) -> String {
        self.topology
            .name_on(master % self.topology.masters.len(), base)
    }

    /// One acquire + release on a scratch lock: loads scripts and opens connections.
    pub async fn warm_up(&mut self, imp: Impl) {
        if let Some(err) = warm_up(&self.clients, imp).await {
            self.note(format!("{}: warm-up failed: {err}", imp.label()));
        }
    }

    /// PING and a trivial EVALSHA, one at a time, to the master of the uncontended lock.
    pub async fn limits(&mut self, run: usize) {
        let name = self.name_on(run, &format!("unc-{run}"));
        let key = format!("bench:{{{name}}}");
        let master = &self.topology.masters[self.topology.master_of(&key)];
        let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
            host: master.host.clone(),
            port: master.port,
        });
        let mut ping = Vec::with_capacity(self.cfg.round_trips);
        let mut evalsha = Vec::with_capacity(self.cfg.round_trips);
        let mut failures = 0u64;
        for i in 0..self.cfg.round_trips + 100 {
            let t = Instant::now();
            let pinged = self
                .raw
                .route_command(redis::cmd("PING"), route.clone())
                .await;
            failures += u64::from(pinged.is_err());
            if i >= 100 {
                ping.push(us(t.elapsed()));
            }
        }
        let before = self.masters.total().await;
        for i in 0..self.cfg.round_trips + 100 {
            let t = Instant::now();
            let r: Result<i64, _> = TRIVIAL.key(&key).invoke_async(&mut self.raw).await;
            failures += u64::from(r.is_err());
            if i >= 100 {
                evalsha.push(us(t.elapsed()));
            }
        }
        let after = self.masters.total().await;
        if failures > 0 {
            self.note(format!("limits: {failures} PING/EVALSHA requests failed"));
        }
        let mut r = self.results.of(LIMITS, Impl::Ours);
        if let (Ok(before), Ok(after)) = (before, after)
            && after.since(&before).scripts > 0
        {
            r.put(
                "evalsha_server_us",
                "us",
                after.since(&before).us_per_script(),
            );
        }
        r.percentiles("ping", "us", &mut ping, &[50, 99]);
        r.percentiles("evalsha", "us", &mut evalsha, &[50, 99]);
    }

    /// What one uncontended acquisition (acquire + release, one task, nothing else
    /// running) costs the lock's master: script time (`INFO commandstats`, FCALL* and
    /// EVAL* rows) and main-thread CPU (`INFO cpu`, user + sys: parsing, scripts,
    /// replication feed), both per acquisition. The replica's work is not counted.
    pub async fn server_cost(&mut self, run: usize, imp: Impl) {
        let name = self.name_on(0, &format!("cost-{run}"));
        let lock = self.clients.lock(imp, &name, LONG_WAIT);
        for &mode in modes(imp) {
            let pairs = |n: usize| {
                let (lock, clients) = (&lock, &self.clients);
                async move {
                    let mut done = 0u64;
                    for _ in 0..n {
                        if let Ok(held) = clients.acquire(lock, mode, Wait::Try).await
                            && clients.release(held).await.is_ok()
                        {
                            done += 1;
                        }
                    }
                    done
                }
            };
            pairs(50).await; // scripts loaded, connections warm
            let n = self.cfg.server_cost_iters;
            let before = self.masters.counters(0).await;
            let done = pairs(n).await;
            let after = self.masters.counters(0).await;
            if done < n as u64 {
                self.note(format!(
                    "{}: {} of {n} uncontended {mode:?} acquisitions failed (server cost)",
                    imp.label(),
                    n as u64 - done
                ));
            }
            let (Ok(before), Ok(after)) = (before, after) else {
                self.note("server cost: INFO on master 0 failed".to_owned());
                continue;
            };
            let d = after.since(&before);
            let per = |v: f64| if done == 0 { f64::NAN } else { v / done as f64 };
            let m = mode_name(mode);
            let mut r = self.results.of(SERVER_COST, imp);
            r.put(
                format!("{m}_script_us_per_acq"),
                "us",
                per(d.script_usec as f64),
            );
            r.put(format!("{m}_scripts_per_acq"), "", per(d.scripts as f64));
            r.put(format!("{m}_cpu_us_per_acq"), "us", per(d.cpu_us));
        }
    }

    /// One mode's timed loop of the uncontended scenario: per iteration a trivial
    /// EVALSHA, then `try_*` + release (the first 20 iterations warm up).
    async fn timed_pairs(&mut self, lock: &Lock, mode: Mode, trivial_key: &str) -> Timed {
        let mut t = Timed::default();
        for i in 0..self.cfg.uncontended_iters + 20 {
            let start = Instant::now();
            let r: Result<i64, _> = TRIVIAL.key(trivial_key).invoke_async(&mut self.raw).await;
            let trivial = start.elapsed();
            t.trivial_calls += 1;
            t.failures += u64::from(r.is_err());
            let t0 = Instant::now();
            let Ok(held) = self.clients.acquire(lock, mode, Wait::Try).await else {
                t.failures += 1;
                continue;
            };
            let t1 = Instant::now();
            t.failures += u64::from(self.clients.release(held).await.is_err());
            if i >= 20 {
                t.evalsha.push(us(trivial));
                t.acquire.push(us(t1 - t0));
                t.pair.push(us(t0.elapsed()));
            }
        }
        t
    }

    /// `try_*` + release from one task, nothing else touching the lock. Each
    /// iteration also times one trivial EVALSHA to the same master just before, so
    /// the acquire/EVALSHA ratio compares round trips made under the same load.
    pub async fn uncontended(&mut self, run: usize, imp: Impl) {
        let name = self.name_on(run, &format!("unc-{run}"));
        let lock = self.clients.lock(imp, &name, LONG_WAIT);
        let trivial_key = format!("bench:{{{name}}}");
        for &mode in modes(imp) {
            let m = mode_name(mode);
            let before = self.masters.total().await;
            let mut t = self.timed_pairs(&lock, mode, &trivial_key).await;
            // The same loop on a thread that blocks on the runtime itself, as a
            // `#[tokio::main]` function's body runs (ours only: the peers' clients
            // do nothing per acquire that would differ).
            if imp == Impl::Ours {
                let handle = tokio::runtime::Handle::current();
                let mut main = tokio::task::block_in_place(|| {
                    handle.block_on(self.timed_pairs(&lock, mode, &trivial_key))
                });
                let mut r = self.results.of(UNCONTENDED, imp);
                let a50 = percentile(&mut main.acquire, 50.0);
                r.put(format!("{m}_acquire_p50_main_thread"), "us", a50);
                let e50 = percentile(&mut main.evalsha, 50.0);
                r.put(format!("{m}_evalsha_p50_main_thread"), "us", e50);
                t.failures += main.failures;
                t.trivial_calls += main.trivial_calls;
            }
            if t.failures > 0 {
                self.note(format!(
                    "{}: {} uncontended {mode:?} acquires/releases failed",
                    imp.label(),
                    t.failures
                ));
            }
            let after = self.masters.total().await;
            let trivial_us = self.results.median(LIMITS, Impl::Ours, "evalsha_server_us");
            let mut r = self.results.of(UNCONTENDED, imp);
            if let (Ok(before), Ok(after)) = (before, after) {
                // Lock scripts only: the trivial calls' share is taken out with the
                // server time per trivial call measured in `limits`.
                let d = after.since(&before);
                let trivial_us = if trivial_us.is_nan() { 0.0 } else { trivial_us };
                let scripts = d.scripts.saturating_sub(t.trivial_calls);
                if scripts > 0 {
                    let usec = d.script_usec as f64 - t.trivial_calls as f64 * trivial_us;
                    r.put(
                        format!("{m}_server_us_per_script"),
                        "us",
                        usec.max(0.0) / scripts as f64,
                    );
                }
            }
            r.percentiles(&format!("{m}_evalsha"), "us", &mut t.evalsha, &[50]);
            r.percentiles(&format!("{m}_acquire"), "us", &mut t.acquire, &[50, 99]);
            r.percentiles(&format!("{m}_pair"), "us", &mut t.pair, &[50, 99]);
        }
    }

    /// 20 writers, each holding 1 ms, on one lock.
    pub async fn handoff(&mut self, run: usize, imp: Impl) {
        let name = self.name_on(run + 1, &format!("handoff-{run}"));
        let lock = self.clients.lock(imp, &name, LONG_WAIT);
        let exclusion = Arc::new(Exclusion::default());
        let before = self.masters.total().await;
        let log: Arc<Mutex<Vec<Handoff>>> = Arc::default();
        let failures = Arc::new(AtomicU64::new(0));
        let seconds = self.cfg.handoff_secs;
        let end = Instant::now() + secs(seconds);
        let mut set = JoinSet::new();
        for writer in 0..WRITERS {
            let (clients, lock, exclusion, log, failures) = (
                self.clients.clone(),
                lock.clone(),
                exclusion.clone(),
                log.clone(),
                failures.clone(),
            );
            set.spawn(async move {
                while Instant::now() < end {
                    let asked = Instant::now();
                    let Ok(held) = clients
                        .acquire(&lock, Mode::Write, Wait::Upto(LONG_WAIT))
                        .await
                    else {
                        failures.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    let granted = Instant::now();
                    exclusion.enter(Mode::Write);
                    sleep(HANDOFF_HOLD).await;
                    exclusion.leave(Mode::Write);
                    let released = Instant::now();
                    if clients.release(held).await.is_err() {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                    let wait = ms(granted - asked);
                    let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
                    log.push((granted, released, wait, writer));
                }
            });
        }
        while set.join_next().await.is_some() {}
        let after = self.masters.total().await;
        let mut log = std::mem::take(&mut *log.lock().unwrap_or_else(PoisonError::into_inner));
        let total = log.len();
        log.retain(|entry| entry.0 < end);
        log.sort_by_key(|entry| entry.0);
        let mut gaps: Vec<f64> = log
            .windows(2)
            .map(|pair| ms(pair[1].0.saturating_duration_since(pair[0].1)))
            .collect();
        let mut waits: Vec<f64> = log.iter().map(|e| e.2).collect();
        let mut holds: Vec<f64> = log.iter().map(|e| ms(e.1 - e.0)).collect();
        let mut per_writer = [0u64; WRITERS];
        for entry in &log {
            per_writer[entry.3] += 1;
        }
        let failures = failures.load(Ordering::Relaxed);
        if failures > 0 {
            self.note(format!(
                "{}: {failures} failed/timed-out acquires or releases in the handoff",
                imp.label()
            ));
        }
        let gap_p50 = percentile(&mut gaps, 50.0);
        let hold_p50 = percentile(&mut holds, 50.0);
        let mut r = self.results.of(HANDOFF, imp);
        r.put("acquisitions_per_s", "1/s", log.len() as f64 / seconds);
        r.percentiles("gap", "ms", &mut gaps, &[50, 99]);
        r.percentiles("wait", "ms", &mut waits, &[50, 99]);
        r.put("hold_p50", "ms", hold_p50);
        r.put("hold_mean", "ms", mean(&holds));
        r.put("gap_mean", "ms", mean(&gaps));
        r.put("fair_bound", "ms", WRITERS as f64 * (hold_p50 + gap_p50));
        let fewest = per_writer.iter().copied().min().unwrap_or(0);
        r.put("min_per_writer", "count", fewest as f64);
        let most = per_writer.iter().copied().max().unwrap_or(0);
        r.put("max_per_writer", "count", most as f64);
        r.put("violations", "count", exclusion.violations() as f64);
        if let (Ok(before), Ok(after)) = (before, after) {
            // Everything the run sent, over every acquisition it made (also the
            // ones after the window closed).
            let d = after.since(&before);
            let n = total.max(1) as f64;
            r.put("scripts_per_acquisition", "count", d.scripts as f64 / n);
            r.put(
                "subscriptions_per_acquisition",
                "count",
                d.subscriptions as f64 / n,
            );
        }
        self.results
            .handoff_gaps
            .entry(imp)
            .or_default()
            .extend(gaps);
    }

    /// 16 readers holding 5 ms each, overlapping without pause; a writer asks every
    /// 100 ms and gives up after `stream_cap_secs`.
    pub async fn writer_behind_readers(&mut self, run: usize, imp: Impl) {
        let name = self.name_on(run + 2, &format!("stream-{run}"));
        let cap = secs(self.cfg.stream_cap_secs);
        let reader_lock = self.clients.lock(imp, &name, LONG_WAIT);
        let writer_lock = self.clients.lock(imp, &name, cap);
        let exclusion = Arc::new(Exclusion::default());
        let reads = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(AtomicU64::new(0));
        let seconds = self.cfg.stream_secs;
        let end = Instant::now() + secs(seconds);
        let mut set = JoinSet::new();
        for reader in 0..STREAM_READERS {
            let (clients, lock, exclusion, reads, failures) = (
                self.clients.clone(),
                reader_lock.clone(),
                exclusion.clone(),
                reads.clone(),
                failures.clone(),
            );
            set.spawn(async move {
                sleep(STREAM_READ_HOLD * reader as u32 / STREAM_READERS as u32).await;
                while Instant::now() < end {
                    let Ok(held) = clients
                        .acquire(&lock, Mode::Read, Wait::Upto(LONG_WAIT))
                        .await
                    else {
                        failures.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    let granted = Instant::now();
                    exclusion.enter(Mode::Read);
                    sleep(STREAM_READ_HOLD).await;
                    exclusion.leave(Mode::Read);
                    let _ = clients.release(held).await;
                    if granted < end {
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        // The writer: waits measured from its request to its grant; a give-up counts
        // as a wait of `cap` (a lower bound) and as starved.
        let mut waits = Vec::new();
        let mut starved = 0u64;
        sleep(STREAM_WRITER_EVERY).await;
        while Instant::now() < end {
            let asked = Instant::now();
            match self
                .clients
                .acquire(&writer_lock, Mode::Write, Wait::Upto(cap))
                .await
            {
                Ok(held) => {
                    waits.push(ms(asked.elapsed()));
                    exclusion.enter(Mode::Write);
                    sleep(HANDOFF_HOLD).await;
                    exclusion.leave(Mode::Write);
                    let _ = self.clients.release(held).await;
                }
                Err(Refused::Timeout | Refused::WouldBlock) => {
                    starved += 1;
                    waits.push(ms(cap));
                }
                Err(Refused::Failed(err)) => {
                    failures.fetch_add(1, Ordering::Relaxed);
                    self.note(format!(
                        "{}: writer behind readers failed: {err}",
                        imp.label()
                    ));
                }
            }
            sleep(STREAM_WRITER_EVERY).await;
        }
        while set.join_next().await.is_some() {}
        let failures = failures.load(Ordering::Relaxed);
        if failures > 0 {
            self.note(format!(
                "{}: {failures} failed acquires in writer-behind-readers",
                imp.label()
            ));
        }
        let mut r = self.results.of(STREAM, imp);
        r.put("writer_attempts", "count", waits.len() as f64);
        r.percentiles("writer_wait", "ms", &mut waits, &[50, 99, 100]);
        r.put("writer_starved", "count", starved as f64);
        r.put(
            "reads_per_s",
            "1/s",
            reads.load(Ordering::Relaxed) as f64 / seconds,
        );
        r.put("violations", "count", exclusion.violations() as f64);
    }

    /// One holder keeps a write hold; 20 waiters wait (10 readers + 10 writers where
    /// there is a read mode). Counts what the masters receive meanwhile.
    pub async fn waiting_cost(&mut self, run: usize, imp: Impl) {
        let name = self.name_on(run, &format!("wait-{run}"));
        let lock = self.clients.lock(imp, &name, Duration::from_secs(30));
        let holder = match self
            .clients
            .acquire(&lock, Mode::Write, Wait::Upto(LONG_WAIT))
            .await
        {
            Ok(held) => held,
            Err(err) => {
                self.note(format!(
                    "{}: waiting cost: holder failed: {err:?}",
                    imp.label()
                ));
                return;
            }
        };
        let mut set = JoinSet::new();
        for waiter in 0..WAITERS {
            let mode = if imp != Impl::Rslock && waiter % 2 == 0 {
                Mode::Read
            } else {
                Mode::Write
            };
            let (clients, lock) = (self.clients.clone(), lock.clone());
            set.spawn(async move {
                let wait = Wait::Upto(Duration::from_secs(30));
                if let Ok(held) = clients.acquire(&lock, mode, wait).await {
                    let _ = clients.release(held).await;
                }
            });
        }
        sleep(secs(self.cfg.waiting_settle_secs)).await;
        let t = Instant::now();
        let window = secs(self.cfg.waiting_secs);
        let sent = monitor_window(&self.topology, &mut self.masters, window).await;
        let elapsed = t.elapsed().as_secs_f64();
        let _ = self.clients.release(holder).await;
        let drained = tokio::time::timeout(Duration::from_secs(40), async {
            while set.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            self.note(format!(
                "{}: waiters did not finish after the holder left",
                imp.label()
            ));
            set.abort_all();
        }
        match sent {
            Ok(sent) => {
                let per = WAITERS as f64 * elapsed;
                let mut r = self.results.of(WAITING, imp);
                r.put("scripts_per_waiter_s", "1/s", sent.scripts as f64 / per);
                let commands = (sent.scripts + sent.other) as f64;
                r.put("commands_per_waiter_s", "1/s", commands / per);
                r.put(
                    "in_script_commands_per_waiter_s",
                    "1/s",
                    sent.in_scripts as f64 / per,
                );
            }
            Err(err) => self.note(format!("MONITOR count failed: {err}")),
        }
    }

    /// Captures the crate's read-acquire call (function or sha and arguments, as sent) on the
    /// master of the `redis-benchmark` key.
    pub async fn capture_read_script(&mut self) {
        let name = self.name_on(0, "rbench");
        let lock = self.clients.lock(Impl::Ours, &name, LONG_WAIT);
        let key = lock.key().to_owned();
        let master = self.topology.masters[self.topology.master_of(&key)].clone();
        let clients = self.clients.clone();
        let trigger = || async move {
            if let Ok(held) = clients.acquire(&lock, Mode::Read, Wait::Try).await {
                let _ = clients.release(held).await;
            }
        };
        match capture_script(&master, &key, trigger).await {
            Ok(args) => self.read_script = Some(args),
            Err(err) => self.note(format!(
                "could not capture the read script for redis-benchmark: {err}"
            )),
        }
    }

    /// `redis-benchmark` with the captured read script, pipelined, on its master;
    /// tokens drawn from 64 values so the hash holds up to 64 readers, as in the
    /// one-lock read-heavy scenario.
    pub async fn redis_benchmark(&mut self) {
        let Some(args) = self.read_script.clone() else {
            return;
        };
        let Some(key) = args.get(3).cloned() else {
            return;
        };
        let index = self.topology.master_of(&key);
        let master = self.topology.masters[index].clone();
        let command: Vec<String> = args
            .iter()
            .map(|arg| {
                if arg.len() == 32 && arg.bytes().all(|b| b.is_ascii_hexdigit()) {
                    "bench__rand_int__".to_owned()
                } else {
                    arg.clone()
                }
            })
            .collect();
        let _: Result<i64, _> = self.masters.query(index, redis::cmd("DEL").arg(&key)).await;
        let requests = self.cfg.redis_benchmark_requests;
        let before = self.masters.total().await;
        let result = tokio::task::spawn_blocking(move || {
            redis_benchmark(&master, requests, 50, 16, 64, &command)
        })
        .await;
        let after = self.masters.total().await;
        let fields: Result<i64, _> = self
            .masters
            .query(index, redis::cmd("HLEN").arg(&key))
            .await;
        let _: Result<i64, _> = self.masters.query(index, redis::cmd("DEL").arg(&key)).await;
        let mut r = self.results.of(REDIS_BENCHMARK, Impl::Ours);
        if let (Ok(before), Ok(after)) = (before, after)
            && after.since(&before).scripts > 0
        {
            r.put(
                "server_us_per_script",
                "us",
                after.since(&before).us_per_script(),
            );
        }
        match result {
            Ok(Ok(rb)) => {
                r.put("read_script_rps", "1/s", rb.requests_per_sec);
                r.put("read_script_p50", "ms", rb.p50_ms);
                self.redis_benchmarks.push(rb);
                if !matches!(fields, Ok(n) if n > 0) {
                    self.note(format!("redis-benchmark left no readers in {key}: its requests may have failed ({fields:?})"));
                }
            }
            Ok(Err(err)) => self.note(err),
            Err(err) => self.note(format!("redis-benchmark task failed: {err}")),
        }
    }
}

//! The scenarios (the table in BENCHMARKS.md). Each takes one run of one
//! implementation and records its numbers in [`Results`]; `main` repeats them and
//! interleaves implementations.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis_rwlock::redis::{
    self,
    cluster_async::ClusterConnection,
    cluster_routing::{RoutingInfo, SingleNodeRoutingInfo},
};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep};

use crate::cluster::{
    Masters, RedisBenchmark, Topology, capture_script, delta, monitor_window, redis_benchmark,
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

/// Metric names of the uncontended scenario, per mode.
pub struct UncontendedNames {
    pub evalsha50: &'static str,
    pub a50: &'static str,
    /// The same, measured on a thread that blocks on the runtime (`#[tokio::main]`).
    pub evalsha50_main: &'static str,
    pub a50_main: &'static str,
    pub a99: &'static str,
    pub p50: &'static str,
    pub p99: &'static str,
    pub server: &'static str,
}

impl UncontendedNames {
    pub const READ: UncontendedNames = UncontendedNames {
        evalsha50: "read_evalsha_p50",
        a50: "read_acquire_p50",
        evalsha50_main: "read_evalsha_p50_main_thread",
        a50_main: "read_acquire_p50_main_thread",
        a99: "read_acquire_p99",
        p50: "read_pair_p50",
        p99: "read_pair_p99",
        server: "read_server_us_per_script",
    };
    pub const WRITE: UncontendedNames = UncontendedNames {
        evalsha50: "write_evalsha_p50",
        a50: "write_acquire_p50",
        evalsha50_main: "write_evalsha_p50_main_thread",
        a50_main: "write_acquire_p50_main_thread",
        a99: "write_acquire_p99",
        p50: "write_pair_p50",
        p99: "write_pair_p99",
        server: "write_server_us_per_script",
    };
}

/// How long this crate's locks keep an idle read hold where a scenario keeps them.
pub const KEEP_READS: std::time::Duration = std::time::Duration::from_secs(1);

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
    pub const HANDOFF: &str = "writer_handoff";
    pub const STREAM: &str = "writer_behind_readers";
    pub const WAITING: &str = "waiting_cost";
    pub const REDIS_BENCHMARK: &str = "redis_benchmark";
    pub const SERVER_COST: &str = "server_cost";
}

/// Metric names of the server-cost scenario, per mode.
pub struct ServerCostNames {
    pub script_us: &'static str,
    pub scripts: &'static str,
    pub cpu_us: &'static str,
}

impl ServerCostNames {
    pub const READ: ServerCostNames = ServerCostNames {
        script_us: "read_script_us_per_acq",
        scripts: "read_scripts_per_acq",
        cpu_us: "read_cpu_us_per_acq",
    };
    pub const WRITE: ServerCostNames = ServerCostNames {
        script_us: "write_script_us_per_acq",
        scripts: "write_scripts_per_acq",
        cpu_us: "write_cpu_us_per_acq",
    };
}
use names::*;

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
            if self
                .raw
                .route_command(redis::cmd("PING"), route.clone())
                .await
                .is_err()
            {
                failures += 1;
            }
            if i >= 100 {
                ping.push(us(t.elapsed()));
            }
        }
        let before = self.masters.commandstats().await.ok();
        for i in 0..self.cfg.round_trips + 100 {
            let t = Instant::now();
            let r: Result<i64, _> = TRIVIAL.key(&key).invoke_async(&mut self.raw).await;
            if r.is_err() {
                failures += 1;
            }
            if i >= 100 {
                evalsha.push(us(t.elapsed()));
            }
        }
        let after = self.masters.commandstats().await.ok();
        if failures > 0 {
            self.note(format!("limits: {failures} PING/EVALSHA requests failed"));
        }
        let r = &mut self.results;
        if let (Some(before), Some(after)) = (before, after) {
            let d = delta(&before, &after);
            if d.scripts > 0 {
                let server = d.script_usec as f64 / d.scripts as f64;
                r.record(LIMITS, Impl::Ours, "evalsha_server_us", "us", server);
            }
        }
        r.record(
            LIMITS,
            Impl::Ours,
            "ping_p50",
            "us",
            percentile(&mut ping, 50.0),
        );
        r.record(
            LIMITS,
            Impl::Ours,
            "ping_p99",
            "us",
            percentile(&mut ping, 99.0),
        );
        r.record(
            LIMITS,
            Impl::Ours,
            "evalsha_p50",
            "us",
            percentile(&mut evalsha, 50.0),
        );
        r.record(
            LIMITS,
            Impl::Ours,
            "evalsha_p99",
            "us",
            percentile(&mut evalsha, 99.0),
        );
    }

    /// What one uncontended acquisition (acquire + release, one task, nothing else
    /// running) costs the lock's master: script time (`INFO commandstats`, FCALL* and EVAL*
    /// rows) and main-thread CPU (`INFO cpu`, user + sys: parsing, scripts,
    /// replication feed), both per acquisition. The replica's work is not counted.
    pub async fn server_cost(&mut self, run: usize, imp: Impl) {
        let name = self.name_on(0, &format!("cost-{run}"));
        let lock = self.clients.lock(imp, &name, LONG_WAIT);
        let modes: &[Mode] = if imp == Impl::Rslock {
            &[Mode::Write]
        } else {
            &[Mode::Read, Mode::Write]
        };
        for &mode in modes {
            let pair = |n: usize| {
                let lock = &lock;
                let clients = &self.clients;
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
            pair(50).await; // scripts loaded, connections warm
            let n = self.cfg.server_cost_iters;
            let before = self.masters.server_cost(0).await;
            let done = pair(n).await;
            let after = self.masters.server_cost(0).await;
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
            let m = match mode {
                Mode::Read => ServerCostNames::READ,
                Mode::Write => ServerCostNames::WRITE,
            };
            let d = after.since(&before);
            let per = |v: f64| if done == 0 { f64::NAN } else { v / done as f64 };
            let r = &mut self.results;
            r.record(
                SERVER_COST,
                imp,
                m.script_us,
                "us",
                per(d.script_usec as f64),
            );
            r.record(SERVER_COST, imp, m.scripts, "", per(d.scripts as f64));
            r.record(SERVER_COST, imp, m.cpu_us, "us", per(d.cpu_us));
        }
    }

    /// `try_*` + release from one task, nothing else touching the lock. Each
    /// iteration also times one trivial EVALSHA to the same master just before, so
    /// the acquire/EVALSHA ratio compares round trips made under the same load.
    /// One mode's timed loop of the uncontended scenario: per iteration a trivial
    /// EVALSHA, then `try_*` + release (the first 20 iterations warm up).
    async fn timed_pairs(&mut self, lock: &Lock, mode: Mode, trivial_key: &str) -> Timed {
        let mut t = Timed::default();
        for i in 0..self.cfg.uncontended_iters + 20 {
            let start = Instant::now();
            let r: Result<i64, _> = TRIVIAL.key(trivial_key).invoke_async(&mut self.raw).await;
            let trivial = start.elapsed();
            t.trivial_calls += 1;
            if r.is_err() {
                t.failures += 1;
            }
            let t0 = Instant::now();
            let held = match self.clients.acquire(lock, mode, Wait::Try).await {
                Ok(held) => held,
                Err(_) => {
                    t.failures += 1;
                    continue;
                }
            };
            let t1 = Instant::now();
            if self.clients.release(held).await.is_err() {
                t.failures += 1;
            }
            if i >= 20 {
                t.evalsha.push(us(trivial));
                t.acquire.push(us(t1 - t0));
                t.pair.push(us(t0.elapsed()));
            }
        }
        t
    }

    pub async fn uncontended(&mut self, run: usize, imp: Impl) {
        let name = self.name_on(run, &format!("unc-{run}"));
        let lock = self.clients.lock(imp, &name, LONG_WAIT);
        let trivial_key = format!("bench:{{{name}}}");
        let modes: &[Mode] = if imp == Impl::Rslock {
            &[Mode::Write]
        } else {
            &[Mode::Read, Mode::Write]
        };
        for &mode in modes {
            let before = self.masters.commandstats().await.ok();
            let Timed {
                mut acquire,
                mut pair,
                mut evalsha,
                mut failures,
                mut trivial_calls,
            } = self.timed_pairs(&lock, mode, &trivial_key).await;
            // The same loop on a thread that blocks on the runtime itself, as a
            // `#[tokio::main]` function's body runs (ours only: the peers' clients
            // do nothing per acquire that would differ).
            if imp == Impl::Ours {
                let handle = tokio::runtime::Handle::current();
                let main = tokio::task::block_in_place(|| {
                    handle.block_on(self.timed_pairs(&lock, mode, &trivial_key))
                });
                let m = match mode {
                    Mode::Read => UncontendedNames::READ,
                    Mode::Write => UncontendedNames::WRITE,
                };
                let mut main_acquire = main.acquire.clone();
                let mut main_evalsha = main.evalsha.clone();
                self.results.record(
                    UNCONTENDED,
                    imp,
                    m.a50_main,
                    "us",
                    percentile(&mut main_acquire, 50.0),
                );
                self.results.record(
                    UNCONTENDED,
                    imp,
                    m.evalsha50_main,
                    "us",
                    percentile(&mut main_evalsha, 50.0),
                );
                failures += main.failures;
                trivial_calls += main.trivial_calls;
            }
            if failures > 0 {
                self.note(format!(
                    "{}: {failures} uncontended {mode:?} acquires/releases failed",
                    imp.label()
                ));
            }
            let after = self.masters.commandstats().await.ok();
            let m = match mode {
                Mode::Read => UncontendedNames::READ,
                Mode::Write => UncontendedNames::WRITE,
            };
            let trivial_us = self.results.median(LIMITS, Impl::Ours, "evalsha_server_us");
            let r = &mut self.results;
            if let (Some(before), Some(after)) = (before, after) {
                // Lock scripts only: the trivial calls' share is taken out with the
                // server time per trivial call measured in `limits`.
                let d = delta(&before, &after);
                let trivial_us = if trivial_us.is_nan() { 0.0 } else { trivial_us };
                let scripts = d.scripts.saturating_sub(trivial_calls);
                if scripts > 0 {
                    let usec = d.script_usec as f64 - trivial_calls as f64 * trivial_us;
                    r.record(
                        UNCONTENDED,
                        imp,
                        m.server,
                        "us",
                        usec.max(0.0) / scripts as f64,
                    );
                }
            }
            r.record(
                UNCONTENDED,
                imp,
                m.evalsha50,
                "us",
                percentile(&mut evalsha, 50.0),
            );
            r.record(
                UNCONTENDED,
                imp,
                m.a50,
                "us",
                percentile(&mut acquire, 50.0),
            );
            r.record(
                UNCONTENDED,
                imp,
                m.a99,
                "us",
                percentile(&mut acquire, 99.0),
            );
            r.record(UNCONTENDED, imp, m.p50, "us", percentile(&mut pair, 50.0));
            r.record(UNCONTENDED, imp, m.p99, "us", percentile(&mut pair, 99.0));
        }
    }

    /// 20 writers, each holding 1 ms, on one lock.
    pub async fn handoff(&mut self, run: usize, imp: Impl) {
        let name = self.name_on(run + 1, &format!("handoff-{run}"));
        let lock = self.clients.lock(imp, &name, LONG_WAIT);
        let exclusion = Arc::new(Exclusion::default());
        let before = self.masters.commandstats().await.ok();
        let log: Arc<Mutex<Vec<Handoff>>> = Arc::default();
        let failures = Arc::new(AtomicU64::new(0));
        let seconds = self.cfg.handoff_secs;
        let start = Instant::now();
        let end = start + secs(seconds);
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
                    match clients
                        .acquire(&lock, Mode::Write, Wait::Upto(LONG_WAIT))
                        .await
                    {
                        Ok(held) => {
                            let granted = Instant::now();
                            exclusion.enter(Mode::Write);
                            sleep(HANDOFF_HOLD).await;
                            exclusion.leave(Mode::Write);
                            let released = Instant::now();
                            if clients.release(held).await.is_err() {
                                failures.fetch_add(1, Ordering::Relaxed);
                            }
                            log.lock().unwrap_or_else(PoisonError::into_inner).push((
                                granted,
                                released,
                                ms(granted - asked),
                                writer,
                            ));
                        }
                        Err(_) => {
                            failures.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
        while set.join_next().await.is_some() {}
        let after = self.masters.commandstats().await.ok();
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
        let r = &mut self.results;
        r.record(
            HANDOFF,
            imp,
            "acquisitions_per_s",
            "1/s",
            log.len() as f64 / seconds,
        );
        r.record(HANDOFF, imp, "gap_p50", "ms", gap_p50);
        r.record(HANDOFF, imp, "gap_p99", "ms", percentile(&mut gaps, 99.0));
        r.record(HANDOFF, imp, "wait_p50", "ms", percentile(&mut waits, 50.0));
        r.record(HANDOFF, imp, "wait_p99", "ms", percentile(&mut waits, 99.0));
        r.record(HANDOFF, imp, "hold_p50", "ms", hold_p50);
        r.record(HANDOFF, imp, "hold_mean", "ms", mean(&holds));
        r.record(HANDOFF, imp, "gap_mean", "ms", mean(&gaps));
        r.record(
            HANDOFF,
            imp,
            "fair_bound",
            "ms",
            WRITERS as f64 * (hold_p50 + gap_p50),
        );
        r.record(
            HANDOFF,
            imp,
            "min_per_writer",
            "count",
            per_writer.iter().copied().min().unwrap_or(0) as f64,
        );
        r.record(
            HANDOFF,
            imp,
            "max_per_writer",
            "count",
            per_writer.iter().copied().max().unwrap_or(0) as f64,
        );
        r.record(
            HANDOFF,
            imp,
            "violations",
            "count",
            exclusion.violations() as f64,
        );
        if let (Some(before), Some(after)) = (before, after) {
            // Everything the run sent, over every acquisition it made (also the
            // ones after the window closed).
            let d = delta(&before, &after);
            let n = total.max(1) as f64;
            r.record(
                HANDOFF,
                imp,
                "scripts_per_acquisition",
                "count",
                d.scripts as f64 / n,
            );
            r.record(
                HANDOFF,
                imp,
                "subscriptions_per_acquisition",
                "count",
                d.subscriptions as f64 / n,
            );
        }
        r.handoff_gaps.entry(imp).or_default().extend(gaps);
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
        let start = Instant::now();
        let end = start + secs(seconds);
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
                    match clients
                        .acquire(&lock, Mode::Read, Wait::Upto(LONG_WAIT))
                        .await
                    {
                        Ok(held) => {
                            let granted = Instant::now();
                            exclusion.enter(Mode::Read);
                            sleep(STREAM_READ_HOLD).await;
                            exclusion.leave(Mode::Read);
                            let _ = clients.release(held).await;
                            if granted < end {
                                reads.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(_) => {
                            failures.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
        // The writer: waits measured from its request to its grant; a give-up counts
        // as a wait of `cap` (a lower bound) and as starved.
        let mut waits = Vec::new();
        let mut starved = 0u64;
        let mut writer_failures = 0u64;
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
                Err(Refused::Timeout) | Err(Refused::WouldBlock) => {
                    starved += 1;
                    waits.push(ms(cap));
                }
                Err(Refused::Failed(err)) => {
                    writer_failures += 1;
                    self.note(format!(
                        "{}: writer behind readers failed: {err}",
                        imp.label()
                    ));
                }
            }
            sleep(STREAM_WRITER_EVERY).await;
        }
        while set.join_next().await.is_some() {}
        let failures = failures.load(Ordering::Relaxed) + writer_failures;
        if failures > 0 {
            self.note(format!(
                "{}: {failures} failed acquires in writer-behind-readers",
                imp.label()
            ));
        }
        let attempts = waits.len();
        let r = &mut self.results;
        r.record(
            STREAM,
            imp,
            "writer_wait_p50",
            "ms",
            percentile(&mut waits, 50.0),
        );
        r.record(
            STREAM,
            imp,
            "writer_wait_p99",
            "ms",
            percentile(&mut waits, 99.0),
        );
        r.record(
            STREAM,
            imp,
            "writer_wait_max",
            "ms",
            percentile(&mut waits, 100.0),
        );
        r.record(STREAM, imp, "writer_attempts", "count", attempts as f64);
        r.record(STREAM, imp, "writer_starved", "count", starved as f64);
        r.record(
            STREAM,
            imp,
            "reads_per_s",
            "1/s",
            reads.load(Ordering::Relaxed) as f64 / seconds,
        );
        r.record(
            STREAM,
            imp,
            "violations",
            "count",
            exclusion.violations() as f64,
        );
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
                if let Ok(held) = clients
                    .acquire(&lock, mode, Wait::Upto(Duration::from_secs(30)))
                    .await
                {
                    let _ = clients.release(held).await;
                }
            });
        }
        sleep(secs(self.cfg.waiting_settle_secs)).await;
        let t = Instant::now();
        let sent = monitor_window(
            &self.topology,
            &mut self.masters,
            secs(self.cfg.waiting_secs),
        )
        .await;
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
                let r = &mut self.results;
                r.record(
                    WAITING,
                    imp,
                    "scripts_per_waiter_s",
                    "1/s",
                    sent.scripts as f64 / per,
                );
                r.record(
                    WAITING,
                    imp,
                    "commands_per_waiter_s",
                    "1/s",
                    (sent.scripts + sent.other) as f64 / per,
                );
                r.record(
                    WAITING,
                    imp,
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
    pub async fn redis_benchmark(&mut self, _run: usize) {
        let Some(args) = self.read_script.clone() else {
            return;
        };
        let Some(key) = args.get(3).cloned() else {
            return;
        };
        let master_index = self.topology.master_of(&key);
        let master = self.topology.masters[master_index].clone();
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
        let _: Result<i64, _> = self
            .masters
            .query(master_index, redis::cmd("DEL").arg(&key))
            .await;
        let requests = self.cfg.redis_benchmark_requests;
        let before = self.masters.commandstats().await.ok();
        let result = tokio::task::spawn_blocking(move || {
            redis_benchmark(&master, requests, 50, 16, 64, &command)
        })
        .await;
        let after = self.masters.commandstats().await.ok();
        if let (Some(before), Some(after)) = (before, after) {
            let d = delta(&before, &after);
            if d.scripts > 0 {
                self.results.record(
                    REDIS_BENCHMARK,
                    Impl::Ours,
                    "server_us_per_script",
                    "us",
                    d.script_usec as f64 / d.scripts as f64,
                );
            }
        }
        let fields: Result<i64, _> = self
            .masters
            .query(master_index, redis::cmd("HLEN").arg(&key))
            .await;
        let _: Result<i64, _> = self
            .masters
            .query(master_index, redis::cmd("DEL").arg(&key))
            .await;
        match result {
            Ok(Ok(rb)) => {
                if !matches!(fields, Ok(n) if n > 0) {
                    self.note(format!("redis-benchmark left no readers in {key}: its requests may have failed ({fields:?})"));
                }
                self.results.record(
                    REDIS_BENCHMARK,
                    Impl::Ours,
                    "read_script_rps",
                    "1/s",
                    rb.requests_per_sec,
                );
                self.results.record(
                    REDIS_BENCHMARK,
                    Impl::Ours,
                    "read_script_p50",
                    "ms",
                    rb.p50_ms,
                );
                self.redis_benchmarks.push(rb);
            }
            Ok(Err(err)) => self.note(err),
            Err(err) => self.note(format!("redis-benchmark task failed: {err}")),
        }
    }
}

//! The `sharing_cost` scenario: what shared and kept reads cost where they do not
//! pay. This crate only, each pair measured in the same run, alternating which goes
//! first:
//!
//! - **a soak-like mix** (`soak_mix`): 96 tasks over 3 clients (instances of a
//!   service) loop over 300 locks: pick one at random, 90% read / 10% write, hold
//!   0-2 ms, then release; 10% of the guards are dropped instead of released, and
//!   5% of the acquires are cancelled by a timeout of 0-2 ms. Once with the default
//!   options (reads shared), once with `share_reads(false)`, each on locks of its
//!   own: acquisitions per second, and the runtime's live tasks at the end (what
//!   sharing keeps alive: its listening and lingering grow with the locks in use,
//!   not with the acquisition rate);
//! - **one hot lock, reads kept** (`one_lock_kept`): 64 tasks of one client on one
//!   lock, 95% read / 5% write (the writes from the same client), hold one
//!   `yield_now`: `keep_reads(500 ms)` against the default, acquisitions per second.
//!
//! Each mix also records what it cost per acquisition: the masters' scripts,
//! commands and main-thread CPU, the benchmark process's CPU (the client's side,
//! which shares the two cores with the servers), and the process's heap at its peak
//! and after the mix. Run one way at a time (`BENCH_SHARING`, main.rs), the soak-like
//! mix's `rss_mib_after_*` is the process's RSS for that way alone.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rand::RngExt;
use redis_rwlock::{Error, LockClient, LockOptions, RwLock, RwLockReadGuard, RwLockWriteGuard};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep, timeout};

use crate::cluster::Counters;
use crate::locks::Impl;
use crate::process;
use crate::scenarios::{Bench, LONG_WAIT};

/// Result names.
pub mod names {
    pub const SOAK_MIX: &str = "soak_mix";
    pub const ONE_LOCK_KEPT: &str = "one_lock_kept";
}
use names::*;

/// The soak-like mix's shape.
const SOAK_CLIENTS: usize = 3;
const SOAK_TASKS_PER_CLIENT: usize = 32;
const SOAK_LOCKS: usize = 300;
const SOAK_WRITE_PERCENT: u32 = 10;
const SOAK_DROP_PERCENT: u32 = 10;
const SOAK_CANCEL_PERCENT: u32 = 5;
/// The hot-lock mix's shape.
const HOT_TASKS: usize = 64;
const HOT_WRITE_PERCENT: u32 = 5;
const HOT_KEEP: Duration = Duration::from_millis(500);

impl Bench {
    pub async fn sharing_cost(&mut self, run: usize) {
        let secs = self.cfg.throughput_secs;
        let order = if run.is_multiple_of(2) {
            [true, false]
        } else {
            [false, true]
        };
        let clients: Vec<LockClient> = self
            .instances(SOAK_CLIENTS)
            .await
            .iter()
            .map(|clients| clients.ours.clone())
            .collect();
        // `BENCH_SHARING=shared` (or `unshared`) runs the soak-like mix one way
        // only, and nothing else: the process's RSS then belongs to that way alone.
        let only = std::env::var("BENCH_SHARING").ok();
        let soak_order = order.map(|shared| {
            only.as_deref()
                .is_none_or(|only| (only == "shared") == shared)
                .then_some(shared)
        });
        for shared in soak_order.into_iter().flatten() {
            let options = LockOptions::default().share_reads(shared);
            let base = format!("soak-{run}-{shared}-{}", std::process::id());
            let costs = Costs::start(self).await;
            let mix = soak(&clients, &base, options, secs).await;
            let label = if shared { "shared" } else { "unshared" };
            let mut r = self.results.of(SOAK_MIX, Impl::Ours);
            r.put(format!("acquisitions_per_s_{label}"), "/s", mix.rate);
            costs.put(self, SOAK_MIX, label, mix.granted).await;
            // What stays alive once the mix is over: its guards are gone, so what
            // lives is the crate's own (listening, lingering entries, timers).
            let tasks = tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks();
            let mut r = self.results.of(SOAK_MIX, Impl::Ours);
            r.put(format!("live_tasks_after_{label}"), "tasks", tasks as f64);
            r.put(format!("rss_mib_after_{label}"), "MiB", process::rss_mib());
            if mix.failed > 0 {
                self.note(format!(
                    "soak mix ({label}): {} failed acquires",
                    mix.failed
                ));
            }
        }
        if only.is_some() {
            return;
        }
        let client = self.clients.ours.clone();
        for keep in order {
            let options = if keep {
                LockOptions::default().keep_reads(HOT_KEEP)
            } else {
                LockOptions::default()
            };
            let name = format!("hotkept-{run}-{keep}-{}", std::process::id());
            let lock = client.rwlock_with(self.name_on(0, &name), options.wait_timeout(LONG_WAIT));
            let costs = Costs::start(self).await;
            let mix = hot_lock(&lock, secs).await;
            let label = if keep { "kept" } else { "default" };
            self.results.of(ONE_LOCK_KEPT, Impl::Ours).put(
                format!("acquisitions_per_s_{label}"),
                "/s",
                mix.rate,
            );
            costs.put(self, ONE_LOCK_KEPT, label, mix.granted).await;
            if mix.failed > 0 {
                self.note(format!(
                    "one lock, reads kept ({label}): {} failed acquires",
                    mix.failed
                ));
            }
        }
    }
}

/// A read or a write guard.
enum Held {
    Read(RwLockReadGuard),
    Write(RwLockWriteGuard),
}

impl Held {
    async fn release(self) -> Result<(), Error> {
        match self {
            Held::Read(guard) => guard.release().await,
            Held::Write(guard) => guard.release().await,
        }
    }
}

/// Acquires `lock` for writing (`write`) or reading, waiting.
async fn acquire(lock: &RwLock, write: bool) -> Result<Held, Error> {
    Ok(if write {
        Held::Write(lock.write().await?)
    } else {
        Held::Read(lock.read().await?)
    })
}

/// Runs the soak-like mix for `secs` on locks named after `base`; acquisitions per
/// second (granted, counted at the grant), and failed acquires (not cancelled ones).
async fn soak(clients: &[LockClient], base: &str, options: LockOptions, secs: f64) -> Mix {
    let locks: Vec<Vec<RwLock>> = clients
        .iter()
        .map(|client| {
            (0..SOAK_LOCKS)
                .map(|i| {
                    client.rwlock_with(
                        format!("{base}-{i}"),
                        options.clone().wait_timeout(LONG_WAIT),
                    )
                })
                .collect()
        })
        .collect();
    let locks = Arc::new(locks);
    let (stop, granted, failed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut tasks = JoinSet::new();
    for client in 0..clients.len() {
        for _ in 0..SOAK_TASKS_PER_CLIENT {
            let (locks, stop, granted, failed) =
                (locks.clone(), stop.clone(), granted.clone(), failed.clone());
            tasks.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let (lock, write, cancel_after, hold_us, drop_it) = {
                        let mut rng = rand::rng();
                        let lock = locks[client][rng.random_range(0..SOAK_LOCKS)].clone();
                        let write = rng.random_range(0..100) < SOAK_WRITE_PERCENT;
                        let cancel = rng.random_range(0..100) < SOAK_CANCEL_PERCENT;
                        let cancel_after = cancel.then(|| rng.random_range(0..2_000));
                        (
                            lock,
                            write,
                            cancel_after,
                            rng.random_range(0..2_000),
                            rng.random_range(0..100) < SOAK_DROP_PERCENT,
                        )
                    };
                    let limit = cancel_after.map_or(LONG_WAIT, Duration::from_micros);
                    let hold = Duration::from_micros(hold_us);
                    match timeout(limit, acquire(&lock, write)).await {
                        Ok(Ok(guard)) => {
                            granted.fetch_add(1, Ordering::Relaxed);
                            sleep(hold).await;
                            if !drop_it {
                                let _ = guard.release().await;
                            }
                        }
                        Ok(Err(_)) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                        // Cancelled by the timeout.
                        Err(_) => {}
                    }
                }
            });
        }
    }
    let rate = rate_over(secs, &stop, &granted, tasks).await;
    Mix {
        rate,
        granted: granted.load(Ordering::Relaxed),
        failed: failed.load(Ordering::Relaxed),
    }
}

/// 64 tasks of one client on one lock, 95% reads, writes from the same client,
/// hold one `yield_now`, for `secs`: acquisitions per second, and failed acquires.
async fn hot_lock(lock: &RwLock, secs: f64) -> Mix {
    let (stop, granted, failed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut tasks = JoinSet::new();
    for _ in 0..HOT_TASKS {
        let (lock, stop, granted, failed) =
            (lock.clone(), stop.clone(), granted.clone(), failed.clone());
        tasks.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let write = rand::rng().random_range(0..100) < HOT_WRITE_PERCENT;
                let released = match acquire(&lock, write).await {
                    Ok(guard) => {
                        granted.fetch_add(1, Ordering::Relaxed);
                        tokio::task::yield_now().await;
                        guard.release().await
                    }
                    Err(err) => Err(err),
                };
                if released.is_err() {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    let rate = rate_over(secs, &stop, &granted, tasks).await;
    Mix {
        rate,
        granted: granted.load(Ordering::Relaxed),
        failed: failed.load(Ordering::Relaxed),
    }
}

/// What a mix did.
struct Mix {
    /// Acquisitions per second over the timed window.
    rate: f64,
    /// Acquisitions in all, the stop included.
    granted: u64,
    /// Failed acquires and releases (not cancelled acquires).
    failed: u64,
}

/// What a mix costs, per acquisition: the masters' scripts, commands and
/// main-thread CPU, the benchmark process's CPU (the client's side: on two cores
/// the two share the machine), and the heap at its peak and once the mix is over.
struct Costs {
    server: Option<Counters>,
    client_cpu_us: f64,
}

impl Costs {
    async fn start(bench: &mut Bench) -> Self {
        process::reset_peak();
        Costs {
            server: bench.masters.total().await.ok(),
            client_cpu_us: process::process_cpu_us(),
        }
    }

    /// Records the costs of a mix of `granted` acquisitions as `<what>_<label>`
    /// results of `scenario`.
    async fn put(self, bench: &mut Bench, scenario: &'static str, label: &str, granted: u64) {
        let client_cpu = process::process_cpu_us() - self.client_cpu_us;
        let peak = process::peak();
        let server = bench.masters.total().await.ok();
        let per = |v: f64| v / granted.max(1) as f64;
        let mut r = bench.results.of(scenario, Impl::Ours);
        if let (Some(before), Some(after)) = (self.server, server) {
            let d = after.since(&before);
            r.put(
                format!("scripts_per_acq_{label}"),
                "",
                per(d.scripts as f64),
            );
            r.put(
                format!("commands_per_acq_{label}"),
                "",
                per(d.commands as f64),
            );
            r.put(
                format!("server_cpu_us_per_acq_{label}"),
                "us",
                per(d.cpu_us),
            );
        }
        r.put(
            format!("client_cpu_us_per_acq_{label}"),
            "us",
            per(client_cpu),
        );
        r.put(format!("heap_peak_mib_{label}"), "MiB", mib(peak));
        r.put(
            format!("heap_live_after_mib_{label}"),
            "MiB",
            mib(process::live()),
        );
    }
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Lets `tasks` run for `secs`, then stops them (`stop`) and waits for them: the
/// acquisitions per second they counted in `granted` meanwhile.
async fn rate_over(
    secs: f64,
    stop: &AtomicBool,
    granted: &AtomicU64,
    mut tasks: JoinSet<()>,
) -> f64 {
    let started = Instant::now();
    sleep(Duration::from_secs_f64(secs)).await;
    let count = granted.load(Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    while tasks.join_next().await.is_some() {}
    count as f64 / elapsed
}

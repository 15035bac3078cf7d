//! The `shared_reads` scenario: what a read costs when it joins the client's read
//! hold, and how long a writer on another client waits behind a busy shared hold.
//! This crate only. Two parts per run, on locks of master 0:
//!
//! - **a join**: one task holds a read; `read()` + release by the same client,
//!   timed one by one (each joins the held hold and leaves it). Its baseline, in
//!   alternating blocks: the same pair on a handle with `share_reads(false)` (a
//!   server acquire and release each, as before shared reads);
//! - **a writer behind busy readers**: 16 tasks of one client loop read, hold 1 ms,
//!   release, so the client's hold is shared without pause; a writer on another
//!   client asks again and again, a pause of 10-30 ms between its holds, and each
//!   wait (from `write()` to the guard) is recorded;
//! - **a writer behind an idle kept hold**: a client with `keep_reads` reads and
//!   releases (its hold kept, idle), and 2-10 ms later a writer on another client
//!   asks; its wait is recorded (the call-back, the release, the hand-over).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rand::RngExt;
use redis_rwlock::{LockOptions, RwLock};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep};

use crate::locks::Impl;
use crate::scenarios::{Bench, LONG_WAIT};

/// Pairs per block of the join part.
const BLOCK: usize = 100;
/// Tasks that keep the shared hold busy.
pub const BUSY_READERS: usize = 16;

/// Result names.
pub mod names {
    pub const SHARED_JOIN: &str = "shared_read_join";
    pub const WRITER_BEHIND_SHARED: &str = "writer_behind_shared_readers";
    pub const WRITER_BEHIND_KEPT: &str = "writer_behind_kept_read";
}
use names::*;

impl Bench {
    pub async fn shared_reads(&mut self, run: usize) {
        self.shared_join(run).await;
        self.writer_behind_shared(run).await;
        self.writer_behind_kept(run).await;
    }

    fn shared_lock(&self, base: &str, options: LockOptions) -> RwLock {
        let name = self.name_on(0, base);
        self.clients
            .ours
            .rwlock_with(&name, options.wait_timeout(LONG_WAIT))
    }

    async fn shared_join(&mut self, run: usize) {
        let base = format!("shjoin-{run}");
        let shared = self.shared_lock(&base, LockOptions::default());
        let unshared = self.shared_lock(&base, LockOptions::default().share_reads(false));
        let Ok(anchor) = shared.read().await else {
            self.note("shared reads: the anchor read failed".into());
            return;
        };
        let blocks = (self.cfg.server_cost_iters / BLOCK).max(2);
        let mut times: [Vec<f64>; 2] = Default::default();
        let mut failures = 0u64;
        for block in 0..blocks {
            // Alternate which goes first, so drift hits both alike.
            let order = if block % 2 == 0 { [0, 1] } else { [1, 0] };
            for i in order {
                let lock = if i == 0 { &shared } else { &unshared };
                for _ in 0..BLOCK {
                    let started = Instant::now();
                    match lock.read().await {
                        Ok(guard) => {
                            times[i].push(started.elapsed().as_secs_f64() * 1e6);
                            if guard.release().await.is_err() {
                                failures += 1;
                            }
                        }
                        Err(_) => failures += 1,
                    }
                }
            }
        }
        let _ = anchor.release().await;
        if failures > 0 {
            self.note(format!("shared reads: {failures} failed reads"));
        }
        // A join's `read()`, and a server read's (`share_reads(false)`), in us.
        let mut r = self.results.of(SHARED_JOIN, Impl::Ours);
        let [joins, server] = &mut times;
        r.percentiles("join_us", "us", joins, &[50, 99]);
        r.percentiles("server_read_us", "us", server, &[50, 99]);
    }

    async fn writer_behind_shared(&mut self, run: usize) {
        let base = format!("shbusy-{run}");
        let readers = self.shared_lock(&base, LockOptions::default());
        let others = self.instances(2).await;
        let Some(other) = others.get(1) else {
            self.note("writer behind shared readers: no second client".into());
            return;
        };
        let writer = other.ours.rwlock_with(
            readers.name(),
            LockOptions::default().wait_timeout(LONG_WAIT),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = JoinSet::new();
        for _ in 0..BUSY_READERS {
            let (lock, stop) = (readers.clone(), stop.clone());
            tasks.spawn(async move {
                let mut failures = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    match lock.read().await {
                        Ok(guard) => {
                            sleep(Duration::from_millis(1)).await;
                            let _ = guard.release().await;
                        }
                        Err(_) => failures += 1,
                    }
                }
                failures
            });
        }
        sleep(Duration::from_millis(200)).await;
        let writes = if self.cfg.quick { 15 } else { 40 };
        let mut waits = Vec::new();
        let mut failed = 0u64;
        for _ in 0..writes {
            let pause = rand::rng().random_range(10..30);
            sleep(Duration::from_millis(pause)).await;
            let asked = Instant::now();
            match writer.write().await {
                Ok(guard) => {
                    waits.push(asked.elapsed().as_secs_f64() * 1e3);
                    sleep(Duration::from_millis(1)).await;
                    let _ = guard.release().await;
                }
                Err(_) => failed += 1,
            }
        }
        stop.store(true, Ordering::Relaxed);
        while let Some(done) = tasks.join_next().await {
            failed += done.unwrap_or(1);
        }
        self.record_writer_waits(WRITER_BEHIND_SHARED, waits, failed);
    }

    async fn writer_behind_kept(&mut self, run: usize) {
        let base = format!("shkept-{run}");
        let keep = Duration::from_secs(60);
        let reader = self.shared_lock(&base, LockOptions::default().keep_reads(keep));
        let others = self.instances(2).await;
        let Some(other) = others.get(1) else {
            self.note("writer behind a kept read: no second client".into());
            return;
        };
        let writer = other.ours.rwlock_with(
            reader.name(),
            LockOptions::default().wait_timeout(LONG_WAIT),
        );
        let writes = if self.cfg.quick { 30 } else { 100 };
        let mut waits = Vec::new();
        let mut failed = 0u64;
        for _ in 0..writes {
            match reader.read().await {
                Ok(guard) => {
                    let _ = guard.release().await;
                }
                Err(_) => {
                    failed += 1;
                    continue;
                }
            }
            let pause = rand::rng().random_range(2..10);
            sleep(Duration::from_millis(pause)).await;
            let asked = Instant::now();
            match writer.write().await {
                Ok(guard) => {
                    waits.push(asked.elapsed().as_secs_f64() * 1e3);
                    let _ = guard.release().await;
                }
                Err(_) => failed += 1,
            }
        }
        self.record_writer_waits(WRITER_BEHIND_KEPT, waits, failed);
    }

    /// A writer's waits (ms) under `scenario`: p50, p99, max and how many.
    fn record_writer_waits(&mut self, scenario: &'static str, mut waits: Vec<f64>, failed: u64) {
        if failed > 0 {
            self.note(format!("{scenario}: {failed} failures"));
        }
        let mut r = self.results.of(scenario, Impl::Ours);
        r.put("writes", "count", waits.len() as f64);
        r.percentiles("writer_wait_ms", "ms", &mut waits, &[50, 99, 100]);
    }
}

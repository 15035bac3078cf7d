//! The pattern upgradable reads exist for: several instances check a cache's age
//! under an upgradable read and refresh it only when stale. Each staleness period
//! gets exactly one refresh, and readers are never kept out by the checks, only
//! by the refreshes themselves.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::RngExt;
use redis::AsyncCommands;
use redis_rwlock::{Error, FencedWrites, MemoryStore, RwLock};
use tokio::time::{Instant, sleep};

use common::{Backend, client_now_ms, raw_cluster, unique_name};

/// The cached value is stale this long after its refresh.
const STALE_AFTER_MS: i64 = 400;
const RUN: Duration = Duration::from_secs(6);
const REFRESHERS: usize = 4;
const READERS: usize = 6;

/// What the refreshers and readers saw.
#[derive(Default)]
struct Seen {
    /// (version written, wall-clock ms of the refresh), in order.
    refreshes: Mutex<Vec<(u64, i64)>>,
    checks: AtomicU64,
    /// Refreshers between deciding to upgrade and releasing the write hold.
    refreshing: AtomicU64,
    /// How many refreshes have started, so a reader can tell one came and went
    /// while its request was out.
    started: AtomicU64,
    reads: AtomicU64,
    /// Readers refused while no refresh was under way.
    refused_by_checks: AtomicU64,
}

/// `"<version>:<refreshed at ms>"`.
fn parse(value: Option<String>) -> (u64, i64) {
    value
        .and_then(|v| {
            let (version, at) = v.split_once(':')?;
            Some((version.parse().ok()?, at.parse().ok()?))
        })
        .unwrap_or((0, 0))
}

/// Where the refreshers read the cached value.
enum Values {
    Redis(redis::cluster_async::ClusterConnection),
    Memory(MemoryStore),
}

impl Values {
    async fn of(backend: &Backend) -> Self {
        match backend.store() {
            Some(store) => Values::Memory(store.clone()),
            None => Values::Redis(raw_cluster().await),
        }
    }

    async fn get(&mut self, key: &str) -> Option<String> {
        match self {
            Values::Redis(redis) => redis.get(key).await.unwrap(),
            Values::Memory(store) => store.value(key).map(|v| String::from_utf8(v).unwrap()),
        }
    }
}

async fn refresher(
    lock: RwLock,
    cache: String,
    seen: Arc<Seen>,
    stop: Instant,
    mut values: Values,
) {
    while Instant::now() < stop {
        let pause = rand::rng().random_range(10..40);
        sleep(Duration::from_millis(pause)).await;
        let guard = lock.upgradable_read().await.unwrap();
        seen.checks.fetch_add(1, Ordering::Relaxed);
        let (version, at) = parse(values.get(&cache).await);
        if client_now_ms() - at <= STALE_AFTER_MS {
            guard.release().await.unwrap();
            continue;
        }
        seen.started.fetch_add(1, Ordering::SeqCst);
        seen.refreshing.fetch_add(1, Ordering::SeqCst);
        let writer = guard.upgrade().await.unwrap();
        let now = client_now_ms();
        let value = format!("{}:{now}", version + 1);
        writer
            .fenced_write(FencedWrites::new().set(&cache, value))
            .await
            .unwrap();
        seen.refreshes.lock().unwrap().push((version + 1, now));
        writer.release().await.unwrap();
        seen.refreshing.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn reader(lock: RwLock, seen: Arc<Seen>, stop: Instant) {
    while Instant::now() < stop {
        let started = seen.started.load(Ordering::SeqCst);
        let busy = seen.refreshing.load(Ordering::SeqCst) > 0;
        match lock.try_read().await {
            Ok(guard) => {
                seen.reads.fetch_add(1, Ordering::Relaxed);
                sleep(Duration::from_millis(2)).await;
                guard.release().await.unwrap();
            }
            Err(Error::WouldBlock) => {
                let during_refresh = busy
                    || seen.refreshing.load(Ordering::SeqCst) > 0
                    || seen.started.load(Ordering::SeqCst) != started;
                if !during_refresh {
                    seen.refused_by_checks.fetch_add(1, Ordering::Relaxed);
                }
                sleep(Duration::from_millis(2)).await;
            }
            Err(err) => panic!("reader: {err}"),
        }
    }
}

on_both_backends! {
async fn racing_refreshers_refresh_once_per_staleness_period_and_never_block_readers(backend: Backend) {
    let name = unique_name("refresh-once");
    let cache = format!("cache:{{{name}}}");
    let seen = Arc::new(Seen::default());
    // Each refresher and the readers on a client of their own: separate instances.
    // All connected before the clock starts: the first connection starts the
    // cluster, which took 4 s of a 6 s run on a loaded machine.
    let mut refreshers = Vec::new();
    for _ in 0..REFRESHERS {
        refreshers.push((backend.client().await, Values::of(&backend).await));
    }
    let readers = backend.client().await;
    let stop = Instant::now() + RUN;
    let mut tasks = Vec::new();
    for (client, values) in refreshers {
        tasks.push(tokio::spawn(refresher(
            client.rwlock(&name),
            cache.clone(),
            seen.clone(),
            stop,
            values,
        )));
    }
    for _ in 0..READERS {
        tasks.push(tokio::spawn(reader(
            readers.rwlock(&name),
            seen.clone(),
            stop,
        )));
    }
    for task in tasks {
        task.await.unwrap();
    }

    let refreshes = seen.refreshes.lock().unwrap().clone();
    let checks = seen.checks.load(Ordering::Relaxed);
    let reads = seen.reads.load(Ordering::Relaxed);
    println!(
        "{} refreshes, {checks} checks, {reads} reads",
        refreshes.len()
    );
    // Every refresh built on the one before: nobody refreshed from a value another
    // refresher had already replaced.
    for (i, &(version, _)) in refreshes.iter().enumerate() {
        assert_eq!(version, i as u64 + 1, "refreshes: {refreshes:?}");
    }
    // One refresh per staleness period: none came before the value went stale.
    for pair in refreshes.windows(2) {
        let gap = pair[1].1 - pair[0].1;
        assert!(
            gap > STALE_AFTER_MS,
            "two refreshes {gap} ms apart: {refreshes:?}"
        );
    }
    let periods = RUN.as_millis() as usize / STALE_AFTER_MS as usize;
    assert!(
        refreshes.len() >= periods / 3,
        "{} refreshes in {periods} staleness periods",
        refreshes.len()
    );
    assert!(
        checks > 3 * refreshes.len() as u64,
        "{checks} checks for {} refreshes",
        refreshes.len()
    );
    assert!(reads > 100, "{reads} reads");
    assert_eq!(
        seen.refused_by_checks.load(Ordering::Relaxed),
        0,
        "readers were refused while only checks ran ({checks} checks, {reads} reads)"
    );
}
}

//! The demo: a read-heavy cache guarded by one lock.
//!
//! Reader tasks on two clients (think: two service instances) serve a cached value
//! under the read lock. Each instance also runs a refresher that checks the value's
//! age ten times a second under an upgradable read (readers go on meanwhile) and,
//! only when it is stale, upgrades to the write lock and rebuilds it: however the
//! two race, each staleness period gets one refresh. Once a second a line reports
//! reads/s, refreshes, checks, the longest reader wait and the last upgrade's wait.
//! The pending upgrade keeps new readers out, so that wait stays short however busy
//! the readers are.
//!
//! Run it with `bash cluster-compose/demo.sh` (starts a local cluster), or point it at
//! your own cluster: `REDIS_CLUSTER_NODES=redis://host:7000 cargo run --example cache_refresh`.
//! `DEMO_SECONDS` sets how long it runs (default 20).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use redis_rwlock::{FencedWrites, LockClient, RwLock};
use tokio::time::{Instant, interval, sleep};

const READERS_PER_CLIENT: usize = 16;
/// The value is rebuilt once it is this old.
const STALE_AFTER: Duration = Duration::from_secs(2);
/// How often each refresher looks at the value's age.
const CHECK_EVERY: Duration = Duration::from_millis(100);

#[derive(Default)]
struct Stats {
    reads: AtomicU64,
    refreshes: AtomicU64,
    checks: AtomicU64,
    longest_read_wait_us: AtomicU64,
    last_upgrade_wait_us: AtomicU64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let nodes = std::env::var("REDIS_CLUSTER_NODES")
        .map_err(|_| "set REDIS_CLUSTER_NODES, or run `bash cluster-compose/demo.sh`")?;
    let nodes: Vec<&str> = nodes.split(',').collect();
    let seconds: u64 = std::env::var("DEMO_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);

    let clients = [
        LockClient::cluster(&nodes).await?,
        LockClient::cluster(&nodes).await?,
    ];
    let redis = redis::cluster::ClusterClient::new(nodes.clone())?
        .get_async_connection()
        .await?;
    let stats = Arc::new(Stats::default());
    let stop = Instant::now() + Duration::from_secs(seconds);

    // The value lives beside the lock: `cache:{demo}` shares the lock's hash tag.
    let mut tasks = Vec::new();
    for client in &clients {
        for _ in 0..READERS_PER_CLIENT {
            tasks.push(tokio::spawn(serve_reads(
                client.rwlock("demo"),
                redis.clone(),
                stats.clone(),
                stop,
            )));
        }
    }
    for client in &clients {
        tasks.push(tokio::spawn(refresh(
            client.rwlock("demo"),
            redis.clone(),
            stats.clone(),
            stop,
        )));
    }

    println!(
        "{} readers and a refresher on each of 2 clients; the value is stale after \
         {STALE_AFTER:?}; for {seconds} s",
        2 * READERS_PER_CLIENT
    );
    let mut tick = interval(Duration::from_secs(1));
    tick.tick().await;
    let mut last_reads = 0;
    while Instant::now() < stop {
        tick.tick().await;
        let reads = stats.reads.load(Ordering::Relaxed);
        println!(
            "reads/s {:>6}  refreshes {:>3}  checks {:>4}  longest reader wait {:>7.2} ms  upgrade wait {:>7.2} ms",
            reads - last_reads,
            stats.refreshes.load(Ordering::Relaxed),
            stats.checks.load(Ordering::Relaxed),
            stats.longest_read_wait_us.swap(0, Ordering::Relaxed) as f64 / 1000.0,
            stats.last_upgrade_wait_us.load(Ordering::Relaxed) as f64 / 1000.0,
        );
        last_reads = reads;
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

type Conn = redis::cluster_async::ClusterConnection;
type TaskResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

async fn serve_reads(
    lock: RwLock,
    mut redis: Conn,
    stats: Arc<Stats>,
    stop: Instant,
) -> TaskResult {
    while Instant::now() < stop {
        let asked = Instant::now();
        let guard = lock.read().await?;
        let waited = asked.elapsed().as_micros() as u64;
        stats
            .longest_read_wait_us
            .fetch_max(waited, Ordering::Relaxed);
        let _value: Option<String> = redis.get("cache:{demo}").await?;
        stats.reads.fetch_add(1, Ordering::Relaxed);
        guard.release().await?;
    }
    Ok(())
}

async fn refresh(lock: RwLock, mut redis: Conn, stats: Arc<Stats>, stop: Instant) -> TaskResult {
    while Instant::now() < stop {
        sleep(CHECK_EVERY).await;
        // Only one upgradable reader at a time: the other instance's refresher waits
        // here, and then finds the value fresh.
        let guard = lock.upgradable_read().await?;
        stats.checks.fetch_add(1, Ordering::Relaxed);
        let value: Option<String> = redis.get("cache:{demo}").await?;
        if !is_stale(value.as_deref()) {
            guard.release().await?;
            continue;
        }
        let asked = Instant::now();
        let writer = guard.upgrade().await?; // no other writer in between
        stats
            .last_upgrade_wait_us
            .store(asked.elapsed().as_micros() as u64, Ordering::Relaxed);
        sleep(Duration::from_millis(20)).await; // rebuilding the value
        let value = format!("{}:{}", now_ms(), writer.fencing_token());
        // Written only if this guard still holds: a refresher paused past its lease
        // cannot overwrite a newer value.
        writer
            .fenced_write(FencedWrites::new().set_with_expiry(
                "cache:{demo}",
                value,
                Duration::from_secs(60),
            ))
            .await?;
        stats.refreshes.fetch_add(1, Ordering::Relaxed);
        writer.release().await?;
    }
    Ok(())
}

/// The value is `"<built at, ms since the epoch>:<fencing token>"`.
fn is_stale(value: Option<&str>) -> bool {
    let built = value
        .and_then(|v| v.split_once(':'))
        .and_then(|(at, _)| at.parse::<u128>().ok())
        .unwrap_or(0);
    now_ms().saturating_sub(built) >= STALE_AFTER.as_millis()
}

fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

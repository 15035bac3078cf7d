//! The demo: a read-heavy cache guarded by one lock.
//!
//! Reader tasks on two clients (think: two service instances) serve a cached value
//! under the read lock; a refresher rebuilds it under the write lock every couple of
//! seconds. Once a second a line reports reads/s, refreshes, the longest reader wait
//! and the refresher's wait. Writer preference keeps the refresher's wait short
//! however busy the readers are.
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
const REFRESH_EVERY: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Stats {
    reads: AtomicU64,
    refreshes: AtomicU64,
    longest_read_wait_us: AtomicU64,
    last_write_wait_us: AtomicU64,
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
    tasks.push(tokio::spawn(refresh(
        clients[0].rwlock("demo"),
        stats.clone(),
        stop,
    )));

    println!(
        "{} readers on 2 clients, one refresher every {REFRESH_EVERY:?}, for {seconds} s",
        2 * READERS_PER_CLIENT
    );
    let mut tick = interval(Duration::from_secs(1));
    tick.tick().await;
    let mut last_reads = 0;
    while Instant::now() < stop {
        tick.tick().await;
        let reads = stats.reads.load(Ordering::Relaxed);
        println!(
            "reads/s {:>6}  refreshes {:>3}  longest reader wait {:>7.2} ms  refresher wait {:>7.2} ms",
            reads - last_reads,
            stats.refreshes.load(Ordering::Relaxed),
            stats.longest_read_wait_us.swap(0, Ordering::Relaxed) as f64 / 1000.0,
            stats.last_write_wait_us.load(Ordering::Relaxed) as f64 / 1000.0,
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

async fn refresh(lock: RwLock, stats: Arc<Stats>, stop: Instant) -> TaskResult {
    while Instant::now() < stop {
        let asked = Instant::now();
        let guard = lock.write().await?;
        stats
            .last_write_wait_us
            .store(asked.elapsed().as_micros() as u64, Ordering::Relaxed);
        sleep(Duration::from_millis(20)).await; // rebuilding the value
        let value = format!("built under fencing token {}", guard.fencing_token());
        // Written only if this guard still holds: a refresher paused past its lease
        // cannot overwrite a newer value.
        guard
            .fenced_write(FencedWrites::new().set_with_expiry(
                "cache:{demo}",
                value,
                Duration::from_secs(60),
            ))
            .await?;
        stats.refreshes.fetch_add(1, Ordering::Relaxed);
        guard.release().await?;
        sleep(REFRESH_EVERY).await;
    }
    Ok(())
}

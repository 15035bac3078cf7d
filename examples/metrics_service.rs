//! A service that exports the lock's metrics to Prometheus.
//!
//! Reader tasks serve a cached value under the read lock; one refresher rebuilds it
//! under the write lock a few times a second, writing through its guard (a fenced
//! write). The crate's metrics (feature `metrics`) go to `metrics-exporter-prometheus`,
//! whose HTTP listener serves them at `http://127.0.0.1:<port>/metrics`; the port is
//! printed at start. The lock is labelled with its name (`with_metrics_name`). The
//! crate's two histograms (`redis_rwlock_wait_seconds`, `redis_rwlock_hold_seconds`)
//! are given buckets ([`SECONDS_BUCKETS`]), so that Prometheus gets histograms it can
//! sum across instances: without buckets the exporter sends summaries (quantiles
//! computed in this process alone). Errors are printed with their causes
//! ([`ErrorChain`]); the lock's own say which lock and what failed, so they need no
//! prefix of ours.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --features metrics --example metrics_service
//! REDIS_CLUSTER_NODES=redis://127.0.0.1:7000 cargo run --features metrics --example metrics_service
//! curl -s http://127.0.0.1:<port>/metrics | grep redis_rwlock_
//! ```
//!
//! Settings (environment): `REDIS_CLUSTER_NODES` (comma-separated) for a cluster, else
//! `REDIS_URL` (default `redis://127.0.0.1:6379`); `METRICS_PORT` (default: a free
//! port); `RUN_SECONDS` (default 30): how long the readers and the refresher run;
//! `LINGER_SECONDS` (default 0): how long the metrics are still served afterwards,
//! for a last scrape; `LOCK_NAME` (default `metrics-demo`); `READERS` (default 4).
//! Ctrl-C ends either phase early. The last line before lingering says what was
//! done: `done: reads=<n> writes=<n>`, each a granted and released hold.

use std::net::{Ipv4Addr, TcpListener};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use redis::AsyncCommands;
use redis_rwlock::{ErrorChain, FencedWrites, LockClient, LockOptions, RwLock};
use tokio::time::{interval, sleep};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Upper bounds (seconds) of the buckets of the crate's histograms, from an
/// uncontended acquire (about a millisecond) to a wait or hold of half a minute.
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// How often the refresher rebuilds the value.
const REFRESH_EVERY: Duration = Duration::from_millis(250);
/// A reader's pause between two reads.
const READ_PAUSE: Duration = Duration::from_millis(5);

#[derive(Default)]
struct Done {
    reads: AtomicU64,
    writes: AtomicU64,
    errors: AtomicU64,
}

/// A plain connection for the cached value, on one server or a cluster.
#[derive(Clone)]
enum Cache {
    Server(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Cache {
    async fn get(&mut self, key: &str) -> redis::RedisResult<Option<String>> {
        match self {
            Cache::Server(conn) => conn.get(key).await,
            Cache::Cluster(conn) => conn.get(key).await,
        }
    }
}

fn setting<T: std::str::FromStr>(name: &str, default: T) -> Result<T, BoxError> {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .map_err(|_| format!("{name}={value:?} is not valid").into()),
        Err(_) => Ok(default),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("metrics_service: {}", ErrorChain(err.as_ref()));
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), BoxError> {
    let run = Duration::from_secs(setting("RUN_SECONDS", 30)?);
    let linger = Duration::from_secs(setting("LINGER_SECONDS", 0)?);
    let readers: usize = setting("READERS", 4)?;
    let name: String = setting("LOCK_NAME", "metrics-demo".to_owned())?;
    let port = match setting("METRICS_PORT", 0u16)? {
        // A free port (another process may take it before the exporter binds it:
        // set METRICS_PORT where that matters).
        0 => TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port(),
        port => port,
    };

    // The recorder first: what the lock records before it is installed is lost.
    // Buckets make the crate's histograms Prometheus histograms, not summaries.
    PrometheusBuilder::new()
        .with_http_listener((Ipv4Addr::LOCALHOST, port))
        .set_buckets_for_metric(Matcher::Prefix("redis_rwlock_".into()), SECONDS_BUCKETS)?
        .install()?;
    redis_rwlock::describe_metrics();
    println!("metrics: http://127.0.0.1:{port}/metrics");

    let (client, cache) = connect().await?;
    let options = LockOptions::default().wait_timeout(Duration::from_secs(5));
    let lock = client.rwlock_with(&name, options).with_metrics_name();
    let key = format!("cache:{{{name}}}"); // beside the lock: same hash tag

    let done = Arc::new(Done::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..readers {
        tasks.push(tokio::spawn(serve_reads(
            lock.clone(),
            cache.clone(),
            key.clone(),
            done.clone(),
            stop.clone(),
        )));
    }
    tasks.push(tokio::spawn(refresh(
        lock.clone(),
        key.clone(),
        done.clone(),
        stop.clone(),
    )));
    println!(
        "{readers} readers and a refresher on lock {name:?} for {}s (Ctrl-C stops)",
        run.as_secs()
    );

    let mut report = interval(Duration::from_secs(1));
    report.tick().await;
    let finish = sleep(run);
    tokio::pin!(finish);
    loop {
        tokio::select! {
            () = &mut finish => break,
            _ = tokio::signal::ctrl_c() => break,
            _ = report.tick() => println!(
                "reads {} writes {} errors {}",
                done.reads.load(Ordering::Relaxed),
                done.writes.load(Ordering::Relaxed),
                done.errors.load(Ordering::Relaxed),
            ),
        }
    }
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await?;
    }
    println!(
        "done: reads={} writes={}",
        done.reads.load(Ordering::Relaxed),
        done.writes.load(Ordering::Relaxed)
    );

    if !linger.is_zero() {
        println!(
            "serving the metrics {}s more (Ctrl-C stops)",
            linger.as_secs()
        );
        tokio::select! {
            () = sleep(linger) => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    client.shutdown(Duration::from_secs(2)).await?;
    Ok(())
}

/// The lock's client and a connection for the cached value, from the environment.
async fn connect() -> Result<(LockClient, Cache), BoxError> {
    if let Ok(nodes) = std::env::var("REDIS_CLUSTER_NODES") {
        let nodes: Vec<&str> = nodes.split(',').collect();
        let client = LockClient::cluster(&nodes).await?;
        let cache = redis::cluster::ClusterClient::new(nodes)?
            .get_async_connection()
            .await?;
        return Ok((client, Cache::Cluster(cache)));
    }
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = LockClient::standalone(&url).await?;
    let cache = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    Ok((client, Cache::Server(cache)))
}

/// One reader: reads the value under the read lock until told to stop.
async fn serve_reads(
    lock: RwLock,
    mut cache: Cache,
    key: String,
    done: Arc<Done>,
    stop: Arc<AtomicBool>,
) {
    while !stop.load(Ordering::Relaxed) {
        match lock.read().await {
            Ok(guard) => {
                done.reads.fetch_add(1, Ordering::Relaxed);
                if let Err(err) = cache.get(&key).await {
                    eprintln!("reading the cache: {}", ErrorChain(&err));
                }
                if let Err(err) = guard.release().await {
                    eprintln!("metrics_service: {}", ErrorChain(&err));
                }
            }
            Err(err) => {
                done.errors.fetch_add(1, Ordering::Relaxed);
                eprintln!("metrics_service: {}", ErrorChain(&err));
            }
        }
        sleep(READ_PAUSE).await;
    }
}

/// The refresher: rebuilds the value under the write lock, writing it through the
/// guard, until told to stop.
async fn refresh(lock: RwLock, key: String, done: Arc<Done>, stop: Arc<AtomicBool>) {
    let mut every = interval(REFRESH_EVERY);
    while !stop.load(Ordering::Relaxed) {
        every.tick().await;
        match lock.write().await {
            Ok(writer) => {
                done.writes.fetch_add(1, Ordering::Relaxed);
                let value = format!("rebuilt under fencing token {}", writer.fencing_token());
                let writes =
                    FencedWrites::new().set_with_expiry(&key, value, Duration::from_secs(60));
                if let Err(err) = writer.fenced_write(writes).await {
                    eprintln!("metrics_service: {}", ErrorChain(&err));
                }
                if let Err(err) = writer.release().await {
                    eprintln!("metrics_service: {}", ErrorChain(&err));
                }
            }
            Err(err) => {
                done.errors.fetch_add(1, Ordering::Relaxed);
                eprintln!("metrics_service: {}", ErrorChain(&err));
            }
        }
    }
}

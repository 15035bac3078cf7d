//! The demo: a read-heavy cache guarded by one lock, and a verdict on what it showed.
//!
//! Reader tasks on two clients (think: two service instances) serve a cached value
//! under the read lock. Each instance also runs a refresher that checks the value's
//! age ten times a second under an upgradable read (readers go on meanwhile) and,
//! only when it is stale, upgrades to the write lock and rebuilds it. Once a second
//! a line reports reads/s, refreshes, checks, the longest reader wait and the last
//! upgrade's wait. The pending upgrade keeps new readers out, so that wait stays
//! short however busy the readers are.
//!
//! The last line is the verdict: whether what the tasks saw is what the lock
//! promises. Readers read the value at the start and at the end of each hold: no
//! write may land in between. A refresher reads it again after the upgrade: it must
//! still be the stale value it looked at (no writer gets in between an upgradable
//! read and its upgrade), so no stale period is refreshed twice however the two
//! refreshers race; and each new value's fencing token must be above the one it
//! replaces. The demo exits 0 when all of that held, 1 when it did not or a lock
//! operation failed (the error is printed with its causes, by [`ErrorChain`]).
//!
//! Run it with `bash cluster-compose/demo.sh` (builds it, starts a local cluster),
//! or against your own cluster:
//! `REDIS_CLUSTER_NODES=redis://host:7000 cargo run --release -p redis-rwlock-demo`.
//! `DEMO_SECONDS` sets how long it runs (default 20).

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis_rwlock::redis::{self, AsyncCommands};
use redis_rwlock::{ErrorChain, FencedWrites, LockClient, RwLock};
use tokio::time::{Instant, interval, sleep};

type BoxError = Box<dyn Error + Send + Sync>;
type Conn = redis::cluster_async::ClusterConnection;

const READERS_PER_CLIENT: usize = 16;
/// The value is rebuilt once it is this old.
const STALE_AFTER: Duration = Duration::from_secs(2);
/// How often each refresher looks at the value's age.
const CHECK_EVERY: Duration = Duration::from_millis(100);
/// The cached value: beside the lock, since it shares the lock's hash tag.
const KEY: &str = "cache:{demo}";

#[derive(Default)]
struct Stats {
    reads: AtomicU64,
    refreshes: AtomicU64,
    checks: AtomicU64,
    longest_read_wait_us: AtomicU64,
    last_upgrade_wait_us: AtomicU64,
    /// The oldest value a reader was served, in ms.
    oldest_read_ms: AtomicU64,
    /// Reads whose value changed while they held the read lock.
    changed_under_read: AtomicU64,
    /// Refreshes whose value changed between the look and the write.
    changed_before_upgrade: AtomicU64,
    /// New values whose fencing token was not above the replaced one's.
    token_not_rising: AtomicU64,
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("demo: {}", ErrorChain(err.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// Runs the demo; `Ok(true)` when everything was as the lock promises.
async fn run() -> Result<bool, BoxError> {
    let nodes = std::env::var("REDIS_CLUSTER_NODES")
        .map_err(|_| "set REDIS_CLUSTER_NODES, or run `bash cluster-compose/demo.sh`")?;
    let nodes: Vec<&str> = nodes.split(',').collect();
    let seconds: u64 = match std::env::var("DEMO_SECONDS") {
        Ok(text) => text
            .parse()
            .map_err(|_| format!("DEMO_SECONDS={text:?} is not a number of seconds"))?,
        Err(_) => 20,
    };

    let clients = [
        LockClient::cluster(&nodes).await?,
        LockClient::cluster(&nodes).await?,
    ];
    let redis = redis::cluster::ClusterClient::new(nodes.clone())?
        .get_async_connection()
        .await?;
    let stats = Arc::new(Stats::default());
    let stop = Instant::now() + Duration::from_secs(seconds);

    let task = |client: &LockClient| Task {
        lock: client.rwlock("demo"),
        redis: redis.clone(),
        stats: stats.clone(),
        stop,
    };
    let mut tasks = Vec::new();
    for client in &clients {
        for _ in 0..READERS_PER_CLIENT {
            tasks.push(tokio::spawn(task(client).serve_reads()));
        }
        tasks.push(tokio::spawn(task(client).refresh()));
    }

    println!(
        "{READERS_PER_CLIENT} readers and a refresher on each of 2 clients ({} readers \
         in all); the value is stale after {STALE_AFTER:?}; for {seconds} s",
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
    for client in &clients {
        client.shutdown(Duration::from_secs(2)).await?;
    }
    let (kept, verdict) = stats.verdict();
    println!("verdict: {verdict}");
    Ok(kept)
}

impl Stats {
    /// Whether the lock kept its promises in this run, and the line that says so.
    fn verdict(&self) -> (bool, String) {
        let count = |n: &AtomicU64| n.load(Ordering::Relaxed);
        let broken = [
            (
                count(&self.changed_under_read),
                "reads saw the value change under their read lock",
            ),
            (
                count(&self.changed_before_upgrade),
                "refreshes found the value changed between their look and their upgrade",
            ),
            (
                count(&self.token_not_rising),
                "new values had a fencing token not above the one they replaced",
            ),
        ];
        let broken: Vec<String> = broken
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| format!("{n} {what}"))
            .collect();
        let oldest = Duration::from_millis(count(&self.oldest_read_ms));
        let on_time = if oldest <= STALE_AFTER + Duration::from_secs(1) {
            "the readers never held the refreshers off"
        } else {
            "refreshes ran late (a busy machine?)"
        };
        let refreshers = match count(&self.refreshes) {
            0 => "no refresh ran (a run too short? set DEMO_SECONDS)".to_owned(),
            _ => format!(
                "the oldest value served was {:.1} s old (stale after {:.0} s): {on_time}",
                oldest.as_secs_f64(),
                STALE_AFTER.as_secs_f64()
            ),
        };
        let seen = format!(
            "{} reads, none changed under its read lock; {} refreshes, each of the stale \
             value its refresher looked at (no period refreshed twice), fencing tokens \
             rising; {refreshers}",
            count(&self.reads),
            count(&self.refreshes),
        );
        if broken.is_empty() {
            (true, format!("as the lock promises: {seen}"))
        } else {
            (
                false,
                format!("NOT as the lock promises: {}", broken.join("; ")),
            )
        }
    }
}

/// What each task works with: the lock (through its instance's client), a
/// connection for the value, the figures all tasks share, and when to stop.
struct Task {
    lock: RwLock,
    redis: Conn,
    stats: Arc<Stats>,
    stop: Instant,
}

impl Task {
    /// A reader: reads the value twice under each read hold.
    async fn serve_reads(mut self) -> Result<(), BoxError> {
        while Instant::now() < self.stop {
            let asked = Instant::now();
            let guard = self.lock.read().await?;
            let waited = asked.elapsed().as_micros() as u64;
            self.stats
                .longest_read_wait_us
                .fetch_max(waited, Ordering::Relaxed);
            let served: Option<String> = self.redis.get(KEY).await?;
            let at_end: Option<String> = self.redis.get(KEY).await?;
            if served != at_end {
                self.stats
                    .changed_under_read
                    .fetch_add(1, Ordering::Relaxed);
            }
            // A value of this run's (a refresh has finished: none can be under way while
            // this read holds); one left by an earlier run may be any age.
            let refreshed = self.stats.refreshes.load(Ordering::Relaxed) > 0;
            if let Some(value) = Value::parse(served.as_deref()).filter(|_| refreshed) {
                let age = now_ms().saturating_sub(value.built_ms);
                self.stats.oldest_read_ms.fetch_max(age, Ordering::Relaxed);
            }
            self.stats.reads.fetch_add(1, Ordering::Relaxed);
            guard.release().await?;
        }
        Ok(())
    }

    /// A refresher: looks at the value's age under an upgradable read and rebuilds it
    /// under the write hold when it is stale.
    async fn refresh(mut self) -> Result<(), BoxError> {
        while Instant::now() < self.stop {
            sleep(CHECK_EVERY).await;
            // Only one upgradable reader at a time: the other instance's refresher waits
            // here, and then finds the value fresh.
            let guard = self.lock.upgradable_read().await?;
            self.stats.checks.fetch_add(1, Ordering::Relaxed);
            let looked: Option<String> = self.redis.get(KEY).await?;
            let stale = Value::parse(looked.as_deref()).is_none_or(|value| value.is_stale());
            if !stale {
                guard.release().await?;
                continue;
            }
            let asked = Instant::now();
            let writer = guard.upgrade().await?; // no other writer in between
            self.stats
                .last_upgrade_wait_us
                .store(asked.elapsed().as_micros() as u64, Ordering::Relaxed);
            let replaced: Option<String> = self.redis.get(KEY).await?;
            if replaced != looked {
                self.stats
                    .changed_before_upgrade
                    .fetch_add(1, Ordering::Relaxed);
            }
            let token = writer.fencing_token();
            if Value::parse(replaced.as_deref()).is_some_and(|old| old.token >= token) {
                self.stats.token_not_rising.fetch_add(1, Ordering::Relaxed);
            }
            sleep(Duration::from_millis(20)).await; // rebuilding the value
            let value = format!("{}:{token}", now_ms());
            // Written only if this guard still holds: a refresher paused past its lease
            // cannot overwrite a newer value.
            let writes = FencedWrites::new().set_with_expiry(KEY, value, Duration::from_secs(60));
            writer.fenced_write(writes).await?;
            self.stats.refreshes.fetch_add(1, Ordering::Relaxed);
            writer.release().await?;
        }
        Ok(())
    }
}

/// The cached value, `"<built at, ms since the epoch>:<fencing token>"`.
struct Value {
    built_ms: u64,
    token: u64,
}

impl Value {
    fn parse(text: Option<&str>) -> Option<Value> {
        let (built, token) = text?.split_once(':')?;
        Some(Value {
            built_ms: built.parse().ok()?,
            token: token.parse().ok()?,
        })
    }

    fn is_stale(&self) -> bool {
        now_ms().saturating_sub(self.built_ms) >= STALE_AFTER.as_millis() as u64
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

//! Helpers for tests of the lock itself: clients on the shared servers, unique
//! names, state polling and an in-process exclusion checker.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::RngExt;
use redis_rwlock::{Error, LockClient, LockState, RwLock};
use tokio::time::Instant;

use super::{LocalRedis, shared_cluster, shared_standalone};

/// A client on this test binary's shared cluster.
pub async fn cluster_client() -> LockClient {
    LockClient::cluster(shared_cluster().urls())
        .await
        .expect("connect to the test cluster")
}

/// A client on this test binary's shared standalone server.
pub async fn standalone_client() -> LockClient {
    LockClient::standalone(shared_standalone().url())
        .await
        .expect("connect to the test server")
}

/// A name unique within this machine and run, e.g. for lock keys of tests
/// that share a cluster: `<prefix>-<pid>-<nanos>-<counter>`.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{nanos}-{n}", std::process::id())
}

/// A plain cluster connection for looking at (or tampering with) keys.
pub async fn raw_cluster() -> redis::cluster_async::ClusterConnection {
    redis::cluster::ClusterClient::new(shared_cluster().urls())
        .expect("cluster client")
        .get_async_connection()
        .await
        .expect("connect to the test cluster")
}

/// Polls the lock's state until `pred` holds, and returns that state; fails after
/// 10 s.
pub async fn wait_for(lock: &RwLock, pred: impl Fn(&LockState) -> bool) -> LockState {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = lock.state().await.expect("read the lock state");
        if pred(&state) {
            return state;
        }
        assert!(
            Instant::now() < deadline,
            "state never reached; last: {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls `look` every 5 ms until it answers something other than `before` (say, a
/// place in line that its waiter's re-check refreshed), and returns that answer;
/// `None` if it still answers `before` at `deadline`.
pub async fn until_changed<T: PartialEq, F: Future<Output = T>>(
    before: &T,
    mut look: impl FnMut() -> F,
    deadline: Instant,
) -> Option<T> {
    loop {
        let now = look().await;
        if now != *before {
            return Some(now);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Spawns a writer on `lock` that reports when it got the lock (then releases it).
pub fn spawn_writer(lock: &RwLock) -> tokio::task::JoinHandle<Instant> {
    let lock = lock.clone();
    tokio::spawn(async move {
        let guard = lock.write().await.expect("the spawned writer's write()");
        let at = Instant::now();
        guard
            .release()
            .await
            .expect("the spawned writer's release()");
        at
    })
}

/// Counts holders in this process and every violation of "a writer holds alone".
#[derive(Default)]
pub struct HoldChecker {
    inner: Mutex<Counts>,
}

/// What a [`HoldChecker`] saw.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    readers: u32,
    writers: u32,
    pub reads: u64,
    pub writes: u64,
    /// Upgradable reads that became the write hold.
    pub upgrades: u64,
    pub max_concurrent_readers: u32,
    pub violations: u64,
}

impl HoldChecker {
    fn with(&self, f: impl FnOnce(&mut Counts)) {
        f(&mut self.inner.lock().unwrap_or_else(|e| e.into_inner()));
    }

    pub fn enter_read(&self) {
        self.with(|c| {
            c.violations += u64::from(c.writers > 0);
            c.readers += 1;
            c.reads += 1;
            c.max_concurrent_readers = c.max_concurrent_readers.max(c.readers);
        });
    }

    pub fn leave_read(&self) {
        self.with(|c| {
            c.violations += u64::from(c.writers > 0);
            c.readers -= 1;
        });
    }

    pub fn enter_write(&self) {
        self.with(|c| {
            c.violations += u64::from(c.writers > 0 || c.readers > 0);
            c.writers += 1;
            c.writes += 1;
        });
    }

    /// An upgradable reader (counted as a reader) got the write hold: from then on
    /// it must be the only holder.
    pub fn upgrade(&self) {
        self.with(|c| {
            c.readers -= 1;
            c.violations += u64::from(c.writers > 0 || c.readers > 0);
            c.writers += 1;
            c.writes += 1;
            c.upgrades += 1;
        });
    }

    pub fn leave_write(&self) {
        self.with(|c| {
            c.violations += u64::from(c.writers != 1 || c.readers > 0);
            c.writers -= 1;
        });
    }

    /// One hold on `lock`: a write (25%), an upgradable read (10%; half of them
    /// upgrade midway) or a read, kept 0 to `max_hold_ms` ms, checked on entry,
    /// at the upgrade and before leaving.
    pub async fn random_hold(&self, lock: &RwLock, max_hold_ms: u64) -> Result<(), Error> {
        let (kind, upgrade, hold) = {
            let mut rng = rand::rng();
            (
                rng.random_range(0..100),
                rng.random_bool(0.5),
                Duration::from_millis(rng.random_range(0..max_hold_ms)),
            )
        };
        match kind {
            0..25 => {
                let guard = lock.write().await?;
                self.enter_write();
                tokio::time::sleep(hold).await;
                self.leave_write();
                guard.release().await
            }
            25..35 => {
                let guard = lock.upgradable_read().await?;
                self.enter_read();
                tokio::time::sleep(hold / 2).await;
                if !upgrade {
                    self.leave_read();
                    return guard.release().await;
                }
                // Still counted as a reader while the upgrade waits.
                let writer = match guard.upgrade().await {
                    Ok(writer) => writer,
                    Err(err) => {
                        self.leave_read();
                        return Err(err);
                    }
                };
                self.upgrade();
                tokio::time::sleep(hold / 2).await;
                self.leave_write();
                writer.release().await
            }
            _ => {
                let guard = lock.read().await?;
                self.enter_read();
                tokio::time::sleep(hold).await;
                self.leave_read();
                guard.release().await
            }
        }
    }

    pub fn report(&self) -> Counts {
        *self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Waits until `n` clients subscribe to the lock's wake-up channel on the shared
/// cluster (their waiters were refused and are listening), then 100 ms more: a
/// waiter that subscribed tries once more at once, and only then sets its re-check
/// timer (at least half a second later).
pub async fn until_subscribers(lock: &RwLock, n: u64) {
    let key = lock.key().expect("a usable lock").to_owned();
    let channel = format!("{key}:released");
    until_counted(n, move || {
        let cluster = shared_cluster();
        cluster.shard_subscribers(cluster.master_for_key(&key), &channel)
    })
    .await;
}

/// [`until_subscribers`] on a private standalone `server`.
pub async fn until_subscribers_on(server: &Arc<LocalRedis>, lock: &RwLock, n: u64) {
    let channel = format!("{}:released", lock.key().expect("a usable lock"));
    let server = server.clone();
    until_counted(n, move || server.subscribers(&server.nodes[0], &channel)).await;
}

/// Polls `subscribers` (on a blocking thread) until it reaches `n`, then waits
/// 100 ms more; fails after 5 s.
pub(super) async fn until_counted(n: u64, subscribers: impl Fn() -> u64 + Clone + Send + 'static) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let count = subscribers.clone();
        let subscribed = tokio::task::spawn_blocking(count)
            .await
            .expect("count the subscribers");
        if subscribed >= n {
            tokio::time::sleep(Duration::from_millis(100)).await;
            return;
        }
        assert!(Instant::now() < deadline, "{subscribed} of {n} subscribed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A new user on the shared standalone server that may read keys under `rwlock:`
/// (`%R~`) and run read-only scripts (`EVALSHA_RO`, `EVAL_RO`, `TIME`), plus the
/// `extra` ACL rules; returns the user's name and the server's URL as that user.
pub fn read_only_user(extra: &[&str]) -> (String, String) {
    let server = shared_standalone();
    let user = unique_name("reader");
    let password = "read-only-secret";
    let pass_rule = format!(">{password}");
    let mut rules = vec![
        "ACL",
        "SETUSER",
        &user,
        "on",
        &pass_rule,
        "resetkeys",
        "%R~rwlock:*",
        "resetchannels",
        "-@all",
        "+@read",
        "+evalsha_ro",
        "+eval_ro",
        "+time",
    ];
    rules.extend_from_slice(extra);
    server.raw(&server.nodes[0], &rules);
    let url = server
        .url()
        .replace("redis://", &format!("redis://{user}:{password}@"));
    (user, url)
}

/// A holder that vanished without a word (no release, no message) is replaced when
/// its lease ends: not before (50 ms of clock slack), and within 1.5 s after (a
/// re-check period and a loaded machine's delays).
pub fn assert_entered_when_the_lease_ended(waited: Duration, lease: Duration) {
    assert!(
        waited >= lease - Duration::from_millis(50),
        "entered early: {waited:?}"
    );
    assert!(
        waited <= lease + Duration::from_millis(1500),
        "entered late: {waited:?}"
    );
}

/// Whether no client holds the lock: free, or only a forced release's fence is
/// left (which keeps writers out for a while, and no one holds).
pub fn held_by_nobody(state: &LockState) -> bool {
    state.writer.is_none()
        && state.upgradable.is_none()
        && state.readers.iter().all(|r| r.is_forced_release_fence())
}

/// The tokens of the lock's readers, a forced release's fence left out.
pub fn reader_tokens(state: &LockState) -> Vec<String> {
    state
        .readers
        .iter()
        .filter(|r| !r.is_forced_release_fence())
        .filter_map(|r| r.token.clone())
        .collect()
}

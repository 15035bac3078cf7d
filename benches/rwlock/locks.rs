//! The four implementations behind one interface: this crate, the original design
//! (re-implemented here as a baseline), `rslock` (a mutex) and `rds_lock`; and two
//! references with no Redis at all ([`Impl::REFERENCES`]): `tokio::sync::RwLock`
//! shared by the benchmark's tasks, and this crate on its in-memory store.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis_rwlock::redis::{Script, cluster_async::ClusterConnection};
use redis_rwlock::{
    Error, LockClient, LockOptions, MemoryStore, RwLock, RwLockReadGuard, RwLockWriteGuard,
    cluster_client_builder,
};
use tokio::time::{Instant, sleep};

/// A lock implementation under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Impl {
    Ours,
    Original,
    Rslock,
    RdsLock,
    /// A reference, not a contender: `tokio::sync::RwLock` in the benchmark's
    /// process, in strict arrival order (a waiting writer holds new readers back,
    /// as this crate's default does), every step free: what that order and the
    /// holds allow. Only the contention scenarios run it.
    InProcess,
    /// A reference too: this crate on its in-memory store, the same protocol and
    /// order with no network and no server. Only the contention scenarios run it.
    InMemory,
}

impl Impl {
    pub const ALL: [Impl; 4] = [Impl::Ours, Impl::Original, Impl::Rslock, Impl::RdsLock];
    /// The implementations with a read mode.
    pub const RW: [Impl; 3] = [Impl::Ours, Impl::Original, Impl::RdsLock];
    /// The references with no Redis.
    pub const REFERENCES: [Impl; 2] = [Impl::InProcess, Impl::InMemory];

    pub fn label(self) -> &'static str {
        match self {
            Impl::Ours => "redis-rwlock",
            Impl::Original => "original design (baseline)",
            Impl::Rslock => "rslock 0.10 (mutex)",
            Impl::RdsLock => "rds_lock 1.0.5",
            Impl::InProcess => "tokio::sync::RwLock (one process, no Redis)",
            Impl::InMemory => "redis-rwlock on its in-memory store (no Redis)",
        }
    }

    pub fn id(self) -> &'static str {
        match self {
            Impl::Ours => "redis_rwlock",
            Impl::Original => "original",
            Impl::Rslock => "rslock",
            Impl::RdsLock => "rds_lock",
            Impl::InProcess => "in_process",
            Impl::InMemory => "in_memory",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Read,
    Write,
}

/// How long an acquire may wait.
#[derive(Clone, Copy, Debug)]
pub enum Wait {
    /// One attempt (`try_read`/`try_write` and their equivalents).
    Try,
    /// Wait at most this long.
    Upto(Duration),
}

/// Why an acquire returned without the lock.
#[derive(Debug)]
pub enum Refused {
    WouldBlock,
    Timeout,
    Failed(String),
}

/// Lease/TTL given to the baselines that take one (ours keeps its 10 s default).
const BASELINE_TTL: Duration = Duration::from_secs(10);

/// A cluster connection with the limits this crate gives its own, so that the
/// round-trip limits and the original baseline go through an equal client.
pub async fn cluster_connection(nodes: &[String]) -> Result<ClusterConnection, String> {
    cluster_client_builder(nodes)
        .build()
        .map_err(|e| e.to_string())?
        .get_async_connection()
        .await
        .map_err(|e| e.to_string())
}

/// Every client the scenarios use, connected once.
pub struct Clients {
    pub ours: LockClient,
    /// This crate on an in-memory store of its own ([`Impl::InMemory`]).
    in_memory: LockClient,
    pub original: Original,
    /// `rslock` with one attempt per `lock()` (its try-lock).
    rslock_try: rslock::LockManager,
    /// `rslock` as configured by default (3 attempts, random 0-200 ms apart).
    rslock_wait: rslock::LockManager,
    rds: redis_032::cluster_async::ClusterConnection,
}

impl Clients {
    pub async fn connect(nodes: &[String]) -> Result<Clients, String> {
        let ours = LockClient::cluster(nodes)
            .await
            .map_err(|e| e.to_string())?;
        let original = Original {
            conn: cluster_connection(nodes).await?,
        };
        let rslock_wait =
            rslock::LockManager::new_cluster(nodes.to_vec()).map_err(|e| e.to_string())?;
        let mut rslock_try =
            rslock::LockManager::new_cluster(nodes.to_vec()).map_err(|e| e.to_string())?;
        rslock_try.set_retry(1, Duration::from_millis(1));
        let rds = redis_032::cluster::ClusterClient::new(nodes.to_vec())
            .map_err(|e| e.to_string())?
            .get_async_connection()
            .await
            .map_err(|e| e.to_string())?;
        Ok(Clients {
            ours,
            in_memory: LockClient::in_memory(&MemoryStore::new()),
            original,
            rslock_try,
            rslock_wait,
            rds,
        })
    }

    /// The lock `name` (a hash tag: every implementation's key for it lands in the
    /// same slot). `wait_limit` bounds waiting acquires of this crate's lock.
    pub fn lock(&self, imp: Impl, name: &str, wait_limit: Duration) -> Lock {
        self.lock_with(imp, name, wait_limit, None)
    }

    /// [`Clients::lock`], this crate's keeping its idle read holds up to `keep`.
    pub fn lock_with(
        &self,
        imp: Impl,
        name: &str,
        wait_limit: Duration,
        keep: Option<Duration>,
    ) -> Lock {
        let mut options = LockOptions::default().wait_timeout(wait_limit);
        if let Some(keep) = keep {
            options = options.keep_reads(keep);
        }
        match imp {
            Impl::Ours => Lock::Ours(self.ours.rwlock_with(name, options)),
            Impl::Original => Lock::Original(format!("orig:{{{name}}}").into()),
            Impl::Rslock => Lock::Rslock(format!("rslock:{{{name}}}").into()),
            Impl::RdsLock => Lock::Rds(format!("rds:{{{name}}}").into()),
            Impl::InProcess => Lock::InProcess(name.into(), Arc::default()),
            Impl::InMemory => Lock::Ours(self.in_memory.rwlock_with(name, options)),
        }
    }

    pub async fn acquire(&self, lock: &Lock, mode: Mode, wait: Wait) -> Result<Held, Refused> {
        match lock {
            Lock::Ours(lock) => {
                let result = match (mode, wait) {
                    (Mode::Read, Wait::Try) => lock.try_read().await.map(Held::OursRead),
                    (Mode::Read, Wait::Upto(_)) => lock.read().await.map(Held::OursRead),
                    (Mode::Write, Wait::Try) => lock.try_write().await.map(Held::OursWrite),
                    (Mode::Write, Wait::Upto(_)) => lock.write().await.map(Held::OursWrite),
                };
                result.map_err(|err| match err {
                    Error::WouldBlock => Refused::WouldBlock,
                    Error::Timeout { .. } => Refused::Timeout,
                    other => Refused::Failed(other.to_string()),
                })
            }
            Lock::InProcess(_, lock) => {
                let lock = lock.clone();
                match (mode, wait) {
                    (Mode::Read, Wait::Try) => lock
                        .try_read_owned()
                        .map(Held::in_process)
                        .map_err(|_| Refused::WouldBlock),
                    (Mode::Write, Wait::Try) => lock
                        .try_write_owned()
                        .map(Held::in_process)
                        .map_err(|_| Refused::WouldBlock),
                    (Mode::Read, Wait::Upto(limit)) => {
                        tokio::time::timeout(limit, lock.read_owned())
                            .await
                            .map(Held::in_process)
                            .map_err(|_| Refused::Timeout)
                    }
                    (Mode::Write, Wait::Upto(limit)) => {
                        tokio::time::timeout(limit, lock.write_owned())
                            .await
                            .map(Held::in_process)
                            .map_err(|_| Refused::Timeout)
                    }
                }
            }
            Lock::Original(key) => {
                let stamp = self.original.acquire(key, mode, wait).await?;
                Ok(Held::Original {
                    key: key.clone(),
                    mode,
                    stamp,
                })
            }
            Lock::Rslock(key) => {
                if mode == Mode::Read {
                    return Err(Refused::Failed("rslock has no read mode".into()));
                }
                let result = match wait {
                    Wait::Try => self.rslock_try.lock(key.as_bytes(), BASELINE_TTL).await,
                    Wait::Upto(limit) => tokio::time::timeout(
                        limit,
                        self.rslock_wait
                            .acquire_no_guard(key.as_bytes(), BASELINE_TTL),
                    )
                    .await
                    .map_err(|_| Refused::Timeout)?,
                };
                match result {
                    Ok(lock) => Ok(Held::Rslock(Box::new(lock))),
                    Err(rslock::LockError::Unavailable) => Err(Refused::WouldBlock),
                    Err(err) => Err(Refused::Failed(err.to_string())),
                }
            }
            Lock::Rds(key) => {
                // rds_lock has no try-lock (a zero retry timeout races its own first
                // attempt): uncontended scenarios use a bounded wait, which succeeds on
                // the first attempt all the same.
                let limit = match wait {
                    Wait::Try => Duration::from_secs(5),
                    Wait::Upto(limit) => limit,
                };
                let locker = rds_lock::Locker::new(self.rds.clone())
                    .mode(match mode {
                        Mode::Read => &rds_lock::Mode::R,
                        Mode::Write => &rds_lock::Mode::W,
                    })
                    .to(millis(BASELINE_TTL))
                    .rty_to(i64::try_from(millis(limit)).unwrap_or(i64::MAX));
                match locker.lock(key.to_string()).await {
                    Ok(unlock) => Ok(Held::Rds(Box::pin(async move {
                        unlock.await.map_err(|e| e.to_string())
                    }))),
                    Err(err) if err.to_string() == "Timed out" => Err(Refused::Timeout),
                    Err(err) => Err(Refused::Failed(err.to_string())),
                }
            }
        }
    }

    /// Releases a hold; an error is reported, never fatal.
    pub async fn release(&self, held: Held) -> Result<(), String> {
        match held {
            Held::OursRead(guard) => guard.release().await.map_err(|e| e.to_string()),
            Held::OursWrite(guard) => guard.release().await.map_err(|e| e.to_string()),
            Held::Original { key, mode, stamp } => self.original.release(&key, mode, &stamp).await,
            Held::Rslock(lock) => {
                lock.release().await;
                Ok(())
            }
            Held::Rds(unlock) => unlock.await,
            Held::InProcess(guard) => {
                drop(guard);
                Ok(())
            }
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One lock of one implementation: cheap to clone.
#[derive(Clone)]
pub enum Lock {
    Ours(RwLock),
    Original(Arc<str>),
    Rslock(Arc<str>),
    Rds(Arc<str>),
    /// Its name, and the lock.
    InProcess(Arc<str>, Arc<tokio::sync::RwLock<()>>),
}

impl Lock {
    /// The Redis key the lock lives in (the in-process lock's name).
    pub fn key(&self) -> &str {
        match self {
            Lock::Ours(lock) => lock.key().expect("the benchmark's lock names are valid"),
            Lock::Original(key) | Lock::Rslock(key) | Lock::Rds(key) | Lock::InProcess(key, _) => {
                key
            }
        }
    }
}

/// A hold of any implementation.
pub enum Held {
    OursRead(RwLockReadGuard),
    OursWrite(RwLockWriteGuard),
    Original {
        key: Arc<str>,
        mode: Mode,
        stamp: String,
    },
    Rslock(Box<rslock::Lock>),
    Rds(Pin<Box<dyn Future<Output = Result<(), String>> + Send>>),
    /// Released when dropped.
    InProcess(Box<dyn Send>),
}

impl Held {
    fn in_process(guard: impl Send + 'static) -> Held {
        Held::InProcess(Box::new(guard))
    }
}

/// The original design (docs/ORIGINAL_DESIGN.md, cluster version),
/// re-implemented as faithfully as the description allows, as a BASELINE: caller-clock
/// millisecond stamps as owner values, one shared `read` field, no renewal, polling
/// every 30 ms while waiting, the post's defaults (key 10 s, read 1 s, write 3 s).
pub struct Original {
    conn: ClusterConnection,
}

static ORIGINAL_READ: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../tests/original/hash_acquire_read.lua")));
static ORIGINAL_WRITE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../tests/original/hash_acquire_write.lua")));
static ORIGINAL_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../tests/original/hash_release.lua")));

impl Original {
    pub const KEY_TIMEOUT_MS: u64 = 10_000;
    pub const READ_TIMEOUT_MS: u64 = 1_000;
    pub const WRITE_TIMEOUT_MS: u64 = 3_000;
    pub const POLL: Duration = Duration::from_millis(30);

    async fn acquire(&self, key: &str, mode: Mode, wait: Wait) -> Result<String, Refused> {
        let started = Instant::now();
        let script = match mode {
            Mode::Read => &*ORIGINAL_READ,
            Mode::Write => &*ORIGINAL_WRITE,
        };
        loop {
            // The caller's wall clock, as the post's Java caller does.
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or_default()
                .to_string();
            let granted: i64 = script
                .key(key)
                .arg(Self::KEY_TIMEOUT_MS)
                .arg(Self::READ_TIMEOUT_MS)
                .arg(Self::WRITE_TIMEOUT_MS)
                .arg(&now)
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(|e| Refused::Failed(e.to_string()))?;
            if granted == 1 {
                return Ok(now);
            }
            match wait {
                Wait::Try => return Err(Refused::WouldBlock),
                Wait::Upto(limit) if started.elapsed() + Self::POLL > limit => {
                    return Err(Refused::Timeout);
                }
                Wait::Upto(_) => sleep(Self::POLL).await,
            }
        }
    }

    async fn release(&self, key: &str, mode: Mode, stamp: &str) -> Result<(), String> {
        let field = match mode {
            Mode::Read => "read",
            Mode::Write => "write",
        };
        let _: i64 = ORIGINAL_RELEASE
            .key(key)
            .arg(field)
            .arg(stamp)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// A trivial script for the round-trip limit: same client, same routing as a lock.
pub static TRIVIAL: LazyLock<Script> = LazyLock::new(|| Script::new("return 1"));

//! The at-scale run of `tests/at_scale.rs`, which asserts on it and prints its table
//! (the numbers BENCHMARKS.md shows): one lock, many read holds, a long queue of writers, drained in arrival order.
//!
//! A run has four phases, each a different kind of work for the lock's master:
//!
//! 1. **take read holds**: `readers` read holds (long leases, no renewal), taken by
//!    up to 64 requests at a time;
//! 2. **queue writers**: `writers` tasks call `write()` one after another, each
//!    started only once the previous one is queued (the lock's hash has grown by
//!    its queue entry), so the queue order is the start order;
//! 3. **release readers**: the read holds are released one by one, while the
//!    writers wait (and re-check their places);
//! 4. **drain writers**: the last reader's release lets the first writer in; each
//!    writer holds for one `yield_now` and releases, which lets the next one in.
//!
//! The process checks exclusion (no writer beside another writer or any reader,
//! with atomic counters: a hold counts from its grant until just before its
//! release is sent) and order (writers are granted in the order they queued).
//!
//! **Server time per script call.** `INFO commandstats` has one `evalsha` row for
//! every script, so it cannot tell an acquire from a release, and the waiting
//! writers' re-checks run beside every phase. So the lock's master runs with
//! `slowlog-log-slower-than 0` for the run: it logs every command with its
//! duration (the same measurement as commandstats' `usec`) and its arguments,
//! which name the script (EVALSHA's SHA, FCALL's function). A background task
//! drains the log every 100 ms (`SLOWLOG GET` and `SLOWLOG RESET` in one
//! MULTI, so nothing is lost between them); a phase boundary drains it too. A
//! script is named after the phase it first runs in (the read acquire, the write
//! acquire, the release), so the names follow whatever scripts the crate sends.
//! The script rows of `INFO commandstats` are kept per phase beside, as a check
//! that the log saw every call. The previous slowlog settings are put back at the
//! end.
//!
//! [`compare`] runs the same steps small (2 readers, 2 writers, repeated and
//! pooled) and at scale on one lock, so each script's time per call at scale can
//! be set against the same script in the same phase with almost nobody there.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis_rwlock::redis::{self, Value, aio::MultiplexedConnection};
use redis_rwlock::{LockClient, LockOptions, RwLock, RwLockReadGuard};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{Instant, sleep, timeout};

/// The phases of a run, in order.
pub const PHASES: [&str; 4] = [
    "take read holds",
    "queue writers",
    "release readers",
    "drain writers",
];

/// A script first seen in a phase is named after what that phase runs.
const FIRST_SEEN_AS: [&str; 4] = ["read acquire", "write acquire", "release", "script"];

/// Readers and writers of the small case.
pub const SMALL: usize = 2;

/// The read holds outlive any run (nothing renews them), so no hold ends early.
const READ_LEASE: Duration = Duration::from_secs(600);

/// The longest any one step may take (a writer to queue, the readers to leave, the
/// queue to drain) before the run fails rather than hangs.
const STEP_LIMIT: Duration = Duration::from_secs(300);

/// Read holds requested at once in the first phase.
const TAKE_AT_ONCE: usize = 64;

/// How often the background task drains the slowlog, and how many entries the log
/// may hold meanwhile: far more than the master runs in that time, and enough for
/// seconds of calls when a loaded machine starves the drainer (100,000 filled up
/// once in CI beside a build; an entry takes a few hundred bytes).
const DRAIN_EVERY: Duration = Duration::from_millis(100);
const SLOWLOG_LEN: usize = 500_000;

/// How long the master may take to answer the probe: long, since a protocol that
/// does not scale keeps it busy for seconds at a time (the driver's default is 0.5 s).
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// How often a queued writer is looked for, and how long its first request may
/// take to show in the hash.
const QUEUE_POLL: Duration = Duration::from_millis(1);
const QUEUE_LIMIT: Duration = Duration::from_secs(30);

/// Calls of a script (or of all scripts) and the server's time in them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Time {
    pub calls: u64,
    pub usec: u64,
}

impl Time {
    /// Microseconds per call (NaN without calls).
    pub fn per_call(&self) -> f64 {
        if self.calls == 0 {
            f64::NAN
        } else {
            self.usec as f64 / self.calls as f64
        }
    }

    fn add(&mut self, other: Time) {
        self.calls += other.calls;
        self.usec += other.usec;
    }
}

/// What one run saw.
#[derive(Clone, Debug)]
pub struct Run {
    pub readers: usize,
    pub writers: usize,
    /// Writers (by start order) in the order they were granted.
    pub grants: Vec<usize>,
    /// Holds seen together that must not be: a writer beside a writer or a reader.
    pub violations: u64,
    /// Wall time of each phase.
    pub phase_time: [Duration; 4],
    /// Server time per (phase, script), from the slowlog.
    pub scripts: BTreeMap<(usize, String), Time>,
    /// Server time of all scripts per phase, from `INFO commandstats` (EVAL* and
    /// FCALL* rows).
    pub commandstats: [Time; 4],
}

impl Run {
    /// Whether every writer was granted, in the order they queued.
    pub fn in_order(&self) -> bool {
        self.grants.len() == self.writers && self.grants.iter().enumerate().all(|(i, &w)| i == w)
    }

    /// Server time of all scripts in `phase`, from the slowlog.
    pub fn logged(&self, phase: usize) -> Time {
        let mut total = Time::default();
        for ((p, _), time) in &self.scripts {
            if *p == phase {
                total.add(*time);
            }
        }
        total
    }
}

/// The small case (pooled over its repetitions) and the run at scale.
#[derive(Clone, Debug)]
pub struct Comparison {
    pub small: Vec<Run>,
    pub large: Run,
}

/// One script in one phase, small and at scale.
#[derive(Clone, Debug)]
pub struct Row {
    pub phase: usize,
    pub script: String,
    pub small: Time,
    pub large: Time,
}

impl Row {
    /// Server time per call at scale over the same in the small case.
    pub fn ratio(&self) -> f64 {
        self.large.per_call() / self.small.per_call()
    }
}

impl Comparison {
    /// Every (phase, script) seen in either case, in phase order.
    pub fn rows(&self) -> Vec<Row> {
        let mut rows: BTreeMap<(usize, String), Row> = BTreeMap::new();
        let runs = self.small.iter().map(|run| (run, true));
        for (run, small) in runs.chain([(&self.large, false)]) {
            for ((phase, script), time) in &run.scripts {
                let row = rows.entry((*phase, script.clone())).or_insert_with(|| Row {
                    phase: *phase,
                    script: script.clone(),
                    small: Time::default(),
                    large: Time::default(),
                });
                if small {
                    row.small.add(*time);
                } else {
                    row.large.add(*time);
                }
            }
        }
        rows.into_values().collect()
    }

    /// Wall time of `phase` in the small case, averaged over its repetitions.
    pub fn small_phase_time(&self, phase: usize) -> Duration {
        let total: Duration = self.small.iter().map(|run| run.phase_time[phase]).sum();
        total / self.small.len().max(1) as u32
    }
}

/// Runs the small case `small_reps` times (after one unmeasured warm-up run that
/// loads the scripts on the master and opens the subscription), half before and
/// half after one run with `readers` read holds and `writers` queued writers, all
/// on the lock `name` of `client`.
/// `master_url` is the lock's master, where the slowlog and the hash are read.
///
/// # Errors
///
/// A description of the first thing that failed: a lock call, a step that took
/// longer than [`STEP_LIMIT`], a command to the master.
pub async fn compare(
    client: &LockClient,
    name: &str,
    master_url: &str,
    small_reps: usize,
    readers: usize,
    writers: usize,
) -> Result<Comparison, String> {
    let lock = client.rwlock_with(
        name,
        LockOptions::default()
            .read_lease(READ_LEASE)
            .auto_renew(false)
            .wait_timeout(STEP_LIMIT),
    );
    let key = lock
        .key()
        .map_err(|e| format!("lock {name}: {e}"))?
        .to_owned();
    let mut probe = Probe::start(master_url, &key).await?;
    let result: Result<Comparison, String> = async {
        run(&lock, &mut probe, SMALL, SMALL).await?;
        // Name the scripts by what the measured runs send (the warm-up may have
        // sent whole scripts, EVAL, where they were not loaded yet).
        probe.names.clear();
        // Half the small runs before the large one and half after, so a machine
        // that gets busier or quieter meanwhile weighs on both sides alike.
        let mut small = Vec::new();
        for _ in 0..small_reps / 2 {
            small.push(run(&lock, &mut probe, SMALL, SMALL).await?);
        }
        let large = run(&lock, &mut probe, readers, writers).await?;
        for _ in small_reps / 2..small_reps {
            small.push(run(&lock, &mut probe, SMALL, SMALL).await?);
        }
        Ok(Comparison { small, large })
    }
    .await;
    let restored = probe.stop().await;
    let comparison = result?;
    restored?;
    Ok(comparison)
}

/// Holds seen in this process.
#[derive(Default)]
struct Holds {
    readers: AtomicI64,
    writers: AtomicI64,
    violations: AtomicU64,
    grants: Mutex<Vec<usize>>,
}

impl Holds {
    fn enter_read(&self) {
        self.readers.fetch_add(1, Ordering::SeqCst);
        if self.writers.load(Ordering::SeqCst) > 0 {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn leave_read(&self) {
        self.readers.fetch_sub(1, Ordering::SeqCst);
    }

    fn enter_write(&self, writer: usize) {
        if self.writers.fetch_add(1, Ordering::SeqCst) > 0
            || self.readers.load(Ordering::SeqCst) > 0
        {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
        self.grants
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(writer);
    }

    fn leave_write(&self) {
        self.writers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One run of the four phases on `lock`.
async fn run(
    lock: &RwLock,
    probe: &mut Probe,
    readers: usize,
    writers: usize,
) -> Result<Run, String> {
    let holds = Arc::new(Holds::default());
    let mut out = Run {
        readers,
        writers,
        grants: Vec::new(),
        violations: 0,
        phase_time: [Duration::ZERO; 4],
        scripts: BTreeMap::new(),
        commandstats: [Time::default(); 4],
    };
    probe.begin().await?;

    let started = Instant::now();
    let guards = take_read_holds(lock, readers, &holds).await?;
    probe.end_phase(0, started, &mut out).await?;

    let started = Instant::now();
    let mut queued = JoinSet::new();
    for writer in 0..writers {
        let fields = probe.hlen().await?;
        let (lock, holds) = (lock.clone(), holds.clone());
        queued.spawn(async move {
            let guard = lock
                .write()
                .await
                .map_err(|e| format!("writer {writer}: write(): {}", chain(&e)))?;
            holds.enter_write(writer);
            tokio::task::yield_now().await;
            holds.leave_write();
            guard
                .release()
                .await
                .map_err(|e| format!("writer {writer}: release(): {}", chain(&e)))
        });
        probe.until_grown(fields, &mut queued, writer).await?;
    }
    probe.end_phase(1, started, &mut out).await?;

    let started = Instant::now();
    for (reader, guard) in guards.into_iter().enumerate() {
        holds.leave_read();
        guard
            .release()
            .await
            .map_err(|e| format!("reader {reader}: release(): {}", chain(&e)))?;
    }
    probe.end_phase(2, started, &mut out).await?;

    let started = Instant::now();
    while let Some(done) = timeout(STEP_LIMIT, queued.join_next())
        .await
        .map_err(|_| format!("the writers' queue did not drain within {STEP_LIMIT:?}"))?
    {
        done.map_err(|e| format!("a writer task failed: {e}"))??;
    }
    probe.end_phase(3, started, &mut out).await?;

    out.grants = std::mem::take(&mut *holds.grants.lock().unwrap_or_else(PoisonError::into_inner));
    out.violations = holds.violations.load(Ordering::SeqCst);
    Ok(out)
}

/// An error with its sources ("redis request failed (timed out) while ...: timed out").
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// Takes `n` read holds, [`TAKE_AT_ONCE`] requests at a time.
async fn take_read_holds(
    lock: &RwLock,
    n: usize,
    holds: &Holds,
) -> Result<Vec<RwLockReadGuard>, String> {
    let mut guards = Vec::with_capacity(n);
    let mut pending = JoinSet::new();
    let mut sent = 0;
    while guards.len() < n {
        while pending.len() < TAKE_AT_ONCE && sent < n {
            let lock = lock.clone();
            pending.spawn(async move { lock.try_read().await });
            sent += 1;
        }
        let Some(done) = pending.join_next().await else {
            break;
        };
        let guard = done
            .map_err(|e| format!("a read task failed: {e}"))?
            .map_err(|e| format!("read hold {}: try_read(): {}", guards.len(), chain(&e)))?;
        holds.enter_read();
        guards.push(guard);
    }
    Ok(guards)
}

/// The lock's master: its slowlog, its commandstats and the lock's hash.
struct Probe {
    conn: MultiplexedConnection,
    key: String,
    /// What the slowlog held, drained so far in this phase.
    log: Arc<tokio::sync::Mutex<Drained>>,
    drainer: JoinHandle<()>,
    /// `slowlog-log-slower-than` and `slowlog-max-len` as they were.
    saved: Vec<(String, String)>,
    /// Script (SHA or function) -> its name in the results.
    names: BTreeMap<String, String>,
    /// Script rows of `INFO commandstats` at the start of the phase.
    stats: Time,
}

impl Probe {
    async fn start(master_url: &str, key: &str) -> Result<Probe, String> {
        let fail = |e: redis::RedisError| format!("{master_url}: {e}");
        let mut conn = redis::Client::open(master_url)
            .map_err(fail)?
            .get_multiplexed_async_connection_with_config(
                &redis::AsyncConnectionConfig::new().set_response_timeout(Some(PROBE_TIMEOUT)),
            )
            .await
            .map_err(fail)?;
        let mut saved = Vec::new();
        for name in ["slowlog-log-slower-than", "slowlog-max-len"] {
            let value: BTreeMap<String, String> = redis::cmd("CONFIG")
                .arg("GET")
                .arg(name)
                .query_async(&mut conn)
                .await
                .map_err(fail)?;
            if let Some(value) = value.get(name) {
                saved.push((name.to_owned(), value.clone()));
            }
        }
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("slowlog-log-slower-than")
            .arg(0)
            .arg("slowlog-max-len")
            .arg(SLOWLOG_LEN)
            .exec_async(&mut conn)
            .await
            .map_err(fail)?;
        let log = Arc::new(tokio::sync::Mutex::new(Drained::default()));
        let drainer = tokio::spawn({
            let (mut conn, log) = (conn.clone(), log.clone());
            async move {
                loop {
                    sleep(DRAIN_EVERY).await;
                    log.lock().await.drain(&mut conn, false).await;
                }
            }
        });
        Ok(Probe {
            conn,
            key: key.to_owned(),
            log,
            drainer,
            saved,
            names: BTreeMap::new(),
            stats: Time::default(),
        })
    }

    /// Starts a run: forgets what was logged before it.
    async fn begin(&mut self) -> Result<(), String> {
        let (_, stats) = self.boundary().await?;
        self.stats = stats;
        Ok(())
    }

    /// Ends `phase`, which began at `started`: its time, its scripts by name, and the
    /// commandstats script rows for it.
    async fn end_phase(
        &mut self,
        phase: usize,
        started: Instant,
        run: &mut Run,
    ) -> Result<(), String> {
        run.phase_time[phase] = started.elapsed();
        let (calls, stats) = self.boundary().await?;
        run.commandstats[phase] = Time {
            calls: stats.calls.saturating_sub(self.stats.calls),
            usec: stats.usec.saturating_sub(self.stats.usec),
        };
        self.stats = stats;
        for (script, usec) in calls {
            let name = self.name(&script, phase);
            let time = run.scripts.entry((phase, name)).or_default();
            time.calls += 1;
            time.usec += usec;
        }
        Ok(())
    }

    /// The script calls logged since the last boundary, and the script rows of
    /// `INFO commandstats` now, read in one step.
    async fn boundary(&mut self) -> Result<(Vec<(String, u64)>, Time), String> {
        let mut log = self.log.lock().await;
        let stats = log.drain(&mut self.conn, true).await;
        let calls = std::mem::take(&mut *log).result()?;
        Ok((calls, stats.unwrap_or_default()))
    }

    /// The name of `script`: a function's own name, else what the phase it is first
    /// seen in runs (with its SHA's start if that name is taken).
    fn name(&mut self, script: &str, phase: usize) -> String {
        if let Some(name) = self.names.get(script) {
            return name.clone();
        }
        let name = match script.strip_prefix("fcall ") {
            Some(function) => function.to_owned(),
            None => {
                let base = FIRST_SEEN_AS[phase];
                if phase < 3 && !self.names.values().any(|n| n == base) {
                    base.to_owned()
                } else {
                    format!("{base} {}", script.chars().take(8).collect::<String>())
                }
            }
        };
        self.names.insert(script.to_owned(), name.clone());
        name
    }

    /// The lock hash's field count.
    async fn hlen(&mut self) -> Result<u64, String> {
        redis::cmd("HLEN")
            .arg(&self.key)
            .query_async(&mut self.conn)
            .await
            .map_err(|e| format!("HLEN {}: {e}", self.key))
    }

    /// Waits until the lock's hash has more than `fields` fields: `writer`, the
    /// only one whose first request is on its way, is queued (a queued writer adds
    /// its entry to the hash; the ones already queued only refresh theirs, and the
    /// readers stay as they are). Fails at once if a writer task ended (it cannot
    /// have been granted: readers hold).
    async fn until_grown(
        &mut self,
        fields: u64,
        writers: &mut JoinSet<Result<(), String>>,
        writer: usize,
    ) -> Result<(), String> {
        let deadline = Instant::now() + QUEUE_LIMIT;
        while self.hlen().await? <= fields {
            if let Some(done) = writers.try_join_next() {
                return Err(match done {
                    Ok(Err(e)) => e,
                    Ok(Ok(())) => format!("a writer got the lock while {writer} was queueing"),
                    Err(e) => format!("a writer task failed: {e}"),
                });
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "writer {writer} was not queued within {QUEUE_LIMIT:?} (the lock's hash did \
                     not grow: a queued writer is expected to add a field to it)"
                ));
            }
            sleep(QUEUE_POLL).await;
        }
        Ok(())
    }

    /// Stops the drainer and puts the slowlog settings back (and empties it).
    async fn stop(mut self) -> Result<(), String> {
        self.drainer.abort();
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("SET");
        for (name, value) in &self.saved {
            cmd.arg(name).arg(value);
        }
        if !self.saved.is_empty() {
            cmd.exec_async(&mut self.conn)
                .await
                .map_err(|e| format!("restoring the slowlog settings: {e}"))?;
        }
        redis::cmd("SLOWLOG")
            .arg("RESET")
            .exec_async(&mut self.conn)
            .await
            .map_err(|e| format!("SLOWLOG RESET: {e}"))
    }
}

/// Script calls drained from the slowlog, oldest first, or what went wrong.
#[derive(Default)]
struct Drained {
    calls: Vec<(String, u64)>,
    error: Option<String>,
}

impl Drained {
    /// Moves the slowlog's script calls here and empties the slowlog, atomically;
    /// with `stats`, also reads the script rows of `INFO commandstats` in the same
    /// step (so both count the same calls) and returns them.
    async fn drain(&mut self, conn: &mut MultiplexedConnection, stats: bool) -> Option<Time> {
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("SLOWLOG")
            .arg("GET")
            .arg(SLOWLOG_LEN)
            .cmd("SLOWLOG")
            .arg("RESET")
            .ignore();
        if stats {
            pipe.cmd("INFO").arg("commandstats");
        }
        let reply: redis::RedisResult<Vec<Value>> = pipe.query_async(conn).await;
        let (entries, info) = match reply.and_then(|mut reply| {
            let info = match reply.len() {
                2 => Some(redis::from_redis_value::<String>(reply.remove(1))?),
                _ => None,
            };
            let entries = reply.into_iter().next().unwrap_or(Value::Nil);
            Ok((redis::from_redis_value::<Vec<Value>>(entries)?, info))
        }) {
            Ok(reply) => reply,
            Err(e) => {
                self.error.get_or_insert(format!("SLOWLOG GET: {e}"));
                return None;
            }
        };
        if entries.len() >= SLOWLOG_LEN {
            self.error.get_or_insert(format!(
                "the slowlog filled up ({SLOWLOG_LEN} entries between two drains): calls were lost"
            ));
        }
        self.calls
            .extend(entries.iter().rev().filter_map(script_call));
        info.as_deref().map(script_stats)
    }

    /// The calls, unless some were lost.
    fn result(self) -> Result<Vec<(String, u64)>, String> {
        match self.error {
            Some(error) => Err(error),
            None => Ok(self.calls),
        }
    }
}

/// Calls and time of every script so far, from `INFO commandstats` (EVAL* and
/// FCALL* rows).
fn script_stats(info: &str) -> Time {
    let mut total = Time::default();
    for line in info.lines() {
        let Some((name, fields)) = line.trim().split_once(':') else {
            continue;
        };
        let Some(name) = name.strip_prefix("cmdstat_") else {
            continue;
        };
        if !(name.starts_with("eval") || name.starts_with("fcall")) {
            continue;
        }
        let field = |key: &str| -> u64 {
            fields
                .split(',')
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        total.add(Time {
            calls: field("calls"),
            usec: field("usec"),
        });
    }
    total
}

/// A slowlog entry `[id, time, usec, [args...], ...]` as (script, usec) if it is a
/// script call: `evalsha <sha>`, `fcall <function>`, `eval <start of the body>`.
fn script_call(entry: &Value) -> Option<(String, u64)> {
    let Value::Array(fields) = entry else {
        return None;
    };
    let (Some(Value::Int(usec)), Some(Value::Array(args))) = (fields.get(2), fields.get(3)) else {
        return None;
    };
    let text = |v: &Value| -> Option<String> {
        match v {
            Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
            Value::SimpleString(s) => Some(s.clone()),
            _ => None,
        }
    };
    let command = text(args.first()?)?.to_ascii_lowercase();
    let what = text(args.get(1)?)?;
    let script = match command.as_str() {
        "evalsha" | "evalsha_ro" => what,
        "fcall" | "fcall_ro" => format!("fcall {what}"),
        "eval" | "eval_ro" => format!("eval {}", what.chars().take(64).collect::<String>()),
        _ => return None,
    };
    Some((script, u64::try_from(*usec).unwrap_or(0)))
}

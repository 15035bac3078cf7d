//! The partition tests' workload: clients in processes of their own (so one can be
//! paused with SIGSTOP, or cut off by pid, without the others), each taking read and
//! write holds on a few locks and writing, under each write hold, a register beside
//! the lock twice: once through `fenced_write` and once with a plain `MSET` (what an
//! application without fencing would do).
//!
//! A worker is the test binary run again with its `worker_process` test and
//! [`WORKER_ENV`] holding a [`WorkerSpec`] (JSON). It prints one `REC {json}` line per
//! operation, as it ends, with wall-clock microseconds (every process reads the same
//! clock), and stops when its stdin closes. The parent ([`Worker`]) reads those lines
//! as they come, so the test can see who holds what (to pause a writer mid-hold).
//!
//! A share of the write holds (one in four, or all of them in the trial that kills a
//! master after an upgrade) is taken by an upgrade (an upgradable read, a look, then
//! `upgrade()`). Holds take one to three steps; one write hold in five steps on for
//! one to one and a half leases, so that some hold spans the fault. Each write step is: check
//! `is_held()`; prepare (a short random sleep: building
//! the request, or a pause landing there); write. So a worker stopped past its lease
//! between the check and the write wakes up and writes as if it held, as in the
//! classic critique of lease-based locks. Every write also sets a key of its own
//! (`ack:{lock}:<w>:<seq>`, `w` the holder number below) in the same step, so a
//! write acknowledged and then lost in a failover is found missing afterwards.
//!
//! A sharing worker ([`WorkerSpec::tasks`] > 1) runs several such loops on one
//! client, mostly reading ([`WorkerSpec::reads`]) the same few locks, so its tasks'
//! reads share one hold of a lock, and with [`WorkerSpec::keep_reads`] its client
//! keeps that hold between reads. Each task records under a holder number of its own
//! (`w`: `id * 100 + task`; a plain worker's is its `id`), so the checker holds the
//! tasks of one process to the same exclusion as different processes (a task's
//! write beside another task's read is as wrong as across processes).

use std::io::{BufRead, BufReader, Write as _};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redis_rwlock::{FencedWrites, LockClient, LockOptions, RwLock};
use serde_json::{Value, json};

/// The environment variable that makes `worker_process` run a worker.
pub const WORKER_ENV: &str = "PARTITION_WORKER";

/// What one worker does.
#[derive(Clone, Debug)]
pub struct WorkerSpec {
    pub id: u32,
    /// The client relays' URLs.
    pub urls: Vec<String>,
    /// (lock name, min_replicas).
    pub locks: Vec<(String, u32)>,
    pub seed: u64,
    /// Read and write lease.
    pub lease: Duration,
    /// The share of write holds taken by way of an upgrade (the rest are plain
    /// writes).
    pub upgrades: f64,
    /// Tasks on the worker's one client, each running the workload's loop (1: a
    /// plain worker, recorded as `w: id`; more: recorded as `w: id * 100 + task`,
    /// so a sharing worker's `id` must be at least 1).
    pub tasks: u32,
    /// The share of holds that are reads.
    pub reads: f64,
    /// `LockOptions::keep_reads` for the worker's locks.
    pub keep_reads: Option<Duration>,
}

impl WorkerSpec {
    fn to_json(&self) -> String {
        json!({
            "id": self.id,
            "urls": self.urls,
            "locks": self.locks,
            "seed": self.seed,
            "lease_ms": self.lease.as_millis() as u64,
            "upgrades": self.upgrades,
            "tasks": self.tasks,
            "reads": self.reads,
            "keep_reads_ms": self.keep_reads.map(|bound| bound.as_millis() as u64),
        })
        .to_string()
    }

    fn from_json(text: &str) -> WorkerSpec {
        let v: Value = serde_json::from_str(text).expect("a worker spec");
        WorkerSpec {
            id: v["id"].as_u64().unwrap() as u32,
            urls: v["urls"]
                .as_array()
                .unwrap()
                .iter()
                .map(|u| u.as_str().unwrap().to_owned())
                .collect(),
            locks: v["locks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| {
                    (
                        l[0].as_str().unwrap().to_owned(),
                        l[1].as_u64().unwrap() as u32,
                    )
                })
                .collect(),
            seed: v["seed"].as_u64().unwrap(),
            lease: Duration::from_millis(v["lease_ms"].as_u64().unwrap()),
            upgrades: v["upgrades"].as_f64().unwrap(),
            tasks: v["tasks"].as_u64().unwrap() as u32,
            reads: v["reads"].as_f64().unwrap(),
            keep_reads: v["keep_reads_ms"].as_u64().map(Duration::from_millis),
        }
    }

    /// A plain worker: one task, half reads, nothing kept.
    pub fn plain(
        id: u32,
        urls: Vec<String>,
        locks: Vec<(String, u32)>,
        seed: u64,
        lease: Duration,
        upgrades: f64,
    ) -> WorkerSpec {
        WorkerSpec {
            id,
            urls,
            locks,
            seed,
            lease,
            upgrades,
            tasks: 1,
            reads: 0.5,
            keep_reads: None,
        }
    }
}

/// Wall-clock microseconds: every process on the machine reads the same clock.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_micros() as u64
}

/// The fenced register beside `lock`.
pub fn fenced_register(lock: &str) -> String {
    format!("reg:{{{lock}}}")
}

/// The plain (unfenced) register beside `lock`.
pub fn plain_register(lock: &str) -> String {
    format!("plain:{{{lock}}}")
}

/// A running worker process and the records it printed so far.
pub struct Worker {
    pub id: u32,
    pub pid: u32,
    child: Child,
    stdin: Option<ChildStdin>,
    records: Arc<Mutex<Vec<Value>>>,
    reader: Option<std::thread::JoinHandle<()>>,
    /// Waited for: its pid may belong to another process now.
    exited: bool,
}

impl Worker {
    /// Starts `spec` in a process of its own: this test binary, `worker_process`.
    pub fn start(spec: &WorkerSpec) -> Worker {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut child = Command::new(exe)
            .args(["--exact", "worker_process", "--ignored", "--nocapture"])
            .args(["--test-threads", "1"])
            .env(WORKER_ENV, spec.to_json())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start a worker process");
        let stdout = child.stdout.take().expect("a piped stdout");
        let records = Arc::new(Mutex::new(Vec::new()));
        let sink = records.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(record) = line.strip_prefix("REC ") {
                    let value: Value = serde_json::from_str(record).expect("a record");
                    sink.lock().unwrap().push(value);
                }
            }
        });
        Worker {
            id: spec.id,
            pid: child.id(),
            stdin: child.stdin.take(),
            child,
            records,
            reader: Some(reader),
            exited: false,
        }
    }

    /// The records printed so far.
    pub fn records(&self) -> Vec<Value> {
        self.records.lock().unwrap().clone()
    }

    /// The latest acquire record, if any.
    pub fn last_acquire(&self) -> Option<Value> {
        self.records
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|r| r["kind"] == "acquire")
            .cloned()
    }

    /// Closes the worker's stdin (it finishes its operation, releases and exits),
    /// waits for it (killing it after `limit`) and returns every record.
    pub fn stop(mut self, limit: Duration) -> Vec<Value> {
        self.stdin = None;
        let deadline = std::time::Instant::now() + limit;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => break,
                _ if std::time::Instant::now() >= deadline => {
                    eprintln!("worker {} did not stop within {limit:?}: killed", self.id);
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break;
                }
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        self.exited = true;
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.records()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if self.exited {
            return;
        }
        // SIGCONT first: a paused worker cannot die of SIGKILL before it runs again
        // on every kernel, and it must not stay frozen.
        let _ = super::process::kill_command(self.pid, "-CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Prints one record.
fn emit(record: Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "REC {record}");
    let _ = out.flush();
}

/// Runs one write within `limit`: when it ended (wall-clock µs), whether it
/// succeeded, and the error's text if not (`hung` past the limit).
async fn timed(
    limit: Duration,
    write: impl Future<Output = Result<(), String>>,
) -> (u64, bool, String) {
    let outcome = tokio::time::timeout(limit, write).await;
    let end = now_us();
    match outcome {
        Ok(Ok(())) => (end, true, String::new()),
        Ok(Err(err)) => (end, false, err),
        Err(_) => (end, false, "hung".to_owned()),
    }
}

/// The text of an error, short.
fn describe<E: std::fmt::Debug>(e: &E) -> String {
    let text = format!("{e:?}");
    text.chars().take(120).collect()
}

/// A write hold by way of an upgradable read: takes it, looks for `look`, upgrades.
/// Records the upgradable hold (mode `upgradable`, up to the `is_held()` before the
/// upgrade) and the upgrade (kind `upgrade`: how long it waited for the readers).
async fn upgraded(
    id: u32,
    name: &str,
    lock: &RwLock,
    look: Duration,
    limit: Duration,
) -> Result<Result<redis_rwlock::RwLockWriteGuard, redis_rwlock::Error>, tokio::time::error::Elapsed>
{
    let guard = match tokio::time::timeout(limit, lock.upgradable_read()).await? {
        Ok(guard) => guard,
        Err(e) => return Ok(Err(e)),
    };
    let from = now_us();
    tokio::time::sleep(look).await;
    let checked = now_us();
    let to = if guard.is_held() { checked } else { from };
    let start = now_us();
    let upgraded = tokio::time::timeout(limit, guard.upgrade()).await;
    let end = now_us();
    let (ok, fence) = match &upgraded {
        Ok(Ok(writer)) => (true, writer.fencing_token()),
        _ => (false, 0),
    };
    emit(
        json!({"w": id, "kind": "hold", "lock": name, "mode": "upgradable", "fence": 0,
        "from": from, "to": to, "checked": to, "released": "upgraded"}),
    );
    emit(
        json!({"w": id, "kind": "upgrade", "lock": name, "mode": "write", "start": start,
        "end": end, "ok": ok, "fence": fence}),
    );
    upgraded
}

/// Runs the worker that [`WORKER_ENV`] describes until its stdin closes. Returns at
/// once when the variable is not set.
pub async fn run_worker() {
    let Ok(text) = std::env::var(WORKER_ENV) else {
        return;
    };
    let spec = WorkerSpec::from_json(&text);
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        stopping.store(true, Ordering::SeqCst);
    });
    // A loaded machine (two cores, builds beside the tests) can miss the driver's
    // connect limit: try again for a while, as a service starting up would.
    let (client, raw) = {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let client = LockClient::cluster(spec.urls.clone()).await;
            let raw = match redis::cluster::ClusterClient::new(spec.urls.clone()) {
                Ok(raw) => raw.get_async_connection().await,
                Err(e) => Err(e),
            };
            match (client, raw) {
                (Ok(client), Ok(raw)) => break (client, raw),
                (client, raw) => {
                    let error = format!("{:?} / {:?}", client.err(), raw.err());
                    assert!(attempt < 30, "worker {}: no connection: {error}", spec.id);
                    eprintln!("worker {}: connecting again after {error}", spec.id);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    };
    let locks: Vec<(String, RwLock)> = spec
        .locks
        .iter()
        .map(|(name, replicas)| {
            let mut options = LockOptions::default()
                .read_lease(spec.lease)
                .write_lease(spec.lease)
                .wait_timeout(Duration::from_secs(3));
            if *replicas > 0 {
                options = options
                    .min_replicas(*replicas)
                    .replica_timeout(Duration::from_millis(500));
            }
            if let Some(bound) = spec.keep_reads {
                options = options.keep_reads(bound);
            }
            (name.clone(), client.rwlock_with(name, options))
        })
        .collect();
    let spec = Arc::new(spec);
    let locks = Arc::new(locks);
    let tasks: Vec<_> = (0..spec.tasks)
        .map(|task| {
            let (spec, locks, stop, raw) = (spec.clone(), locks.clone(), stop.clone(), raw.clone());
            tokio::spawn(async move { run_task(&spec, task, &locks, &stop, raw).await })
        })
        .collect();
    for task in tasks {
        task.await.expect("a worker task");
    }
    // Gives kept holds back rather than leave them to their leases.
    let _ = client.shutdown(Duration::from_secs(5)).await;
}

/// One task of a worker: the workload's loop on `locks` until `stop`.
async fn run_task(
    spec: &WorkerSpec,
    task: u32,
    locks: &[(String, RwLock)],
    stop: &AtomicBool,
    mut raw: redis::cluster_async::ClusterConnection,
) {
    // The holder number the checker knows this task by.
    let w = if spec.tasks == 1 {
        spec.id
    } else {
        spec.id * 100 + task
    };
    let mut rng = StdRng::seed_from_u64(spec.seed.wrapping_add(u64::from(task)));
    let mut seq = 0u64;
    let op_limit = Duration::from_secs(10);
    while !stop.load(Ordering::SeqCst) {
        let (name, lock) = &locks[rng.random_range(0..locks.len())];
        let write = rng.random_bool(1.0 - spec.reads);
        let mode = if write { "write" } else { "read" };
        let start = now_us();
        enum Guard {
            Write(redis_rwlock::RwLockWriteGuard),
            Read(redis_rwlock::RwLockReadGuard),
        }
        // A share of the writes (`upgrades`) comes by an upgrade: an upgradable read,
        // a look, then `upgrade()`.
        let acquired = if write && rng.random_bool(spec.upgrades) {
            let look = Duration::from_millis(rng.random_range(20..100));
            upgraded(w, name, lock, look, op_limit)
                .await
                .map(|r| r.map(Guard::Write))
        } else if write {
            tokio::time::timeout(op_limit, lock.write())
                .await
                .map(|r| r.map(Guard::Write))
        } else {
            tokio::time::timeout(op_limit, lock.read())
                .await
                .map(|r| r.map(Guard::Read))
        };
        let end = now_us();
        let guard = match acquired {
            Ok(Ok(guard)) => guard,
            outcome => {
                let err = match outcome {
                    Ok(Err(e)) => describe(&e),
                    _ => "hung".to_owned(),
                };
                emit(
                    json!({"w": w, "kind": "acquire", "lock": name, "mode": mode,
                    "start": start, "end": end, "ok": false, "err": err}),
                );
                tokio::time::sleep(Duration::from_millis(rng.random_range(20..100))).await;
                continue;
            }
        };
        let fence = match &guard {
            Guard::Write(g) => g.fencing_token(),
            Guard::Read(_) => 0,
        };
        emit(
            json!({"w": w, "kind": "acquire", "lock": name, "mode": mode,
            "start": start, "end": end, "ok": true, "fence": fence}),
        );
        let held = |guard: &Guard| match guard {
            Guard::Write(g) => g.is_held(),
            Guard::Read(g) => g.is_held(),
        };
        // The end of the last write or read that succeeded, begun on an `is_held()`
        // that said yes.
        let mut believed = end;
        // The last `is_held()` that said yes.
        let mut last_check = end;
        // Most holds take one to three steps; one write hold in five is a long one,
        // stepping on for one to one and a half leases (a batch job), so some hold is
        // held across whatever fault comes.
        let long = write && rng.random_bool(0.2);
        let steps = if long {
            u32::MAX
        } else {
            rng.random_range(1..=3)
        };
        let long_until = std::time::Instant::now() + spec.lease.mul_f64(rng.random_range(1.0..1.5));
        for _ in 0..steps {
            if stop.load(Ordering::SeqCst) || (long && std::time::Instant::now() >= long_until) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(rng.random_range(20..100))).await;
            let checked = now_us();
            if !held(&guard) {
                break;
            }
            last_check = checked;
            // Said as it happens, so a test can stop the process right after it.
            emit(json!({"w": w, "kind": "check", "lock": name, "mode": mode,
                "at": checked}));
            // Preparing the write: the pause that matters lands here.
            tokio::time::sleep(Duration::from_millis(rng.random_range(20..100))).await;
            match &guard {
                Guard::Write(g) => {
                    seq += 1;
                    let ack = format!("ack:{{{name}}}:{w}:{seq}");
                    let start = now_us();
                    let writes = FencedWrites::new()
                        .set(fenced_register(name), fence.to_string())
                        .set(&ack, "1");
                    let fenced = async { g.fenced_write(writes).await.map_err(|e| describe(&e)) };
                    let (end, ok, err) = timed(op_limit, fenced).await;
                    if ok {
                        believed = end;
                    }
                    emit(
                        json!({"w": w, "kind": "write", "reg": "fenced", "lock": name,
                        "start": start, "end": end, "ok": ok, "err": err, "token": fence,
                        "ack": ack}),
                    );
                    seq += 1;
                    let ack = format!("pack:{{{name}}}:{w}:{seq}");
                    let start = now_us();
                    let plain = async {
                        redis::cmd("MSET")
                            .arg(plain_register(name))
                            .arg(fence)
                            .arg(&ack)
                            .arg(1)
                            .query_async::<()>(&mut raw)
                            .await
                            .map_err(|e| describe(&e))
                    };
                    let (end, ok, err) = timed(op_limit, plain).await;
                    if ok {
                        believed = end;
                    }
                    emit(
                        json!({"w": w, "kind": "write", "reg": "plain", "lock": name,
                        "start": start, "end": end, "ok": ok, "err": err, "token": fence,
                        "ack": ack}),
                    );
                }
                Guard::Read(_) => {
                    let start = now_us();
                    let outcome: Result<redis::RedisResult<Option<u64>>, _> = tokio::time::timeout(
                        op_limit,
                        redis::cmd("GET")
                            .arg(fenced_register(name))
                            .query_async(&mut raw),
                    )
                    .await;
                    let end = now_us();
                    let value = match outcome {
                        Ok(Ok(value)) => {
                            believed = end;
                            json!(value.unwrap_or(0))
                        }
                        _ => Value::Null,
                    };
                    emit(json!({"w": w, "kind": "read", "lock": name, "start": start,
                        "end": end, "value": value}));
                }
            }
        }
        let start = now_us();
        if held(&guard) {
            believed = start;
            last_check = start;
        }
        let released = match guard {
            Guard::Write(g) => tokio::time::timeout(op_limit, g.release()).await,
            Guard::Read(g) => tokio::time::timeout(op_limit, g.release()).await,
        };
        let released = match released {
            Ok(Ok(())) => "ok".to_owned(),
            Ok(Err(e)) => describe(&e),
            Err(_) => "hung".to_owned(),
        };
        emit(
            json!({"w": w, "kind": "hold", "lock": name, "mode": mode, "fence": fence,
            "from": end, "to": believed, "checked": last_check, "release_start": start, "release_end": now_us(),
            "released": released}),
        );
        tokio::time::sleep(Duration::from_millis(rng.random_range(10..80))).await;
    }
}

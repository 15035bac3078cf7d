//! The cluster under test: start it through `cluster-compose/local-cluster.sh` (or
//! take `REDIS_CLUSTER_NODES`), learn which master owns which slots, read the
//! masters' counters, watch them with MONITOR, and run `redis-benchmark` against one master.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use redis_rwlock::redis;
use redis_rwlock::redis::cluster_routing::Slot;

/// How long the launcher may take to print `READY`.
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// A cluster this program started (stopped on drop) or one it was given.
pub struct Cluster {
    /// Seed URLs, `redis://host:port`.
    pub nodes: Vec<String>,
    /// `Some` when we started the launcher: closing its stdin stops it.
    launcher: Option<(Child, Option<ChildStdin>)>,
}

impl Cluster {
    /// Uses `REDIS_CLUSTER_NODES` when set, otherwise starts a private local cluster.
    pub fn start_or_from_env() -> Result<Cluster, String> {
        if let Ok(nodes) = std::env::var("REDIS_CLUSTER_NODES") {
            let nodes: Vec<String> = nodes
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect();
            if !nodes.is_empty() {
                return Ok(Cluster {
                    nodes,
                    launcher: None,
                });
            }
        }
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("cluster-compose/local-cluster.sh");
        let mut child = Command::new("bash")
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot run `bash {}`: {e}", script.display()))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or("launcher stdout not piped")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut cluster = Cluster {
            nodes: Vec::new(),
            launcher: Some((child, stdin)),
        };
        let deadline = std::time::Instant::now() + START_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = rx
                .recv_timeout(left)
                .map_err(|_| "the cluster launcher did not print READY in time (is a server installed? see cluster-compose/ensure-redis.sh, REDIS_SERVER/REDIS_CLI)".to_owned())?;
            if let Some(urls) = line.strip_prefix("REDIS_CLUSTER_NODES=") {
                cluster.nodes = urls.split(',').map(str::to_owned).collect();
            } else if line == "READY" {
                break;
            }
        }
        if cluster.nodes.is_empty() {
            return Err("the launcher printed no REDIS_CLUSTER_NODES line".into());
        }
        Ok(cluster)
    }

    /// Whether this program started the cluster.
    pub fn started_here(&self) -> bool {
        self.launcher.is_some()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some((mut child, stdin)) = self.launcher.take() {
            drop(stdin); // EOF: the launcher kills exactly its own servers
            for _ in 0..300 {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One master and the slots it serves.
#[derive(Clone, Debug)]
pub struct Master {
    pub host: String,
    pub port: u16,
    pub slots: Vec<(u16, u16)>,
}

impl Master {
    pub fn url(&self) -> String {
        format!("redis://{}:{}", self.host, self.port)
    }
}

/// The masters, as `CLUSTER NODES` shows them.
#[derive(Clone, Debug)]
pub struct Topology {
    pub masters: Vec<Master>,
    /// Index in `masters` of each slot's master.
    owners: HashMap<Slot, usize>,
}

impl Topology {
    pub async fn discover(seed: &str) -> Result<Topology, String> {
        let client = redis::Client::open(seed).map_err(|e| e.to_string())?;
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| e.to_string())?;
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        let mut masters = Vec::new();
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 || !fields[2].contains("master") || fields[2].contains("fail") {
                continue;
            }
            let addr = fields[1].split('@').next().unwrap_or_default();
            let Some((host, port)) = addr.rsplit_once(':') else {
                continue;
            };
            let slots: Vec<(u16, u16)> = fields[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|a| (a, a)),
                })
                .collect();
            if slots.is_empty() {
                continue;
            }
            masters.push(Master {
                host: host.to_owned(),
                port: port.parse().map_err(|_| format!("bad port in {addr}"))?,
                slots,
            });
        }
        masters.sort_by_key(|m| m.port);
        if masters.is_empty() {
            return Err("CLUSTER NODES lists no master with slots".into());
        }
        let owners = masters
            .iter()
            .enumerate()
            .flat_map(|(index, master)| {
                master
                    .slots
                    .iter()
                    .flat_map(|&(first, last)| first..=last)
                    .filter_map(move |slot| Some((Slot::new(slot)?, index)))
            })
            .collect();
        Ok(Topology { masters, owners })
    }

    /// Index of the master that serves `key`.
    pub fn master_of(&self, key: &str) -> usize {
        self.owners.get(&Slot::for_key(key)).copied().unwrap_or(0)
    }

    /// A lock name, `p{pid}-{base}-{n}` for the first n that makes `{name}` land on
    /// `master`: the process id keeps a run clear of the holds an earlier run on the
    /// same cluster left to expire.
    pub fn name_on(&self, master: usize, base: &str) -> String {
        let process = std::process::id();
        (0..)
            .map(|n| format!("p{process}-{base}-{n}"))
            .find(|name| self.master_of(&format!("{{{name}}}")) == master)
            .unwrap_or_else(|| format!("p{process}-{base}"))
    }

    /// `count` lock names spread evenly (round robin) over the masters.
    pub fn names_spread(&self, base: &str, count: usize) -> Vec<String> {
        (0..count)
            .map(|i| self.name_on(i % self.masters.len(), &format!("{base}-{i}")))
            .collect()
    }
}

/// Plain connections to every master, for their counters.
pub struct Masters {
    conns: Vec<redis::aio::MultiplexedConnection>,
}

impl Masters {
    pub async fn connect(topology: &Topology) -> Result<Masters, String> {
        let mut conns = Vec::new();
        for master in &topology.masters {
            let client = redis::Client::open(master.url()).map_err(|e| e.to_string())?;
            conns.push(
                client
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(|e| e.to_string())?,
            );
        }
        Ok(Masters { conns })
    }

    /// The counters of master `index` (`INFO cpu commandstats`). Script time sums
    /// only the script rows: the commands a script runs are counted again under
    /// their own names (and in `commands`).
    pub async fn counters(&mut self, index: usize) -> Result<Counters, String> {
        let info: String = self
            .query(index, redis::cmd("INFO").arg("cpu").arg("commandstats"))
            .await?;
        let mut c = Counters::default();
        for line in info.lines() {
            if let Some((name, value)) = line.trim().split_once(':')
                && (name == "used_cpu_user_main_thread" || name == "used_cpu_sys_main_thread")
            {
                c.cpu_us += value.parse::<f64>().map_err(|e| format!("{line}: {e}"))? * 1e6;
            }
        }
        for (name, calls, usec) in commandstats(&info) {
            if is_script(name) {
                c.scripts += calls;
                c.script_usec += usec;
            }
            if matches!(
                name,
                "ssubscribe" | "sunsubscribe" | "subscribe" | "unsubscribe"
            ) {
                c.subscriptions += calls;
            }
            if name != "info" {
                c.commands += calls;
            }
        }
        Ok(c)
    }

    /// [`Masters::counters`] of every master, in topology order.
    pub async fn all(&mut self) -> Result<Vec<Counters>, String> {
        let mut all = Vec::with_capacity(self.conns.len());
        for index in 0..self.conns.len() {
            all.push(self.counters(index).await?);
        }
        Ok(all)
    }

    /// [`Masters::counters`] summed over every master.
    pub async fn total(&mut self) -> Result<Counters, String> {
        Ok(Counters::sum(&self.all().await?))
    }

    /// Runs one command on master `index` (plain connection, no redirection).
    pub async fn query<T: redis::FromRedisValue>(
        &mut self,
        index: usize,
        cmd: &redis::Cmd,
    ) -> Result<T, String> {
        let conn = self.conns.get_mut(index).ok_or("no such master")?;
        cmd.query_async(conn).await.map_err(|e| e.to_string())
    }
}

/// Counters of one server (or their sum over several), or what they counted
/// between two readings ([`Counters::since`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    /// EVAL/EVALSHA/FCALL calls (and their `_RO` forms).
    pub scripts: u64,
    /// Microseconds spent in them.
    pub script_usec: u64,
    /// Every command but `INFO` (the measurement's own): the script calls and,
    /// counted again under their own names, the commands scripts ran.
    pub commands: u64,
    /// (S)SUBSCRIBE and (S)UNSUBSCRIBE calls.
    pub subscriptions: u64,
    /// `used_cpu_user_main_thread + used_cpu_sys_main_thread`, microseconds.
    pub cpu_us: f64,
}

impl Counters {
    /// What happened from `before` to `self`.
    pub fn since(&self, before: &Counters) -> Counters {
        Counters {
            scripts: self.scripts.saturating_sub(before.scripts),
            script_usec: self.script_usec.saturating_sub(before.script_usec),
            commands: self.commands.saturating_sub(before.commands),
            subscriptions: self.subscriptions.saturating_sub(before.subscriptions),
            cpu_us: (self.cpu_us - before.cpu_us).max(0.0),
        }
    }

    /// The sum of several servers' counters.
    pub fn sum<'a>(all: impl IntoIterator<Item = &'a Counters>) -> Counters {
        all.into_iter().fold(Counters::default(), |a, b| Counters {
            scripts: a.scripts + b.scripts,
            script_usec: a.script_usec + b.script_usec,
            commands: a.commands + b.commands,
            subscriptions: a.subscriptions + b.subscriptions,
            cpu_us: a.cpu_us + b.cpu_us,
        })
    }

    /// Script time per script call, microseconds (NaN when none ran).
    pub fn us_per_script(&self) -> f64 {
        if self.scripts == 0 {
            f64::NAN
        } else {
            self.script_usec as f64 / self.scripts as f64
        }
    }
}

/// One `redis-benchmark` result.
#[derive(Clone, Debug)]
pub struct RedisBenchmark {
    pub command_line: String,
    pub requests_per_sec: f64,
    pub p50_ms: f64,
}

/// Runs `redis-benchmark` (pipelined, `--csv`) with `command` against one server.
pub fn redis_benchmark(
    master: &Master,
    requests: u64,
    clients: u32,
    pipeline: u32,
    random_range: u32,
    command: &[String],
) -> Result<RedisBenchmark, String> {
    let mut args: Vec<String> = vec![
        "-h".into(),
        master.host.clone(),
        "-p".into(),
        master.port.to_string(),
        "-n".into(),
        requests.to_string(),
        "-c".into(),
        clients.to_string(),
        "-P".into(),
        pipeline.to_string(),
        "-r".into(),
        random_range.to_string(),
        "--csv".into(),
    ];
    args.extend(command.iter().cloned());
    // REDIS_BENCHMARK when set, else redis-benchmark, else valkey-benchmark: any of
    // them drives either server.
    let programs = match std::env::var("REDIS_BENCHMARK") {
        Ok(program) if !program.is_empty() => vec![program],
        _ => vec!["redis-benchmark".to_owned(), "valkey-benchmark".to_owned()],
    };
    let mut output = None;
    for program in &programs {
        match Command::new(program)
            .args(&args)
            .stdin(Stdio::null())
            .output()
        {
            Ok(out) => {
                output = Some(out);
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("cannot run {program}: {e}")),
        }
    }
    let output = output.ok_or_else(|| format!("none of {} is installed", programs.join(", ")))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "redis-benchmark failed ({}): {}{}",
            output.status,
            stdout,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    // CSV: a header line, then "<title>","rps","avg","min","p50",...
    let row = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('"') && !l.starts_with("\"test\""))
        .ok_or_else(|| format!("no result row in redis-benchmark output: {stdout}"))?;
    let cells: Vec<&str> = row.split("\",\"").map(|c| c.trim_matches('"')).collect();
    let number = |i: usize| -> Result<f64, String> {
        cells
            .get(i)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("cannot parse redis-benchmark row: {row}"))
    };
    Ok(RedisBenchmark {
        command_line: format!("redis-benchmark {}", args.join(" ")),
        requests_per_sec: number(1)?,
        p50_ms: number(4)?,
    })
}

/// A `commandstats` row (lower case) of a command that runs a script: EVAL,
/// EVALSHA, FCALL and their `_RO` forms.
fn is_script(name: &str) -> bool {
    name.starts_with("eval") || name.starts_with("fcall")
}

/// A connection to `url` in MONITOR mode whose reads time out after `timeout`.
fn monitor(url: String, timeout: Duration) -> Result<redis::Connection, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let mut conn = client.get_connection().map_err(|e| e.to_string())?;
    conn.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    redis::cmd("MONITOR")
        .exec(&mut conn)
        .map_err(|e| e.to_string())?;
    Ok(conn)
}

/// The next line a MONITOR connection shows.
fn next_line(conn: &mut redis::Connection) -> Result<String, String> {
    let value = conn.recv_response().map_err(|e| e.to_string())?;
    redis::from_redis_value(value).map_err(|e| e.to_string())
}

/// Watches `master` with MONITOR until the first `FCALL` or `EVALSHA` on `key`
/// shows up, and returns its arguments (from the verb on). `trigger` runs once the
/// monitor is listening; it should make the crate send the script.
pub async fn capture_script<F, Fut>(
    master: &Master,
    key: &str,
    trigger: F,
) -> Result<Vec<String>, String>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let url = master.url();
    let key = key.to_owned();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let watcher = tokio::task::spawn_blocking(move || -> Result<Vec<String>, String> {
        let mut conn = monitor(url, Duration::from_secs(5))?;
        let _ = ready_tx.send(());
        let needle = format!("\"{key}\"");
        loop {
            let line = next_line(&mut conn)
                .map_err(|err| format!("MONITOR saw no script call on {key}: {err}"))?;
            let Some((_, command)) = line.split_once("] ") else {
                continue;
            };
            let call = ["\"FCALL\"", "\"EVALSHA\""]
                .iter()
                .any(|verb| command.starts_with(verb));
            if call && command.contains(&needle) {
                return Ok(command
                    .trim_matches('"')
                    .split("\" \"")
                    .map(str::to_owned)
                    .collect());
            }
        }
    });
    ready_rx
        .await
        .map_err(|_| "MONITOR connection failed".to_owned())?;
    trigger().await;
    watcher.await.map_err(|e| e.to_string())?
}

/// What MONITOR showed on the masters during a window.
#[derive(Clone, Debug, Default)]
pub struct Sent {
    /// Script calls (FCALL, EVALSHA, EVAL and their `_RO` forms) sent by clients.
    pub scripts: u64,
    /// The `FCALL`s among them by the library function's operation: `acquire_read`
    /// for `rwlock_<hash>_acquire_read`.
    pub functions: BTreeMap<String, u64>,
    /// Every other command sent by clients (INFO, MONITOR and the end marker excluded).
    pub other: u64,
    /// Commands run inside scripts (not sent over the network; for information).
    pub in_scripts: u64,
}

impl Sent {
    fn add(&mut self, other: Sent) {
        self.scripts += other.scripts;
        self.other += other.other;
        self.in_scripts += other.in_scripts;
        for (function, calls) in other.functions {
            *self.functions.entry(function).or_default() += calls;
        }
    }

    /// `FCALL`s of the library function for `operation`.
    pub fn calls(&self, operation: &str) -> u64 {
        self.functions.get(operation).copied().unwrap_or(0)
    }
}

const MONITOR_END: &str = "bench-monitor-end";

/// The operation a library function is for: `rwlock_<hash>_acquire_read` ->
/// `acquire_read`.
fn operation(function: &str) -> &str {
    function.splitn(3, '_').nth(2).unwrap_or(function)
}

/// Counts, with MONITOR on every master, the commands clients send during
/// `window` (the window ends with an ECHO marker each monitor waits for).
pub async fn monitor_window(
    topology: &Topology,
    masters: &mut Masters,
    window: Duration,
) -> Result<Sent, String> {
    let (sent, ()) = monitor_during(topology, masters, tokio::time::sleep(window)).await?;
    Ok(sent)
}

/// Counts, with MONITOR on every master, the commands clients send while `work`
/// runs: it starts once every monitor listens, and the window ends when it is done.
pub async fn monitor_during<F: Future>(
    topology: &Topology,
    masters: &mut Masters,
    work: F,
) -> Result<(Sent, F::Output), String> {
    let mut watchers = Vec::new();
    let mut ready = Vec::new();
    for master in &topology.masters {
        let url = master.url();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        ready.push(ready_rx);
        watchers.push(tokio::task::spawn_blocking(
            move || -> Result<Sent, String> {
                let mut conn = monitor(url, Duration::from_secs(30))?;
                let _ = ready_tx.send(());
                let mut sent = Sent::default();
                loop {
                    let line = next_line(&mut conn).map_err(|e| format!("MONITOR: {e}"))?;
                    let Some((source, command)) = line.split_once("] ") else {
                        continue;
                    };
                    if command.contains(MONITOR_END) {
                        return Ok(sent);
                    }
                    let mut quoted = command.split('"').skip(1).step_by(2);
                    let name = quoted.next().unwrap_or_default().to_ascii_uppercase();
                    if source.ends_with(" lua") {
                        sent.in_scripts += 1;
                    } else if is_script(&name.to_ascii_lowercase()) {
                        sent.scripts += 1;
                        if name.starts_with("FCALL") {
                            let function = operation(quoted.next().unwrap_or_default());
                            *sent.functions.entry(function.to_owned()).or_default() += 1;
                        }
                    } else if name != "INFO" && name != "MONITOR" {
                        sent.other += 1;
                    }
                }
            },
        ));
    }
    for r in ready {
        r.await
            .map_err(|_| "a MONITOR connection failed".to_owned())?;
    }
    let output = work.await;
    for index in 0..topology.masters.len() {
        let _: String = masters
            .query(index, redis::cmd("ECHO").arg(MONITOR_END))
            .await?;
    }
    let mut total = Sent::default();
    for watcher in watchers {
        total.add(watcher.await.map_err(|e| e.to_string())??);
    }
    Ok((total, output))
}

/// The rows of `INFO commandstats`: command name, calls, microseconds.
fn commandstats(info: &str) -> impl Iterator<Item = (&str, u64, u64)> {
    info.lines().filter_map(|line| {
        let (name, rest) = line.trim().split_once(':')?;
        let name = name.strip_prefix("cmdstat_")?;
        let field = |key: &str| -> u64 {
            rest.split(',')
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        Some((name, field("calls"), field("usec")))
    })
}

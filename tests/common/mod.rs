//! Shared integration-test harness.
//!
//! Starts real Redis servers through `cluster-compose/local-cluster.sh` (no
//! docker) and offers helpers to inspect them and inject faults.
//!
//! * [`LocalRedis::cluster`] / [`LocalRedis::standalone`] start a private
//!   6-node cluster (3 masters + 3 replicas) or one plain server; dropping the
//!   value stops it. Use a private one for any test that injects faults.
//! * [`shared_cluster`] / [`shared_standalone`] start one instance per test
//!   binary, shared by all its tests and never dropped: when the test process
//!   exits, the launcher's stdin pipe closes and it stops its servers.
//!
//! Only std process APIs are used to start and stop servers, so all of this
//! works from any thread and from any `#[tokio::test]` runtime. Helpers that
//! talk to Redis use short-lived synchronous connections with timeouts.
//!
//! The server binaries are those the launcher picks: `REDIS_SERVER` /
//! `REDIS_CLI` when set (a path or a command name; for example the pinned Valkey,
//! `eval "$(bash cluster-compose/ensure-redis.sh --valkey)"`), else
//! `redis-server` / `redis-cli` on `PATH`, else `valkey-server` / `valkey-cli`.
//! If no server is found, tests FAIL (never skip) with a message that points at
//! `cluster-compose/ensure-redis.sh`.

#![allow(dead_code)]
// Test support code: failing loudly is the point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod locks;
#[allow(unused_imports)] // not every test binary uses every helper
pub use locks::*;
mod original;
#[allow(unused_imports)]
pub use original::*;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{IntoConnectionInfo, Value};

/// How long the launcher may take to print `READY`.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Connect timeout of the harness's own synchronous connections.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Read/write timeout of the harness's own synchronous commands.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `Drop` waits for the launcher to clean up before escalating.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

const MISSING_REDIS: &str = "neither redis-server nor valkey-server found on PATH: run \
     `bash cluster-compose/ensure-redis.sh` (or apt-get install redis-server redis-tools), or \
     set REDIS_SERVER/REDIS_CLI (`eval \"$(bash cluster-compose/ensure-redis.sh --valkey)\"` \
     for the pinned Valkey); integration tests need Redis >= 7.0 or Valkey";

/// One `redis-server` process started by the launcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// `redis://127.0.0.1:<port>`
    pub url: String,
    /// TCP port on 127.0.0.1.
    pub port: u16,
    /// Process id of the `redis-server` (for [`pause`], [`resume`], [`kill9`]).
    pub pid: u32,
    /// Role when the cluster was created: `"master"` or `"replica"`. It does
    /// not follow failovers: use [`LocalRedis::masters`] for the current view.
    pub role: String,
}

/// A running set of Redis servers owned by one `local-cluster.sh` process.
/// Dropping it closes the launcher's stdin; the launcher then kills its
/// servers and removes their files, and `drop` waits for that.
pub struct LocalRedis {
    /// The servers, in port order (for a cluster: as printed by the launcher).
    pub nodes: Vec<Node>,
    child: Child,
    stdin: Option<ChildStdin>,
    cluster: bool,
}

/// `(first slot, last slot, owner port)` ranges, sorted.
type SlotOwners = Vec<(u16, u16, u16)>;

/// One line of `CLUSTER NODES`, as seen by some node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNodeInfo {
    /// 40-character node id.
    pub id: String,
    /// Client port.
    pub port: u16,
    /// Flags such as `myself`, `master`, `slave`, `fail?`, `fail`.
    pub flags: Vec<String>,
    /// Node id of the master, for replicas.
    pub master_id: Option<String>,
    /// Cluster-bus link state is `connected`.
    pub connected: bool,
    /// Owned slot ranges, inclusive (importing/migrating entries are left out).
    pub slots: Vec<(u16, u16)>,
}

impl ClusterNodeInfo {
    /// Has the `master` flag.
    pub fn is_master(&self) -> bool {
        self.flags.iter().any(|f| f == "master")
    }

    /// Flagged `fail` or `fail?`.
    pub fn is_failing(&self) -> bool {
        self.flags.iter().any(|f| f == "fail" || f == "fail?")
    }

    /// Owns `slot`.
    pub fn owns_slot(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
    }
}

impl LocalRedis {
    /// Starts a private 6-node cluster (3 masters + 3 replicas),
    /// `cluster-node-timeout` 2000 ms.
    pub fn cluster() -> LocalRedis {
        Self::start(&[], true)
    }

    /// Starts a private 6-node cluster with the given `cluster-node-timeout`.
    pub fn cluster_with_node_timeout(ms: u64) -> LocalRedis {
        Self::start(&["--node-timeout", &ms.to_string()], true)
    }

    /// Starts one private plain (non-cluster) server.
    pub fn standalone() -> LocalRedis {
        Self::start(&["--standalone"], false)
    }

    fn start(args: &[&str], cluster: bool) -> LocalRedis {
        if let Err(missing) = server_binary() {
            panic!("{missing}");
        }
        let script = launcher_path();
        assert!(
            script.is_file(),
            "launcher not found at {}; run the tests from the crate checkout",
            script.display()
        );

        let mut child = Command::new("bash")
            .arg(&script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run `bash {}`: {e}", script.display()));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("launcher stdout is piped");

        // Read stdout on a thread so that the wait for READY can time out.
        // The thread stops after READY; the launcher prints nothing more.
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::Builder::new()
            .name("local-cluster-stdout".into())
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let ready = line.trim() == "READY";
                    if tx.send(line).is_err() || ready {
                        break;
                    }
                }
            })
            .expect("spawn stdout reader thread");

        let mut local = LocalRedis {
            nodes: Vec::new(),
            child,
            stdin,
            cluster,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        let mut seen = Vec::new();
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(remaining) {
                Ok(line) => {
                    let line = line.trim().to_string();
                    if line == "READY" {
                        break;
                    }
                    if let Some(rest) = line.strip_prefix("NODE ") {
                        local.nodes.push(parse_node_line(rest, &line));
                    }
                    seen.push(line);
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = local.wait_exit(Duration::from_secs(10));
                    local.stdin = None;
                    panic!(
                        "local-cluster.sh {} before printing READY (its error is on stderr above; \
                         if redis-server is missing, run `bash cluster-compose/ensure-redis.sh`). \
                         stdout so far: {seen:?}",
                        describe_exit(status)
                    );
                }
                Err(RecvTimeoutError::Timeout) => {
                    // Stop the launcher now (it cleans up on SIGTERM); Drop
                    // then closes stdin and waits for it during the unwind.
                    let _ = kill_command(local.child.id(), "-TERM");
                    panic!(
                        "local-cluster.sh did not print READY within {START_TIMEOUT:?} \
                         (stderr above may say why); stdout so far: {seen:?}"
                    );
                }
            }
        }
        let expected = if cluster { 6 } else { 1 };
        assert_eq!(
            local.nodes.len(),
            expected,
            "launcher printed an unexpected set of NODE lines: {seen:?}"
        );
        local.assert_expected_server();
        local
    }

    /// With `REDIS_RWLOCK_EXPECT_SERVER` set (CI sets `redis` or `valkey 8.1.8`;
    /// `redis 7.0` matches `redis 7.0.15`), checks that the servers really are that:
    /// a run meant for one server never passes on another by mistake.
    fn assert_expected_server(&self) {
        let Some(expected) = std::env::var("REDIS_RWLOCK_EXPECT_SERVER")
            .ok()
            .filter(|v| !v.is_empty())
        else {
            return;
        };
        let found = server_description(&self.nodes[0]);
        assert!(
            found
                .strip_prefix(expected.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '.'])),
            "REDIS_RWLOCK_EXPECT_SERVER={expected}, but the launcher started {found} \
             (REDIS_SERVER={:?})",
            std::env::var("REDIS_SERVER").unwrap_or_default()
        );
    }

    /// Waits up to `limit` for the launcher to exit.
    fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => return None,
            }
        }
    }

    /// True for a cluster, false for a standalone server.
    pub fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// All node URLs, in port order (for `ClusterClient::new` and friends).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url.clone()).collect()
    }

    /// URL of the first node (the only one for a standalone server).
    pub fn url(&self) -> String {
        self.nodes[0].url.clone()
    }

    /// The node listening on `port`. Panics if it is not one of ours.
    pub fn node_by_port(&self, port: u16) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node on port {port}; nodes: {:?}", self.nodes))
    }

    /// Nodes whose process is running (not killed, not paused).
    pub fn live_nodes(&self) -> Vec<&Node> {
        self.nodes.iter().filter(|n| is_running(n.pid)).collect()
    }

    /// Runs one command on `node` with a fresh synchronous connection
    /// (2 s connect timeout, 5 s read/write timeout). Panics on any error,
    /// including an error reply; see [`LocalRedis::try_raw`].
    pub fn raw(&self, node: &Node, args: &[&str]) -> Value {
        self.try_raw(node, args)
            .unwrap_or_else(|e| panic!("{args:?} on {} failed: {e}", node.url))
    }

    /// Like [`LocalRedis::raw`] but returns the error.
    pub fn try_raw(&self, node: &Node, args: &[&str]) -> redis::RedisResult<Value> {
        raw_command(node.port, args, COMMAND_TIMEOUT)
    }

    /// `INFO commandstats` of `node`: calls per command, keyed by the lower
    /// case command name without the `cmdstat_` prefix (`"evalsha"`,
    /// `"set"`, subcommands as `"cluster|info"`).
    pub fn commandstats(&self, node: &Node) -> HashMap<String, u64> {
        let text = value_to_string(self.raw(node, &["INFO", "commandstats"]));
        parse_commandstats(&text)
    }

    /// Sum of [`LocalRedis::commandstats`] over all running nodes.
    pub fn commandstats_all(&self) -> HashMap<String, u64> {
        let mut total = HashMap::new();
        for node in self.live_nodes() {
            for (cmd, calls) in self.commandstats(node) {
                *total.entry(cmd).or_insert(0) += calls;
            }
        }
        total
    }

    /// `CONFIG RESETSTAT` on every running node (zeroes commandstats).
    pub fn reset_stats(&self) {
        for node in self.live_nodes() {
            self.raw(node, &["CONFIG", "RESETSTAT"]);
        }
    }

    /// `CLUSTER NODES` as seen by the first running node that answers.
    pub fn cluster_view(&self) -> Vec<ClusterNodeInfo> {
        self.assert_cluster("cluster_view");
        let mut errors = Vec::new();
        for node in self.live_nodes() {
            match raw_command(node.port, &["CLUSTER", "NODES"], Duration::from_secs(2)) {
                Ok(v) => return parse_cluster_nodes(&value_to_string(v)),
                Err(e) => errors.push(format!("{}: {e}", node.url)),
            }
        }
        panic!("no running node answered CLUSTER NODES: {errors:?}");
    }

    /// Hash slot of `key` (`CLUSTER KEYSLOT` on a running node).
    pub fn keyslot(&self, key: &str) -> u16 {
        self.assert_cluster("keyslot");
        let mut errors = Vec::new();
        for node in self.live_nodes() {
            match raw_command(
                node.port,
                &["CLUSTER", "KEYSLOT", key],
                Duration::from_secs(2),
            ) {
                Ok(Value::Int(slot)) => return slot as u16,
                Ok(other) => errors.push(format!("{}: unexpected {other:?}", node.url)),
                Err(e) => errors.push(format!("{}: {e}", node.url)),
            }
        }
        panic!("no running node answered CLUSTER KEYSLOT: {errors:?}");
    }

    /// The master currently serving `key`, according to a running node.
    /// For a standalone server: that server.
    pub fn master_for_key(&self, key: &str) -> &Node {
        if !self.cluster {
            return &self.nodes[0];
        }
        let slot = self.keyslot(key);
        let view = self.cluster_view();
        let owner = view
            .iter()
            .find(|n| n.is_master() && n.owns_slot(slot))
            .unwrap_or_else(|| panic!("no master owns slot {slot} (key {key:?}); view: {view:#?}"));
        self.node_by_port(owner.port)
    }

    /// Current masters that own slots, in port order (follows failovers).
    /// For a standalone server: that server.
    pub fn masters(&self) -> Vec<&Node> {
        if !self.cluster {
            return vec![&self.nodes[0]];
        }
        let mut ports: Vec<u16> = self
            .cluster_view()
            .iter()
            .filter(|n| n.is_master() && !n.slots.is_empty() && !n.is_failing())
            .map(|n| n.port)
            .collect();
        ports.sort_unstable();
        ports.into_iter().map(|p| self.node_by_port(p)).collect()
    }

    /// A replica currently attached to `master` (not flagged failing), if any.
    pub fn replica_of(&self, master: &Node) -> Option<&Node> {
        self.assert_cluster("replica_of");
        let view = self.cluster_view();
        let master_id = &view.iter().find(|n| n.port == master.port)?.id;
        view.iter()
            .filter(|n| n.master_id.as_ref() == Some(master_id) && !n.is_failing())
            .map(|n| self.node_by_port(n.port))
            .min_by_key(|n| n.port)
    }

    /// Polls every running node until the deployment is healthy, or panics
    /// after `timeout` with the last problem seen. For a cluster, healthy
    /// means: every running node reports `cluster_state:ok`, all of them
    /// agree on which port owns which slots, all 16384 slots are owned, and
    /// every owner is a running node. For a standalone server: PING answers.
    pub fn wait_cluster_ok(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let problem = if self.cluster {
                self.cluster_problem()
            } else {
                raw_command(self.nodes[0].port, &["PING"], Duration::from_secs(2))
                    .err()
                    .map(|e| format!("PING failed: {e}"))
            };
            let Some(problem) = problem else { return };
            if Instant::now() >= deadline {
                panic!("cluster not healthy after {timeout:?}: {problem}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `None` if healthy, else a description of what is wrong.
    fn cluster_problem(&self) -> Option<String> {
        let live = self.live_nodes();
        if live.is_empty() {
            return Some("no node is running".into());
        }
        let mut reference: Option<(u16, SlotOwners)> = None;
        for node in live {
            let t = Duration::from_secs(2);
            let info = match raw_command(node.port, &["CLUSTER", "INFO"], t) {
                Ok(v) => value_to_string(v),
                Err(e) => return Some(format!("{}: CLUSTER INFO failed: {e}", node.url)),
            };
            if !info.lines().any(|l| l.trim() == "cluster_state:ok") {
                return Some(format!("{}: cluster_state is not ok", node.url));
            }
            let view = match raw_command(node.port, &["CLUSTER", "NODES"], t) {
                Ok(v) => parse_cluster_nodes(&value_to_string(v)),
                Err(e) => return Some(format!("{}: CLUSTER NODES failed: {e}", node.url)),
            };
            // (first slot, last slot, owner port), sorted.
            let mut owners: SlotOwners = view
                .iter()
                .filter(|n| n.is_master())
                .flat_map(|n| n.slots.iter().map(move |&(a, b)| (a, b, n.port)))
                .collect();
            owners.sort_unstable();
            let covered: u32 = owners.iter().map(|&(a, b, _)| u32::from(b - a) + 1).sum();
            if covered != 16384 {
                return Some(format!("{}: {covered} of 16384 slots owned", node.url));
            }
            for &(_, _, port) in &owners {
                let owner = self.nodes.iter().find(|n| n.port == port);
                if !owner.is_some_and(|n| is_running(n.pid)) {
                    return Some(format!(
                        "{}: slots still owned by stopped node {port}",
                        node.url
                    ));
                }
            }
            match &reference {
                None => reference = Some((node.port, owners)),
                Some((ref_port, ref_owners)) if *ref_owners != owners => {
                    return Some(format!(
                        "nodes {ref_port} and {} disagree on slot owners",
                        node.port
                    ));
                }
                Some(_) => {}
            }
        }
        None
    }

    fn assert_cluster(&self, what: &str) {
        assert!(
            self.cluster,
            "{what} needs a cluster, this is a standalone server"
        );
    }
}

impl Drop for LocalRedis {
    fn drop(&mut self) {
        // Closing stdin tells the launcher to kill its servers and clean up.
        self.stdin = None;
        if self.wait_exit(STOP_TIMEOUT).is_some() {
            return;
        }
        eprintln!(
            "local-cluster.sh did not exit {STOP_TIMEOUT:?} after stdin closed; sending SIGTERM"
        );
        signal(self.child.id(), "-TERM");
        if self.wait_exit(Duration::from_secs(10)).is_none() {
            eprintln!("local-cluster.sh still running; killing it (its redis-servers may remain)");
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One private cluster per test binary, started on first use and stopped when
/// the test process exits. Do not inject faults into it: other tests share it.
pub fn shared_cluster() -> &'static LocalRedis {
    static CLUSTER: OnceLock<LocalRedis> = OnceLock::new();
    CLUSTER.get_or_init(LocalRedis::cluster)
}

/// One standalone server per test binary, like [`shared_cluster`].
pub fn shared_standalone() -> &'static LocalRedis {
    static STANDALONE: OnceLock<LocalRedis> = OnceLock::new();
    STANDALONE.get_or_init(LocalRedis::standalone)
}

/// Freezes a process with SIGSTOP (a paused Redis accepts TCP connections
/// but never answers).
pub fn pause(pid: u32) {
    signal(pid, "-STOP");
}

/// Continues a process stopped by [`pause`].
pub fn resume(pid: u32) {
    signal(pid, "-CONT");
}

/// Kills a process with SIGKILL and waits (up to 5 s) until it is gone.
pub fn kill9(pid: u32) {
    signal(pid, "-9");
    let deadline = Instant::now() + Duration::from_secs(5);
    while is_alive(pid) {
        assert!(
            Instant::now() < deadline,
            "pid {pid} still alive 5 s after SIGKILL"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The process exists and is not a zombie (it may be paused).
pub fn is_alive(pid: u32) -> bool {
    match proc_state(pid) {
        Some(state) => !matches!(state, 'Z' | 'X' | 'x'),
        None if Path::new("/proc/self/stat").exists() => false,
        // No procfs (not Linux): fall back to `kill -0`.
        None => kill_command(pid, "-0").is_ok_and(|s| s.success()),
    }
}

/// The process is alive and not stopped by SIGSTOP.
pub fn is_running(pid: u32) -> bool {
    is_alive(pid) && !matches!(proc_state(pid), Some('T' | 't'))
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

/// The server binary the launcher will run, found as `local-cluster.sh` finds it:
/// `REDIS_SERVER` (a path, or a command name on `PATH`) when set, else
/// `redis-server`, else `valkey-server` on `PATH`. The error says what is missing.
pub fn server_binary() -> Result<PathBuf, String> {
    match std::env::var_os("REDIS_SERVER").filter(|v| !v.is_empty()) {
        Some(bin) => executable(Path::new(&bin)).ok_or_else(|| {
            format!(
                "REDIS_SERVER={} is not an executable file or a command on PATH",
                bin.to_string_lossy()
            )
        }),
        None => executable(Path::new("redis-server"))
            .or_else(|| executable(Path::new("valkey-server")))
            .ok_or_else(|| MISSING_REDIS.to_owned()),
    }
}

/// `bin` itself when it names a path (contains a `/`), else the first `PATH`
/// entry holding a file of that name.
fn executable(bin: &Path) -> Option<PathBuf> {
    let is_file = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file());
    if bin.components().count() > 1 {
        return is_file(bin).then(|| bin.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(bin))
        .find(|file| is_file(file))
}

/// What the server at `node` says it is, from `INFO server`: `"redis 7.0.15"` or
/// `"valkey 8.1.8"` (Valkey names itself in `server_name` and `valkey_version`).
pub fn server_description(node: &Node) -> String {
    let info = value_to_string(
        raw_command(node.port, &["INFO", "server"], COMMAND_TIMEOUT)
            .unwrap_or_else(|e| panic!("INFO server on {} failed: {e}", node.url)),
    );
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(str::to_owned)
    };
    match (field("server_name"), field("redis_version")) {
        (Some(name), _) => {
            let version = field(&format!("{name}_version")).unwrap_or_default();
            format!("{name} {version}")
        }
        (None, Some(version)) => format!("redis {version}"),
        (None, None) => panic!("INFO server on {} names no version: {info}", node.url),
    }
}

/// `<crate>/cluster-compose/local-cluster.sh`.
pub fn launcher_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("cluster-compose/local-cluster.sh")
}

// ---------------------------------------------------------------------------
// Internals
// ---------------------------------------------------------------------------

/// Runs one command on 127.0.0.1:`port` with a fresh connection.
fn raw_command(port: u16, args: &[&str], timeout: Duration) -> redis::RedisResult<Value> {
    let info = format!("redis://127.0.0.1:{port}").into_connection_info()?;
    // No CLIENT SETINFO on connect: keeps commandstats about the code under test.
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    let client = redis::Client::open(info.set_redis_settings(settings))?;
    let mut con = client.get_connection_with_timeout(CONNECT_TIMEOUT.min(timeout))?;
    con.set_read_timeout(Some(timeout))?;
    con.set_write_timeout(Some(timeout))?;
    let (name, rest) = args.split_first().expect("raw: empty command");
    let mut cmd = redis::cmd(name);
    for arg in rest {
        cmd.arg(*arg);
    }
    cmd.query::<Value>(&mut con)
}

/// Text of a bulk/simple/verbatim string reply; panics on anything else.
fn value_to_string(v: Value) -> String {
    redis::from_redis_value::<String>(v.clone())
        .unwrap_or_else(|e| panic!("expected a string reply, got {v:?}: {e}"))
}

fn parse_node_line(rest: &str, line: &str) -> Node {
    let parts: Vec<&str> = rest.split_whitespace().collect();
    let [url, pid, role] = parts[..] else {
        panic!("malformed launcher line: {line:?}");
    };
    let port = url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in launcher line: {line:?}"));
    Node {
        url: url.to_string(),
        port,
        pid: pid
            .parse()
            .unwrap_or_else(|_| panic!("bad pid in launcher line: {line:?}")),
        role: role.to_string(),
    }
}

/// Parses `CLUSTER NODES` output.
fn parse_cluster_nodes(text: &str) -> Vec<ClusterNodeInfo> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 {
                return None;
            }
            // ip:port@cport[,hostname]
            let port = f[1].split('@').next()?.rsplit(':').next()?.parse().ok()?;
            let slots = f[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|x| (x, x)),
                })
                .collect();
            Some(ClusterNodeInfo {
                id: f[0].to_string(),
                port,
                flags: f[2].split(',').map(str::to_string).collect(),
                master_id: (f[3] != "-").then(|| f[3].to_string()),
                connected: f[7] == "connected",
                slots,
            })
        })
        .collect()
}

/// Parses `INFO commandstats` lines such as
/// `cmdstat_evalsha:calls=3,usec=120,usec_per_call=40.00,...`.
fn parse_commandstats(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let (name, fields) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = fields
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_ascii_lowercase(), calls))
        })
        .collect()
}

/// Process state letter from `/proc/<pid>/stat` (R, S, D, T, t, Z, ...).
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ...": comm may contain spaces and parentheses.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

fn kill_command(pid: u32, sig: &str) -> std::io::Result<ExitStatus> {
    Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
}

fn signal(pid: u32, sig: &str) {
    match kill_command(pid, sig) {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("`kill {sig} {pid}` failed ({s}); is the process still there?"),
        Err(e) => panic!("cannot run `kill {sig} {pid}`: {e}"),
    }
}

fn describe_exit(status: Option<ExitStatus>) -> String {
    match status {
        Some(s) => format!("exited ({s})"),
        None => "closed its stdout".to_string(),
    }
}

// ---------------------------------------------------------------------------
// Fault injection: failover, slot migration, connection kills (tests/faults_*.rs)
// ---------------------------------------------------------------------------

impl LocalRedis {
    /// The node's 40-character cluster id (`CLUSTER MYID`).
    pub fn node_id(&self, node: &Node) -> String {
        value_to_string(self.raw(node, &["CLUSTER", "MYID"]))
    }

    /// The port of the master that owns `slot` in the view of the first running
    /// node that answers, if any.
    pub fn slot_owner(&self, slot: u16) -> Option<u16> {
        self.cluster_view()
            .iter()
            .find(|n| n.is_master() && n.owns_slot(slot))
            .map(|n| n.port)
    }

    /// A lock name (with `prefix`) whose key `rwlock:{name}` lives on `master`.
    pub fn name_on_master(&self, prefix: &str, master: &Node) -> String {
        let view = self.cluster_view();
        let owner = view
            .iter()
            .find(|n| n.port == master.port)
            .unwrap_or_else(|| panic!("{} is not in the cluster view", master.url));
        for _ in 0..10_000 {
            let name = unique_name(prefix);
            if owner.owns_slot(self.keyslot(&format!("rwlock:{{{name}}}"))) {
                return name;
            }
        }
        panic!("no name found whose slot is owned by {}", master.url);
    }

    /// `CLUSTER FAILOVER` on `replica` (a graceful, manual failover: the
    /// replica catches up with its master first), then waits until it is a
    /// master in every node's view and the cluster is healthy.
    pub fn manual_failover(&self, replica: &Node, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        self.raw(replica, &["CLUSTER", "FAILOVER"]);
        loop {
            let promoted = self.live_nodes().iter().all(|seen_by| {
                raw_command(seen_by.port, &["CLUSTER", "NODES"], Duration::from_secs(2))
                    .map(|v| parse_cluster_nodes(&value_to_string(v)))
                    .is_ok_and(|view| {
                        view.iter()
                            .any(|n| n.port == replica.port && n.is_master() && !n.slots.is_empty())
                    })
            });
            if promoted && self.cluster_problem().is_none() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} not promoted within {timeout:?}: {:?}",
                replica.url,
                self.cluster_problem()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Moves `slot` to the master `target` the way `redis-cli --cluster
    /// reshard` does: `SETSLOT IMPORTING` on the target, `SETSLOT MIGRATING`
    /// on the owner, `MIGRATE` of every key (in batches), then `SETSLOT NODE`
    /// on the target, the old owner and every other master. `between` runs
    /// after the first batch has moved (keys of the slot are then split across
    /// the two masters). Returns how many keys were moved.
    pub fn migrate_slot(&self, slot: u16, target: &Node, mut between: impl FnMut()) -> usize {
        let source_port = self
            .slot_owner(slot)
            .unwrap_or_else(|| panic!("no master owns slot {slot}"));
        let source = self.node_by_port(source_port);
        assert_ne!(
            source.port, target.port,
            "slot {slot} already on the target"
        );
        let (source_id, target_id) = (self.node_id(source), self.node_id(target));
        let slot_s = slot.to_string();
        self.raw(
            target,
            &["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &source_id],
        );
        self.raw(
            source,
            &["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &target_id],
        );
        let target_port = target.port.to_string();
        let mut moved = 0;
        let mut batches = 0;
        loop {
            let keys: Vec<String> = redis::from_redis_value(
                self.raw(source, &["CLUSTER", "GETKEYSINSLOT", &slot_s, "1"]),
            )
            .expect("GETKEYSINSLOT returns keys");
            if keys.is_empty() {
                break;
            }
            let mut args = vec![
                "MIGRATE",
                "127.0.0.1",
                &target_port,
                "",
                "0",
                "5000",
                "KEYS",
            ];
            args.extend(keys.iter().map(String::as_str));
            // NOKEY (the key expired meanwhile) is fine; anything else is not.
            self.raw(source, &args);
            moved += keys.len();
            batches += 1;
            if batches == 1 {
                between();
            }
        }
        if batches == 0 {
            between();
        }
        self.raw(target, &["CLUSTER", "SETSLOT", &slot_s, "NODE", &target_id]);
        self.raw(source, &["CLUSTER", "SETSLOT", &slot_s, "NODE", &target_id]);
        for master in self.masters() {
            if master.port != source.port && master.port != target.port {
                self.raw(master, &["CLUSTER", "SETSLOT", &slot_s, "NODE", &target_id]);
            }
        }
        moved
    }

    /// Subscribers of the sharded `channel` on `node` (`PUBSUB SHARDNUMSUB`).
    pub fn shard_subscribers(&self, node: &Node, channel: &str) -> u64 {
        match self.raw(node, &["PUBSUB", "SHARDNUMSUB", channel]) {
            Value::Array(items) => match items.as_slice() {
                [_, Value::Int(n)] => *n as u64,
                other => panic!("unexpected SHARDNUMSUB reply {other:?}"),
            },
            Value::Map(pairs) => match pairs.as_slice() {
                [(_, Value::Int(n))] => *n as u64,
                other => panic!("unexpected SHARDNUMSUB reply {other:?}"),
            },
            other => panic!("unexpected SHARDNUMSUB reply {other:?}"),
        }
    }

    /// `INFO errorstats` of `node`: error replies per error code
    /// (`"NOSCRIPT"`, `"MOVED"`, ...).
    pub fn errorstats(&self, node: &Node) -> HashMap<String, u64> {
        let text = value_to_string(self.raw(node, &["INFO", "errorstats"]));
        text.lines()
            .filter_map(|line| {
                let (code, fields) = line.trim().strip_prefix("errorstat_")?.split_once(':')?;
                let count = fields.strip_prefix("count=")?.parse().ok()?;
                Some((code.to_string(), count))
            })
            .collect()
    }

    /// Whether `master` itself lists `replica` among its replicas (`CLUSTER
    /// REPLICAS` on the master). Only then does it forward sharded pub/sub
    /// messages to subscribers on that replica.
    pub fn master_knows_replica(&self, master: &Node, replica: &Node) -> bool {
        let id = self.node_id(master);
        let lines: Vec<String> =
            redis::from_redis_value(self.raw(master, &["CLUSTER", "REPLICAS", &id]))
                .expect("CLUSTER REPLICAS returns one line per replica");
        let needle = format!("127.0.0.1:{}@", replica.port);
        lines.iter().any(|line| line.contains(&needle))
    }

    /// `SCRIPT FLUSH` on every running node.
    pub fn script_flush_all(&self) {
        for node in self.live_nodes() {
            self.raw(node, &["SCRIPT", "FLUSH"]);
        }
    }

    /// `CLIENT KILL TYPE <kind>` on `node` (`normal`, `pubsub`, ...): how many
    /// connections were closed. The harness's own connection is skipped.
    pub fn kill_clients(&self, node: &Node, kind: &str) -> u64 {
        match self.raw(node, &["CLIENT", "KILL", "TYPE", kind, "SKIPME", "yes"]) {
            Value::Int(n) => n as u64,
            other => panic!("unexpected CLIENT KILL reply {other:?}"),
        }
    }
}

/// Runs blocking harness code (fault injection, polling) from inside a
/// multi-threaded tokio test without stalling the runtime's other tasks.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// How many panics this test process has seen so far outside test code (in
/// the library, the driver, tokio or std), in any thread or task: a panic inside
/// a spawned background task fails no test by itself. Panics located in
/// `tests/` (failed assertions of tests running in parallel) are not counted.
/// The first call installs the counting hook; the default hook still prints.
pub fn panics_outside_tests() -> u64 {
    static PANICS: AtomicU64 = AtomicU64::new(0);
    static HOOK: OnceLock<()> = OnceLock::new();
    HOOK.get_or_init(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info
                .location()
                .is_some_and(|l| l.file().starts_with("tests/"))
            {
                PANICS.fetch_add(1, Ordering::SeqCst);
            }
            default(info);
        }));
    });
    PANICS.load(Ordering::SeqCst)
}

/// A process stopped with SIGSTOP until [`Paused::resume`] or drop (so a
/// failing test never leaves a node frozen).
pub struct Paused {
    pid: u32,
    resumed: bool,
}

impl Paused {
    /// SIGSTOPs `pid`.
    pub fn new(pid: u32) -> Paused {
        pause(pid);
        Paused {
            pid,
            resumed: false,
        }
    }

    /// SIGCONTs the process.
    pub fn resume(mut self) {
        self.resumed = true;
        resume(self.pid);
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        if !self.resumed {
            let _ = kill_command(self.pid, "-CONT");
        }
    }
}

//! Starting and stopping the servers: `cluster-compose/local-cluster.sh` runs them,
//! prints a `NODE <url> <pid> <role>` line per server and `READY`, and stops them
//! when its stdin closes.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::inspect::server_description;
use super::process::{is_running, kill_command, signal};

/// How long the launcher may take to print `READY`.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

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

/// Where a TLS launcher (`--tls`) put its certificates (PEM files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CA that signed the server and client certificates.
    pub ca: PathBuf,
    /// A client certificate the servers accept.
    pub client_cert: PathBuf,
    /// Its private key.
    pub client_key: PathBuf,
}

/// Ports served over TLS, with their certificates: the inspection helpers, which
/// know only a port, look the TLS settings up here.
pub(super) fn tls_ports() -> &'static std::sync::Mutex<std::collections::HashMap<u16, TlsFiles>> {
    static PORTS: OnceLock<std::sync::Mutex<std::collections::HashMap<u16, TlsFiles>>> =
        OnceLock::new();
    PORTS.get_or_init(Default::default)
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
    /// The certificates, for a TLS launcher.
    pub tls: Option<TlsFiles>,
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

    /// Starts a private 6-node cluster that speaks TLS only (`rediss://`, cluster
    /// bus and replication included); [`LocalRedis::tls`] holds its certificates.
    pub fn cluster_tls() -> LocalRedis {
        Self::start(&["--tls"], true)
    }

    /// Starts one private plain server that speaks TLS only.
    pub fn standalone_tls() -> LocalRedis {
        Self::start(&["--standalone", "--tls"], false)
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
            tls: None,
        };
        let (mut ca, mut client_cert, mut client_key) = (None, None, None);
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
                    if let Some(path) = line.strip_prefix("TLS_CA=") {
                        ca = Some(PathBuf::from(path));
                    }
                    if let Some(path) = line.strip_prefix("TLS_CLIENT_CERT=") {
                        client_cert = Some(PathBuf::from(path));
                    }
                    if let Some(path) = line.strip_prefix("TLS_CLIENT_KEY=") {
                        client_key = Some(PathBuf::from(path));
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
        if let (Some(ca), Some(client_cert), Some(client_key)) = (ca, client_cert, client_key) {
            let files = TlsFiles {
                ca,
                client_cert,
                client_key,
            };
            let mut ports = tls_ports().lock().unwrap();
            for node in &local.nodes {
                ports.insert(node.port, files.clone());
            }
            local.tls = Some(files);
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

/// `<crate>/cluster-compose/local-cluster.sh`.
pub fn launcher_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("cluster-compose/local-cluster.sh")
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

fn describe_exit(status: Option<ExitStatus>) -> String {
    match status {
        Some(s) => format!("exited ({s})"),
        None => "closed its stdout".to_string(),
    }
}

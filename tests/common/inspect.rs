//! Looking at the running servers: one-off commands, statistics and the cluster's
//! view of itself (who owns which slots, who replicates whom).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redis::{IntoConnectionInfo, Value};

use super::{LocalRedis, Node, is_running, unique_name};

/// Connect timeout of the harness's own synchronous connections.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Read/write timeout of the harness's own synchronous commands.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

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
        if !self.is_cluster() {
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
        if !self.is_cluster() {
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
            let problem = if self.is_cluster() {
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
    pub(super) fn cluster_problem(&self) -> Option<String> {
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
            self.is_cluster(),
            "{what} needs a cluster, this is a standalone server"
        );
    }

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

    /// A lock name (starting with `prefix`) whose lock lives on `master`: the name
    /// is its key's hash tag, so the key lives in the name's slot.
    pub fn name_on_master(&self, prefix: &str, master: &Node) -> String {
        let view = self.cluster_view();
        let owner = view
            .iter()
            .find(|n| n.port == master.port)
            .unwrap_or_else(|| panic!("{} is not in the cluster view", master.url));
        for _ in 0..10_000 {
            let name = unique_name(prefix);
            if owner.owns_slot(self.keyslot(&name)) {
                return name;
            }
        }
        panic!("no name found whose slot is owned by {}", master.url);
    }

    /// Subscribers of the sharded `channel` on `node` (`PUBSUB SHARDNUMSUB`).
    pub fn shard_subscribers(&self, node: &Node, channel: &str) -> u64 {
        self.count_subscribers(node, "SHARDNUMSUB", channel)
    }

    /// Subscribers of a lock's wake-up `channel` on `node`: sharded on a cluster,
    /// plain (`PUBSUB NUMSUB`) on a standalone server, as the lock subscribes.
    pub fn subscribers(&self, node: &Node, channel: &str) -> u64 {
        if self.is_cluster() {
            self.shard_subscribers(node, channel)
        } else {
            self.count_subscribers(node, "NUMSUB", channel)
        }
    }

    fn count_subscribers(&self, node: &Node, numsub: &str, channel: &str) -> u64 {
        match self.raw(node, &["PUBSUB", numsub, channel]) {
            Value::Array(items) => match items.as_slice() {
                [_, Value::Int(n)] => *n as u64,
                other => panic!("unexpected {numsub} reply {other:?}"),
            },
            Value::Map(pairs) => match pairs.as_slice() {
                [(_, Value::Int(n))] => *n as u64,
                other => panic!("unexpected {numsub} reply {other:?}"),
            },
            other => panic!("unexpected {numsub} reply {other:?}"),
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

    /// The function libraries loaded on `node`: `(name, code)` (`FUNCTION LIST
    /// WITHCODE`).
    pub fn function_libraries(&self, node: &Node) -> Vec<(String, String)> {
        let Value::Array(libraries) = self.raw(node, &["FUNCTION", "LIST", "WITHCODE"]) else {
            panic!("FUNCTION LIST on {} is not a list", node.url);
        };
        libraries
            .into_iter()
            .map(|library| {
                let fields: Vec<Value> = redis::from_redis_value(library)
                    .expect("a library is a list of fields and values");
                let field = |name: &str| {
                    fields
                        .chunks(2)
                        .find(|pair| value_to_string(pair[0].clone()) == name)
                        .map(|pair| value_to_string(pair[1].clone()))
                        .unwrap_or_else(|| panic!("a library without {name}"))
                };
                (field("library_name"), field("library_code"))
            })
            .collect()
    }

    /// The names of the function libraries loaded on `node`, sorted.
    pub fn library_names(&self, node: &Node) -> Vec<String> {
        let mut names: Vec<String> = self
            .function_libraries(node)
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        names.sort();
        names
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
}

/// Runs one command on 127.0.0.1:`port` with a fresh connection.
pub(super) fn raw_command(
    port: u16,
    args: &[&str],
    timeout: Duration,
) -> redis::RedisResult<Value> {
    let tls = super::launcher::tls_ports()
        .lock()
        .unwrap()
        .get(&port)
        .cloned();
    let scheme = if tls.is_some() { "rediss" } else { "redis" };
    let info = format!("{scheme}://127.0.0.1:{port}").into_connection_info()?;
    // No CLIENT SETINFO on connect: keeps commandstats about the code under test.
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    let info = info.set_redis_settings(settings);
    let client = match tls {
        None => redis::Client::open(info)?,
        Some(files) => tls_client(info, &files)?,
    };
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

/// A client that trusts the launcher's CA and presents its client certificate.
#[cfg(feature = "tls-rustls")]
pub fn tls_client(
    info: redis::ConnectionInfo,
    files: &super::TlsFiles,
) -> redis::RedisResult<redis::Client> {
    // The driver's rustls needs a crypto provider before its first connection.
    let _ = rustls::crypto::ring::default_provider().install_default();
    redis::Client::build_with_tls(info, tls_certificates(files))
}

/// The launcher's CA and client certificate, as the driver takes them.
#[cfg(feature = "tls-rustls")]
pub fn tls_certificates(files: &super::TlsFiles) -> redis::TlsCertificates {
    let read = |path: &std::path::Path| {
        std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
    };
    redis::TlsCertificates {
        client_tls: Some(redis::ClientTlsConfig {
            client_cert: read(&files.client_cert),
            client_key: read(&files.client_key),
        }),
        root_cert: Some(read(&files.ca)),
    }
}

#[cfg(not(feature = "tls-rustls"))]
fn tls_client(
    _info: redis::ConnectionInfo,
    _files: &super::TlsFiles,
) -> redis::RedisResult<redis::Client> {
    panic!("servers started with --tls need the tests built with --features tls-rustls")
}

/// Text of a bulk/simple/verbatim string reply; panics on anything else.
pub(super) fn value_to_string(v: Value) -> String {
    redis::from_redis_value::<String>(v.clone())
        .unwrap_or_else(|e| panic!("expected a string reply, got {v:?}: {e}"))
}

/// Parses `CLUSTER NODES` output.
pub(super) fn parse_cluster_nodes(text: &str) -> Vec<ClusterNodeInfo> {
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

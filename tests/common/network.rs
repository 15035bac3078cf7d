//! A fault injector for a whole private cluster: every link, client to node and node
//! to node (replication and the cluster bus), runs through a loopback relay that can
//! cut it both ways, hold it one way, delay it, and heal it.
//!
//! # Design: one relay per destination, the source known by its address
//!
//! A node announces one client port and one bus port to everybody
//! (`cluster-announce-port`, `cluster-announce-bus-port`), so one relay per (from, to)
//! pair cannot be told apart by port: every node and client dials the same announced
//! port. Instead there is one relay per destination (a node's client port, and its
//! bus port), and each relay tells where a connection comes FROM by its source
//! address:
//!
//! * node `i` makes every outgoing connection (replication to its master, bus links)
//!   from its own loopback address, `127.0.0.<11 + i>` (`bind-source-addr`, Redis >= 7.0
//!   and Valkey); the relay maps that address back to the node. Every node announces
//!   `127.0.0.1` (`cluster-announce-ip`), so no node ever learns those addresses;
//! * clients connect from `127.0.0.1`: the relay finds the process that owns the
//!   connection's source port (`/proc/net/tcp` gives the socket's inode, the
//!   registered client processes' `/proc/<pid>/fd` the owner), so a cut can name one
//!   client process ([`Peer::Client`]) or all of them ([`Peer::Clients`]).
//!
//! All traffic goes to `127.0.0.1` (the relays, then the nodes' real ports); only the
//! source addresses of the nodes' own connections differ. The harness talks to the
//! nodes' real ports directly and is never cut off.
//!
//! A rule is per direction, `from -> to`, and applies to every byte that flows that
//! way, on connections opened by either side (a request from a replica to its master
//! and the master's replies on it go opposite ways):
//!
//! * [`LinkState::Drop`] resets every connection between the two at once and resets
//!   new ones as they are accepted (a partition that answers with "connection
//!   refused"; set on both directions by [`Network::cut`]);
//! * [`LinkState::Hold`]: bytes that way are not forwarded until the rule is lifted,
//!   and then arrive in order (a silent partition, as a firewall that drops packets
//!   and TCP's retransmissions after it heals); the other way still flows;
//! * [`LinkState::Delay`]: every chunk that way waits that long first.
//!
//! One fault is per connection rather than per direction:
//! [`Network::silence_subscriptions`] silences a client's subscribed connections (it
//! sent `SUBSCRIBE`, `SSUBSCRIBE` or `PSUBSCRIBE` on them): they stay open, but what
//! the nodes send on them is swallowed, with no reset (a NAT or firewall that forgot
//! an idle pub/sub flow), while the client's other connections (its commands) go on.
//! [`Network::heal`] ends it and resets the silenced connections that lost something
//! (their streams have a gap), so the client reconnects and subscribes again.
//!
//! Processes too: [`Network::kill`] and [`Network::restart`] kill a node with SIGKILL
//! and start it again on its port and files (it rejoins, as a replica if its shard
//! failed over), announcing the relays from its first breath; pause one with
//! [`super::Paused`] and [`Network::pid`].
//!
//! Each relay runs on one shared runtime of its own (two worker threads), so it works
//! under any test runtime; dropping the [`Network`] stops them, the nodes it restarted
//! and the cluster.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use redis::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::inspect::{parse_cluster_nodes, raw_command, value_to_string};
use super::{LocalRedis, Node};

/// How long [`Network::start`] waits for every link to run through the relays.
const SETUP_LIMIT: Duration = Duration::from_secs(60);

/// The first of the nodes' own source addresses: node `i` uses `127.0.0.<11 + i>`.
const FIRST_NODE_ADDRESS: u8 = 11;

/// One end of a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Peer {
    /// The node at this index of [`Network::nodes`].
    Node(usize),
    /// The client process with this pid (registered with [`Network::add_client`]).
    Client(u32),
    /// Every client process (a rule for one client wins over this one).
    Clients,
}

/// What happens to the bytes that flow one way between two peers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    /// Forwarded at once.
    Open,
    /// Forwarded after this delay (per chunk read).
    Delay(Duration),
    /// Not forwarded until the rule is lifted; then in order.
    Hold,
    /// Every connection between the two is reset, new ones too.
    Drop,
}

/// The rules, with a generation every connection watches.
struct Rules {
    links: Mutex<HashMap<(Peer, Peer), LinkState>>,
    /// Client processes a relay may find as a connection's owner.
    clients: Mutex<Vec<u32>>,
    changed: watch::Sender<u64>,
    /// Live relayed connections per (from, to): setup waits for the bus links.
    live: Mutex<HashMap<(Peer, Peer), u64>>,
    /// Clients whose subscribed connections are silenced ([`Peer::Clients`]: all).
    silenced: Mutex<HashSet<Peer>>,
    /// Reads of a node's stream swallowed on silenced connections so far.
    swallowed: AtomicU64,
    /// Every relayed client connection, to count the subscribed ones.
    connections: Mutex<Vec<Weak<Connection>>>,
}

/// What a relay knows of one client connection.
struct Connection {
    source: Source,
    /// The client subscribed on it.
    subscribed: AtomicBool,
    /// The relay swallowed some of what the node sent on it (silenced).
    swallowed: AtomicBool,
}

impl Rules {
    /// The state of the direction `from -> to`; a client's own rule goes before the
    /// rule for every client.
    fn state(&self, from: Peer, to: Peer) -> LinkState {
        let links = self.links.lock().unwrap();
        let exact = links.get(&(from, to)).copied();
        let general = |p: Peer| match p {
            Peer::Client(_) => Peer::Clients,
            other => other,
        };
        exact
            .or_else(|| links.get(&(general(from), general(to))).copied())
            .unwrap_or(LinkState::Open)
    }

    fn set(&self, from: Peer, to: Peer, state: LinkState) {
        {
            let mut links = self.links.lock().unwrap();
            if state == LinkState::Open {
                links.remove(&(from, to));
            } else {
                links.insert((from, to), state);
            }
        }
        self.changed.send_modify(|generation| *generation += 1);
    }

    /// Whether `client`'s subscribed connections are silenced.
    fn silences(&self, client: Peer) -> bool {
        let silenced = self.silenced.lock().unwrap();
        matches!(client, Peer::Client(_) | Peer::Clients)
            && (silenced.contains(&client) || silenced.contains(&Peer::Clients))
    }

    fn dropped(&self, a: Peer, b: Peer) -> bool {
        self.state(a, b) == LinkState::Drop || self.state(b, a) == LinkState::Drop
    }

    fn count(map: &Mutex<HashMap<(Peer, Peer), u64>>, key: (Peer, Peer), delta: i64) {
        let mut map = map.lock().unwrap();
        let entry = map.entry(key).or_insert(0);
        *entry = entry.saturating_add_signed(delta);
    }
}

/// One private cluster (3 masters, 3 replicas) with every link behind a relay.
pub struct Network {
    /// The servers; their real ports stay reachable for the harness.
    pub redis: LocalRedis,
    rules: Arc<Rules>,
    /// Per node: (client relay port, bus relay port).
    relays: Vec<(u16, u16)>,
    runtime: Option<tokio::runtime::Runtime>,
    /// Nodes started again after a kill ([`Network::kill_and_restart`]): ours to
    /// stop, since the launcher knows only the processes it started.
    restarted: Mutex<HashMap<usize, std::process::Child>>,
}

impl Network {
    /// Starts a cluster with `node_timeout_ms` and puts every link behind a relay;
    /// returns once clients, replication and the cluster bus all run through them.
    pub fn start(node_timeout_ms: u64) -> Network {
        let redis = LocalRedis::cluster_with_node_timeout(node_timeout_ms);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("network-relay")
            .enable_all()
            .build()
            .expect("the relays' runtime");
        let rules = Arc::new(Rules {
            links: Mutex::new(HashMap::new()),
            clients: Mutex::new(Vec::new()),
            changed: watch::channel(0).0,
            live: Mutex::new(HashMap::new()),
            silenced: Mutex::new(HashSet::new()),
            swallowed: AtomicU64::new(0),
            connections: Mutex::new(Vec::new()),
        });
        let relays = (0..redis.nodes.len())
            .map(|i| {
                let node = &redis.nodes[i];
                (
                    listen(&runtime, &rules, i, node.port),
                    listen(&runtime, &rules, i, node.port + 10_000),
                )
            })
            .collect();
        let network = Network {
            redis,
            rules,
            relays,
            runtime: Some(runtime),
            restarted: Mutex::new(HashMap::new()),
        };
        network.route_through_relays();
        network
    }

    /// The nodes, in the launcher's order (a [`Peer::Node`] is an index into this).
    pub fn nodes(&self) -> &[Node] {
        &self.redis.nodes
    }

    /// The URLs clients use: the client relays'.
    pub fn urls(&self) -> Vec<String> {
        self.relays
            .iter()
            .map(|(port, _)| format!("redis://127.0.0.1:{port}"))
            .collect()
    }

    /// Lets the relays recognise `pid`'s connections as [`Peer::Client`]`(pid)`.
    pub fn add_client(&self, pid: u32) {
        self.rules.clients.lock().unwrap().push(pid);
    }

    /// Forgets `pid` (its process has exited): fewer processes to look through.
    pub fn remove_client(&self, pid: u32) {
        self.rules.clients.lock().unwrap().retain(|&p| p != pid);
    }

    /// Sets the direction `from -> to`.
    pub fn set(&self, from: Peer, to: Peer, state: LinkState) {
        self.rules.set(from, to, state);
    }

    /// Cuts `a` and `b` apart both ways: connections reset, new ones refused.
    pub fn cut(&self, a: Peer, b: Peer) {
        self.set(a, b, LinkState::Drop);
        self.set(b, a, LinkState::Drop);
    }

    /// Holds the bytes from `from` to `to` (one way) until healed.
    pub fn hold(&self, from: Peer, to: Peer) {
        self.set(from, to, LinkState::Hold);
    }

    /// Delays the bytes from `from` to `to` by `delay`.
    pub fn delay(&self, from: Peer, to: Peer, delay: Duration) {
        self.set(from, to, LinkState::Delay(delay));
    }

    /// Cuts `node` off from every other node (replication and the bus), both ways;
    /// clients still reach it: a split brain when `node` is a master.
    pub fn cut_from_nodes(&self, node: usize) {
        for other in (0..self.nodes().len()).filter(|&o| o != node) {
            self.cut(Peer::Node(node), Peer::Node(other));
        }
    }

    /// Cuts `node` off from everyone: every client, then the other nodes (in that
    /// order, so no client hears of a write the replicas could not get).
    pub fn isolate(&self, node: usize) {
        self.cut(Peer::Node(node), Peer::Clients);
        self.cut_from_nodes(node);
    }

    /// Silences the subscribed connections of `client` (a [`Peer::Client`], or
    /// [`Peer::Clients`]): everything the nodes send on them is swallowed, with no
    /// reset, until [`Network::heal`]; what the client sends still arrives, and its
    /// other connections are untouched.
    pub fn silence_subscriptions(&self, client: Peer) {
        self.rules.silenced.lock().unwrap().insert(client);
        self.rules
            .changed
            .send_modify(|generation| *generation += 1);
    }

    /// How many reads of the nodes' streams were swallowed on silenced connections
    /// so far (a message or a reply each, or a few together).
    pub fn swallowed(&self) -> u64 {
        self.rules.swallowed.load(Ordering::Relaxed)
    }

    /// How many of `client`'s live connections have subscribed (a
    /// [`Peer::Client`], or [`Peer::Clients`] for every client's).
    pub fn subscribed(&self, client: Peer) -> usize {
        let mut connections = self.rules.connections.lock().unwrap();
        connections.retain(|c| c.strong_count() > 0);
        connections
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|c| {
                c.subscribed.load(Ordering::Relaxed)
                    && (client == Peer::Clients || c.source.peer() == client)
            })
            .count()
    }

    /// Lifts every rule: every link is open again, and silenced connections that lost
    /// something are reset.
    pub fn heal(&self) {
        self.rules.links.lock().unwrap().clear();
        self.rules.silenced.lock().unwrap().clear();
        self.rules
            .changed
            .send_modify(|generation| *generation += 1);
    }

    /// The index of `node` in [`Network::nodes`].
    pub fn index_of(&self, node: &Node) -> usize {
        self.nodes()
            .iter()
            .position(|n| n.port == node.port)
            .unwrap_or_else(|| panic!("{} is not ours", node.url))
    }

    /// The node behind the relay on `port` (a client or bus relay).
    fn behind(&self, port: u16) -> Option<usize> {
        self.relays
            .iter()
            .position(|&(client, bus)| client == port || bus == port)
    }

    /// `CLUSTER NODES` as `observer` sees it, each line's port mapped to our node
    /// index (lines naming no relay are left out).
    pub fn view_from(&self, observer: usize) -> Option<Vec<(usize, super::ClusterNodeInfo)>> {
        let port = self.nodes()[observer].port;
        let text = raw_command(port, &["CLUSTER", "NODES"], Duration::from_secs(2)).ok()?;
        Some(
            parse_cluster_nodes(&value_to_string(text))
                .into_iter()
                .filter_map(|info| Some((self.behind(info.port)?, info)))
                .collect(),
        )
    }

    /// The node that owns `key`'s slot as `observer` sees it.
    pub fn owner_from(&self, observer: usize, key: &str) -> Option<usize> {
        let port = self.nodes()[observer].port;
        let slot = match raw_command(port, &["CLUSTER", "KEYSLOT", key], Duration::from_secs(2)) {
            Ok(Value::Int(slot)) => slot as u16,
            _ => return None,
        };
        self.view_from(observer)?
            .into_iter()
            .find(|(_, info)| info.is_master() && info.owns_slot(slot))
            .map(|(index, _)| index)
    }

    /// The master that owns `key`'s slot, as every node but `except` agrees (None
    /// while they disagree or one does not answer).
    pub fn owner_agreed(&self, key: &str, except: Option<usize>) -> Option<usize> {
        let mut agreed = None;
        for observer in (0..self.nodes().len()).filter(|&o| Some(o) != except) {
            let owner = self.owner_from(observer, key)?;
            if agreed.is_some_and(|a| a != owner) {
                return None;
            }
            agreed = Some(owner);
        }
        agreed
    }

    /// The replica of master `master` as `master` itself lists it (the first, if
    /// several).
    pub fn replica_of(&self, master: usize) -> Option<usize> {
        let view = self.view_from(master)?;
        let id = &view
            .iter()
            .find(|(_, info)| info.flags.iter().any(|f| f == "myself"))?
            .1
            .id;
        view.iter()
            .find(|(_, info)| info.master_id.as_ref() == Some(id))
            .map(|(index, _)| *index)
    }

    /// Waits until every node says `cluster_state:ok`, every node agrees on who
    /// owns `key`, that master has a replica whose link is up, and every bus link
    /// is connected; panics after `limit`. Returns the owner.
    pub fn wait_settled(&self, key: &str, limit: Duration) -> usize {
        let started = Instant::now();
        loop {
            let problem = self.settle_problem(key);
            match problem {
                Ok(owner) => return owner,
                Err(problem) => assert!(
                    started.elapsed() < limit,
                    "the cluster did not settle within {limit:?}: {problem}"
                ),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn settle_problem(&self, key: &str) -> Result<usize, String> {
        for (i, node) in self.nodes().iter().enumerate() {
            let info = raw_command(node.port, &["CLUSTER", "INFO"], Duration::from_secs(2))
                .map_err(|e| format!("node {i}: {e}"))?;
            if !value_to_string(info).contains("cluster_state:ok") {
                return Err(format!("node {i} is not ok"));
            }
            let view = self.view_from(i).ok_or(format!("node {i}: no view"))?;
            if view.len() != self.nodes().len() {
                return Err(format!("node {i} lists {} relayed nodes", view.len()));
            }
            if let Some((other, _)) = view.iter().find(|(_, info)| {
                !info.connected && !info.flags.iter().any(|f| f == "myself") || info.is_failing()
            }) {
                return Err(format!("node {i} sees node {other} down"));
            }
        }
        let owner = self
            .owner_agreed(key, None)
            .ok_or("the nodes disagree on the owner")?;
        let replica = self
            .replica_of(owner)
            .ok_or(format!("master {owner} has no replica"))?;
        let replication = value_to_string(
            raw_command(
                self.nodes()[replica].port,
                &["INFO", "replication"],
                Duration::from_secs(2),
            )
            .map_err(|e| format!("replica {replica}: {e}"))?,
        );
        let master_port = self.relays[owner].0.to_string();
        if !replication.contains("master_link_status:up")
            || !replication.contains(&format!("master_port:{master_port}"))
        {
            return Err(format!(
                "replica {replica} is not linked to master {owner} through its relay"
            ));
        }
        Ok(owner)
    }

    /// Makes every node announce its relays and dial out from its own address, then
    /// waits until every replica replicates through its master's relay, every node
    /// has bus links through the relays to every other node, and no connection
    /// reaches a node's real ports from a node's address (nothing bypasses a relay).
    fn route_through_relays(&self) {
        for i in 0..self.nodes().len() {
            self.announce_relays(i);
        }
        self.wait_routed();
    }

    /// Makes node `i` announce its relays and dial out from its own address.
    fn announce_relays(&self, i: usize) {
        let (client, bus) = self.relays[i];
        let source = node_address(i).to_string();
        for (name, value) in [
            ("cluster-announce-ip", "127.0.0.1".to_owned()),
            ("bind-source-addr", source),
            ("cluster-announce-bus-port", bus.to_string()),
            ("cluster-announce-port", client.to_string()),
        ] {
            self.redis
                .raw(&self.nodes()[i], &["CONFIG", "SET", name, &value]);
        }
    }

    /// Waits until every link runs through the relays.
    fn wait_routed(&self) {
        let started = Instant::now();
        loop {
            let Some(problem) = self.routing_problem() else {
                return;
            };
            assert!(
                started.elapsed() < SETUP_LIMIT,
                "the links did not move onto the relays within {SETUP_LIMIT:?}: {problem}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn routing_problem(&self) -> Option<String> {
        let n = self.nodes().len();
        let live = self.rules.live.lock().unwrap().clone();
        for from in 0..n {
            for to in (0..n).filter(|&t| t != from) {
                // Each node keeps an outgoing bus link to every other node.
                if live
                    .get(&(Peer::Node(from), Peer::Node(to)))
                    .copied()
                    .unwrap_or(0)
                    == 0
                {
                    return Some(format!("no relayed link from node {from} to node {to}"));
                }
            }
        }
        for (i, node) in self.nodes().iter().enumerate() {
            let Ok(replication) =
                raw_command(node.port, &["INFO", "replication"], Duration::from_secs(2))
            else {
                return Some(format!("node {i} does not answer"));
            };
            let replication = value_to_string(replication);
            if replication.contains("role:slave") {
                let relayed = self
                    .relays
                    .iter()
                    .any(|(port, _)| replication.contains(&format!("master_port:{port}\r")));
                if !relayed || !replication.contains("master_link_status:up") {
                    return Some(format!("replica {i} does not replicate through a relay"));
                }
            }
        }
        let direct = direct_connections(self.nodes());
        (!direct.is_empty()).then(|| format!("connections bypass the relays: {direct:?}"))
    }
}

impl Network {
    /// The process id of node `i` now (a restarted node has a new one).
    pub fn pid(&self, i: usize) -> u32 {
        self.restarted
            .lock()
            .unwrap()
            .get(&i)
            .map_or(self.nodes()[i].pid, std::process::Child::id)
    }

    /// Kills node `i` with SIGKILL and returns the command line that starts it again
    /// on the same port and files ([`Network::restart`]): the launcher's settings,
    /// with the node's own read from it first (a server rewrites its process title,
    /// so its `/proc` command line is gone).
    pub fn kill(&self, i: usize) -> Vec<String> {
        let node = &self.nodes()[i];
        let config = |name: &str| {
            let Value::Array(pair) = self.redis.raw(node, &["CONFIG", "GET", name]) else {
                panic!("CONFIG GET {name}: not a list");
            };
            value_to_string(pair.get(1).cloned().expect("a value"))
        };
        let mut args: Vec<String> = vec![
            super::server_binary()
                .expect("the server binary")
                .to_string_lossy()
                .into_owned(),
        ];
        for name in ["port", "bind", "dir", "logfile", "cluster-node-timeout"] {
            args.push(format!("--{name}"));
            args.push(config(name));
        }
        // Announcing the relays from the start: a node that first announced its
        // real ports would have the others dial them directly.
        let (client, bus) = self.relays[i];
        for (name, value) in [
            ("cluster-announce-ip", "127.0.0.1".to_owned()),
            ("bind-source-addr", node_address(i).to_string()),
            ("cluster-announce-bus-port", bus.to_string()),
            ("cluster-announce-port", client.to_string()),
        ] {
            args.push(format!("--{name}"));
            args.push(value);
        }
        for (name, value) in [
            ("protected-mode", "no"),
            ("daemonize", "no"),
            ("save", ""),
            ("appendonly", "no"),
            ("cluster-enabled", "yes"),
            ("cluster-config-file", "nodes.conf"),
            ("cluster-replica-validity-factor", "0"),
            ("repl-diskless-sync-delay", "0"),
        ] {
            args.push(format!("--{name}"));
            args.push(value.to_owned());
        }
        super::kill9(self.pid(i));
        if let Some(mut child) = self.restarted.lock().unwrap().remove(&i) {
            let _ = child.wait();
        }
        args
    }

    /// Starts node `i` again with the command line [`Network::kill`] returned (same
    /// port, directory and cluster config file), waits until it answers, and routes
    /// its links through the relays again.
    pub fn restart(&self, i: usize, args: &[String]) {
        let dir = args
            .windows(2)
            .find(|w| w[0] == "--dir")
            .map(|w| w[1].clone())
            .expect("the node's --dir");
        let child = std::process::Command::new(&args[0])
            .args(&args[1..])
            .current_dir(dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the node again");
        self.restarted.lock().unwrap().insert(i, child);
        let port = self.nodes()[i].port;
        let started = Instant::now();
        while raw_command(port, &["PING"], Duration::from_secs(1)).is_err() {
            assert!(
                started.elapsed() < SETUP_LIMIT,
                "node {i} did not answer within {SETUP_LIMIT:?} of its restart"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.announce_relays(i);
        self.wait_routed();
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for (_, mut child) in self.restarted.lock().unwrap().drain() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(2));
        }
    }
}

/// Node `i`'s own source address.
fn node_address(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, FIRST_NODE_ADDRESS + i as u8)
}

/// Starts a relay to `127.0.0.1:upstream` (a port of node `node`); returns its port.
fn listen(
    runtime: &tokio::runtime::Runtime,
    rules: &Arc<Rules>,
    node: usize,
    upstream: u16,
) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a relay port");
    listener
        .set_nonblocking(true)
        .expect("a non-blocking listener");
    let port = listener.local_addr().expect("the relay's address").port();
    let listener = {
        let _entered = runtime.enter();
        TcpListener::from_std(listener).expect("a tokio listener")
    };
    let rules = rules.clone();
    runtime.spawn(async move {
        loop {
            let Ok((conn, peer)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let from = Source::new(&rules, peer, port);
            tokio::spawn(relay(conn, from, Peer::Node(node), upstream, rules.clone()));
        }
    });
    port
}

/// Who opened a relayed connection: a node, known at once by its address, or a
/// client, [`Peer::Clients`] until the owning process is found.
#[derive(Clone)]
struct Source(Arc<Mutex<Peer>>);

impl Source {
    /// The source of a connection from `peer` to the relay on `relay_port`. A
    /// client's process is looked up in `/proc` on the blocking pool (tens of
    /// milliseconds on a busy machine: never on the relays' threads, where a burst of
    /// new connections would stall every relay); the rules are looked at again once
    /// it is known.
    fn new(rules: &Arc<Rules>, peer: SocketAddr, relay_port: u16) -> Source {
        if let IpAddr::V4(ip) = peer.ip()
            && ip != Ipv4Addr::LOCALHOST
            && ip.octets()[..3] == [127, 0, 0]
            && ip.octets()[3] >= FIRST_NODE_ADDRESS
        {
            let node = usize::from(ip.octets()[3] - FIRST_NODE_ADDRESS);
            return Source(Arc::new(Mutex::new(Peer::Node(node))));
        }
        let source = Source(Arc::new(Mutex::new(Peer::Clients)));
        let clients = rules.clients.lock().unwrap().clone();
        if !clients.is_empty() {
            let (found, rules) = (source.clone(), rules.clone());
            tokio::task::spawn_blocking(move || {
                let owner = socket_inode(peer.port(), relay_port)
                    .and_then(|inode| clients.into_iter().find(|&pid| owns_socket(pid, inode)));
                if let Some(pid) = owner {
                    *found.0.lock().unwrap() = Peer::Client(pid);
                    rules.changed.send_modify(|generation| *generation += 1);
                }
            });
        }
        source
    }

    fn peer(&self) -> Peer {
        *self.0.lock().unwrap()
    }
}

/// The inode of the loopback socket `127.0.0.1:local -> 127.0.0.1:remote`.
fn socket_inode(local: u16, remote: u16) -> Option<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let want_local = format!("0100007F:{local:04X}");
    let want_remote = format!("0100007F:{remote:04X}");
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(1) == Some(&want_local.as_str())
            && fields.get(2) == Some(&want_remote.as_str()))
        .then(|| fields.get(9)?.parse().ok())
        .flatten()
    })
}

/// Whether process `pid` has the socket `inode` open.
fn owns_socket(pid: u32, inode: u64) -> bool {
    let wanted = format!("socket:[{inode}]");
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| target.to_string_lossy() == wanted)
    })
}

/// Established connections to a node's real client or bus port from a node's own
/// address: links that do not run through a relay.
fn direct_connections(nodes: &[Node]) -> Vec<String> {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return Vec::new();
    };
    let ports: Vec<u16> = nodes
        .iter()
        .flat_map(|n| [n.port, n.port + 10_000])
        .collect();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (local, remote, state) = (fields.get(1)?, fields.get(2)?, fields.get(3)?);
            let local_port = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
            let remote_ip = remote.split(':').next()?;
            // 01: established; the address is little-endian hex, 127.0.0.1 = 0100007F.
            (*state == "01" && ports.contains(&local_port) && remote_ip != "0100007F")
                .then(|| format!("{remote} -> port {local_port}"))
        })
        .collect()
}

/// Relays one connection from `from` to `to` (at `127.0.0.1:upstream`) under the
/// rules, until either side closes or the link is dropped (then both are reset).
async fn relay(mut conn: TcpStream, from: Source, to: Peer, upstream: u16, rules: Arc<Rules>) {
    if rules.dropped(from.peer(), to) {
        let _ = conn.set_zero_linger();
        return;
    }
    let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
        return;
    };
    let _ = conn.set_nodelay(true);
    let _ = server.set_nodelay(true);
    // Counted under the source known at once (a client's pid comes later).
    let counted = (from.peer(), to);
    Rules::count(&rules.live, counted, 1);
    let connection = Arc::new(Connection {
        source: from.clone(),
        subscribed: AtomicBool::new(false),
        swallowed: AtomicBool::new(false),
    });
    if !matches!(counted.0, Peer::Node(_)) {
        let mut connections = rules.connections.lock().unwrap();
        connections.retain(|c| c.strong_count() > 0);
        connections.push(Arc::downgrade(&connection));
    }
    let reset = {
        let (mut conn_read, mut conn_write) = conn.split();
        let (mut server_read, mut server_write) = server.split();
        let up = pump(
            &mut conn_read,
            &mut server_write,
            Direction::Up,
            &connection,
            to,
            &rules,
        );
        let down = pump(
            &mut server_read,
            &mut conn_write,
            Direction::Down,
            &connection,
            to,
            &rules,
        );
        let mut changed = rules.changed.subscribe();
        // Reset when the link is dropped, or when a silence that swallowed some of
        // the stream ends (the client must not read on from a gap).
        let dropped = changed.wait_for(|_| {
            rules.dropped(from.peer(), to)
                || (connection.swallowed.load(Ordering::Relaxed) && !rules.silences(from.peer()))
        });
        tokio::select! {
            () = up => false,
            () = down => false,
            _ = dropped => true,
        }
    };
    Rules::count(&rules.live, counted, -1);
    if reset {
        let _ = conn.set_zero_linger();
        let _ = server.set_zero_linger();
    }
}

/// Which way bytes flow on a relayed connection: from its source to the node, or
/// back.
#[derive(Clone, Copy)]
enum Direction {
    Up,
    Down,
}

/// Forwards bytes one way (`direction`) between `connection`'s source and `node` as
/// the rules say, until either side closes. Up, it notes whether the client
/// subscribed; down, it swallows what a silenced subscribed connection would get.
async fn pump<R, W>(
    read: &mut R,
    write: &mut W,
    direction: Direction,
    connection: &Connection,
    node: Peer,
    rules: &Rules,
) where
    R: AsyncReadExt + Unpin,
    W: AsyncWriteExt + Unpin,
{
    let source = &connection.source;
    let mut buf = vec![0u8; 64 * 1024];
    // The end of the client's stream so far (a command's name split across reads).
    let mut window: Vec<u8> = Vec::new();
    loop {
        let n = match read.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        match direction {
            Direction::Up if !connection.subscribed.load(Ordering::Relaxed) => {
                window.extend_from_slice(&buf[..n]);
                if super::proxy::subscribes(&window, n) {
                    // Known before the request goes on: its reply is silenced too.
                    connection.subscribed.store(true, Ordering::Relaxed);
                }
                window.drain(..window.len().saturating_sub(64));
            }
            Direction::Down
                if connection.subscribed.load(Ordering::Relaxed)
                    && rules.silences(source.peer()) =>
            {
                connection.swallowed.store(true, Ordering::Relaxed);
                rules.swallowed.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            _ => {}
        }
        let mut changed = rules.changed.subscribe();
        loop {
            let (from, to) = match direction {
                Direction::Up => (source.peer(), node),
                Direction::Down => (node, source.peer()),
            };
            match rules.state(from, to) {
                LinkState::Open => break,
                LinkState::Delay(delay) => {
                    tokio::time::sleep(delay).await;
                    break;
                }
                // Held until the rule changes; a drop ends the connection elsewhere.
                LinkState::Hold | LinkState::Drop => {
                    changed.borrow_and_update();
                    if changed.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
        if write.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// One command on the node at `127.0.0.1:port`, directly (not through a relay).
pub fn raw_port_command(port: u16, args: &[&str]) -> redis::RedisResult<Value> {
    raw_command(port, args, Duration::from_secs(5))
}

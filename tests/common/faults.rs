//! Fault injection: failover, slot migration, script and function flushes and
//! connection kills
//! (tests/faults_*.rs).

use std::time::{Duration, Instant};

use redis::Value;

use super::inspect::{parse_cluster_nodes, raw_command, value_to_string};
use super::{LocalRedis, Node};

impl LocalRedis {
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

    /// `SCRIPT FLUSH` on every running node.
    pub fn script_flush_all(&self) {
        for node in self.live_nodes() {
            self.raw(node, &["SCRIPT", "FLUSH"]);
        }
    }

    /// `FUNCTION FLUSH` on every master: every function library is gone, on the
    /// replicas too (a replica refuses the command and gets it by replication).
    pub fn function_flush_all(&self) {
        for master in self.masters() {
            self.raw(master, &["FUNCTION", "FLUSH"]);
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

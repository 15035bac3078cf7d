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
//!
//! One file per concern, all re-exported here but `scale` (used as `common::scale`):
//!
//! * `launcher.rs`: [`LocalRedis`] and [`Node`], starting and stopping servers;
//! * `inspect.rs`: commands, statistics and the cluster's view of itself;
//! * `faults.rs`: failover, slot migration, script flushes, connection kills;
//! * `process.rs`: pausing, resuming and killing processes by pid;
//! * `network.rs`: [`Network`], a cluster with every link (client to node, node to
//!   node on the data port and the bus) behind relays that cut, hold, delay and heal
//!   links one way or both, and silence a client's subscribed connections;
//!   `workload.rs`: the partition tests' clients, each in a process of its own (some
//!   with several tasks sharing reads); `history.rs`: the checker of what they
//!   recorded;
//! * `proxy.rs`: [`Proxy`], a loopback relay that loses a chosen reply and resets
//!   the connection (or holds a request to deliver it late, or silences the
//!   connections a client subscribed on), and [`Proxied`] servers (a relay in front
//!   of every node);
//! * `monitor.rs`: [`Monitor`], the commands a node runs, in order (`MONITOR`);
//! * `panics.rs`: counting panics in background tasks;
//! * `locks.rs`: clients, unique names and an exclusion checker for lock tests;
//! * `backend.rs`: [`Backend`] and `on_both_backends!`: one test body run against
//!   the cluster and against an in-memory store;
//! * `original.rs`: clients of the original design (`tests/original/`);
//! * `scripts.rs`: the scripts' sources, as the crate assembles them;
//! * `tool.rs`: running the `redis-rwlock` binary (feature `cli`, unix), also as a
//!   waiter in a process of its own ([`Exec`]);
//! * `scale.rs`: one lock at scale, phase by phase, with each script's server time
//!   per call (also run by the benchmark's `at_scale` scenario).

#![allow(dead_code)]
// Test support code: failing loudly is the point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod backend;
mod faults;
mod history;
mod inspect;
mod launcher;
mod locks;
mod logs;
mod monitor;
mod network;
mod original;
mod panics;
mod process;
mod proxy;
pub mod scale;
mod scripts;
#[cfg(all(unix, feature = "cli"))]
mod tool;
mod workload;

// Not every test binary uses every helper.
#[allow(unused_imports)]
pub use backend::*;
#[allow(unused_imports)]
pub use faults::*;
#[allow(unused_imports)]
pub use history::*;
#[allow(unused_imports)]
pub use inspect::*;
#[allow(unused_imports)]
pub use launcher::*;
#[allow(unused_imports)]
pub use locks::*;
#[allow(unused_imports)]
pub use logs::*;
#[allow(unused_imports)]
pub use monitor::*;
#[allow(unused_imports)]
pub use network::*;
#[allow(unused_imports)]
pub use original::*;
#[allow(unused_imports)]
pub use panics::*;
#[allow(unused_imports)]
pub use process::*;
#[allow(unused_imports)]
pub use proxy::*;
#[allow(unused_imports)]
pub use scripts::*;
#[cfg(all(unix, feature = "cli"))]
#[allow(unused_imports)]
pub use tool::*;
#[allow(unused_imports)]
pub use workload::*;

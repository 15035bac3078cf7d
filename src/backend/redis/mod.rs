//! The Redis backend: what reaches Redis (or Valkey), and how.
//!
//! The lock's requests go out as the scripts in `lua/`, called through the
//! function library or as scripts (`scripts/`); wake-ups come back on one
//! subscription connection per client (`wakeups.rs`). Beneath them: the connections
//! and their limits (`connection.rs`), the server check at connect (`server.rs`),
//! the function library's loading (`library.rs`) and the cluster's key slots
//! (`slot.rs`). What the requests mean is the protocol's (`protocol/`). Outside this
//! folder only the fleet view (`fleet.rs`, `SCAN`) and the shared reads' looks and
//! marks (`lock/shared_reads/`, `HMGET`, `HSET`, `HDEL`) send commands of their own.

pub(crate) mod connection;
pub(crate) mod library;
pub(crate) mod scripts;
pub(crate) mod server;
pub(crate) mod slot;

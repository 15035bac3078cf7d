//! The Redis backend: what reaches Redis (or Valkey), and how; one implementation
//! of the backend contract (`backend/mod.rs`).
//!
//! The lock's requests go out as the scripts in `lua/`, called through the
//! function library or as scripts (`scripts/`, which implements the contract on
//! the lock connection), the shared reads' look and mark as `HMGET`, `HSET` and
//! `HDEL`, the listing as `SCAN` and `DBSIZE`; pushes come back on one
//! subscription connection per client, read into the contract's `Push`
//! (`connection.rs`). Beneath them: the connections and their limits
//! (`connection.rs`), the server check at connect (`server.rs`), the function
//! library's loading (`library.rs`) and the cluster's key slots (`slot.rs`). What
//! the requests mean is the protocol's (`protocol/`). Nothing outside this folder
//! sends a Redis command; nothing here names the lock side or the in-memory
//! backend.

pub(crate) mod connection;
pub(crate) mod library;
pub(crate) mod scripts;
pub(crate) mod server;
pub(crate) mod slot;

/// The name of the Redis function library this version of the crate loads,
/// `rwlock_<hash>`, where `<hash>` (12 hex digits) is a hash of the library's text.
///
/// Each crate version whose scripts differ loads a library of its own name beside
/// the others (so versions mix during a rolling upgrade), and nothing ever removes
/// one: a server keeps the libraries of every version that ran against it until
/// they are deleted (`FUNCTION DELETE`) or flushed. Every loaded library makes each
/// function call a little slower, so operators remove those of versions no longer
/// running; this name tells the running version's own apart (the `redis-rwlock
/// libraries` command uses it).
///
/// # Examples
///
/// ```
/// let name = redis_rwlock::library_name();
/// assert!(name.starts_with("rwlock_"));
/// ```
pub fn library_name() -> &'static str {
    scripts::LIBRARY.name()
}

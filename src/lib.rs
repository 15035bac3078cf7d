//! An async read-write lock for Redis Cluster and single Redis servers, for Rust
//! services.
//!
//! Many instances of a service read a shared cache under a read lock; one of them
//! refreshes it under the write lock. The lock is safe (never a writer beside anyone
//! while both leases are valid), fast (one round trip per uncontended acquire), fair
//! (writers queue, so a refresher is never starved by readers, and readers that wait
//! behind a writer enter together when it leaves) and honest about what Redis can and
//! cannot promise: holds are leases, renewed in the background, and a guard says when
//! its lease is lost.
//!
//! ```rust,no_run
//! use std::time::Duration;
//! use redis_rwlock::{Error, LockClient, LockOptions};
//!
//! # async fn run() -> Result<(), Error> {
//! let client = LockClient::cluster(["redis://127.0.0.1:7000"]).await?;
//! let lock = client.rwlock_with(
//!     "inventory",
//!     LockOptions::default().wait_timeout(Duration::from_secs(5)),
//! );
//!
//! // Many readers at once, across every process that names the lock.
//! let reader = lock.read().await?;
//! // ... read the cache ...
//! reader.release().await?;
//!
//! // One writer alone; its fencing token orders writes at the resource.
//! let writer = lock.write().await?;
//! let fence = writer.fencing_token();
//! // ... rebuild the cache, passing `fence` along ...
//! writer.release().await?;
//!
//! // On the way out (a redeploy): free every lock this process holds or waits for.
//! client.shutdown(Duration::from_secs(5)).await?;
//! # Ok(()) }
//! ```
//!
//! [`LockClient::standalone`] does the same on one server (Redis 7.0 or newer, or
//! Valkey). Start with [`RwLock`]: its page states the priority policy, upgradable
//! reads and the drop contract; each guard ([`RwLockReadGuard`],
//! [`RwLockWriteGuard`], [`RwLockUpgradableReadGuard`]) renews its lease while it
//! lives, reports a lost one ([`RwLockWriteGuard::lost`]) and is ended by
//! `release()`, which returns errors. Every failure is one [`Error`]; its `Redis`
//! variant keeps the driver's error in [`source()`](std::error::Error::source), so
//! print the whole chain ([`ErrorChain`]), not only `{err}`.
//!
//! # Guides
//!
//! The [README](https://docs.rs/crate/redis-rwlock/latest/source/README.md) (also shown on the crate's
//! [docs.rs page](https://docs.rs/crate/redis-rwlock/latest)) is the user's guide,
//! one section per topic: *Servers* (what the crate needs of Redis or Valkey), *How it
//! works*, *Reads that cost nothing* (the tasks of one client share its read hold),
//! *Guarantees and non-guarantees*, *Leases and failover* (choosing leases for
//! your failover time), *Fenced writes*, *Refresh once* (upgradable reads), *Testing
//! your code without Redis* (the in-memory backend), *Coming from other Redis locks*, *Options*, *Migrating from the original design*,
//! *Errors*, *Command line* (the `redis-rwlock` tool), *Bad input and failures*,
//! *Fleet view* and *Observability* (spans and metrics).
//!
//! Beside it: [`docs/PROTOCOL.md`](https://docs.rs/crate/redis-rwlock/latest/source/docs/PROTOCOL.md) (the scripts' protocol and
//! how it is model-checked), [`docs/DECISIONS.md`](https://docs.rs/crate/redis-rwlock/latest/source/docs/DECISIONS.md) (why it is
//! built this way), [`docs/ORIGINAL_DESIGN.md`](https://docs.rs/crate/redis-rwlock/latest/source/docs/ORIGINAL_DESIGN.md) (the
//! design it replaces and interoperates with), [`BENCHMARKS.md`](https://docs.rs/crate/redis-rwlock/latest/source/BENCHMARKS.md)
//! (speed, fairness and cost against other locks), the scripts in
//! [`lua/`](https://docs.rs/crate/redis-rwlock/latest/source/lua/) and the examples in [`examples/`](https://docs.rs/crate/redis-rwlock/latest/source/examples/).
//!
//! # Feature flags
//!
//! All off by default, and additive: none changes what the lock does.
//!
//! - `metrics`: counters, gauges and histograms through the
//!   [`metrics`](https://docs.rs/metrics) facade, for the recorder your application
//!   installs; [`describe_metrics`] gives their units and help texts (README,
//!   *Observability*). Without it nothing is recorded and the calls compile to
//!   nothing.
//! - `tls-rustls`: `rediss://` URLs through rustls with the ring crypto provider and
//!   the system's root certificates; `tls-rustls-webpki-roots`: the same with the
//!   Mozilla root certificates compiled in.
//! - `cli`: the `redis-rwlock` command-line tool (`cargo install --path . --features
//!   cli` in a clone of the repository): `status`, `exec` (like `flock(1)`), `list`, `watch`,
//!   `release --force`, `libraries`.
#![cfg_attr(docsrs, feature(doc_cfg))]

// The README's examples compile and run as doc tests, though it is not the crate page.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod client;
mod error;
mod fleet;
mod guard;
mod lock;
mod memory;
mod metrics;
mod protocol;
#[doc(hidden)]
pub use protocol::engine;
mod redis_backend;

#[cfg(feature = "metrics")]
pub use crate::metrics::describe_metrics;
pub use client::LockClient;
pub use client::builder::LockClientBuilder;
pub use error::{Error, ErrorChain, Result};
pub use fleet::{ListCursor, ListOptions, LockPage, LockSummary};
pub use guard::{FencedWrites, RwLockReadGuard, RwLockUpgradableReadGuard, RwLockWriteGuard};
pub use lock::RwLock;
pub use lock::options::{Fairness, LockOptions};
pub use memory::MemoryStore;
pub use protocol::{Holder, LockMode, LockState};
pub use redis;
pub use redis_backend::connection::cluster_client_builder;
pub use redis_backend::library::library_name;

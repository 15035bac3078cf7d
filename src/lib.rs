#![doc = include_str!("../README.md")]

mod builder;
mod client;
mod connection;
mod error;
mod fenced;
mod fleet;
mod lease;
mod library;
mod live;
mod lock;
mod metrics;
mod options;
mod read_guard;
mod renewals;
mod requests;
mod scripts;
mod server;
mod shared_reads;
mod slot;
mod state;
mod token;
mod upgradable_guard;
mod waiting;
mod wakeups;
mod write_guard;

#[cfg(feature = "metrics")]
pub use crate::metrics::describe_metrics;
pub use builder::LockClientBuilder;
pub use client::LockClient;
pub use connection::cluster_client_builder;
pub use error::{Error, Result};
pub use fenced::FencedWrites;
pub use fleet::{ListCursor, ListOptions, LockPage, LockSummary};
pub use library::library_name;
pub use lock::RwLock;
pub use options::{Fairness, LockOptions};
pub use read_guard::RwLockReadGuard;
pub use redis;
pub use state::{Holder, LockMode, LockState};
pub use upgradable_guard::RwLockUpgradableReadGuard;
pub use write_guard::RwLockWriteGuard;

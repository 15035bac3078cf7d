//! The guards and their leases: what a granted acquire hands the caller.
//!
//! One guard per mode (`read.rs`, `write.rs`, `upgradable.rs`), each over a lease
//! (`lease.rs`: the hold's deadline, lost signal, renewal and release), renewed by
//! the client's renewal queue (`renewals.rs`); a read guard's lease may be a share
//! of the process's read hold (`lock/shared_reads/`). The write guard's fenced
//! writes are built as [`FencedWrites`] (`fenced.rs`).

pub(crate) mod fenced;
pub(crate) mod lease;
pub(crate) mod read;
pub(crate) mod renewals;
pub(crate) mod upgradable;
pub(crate) mod write;

pub use fenced::FencedWrites;
pub use read::RwLockReadGuard;
pub use upgradable::RwLockUpgradableReadGuard;
pub use write::RwLockWriteGuard;

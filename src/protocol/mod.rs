//! The protocol: what a lock asks of the server and what the server answers, as
//! the scripts in `lua/` decide it, whichever backend runs them; the owner tokens
//! (`token.rs`), the lock's state for people and tools (`state.rs`), and the engine
//! (`engine/`): the scripts' decisions, line for line in Rust.
//!
//! These are the words the lock and the guards speak; how a request reaches Redis
//! (script calls, argument order, reply shapes) is the Redis backend's
//! (`backend/redis/`).

#[doc(hidden)]
pub mod engine;
pub(crate) mod state;
pub(crate) mod token;

use std::time::Duration;

pub use state::{Holder, LockMode, LockState};

/// What a waiting writer or upgrade publishes on the lock's channel to call back
/// the readers that hold (lua/acquire_write.lua).
pub(crate) const CALL_BACK: &str = "w";

/// What an operator's forced release publishes on the lock's channel: every hold
/// of the lock ended (lua/force_release.lua), so the processes that listen on it
/// lose their shared and kept read holds at once.
pub(crate) const EVICTED: &str = "x";

/// The answer of an acquire script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// The hold is ours; `fence` is the fencing token (0 for readers).
    Granted { fence: u64 },
    /// Someone else holds or is first in line; their holds end within `holds_for`
    /// unless renewed. `fence` is the lock's last fencing token when refused (0 for
    /// readers): a hand-over message with a larger one was sent after this refusal.
    /// `batch`: the batch of readers a refused reader now waits in, in line; the
    /// message that grants it is that name.
    Refused {
        holds_for: Duration,
        fence: u64,
        batch: Option<String>,
    },
    /// An upgrade found the upgradable hold it was for gone.
    Lost,
}

/// The answer of a lock set's request for the members of one slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SetAcquired {
    /// Every member holds; each one's fencing token, in the request's order (0 for
    /// read members).
    Granted(Vec<u64>),
    /// A member was refused (index from 0); none holds.
    Refused(usize),
}

/// The answer of a renewal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Renewed {
    /// The hold is gone (or an original-design client holds beside it): the lease
    /// is lost.
    Lost,
    /// Renewed.
    Held,
    /// A read hold renewed while a writer or an upgrade waits for the lock (its
    /// line or a pending upgrade exists): the call-back that no lost message can
    /// take away (`lock/shared_reads/`).
    WriterWaits,
}

impl Renewed {
    /// From the script's reply: 0, 1 or 2 (lua/renew.lua).
    pub(crate) fn from_reply(reply: i64) -> Self {
        match reply {
            2 => Renewed::WriterWaits,
            1 => Renewed::Held,
            _ => Renewed::Lost,
        }
    }
}

/// The answer of a downgrade.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Downgraded {
    /// The hold is gone: the lease is lost.
    Lost,
    /// Downgraded. Of a write hold: how long before the script ran the writer
    /// first in line queued (`None`: none waits), so that the reads of the client
    /// that came after it do not pass it (`lock/shared_reads/writes.rs`);
    /// `Duration::MAX` when one may wait whose time is not known.
    Done { writer_queued: Option<Duration> },
}

impl Downgraded {
    /// From the script's reply: `{done, queued}` (lua/downgrade.lua).
    pub(crate) fn from_reply(done: i64, queued: i64) -> Self {
        match done {
            1 => Downgraded::Done {
                writer_queued: match queued {
                    -1 => None,
                    ..-1 => Some(Duration::MAX),
                    ago => Some(Duration::from_millis(ago.unsigned_abs())),
                },
            },
            _ => Downgraded::Lost,
        }
    }
}

/// What an acquisition asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    /// A read hold that does not wait in line behind queued writers, only for a
    /// writer that holds (`RwLock::read_recursive`).
    RecursiveRead,
    /// A read hold that excludes other upgradable ones and may become the write hold.
    UpgradableRead,
    Write,
    /// The write hold, for the token's upgradable read hold.
    Upgrade,
}

impl Access {
    /// The mode of the hold it gets: its lease, its renewals.
    pub(crate) fn mode(self) -> LockMode {
        match self {
            Access::Read | Access::RecursiveRead | Access::UpgradableRead => LockMode::Read,
            Access::Write | Access::Upgrade => LockMode::Write,
        }
    }

    /// What an error says the call waited for: an upgrade waits for the write lock.
    pub(crate) fn error_mode(self) -> crate::Mode {
        match self {
            Access::Read | Access::RecursiveRead => crate::Mode::Read,
            Access::UpgradableRead => crate::Mode::UpgradableRead,
            Access::Write | Access::Upgrade => crate::Mode::Write,
        }
    }

    /// What an error says the acquire was doing.
    pub(crate) fn operation(self) -> crate::Operation {
        match self {
            Access::Upgrade => crate::Operation::Upgrade,
            access => crate::Operation::Acquire(access.error_mode()),
        }
    }
}

/// The reply of `state.lua`: now, fence, writer token ('' for none), writer deadline,
/// original writer's and original reader's deadlines (0: none), readers and queued
/// writers as (token, deadline) pairs, the upgradable reader's token ('' for none)
/// and 1 while it waits to upgrade, and the readers waiting in line as (token, their
/// batch's place deadline) pairs, and the tokens of the `k:` fields (read holds a
/// client keeps idle); all times in ms.
pub(crate) type RawState = (
    i64,
    u64,
    String,
    i64,
    i64,
    i64,
    Vec<(String, i64)>,
    Vec<(String, i64)>,
    String,
    i64,
    Vec<(String, i64)>,
    Vec<String>,
);

/// `WAIT` for this many replicas, at most this long, after a script.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Replicas {
    pub(crate) count: u32,
    pub(crate) timeout: Duration,
}

/// One key write of a fenced batch, as the script takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Write {
    pub(crate) key: String,
    /// `set` or `del`.
    pub(crate) op: &'static str,
    pub(crate) value: Vec<u8>,
    /// Expiry of a `set` (at least a millisecond: checked before sending).
    pub(crate) expiry: Option<Duration>,
}

/// Whole milliseconds, as the scripts count.
pub(crate) fn millis(span: Duration) -> u64 {
    u64::try_from(span.as_millis()).unwrap_or(u64::MAX)
}

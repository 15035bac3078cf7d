//! What a lock asks of its store: the one contract between the lock side
//! (`client/`, `lock/`, `guard/`) and the two backends that keep locks, Redis
//! (`redis/`) and the in-memory store (`memory/`).
//!
//! A lock asks its store for the transitions of the protocol (`protocol/`), each on
//! one lock named by its [`Target`] (its keys and channel), each answered as a typed
//! value:
//!
//! - to take a hold, [`acquire`](Backend::acquire) (a read, a write or an upgrade,
//!   waiting in line or not);
//! - to keep or end it, [`renew`](Backend::renew), [`release`](Backend::release) and
//!   [`downgrade`](Backend::downgrade); to write under it,
//!   [`fenced_write`](Backend::fenced_write);
//! - for operators and tools, [`force_release`](Backend::force_release),
//!   [`state`](Backend::state), and the listing ([`nodes`](Backend::nodes),
//!   [`scan`](Backend::scan));
//! - for the reads a client's tasks share, a look ([`writer_waits`](Backend::writer_waits))
//!   and a mark ([`mark_kept`](Backend::mark_kept));
//! - and, answered without a request, whether two keys may be touched by one
//!   request ([`shares_slot`](Backend::shares_slot)) and whether the store is a
//!   cluster ([`is_cluster`](Backend::is_cluster)).
//!
//! Every request may fail with [`Error`]: a store that cannot be reached in time or
//! refuses the request (`Error::Redis`), a lock's key of another type
//! (`Error::WrongType`), a request the backend cannot serve (`Error::InvalidOptions`).
//! Every request is idempotent per token, so the lock side may send it again.
//!
//! The other way, the store pushes to the client what it published on a lock's
//! channel (wake-ups, writers' call-backs, forced releases) and when it dropped a
//! subscription: a [`Push`] on the client's [`Pushes`]. The client says which
//! channels it listens on through its [`Subscriber`]. What a push means, and who
//! waits for it, is the lock side's (`lock/wakeups.rs`).
//!
//! A client holds one [`Link`] (requests) and one [`Subscriber`], made together by
//! [`Connected`]'s constructors, the only place a backend is chosen. Both are enums
//! over the two backends: a call is one `match` (`dispatch!`), with no boxing on the
//! way. Neither backend names the other; both use this module's types and the
//! protocol's.

pub(crate) mod glob;
pub(crate) mod memory;
pub(crate) mod redis;
mod target;

use std::time::Duration;

use tokio::sync::mpsc;

use self::memory::{MemoryLink, MemoryStore};
use self::redis::connection::{Connection, Connections};
use self::redis::scripts::ScriptConnection;
#[cfg(test)]
pub(crate) use self::target::lock_key;
pub(crate) use self::target::{
    Target, check_key_prefix, check_lock_name, hash_tag, split_lock_key,
};
use crate::protocol::token::Token;
use crate::protocol::{
    Access, Acquired, Downgraded, LockMode, RawState, Renewed, Replicas, SetAcquired, Write,
};
use crate::{Error, Result};
use ::redis::cluster::ClusterClientBuilder;

/// Calls `$call` with `$backend` bound to whichever backend `$self` holds: the one
/// dispatch of [`Link`] and [`Subscriber`].
macro_rules! dispatch {
    ($self:expr, $backend:ident => $call:expr) => {
        match $self {
            Self::Redis($backend) => $call,
            Self::Memory($backend) => $call,
        }
    };
}

/// What a lock asks of its store (see the module's doc): the typed requests of
/// the protocol, each on one lock. Redis (`redis/scripts/`) and the in-memory
/// store (`memory/requests.rs`) implement it; [`Link`] hands each request to the
/// client's one.
pub(crate) trait Backend {
    /// Tries to take the hold `ask` asks for; when refused and `ask` has an
    /// `intent`, keeps its place in line (a writer), waits in line (a reader under
    /// writer preference) or keeps new readers out (an upgrade) for that long. With
    /// replicas to wait for, also how many acknowledged.
    async fn acquire(&self, target: &Target, ask: &Acquire<'_>) -> Result<(Acquired, u32)>;

    /// Takes every member of `set` at once, all or none, none waiting: as
    /// [`acquire`](Self::acquire) takes a plain read or the write hold with no
    /// intent, then, at the first refusal, releases the members taken before it.
    /// The members share one slot and their locks' options.
    async fn acquire_set(&self, set: &SetAsk<'_>) -> Result<SetAcquired>;

    /// Ends whatever `token` has (a hold in either mode, a place in line); true when
    /// a hold was removed.
    async fn release(&self, target: &Target, token: &Token) -> Result<bool>;

    /// Extends `held`'s hold in `mode` to its lease from now; [`Renewed::Lost`] when
    /// the lease is lost.
    async fn renew(&self, target: &Target, held: Held<'_>, mode: LockMode) -> Result<Renewed>;

    /// Turns `held`'s write hold (`from` write) into a read hold of its lease, or
    /// its upgradable hold (`from` upgradable read) into a plain one; of a write
    /// hold, also how long ago the writer first in line queued, if one waits.
    async fn downgrade(&self, target: &Target, held: Held<'_>, from: Access) -> Result<Downgraded>;

    /// Applies `ask`'s writes if its token still holds the write lock; false
    /// (nothing written) when it does not. With replicas to wait for, also how many
    /// acknowledged the writes in time.
    async fn fenced_write(&self, target: &Target, ask: &Fenced<'_>) -> Result<(bool, u32)>;

    /// Ends every hold (the operator's break-glass) and tells the lock's channel;
    /// returns how many there were.
    async fn force_release(&self, target: &Target) -> Result<u64>;

    /// Who holds the lock and who waits, expired entries left out.
    async fn state(&self, target: &Target) -> Result<RawState>;

    /// The shared reads' look: whether a writer or an upgrade waits, or readers wait
    /// in line (a read would wait behind them).
    async fn writer_waits(&self, target: &Target) -> Result<bool>;

    /// The shared reads' mark: sets (`on`) or clears the note that `held`'s read
    /// hold is kept idle, which [`state`](Self::state) reports. A mark set after the
    /// lock's state went leaves nothing behind for longer than its lease.
    async fn mark_kept(&self, target: &Target, held: Held<'_>, on: bool) -> Result<()>;

    /// The servers the listing walks, in a stable order.
    async fn nodes(&self) -> Result<Vec<Node>>;

    /// One step of the listing: the keys `scan` finds, and the cursor to go on from
    /// (0: that node is done).
    async fn scan(&self, scan: &Scan<'_>) -> Result<(u64, Vec<String>)>;

    /// Whether one request may touch keys `a` and `b` together: on a cluster only
    /// when they share a slot. Answered without a request.
    fn shares_slot(&self, a: &str, b: &str) -> bool;

    /// Whether the store is a Redis Cluster (for `Debug`). Answered without a
    /// request.
    fn is_cluster(&self) -> bool;
}

/// A lock set's request for the members of one slot, with their options applied.
pub(crate) struct SetAsk<'a> {
    /// Each member's lock, token and mode, in the set's order.
    pub(crate) members: Vec<(&'a Target, &'a Token, LockMode)>,
    pub(crate) read_lease: Duration,
    pub(crate) write_lease: Duration,
    /// A read member defers to queued writers (writer preference).
    pub(crate) writer_preferred: bool,
}

/// One acquire request, with the lock's options applied.
#[derive(Clone, Copy)]
pub(crate) struct Acquire<'a> {
    pub(crate) token: &'a Token,
    /// What to take: a read hold (`Read`, `RecursiveRead`, `UpgradableRead`), the
    /// write hold, or the write hold for `token`'s upgradable one (`Upgrade`).
    pub(crate) access: Access,
    pub(crate) lease: Duration,
    /// A refused reader defers to writers and waits in line (writer preference).
    pub(crate) in_line: bool,
    /// How long a refused request keeps its place (zero: it takes none).
    pub(crate) intent: Duration,
    /// The replicas to wait for, if any.
    pub(crate) replicas: Option<Replicas>,
}

/// A hold as a request on it names it: its owner's token and the lease asked for.
#[derive(Clone, Copy)]
pub(crate) struct Held<'a> {
    pub(crate) token: &'a Token,
    pub(crate) lease: Duration,
}

/// A fenced write: the writes, under the write hold of `token`.
#[derive(Clone, Copy)]
pub(crate) struct Fenced<'a> {
    pub(crate) token: &'a Token,
    pub(crate) writes: &'a [Write],
    /// The replicas to wait for, if any.
    pub(crate) replicas: Option<Replicas>,
}

/// One step of the listing: on `node`, from `cursor` (0: the start), about `count`
/// keys whose names match the Redis glob `glob` (lock hashes only).
#[derive(Clone, Copy)]
pub(crate) struct Scan<'a> {
    pub(crate) node: &'a Node,
    pub(crate) cursor: u64,
    pub(crate) glob: &'a str,
    pub(crate) count: u32,
}

/// A server the listing walks.
pub(crate) struct Node {
    /// `host:port` as the driver names it (a label for a single store).
    pub(crate) address: String,
    /// Where a cluster request goes; `None` for a single store.
    pub(crate) route: Option<(String, u16)>,
    /// Keys it holds, when known: an empty server is not scanned.
    pub(crate) keys: Option<u64>,
}

impl Node {
    /// The one server of a store that is not a cluster.
    pub(crate) fn single() -> Self {
        Node {
            address: "server".to_owned(),
            route: None,
            keys: None,
        }
    }
}

/// What the store pushes to a client's subscription side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Push {
    /// `payload` was published on `channel`.
    Message { channel: String, payload: String },
    /// The store dropped the subscription to this channel (a failover, a slot
    /// migration), or (`None`) every subscription: the connection was lost.
    Dropped(Option<String>),
}

/// Where a client receives its pushes.
pub(crate) type Pushes = mpsc::UnboundedReceiver<Push>;

/// Where a backend sends a client's pushes.
pub(crate) type PushSender = mpsc::UnboundedSender<Push>;

/// A client's way to its store for requests: the backend it was made with.
pub(crate) enum Link {
    Redis(ScriptConnection),
    Memory(MemoryLink),
}

/// Each request goes to the client's backend as it is: one `match`, no boxing.
impl Backend for Link {
    async fn acquire(&self, target: &Target, ask: &Acquire<'_>) -> Result<(Acquired, u32)> {
        dispatch!(self, b => b.acquire(target, ask).await)
    }

    async fn acquire_set(&self, set: &SetAsk<'_>) -> Result<SetAcquired> {
        dispatch!(self, b => b.acquire_set(set).await)
    }

    async fn release(&self, target: &Target, token: &Token) -> Result<bool> {
        dispatch!(self, b => b.release(target, token).await)
    }

    async fn renew(&self, target: &Target, held: Held<'_>, mode: LockMode) -> Result<Renewed> {
        dispatch!(self, b => b.renew(target, held, mode).await)
    }

    async fn downgrade(&self, target: &Target, held: Held<'_>, from: Access) -> Result<Downgraded> {
        dispatch!(self, b => b.downgrade(target, held, from).await)
    }

    async fn fenced_write(&self, target: &Target, ask: &Fenced<'_>) -> Result<(bool, u32)> {
        dispatch!(self, b => b.fenced_write(target, ask).await)
    }

    async fn force_release(&self, target: &Target) -> Result<u64> {
        dispatch!(self, b => b.force_release(target).await)
    }

    async fn state(&self, target: &Target) -> Result<RawState> {
        dispatch!(self, b => b.state(target).await)
    }

    async fn writer_waits(&self, target: &Target) -> Result<bool> {
        dispatch!(self, b => b.writer_waits(target).await)
    }

    async fn mark_kept(&self, target: &Target, held: Held<'_>, on: bool) -> Result<()> {
        dispatch!(self, b => b.mark_kept(target, held, on).await)
    }

    async fn nodes(&self) -> Result<Vec<Node>> {
        dispatch!(self, b => b.nodes().await)
    }

    async fn scan(&self, scan: &Scan<'_>) -> Result<(u64, Vec<String>)> {
        dispatch!(self, b => b.scan(scan).await)
    }

    fn shares_slot(&self, a: &str, b: &str) -> bool {
        dispatch!(self, backend => backend.shares_slot(a, b))
    }

    fn is_cluster(&self) -> bool {
        dispatch!(self, b => b.is_cluster())
    }
}

/// A client's subscription side: the channels it listens on. Cheap to clone.
#[derive(Clone)]
pub(crate) enum Subscriber {
    Redis(Connection),
    Memory(MemoryLink),
}

impl Subscriber {
    /// Listens on `channel` from now on: what is published there arrives as a
    /// [`Push::Message`].
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<()> {
        dispatch!(self, b => b.subscribe(channel).await)
    }

    /// Stops listening on `channel`.
    pub(crate) async fn unsubscribe(&self, channel: &str) -> Result<()> {
        dispatch!(self, b => b.unsubscribe(channel).await)
    }
}

/// A client's two ways to its store and where its pushes arrive: what a backend's
/// constructor makes, and all the lock side knows of which backend it is.
pub(crate) struct Connected {
    pub(crate) link: Link,
    pub(crate) subscriber: Subscriber,
    pub(crate) pushes: Pushes,
}

impl Connected {
    /// Locks in `store`, in this process, with the request limits `limits`.
    pub(crate) fn in_memory(store: &MemoryStore, limits: Limits) -> Self {
        let (lock, subscriptions, pushes) = MemoryLink::pair(store, limits.overall);
        Connected {
            link: Link::Memory(lock),
            subscriber: Subscriber::Memory(subscriptions),
            pushes,
        }
    }

    /// Locks on a Redis Cluster, through a client built by `builder` (see
    /// [`Connection::cluster`]).
    pub(crate) async fn cluster(
        builder: ClusterClientBuilder,
        limits: Limits,
        first: Option<&str>,
    ) -> Result<Self, Error> {
        let (sender, pushes) = mpsc::unbounded_channel();
        let connections = Connection::cluster(builder, limits, sender, first).await?;
        Ok(Self::redis(connections, pushes))
    }

    /// Locks on one Redis server, through `client` (see [`Connection::standalone`]).
    pub(crate) async fn standalone(client: ::redis::Client, limits: Limits) -> Result<Self, Error> {
        let (sender, pushes) = mpsc::unbounded_channel();
        let connections = Connection::standalone(client, limits, sender).await?;
        Ok(Self::redis(connections, pushes))
    }

    fn redis(connections: Connections, pushes: Pushes) -> Self {
        Connected {
            link: Link::Redis(ScriptConnection::new(connections.lock)),
            subscriber: Subscriber::Redis(connections.subscriptions),
            pushes,
        }
    }
}

/// The longest a single request may wait for its reply, by default.
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest a request may take in all, retries and redirections included, by
/// default.
pub(crate) const OVERALL_TIMEOUT: Duration = Duration::from_secs(4);
/// The longest a (re)connection attempt may take, by default.
pub(crate) const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);

/// The limits on every request of a [`LockClient`](crate::LockClient), which every
/// backend keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// The longest a (re)connection attempt may take.
    pub(crate) connection: Duration,
    /// The longest a single request may wait for its reply.
    pub(crate) response: Duration,
    /// The longest a request may take in all, retries and redirections included.
    pub(crate) overall: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connection: CONNECTION_TIMEOUT,
            response: RESPONSE_TIMEOUT,
            overall: OVERALL_TIMEOUT,
        }
    }
}

impl Limits {
    /// Every limit is positive, and a request may wait for at least one reply.
    pub(crate) fn check(&self) -> Result<(), Error> {
        let zero = [
            ("connection_timeout", self.connection),
            ("response_timeout", self.response),
            ("overall_timeout", self.overall),
        ]
        .into_iter()
        .find(|(_, limit)| limit.is_zero());
        if let Some((name, _)) = zero {
            return Err(Error::InvalidOptions(format!("{name} must be positive")));
        }
        if self.overall < self.response {
            return Err(Error::InvalidOptions(format!(
                "overall_timeout ({:?}) is shorter than response_timeout ({:?})",
                self.overall, self.response
            )));
        }
        Ok(())
    }
}

//! The in-memory backend: locks that live in this process, for tests of the code
//! that takes them. [`MemoryStore`] stands where Redis would; every request runs the
//! engine (`protocol/engine/`), the same transition functions that the model checker
//! explores and the conformance test holds equal to the Lua scripts. What a script
//! publishes arrives at the client as a [`Push`], as a Redis message does. Time is
//! tokio's, so a test with a paused clock expires a lease the moment it advances past
//! it.
//!
//! `requests.rs` runs each request of the contract (`backend/mod.rs`) on the store;
//! here are the store, its clock and the faults a test can inject.

mod requests;

pub(crate) use requests::MemoryLink;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::backend::{Push, PushSender, Pushes, split_lock_key};
use crate::protocol::engine::{self, Time};

/// How long an idle lock hash outlives its last deadline (the scripts' `+ 1000` ms of
/// `set_expiry`), in the store's microseconds.
const IDLE_US: Time = 1_000_000;
/// `FORCED_FENCE` of force_release.lua: how long a forced release that ended read holds
/// keeps writers out.
const FORCED_FENCE_US: Time = 3_000_000;

/// Locks that live in this process instead of in Redis: a stand-in for a server in
/// tests, with the same semantics.
///
/// [`LockClient::in_memory`](crate::LockClient::in_memory) makes a client on it;
/// clients on one store (clones share it) see each other's locks, as processes on
/// one Redis do. Everything else is the API you know: leases and renewals, fencing
/// tokens and fenced writes, the writers' queue and its fairness, upgradable reads,
/// `state()`, `force_release` and `list_locks`. The decisions are the ones the Lua
/// scripts make on Redis: the same transition functions, checked equal to the scripts
/// on a real server.
///
/// Time is tokio's: under `#[tokio::test(start_paused = true)]`, leases end as soon
/// as `tokio::time::advance` (feature `test-util`) passes them, without a real wait. The store's clock
/// ticks at least a microsecond per request, so fencing tokens rise even while the
/// paused clock stands still.
///
/// Faults for tests of what a service does when things go wrong:
/// [`lose_holds`](Self::lose_holds) (a failover that lost the lock's state),
/// [`fail_next`](Self::fail_next) (requests that fail) and
/// [`stop_answering`](Self::stop_answering) (a server that hangs).
///
/// What it does not have: replicas (a `min_replicas` setting is always met), the
/// original design's two-key layout ([`LockClient::legacy_rwlock`](crate::LockClient::legacy_rwlock) fails with `InvalidOptions`), the
/// command-line tool, and any cost model: an uncontended acquire takes a few
/// microseconds.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redis_rwlock::Error> {
/// use redis_rwlock::{LockClient, MemoryStore};
///
/// let store = MemoryStore::new();
/// let client = LockClient::in_memory(&store);
/// let writer = client.rwlock("inventory").write().await?;
/// let busy = client.rwlock("inventory").try_read().await;
/// assert!(matches!(busy, Err(redis_rwlock::Error::WouldBlock)));
/// writer.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    state: Mutex<State>,
}

/// Everything in the store, under one lock (a request runs alone, as a script does).
#[derive(Default)]
pub(crate) struct State {
    /// The clock's start: tokio's instant and the wall clock's, for display.
    origin: Option<(Instant, DateTime<Utc>)>,
    /// The last time a request ran at, in microseconds since `origin`.
    last_us: Time,
    /// Lock hashes, by key.
    pub(crate) hashes: HashMap<String, engine::Hash>,
    /// Idle read holds that clients mark as kept (`k:<token>` fields on Redis), by key.
    pub(crate) kept: HashMap<String, HashSet<String>>,
    /// What fenced writes left: value and expiry, by key.
    pub(crate) values: HashMap<String, (Vec<u8>, Option<Time>)>,
    /// Who listens on each channel.
    subscribers: HashMap<String, HashMap<u64, PushSender>>,
    next_subscriber: u64,
    /// Requests still to fail ([`MemoryStore::fail_next`]).
    failures: u32,
    /// Until when requests go unanswered ([`MemoryStore::stop_answering`]).
    silent_until: Option<Instant>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Ends every hold and every place in line on lock `name` (under any key
    /// prefix), as a failover to a replica that never got them would: their guards
    /// learn it at their next renewal (`lost()` fires), and the lock is free. The
    /// fencing counter goes with them; the store's clock keeps the next tokens above
    /// the old ones. Other locks are left alone, also those whose names start with
    /// `name`'s hash tag or that `name` is the tag of.
    ///
    /// As on a cluster whose master failed over, the lock's channel drops its
    /// subscribers: their clients subscribe again, and their waiters try again at
    /// once.
    pub fn lose_holds(&self, name: &str) {
        let of_lock = |key: &str| split_lock_key(key).is_some_and(|(_, named)| named == name);
        let mut state = self.state();
        state.hashes.retain(|key, _| !of_lock(key));
        state.kept.retain(|key, _| !of_lock(key));
        let dropped: Vec<String> = state
            .subscribers
            .keys()
            .filter(|channel| channel.strip_suffix(":released").is_some_and(of_lock))
            .cloned()
            .collect();
        for channel in dropped {
            for pushes in state
                .subscribers
                .remove(&channel)
                .into_iter()
                .flat_map(HashMap::into_values)
            {
                let _ = pushes.send(Push::Dropped(Some(channel.clone())));
            }
        }
    }

    /// Makes the next `requests` requests to the store fail, as if the connection
    /// dropped before they were sent: acquires, releases and renewals alike. A
    /// renewal that fails is retried; a lease whose renewals keep failing is lost.
    pub fn fail_next(&self, requests: u32) {
        self.state().failures = requests;
    }

    /// Makes the store answer nothing for `span` of tokio's time, as a paused server
    /// would: requests wait, and each gives up with a timeout error once the client's
    /// overall limit passes (4 s unless the builder set another), or is answered
    /// when the span ends, whichever comes first.
    pub fn stop_answering(&self, span: Duration) {
        self.state().silent_until = Some(Instant::now() + span);
    }

    /// The value a fenced write left at `key`, while it lasts.
    pub fn value(&self, key: &str) -> Option<Vec<u8>> {
        let mut state = self.state();
        let now = state.now();
        match state.values.get(key) {
            Some((_, Some(at))) if *at <= now => {
                state.values.remove(key);
                None
            }
            Some((value, _)) => Some(value.clone()),
            None => None,
        }
    }

    /// How many clients listen on `channel` (`PUBSUB NUMSUB` on Redis): the crate's
    /// tests wait for waiters to listen before they release.
    #[doc(hidden)]
    pub fn subscribers(&self, channel: &str) -> u64 {
        self.state()
            .subscribers
            .get(channel)
            .map_or(0, |listeners| listeners.len() as u64)
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        // A request never panics while it holds the lock; if one did, the store's
        // state is still whole (each request writes it at its end).
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A new subscriber's id, where its pushes go, and where they arrive.
    pub(crate) fn subscriber(&self) -> (u64, PushSender, Pushes) {
        let (sender, receiver) = mpsc::unbounded_channel();
        let mut state = self.state();
        state.next_subscriber += 1;
        (state.next_subscriber, sender, receiver)
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state();
        f.debug_struct("MemoryStore")
            .field("locks", &state.hashes.len())
            .field("values", &state.values.len())
            .finish()
    }
}

impl State {
    /// The store's clock, in microseconds since its first request: tokio's time, but
    /// at least a microsecond past the last request's.
    pub(crate) fn tick(&mut self) -> Time {
        let now = self.now().max(self.last_us + 1);
        self.last_us = now;
        now
    }

    /// The store's clock without a tick.
    fn now(&mut self) -> Time {
        let (origin, _) = *self
            .origin
            .get_or_insert_with(|| (Instant::now(), DateTime::from(SystemTime::now())));
        let elapsed = micros(Instant::now().saturating_duration_since(origin));
        elapsed.max(self.last_us)
    }

    /// `now` (the store's clock) as the wall clock's milliseconds, for `state()`.
    pub(crate) fn wall_ms(&self, now: Time) -> i64 {
        let start = self.origin.map_or(0, |(_, wall)| wall.timestamp_millis());
        start + now / 1000
    }

    /// The engine's settings for the store: microseconds, and the crate's constants.
    pub(crate) fn params(original: (Time, Time)) -> engine::Params {
        engine::Params {
            idle: IDLE_US,
            us_per_unit: 1,
            original_read: original.0,
            original_write: original.1,
            forced_fence: FORCED_FENCE_US,
        }
    }

    /// Sends `payload` on `channel` to everyone who listens.
    pub(crate) fn publish(&mut self, channel: &str, payload: &str) {
        let Some(listeners) = self.subscribers.get_mut(channel) else {
            return;
        };
        listeners.retain(|_, pushes| {
            let message = Push::Message {
                channel: channel.to_owned(),
                payload: payload.to_owned(),
            };
            pushes.send(message).is_ok()
        });
    }

    pub(crate) fn subscribe(&mut self, channel: &str, id: u64, pushes: &PushSender) {
        self.subscribers
            .entry(channel.to_owned())
            .or_default()
            .insert(id, pushes.clone());
    }

    pub(crate) fn unsubscribe(&mut self, channel: &str, id: u64) {
        if let Some(listeners) = self.subscribers.get_mut(channel) {
            listeners.remove(&id);
            if listeners.is_empty() {
                self.subscribers.remove(channel);
            }
        }
    }

    /// Whether the next request fails ([`MemoryStore::fail_next`]); counts it.
    pub(crate) fn take_failure(&mut self) -> bool {
        let fails = self.failures > 0;
        self.failures = self.failures.saturating_sub(1);
        fails
    }

    /// Until when the store answers nothing, if it is silent now.
    pub(crate) fn silent_until(&mut self) -> Option<Instant> {
        let until = self.silent_until?;
        if until > Instant::now() {
            return Some(until);
        }
        self.silent_until = None;
        None
    }
}

/// A span in the store's microseconds.
pub(crate) fn micros(span: Duration) -> Time {
    Time::try_from(span.as_micros()).unwrap_or(Time::MAX)
}

//! Shared reads: the tasks of one process share one read hold of a lock.
//!
//! Between the lock handle and the waiting loop: a plain [`read`](crate::RwLock::read)
//! or [`try_read`](crate::RwLock::try_read) of a lock this client already holds for
//! reading joins that hold here, with no round trip and no script; only what cannot
//! be decided locally goes on to the server (`waiting.rs`). Each task gets its own
//! guard, a [`Share`]; the hold is renewed while any share lives, released when the
//! last one leaves, and a lost hold is lost to every share. One task at a time asks
//! the server for a lock's read hold; the tasks that come meanwhile wait for its
//! answer, then join what it got.
//!
//! Writers are never starved by a process's readers. A writer (or upgrade) that
//! waits calls the readers back at every refused attempt (`w` on the lock's
//! channel, lua/acquire_write.lua). A hold listens for that once it is shared: the
//! task that would be its second share subscribes, then looks once whether a
//! writer or an upgrade already waits (one `HMGET`), and only then joins; tasks
//! that come meanwhile wait for it. Called back, the hold (under writer preference)
//! admits no new share: new readers ask the server and wait in line behind the
//! writer, as any reader does, and the writer waits only for the shares that
//! joined before the process heard it. A call-back that is lost is sent again at
//! the writer's next attempt, within a re-check period (about a second). A lone
//! reader pays nothing for this: no subscription, no look.
//!
//! Kept reads (opt-in, [`LockOptions::keep_reads`](crate::LockOptions::keep_reads)):
//! when the last share leaves, the client may keep the hold, idle and renewed, for
//! up to the configured bound; a read in that window takes it up with no request.
//! A kept hold listens for call-backs (subscribing and looking once, as a shared
//! one does) and is released at once when a writer calls it back, or when the
//! bound is reached, whichever comes first; a `write()` (or upgrade) on this client
//! gives it back before asking. To everyone else it is a hold like any other.
//!
//! Not shared: [`read_recursive`](crate::RwLock::read_recursive) (a hold of its own by
//! design), upgradable reads, the read hold a downgrade leaves, legacy two-key locks
//! and locks with original timeouts (clients of the original design never call
//! back), locks without auto-renewal (each guard renews its own hold), locks with
//! `share_reads(false)`, and handles of one lock whose options differ.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::error::ErrorChain;
use crate::lease::{Hold, Lease};
use crate::metrics::{Acquiring, Holding, Local, Mode};
use crate::scripts::Access;
use crate::wakeups::CALL_BACK;
use crate::{Error, Fairness, RwLock};

/// A client's shareable read holds, by lock key.
#[derive(Default)]
pub(crate) struct SharedReads {
    locks: Mutex<HashMap<String, Slot>>,
}

enum Slot {
    /// A task asks the server for the lock's read hold; the others wait for its
    /// answer (the sender goes when it has one).
    Asking(watch::Receiver<()>),
    /// The hold new readers join, unless it was called back.
    Held(Arc<Shared>),
}

/// A read hold of the server, shared by the guards of the process's tasks.
struct Shared {
    /// What every share follows: the deadline, the lost signal, renewals.
    hold: Arc<Hold>,
    state: Mutex<State>,
}

struct State {
    shares: usize,
    /// The server hold; the last share to leave takes it, to release it.
    lease: Option<Lease>,
    /// A writer called the hold back.
    called_back: bool,
    listening: Listening,
    /// No share lives, and the process keeps the hold until then (the bound), or a
    /// call-back, or a read that takes it up.
    kept: Option<Instant>,
}

/// Whether the hold hears writers' call-backs.
enum Listening {
    /// It was never shared.
    No,
    /// A task subscribes and looks for a waiting writer; the others wait for it.
    Starting(watch::Receiver<()>),
    /// The task that listens.
    Yes { _listens: Listens },
}

/// The task that listens for a hold's call-backs; it ends when this is dropped.
struct Listens(AbortHandle);

impl Drop for Listens {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One task's share of a read hold: what a read guard has.
pub(crate) struct Share {
    shared: Arc<Shared>,
    /// A share that joined counts as a hold in the metrics of its own (the first
    /// share's is the lease's).
    holding: Option<Holding>,
    /// Left already (released): `Drop` has nothing to do.
    left: bool,
}

/// What a reader does next.
enum Enter {
    Joined(Share, Local),
    /// Wait for the task that asks the server, or starts listening, then look again.
    Wait(watch::Receiver<()>),
    /// Start listening for call-backs, then look again.
    Listen(Starting),
    /// Ask the server, for the others too.
    Ask(Asking),
    /// Ask the server for a hold of its own.
    Alone,
}

/// Takes a plain read hold, `wait`ing as [`RwLock::read`] does, or
/// [`Error::WouldBlock`] as [`RwLock::try_read`] does: joins the process's hold of
/// the lock when it can, else asks the server.
pub(crate) async fn read(lock: &RwLock, wait: bool) -> Result<Share, Error> {
    if !shareable(lock) {
        return alone(lock, wait).await;
    }
    let reads = &lock.client().inner.shared_reads;
    let key = lock.key()?;
    // A read that joins counts as an acquisition (granted, with its wait); one
    // that asks the server is counted there.
    let acquiring = Acquiring::start(lock.metrics_label(), Mode::Read);
    let deadline = lock
        .options()
        .wait_timeout
        .filter(|_| wait)
        .map(|limit| Instant::now() + limit);
    loop {
        match reads.enter(lock, key, wait) {
            Enter::Joined(share, how) => {
                acquiring.finish(&Ok::<(), Error>(()));
                crate::metrics::shared_read(lock.metrics_label(), how);
                tracing::trace!(lock = lock.name(), "joined the process's read hold");
                return Ok(share);
            }
            Enter::Listen(starting) => starting.run().await,
            Enter::Wait(mut asked) => match deadline {
                Some(deadline) => {
                    if tokio::time::timeout_at(deadline, asked.changed())
                        .await
                        .is_err()
                    {
                        return Err(Error::Timeout);
                    }
                }
                None => {
                    let _ = asked.changed().await;
                }
            },
            Enter::Ask(asking) => {
                acquiring.forget();
                // Within what is left of the wait limit, if it waited for another.
                let asked = lock.clone().read_lease(wait);
                let lease = match deadline {
                    Some(deadline) => tokio::time::timeout_at(deadline, asked)
                        .await
                        .map_err(|_| Error::Timeout)??,
                    None => asked.await?,
                };
                return asking.granted(lease);
            }
            Enter::Alone => {
                acquiring.forget();
                return alone(lock, wait).await;
            }
        }
    }
}

/// A hold of its own, not shared.
async fn alone(lock: &RwLock, wait: bool) -> Result<Share, Error> {
    let lease = lock.clone().read_lease(wait).await?;
    Share::alone(lease)
}

/// Whether the lock's plain reads may be shared (see the module's docs).
fn shareable(lock: &RwLock) -> bool {
    let options = lock.options();
    options.share_reads
        && options.auto_renew
        && options.original_timeouts.is_none()
        && lock.target().is_ok_and(|target| !target.is_legacy())
}

impl SharedReads {
    fn locks(&self) -> MutexGuard<'_, HashMap<String, Slot>> {
        self.locks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn enter(&self, lock: &RwLock, key: &str, wait: bool) -> Enter {
        let mut locks = self.locks();
        match locks.get(key) {
            Some(Slot::Held(shared)) if shared.hold.lock.options() != lock.options() => {
                return Enter::Alone;
            }
            Some(Slot::Held(shared)) => {
                if let Some(enter) = shared.join(lock, wait) {
                    return enter;
                }
            }
            Some(Slot::Asking(asked)) if wait => return Enter::Wait(asked.clone()),
            Some(Slot::Asking(_)) => return Enter::Alone,
            None => {}
        }
        let (answer, asked) = watch::channel(());
        locks.insert(key.to_owned(), Slot::Asking(asked.clone()));
        Enter::Ask(Asking {
            lock: lock.clone(),
            key: key.to_owned(),
            asked,
            _answer: answer,
        })
    }
}

/// A task asking the server for the read hold the others wait for. Dropped without
/// an answer (an error, a timeout, a cancelled future), it lets them look again.
struct Asking {
    lock: RwLock,
    key: String,
    asked: watch::Receiver<()>,
    /// Dropped when the task has an answer: wakes the others.
    _answer: watch::Sender<()>,
}

impl Asking {
    /// The server granted `lease`: it is the hold the others join.
    fn granted(self, lease: Lease) -> Result<Share, Error> {
        let share = Share::alone(lease)?;
        let reads = &self.lock.client().inner.shared_reads;
        reads
            .locks()
            .insert(self.key.clone(), Slot::Held(share.shared.clone()));
        Ok(share)
    }
}

impl Drop for Asking {
    fn drop(&mut self) {
        let reads = &self.lock.client().inner.shared_reads;
        let mut locks = reads.locks();
        if let Some(Slot::Asking(asked)) = locks.get(&self.key)
            && asked.same_channel(&self.asked)
        {
            locks.remove(&self.key);
        }
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What a reader of `lock` does with this hold: joins it (it is held, a share
    /// lives or the process keeps it, and no writer called it back under writer
    /// preference), or first starts listening for call-backs (a `try_read` asks
    /// the server instead of waiting for that), or waits while another task does;
    /// `None`: it asks the server.
    fn join(self: &Arc<Self>, lock: &RwLock, wait: bool) -> Option<Enter> {
        let mut state = self.state();
        let writer_preferred = lock.options().fairness == Fairness::WriterPreferred;
        let closed = lock.client().inner.live.is_closed();
        let alive = state.shares > 0 || state.kept.is_some();
        if !alive || state.lease.is_none() || closed || !self.hold.is_held() {
            return None;
        }
        if writer_preferred {
            if state.called_back {
                return None;
            }
            match &state.listening {
                Listening::Yes { .. } => {}
                Listening::Starting(started) if wait => return Some(Enter::Wait(started.clone())),
                Listening::Starting(_) => return Some(Enter::Alone),
                Listening::No => return Some(Enter::Listen(self.start_listening(&mut state))),
            }
        }
        state.shares += 1;
        let how = match state.kept.take() {
            Some(_) => Local::Kept,
            None => Local::Joined,
        };
        Some(Enter::Joined(
            Share {
                shared: self.clone(),
                holding: Some(Holding::start(lock.metrics_label(), Mode::Read)),
                left: false,
            },
            how,
        ))
    }

    /// A task is to make the hold hear call-backs.
    fn start_listening(self: &Arc<Self>, state: &mut State) -> Starting {
        let (done, started) = watch::channel(());
        state.listening = Listening::Starting(started.clone());
        Starting {
            shared: self.clone(),
            started,
            _done: done,
        }
    }

    /// A writer called the hold back: no share joins it any more, and a kept hold
    /// is released now.
    fn call_back(self: &Arc<Self>) {
        let reads = &self.hold.lock.client().inner.shared_reads;
        let mut locks = reads.locks();
        let mut state = self.state();
        state.called_back = true;
        if state.kept.is_some() {
            tracing::debug!(
                lock = self.hold.lock.name(),
                "released the kept read hold for a writer"
            );
            drop(self.give_back(&mut locks, &mut state));
        }
    }

    /// A share leaves: the hold's lease if it was the last and the process does
    /// not keep it.
    fn leave(self: &Arc<Self>) -> Option<Lease> {
        let reads = &self.hold.lock.client().inner.shared_reads;
        let mut locks = reads.locks();
        let mut state = self.state();
        state.shares -= 1;
        if state.shares > 0 {
            return None;
        }
        if let Some(bound) = self.keeps(&locks, &state) {
            self.keep(&mut state, bound);
            return None;
        }
        self.give_back(&mut locks, &mut state)
    }

    /// How long the process may keep the hold now idle: it is the lock's hold new
    /// readers join, held, not called back, and keeping is on.
    fn keeps(self: &Arc<Self>, locks: &HashMap<String, Slot>, state: &State) -> Option<Duration> {
        let lock = &self.hold.lock;
        let ours = lock
            .key()
            .ok()
            .and_then(|key| locks.get(key))
            .is_some_and(|slot| matches!(slot, Slot::Held(held) if Arc::ptr_eq(held, self)));
        let keeps = ours
            && state.lease.is_some()
            && !state.called_back
            && self.hold.is_held()
            && !lock.client().inner.live.is_closed();
        lock.options().keep_reads.filter(|_| keeps)
    }

    /// Keeps the idle hold until `bound` from now: then, unless a read took it up
    /// meanwhile, it is released. It listens for call-backs meanwhile.
    fn keep(self: &Arc<Self>, state: &mut State, bound: Duration) {
        let since = Instant::now();
        state.kept = Some(since);
        let shared = Arc::downgrade(self);
        self.hold.runtime.spawn(async move {
            tokio::time::sleep_until(since + bound).await;
            if let Some(shared) = shared.upgrade() {
                shared.kept_too_long(since);
            }
        });
        if matches!(state.listening, Listening::No) {
            let starting = self.start_listening(state);
            self.hold.runtime.spawn(starting.run());
        }
    }

    /// The hold kept since `since` reached its bound: released, unless a read took it
    /// up meanwhile.
    fn kept_too_long(self: &Arc<Self>, since: Instant) {
        let reads = &self.hold.lock.client().inner.shared_reads;
        let mut locks = reads.locks();
        let mut state = self.state();
        if state.kept == Some(since) {
            drop(self.give_back(&mut locks, &mut state));
        }
    }

    /// The hold goes: no reader finds it any more; its lease, to release (dropped,
    /// it releases itself in the background).
    fn give_back(
        self: &Arc<Self>,
        locks: &mut HashMap<String, Slot>,
        state: &mut State,
    ) -> Option<Lease> {
        if let Ok(key) = self.hold.lock.key()
            && let Some(Slot::Held(held)) = locks.get(key)
            && Arc::ptr_eq(held, self)
        {
            locks.remove(key);
        }
        state.kept = None;
        state.listening = Listening::No;
        state.lease.take()
    }
}

/// Before a write (or an upgrade) of `lock` on this client: the client's idle kept
/// read hold of it is released first, so the write does not wait for it.
pub(crate) async fn give_back_kept(lock: &RwLock) {
    let Ok(key) = lock.key() else {
        return;
    };
    let reads = &lock.client().inner.shared_reads;
    let lease = {
        let mut locks = reads.locks();
        let Some(Slot::Held(shared)) = locks.get(key) else {
            return;
        };
        let shared = shared.clone();
        let mut state = shared.state();
        if state.kept.is_none() {
            return;
        }
        shared.give_back(&mut locks, &mut state)
    };
    if let Some(lease) = lease
        && let Err(err) = lease.release().await
    {
        tracing::debug!(lock = lock.name(), error = %ErrorChain(&err), "could not release the kept read hold before a write");
    }
}

/// A task making a shared hold hear call-backs. Dropped before it is done (a
/// cancelled future), it lets another task try.
struct Starting {
    shared: Arc<Shared>,
    started: watch::Receiver<()>,
    /// Dropped when done: wakes the tasks that wait for it.
    _done: watch::Sender<()>,
}

impl Starting {
    /// Subscribes to the lock's channel, then looks once whether a writer or an
    /// upgrade waits already: a call-back sent before the subscription is not
    /// missed. A hold that cannot hear call-backs takes no more shares.
    async fn run(self) {
        let lock = &self.shared.hold.lock;
        let (listens, waits) = match self.listen().await {
            Ok(listens) => (Some(listens), lock.writer_waits().await),
            Err(err) => (None, Err(err)),
        };
        let called_back = waits.unwrap_or_else(|err| {
            tracing::warn!(lock = lock.name(), error = %ErrorChain(&err), "a read hold cannot hear writers' call-backs; it takes no more shares");
            true
        });
        if called_back {
            self.shared.call_back();
        }
        let mut state = self.shared.state();
        if let Some(listens) = listens
            && matches!(&state.listening, Listening::Starting(started) if started.same_channel(&self.started))
        {
            state.listening = Listening::Yes { _listens: listens };
        }
    }

    /// Subscribes, and listens for a call-back in the background.
    async fn listen(&self) -> Result<Listens, Error> {
        let hold = &self.shared.hold;
        let channel = &hold.lock.target()?.channel;
        let wakeups = &hold.lock.client().inner.wakeups;
        let mut listener = wakeups.listen_for_call_backs(channel).await?;
        let shared = Arc::downgrade(&self.shared);
        let task = hold.runtime.spawn(async move {
            while *listener.recv().await != *CALL_BACK {}
            if let Some(shared) = shared.upgrade() {
                let lock = shared.hold.lock.name();
                tracing::debug!(lock, "a writer called the shared read hold back");
                shared.call_back();
            }
        });
        Ok(Listens(task.abort_handle()))
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        let mut state = self.shared.state();
        if let Listening::Starting(started) = &state.listening
            && started.same_channel(&self.started)
        {
            state.listening = Listening::No;
        }
    }
}

impl Share {
    /// The only share of `lease`, a hold of its own until others join it;
    /// [`Error::LeaseLost`] for a lease already released.
    pub(crate) fn alone(lease: Lease) -> Result<Self, Error> {
        let hold = lease.hold().ok_or(Error::LeaseLost)?.clone();
        Ok(Share {
            shared: Arc::new(Shared {
                hold,
                state: Mutex::new(State {
                    shares: 1,
                    lease: Some(lease),
                    called_back: false,
                    listening: Listening::No,
                    kept: None,
                }),
            }),
            holding: None,
            left: false,
        })
    }

    pub(crate) fn name(&self) -> &str {
        self.shared.hold.lock.name()
    }

    pub(crate) fn token(&self) -> &crate::token::Token {
        &self.shared.hold.token
    }

    pub(crate) fn is_held(&self) -> bool {
        self.shared.hold.is_held()
    }

    pub(crate) fn deadline(&self) -> std::time::Instant {
        self.shared.hold.deadline().into_std()
    }

    pub(crate) async fn lost(&self) {
        self.shared.hold.lost().await;
    }

    /// Renews the shared hold now.
    pub(crate) async fn extend(&self) -> Result<(), Error> {
        self.shared.hold.renew_now().await
    }

    /// Ends this share; the last one releases the hold. `Err(LeaseLost)` when the
    /// share already knew its lease was gone.
    pub(crate) async fn release(mut self) -> Result<(), Error> {
        let knew_lost = !self.is_held();
        match self.leave() {
            Some(lease) => lease.release().await,
            None if knew_lost => Err(Error::LeaseLost),
            None => Ok(()),
        }
    }
}

impl Share {
    /// This share ends: the hold's lease if it was the last.
    fn leave(&mut self) -> Option<Lease> {
        self.left = true;
        if let Some(holding) = &self.holding {
            holding.end();
        }
        self.shared.leave()
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        if !self.left {
            // The last share's lease releases itself in the background as it drops.
            drop(self.leave());
        }
    }
}

impl RwLock {
    /// Asks the server for a plain read hold.
    async fn read_lease(self, wait: bool) -> Result<Lease, Error> {
        self.lease_for(Access::Read, wait)
            .await
            .map(|(lease, _)| lease)
    }

    /// Whether a writer or an upgrade waits, or readers wait in line (a read would
    /// wait behind them): the lock's line or pending upgrade exists.
    async fn writer_waits(&self) -> Result<bool, Error> {
        let mut conn = self.conn().conn.clone();
        let fields: (Option<String>, Option<String>) = redis::cmd("HMGET")
            .arg(self.key()?)
            .arg("q:head")
            .arg("u:upgrade")
            .query_async(&mut conn)
            .await?;
        Ok(fields.0.is_some() || fields.1.is_some())
    }
}

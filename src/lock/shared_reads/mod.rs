//! Shared reads: the tasks of one process share one read hold of a lock.
//!
//! Between the lock handle and the waiting loop: a plain [`read`](crate::RwLock::read)
//! or [`try_read`](crate::RwLock::try_read) of a lock this client already holds for
//! reading joins that hold here, with no round trip and no script; only what cannot
//! be decided locally goes on to the server (`lock/waiting.rs`). Each task gets its own
//! guard, a [`Share`]; the hold is renewed while any share lives, released when the
//! last one leaves (or kept, `kept.rs`), and a lost hold is lost to every share.
//! One task at a time asks the server for a lock's read hold; the tasks that come
//! meanwhile wait for its answer, then join what it got.
//!
//! Writers are never starved by a process's readers: a writer that waits calls the
//! holds back, and a hold called back admits no new share under writer preference
//! (`call_backs.rs`); the hold's renewal says so too, where a message can be lost.
//! No task joins a hold the client cannot be sure the server still has: its last
//! renewal failed or is overdue (`Hold::is_confirmed`), or a forced release was
//! heard; such a reader asks the server, as a lone reader does. A read that comes while a task of this client writes the lock
//! waits for that write here and joins the read hold its release keeps, when the
//! client keeps reads (`writes.rs`, `kept.rs`).
//!
//! Not shared: [`read_recursive`](crate::RwLock::read_recursive) (a hold of its own by
//! design), upgradable reads, the read hold a downgrade leaves, legacy two-key locks
//! and locks with original timeouts (clients of the original design never call
//! back), locks without auto-renewal (each guard renews its own hold), locks with
//! `share_reads(false)`, and handles of one lock whose options differ.

mod call_backs;
mod kept;
mod writes;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::client::ClientInner;
use crate::guard::lease::{Hold, Lease};
use crate::metrics::{Acquiring, Holding, Local, Mode};
use crate::protocol::Access;
use crate::{Error, Fairness, RwLock};

pub(crate) use call_backs::make_way;
use call_backs::{Listening, Starting};
pub(crate) use kept::{keeps_after_write, release_keeping};
pub(crate) use writes::LocalWrite;
pub(crate) use writes::start as start_write;

/// How long a lock's entry, with its listening for call-backs, outlives its last
/// hold (as long as the wake-up channel's subscription lingers), so a lock read
/// over and over subscribes once.
const LINGER: Duration = Duration::from_secs(5);

/// A client's shareable read holds, and its listening for call-backs, by lock key.
#[derive(Default)]
pub(crate) struct SharedReads {
    locks: Mutex<HashMap<String, Entry>>,
    /// A task sweeps out the entries idle for `LINGER` (`sweep`: one per client,
    /// while any entry is idle, however many locks it reads). Set and cleared with
    /// `locks` held, so an entry that goes idle always finds a sweeper.
    sweeping: AtomicBool,
}

/// What the client knows of one lock's reads.
struct Entry {
    /// The hold new readers join, or the task asking the server for one; `None`:
    /// neither (the entry lingers while it listens).
    slot: Option<Slot>,
    listening: Listening,
    /// A call-back came while a task asked the server: the hold it gets is called
    /// back (the call-back may be older than the hold: that costs only sharing).
    recalled: bool,
    /// When the slot emptied: the entry goes `LINGER` later unless used again.
    idle_since: Option<Instant>,
    /// A task of this client writes the lock: new readers wait for it (`writes.rs`).
    writing: Option<writes::Writing>,
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
    /// The server hold; the last share to leave (or whoever ends a kept hold)
    /// takes it, to release it.
    lease: Option<Lease>,
    /// A writer called the hold back.
    called_back: bool,
    /// No share lives, and the process keeps the hold (since then).
    kept: Option<Instant>,
    /// When the hold was first kept: it is kept no longer than the bound from then,
    /// however often reads take it up and leave it again.
    first_kept: Option<Instant>,
    /// The hold's `k:` field says it is kept idle (`kept.rs`).
    marked: bool,
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
    /// Wait for the client's write of the lock, then look again (`writes.rs`).
    AfterWrite(writes::Writing),
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
    // A reader waits for one write of its own client at most: the one under way
    // when it came. Its ticket, kept until it looked again after the write, lets
    // that write's release wait for it to join (`writes.rs`).
    let mut waited_for_write = false;
    let mut joins_after_write = false;
    let mut ticket = None;
    loop {
        // A reader joins after the write on its first look only.
        let joins = std::mem::take(&mut joins_after_write);
        let entered = reads.enter(lock, key, wait, waited_for_write, joins);
        // It joined the hold the write kept, or goes on without it.
        drop(ticket.take());
        match entered {
            Enter::Joined(share, how) => {
                acquiring.finish(&Ok::<(), Error>(()));
                crate::metrics::shared_read(lock.metrics_label(), how);
                tracing::trace!(lock = lock.name(), ?how, "joined the process's read hold");
                return Ok(share);
            }
            Enter::Listen(starting) => starting.run().await,
            Enter::Wait(mut asked) => {
                within(lock, deadline, async {
                    let _ = asked.changed().await;
                    Ok(())
                })
                .await?;
            }
            Enter::Ask(asking) => {
                acquiring.forget();
                // Within what is left of the wait limit, if it waited for another.
                let asked = lock.clone().lease_for(Access::Read, wait);
                let leased = within(lock, deadline, asked).await?;
                return asking.granted(leased.lease, leased.waited).await;
            }
            Enter::Alone => {
                acquiring.forget();
                return alone(lock, wait).await;
            }
            Enter::AfterWrite(_) if !wait => {
                acquiring.finish(&Err::<(), Error>(Error::WouldBlock));
                return Err(Error::WouldBlock);
            }
            Enter::AfterWrite(writing) => {
                waited_for_write = true;
                let came = Instant::now();
                ticket = writing.ticket();
                joins_after_write = within(lock, deadline, async {
                    Ok(writes::wait_for(writing, came).await)
                })
                .await?;
            }
        }
    }
}

/// Joins this client's read hold of the lock if a plain read may join it, as
/// [`read`] would, with no request: `None` when it has none a read may join (the
/// caller asks the server). Waits only for the client's listening for call-backs
/// to start, where that is under way. A lock set takes its read members so before
/// it asks the server for the others in one request.
pub(crate) async fn join_held(lock: &RwLock) -> Option<Share> {
    if !shareable(lock) {
        return None;
    }
    let reads = &lock.client().inner.shared_reads;
    let key = lock.key().ok()?;
    loop {
        // Only a hold to join: a read that would ask the server (or wait for a
        // task that does) is the caller's to make.
        if !reads
            .locks()
            .get(key)
            .is_some_and(|entry| entry.holds_joinable(lock))
        {
            return None;
        }
        match reads.enter(lock, key, true, false, false) {
            Enter::Joined(share, how) => {
                crate::metrics::shared_read(lock.metrics_label(), how);
                return Some(share);
            }
            Enter::Listen(starting) => starting.run().await,
            Enter::Wait(mut started) => {
                let _ = started.changed().await;
            }
            Enter::Ask(_) | Enter::Alone | Enter::AfterWrite(_) => return None,
        }
    }
}

/// `work`, or [`Error::Timeout`] at `deadline`.
async fn within<T>(
    lock: &RwLock,
    deadline: Option<Instant>,
    work: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    match deadline {
        Some(deadline) => {
            tokio::time::timeout_at(deadline, work)
                .await
                .map_err(|_| Error::Timeout {
                    lock: lock.name().to_owned(),
                    mode: crate::Mode::Read,
                    waited: lock.options().wait_timeout.unwrap_or_default(),
                })?
        }
        None => work.await,
    }
}

/// A hold of its own, not shared.
async fn alone(lock: &RwLock, wait: bool) -> Result<Share, Error> {
    let lease = lock.clone().lease_for(Access::Read, wait).await?.lease;
    Share::alone(lease)
}

/// Whether the lock's plain reads may be shared (see the module's docs).
pub(crate) fn shareable(lock: &RwLock) -> bool {
    let options = lock.options();
    options.share_reads
        && options.auto_renew
        && options.original_timeouts.is_none()
        && lock.target().is_ok_and(|target| !target.is_legacy())
}

fn writer_preferred(lock: &RwLock) -> bool {
    lock.options().fairness == Fairness::WriterPreferred
}

impl SharedReads {
    fn locks(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.locks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What a reader does next. `waited_for_write`: it waited for a write of its
    /// client already (it waits for one at most); `joins_after_write`: and it
    /// joins the read hold that write's release kept (`writes::wait_for`).
    fn enter(
        &self,
        lock: &RwLock,
        key: &str,
        wait: bool,
        waited_for_write: bool,
        joins_after_write: bool,
    ) -> Enter {
        let mut locks = self.locks();
        let entry = locks.entry(key.to_owned()).or_insert_with(Entry::new);
        match &entry.slot {
            Some(Slot::Held(shared)) if shared.hold.lock.options() != lock.options() => {
                return Enter::Alone;
            }
            Some(Slot::Held(shared)) if shared.joinable(lock, joins_after_write) => {
                let shared = shared.clone();
                // A read that waited for the client's write joins the hold its
                // release kept as a reader in line behind the write would be let
                // in: before any writer that queued after it, after those that
                // queued before it (the release tells which, `kept.rs`).
                if writer_preferred(lock) && !joins_after_write {
                    match &entry.listening {
                        Listening::Yes { .. } => {}
                        Listening::Starting(started) if wait => {
                            return Enter::Wait(started.clone());
                        }
                        Listening::Starting(_) => return Enter::Alone,
                        Listening::No => return Enter::Listen(Starting::new(entry, lock, key)),
                    }
                }
                let (share, how) = shared.join(lock);
                return Enter::Joined(share, how);
            }
            _ => {}
        }
        // No hold to join: while a task of this client writes the lock, a read waits
        // for that write here (`writes.rs`). Until its call-back comes, the write
        // waits in line like any other, and reads join the hold that holds it up,
        // as they would without keeping. A handle of the lock with reader
        // preference does not wait for a writer.
        let waits_for_writes = !waited_for_write && writer_preferred(lock);
        if let Some(writing) = entry
            .writing
            .as_ref()
            .filter(|writing| waits_for_writes && writes::under_way(writing))
        {
            return Enter::AfterWrite(writing.clone());
        }
        match &entry.slot {
            Some(Slot::Asking(asked)) if wait => return Enter::Wait(asked.clone()),
            Some(Slot::Asking(_)) => return Enter::Alone,
            Some(Slot::Held(_)) | None => {}
        }
        let (answer, asked) = watch::channel(());
        entry.slot = Some(Slot::Asking(asked.clone()));
        entry.idle_since = None;
        Enter::Ask(Asking {
            lock: lock.internal(),
            key: key.to_owned(),
            asked,
            _answer: answer,
        })
    }

    /// The hold `shared` goes: no reader finds it any more. Its lease, to release
    /// (dropped, it releases itself in the background).
    fn give_back(
        &self,
        locks: &mut HashMap<String, Entry>,
        shared: &Arc<Shared>,
        state: &mut State,
    ) -> Option<Lease> {
        let lock = &shared.hold.lock;
        if let Ok(key) = lock.key()
            && locks.get(key).is_some_and(|entry| entry.holds(shared))
        {
            self.emptied(locks, lock, key);
        }
        state.kept = None;
        shared.unmark(state);
        state.lease.take()
    }

    /// The lock's slot emptied (its hold went, or its asker gave up): the entry
    /// goes now if it does not listen, else `LINGER` later unless used again.
    fn emptied(&self, locks: &mut HashMap<String, Entry>, lock: &RwLock, key: &str) {
        let Some(entry) = locks.get_mut(key) else {
            return;
        };
        entry.slot = None;
        entry.recalled = false;
        if entry.is_unused() {
            locks.remove(key);
            return;
        }
        entry.idle_since = Some(Instant::now());
        let runtime = tokio::runtime::Handle::try_current();
        let (Ok(runtime), false) = (runtime, lock.client().is_abandoned()) else {
            locks.remove(key);
            return;
        };
        if !self.sweeping.swap(true, Ordering::Relaxed) {
            // The client, weakly: a sweeper keeps no dropped client alive.
            runtime.spawn(sweep(Arc::downgrade(&lock.client().inner)));
        }
    }

    /// The client's last handle went (`LockClient`'s docs): every kept hold is
    /// released, and every entry goes with its listening (the holds that shares
    /// still use end with their last share, and are not kept).
    pub(crate) fn abandon(&self) {
        let mut locks = self.locks();
        let held: Vec<Arc<Shared>> = locks
            .values()
            .filter_map(|entry| match &entry.slot {
                Some(Slot::Held(shared)) => Some(shared.clone()),
                _ => None,
            })
            .collect();
        for shared in held {
            let mut state = shared.state();
            if state.kept.is_some() {
                drop(self.give_back(&mut locks, &shared, &mut state));
            }
        }
        locks.clear();
    }
}

/// Removes the client's entries once idle for `LINGER`, as long as any entry is
/// idle: it wakes when the first of them is due.
async fn sweep(client: Weak<ClientInner>) {
    let mut due = Instant::now() + LINGER;
    loop {
        tokio::time::sleep_until(due).await;
        let Some(client) = client.upgrade() else {
            return;
        };
        let reads = &client.shared_reads;
        let mut locks = reads.locks();
        let now = Instant::now();
        locks.retain(|_, entry| entry.idle().is_none_or(|since| since + LINGER > now));
        match locks.values().filter_map(Entry::idle).min() {
            Some(first) => due = first + LINGER,
            None => {
                reads.sweeping.store(false, Ordering::Relaxed);
                return;
            }
        }
    }
}

impl Entry {
    fn new() -> Self {
        Entry {
            slot: None,
            listening: Listening::No,
            recalled: false,
            idle_since: None,
            writing: None,
        }
    }

    /// Whether the entry serves no one: no hold or asker, no listening, no write.
    fn is_unused(&self) -> bool {
        self.slot.is_none() && matches!(self.listening, Listening::No) && self.writing.is_none()
    }

    /// Since when the entry has served no one but its listening, if it has not.
    fn idle(&self) -> Option<Instant> {
        self.idle_since
            .filter(|_| self.slot.is_none() && self.writing.is_none())
    }

    /// Whether `shared` is the hold new readers of the lock find.
    fn holds(&self, shared: &Arc<Shared>) -> bool {
        matches!(&self.slot, Some(Slot::Held(held)) if Arc::ptr_eq(held, shared))
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
    /// The server granted `lease`: it is the hold the others join. A hold granted
    /// after a wait may have writers in line behind it (a batch of readers is let
    /// in ahead of them): it looks once, under writer preference, before anyone
    /// joins it.
    async fn granted(self, lease: Lease, waited: bool) -> Result<Share, Error> {
        let share = Share::alone(lease)?;
        let lock = &self.lock;
        if waited && writer_preferred(lock) && call_backs::writer_waits(lock).await {
            share.shared.state().called_back = true;
        }
        let reads = &lock.client().inner.shared_reads;
        let mut locks = reads.locks();
        if let Some(entry) = locks.get_mut(&self.key)
            && matches!(&entry.slot, Some(Slot::Asking(asked)) if asked.same_channel(&self.asked))
        {
            if std::mem::take(&mut entry.recalled) {
                share.shared.state().called_back = true;
            }
            entry.slot = Some(Slot::Held(share.shared.clone()));
        }
        Ok(share)
    }
}

impl Drop for Asking {
    fn drop(&mut self) {
        let reads = &self.lock.client().inner.shared_reads;
        let mut locks = reads.locks();
        if let Some(Entry {
            slot: Some(Slot::Asking(asked)),
            ..
        }) = locks.get(&self.key)
            && asked.same_channel(&self.asked)
        {
            reads.emptied(&mut locks, &self.lock, &self.key);
        }
    }
}

impl Entry {
    /// It has a hold that a plain read of `lock` may join.
    fn holds_joinable(&self, lock: &RwLock) -> bool {
        matches!(&self.slot, Some(Slot::Held(shared))
            if shared.hold.lock.options() == lock.options() && shared.joinable(lock, false))
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a reader of `lock` may join the hold: a share lives or the process
    /// keeps it, the client is sure the server still has it (its renewals answer
    /// in time, no forced release was heard), and no writer called it back (under
    /// writer preference). A reader that waited for its client's write (`after_write`)
    /// joins a called-back hold too: the readers that came during a write phase
    /// enter when it ends, before the next writer (phase-fair, `writes.rs`).
    fn joinable(&self, lock: &RwLock, after_write: bool) -> bool {
        let state = self.state();
        let closed = lock.client().inner.live.is_closed();
        (state.shares > 0 || state.kept.is_some())
            && state.lease.is_some()
            && !closed
            && self.hold.is_confirmed()
            && !(writer_preferred(lock) && !after_write && self.called_back(&state))
    }

    /// Whether a writer or an upgrade called the hold back: by a message
    /// (`call_backs.rs`), or by its renewal's reply, which no lost message can
    /// take away.
    fn called_back(&self, state: &State) -> bool {
        state.called_back || self.hold.is_recalled()
    }

    /// Another share; `Local::Kept` if it takes up a kept hold.
    fn join(self: &Arc<Self>, lock: &RwLock) -> (Share, Local) {
        let mut state = self.state();
        state.shares += 1;
        let how = match state.kept.take() {
            Some(_) => Local::Kept,
            None => Local::Joined,
        };
        self.unmark(&mut state);
        let share = Share {
            shared: self.clone(),
            holding: Some(Holding::start(lock.metrics_label(), Mode::Read)),
            left: false,
        };
        (share, how)
    }

    /// A share leaves: the hold's lease if it was the last and the process does
    /// not keep the hold.
    fn leave(self: &Arc<Self>) -> Option<Lease> {
        let reads = &self.hold.lock.client().inner.shared_reads;
        let mut locks = reads.locks();
        let mut state = self.state();
        state.shares -= 1;
        if state.shares > 0 {
            return None;
        }
        if self.keep(&mut locks, &mut state) {
            return None;
        }
        reads.give_back(&mut locks, self, &mut state)
    }
}

impl Share {
    /// The only share of `lease`, a hold of its own until others join it;
    /// [`Error::LeaseLost`] for a lease already released.
    pub(crate) fn alone(lease: Lease) -> Result<Self, Error> {
        let hold = lease.hold().ok_or_else(|| lease.lost_error())?.clone();
        Ok(Share {
            shared: Arc::new(Shared {
                hold,
                state: Mutex::new(State {
                    shares: 1,
                    lease: Some(lease),
                    called_back: false,
                    kept: None,
                    first_kept: None,
                    marked: false,
                }),
            }),
            holding: None,
            left: false,
        })
    }

    pub(crate) fn name(&self) -> &str {
        self.shared.hold.lock.name()
    }

    pub(crate) fn token(&self) -> &crate::protocol::token::Token {
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

    /// Ends this share; the last one releases the hold (unless it is kept).
    /// `Err(LeaseLost)` when the share already knew its lease was gone.
    pub(crate) async fn release(mut self) -> Result<(), Error> {
        let knew_lost = !self.is_held();
        match self.leave() {
            Some(lease) => lease.release().await,
            None if knew_lost => Err(self.shared.hold.lost_error()),
            None => Ok(()),
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LockClient, MemoryStore};

    fn entries(client: &LockClient) -> usize {
        client.inner.shared_reads.locks().len()
    }

    /// A lock's entry (with its listening) outlives its last hold by `LINGER`, and
    /// no more: one sweeper per client removes it, and a second entry that went idle
    /// later goes at its own time.
    #[tokio::test(start_paused = true)]
    async fn idle_entries_go_linger_after_their_last_hold() -> Result<(), Error> {
        let client = LockClient::in_memory(&MemoryStore::new());
        let (a, b) = (client.rwlock("a"), client.rwlock("b"));
        // Two shares of each: the second share starts listening, so the entry lingers.
        let a_shares = (a.read().await?, a.read().await?);
        let b_shares = (b.read().await?, b.read().await?);
        a_shares.0.release().await?;
        a_shares.1.release().await?;
        tokio::time::sleep(LINGER / 2).await;
        b_shares.0.release().await?;
        b_shares.1.release().await?;
        assert_eq!(entries(&client), 2, "both entries linger");
        tokio::time::sleep(LINGER / 2 + Duration::from_millis(100)).await;
        assert_eq!(
            entries(&client),
            1,
            "a's entry went LINGER after a's last hold"
        );
        tokio::time::sleep(LINGER / 2 - Duration::from_millis(200)).await;
        assert_eq!(entries(&client), 1, "b's entry lingers until its own time");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            entries(&client),
            0,
            "b's entry went LINGER after b's last hold"
        );
        Ok(())
    }
}

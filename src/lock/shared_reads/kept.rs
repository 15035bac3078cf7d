//! Kept reads ([`LockOptions::keep_reads`](crate::LockOptions::keep_reads)): when the
//! last share leaves, the client may keep the hold, idle and renewed, for up to the
//! configured bound; a read in that window takes it up with no request.
//!
//! A kept hold listens for call-backs (`call_backs.rs`: it subscribes and looks
//! once, in the background, unless the client listens on the lock already) and is
//! released at once when a writer calls it back (by a message, or by the answer of
//! the hold's renewal), or at the bound, whichever comes first; the bound counts
//! from the first time the hold was kept, however often reads take it up and leave
//! it again. A `write()` (or upgrade) on this client gives it back before asking
//! (`call_backs::make_way`), and so does dropping the client's last handle
//! (`SharedReads::abandon`). To everyone else it is a hold like any other.
//!
//! A kept hold that stays idle for a tenth of a second is marked so in the lock's
//! hash, for people and tools (`state()`, the CLI): a `k:<token>` field, set with
//! `HSET` and cleared with `HDEL` when a read takes the hold up or it goes; no
//! script reads it (state.lua reports it), and a busy lock, whose holds are never
//! idle that long, pays nothing for it.
//!
//! A write hold the client releases becomes its kept read hold (a downgrade, one
//! script as the release is), when it has no read hold of the lock already: the
//! next read then costs nothing, where it would cost an acquire, and the reads that
//! waited for the write in the process (`writes.rs`) join it at once. A writer
//! queued behind the write hold would not hear of it (its refusals came before
//! there was a reader to call back), so the client then looks whether one waits,
//! and if so calls the hold back: it takes no new share and goes with the last.

use std::collections::HashMap;
use std::sync::Arc;

use std::time::Duration;

use tokio::time::Instant;

use super::call_backs::{Listening, Starting, writer_waits};
use super::writes::LocalWrite;
use super::{Entry, Share, Shared, Slot, State, shareable};
use crate::backend::{Backend, Held};
use crate::error::ErrorChain;
use crate::guard::lease::{Lease, release_unconfirmed};
use crate::{Error, RwLock};

/// How long a kept hold is idle before its `k:` field marks it so.
const MARK_AFTER: Duration = Duration::from_millis(100);

impl Shared {
    /// Keeps the hold its last share left, if the process may: it is the hold new
    /// readers of the lock find, held, not called back, and keeping is on. Until
    /// the bound, unless a read takes it up meanwhile; it listens for call-backs.
    pub(super) fn keep(
        self: &Arc<Self>,
        locks: &mut HashMap<String, Entry>,
        state: &mut State,
    ) -> bool {
        let lock = &self.hold.lock;
        let (Some(bound), Ok(key)) = (lock.options().keep_reads, lock.key()) else {
            return false;
        };
        let Some(entry) = locks.get_mut(key).filter(|entry| entry.holds(self)) else {
            return false;
        };
        let client = lock.client();
        let closed = client.inner.live.is_closed() || client.is_abandoned();
        if state.lease.is_none() || self.called_back(state) || !self.hold.is_confirmed() || closed {
            return false;
        }
        let since = Instant::now();
        let ends = *state.first_kept.get_or_insert(since) + bound;
        if ends <= since {
            return false;
        }
        state.kept = Some(since);
        let shared = Arc::downgrade(self);
        let mut recalled = self.hold.recall_signal();
        self.hold.runtime.spawn(async move {
            if ends > since + MARK_AFTER {
                tokio::time::sleep_until(since + MARK_AFTER).await;
                let Some(held) = shared.upgrade() else {
                    return;
                };
                held.mark(since).await;
            }
            // At the bound, or when a renewal finds a writer waiting.
            tokio::select! {
                () = tokio::time::sleep_until(ends) => {}
                _ = recalled.wait_for(|recalled| *recalled) => {}
            }
            if let Some(shared) = shared.upgrade() {
                shared.stop_keeping(since);
            }
        });
        if matches!(entry.listening, Listening::No) {
            let starting = Starting::new(entry, lock, key);
            self.hold.runtime.spawn(starting.run());
        }
        true
    }

    /// Marks the hold kept idle (since `since`) in the lock's hash, unless a read took
    /// it up meanwhile; if one does while the mark is on its way, the mark goes again.
    async fn mark(self: &Arc<Self>, since: Instant) {
        {
            let mut state = self.state();
            if state.kept != Some(since) {
                return;
            }
            state.marked = true;
        }
        set_mark(&self.hold, true).await;
        if self.state().kept != Some(since) {
            set_mark(&self.hold, false).await;
        }
    }

    /// The hold is idle no more (taken up, or going): its mark goes, if it has one.
    pub(super) fn unmark(&self, state: &mut State) {
        if std::mem::take(&mut state.marked) {
            let hold = self.hold.clone();
            self.hold
                .runtime
                .spawn(async move { set_mark(&hold, false).await });
        }
    }

    /// The hold kept since `since` reached its bound, or was called back by its
    /// renewal: released, unless a read took it up meanwhile.
    fn stop_keeping(self: &Arc<Self>, since: Instant) {
        let reads = &self.hold.lock.client().inner.shared_reads;
        let mut locks = reads.locks();
        let mut state = self.state();
        if state.kept == Some(since) {
            drop(reads.give_back(&mut locks, self, &mut state));
        }
    }
}

/// Whether the client keeps a read hold of `lock` when it releases its write hold:
/// keeping is on, reads are shared, and the client holds no read of it already.
pub(crate) fn keeps_after_write(lock: &RwLock, writing: Option<&LocalWrite>) -> bool {
    if lock.options().keep_reads.is_none() || !shareable(lock) {
        return false;
    }
    let Ok(key) = lock.key() else {
        return false;
    };
    let reads = &lock.client().inner.shared_reads;
    // Another write of this client came after this one (it waits in line behind
    // it): the release hands the lock on to it, rather than keep a read it would
    // have to call back.
    reads.locks().get(key).is_none_or(|entry| {
        entry.slot.is_none() && writing.is_none_or(|writing| writing.is_latest(entry))
    })
}

/// Releases the write hold `lease`, keeping a read hold in its place (see the
/// module's docs); as [`Lease::release`] for the caller. The readers that waited
/// for the write (`writing`, `writes.rs`) join the read hold as soon as it is
/// one, as readers in line behind the write would have been let in together by
/// its release; if a writer waits behind it, the hold is then called back (it
/// takes no more shares, and goes with the last).
pub(crate) async fn release_keeping(
    lease: Lease,
    writing: Option<LocalWrite>,
) -> Result<(), Error> {
    // Bounded as any release: past the limit, what is left goes on in the
    // background (a downgrade not known done releases the hold as it drops; a kept
    // share, as it leaves).
    let Some(limit) = lease.hold().map(|hold| hold.lock.options().release_timeout) else {
        return Ok(());
    };
    tokio::time::timeout(limit, keeping(lease, writing))
        .await
        .unwrap_or_else(|_| Err(release_unconfirmed(limit)))
}

async fn keeping(lease: Lease, writing: Option<LocalWrite>) -> Result<(), Error> {
    let (read, writer) = match lease.downgrade_keeping().await {
        Ok(downgraded) => downgraded,
        // Released on the way out.
        Err(Error::Shutdown) => return Ok(()),
        Err(err) => return Err(err),
    };
    let share = Share::alone(read)?;
    let lock = share.shared.hold.lock.clone();
    let reads = &lock.client().inner.shared_reads;
    {
        let mut locks = reads.locks();
        let key = lock.key()?;
        let entry = locks.entry(key.to_owned()).or_insert_with(Entry::new);
        if entry.slot.is_none() {
            entry.slot = Some(Slot::Held(share.shared.clone()));
            entry.idle_since = None;
        }
    }
    // A writer waits behind the write: the hold takes no share but those of the
    // readers that came before that writer queued.
    if writer.is_some() {
        share.shared.state().called_back = true;
    }
    if let Some(writing) = &writing {
        writing.released(writer);
        writing.readers_joined().await;
    }
    if writer.is_none() && writer_waits(&lock).await {
        share.shared.state().called_back = true;
    }
    drop(writing);
    // Its share leaves: the hold is kept, unless it was called back or another
    // hold got there first.
    share.release().await
}

/// Sets (`on`) or clears the hold's `k:` field (with a TTL of a read lease if the
/// hash has none). A mark is for display only: one that fails is logged and
/// forgotten.
async fn set_mark(hold: &crate::guard::lease::Hold, on: bool) {
    let lock = &hold.lock;
    let lease = lock.options().read_lease;
    let sent = match lock.target() {
        Ok(target) => {
            let held = Held {
                token: &hold.token,
                lease,
            };
            lock.link().mark_kept(target, held, on).await
        }
        Err(err) => Err(err),
    };
    if let Err(err) = sent {
        tracing::debug!(lock = lock.name(), on, error = %ErrorChain(&err), "could not mark the kept read hold");
    }
}

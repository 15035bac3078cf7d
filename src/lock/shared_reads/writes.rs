//! The client's own writes, when it keeps reads: a read that comes while a task of
//! the same client writes the lock waits for that write here, in the process, and
//! then takes up the read hold the write's release keeps (`kept.rs`).
//!
//! Without this, such a read asks the server, waits in line behind the write and
//! is let in by its release as a hold of its own: an acquire and, later, a release
//! that reads kept after the write would not have needed (and the write's release
//! keeps nothing, since the client then has a read hold already). In the read-heavy
//! mix over 64 locks those reads were a quarter of every script sent.
//!
//! What a reader is owed does not change: under writer preference it would wait in
//! line behind the write at the server anyway, and it waits for no more than that
//! one write (the one under way when it came, until its hold ends or is lost); a
//! write that comes while it waits is not waited for again. A `try_read` meanwhile
//! is refused, as the server refuses a read while a writer waits (and not once the
//! write's hold is lost: it holds nothing then). With reader preference, or without
//! kept reads, reads go on to the server as before.
//!
//! The readers that came during the write keep their order with writers of other
//! clients, as in line: the write's release (a downgrade) answers how long before it
//! ran the writer first in line behind the write queued, if one did
//! ([`WriterInLine`]). The readers that came before that writer enter when the write
//! ends, together: the release wakes them and waits (briefly) for them to join the
//! read hold it keeps, and the writer waits for them. Those that came after it ask
//! the server and wait behind it; so does a reader that came less than the
//! downgrade's round trip before it (the one error there is, on the writer's side).
//! A writer waiting, the hold takes no share but theirs and goes with them; none
//! waiting, the release looks once more after they joined, for one that queued
//! meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::{Entry, shareable, writer_preferred};
use crate::RwLock;
use crate::guard::lease::{Hold, WriterInLine};

/// A write of the lock by a task of this client, from before its acquire until its
/// hold ends: readers of the lock wait for it. Dropped, it lets them go on.
pub(crate) struct LocalWrite {
    lock: RwLock,
    key: String,
    phase: watch::Sender<Phase>,
    early: Arc<Early>,
}

/// The readers that came while the write was under way and still wait for it, or
/// are joining the read hold its release keeps: the release lets them join before
/// it lets that hold go with its own share.
#[derive(Default)]
struct Early {
    count: AtomicUsize,
    /// Notified when the count falls to zero.
    done: Notify,
}

/// How long a release that keeps a read waits for the readers that waited for the
/// write to join it (they are woken at once; this only bounds a starved task).
const JOIN_WAIT: Duration = Duration::from_millis(100);

/// How far a write of this client has come, as the readers waiting for it see it.
#[derive(Clone)]
pub(super) enum Phase {
    /// Acquiring (the readers wait for it, however long it waits itself).
    Asking,
    /// Granted this hold: the readers also stop waiting if it is lost.
    Held(Arc<Hold>),
    /// Released, with a read hold kept in its place that the readers which waited
    /// may join, unless they came after the writer that waited first in line behind
    /// the write then (if one did) queued; one that comes now waits until the client
    /// has looked whether a writer waits behind it.
    Released(Option<WriterInLine>),
}

/// What a reader that found a write under way waits on.
#[derive(Clone)]
pub(super) struct Writing {
    phase: watch::Receiver<Phase>,
    early: Arc<Early>,
}

/// A reader that came while the write was under way, until its read returns: the
/// write's release waits for it to join (`LocalWrite::readers_joined`).
pub(super) struct Ticket(Arc<Early>);

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.done.notify_waiters();
        }
    }
}

impl Writing {
    /// A ticket for a reader that comes while the write is still under way (none
    /// once it was released: such a reader waits until the client has looked
    /// whether a writer waits behind it).
    pub(super) fn ticket(&self) -> Option<Ticket> {
        if matches!(*self.phase.borrow(), Phase::Released(_)) {
            return None;
        }
        self.early.count.fetch_add(1, Ordering::AcqRel);
        Some(Ticket(self.early.clone()))
    }
}

/// A write of `lock` starts: the readers of it that come from now on wait for it,
/// if the client keeps reads of the lock under writer preference (see the module's
/// docs); else `None`.
pub(crate) fn start(lock: &RwLock) -> Option<LocalWrite> {
    if lock.options().keep_reads.is_none() || !shareable(lock) || !writer_preferred(lock) {
        return None;
    }
    let key = lock.key().ok()?;
    let (phase, writing) = watch::channel(Phase::Asking);
    let early = Arc::new(Early::default());
    let reads = &lock.client().inner.shared_reads;
    reads
        .locks()
        .entry(key.to_owned())
        .or_insert_with(Entry::new)
        .writing = Some(Writing {
        phase: writing,
        early: early.clone(),
    });
    Some(LocalWrite {
        lock: lock.internal(),
        key: key.to_owned(),
        phase,
        early,
    })
}

impl LocalWrite {
    /// The write is granted `hold`.
    pub(crate) fn granted(&self, hold: Option<&Arc<Hold>>) {
        if let Some(hold) = hold {
            self.phase.send_replace(Phase::Held(hold.clone()));
        }
    }

    /// Whether this is the latest write of the client on the lock (`entry`'s).
    pub(super) fn is_latest(&self, entry: &Entry) -> bool {
        entry
            .writing
            .as_ref()
            .is_some_and(|writing| writing.phase.same_channel(&self.phase.subscribe()))
    }

    /// The write is released, and a read hold kept in its place: the readers that
    /// waited may join it, but for those that came after `writer` queued.
    pub(super) fn released(&self, writer: Option<WriterInLine>) {
        self.phase.send_replace(Phase::Released(writer));
    }

    /// Resolves once the readers that waited for the write have joined (or gave
    /// up), or after [`JOIN_WAIT`].
    pub(super) async fn readers_joined(&self) {
        let joined = async {
            loop {
                let done = self.early.done.notified();
                if self.early.count.load(Ordering::Acquire) == 0 {
                    return;
                }
                done.await;
            }
        };
        let _ = tokio::time::timeout(JOIN_WAIT, joined).await;
    }
}

impl Drop for LocalWrite {
    fn drop(&mut self) {
        let reads = &self.lock.client().inner.shared_reads;
        let mut locks = reads.locks();
        let Some(entry) = locks.get_mut(&self.key) else {
            return;
        };
        if entry
            .writing
            .as_ref()
            .is_some_and(|writing| writing.phase.same_channel(&self.phase.subscribe()))
        {
            entry.writing = None;
            if entry.slot.is_none() {
                reads.emptied(&mut locks, &self.lock, &self.key);
            }
        }
    }
}

/// Whether the write that `writing` follows may still hold: a `try_read` is refused
/// only while it may, as the server refuses a read only while a writer holds or
/// waits (a lost write hold holds nothing).
pub(super) fn under_way(writing: &Writing) -> bool {
    !matches!(&*writing.phase.borrow(), Phase::Held(hold) if !hold.is_held())
}

/// Waits until the write that `writing` follows ends: it is released (for a reader
/// that came before that), its hold is lost, or it is over. True when the reader,
/// which came at `came`, then joins the read hold the release kept, as a reader in
/// line behind the write would have been let in: it came before the write was
/// released and before any writer that waits behind the write queued. Otherwise it
/// reads as any reader does from then on (and waits behind such a writer).
pub(super) async fn wait_for(writing: Writing, came: Instant) -> bool {
    let mut writing = writing.phase;
    let late = matches!(*writing.borrow(), Phase::Released(_));
    loop {
        let phase = writing.borrow_and_update().clone();
        let over = async { writing.changed().await.is_err() };
        match phase {
            Phase::Released(writer) if !late => {
                return writer.is_none_or(|writer| !writer.may_follow(came));
            }
            Phase::Held(hold) => {
                tokio::select! {
                    over = over => if over { return false },
                    () = hold.lost() => return false,
                }
            }
            Phase::Asking | Phase::Released(_) => {
                if over.await {
                    return false;
                }
            }
        }
    }
}

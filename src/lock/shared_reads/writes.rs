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
//! is refused, as the server refuses a read while a writer waits. With reader
//! preference, or without kept reads, reads go on to the server as before.

use std::sync::Arc;

use tokio::sync::watch;

use super::{Entry, shareable, writer_preferred};
use crate::RwLock;
use crate::guard::lease::Hold;

/// A write of the lock by a task of this client, from before its acquire until its
/// hold ends: readers of the lock wait for it. Dropped, it lets them go on.
pub(crate) struct LocalWrite {
    lock: RwLock,
    key: String,
    phase: watch::Sender<Phase>,
}

/// How far a write of this client has come, as the readers waiting for it see it.
#[derive(Clone)]
pub(super) enum Phase {
    /// Acquiring (the readers wait for it, however long it waits itself).
    Asking,
    /// Granted this hold: the readers also stop waiting if it is lost.
    Held(Arc<Hold>),
    /// Released, with a read hold kept in its place that the readers which waited
    /// may join; one that comes now waits until the client has looked whether a
    /// writer waits behind it.
    Released,
}

/// What a reader that found a write under way waits on.
pub(super) type Writing = watch::Receiver<Phase>;

/// A write of `lock` starts: the readers of it that come from now on wait for it,
/// if the client keeps reads of the lock under writer preference (see the module's
/// docs); else `None`.
pub(crate) fn start(lock: &RwLock) -> Option<LocalWrite> {
    if lock.options().keep_reads.is_none() || !shareable(lock) || !writer_preferred(lock) {
        return None;
    }
    let key = lock.key().ok()?;
    let (phase, writing) = watch::channel(Phase::Asking);
    let reads = &lock.client().inner.shared_reads;
    reads
        .locks()
        .entry(key.to_owned())
        .or_insert_with(Entry::new)
        .writing = Some(writing);
    Some(LocalWrite {
        lock: lock.internal(),
        key: key.to_owned(),
        phase,
    })
}

impl LocalWrite {
    /// The write is granted `hold`.
    pub(crate) fn granted(&self, hold: Option<&Arc<Hold>>) {
        if let Some(hold) = hold {
            self.phase.send_replace(Phase::Held(hold.clone()));
        }
    }

    /// The write is released, and a read hold kept in its place: the readers that
    /// waited may join it.
    pub(super) fn released(&self) {
        self.phase.send_replace(Phase::Released);
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
            .is_some_and(|writing| writing.same_channel(&self.phase.subscribe()))
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
    !matches!(&*writing.borrow(), Phase::Held(hold) if !hold.is_held())
}

/// Waits until the write that `writing` follows ends: it is released (for a reader
/// that came before that), its hold is lost, or it is over.
pub(super) async fn wait_for(mut writing: Writing) {
    let late = matches!(*writing.borrow(), Phase::Released);
    loop {
        let phase = writing.borrow_and_update().clone();
        let over = async { writing.changed().await.is_err() };
        match phase {
            Phase::Released if !late => return,
            Phase::Held(hold) => {
                tokio::select! {
                    over = over => if over { return },
                    () = hold.lost() => return,
                }
            }
            Phase::Asking | Phase::Released => {
                if over.await {
                    return;
                }
            }
        }
    }
}

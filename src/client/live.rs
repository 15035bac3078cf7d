//! What a client has in flight: its live holds and its pending acquires, so that
//! [`LockClient::shutdown`](crate::LockClient::shutdown) can end them all.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::{Notify, watch};

use crate::protocol::token::Token;
use crate::{LockClient, Mode, RwLock};

/// The registry: one entry per live hold or pending acquire, and whether the client
/// is shut down.
pub(crate) struct Live {
    next: AtomicU64,
    entries: Mutex<HashMap<u64, Entry>>,
    closed: watch::Sender<bool>,
    /// Notified whenever an entry goes.
    left: Notify,
}

/// A token the client may hold something with, and what ends it locally.
struct Entry {
    lock: RwLock,
    token: Token,
    /// What it holds or waits for, for the errors of a shutdown.
    mode: Mode,
    kind: Kind,
}

/// What an entry stands for.
pub(crate) enum Kind {
    /// A guard's hold; the callback marks it lost and stops its renewal.
    Hold(Box<dyn Fn() + Send + Sync>),
    /// An acquire that has not returned yet: it watches [`Live::closed`] and leaves.
    Pending,
}

impl Live {
    pub(crate) fn new() -> Self {
        Live {
            next: AtomicU64::new(0),
            entries: Mutex::new(HashMap::new()),
            closed: watch::channel(false).0,
            left: Notify::new(),
        }
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the client is shut down.
    pub(crate) fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Resolves once the client is shut down.
    pub(crate) async fn closed(&self) {
        let mut closed = self.closed.subscribe();
        let _ = closed.wait_for(|closed| *closed).await;
    }

    /// Ends every hold locally (lost, renewal stopped) and returns every entry's
    /// lock, token and mode, for the caller to release; from now on the client is
    /// closed.
    pub(crate) fn close(&self) -> Vec<(RwLock, Token, Mode)> {
        self.closed.send_replace(true);
        self.entries()
            .values()
            .map(|entry| {
                if let Kind::Hold(end) = &entry.kind {
                    end();
                }
                (entry.lock.clone(), entry.token.clone(), entry.mode)
            })
            .collect()
    }

    /// An acquire still pending: its lock's name and what it asks for.
    pub(crate) fn a_pending(&self) -> Option<(String, Mode)> {
        self.entries()
            .values()
            .find(|entry| matches!(entry.kind, Kind::Pending))
            .map(|entry| (entry.lock.name().to_owned(), entry.mode))
    }

    /// Resolves once no acquire is pending.
    pub(crate) async fn no_pending(&self) {
        loop {
            let left = self.left.notified();
            let pending = self
                .entries()
                .values()
                .any(|entry| matches!(entry.kind, Kind::Pending));
            if !pending {
                return;
            }
            left.await;
        }
    }
}

/// An entry while it lives: dropping it removes the entry.
pub(crate) struct Registration {
    client: LockClient,
    id: u64,
}

impl Registration {
    /// Adds an entry for `token` on `lock`, holding or waiting for `mode`.
    pub(crate) fn new(lock: &RwLock, token: &Token, mode: Mode, kind: Kind) -> Self {
        let client = lock.client().clone();
        let live = &client.inner.live;
        let id = live.next.fetch_add(1, Ordering::Relaxed);
        live.entries().insert(
            id,
            Entry {
                lock: lock.internal(),
                token: token.clone(),
                mode,
                kind,
            },
        );
        Registration { client, id }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let live = &self.client.inner.live;
        live.entries().remove(&self.id);
        live.left.notify_waiters();
    }
}

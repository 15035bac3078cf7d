//! Renewals: one timer queue per client renews every hold that lives long enough.
//!
//! A hold joins the queue when it is granted, due one renewal period after its
//! grant was sent (a third of the time it counts, at most a second for a read hold
//! its client's tasks may join: `RwLock::renew_period`; sooner for a hold handed
//! over by another client's release), or with `auto_renew` off at its deadline, to
//! be marked lost then. Most holds are released long before that: joining and leaving are a
//! map insertion and removal, so such a hold starts no task and arms no timer of its
//! own. One driver task per client sleeps until the earliest entry is due; a new
//! entry wakes it only when it is due earlier than the driver's timer, or the driver
//! waits with no timer at all (the queue was empty when its timer last fired): in a
//! steady stream of short holds, about once per renewal period, not once per hold.
//!
//! A due renewal runs as a task of its own on the runtime its hold was acquired on:
//! a slow node delays only the renewals of its own locks, a guard stopping its
//! renewal can abort and await exactly that task, and a hold's renewals end with
//! its runtime, as its guard's drop-release does. After a successful renewal the
//! task queues the hold again, a period later.
//!
//! The driver runs on the runtime of the hold that first needed it. If that runtime
//! shuts down, every queued hold is renewed at once on its own runtime and the next
//! one queued starts a new driver there; holds whose runtime is gone too end with
//! their leases.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until};
use tracing::Instrument;

use crate::Error;
use crate::error::ErrorChain;
use crate::guard::lease::Hold;
use crate::metrics::LostCause;

/// How long a failed renewal waits before trying again (while the lease lasts).
const RENEW_RETRY: Duration = Duration::from_millis(100);

/// A client's renewal queue; dropping it (the client is gone) stops its driver.
pub(crate) struct Renewals {
    shared: Arc<Shared>,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Wakes the driver: an entry is due before its timer, or the client is gone.
    wake: Notify,
    next_id: AtomicU64,
}

#[derive(Default)]
struct Queue {
    /// The queued holds by when they are due (the id keeps equal instants apart).
    due: BTreeMap<(Instant, u64), Arc<Entry>>,
    /// When the driver looks at the queue next; `None` while it waits for a wake-up
    /// only, or no driver runs.
    armed: Option<Instant>,
    driver_running: bool,
    closed: bool,
}

/// One hold's place in the queue, shared by its guard and the driver.
struct Entry {
    id: u64,
    hold: Arc<Hold>,
    state: Mutex<State>,
}

enum State {
    /// Waiting in the queue, due then.
    Queued(Instant),
    /// Its renewal task is running (it queues the hold again when done).
    Running(JoinHandle<()>),
    /// Stopped by its guard, or the lease is lost: never renewed again.
    Stopped,
}

/// The guard's handle on its hold's renewals.
#[derive(Clone)]
pub(crate) struct Renewal {
    shared: Arc<Shared>,
    entry: Arc<Entry>,
}

impl Renewals {
    pub(crate) fn new() -> Self {
        Renewals {
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue::default()),
                wake: Notify::new(),
                next_id: AtomicU64::new(0),
            }),
        }
    }

    /// Queues `hold`, granted just now: due at `first` for its first renewal (with
    /// `auto_renew` off, at its deadline, to be marked lost then).
    pub(crate) fn start(&self, hold: Arc<Hold>, first: Instant) -> Renewal {
        let due = if hold.lock.options().auto_renew {
            first
        } else {
            hold.deadline()
        };
        let entry = Arc::new(Entry {
            id: self.shared.next_id.fetch_add(1, Ordering::Relaxed),
            hold,
            state: Mutex::new(State::Stopped),
        });
        self.shared.enqueue(&entry, &mut entry.state(), due);
        Renewal {
            shared: self.shared.clone(),
            entry,
        }
    }
}

impl Drop for Renewals {
    fn drop(&mut self) {
        self.shared.queue().closed = true;
        self.shared.wake.notify_one();
    }
}

impl Renewal {
    /// Stops the hold's renewals: out of the queue, or its running renewal aborted.
    /// Never blocks; see [`stop_and_wait`](Self::stop_and_wait).
    pub(crate) fn stop(&self) {
        if let Some(task) = self.entry.stop(&self.shared) {
            task.abort();
        }
    }

    /// Stops the hold's renewals and waits until a renewal that was running has
    /// stopped: no renewal request of this hold is sent after this returns.
    pub(crate) async fn stop_and_wait(&self) {
        if let Some(task) = self.entry.stop(&self.shared) {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Entry {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks the entry stopped; returns its running renewal, if any.
    fn stop(&self, shared: &Shared) -> Option<JoinHandle<()>> {
        match std::mem::replace(&mut *self.state(), State::Stopped) {
            State::Queued(due) => {
                // No wake-up: the driver finds nothing due when its timer fires.
                shared.queue().due.remove(&(due, self.id));
                None
            }
            State::Running(task) => Some(task),
            State::Stopped => None,
        }
    }

    /// The entry is due: renew it in a task on its hold's runtime, or, without
    /// auto-renewal, mark it lost if its deadline has passed (`extend()` may have
    /// moved it) and queue it again otherwise.
    fn run_due(self: Arc<Self>, shared: &Arc<Shared>) {
        let mut state = self.state();
        if !matches!(*state, State::Queued(_)) {
            return; // stopped meanwhile
        }
        if self.hold.lock.options().auto_renew {
            // In the hold's span: its events (renewed, retrying, lost) nest there.
            let renewal = renew(self.clone(), shared.clone()).instrument(self.hold.span.clone());
            let task = self.hold.runtime.spawn(renewal);
            *state = State::Running(task);
            return;
        }
        let deadline = self.hold.deadline();
        if Instant::now() < deadline {
            shared.enqueue(&self, &mut state, deadline);
        } else {
            *state = State::Stopped;
            self.hold.mark_lost(LostCause::Expired);
        }
    }
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts `entry` (whose `state` the caller holds locked) in the queue, due at
    /// `due`, waking the driver (or starting one) only if it would otherwise look
    /// too late.
    fn enqueue(self: &Arc<Self>, entry: &Arc<Entry>, state: &mut State, due: Instant) {
        *state = State::Queued(due);
        let mut queue = self.queue();
        if queue.closed {
            return;
        }
        queue.due.insert((due, entry.id), entry.clone());
        let early = queue.armed.is_none_or(|armed| due < armed);
        if early {
            queue.armed = Some(due);
        }
        let start = !queue.driver_running;
        queue.driver_running = true;
        drop(queue);
        if start {
            let driver = Driver {
                shared: self.clone(),
            };
            entry.hold.runtime.spawn(driver.run());
        } else if early {
            self.wake.notify_one();
        }
    }
}

/// The driver task: runs due entries, then sleeps until the next one is due or a
/// wake-up comes. Dropped with its runtime (or never polled, if that runtime is
/// already gone), it hands the queue over to the holds' own runtimes.
struct Driver {
    shared: Arc<Shared>,
}

impl Driver {
    async fn run(self) {
        loop {
            let (due, next) = {
                let mut queue = self.shared.queue();
                if queue.closed {
                    return;
                }
                let now = Instant::now();
                let mut due = Vec::new();
                while let Some(entry) = queue.due.first_entry() {
                    if entry.key().0 > now {
                        break;
                    }
                    due.push(entry.remove());
                }
                queue.armed = queue.due.first_key_value().map(|(&(at, _), _)| at);
                (due, queue.armed)
            };
            for entry in due {
                entry.run_due(&self.shared);
            }
            match next {
                Some(at) => tokio::select! {
                    () = sleep_until(at) => {}
                    () = self.shared.wake.notified() => {}
                },
                None => self.shared.wake.notified().await,
            }
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let orphans: Vec<Arc<Entry>> = {
            let mut queue = self.shared.queue();
            queue.driver_running = false;
            queue.armed = None;
            if queue.closed {
                return;
            }
            std::mem::take(&mut queue.due).into_values().collect()
        };
        if !orphans.is_empty() {
            tracing::debug!(
                holds = orphans.len(),
                "the runtime running lease renewals shut down; renewing the queued holds on their own runtimes"
            );
        }
        for entry in orphans {
            let runtime = entry.hold.runtime.clone();
            let shared = self.shared.clone();
            // Runs the entry as if due; on a runtime that is gone too, nothing runs
            // and the hold ends with its lease.
            runtime.spawn(async move { entry.run_due(&shared) });
        }
    }
}

/// A due renewal: renews until it succeeds (then queues the hold a period later),
/// the lease is found lost, or the local deadline passes.
async fn renew(entry: Arc<Entry>, shared: Arc<Shared>) {
    let hold = &entry.hold;
    loop {
        match hold.renew_once().await {
            Ok(()) => break,
            Err(Error::LeaseLost { .. }) => {
                *entry.state() = State::Stopped;
                return;
            }
            Err(err) => {
                tracing::debug!(
                    lock = hold.lock.name(),
                    mode = ?hold.mode,
                    error = %ErrorChain(&err),
                    "renewal failed; retrying"
                );
                let left = hold.deadline().saturating_duration_since(Instant::now());
                sleep(RENEW_RETRY.min(left)).await;
            }
        }
    }
    let due = Instant::now() + hold.renew_every;
    let mut state = entry.state();
    // Queued again only if its guard has not stopped it meanwhile.
    if matches!(*state, State::Running(_)) {
        shared.enqueue(&entry, &mut state, due);
    }
}

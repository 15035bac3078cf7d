//! The lease behind every guard: renewal, the lost signal, release and the drop
//! fallback, written once for both guard kinds.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until, timeout};

use crate::error::Chain;
use crate::live::{Kind, Registration};
use crate::scripts::LockMode;
use crate::token::Token;
use crate::{Error, FencedWrites, RwLock};

/// How long a failed renewal waits before trying again (while the lease lasts).
const RENEW_RETRY: Duration = Duration::from_millis(100);

/// A hold on the lock: its token, and a background task that renews it.
pub(crate) struct Lease {
    /// `None` once released (explicitly or by Drop).
    held: Option<Held>,
}

struct Held {
    lock: RwLock,
    token: Token,
    mode: LockMode,
    status: Arc<Status>,
    renewal: JoinHandle<()>,
    runtime: Handle,
    /// The hold's entry in the client's registry, for `LockClient::shutdown`.
    _registration: Registration,
}

/// What the guard and its renewal task share.
struct Status {
    /// Turns true, once, when the lease is known lost.
    lost: watch::Sender<bool>,
    /// The local monotonic deadline: when the last acquire/renewal was sent, plus
    /// [`RwLock::held_for`] (the lease, or the original clients' shorter timeout).
    /// Redis's deadline is never earlier, nor is the moment an original client may
    /// judge the hold's stamp stale.
    deadline: Mutex<Instant>,
}

impl Status {
    fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Moves the deadline to `deadline` if that is later (two renewals may finish
    /// out of order: the later send decides).
    fn extend(&self, deadline: Instant) {
        let mut current = self.deadline.lock().unwrap_or_else(PoisonError::into_inner);
        *current = (*current).max(deadline);
    }

    fn mark_lost(&self) {
        self.lost.send_replace(true);
    }

    fn is_held(&self) -> bool {
        !*self.lost.borrow() && Instant::now() < self.deadline()
    }
}

impl Lease {
    /// Starts tracking a hold granted to `token`; it counts for `lasts` after
    /// `sent` (when the request that granted it was sent) until renewed.
    pub(crate) fn start(
        lock: RwLock,
        token: Token,
        mode: LockMode,
        sent: Instant,
        lasts: Duration,
    ) -> Self {
        let (lost, _) = watch::channel(false);
        let status = Arc::new(Status {
            lost,
            deadline: Mutex::new(sent + lasts),
        });
        let runtime = Handle::current();
        // A hold that counts less than usual (handed over) renews sooner the first time.
        let first = (sent + lasts / 3).max(Instant::now());
        let renewal = runtime.spawn(renew(
            lock.clone(),
            token.clone(),
            mode,
            status.clone(),
            first,
        ));
        let end = {
            let (status, renewal) = (status.clone(), renewal.abort_handle());
            move || {
                renewal.abort();
                status.mark_lost();
            }
        };
        let registration = Registration::new(&lock, &token, Kind::Hold(Box::new(end)));
        Lease {
            held: Some(Held {
                lock,
                token,
                mode,
                status,
                renewal,
                runtime,
                _registration: registration,
            }),
        }
    }

    pub(crate) fn is_held(&self) -> bool {
        self.held.as_ref().is_some_and(|held| held.status.is_held())
    }

    /// Resolves once the lease is known lost.
    pub(crate) async fn lost(&self) {
        if let Some(held) = &self.held {
            let mut lost = held.status.lost.subscribe();
            let _ = lost.wait_for(|lost| *lost).await;
        }
    }

    /// Applies `writes` if this hold is still the lock's writer; a refusal means the
    /// lease is gone, and marks it lost. Refused without I/O once the guard no longer
    /// believes it holds.
    pub(crate) async fn fenced_write(&self, writes: &FencedWrites) -> Result<(), Error> {
        let Some(held) = self.held.as_ref().filter(|held| held.status.is_held()) else {
            return Err(Error::LeaseLost);
        };
        if held.lock.fenced_write(&held.token, writes).await? {
            Ok(())
        } else {
            held.status.mark_lost();
            Err(Error::LeaseLost)
        }
    }

    pub(crate) fn token(&self) -> Option<&Token> {
        self.held.as_ref().map(|held| &held.token)
    }

    /// The lock's name (empty once released: guards never show that state).
    pub(crate) fn name(&self) -> &str {
        self.held.as_ref().map_or("", |held| held.lock.name())
    }

    /// The local deadline: the hold counts as held until then unless renewed.
    pub(crate) fn deadline(&self) -> std::time::Instant {
        self.held
            .as_ref()
            .map_or_else(Instant::now, |held| held.status.deadline())
            .into_std()
    }

    /// Renews the hold now, as the renewal task does.
    pub(crate) async fn extend(&self) -> Result<(), Error> {
        let Some(held) = &self.held else {
            return Err(Error::LeaseLost);
        };
        renew_once(&held.lock, &held.token, held.mode, &held.status).await
    }

    /// Ends the hold. `Err(LeaseLost)` when the lease was already known lost (the
    /// release is still sent, to tidy up).
    pub(crate) async fn release(mut self) -> Result<(), Error> {
        let Some(held) = self.held.take() else {
            return Ok(());
        };
        held.renewal.abort();
        let was_held = held.status.is_held();
        let limit = held.lock.options().release_timeout;
        let attempt = held
            .lock
            .release_token_until(&held.token, held.status.deadline());
        let released = match timeout(limit, attempt).await {
            Ok(released) => released.map(|_| ()),
            Err(_) => {
                tracing::debug!(lock = held.lock.name(), mode = ?held.mode, ?limit, "release unconfirmed; going on in the background");
                held.release_in_background();
                Err(Error::Redis(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "the release was not confirmed within {limit:?}; it goes on in the background until the lease ends"
                    ),
                ))))
            }
        };
        if !was_held {
            return Err(Error::LeaseLost);
        }
        released
    }

    /// Turns a write hold into a read hold, atomically.
    ///
    /// The hold stays in `self` until the downgrade is known done, so an error or a
    /// dropped future releases it in the background (in whichever mode it is then)
    /// through `Drop`. The write renewal is stopped first: no renewal of this guard
    /// is sent after the downgrade (one already sent is refused by the script, which
    /// renews only the mode it is asked for).
    pub(crate) async fn downgrade(mut self) -> Result<Lease, Error> {
        let Some(held) = self.held.as_mut() else {
            return Err(Error::LeaseLost);
        };
        held.stop_renewal().await;
        if !held.status.is_held() {
            return Err(Error::LeaseLost);
        }
        let sent = Instant::now();
        if !held.lock.downgrade_token(&held.token).await? {
            return Err(Error::LeaseLost);
        }
        if held.lock.client().inner.live.is_closed() {
            // Shut down meanwhile: `self` releases the read hold on its way out.
            return Err(Error::Shutdown);
        }
        match self.held.take() {
            Some(held) => {
                let lasts = held.lock.held_for(LockMode::Read);
                Ok(Lease::start(
                    held.lock,
                    held.token,
                    LockMode::Read,
                    sent,
                    lasts,
                ))
            }
            None => Err(Error::LeaseLost),
        }
    }
}

impl Held {
    /// Stops the renewal task and waits until it has stopped.
    async fn stop_renewal(&mut self) {
        self.renewal.abort();
        let _ = (&mut self.renewal).await;
    }

    /// The drop fallback: release on the runtime captured at acquire time, never
    /// blocking; on failure the hold ends when its lease does.
    fn release_in_background(self) {
        let until = self.status.deadline();
        let Held {
            lock,
            token,
            mode,
            renewal,
            runtime,
            ..
        } = self;
        renewal.abort();
        let unfinished = Unfinished {
            lock: lock.name().to_owned(),
            mode,
            done: false,
        };
        runtime.spawn(async move {
            match lock.release_token_until(&token, until).await {
                Ok(_) => tracing::debug!(lock = lock.name(), ?mode, "released on drop"),
                Err(err) => tracing::warn!(
                    lock = lock.name(), ?mode, error = %Chain(&err),
                    "release on drop failed; the hold ends when its lease does"
                ),
            }
            unfinished.finish();
        });
    }
}

/// Says so when a background release never ran to its end: the runtime shut down
/// first (a guard dropped while the process exits).
struct Unfinished {
    lock: String,
    mode: LockMode,
    done: bool,
}

impl Unfinished {
    /// The release ran to its end: nothing to say.
    fn finish(mut self) {
        self.done = true;
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        tracing::warn!(
            lock = self.lock,
            mode = ?self.mode,
            "the runtime shut down before a dropped guard's release ran; the hold ends \
             when its lease does (release guards, or call LockClient::shutdown, before \
             the runtime stops)"
        );
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(held) = self.held.take() {
            held.release_in_background();
        }
    }
}

/// The renewal task: renews every third of the time a hold counts
/// ([`RwLock::renew_period`]) until the hold is lost or the guard goes. Without
/// auto-renewal it only marks the lease lost when its deadline (which `extend()` may
/// move) passes.
async fn renew(lock: RwLock, token: Token, mode: LockMode, status: Arc<Status>, first: Instant) {
    if !lock.options().auto_renew {
        while Instant::now() < status.deadline() {
            sleep_until(status.deadline()).await;
        }
        status.mark_lost();
        return;
    }
    let period = lock.renew_period(mode);
    let mut due = first;
    loop {
        sleep_until(due).await;
        due = Instant::now() + period;
        loop {
            match renew_once(&lock, &token, mode, &status).await {
                Ok(()) => break,
                Err(Error::LeaseLost) => return,
                Err(err) => {
                    tracing::debug!(
                        lock = lock.name(),
                        ?mode,
                        error = %Chain(&err),
                        "renewal failed; retrying"
                    );
                    let left = status.deadline().saturating_duration_since(Instant::now());
                    sleep(RENEW_RETRY.min(left)).await;
                }
            }
        }
    }
}

/// One renewal, bounded by the local deadline. `Ok`: renewed, the deadline moved on.
/// `Err(LeaseLost)`: the lease is lost (the hold was gone, an original-design client
/// held beside it, or the deadline passed first), and marked so. Any other error:
/// this attempt failed; time may remain for another.
async fn renew_once(
    lock: &RwLock,
    token: &Token,
    mode: LockMode,
    status: &Status,
) -> Result<(), Error> {
    let sent = Instant::now();
    let deadline = status.deadline();
    let lost = |why: &str| {
        tracing::warn!(lock = lock.name(), ?mode, "lease lost: {why}");
        status.mark_lost();
        Err(Error::LeaseLost)
    };
    if *status.lost.borrow() {
        return Err(Error::LeaseLost);
    }
    if sent >= deadline {
        return lost("Redis unreachable until the lease ended");
    }
    match timeout(deadline - sent, lock.renew_token(token, mode)).await {
        Ok(Ok(true)) => {
            status.extend(sent + lock.held_for(mode));
            tracing::trace!(lock = lock.name(), ?mode, "renewed");
            Ok(())
        }
        Ok(Ok(false)) => {
            lost("at renewal the hold was gone, or a client of the original design held beside it")
        }
        Ok(Err(err)) => Err(err),
        Err(_) => lost("Redis unreachable until the lease ended"),
    }
}

//! The lease behind every guard: the hold's deadline and lost signal, one renewal,
//! release and the drop fallback, written once for both guard kinds. When renewals
//! are due is the client's renewal queue's business (`renewals.rs`).
//!
//! Each hold has a `debug` span `hold` (fields `lock`, `mode`, `fencing_token` for a
//! write hold), made at its grant: its renewals and its release (a span `release`
//! inside it) run in it, and so does the `warn` event that says its lease was lost
//! (field `cause`). Its metrics are its [`Holding`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::time::{Instant, timeout};
use tracing::{Instrument, Span};

use crate::client::live::{Kind, Registration};
use crate::error::{Doing, ErrorChain};
use crate::guard::renewals::Renewal;
use crate::lock::waiting::upgrade;
use crate::metrics::{self, Holding, LostCause, Mode};
use crate::protocol::token::Token;
use crate::protocol::{Access, Downgraded, LockMode, Renewed};
use crate::{Error, FencedWrites, Operation, RwLock};

/// How long after sending a hold's last answered acquire or renewal the client's
/// tasks may still join it without asking the server. A forced release that ends
/// read holds keeps writers out for longer (`FORCED_FENCE`, 3 s, in
/// lua/force_release.lua), so a task that joins before its process hears of the
/// release never reads beside the next writer, even if the release's message is
/// lost (`join_trust_ends_before_the_forced_release_fence` checks the two).
pub(crate) const JOIN_TRUST: Duration = Duration::from_secs(2);

/// A hold on the lock: its token, renewed from the client's renewal queue.
pub(crate) struct Lease {
    /// `None` once released (explicitly or by Drop).
    held: Option<Held>,
    /// The lock, for the errors of a lease already released or moved on.
    lock: RwLock,
}

struct Held {
    hold: Arc<Hold>,
    renewal: Renewal,
    /// The hold's entry in the client's registry, for `LockClient::shutdown`.
    _registration: Registration,
}

/// What the guard and the renewal queue share about a hold.
pub(crate) struct Hold {
    pub(crate) lock: RwLock,
    pub(crate) token: Token,
    pub(crate) mode: LockMode,
    /// How long after a renewal the next one is due ([`RwLock::renew_period`]).
    pub(crate) renew_every: Duration,
    /// The runtime the hold was acquired on: its renewals and its drop-release run
    /// there.
    pub(crate) runtime: Handle,
    /// Turns true, once, when the lease is known lost.
    lost: watch::Sender<bool>,
    /// Turns true, once, when a renewal of this read hold found a writer or an
    /// upgrade waiting for the lock (the call-back no lost message can take away:
    /// a shared hold then takes no new share, a kept one goes).
    recalled: watch::Sender<bool>,
    /// The last renewal failed (no answer, an error): until one succeeds, the
    /// client cannot be sure the server still has the hold.
    doubted: AtomicBool,
    /// The client's shutdown ended the hold and sent its release: the guard has
    /// nothing left to release.
    shut_down: AtomicBool,
    /// The local monotonic deadline: when the last acquire/renewal was sent, plus
    /// [`RwLock::held_for`] (the lease, or the original clients' shorter timeout).
    /// Redis's deadline is never earlier, nor is the moment an original client may
    /// judge the hold's stamp stale.
    deadline: Mutex<Instant>,
    /// Whether an upgrade of this hold is on its way, or done.
    moving: Mutex<Moving>,
    /// The hold's span: its renewals and its release run in it.
    pub(crate) span: Span,
    /// The hold's mode (upgradable or not) and metrics.
    holding: Holding,
}

/// An upgradable hold's upgrade, as its renewals see it: a renewal that finds the
/// read hold gone while the upgrade is on its way may be seeing the upgrade done,
/// so the upgrade's outcome decides whether the lease was lost.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Moving {
    Staying,
    /// `gone`: a renewal found the read hold gone meanwhile.
    Upgrading {
        gone: bool,
    },
    /// The hold became the write hold: it is no longer this lease's to renew.
    Moved,
}

impl Hold {
    pub(crate) fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Moves the deadline to `deadline` if that is later (two renewals may finish
    /// out of order: the later send decides).
    fn extend(&self, deadline: Instant) {
        let mut current = self.deadline.lock().unwrap_or_else(PoisonError::into_inner);
        *current = (*current).max(deadline);
    }

    /// The lease is lost for `cause`: says so once (a `warn` event in the hold's
    /// span), and the hold ends.
    pub(crate) fn mark_lost(&self, cause: LostCause) {
        // Logged and counted before anyone waiting on `lost()` wakes (the watch
        // notifies once the closure returns), so what they read next includes it.
        self.lost.send_if_modified(|lost| {
            if *lost {
                return false;
            }
            *lost = true;
            self.span.in_scope(|| {
                tracing::warn!(
                    lock = self.lock.name(),
                    mode = self.holding.mode().as_str(),
                    cause = cause.as_str(),
                    "lease lost: {}",
                    cause.describe()
                );
            });
            self.holding.lost(cause);
            true
        });
    }

    /// The mode errors name: the hold's, as its metrics know it (an upgradable hold
    /// turned plain is a read).
    pub(crate) fn error_mode(&self) -> crate::Mode {
        match self.holding.mode() {
            Mode::Read => crate::Mode::Read,
            Mode::Upgradable => crate::Mode::UpgradableRead,
            Mode::Write | Mode::Upgrade => crate::Mode::Write,
        }
    }

    /// [`Error::LeaseLost`] for this hold.
    pub(crate) fn lost_error(&self) -> Error {
        Error::LeaseLost {
            lock: self.lock.name().to_owned(),
            mode: self.error_mode(),
        }
    }

    /// The client was shut down: the hold ends here (its release is the client's).
    fn shut_down(&self) {
        self.shut_down.store(true, Ordering::Relaxed);
        self.lost.send_replace(true);
        self.holding.end();
    }

    fn moving(&self) -> std::sync::MutexGuard<'_, Moving> {
        self.moving.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An upgrade of this hold is about to be sent; see [`Upgrading`].
    fn upgrading(&self) -> Upgrading<'_> {
        *self.moving() = Moving::Upgrading { gone: false };
        Upgrading {
            hold: self,
            moved: false,
        }
    }

    /// The server's answer to a request that needs the hold: `Ok` if it still held,
    /// else the lease is lost (and marked so).
    fn confirm(&self, still_held: bool) -> Result<(), Error> {
        if still_held {
            Ok(())
        } else {
            self.mark_lost(LostCause::Gone);
            Err(self.lost_error())
        }
    }

    pub(crate) fn is_held(&self) -> bool {
        !*self.lost.borrow() && Instant::now() < self.deadline()
    }

    /// Whether the client is sure the server has the hold, as far as a client can
    /// be without asking: held, its last renewal answered, and that renewal (or the
    /// acquire) sent less than [`JOIN_TRUST`] ago, and within the first half of the
    /// time the hold counts (shared read holds renew every half of `JOIN_TRUST` at
    /// most).
    pub(crate) fn is_confirmed(&self) -> bool {
        let counts = self.lock.held_for(self.mode);
        let trusted = (counts / 2).min(JOIN_TRUST);
        self.is_held()
            && !self.doubted.load(Ordering::Relaxed)
            && Instant::now() + (counts - trusted) < self.deadline()
    }

    /// Whether a renewal found a writer or an upgrade waiting (see `recalled`).
    pub(crate) fn is_recalled(&self) -> bool {
        *self.recalled.borrow()
    }

    /// Turns true once a renewal finds a writer or an upgrade waiting (and closes
    /// when the hold goes); it keeps nothing of the hold alive.
    pub(crate) fn recall_signal(&self) -> watch::Receiver<bool> {
        self.recalled.subscribe()
    }

    /// Resolves once the lease is known lost.
    pub(crate) async fn lost(&self) {
        let mut lost = self.lost.subscribe();
        let _ = lost.wait_for(|lost| *lost).await;
    }

    /// Renews the hold now, as a due renewal does, in the hold's span.
    pub(crate) async fn renew_now(&self) -> Result<(), Error> {
        self.renew_once().instrument(self.span.clone()).await
    }

    /// One renewal, bounded by the local deadline. `Ok`: renewed, the deadline moved
    /// on. `Err(LeaseLost)`: the lease is lost (the hold was gone, an original-design
    /// client held beside it, or the deadline passed first), and marked so. Any other
    /// error: this attempt failed; time may remain for another.
    pub(crate) async fn renew_once(&self) -> Result<(), Error> {
        let (lock, mode) = (&self.lock, self.mode);
        let label = lock.metrics_label();
        let sent = Instant::now();
        let deadline = self.deadline();
        let lost = |cause: LostCause| {
            metrics::renewal(label, metrics::Renewal::Lost);
            self.mark_lost(cause);
            Err(self.lost_error())
        };
        if *self.lost.borrow() {
            return Err(self.lost_error());
        }
        if sent >= deadline {
            return lost(LostCause::Unreachable);
        }
        let renewed = timeout(deadline - sent, lock.renew_token(&self.token, mode)).await;
        if !matches!(renewed, Ok(Ok(Renewed::Held | Renewed::WriterWaits))) {
            self.doubted.store(true, Ordering::Relaxed);
        }
        match renewed {
            Ok(Ok(renewed @ (Renewed::Held | Renewed::WriterWaits))) => {
                self.extend(sent + lock.held_for(mode));
                self.doubted.store(false, Ordering::Relaxed);
                if renewed == Renewed::WriterWaits {
                    self.recalled
                        .send_if_modified(|recalled| !std::mem::replace(recalled, true));
                }
                metrics::renewal(label, metrics::Renewal::Renewed);
                tracing::trace!(lock = lock.name(), ?mode, ?renewed, "renewed");
                Ok(())
            }
            Ok(Ok(Renewed::Lost)) => {
                let mut moving = self.moving();
                match *moving {
                    Moving::Staying => {
                        drop(moving);
                        lost(LostCause::Gone)
                    }
                    Moving::Upgrading { .. } | Moving::Moved => {
                        // The upgrade's outcome decides (see `Upgrading`); once
                        // moved, this answer is stale.
                        if let Moving::Upgrading { gone } = &mut *moving {
                            *gone = true;
                        }
                        tracing::debug!(
                            lock = lock.name(),
                            ?mode,
                            "at renewal the read hold was gone, with an upgrade on its way"
                        );
                        Err(self.lost_error())
                    }
                }
            }
            Ok(Err(err)) => {
                metrics::renewal(label, metrics::Renewal::Error);
                Err(err.doing(Some(lock.name()), Operation::Renew(self.error_mode())))
            }
            Err(_) => lost(LostCause::Unreachable),
        }
    }
}

impl Lease {
    /// Starts tracking a hold granted to `token` for `access` (with the fencing
    /// token `fence`, 0 for reads); it counts for `lasts` after `sent` (when the
    /// request that granted it was sent) until renewed.
    pub(crate) fn start(
        lock: RwLock,
        token: Token,
        access: Access,
        fence: u64,
        sent: Instant,
        lasts: Duration,
    ) -> Self {
        let kind = Mode::of_hold(access);
        let span = tracing::debug_span!(
            "hold",
            lock = lock.name(),
            mode = kind.as_str(),
            fencing_token = tracing::field::Empty
        );
        if fence > 0 {
            span.record("fencing_token", fence);
        }
        let hold = Arc::new(Hold {
            deadline: Mutex::new(sent + lasts),
            moving: Mutex::new(Moving::Staying),
            lost: watch::channel(false).0,
            recalled: watch::channel(false).0,
            doubted: AtomicBool::new(false),
            shut_down: AtomicBool::new(false),
            runtime: Handle::current(),
            holding: Holding::start(lock.metrics_label(), kind),
            span,
            mode: access.mode(),
            renew_every: lock.renew_period(access),
            // The crate's own copy: a hold keeps no handle of the application's.
            lock: lock.internal(),
            token,
        });
        // A hold that counts less than usual (handed over) renews sooner the first time.
        let first = (sent + hold.renew_every.min(lasts / 3)).max(Instant::now());
        let renewal = hold.lock.client().inner.renewals.start(hold.clone(), first);
        let end = {
            let (hold, renewal) = (hold.clone(), renewal.clone());
            move || {
                renewal.stop();
                hold.shut_down();
            }
        };
        let mode = access.error_mode();
        let registration =
            Registration::new(&hold.lock, &hold.token, mode, Kind::Hold(Box::new(end)));
        Lease {
            lock: hold.lock.clone(),
            held: Some(Held {
                hold,
                renewal,
                _registration: registration,
            }),
        }
    }

    pub(crate) fn is_held(&self) -> bool {
        self.held.as_ref().is_some_and(|held| held.hold.is_held())
    }

    /// Resolves once the lease is known lost.
    pub(crate) async fn lost(&self) {
        if let Some(held) = &self.held {
            held.hold.lost().await;
        }
    }

    /// The hold, for the guards that share it (src/lock/shared_reads/).
    pub(crate) fn hold(&self) -> Option<&Arc<Hold>> {
        self.held.as_ref().map(|held| &held.hold)
    }

    /// Applies `writes` if this hold is still the lock's writer; a refusal means the
    /// lease is gone, and marks it lost. Refused without I/O once the guard no longer
    /// believes it holds.
    pub(crate) async fn fenced_write(&self, writes: &FencedWrites) -> Result<(), Error> {
        let hold = self.believed()?;
        let written = hold.lock.fenced_write(&hold.token, writes).await;
        hold.confirm(written.doing(hold.lock.name(), Operation::FencedWrite)?)
    }

    /// The hold while the guard believes it holds; else [`Error::LeaseLost`].
    fn believed(&self) -> Result<&Arc<Hold>, Error> {
        self.held
            .as_ref()
            .map(|held| &held.hold)
            .filter(|hold| hold.is_held())
            .ok_or_else(|| self.lost_error())
    }

    /// [`Error::LeaseLost`] for this lease: its hold's, or (once released or moved
    /// on by an upgrade, which only an upgradable guard outlives) the upgradable
    /// read's.
    pub(crate) fn lost_error(&self) -> Error {
        match &self.held {
            Some(held) => held.hold.lost_error(),
            None => Error::LeaseLost {
                lock: self.lock.name().to_owned(),
                mode: crate::Mode::UpgradableRead,
            },
        }
    }

    pub(crate) fn token(&self) -> Option<&Token> {
        self.held.as_ref().map(|held| &held.hold.token)
    }

    /// The lock's name (empty once released: guards never show that state).
    pub(crate) fn name(&self) -> &str {
        self.held.as_ref().map_or("", |held| held.hold.lock.name())
    }

    /// The local deadline: the hold counts as held until then unless renewed.
    pub(crate) fn deadline(&self) -> std::time::Instant {
        self.held
            .as_ref()
            .map_or_else(Instant::now, |held| held.hold.deadline())
            .into_std()
    }

    /// Renews the hold now, as a due renewal does.
    pub(crate) async fn extend(&self) -> Result<(), Error> {
        let Some(held) = &self.held else {
            return Err(self.lost_error());
        };
        held.hold.renew_now().await
    }

    /// An acquisition by this hold (an upgrade) begins: a waiter in the metrics,
    /// with the lock's label.
    pub(crate) fn acquiring(&self, mode: Mode) -> metrics::Acquiring {
        let label = self
            .held
            .as_ref()
            .map(|held| held.hold.lock.metrics_label());
        metrics::Acquiring::start(label.unwrap_or(&Default::default()), mode)
    }

    /// Ends the hold. `Err(LeaseLost)` at once when the lease was already known lost
    /// (the release still goes out, in the background, to tidy up).
    pub(crate) async fn release(mut self) -> Result<(), Error> {
        let Some(held) = self.held.take() else {
            return Ok(());
        };
        if !held.hold.is_held() {
            let lost = held.hold.lost_error();
            held.release_in_background();
            return Err(lost);
        }
        held.renewal.stop();
        let hold = held.hold.clone();
        hold.holding.end();
        let span = hold.release_span();
        let limit = hold.lock.options().release_timeout;
        let attempt = hold.lock.release_token_until(&hold.token, hold.deadline());
        let doing = Operation::Release(hold.error_mode());
        match timeout(limit, attempt).instrument(span.clone()).await {
            Ok(released) => released.map(|_| ()).doing(hold.lock.name(), doing),
            Err(_) => {
                span.in_scope(|| tracing::debug!(lock = hold.lock.name(), mode = ?hold.mode, ?limit, "release unconfirmed; going on in the background"));
                held.release_in_background();
                Err(release_unconfirmed(limit).doing(Some(hold.lock.name()), doing))
            }
        }
    }

    /// Turns a write hold into a read hold, atomically.
    ///
    /// The hold stays in `self` until the downgrade is known done, so an error or a
    /// dropped future releases it in the background (in whichever mode it is then)
    /// through `Drop`. The write renewal is stopped first: no renewal of this guard
    /// is sent after the downgrade (one already sent is refused by the script, which
    /// renews only the mode it is asked for).
    pub(crate) async fn downgrade(self) -> Result<Lease, Error> {
        self.downgrade_keeping().await.map(|(lease, _)| lease)
    }

    /// As [`downgrade`](Self::downgrade), and the writer that waits first in line
    /// behind the hold, if one does.
    pub(crate) async fn downgrade_keeping(
        mut self,
    ) -> Result<(Lease, Option<WriterInLine>), Error> {
        let Some(held) = self.held.as_ref() else {
            return Err(self.lost_error());
        };
        held.renewal.stop_and_wait().await;
        let hold = &held.hold;
        if !hold.is_held() {
            return Err(hold.lost_error());
        }
        let sent = Instant::now();
        let downgraded = hold
            .lock
            .downgrade_token(&hold.token, Access::Write)
            .await
            .doing(hold.lock.name(), Operation::Downgrade(crate::Mode::Write))?;
        let Downgraded::Done { writer_queued } = downgraded else {
            return Err(hold.lost_error());
        };
        if hold.lock.client().inner.live.is_closed() {
            // Shut down meanwhile: `self` releases the read hold on its way out.
            return Err(Error::Shutdown);
        }
        // The hold goes on as a read hold, with renewals of its own.
        let (lock, token) = (hold.lock.clone(), hold.token.clone());
        let lasts = lock.held_for(LockMode::Read);
        hold.holding.end();
        self.held = None;
        let writer = writer_queued.map(|ago| WriterInLine { sent, ago });
        Ok((
            Lease::start(lock, token, Access::Read, 0, sent, lasts),
            writer,
        ))
    }

    /// Turns this upgradable read hold into the write hold: waits (when `wait`) until
    /// no other reader holds. On success the hold moves to the returned write lease
    /// (with its fencing token) and `self` is left empty; on any error `self` keeps
    /// whatever it had (a lost hold is marked so).
    ///
    /// The read renewals go on while the upgrade waits. Once it is granted they stop;
    /// one already sent finds no read hold and changes nothing (the script renews only
    /// the mode it is asked for), so the write hold is never re-leased as a read, and
    /// its answer is not taken for a lost lease ([`Upgrading`]).
    pub(crate) async fn upgrade(&mut self, wait: bool) -> Result<(Lease, u64), Error> {
        let hold = self.believed()?.clone();
        let mut upgrading = hold.upgrading();
        let granted = match upgrade(&hold.lock, &hold.token, wait).await {
            Ok(granted) => granted,
            Err(err @ Error::LeaseLost { .. }) => {
                hold.mark_lost(LostCause::Gone);
                return Err(err);
            }
            Err(err @ Error::NotReplicated { .. }) => {
                // Released again for want of replicas.
                hold.mark_lost(LostCause::NotReplicated);
                return Err(err);
            }
            Err(err) => return Err(err),
        };
        upgrading.moved = true;
        drop(upgrading);
        if let Some(held) = self.held.take() {
            held.renewal.stop();
            held.hold.holding.end();
        }
        let lease = Lease::start(
            hold.lock.clone(),
            granted.token,
            Access::Upgrade,
            granted.fence,
            granted.sent,
            granted.lasts,
        );
        Ok((lease, granted.fence))
    }

    /// Turns this upgradable read hold into a plain one (the lease goes on as it is);
    /// other upgradable readers may then enter.
    pub(crate) async fn leave_upgradable(&self) -> Result<(), Error> {
        let hold = self.believed()?;
        let from = Access::UpgradableRead;
        let downgraded = hold.lock.downgrade_token(&hold.token, from).await;
        let doing = Operation::Downgrade(crate::Mode::UpgradableRead);
        hold.confirm(downgraded.doing(hold.lock.name(), doing)? != Downgraded::Lost)?;
        hold.holding.switch(Mode::Read);
        hold.span.record("mode", Mode::Read.as_str());
        Ok(())
    }
}

/// The writer first in line behind a write hold when its downgrade ran: it queued
/// `ago` before the script ran, and the script ran after `sent`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WriterInLine {
    sent: Instant,
    ago: Duration,
}

impl WriterInLine {
    /// Whether something that happened at `at` may have come after that writer
    /// queued: unless it surely came before, erring on the writer's side by the
    /// downgrade's round trip (the script ran somewhere between `sent` and its reply).
    pub(crate) fn may_follow(&self, at: Instant) -> bool {
        at.checked_add(self.ago)
            .is_none_or(|then| then >= self.sent)
    }
}

/// What `release()` returns when the release was not confirmed within `limit`
/// (`LockOptions::release_timeout`): it goes on in the background.
pub(crate) fn release_unconfirmed(limit: Duration) -> Error {
    Error::from(redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "the release was not confirmed within {limit:?}; it goes on in the background until the lease ends"
        ),
    )))
}

/// An upgrade on its way. A renewal that finds the read hold gone meanwhile leaves
/// the verdict to it: once dropped, the hold either moved to the write hold (later
/// renewal answers about the read hold are stale: nothing is lost), or it stays,
/// and then the lease is lost if a renewal found it gone.
struct Upgrading<'a> {
    hold: &'a Hold,
    moved: bool,
}

impl Drop for Upgrading<'_> {
    fn drop(&mut self) {
        let mut moving = self.hold.moving();
        let gone = *moving == Moving::Upgrading { gone: true };
        *moving = if self.moved {
            Moving::Moved
        } else {
            Moving::Staying
        };
        drop(moving);
        if gone && !self.moved {
            self.hold.mark_lost(LostCause::Gone);
        }
    }
}

impl Hold {
    /// A `release` span inside the hold's.
    fn release_span(&self) -> Span {
        tracing::debug_span!(
            parent: &self.span,
            "release",
            lock = self.lock.name(),
            mode = self.holding.mode().as_str()
        )
    }
}

impl Held {
    /// The drop fallback: release on the runtime captured at acquire time, never
    /// blocking; on failure the hold ends when its lease does. Nothing to send once
    /// the client's shutdown has released the hold; a lease known lost is only
    /// tidied up (quietly, if that fails or never runs).
    fn release_in_background(self) {
        self.renewal.stop();
        let hold = self.hold;
        hold.holding.end();
        if hold.shut_down.load(Ordering::Relaxed) {
            return;
        }
        let held = hold.is_held();
        let span = hold.release_span();
        let until = hold.deadline();
        let unfinished = held.then(|| Unfinished {
            lock: hold.lock.name().to_owned(),
            mode: hold.mode,
            done: false,
        });
        let runtime = hold.runtime.clone();
        runtime.spawn(
            async move {
                let (lock, mode) = (&hold.lock, hold.mode);
                match lock.release_token_until(&hold.token, until).await {
                    Ok(_) => {
                        tracing::debug!(lock = lock.name(), ?mode, "released in the background")
                    }
                    Err(err) if held => tracing::warn!(
                        lock = lock.name(), ?mode, error = %ErrorChain(&err),
                        "background release failed; the hold ends when its lease does"
                    ),
                    Err(err) => tracing::debug!(
                        lock = lock.name(), ?mode, error = %ErrorChain(&err),
                        "tidying up after a lost lease failed"
                    ),
                }
                if let Some(unfinished) = unfinished {
                    unfinished.finish();
                }
            }
            .instrument(span),
        );
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

#[cfg(test)]
mod tests {
    use super::JOIN_TRUST;

    /// The fence of lua/force_release.lua outlasts the join window, with margin for
    /// the server's and the client's clocks: else an evicted process that never
    /// hears the release could let a task join beside the next writer.
    #[test]
    fn join_trust_ends_before_the_forced_release_fence() {
        let script = include_str!("../../lua/force_release.lua");
        let fence_ms: u128 = script
            .lines()
            .find_map(|line| line.strip_prefix("local FORCED_FENCE = "))
            .expect("force_release.lua sets FORCED_FENCE")
            .trim()
            .parse()
            .expect("FORCED_FENCE is a number of ms");
        assert!(
            JOIN_TRUST.as_millis() + 500 <= fence_ms,
            "JOIN_TRUST {JOIN_TRUST:?} against a {fence_ms} ms fence"
        );
    }
}

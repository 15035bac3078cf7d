//! Waiting for the lock: one attempt, then wake-ups plus a bounded re-check timer.
//!
//! A waiter listens on the lock's channel (one subscription per process and lock,
//! see [`crate::lock::wakeups`]). If the channel is already subscribed, it starts
//! listening before its first attempt, for free; otherwise a refused waiter
//! subscribes and tries again at once (a release may have slipped in before the
//! subscription). Then it sleeps until a message that concerns it arrives or its
//! re-check timer fires. The timer follows the current holds' deadline (a crashed
//! holder publishes nothing) but fires at most about twice a second; each re-check
//! of a waiter with a place in line also refreshes its place.
//!
//! Under writer preference a refused plain reader waits in line too, in a batch
//! with the readers that wait behind the same writer: the release that lets them
//! in grants the whole batch in its own script and publishes the batch's name, so
//! a reader that had to wait still sends one acquire and one release, and wakes
//! for nothing else meanwhile.

use std::time::Duration;

use rand::RngExt;
use tokio::runtime::Handle;
use tokio::time::{Instant, sleep_until};
use tracing::Instrument;

use crate::client::live::{Kind, Registration};
use crate::error::ErrorChain;
use crate::lock::wakeups::{Interest, Listener, RESUBSCRIBED};
use crate::protocol::token::Token;
use crate::protocol::{Access, Acquired, LockMode};
use crate::{Error, RwLock};

/// The shortest re-check period: at most about two scripts per waiter per second.
const MIN_RECHECK: Duration = Duration::from_millis(500);
/// The longest re-check period, so a queued writer's intent stays fresh.
const MAX_RECHECK: Duration = Duration::from_millis(1000);
/// The re-check period for a while after a subscription was restored: until the
/// cluster's view settles (gossip after a failover takes up to about a second), a
/// restored subscription may sit on a node that no longer receives the messages.
const UNSETTLED_RECHECK: Duration = Duration::from_millis(200);
/// How long that lasts.
const UNSETTLED_FOR: Duration = Duration::from_secs(2);
/// Random extra delay per re-check, so waiters do not re-check in step.
const RECHECK_JITTER: Duration = Duration::from_millis(100);
/// The longest a queued writer's place (or a pending upgrade) lives without a
/// re-check: three of the longest re-check periods with their jitter.
const LONGEST_INTENT: Duration = Duration::from_millis(3 * 1100);
/// The shortest: three of the shortest re-check periods.
const SHORTEST_INTENT: Duration = Duration::from_millis(3 * 500);

/// How long a waiting writer's place in the queue (or a pending upgrade) lives
/// without a re-check: the write lease, kept between [`SHORTEST_INTENT`] and
/// [`LONGEST_INTENT`]. So a crashed waiter blocks others no longer than a crashed
/// writer would (unless the write lease is under 1.5 s), and the place outlives the
/// gaps between its waiter's re-checks, which come at least three times per
/// lifetime ([`recheck_limit`]).
pub(crate) fn intent_ttl(write_lease: Duration) -> Duration {
    write_lease.clamp(SHORTEST_INTENT, LONGEST_INTENT)
}

/// The longest re-check period of a waiter asking for `access`: one with a place
/// in line (a writer, an upgrade, a reader in a batch: `in_line`) re-checks at
/// least three times per place lifetime (jitter included).
fn recheck_limit(lock: &RwLock, access: Access, in_line: bool) -> Duration {
    if in_line || matches!(access, Access::Write | Access::Upgrade) {
        let intent = intent_ttl(lock.options().write_lease);
        (intent / 3)
            .saturating_sub(RECHECK_JITTER)
            .clamp(MIN_RECHECK, MAX_RECHECK)
    } else {
        MAX_RECHECK
    }
}

/// A hold the server granted.
pub(crate) struct Granted {
    pub(crate) token: Token,
    pub(crate) fence: u64,
    /// When the granting request was sent: the start of the local lease clock.
    pub(crate) sent: Instant,
    /// How long after `sent` the hold counts until renewed: [`RwLock::held_for`], or
    /// less for a hold handed over by another client's release ([`handed_lease`]).
    pub(crate) lasts: Duration,
    /// An attempt was refused first: it waited (a batch's readers may be granted
    /// with writers in line behind them).
    pub(crate) waited: bool,
}

/// How long a hold handed over by another client's script (a write hold, or a
/// batch's read grant) counts, from the send of this waiter's last refused attempt:
/// the script grants it the place's lifetime (capped by the lease) from the moment
/// of the hand-over, but never past the place's own deadline, which that refusal
/// set to at least its arrival plus the place's lifetime. Both ends are later than
/// the send plus this.
fn handed_lease(lock: &RwLock, mode: LockMode) -> Duration {
    lock.held_for(mode)
        .min(intent_ttl(lock.options().write_lease))
}

/// The fencing token of a hand-over message for `token` (`"<token>:<fence>"`).
fn handed_to(payload: &str, token: &Token) -> Option<u64> {
    let (named, fence) = payload.split_once(':')?;
    (named == token.as_str()).then(|| fence.parse().ok())?
}

/// Takes the lock as `access` asks (not [`Access::Upgrade`]) with a new token;
/// waits (bounded by `wait_timeout`) when `wait`, else returns
/// [`Error::WouldBlock`] at the first refusal. Runs in a `debug` span `acquire`
/// with the lock's name and the access.
pub(crate) async fn acquire(lock: &RwLock, access: Access, wait: bool) -> Result<Granted, Error> {
    let span = tracing::debug_span!("acquire", lock = lock.name(), ?access, wait);
    lock.check()?;
    let pending = Pending::new(lock, Token::random(), access);
    attempt_until_granted(lock, access, wait, pending)
        .instrument(span)
        .await
}

/// Upgrades `token`'s upgradable hold to the write hold, waiting as [`acquire`]
/// does. [`Error::LeaseLost`] when the upgradable hold is gone. Whatever the outcome,
/// the token stays the caller's to release: nothing is withdrawn here (a refused
/// upgrade's mark that keeps new readers out lapses with its intent, or goes with
/// the caller's release).
pub(crate) async fn upgrade(lock: &RwLock, token: &Token, wait: bool) -> Result<Granted, Error> {
    let span = tracing::debug_span!("acquire", lock = lock.name(), access = ?Access::Upgrade, wait);
    lock.check()?;
    let pending = Pending::borrowed(lock, token.clone());
    attempt_until_granted(lock, Access::Upgrade, wait, pending)
        .instrument(span)
        .await
}

async fn attempt_until_granted(
    lock: &RwLock,
    access: Access,
    wait: bool,
    mut pending: Pending<'_>,
) -> Result<Granted, Error> {
    let live = &lock.client().inner.live;
    if live.is_closed() {
        pending.disarm();
        return Err(Error::Shutdown);
    }
    let mut waiting = Waiting::new(lock);
    let interest = || Interest {
        access,
        token: pending.token.clone(),
        fairness: lock.options().fairness,
    };
    let mut listener = if wait {
        lock.listen_if_subscribed(interest())
    } else {
        None
    };
    loop {
        if listener.as_mut().is_some_and(Listener::clear) {
            waiting.unsettle();
        }
        let sent = Instant::now();
        waiting.attempts += 1;
        let reply = lock.acquire_token(&pending.token, access, wait).await?;
        if live.is_closed() {
            // Shut down while the request was out: undo whatever it got.
            return pending.give_up(waiting.attempts, Error::Shutdown).await;
        }
        let holds_for = match reply {
            Acquired::Granted { fence } => {
                let lasts = lock.held_for(access.mode());
                return Ok(waiting.granted(&mut pending, fence, sent, lasts, "acquired"));
            }
            Acquired::Lost => {
                tracing::debug!("the upgradable hold is gone");
                pending.disarm();
                return Err(Error::LeaseLost {
                    lock: lock.name().to_owned(),
                    mode: crate::Mode::UpgradableRead,
                });
            }
            Acquired::Refused { .. } if !wait => {
                tracing::trace!("would block");
                crate::metrics::refused();
                // A refused try_* queued nothing: there is nothing to clean up.
                pending.disarm();
                return Err(Error::WouldBlock);
            }
            Acquired::Refused {
                holds_for,
                fence,
                batch,
            } => {
                waiting.refused(sent, fence, batch);
                crate::metrics::refused();
                holds_for
            }
        };
        let Some(listener) = listener.as_mut() else {
            // Subscribed now; a release may have slipped in before: ask again at once.
            listener = Some(lock.listen(interest()).await?);
            continue;
        };
        let recheck = waiting.recheck_at(lock, access, holds_for);
        match waiting.sleep(lock, &pending.token, listener, recheck).await {
            Woken::Handed(granted) => {
                crate::metrics::handed_over();
                return Ok(waiting.granted(
                    &mut pending,
                    granted.fence,
                    granted.sent,
                    granted.lasts,
                    "handed the lock",
                ));
            }
            Woken::Again => {}
            Woken::TimedOut => {
                let timeout = Error::Timeout {
                    lock: lock.name().to_owned(),
                    mode: access.error_mode(),
                    waited: lock.options().wait_timeout.unwrap_or_default(),
                };
                return pending.give_up(waiting.attempts, timeout).await;
            }
            Woken::ShutDown => return pending.give_up(waiting.attempts, Error::Shutdown).await,
        }
    }
}

/// What ended a sleep between attempts.
enum Woken {
    /// The lock was handed over: a writer's or upgrade's hand-over, or the grant of
    /// the batch of readers this reader waits in.
    Handed(Handed),
    /// A message that concerns it, or the re-check timer: ask again.
    Again,
    /// The wait limit passed.
    TimedOut,
    /// The client was shut down.
    ShutDown,
}

/// A hold another script handed over, as a message told it.
struct Handed {
    fence: u64,
    sent: Instant,
    lasts: Duration,
}

/// One acquisition's wait: what its attempts have learned so far.
struct Waiting {
    started: Instant,
    /// When it gives up (`wait_timeout`).
    deadline: Option<Instant>,
    attempts: u32,
    /// When the last refused attempt was sent, and the lock's fence it saw (none
    /// yet: no hand-over counts before a refusal).
    refused: (Instant, u64),
    /// The batch of readers it waits in, in line (its last refusal named it).
    batch: Option<String>,
    /// Re-check often until then: a restored subscription may sit on a node that
    /// no longer receives the messages (the cluster's view settles).
    unsettled_until: Option<Instant>,
}

impl Waiting {
    fn new(lock: &RwLock) -> Self {
        let started = Instant::now();
        Waiting {
            started,
            deadline: lock.options().wait_timeout.map(|limit| started + limit),
            attempts: 0,
            refused: (started, u64::MAX),
            batch: None,
            unsettled_until: None,
        }
    }

    fn unsettle(&mut self) {
        self.unsettled_until = Some(Instant::now() + UNSETTLED_FOR);
    }

    fn refused(&mut self, sent: Instant, fence: u64, batch: Option<String>) {
        self.refused = (sent, fence);
        self.batch = batch;
    }

    fn granted(
        &self,
        pending: &mut Pending<'_>,
        fence: u64,
        sent: Instant,
        lasts: Duration,
        how: &str,
    ) -> Granted {
        let waited_ms = self.started.elapsed().as_millis() as u64;
        tracing::debug!(attempts = self.attempts, waited_ms, "{how}");
        Granted {
            token: pending.disarm(),
            fence,
            sent,
            lasts,
            waited: self.refused.1 != u64::MAX,
        }
    }

    /// When to look again after a refusal: when the holds may end (a crashed
    /// holder publishes nothing), often enough to keep a place in line, and never
    /// past the wait limit.
    fn recheck_at(&self, lock: &RwLock, access: Access, holds_for: Duration) -> Instant {
        let now = Instant::now();
        let pause = if self.unsettled_until.is_some_and(|until| now < until) {
            UNSETTLED_RECHECK
        } else {
            recheck_after(holds_for, recheck_limit(lock, access, self.batch.is_some()))
        };
        let at = now + pause;
        self.deadline.map_or(at, |deadline| at.min(deadline))
    }

    /// Sleeps until a message that concerns this waiter, the re-check time, the
    /// wait limit or a shutdown. A reader that waits in line is concerned only by
    /// its batch's grant: until then, the writer before it holds or waits.
    async fn sleep(
        &mut self,
        lock: &RwLock,
        token: &Token,
        listener: &mut Listener,
        recheck: Instant,
    ) -> Woken {
        let live = &lock.client().inner.live;
        loop {
            if self
                .deadline
                .is_some_and(|deadline| Instant::now() >= deadline)
            {
                return Woken::TimedOut;
            }
            tokio::select! {
                payload = listener.recv() => {
                    if &*payload == RESUBSCRIBED {
                        self.unsettle();
                        return Woken::Again;
                    }
                    tracing::trace!(%payload, "woken");
                    crate::metrics::woken(true);
                    // With `min_replicas` the next attempt confirms a hand-over, so
                    // replicas are waited for.
                    let replicated = lock.options().min_replicas == 0;
                    // Handed the lock: it holds since after the last refusal (a
                    // larger fence than that refusal saw proves the order).
                    if let Some(fence) = handed_to(&payload, token)
                        && fence > self.refused.1
                        && replicated
                    {
                        let lasts = handed_lease(lock, LockMode::Write);
                        return Woken::Handed(Handed { fence, sent: self.refused.0, lasts });
                    }
                    match self.batch.as_deref() {
                        // Its batch was granted (batch names are never used twice).
                        Some(batch) if *payload == *batch && replicated => {
                            let lasts = handed_lease(lock, LockMode::Read);
                            return Woken::Handed(Handed { fence: 0, sent: self.refused.0, lasts });
                        }
                        Some(batch) if *payload != *batch => continue,
                        _ => return Woken::Again,
                    }
                }
                () = sleep_until(recheck) => {
                    crate::metrics::woken(false);
                    return if self.deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                        Woken::TimedOut
                    } else {
                        Woken::Again
                    };
                }
                () = live.closed() => return Woken::ShutDown,
            }
        }
    }
}

/// The re-check delay after a refusal: when the current holds would end, kept
/// between [`MIN_RECHECK`] and `longest` (at most [`MAX_RECHECK`]), plus jitter.
fn recheck_after(holds_for: Duration, longest: Duration) -> Duration {
    holds_for.clamp(MIN_RECHECK, longest) + jitter()
}

/// A random extra delay, so waiters do not re-check in step.
fn jitter() -> Duration {
    rand::rng().random_range(Duration::ZERO..=RECHECK_JITTER)
}

/// A token that may hold something on the server until the acquire returns it: if
/// the caller gives up (timeout, error, the future dropped mid-request), its queue
/// place and any hold a lost reply granted are released in the background, on the
/// runtime the attempt started on (the future may be dropped outside any runtime),
/// and sent again while the request limit lasts: the release may go out on the
/// connection whose failure lost the acquire's reply (the client may not have seen
/// it fail yet), and a standalone connection never resends. An upgrade's token is
/// borrowed: its holder's guard releases it.
pub(crate) struct Pending<'a> {
    lock: &'a RwLock,
    token: Token,
    armed: bool,
    runtime: Handle,
    /// The attempt's entry in the client's registry, for `LockClient::shutdown`
    /// (a borrowed token has its holder's).
    _registration: Option<Registration>,
}

impl<'a> Pending<'a> {
    pub(crate) fn new(lock: &'a RwLock, token: Token, access: Access) -> Self {
        let mode = access.error_mode();
        Pending {
            _registration: Some(Registration::new(lock, &token, mode, Kind::Pending)),
            lock,
            token,
            armed: true,
            runtime: Handle::current(),
        }
    }

    fn borrowed(lock: &'a RwLock, token: Token) -> Self {
        Pending {
            _registration: None,
            lock,
            token,
            armed: false,
            runtime: Handle::current(),
        }
    }

    /// The token it stands for.
    pub(crate) fn token(&self) -> &Token {
        &self.token
    }

    pub(crate) fn disarm(&mut self) -> Token {
        self.armed = false;
        self.token.clone()
    }

    /// The wait limit passed, or the client was shut down: leave the queue (and
    /// any hold just granted) before returning `err`, so a process that exits right
    /// after leaves nothing behind (the background withdrawal is the fallback if
    /// this fails).
    async fn give_up<T>(&mut self, attempts: u32, err: Error) -> Result<T, Error> {
        tracing::debug!(attempts, error = %err, "giving up");
        if self.armed && self.lock.release_token(&self.token).await.is_ok() {
            self.armed = false;
        }
        Err(err)
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let lock = self.lock.clone();
        let token = self.token.clone();
        self.runtime.spawn(async move {
            if let Err(err) = lock.release_token_until(&token, Instant::now()).await {
                tracing::debug!(lock = lock.name(), error = %ErrorChain(&err), "could not withdraw an abandoned acquire");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recheck_stays_between_half_a_second_and_a_second() {
        for holds_for in [0, 1, 300, 700, 5_000, 60_000] {
            let delay = recheck_after(Duration::from_millis(holds_for), MAX_RECHECK);
            assert!(delay >= MIN_RECHECK && delay <= MAX_RECHECK + RECHECK_JITTER);
        }
    }

    #[test]
    fn a_place_lives_the_write_lease_and_outlives_three_rechecks() {
        let ms = Duration::from_millis;
        for (lease, intent) in [(1, 1_500), (1_500, 1_500), (2_000, 2_000), (10_000, 3_300)] {
            assert_eq!(intent_ttl(ms(lease)), ms(intent), "write lease {lease} ms");
            let longest = (ms(intent) / 3)
                .saturating_sub(RECHECK_JITTER)
                .clamp(MIN_RECHECK, MAX_RECHECK);
            // Three re-checks, jitter included, fit in a place's lifetime (the
            // shortest lifetime allows 0.6 s periods: two and a half).
            assert!(
                3 * (longest + RECHECK_JITTER) <= ms(intent) || longest == MIN_RECHECK,
                "write lease {lease} ms"
            );
        }
    }

    #[test]
    fn a_hand_over_names_its_token_and_fence() {
        let token = Token::random();
        assert_eq!(
            handed_to(&format!("{}:42", token.as_str()), &token),
            Some(42)
        );
        assert_eq!(handed_to(token.as_str(), &token), None);
        assert_eq!(handed_to("*", &token), None);
        assert_eq!(
            handed_to(&format!("{}:42", Token::random().as_str()), &token),
            None
        );
    }
}

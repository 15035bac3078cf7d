//! Waiting for the lock: one attempt, then wake-ups plus a bounded re-check timer.
//!
//! A waiter listens on the lock's channel (one subscription per process and lock,
//! see [`crate::wakeups`]). If the channel is already subscribed, it starts
//! listening before its first attempt, for free; otherwise a refused waiter
//! subscribes and tries again at once (a release may have slipped in before the
//! subscription). Then it sleeps until a message that concerns it arrives or its
//! re-check timer fires. The timer follows the current holds' deadline (a crashed
//! holder publishes nothing) but fires at most about twice a second; each re-check
//! of a waiting writer also refreshes its place in the queue.
//!
//! Plain readers of one client share what they learn: while one of them stands
//! refused, or a waiting writer of the same client has asked (whatever the answer,
//! it then holds or queues), and no message that lets readers in has come since,
//! the readers wait for that message without asking (a writer among many readers
//! costs the server one refused read at most, not one per reader, and none from
//! the readers that start after the writer asked).

use std::time::Duration;

use rand::RngExt;
use tokio::runtime::Handle;
use tokio::time::{Instant, sleep_until};
use tracing::Instrument;

use crate::error::Chain;
use crate::live::{Kind, Registration};
use crate::scripts::{Access, Acquired, LockMode};
use crate::token::Token;
use crate::wakeups::{Interest, Listener, RESUBSCRIBED};
use crate::{Error, Fairness, RwLock};

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

/// The longest re-check period of a waiter asking for `access`: a writer or an
/// upgrade re-checks at least three times per place lifetime (jitter included).
fn recheck_limit(lock: &RwLock, access: Access) -> Duration {
    match access {
        Access::Write | Access::Upgrade => {
            let intent = intent_ttl(lock.options().write_lease);
            (intent / 3)
                .saturating_sub(RECHECK_JITTER)
                .clamp(MIN_RECHECK, MAX_RECHECK)
        }
        Access::Read | Access::UpgradableRead => MAX_RECHECK,
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
}

/// How long a write hold handed over by another client's release counts, from the
/// send of this waiter's last refused attempt: the script grants it the place's
/// lifetime (capped by the write lease) from the moment of the hand-over, but never
/// past the place's own deadline, which that refusal set to its arrival plus the
/// place's lifetime. Both ends are later than the send plus this.
fn handed_lease(lock: &RwLock) -> Duration {
    lock.held_for(LockMode::Write)
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
    let pending = Pending::new(lock, Token::random());
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
    let started = Instant::now();
    let deadline = lock.options().wait_timeout.map(|limit| started + limit);
    let interest = |token: &Token| Interest {
        access,
        token: token.clone(),
        fairness: lock.options().fairness,
    };
    let mut listener: Option<Listener> = if wait {
        lock.listen_if_subscribed(interest(&pending.token))
    } else {
        None
    };
    // Plain readers that defer to writers share their refusals, and a waiting
    // writer's attempt tells them they would be refused too (module docs).
    let shares_refusals =
        wait && access == Access::Read && lock.options().fairness == Fairness::WriterPreferred;
    let mut attempts = 0u32;
    let mut unsettled_until: Option<Instant> = None;
    // When the last refused attempt was sent, and the lock's fence it saw (none
    // yet: no hand-over counts before a refusal).
    let mut refused: (Instant, u64) = (started, u64::MAX);
    loop {
        if listener.as_mut().is_some_and(Listener::clear) {
            unsettled_until = Some(Instant::now() + UNSETTLED_FOR);
        }
        let shared = listener.as_ref().filter(|_| shares_refusals);
        // Either another reader's refusal stands for this one (it waits for the
        // same message, at most as long), or it asks.
        let shut_out = shared.and_then(|listener| listener.readers_shut_out(MIN_RECHECK));
        let pause = if let Some(shut_for) = shut_out {
            tracing::trace!("a refusal or a writer's attempt of this client keeps readers out");
            shut_for + jitter()
        } else {
            let wakeups = shared.and_then(Listener::reader_wakeups);
            // A waiting writer's attempt keeps readers out once it has run.
            let asking = listener
                .as_ref()
                .filter(|_| wait && access == Access::Write)
                .map(Listener::writer_asking);
            let sent = Instant::now();
            attempts += 1;
            let reply = lock.acquire_token(&pending.token, access, wait).await?;
            if live.is_closed() {
                // Shut down while the request was out: undo whatever it got.
                return pending.give_up(attempts, Error::Shutdown).await;
            }
            let holds_for = match reply {
                Acquired::Granted { fence } => {
                    if let Some(listener) = listener.as_ref().filter(|_| asking.is_some()) {
                        let lasts = lock.held_for(LockMode::Write);
                        listener.writer_answered(lasts, recheck_after(lasts, MAX_RECHECK));
                    } else if let (Some(listener), Some(wakeups)) = (shared, wakeups) {
                        listener.reader_granted(wakeups);
                    }
                    tracing::debug!(
                        attempts,
                        waited_ms = started.elapsed().as_millis() as u64,
                        "acquired"
                    );
                    return Ok(Granted {
                        token: pending.disarm(),
                        fence,
                        sent,
                        lasts: lock.held_for(access.mode()),
                    });
                }
                Acquired::Lost => {
                    tracing::debug!("the upgradable hold is gone");
                    pending.disarm();
                    return Err(Error::LeaseLost);
                }
                Acquired::Refused { .. } if !wait => {
                    tracing::trace!("would block");
                    // A refused try_* queued nothing: there is nothing to clean up.
                    pending.disarm();
                    return Err(Error::WouldBlock);
                }
                Acquired::Refused { holds_for, fence } => {
                    refused = (sent, fence);
                    holds_for
                }
            };
            let Some(listener) = listener.as_mut() else {
                listener = Some(lock.listen(interest(&pending.token)).await?);
                continue;
            };
            let pause = if unsettled_until.is_some_and(|until| Instant::now() < until) {
                UNSETTLED_RECHECK
            } else {
                recheck_after(holds_for, recheck_limit(lock, access))
            };
            if asking.is_some() {
                listener.writer_answered(holds_for, pause);
            } else if let Some(wakeups) = wakeups {
                listener.readers_refused(wakeups, holds_for, pause);
            }
            pause
        };
        // (Both ways above leave a listener: a shared refusal is read through one,
        // and a refusal without one subscribed and went round again.)
        let Some(listener) = listener.as_mut() else {
            continue;
        };
        let mut recheck = Instant::now() + pause;
        if let Some(deadline) = deadline {
            if Instant::now() >= deadline {
                return pending.give_up(attempts, Error::Timeout).await;
            }
            recheck = recheck.min(deadline);
        }
        tokio::select! {
            payload = listener.recv() => {
                if &*payload == RESUBSCRIBED {
                    unsettled_until = Some(Instant::now() + UNSETTLED_FOR);
                }
                tracing::trace!(%payload, "woken");
                // Handed the lock: it holds since after the last refusal (a larger
                // fence than that refusal saw proves the order). With `min_replicas`
                // the next attempt confirms it, so replicas are waited for.
                if let Some(fence) = handed_to(&payload, &pending.token)
                    && fence > refused.1
                    && lock.options().min_replicas == 0
                {
                    tracing::debug!(attempts, waited_ms = started.elapsed().as_millis() as u64, "handed the lock");
                    return Ok(Granted {
                        token: pending.disarm(),
                        fence,
                        sent: refused.0,
                        lasts: handed_lease(lock),
                    });
                }
            }
            () = sleep_until(recheck) => {}
            () = live.closed() => return pending.give_up(attempts, Error::Shutdown).await,
        }
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            return pending.give_up(attempts, Error::Timeout).await;
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
/// runtime the attempt started on (the future may be dropped outside any runtime).
/// An upgrade's token is borrowed: its holder's guard releases it.
struct Pending<'a> {
    lock: &'a RwLock,
    token: Token,
    armed: bool,
    runtime: Handle,
    /// The attempt's entry in the client's registry, for `LockClient::shutdown`
    /// (a borrowed token has its holder's).
    _registration: Option<Registration>,
}

impl<'a> Pending<'a> {
    fn new(lock: &'a RwLock, token: Token) -> Self {
        Pending {
            _registration: Some(Registration::new(lock, &token, Kind::Pending)),
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

    fn disarm(&mut self) -> Token {
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
            if let Err(err) = lock.release_token(&token).await {
                tracing::debug!(lock = lock.name(), error = %Chain(&err), "could not withdraw an abandoned acquire");
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

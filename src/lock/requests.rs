//! The requests a lock sends for its guards and waiters: one call of the backend
//! contract (`backend/mod.rs`) per request, with the lock's options applied (leases, replicas, the writers' queue), and how long a
//! hold counts and renews. The public API is in `lock/mod.rs`; this is what
//! `lock/waiting.rs` and `guard/lease.rs` build on.

use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Acquire, Backend, Fenced, Held};
use crate::error::{Doing, ErrorChain};
use crate::guard::lease::JOIN_TRUST;
use crate::lock::shared_reads;
use crate::lock::waiting::intent_ttl;
use crate::lock::wakeups::{Interest, Listener};
use crate::protocol::token::Token;
use crate::protocol::{Access, Acquired, Downgraded, LockMode, Renewed, Replicas};
use crate::{Error, Fairness, FencedWrites, Operation, RwLock};

/// The pause between attempts of a release that could not reach Redis.
const RELEASE_RETRY: Duration = Duration::from_millis(100);

impl RwLock {
    /// The lease of a hold in `mode`, as the server counts it.
    pub(crate) fn lease(&self, mode: LockMode) -> Duration {
        match mode {
            LockMode::Read => self.options().read_lease,
            LockMode::Write => self.options().write_lease,
        }
    }

    /// How long after sending the request that granted or renewed a hold in `mode`
    /// the guard may believe it holds: the lease, cut to the original-design clients'
    /// timeout for the stamp they judge that mode by (`write` for a write hold,
    /// `read` for a read hold). After that, an original client may judge the stamp
    /// stale and enter, so the hold no longer excludes it.
    pub(crate) fn held_for(&self, mode: LockMode) -> Duration {
        let lease = self.lease(mode);
        match (self.options().original_timeouts, mode) {
            (Some((read, _)), LockMode::Read) => lease.min(read),
            (Some((_, write)), LockMode::Write) => lease.min(write),
            (None, _) => lease,
        }
    }

    /// How often a hold taken for `access` renews: every third of the time it counts
    /// as held ([`held_for`](Self::held_for)), so original clients never judge its
    /// stamp stale while renewals succeed; a read hold that the client's tasks may
    /// join (shared reads) at least every half of [`JOIN_TRUST`], so they may go on
    /// joining it.
    pub(crate) fn renew_period(&self, access: Access) -> Duration {
        let mut period = self.held_for(access.mode()) / 3;
        if matches!(access, Access::Read) && shared_reads::shareable(self) {
            period = period.min(JOIN_TRUST / 2);
        }
        period.max(Duration::from_millis(1))
    }

    /// One acquire attempt. `wait`: the caller waits if refused, so a refused writer
    /// joins (or keeps its place in) the writers' queue, and a refused upgrade keeps
    /// new readers out; `try_*` passes false. With `min_replicas`, a granted hold
    /// that too few replicas acknowledged in time is released again (all of the
    /// token's holds: for an upgrade, the upgradable one too) and reported.
    pub(crate) async fn acquire_token(
        &self,
        token: &Token,
        access: Access,
        wait: bool,
    ) -> Result<Acquired, Error> {
        let target = self.target()?;
        let options = self.options();
        let intent = if wait {
            intent_ttl(options.write_lease)
        } else {
            Duration::ZERO
        };
        let (in_line, intent) = match access {
            Access::Read | Access::RecursiveRead | Access::UpgradableRead => {
                // Plain readers that defer to writers wait in line; the others ask.
                let in_line = options.fairness == Fairness::WriterPreferred
                    && access != Access::RecursiveRead;
                let intent = if access == Access::Read && in_line {
                    intent
                } else {
                    Duration::ZERO
                };
                (in_line, intent)
            }
            Access::Write | Access::Upgrade => (false, intent),
        };
        let ask = Acquire {
            token,
            access,
            lease: self.lease(access.mode()),
            in_line,
            intent,
            replicas: self.replicas(),
        };
        let (reply, acknowledged) = self
            .link()
            .acquire(target, &ask)
            .await
            .doing(self.name(), access.operation())?;
        if matches!(reply, Acquired::Granted { .. }) && acknowledged < options.min_replicas {
            if let Err(err) = self.release_token(token).await {
                tracing::warn!(lock = self.name(), error = %ErrorChain(&err), "could not release an unreplicated hold; it ends with its lease");
            }
            return Err(Error::NotReplicated {
                lock: self.name().to_owned(),
                doing: access.operation(),
                acknowledged,
                required: options.min_replicas,
                waited: options.replica_timeout,
            });
        }
        Ok(reply)
    }

    /// One release request: ends whatever `token` has; true when a hold was removed.
    pub(crate) async fn release_token(&self, token: &Token) -> Result<bool, Error> {
        self.link().release(self.target()?, token).await
    }

    /// Releases `token`, sending a fresh request whenever one gets no answer within
    /// the reply limit, until the reply comes or the time is up: the later of
    /// `until` (the hold's local deadline) and the request limit from now. Safe
    /// because a release is idempotent per token; needed because the driver can
    /// give up on a request the server ran later (a freeze, a dropped connection).
    pub(crate) async fn release_token_until(
        &self,
        token: &Token,
        until: Instant,
    ) -> Result<bool, Error> {
        let limits = self.client().inner.limits;
        let give_up = until.max(Instant::now() + limits.overall);
        loop {
            let left = give_up.saturating_duration_since(Instant::now());
            let attempt = tokio::time::timeout(
                left.min(limits.response + RELEASE_RETRY),
                self.release_token(token),
            );
            match attempt.await {
                Ok(Err(err @ Error::Redis { .. })) if Instant::now() + RELEASE_RETRY < give_up => {
                    tracing::debug!(lock = self.name(), error = %ErrorChain(&err), "release failed; retrying");
                    tokio::time::sleep(RELEASE_RETRY).await;
                }
                Ok(done) => return done,
                Err(_) if Instant::now() < give_up => {
                    tracing::debug!(lock = self.name(), "release unanswered; sending it again");
                }
                Err(elapsed) => {
                    return Err(Error::from(redis::RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        elapsed,
                    ))));
                }
            }
        }
    }

    /// Renews `token`'s hold in `mode` for a full lease.
    pub(crate) async fn renew_token(
        &self,
        token: &Token,
        mode: LockMode,
    ) -> Result<Renewed, Error> {
        let lease = self.lease(mode);
        let held = Held { token, lease };
        self.link().renew(self.target()?, held, mode).await
    }

    /// Turns `token`'s write hold (`from` [`Access::Write`]) into a read hold of a
    /// full read lease, or its upgradable hold (`from` [`Access::UpgradableRead`])
    /// into a plain one.
    pub(crate) async fn downgrade_token(
        &self,
        token: &Token,
        from: Access,
    ) -> Result<Downgraded, Error> {
        let lease = self.lease(LockMode::Read);
        self.link()
            .downgrade(self.target()?, Held { token, lease }, from)
            .await
    }

    /// Applies `writes` if `token` still holds the write lock (keys checked first).
    /// With `min_replicas`, writes that too few replicas acknowledged in time are
    /// reported ([`Error::NotReplicated`]): they are applied on the master, and a
    /// failover now could lose them, as it could a hold.
    pub(crate) async fn fenced_write(
        &self,
        token: &Token,
        writes: &FencedWrites,
    ) -> Result<bool, Error> {
        let target = self.target()?;
        writes.check(target.keys())?;
        let required = self.options().min_replicas;
        let (written, acknowledged) = self
            .link()
            .fenced_write(
                target,
                &Fenced {
                    token,
                    writes: &writes.writes,
                    replicas: self.replicas(),
                },
            )
            .await?;
        if written && acknowledged < required {
            return Err(Error::NotReplicated {
                lock: self.name().to_owned(),
                doing: Operation::FencedWrite,
                acknowledged,
                required,
                waited: self.options().replica_timeout,
            });
        }
        Ok(written)
    }

    /// What `WAIT` asks for after a script, with `min_replicas`.
    fn replicas(&self) -> Option<Replicas> {
        let options = self.options();
        (options.min_replicas > 0).then_some(Replicas {
            count: options.min_replicas,
            timeout: options.replica_timeout,
        })
    }

    /// Listens for wake-ups on the lock's channel, subscribing if needed.
    pub(crate) async fn listen(&self, interest: Interest) -> Result<Listener, Error> {
        let channel = &self.target()?.channel;
        self.client().inner.wakeups.listen(channel, interest).await
    }

    /// Listens for wake-ups if the channel is already subscribed (for free).
    pub(crate) fn listen_if_subscribed(&self, interest: Interest) -> Option<Listener> {
        let channel = &self.target().ok()?.channel;
        self.client()
            .inner
            .wakeups
            .listen_if_subscribed(channel, interest)
            .ok()
    }
}

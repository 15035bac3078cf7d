//! [`LockSet`]: several locks taken together, some to read and some to write, all
//! or nothing, and never in a deadlock whatever order callers list them in.
//!
//! How: every set takes its members in one order that all clients agree on (by the
//! hash tag of the member's key, which decides its cluster slot, then by the key),
//! one at a time, each by the
//! member's own acquire ([`RwLock::read`](crate::RwLock::read) / [`RwLock::write`](crate::RwLock::write): its line, writer
//! preference, wake-ups, shared reads and lease are the lock's own). A set that
//! holds some members only ever waits for a member later in that order, so no
//! cycle of waits can form between sets (the classic lock ordering). Whatever ends
//! an acquire early (the wait limit, an error, the future dropped) ends every hold
//! it took and withdraws the member it waited for. The guard is `guard.rs`.

mod guard;
mod one_slot;

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use sync_wrapper::SyncFuture;
use tokio::time::Instant;
use tracing::Instrument;

pub use guard::LockSetGuard;
use guard::{Held, Member};

use crate::backend::{Backend, hash_tag};
use crate::client::LockClient;
use crate::protocol::state::LockMode;
use crate::{Error, LockOptions};

/// Several locks taken at once, all or nothing: some for reading, some for writing.
///
/// Build it with [`LockClient::lock_set`] (or [`LockClient::lock_set_with`] for
/// options that every member uses), [`read`](Self::read) and [`write`](Self::write);
/// take it with [`acquire`](Self::acquire) or [`try_acquire`](Self::try_acquire).
///
/// # What a set guarantees
///
/// - **All or nothing.** The guard holds every member; an acquire that fails, times
///   out or is dropped leaves none of them held and no place in any line: the
///   members it took are released before an error returns (after a dropped
///   future, in the background), and the place it waited in is withdrawn at once,
///   in the background, as a dropped acquire's is.
/// - **No deadlock**, whatever sets other clients take and in whatever order they
///   list the members: every set takes its members in one global order (the hash
///   tag of each member's key, then the key), so a set that holds some members
///   only waits for later ones.
/// - **Each member is an ordinary hold of its lock**: its fairness (a writer of the
///   set queues like any writer, readers wait behind queued writers), wake-ups,
///   lease renewal, lost-lease signal and shared reads (a read member joins this
///   client's read hold of the lock when it can) are the lock's, and clients that
///   take the lock alone, or through other sets, see an ordinary holder.
/// - **One wait limit**: [`LockOptions::wait_timeout`] bounds the whole acquire,
///   not each member.
///
/// The guard's [`lost`](LockSetGuard::lost) resolves when any member's lease is
/// lost, and [`is_held`](LockSetGuard::is_held) is true only while every member is.
///
/// A set handle is cheap to clone and does no I/O until acquired; one handle may be
/// acquired many times, also concurrently.
///
/// # Examples
///
/// ```no_run
/// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
/// let update = client.lock_set().read("catalogue").read("fx").write("prices");
/// let held = update.acquire().await?;
/// let fence = held.fencing_token("prices"); // Some(..): a written member
/// // ... read the catalogue and the rates, write the prices ...
/// held.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockSet {
    client: LockClient,
    options: LockOptions,
    members: Arc<Vec<Member>>,
    /// Members' metrics are labelled with their names ([`Self::with_metrics_name`]).
    metrics_names: bool,
}

impl LockSet {
    pub(crate) fn new(client: LockClient, options: LockOptions) -> Self {
        LockSet {
            client,
            options,
            members: Arc::default(),
            metrics_names: false,
        }
    }

    /// Adds `name`, to be read. No I/O.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn run(client: redis_rwlock::LockClient) {
    /// let set = client.lock_set().read("catalogue").write("prices");
    /// # }
    /// ```
    #[must_use]
    pub fn read(self, name: impl Into<String>) -> Self {
        self.with(name.into(), LockMode::Read)
    }

    /// Adds `name`, to be written. No I/O.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn run(client: redis_rwlock::LockClient) {
    /// let set = client.lock_set().write("prices").write("history");
    /// # }
    /// ```
    #[must_use]
    pub fn write(self, name: impl Into<String>) -> Self {
        self.with(name.into(), LockMode::Write)
    }

    fn with(mut self, name: String, mode: LockMode) -> Self {
        let mut lock = self.client.rwlock_with(name, self.options.clone());
        if self.metrics_names {
            lock = lock.with_metrics_name();
        }
        Arc::make_mut(&mut self.members).push(Member { mode, lock });
        self
    }

    /// Takes every member, waiting (at most [`LockOptions::wait_timeout`] for the
    /// whole set) for those that others hold.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOptions`] before any I/O when the set has no member, names a
    /// lock twice, or a name or option is invalid; [`Error::Timeout`] naming the
    /// member it was waiting for when the limit passes; otherwise what that member's
    /// [`RwLock::read`](crate::RwLock::read) or [`RwLock::write`](crate::RwLock::write) failed with. Nothing stays held after an
    /// error.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future releases the members it holds and withdraws the one it
    /// waits for, in the background (as a dropped guard does).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
    /// use std::time::Duration;
    /// use redis_rwlock::LockOptions;
    ///
    /// let set = client
    ///     .lock_set_with(LockOptions::default().wait_timeout(Duration::from_secs(5)))
    ///     .read("sources")
    ///     .write("report");
    /// let held = set.acquire().await?;
    /// held.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn acquire(
        &self,
    ) -> impl Future<Output = Result<LockSetGuard, Error>> + Send + Sync + 'static {
        let span = self.span(true);
        SyncFuture::new(self.clone().take(true).instrument(span))
    }

    /// Takes every member if none must wait: [`Error::WouldBlock`] as soon as one
    /// would (what was taken before it is released again).
    ///
    /// # Errors
    ///
    /// [`Error::WouldBlock`] when a member is held in a conflicting mode or a writer
    /// waits ahead (as [`RwLock::try_read`](crate::RwLock::try_read) / [`RwLock::try_write`](crate::RwLock::try_write) say); otherwise as
    /// [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
    /// use redis_rwlock::Error;
    ///
    /// match client.lock_set().write("a").write("b").try_acquire().await {
    ///     Ok(held) => held.release().await?,
    ///     Err(Error::WouldBlock) => println!("busy"),
    ///     Err(err) => return Err(err),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_acquire(
        &self,
    ) -> impl Future<Output = Result<LockSetGuard, Error>> + Send + Sync + 'static {
        let span = self.span(false);
        SyncFuture::new(self.clone().take(false).instrument(span))
    }

    /// The `debug` span an acquire runs in: `lock_set`, with the members in order
    /// and their modes, and whether it waits; each member's own acquire runs in its
    /// lock's `acquire` span inside it.
    fn span(&self, wait: bool) -> tracing::Span {
        tracing::debug_span!("lock_set", members = ?self.members().collect::<Vec<_>>(), wait)
    }

    /// Labels each member's metrics with its lock's name, as
    /// [`RwLock::with_metrics_name`](crate::RwLock::with_metrics_name) does for one
    /// lock (the same advice holds: only for a few long-lived locks). The set's own
    /// count, `redis_rwlock_lock_set_acquisitions_total`, has no lock label. Without
    /// the feature `metrics`, it changes nothing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
    /// let set = client.lock_set().read("catalogue").write("prices").with_metrics_name();
    /// set.acquire().await?.release().await?;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn with_metrics_name(mut self) -> Self {
        self.metrics_names = true;
        for member in Arc::make_mut(&mut self.members) {
            member.lock = member.lock.clone().with_metrics_name();
        }
        self
    }

    /// The members, with the mode each is taken in, in the order the set takes
    /// them (see [What a set guarantees](Self#what-a-set-guarantees)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn run(client: redis_rwlock::LockClient) {
    /// use redis_rwlock::LockMode;
    ///
    /// let set = client.lock_set().write("b").read("a");
    /// let order: Vec<(&str, LockMode)> = set.members().collect();
    /// assert_eq!(order.len(), 2);
    /// # }
    /// ```
    pub fn members(&self) -> impl Iterator<Item = (&str, LockMode)> {
        let mut members: Vec<&Member> = self.members.iter().collect();
        members.sort_by_cached_key(|member| member.order());
        members
            .into_iter()
            .map(|member| (member.lock.name(), member.mode))
    }

    /// The members in the order they are taken, or why the set cannot be taken.
    fn ordered(&self) -> Result<Vec<Member>, Error> {
        if self.members.is_empty() {
            return Err(Error::InvalidOptions(
                "the lock set has no members: add them with read(name) or write(name)".into(),
            ));
        }
        let mut members = self.members.to_vec();
        for member in &members {
            member.lock.check()?;
        }
        members.sort_by_cached_key(Member::order);
        if let Some(twice) = members
            .windows(2)
            .find(|pair| pair[0].lock.name() == pair[1].lock.name())
        {
            return Err(Error::InvalidOptions(format!(
                "the lock set names {:?} twice: list each lock once (write it, if any \
                 part of the work writes it)",
                twice[0].lock.name()
            )));
        }
        Ok(members)
    }

    /// Takes the members in order, `wait`ing or not; on any failure releases what
    /// it took.
    async fn take(self, wait: bool) -> Result<LockSetGuard, Error> {
        let taken = self.take_all(wait).await;
        crate::metrics::lock_set_acquired(&taken);
        taken
    }

    /// [`take`](Self::take) before the set's acquisition is counted.
    async fn take_all(&self, wait: bool) -> Result<LockSetGuard, Error> {
        let members = self.ordered()?;
        let limit = self.options.wait_timeout.filter(|_| wait);
        let deadline = limit.map(|limit| Instant::now() + limit);
        let mut held = Vec::with_capacity(members.len());
        for group in self.slots(&members) {
            if let Err(err) = self.take_slot(group, wait, deadline, &mut held).await {
                tracing::debug!(%err, "lock set not taken");
                // What it took goes; the error that stopped it is the one to report.
                let _ = guard::release_all(held).await;
                return Err(err);
            }
        }
        tracing::debug!(members = held.len(), "lock set taken");
        Ok(LockSetGuard::new(held))
    }

    /// The members in runs that share a slot (all of them, on a single server):
    /// what one request may take together.
    fn slots<'m>(&'m self, members: &'m [Member]) -> impl Iterator<Item = &'m [Member]> {
        let link = &self.client.inner.link;
        members.chunk_by(move |a, b| match (a.lock.key(), b.lock.key()) {
            (Ok(a), Ok(b)) => link.shares_slot(a, b),
            _ => false,
        })
    }

    /// Takes the members of one slot into `held`: all in one request when there are
    /// several (and no replicas to wait for), else, or when that one is refused and
    /// the set waits, one by one in order.
    async fn take_slot(
        &self,
        group: &[Member],
        wait: bool,
        deadline: Option<Instant>,
        held: &mut Vec<Held>,
    ) -> Result<(), Error> {
        if group.len() > 1 && self.options.min_replicas == 0 {
            let at_once = self
                .within(deadline, &group[0], one_slot::take(group))
                .await?;
            match at_once {
                Some(taken) => {
                    held.extend(taken);
                    return Ok(());
                }
                None if !wait => return Err(Error::WouldBlock),
                None => {}
            }
        }
        for member in group {
            held.push(self.within(deadline, member, member.take(wait)).await?);
        }
        Ok(())
    }

    /// `taking`, or [`Error::Timeout`] naming `member` at `deadline`.
    async fn within<T>(
        &self,
        deadline: Option<Instant>,
        member: &Member,
        taking: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let Some(deadline) = deadline else {
            return taking.await;
        };
        tokio::time::timeout_at(deadline, taking)
            .await
            .unwrap_or_else(|_| {
                Err(Error::Timeout {
                    lock: member.lock.name().to_owned(),
                    mode: member.error_mode(),
                    waited: self.options.wait_timeout.unwrap_or_default(),
                })
            })
    }
}

impl Member {
    /// Where the member comes in the one order every set takes its members in:
    /// the hash tag of its key (members that share it share a slot, and come
    /// together), then the key; the name, for a lock whose key is unusable
    /// (`ordered` refuses it before the order matters).
    fn order(&self) -> (Vec<u8>, String) {
        match self.lock.key() {
            Ok(key) => (hash_tag(key.as_bytes()).to_vec(), key.to_owned()),
            Err(_) => (Vec::new(), self.lock.name().to_owned()),
        }
    }

    pub(super) fn error_mode(&self) -> crate::Mode {
        match self.mode {
            LockMode::Read => crate::Mode::Read,
            LockMode::Write => crate::Mode::Write,
        }
    }

    /// The member's own acquire.
    pub(super) async fn take(&self, wait: bool) -> Result<Held, Error> {
        let lock = &self.lock;
        Ok(match (self.mode, wait) {
            (LockMode::Read, true) => Held::Read(lock.read().await?),
            (LockMode::Read, false) => Held::Read(lock.try_read().await?),
            (LockMode::Write, true) => Held::Write(lock.write().await?),
            (LockMode::Write, false) => Held::Write(lock.try_write().await?),
        })
    }
}

impl fmt::Debug for LockSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockSet")
            .field("members", &self.members().collect::<Vec<_>>())
            .field("options", &self.options)
            .finish()
    }
}

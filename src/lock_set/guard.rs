//! [`LockSetGuard`]: every member of a [`LockSet`](crate::LockSet), held.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use crate::protocol::state::LockMode;
use crate::{Error, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// One member of a set: its lock, and the mode the set takes it in.
#[derive(Clone)]
pub(super) struct Member {
    pub(super) mode: LockMode,
    pub(super) lock: RwLock,
}

/// A member's hold: the lock's own guard.
pub(super) enum Held {
    Read(RwLockReadGuard),
    Write(RwLockWriteGuard),
}

impl Held {
    fn name(&self) -> &str {
        match self {
            Held::Read(guard) => guard.name(),
            Held::Write(guard) => guard.name(),
        }
    }

    fn is_held(&self) -> bool {
        match self {
            Held::Read(guard) => guard.is_held(),
            Held::Write(guard) => guard.is_held(),
        }
    }

    async fn lost(&self) {
        match self {
            Held::Read(guard) => guard.lost().await,
            Held::Write(guard) => guard.lost().await,
        }
    }

    async fn release(self) -> Result<(), Error> {
        match self {
            Held::Read(guard) => guard.release().await,
            Held::Write(guard) => guard.release().await,
        }
    }
}

/// Releases every hold, all at once, each in a task of its own (a release that
/// started goes on if the caller stops waiting); the first error, if any.
pub(super) async fn release_all(held: Vec<Held>) -> Result<(), Error> {
    let releases: Vec<_> = held
        .into_iter()
        .map(|hold| tokio::spawn(hold.release()))
        .collect();
    let mut first = Ok(());
    for release in releases {
        let result = match release.await {
            Ok(result) => result,
            Err(failed) => match failed.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                // The runtime shuts down: the hold ends with its lease.
                Err(_) => Ok(()),
            },
        };
        if first.is_ok() {
            first = result;
        }
    }
    first
}

/// Every member of a [`LockSet`](crate::LockSet), held: each member's lease is
/// renewed in the background while the guard lives. Release it with
/// [`release`](Self::release); dropping it releases every member in the background
/// (as each lock's guards do: see [the lock's drop
/// contract](crate::RwLock#drop-contract)).
#[must_use = "the members are released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct LockSetGuard {
    /// In the order the set took them.
    held: Vec<Held>,
}

impl LockSetGuard {
    pub(super) fn new(held: Vec<Held>) -> Self {
        LockSetGuard { held }
    }

    /// The fencing token of the written member `name`: `None` for a member the set
    /// reads, or a name that is not a member. Pass it to the resource you write, as
    /// with [`RwLockWriteGuard::fencing_token`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
    /// let held = client.lock_set().read("fx").write("prices").acquire().await?;
    /// assert!(held.fencing_token("prices").is_some());
    /// assert_eq!(held.fencing_token("fx"), None);
    /// held.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self, name: &str) -> Option<u64> {
        self.held.iter().find_map(|hold| match hold {
            Held::Write(guard) if guard.name() == name => Some(guard.fencing_token()),
            _ => None,
        })
    }

    /// False once any member's lease is known lost (see
    /// [`RwLockWriteGuard::is_held`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
    /// let held = client.lock_set().write("a").write("b").acquire().await?;
    /// for item in 0..1000 {
    ///     if !held.is_held() {
    ///         break; // a member's lease is gone: stop before doing harm
    ///     }
    ///     // ... work on item ...
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        self.held.iter().all(Held::is_held)
    }

    /// Resolves when any member's lease is lost (never, while renewals succeed).
    ///
    /// # Cancel safety
    ///
    /// Safe to drop and to call again.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
    /// let held = client.lock_set().read("sources").write("report").acquire().await?;
    /// tokio::select! {
    ///     () = held.lost() => eprintln!("a member's lease is lost, stopping"),
    ///     () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
    /// }
    /// held.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        let mut lost: Vec<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = self
            .held
            .iter()
            .map(|hold| Box::pin(hold.lost()) as Pin<Box<dyn Future<Output = ()> + Send>>)
            .collect();
        std::future::poll_fn(|cx| {
            if lost.iter_mut().any(|one| one.as_mut().poll(cx).is_ready()) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }

    /// The members' names, in the order the set took them.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
    /// let held = client.lock_set().write("b").read("a").acquire().await?;
    /// assert_eq!(held.names().count(), 2);
    /// # Ok(()) }
    /// ```
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.held.iter().map(Held::name)
    }

    /// Ends every member's hold, all at once.
    ///
    /// Returns `Ok(())` when none of the members holds this set's tokens afterwards.
    ///
    /// # Errors
    ///
    /// The first error of a member's `release` ([`RwLockReadGuard::release`],
    /// [`RwLockWriteGuard::release`]): [`Error::LeaseLost`] for a member whose lease
    /// the guard already knew lost, [`Error::Redis`] for one Redis could not be asked
    /// to release (it ends with its lease). The other members are released either
    /// way.
    ///
    /// # Cancel safety
    ///
    /// The releases go on in the background once started; a member whose release
    /// did not run ends with its lease.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
    /// let held = client.lock_set().write("a").write("b").acquire().await?;
    /// held.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<(), Error> {
        release_all(self.held).await
    }
}

impl fmt::Debug for LockSetGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let members: Vec<(&str, LockMode)> = self
            .held
            .iter()
            .map(|hold| {
                let mode = match hold {
                    Held::Read(_) => LockMode::Read,
                    Held::Write(_) => LockMode::Write,
                };
                (hold.name(), mode)
            })
            .collect();
        f.debug_struct("LockSetGuard")
            .field("members", &members)
            .field("is_held", &self.is_held())
            .finish()
    }
}

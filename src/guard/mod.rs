//! The guards and their leases: what a granted acquire hands the caller.
//!
//! One guard per mode (`read.rs`, `write.rs`, `upgradable.rs`) over one core
//! ([`guard_core!`] below: the methods every guard has), each over a lease
//! (`lease.rs`: the hold's deadline, lost signal, renewal and release), renewed by
//! the client's renewal queue (`renewals.rs`); a read guard's lease may be a share
//! of the process's read hold (`lock/shared_reads/`). The write guard's fenced
//! writes are built as [`FencedWrites`] (`fenced.rs`). A lease sends its renewals
//! and release through its lock (`lock/requests.rs`), never to a backend itself.

/// The guard core: what every guard does with its hold, whichever its mode, written
/// once beneath the three guards. Inside a guard's `impl` block it makes the public
/// methods that only pass on to the hold: [`name`](crate::RwLockReadGuard::name),
/// [`deadline`](crate::RwLockReadGuard::deadline),
/// [`extend`](crate::RwLockReadGuard::extend),
/// [`is_held`](crate::RwLockReadGuard::is_held) and
/// [`lost`](crate::RwLockReadGuard::lost), with their docs. `hold` is the guard's
/// field (a [`Lease`](lease::Lease), or a read's
/// [`Share`](crate::lock::shared_reads::Share): both answer these), `acquire` the
/// `RwLock` method its examples acquire it with, `binding` their name for it, and
/// `is_held_also` a paragraph of the guard's own for `is_held`. What differs between
/// the modes (`mode`, `release`, upgrading, downgrading, fenced writes) stays in each
/// guard's file.
macro_rules! guard_core {
    (
        hold: $hold:ident,
        acquire: $acquire:literal,
        binding: $x:literal
        $(, is_held_also: $is_held_also:literal)? $(,)?
    ) => {
        /// The name of the lock this guard holds.
        ///
        /// # Examples
        ///
        /// ```no_run
        /// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
        #[doc = concat!("let ", $x, " = client.rwlock(\"inventory\").", $acquire, "().await?;")]
        #[doc = concat!("assert_eq!(", $x, ".name(), \"inventory\");")]
        /// # Ok(()) }
        /// ```
        pub fn name(&self) -> &str {
            self.$hold.name()
        }

        /// The local deadline of the lease: [`is_held`](Self::is_held) turns false then
        /// unless a renewal moves it. It is when the request that granted or last renewed
        /// the hold was sent, plus the lease (cut to the original-design clients' timeout
        /// when [`LockOptions::original_timeouts`](crate::LockOptions::original_timeouts)
        /// is set), on this process's monotonic clock; Redis's deadline is never earlier.
        ///
        /// # Examples
        ///
        /// ```no_run
        /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
        #[doc = concat!("let ", $x, " = lock.", $acquire, "().await?;")]
        #[doc = concat!("let left = ", $x, ".deadline().saturating_duration_since(std::time::Instant::now());")]
        /// println!("held for at least {left:?} more");
        /// # Ok(()) }
        /// ```
        pub fn deadline(&self) -> std::time::Instant {
            self.$hold.deadline()
        }

        /// Renews the lease now, for a full lease from this call (what the background
        /// renewal does; with [`LockOptions::auto_renew`](crate::LockOptions::auto_renew)
        /// off, this is how a long task keeps its hold).
        ///
        /// # Errors
        ///
        /// [`Error::LeaseLost`] when the lease was already lost, the hold is gone, or the
        /// local deadline passed before Redis answered (the guard then reports the lease
        /// lost); [`Error::Redis`] (doing [`Operation::Renew`]($crate::Operation::Renew))
        /// when this attempt failed and the deadline has not passed (the hold may still
        /// be renewed by a later call).
        ///
        /// # Cancel safety
        ///
        /// If dropped mid-flight the renewal may or may not have happened; the local
        /// deadline moves only on a reply.
        ///
        /// # Examples
        ///
        /// ```no_run
        /// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
        /// use redis_rwlock::LockOptions;
        ///
        /// let lock = client.rwlock_with("inventory", LockOptions::default().auto_renew(false));
        #[doc = concat!("let ", $x, " = lock.", $acquire, "().await?;")]
        /// for batch in 0..10 {
        ///     // ... one batch of work, well within the lease ...
        #[doc = concat!("    ", $x, ".extend().await?;")]
        /// }
        #[doc = concat!($x, ".release().await?;")]
        /// # Ok(()) }
        /// ```
        pub async fn extend(&self) -> Result<(), $crate::Error> {
            self.$hold.extend().await
        }

        /// False once the lease is known lost: a renewal found it gone, or Redis could
        /// not be reached before the lease's local deadline.
        $(
        ///
        #[doc = $is_held_also]
        )?
        ///
        /// # Examples
        ///
        /// ```no_run
        /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
        #[doc = concat!("let ", $x, " = lock.", $acquire, "().await?;")]
        /// for item in 0..1000 {
        #[doc = concat!("    if !", $x, ".is_held() {")]
        ///         break; // the lease is gone: stop before doing harm
        ///     }
        ///     // ... work on item ...
        /// }
        /// # Ok(()) }
        /// ```
        pub fn is_held(&self) -> bool {
            self.$hold.is_held()
        }

        /// Resolves when the lease is lost (never, while renewals succeed). Use it to
        /// abandon work that must not outlive the hold.
        ///
        /// # Cancel safety
        ///
        /// Safe to drop and to call again.
        ///
        /// # Examples
        ///
        /// ```no_run
        /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
        #[doc = concat!("let ", $x, " = lock.", $acquire, "().await?;")]
        /// tokio::select! {
        #[doc = concat!("    () = ", $x, ".lost() => eprintln!(\"lease lost, stopping\"),")]
        ///     () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
        /// }
        #[doc = concat!($x, ".release().await?;")]
        /// # Ok(()) }
        /// ```
        pub async fn lost(&self) {
            self.$hold.lost().await
        }
    };
}

pub(crate) mod fenced;
pub(crate) mod lease;
pub(crate) mod read;
pub(crate) mod renewals;
pub(crate) mod upgradable;
pub(crate) mod write;

pub use fenced::FencedWrites;
pub use read::RwLockReadGuard;
pub use upgradable::RwLockUpgradableReadGuard;
pub use write::RwLockWriteGuard;

//! `exec`: run a command under the lock, like flock(1) across machines.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use redis_rwlock::{
    Error, LockClient, LockMode, LockOptions, LockSet, LockSetGuard, RwLock, RwLockReadGuard,
    RwLockWriteGuard,
};

use crate::child::{Running, Stopped, describe, exit_code};
use crate::cli::ExecArgs;
use crate::failure::{Failure, code};
use crate::signals::Incoming;

/// The library's default lease, which is also what the CLI assumes for clients of
/// the original design when `--lease` changes this hold's own lease.
const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// How long to keep the runtime alive after an abandoned acquire, so the library's
/// background withdrawal (of a queued writer's place, or a hold whose reply was
/// lost) reaches Redis before the process exits. Past it, such leftovers lapse on
/// their own within seconds.
const SETTLE: Duration = Duration::from_millis(250);

/// The hold, read or write, or every hold of a lock set.
enum Guard {
    Read(RwLockReadGuard),
    Write(RwLockWriteGuard),
    Set {
        held: LockSetGuard,
        /// The one written member, whose token the command gets.
        written: Option<String>,
    },
}

impl Guard {
    fn is_held(&self) -> bool {
        match self {
            Guard::Read(guard) => guard.is_held(),
            Guard::Write(guard) => guard.is_held(),
            Guard::Set { held, .. } => held.is_held(),
        }
    }

    async fn lost(&self) {
        match self {
            Guard::Read(guard) => guard.lost().await,
            Guard::Write(guard) => guard.lost().await,
            Guard::Set { held, .. } => held.lost().await,
        }
    }

    fn fencing_token(&self) -> Option<u64> {
        match self {
            Guard::Read(_) => None,
            Guard::Write(guard) => Some(guard.fencing_token()),
            Guard::Set { held, written } => held.fencing_token(written.as_deref()?),
        }
    }

    async fn release(self) -> Result<(), Error> {
        match self {
            Guard::Read(guard) => guard.release().await,
            Guard::Write(guard) => guard.release().await,
            Guard::Set { held, .. } => held.release().await,
        }
    }
}

/// Acquires, runs the command, releases; the exit code is the command's unless the
/// lease was lost. `options` name the lock (its key prefix); the flags add the rest.
pub async fn run(
    client: &LockClient,
    mut options: LockOptions,
    args: ExecArgs,
) -> Result<ExitCode, Failure> {
    let locks = args
        .locks()
        .map_err(|message| Failure::new(code::USAGE, message))?;
    if let Some(lease) = args.lease {
        // Only this hold's lease changes: clients of the original design keep being
        // judged by the default, not by a short `--lease`.
        options = options
            .read_lease(lease)
            .write_lease(lease)
            .original_timeouts(DEFAULT_LEASE, DEFAULT_LEASE);
    }
    let nonblocking = args.wait == Some(Duration::ZERO);
    if let Some(wait) = args.wait.filter(|_| !nonblocking) {
        options = options.wait_timeout(wait);
    }
    let wanted = Wanted::new(client, options, locks);
    let hold = wanted.describe();

    // From here on, SIGINT/SIGTERM/SIGHUP never kill the tool silently.
    let mut signals = Incoming::listen()?;
    let guard = tokio::select! {
        result = wanted.acquire(nonblocking) => match result {
            Ok(guard) => guard,
            Err(err) => return Err(not_acquired(&hold, err).await),
        },
        sig = signals.recv() => {
            tokio::time::sleep(SETTLE).await;
            return Err(Failure::new(
                sig.exit_code(),
                format!("interrupted by SIG{} while waiting for the {hold}", sig.name()),
            ));
        }
    };
    if !guard.is_held() {
        let _ = guard.release().await;
        return Err(Failure::new(
            code::LEASE_LOST,
            format!("lost the {hold} before the command started"),
        ));
    }

    // At a terminal the command stays in the foreground process group so it can
    // read from it; otherwise it gets a group of its own, so signals reach everything
    // it started.
    let interactive = std::io::stdin().is_terminal()
        || std::io::stdout().is_terminal()
        || std::io::stderr().is_terminal();
    let running = match Running::spawn(
        &args.command,
        guard.fencing_token(),
        !interactive,
        args.kill_after,
    ) {
        Ok(running) => running,
        Err(failure) => {
            release(guard).await;
            return Err(failure);
        }
    };
    let program = running.program().to_owned();
    let supervised = running.supervise(guard.lost(), &mut signals, &hold).await;
    let (status, stopped) = match supervised {
        Ok(ended) => ended,
        Err(failure) => {
            release(guard).await;
            return Err(failure);
        }
    };

    let released = guard.release().await;
    if stopped == Stopped::LeaseLost {
        return Err(Failure::new(
            code::LEASE_LOST,
            format!("{program:?} {} after the {hold} was lost", describe(status)),
        ));
    }
    match released {
        Ok(()) => {}
        Err(Error::LeaseLost { .. }) => {
            return Err(Failure::new(
                code::LEASE_LOST,
                format!(
                    "the {hold} was lost before {program:?} finished ({}); it ran partly \
                     without the lock",
                    describe(status)
                ),
            ));
        }
        Err(err) => release_failed(err),
    }
    Ok(ExitCode::from(exit_code(status)))
}

/// What `exec` takes: one lock, or a set of them.
enum Wanted {
    One(RwLock, LockMode),
    Set(LockSet),
}

impl Wanted {
    fn new(client: &LockClient, options: LockOptions, locks: Vec<(String, LockMode)>) -> Self {
        match <[_; 1]>::try_from(locks) {
            Ok([(name, mode)]) => Wanted::One(client.rwlock_with(name, options), mode),
            Err(locks) => Wanted::Set(locks.into_iter().fold(
                client.lock_set_with(options),
                |set, (name, mode)| match mode {
                    LockMode::Read => set.read(name),
                    LockMode::Write => set.write(name),
                },
            )),
        }
    }

    /// "write lock on inventory", "locks read a, b, written c" for messages.
    fn describe(&self) -> String {
        match self {
            Wanted::One(lock, mode) => {
                let mode = if *mode == LockMode::Write {
                    "write"
                } else {
                    "read"
                };
                format!("{mode} lock on {}", crate::output::quoted(lock.name()))
            }
            Wanted::Set(set) => {
                let names = |wanted: LockMode| {
                    set.members()
                        .filter(|(_, mode)| *mode == wanted)
                        .map(|(name, _)| crate::output::quoted(name))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let (read, written) = (names(LockMode::Read), names(LockMode::Write));
                match (read.is_empty(), written.is_empty()) {
                    (false, false) => format!("locks read {read} and written {written}"),
                    (false, true) => format!("read locks on {read}"),
                    _ => format!("write locks on {written}"),
                }
            }
        }
    }

    async fn acquire(&self, nonblocking: bool) -> Result<Guard, Error> {
        Ok(match (self, nonblocking) {
            (Wanted::One(lock, LockMode::Read), false) => Guard::Read(lock.read().await?),
            (Wanted::One(lock, LockMode::Read), true) => Guard::Read(lock.try_read().await?),
            (Wanted::One(lock, LockMode::Write), false) => Guard::Write(lock.write().await?),
            (Wanted::One(lock, LockMode::Write), true) => Guard::Write(lock.try_write().await?),
            (Wanted::Set(set), _) => {
                let mut written = set.members().filter(|(_, mode)| *mode == LockMode::Write);
                let written = match (written.next(), written.next()) {
                    (Some((name, _)), None) => Some(name.to_owned()),
                    _ => None,
                };
                let held = if nonblocking {
                    set.try_acquire().await?
                } else {
                    set.acquire().await?
                };
                Guard::Set { held, written }
            }
        })
    }
}

/// The failure for an acquire that did not succeed. An acquire that gave up while
/// waiting left its withdrawal to the background: give it time to reach Redis.
async fn not_acquired(hold: &str, err: Error) -> Failure {
    match err {
        Error::WouldBlock => Failure::new(
            code::NOT_ACQUIRED,
            format!("the {hold} is busy (held, or a writer is queued) and --wait is 0s"),
        ),
        // Says which lock, in which mode, the limit: the library's message is enough.
        Error::Timeout { .. } | Error::Redis { .. } | Error::NotReplicated { .. } => {
            tokio::time::sleep(SETTLE).await;
            Failure::error(err)
        }
        Error::InvalidOptions(_) => Failure::lock(format!("cannot take the {hold}"), err),
        err => {
            tokio::time::sleep(SETTLE).await;
            Failure::lock(format!("cannot take the {hold}"), err)
        }
    }
}

/// Releases a hold on the way out of a failure; a failed release only warns.
async fn release(guard: Guard) {
    if let Err(err) = guard.release().await {
        release_failed(err);
    }
}

/// A failed release does not change the exit code: the hold ends with its lease.
/// The error names the lock and what failed.
fn release_failed(err: Error) {
    Failure::lock("the hold ends with its lease", err).print();
}

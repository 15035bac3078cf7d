//! `exec`: run a command under the lock, like flock(1) across machines.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use redis_rwlock::{Error, LockClient, LockOptions, RwLock, RwLockReadGuard, RwLockWriteGuard};

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

/// The hold, read or write.
enum Guard {
    Read(RwLockReadGuard),
    Write(RwLockWriteGuard),
}

impl Guard {
    fn is_held(&self) -> bool {
        match self {
            Guard::Read(guard) => guard.is_held(),
            Guard::Write(guard) => guard.is_held(),
        }
    }

    async fn lost(&self) {
        match self {
            Guard::Read(guard) => guard.lost().await,
            Guard::Write(guard) => guard.lost().await,
        }
    }

    fn fencing_token(&self) -> Option<u64> {
        match self {
            Guard::Read(_) => None,
            Guard::Write(guard) => Some(guard.fencing_token()),
        }
    }

    async fn release(self) -> Result<(), Error> {
        match self {
            Guard::Read(guard) => guard.release().await,
            Guard::Write(guard) => guard.release().await,
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
    let write = args.write;
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
    let lock = client.rwlock_with(args.name.as_str(), options);
    let hold = format!(
        "{} lock on {}",
        if write { "write" } else { "read" },
        crate::output::quoted(lock.name())
    );

    // From here on, SIGINT/SIGTERM/SIGHUP never kill the tool silently.
    let mut signals = Incoming::listen()?;
    let guard = tokio::select! {
        result = acquire(&lock, write, nonblocking) => match result {
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

async fn acquire(lock: &RwLock, write: bool, nonblocking: bool) -> Result<Guard, Error> {
    Ok(match (write, nonblocking) {
        (false, false) => Guard::Read(lock.read().await?),
        (false, true) => Guard::Read(lock.try_read().await?),
        (true, false) => Guard::Write(lock.write().await?),
        (true, true) => Guard::Write(lock.try_write().await?),
    })
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

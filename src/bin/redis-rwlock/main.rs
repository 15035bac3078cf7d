//! `redis-rwlock`: inspect and use [`redis_rwlock`] read-write locks from the shell.
//!
//! ```text
//! redis-rwlock [--url URL | --cluster URL[,URL...]] [--prefix PREFIX] <COMMAND>
//!
//!   status NAME [--json]              who holds the lock, until when (local time)
//!   exec (--read|--write) NAME [--wait D] [--lease D] [--kill-after D] -- COMMAND ARGS...
//!                                     run COMMAND under the lock, like flock(1)
//!   release --force NAME              end every hold (operator's break-glass)
//!   list [PATTERN] [--json] [--limit N]
//!                                     every lock matching PATTERN, on every master
//!   watch NAME [--interval D]         redraw NAME's status until interrupted
//!   libraries [--remove-others [--keep LIB]... | --remove LIB...] [--dry-run] [--json]
//!                                     the lock's function libraries on every master;
//!                                     remove those of versions no longer running
//! ```
//!
//! Without `--url`/`--cluster`, `REDIS_URL` (one server) or `REDIS_CLUSTER_NODES`
//! (comma-separated cluster nodes) say where the locks live. Durations are human:
//! `500ms`, `30s`, `2m`, or plain seconds (`30`, `0.5`) as `flock -w` takes them. Errors are printed as `redis-rwlock: <message>: <cause>...`.
//!
//! `status` exits 0 when the lock is held and 1 when it is free; `list` 0 when a lock
//! matched and 1 when none did; `watch` 0 when interrupted. `exec` exits with
//! the command's status (128 + N if it died of signal N). The
//! tool's own exit codes are in [`failure::code`]: 64 usage, 65 the key holds another
//! type, 69 Redis unreachable or failed, 70 internal, 71 OS error, 75 lock not
//! acquired (busy or `--wait` ran out), 79 lease lost while the command ran (it was
//! terminated), 126 command not runnable, 127 command not found, 128 + N interrupted
//! by signal N while waiting, 141 the output closed by its reader before all of it
//! was written (a quiet stop, as a tool killed by `SIGPIPE`; output that fits in the
//! pipe is written whole first, so `list | head -1` of a short list exits 0). `redis-rwlock --help` prints the same table.
//!
//! Built with the `cli` feature: `cargo install redis-rwlock --features cli`. Unix
//! only: it supervises the command with unix signals and process groups. Elsewhere
//! the binary builds, prints that and exits 70.

#[cfg(unix)]
mod child;
#[cfg(unix)]
mod cli;
#[cfg(unix)]
mod connect;
#[cfg(unix)]
mod exec;
#[cfg(unix)]
mod failure;
#[cfg(unix)]
mod libraries;
#[cfg(unix)]
mod list;
#[cfg(unix)]
mod masters;
#[cfg(unix)]
mod output;
#[cfg(unix)]
mod release;
#[cfg(unix)]
mod signals;
#[cfg(unix)]
mod status;
#[cfg(unix)]
mod watch;

use std::process::ExitCode;

#[cfg(unix)]
use clap::Parser;

#[cfg(unix)]
use crate::cli::{Cli, Command};
#[cfg(unix)]
use crate::connect::Endpoint;
#[cfg(unix)]
use crate::failure::{Failure, code};
#[cfg(unix)]
use crate::masters::Masters;

/// Not a unix system: `exec` has no signals or process groups to stop its command
/// with, so the tool does nothing at all.
#[cfg(not(unix))]
fn main() -> ExitCode {
    eprintln!(
        "redis-rwlock: this tool runs on unix systems only (it stops the commands it \
         runs with unix signals); use the redis_rwlock library here"
    );
    // EX_SOFTWARE, as the unix build's internal errors.
    ExitCode::from(70)
}

#[cfg(unix)]
fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // --help and --version print to stdout and succeed; usage errors are 64.
            let _ = err.print();
            return ExitCode::from(if err.use_stderr() { code::USAGE } else { 0 });
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return fail(Failure::new(code::OS, "cannot start").caused_by(err)),
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(failure) => fail(failure),
    }
}

#[cfg(unix)]
fn fail(failure: Failure) -> ExitCode {
    failure.print();
    failure.exit_code()
}

#[cfg(unix)]
async fn run(cli: Cli) -> Result<ExitCode, Failure> {
    let endpoint = Endpoint::resolve(&cli.connection, |name| std::env::var(name).ok())?;
    let client = endpoint.connect().await?;
    // Every command names its lock with the same key prefix.
    let options = redis_rwlock::LockOptions::default().key_prefix(&cli.connection.prefix);
    match cli.command {
        Command::Status(args) => {
            status::run(&client.rwlock_with(args.name, options), args.json).await
        }
        Command::Exec(args) => exec::run(&client, options, args).await,
        Command::Release(args) => {
            release::run(&client.rwlock_with(args.name, options), args.force).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::List(args) => list::run(&client, &cli.connection.prefix, args).await,
        Command::Watch(args) => {
            watch::run(&client.rwlock_with(args.name, options), args.interval).await
        }
        Command::Libraries(args) => libraries::run(&Masters::connect(&endpoint).await?, args).await,
    }
}

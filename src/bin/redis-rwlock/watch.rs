//! `watch`: one lock's `status`, redrawn until interrupted.

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::time::Duration;

use chrono::Local;
use redis_rwlock::RwLock;
use tokio::time::{MissedTickBehavior, interval};

use crate::failure::Failure;
use crate::output::{self, print};
use crate::signals::Incoming;
use crate::status;

/// Clears a terminal and puts the cursor at its top left, as watch(1) does.
const CLEAR: &str = "\x1b[H\x1b[2J";

/// Shows the lock's status every `every` until SIGINT, SIGTERM or SIGHUP arrives;
/// exits 0 then (or quietly once the output is closed). A failed read is shown in its view and tried again at the next
/// tick; only an unusable lock name fails, before anything is read.
pub async fn run(lock: &RwLock, every: Duration) -> Result<ExitCode, Failure> {
    lock.key().map_err(|err| {
        Failure::lock(
            format!("cannot watch lock {}", output::quoted(lock.name())),
            err,
        )
    })?;
    let mut signals = Incoming::listen()?;
    let terminal = std::io::stdout().is_terminal();
    let every_text = humantime::format_duration(every).to_string();
    let mut ticks = interval(every);
    // A slow read (Redis timing out) delays the views after it, never bunches them.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        let view = async {
            ticks.tick().await;
            let clear = if terminal { CLEAR } else { "" };
            print(&format!(
                "{clear}every {every_text}: {}  (Ctrl-C to stop)\n",
                Local::now().format("%Y-%m-%d %H:%M:%S%.3f %:z")
            ))?;
            // The exit code (held or free) means nothing here; a failure is shown,
            // unless it is the output's own.
            match status::run(lock, false).await {
                Err(failure) if failure.is_output_closed() => return Err(failure),
                Err(failure) => print(&format!("{}\n", failure.report()))?,
                Ok(_) => {}
            }
            if !terminal {
                print("\n")?;
            }
            Ok::<_, Failure>(())
        };
        tokio::select! {
            shown = view => shown?,
            _ = signals.recv() => return Ok(ExitCode::SUCCESS),
        }
    }
}

//! The command `exec` runs: starting it, and stopping it when the lease is lost or a
//! signal arrives (the signal first, SIGKILL after a grace period).

use std::ffi::OsString;
use std::future::Future;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use nix::errno::Errno;
use tokio::process::{Child, Command};
use tokio::time::{Instant, sleep_until};

use crate::failure::{Failure, code, warn};
use crate::signals::{Incoming, Sig, send};

/// The variable that carries a write hold's fencing token to the command.
pub const FENCE_VAR: &str = "REDIS_RWLOCK_FENCING_TOKEN";

/// Why the command was stopped, if it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// It ran to its end.
    No,
    /// The lease was lost.
    LeaseLost,
    /// redis-rwlock received this signal.
    BySignal(Sig),
}

/// The running command.
pub struct Running {
    child: Child,
    /// Whether it leads its own process group (signals go to the whole group).
    group: bool,
    /// How long it gets between SIGTERM (or an interrupt) and SIGKILL.
    grace: Duration,
    /// Its name, for messages.
    program: String,
}

impl Running {
    /// Starts `command` (program and arguments) on this process's stdio, with the
    /// fencing token in [`FENCE_VAR`] if there is one, in a process group of its own
    /// when `group`.
    pub fn spawn(
        command: &[OsString],
        fence: Option<u64>,
        group: bool,
        grace: Duration,
    ) -> Result<Self, Failure> {
        let Some((program, args)) = command.split_first() else {
            return Err(Failure::new(code::USAGE, "no command given"));
        };
        let name = program.to_string_lossy().into_owned();
        let mut cmd = Command::new(program);
        cmd.args(args).kill_on_drop(false);
        if let Some(fence) = fence {
            cmd.env(FENCE_VAR, fence.to_string());
        }
        if group {
            cmd.process_group(0);
        }
        let child = cmd.spawn().map_err(|err| {
            let code = match err.kind() {
                io::ErrorKind::NotFound => code::NOT_FOUND,
                _ => code::CANNOT_RUN,
            };
            Failure::new(code, format!("cannot run {name:?}")).caused_by(err)
        })?;
        Ok(Running {
            child,
            group,
            grace,
            program: name,
        })
    }

    /// The command's name.
    pub fn program(&self) -> &str {
        &self.program
    }

    /// Waits for the command to exit. When `lost` resolves (the lease is gone), or a
    /// signal arrives, it is stopped: the signal (SIGTERM for a lost lease) now, and
    /// SIGKILL after the grace period. A SIGINT while the command shares the
    /// terminal's process group already reached it from the terminal, so it is not
    /// sent again: SIGTERM follows after the grace period instead. A second signal
    /// kills at once. `hold` names the hold for messages.
    pub async fn supervise(
        mut self,
        lost: impl Future<Output = ()>,
        signals: &mut Incoming,
        hold: &str,
    ) -> Result<(ExitStatus, Stopped), Failure> {
        let mut lost = std::pin::pin!(lost);
        let mut stopped = Stopped::No;
        // The next escalation step, if the command is being stopped.
        let mut next: Option<(Instant, Sig)> = None;
        loop {
            let step_at = next.map(|(at, _)| at);
            tokio::select! {
                biased;
                status = self.child.wait() => {
                    let status = status.map_err(|err| {
                        Failure::new(code::OS, format!("cannot wait for {:?}", self.program))
                            .caused_by(err)
                    })?;
                    return Ok((status, stopped));
                }
                () = &mut lost, if stopped != Stopped::LeaseLost => {
                    warn(format_args!(
                        "lost the {hold} (its lease ended or it was force-released); \
                         stopping {:?}: SIGTERM, SIGKILL after {}",
                        self.program,
                        humantime::format_duration(self.grace)
                    ));
                    let was = std::mem::replace(&mut stopped, Stopped::LeaseLost);
                    match next {
                        // Already past SIGTERM: SIGKILL is due, or was sent.
                        Some((_, Sig::Kill)) => {}
                        None if was != Stopped::No => {}
                        _ => {
                            self.signal(Sig::Term);
                            next = Some((Instant::now() + self.grace, Sig::Kill));
                        }
                    }
                }
                sig = signals.recv() => {
                    if stopped == Stopped::No {
                        stopped = Stopped::BySignal(sig);
                        if sig == Sig::Int && !self.group {
                            next = Some((Instant::now() + self.grace, Sig::Term));
                        } else {
                            self.signal(sig);
                            next = Some((Instant::now() + self.grace, Sig::Kill));
                        }
                    } else {
                        warn(format_args!("SIG{} again: killing {:?}", sig.name(), self.program));
                        self.signal(Sig::Kill);
                        next = None;
                    }
                }
                () = sleep_until(step_at.unwrap_or_else(Instant::now)), if step_at.is_some() => {
                    if let Some((_, sig)) = next.take() {
                        warn(format_args!(
                            "{:?} is still running: sending SIG{}",
                            self.program,
                            sig.name()
                        ));
                        self.signal(sig);
                        if sig == Sig::Term {
                            next = Some((Instant::now() + self.grace, Sig::Kill));
                        }
                    }
                }
            }
        }
    }

    /// Sends `sig` to the command (its group, when it has one). If the system
    /// refuses, the command's process is killed instead.
    fn signal(&mut self, sig: Sig) {
        // `id()` is `None` once the command was reaped: nothing left to signal, and no
        // chance of hitting a recycled process id (until then an exited command is a
        // zombie that keeps its id).
        let Some(pid) = self.child.id() else {
            return;
        };
        match send(sig, pid, self.group) {
            Ok(()) => {}
            // The group is empty: the command and all it started are gone.
            Err(Errno::ESRCH) => {}
            Err(err) => {
                warn(format_args!(
                    "cannot send SIG{} to {:?} ({err}); killing it instead",
                    sig.name(),
                    self.program
                ));
                let _ = self.child.start_kill();
            }
        }
    }
}

/// The exit code that reports `status`: its code, or 128 + N after signal N.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(code::SOFTWARE),
        (None, Some(signal)) => {
            u8::try_from(i32::from(code::SIGNAL_BASE) + signal).unwrap_or(code::SOFTWARE)
        }
        (None, None) => code::SOFTWARE,
    }
}

/// How the command ended, for messages: `exited with 3`, `was killed by signal 15`.
pub fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => format!("ended ({status})"),
    }
}

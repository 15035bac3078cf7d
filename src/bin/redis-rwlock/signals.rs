//! Signals: the ones redis-rwlock listens for, and sending them to the command.

use std::process::Stdio;

use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::failure::{Failure, code};

/// A signal the tool receives or sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sig {
    /// Hang-up: the terminal went away.
    Hup,
    /// Interrupt: Ctrl-C.
    Int,
    /// Kill: cannot be caught.
    Kill,
    /// Terminate: the polite stop request.
    Term,
}

impl Sig {
    /// Its number on Linux and the BSDs.
    pub fn number(self) -> u8 {
        match self {
            Sig::Hup => 1,
            Sig::Int => 2,
            Sig::Kill => 9,
            Sig::Term => 15,
        }
    }

    /// Its name without the `SIG` prefix, as `kill -s` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Sig::Hup => "HUP",
            Sig::Int => "INT",
            Sig::Kill => "KILL",
            Sig::Term => "TERM",
        }
    }

    /// The exit code of a process that died of this signal (128 + N).
    pub fn exit_code(self) -> u8 {
        code::SIGNAL_BASE + self.number()
    }
}

/// SIGINT, SIGTERM and SIGHUP, caught from the moment this is made until the
/// process exits (so an interrupt always leads to a release, never a silent death).
pub struct Incoming {
    hup: Signal,
    int: Signal,
    term: Signal,
}

impl Incoming {
    /// Installs the handlers.
    pub fn listen() -> Result<Self, Failure> {
        let install = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|err| {
                Failure::new(code::OS, format!("cannot handle SIG{name}")).caused_by(err)
            })
        };
        Ok(Incoming {
            hup: install(SignalKind::hangup(), "HUP")?,
            int: install(SignalKind::interrupt(), "INT")?,
            term: install(SignalKind::terminate(), "TERM")?,
        })
    }

    /// The next signal received.
    pub async fn recv(&mut self) -> Sig {
        tokio::select! {
            Some(()) = self.int.recv() => Sig::Int,
            Some(()) = self.term.recv() => Sig::Term,
            Some(()) = self.hup.recv() => Sig::Hup,
            else => std::future::pending().await,
        }
    }
}

/// Sends `sig` to process `pid`, or to the process group `pid` leads when `group`,
/// with the system's `kill` program (`kill -s SIG -- [-]PID`), so no unsafe code is
/// needed. Returns whether `kill` ran and succeeded.
pub async fn send(sig: Sig, pid: u32, group: bool) -> std::io::Result<bool> {
    let target = if group {
        format!("-{pid}")
    } else {
        pid.to_string()
    };
    let status = tokio::process::Command::new("kill")
        .args(["-s", sig.name(), "--", &target])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await?;
    Ok(status.success())
}

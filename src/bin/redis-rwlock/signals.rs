//! Signals: the ones redis-rwlock listens for, and sending them to the command.

use nix::errno::Errno;
use nix::sys::signal::{Signal as NixSignal, kill, killpg};
use nix::unistd::Pid;
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
    /// The system's signal.
    fn system(self) -> NixSignal {
        match self {
            Sig::Hup => NixSignal::SIGHUP,
            Sig::Int => NixSignal::SIGINT,
            Sig::Kill => NixSignal::SIGKILL,
            Sig::Term => NixSignal::SIGTERM,
        }
    }

    /// Its number on this system.
    pub fn number(self) -> i32 {
        self.system() as i32
    }

    /// Its name without the `SIG` prefix.
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
        u8::try_from(i32::from(code::SIGNAL_BASE) + self.number()).unwrap_or(code::SOFTWARE)
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

/// Sends `sig` to process `pid`, or to every process in the group `pid` leads when
/// `group` (kill(2), killpg(2)). `ESRCH`: no such process (or group) is left.
pub fn send(sig: Sig, pid: u32, group: bool) -> nix::Result<()> {
    // 0 and negative numbers would name other processes (kill(2)): never send there.
    let pid = match i32::try_from(pid) {
        Ok(pid) if pid > 0 => Pid::from_raw(pid),
        _ => return Err(Errno::ESRCH),
    };
    if group {
        killpg(pid, sig.system())
    } else {
        kill(pid, sig.system())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_numbers_and_exit_codes_are_the_systems() {
        assert_eq!(Sig::Int.number(), 2);
        assert_eq!(Sig::Kill.number(), 9);
        assert_eq!(Sig::Term.exit_code(), 143);
        assert_eq!(Sig::Hup.exit_code(), 129);
    }

    #[test]
    fn no_signal_goes_to_process_zero_or_a_negative_pid() {
        assert_eq!(send(Sig::Term, 0, false), Err(Errno::ESRCH));
        assert_eq!(send(Sig::Term, 0, true), Err(Errno::ESRCH));
        assert_eq!(send(Sig::Term, u32::MAX, false), Err(Errno::ESRCH));
    }
}

//! Processes by pid: freezing, resuming and killing servers, and asking whether
//! they still run.

use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Freezes a process with SIGSTOP (a paused Redis accepts TCP connections
/// but never answers).
pub fn pause(pid: u32) {
    signal(pid, "-STOP");
}

/// Continues a process stopped by [`pause`].
pub fn resume(pid: u32) {
    signal(pid, "-CONT");
}

/// Kills a process with SIGKILL and waits (up to 5 s) until it is gone.
pub fn kill9(pid: u32) {
    signal(pid, "-9");
    let deadline = Instant::now() + Duration::from_secs(5);
    while is_alive(pid) {
        assert!(
            Instant::now() < deadline,
            "pid {pid} still alive 5 s after SIGKILL"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The process exists and is not a zombie (it may be paused).
pub fn is_alive(pid: u32) -> bool {
    match proc_state(pid) {
        Some(state) => !matches!(state, 'Z' | 'X' | 'x'),
        None if Path::new("/proc/self/stat").exists() => false,
        // No procfs (not Linux): fall back to `kill -0`.
        None => kill_command(pid, "-0").is_ok_and(|s| s.success()),
    }
}

/// The process is alive and not stopped by SIGSTOP.
pub fn is_running(pid: u32) -> bool {
    is_alive(pid) && !matches!(proc_state(pid), Some('T' | 't'))
}

/// A process stopped with SIGSTOP until [`Paused::resume`] or drop (so a
/// failing test never leaves a node frozen).
pub struct Paused {
    pid: u32,
    resumed: bool,
}

impl Paused {
    /// SIGSTOPs `pid`.
    pub fn new(pid: u32) -> Paused {
        pause(pid);
        Paused {
            pid,
            resumed: false,
        }
    }

    /// SIGCONTs the process.
    pub fn resume(mut self) {
        self.resumed = true;
        resume(self.pid);
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        if !self.resumed {
            let _ = kill_command(self.pid, "-CONT");
        }
    }
}

/// Process state letter from `/proc/<pid>/stat` (R, S, D, T, t, Z, ...).
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ...": comm may contain spaces and parentheses.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

pub(super) fn kill_command(pid: u32, sig: &str) -> std::io::Result<ExitStatus> {
    Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
}

pub(super) fn signal(pid: u32, sig: &str) {
    match kill_command(pid, sig) {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("`kill {sig} {pid}` failed ({s}); is the process still there?"),
        Err(e) => panic!("cannot run `kill {sig} {pid}`: {e}"),
    }
}

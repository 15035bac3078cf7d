//! Why the tool stops early: a message, the error behind it, and the exit code.

use std::error::Error as StdError;
use std::io::Write as _;
use std::process::ExitCode;

use redis_rwlock::{Error, ErrorChain};

/// Exit codes of the tool's own failures (`exec` otherwise passes the command's
/// status through). The numbers follow `sysexits.h` where one fits, and the shell's
/// conventions for commands that cannot run (126, 127) or die of a signal (128 + N).
pub mod code {
    /// Bad usage: unknown or missing arguments, no Redis to connect to, an unusable
    /// lock name or prefix, `release` without `--force` (EX_USAGE).
    pub const USAGE: u8 = 64;
    /// The lock's key holds another Redis type (EX_DATAERR).
    pub const DATA: u8 = 65;
    /// Redis could not be reached, or answered with an error (EX_UNAVAILABLE).
    pub const UNAVAILABLE: u8 = 69;
    /// An error the tool does not know how to classify (EX_SOFTWARE).
    pub const SOFTWARE: u8 = 70;
    /// The operating system refused something: signal handlers, waiting for the
    /// command (EX_OSERR).
    pub const OS: u8 = 71;
    /// The lock was not acquired: busy with `--wait 0`, or still held by others when
    /// `--wait` ran out (EX_TEMPFAIL: try again later).
    pub const NOT_ACQUIRED: u8 = 75;
    /// The lease was lost while the command ran; the command was terminated (or had
    /// already finished without the lock's protection).
    pub const LEASE_LOST: u8 = 79;
    /// The command was found but could not be started.
    pub const CANNOT_RUN: u8 = 126;
    /// The command was not found.
    pub const NOT_FOUND: u8 = 127;
    /// Added to a signal's number: the command died of it, or the tool was
    /// interrupted by it while waiting for the lock.
    pub const SIGNAL_BASE: u8 = 128;
    /// Whoever read the tool's output closed it (`list | head -1`): the tool stopped
    /// printing and exited without a message, with the status of a process killed
    /// by `SIGPIPE` (128 + 13).
    pub const OUTPUT_CLOSED: u8 = SIGNAL_BASE + 13;
}

/// A failure of the tool, reported as `redis-rwlock: <message>: <source>: ...`.
#[derive(Debug)]
pub struct Failure {
    code: u8,
    /// `None`: nothing to report ([`Failure::output_closed`]).
    message: Option<String>,
    source: Option<Box<dyn StdError + Send + Sync + 'static>>,
}

impl Failure {
    /// A failure with its own message and exit code.
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: Some(message.into()),
            source: None,
        }
    }

    /// The output was closed by its reader: the tool stops quietly
    /// ([`code::OUTPUT_CLOSED`]).
    pub fn output_closed() -> Self {
        Failure {
            code: code::OUTPUT_CLOSED,
            message: None,
            source: None,
        }
    }

    /// Whether this is [`Failure::output_closed`]: printing more is pointless.
    pub fn is_output_closed(&self) -> bool {
        self.message.is_none()
    }

    /// Adds the error that caused the failure; its chain is printed after the message.
    pub fn caused_by(mut self, source: impl StdError + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// A lock operation failed while doing `context`; the exit code follows the error.
    pub fn lock(context: impl Into<String>, err: Error) -> Self {
        Failure::new(code_of(&err), context).caused_by(err)
    }

    /// A lock operation failed, and the library's message says what and on which
    /// lock (`timed out after 1s waiting for the write lock on "inventory"`): the
    /// report is that message and its causes; the exit code follows the error.
    pub fn error(err: Error) -> Self {
        Failure::new(code_of(&err), ErrorChain(&err).to_string())
    }

    /// The process exit code for this failure.
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.code)
    }

    /// Prints the report to stderr (nothing for [`Failure::output_closed`]).
    pub fn print(&self) {
        if !self.is_output_closed() {
            to_stderr(&self.report());
        }
    }

    /// The whole report line: the message, then each error in the source chain
    /// (some errors, redis's among them, repeat their source: each text once).
    pub fn report(&self) -> String {
        let message = self.message.as_deref().unwrap_or("the output was closed");
        match &self.source {
            Some(source) => format!("redis-rwlock: {message}: {}", ErrorChain(source.as_ref())),
            None => format!("redis-rwlock: {message}"),
        }
    }
}

/// The exit code for a lock operation's error.
fn code_of(err: &Error) -> u8 {
    match err {
        Error::WouldBlock | Error::Timeout { .. } => code::NOT_ACQUIRED,
        Error::LeaseLost { .. } => code::LEASE_LOST,
        Error::InvalidOptions(_) => code::USAGE,
        Error::WrongType { .. } | Error::CrossSlot { .. } => code::DATA,
        Error::NotReplicated { .. } | Error::Redis { .. } => code::UNAVAILABLE,
        _ => code::SOFTWARE,
    }
}

/// Prints a warning that does not change the exit code.
pub fn warn(message: impl std::fmt::Display) {
    to_stderr(&format!("redis-rwlock: {message}"));
}

/// One line on stderr; if stderr is closed too, there is no one left to tell.
fn to_stderr(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn the_report_walks_the_source_chain() {
        let inner = std::io::Error::other("inner");
        let failure = Failure::new(code::OS, "cannot do it").caused_by(Outer(inner));
        assert_eq!(failure.report(), "redis-rwlock: cannot do it: outer: inner");
    }

    #[test]
    fn a_source_repeated_in_its_parent_is_printed_once() {
        let inner = std::io::Error::other("refused");
        #[derive(Debug, thiserror::Error)]
        #[error("request failed: refused")]
        struct Repeats(#[source] std::io::Error);
        let failure = Failure::new(code::UNAVAILABLE, "cannot connect").caused_by(Repeats(inner));
        assert_eq!(
            failure.report(),
            "redis-rwlock: cannot connect: request failed: refused"
        );
    }

    #[test]
    fn lock_errors_map_to_documented_codes() {
        let code_of = |err| Failure::lock("x", err).code;
        let timeout = Error::Timeout {
            lock: "inventory".into(),
            mode: redis_rwlock::Mode::Write,
            waited: std::time::Duration::from_secs(1),
        };
        assert_eq!(code_of(timeout), code::NOT_ACQUIRED);
        assert_eq!(code_of(Error::WouldBlock), code::NOT_ACQUIRED);
        let lost = Error::LeaseLost {
            lock: "inventory".into(),
            mode: redis_rwlock::Mode::Read,
        };
        assert_eq!(code_of(lost), code::LEASE_LOST);
        assert_eq!(code_of(Error::InvalidOptions("bad".into())), code::USAGE);
        assert_eq!(code_of(Error::WrongType { key: "k".into() }), code::DATA);
    }

    #[test]
    fn a_library_error_is_reported_in_its_own_words() {
        let timeout = Error::Timeout {
            lock: "inventory".into(),
            mode: redis_rwlock::Mode::Write,
            waited: std::time::Duration::from_secs(1),
        };
        let failure = Failure::error(timeout);
        assert_eq!(failure.code, code::NOT_ACQUIRED);
        assert_eq!(
            failure.report(),
            "redis-rwlock: timed out after 1s waiting for the write lock on \"inventory\""
        );
    }
}

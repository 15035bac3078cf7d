//! `MONITOR` on one node: the commands it runs, in the order it runs them, for
//! tests that check what reached the server and when (whatever the clients were
//! told). A lock script shows as one `FCALL` line ([`ScriptCall`]), followed by
//! the commands it ran (`[0 lua]` lines).

use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::watch;

/// How long [`Monitor::start`] waits for the node to accept `MONITOR`.
const START_LIMIT: Duration = Duration::from_secs(5);

/// The commands one node has run since [`Monitor::start`], read on a thread of
/// its own. Dropping it closes the connection.
pub struct Monitor {
    lines: Arc<Mutex<Vec<String>>>,
    /// How many lines so far.
    count: watch::Sender<usize>,
    stream: TcpStream,
    reader: Option<JoinHandle<()>>,
}

impl Monitor {
    /// Sends `MONITOR` to the node at `127.0.0.1:<port>` (its own port, not a
    /// relay's) and returns once the node has accepted it: every command it runs
    /// from then on is recorded.
    pub fn start(port: u16) -> Monitor {
        let mut stream =
            TcpStream::connect(("127.0.0.1", port)).expect("connect for MONITOR to the node");
        stream
            .set_read_timeout(Some(START_LIMIT))
            .expect("a read timeout");
        stream.write_all(b"MONITOR\r\n").expect("send MONITOR");
        let mut reader = BufReader::new(stream.try_clone().expect("a second handle"));
        let mut first = String::new();
        reader.read_line(&mut first).expect("MONITOR's answer");
        assert_eq!(first.trim_end(), "+OK", "MONITOR refused on port {port}");
        stream.set_read_timeout(None).expect("no read timeout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let count = watch::channel(0).0;
        let reader = {
            let (lines, count) = (lines.clone(), count.clone());
            std::thread::spawn(move || {
                let mut line = String::new();
                loop {
                    line.clear();
                    match reader.read_line(&mut line) {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {
                            let text = line.trim_end().trim_start_matches('+').to_owned();
                            lines.lock().unwrap().push(text);
                            count.send_modify(|n| *n += 1);
                        }
                    }
                }
            })
        };
        Monitor {
            lines,
            count,
            stream,
            reader: Some(reader),
        }
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// The lock scripts run on `key` so far, in order.
    pub fn script_calls(&self, key: &str) -> Vec<ScriptCall> {
        self.lines()
            .iter()
            .filter_map(|line| ScriptCall::parse(line))
            .filter(|call| call.key == key)
            .collect()
    }

    /// Waits until the lock scripts run on `key` so far satisfy `pred`; returns
    /// them, or `None` if `limit` passed first.
    pub async fn until_scripts(
        &self,
        key: &str,
        pred: impl Fn(&[ScriptCall]) -> bool,
        limit: Duration,
    ) -> Option<Vec<ScriptCall>> {
        let mut count = self.count.subscribe();
        let found = tokio::time::timeout(limit, async {
            loop {
                count.borrow_and_update();
                let calls = self.script_calls(key);
                if pred(&calls) {
                    return Some(calls);
                }
                if count.changed().await.is_err() {
                    return None;
                }
            }
        });
        found.await.ok().flatten()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

/// One `FCALL` of a lock script, as `MONITOR` showed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptCall {
    /// The operation: the function's name after the library's prefix
    /// (`acquire_write`, `release`, ...).
    pub operation: String,
    /// The lock's key (`KEYS[1]`).
    pub key: String,
    /// `ARGV[4]`: the token of every operation that takes one.
    pub token: Option<String>,
}

impl ScriptCall {
    /// The call in a `MONITOR` line (`<time> [<db> <client>] "FCALL" "<name>" ...`),
    /// if it is an `FCALL` (or `FCALL_RO`) of the crate's library.
    pub fn parse(line: &str) -> Option<ScriptCall> {
        let (_, command) = line.split_once("] ")?;
        let args = quoted(command);
        if !matches!(args.first()?.as_str(), "FCALL" | "FCALL_RO") {
            return None;
        }
        let name = args.get(1)?;
        let operation = name.strip_prefix("rwlock_")?.split_once('_')?.1.to_owned();
        // FCALL <name> <numkeys> <key> ... ARGV: the publish command and the
        // original clients' two timeouts, then the token.
        let keys: usize = args.get(2)?.parse().ok()?;
        Some(ScriptCall {
            operation,
            key: args.get(3)?.clone(),
            token: args.get(3 + keys + 3).cloned(),
        })
    }

    /// By the token `token`.
    pub fn by(&self, token: &str) -> bool {
        self.token.as_deref() == Some(token)
    }
}

/// The double-quoted arguments of a `MONITOR` line (escapes kept as they are but
/// `\"` and `\\`).
fn quoted(text: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut arg = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some(escaped @ ('"' | '\\')) => arg.push(escaped),
                    Some(other) => {
                        arg.push('\\');
                        arg.push(other);
                    }
                    None => {}
                },
                _ => arg.push(c),
            }
        }
        args.push(arg);
    }
    args
}

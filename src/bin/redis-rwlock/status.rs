//! `status`: who holds a lock, as text for people or JSON for scripts.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use chrono::{DateTime, Local};
use redis_rwlock::{Holder, LockMode, LockState, RwLock};
use serde::Serialize;

use crate::failure::Failure;
use crate::output::{self, print, print_json};

/// The exit code of `status` for a lock that is held (for read or write).
pub const HELD: u8 = 0;
/// The exit code of `status` for a lock that is free: no reader or writer holds it
/// (writers may be queued). Below the failures' codes (64 and up), as `grep` exits 1
/// for "no match".
pub const FREE: u8 = 1;

/// Prints the lock's state; the exit code says whether it is held ([`HELD`]) or free
/// ([`FREE`]), so a script need not parse the output.
pub async fn run(lock: &RwLock, json: bool) -> Result<ExitCode, Failure> {
    let cannot = |err| {
        Failure::lock(
            format!(
                "cannot read the state of lock {}",
                output::quoted(lock.name())
            ),
            err,
        )
    };
    let key = lock.key().map_err(cannot)?;
    // The library's message names the lock and what failed.
    let state = lock.state().await.map_err(Failure::error)?;
    let view = StatusView::new(lock.name(), key, &state);
    if json {
        print_json(&view)?;
    } else {
        print(&view.text())?;
    }
    Ok(ExitCode::from(if state.is_free() { FREE } else { HELD }))
}

/// What `status` shows: the library's [`LockState`] with times in local time and
/// time left by the server's clock.
#[derive(Debug, Serialize)]
struct StatusView {
    lock: String,
    key: String,
    /// `free`, `read` or `write`.
    mode: &'static str,
    /// The server's clock when the state was read.
    server_time: DateTime<Local>,
    writer: Option<HolderView>,
    readers: Vec<HolderView>,
    /// The upgradable reader (one of `readers`), if any.
    upgradable: Option<HolderView>,
    /// The upgradable reader waits to upgrade: new readers wait meanwhile.
    upgrade_pending: bool,
    /// First in line first; `until`: when the place lapses unless its waiter re-checks.
    queued_writers: Vec<HolderView>,
    /// The last fencing token issued.
    fencing_token: u64,
}

#[derive(Debug, Serialize)]
struct HolderView {
    /// `None` for a client of the original design, which keeps only a timestamp.
    token: Option<String>,
    /// The deadline, RFC 3339 in local time.
    until: DateTime<Local>,
    /// The deadline, ms since the Unix epoch.
    until_ms: i64,
    /// Time left by the server's clock.
    remaining_ms: i64,
    /// A read hold its process keeps while no task uses it (`keep_reads`).
    kept_idle: bool,
    /// No client's: the fence a forced release left, which keeps writers out.
    forced_release_fence: bool,
}

impl StatusView {
    fn new(name: &str, key: &str, state: &LockState) -> Self {
        let holder = |holder: &Holder| HolderView {
            token: holder.token.clone(),
            until: holder.until.with_timezone(&Local),
            until_ms: holder.until.timestamp_millis(),
            remaining_ms: (holder.until - state.server_time).num_milliseconds(),
            kept_idle: holder.kept_idle,
            forced_release_fence: holder.is_forced_release_fence(),
        };
        StatusView {
            lock: name.to_owned(),
            key: key.to_owned(),
            mode: match state.mode() {
                None => "free",
                Some(LockMode::Read) => "read",
                Some(LockMode::Write) => "write",
            },
            server_time: state.server_time.with_timezone(&Local),
            writer: state.writer.as_ref().map(holder),
            readers: state.readers.iter().map(holder).collect(),
            upgradable: state.upgradable.as_ref().map(holder),
            upgrade_pending: state.upgrade_pending,
            queued_writers: state.queued_writers.iter().map(holder).collect(),
            fencing_token: state.fencing_token,
        }
    }

    fn text(&self) -> String {
        let mut out = String::new();
        let held = match self.mode {
            "free" => "free".to_owned(),
            mode => format!("held for {mode}"),
        };
        let _ = writeln!(out, "lock {:?} (key {}) is {held}", self.lock, self.key);
        if let Some(writer) = &self.writer {
            let _ = writeln!(out, "  writer  {}", writer.line("until"));
        }
        let upgradable = self.upgradable.as_ref().and_then(|u| u.token.as_deref());
        for reader in &self.readers {
            let kind = if reader.token.is_some() && reader.token.as_deref() == upgradable {
                "upgradable reader"
            } else if reader.kept_idle {
                "reader (kept, idle)"
            } else if reader.forced_release_fence {
                "forced release's fence (no client; writers wait for it)"
            } else {
                "reader"
            };
            let _ = writeln!(out, "  {kind}  {}", reader.line("until"));
        }
        if self.upgrade_pending {
            let _ = writeln!(
                out,
                "  the upgradable reader waits to upgrade: new readers wait"
            );
        }
        let _ = writeln!(out, "queued writers: {}", self.queued_writers.len());
        for (place, waiter) in self.queued_writers.iter().enumerate() {
            let _ = writeln!(out, "  {:>2}. {}", place + 1, waiter.line("place lapses"));
        }
        let _ = writeln!(out, "fencing counter: {}", self.fencing_token);
        let _ = writeln!(out, "server time: {}", local_text(self.server_time));
        out
    }
}

impl HolderView {
    fn line(&self, until_label: &str) -> String {
        let who = self
            .token
            .clone()
            .unwrap_or_else(|| "original-design client".to_owned());
        format!(
            "{who}  {until_label} {} ({} left)",
            local_text(self.until),
            remaining_text(self.remaining_ms)
        )
    }
}

/// `8.9s` under a minute, `2m 5s` above (also `list`'s).
pub(crate) fn remaining_text(ms: i64) -> String {
    let ms = u64::try_from(ms).unwrap_or(0);
    if ms < 60_000 {
        format!("{}.{}s", ms / 1000, ms % 1000 / 100)
    } else {
        humantime::format_duration(Duration::from_secs(ms / 1000)).to_string()
    }
}

/// `2025-01-31 14:03:12.345 +01:00`
fn local_text(at: DateTime<Local>) -> String {
    at.format("%Y-%m-%d %H:%M:%S%.3f %:z").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_left_is_short_and_readable() {
        assert_eq!(remaining_text(8_989), "8.9s");
        assert_eq!(remaining_text(40), "0.0s");
        assert_eq!(remaining_text(125_400), "2m 5s");
    }
}

//! `list`: the fleet view, every lock matching a pattern, as a table or JSON.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::process::ExitCode;

use chrono::{DateTime, Local, Utc};
use redis_rwlock::{Holder, ListOptions, LockClient, LockMode, LockState, LockSummary};
use serde::Serialize;

use crate::cli::ListArgs;
use crate::failure::Failure;
use crate::output::{self, print_json};
use crate::status::remaining_text;

/// The exit code of `list` when at least one lock matched.
pub const FOUND: u8 = 0;
/// The exit code of `list` when no lock matched (as `grep` exits 1 for no match).
pub const NONE: u8 = 1;

/// The most locks one request for a page asks for.
const PAGE: usize = 1000;

/// Lists the locks matching the pattern, at most `--limit`, sorted by name.
pub async fn run(client: &LockClient, prefix: &str, args: ListArgs) -> Result<ExitCode, Failure> {
    let limit = usize::try_from(args.limit).unwrap_or(usize::MAX);
    let cannot = |err| {
        Failure::lock(
            format!(
                "cannot list the locks matching {}",
                output::quoted(&args.pattern)
            ),
            err,
        )
    };
    let base = ListOptions::default()
        .key_prefix(prefix)
        .pattern(&args.pattern);
    // One lock more than shown: whether more match is then known, not guessed.
    let wanted = limit.saturating_add(1);
    let mut locks: Vec<LockSummary> = Vec::new();
    let mut seen = HashSet::new();
    let mut options = base.clone();
    loop {
        let left = (wanted - locks.len()).min(PAGE);
        let page = client
            .list_locks(options.limit(left))
            .await
            .map_err(cannot)?;
        // SCAN may return a key twice (across pages): keep its first reading.
        locks.extend(
            page.locks
                .into_iter()
                .filter(|lock| seen.insert(lock.name.clone())),
        );
        match page.next {
            Some(cursor) if locks.len() < wanted => options = base.clone().after(cursor),
            _ => break,
        }
    }
    let truncated = locks.len() > limit;
    locks.sort_by(|a, b| a.name.cmp(&b.name));
    locks.truncate(limit);
    let rows: Vec<Row> = locks.iter().map(Row::new).collect();
    if args.json {
        let view = ListView {
            pattern: &args.pattern,
            prefix,
            truncated,
            locks: rows,
        };
        print_json(&view)?;
    } else {
        output::print(&table(&rows, &args.pattern, limit, truncated))?;
    }
    Ok(ExitCode::from(if locks.is_empty() { NONE } else { FOUND }))
}

/// What `list --json` prints.
#[derive(Debug, Serialize)]
struct ListView<'a> {
    pattern: &'a str,
    prefix: &'a str,
    /// More locks match than `--limit` let through: `locks` are then the first
    /// `--limit` that SCAN found, sorted by name, not the first by name of all.
    truncated: bool,
    /// Sorted by name.
    locks: Vec<Row<'a>>,
}

/// One lock: the figures of the table, and its whole state as the library reads it.
#[derive(Debug, Serialize)]
struct Row<'a> {
    lock: &'a str,
    key: &'a str,
    /// `free`, `read` or `write`.
    mode: &'static str,
    /// 1 for a writer, the readers for readers, 0 when free.
    holders: usize,
    /// Readers whose process keeps the hold while no task uses it (`keep_reads`).
    kept_idle: usize,
    queued_writers: usize,
    /// When the holds end at the latest unless renewed (local time); null when free.
    held_until: Option<DateTime<Local>>,
    /// The same, ms since the Unix epoch.
    held_until_ms: Option<i64>,
    /// Time left by the server's clock.
    remaining_ms: Option<i64>,
    /// The writer first in line (`until`: when its place lapses unless it re-checks).
    first_in_line: Option<&'a Holder>,
    upgrade_pending: bool,
    fencing_token: u64,
    /// The state as `RwLock::state` returns it (times in UTC).
    state: &'a LockState,
}

impl<'a> Row<'a> {
    fn new(lock: &'a LockSummary) -> Self {
        let held_until = lock.held_until();
        Row {
            lock: &lock.name,
            key: &lock.key,
            mode: match lock.mode() {
                None => "free",
                Some(LockMode::Read) => "read",
                Some(LockMode::Write) => "write",
            },
            holders: lock.holders(),
            kept_idle: lock.state.readers.iter().filter(|r| r.kept_idle).count(),
            queued_writers: lock.queued_writers(),
            held_until: held_until.map(|at| at.with_timezone(&Local)),
            held_until_ms: held_until.map(|at| at.timestamp_millis()),
            remaining_ms: held_until.map(|at| left(at, lock.state.server_time)),
            first_in_line: lock.first_in_line(),
            upgrade_pending: lock.state.upgrade_pending,
            fencing_token: lock.state.fencing_token,
            state: &lock.state,
        }
    }

    /// The table's cells, in column order.
    fn cells(&self) -> [String; 6] {
        let mut mode = if self.upgrade_pending {
            format!("{} (upgrading)", self.mode)
        } else {
            self.mode.to_owned()
        };
        if self.kept_idle > 0 {
            mode = format!("{mode} ({} kept idle)", self.kept_idle);
        }
        let holders = match &self.state.upgradable {
            Some(_) => format!("{} (1 upgradable)", self.holders),
            None => self.holders.to_string(),
        };
        let ends = match (self.held_until, self.remaining_ms) {
            (Some(at), Some(ms)) => format!(
                "{} ({} left)",
                at.format("%H:%M:%S%.3f"),
                remaining_text(ms)
            ),
            _ => "-".to_owned(),
        };
        [
            self.lock.to_owned(),
            mode,
            holders,
            self.queued_writers.to_string(),
            ends,
            self.fencing_token.to_string(),
        ]
    }
}

const HEADERS: [&str; 6] = ["NAME", "MODE", "HOLDERS", "QUEUED", "LEASE ENDS", "FENCE"];

/// The rows as an aligned table, then a line that says how many there are.
fn table(rows: &[Row], pattern: &str, limit: usize, truncated: bool) -> String {
    let mut out = String::new();
    if rows.is_empty() {
        let _ = writeln!(out, "no locks match {pattern:?}");
        return out;
    }
    let cells: Vec<[String; 6]> = rows.iter().map(Row::cells).collect();
    out.push_str(&output::table(HEADERS, &cells));
    let count = match rows.len() {
        1 => "1 lock".to_owned(),
        n => format!("{n} locks"),
    };
    if truncated {
        // The page holds the first locks SCAN found (its order is the keys' hash
        // order), sorted here: not the first by name of all that match.
        let _ = writeln!(
            out,
            "{count} shown of more that match {pattern:?}: the first {limit} found, not the \
             first by name; raise --limit (now {limit}) above their number to see them all"
        );
    } else {
        let _ = writeln!(out, "{count} match {pattern:?}");
    }
    out
}

/// Milliseconds from `now` to `at` (negative when past).
fn left(at: DateTime<Utc>, now: DateTime<Utc>) -> i64 {
    (at - now).num_milliseconds()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_left_reads_like_status() {
        assert_eq!(remaining_text(8_989), "8.9s");
        assert_eq!(remaining_text(-5), "0.0s");
        assert_eq!(remaining_text(125_400), "2m 5s");
    }
}

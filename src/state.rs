//! [`LockState`]: a snapshot of who holds a lock, for people and tools.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LockMode {
    /// Shared with other readers.
    Read,
    /// Exclusive.
    Write,
}

/// One hold (or one queued writer) and when it ends unless renewed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Holder {
    /// The acquisition's token; `None` for a client running the original design,
    /// which keeps only a timestamp.
    pub token: Option<String>,
    /// The lease deadline, by the server's clock.
    pub until: DateTime<Utc>,
}

/// Who holds a lock at one instant, as returned by [`RwLock::state`](crate::RwLock::state).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LockState {
    /// The server's clock when the state was read.
    pub server_time: DateTime<Utc>,
    /// The writer, if one holds.
    pub writer: Option<Holder>,
    /// Every reader that holds.
    pub readers: Vec<Holder>,
    /// Writers waiting for the lock, first in line first (`until`: when the queued
    /// place lapses unless the waiter re-checks).
    pub queued_writers: Vec<Holder>,
    /// The last fencing token issued (0 if none, or the lock expired since).
    pub fencing_token: u64,
}

impl LockState {
    /// Which mode the lock is held in, if any.
    pub fn mode(&self) -> Option<LockMode> {
        if self.writer.is_some() {
            Some(LockMode::Write)
        } else if !self.readers.is_empty() {
            Some(LockMode::Read)
        } else {
            None
        }
    }

    /// True when nobody holds the lock.
    pub fn is_free(&self) -> bool {
        self.mode().is_none()
    }

    /// Decodes the raw hash the way the scripts read it: expired entries are left out,
    /// and bare `read`/`write` stamps count as original-design holds.
    pub(crate) fn from_fields(
        now: i64,
        fields: &[(String, String)],
        original: (Duration, Duration),
    ) -> Self {
        let get = |name: &str| {
            fields
                .iter()
                .find(|(field, _)| field == name)
                .map(|(_, value)| value.as_str())
        };
        let number = |name: &str| get(name).and_then(|v| v.parse::<i64>().ok());
        let live = |until: i64, token: Option<&str>| {
            (until > now).then(|| Holder {
                token: token.map(str::to_owned),
                until: wall_clock(until),
            })
        };
        let ms = |span: Duration| i64::try_from(span.as_millis()).unwrap_or(i64::MAX);

        let writer = match get("w:owner") {
            Some(owner) => live(number("w:until").unwrap_or(0), Some(owner)),
            None => number("write").and_then(|at| live(at.saturating_add(ms(original.1)), None)),
        };
        let mut readers: Vec<Holder> = fields
            .iter()
            .filter_map(|(field, value)| {
                let token = field.strip_prefix("r:")?;
                live(value.parse().ok()?, Some(token))
            })
            .collect();
        let original_reader = number("orig:read").into_iter().chain(
            (get("read") != get("rstamp"))
                .then(|| number("read").map(|at| at.saturating_add(ms(original.0))))
                .flatten(),
        );
        if let Some(until) = original_reader.max() {
            readers.extend(live(until, None));
        }
        let mut queue: Vec<(i64, Holder)> = fields
            .iter()
            .filter_map(|(field, value)| {
                let token = field.strip_prefix("wait:")?;
                let (seq, until) = value.split_once(':')?;
                Some((seq.parse().ok()?, live(until.parse().ok()?, Some(token))?))
            })
            .collect();
        queue.sort_by_key(|(seq, _)| *seq);

        LockState {
            server_time: wall_clock(now),
            writer,
            readers,
            queued_writers: queue.into_iter().map(|(_, holder)| holder).collect(),
            fencing_token: number("fence")
                .and_then(|f| u64::try_from(f).ok())
                .unwrap_or(0),
        }
    }
}

fn wall_clock(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(f, v)| (f.to_string(), v.to_string()))
            .collect()
    }

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn live_entries_are_reported_and_expired_ones_dropped() {
        let state = LockState::from_fields(
            1_000_000,
            &fields(&[
                ("r:aa", "1005000"),
                ("r:bb", "999000"),
                ("read", "999500"),
                ("rstamp", "999500"),
                ("wait:cc", "2:1003000"),
                ("wait:dd", "1:1004000"),
                ("fence", "77"),
            ]),
            (SECOND, SECOND),
        );
        assert_eq!(state.mode(), Some(LockMode::Read));
        assert_eq!(state.readers.len(), 1);
        assert_eq!(state.readers[0].token.as_deref(), Some("aa"));
        let queue: Vec<_> = state
            .queued_writers
            .iter()
            .map(|h| h.token.clone().unwrap())
            .collect();
        assert_eq!(queue, ["dd", "cc"]);
        assert_eq!(state.fencing_token, 77);
    }

    #[test]
    fn bare_stamps_are_original_clients_holds() {
        let state = LockState::from_fields(
            1_000_000,
            &fields(&[("write", "999000")]),
            (SECOND, 3 * SECOND),
        );
        let writer = state.writer.unwrap();
        assert_eq!(writer.token, None);
        assert_eq!(writer.until.timestamp_millis(), 1_002_000);

        let stale =
            LockState::from_fields(1_000_000, &fields(&[("read", "998000")]), (SECOND, SECOND));
        assert!(stale.is_free());
    }
}

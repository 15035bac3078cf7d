//! [`LockState`]: a snapshot of who holds a lock, for people and tools.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::RawState;
use super::engine::Tok;

/// Read or write.
///
/// # Examples
///
/// ```
/// use redis_rwlock::LockMode;
/// assert_eq!(serde_json::to_string(&LockMode::Write).unwrap(), r#""write""#);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LockMode {
    /// Shared with other readers.
    Read,
    /// Exclusive.
    Write,
}

/// One hold (or one queued writer) and when it ends unless renewed.
///
/// # Examples
///
/// ```no_run
/// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
/// for reader in &lock.state().await?.readers {
///     let who = reader.token.as_deref().unwrap_or("an original-design client");
///     println!("{who} reads until {}", reader.until);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Holder {
    /// The acquisition's token; `None` for a client running the original design,
    /// which keeps only a timestamp.
    pub token: Option<String>,
    /// The lease deadline, by the server's clock.
    pub until: DateTime<Utc>,
    /// A read hold its process keeps while no task uses it
    /// ([`LockOptions::keep_reads`](crate::LockOptions::keep_reads)): it goes when a
    /// writer calls it back, or at the process's bound. Marked once it has been
    /// idle for a tenth of a second.
    #[serde(default)]
    pub kept_idle: bool,
}

impl Holder {
    /// Whether this reader is no client but the fence a forced release left
    /// ([`RwLock::force_release`](crate::RwLock::force_release)): it keeps writers
    /// out for 3 s after the release ended read holds, and ends by itself.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// let state = lock.state().await?;
    /// let clients = state.readers.iter().filter(|r| !r.is_forced_release_fence());
    /// println!("{} readers", clients.count());
    /// # Ok(()) }
    /// ```
    pub fn is_forced_release_fence(&self) -> bool {
        self.token.as_deref() == Some(Tok::FORCED_READER.to_string().as_str())
    }
}

/// Who holds a lock at one instant, as returned by [`RwLock::state`](crate::RwLock::state).
///
/// # Examples
///
/// ```no_run
/// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
/// use redis_rwlock::LockMode;
///
/// let state = lock.state().await?;
/// match state.mode() {
///     Some(LockMode::Write) => println!("written until {}", state.writer.as_ref().unwrap().until),
///     Some(LockMode::Read) => println!("{} readers", state.readers.len()),
///     None => println!("free; {} writers queued", state.queued_writers.len()),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LockState {
    /// The server's clock when the state was read.
    pub server_time: DateTime<Utc>,
    /// The writer, if one holds.
    pub writer: Option<Holder>,
    /// Every reader that holds: one per hold on the server, so a client whose
    /// tasks share one read hold (see [`RwLock::read`](crate::RwLock::read)) counts once.
    pub readers: Vec<Holder>,
    /// Writers waiting for the lock, first in line first (`until`: when the queued
    /// place lapses unless the waiter re-checks).
    pub queued_writers: Vec<Holder>,
    /// The upgradable reader, if one holds (it is one of [`readers`](Self::readers)
    /// too: to everyone else it is a reader).
    #[serde(default)]
    pub upgradable: Option<Holder>,
    /// The upgradable reader waits to upgrade: new readers wait meanwhile.
    #[serde(default)]
    pub upgrade_pending: bool,
    /// The last fencing token issued (0 if none, or the lock expired since).
    pub fencing_token: u64,
    /// Readers waiting in line (behind the writers queued before them), first in
    /// line first (`until`: when the reader's own place lapses unless it re-checks).
    /// Readers of one batch enter together when the writer before them leaves.
    #[serde(default)]
    pub waiting_readers: Vec<Holder>,
}

impl LockState {
    /// Which mode the lock is held in, if any.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// use redis_rwlock::LockMode;
    /// if lock.state().await?.mode() == Some(LockMode::Write) {
    ///     println!("a writer holds it");
    /// }
    /// # Ok(()) }
    /// ```
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
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// let state = lock.state().await?;
    /// if state.is_free() && state.queued_writers.is_empty() {
    ///     println!("idle");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_free(&self) -> bool {
        self.mode().is_none()
    }

    /// Builds the snapshot from the state script's reply.
    pub(crate) fn from_raw(raw: RawState) -> Self {
        let (
            now,
            fence,
            writer,
            writer_until,
            original_writer,
            original_reader,
            readers,
            queue,
            upgradable,
            upgrade_pending,
            waiting,
            kept,
        ) = raw;
        let holder = |token: Option<String>, until: i64| Holder {
            token,
            until: wall_clock(until),
            kept_idle: false,
        };
        let writer = if !writer.is_empty() {
            Some(holder(Some(writer), writer_until))
        } else {
            (original_writer > 0).then(|| holder(None, original_writer))
        };
        let mut readers: Vec<Holder> = readers
            .into_iter()
            .map(|(token, until)| Holder {
                kept_idle: kept.contains(&token),
                ..holder(Some(token), until)
            })
            .collect();
        readers.sort_by_key(|r| r.until);
        let upgradable = readers
            .iter()
            .find(|reader| reader.token.as_deref() == Some(upgradable.as_str()))
            .cloned();
        if original_reader > 0 {
            readers.push(holder(None, original_reader));
        }
        LockState {
            server_time: wall_clock(now),
            writer,
            readers,
            queued_writers: queue
                .into_iter()
                .map(|(token, until)| holder(Some(token), until))
                .collect(),
            upgradable,
            upgrade_pending: upgrade_pending == 1,
            fencing_token: fence,
            waiting_readers: waiting
                .into_iter()
                .map(|(token, until)| holder(Some(token), until))
                .collect(),
        }
    }
}

fn wall_clock(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raw_state_decodes_with_original_clients_as_tokenless_holders() {
        let state = LockState::from_raw((
            1_000_000,
            77,
            String::new(),
            0,
            0,
            1_004_000,
            vec![("bb".into(), 1_006_000), ("aa".into(), 1_005_000)],
            vec![("dd".into(), 1_003_000), ("cc".into(), 1_003_500)],
            "bb".into(),
            1,
            vec![("ee".into(), 1_002_000)],
            vec!["aa".into(), "gone".into()],
        ));
        assert_eq!(state.mode(), Some(LockMode::Read));
        let kept: Vec<_> = state.readers.iter().map(|h| h.kept_idle).collect();
        assert_eq!(
            kept,
            [true, false, false],
            "a mark counts for a reader only"
        );
        assert_eq!(state.waiting_readers[0].token.as_deref(), Some("ee"));
        let readers: Vec<_> = state.readers.iter().map(|h| h.token.clone()).collect();
        assert_eq!(readers, [Some("aa".into()), Some("bb".into()), None]);
        let queue: Vec<_> = state
            .queued_writers
            .iter()
            .map(|h| h.token.clone().unwrap())
            .collect();
        assert_eq!(queue, ["dd", "cc"]);
        assert_eq!(state.fencing_token, 77);
        let upgradable = state.upgradable.as_ref().unwrap();
        assert_eq!(upgradable.token.as_deref(), Some("bb"));
        assert_eq!(upgradable.until.timestamp_millis(), 1_006_000);
        assert!(state.upgrade_pending);
        assert_eq!(state.server_time.timestamp_millis(), 1_000_000);

        let original = LockState::from_raw((
            1,
            0,
            String::new(),
            0,
            5_000,
            0,
            vec![],
            vec![],
            String::new(),
            0,
            vec![],
            vec![],
        ));
        assert_eq!(original.writer.unwrap().token, None);
        let free = LockState::from_raw((
            1,
            0,
            String::new(),
            0,
            0,
            0,
            vec![],
            vec![],
            String::new(),
            0,
            vec![],
            vec![],
        ));
        assert!(free.is_free() && free.upgradable.is_none() && !free.upgrade_pending);
    }
}

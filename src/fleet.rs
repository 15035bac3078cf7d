//! The fleet view: every lock of a cluster (or a server), who holds it, who waits.
//!
//! [`LockClient::list_locks`](crate::LockClient::list_locks) (defined here, beside
//! the view it gives) walks each master with `SCAN` (keys shaped `{prefix}:{name}`,
//! or `{prefix}:{tag}rest` for names with a hash tag of their own; hashes only; the
//! contract's `nodes` and `scan`), a page at a time, and reads each
//! lock it finds with [`RwLock::state`](crate::RwLock::state): the same read-only
//! script `status` runs, so a lock listed here looks exactly as it does there.

use std::collections::{HashSet, VecDeque};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;

use crate::backend::check_key_prefix;
use crate::backend::{Backend, Scan, glob, split_lock_key};
use crate::protocol::state::{Holder, LockMode, LockState};
use crate::{Error, LockClient, LockOptions, Operation};

/// The most locks one page may hold.
const MAX_LIMIT: usize = 10_000;
/// The largest `SCAN ... COUNT` hint accepted.
const MAX_SCAN_COUNT: u32 = 100_000;
/// How many state reads of a page are in flight at once.
const READS_IN_FLIGHT: usize = 64;

/// What [`LockClient::list_locks`](crate::LockClient::list_locks) looks for, and how
/// much work one call may do.
///
/// One call (a page) sends at most [`max_scans`](Self::max_scans) `SCAN`s of
/// [`scan_count`](Self::scan_count) keys each, in all, and reads at most
/// [`limit`](Self::limit) locks; when either bound stops it early, the page's
/// [`next`](LockPage::next) continues where it stopped ([`after`](Self::after)).
///
/// # Examples
///
/// ```
/// use redis_rwlock::ListOptions;
///
/// // Locks whose names start with "inv", 50 a page, under the key prefix "locks".
/// let options = ListOptions::default()
///     .pattern("inv*")
///     .key_prefix("locks")
///     .limit(50);
/// assert_eq!(options, ListOptions::default().key_prefix("locks").pattern("inv*").limit(50));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListOptions {
    pattern: String,
    key_prefix: String,
    limit: usize,
    scan_count: u32,
    max_scans: u32,
    after: Option<ListCursor>,
}

impl Default for ListOptions {
    /// Every lock (`*`) under the prefix `rwlock`; at most 100 locks and 1000
    /// `SCAN`s of 1000 keys a page.
    fn default() -> Self {
        ListOptions {
            pattern: "*".to_owned(),
            key_prefix: "rwlock".to_owned(),
            limit: 100,
            scan_count: 1000,
            max_scans: 1000,
            after: None,
        }
    }
}

impl ListOptions {
    /// Which lock names to list: a Redis glob (`*`, `?`, `[abc]`, `\` escapes) over
    /// the name, e.g. `inv*` (default `*`: all). Braces match themselves: `{order:42}*`
    /// lists the locks whose names start with the hash tag `{order:42}`.
    ///
    /// # Examples
    ///
    /// ```
    /// let options = redis_rwlock::ListOptions::default().pattern("cache-[ab]*");
    /// let one_slot = redis_rwlock::ListOptions::default().pattern("{order:42}*");
    /// ```
    pub fn pattern(mut self, pattern: &str) -> Self {
        pattern.clone_into(&mut self.pattern);
        self
    }

    /// The key prefix the locks were made with
    /// ([`LockOptions::key_prefix`](crate::LockOptions::key_prefix), default
    /// `"rwlock"`): keys `"{prefix}:{name}"` (and `"{prefix}:{tag}rest"`) are listed.
    ///
    /// # Examples
    ///
    /// ```
    /// let options = redis_rwlock::ListOptions::default().key_prefix("locks");
    /// ```
    pub fn key_prefix(mut self, prefix: &str) -> Self {
        prefix.clone_into(&mut self.key_prefix);
        self
    }

    /// The most locks a page holds (default 100, at most 10 000): the page reads one
    /// lock state per lock.
    ///
    /// # Examples
    ///
    /// ```
    /// let options = redis_rwlock::ListOptions::default().limit(20);
    /// ```
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// The `COUNT` hint of each `SCAN` (default 1000, at most 100 000): about how
    /// many keys a master examines per request. Higher means fewer round trips and
    /// longer requests; each one stays short (`SCAN` never blocks the server long).
    ///
    /// # Examples
    ///
    /// ```
    /// let options = redis_rwlock::ListOptions::default().scan_count(100);
    /// ```
    pub fn scan_count(mut self, count: u32) -> Self {
        self.scan_count = count;
        self
    }

    /// The most `SCAN` requests a page sends, over all masters (default 1000, at
    /// least 1): with [`scan_count`](Self::scan_count), a bound on the keys one call
    /// examines in a large keyspace with few locks. A page cut short by it may hold
    /// few locks, or none, and has a [`next`](LockPage::next).
    ///
    /// # Examples
    ///
    /// ```
    /// let options = redis_rwlock::ListOptions::default().max_scans(10);
    /// ```
    pub fn max_scans(mut self, scans: u32) -> Self {
        self.max_scans = scans;
        self
    }

    /// Continues a listing after a page that was cut short: `cursor` is that page's
    /// [`next`](LockPage::next). Give the other options as for the first page.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
    /// use redis_rwlock::ListOptions;
    ///
    /// let first = client.list_locks(ListOptions::default().limit(10)).await?;
    /// if let Some(cursor) = first.next {
    ///     let second = client
    ///         .list_locks(ListOptions::default().limit(10).after(cursor))
    ///         .await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn after(mut self, cursor: ListCursor) -> Self {
        self.after = Some(cursor);
        self
    }

    /// Every bound is in range, the prefix and pattern make a lock key's shape.
    fn validate(&self) -> Result<(), Error> {
        check_key_prefix(&self.key_prefix)?;
        if self.pattern.is_empty() {
            return Err(Error::InvalidOptions(
                "the lock name pattern is empty (use * for every lock)".into(),
            ));
        }
        if !(1..=MAX_LIMIT).contains(&self.limit) {
            return Err(Error::InvalidOptions(format!(
                "limit {} is out of range: 1 to {MAX_LIMIT} locks a page",
                self.limit
            )));
        }
        if !(1..=MAX_SCAN_COUNT).contains(&self.scan_count) {
            return Err(Error::InvalidOptions(format!(
                "scan_count {} is out of range: 1 to {MAX_SCAN_COUNT}",
                self.scan_count
            )));
        }
        if self.max_scans == 0 {
            return Err(Error::InvalidOptions("max_scans must be at least 1".into()));
        }
        Ok(())
    }

    /// The `SCAN ... MATCH` glob: the prefix taken literally, then what the pattern
    /// asks of the rest of the key, as far as one glob can say it. A plain name's key
    /// ends in `{name}`, a tagged name's in the name itself, so a pattern that starts
    /// with a literal `{` can only match tagged names (`prefix:pattern`), one that
    /// starts with another literal only plain names (`prefix:{pattern}`), and one
    /// that starts with a wildcard either: then every lock key of the prefix is
    /// scanned (`prefix:{*`) and [`name_in`](Self::name_in) matches the names.
    fn glob(&self) -> String {
        let mut glob = String::with_capacity(self.key_prefix.len() + self.pattern.len() + 3);
        for c in self.key_prefix.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                glob.push('\\');
            }
            glob.push(c);
        }
        glob.push(':');
        match self.leading() {
            Leading::Brace => glob.push_str(&self.pattern),
            Leading::Other => {
                glob.push('{');
                glob.push_str(&self.pattern);
                glob.push('}');
            }
            Leading::Wildcard => glob.push_str("{*"),
        }
        glob
    }

    /// What the pattern's first character matches.
    fn leading(&self) -> Leading {
        let mut chars = self.pattern.chars();
        let first = match chars.next() {
            Some('*' | '?' | '[') => return Leading::Wildcard,
            Some('\\') => chars.next(),
            first => first,
        };
        match first {
            Some('{') => Leading::Brace,
            _ => Leading::Other,
        }
    }

    /// The lock name in `key`, a key that [`glob`](Self::glob) matched, if `key` is
    /// the key of a lock under the prefix (`"{prefix}:{name}"`, or
    /// `"{prefix}:{tag}rest"`) and the pattern selects that name. Where the glob
    /// spelled the pattern out, the server matched it: a name of the other kind
    /// that the glob let through (`prefix:{pattern}` matches no tagged name's key,
    /// but `prefix:{pattern` may match a plain name's) is dropped; where it did not,
    /// the name is matched here, as the in-memory store matches keys.
    fn name_in<'k>(&self, key: &'k str) -> Option<&'k str> {
        let (prefix, name) = split_lock_key(key)?;
        let tagged = name.starts_with('{');
        let selected = match self.leading() {
            Leading::Brace => tagged,
            Leading::Other => !tagged,
            Leading::Wildcard => glob::matches(&self.pattern, name),
        };
        (prefix == self.key_prefix && selected).then_some(name)
    }
}

/// How a pattern starts, which decides the `SCAN` glob ([`ListOptions::glob`]).
enum Leading {
    /// With a literal `{`: only tagged names match.
    Brace,
    /// With another literal: only plain names match.
    Other,
    /// With `*`, `?` or `[`: names of both kinds may match.
    Wildcard,
}

/// Where a listing cut short goes on: give it to [`ListOptions::after`].
///
/// It names the master being scanned (by address), that master's `SCAN` cursor and
/// the locks already found but not yet read. Masters are walked in address order;
/// if they change between pages (a failover, a resharding), the next page starts
/// at the master that follows in that order, and locks may be missed or repeated.
/// Within one master, `SCAN`'s guarantee holds: every lock present from the first
/// page to the last is listed at least once, and may be listed more than once.
///
/// # Examples
///
/// ```no_run
/// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
/// use redis_rwlock::ListOptions;
///
/// let page = client.list_locks(ListOptions::default()).await?;
/// if let Some(cursor) = page.next {
///     // Tools may keep it between calls as JSON.
///     let saved = serde_json::to_string(&cursor).unwrap();
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListCursor {
    /// The master being scanned, `host:port` (`None`: every master was scanned).
    node: Option<String>,
    /// Its `SCAN` cursor.
    scan: u64,
    /// Lock names found and not read yet, in the order found.
    pending: Vec<String>,
}

/// One lock of a [`LockPage`]: its name and its [`LockState`], as
/// [`RwLock::state`](crate::RwLock::state) reads it, with the figures that matter
/// at a glance derived from that state.
///
/// # Examples
///
/// ```no_run
/// # fn show(lock: &redis_rwlock::LockSummary) {
/// let mode = match lock.mode() {
///     Some(mode) => format!("{mode:?}"),
///     None => "free".to_owned(),
/// };
/// println!(
///     "{}: {mode}, {} holders, {} writers queued, fencing counter {}",
///     lock.name,
///     lock.holders(),
///     lock.queued_writers(),
///     lock.state.fencing_token
/// );
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LockSummary {
    /// The lock's name: [`LockClient::rwlock`](crate::LockClient::rwlock) with it
    /// (and the same key prefix) gives the lock.
    pub name: String,
    /// The lock's key, `"{prefix}:{name}"` (`"{prefix}:{tag}rest"` for a name that
    /// starts with its own hash tag).
    pub key: String,
    /// Who holds and who waits, when the lock was read.
    pub state: LockState,
}

impl LockSummary {
    /// The mode the lock is held in, if any ([`LockState::mode`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn show(lock: &redis_rwlock::LockSummary) {
    /// use redis_rwlock::LockMode;
    /// if lock.mode() == Some(LockMode::Write) {
    ///     println!("{} is being written", lock.name);
    /// }
    /// # }
    /// ```
    pub fn mode(&self) -> Option<LockMode> {
        self.state.mode()
    }

    /// How many hold it: 1 for a writer, else the readers (the upgradable reader
    /// among them), 0 when free.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn show(lock: &redis_rwlock::LockSummary) {
    /// println!("{} holders", lock.holders());
    /// # }
    /// ```
    pub fn holders(&self) -> usize {
        match self.mode() {
            Some(LockMode::Write) => 1,
            Some(LockMode::Read) => self.state.readers.len(),
            None => 0,
        }
    }

    /// How many writers wait in line.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn show(lock: &redis_rwlock::LockSummary) {
    /// if lock.queued_writers() > 0 && lock.holders() == 0 {
    ///     println!("{}: free, but writers wait (the next one is about to hold)", lock.name);
    /// }
    /// # }
    /// ```
    pub fn queued_writers(&self) -> usize {
        self.state.queued_writers.len()
    }

    /// The writer that has waited longest: first in line (the queue is served in
    /// arrival order). Its `until` is when its place lapses unless its waiter
    /// re-checks, not when it started waiting (the lock does not record that).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn show(lock: &redis_rwlock::LockSummary) {
    /// if let Some(first) = lock.first_in_line() {
    ///     println!("next writer: {:?}", first.token);
    /// }
    /// # }
    /// ```
    pub fn first_in_line(&self) -> Option<&Holder> {
        self.state.queued_writers.first()
    }

    /// When the current holds end at the latest unless renewed (the writer's
    /// deadline, or the last reader's), by the server's clock; `None` when free.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn show(lock: &redis_rwlock::LockSummary) {
    /// if let Some(until) = lock.held_until() {
    ///     let left = until - lock.state.server_time;
    ///     println!("held for {} ms more at least", left.num_milliseconds());
    /// }
    /// # }
    /// ```
    pub fn held_until(&self) -> Option<DateTime<Utc>> {
        let state = &self.state;
        state
            .writer
            .iter()
            .chain(&state.readers)
            .map(|holder| holder.until)
            .max()
    }
}

/// One page of [`LockClient::list_locks`](crate::LockClient::list_locks): the locks
/// found, and where to go on if the page was cut short.
///
/// # Examples
///
/// ```no_run
/// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
/// let page = client.list_locks(redis_rwlock::ListOptions::default()).await?;
/// println!("{} locks{}", page.locks.len(), if page.is_complete() { "" } else { " (more)" });
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockPage {
    /// The locks found, masters in address order and each master's in `SCAN` order
    /// (no particular order of names); none twice within a page.
    pub locks: Vec<LockSummary>,
    /// `Some` when the page was cut short (by [`ListOptions::limit`] or
    /// [`ListOptions::max_scans`]): pass it to [`ListOptions::after`] for the rest.
    /// `None` when every master was scanned to the end.
    pub next: Option<ListCursor>,
}

impl LockPage {
    /// True when nothing is left to list: [`next`](Self::next) is `None`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
    /// let page = client.list_locks(redis_rwlock::ListOptions::default().limit(10)).await?;
    /// if !page.is_complete() {
    ///     println!("more than 10 locks");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_complete(&self) -> bool {
        self.next.is_none()
    }
}

impl LockClient {
    /// Lists the locks on the cluster (or the server) whose names match
    /// [`ListOptions::pattern`](crate::ListOptions::pattern), with who holds each and
    /// who waits: the fleet view.
    ///
    /// `SCAN`s every master in turn (each one separately: a cluster-wide `SCAN` does
    /// not exist) for hashes whose keys have a lock's shape, `"{prefix}:{name}"` or
    /// `"{prefix}:{tag}rest"`,
    /// then reads each lock found with the read-only script of
    /// [`RwLock::state`](crate::RwLock::state), a few dozen at a time. Keys of
    /// another type, keys of another shape and the companion hashes of legacy
    /// two-key locks (`{tag}:rwlock:legacy`) are skipped: ask a legacy lock with
    /// `state()`. A present lock is listed even when free (its fencing counter or
    /// queued writers keep it), until its key expires.
    ///
    /// The work of one call is bounded: at most
    /// [`max_scans`](crate::ListOptions::max_scans) `SCAN` requests of
    /// [`scan_count`](crate::ListOptions::scan_count) keys, and
    /// [`limit`](crate::ListOptions::limit) state reads. A call that stops at a
    /// bound returns a page whose [`next`](crate::LockPage::next) continues the
    /// listing (pass it to [`ListOptions::after`](crate::ListOptions::after)); on a
    /// cluster, one `DBSIZE` per master first finds the masters (as the driver knows
    /// them) and skips the empty ones. Each lock is read at its own instant: a page
    /// is not one snapshot of the fleet.
    ///
    /// Only reads: a user allowed to read the lock keys and run the read-only
    /// scripts, plus `SCAN` (and `DBSIZE` on a cluster), may list.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOptions`] for a bad pattern, prefix or bound, before any
    /// I/O; [`Error::Redis`] (doing [`Operation::List`]) when a master cannot be
    /// reached in time, or refuses a command (e.g. NOPERM for a user without `SCAN`).
    ///
    /// # Cancel safety
    ///
    /// Reads only; dropping the future abandons the page (reads in flight are
    /// aborted) and changes nothing on the servers.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
    /// use redis_rwlock::{ListOptions, LockMode};
    ///
    /// let mut options = ListOptions::default().pattern("inv*").limit(100);
    /// loop {
    ///     let page = client.list_locks(options.clone()).await?;
    ///     for lock in &page.locks {
    ///         let mode = match lock.mode() {
    ///             Some(LockMode::Write) => "write",
    ///             Some(LockMode::Read) => "read",
    ///             None => "free",
    ///         };
    ///         println!(
    ///             "{}: {mode}, {} holders, {} writers queued",
    ///             lock.name,
    ///             lock.holders(),
    ///             lock.queued_writers()
    ///         );
    ///     }
    ///     match page.next {
    ///         Some(cursor) => options = options.after(cursor),
    ///         None => break,
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list_locks(&self, options: ListOptions) -> Result<LockPage, Error> {
        list_locks(self, options)
            .await
            .map_err(|err| err.doing(None, Operation::List))
    }
}

/// [`LockClient::list_locks`](crate::LockClient::list_locks).
async fn list_locks(client: &LockClient, options: ListOptions) -> Result<LockPage, Error> {
    options.validate()?;
    let link = &client.inner.link;
    let nodes = link.nodes().await?;
    let glob = options.glob();

    // Where this page starts: a master's position and its SCAN cursor.
    let (mut index, mut scan, pending) = match &options.after {
        None => (0, 0, Vec::new()),
        Some(cursor) => match &cursor.node {
            None => (nodes.len(), 0, cursor.pending.clone()),
            Some(at) => match nodes.iter().position(|n| &n.address == at) {
                Some(index) => (index, cursor.scan, cursor.pending.clone()),
                // That master is gone: go on with the next one in address order.
                None => (
                    nodes.iter().take_while(|n| &n.address < at).count(),
                    0,
                    cursor.pending.clone(),
                ),
            },
        },
    };
    let mut pending: VecDeque<String> = pending.into();
    let mut names = Vec::new();
    let mut seen = HashSet::new();
    let mut scans = 0;
    loop {
        while names.len() < options.limit {
            let Some(name) = pending.pop_front() else {
                break;
            };
            if seen.insert(name.clone()) {
                names.push(name);
            }
        }
        if names.len() == options.limit || index >= nodes.len() {
            break;
        }
        let node = &nodes[index];
        if scan == 0 && node.keys == Some(0) {
            index += 1;
            continue;
        }
        if scans == options.max_scans {
            break;
        }
        scans += 1;
        let step = Scan {
            node,
            cursor: scan,
            glob: &glob,
            count: options.scan_count,
        };
        let (next, keys) = link.scan(&step).await?;
        pending.extend(
            keys.iter()
                .filter_map(|key| options.name_in(key))
                .map(str::to_owned),
        );
        if next == 0 {
            index += 1;
        }
        scan = next;
    }
    let next = (!pending.is_empty() || index < nodes.len()).then(|| ListCursor {
        node: nodes.get(index).map(|n| n.address.clone()),
        scan,
        pending: pending.into(),
    });
    let locks = read_states(client, &options.key_prefix, names).await?;
    Ok(LockPage { locks, next })
}

/// Each lock's state, a few dozen requests in flight at a time, in the order of
/// `names`. A key that turned into another type since the scan is left out.
async fn read_states(
    client: &LockClient,
    prefix: &str,
    names: Vec<String>,
) -> Result<Vec<LockSummary>, Error> {
    let options = LockOptions::default().key_prefix(prefix);
    let mut locks = Vec::with_capacity(names.len());
    let mut names = names.into_iter();
    loop {
        let mut reads = JoinSet::new();
        for (at, name) in names.by_ref().take(READS_IN_FLIGHT).enumerate() {
            let lock = client.rwlock_with(name, options.clone());
            reads.spawn(async move { (at, lock.state().await, lock) });
        }
        if reads.is_empty() {
            return Ok(locks);
        }
        let mut batch = Vec::with_capacity(reads.len());
        while let Some(read) = reads.join_next().await {
            let (at, state, lock) = read
                .map_err(|err| Error::from(redis::RedisError::from(std::io::Error::other(err))))?;
            let state = match state {
                Ok(state) => state,
                Err(Error::WrongType { .. }) => continue,
                Err(err) => return Err(err),
            };
            batch.push((
                at,
                LockSummary {
                    key: lock.key()?.to_owned(),
                    name: lock.name().to_owned(),
                    state,
                },
            ));
        }
        batch.sort_by_key(|(at, _)| *at);
        locks.extend(batch.into_iter().map(|(_, summary)| summary));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::lock_key;

    #[test]
    fn the_glob_takes_the_prefix_literally_and_the_pattern_as_given() {
        let options = ListOptions::default().pattern("inv*");
        assert_eq!(options.glob(), "rwlock:{inv*}");
        let odd = ListOptions::default().key_prefix("a*b[1]\\").pattern("x?");
        assert_eq!(odd.glob(), "a\\*b\\[1\\]\\\\:{x?}");
    }

    #[test]
    fn a_pattern_that_starts_with_a_brace_scans_the_tagged_names_keys() {
        let tag = ListOptions::default().pattern("{order:42}*");
        assert_eq!(tag.glob(), "rwlock:{order:42}*");
        let escaped = ListOptions::default().pattern("\\{order:42}*");
        assert_eq!(escaped.glob(), "rwlock:\\{order:42}*");
        let literal = ListOptions::default().pattern("\\*x");
        assert_eq!(literal.glob(), "rwlock:{\\*x}");
    }

    #[test]
    fn a_pattern_that_starts_with_a_wildcard_scans_every_lock_key_of_the_prefix() {
        for pattern in ["*", "*lines", "?nv*", "[{i]*"] {
            let options = ListOptions::default().pattern(pattern);
            assert_eq!(options.glob(), "rwlock:{*", "{pattern}");
            // Both kinds of key match that glob, as the server matches it.
            for key in ["rwlock:{inventory}", "rwlock:{order:42}:lines"] {
                assert!(glob::matches(&options.glob(), key), "{pattern}: {key}");
            }
        }
    }

    #[test]
    fn only_keys_of_a_lock_s_shape_are_locks() {
        let options = ListOptions::default();
        assert_eq!(options.name_in("rwlock:{inventory}"), Some("inventory"));
        assert_eq!(options.name_in("rwlock:{a b/ü:c}"), Some("a b/ü:c"));
        assert_eq!(
            options.name_in("rwlock:{order:42}:lines"),
            Some("{order:42}:lines")
        );
        assert_eq!(options.name_in("rwlock:{a}x"), Some("{a}x"));
        for key in [
            "rwlock:{}",
            "rwlock:{}x",
            "rwlock:{a}x}",
            "rwlock:{a}{b}",
            "rwlock:{a",
            "rwlock:inventory",
            "{res}:rwlock:legacy",
            "locks:{inventory}",
            "locks:{a}:extra",
            "rwlockx:{inventory}",
            "rwlock:x:{inventory}",
        ] {
            assert_eq!(options.name_in(key), None, "{key}");
        }
    }

    #[test]
    fn each_name_comes_back_from_the_key_its_lock_uses() {
        let options = ListOptions::default().key_prefix("locks:v2");
        for name in [
            "inventory",
            "{order:42}:lines",
            "{a}b",
            "x:y",
            "{t}x:released",
        ] {
            let key = lock_key("locks:v2", name);
            assert!(glob::matches(&options.glob(), &key), "{key}");
            assert_eq!(options.name_in(&key), Some(name), "{key}");
        }
    }

    #[test]
    fn the_pattern_still_selects_the_names() {
        let listed = |pattern: &str| -> Vec<&'static str> {
            let options = ListOptions::default().pattern(pattern);
            [
                "inventory",
                "invoices",
                "catalog",
                "{inv}:a",
                "{order:42}:lines",
                "{order:42}:totals",
                "{order:7}:lines",
            ]
            .into_iter()
            .filter(|name| {
                // As a listing sees them: the server's glob, then the name.
                let key = lock_key("rwlock", name);
                glob::matches(&options.glob(), &key) && options.name_in(&key) == Some(*name)
            })
            .collect()
        };
        assert_eq!(listed("inv*"), ["inventory", "invoices"]);
        assert_eq!(
            listed("{order:42}*"),
            ["{order:42}:lines", "{order:42}:totals"]
        );
        assert_eq!(listed("\\{order:7}*"), ["{order:7}:lines"]);
        assert_eq!(listed("*lines"), ["{order:42}:lines", "{order:7}:lines"]);
        assert_eq!(listed("?nv*"), ["inventory", "invoices"]);
        assert_eq!(listed("*inv*"), ["inventory", "invoices", "{inv}:a"]);
        assert_eq!(listed("*").len(), 7);
        // A plain name's key matches `rwlock:{*` but not the pattern `{*`.
        assert_eq!(listed("{*").len(), 4);
        assert!(listed("{inventory}").is_empty(), "the tag alone is no name");
    }

    #[test]
    fn bad_options_are_refused_before_any_io() {
        for bad in [
            ListOptions::default().pattern(""),
            ListOptions::default().key_prefix(""),
            ListOptions::default().key_prefix("a{"),
            ListOptions::default().limit(0),
            ListOptions::default().limit(MAX_LIMIT + 1),
            ListOptions::default().scan_count(0),
            ListOptions::default().scan_count(MAX_SCAN_COUNT + 1),
            ListOptions::default().max_scans(0),
        ] {
            assert!(
                matches!(bad.validate(), Err(Error::InvalidOptions(_))),
                "{bad:?} accepted"
            );
        }
        assert!(ListOptions::default().validate().is_ok());
        // Braces in the pattern select tagged names.
        assert!(ListOptions::default().pattern("{a}*").validate().is_ok());
    }

    #[test]
    fn a_summary_is_derived_from_the_state() {
        let state: LockState = serde_json::from_value(serde_json::json!({
            "server_time": "1970-01-01T00:00:01Z",
            "writer": null,
            "readers": [
                {"token": "a", "until": "1970-01-01T00:00:05Z"},
                {"token": "b", "until": "1970-01-01T00:00:09Z"}
            ],
            "queued_writers": [
                {"token": "w1", "until": "1970-01-01T00:00:03Z"},
                {"token": "w2", "until": "1970-01-01T00:00:04Z"}
            ],
            "fencing_token": 7
        }))
        .unwrap_or_else(|err| panic!("{err}"));
        let summary = LockSummary {
            name: "n".into(),
            key: "rwlock:{n}".into(),
            state,
        };
        assert_eq!(summary.mode(), Some(LockMode::Read));
        assert_eq!(summary.holders(), 2);
        assert_eq!(summary.queued_writers(), 2);
        assert_eq!(
            summary.first_in_line().and_then(|h| h.token.as_deref()),
            Some("w1")
        );
        assert_eq!(
            summary.held_until().map(|t| t.timestamp_millis()),
            Some(9_000)
        );

        let mut written = summary.clone();
        written.state.readers.clear();
        written.state.writer = summary.state.queued_writers.first().cloned();
        assert_eq!(written.mode(), Some(LockMode::Write));
        assert_eq!(written.holders(), 1);
        assert_eq!(
            written.held_until().map(|t| t.timestamp_millis()),
            Some(3_000)
        );
        written.state.writer = None;
        assert_eq!(
            (written.mode(), written.holders(), written.held_until()),
            (None, 0, None)
        );
    }
}

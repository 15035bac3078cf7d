//! Where locks live: one hash per name, spread over the cluster, or several in one
//! slot when their names start with the same hash tag; names and keys of other
//! types get defined answers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use redis::AsyncCommands;
use redis_rwlock::{Error, ListOptions, LockClient, LockMode, LockOptions, LockSummary};

use common::{
    assert_entered_when_the_lease_ended, cluster_client, raw_cluster, resume, shared_cluster,
    unique_name,
};
use tokio::time::{Instant, timeout};

/// Redis-only: where keys land on the cluster's masters (hash slots).
#[tokio::test]
async fn locks_with_many_names_spread_over_all_masters_and_all_work() {
    let client = cluster_client().await;
    let cluster = shared_cluster();
    let mut masters = HashSet::new();
    for i in 0..24 {
        let lock = client.rwlock(unique_name(&format!("spread-{i}")));
        masters.insert(cluster.master_for_key(lock.key().unwrap()).port);
        let writer = lock.write().await.unwrap();
        assert!(matches!(lock.try_read().await, Err(Error::WouldBlock)));
        writer.release().await.unwrap();
        let reader = lock.read().await.unwrap();
        reader.release().await.unwrap();
    }
    assert_eq!(masters.len(), 3, "24 names all landed on {masters:?}");
}

/// Redis-only: inspects the raw hash (its type, fields and expiry).
#[tokio::test]
async fn the_lock_is_one_hash_named_after_the_prefix_and_name() {
    let client = cluster_client().await;
    let name = unique_name("layout");
    let lock = client.rwlock_with(&name, LockOptions::default().key_prefix("locks"));
    let writer = lock.write().await.unwrap();
    let mut raw = raw_cluster().await;
    let key = format!("locks:{{{name}}}");
    assert_eq!(lock.key().unwrap(), key);
    let kind: String = redis::cmd("TYPE")
        .arg(&key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(kind, "hash");
    let owner: String = raw.hget(&key, "w:owner").await.unwrap();
    assert_eq!(owner.len(), 32);
    let fence: u64 = raw.hget(&key, "fence").await.unwrap();
    assert_eq!(fence, writer.fencing_token());
    let ttl: i64 = raw.pttl(&key).await.unwrap();
    assert!(
        ttl > 9_000,
        "the key expires with its longest lease, not before: {ttl}"
    );
    writer.release().await.unwrap();
}

/// Redis-only: a key of another type (WRONGTYPE) exists only on a server.
#[tokio::test]
async fn a_key_of_another_type_gives_wrong_type_and_is_left_alone() {
    let client = cluster_client().await;
    let mut raw = raw_cluster().await;
    let name = unique_name("wrongtype");
    let lock = client.rwlock(&name);
    let key = lock.key().unwrap();
    let _: () = raw.set(key, "not a lock").await.unwrap();
    // With `min_replicas` the script runs in a pipeline with WAIT.
    let replicated = client.rwlock_with(&name, LockOptions::default().min_replicas(1));
    for result in [
        lock.read().await.map(drop),
        lock.write().await.map(drop),
        lock.try_read().await.map(drop),
        lock.try_write().await.map(drop),
        lock.state().await.map(drop),
        replicated.try_read().await.map(drop),
        replicated.write().await.map(drop),
    ] {
        match result {
            Err(Error::WrongType { key: reported }) => assert_eq!(reported, key),
            other => panic!("expected WrongType, got {other:?}"),
        }
    }
    let value: String = raw.get(key).await.unwrap();
    assert_eq!(value, "not a lock");
    let ttl: i64 = raw.pttl(key).await.unwrap();
    assert_eq!(ttl, -1, "the key of another type got an expiry");
}

on_both_backends! {
async fn names_with_spaces_and_unicode_work(backend: Backend) {
    let client = backend.client().await;
    let other = backend.client().await;
    for name in ["with space", "ünïcödé ✓ 锁", "a:b/c", "\u{1F512}"] {
        let name = format!("{name}-{}", unique_name(""));
        let lock = client.rwlock(name.as_str());
        let writer = lock.write().await.unwrap();
        assert!(matches!(lock.try_read().await, Err(Error::WouldBlock)));
        let key = format!("rwlock:{{{name}}}");
        assert_eq!(lock.key().unwrap(), key);
        // Another process sees this writer under this name.
        let state = other.rwlock(name.as_str()).state().await.unwrap();
        assert_eq!(state.mode(), Some(LockMode::Write), "{name:?}: {state:?}");
        assert_eq!(state.fencing_token, writer.fencing_token(), "{name:?}");
        writer.release().await.unwrap();
        let state = other.rwlock(name.as_str()).state().await.unwrap();
        assert_eq!(state.mode(), None, "{name:?}: {state:?}");
    }
}
}

on_both_backends! {
/// Every request would hang (on Redis: a private server paused with SIGSTOP; in
/// memory: the store stops answering), so a fast `InvalidOptions` proves nothing
/// was sent.
async fn names_with_braces_out_of_place_or_empty_are_invalid_before_any_io(backend: Backend) {
    let (client, server) = backend.unanswered_client().await;
    let refused = [
        "",
        // A tag alone: its key would be the plain name `tag`'s.
        "{tag}",
        // An empty tag, an unclosed one, braces anywhere but a leading tag.
        "{}x",
        "{}",
        "{ab",
        "a{b}",
        "a}b",
        "a{b",
        "x}",
        "{a}b}",
        "{a}{b}",
    ];
    for name in refused {
        let lock = client.rwlock(name);
        let started = Instant::now();
        let message = match lock.write().await {
            Err(Error::InvalidOptions(message)) => message,
            other => panic!("{name:?}: {other:?}"),
        };
        if !name.is_empty() {
            assert!(
                message.starts_with("lock name ") && message.contains(" as in \"{"),
                "{name:?}: the message shows no way out: {message}"
            );
        }
        for result in [
            lock.read().await.map(drop),
            lock.try_read().await.map(drop),
            lock.try_write().await.map(drop),
            lock.state().await.map(drop),
        ] {
            assert!(
                matches!(result, Err(Error::InvalidOptions(_))),
                "{name:?}: {result:?}"
            );
        }
        assert!(matches!(lock.key(), Err(Error::InvalidOptions(_))));
        assert!(
            started.elapsed() < Duration::from_millis(200),
            "{name:?} did I/O"
        );
    }
    if let Some(server) = server {
        resume(server.nodes[0].pid);
    }
}

/// A name that starts with a hash tag of its own keeps it: its key is the prefix, a
/// colon and the name as it is, and it is read, written, shown and waited for like
/// any lock (its waiters listen on that key's channel).
async fn a_name_with_its_own_hash_tag_works_end_to_end(backend: Backend) {
    let client = backend.client().await;
    let other = backend.client().await;
    let tag = unique_name("tagged");
    let name = format!("{{{tag}}}:lines");
    let lock = client.rwlock(name.as_str());
    assert_eq!(lock.name(), name);
    assert_eq!(lock.key().unwrap(), format!("rwlock:{{{tag}}}:lines"));
    let elsewhere = other.rwlock(name.as_str());

    let reader = lock.read().await.unwrap();
    let state = elsewhere.state().await.unwrap();
    assert_eq!(
        (state.mode(), state.readers.len()),
        (Some(LockMode::Read), 1),
        "{state:?}"
    );
    assert!(matches!(elsewhere.try_write().await, Err(Error::WouldBlock)));
    reader.release().await.unwrap();

    let writer = lock.write().await.unwrap();
    let state = elsewhere.state().await.unwrap();
    assert_eq!(state.mode(), Some(LockMode::Write), "{state:?}");
    assert_eq!(state.fencing_token, writer.fencing_token());
    assert!(matches!(elsewhere.try_read().await, Err(Error::WouldBlock)));

    // A reader elsewhere waits; the release wakes it, well before its re-check
    // timer (half a second or more after its last attempt) would.
    let waiter = tokio::spawn({
        let lock = elsewhere.clone();
        async move {
            let guard = lock.read().await.unwrap();
            (Instant::now(), guard)
        }
    });
    backend.until_subscribers(&elsewhere, 1).await;
    let released = Instant::now();
    writer.release().await.unwrap();
    let (granted, guard) = timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
    let gap = granted.saturating_duration_since(released);
    assert!(
        gap < Duration::from_millis(250),
        "the reader got in {gap:?} after the release"
    );
    guard.release().await.unwrap();
    assert!(elsewhere.state().await.unwrap().mode().is_none());
}

/// `list_locks` finds tagged and plain locks under their names, and its pattern
/// selects among both: a pattern that starts with a name's tag lists the tagged
/// names only (not the plain lock named after the tag, whose key starts alike).
async fn tagged_and_plain_locks_are_listed_by_their_names(backend: Backend) {
    let client = backend.client().await;
    let group = unique_name("listed");
    let names = [
        group.clone(),
        format!("{group}-plain"),
        format!("{{{group}}}:a"),
        format!("{{{group}}}:b"),
    ];
    let mut writers = Vec::new();
    for name in &names {
        let lock = client.rwlock(name.as_str());
        writers.push((lock.key().unwrap().to_owned(), lock.write().await.unwrap()));
    }

    let all = listed(&client, &format!("*{group}*")).await;
    assert_eq!(all.keys().collect::<Vec<_>>(), sorted(&names));
    for (name, (key, writer)) in names.iter().zip(&writers) {
        let lock = &all[name];
        assert_eq!(&lock.key, key);
        assert_eq!(lock.mode(), Some(LockMode::Write), "{name}");
        assert_eq!(lock.state.fencing_token, writer.fencing_token(), "{name}");
    }
    assert_eq!(all[&names[2]].key, format!("rwlock:{{{group}}}:a"));
    assert_eq!(all[&names[0]].key, format!("rwlock:{{{group}}}"));

    let cases = [
        (format!("{group}*"), &names[..2]),
        (format!("{{{group}}}*"), &names[2..]),
        (format!("{{{group}}}:a"), &names[2..3]),
        (format!("?{group}}}:[b]"), &names[3..]),
        (format!("{group}-pl?in"), &names[1..2]),
    ];
    for (pattern, expected) in cases {
        let found = listed(&client, &pattern).await;
        assert_eq!(
            found.keys().collect::<Vec<_>>(),
            sorted(expected),
            "pattern {pattern:?}"
        );
    }
    for (_, writer) in writers {
        writer.release().await.unwrap();
    }
}
}

/// Every lock whose name `pattern` matches, by name, following the pages to their end.
async fn listed(client: &LockClient, pattern: &str) -> BTreeMap<String, LockSummary> {
    let options = ListOptions::default().pattern(pattern);
    let mut next = options.clone();
    let mut found = BTreeMap::new();
    for _ in 0..100 {
        let page = client.list_locks(next).await.unwrap();
        for lock in page.locks {
            found.entry(lock.name.clone()).or_insert(lock);
        }
        match page.next {
            Some(cursor) => next = options.clone().after(cursor),
            None => return found,
        }
    }
    panic!("listing {pattern:?} did not end within 100 pages");
}

fn sorted(names: &[String]) -> Vec<&String> {
    let mut names: Vec<&String> = names.iter().collect();
    names.sort();
    names
}

/// Redis-only: where keys land (`CLUSTER KEYSLOT`) and what they are (`TYPE`).
#[tokio::test]
async fn names_that_start_with_the_same_tag_share_its_slot() {
    let client = cluster_client().await;
    let cluster = shared_cluster();
    let mut raw = raw_cluster().await;
    let tag = unique_name("slot");
    let lines = client.rwlock(format!("{{{tag}}}:lines"));
    let totals = client.rwlock(format!("{{{tag}}}totals"));
    let plain = client.rwlock(tag.as_str());
    assert_eq!(lines.key().unwrap(), format!("rwlock:{{{tag}}}:lines"));
    assert_eq!(totals.key().unwrap(), format!("rwlock:{{{tag}}}totals"));
    // A plain name's key is as it always was: the whole name is its tag.
    assert_eq!(plain.key().unwrap(), format!("rwlock:{{{tag}}}"));
    let own = format!("cache:{{{tag}}}");
    let slot = cluster.keyslot(&own);
    for lock in [&lines, &totals, &plain] {
        let key = lock.key().unwrap();
        assert_eq!(cluster.keyslot(key), slot, "{key}");
    }
    // Each is a lock of its own, kept in a hash at its key.
    let writers = [
        lines.write().await.unwrap(),
        totals.write().await.unwrap(),
        plain.write().await.unwrap(),
    ];
    for lock in [&lines, &totals, &plain] {
        let key = lock.key().unwrap();
        let kind: String = redis::cmd("TYPE")
            .arg(key)
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(kind, "hash", "{key}");
        let owner: String = raw.hget(key, "w:owner").await.unwrap();
        assert_eq!(owner.len(), 32, "{key}");
    }
    let [lines_writer, totals_writer, plain_writer] = writers;
    lines_writer.release().await.unwrap();
    lines.try_read().await.unwrap().release().await.unwrap();
    for lock in [&totals, &plain] {
        assert!(matches!(lock.try_read().await, Err(Error::WouldBlock)));
    }
    totals_writer.release().await.unwrap();
    plain_writer.release().await.unwrap();
}

/// Redis-only: the legacy layout (the in-memory store refuses it) and raw keys.
#[tokio::test]
async fn a_legacy_lock_keeps_its_state_in_a_hash_beside_its_read_key() {
    let client = cluster_client().await;
    let cluster = shared_cluster();
    let tag = unique_name("legacy-key");
    let read_key = format!("{{{tag}}}:read");
    let lock = client.legacy_rwlock(&read_key, format!("{{{tag}}}:write"));
    let key = format!("{{{tag}}}:rwlock:legacy");
    assert_eq!(lock.key().unwrap(), key);
    let writer = lock.write().await.unwrap();
    let owner: Option<String> = raw_cluster().await.hget(&key, "w:owner").await.unwrap();
    assert_eq!(owner.map(|token| token.len()), Some(32));
    assert_eq!(
        cluster.master_for_key(&key).port,
        cluster.master_for_key(&read_key).port
    );
    writer.release().await.unwrap();
}

on_both_backends! {
async fn the_readers_count_follows_the_reader_entries(backend: Backend) {
    let client = backend.client().await;
    let lock = client.rwlock(unique_name("count"));
    let mut guards = Vec::new();
    for n in 1..=3 {
        // Holds of their own: a plain read would share the first.
        guards.push(lock.read_recursive().await.unwrap());
        assert_eq!(lock.state().await.unwrap().readers.len(), n);
    }
    guards.pop().unwrap().release().await.unwrap();
    assert_eq!(lock.state().await.unwrap().readers.len(), 2);
    for guard in guards {
        guard.release().await.unwrap();
    }
    let state = lock.state().await.unwrap();
    assert!(
        state.mode().is_none() && state.readers.is_empty(),
        "the last reader left something behind: {state:?}"
    );
}

/// Readers are judged by their count and latest deadline: a reader that never
/// releases keeps the lock read-held until every counted reader's lease has ended,
/// then stops counting.
async fn a_reader_that_never_releases_stops_counting_when_the_leases_end(backend: Backend) {
    let client = backend.client().await;
    let lease = Duration::from_millis(1500);
    let options = LockOptions::default().read_lease(lease).auto_renew(false);
    let lock = client.rwlock_with(unique_name("leftover"), options);
    let crashed = lock.read().await.unwrap();
    let started = Instant::now();
    std::mem::forget(crashed); // never released: like a reader whose process died
    lock.read().await.unwrap().release().await.unwrap();
    let counted = lock.state().await.unwrap().readers.len();
    assert_eq!(counted, 1, "the vanished reader stopped counting too early");
    assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));

    let writer = timeout(Duration::from_secs(10), lock.write())
        .await
        .unwrap()
        .unwrap();
    assert_entered_when_the_lease_ended(started.elapsed(), lease);
    let state = lock.state().await.unwrap();
    assert!(
        state.readers.is_empty() && state.mode() == Some(LockMode::Write),
        "the vanished reader still counts: {state:?}"
    );
    writer.release().await.unwrap();
}
}

/// Redis-only: the vanished reader's entry is swept from the raw hash.
#[tokio::test]
async fn a_vanished_readers_entry_is_swept_from_the_hash() {
    let client = cluster_client().await;
    let mut raw = raw_cluster().await;
    let lease = Duration::from_millis(1500);
    let options = LockOptions::default().read_lease(lease).auto_renew(false);
    let lock = client.rwlock_with(unique_name("swept"), options);
    let key = lock.key().unwrap().to_owned();
    std::mem::forget(lock.read().await.unwrap());
    let writer = timeout(Duration::from_secs(10), lock.write())
        .await
        .unwrap()
        .unwrap();
    let fields: Vec<String> = raw.hkeys(&key).await.unwrap();
    assert!(
        !fields.iter().any(|f| f.starts_with("r:") || f == "readers"),
        "the vanished reader's entry is still there: {fields:?}"
    );
    writer.release().await.unwrap();
}

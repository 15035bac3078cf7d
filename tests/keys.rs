//! Where locks live: one hash per name, spread over the cluster; names and keys of
//! other types get defined answers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashSet;
use std::time::Duration;

use redis::AsyncCommands;
use redis_rwlock::{Error, LockMode, LockOptions};

use common::{
    assert_entered_when_the_lease_ended, cluster_client, raw_cluster, shared_cluster, unique_name,
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
async fn names_with_braces_or_empty_are_invalid(backend: Backend) {
    let client = backend.client().await;
    for name in ["", "{tag}", "a}b", "a{b"] {
        let lock = client.rwlock(name);
        assert!(
            matches!(lock.write().await, Err(Error::InvalidOptions(_))),
            "{name:?} accepted"
        );
        assert!(matches!(
            lock.try_read().await,
            Err(Error::InvalidOptions(_))
        ));
        assert!(matches!(lock.state().await, Err(Error::InvalidOptions(_))));
        assert!(matches!(lock.key(), Err(Error::InvalidOptions(_))));
    }
}
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

//! Fenced writes, replica acknowledgement and the operator's break-glass.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redis::AsyncCommands;
use redis_rwlock::{Error, FencedWrites, LockOptions};
use tokio::time::{Instant, timeout};

use common::{cluster_client, raw_cluster, unique_name, wait_for};

on_both_backends! {
async fn a_fenced_write_lands_only_while_the_guard_holds(backend: Backend) {
    let client = backend.client().await;
    let name = unique_name("fenced");
    let cache = format!("cache:{{{name}}}");
    let lease = Duration::from_millis(600);
    let lock = client.rwlock_with(
        &name,
        LockOptions::default().write_lease(lease).auto_renew(false),
    );

    let stale = lock.write().await.unwrap();
    stale
        .fenced_write(FencedWrites::new().set_with_expiry(&cache, "first", Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(backend.value(&cache).await.as_deref(), Some(&b"first"[..]));
    if backend.store().is_none() {
        // The expiry as Redis keeps it (the in-memory store does not show it).
        let ttl: i64 = raw_cluster().await.pttl(&cache).await.unwrap();
        assert!(ttl > 50_000 && ttl <= 60_000, "{ttl}");
    }

    // The first writer "pauses" past its lease; a second writer takes over.
    timeout(lease * 4, stale.lost()).await.unwrap();
    let fresh = lock.write().await.unwrap();
    fresh
        .fenced_write(FencedWrites::new().set(&cache, "second"))
        .await
        .unwrap();

    // The stale writer wakes up and tries to overwrite: refused, nothing written.
    let late = stale
        .fenced_write(FencedWrites::new().set(&cache, "stale").delete(&cache))
        .await;
    assert!(matches!(late, Err(Error::LeaseLost { .. })), "{late:?}");
    assert_eq!(backend.value(&cache).await.as_deref(), Some(&b"second"[..]));
    fresh.release().await.unwrap();
}

async fn a_fenced_write_outside_the_lock_slot_is_refused_before_any_io(backend: Backend) {
    let client = backend.client().await;
    let name = unique_name("fenced-slot");
    let lock = client.rwlock(&name);
    let writer = lock.write().await.unwrap();
    for key in ["cache:unrelated", "cache:{other}", &format!("cache:{name}")] {
        let result = writer
            .fenced_write(
                FencedWrites::new()
                    .set(format!("cache:{{{name}}}"), "v")
                    .set(key, "v"),
            )
            .await;
        assert!(
            matches!(result, Err(Error::CrossSlot { .. })),
            "{key}: {result:?}"
        );
    }
    let own = writer
        .fenced_write(FencedWrites::new().set(lock.key().unwrap(), "v"))
        .await;
    assert!(matches!(own, Err(Error::InvalidOptions(_))), "{own:?}");
    // Nothing of the refused batches was written, and the guard still holds.
    assert_eq!(backend.value(&format!("cache:{{{name}}}")).await, None);
    assert!(writer.is_held());
    writer.release().await.unwrap();
}
}

/// Redis-only: replicas and WAIT.
#[tokio::test]
async fn an_acquire_waits_for_a_replica_when_asked() {
    let client = cluster_client().await;
    let lock = client.rwlock_with(
        unique_name("replicated"),
        LockOptions::default()
            .min_replicas(1)
            .replica_timeout(Duration::from_secs(1)),
    );
    let writer = lock.write().await.unwrap();
    writer.release().await.unwrap();
    let reader = lock.try_read().await.unwrap();
    reader.release().await.unwrap();
}

/// Redis-only: replicas and WAIT.
#[tokio::test]
async fn too_few_replicas_release_the_hold_and_say_so() {
    let client = cluster_client().await;
    let timeout_ = Duration::from_millis(300);
    // Each master of the test cluster has exactly one replica.
    let lock = client.rwlock_with(
        unique_name("unreplicated"),
        LockOptions::default()
            .min_replicas(2)
            .replica_timeout(timeout_),
    );
    let started = Instant::now();
    match lock.write().await {
        Err(
            ref err @ Error::NotReplicated {
                acknowledged,
                required,
                ..
            },
        ) => {
            assert_eq!((acknowledged, required), (1, 2));
            // The message names the lock, what had to reach the replicas, the limit.
            let name = lock.name();
            let said = format!(
                "only 1 of 2 replicas acknowledged within {} while acquiring the write lock on {name:?}",
                humantime::format_duration(timeout_)
            );
            assert_eq!(err.to_string(), said);
        }
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    assert!(started.elapsed() >= timeout_);
    assert!(
        lock.state().await.unwrap().is_free(),
        "the unreplicated hold stayed"
    );
}

on_both_backends! {
async fn force_release_ends_every_hold_and_the_holders_notice(backend: Backend) {
    let client = backend.client().await;
    let lease = Duration::from_millis(1500);
    let lock = client.rwlock_with(
        unique_name("force"),
        LockOptions::default().read_lease(lease),
    );
    let a = lock.read().await.unwrap();
    let b = lock.read_recursive().await.unwrap(); // a hold of its own
    let writer = tokio::spawn({
        let lock = lock.clone();
        async move { lock.write().await }
    });
    wait_for(&lock, |s| s.queued_writers.len() == 1).await;
    assert_eq!(lock.force_release().await.unwrap(), 2);
    let writer = timeout(Duration::from_secs(5), writer)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    timeout(lease, a.lost()).await.unwrap();
    timeout(lease, b.lost()).await.unwrap();
    assert!(matches!(a.release().await, Err(Error::LeaseLost { .. })));
    assert!(writer.is_held());
    writer.release().await.unwrap();
}
}

/// A fencing token is the stored one + 1 when that is ahead of the server's clock
/// in microseconds (a clock stepped back; here the counter is moved ahead instead):
/// never a repeat. Checked on the three ways a writer gets the lock: a free lock,
/// a hand-over to the writer first in line with another behind it, and one to the
/// last writer in line. Redis-only: it moves the counter in the raw hash.
#[tokio::test]
async fn fencing_tokens_go_up_when_the_counter_is_ahead_of_the_clock() {
    let client = cluster_client().await;
    let name = unique_name("fence-ahead");
    let lock = client.rwlock(&name);
    let key = lock.key().unwrap().to_owned();
    let mut raw = raw_cluster().await;
    // Far ahead of any clock (microseconds in the year 2223), below 2^53.
    let ahead: u64 = 8_000_000_000_000_000;

    let _: () = raw.hset(&key, "fence", ahead).await.unwrap();
    let first = lock.write().await.unwrap();
    assert_eq!(
        first.fencing_token(),
        ahead + 1,
        "a write acquire on a free lock"
    );

    let (second_lock, third_lock) = (lock.clone(), lock.clone());
    let second = tokio::spawn(async move { second_lock.write().await.unwrap() });
    wait_for(&lock, |s| s.queued_writers.len() == 1).await;
    let third = tokio::spawn(async move { third_lock.write().await.unwrap() });
    wait_for(&lock, |s| s.queued_writers.len() == 2).await;

    first.release().await.unwrap();
    let second = timeout(Duration::from_secs(5), second)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        second.fencing_token(),
        ahead + 2,
        "a hand-over, the line going on"
    );
    second.release().await.unwrap();
    let third = timeout(Duration::from_secs(5), third)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        third.fencing_token(),
        ahead + 3,
        "a hand-over to the last in line"
    );
    third.release().await.unwrap();
}

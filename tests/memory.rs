//! The in-memory backend's own promises: tokio's clock (a paused test loses a
//! lease in no real time), the fault hooks, and what it refuses. Everything else it
//! shares with Redis is checked by the semantic tests, which run on both backends
//! (`on_both_backends!`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use redis_rwlock::{Error, FencedWrites, LockClient, LockOptions, MemoryStore, RwLockWriteGuard};
use tokio::time::timeout;

const LEASE: Duration = Duration::from_secs(30);

fn options() -> LockOptions {
    LockOptions::default().read_lease(LEASE).write_lease(LEASE)
}

/// A server that stops answering costs a writer its lease, at the lease's end on
/// tokio's clock: a paused test sees it at once, in well under 100 ms of real time.
#[tokio::test(start_paused = true)]
async fn a_lease_is_lost_mid_request_in_no_real_time() {
    let wall = std::time::Instant::now();
    let store = MemoryStore::new();
    let lock = LockClient::in_memory(&store).rwlock_with("cache", options());
    let guard = lock.write().await.unwrap();
    let granted = tokio::time::Instant::now();
    store.stop_answering(Duration::from_secs(600));

    timeout(LEASE * 2, guard.lost())
        .await
        .expect("the lease is lost within its length");
    let lost_after = granted.elapsed();
    assert!(!guard.is_held());
    assert!(
        lost_after >= LEASE / 2 && lost_after <= LEASE + Duration::from_secs(1),
        "lost after {lost_after:?} of tokio's time, for a {LEASE:?} lease"
    );
    assert!(matches!(
        guard.release().await,
        Err(Error::LeaseLost { .. })
    ));

    // Once the server answers again, the lock is free: the lease ended there too.
    tokio::time::sleep(Duration::from_secs(600)).await;
    let other = LockClient::in_memory(&store).rwlock_with("cache", options());
    let next = other.try_write().await.unwrap();
    assert!(next.fencing_token() > 0);
    next.release().await.unwrap();
    assert!(
        wall.elapsed() < Duration::from_millis(100),
        "took {:?} of real time",
        wall.elapsed()
    );
}

/// A lock whose holds a failover lost: the lock is free at once, its holders learn
/// it at their next renewal, and the next writer's fencing token is still higher.
#[tokio::test(start_paused = true)]
async fn lost_holds_are_noticed_and_fencing_tokens_still_rise() {
    let store = MemoryStore::new();
    let lock = LockClient::in_memory(&store).rwlock_with("cache", options());
    let old = lock.write().await.unwrap();
    store.lose_holds("cache");

    let other = LockClient::in_memory(&store).rwlock_with("cache", options());
    let new = other
        .try_write()
        .await
        .expect("the lost hold excludes no one");
    assert!(new.fencing_token() > old.fencing_token());
    timeout(LEASE, old.lost())
        .await
        .expect("the old holder learns it at its next renewal");
    new.release().await.unwrap();
}

/// A writer of another client waits for lock `name` (held by `held`); its holds are
/// lost (`lose_holds`): the writer is granted at once, with a higher fencing token.
async fn writer_woken_by_lost_holds(
    store: &MemoryStore,
    name: &str,
    held: &RwLockWriteGuard,
) -> RwLockWriteGuard {
    let waiter = LockClient::in_memory(store).rwlock_with(name, options());
    let channel = format!("{}:released", waiter.key().unwrap());
    let waiting = tokio::spawn(async move { waiter.write().await });
    while store.subscribers(&channel) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let lost_at = tokio::time::Instant::now();
    store.lose_holds(name);
    let granted = waiting.await.unwrap().unwrap();
    assert!(
        lost_at.elapsed() < Duration::from_secs(1),
        "the waiter got in {:?} after the holds were lost",
        lost_at.elapsed()
    );
    assert!(granted.fencing_token() > held.fencing_token());
    granted
}

/// Lost holds wake the lock's waiters at once, as a failover's dropped subscription
/// does on Redis, rather than at their next re-check (a lease away).
#[tokio::test(start_paused = true)]
async fn lost_holds_wake_the_waiters_at_once() {
    let store = MemoryStore::new();
    let holder = LockClient::in_memory(&store).rwlock_with("cache", options());
    let held = holder.write().await.unwrap();
    let granted = writer_woken_by_lost_holds(&store, "cache", &held).await;
    granted.release().await.unwrap();
}

/// `lose_holds` ends the holds of exactly the lock it names: of a tagged lock, not
/// those of its neighbours under the same tag, nor of the plain lock named after the
/// tag (whose key, `rwlock:{order}`, is the tag's too); and the tagged lock's
/// waiters are woken at once, by its own channel.
#[tokio::test(start_paused = true)]
async fn lost_holds_of_a_tagged_lock_are_its_own() {
    let store = MemoryStore::new();
    let client = LockClient::in_memory(&store);
    let lock = |name: &str| client.rwlock_with(name, options());
    let lines = lock("{order}:lines");
    let held = lines.write().await.unwrap();
    let totals = lock("{order}:totals").write().await.unwrap();
    let plain = lock("order").write().await.unwrap();
    let granted = writer_woken_by_lost_holds(&store, "{order}:lines", &held).await;
    timeout(LEASE, held.lost())
        .await
        .expect("the old holder learns it at its next renewal");
    for name in ["{order}:totals", "order"] {
        assert!(
            matches!(lock(name).try_read().await, Err(Error::WouldBlock)),
            "{name} lost its hold with {{order}}:lines"
        );
    }

    // The plain lock named after the tag is another lock again.
    store.lose_holds("order");
    lock("order")
        .try_write()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    assert!(matches!(
        lock("{order}:lines").try_read().await,
        Err(Error::WouldBlock)
    ));
    timeout(LEASE, plain.lost())
        .await
        .expect("the plain lock's holder learns it at its next renewal");
    assert!(
        totals.is_held(),
        "{{order}}:totals lost its hold with order"
    );
    granted.release().await.unwrap();
    totals.release().await.unwrap();
}

/// Injected failures fail exactly that many requests, with the error a dropped
/// connection gives, and lose nothing: the next request works.
#[tokio::test(start_paused = true)]
async fn injected_failures_fail_that_many_requests() {
    let store = MemoryStore::new();
    let lock = LockClient::in_memory(&store).rwlock_with("cache", options());
    store.fail_next(2);
    for _ in 0..2 {
        match lock.try_write().await {
            Err(Error::Redis(err)) => {
                assert!(err.redis_error().to_string().contains("fail_next"), "{err}")
            }
            other => panic!("expected an injected failure, got {other:?}"),
        }
    }
    let guard = lock.try_write().await.unwrap();
    assert!(lock.state().await.unwrap().writer.is_some());
    guard.release().await.unwrap();
    assert!(lock.state().await.unwrap().is_free());
}

/// A request to a silent store fails after the client's overall limit (4 s), not
/// after the silence.
#[tokio::test(start_paused = true)]
async fn a_silent_store_times_requests_out_at_the_clients_limit() {
    let store = MemoryStore::new();
    let lock = LockClient::in_memory(&store).rwlock_with("cache", options());
    store.stop_answering(Duration::from_secs(60));
    let started = tokio::time::Instant::now();
    assert!(matches!(lock.try_read().await, Err(Error::Redis { .. })));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(4) && waited < Duration::from_secs(5),
        "gave up after {waited:?}"
    );
}

/// Fenced writes land in the store while the write hold lasts, and not after it.
#[tokio::test(start_paused = true)]
async fn fenced_writes_land_only_while_the_hold_lasts() {
    let store = MemoryStore::new();
    let lock = LockClient::in_memory(&store).rwlock_with("cache", options());
    let guard = lock.write().await.unwrap();
    guard
        .fenced_write(FencedWrites::new().set("cache:{cache}:value", "fresh"))
        .await
        .unwrap();
    assert_eq!(
        store.value("cache:{cache}:value").as_deref(),
        Some(&b"fresh"[..])
    );
    store.lose_holds("cache");
    let refused = guard
        .fenced_write(FencedWrites::new().set("cache:{cache}:value", "stale"))
        .await;
    assert!(
        matches!(refused, Err(Error::LeaseLost { .. })),
        "{refused:?}"
    );
    assert_eq!(
        store.value("cache:{cache}:value").as_deref(),
        Some(&b"fresh"[..])
    );
}

/// Clients on one store share its locks; another store is another server.
#[tokio::test(start_paused = true)]
async fn clients_share_the_locks_of_their_store_only() {
    let (one, two) = (MemoryStore::new(), MemoryStore::new());
    let writer = LockClient::in_memory(&one)
        .rwlock("cache")
        .write()
        .await
        .unwrap();
    let same_store = LockClient::in_memory(&one).rwlock("cache");
    assert!(matches!(
        same_store.try_read().await,
        Err(Error::WouldBlock)
    ));
    let other_store = LockClient::in_memory(&two).rwlock("cache");
    other_store
        .try_read()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    writer.release().await.unwrap();
}

/// The original design's two-key layout needs Redis: a clear error, no panic.
#[tokio::test(start_paused = true)]
async fn the_legacy_layout_is_refused_with_a_clear_error() {
    let store = MemoryStore::new();
    let lock = LockClient::in_memory(&store).legacy_rwlock("cache:read", "cache:write");
    match lock.try_write().await {
        Err(Error::InvalidOptions(message)) => {
            assert!(message.contains("legacy_rwlock"), "{message}")
        }
        other => panic!("expected InvalidOptions, got {other:?}"),
    }
}

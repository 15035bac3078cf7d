//! Dropped connections around a release: the release is retried safely (it never
//! removes someone else's hold) and the lock ends up free.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use rand::RngExt;
use redis_rwlock::{Error, LockClient, LockOptions, RwLock};
use tokio::time::{Instant, sleep, timeout};

use common::{
    LocalRedis, Node, Paused, blocking, panics_outside_tests, spawn_writer, unique_name, wait_for,
};

/// Long enough that a frozen master is never failed over during these tests.
const NODE_TIMEOUT_MS: u64 = 30_000;

/// Polls until nobody holds the lock; fails after `limit`.
async fn until_free(lock: &RwLock, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let state = lock.state().await.unwrap();
        if state.is_free() {
            return started.elapsed();
        }
        assert!(started.elapsed() < limit, "still held: {state:?}");
        sleep(Duration::from_millis(10)).await;
    }
}

/// The owning master closes the client's connections (`CLIENT KILL TYPE normal`)
/// right before a release, or while it is in flight: the release reconnects,
/// succeeds, and the lock is free at once (not after its 10 s lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_around_a_killed_connection_is_retried_and_frees_the_lock() {
    let redis = blocking(LocalRedis::cluster);
    let panics = panics_outside_tests();
    let client = LockClient::cluster(redis.urls()).await.unwrap();
    let lock = client.rwlock(unique_name("killed"));
    let master: Node = blocking(|| redis.master_for_key(lock.key().unwrap()).clone());
    let mut killed_total = 0;
    for trial in 0..12u32 {
        let write = trial % 2 == 0;
        let guard: Box<dyn FnOnce() -> _ + Send> = if write {
            let guard = lock.write().await.unwrap();
            Box::new(move || tokio::spawn(async move { guard.release().await }))
        } else {
            let guard = lock.read().await.unwrap();
            Box::new(move || tokio::spawn(async move { guard.release().await }))
        };
        let before = trial < 4;
        let killed = if before {
            // Kill, then release on the dead connection.
            let killed = blocking(|| redis.kill_clients(&master, "normal"));
            let release = guard();
            timeout(Duration::from_secs(5), release)
                .await
                .unwrap()
                .unwrap()
                .map(|_| killed)
        } else {
            // Release, and kill while it is (maybe) in flight.
            let release = guard();
            let delay = rand::rng().random_range(0..1_500u64);
            sleep(Duration::from_micros(delay)).await;
            let killed = blocking(|| redis.kill_clients(&master, "normal"));
            timeout(Duration::from_secs(5), release)
                .await
                .unwrap()
                .unwrap()
                .map(|_| killed)
        };
        let killed = killed.unwrap_or_else(|err| {
            panic!(
                "trial {trial} (kill {}): release failed: {err:?}",
                if before { "before" } else { "during" }
            )
        });
        killed_total += killed;
        let freed = until_free(&lock, Duration::from_secs(2)).await;
        assert!(
            freed < Duration::from_millis(500),
            "trial {trial}: free after {freed:?}"
        );
    }
    println!("{killed_total} connections killed over 12 releases");
    assert!(
        killed_total >= 12,
        "the kills missed the client's connections"
    );
    lock.try_write().await.unwrap().release().await.unwrap();
    assert_eq!(panics_outside_tests(), panics, "something panicked");
}

/// The owning master freezes while a release is in flight: shorter than the 2 s
/// reply limit, and longer (so the request times out and the client retries it)
/// but shorter than the 4 s overall limit. The release is not lost: the lock ends
/// up with the queued writer (on another client) soon after the thaw, and no copy
/// of the release, however late, removes that new holder.
///
/// Past the reply limit, redis-rs 1.8.1 does not get an answer to its own retry even
/// once the server is back; the lock sends the release again itself, so `release()`
/// still returns `Ok`, soon after the thaw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_resent_after_a_timeout_never_releases_the_next_holder() {
    release_across_freezes(&[1_000, 2_600]).await;
}

/// Freezes the owning master for each of `freezes_ms` while a release is in flight,
/// with a writer queued on another client; the release must return `Ok`.
async fn release_across_freezes(freezes_ms: &[u64]) {
    let redis = blocking(|| LocalRedis::cluster_with_node_timeout(NODE_TIMEOUT_MS));
    let panics = panics_outside_tests();
    let holders = LockClient::cluster(redis.urls()).await.unwrap();
    let others = LockClient::cluster(redis.urls()).await.unwrap();
    let name = unique_name("resent");
    let lease = Duration::from_secs(3);
    let lock = holders.rwlock_with(&name, LockOptions::default().write_lease(lease));
    let master: Node = blocking(|| redis.master_for_key(lock.key().unwrap()).clone());
    for &freeze_ms in freezes_ms {
        let first = lock.write().await.unwrap();
        // The next writer waits on another client; a re-check that fails in the
        // freeze is simply retried, as an application would.
        let next = tokio::spawn({
            let lock = others.rwlock(&name);
            async move {
                loop {
                    match lock.write().await {
                        Ok(guard) => return (guard, Instant::now()),
                        Err(Error::Redis { .. }) => sleep(Duration::from_millis(50)).await,
                        Err(other) => panic!("{other:?}"),
                    }
                }
            }
        });
        wait_for(&lock, |s| s.queued_writers.len() == 1).await;

        let frozen = Paused::new(master.pid);
        let release = tokio::spawn(async move {
            let started = Instant::now();
            (first.release().await, started.elapsed())
        });
        sleep(Duration::from_millis(freeze_ms)).await;
        frozen.resume();
        let thawed = Instant::now();
        let (released, took) = timeout(Duration::from_secs(10), release)
            .await
            .unwrap()
            .unwrap();
        let (next, served) = timeout(lease + Duration::from_secs(5), next)
            .await
            .expect("the next writer was never served")
            .unwrap();
        println!(
            "freeze {freeze_ms} ms: release returned {released:?} after {took:?}; \
             the next writer got in {:?} after the thaw",
            served.saturating_duration_since(thawed)
        );
        assert!(
            took <= Duration::from_millis(4_500),
            "the release took {took:?}"
        );
        if let Err(err) = released {
            panic!("freeze {freeze_ms} ms: release returned {err:?}");
        }
        // The release ran (not the lease running out): the next writer got in soon.
        assert!(
            served.saturating_duration_since(thawed) < Duration::from_millis(1500),
            "the release was lost: the next writer waited for the lease"
        );
        // Late copies of the release have all run by now; the new holder is
        // untouched.
        sleep(Duration::from_millis(500)).await;
        let state = lock.state().await.unwrap();
        assert_eq!(state.fencing_token, next.fencing_token(), "{state:?}");
        assert!(state.writer.is_some() && next.is_held(), "{state:?}");
        assert!(matches!(lock.try_read().await, Err(Error::WouldBlock)));
        next.release().await.unwrap();
        until_free(&lock, Duration::from_secs(1)).await;
    }
    assert_eq!(panics_outside_tests(), panics, "something panicked");
}

/// The subscription connection is killed (`CLIENT KILL TYPE pubsub`) while a
/// writer waits: the client re-subscribes, and the waiter is still woken by the
/// release message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_still_woken_after_its_subscription_connection_was_killed() {
    let redis = blocking(LocalRedis::cluster);
    let client = LockClient::cluster(redis.urls()).await.unwrap();
    let lock = client.rwlock_with(
        unique_name("pubsub-killed"),
        LockOptions::default().write_lease(Duration::from_secs(30)),
    );
    let master: Node = blocking(|| redis.master_for_key(lock.key().unwrap()).clone());
    let channel = format!("{}:released", lock.key().unwrap());
    let holder = lock.write().await.unwrap();
    let waiter = spawn_writer(&lock);
    wait_for(&lock, |s| s.queued_writers.len() == 1).await;
    let subscribed = |redis: &LocalRedis| redis.shard_subscribers(&master, &channel) > 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !blocking(|| subscribed(&redis)) {
        assert!(Instant::now() < deadline, "the waiter never subscribed");
        sleep(Duration::from_millis(10)).await;
    }
    let killed = blocking(|| redis.kill_clients(&master, "pubsub"));
    assert!(killed >= 1, "no subscription connection to kill");
    let killed_at = Instant::now();
    while !blocking(|| subscribed(&redis)) {
        assert!(
            killed_at.elapsed() < Duration::from_secs(5),
            "the subscription was not restored"
        );
        sleep(Duration::from_millis(10)).await;
    }
    println!(
        "subscription restored {:?} after the kill",
        killed_at.elapsed()
    );
    sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    holder.release().await.unwrap();
    let served = timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
    let gap = served.saturating_duration_since(released);
    println!("the waiter got in {gap:?} after the release");
    assert!(
        gap < Duration::from_millis(100),
        "woken after {gap:?}: by a timer"
    );
}

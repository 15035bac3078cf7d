//! Waiting does not poll: the load a crowd of waiters puts on the cluster.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redis_rwlock::{LockClient, LockOptions};
use tokio::time::{Instant, timeout};

use common::{LocalRedis, blocking, unique_name, wait_for};

const WAITERS: usize = 10;
const WINDOW: Duration = Duration::from_secs(3);
/// docs/DECISIONS.md, "Waiting": at most 2 scripts per waiter per second reach Redis.
const MAX_SCRIPTS_PER_WAITER_PER_SECOND: f64 = 2.0;

/// Lock scripts run by every master so far (FCALL, EVALSHA, EVAL and their `_RO`
/// forms).
fn scripts_run(redis: &LocalRedis) -> u64 {
    redis
        .masters()
        .into_iter()
        .flat_map(|master| redis.commandstats(master))
        .filter(|(name, _)| name.starts_with("fcall") || name.starts_with("eval"))
        .map(|(_, calls)| calls)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_waiting_writers_run_at_most_two_scripts_per_waiter_per_second() {
    let redis = blocking(LocalRedis::cluster);
    let client = LockClient::cluster(redis.urls()).await.unwrap();
    let name = unique_name("load");
    // A long lease: the holder renews once in the window, and the waiters' re-check
    // timers run at their longest.
    let lock = client.rwlock_with(
        &name,
        LockOptions::default().write_lease(Duration::from_secs(30)),
    );
    let holder = lock.write().await.unwrap();
    let mut waiters = Vec::new();
    for _ in 0..WAITERS {
        let lock = lock.clone();
        waiters.push(tokio::spawn(async move {
            let guard = lock.write().await.unwrap();
            guard.release().await.unwrap();
        }));
    }
    wait_for(&lock, |s| s.queued_writers.len() == WAITERS).await;
    // Every waiter has made its first attempts and sleeps on its subscription.
    let key = lock.key().unwrap();
    let channel = format!("{key}:released");
    let owner = blocking(|| redis.master_for_key(key).clone());
    let deadline = Instant::now() + Duration::from_secs(5);
    while blocking(|| redis.shard_subscribers(&owner, &channel)) == 0 {
        assert!(Instant::now() < deadline, "the waiters never subscribed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    let before = blocking(|| scripts_run(&redis));
    let started = Instant::now();
    tokio::time::sleep(WINDOW).await;
    let after = blocking(|| scripts_run(&redis));
    let elapsed = started.elapsed().as_secs_f64();
    let per_waiter_per_second = (after - before) as f64 / (WAITERS as f64 * elapsed);
    println!(
        "{} scripts in {elapsed:.2} s with {WAITERS} waiters: {per_waiter_per_second:.2} per waiter per second",
        after - before
    );
    assert!(
        waiters.iter().all(|w| !w.is_finished()),
        "a waiter got in beside the holder"
    );
    assert!(
        per_waiter_per_second <= MAX_SCRIPTS_PER_WAITER_PER_SECOND,
        "waiters poll: {per_waiter_per_second:.2} scripts per waiter per second"
    );
    // Waiters do re-check (their queue places must stay fresh), so the count is
    // not zero either: this measures the waiters, not an idle cluster.
    assert!(
        after - before >= WAITERS as u64,
        "the waiters never re-checked: {} scripts",
        after - before
    );
    let state = lock.state().await.unwrap();
    assert_eq!(state.queued_writers.len(), WAITERS, "{state:?}");

    // Each release wakes the next writer in line by message: all ten get through
    // far faster than one re-check period each.
    let released = Instant::now();
    holder.release().await.unwrap();
    for waiter in waiters {
        timeout(Duration::from_secs(10), waiter)
            .await
            .expect("a waiter was never served")
            .unwrap();
    }
    let drained = released.elapsed();
    println!("{WAITERS} queued writers served in {drained:?}");
    assert!(
        drained < Duration::from_secs(3),
        "the queue drained in {drained:?}: waiters were not woken by messages"
    );
    assert!(lock.state().await.unwrap().is_free());
}

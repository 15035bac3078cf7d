//! The same lock on a single Redis server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redis_rwlock::{Error, LockClient, LockOptions};
use tokio::time::{Instant, timeout};

use common::{
    assert_entered_when_the_lease_ended, shared_standalone, spawn_writer, unique_name, wait_for,
};

async fn client() -> LockClient {
    LockClient::standalone(shared_standalone().url())
        .await
        .unwrap()
}

// Redis-only: the standalone server deployment (the semantics run on both backends
// in the other test binaries).
#[tokio::test]
async fn readers_share_and_a_writer_excludes_on_a_single_server() {
    let client = client().await;
    let lock = client.rwlock(unique_name("standalone"));
    let a = lock.read().await.unwrap();
    let b = lock.read().await.unwrap();
    assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));
    b.release().await.unwrap();
    assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));
    a.release().await.unwrap();
    let w = lock.try_write().await.unwrap();
    assert!(matches!(lock.try_read().await, Err(Error::WouldBlock)));
    w.release().await.unwrap();
}

// Redis-only: the standalone server deployment (the semantics run on both backends
// in the other test binaries).
#[tokio::test]
async fn a_waiter_on_a_single_server_is_woken_by_the_release() {
    let client = client().await;
    let lock = client.rwlock(unique_name("standalone-wake"));
    let writer = lock.write().await.unwrap();
    let waiter = spawn_writer(&lock);
    wait_for(&lock, |s| s.queued_writers.len() == 1).await;
    // Let the waiter's first re-check pass, so only a message can wake it quickly.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let released = Instant::now();
    writer.release().await.unwrap();
    let acquired = timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(
        acquired - released < Duration::from_millis(300),
        "{:?}",
        acquired - released
    );
}

// Redis-only: the standalone server deployment (the semantics run on both backends
// in the other test binaries).
#[tokio::test]
async fn leases_expire_on_a_single_server() {
    let client = client().await;
    let lease = Duration::from_millis(800);
    let lock = client.rwlock_with(
        unique_name("standalone-lease"),
        LockOptions::default().read_lease(lease).auto_renew(false),
    );
    let acquired = Instant::now();
    std::mem::forget(lock.read().await.unwrap());
    assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));
    let writer = timeout(lease * 4, lock.write()).await.unwrap().unwrap();
    let waited = acquired.elapsed();
    writer.release().await.unwrap();
    assert_entered_when_the_lease_ended(waited, lease);
}

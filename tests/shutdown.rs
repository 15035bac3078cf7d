//! `LockClient::shutdown`: a process that redeploys frees every lock it holds or
//! waits for at once, instead of leaving holds until their leases end.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redis_rwlock::{Error, LockOptions};
use tokio::time::timeout;

use common::{cluster_client, unique_name, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_frees_every_hold_and_withdraws_every_wait() {
    let client = cluster_client().await;
    let observer = cluster_client().await;
    let lease = Duration::from_secs(30);
    let options = LockOptions::default().read_lease(lease).write_lease(lease);
    let (read_name, write_name) = (unique_name("shutdown-r"), unique_name("shutdown-w"));
    let read_lock = client.rwlock_with(&read_name, options.clone());
    let write_lock = client.rwlock_with(&write_name, options.clone());
    let reader = read_lock.read().await.unwrap();
    let writer = write_lock.write().await.unwrap();
    let waiter = tokio::spawn({
        let lock = write_lock.clone();
        async move { lock.write().await.map(drop) }
    });
    wait_for(&observer.rwlock(&write_name), |s| {
        s.queued_writers.len() == 1
    })
    .await;

    timeout(
        Duration::from_secs(10),
        client.shutdown(Duration::from_secs(5)),
    )
    .await
    .expect("shutdown did not return")
    .unwrap();

    // Right after: nothing held, nobody queued, as another client sees it.
    for name in [&read_name, &write_name] {
        let state = observer.rwlock(name.as_str()).state().await.unwrap();
        assert!(
            state.is_free() && state.queued_writers.is_empty(),
            "{name} after shutdown: {state:?}"
        );
    }
    assert!(matches!(waiter.await.unwrap(), Err(Error::Shutdown)));
    assert!(!reader.is_held() && !writer.is_held());
    timeout(Duration::from_secs(1), reader.lost())
        .await
        .expect("a guard did not learn of the shutdown");
    assert!(matches!(writer.release().await, Err(Error::LeaseLost)));
    assert!(matches!(reader.release().await, Err(Error::LeaseLost)));
    assert!(matches!(read_lock.try_read().await, Err(Error::Shutdown)));
    assert!(matches!(
        client.rwlock("other").write().await,
        Err(Error::Shutdown)
    ));

    // Another client takes both locks at once.
    for name in [&read_name, &write_name] {
        let lock = observer.rwlock(name.as_str());
        lock.try_write().await.unwrap().release().await.unwrap();
    }
}

/// A shutdown with nothing in flight returns at once.
#[tokio::test]
async fn an_idle_client_shuts_down_at_once() {
    let client = cluster_client().await;
    let lock = client.rwlock(unique_name("shutdown-idle"));
    lock.write().await.unwrap().release().await.unwrap();
    timeout(
        Duration::from_secs(1),
        client.shutdown(Duration::from_secs(5)),
    )
    .await
    .expect("an idle shutdown waited")
    .unwrap();
}

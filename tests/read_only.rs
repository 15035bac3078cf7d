//! `state()` only reads: it changes nothing on the server (no purge, no expiry, no
//! wake-up), so it works for a user whose ACL allows reads only, and a status check
//! never disturbs the lock it looks at.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redis::AsyncCommands;
use redis_rwlock::{Error, LockClient, LockOptions};

use common::{read_only_user, shared_standalone, standalone_client, unique_name, wait_for};

#[tokio::test]
async fn state_only_reads_and_works_for_a_read_only_user() {
    let server = shared_standalone();
    let owner = standalone_client().await;
    let name = unique_name("read-only");
    let lease = Duration::from_millis(800);
    let lock = owner.rwlock_with(
        &name,
        LockOptions::default().read_lease(lease).auto_renew(false),
    );
    let key = format!("rwlock:{{{name}}}");
    // An expired reader entry that only a writing script would purge.
    let reader = lock.read().await.unwrap();
    let mut raw = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    tokio::time::timeout(lease * 2, reader.lost())
        .await
        .unwrap();
    std::mem::forget(reader);
    // The guard gives up at its local deadline, which comes first: the server's
    // is later by up to the grant's round trip.
    wait_for(&lock, |state| state.is_free()).await;
    let before: Vec<(String, String)> = raw.hgetall(&key).await.unwrap();
    let ttl_before: i64 = raw.pttl(&key).await.unwrap();
    assert!(!before.is_empty());

    let (_, url) = read_only_user(&["+@connection", "+info"]);
    let viewer = LockClient::standalone(url).await.unwrap();
    let seen = viewer.rwlock(&name).state().await.unwrap();
    assert!(
        seen.is_free(),
        "an expired reader counted as a holder: {seen:?}"
    );

    let after: Vec<(String, String)> = raw.hgetall(&key).await.unwrap();
    let ttl_after: i64 = raw.pttl(&key).await.unwrap();
    assert_eq!(before, after, "state() changed the hash");
    assert!(ttl_after <= ttl_before, "state() moved the key's expiry");

    // The read-only user may look, not lock.
    match viewer.rwlock(&name).try_write().await {
        Err(Error::Redis(err)) => assert!(
            err.to_string().contains("NOPERM") || err.code() == Some("NOPERM"),
            "{err}"
        ),
        other => panic!("a read-only user took the lock: {other:?}"),
    }
}

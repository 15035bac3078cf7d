//! TLS: the lock over `rediss://` on a cluster whose nodes speak TLS only (port 0,
//! cluster bus and replication over TLS) and on a single TLS server, with the
//! launcher's private CA and a client certificate given through the application's
//! own redis-rs client: reads, writes, waiting with wake-ups (sharded pub/sub over
//! TLS), renewal, and a failover.
#![cfg(feature = "tls-rustls")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redis::cluster::ClusterClientBuilder;
use redis_rwlock::{Error, LockClient, LockOptions, RwLock};
use tokio::time::{Instant, timeout};

use common::{LocalRedis, Node, blocking, tls_certificates, wait_for};

/// A waiter woken by the release message gets in well before its re-check timer
/// (about a second behind a long-lease holder) would have let it.
const WAKE_UP: Duration = Duration::from_millis(300);

async fn tls_cluster_client(redis: &LocalRedis) -> LockClient {
    let certs = tls_certificates(redis.tls.as_ref().expect("a TLS launcher"));
    LockClient::builder()
        .cluster_client(ClusterClientBuilder::new(redis.urls()).certs(certs))
        .build()
        .await
        .expect("connect to the TLS cluster")
}

/// Waits until the lock's channel has a subscriber on one of `shard`'s nodes.
async fn until_subscribed(redis: &LocalRedis, shard: &[Node], lock: &RwLock) {
    let channel = format!("{}:released", lock.key().unwrap());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let subscribed = blocking(|| {
            shard
                .iter()
                .any(|node| redis.shard_subscribers(node, &channel) > 0)
        });
        if subscribed {
            return;
        }
        assert!(Instant::now() < deadline, "nobody subscribed to {channel}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Holds `lock` for writing with a long lease, queues a writer on `waiters`, and
/// returns how long the waiter took to get in after the release.
async fn wake_up_after_release(
    redis: &LocalRedis,
    shard: &[Node],
    holders: &LockClient,
    waiters: &LockClient,
    name: &str,
    between: impl FnOnce(),
) -> Duration {
    let options = LockOptions::default().write_lease(Duration::from_secs(30));
    let holder_lock = holders.rwlock_with(name, options.clone());
    let waiter_lock = waiters.rwlock_with(name, options);
    let holder = holder_lock.write().await.unwrap();
    let waiter = tokio::spawn(async move {
        let guard = waiter_lock.write().await.unwrap();
        let at = Instant::now();
        guard.release().await.unwrap();
        at
    });
    wait_for(&holder_lock, |s| s.queued_writers.len() == 1).await;
    until_subscribed(redis, shard, &holder_lock).await;
    between();
    until_subscribed(redis, shard, &holder_lock).await;
    let released = Instant::now();
    holder.release().await.unwrap();
    let got_in = timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter never got in")
        .unwrap();
    got_in.saturating_duration_since(released)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_serves_reads_writes_wake_ups_and_renewals() {
    let redis = blocking(LocalRedis::cluster_tls);
    assert!(redis.url().starts_with("rediss://"), "{}", redis.url());

    // The system's roots do not know the launcher's CA: the certificate is checked.
    let refused = LockClient::cluster(redis.urls()).await.unwrap_err();
    assert!(matches!(refused, Error::Redis { .. }), "{refused:?}");

    let client = tls_cluster_client(&redis).await;
    let lock = client.rwlock(common::unique_name("tls"));
    let r1 = lock.read().await.unwrap();
    let r2 = lock.try_read().await.unwrap();
    assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));
    // The client's two reads share one hold.
    assert_eq!(lock.state().await.unwrap().readers.len(), 1);
    r1.release().await.unwrap();
    r2.release().await.unwrap();

    // Renewal: a 1 s lease held for 2.5 s is still ours.
    let short = client.rwlock_with(
        lock.name(),
        LockOptions::default().write_lease(Duration::from_secs(1)),
    );
    let writer = short.write().await.unwrap();
    let token = writer.fencing_token();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(writer.is_held());
    let state = short.state().await.unwrap();
    assert!(state.writer.is_some(), "{state:?}");
    assert_eq!(state.fencing_token, token);
    writer.release().await.unwrap();
    assert!(lock.state().await.unwrap().is_free());

    // Waiting: woken by the release message over TLS, not by the re-check timer.
    let waiters = tls_cluster_client(&redis).await;
    let master = blocking(|| redis.masters()[0].clone());
    let name = blocking(|| redis.name_on_master("tls-wake", &master));
    let shard = [master];
    let took = wake_up_after_release(&redis, &shard, &client, &waiters, &name, || {}).await;
    assert!(
        took < WAKE_UP,
        "the waiter got in {took:?} after the release"
    );
}

/// `CLUSTER FAILOVER` over the TLS cluster bus: the hold survives, the wake-up
/// subscription is restored, and the waiter still gets the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_fails_over_and_the_waiter_gets_the_lock() {
    let redis = blocking(LocalRedis::cluster_tls);
    let holders = tls_cluster_client(&redis).await;
    let waiters = tls_cluster_client(&redis).await;
    let master = blocking(|| redis.masters()[1].clone());
    let replica = blocking(|| redis.replica_of(&master).unwrap().clone());
    let name = blocking(|| redis.name_on_master("tls-failover", &master));
    let shard = [master, replica.clone()];
    let took = wake_up_after_release(&redis, &shard, &holders, &waiters, &name, || {
        redis.manual_failover(&replica, Duration::from_secs(15));
    })
    .await;
    // Within the re-check that follows a restored subscription (see faults_failover).
    assert!(
        took < Duration::from_millis(1500),
        "the waiter got in {took:?} after the release"
    );
    let lock = holders.rwlock(&name);
    assert!(lock.state().await.unwrap().is_free());
    let guard = lock.try_write().await.unwrap();
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_server_serves_the_lock_through_the_applications_client() {
    let redis = blocking(LocalRedis::standalone_tls);
    let certs = tls_certificates(redis.tls.as_ref().unwrap());
    let own = redis::Client::build_with_tls(redis.url(), certs).unwrap();
    let client = LockClient::builder().client(own).build().await.unwrap();
    let other = LockClient::builder()
        .client(
            redis::Client::build_with_tls(
                redis.url(),
                tls_certificates(redis.tls.as_ref().unwrap()),
            )
            .unwrap(),
        )
        .build()
        .await
        .unwrap();
    let name = common::unique_name("tls-standalone");
    let options = LockOptions::default().write_lease(Duration::from_secs(30));
    let lock = client.rwlock_with(&name, options.clone());
    let holder = lock.write().await.unwrap();
    let waiter_lock = other.rwlock_with(&name, options);
    let waiter = tokio::spawn(async move {
        let guard = waiter_lock.read().await.unwrap();
        let at = Instant::now();
        guard.release().await.unwrap();
        at
    });
    // The waiter subscribed (plain pub/sub over TLS) once it is refused.
    let deadline = Instant::now() + Duration::from_secs(5);
    let channel = format!("{}:released", lock.key().unwrap());
    loop {
        let subscribers =
            blocking(
                || match redis.raw(&redis.nodes[0], &["PUBSUB", "NUMSUB", &channel]) {
                    redis::Value::Array(items) => match items.as_slice() {
                        [_, redis::Value::Int(n)] => *n,
                        other => panic!("{other:?}"),
                    },
                    other => panic!("{other:?}"),
                },
            );
        if subscribers > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the waiter never subscribed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    holder.release().await.unwrap();
    let got_in = timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap();
    let took = got_in.saturating_duration_since(released);
    assert!(
        took < WAKE_UP,
        "the reader got in {took:?} after the release"
    );
}

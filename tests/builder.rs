//! `LockClient::builder`: the application's own redis-rs client, the limits, and
//! clear refusals of what the lock cannot use.
//!
//! Redis-only throughout: the builder makes clients of Redis servers (URLs, the
//! application's redis-rs clients, their settings); the in-memory store has none.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redis::cluster::ClusterClientBuilder;
use redis_rwlock::{Error, LockClient};

use common::{shared_cluster, shared_standalone, unique_name, until_subscribers};

fn invalid(result: Result<LockClient, Error>) -> String {
    match result {
        Err(Error::InvalidOptions(message)) => message,
        other => panic!("expected InvalidOptions, got {other:?}"),
    }
}

// Redis-only: redis-rs's cluster client, as the application built it.
#[tokio::test]
async fn the_applications_cluster_builder_serves_locks_and_wake_ups() {
    let urls = shared_cluster().urls();
    let client = LockClient::builder()
        .cluster_client(ClusterClientBuilder::new(urls.clone()).retries(2))
        .response_timeout(Duration::from_secs(1))
        .overall_timeout(Duration::from_secs(3))
        .build()
        .await
        .unwrap();
    let lock = client.rwlock(unique_name("builder"));
    let holder = lock.write().await.unwrap();
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.read().await.unwrap().release().await.unwrap() }
    });
    until_subscribers(&lock, 1).await;
    holder.release().await.unwrap();
    tokio::time::timeout(Duration::from_millis(500), waiter)
        .await
        .expect("woken by the release")
        .unwrap();
}

// Redis-only: redis-rs's client of one server, as the application built it.
#[tokio::test]
async fn the_applications_redis_client_serves_one_server() {
    let own = redis::Client::open(shared_standalone().url()).unwrap();
    let client = LockClient::builder().client(own).build().await.unwrap();
    let lock = client.rwlock(unique_name("builder-standalone"));
    let guard = lock.write().await.unwrap();
    assert!(matches!(lock.try_read().await, Err(Error::WouldBlock)));
    guard.release().await.unwrap();
}

// Redis-only: redis-rs's cluster client and its replica reads.
#[tokio::test]
#[allow(deprecated)]
async fn a_cluster_client_reading_from_replicas_is_refused() {
    let builder = ClusterClientBuilder::new(shared_cluster().urls()).read_from_replicas();
    let message = invalid(LockClient::builder().cluster_client(builder).build().await);
    assert!(message.contains("reads from replicas"), "{message}");
}

// Redis-only: settings of the Redis connection (URLs, response timeouts).
#[tokio::test]
async fn unusable_settings_are_refused_before_connecting() {
    let message = invalid(LockClient::builder().build().await);
    assert!(message.contains("no server given"), "{message}");
    let message = invalid(
        LockClient::builder()
            .standalone_url(shared_standalone().url())
            .response_timeout(Duration::ZERO)
            .build()
            .await,
    );
    assert!(
        message.contains("response_timeout must be positive"),
        "{message}"
    );
    let message = invalid(
        LockClient::builder()
            .standalone_url(shared_standalone().url())
            .response_timeout(Duration::from_secs(3))
            .overall_timeout(Duration::from_secs(1))
            .build()
            .await,
    );
    assert!(
        message.contains("shorter than response_timeout"),
        "{message}"
    );
    let message = invalid(
        LockClient::builder()
            .cluster_nodes(Vec::<String>::new())
            .build()
            .await,
    );
    assert!(message.contains("no cluster node URL"), "{message}");
}

// Redis-only: a cluster client pointed at a standalone server.
#[tokio::test]
async fn a_cluster_builder_on_a_plain_server_says_so() {
    let builder = ClusterClientBuilder::new([shared_standalone().url()]);
    let message = invalid(LockClient::builder().cluster_client(builder).build().await);
    assert!(message.contains("not a Redis Cluster"), "{message}");
}

//! Bad input fails fast with a typed error, before anything is sent to Redis (or
//! to the in-memory store).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redis_rwlock::{Error, LockClient, LockOptions};
use tokio::time::{Instant, timeout};

use common::{LocalRedis, pause, resume, shared_cluster};

fn bad_options() -> Vec<(&'static str, LockOptions)> {
    let d = LockOptions::default;
    vec![
        ("zero read lease", d().read_lease(Duration::ZERO)),
        ("zero write lease", d().write_lease(Duration::ZERO)),
        (
            "sub-millisecond lease",
            d().write_lease(Duration::from_micros(300)),
        ),
        (
            "absurd lease",
            d().read_lease(Duration::from_secs(400 * 24 * 3600)),
        ),
        ("maximal lease", d().write_lease(Duration::MAX)),
        ("zero wait timeout", d().wait_timeout(Duration::ZERO)),
        ("zero release timeout", d().release_timeout(Duration::ZERO)),
        ("absurd wait timeout", d().wait_timeout(Duration::MAX)),
        (
            "zero replica timeout",
            d().min_replicas(1).replica_timeout(Duration::ZERO),
        ),
        ("absurd replica count", d().min_replicas(10_000)),
        (
            "replica timeout beyond the reply limit",
            d().min_replicas(1)
                .replica_timeout(Duration::from_millis(1001)),
        ),
        (
            "zero original timeout",
            d().original_timeouts(Duration::ZERO, Duration::from_secs(3)),
        ),
        ("empty prefix", d().key_prefix("")),
        ("braced prefix", d().key_prefix("{x}")),
        ("long prefix", d().key_prefix(&"p".repeat(1025))),
        // Kept reads would keep nothing: refused rather than ignored.
        (
            "kept reads without shared reads",
            d().keep_reads(Duration::from_secs(1)).share_reads(false),
        ),
        (
            "kept reads without renewals",
            d().keep_reads(Duration::from_secs(1)).auto_renew(false),
        ),
        (
            "kept reads beside original clients",
            d().keep_reads(Duration::from_secs(1))
                .original_timeouts(Duration::from_secs(3), Duration::from_secs(3)),
        ),
    ]
}

on_both_backends! {
/// Every request would hang (on Redis: the server is paused with SIGSTOP, a private
/// one; in memory: the store stops answering), so a fast typed error proves nothing
/// was sent.
async fn invalid_options_and_names_fail_before_any_io(backend: Backend) {
    let (client, server) = backend.unanswered_client().await;
    let mut cases: Vec<_> = bad_options()
        .into_iter()
        .map(|(what, options)| (what, client.rwlock_with("fine", options)))
        .collect();
    cases.push(("empty name", client.rwlock("")));
    cases.push(("braced name", client.rwlock("a{b}")));
    // Over the documented 1,024 bytes: one byte over, and 10 MiB.
    cases.push(("long name", client.rwlock("n".repeat(1025))));
    cases.push(("huge name", client.rwlock("n".repeat(10 << 20))));
    for (what, lock) in cases {
        let started = Instant::now();
        for result in [
            lock.read().await.map(drop),
            lock.write().await.map(drop),
            lock.try_read().await.map(drop),
            lock.try_write().await.map(drop),
            lock.state().await.map(drop),
        ] {
            assert!(
                matches!(result, Err(Error::InvalidOptions(_))),
                "{what}: {result:?}"
            );
        }
        assert!(
            started.elapsed() < Duration::from_millis(200),
            "{what} did I/O"
        );
    }
    if let Some(server) = server {
        resume(server.nodes[0].pid);
    }
}

async fn the_error_says_what_is_wrong(backend: Backend) {
    let message = bad_options()[0].1.clone();
    let client = backend.client().await;
    let err = client.rwlock_with("x", message).read().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid options: read_lease is 0ns, less than one millisecond"
    );
}
}

/// Redis-only: a server paused with SIGSTOP.
#[tokio::test]
async fn a_paused_server_gives_a_timely_error_not_a_hang() {
    let server = LocalRedis::standalone();
    let client = LockClient::standalone(server.url()).await.unwrap();
    let lock = client.rwlock("paused");
    pause(server.nodes[0].pid);
    let started = Instant::now();
    let result = timeout(Duration::from_secs(15), lock.try_write()).await;
    resume(server.nodes[0].pid);
    let result = result.expect("the call hung past every configured timeout");
    assert!(matches!(result, Err(Error::Redis { .. })), "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    // After the pause, everything works again.
    lock.try_write().await.unwrap().release().await.unwrap();
}

/// Redis-only: connecting to a closed port.
#[tokio::test]
async fn a_server_that_is_down_gives_a_redis_error() {
    let started = Instant::now();
    let result = timeout(
        Duration::from_secs(15),
        LockClient::standalone("redis://127.0.0.1:1"),
    )
    .await
    .expect("connecting to a closed port hung");
    assert!(matches!(result, Err(Error::Redis { .. })), "{result:?}");
    let result = timeout(
        Duration::from_secs(15),
        LockClient::cluster(["redis://127.0.0.1:1"]),
    )
    .await
    .expect("connecting to a closed port hung");
    assert!(matches!(result, Err(Error::Redis { .. })), "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(12));
}

/// A URL that is not a Redis URL is a configuration error, found before anything
/// is sent (so no port needs to listen), and the message says which URL is wrong
/// without showing it (it may hold a password). Redis-only: server URLs.
#[tokio::test]
async fn a_malformed_url_or_no_url_is_refused_as_invalid_options() {
    let err = LockClient::standalone("http://127.0.0.1:26379")
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid options: the server URL is not a usable Redis URL (redis://, rediss://, \
         valkey://, valkeys:// or unix://): Redis URL did not parse (scheme \"http\" is not one \
         of them)"
    );
    let err = LockClient::standalone("not a url").await.unwrap_err();
    assert!(matches!(err, Error::InvalidOptions(_)), "{err:?}");
    assert!(
        err.to_string()
            .ends_with("(no scheme: it should start with redis://)"),
        "{err}"
    );
    let err = LockClient::cluster(["redis://127.0.0.1:7000", "http://x:pass@host"])
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("cluster node URL 2 of 2 is not a usable Redis URL")
            && !err.to_string().contains("pass"),
        "{err}"
    );
    assert!(matches!(
        LockClient::cluster(Vec::<String>::new()).await,
        Err(Error::InvalidOptions(_))
    ));
}

/// Redis-only: cluster and standalone server URLs.
#[tokio::test]
async fn cluster_and_standalone_urls_are_not_mixed_up() {
    let server = LocalRedis::standalone();
    let err = LockClient::cluster([server.url()]).await.unwrap_err();
    assert!(matches!(err, Error::InvalidOptions(_)), "{err:?}");
    assert!(err.to_string().contains("LockClient::standalone"), "{err}");

    let err = LockClient::standalone(shared_cluster().url())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidOptions(_)), "{err:?}");
    assert!(err.to_string().contains("LockClient::cluster"), "{err}");
}

/// Redis-only: the legacy layout (refused in memory) and a key of another type.
#[tokio::test]
async fn legacy_keys_that_are_equal_empty_or_of_another_type_are_refused() {
    let server = LocalRedis::standalone();
    let client = LockClient::standalone(server.url()).await.unwrap();
    for (read, write) in [("same", "same"), ("", "w"), ("r", "")] {
        let result = client.legacy_rwlock(read, write).try_read().await;
        assert!(
            matches!(result, Err(Error::InvalidOptions(_))),
            "{read:?}/{write:?}: {result:?}"
        );
    }
    // A legacy lock never shares its reads, so it would keep nothing: refused.
    let keeping = LockOptions::default().keep_reads(Duration::from_secs(1));
    let result = client
        .legacy_rwlock_with("kr", "kw", keeping)
        .try_read()
        .await;
    match result {
        Err(Error::InvalidOptions(message)) => assert!(message.contains("keep_reads"), "{message}"),
        other => panic!("keep_reads on a legacy lock: {other:?}"),
    }
    let mut raw = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg("{res}:write")
        .arg("field")
        .arg("value")
        .query_async(&mut raw)
        .await
        .unwrap();
    let lock = client.legacy_rwlock("{res}:read", "{res}:write");
    for result in [
        lock.try_read().await.map(drop),
        lock.write().await.map(drop),
    ] {
        match result {
            Err(Error::WrongType { key }) => assert_eq!(key, "{res}:write"),
            other => panic!("expected WrongType, got {other:?}"),
        }
    }
    let kind: String = redis::cmd("TYPE")
        .arg("{res}:write")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(kind, "hash");
    let read_exists: bool = redis::cmd("EXISTS")
        .arg("{res}:read")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(!read_exists, "something was written before the type check");
}

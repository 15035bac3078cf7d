//! The hash layout runs as the crate's function library: every operation goes as
//! `FCALL` or `FCALL_RO` (never EVAL*) on a cluster and on one server; a server
//! that lost the library (`FUNCTION FLUSH`) gets it again from the next call; a
//! promoted replica already has it; and a library of another crate version loaded
//! beside it serves the same locks without a clash. Users whose ACL refuses
//! functions are in tests/acl.rs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use redis::Value;
use redis_rwlock::{Error, FencedWrites, LockClient, RwLock};
use tokio::time::Instant;

use common::{LocalRedis, Node, blocking, shared_cluster, shared_standalone, unique_name};

/// Calls so far of the commands that run lock scripts, or load them, on `node`.
fn script_calls(redis: &LocalRedis, node: &Node) -> HashMap<String, u64> {
    redis
        .commandstats(node)
        .into_iter()
        .filter(|(name, _)| {
            ["eval", "fcall", "function"]
                .iter()
                .any(|p| name.starts_with(p))
        })
        .collect()
}

/// The commands called since `before` on `node`, with how often.
fn calls_since(
    redis: &LocalRedis,
    node: &Node,
    before: &HashMap<String, u64>,
) -> HashMap<String, u64> {
    script_calls(redis, node)
        .into_iter()
        .map(|(name, calls)| {
            let since = calls - before.get(&name).copied().unwrap_or(0);
            (name, since)
        })
        .filter(|&(_, since)| since > 0)
        .collect()
}

/// None of them was EVAL, EVALSHA or their `_RO` forms.
fn assert_no_eval(calls: &HashMap<String, u64>) {
    assert!(
        calls.keys().all(|name| !name.starts_with("eval")),
        "scripts went as EVAL*: {calls:?}"
    );
}

/// Every operation of a lock at least once: 9 FCALLs and 1 FCALL_RO, or more.
async fn every_operation(lock: &RwLock) {
    let read = lock.read().await.unwrap();
    assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));
    read.extend().await.unwrap();
    read.release().await.unwrap();
    let write = lock.write().await.unwrap();
    let cache = format!("cache:{{{}}}", lock.name());
    write
        .fenced_write(FencedWrites::new().set(cache, "v"))
        .await
        .unwrap();
    let read = write.downgrade().await.unwrap();
    assert_eq!(lock.state().await.unwrap().readers.len(), 1);
    assert_eq!(lock.force_release().await.unwrap(), 1);
    // Its hold is gone: whatever the release says, it was sent.
    let _ = read.release().await;
}

/// Every operation runs as a function on the lock's master; after `FUNCTION FLUSH`
/// on every master the next acquire loads the library again (once) and succeeds.
async fn runs_as_functions_and_reloads_them(redis: &LocalRedis, client: &LockClient) {
    let lock = client.rwlock(unique_name("fcall"));
    let key = lock.key().unwrap().to_owned();
    let master = blocking(|| redis.master_for_key(&key).clone());

    let before = blocking(|| script_calls(redis, &master));
    every_operation(&lock).await;
    let calls = blocking(|| calls_since(redis, &master, &before));
    assert_no_eval(&calls);
    assert!(calls.get("fcall").copied().unwrap_or(0) >= 9, "{calls:?}");
    assert!(
        calls.get("fcall_ro").copied().unwrap_or(0) >= 1,
        "{calls:?}"
    );
    let loaded = blocking(|| redis.library_names(&master));
    assert!(
        loaded.len() == 1 && loaded[0].starts_with("rwlock_"),
        "{loaded:?}"
    );

    blocking(|| redis.function_flush_all());
    assert!(blocking(|| redis.library_names(&master)).is_empty());
    let before = blocking(|| script_calls(redis, &master));
    lock.write().await.unwrap().release().await.unwrap();
    let calls = blocking(|| calls_since(redis, &master, &before));
    assert_no_eval(&calls);
    assert_eq!(calls.get("function|load"), Some(&1), "{calls:?}");
    assert_eq!(blocking(|| redis.library_names(&master)), loaded);
}

/// A library of another version (the same text under another name, as a newer
/// crate would load) sits beside ours on one master: its functions have names of
/// their own, both serve the same lock and see each other's holds, and our client
/// goes on calling its own library without loading anything.
async fn another_version_beside_ours(redis: &LocalRedis, client: &LockClient) {
    let lock = client.rwlock(unique_name("fcall-versions"));
    let key = lock.key().unwrap().to_owned();
    lock.write().await.unwrap().release().await.unwrap();
    let master = blocking(|| redis.master_for_key(&key).clone());
    let ours = blocking(|| redis.function_libraries(&master));
    let [(name, code)] = ours.as_slice() else {
        panic!("one library expected on {}: {ours:?}", master.url)
    };
    let theirs = "rwlock_000000000000";
    assert_eq!(name.len(), theirs.len(), "{name}");
    blocking(|| redis.raw(&master, &["FUNCTION", "LOAD", &code.replace(name, theirs)]));
    let loaded = blocking(|| redis.library_names(&master));
    let mut both = [name.as_str(), theirs];
    both.sort();
    assert_eq!(loaded, both);

    let before = blocking(|| script_calls(redis, &master));
    let call = |function: &str, tail: &[&str]| {
        let name = format!("{theirs}_{function}");
        let mut args = vec!["FCALL", &name, "1", &key, "SPUBLISH", "1000", "3000"];
        args.extend_from_slice(tail);
        match blocking(|| redis.raw(&master, &args)) {
            Value::Array(reply) => reply,
            Value::Int(n) => vec![Value::Int(n)],
            other => panic!("{function}: {other:?}"),
        }
    };
    let token = "0123456789abcdef0123456789abcdef";
    let granted = call("acquire_write", &[token, "30000", "0"]);
    assert_eq!(granted[0], Value::Int(1), "{granted:?}");
    assert!(matches!(lock.try_read().await, Err(Error::WouldBlock)));
    assert!(lock.state().await.unwrap().writer.is_some());
    assert_eq!(call("release", &[token]), [Value::Int(1)]);
    let ours = lock.try_write().await.unwrap();
    let refused = call(
        "acquire_read",
        &["fedcba9876543210fedcba9876543210", "30000", "0"],
    );
    assert_eq!(refused[0], Value::Int(0), "{refused:?}");
    ours.release().await.unwrap();

    let calls = blocking(|| calls_since(redis, &master, &before));
    assert_no_eval(&calls);
    assert_eq!(calls.get("function|load"), None, "{calls:?}");
    blocking(|| redis.raw(&master, &["FUNCTION", "DELETE", theirs]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_runs_the_library_reloads_it_and_keeps_versions_apart() {
    let redis = shared_cluster();
    let client = LockClient::cluster(redis.urls()).await.unwrap();
    runs_as_functions_and_reloads_them(redis, &client).await;
    another_version_beside_ours(redis, &client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_runs_the_library_and_reloads_it() {
    let redis = shared_standalone();
    let client = LockClient::standalone(redis.url()).await.unwrap();
    runs_as_functions_and_reloads_them(redis, &client).await;
}

/// Functions replicate: after a failover the promoted replica serves the lock
/// from the library it received, without a load and without EVAL*.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_already_has_the_library() {
    let redis = blocking(LocalRedis::cluster);
    let client = LockClient::cluster(redis.urls()).await.unwrap();
    let master = blocking(|| redis.masters()[0].clone());
    let lock = client.rwlock(blocking(|| redis.name_on_master("fcall-failover", &master)));
    lock.write().await.unwrap().release().await.unwrap();
    let loaded = blocking(|| redis.library_names(&master));
    assert_eq!(loaded.len(), 1, "{loaded:?}");

    let replica = blocking(|| redis.replica_of(&master).unwrap().clone());
    let deadline = Instant::now() + Duration::from_secs(10);
    while blocking(|| redis.library_names(&replica)) != loaded {
        assert!(
            Instant::now() < deadline,
            "the library never reached the replica"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    blocking(|| redis.manual_failover(&replica, Duration::from_secs(15)));

    let before = blocking(|| script_calls(&redis, &replica));
    let read = lock.read().await.unwrap();
    read.release().await.unwrap();
    lock.write().await.unwrap().release().await.unwrap();
    let calls = blocking(|| calls_since(&redis, &replica, &before));
    assert_no_eval(&calls);
    assert_eq!(calls.get("function|load"), None, "{calls:?}");
    assert!(calls.get("fcall").copied().unwrap_or(0) >= 4, "{calls:?}");
}

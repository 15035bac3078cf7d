//! Lost scripts: `FUNCTION FLUSH` and `SCRIPT FLUSH` on every node while locks are
//! in use. Every call path (acquire, the acquire pipelined with WAIT for
//! `min_replicas`, renewal, release, fenced writes, state, a legacy lock's scripts)
//! meets `Function not found` or NOSCRIPT, reloads and carries on.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis_rwlock::{Error, FencedWrites, LockClient, LockOptions};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};

use common::{HoldChecker, LocalRedis, blocking, panics_outside_tests, unique_name};

const FLUSHES: usize = 5;

/// Failed calls, by path.
type Errors = Arc<Mutex<Vec<String>>>;

/// NOSCRIPT error replies so far, summed over the masters.
fn noscript_replies(redis: &LocalRedis) -> u64 {
    redis
        .masters()
        .into_iter()
        .map(|m| redis.errorstats(m).get("NOSCRIPT").copied().unwrap_or(0))
        .sum()
}

/// `FUNCTION LOAD` calls so far, summed over the masters: one per library found
/// missing.
fn function_loads(redis: &LocalRedis) -> u64 {
    redis
        .masters()
        .into_iter()
        .map(|m| {
            redis
                .commandstats(m)
                .get("function|load")
                .copied()
                .unwrap_or(0)
        })
        .sum()
}

/// Every function library and every cached script gone, on every node.
fn flush_all(redis: &LocalRedis) {
    redis.function_flush_all();
    redis.script_flush_all();
}

/// Repeats `op` until `stop`, counting successes and recording failures.
fn repeat<F, Fut>(
    what: &'static str,
    stop: &Arc<AtomicBool>,
    errors: &Errors,
    op: F,
) -> JoinHandle<u64>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), Error>> + Send,
{
    let (stop, errors) = (stop.clone(), errors.clone());
    tokio::spawn(async move {
        let mut done = 0;
        while !stop.load(Ordering::Relaxed) {
            match op().await {
                Ok(()) => done += 1,
                Err(err) => errors.lock().unwrap().push(format!("{what}: {err:?}")),
            }
        }
        done
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_and_script_flushes_on_every_node_while_locks_are_in_use() {
    let redis = blocking(LocalRedis::cluster);
    let panics = panics_outside_tests();
    let clients = [
        LockClient::cluster(redis.urls()).await.unwrap(),
        LockClient::cluster(redis.urls()).await.unwrap(),
    ];
    let name = unique_name("flush");
    let checker = Arc::new(HoldChecker::default());
    let stop = Arc::new(AtomicBool::new(false));
    let errors: Errors = Arc::default();
    let mut tasks = Vec::new();

    // Random readers and writers over two clients.
    for i in 0..6 {
        let lock = clients[i % 2].rwlock(&name);
        let checker = checker.clone();
        tasks.push(repeat("read/write", &stop, &errors, move || {
            let (lock, checker) = (lock.clone(), checker.clone());
            async move { checker.random_hold(&lock, 5).await }
        }));
    }
    // A legacy lock: its scripts go as EVALSHA.
    let legacy_name = unique_name("flush-legacy");
    let legacy = clients[1].legacy_rwlock(
        format!("{{{legacy_name}}}:read"),
        format!("{{{legacy_name}}}:write"),
    );
    let legacy_checker = Arc::new(HoldChecker::default());
    tasks.push(repeat("legacy read/write", &stop, &errors, {
        let checker = legacy_checker.clone();
        move || {
            let (lock, checker) = (legacy.clone(), checker.clone());
            async move { checker.random_hold(&lock, 5).await }
        }
    }));
    // Acquires with min_replicas: the script is pipelined with WAIT.
    let replicated = clients[0].rwlock_with(
        unique_name("flush-replicated"),
        LockOptions::default()
            .min_replicas(1)
            .replica_timeout(Duration::from_secs(1)),
    );
    tasks.push(repeat("min_replicas write", &stop, &errors, move || {
        let lock = replicated.clone();
        async move { lock.write().await?.release().await }
    }));
    // Fenced writes (a script with extra keys).
    let fenced = clients[1].rwlock(unique_name("flush-fenced"));
    let cache = format!("cache:{{{}}}", fenced.name());
    tasks.push(repeat("fenced write", &stop, &errors, move || {
        let (lock, cache) = (fenced.clone(), cache.clone());
        async move {
            let guard = lock.write().await?;
            guard
                .fenced_write(FencedWrites::new().set(cache, "v"))
                .await?;
            guard.release().await
        }
    }));
    // State reads.
    let observed = clients[0].rwlock(&name);
    tasks.push(repeat("state", &stop, &errors, move || {
        let lock = observed.clone();
        async move { lock.state().await.map(drop) }
    }));
    // A long holder renewing every 300 ms, and a writer waiting behind it (its
    // re-checks run the acquire script).
    let lease = Duration::from_millis(900);
    let long = clients[1].rwlock_with(
        unique_name("flush-long"),
        LockOptions::default().write_lease(lease),
    );
    let long_holder = long.write().await.unwrap();
    let waiter = tokio::spawn({
        let lock = clients[0].rwlock(long.name());
        async move { lock.write().await }
    });

    sleep(Duration::from_millis(500)).await;
    let noscript_before = blocking(|| noscript_replies(&redis));
    let loads_before = blocking(|| function_loads(&redis));
    for _ in 0..FLUSHES {
        blocking(|| flush_all(&redis));
        sleep(Duration::from_millis(300)).await;
    }
    let last_flush = Instant::now();
    sleep(Duration::from_millis(700)).await;
    stop.store(true, Ordering::Relaxed);
    let mut done = Vec::new();
    for task in tasks {
        done.push(
            timeout(Duration::from_secs(15), task)
                .await
                .expect("a task hung")
                .unwrap(),
        );
    }
    let noscript = blocking(|| noscript_replies(&redis)) - noscript_before;
    let loads = blocking(|| function_loads(&redis)) - loads_before;

    // The long hold renewed through the flushes and still excludes the waiter.
    assert!(long_holder.is_held(), "the renewing holder lost its lease");
    assert!(!waiter.is_finished(), "the waiter got in beside the holder");
    let state = long.state().await.unwrap();
    assert!(
        state.writer.is_some() && state.queued_writers.len() == 1,
        "{state:?}"
    );
    blocking(|| flush_all(&redis));
    long_holder.release().await.unwrap();
    let next = timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter was not served")
        .unwrap()
        .unwrap();
    next.release().await.unwrap();

    let errors = errors.lock().unwrap();
    let report = checker.report();
    let legacy_report = legacy_checker.report();
    println!(
        "{FLUSHES} flushes: {loads} library loads and {noscript} NOSCRIPT replies handled; \
         calls done per task {done:?}; {report:?}; legacy {legacy_report:?}; {} errors \
         {errors:?}; last flush {:?} ago",
        errors.len(),
        last_flush.elapsed()
    );
    assert!(
        loads >= FLUSHES as u64,
        "the function flushes never bit: {loads} library loads"
    );
    assert!(
        noscript >= FLUSHES as u64,
        "the script flushes never bit: {noscript} NOSCRIPT replies"
    );
    assert!(errors.is_empty(), "calls failed: {errors:?}");
    assert!(
        done.iter().all(|&n| n > 0),
        "a call path made no progress: {done:?}"
    );
    assert_eq!(report.violations, 0, "{report:?}");
    assert_eq!(legacy_report.violations, 0, "{legacy_report:?}");
    assert_eq!(panics_outside_tests(), panics, "something panicked");
}

//! Resharding: the slot of a held, busy lock moves to another master (CLUSTER
//! SETSLOT IMPORTING/MIGRATING, MIGRATE key by key, SETSLOT NODE everywhere) while
//! readers and writers run. Exclusion holds throughout, and holders renew and
//! release on the new master.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis_rwlock::{Error, LockClient, LockOptions};
use tokio::time::{Instant, sleep, sleep_until, timeout};

use common::{HoldChecker, LocalRedis, blocking, panics_outside_tests, unique_name};

const TASKS: usize = 8;
/// Leases of the busy tasks: short, so that a hold whose release failed during the
/// move ends soon.
const WORK_LEASE: Duration = Duration::from_secs(2);

/// An error of the workload and when it happened.
type Failure = (Instant, String);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moving_the_slot_of_a_held_lock_keeps_exclusion_and_holders_renew() {
    let redis = blocking(LocalRedis::cluster);
    let panics = panics_outside_tests();
    let clients = [
        LockClient::cluster(redis.urls()).await.unwrap(),
        LockClient::cluster(redis.urls()).await.unwrap(),
    ];
    let name = unique_name("migrate");
    let key = clients[0].rwlock(&name).key().unwrap().to_owned();
    let slot = blocking(|| redis.keyslot(&key));
    let source = blocking(|| redis.master_for_key(&key).clone());
    let target = blocking(|| {
        redis
            .masters()
            .into_iter()
            .find(|m| m.port != source.port)
            .unwrap()
            .clone()
    });

    // Long holds in the same slot (same name, other prefixes), renewing every 0.5 s.
    let lease = Duration::from_millis(1500);
    let held = |prefix: &str| {
        clients[0].rwlock_with(
            &name,
            LockOptions::default()
                .key_prefix(prefix)
                .read_lease(lease)
                .write_lease(lease),
        )
    };
    let (long_read_lock, long_write_lock) = (held("held-r"), held("held-w"));
    let long_reader = long_read_lock.read().await.unwrap();
    let long_writer = long_write_lock.write().await.unwrap();

    // Busy readers and writers on the lock itself, over two clients.
    let checker = Arc::new(HoldChecker::default());
    let stop = Arc::new(AtomicU64::new(0));
    let done_at = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let errors = Arc::new(Mutex::new(Vec::<Failure>::new()));
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let lock = clients[i % 2].rwlock_with(
            &name,
            LockOptions::default()
                .read_lease(WORK_LEASE)
                .write_lease(WORK_LEASE)
                .wait_timeout(Duration::from_secs(5)),
        );
        let (checker, stop, done_at, errors) = (
            checker.clone(),
            stop.clone(),
            done_at.clone(),
            errors.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while stop.load(Ordering::Relaxed) == 0 {
                let result = checker.random_hold(&lock, 8).await;
                match result {
                    Ok(()) => done_at.lock().unwrap().push(Instant::now()),
                    Err(err) => errors
                        .lock()
                        .unwrap()
                        .push((Instant::now(), format!("{err:?}"))),
                }
            }
        }));
    }
    sleep(Duration::from_secs(1)).await;

    // Move the slot; keys go one per MIGRATE, and the workload runs for a while
    // with the slot's keys split over both masters.
    let moving = Instant::now();
    let moved = blocking(|| {
        redis.migrate_slot(slot, &target, || {
            std::thread::sleep(Duration::from_millis(500));
        })
    });
    let moved_at = Instant::now();
    println!(
        "slot {slot} moved from {} to {} in {:?} ({moved} keys)",
        source.port,
        target.port,
        moved_at - moving
    );
    assert!(
        moved >= 2,
        "the held locks were not in the slot: {moved} keys moved"
    );
    blocking(|| redis.wait_cluster_ok(Duration::from_secs(10)));
    assert_eq!(blocking(|| redis.slot_owner(slot)), Some(target.port));
    let on_source =
        blocking(|| redis.raw(&source, &["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()]));
    assert_eq!(on_source, redis::Value::Int(0), "keys left behind");

    // Holders renew on the new master: a lease after the move, without renewals
    // there, they would be gone.
    sleep_until(moved_at + lease + Duration::from_millis(300)).await;
    let state = long_read_lock.state().await.unwrap();
    assert_eq!(
        state.readers.len(),
        1,
        "the long reader's hold is gone: {state:?}"
    );
    let state = long_write_lock.state().await.unwrap();
    assert!(
        state.writer.is_some(),
        "the long writer's hold is gone: {state:?}"
    );
    assert!(long_reader.is_held() && long_writer.is_held());
    assert!(matches!(
        long_write_lock.try_read().await,
        Err(Error::WouldBlock)
    ));
    assert!(matches!(
        long_read_lock.try_write().await,
        Err(Error::WouldBlock)
    ));

    // The workload goes on after the move for longer than its leases.
    sleep_until(moved_at + WORK_LEASE + Duration::from_secs(1)).await;
    stop.store(1, Ordering::Relaxed);
    for task in tasks {
        timeout(Duration::from_secs(15), task)
            .await
            .expect("a task hung")
            .unwrap();
    }
    long_reader.release().await.unwrap();
    long_writer.release().await.unwrap();
    assert!(long_read_lock.state().await.unwrap().is_free());
    assert!(long_write_lock.state().await.unwrap().is_free());

    let report = checker.report();
    let done_at = done_at.lock().unwrap();
    let after_move = done_at.iter().filter(|&&at| at > moved_at).count();
    let during_move = done_at
        .iter()
        .filter(|&&at| at > moving && at <= moved_at)
        .count();
    let errors = errors.lock().unwrap();
    println!(
        "{report:?}; {} operations, {during_move} during the move, {after_move} after it; \
         errors: {:?}",
        done_at.len(),
        errors.iter().map(|(_, e)| e).collect::<Vec<_>>()
    );
    assert_eq!(report.violations, 0, "{report:?}");
    assert!(after_move >= 50, "the workload stalled after the move");
    // Errors are tolerated only around the move (redirections the retries did not
    // outlast), and only as Redis errors.
    for (at, err) in errors.iter() {
        assert!(
            *at < moved_at + Duration::from_secs(1) && err.starts_with("Redis("),
            "{err} {:?} after the move",
            at.saturating_duration_since(moved_at)
        );
    }
    assert_eq!(panics_outside_tests(), panics, "something panicked");
}

/// While the slot is half migrated (the lock's key already on the importing master,
/// another key of the slot still on the old one), concurrent lock calls succeed:
/// each is redirected with ASK, and single-key scripts run on the importing master.
///
/// redis-rs 1.8.1 follows ASK by sending `ASKING` as a request of its own on the
/// multiplexed connection, then the command; with several requests in flight,
/// another command can consume the one-shot ASKING flag and the script gets
/// `MOVED`. The lock retries such calls after short jittered pauses (every script
/// is idempotent per token), so they succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_calls_succeed_while_their_slot_is_half_migrated() {
    let redis = blocking(LocalRedis::cluster);
    let client = LockClient::cluster(redis.urls()).await.unwrap();
    let name = unique_name("half-migrated");
    let lock = client.rwlock(&name);
    let key = lock.key().unwrap().to_owned();
    let (slot, source) = blocking(|| (redis.keyslot(&key), redis.master_for_key(&key).clone()));
    let target = blocking(|| {
        redis
            .masters()
            .into_iter()
            .find(|m| m.port != source.port)
            .unwrap()
            .clone()
    });
    let holder = lock.read().await.unwrap();
    let stays = format!("stays:{{{name}}}");
    blocking(|| {
        redis.raw(&source, &["SET", &stays, "1"]);
        let slot = slot.to_string();
        let (source_id, target_id) = (redis.node_id(&source), redis.node_id(&target));
        redis.raw(
            &target,
            &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id],
        );
        redis.raw(
            &source,
            &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id],
        );
        let port = target.port.to_string();
        redis.raw(&source, &["MIGRATE", "127.0.0.1", &port, &key, "0", "5000"]);
    });

    let stop = Instant::now() + Duration::from_secs(2);
    let mut tasks = Vec::new();
    // One task alone succeeds; the failures need concurrent requests.
    for _ in 0..12 {
        let lock = lock.clone();
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut errors) = (0u32, Vec::new());
            while Instant::now() < stop {
                match lock.try_read().await {
                    Ok(guard) => match guard.release().await {
                        Ok(()) => ok += 1,
                        Err(err) => errors.push(format!("release: {err:?}")),
                    },
                    Err(err) => errors.push(format!("try_read: {err:?}")),
                }
            }
            (ok, errors)
        }));
    }
    let (mut ok, mut errors) = (0, Vec::new());
    for task in tasks {
        let (n, e) = task.await.unwrap();
        ok += n;
        errors.extend(e);
    }
    if let Err(err) = holder.release().await {
        errors.push(format!("release of the first holder: {err:?}"));
    }
    println!(
        "{ok} reads while half migrated; {} errors: {:?}",
        errors.len(),
        errors.first()
    );
    assert!(ok > 0);
    assert!(
        errors.is_empty(),
        "{} calls failed, e.g. {:?}",
        errors.len(),
        errors.first()
    );
}

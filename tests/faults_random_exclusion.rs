//! The randomized exclusion test, under faults: 16 tasks over two clients take
//! random read and write holds while the lock's shard fails over (manual
//! `CLUSTER FAILOVER`) and then its slot migrates to another master. The protected
//! resource is a counter beside the lock, written only with fenced writes: it must
//! count exactly the fenced writes that succeeded (no lost update, no write from a
//! stale holder), and the in-process checker must see no overlap.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::RngExt;
use redis::AsyncCommands;
use redis::cluster_async::ClusterConnection;
use redis_rwlock::{Error, FencedWrites, LockClient, LockOptions, RwLock, cluster_client_builder};
use tokio::time::{Instant, sleep, timeout};

use common::{HoldChecker, LocalRedis, blocking, panics_outside_tests, unique_name};

const TASKS: usize = 16;
/// Short leases, so a hold whose release failed in a fault window ends soon.
const LEASE: Duration = Duration::from_secs(3);
/// How long the workload runs after the last fault.
const AFTER_FAULTS: Duration = Duration::from_secs(4);

/// What the tasks saw.
#[derive(Default, Debug)]
struct Tally {
    /// Counter value written -> fencing token of the writer, for every fenced
    /// write that returned `Ok`.
    written: HashMap<u64, u64>,
    /// Fenced writes whose outcome is unknown (`Error::Redis`: it may have run).
    uncertain: u64,
    /// Fenced writes refused because the hold was gone.
    refused: u64,
    /// Errors by call and kind.
    errors: HashMap<String, u64>,
    /// When each completed hold ended.
    done_at: Vec<Instant>,
}

fn kind(err: &Error) -> &'static str {
    match err {
        Error::Timeout { .. } => "Timeout",
        Error::LeaseLost { .. } => "LeaseLost",
        Error::Redis { .. } => "Redis",
        Error::WouldBlock => "WouldBlock",
        _ => "other",
    }
}

async fn raw_connection(redis: &LocalRedis) -> ClusterConnection {
    cluster_client_builder(redis.urls())
        .build()
        .unwrap()
        .get_async_connection()
        .await
        .unwrap()
}

/// One random hold. A writer reads the counter and writes it back incremented,
/// fenced by its hold.
async fn one_hold(
    lock: &RwLock,
    raw: &mut ClusterConnection,
    counter: &str,
    checker: &HoldChecker,
    tally: &Mutex<Tally>,
) {
    let (write, hold) = {
        let mut rng = rand::rng();
        (
            rng.random_bool(0.3),
            Duration::from_millis(rng.random_range(0..8)),
        )
    };
    let error = |call: &str, err: &Error| {
        *tally
            .lock()
            .unwrap()
            .errors
            .entry(format!("{call}: {}", kind(err)))
            .or_default() += 1;
    };
    if write {
        let guard = match lock.write().await {
            Ok(guard) => guard,
            Err(err) => return error("write", &err),
        };
        checker.enter_write();
        let current: Result<Option<u64>, _> = raw.get(counter).await;
        match current {
            Ok(current) => {
                let next = current.unwrap_or(0) + 1;
                let fenced = guard
                    .fenced_write(FencedWrites::new().set(counter, next.to_string()))
                    .await;
                let mut tally = tally.lock().unwrap();
                match fenced {
                    Ok(()) => {
                        let previous = tally.written.insert(next, guard.fencing_token());
                        assert!(previous.is_none(), "counter value {next} written twice");
                    }
                    Err(Error::LeaseLost { .. }) => tally.refused += 1,
                    Err(Error::Redis(err)) => {
                        tally.uncertain += 1;
                        let code = err.code().unwrap_or("io").to_owned();
                        *tally
                            .errors
                            .entry(format!("fenced write: {code}"))
                            .or_default() += 1;
                    }
                    Err(other) => panic!("fenced write: {other:?}"),
                }
            }
            Err(_) => {
                *tally
                    .lock()
                    .unwrap()
                    .errors
                    .entry("GET".into())
                    .or_default() += 1
            }
        }
        sleep(hold).await;
        checker.leave_write();
        match guard.release().await {
            Ok(()) => tally.lock().unwrap().done_at.push(Instant::now()),
            Err(err) => error("release write", &err),
        }
    } else {
        let guard = match lock.read().await {
            Ok(guard) => guard,
            Err(err) => return error("read", &err),
        };
        checker.enter_read();
        sleep(hold).await;
        checker.leave_read();
        match guard.release().await {
            Ok(()) => tally.lock().unwrap().done_at.push(Instant::now()),
            Err(err) => error("release read", &err),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_holds_stay_exclusive_and_fenced_through_failover_and_migration() {
    let redis = blocking(LocalRedis::cluster);
    let panics = panics_outside_tests();
    let clients = [
        LockClient::cluster(redis.urls()).await.unwrap(),
        LockClient::cluster(redis.urls()).await.unwrap(),
    ];
    let name = unique_name("random-faults");
    let key = clients[0].rwlock(&name).key().unwrap().to_owned();
    let counter = format!("counter:{{{name}}}");
    let checker = Arc::new(HoldChecker::default());
    let tally = Arc::new(Mutex::new(Tally::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let options = LockOptions::default()
        .read_lease(LEASE)
        .write_lease(LEASE)
        .wait_timeout(Duration::from_secs(6));

    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let lock = clients[i % 2].rwlock_with(&name, options.clone());
        let mut raw = raw_connection(&redis).await;
        let (counter, checker, tally, stop) = (
            counter.clone(),
            checker.clone(),
            tally.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                one_hold(&lock, &mut raw, &counter, &checker, &tally).await;
            }
        }));
    }
    sleep(Duration::from_secs(2)).await;

    // Fault 1: a manual failover of the lock's shard.
    let master = blocking(|| redis.master_for_key(&key).clone());
    let replica = blocking(|| redis.replica_of(&master).unwrap().clone());
    let failover_at = Instant::now();
    blocking(|| redis.manual_failover(&replica, Duration::from_secs(15)));
    let failover_took = failover_at.elapsed();
    sleep(Duration::from_millis(1500)).await;

    // Fault 2: the slot moves to another master, key by key.
    let slot = blocking(|| redis.keyslot(&key));
    let target = blocking(|| {
        redis
            .masters()
            .into_iter()
            .find(|m| m.port != replica.port)
            .unwrap()
            .clone()
    });
    let migrating_at = Instant::now();
    let moved = blocking(|| {
        redis.migrate_slot(slot, &target, || {
            std::thread::sleep(Duration::from_millis(300));
        })
    });
    let faults_over = Instant::now();
    blocking(|| redis.wait_cluster_ok(Duration::from_secs(10)));
    assert_eq!(blocking(|| redis.slot_owner(slot)), Some(target.port));

    sleep(AFTER_FAULTS).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        timeout(Duration::from_secs(20), task)
            .await
            .expect("a task hung")
            .unwrap();
    }

    let mut raw = raw_connection(&redis).await;
    let final_count: u64 = raw
        .get::<_, Option<u64>>(&counter)
        .await
        .unwrap()
        .unwrap_or(0);
    let report = checker.report();
    let tally = tally.lock().unwrap();
    let successes = tally.written.len() as u64;
    let during_faults = tally
        .done_at
        .iter()
        .filter(|&&at| at >= failover_at && at < faults_over)
        .count();
    let after_faults = tally
        .done_at
        .iter()
        .filter(|&&at| at >= faults_over + Duration::from_secs(1))
        .count();
    println!(
        "failover {failover_took:?}, migration {:?} ({moved} keys); {report:?}",
        faults_over - migrating_at
    );
    println!(
        "counter {final_count}, {successes} fenced writes ok, {} uncertain, {} refused; \
         {} holds done ({during_faults} during the faults, {after_faults} from 1 s after them); \
         errors {:?}",
        tally.uncertain,
        tally.refused,
        tally.done_at.len(),
        tally.errors
    );

    assert_eq!(report.violations, 0, "{report:?}");
    // Every accepted fenced write counted, none lost: the counter equals the
    // successes (up to writes whose outcome is unknown).
    assert!(
        final_count >= successes && final_count <= successes + tally.uncertain,
        "counter {final_count} but {successes} fenced writes succeeded ({} uncertain)",
        tally.uncertain
    );
    // Fencing tokens rise with the counter: each write came from a newer holder.
    let mut values: Vec<(&u64, &u64)> = tally.written.iter().collect();
    values.sort();
    for pair in values.windows(2) {
        assert!(
            pair[1].1 > pair[0].1,
            "value {} written with fence {} after value {} with fence {}",
            pair[1].0,
            pair[1].1,
            pair[0].0,
            pair[0].1
        );
    }
    assert!(successes >= 50, "too few fenced writes: {successes}");
    assert!(
        after_faults >= 50,
        "no progress after the faults: {after_faults} holds"
    );
    assert_eq!(panics_outside_tests(), panics, "something panicked");
}

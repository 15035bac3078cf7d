//! A frozen master (SIGSTOP): guards notice they are cut off within one lease,
//! acquires fail in time with clear errors instead of hanging, and everything works
//! again after SIGCONT without any hold outliving its lease.
//!
//! The clusters here have a long node timeout, so the pause is only a pause (no
//! failover starts while the master is frozen).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use redis_rwlock::{Error, FencedWrites, LockClient, LockOptions, RwLock};
use tokio::time::{Instant, sleep, sleep_until, timeout};

use common::{LocalRedis, Node, Paused, blocking, panics_outside_tests};

/// Long enough that a frozen master is never failed over during these tests.
const NODE_TIMEOUT_MS: u64 = 30_000;
/// The client's limit for one request with its retries (4 s), plus scheduling
/// slack on a loaded 2-core machine.
const CALL_LIMIT: Duration = Duration::from_millis(5_000);

/// Errors a `try_*` call may return while the master is frozen.
const TRY_ERRORS: &[&str] = &["Timeout", "Redis", "WouldBlock"];
/// Errors a waiting call may return while the master is frozen.
const WAIT_ERRORS: &[&str] = &["Timeout", "Redis"];

fn start() -> (LocalRedis, Node) {
    let redis = LocalRedis::cluster_with_node_timeout(NODE_TIMEOUT_MS);
    let master = redis.masters()[0].clone();
    (redis, master)
}

/// SIGSTOP of the master that owns two held locks (one read, one write) for
/// longer than their lease: both guards report `lost()` within one lease of the
/// freeze (plus a small margin) and `is_held()` turns false. After SIGCONT nothing
/// panics, the guards stay lost, their release says so, and the locks end free for
/// the next holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_cut_off_from_its_master_reports_lost_within_one_lease() {
    let (redis, master) = blocking(start);
    let panics = panics_outside_tests();
    let lease = Duration::from_secs(2);
    let options = LockOptions::default().read_lease(lease).write_lease(lease);
    let client = LockClient::cluster(redis.urls()).await.unwrap();
    let (name_w, name_r) = blocking(|| {
        (
            redis.name_on_master("cut-off-w", &master),
            redis.name_on_master("cut-off-r", &master),
        )
    });
    let lock_w = client.rwlock_with(&name_w, options.clone());
    let lock_r = client.rwlock_with(&name_r, options.clone());
    let writer = lock_w.write().await.unwrap();
    let reader = lock_r.read().await.unwrap();
    // Let a renewal or two go through first.
    sleep(lease / 2).await;
    assert!(writer.is_held() && reader.is_held());

    let frozen = Paused::new(master.pid);
    let paused_at = Instant::now();
    let limit = lease + Duration::from_millis(500);
    let (w, r) = tokio::join!(
        timeout(limit * 2, writer.lost()),
        timeout(limit * 2, reader.lost())
    );
    let noticed = paused_at.elapsed();
    w.expect("the writer never reported its lease lost");
    r.expect("the reader never reported its lease lost");
    println!("both guards reported lost {noticed:?} after the freeze (lease {lease:?})");
    assert!(noticed <= limit, "lost reported after {noticed:?}");
    assert!(!writer.is_held() && !reader.is_held());

    // Stay frozen a while past the lease, then thaw.
    sleep_until(paused_at + lease + Duration::from_secs(1)).await;
    frozen.resume();
    blocking(|| redis.wait_cluster_ok(Duration::from_secs(10)));
    // Renewals that queued up in the frozen server run now; the guards stay lost.
    sleep(lease / 2).await;
    assert!(!writer.is_held() && !reader.is_held());
    let fence = writer.fencing_token();
    assert!(matches!(
        writer.release().await,
        Err(Error::LeaseLost { .. })
    ));
    assert!(matches!(
        reader.release().await,
        Err(Error::LeaseLost { .. })
    ));

    // The locks end free (or with a new holder): others get in at once.
    let others = LockClient::cluster(redis.urls()).await.unwrap();
    for (name, mode) in [(&name_w, "write"), (&name_r, "read")] {
        let lock = others.rwlock_with(name, options.clone());
        let state = lock.state().await.unwrap();
        assert!(
            state.is_free(),
            "{mode} lock still held after release: {state:?}"
        );
        let next = timeout(CALL_LIMIT, lock.try_write())
            .await
            .unwrap()
            .unwrap();
        assert!(next.fencing_token() > fence);
        next.release().await.unwrap();
    }
    assert_eq!(panics_outside_tests(), panics, "something panicked");
}

/// What one call made during the freeze returned, and when.
struct Outcome {
    call: &'static str,
    started: Instant,
    finished: Instant,
    result: Result<(), &'static str>,
    /// How long the call may take.
    limit: Duration,
    /// The errors acceptable for it.
    ok_kinds: &'static [&'static str],
}

/// Runs `fut` in a task and records its outcome; a granted hold is dropped at
/// once (released in the background) so it does not hold up the other calls.
fn spawn_call<T: Send + 'static>(
    call: &'static str,
    limit: Duration,
    ok_kinds: &'static [&'static str],
    fut: impl std::future::Future<Output = Result<T, Error>> + Send + 'static,
) -> tokio::task::JoinHandle<Outcome> {
    tokio::spawn(async move {
        let started = Instant::now();
        let result = fut.await.map(drop).map_err(|err| kind(&err));
        Outcome {
            call,
            started,
            finished: Instant::now(),
            result,
            limit,
            ok_kinds,
        }
    })
}

fn kind(err: &Error) -> &'static str {
    match err {
        Error::WouldBlock => "WouldBlock",
        Error::Timeout { .. } => "Timeout",
        Error::LeaseLost { .. } => "LeaseLost",
        Error::Redis { .. } => "Redis",
        _ => "other",
    }
}

/// A frozen master delays only the renewals of its own locks: while a renewal on the
/// frozen master hangs until its lease ends (4 s), a guard of the same client on
/// another master, with a lease of 1.5 s, renews on time (held at every check, its
/// deadline moving on); the frozen master's guard then reports its lease lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_master_delays_no_renewal_on_another_master() {
    let (redis, master) = blocking(start);
    let client = LockClient::cluster(redis.urls()).await.unwrap();
    let other_master = blocking(|| redis.masters()[1].clone());
    let (frozen_name, live_name) = blocking(|| {
        (
            redis.name_on_master("renews-frozen", &master),
            redis.name_on_master("renews-elsewhere", &other_master),
        )
    });
    let long = Duration::from_secs(4);
    let short = Duration::from_millis(1500);
    let cut_off = client
        .rwlock_with(&frozen_name, LockOptions::default().write_lease(long))
        .write()
        .await
        .unwrap();
    let live = client
        .rwlock_with(&live_name, LockOptions::default().write_lease(short))
        .write()
        .await
        .unwrap();

    let frozen = Paused::new(master.pid);
    let paused_at = Instant::now();
    let deadline_at_freeze = live.deadline();
    while paused_at.elapsed() < long + short {
        assert!(
            live.is_held(),
            "the guard on a healthy master lost its lease {:?} into the freeze",
            paused_at.elapsed()
        );
        sleep(Duration::from_millis(100)).await;
    }
    assert!(
        live.deadline() > deadline_at_freeze + long,
        "the guard on a healthy master renewed too rarely"
    );
    timeout(short, cut_off.lost())
        .await
        .expect("the frozen master's guard never reported its lease lost");

    frozen.resume();
    blocking(|| redis.wait_cluster_ok(Duration::from_secs(10)));
    assert!(live.is_held());
    live.release().await.unwrap();
    assert!(matches!(
        cut_off.release().await,
        Err(Error::LeaseLost { .. })
    ));
}

/// SIGSTOP of the master that owns a lock for 3 s while calls are made on it:
/// every call returns within the client's limits (no hang), with success or
/// `Error::Timeout`/`Error::Redis` (`WouldBlock` for `try_*`), and a lock on
/// another master keeps working meanwhile. After SIGCONT the lock works at once,
/// the reader that held across the freeze has lost its lease, and the lock ends
/// free within one lease: no hold outlives its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_fail_in_time_while_the_owning_master_is_paused() {
    let (redis, master) = blocking(start);
    let panics = panics_outside_tests();
    let lease = Duration::from_secs(2);
    let options = LockOptions::default().read_lease(lease).write_lease(lease);
    let client = LockClient::cluster(redis.urls()).await.unwrap();
    let other_master = blocking(|| redis.masters()[1].clone());
    let (name, elsewhere) = blocking(|| {
        (
            redis.name_on_master("paused", &master),
            redis.name_on_master("elsewhere", &other_master),
        )
    });
    let lock = client.rwlock_with(&name, options.clone());
    let lock_after = lock.clone();
    let waiting = client.rwlock_with(&name, options.clone().wait_timeout(Duration::from_secs(1)));
    let elsewhere = client.rwlock_with(&elsewhere, options.clone());
    let held = lock.read().await.unwrap();
    // Every script is loaded on every node before the freeze (a script missing on a
    // healthy node is another story: see the next test).
    warm_up(&elsewhere).await;

    let frozen = Paused::new(master.pid);
    let paused_at = Instant::now();
    let calls = tokio::spawn(async move {
        let mut calls = Vec::new();
        for offset_ms in [50u64, 1_200] {
            sleep_until(paused_at + Duration::from_millis(offset_ms)).await;
            let (l, w) = (lock.clone(), waiting.clone());
            calls.push(spawn_call("try_write", CALL_LIMIT, TRY_ERRORS, {
                let l = l.clone();
                async move { l.try_write().await }
            }));
            calls.push(spawn_call("try_read", CALL_LIMIT, TRY_ERRORS, {
                let l = l.clone();
                async move { l.try_read().await }
            }));
            // Waits for the other calls' holds too.
            let limit = CALL_LIMIT + Duration::from_secs(2);
            calls.push(spawn_call("write", limit, WAIT_ERRORS, {
                let l = l.clone();
                async move { l.write().await }
            }));
            // wait_timeout is checked between attempts: an attempt under way ends first.
            let limit = CALL_LIMIT + Duration::from_secs(1);
            calls.push(spawn_call("read (wait_timeout 1 s)", limit, WAIT_ERRORS, {
                let w = w.clone();
                async move { w.read().await }
            }));
            calls.push(spawn_call("state", CALL_LIMIT, &["Redis"], async move {
                l.state().await
            }));
        }
        calls
    });
    // The other shards are not held up by the frozen one.
    let mut elsewhere_longest = Duration::ZERO;
    while paused_at.elapsed() < Duration::from_secs(3) {
        let started = Instant::now();
        let guard = elsewhere.try_write().await.unwrap();
        guard.release().await.unwrap();
        elsewhere_longest = elsewhere_longest.max(started.elapsed());
        sleep(Duration::from_millis(100)).await;
    }
    let calls = calls.await.unwrap();
    let thawed = Instant::now();
    frozen.resume();

    let (mut failed, mut served_after_thaw) = (0, 0);
    for call in calls {
        let outcome = timeout(CALL_LIMIT * 3, call)
            .await
            .expect("a call hung")
            .expect("a call panicked");
        let took = outcome.finished - outcome.started;
        println!(
            "{:<24} started {:>5} ms into the freeze, took {:>5} ms: {}",
            outcome.call,
            (outcome.started - paused_at).as_millis(),
            took.as_millis(),
            outcome.result.err().unwrap_or("ok")
        );
        assert!(took <= outcome.limit, "{} took {took:?}", outcome.call);
        match outcome.result {
            Err(kind) => {
                assert!(
                    outcome.ok_kinds.contains(&kind),
                    "{} failed with {kind}",
                    outcome.call
                );
                failed += 1;
            }
            // Nothing can be served by a frozen node.
            Ok(()) => {
                assert!(
                    outcome.finished >= thawed,
                    "{} succeeded during the freeze",
                    outcome.call
                );
                served_after_thaw += 1;
            }
        }
    }
    println!("{failed} calls failed, {served_after_thaw} were served after the thaw");
    println!("a lock on another master answered within {elsewhere_longest:?} throughout");
    assert!(
        elsewhere_longest < Duration::from_secs(1),
        "the other shard stalled for {elsewhere_longest:?}"
    );
    // The reader's lease ran out during the freeze (renewals could not get through).
    assert!(!held.is_held(), "a hold outlived its lease");
    drop(held);

    // After the thaw: the lock works, and no hold outlives its lease.
    blocking(|| redis.wait_cluster_ok(Duration::from_secs(10)));
    let writer = timeout(CALL_LIMIT, lock_after.write())
        .await
        .expect("write hung after the thaw")
        .unwrap();
    writer.release().await.unwrap();
    let free_by = thawed + lease + Duration::from_secs(1);
    loop {
        let state = lock_after.state().await.unwrap();
        if state.is_free() && state.queued_writers.is_empty() {
            break;
        }
        assert!(
            Instant::now() < free_by,
            "holds outlived their lease after the thaw: {state:?}"
        );
        sleep(Duration::from_millis(50)).await;
    }
    let checker = Arc::new(common::HoldChecker::default());
    exercise(&lock_after, &checker).await;
    assert_eq!(checker.report().violations, 0);
    assert_eq!(panics_outside_tests(), panics, "something panicked");
}

/// A few reads and writes, checked for exclusion.
async fn exercise(lock: &RwLock, checker: &common::HoldChecker) {
    for _ in 0..5 {
        let w = timeout(CALL_LIMIT, lock.write()).await.unwrap().unwrap();
        checker.enter_write();
        checker.leave_write();
        w.release().await.unwrap();
        let r = timeout(CALL_LIMIT, lock.read()).await.unwrap().unwrap();
        checker.enter_read();
        checker.leave_read();
        r.release().await.unwrap();
    }
}

/// Runs every script once through `lock` (loading each on every node).
async fn warm_up(lock: &RwLock) {
    lock.try_write().await.unwrap().release().await.unwrap();
    let reader = lock.try_read().await.unwrap();
    lock.state().await.unwrap();
    reader.release().await.unwrap();
}

/// A lock's scripts missing on a healthy master (their first use there; or after a
/// failover, a restart, `FUNCTION FLUSH` or `SCRIPT FLUSH`) must load there even
/// while another, unrelated master is frozen. The function library is loaded on the
/// lock's master only (the driver by itself sends `FUNCTION LOAD` to every master
/// and waits for all), and on NOSCRIPT a legacy lock sends the script's source with
/// EVAL to its node only, never `SCRIPT LOAD` to every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_master_does_not_stall_script_loading_on_another_master() {
    let (redis, master) = blocking(start);
    let client = LockClient::cluster(redis.urls()).await.unwrap();
    let healthy = blocking(|| redis.masters()[1].clone());
    let name = blocking(|| redis.name_on_master("healthy", &healthy));
    let lock = client.rwlock(&name);
    let legacy = client.legacy_rwlock(format!("{{{name}}}:read"), format!("{{{name}}}:write"));
    warm_up(&lock).await;
    warm_up(&legacy).await;
    blocking(|| {
        redis.raw(&healthy, &["FUNCTION", "FLUSH"]);
        redis.raw(&healthy, &["SCRIPT", "FLUSH"]);
    });
    let loads = || {
        let stats = redis.commandstats(&healthy);
        let errors = redis.errorstats(&healthy);
        (
            stats.get("function|load").copied().unwrap_or(0),
            errors.get("NOSCRIPT").copied().unwrap_or(0),
        )
    };
    let before = blocking(loads);

    let frozen = Paused::new(master.pid);
    for lock in [&lock, &legacy] {
        let started = Instant::now();
        let result = timeout(CALL_LIMIT * 2, lock.try_write()).await;
        let took = started.elapsed();
        println!("try_write on a healthy master while another is frozen: {took:?}, {result:?}");
        let guard = result.expect("try_write hung").expect("try_write failed");
        guard.release().await.unwrap();
        assert!(took < Duration::from_secs(1), "took {took:?}");
    }
    frozen.resume();
    let after = blocking(loads);
    assert!(
        after.0 > before.0 && after.1 > before.1,
        "the scripts were not missing: (FUNCTION LOAD, NOSCRIPT) {before:?} -> {after:?}"
    );
}

/// Under `min_replicas`, a replica that does not answer (SIGSTOP) makes each acquire
/// fail with `NotReplicated` once `replica_timeout` (at most 1 s) has passed, never
/// with a reply timeout, and the hold is released. A guard renewing on the same node
/// meanwhile, whose renewals queue behind those `WAIT`s, keeps its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_replica_gives_not_replicated_in_time() {
    let (redis, master) = blocking(start);
    let replica = blocking(|| redis.replica_of(&master).cloned()).expect("a replica");
    let client = LockClient::cluster(redis.urls()).await.unwrap();
    let (name, other) = blocking(|| {
        (
            redis.name_on_master("paused-replica", &master),
            redis.name_on_master("paused-replica-neighbour", &master),
        )
    });
    let neighbour = client
        .rwlock_with(
            &other,
            LockOptions::default().write_lease(Duration::from_secs(3)),
        )
        .write()
        .await
        .unwrap();
    let lock = client.rwlock_with(
        &name,
        LockOptions::default()
            .min_replicas(1)
            .replica_timeout(Duration::from_secs(1)),
    );
    let frozen = Paused::new(replica.pid);
    for _ in 0..4 {
        let started = Instant::now();
        match lock.write().await {
            Err(Error::NotReplicated {
                acknowledged: 0,
                required: 1,
                ..
            }) => {}
            other => panic!("expected NotReplicated, got {other:?}"),
        }
        let took = started.elapsed();
        assert!(
            took >= Duration::from_secs(1) && took < Duration::from_millis(1900),
            "the acquire took {took:?}"
        );
    }
    assert!(
        neighbour.is_held(),
        "a renewal queued behind the WAITs lost its lease"
    );
    frozen.resume();
    assert!(
        lock.state().await.unwrap().is_free(),
        "an unreplicated hold stayed"
    );
    neighbour.release().await.unwrap();
}

/// `release()` returns within `release_timeout` even when the master is frozen
/// (with a timeout error, never a hang until the lease ends); the release goes on in
/// the background and frees the lock soon after the master is back, long before the
/// 30 s lease would have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_to_a_frozen_master_returns_within_its_bound() {
    let (redis, master) = blocking(start);
    let client = LockClient::cluster(redis.urls()).await.unwrap();
    let name = blocking(|| redis.name_on_master("frozen-release", &master));
    let bound = Duration::from_secs(1);
    let lock = client.rwlock_with(
        &name,
        LockOptions::default()
            .write_lease(Duration::from_secs(30))
            .release_timeout(bound),
    );
    let writer = lock.write().await.unwrap();
    let frozen = Paused::new(master.pid);
    let started = Instant::now();
    let result = timeout(Duration::from_secs(10), writer.release())
        .await
        .expect("release() hung on a frozen master");
    let took = started.elapsed();
    assert!(
        matches!(&result, Err(Error::Redis(err)) if err.is_timeout()),
        "{result:?}"
    );
    assert!(
        took >= bound && took < bound + Duration::from_millis(500),
        "release() took {took:?}"
    );
    frozen.resume();
    let resumed = Instant::now();
    loop {
        if lock.state().await.unwrap().is_free() {
            break;
        }
        assert!(
            resumed.elapsed() < Duration::from_secs(6),
            "the background release did not free the lock"
        );
        sleep(Duration::from_millis(50)).await;
    }
    println!("free {:?} after the master was back", resumed.elapsed());
}

/// Under `min_replicas`, a fenced write waits for the replicas as the acquire did:
/// with the replica paused after the grant, it is applied on the master but reported
/// `NotReplicated` once `replica_timeout` has passed (a failover now could lose it),
/// never acknowledged as safe; the hold stays, and a write once the replica is back
/// is acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_write_under_min_replicas_reports_a_paused_replica() {
    let (redis, master) = blocking(start);
    let replica = blocking(|| redis.replica_of(&master).cloned()).expect("a replica");
    let client = LockClient::cluster(redis.urls()).await.unwrap();
    let name = blocking(|| redis.name_on_master("fenced-replica", &master));
    let lock = client.rwlock_with(
        &name,
        LockOptions::default()
            .min_replicas(1)
            .replica_timeout(Duration::from_secs(1)),
    );
    let writer = lock.write().await.unwrap();
    let cell = format!("cell:{{{name}}}");
    let frozen = Paused::new(replica.pid);
    let started = Instant::now();
    match writer
        .fenced_write(FencedWrites::new().set(&cell, "unreplicated"))
        .await
    {
        Err(Error::NotReplicated {
            acknowledged: 0,
            required: 1,
            ..
        }) => {}
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(1), "reported after {took:?}");
    assert!(writer.is_held(), "the hold itself was not at stake");
    frozen.resume();
    writer
        .fenced_write(FencedWrites::new().set(&cell, "replicated"))
        .await
        .expect("acknowledged once the replica is back");
    writer.release().await.unwrap();
}

//! Leases: a vanished holder frees the lock when its lease ends (not before),
//! renewal keeps a live holder's lock, and only the owner's token counts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use redis::AsyncCommands;
use redis_rwlock::{Error, LockClient, LockMode, LockOptions, RwLock};
use tokio::time::{Instant, timeout};

use common::{LocalRedis, blocking, cluster_client, kill9, raw_cluster, unique_name, wait_for};

/// With its server gone, a guard learns at its deadline that its lease is lost;
/// `release()` then answers `LeaseLost` at once instead of trying the dead server
/// for `release_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_after_a_known_lost_lease_returns_at_once() {
    let server = LocalRedis::standalone();
    let client = LockClient::standalone(server.url()).await.unwrap();
    let lease = Duration::from_secs(2);
    let options = LockOptions::default()
        .write_lease(lease)
        .release_timeout(Duration::from_secs(4));
    let guard = client
        .rwlock_with(unique_name("lost-then-released"), options)
        .write()
        .await
        .unwrap();
    blocking(|| kill9(server.nodes[0].pid));
    timeout(lease * 3, guard.lost())
        .await
        .expect("the lease was never known lost");
    let started = Instant::now();
    let result = guard.release().await;
    let took = started.elapsed();
    assert!(matches!(result, Err(Error::LeaseLost { .. })), "{result:?}");
    assert!(took < Duration::from_millis(100), "release took {took:?}");
}

on_both_backends! {
async fn a_forgotten_guard_frees_the_lock_when_its_lease_ends_and_not_before(backend: Backend) {
    let client = backend.client().await;
    let lease = Duration::from_secs(2);
    let lock = client.rwlock_with(
        unique_name("forgotten"),
        LockOptions::default().write_lease(lease).auto_renew(false),
    );
    let acquired = Instant::now();
    std::mem::forget(lock.write().await.unwrap());

    tokio::time::sleep(lease / 2).await;
    assert!(
        matches!(lock.try_read().await, Err(Error::WouldBlock)),
        "freed early"
    );

    let next = timeout(lease * 3, lock.write()).await.unwrap().unwrap();
    let waited = acquired.elapsed();
    assert!(
        waited >= lease - Duration::from_millis(50),
        "freed after {waited:?}"
    );
    next.release().await.unwrap();
}
}

on_both_backends! {
async fn a_crashed_holder_frees_the_lock_when_its_lease_ends(backend: Backend) {
    let lease = Duration::from_secs(3);
    let name = unique_name("crashed");
    // A "process" with its own runtime takes the lock, keeps renewing, then dies
    // without releasing (the guard never drops; the runtime with its renewal stops).
    let crash_name = name.clone();
    let crash_backend = backend.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let client = crash_backend.client().await;
            let lock = client.rwlock_with(crash_name, LockOptions::default().write_lease(lease));
            let guard = lock.write().await.unwrap();
            tokio::time::sleep(lease * 2).await; // renewed at least once
            assert!(guard.is_held());
            std::mem::forget(guard);
        });
    })
    .join()
    .unwrap();
    let crashed = Instant::now();

    let client = backend.client().await;
    let lock = client.rwlock(&name);
    // The last renewal was at most a third of a lease before the crash.
    tokio::time::sleep(lease / 3).await;
    assert!(
        matches!(lock.try_read().await, Err(Error::WouldBlock)),
        "freed early"
    );
    let next = timeout(lease * 3, lock.write()).await.unwrap().unwrap();
    assert!(crashed.elapsed() <= lease + Duration::from_secs(2));
    next.release().await.unwrap();
}
}

on_both_backends! {
async fn an_aborted_task_releases_its_hold_at_once(backend: Backend) {
    let client = backend.client().await;
    let lock = client.rwlock_with(
        unique_name("aborted"),
        LockOptions::default().write_lease(Duration::from_secs(60)),
    );
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn({
        let lock = lock.clone();
        async move {
            let _guard = lock.write().await.unwrap();
            held_tx.send(()).unwrap();
            std::future::pending::<()>().await;
        }
    });
    held_rx.await.unwrap();
    task.abort();
    let started = Instant::now();
    let writer = timeout(Duration::from_secs(5), lock.write())
        .await
        .unwrap()
        .unwrap();
    let waited = started.elapsed();
    writer.release().await.unwrap();
    // The lease has a minute to run: only the dropped guard's release lets us in.
    assert!(
        waited < Duration::from_secs(1),
        "the next writer waited {waited:?}"
    );
}
}

on_both_backends! {
async fn renewal_keeps_a_lock_held_for_many_leases(backend: Backend) {
    let client = backend.client().await;
    let lease = Duration::from_millis(900);
    let lock = client.rwlock_with(
        unique_name("renewed"),
        LockOptions::default().write_lease(lease).read_lease(lease),
    );
    let writer = lock.write().await.unwrap();
    let until = Instant::now() + lease * 4;
    while Instant::now() < until {
        assert!(writer.is_held());
        assert!(matches!(lock.try_read().await, Err(Error::WouldBlock)));
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let reader = writer.downgrade().await.unwrap();
    let until = Instant::now() + lease * 4;
    while Instant::now() < until {
        assert!(reader.is_held());
        assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    reader.release().await.unwrap();
    assert!(lock.state().await.unwrap().is_free());
}
}

on_both_backends! {
async fn an_expired_guard_reports_lost_and_cannot_release_the_next_holder(backend: Backend) {
    let client = backend.client().await;
    let lease = Duration::from_millis(500);
    let name = unique_name("expired");
    let lock = client.rwlock_with(
        &name,
        LockOptions::default().write_lease(lease).auto_renew(false),
    );
    let stale = lock.write().await.unwrap();
    timeout(lease * 3, stale.lost())
        .await
        .expect("lost() never resolved");
    assert!(!stale.is_held());

    let next = client.rwlock(&name).write().await.unwrap();
    assert!(next.fencing_token() > stale.fencing_token());
    assert!(matches!(stale.release().await, Err(Error::LeaseLost { .. })));
    // The stale guard's release did not touch the new holder.
    assert!(matches!(lock.try_read().await, Err(Error::WouldBlock)));
    assert!(next.is_held());
    next.release().await.unwrap();
}
}

on_both_backends! {
async fn a_stolen_lease_is_reported_lost_within_one_lease(backend: Backend) {
    let client = backend.client().await;
    let lease = Duration::from_millis(1500);
    let lock = client.rwlock_with(
        unique_name("stolen"),
        LockOptions::default().read_lease(lease),
    );
    let reader = lock.read().await.unwrap();
    // An operator deletes the lock (break-glass): the next renewal finds it gone.
    backend.delete_lock(&lock).await;
    timeout(lease, reader.lost())
        .await
        .expect("loss not noticed within a lease");
    assert!(!reader.is_held());
    assert!(matches!(reader.release().await, Err(Error::LeaseLost { .. })));
}
}

/// Redis-only: runs the Lua scripts by hand and compares the raw hash.
#[tokio::test]
async fn no_token_but_the_owners_releases_or_renews() {
    let client = cluster_client().await;
    // No renewal runs, so nothing but the stranger's calls could change the hash.
    let lock = client.rwlock_with(
        unique_name("owner"),
        LockOptions::default().auto_renew(false),
    );
    let key = lock.key().unwrap();
    let mut raw = raw_cluster().await;
    for mode in ["read", "write"] {
        let guard = if mode == "read" {
            Box::new(lock.read().await.unwrap()) as Box<dyn std::any::Any + Send>
        } else {
            Box::new(lock.write().await.unwrap())
        };
        let before: HashMap<String, String> = raw.hgetall(key).await.unwrap();
        for (name, extra) in [("release", None), ("renew", Some("60000"))] {
            let source =
                common::hash_script(&std::fs::read_to_string(format!("lua/{name}.lua")).unwrap());
            let script = redis::Script::new(&source);
            let mut call = script.key(key);
            call.arg("SPUBLISH")
                .arg(10_000)
                .arg(10_000)
                .arg("0123456789abcdef0123456789abcdef");
            if let Some(extra) = extra {
                call.arg(extra);
            }
            let answer: i64 = call.invoke_async(&mut raw).await.unwrap();
            assert_eq!(
                answer, 0,
                "{name} with a stranger's token acted on a {mode} hold"
            );
        }
        let after: HashMap<String, String> = raw.hgetall(key).await.unwrap();
        assert_eq!(before, after, "a stranger's token changed the {mode} hold");
        drop(guard);
        wait_for(&lock, |s| s.is_free()).await;
    }
}

on_both_backends! {
/// With `auto_renew(false)`, `extend()` renews on demand: the hold outlives its lease
/// as long as the guard extends it, `deadline()` moves with each renewal, and once
/// the guard stops, the lease ends, `extend()` and `release()` say so.
async fn extend_renews_a_hold_on_demand(backend: Backend) {
    let client = backend.client().await;
    let lease = Duration::from_millis(1500);
    let lock = client.rwlock_with(
        unique_name("extend"),
        LockOptions::default()
            .write_lease(lease)
            .read_lease(lease)
            .auto_renew(false),
    );
    let writer = lock.write().await.unwrap();
    assert_eq!(writer.name(), lock.name());
    assert_eq!(writer.mode(), LockMode::Write);
    let mut deadline = writer.deadline();
    assert!(deadline <= std::time::Instant::now() + lease);
    for _ in 0..4 {
        tokio::time::sleep(lease / 2).await;
        writer.extend().await.unwrap();
        assert!(
            writer.deadline() > deadline,
            "extend() did not move the deadline"
        );
        deadline = writer.deadline();
    }
    assert!(writer.is_held(), "held past its lease thanks to extend()");
    assert!(matches!(lock.try_read().await, Err(Error::WouldBlock)));
    tokio::time::timeout(lease + Duration::from_secs(1), writer.lost())
        .await
        .expect("the lease did not end once the guard stopped extending it");
    assert!(matches!(writer.extend().await, Err(Error::LeaseLost { .. })));
    assert!(matches!(writer.release().await, Err(Error::LeaseLost { .. })));

    let reader = lock.read().await.unwrap();
    assert_eq!(reader.mode(), LockMode::Read);
    reader.extend().await.unwrap();
    reader.release().await.unwrap();
}
}

on_both_backends! {
/// A hold released before its first renewal is due costs no task: holding many at
/// once adds no task per hold to the runtime.
async fn holds_released_before_their_first_renewal_cost_no_task(backend: Backend) {
    let client = backend.client().await;
    // Renewals would be due a second after each acquire: far beyond these holds.
    let lease = Duration::from_secs(3);
    let options = LockOptions::default().read_lease(lease).write_lease(lease);
    let group = unique_name("short");
    let locks: Vec<RwLock> = (0..50)
        .map(|i| client.rwlock_with(format!("{group}-{i}"), options.clone()))
        .collect();
    // Connections made, the renewal queue running.
    for lock in &locks {
        lock.try_write().await.unwrap().release().await.unwrap();
        lock.try_read().await.unwrap().release().await.unwrap();
    }
    let runtime = tokio::runtime::Handle::current().metrics();
    let before = runtime.num_alive_tasks();
    let mut guards = Vec::new();
    for lock in &locks {
        guards.push(lock.try_read().await.unwrap());
    }
    let holding = runtime.num_alive_tasks();
    for guard in guards {
        guard.release().await.unwrap();
    }
    assert!(
        holding < before + 5,
        "{} holds at once: {before} tasks alive before, {holding} while holding",
        locks.len()
    );
}
}

/// Short holds in a row send one acquire and one release each, no renewal.
/// Redis-only: counts the scripts the server ran (COMMANDSTATS).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_released_before_their_first_renewal_send_no_renewal() {
    let server = blocking(LocalRedis::standalone);
    let node = server.nodes[0].clone();
    let client = LockClient::standalone(server.url()).await.unwrap();
    // Renewals would be due a second after each acquire: far beyond these holds.
    let lease = Duration::from_secs(3);
    let options = LockOptions::default().read_lease(lease).write_lease(lease);
    let locks: Vec<RwLock> = (0..50)
        .map(|i| client.rwlock_with(format!("short-{i}"), options.clone()))
        .collect();
    // Scripts loaded, the renewal queue running.
    for lock in &locks {
        lock.try_write().await.unwrap().release().await.unwrap();
        lock.try_read().await.unwrap().release().await.unwrap();
    }
    blocking(|| server.raw(&node, &["CONFIG", "RESETSTAT"]));
    for lock in &locks {
        lock.try_read().await.unwrap().release().await.unwrap();
    }
    for _ in 0..4 {
        for lock in &locks {
            lock.try_write().await.unwrap().release().await.unwrap();
        }
    }
    let stats = blocking(|| server.commandstats(&node));

    let holds = 5 * locks.len() as u64;
    // Every lock script, however it is sent (a function call, or a script).
    let scripts: u64 = [
        "fcall",
        "fcall_ro",
        "evalsha",
        "evalsha_ro",
        "eval",
        "eval_ro",
    ]
    .iter()
    .filter_map(|command| stats.get(*command))
    .sum();
    assert_eq!(
        scripts,
        2 * holds,
        "{holds} short holds sent more than an acquire and a release each: {stats:?}"
    );
}

on_both_backends! {
/// Many long holds renew side by side from the one queue: after several leases
/// every hold is still on the server, and every guard's deadline has moved on.
async fn many_long_holds_renew_side_by_side(backend: Backend) {
    let client = backend.client().await;
    let lease = Duration::from_millis(900);
    let options = LockOptions::default().read_lease(lease).write_lease(lease);
    let locks: Vec<RwLock> = (0..20)
        .map(|i| client.rwlock_with(unique_name(&format!("side-by-side-{i}")), options.clone()))
        .collect();
    let mut readers = Vec::new();
    let mut writers = Vec::new();
    for (i, lock) in locks.iter().enumerate() {
        if i % 2 == 0 {
            readers.push(lock.read().await.unwrap());
        } else {
            writers.push(lock.write().await.unwrap());
        }
    }
    let first_deadline = readers[0].deadline().max(writers[0].deadline());
    tokio::time::sleep(lease * 4).await;
    for lock in &locks {
        let state = lock.state().await.unwrap();
        assert!(!state.is_free(), "{} lost its hold: {state:?}", lock.name());
    }
    for reader in &readers {
        assert!(reader.is_held() && reader.deadline() > first_deadline + lease);
    }
    for writer in &writers {
        assert!(writer.is_held() && writer.deadline() > first_deadline + lease);
    }
    for reader in readers {
        reader.release().await.unwrap();
    }
    for writer in writers {
        writer.release().await.unwrap();
    }
}
}

on_both_backends! {
/// The renewals of a client run on the runtime of the hold that first needed them.
/// When that runtime shuts down, a hold of another runtime goes on renewing there.
async fn renewals_outlive_the_runtime_that_first_ran_them(backend: Backend) {
    let client = backend.client().await;
    let lease = Duration::from_millis(900);
    let options = LockOptions::default().read_lease(lease).write_lease(lease);
    let first = client.rwlock_with(unique_name("first-runtime"), options.clone());
    let lock = client.rwlock_with(unique_name("other-runtime"), options);

    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let other = std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async move {
            // The first hold of the client: its renewals start on this runtime.
            let guard = first.write().await.unwrap();
            held_tx.send(()).unwrap();
            done_rx.await.unwrap();
            guard.release().await.unwrap();
        });
        // Shut down with the queue's driver on it.
    });
    held_rx.await.unwrap();
    let writer = lock.write().await.unwrap();
    done_tx.send(()).unwrap();
    blocking(|| other.join().unwrap());

    let until = Instant::now() + lease * 4;
    while Instant::now() < until {
        assert!(writer.is_held(), "the hold stopped renewing");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(matches!(lock.try_read().await, Err(Error::WouldBlock)));
    writer.release().await.unwrap();
}
}

//! Upgradable reads: one upgradable reader beside plain readers, writers kept out,
//! an upgrade with no writer in between, woken by the last reader's release, and
//! what cancellation and lost holds leave behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redis_rwlock::{Error, LockOptions};
use tokio::time::{Instant, sleep, timeout};

use common::{
    LocalRedis, OriginalHash, capture_warnings, cluster_client, held_by_nobody, raw_cluster,
    spawn_writer, standalone_client, unique_name, wait_for, warnings_about,
};

/// Far below the re-check timer (at least 500 ms): only a message wakes a waiter
/// this soon.
const WOKEN_WITHIN: Duration = Duration::from_millis(300);

on_both_backends! {
async fn an_upgradable_reader_reads_beside_readers_and_keeps_writers_and_upgradables_out(backend: Backend) {
    let client = backend.client().await;
    let lock = client.rwlock(unique_name("upgradable"));
    let upgradable = lock.upgradable_read().await.unwrap();
    let reader = lock.try_read().await.expect("a plain reader joins");
    assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));
    assert!(matches!(
        lock.try_upgradable_read().await,
        Err(Error::WouldBlock)
    ));

    let state = lock.state().await.unwrap();
    assert_eq!(state.readers.len(), 2, "{state:?}");
    let holder = state.upgradable.expect("the upgradable reader is shown");
    assert!(state.readers.contains(&holder));
    assert!(!state.upgrade_pending);

    upgradable.release().await.unwrap();
    let next = lock
        .try_upgradable_read()
        .await
        .expect("free for the next upgradable reader");
    next.release().await.unwrap();
    reader.release().await.unwrap();
    assert!(lock.state().await.unwrap().is_free());
}
}

on_both_backends! {
async fn an_upgrade_without_other_readers_is_granted_at_once_with_a_new_fencing_token(backend: Backend) {
    let client = backend.client().await;
    let lock = client.rwlock(unique_name("upgrade-now"));
    let before = lock.write().await.unwrap();
    let earlier = before.fencing_token();
    before.release().await.unwrap();

    let upgradable = lock.upgradable_read().await.unwrap();
    let writer = timeout(Duration::from_secs(1), upgradable.upgrade())
        .await
        .expect("no reader to wait for")
        .unwrap();
    assert!(writer.fencing_token() > earlier);
    let state = lock.state().await.unwrap();
    assert!(
        state.writer.is_some() && state.readers.is_empty(),
        "{state:?}"
    );
    assert!(state.upgradable.is_none());
    assert!(matches!(lock.try_read().await, Err(Error::WouldBlock)));
    writer.release().await.unwrap();
    assert!(lock.state().await.unwrap().is_free());
}
}

on_both_backends! {
async fn try_upgrade_would_block_while_readers_hold_and_keeps_the_hold(backend: Backend) {
    let client = backend.client().await;
    let lock = client.rwlock(unique_name("try-upgrade"));
    let mut upgradable = lock.upgradable_read().await.unwrap();
    let reader = lock.read().await.unwrap();
    assert!(matches!(
        upgradable.try_upgrade().await,
        Err(Error::WouldBlock)
    ));
    assert!(upgradable.is_held());
    // Nothing keeps readers out after a refused try_upgrade.
    lock.try_read().await.unwrap().release().await.unwrap();
    assert!(!lock.state().await.unwrap().upgrade_pending);

    reader.release().await.unwrap();
    let writer = upgradable.try_upgrade().await.unwrap();
    assert!(!upgradable.is_held(), "the hold moved to the write guard");
    upgradable.release().await.unwrap(); // empty: releases nothing
    assert!(writer.is_held());
    assert!(lock.state().await.unwrap().writer.is_some());
    writer.release().await.unwrap();
}
}

on_both_backends! {
async fn an_upgrade_keeps_new_readers_out_and_is_handed_over_by_the_last_reader(backend: Backend) {
    let client = backend.client().await;
    let lock = client.rwlock(unique_name("upgrade-wait"));
    let upgradable = lock.upgradable_read().await.unwrap();
    let first = lock.read().await.unwrap();
    let second = lock.read().await.unwrap();
    let upgrade = tokio::spawn(async move {
        let writer = upgradable.upgrade().await.unwrap();
        (Instant::now(), writer)
    });
    wait_for(&lock, |s| s.upgrade_pending).await;
    backend.until_subscribers(&lock, 1).await;
    assert!(
        matches!(lock.try_read().await, Err(Error::WouldBlock)),
        "a new reader passed a pending upgrade"
    );
    first.release().await.unwrap();
    sleep(Duration::from_millis(100)).await;
    assert!(!upgrade.is_finished(), "upgraded beside a reader");
    second.release().await.unwrap();
    let released = Instant::now();
    let (upgraded, writer) = upgrade.await.unwrap();
    let waited = upgraded.saturating_duration_since(released);
    assert!(
        waited < WOKEN_WITHIN,
        "the upgrade took {waited:?} after the last reader left: not woken by its message"
    );
    assert!(matches!(lock.try_read().await, Err(Error::WouldBlock)));
    writer.release().await.unwrap();
    lock.try_read().await.unwrap().release().await.unwrap();
}
}

on_both_backends! {
async fn no_writer_gets_between_an_upgradable_read_and_its_upgrade(backend: Backend) {
    let client = backend.client().await;
    let lock = client.rwlock(unique_name("upgrade-first"));
    let reader = lock.read().await.unwrap();
    let upgradable = lock.upgradable_read().await.unwrap();
    // A writer queues behind both (and keeps new readers and upgradables out).
    let writer = spawn_writer(&lock);
    wait_for(&lock, |s| s.queued_writers.len() == 1).await;
    assert!(matches!(
        lock.try_upgradable_read().await,
        Err(Error::WouldBlock)
    ));
    let upgrade = tokio::spawn(async move { upgradable.upgrade().await.unwrap() });
    wait_for(&lock, |s| s.upgrade_pending).await;
    reader.release().await.unwrap();
    // The upgrade goes first: it already kept the queued writer out.
    let upgraded = upgrade.await.unwrap();
    let fence = upgraded.fencing_token();
    let state = lock.state().await.unwrap();
    assert_eq!(state.queued_writers.len(), 1, "{state:?}");
    let released = Instant::now();
    upgraded.release().await.unwrap();
    let writer_entered = writer.await.unwrap();
    assert!(writer_entered >= released);
    let next = lock.write().await.unwrap();
    assert!(next.fencing_token() > fence);
    next.release().await.unwrap();
}
}

on_both_backends! {
async fn the_next_upgradable_reader_is_woken_when_the_upgradable_hold_ends(backend: Backend) {
    let client = backend.client().await;
    let lock = client.rwlock(unique_name("upgradable-next"));
    for how in ["release", "downgrade"] {
        let first = lock.upgradable_read().await.unwrap();
        let waiting = tokio::spawn({
            let lock = lock.clone();
            async move {
                let guard = lock.upgradable_read().await.unwrap();
                (Instant::now(), guard)
            }
        });
        backend.until_subscribers(&lock, 1).await;
        let ended = Instant::now();
        let plain = match how {
            "release" => {
                first.release().await.unwrap();
                None
            }
            _ => Some(first.downgrade().await.unwrap()),
        };
        let (entered, second) = waiting.await.unwrap();
        let waited = entered.saturating_duration_since(ended);
        assert!(waited < WOKEN_WITHIN, "{how}: woken after {waited:?}");
        let state = lock.state().await.unwrap();
        let token = state.upgradable.and_then(|holder| holder.token);
        assert!(token.is_some());
        if let Some(plain) = plain {
            assert!(plain.is_held(), "the downgraded hold reads on");
            assert_eq!(state.readers.len(), 2);
            plain.release().await.unwrap();
        }
        second.release().await.unwrap();
    }
}
}

on_both_backends! {
async fn an_upgrade_that_times_out_or_is_dropped_lets_readers_in_at_once(backend: Backend) {
    let client = backend.client().await;
    let name = unique_name("upgrade-cancel");
    let limited = client.rwlock_with(
        &name,
        LockOptions::default().wait_timeout(Duration::from_millis(300)),
    );
    let lock = client.rwlock(&name);
    for how in ["timeout", "dropped"] {
        let reader = lock.read().await.unwrap();
        let outcome = match how {
            "timeout" => {
                let upgradable = limited.upgradable_read().await.unwrap();
                upgradable.upgrade().await.map(drop)
            }
            _ => {
                let upgradable = lock.upgradable_read().await.unwrap();
                match timeout(Duration::from_millis(300), upgradable.upgrade()).await {
                    Ok(result) => result.map(drop),
                    Err(_) => Err(Error::Timeout {
                        lock: lock.name().to_owned(),
                        mode: redis_rwlock::Mode::Write,
                        waited: Duration::from_millis(300),
                    }),
                }
            }
        };
        assert!(matches!(outcome, Err(Error::Timeout { .. })), "{how}: {outcome:?}");
        // Far sooner than a pending upgrade would lapse on its own (about 3.3 s).
        let since = Instant::now();
        wait_for(&lock, |s| s.upgradable.is_none() && !s.upgrade_pending).await;
        assert!(since.elapsed() < Duration::from_secs(1), "{how}");
        lock.try_read().await.unwrap().release().await.unwrap();
        lock.try_upgradable_read()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        reader.release().await.unwrap();
    }
}
}

on_both_backends! {
async fn a_lost_upgradable_hold_cannot_upgrade(backend: Backend) {
    let client = backend.client().await;
    let lock = client.rwlock(unique_name("upgrade-lost"));
    let mut upgradable = lock.upgradable_read().await.unwrap();
    assert_eq!(lock.force_release().await.unwrap(), 1);
    assert!(matches!(
        upgradable.try_upgrade().await,
        Err(Error::LeaseLost { .. })
    ));
    assert!(!upgradable.is_held());
    assert!(matches!(upgradable.upgrade().await, Err(Error::LeaseLost { .. })));
    // The lock is free: nothing was granted to the lost hold.
    let state = lock.state().await.unwrap();
    assert!(held_by_nobody(&state), "{state:?}");

    // A lease that ran out locally: refused without asking Redis.
    let short = client.rwlock_with(
        unique_name("upgrade-expired"),
        LockOptions::default()
            .auto_renew(false)
            .read_lease(Duration::from_millis(200)),
    );
    let upgradable = short.upgradable_read().await.unwrap();
    sleep(Duration::from_millis(400)).await;
    assert!(matches!(upgradable.upgrade().await, Err(Error::LeaseLost { .. })));
    short.try_write().await.unwrap().release().await.unwrap();
}
}

/// Redis-only: clients of the original design work on the raw hash.
#[tokio::test]
async fn original_clients_see_a_read_hold_then_a_write_hold() {
    let client = cluster_client().await;
    let mut raw = raw_cluster().await;
    let lock = client.rwlock(unique_name("upgrade-interop"));
    let original = OriginalHash::new(lock.key().unwrap());
    let upgradable = lock.upgradable_read().await.unwrap();
    assert_eq!(original.acquire_write(&mut raw).await, None);
    let stamp = original
        .acquire_read(&mut raw)
        .await
        .expect("an original reader shares with an upgradable read");
    original.release(&mut raw, "read", stamp).await;
    let writer = upgradable.upgrade().await.unwrap();
    assert_eq!(original.acquire_read(&mut raw).await, None);
    assert_eq!(original.acquire_write(&mut raw).await, None);
    writer.release().await.unwrap();
}

/// Redis-only: a standalone server and the legacy layout (refused in memory).
#[tokio::test]
async fn upgradable_reads_work_on_a_server_and_in_the_legacy_layout() {
    let client = standalone_client().await;
    let name = unique_name("upgrade-server");
    let legacy = client.legacy_rwlock(format!("{name}:read"), format!("{name}:write"));
    for lock in [client.rwlock(&name), legacy] {
        let upgradable = lock.upgradable_read().await.unwrap();
        let reader = lock.try_read().await.unwrap();
        assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));
        let upgrade = tokio::spawn(upgradable.upgrade());
        wait_for(&lock, |s| s.upgrade_pending).await;
        reader.release().await.unwrap();
        let writer = upgrade.await.unwrap().unwrap();
        assert!(matches!(lock.try_read().await, Err(Error::WouldBlock)));
        writer.release().await.unwrap();
        assert!(lock.state().await.unwrap().is_free());
    }
}

on_both_backends! {
/// Upgradable acquires and upgrades on a contended lock, each task aborted at a
/// random point (before a request, with one in flight, while the upgrade waits,
/// while holding either mode). Nothing is left stuck: within one lease the lock is
/// free, with no pending upgrade, and readers and writers get in at once.
async fn upgrades_cancelled_at_random_points_leave_nothing_behind(backend: Backend) {
    use rand::RngExt;

    let client = backend.client().await;
    let lease = Duration::from_secs(1);
    let lock = client.rwlock_with(
        unique_name("upgrade-abort"),
        LockOptions::default().read_lease(lease).write_lease(lease),
    );
    let mut tasks = Vec::new();
    for round in 0..60u32 {
        let task = tokio::spawn({
            let lock = lock.clone();
            async move {
                match round % 3 {
                    0 => {
                        let _reader = lock.read().await.unwrap();
                        sleep(Duration::from_millis(2)).await;
                    }
                    1 => {
                        let upgradable = lock.upgradable_read().await.unwrap();
                        let _writer = upgradable.upgrade().await.unwrap();
                        std::future::pending::<()>().await;
                    }
                    _ => {
                        let mut upgradable = lock.upgradable_read().await.unwrap();
                        if let Ok(_writer) = upgradable.try_upgrade().await {
                            std::future::pending::<()>().await;
                        }
                        std::future::pending::<()>().await;
                    }
                }
            }
        });
        let delay = rand::rng().random_range(0..3_000u64);
        sleep(Duration::from_micros(delay)).await;
        task.abort();
        tasks.push(task);
    }
    for task in tasks {
        let _ = task.await;
    }
    let cancelled = Instant::now();
    wait_for(&lock, |s| {
        s.is_free() && s.upgradable.is_none() && !s.upgrade_pending
    })
    .await;
    assert!(cancelled.elapsed() < lease + Duration::from_millis(500));
    let started = Instant::now();
    lock.try_write().await.unwrap().release().await.unwrap();
    lock.try_upgradable_read()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    lock.try_read().await.unwrap().release().await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(500));
}
}

on_both_backends! {
/// A reader that vanished without releasing holds an upgrade up only until its
/// lease ends, although the upgrader's own renewals keep the readers' latest
/// deadline moving.
async fn an_upgrade_is_not_held_up_by_a_reader_that_vanished(backend: Backend) {
    let client = backend.client().await;
    let name = unique_name("upgrade-vanished");
    // The upgrader renews every half second, before the vanished reader expires.
    let lock = client.rwlock_with(
        &name,
        LockOptions::default().read_lease(Duration::from_millis(1500)),
    );
    let vanishing = client.rwlock_with(
        &name,
        LockOptions::default()
            .read_lease(Duration::from_secs(1))
            .auto_renew(false),
    );
    let upgradable = lock.upgradable_read().await.unwrap();
    std::mem::forget(vanishing.read().await.unwrap()); // never released
    let started = Instant::now();
    let writer = timeout(Duration::from_secs(5), upgradable.upgrade())
        .await
        .expect("the upgrade still waits, long after the vanished reader's lease")
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert!(matches!(lock.try_read().await, Err(Error::WouldBlock)));
    writer.release().await.unwrap();
    let state = lock.state().await.unwrap();
    assert!(state.is_free(), "{state:?}");
}
}

/// A renewal of the upgradable hold that reaches Redis right behind the upgrade
/// finds the read hold gone: that is the upgrade done, not a lost lease, and
/// nothing warns. CLIENT PAUSE holds the upgrade until the renewal (due a third
/// of the lease after the grant) is sent too; both answers then come back
/// together, and on two worker threads the renewal's may be read while the
/// upgrade's is. A few rounds, since that order is up to the scheduler.
/// Redis-only: CLIENT PAUSE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_answered_right_after_the_upgrade_is_no_lost_lease() {
    capture_warnings();
    let server = LocalRedis::standalone();
    let client = redis_rwlock::LockClient::standalone(server.url())
        .await
        .unwrap();
    let mut raw = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let lease = Duration::from_millis(1200);
    for round in 0..10 {
        let name = unique_name(&format!("renewal-behind-upgrade-{round}"));
        let lock = client.rwlock_with(&name, LockOptions::default().read_lease(lease));
        let upgradable = lock.upgradable_read().await.unwrap();
        let granted = Instant::now();
        let () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(700)
            .arg("WRITE")
            .query_async(&mut raw)
            .await
            .unwrap();
        let writer = upgradable.upgrade().await.unwrap();
        assert!(
            granted.elapsed() > lease / 3,
            "the upgrade was answered before the renewal was due"
        );
        assert!(writer.is_held());
        writer.release().await.unwrap();
        assert_eq!(warnings_about(&name), Vec::<String>::new());
    }
}

//! Cancellation: a task dropped in the middle of `read()`/`write()` (a timeout
//! around it, or `JoinHandle::abort`) leaves no hold beyond one lease and no queued
//! writer intent that keeps others waiting.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use rand::RngExt;
use redis_rwlock::{LockClient, LockOptions, RwLock};
use tokio::time::{Instant, sleep, timeout};

use common::{
    LocalRedis, Paused, blocking, panics_outside_tests, spawn_writer, unique_name, wait_for,
};

/// How soon a cancelled waiter's queue place must be gone: far less than the life
/// of an abandoned intent (about 3.3 s), so only a withdrawal passes.
const WITHDRAWN_WITHIN: Duration = Duration::from_millis(1000);

/// Polls the lock until nobody holds or queues; returns how long that took.
async fn until_idle(lock: &RwLock, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let state = lock.state().await.unwrap();
        if state.is_free() && state.queued_writers.is_empty() {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "still held or queued after {limit:?}: {state:?}"
        );
        sleep(Duration::from_millis(10)).await;
    }
}

on_both_backends! {
/// A writer queued behind a holder is cancelled, by a timeout around `write()` and
/// by aborting its task: its queue place is withdrawn at once, and the next writer
/// is served by the release message as soon as the holder leaves.
async fn a_writer_cancelled_while_waiting_leaves_no_queue_place(backend: Backend) {
    let client = backend.client().await;
    for how in ["timeout", "abort"] {
        let lock = client.rwlock_with(
            unique_name(&format!("cancel-{how}")),
            LockOptions::default().write_lease(Duration::from_secs(30)),
        );
        let holder = lock.write().await.unwrap();
        let cancelled = tokio::spawn({
            let lock = lock.clone();
            async move { timeout(Duration::from_millis(1500), lock.write()).await }
        });
        wait_for(&lock, |s| s.queued_writers.len() == 1).await;
        backend.until_subscribers(&lock, 1).await;
        if how == "abort" {
            cancelled.abort();
            assert!(cancelled.await.unwrap_err().is_cancelled());
        } else {
            assert!(
                cancelled.await.unwrap().is_err(),
                "the write was not cancelled"
            );
        }
        let withdrawn = until_idle_queue(&lock).await;
        println!("{how}: queue place withdrawn {withdrawn:?} after the cancellation");
        assert!(
            withdrawn < WITHDRAWN_WITHIN,
            "{how}: withdrawn after {withdrawn:?}"
        );

        // The next writer is first in line and is woken by the release.
        let next = spawn_writer(&lock);
        wait_for(&lock, |s| s.queued_writers.len() == 1).await;
        backend.until_subscribers(&lock, 1).await;
        let released = Instant::now();
        holder.release().await.unwrap();
        let served = timeout(Duration::from_secs(5), next)
            .await
            .unwrap()
            .unwrap();
        let gap = served.saturating_duration_since(released);
        println!("{how}: the next writer got in {gap:?} after the release");
        assert!(
            gap < Duration::from_millis(200),
            "{how}: next writer waited {gap:?}"
        );
        until_idle(&lock, Duration::from_secs(1)).await;
    }
}
}

/// How long until the lock has no queued writer.
async fn until_idle_queue(lock: &RwLock) -> Duration {
    let started = Instant::now();
    loop {
        let state = lock.state().await.unwrap();
        if state.queued_writers.is_empty() {
            return started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{state:?}");
        sleep(Duration::from_millis(10)).await;
    }
}

on_both_backends! {
/// A reader waiting behind a writer is aborted: when the writer leaves, no read
/// hold appears, and a writer gets in at once.
async fn a_reader_cancelled_while_waiting_leaves_no_hold(backend: Backend) {
    let client = backend.client().await;
    let lock = client.rwlock(unique_name("cancel-read"));
    let holder = lock.write().await.unwrap();
    let reader = tokio::spawn({
        let lock = lock.clone();
        async move { lock.read().await }
    });
    backend.until_subscribers(&lock, 1).await;
    wait_for(&lock, |s| s.waiting_readers.len() == 1).await;
    reader.abort();
    assert!(reader.await.unwrap_err().is_cancelled());
    // The withdrawal runs in the background: the reader leaves the line before the
    // writer leaves (in memory, a release right after the abort can come first,
    // hand the line a hold, and the withdrawal then ends it a moment later).
    wait_for(&lock, |s| s.waiting_readers.is_empty()).await;
    holder.release().await.unwrap();
    // Nothing shows up for a while (a reader woken by the release would have).
    let watch = Instant::now();
    while watch.elapsed() < Duration::from_millis(500) {
        let state = lock.state().await.unwrap();
        assert!(state.is_free(), "a cancelled reader holds: {state:?}");
        sleep(Duration::from_millis(20)).await;
    }
    lock.try_write().await.unwrap().release().await.unwrap();
}

/// Many acquires on a contended lock, each cancelled at a random point: before
/// its request is sent, while it is in flight (granted but not yet returned), while
/// waiting, or while holding. Afterwards the lock is free and nobody is queued
/// within one lease, and a writer gets in at once.
async fn acquires_cancelled_at_random_points_leave_nothing_behind(backend: Backend) {
    let panics = panics_outside_tests();
    let client = backend.client().await;
    let lease = Duration::from_secs(1);
    let lock = client.rwlock_with(
        unique_name("cancel-random"),
        LockOptions::default().read_lease(lease).write_lease(lease),
    );
    let mut tasks = Vec::new();
    let mut granted = 0;
    for round in 0..60u32 {
        let task = tokio::spawn({
            let lock = lock.clone();
            async move {
                let write = round % 3 != 0;
                if write {
                    let _guard = lock.write().await.unwrap();
                    std::future::pending::<()>().await;
                } else {
                    let _guard = lock.read().await.unwrap();
                    std::future::pending::<()>().await;
                }
            }
        });
        let delay = rand::rng().random_range(0..2_000u64);
        sleep(Duration::from_micros(delay)).await;
        task.abort();
        tasks.push(task);
        if round % 10 == 9 {
            // Let some holds and waits build up between bursts of cancellations.
            granted += u32::from(lock.state().await.unwrap().mode().is_some());
        }
    }
    for task in tasks {
        let result = task.await;
        assert!(result.unwrap_err().is_cancelled(), "a task failed");
    }
    let cancelled = Instant::now();
    until_idle(&lock, lease + Duration::from_millis(500)).await;
    println!(
        "60 cancelled acquires (held at {granted} of 6 checks between them): \
         idle {:?} after the last cancellation",
        cancelled.elapsed()
    );
    let started = Instant::now();
    lock.try_write().await.unwrap().release().await.unwrap();
    lock.try_read().await.unwrap().release().await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(500));
    assert_eq!(panics_outside_tests(), panics, "something panicked");
}
}

/// Resumes a frozen server.
type Resume = Box<dyn FnOnce() + Send>;
/// Freezes the lock's server; returns how to resume it.
type Freeze = Box<dyn FnOnce() -> Resume + Send>;

/// Takes a write hold of `lock` and drops its downgrade at `point`: before its
/// first poll, after it, or (given `freeze`, which stops the lock's server until
/// the returned `resume` runs) while its request waits, to run after the future is
/// gone. The lock must be free soon after, long before its 30 s lease would end it.
async fn drop_a_downgrade(lock: &RwLock, point: &str, freeze: Option<Freeze>) {
    let writer = lock.write().await.unwrap();
    let mut downgrade = Box::pin(writer.downgrade());
    match point {
        "first poll" => {
            std::future::poll_fn(|cx| {
                let _ = downgrade.as_mut().poll(cx);
                Poll::Ready(())
            })
            .await;
            drop(downgrade);
        }
        "in flight" => {
            let resume = freeze.expect("a way to freeze the server")();
            let sent = timeout(Duration::from_millis(300), &mut downgrade).await;
            assert!(sent.is_err(), "the downgrade finished on a frozen server");
            drop(downgrade);
            resume();
        }
        _ => drop(downgrade),
    }
    let freed = until_idle(lock, Duration::from_secs(6)).await;
    println!("{point}: free {freed:?} after the downgrade was dropped");
}

on_both_backends! {
/// A downgrade dropped before its first poll or after it releases the hold in the
/// background, in whichever mode it is by then (in memory also one whose request
/// waits on a store that stopped answering: on Redis that is the next test's).
async fn a_downgrade_dropped_midway_releases_the_hold(backend: Backend) {
    let client = backend.client().await;
    let lease = Duration::from_secs(30);
    let mut points = vec!["unpolled", "first poll"];
    if backend.store().is_some() {
        points.push("in flight");
    }
    for point in points {
        let lock = client.rwlock_with(
            unique_name("cancel-downgrade"),
            LockOptions::default().read_lease(lease).write_lease(lease),
        );
        let freeze = backend.store().cloned().map(|store| {
            Box::new(move || {
                store.stop_answering(Duration::from_secs(1));
                Box::new(|| ()) as Resume
            }) as Freeze
        });
        drop_a_downgrade(&lock, point, freeze).await;
    }
}

/// An acquire future that queued and is then dropped/// An acquire future that queued and is then dropped on a thread outside any
/// runtime still withdraws its queue place, on the runtime it started on.
async fn an_acquire_dropped_outside_a_runtime_withdraws_its_queue_place(backend: Backend) {
    let client = backend.client().await;
    let lock = client.rwlock_with(
        unique_name("cancel-elsewhere"),
        LockOptions::default().write_lease(Duration::from_secs(30)),
    );
    let holder = lock.write().await.unwrap();
    let mut waiter = Box::pin(lock.write());
    let deadline = Instant::now() + Duration::from_secs(5);
    while lock.state().await.unwrap().queued_writers.is_empty() {
        assert!(
            timeout(Duration::from_millis(20), &mut waiter)
                .await
                .is_err(),
            "the waiter got the lock"
        );
        assert!(Instant::now() < deadline, "the waiter never queued");
    }
    std::thread::spawn(move || drop(waiter)).join().unwrap();
    let withdrawn = until_idle_queue(&lock).await;
    assert!(
        withdrawn < WITHDRAWN_WITHIN,
        "withdrawn after {withdrawn:?}"
    );
    holder.release().await.unwrap();
}
}

/// A downgrade whose script waits on a frozen master (SIGSTOP), dropped meanwhile,
/// releases the hold once the master answers. Redis-only: it freezes a node of a
/// private cluster (the in-memory half is in the test above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_dropped_in_flight_on_a_frozen_master_releases_the_hold() {
    let redis = blocking(LocalRedis::cluster);
    let client = LockClient::cluster(redis.urls()).await.unwrap();
    let lock = client.rwlock_with(
        unique_name("cancel-downgrade-frozen"),
        LockOptions::default()
            .read_lease(Duration::from_secs(30))
            .write_lease(Duration::from_secs(30)),
    );
    let master = blocking(|| redis.master_for_key(lock.key().unwrap()).clone());
    let freeze = Box::new(move || {
        let frozen = Paused::new(master.pid);
        Box::new(move || frozen.resume()) as Resume
    }) as Freeze;
    drop_a_downgrade(&lock, "in flight", Some(freeze)).await;
}

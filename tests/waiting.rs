//! Waiting without polling: writer preference, wake-ups by message, re-checks after
//! a holder vanished, and fencing tokens.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis_rwlock::{Error, Fairness, LockClient, LockOptions, RwLock};
use tokio::time::{Instant, timeout};

use common::{
    LocalRedis, assert_entered_when_the_lease_ended, spawn_writer, unique_name,
    until_subscribers_on, wait_for,
};

on_both_backends! {
async fn a_writer_is_not_starved_by_a_stream_of_readers(backend: Backend) {
    let client = backend.client().await;
    for trial in 0..5 {
        let lock = client.rwlock(unique_name(&format!("starve-{trial}")));
        let stop = Arc::new(AtomicBool::new(false));
        let mut readers = Vec::new();
        for _ in 0..8 {
            let (lock, stop) = (lock.clone(), stop.clone());
            readers.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let guard = lock.read().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    guard.release().await.unwrap();
                }
            }));
        }
        // Let the readers overlap continuously before the writer arrives.
        wait_for(&lock, |s| !s.readers.is_empty()).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = Instant::now();
        let writer = lock.write().await.unwrap();
        let waited = started.elapsed();
        writer.release().await.unwrap();
        stop.store(true, Ordering::Relaxed);
        for reader in readers {
            reader.await.unwrap();
        }
        assert!(
            waited < Duration::from_millis(100),
            "trial {trial}: writer waited {waited:?}"
        );
    }
}
}

on_both_backends! {
async fn reader_preference_lets_readers_pass_a_waiting_writer(backend: Backend) {
    let client = backend.client().await;
    let name = unique_name("reader-pref");
    let lock = client.rwlock_with(
        &name,
        LockOptions::default().fairness(Fairness::ReaderPreferred),
    );
    let reader = lock.read().await.unwrap();
    let writer = tokio::spawn({
        let lock = lock.clone();
        async move { lock.write().await }
    });
    wait_for(&lock, |s| s.queued_writers.len() == 1).await;
    lock.try_read()
        .await
        .expect("a reader-preferred reader waited")
        .release()
        .await
        .unwrap();
    // A writer-preferred reader on the same lock defers.
    assert!(matches!(
        client.rwlock(&name).try_read().await,
        Err(Error::WouldBlock)
    ));
    reader.release().await.unwrap();
    let writer = timeout(Duration::from_secs(5), writer)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    writer.release().await.unwrap();
}
}

on_both_backends! {
async fn writers_are_served_in_arrival_order(backend: Backend) {
    let client = backend.client().await;
    let lock = client.rwlock(unique_name("fifo"));
    let holder = lock.write().await.unwrap();
    let (order_tx, mut order_rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..4 {
        let (waiter, order_tx) = (lock.clone(), order_tx.clone());
        tokio::spawn(async move {
            let guard = waiter.write().await.unwrap();
            order_tx.send(i).unwrap();
            guard.release().await.unwrap();
        });
        wait_for(&lock, |s| s.queued_writers.len() == i + 1).await;
    }
    holder.release().await.unwrap();
    let mut order = Vec::new();
    for _ in 0..4 {
        order.push(
            timeout(Duration::from_secs(10), order_rx.recv())
                .await
                .unwrap()
                .unwrap(),
        );
    }
    assert_eq!(order, [0, 1, 2, 3]);
}
}

on_both_backends! {
/// A release hands the lock to the first queued writer in the same script: the
/// lock is the waiter's (with a short first lease) the moment the release returns,
/// and the waiter then holds without another acquire script.
async fn a_release_hands_the_lock_to_the_first_queued_writer(backend: Backend) {
    let client = backend.client().await;
    let lock = client.rwlock(unique_name("hand-over"));
    let holder = lock.write().await.unwrap();
    let first_fence = holder.fencing_token();
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.write().await.unwrap() })
    };
    wait_for(&lock, |s| s.queued_writers.len() == 1).await;
    let queued = lock.state().await.unwrap().queued_writers[0].clone();

    let released = std::time::Instant::now();
    holder.release().await.unwrap();
    let state = lock.state().await.unwrap();
    let looked_after = released.elapsed();
    let writer = state
        .writer
        .expect("the release left the lock to the queued writer");
    assert!(writer.token.is_some());
    assert_eq!(writer.token, queued.token);
    assert!(state.queued_writers.is_empty());
    // The first lease is the queue place's lifetime, not a full write lease. The
    // waiter renews its hold a third of that lease (a second at least) after the
    // hand-over, to a full lease: on a machine so loaded that the state was read
    // later than that, the deadline seen may be the renewal's.
    let first_lease = writer.until - state.server_time;
    if looked_after < Duration::from_millis(900) {
        assert!(
            first_lease <= chrono::Duration::milliseconds(3300),
            "{first_lease}"
        );
    } else {
        eprintln!("the state was read {looked_after:?} after the release: first lease not judged");
    }

    let guard = timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(guard.is_held());
    assert!(guard.fencing_token() > first_fence);
    guard.release().await.unwrap();
}
}

on_both_backends! {
/// The holder's lease is long, so the waiter's re-check timer runs at its longest
/// (about a second, never under 500 ms): acquiring within 200 ms of the release
/// (room for a loaded machine), trial after trial, can only come from the release
/// message.
async fn a_waiter_is_woken_by_the_release_message_not_a_timer(backend: Backend) {
    let client = backend.client().await;
    for trial in 0..5 {
        let lock = client.rwlock(unique_name(&format!("woken-{trial}")));
        let holder = lock.write().await.unwrap();
        let waiter = spawn_writer(&lock);
        wait_for(&lock, |s| s.queued_writers.len() == 1).await;
        // Release at a varying point of the waiter's re-check period.
        tokio::time::sleep(Duration::from_millis(100 + 170 * trial)).await;
        let released = Instant::now();
        holder.release().await.unwrap();
        let acquired = timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        let gap = acquired.saturating_duration_since(released);
        assert!(
            gap < Duration::from_millis(200),
            "trial {trial}: woken after {gap:?}"
        );
    }
}
}

on_both_backends! {
async fn a_vanished_holder_is_replaced_soon_after_its_lease_ends(backend: Backend) {
    let lease = Duration::from_secs(2);
    let (lock, acquired) = vanished_writer(&backend, "vanished", lease).await;
    let next = timeout(lease * 3, lock.write()).await.unwrap().unwrap();
    let waited = acquired.elapsed();
    assert_entered_when_the_lease_ended(waited, lease);
    next.release().await.unwrap();
}
}

on_both_backends! {
async fn downgrade_admits_waiting_readers_and_still_excludes_writers(backend: Backend) {
    let client = backend.client().await;
    // Each reader a hold of its own, as if each were another client's.
    let unshared = LockOptions::default().share_reads(false);
    let lock = client.rwlock_with(unique_name("downgrade"), unshared);
    let writer = lock.write().await.unwrap();
    let fence = writer.fencing_token();
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let lock = lock.clone();
            tokio::spawn(async move { lock.read().await })
        })
        .collect();
    // Give the readers time to queue behind the writer.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(readers.iter().all(|r| !r.is_finished()));

    let reader = writer.downgrade().await.unwrap();
    assert!(reader.is_held());
    let started = Instant::now();
    let mut others = Vec::new();
    for r in readers {
        others.push(
            timeout(Duration::from_secs(5), r)
                .await
                .unwrap()
                .unwrap()
                .unwrap(),
        );
    }
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "readers were not woken"
    );
    assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));
    let state = lock.state().await.unwrap();
    assert_eq!(state.readers.len(), 4);
    assert!(state.writer.is_none());
    assert_eq!(state.fencing_token, fence);
    reader.release().await.unwrap();
    for other in others {
        other.release().await.unwrap();
    }
    lock.try_write().await.unwrap().release().await.unwrap();
}
}

on_both_backends! {
async fn fencing_tokens_strictly_increase_also_across_key_expiry(backend: Backend) {
    let client = backend.client().await;
    let lock = client.rwlock(unique_name("fence"));
    let mut last = 0;
    for _ in 0..1000 {
        let writer = lock.try_write().await.unwrap();
        assert!(writer.fencing_token() > last);
        last = writer.fencing_token();
        writer.release().await.unwrap();
    }
    // The key disappears (expiry, eviction or an operator): tokens keep rising.
    for _ in 0..20 {
        backend.delete_lock(&lock).await;
        let writer = lock.try_write().await.unwrap();
        assert!(writer.fencing_token() > last);
        last = writer.fencing_token();
        writer.release().await.unwrap();
    }
}
}

on_both_backends! {
/// Readers that only a queued writer kept out (writer preference) are woken as soon
/// as that writer leaves the queue (here: its task is aborted), not by their re-check
/// timer (half a second or more after their last attempt).
async fn readers_kept_out_by_a_queued_writer_are_woken_when_the_queue_empties(backend: Backend) {
    let client = backend.client().await;
    let other = backend.client().await;
    let name = unique_name("queue-empties");
    let lock = client.rwlock(&name);
    let first = lock.read().await.unwrap();
    let writer = spawn_writer(&lock);
    wait_for(&lock, |s| s.queued_writers.len() == 1).await;
    let reader = tokio::spawn({
        let lock = other.rwlock(&name);
        async move {
            let guard = lock.read().await.unwrap();
            (Instant::now(), guard)
        }
    });
    // The reader has been refused, subscribed and refused again: its timer is set.
    backend.until_subscribers(&lock, 2).await;
    writer.abort();
    let withdrawn = Instant::now();
    let (granted, second) = timeout(Duration::from_secs(5), reader)
        .await
        .unwrap()
        .unwrap();
    let gap = granted.saturating_duration_since(withdrawn);
    println!("the reader got in {gap:?} after the queued writer left");
    assert!(
        gap < Duration::from_millis(250),
        "the reader waited {gap:?} after the queue emptied"
    );
    second.release().await.unwrap();
    first.release().await.unwrap();
}
}

/// `n` plain readers of `client` that wait for `lock`, spawned now.
fn spawn_readers(
    lock: &redis_rwlock::RwLock,
    n: usize,
) -> Vec<tokio::task::JoinHandle<redis_rwlock::RwLockReadGuard>> {
    (0..n)
        .map(|_| {
            let lock = lock.clone();
            tokio::spawn(async move { lock.read().await.unwrap() })
        })
        .collect()
}

/// The readers' guards, each within `limit`.
async fn joined(
    readers: Vec<tokio::task::JoinHandle<redis_rwlock::RwLockReadGuard>>,
    limit: Duration,
) -> Vec<redis_rwlock::RwLockReadGuard> {
    let mut guards = Vec::new();
    for reader in readers {
        guards.push(timeout(limit, reader).await.unwrap().unwrap());
    }
    guards
}

async fn release_all(guards: Vec<redis_rwlock::RwLockReadGuard>) {
    for guard in guards {
        guard.release().await.unwrap();
    }
}

/// Script calls (`FCALL`) `server` has run since its statistics were reset.
async fn script_calls(server: &Arc<LocalRedis>) -> u64 {
    let server = server.clone();
    tokio::task::spawn_blocking(move || {
        let stats = server.commandstats(&server.nodes[0]);
        stats.get("fcall").copied().unwrap_or(0)
    })
    .await
    .unwrap()
}

on_both_backends! {
/// A writer holds and 20 readers of two clients wait behind it, in line; the
/// writer's release lets them all in at once (the number of scripts that takes is
/// counted on Redis by the next test).
async fn readers_behind_a_writer_wait_in_line_and_its_release_lets_them_all_in(backend: Backend) {
    let clients = [backend.client().await, backend.client().await];
    let name = unique_name("readers-in-line");
    let locks = unshared_locks(&clients, &name);
    let writer = locks[0].write().await.unwrap();
    let mut readers = spawn_readers(&locks[0], 10);
    readers.extend(spawn_readers(&locks[1], 10));
    backend.until_subscribers(&locks[0], 2).await;
    wait_for(&locks[0], |s| s.waiting_readers.len() == 20).await;
    let released = Instant::now();
    writer.release().await.unwrap();
    let guards = joined(readers, Duration::from_secs(5)).await;
    let all_in = released.elapsed();
    println!("20 readers behind a writer: in {all_in:?} after its release");
    assert!(
        all_in < Duration::from_millis(400),
        "the readers got in {all_in:?} after the release"
    );
    let lock = &locks[0];
    let state = lock.state().await.unwrap();
    assert_eq!(state.readers.len(), 20);
    assert!(state.waiting_readers.is_empty());
    release_all(guards).await;
    assert!(lock.state().await.unwrap().is_free());
}

/// The readers in line behind a writer that vanished (no release, no message) get
/// in once its lease ends: the first re-check after it lets the whole batch in,
/// and tells the others.
async fn readers_in_line_get_in_once_a_vanished_writers_lease_ends(backend: Backend) {
    let lease = Duration::from_secs(2);
    let (lock, acquired) = vanished_writer(&backend, "in-line-vanished", lease).await;
    let readers = spawn_readers(&lock, 20);
    let guards = joined(readers, lease * 3).await;
    let waited = acquired.elapsed();
    println!("20 readers in after {waited:?} (lease {lease:?})");
    assert!(
        waited < lease + Duration::from_millis(1500),
        "the last reader got in {waited:?} after the writer's {lease:?} lease began"
    );
    release_all(guards).await;
}
}

/// A writer holds and 20 readers of two clients wait behind it: each reader sends
/// one acquire, which puts it in line (in one batch, since no writer queued
/// between them), and no re-check before the writer's release (well within a
/// re-check period); that release grants all 20 in its own script and tells them
/// so: they hold without asking again. Then each sends its release: 2 scripts per
/// read, on a private server so the count is this test's alone. Redis-only: it
/// counts the scripts the server ran (COMMANDSTATS). (The first waiter
/// of a client that is not yet subscribed asks once more after subscribing, in
/// case the release slipped in before: counted apart.)
#[tokio::test]
async fn readers_in_line_cost_one_acquire_each_and_the_writers_release() {
    let server = Arc::new(LocalRedis::standalone());
    let clients = [
        LockClient::standalone(server.url()).await.unwrap(),
        LockClient::standalone(server.url()).await.unwrap(),
    ];
    let name = unique_name("readers-in-line");
    let locks = unshared_locks(&clients, &name);
    let writer = locks[0].write().await.unwrap();
    let mut readers = spawn_readers(&locks[0], 1);
    readers.extend(spawn_readers(&locks[1], 1));
    until_subscribers_on(&server, &locks[0], 2).await;
    wait_for(&locks[0], |s| s.waiting_readers.len() == 2).await;
    let before = script_calls(&server).await;
    readers.extend(spawn_readers(&locks[0], 9));
    readers.extend(spawn_readers(&locks[1], 9));
    wait_for(&locks[0], |s| s.waiting_readers.len() == 20).await;
    let released = Instant::now();
    writer.release().await.unwrap();
    let guards = joined(readers, Duration::from_secs(5)).await;
    let all_in = released.elapsed();
    let sent = script_calls(&server).await - before;
    println!("20 readers behind a writer: in {all_in:?} after its release; {sent} scripts");
    assert!(
        all_in < Duration::from_millis(400),
        "the readers got in {all_in:?} after the release"
    );
    // 18 acquires and the writer's release; a re-check or a refused read would add more.
    assert_eq!(sent, 19, "scripts for 18 waiting readers and one release");
    let lock = &locks[0];
    let state = lock.state().await.unwrap();
    assert_eq!(state.readers.len(), 20);
    assert!(state.waiting_readers.is_empty());
    release_all(guards).await;
    assert!(lock.state().await.unwrap().is_free());
}

on_both_backends! {
/// Fair both ways: readers that wait behind a queued writer go in before a writer
/// that queued after them, and together. Reader R0 holds; W1 queues; readers of two
/// clients wait in line behind W1; W2 queues behind them. R0's release hands the
/// lock to W1; W1's release lets the readers in while W2 still waits; their
/// releases hand it to W2.
async fn readers_in_line_go_before_the_writers_that_queued_after_them(backend: Backend) {
    let (a, b) = (backend.client().await, backend.client().await);
    let name = unique_name("phase-fair");
    // Each reader a hold of its own, as if each were another client's.
    let unshared = LockOptions::default().share_reads(false);
    let lock = a.rwlock_with(&name, unshared.clone());
    let first = lock.read().await.unwrap();
    let w1 = spawn_writer(&b.rwlock(&name));
    wait_for(&lock, |s| s.queued_writers.len() == 1).await;
    let mut readers = spawn_readers(&lock, 3);
    readers.extend(spawn_readers(&b.rwlock_with(&name, unshared), 3));
    wait_for(&lock, |s| s.waiting_readers.len() == 6).await;
    let w2 = spawn_writer(&a.rwlock(&name));
    wait_for(&lock, |s| s.queued_writers.len() == 2).await;
    first.release().await.unwrap();
    let w1_at = timeout(Duration::from_secs(5), w1).await.unwrap().unwrap();
    let guards = joined(readers, Duration::from_secs(5)).await;
    let readers_in = Instant::now();
    assert!(
        !w2.is_finished(),
        "the writer that queued after the readers got in before them"
    );
    let state = lock.state().await.unwrap();
    assert_eq!(state.readers.len(), 6, "the six readers hold together");
    assert_eq!(state.queued_writers.len(), 1, "W2 still waits");
    release_all(guards).await;
    let w2_at = timeout(Duration::from_secs(5), w2).await.unwrap().unwrap();
    assert!(w1_at < readers_in && readers_in < w2_at);
}
}

on_both_backends! {
/// The starvation that fairness prevents: four writers (on another client, and on
/// the reader's own) loop write -> hold 5 ms -> release -> write again, and a
/// reader asks for a read with a 3 s wait, ten times: every read is granted, each
/// within a writer's hold or two.
async fn a_reader_is_not_starved_by_a_stream_of_writers(backend: Backend) {
    let (mine, other) = (backend.client().await, backend.client().await);
    let name = unique_name("writer-stream");
    let options = LockOptions::default().wait_timeout(Duration::from_secs(3));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|i| {
            let client = if i % 2 == 0 { &mine } else { &other };
            let lock = client.rwlock_with(&name, options.clone());
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut writes = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let guard = lock.write().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    guard.release().await.unwrap();
                    writes += 1;
                }
                writes
            })
        })
        .collect();
    let reader = mine.rwlock_with(&name, options);
    let mut worst = Duration::ZERO;
    for _ in 0..10 {
        let asked = Instant::now();
        let guard = reader.read().await.expect("a read behind the writers");
        worst = worst.max(asked.elapsed());
        guard.release().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut writes = 0;
    for writer in writers {
        writes += timeout(Duration::from_secs(5), writer)
            .await
            .unwrap()
            .unwrap();
    }
    println!("10 reads granted, the longest wait {worst:?}; {writes} writes meanwhile");
    assert!(writes >= 20, "the writers hardly wrote: {writes}");
    assert!(
        worst < Duration::from_secs(1),
        "a read waited {worst:?} behind the writers"
    );
}
}

on_both_backends! {
/// A task that holds a read and reads again while a writer is queued: a plain
/// `read()` waits in line behind that writer, which waits for the first hold (a
/// deadlock until the wait limit, as with tokio's `RwLock`); `read_recursive()`
/// does not wait in line and is granted at once.
async fn a_nested_read_deadlocks_behind_a_queued_writer_unless_it_is_recursive(backend: Backend) {
    let (a, b) = (backend.client().await, backend.client().await);
    let name = unique_name("nested-read");
    let limit = Duration::from_millis(1500);
    let lock = a.rwlock_with(&name, LockOptions::default().wait_timeout(limit));
    let outer = lock.read().await.unwrap();
    let writer = spawn_writer(&b.rwlock(&name));
    wait_for(&lock, |s| s.queued_writers.len() == 1).await;

    let asked = Instant::now();
    let nested = lock.read().await;
    assert!(
        matches!(nested, Err(Error::Timeout { .. })),
        "a nested read() behind the queued writer: {nested:?}"
    );
    assert!(asked.elapsed() >= limit);

    let inner = timeout(Duration::from_secs(1), lock.read_recursive())
        .await
        .expect("read_recursive() waited behind the queued writer")
        .unwrap();
    assert_eq!(lock.state().await.unwrap().readers.len(), 2);
    assert!(
        !writer.is_finished(),
        "the writer got in beside the readers"
    );
    inner.release().await.unwrap();
    outer.release().await.unwrap();
    timeout(Duration::from_secs(5), writer)
        .await
        .expect("the writer gets in after both reads")
        .unwrap();
}
}

/// The lock `name` on each of two clients, each read a hold of its own, as if each
/// reader were another client's.
fn unshared_locks(clients: &[LockClient; 2], name: &str) -> [RwLock; 2] {
    let unshared = LockOptions::default().share_reads(false);
    clients
        .each_ref()
        .map(|client| client.rwlock_with(name, unshared.clone()))
}

/// A lock whose writer took the hold with `lease` and vanished (no renewal, no
/// release, no message), and when it took it.
async fn vanished_writer(
    backend: &common::Backend,
    name: &str,
    lease: Duration,
) -> (RwLock, Instant) {
    let client = backend.client().await;
    let lock = client.rwlock_with(
        unique_name(name),
        LockOptions::default().write_lease(lease).auto_renew(false),
    );
    let acquired = Instant::now();
    std::mem::forget(lock.write().await.unwrap());
    (lock, acquired)
}

//! Waiting without polling: writer preference, wake-ups by message, re-checks after
//! a holder vanished, and fencing tokens.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use redis_rwlock::{Error, Fairness, LockClient, LockOptions};
use tokio::time::{Instant, timeout};

use common::{
    LocalRedis, assert_entered_when_the_lease_ended, cluster_client, raw_cluster, spawn_writer,
    unique_name, until_subscribers, until_subscribers_on, wait_for,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_is_not_starved_by_a_stream_of_readers() {
    let client = cluster_client().await;
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

#[tokio::test]
async fn reader_preference_lets_readers_pass_a_waiting_writer() {
    let client = cluster_client().await;
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

#[tokio::test]
async fn writers_are_served_in_arrival_order() {
    let client = cluster_client().await;
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

/// A release hands the lock to the first queued writer in the same script: the
/// lock is the waiter's (with a short first lease) the moment the release returns,
/// and the waiter then holds without another acquire script.
#[tokio::test]
async fn a_release_hands_the_lock_to_the_first_queued_writer() {
    let client = cluster_client().await;
    let mut raw = raw_cluster().await;
    let lock = client.rwlock(unique_name("hand-over"));
    let key = lock.key().unwrap().to_owned();
    let holder = lock.write().await.unwrap();
    let first_fence = holder.fencing_token();
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.write().await.unwrap() })
    };
    wait_for(&lock, |s| s.queued_writers.len() == 1).await;
    let queued = lock.state().await.unwrap().queued_writers[0].clone();

    holder.release().await.unwrap();
    let owner: Option<String> = raw.hget(&key, "w:owner").await.unwrap();
    let state = lock.state().await.unwrap();
    let writer = state
        .writer
        .expect("the release left the lock to the queued writer");
    assert!(owner.is_some());
    assert_eq!(writer.token, owner);
    assert_eq!(writer.token, queued.token);
    assert!(state.queued_writers.is_empty());
    // The first lease is the queue place's lifetime, not a full write lease.
    let first_lease = writer.until - state.server_time;
    assert!(
        first_lease <= chrono::Duration::milliseconds(3300),
        "{first_lease}"
    );

    let guard = timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(guard.is_held());
    assert!(guard.fencing_token() > first_fence);
    guard.release().await.unwrap();
}

/// The holder's lease is long, so the waiter's re-check timer runs at its longest
/// (about a second, never under 500 ms): acquiring within 200 ms of the release
/// (room for a loaded machine), trial after trial, can only come from the release
/// message.
#[tokio::test]
async fn a_waiter_is_woken_by_the_release_message_not_a_timer() {
    let client = cluster_client().await;
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

#[tokio::test]
async fn a_vanished_holder_is_replaced_soon_after_its_lease_ends() {
    let client = cluster_client().await;
    let lease = Duration::from_secs(2);
    let lock = client.rwlock_with(
        unique_name("vanished"),
        LockOptions::default().write_lease(lease).auto_renew(false),
    );
    let acquired = Instant::now();
    std::mem::forget(lock.write().await.unwrap()); // no release, no message
    let next = timeout(lease * 3, lock.write()).await.unwrap().unwrap();
    let waited = acquired.elapsed();
    assert_entered_when_the_lease_ended(waited, lease);
    next.release().await.unwrap();
}

#[tokio::test]
async fn downgrade_admits_waiting_readers_and_still_excludes_writers() {
    let client = cluster_client().await;
    let lock = client.rwlock(unique_name("downgrade"));
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

#[tokio::test]
async fn fencing_tokens_strictly_increase_also_across_key_expiry() {
    let client = cluster_client().await;
    let lock = client.rwlock(unique_name("fence"));
    let mut last = 0;
    for _ in 0..1000 {
        let writer = lock.try_write().await.unwrap();
        assert!(writer.fencing_token() > last);
        last = writer.fencing_token();
        writer.release().await.unwrap();
    }
    // The key disappears (expiry, eviction or an operator): tokens keep rising.
    let key = lock.key().unwrap();
    let mut raw = raw_cluster().await;
    for _ in 0..20 {
        let _: () = raw.del(key).await.unwrap();
        let writer = lock.try_write().await.unwrap();
        assert!(writer.fencing_token() > last);
        last = writer.fencing_token();
        writer.release().await.unwrap();
    }
}

/// Readers that only a queued writer kept out (writer preference) are woken as soon
/// as that writer leaves the queue (here: its task is aborted), not by their re-check
/// timer (half a second or more after their last attempt).
#[tokio::test]
async fn readers_kept_out_by_a_queued_writer_are_woken_when_the_queue_empties() {
    let client = cluster_client().await;
    let other = cluster_client().await;
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
    until_subscribers(&lock, 2).await;
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

/// Starts `n` plain readers of `lock` and counts the scripts `server` runs in the
/// next 2 s (time is what is measured: the scripts a second of waiting costs).
async fn readers_and_their_scripts(
    server: &Arc<LocalRedis>,
    lock: &redis_rwlock::RwLock,
    n: usize,
) -> (
    Vec<tokio::task::JoinHandle<redis_rwlock::RwLockReadGuard>>,
    u64,
) {
    let before = script_calls(server).await;
    let readers = spawn_readers(lock, n);
    tokio::time::sleep(Duration::from_secs(2)).await;
    (readers, script_calls(server).await - before)
}

/// A private server, a lock named after `prefix` through one client, and another
/// client of the same server.
async fn two_clients(prefix: &str) -> (Arc<LocalRedis>, redis_rwlock::RwLock, LockClient) {
    let server = Arc::new(LocalRedis::standalone());
    let client = LockClient::standalone(server.url()).await.unwrap();
    let other = LockClient::standalone(server.url()).await.unwrap();
    (server, client.rwlock(unique_name(prefix)), other)
}

/// Another client's upgradable reader holds `lock` (readers may enter, a writer
/// would queue), and an upgradable reader of `lock`'s client waits behind it, which
/// keeps the lock's channel subscribed in that client.
struct UpgradableReaders {
    holding: redis_rwlock::RwLockUpgradableReadGuard,
    waiting: tokio::task::JoinHandle<redis_rwlock::RwLockUpgradableReadGuard>,
}

impl UpgradableReaders {
    async fn subscribe(
        server: &Arc<LocalRedis>,
        lock: &redis_rwlock::RwLock,
        other: &LockClient,
    ) -> Self {
        let holding = other.rwlock(lock.name()).upgradable_read().await.unwrap();
        let waiting = tokio::spawn({
            let lock = lock.clone();
            async move { lock.upgradable_read().await.unwrap() }
        });
        until_subscribers_on(server, lock, 1).await;
        UpgradableReaders { holding, waiting }
    }

    /// Releases the holder; the waiting one, which gets in next (after any writer
    /// queued meanwhile), is the caller's to join.
    async fn release_holder(
        self,
    ) -> tokio::task::JoinHandle<redis_rwlock::RwLockUpgradableReadGuard> {
        self.holding.release().await.unwrap();
        self.waiting
    }
}

async fn release_upgradable(
    waiting: tokio::task::JoinHandle<redis_rwlock::RwLockUpgradableReadGuard>,
) {
    let guard = timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap();
    guard.release().await.unwrap();
}

/// What a test started sent at most 8 scripts in its 2 s (printed either way).
fn few_scripts(sent: u64, what: &str) {
    println!("{what} sent {sent} scripts in 2 s");
    assert!(sent <= 8, "{what} sent {sent} scripts in 2 s");
}

/// The waiting writer gets the lock (what kept it out is gone) and releases it;
/// then every reader gets in, and releases.
async fn writer_then_readers(
    writer: tokio::task::JoinHandle<Instant>,
    readers: Vec<tokio::task::JoinHandle<redis_rwlock::RwLockReadGuard>>,
) {
    timeout(Duration::from_secs(5), writer)
        .await
        .unwrap()
        .unwrap();
    release_all(joined(readers, Duration::from_secs(5)).await).await;
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

/// Plain readers started while a waiting writer of their client has its attempt
/// on the way would each be refused (their attempts reach the server right behind
/// the writer's, which then holds or queues), but the writer asking already tells
/// them so: they wait for the lock without asking. Here the writer queues behind
/// another client's upgradable reader; an upgradable reader of this client, also
/// waiting, keeps the lock's channel subscribed, so the writer asks subscribed.
/// The test runs on one thread: the readers start after the writer's attempt is
/// sent and before its answer is read.
#[tokio::test]
async fn readers_started_while_their_clients_writer_asks_do_not_ask() {
    let (server, lock, other) = two_clients("writer-asking").await;
    let upgradables = UpgradableReaders::subscribe(&server, &lock, &other).await;
    let before = script_calls(&server).await;
    let writer = spawn_writer(&lock);
    tokio::task::yield_now().await; // the writer sends its attempt
    let readers = spawn_readers(&lock, 20);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let sent = script_calls(&server).await - before;
    few_scripts(
        sent,
        "a queueing writer and 20 readers started while it asked",
    );
    let waiting_upgradable = upgradables.release_holder().await;
    writer_then_readers(writer, readers).await;
    release_upgradable(waiting_upgradable).await;
}

/// A waiting writer dropped while its attempt is on its way keeps its client's
/// readers out no longer than that: a reader started right after asks, and gets in
/// (at once, or once the writer's queue place, if the attempt got one, is
/// withdrawn in the background).
#[tokio::test]
async fn a_writer_dropped_while_asking_does_not_keep_its_clients_readers_out() {
    let (server, lock, other) = two_clients("writer-dropped-asking").await;
    let upgradables = UpgradableReaders::subscribe(&server, &lock, &other).await;
    let writer = spawn_writer(&lock);
    tokio::task::yield_now().await; // the writer sends its attempt
    writer.abort();
    let reader = timeout(Duration::from_secs(3), lock.read())
        .await
        .expect("a reader kept out by a writer dropped while it asked")
        .unwrap();
    reader.release().await.unwrap();
    release_upgradable(upgradables.release_holder().await).await;
}

/// A writer holds and 20 readers of one client wait behind it: once one of them
/// has been refused, the others wait for the writer's release message without
/// asking the server themselves (each would be refused, then re-check about once
/// a second). Over 2 s the server runs a handful of scripts, not the 60 or so that
/// 20 independent waiters send; the release still lets all 20 in at once. A private
/// server, so the count is this test's alone.
#[tokio::test]
async fn readers_of_one_client_share_a_refusal() {
    let server = Arc::new(LocalRedis::standalone());
    let client = LockClient::standalone(server.url()).await.unwrap();
    let lock = client.rwlock(unique_name("shared-refusal"));
    let writer = lock.write().await.unwrap();
    let mut readers = spawn_readers(&lock, 1);
    until_subscribers_on(&server, &lock, 1).await;
    let (more, sent) = readers_and_their_scripts(&server, &lock, 19).await;
    readers.extend(more);
    few_scripts(sent, "20 readers of one client behind a writer");
    let released = Instant::now();
    writer.release().await.unwrap();
    let guards = joined(readers, Duration::from_secs(5)).await;
    let all_in = released.elapsed();
    assert!(
        all_in < Duration::from_millis(400),
        "the readers got in {all_in:?} after the release"
    );
    assert_eq!(lock.state().await.unwrap().readers.len(), 20);
    release_all(guards).await;
}

/// The same readers behind a writer that vanished (no release, no message): the one
/// that asks again once the shared refusal's time is up gets in when the lease
/// ends, and the others follow within their re-check period.
#[tokio::test]
async fn readers_sharing_a_refusal_get_in_once_a_vanished_writers_lease_ends() {
    let server = Arc::new(LocalRedis::standalone());
    let client = LockClient::standalone(server.url()).await.unwrap();
    let lease = Duration::from_secs(2);
    let lock = client.rwlock_with(
        unique_name("shared-refusal-vanished"),
        LockOptions::default().write_lease(lease).auto_renew(false),
    );
    let acquired = Instant::now();
    std::mem::forget(lock.write().await.unwrap());
    let mut readers = spawn_readers(&lock, 1);
    until_subscribers_on(&server, &lock, 1).await;
    readers.extend(spawn_readers(&lock, 19));
    let guards = joined(readers, lease * 3).await;
    let waited = acquired.elapsed();
    println!("20 readers in after {waited:?} (lease {lease:?})");
    assert!(
        waited < lease + Duration::from_millis(2500),
        "the last reader got in {waited:?} after the writer's {lease:?} lease began"
    );
    release_all(guards).await;
}

/// A writer of a client waits in the queue behind another client's reader: 20
/// plain readers of the writer's client, started at once, would each be refused
/// (writer preference) and each send that attempt, but the writer's refusal already
/// told the client so: they wait for the writer's release without asking, and all
/// get in after it.
#[tokio::test]
async fn a_queued_writer_keeps_its_clients_readers_from_asking() {
    let (server, lock, other) = two_clients("writer-tells-readers").await;
    let reading = other.rwlock(lock.name()).read().await.unwrap();
    let writer = spawn_writer(&lock);
    wait_for(&lock, |s| s.queued_writers.len() == 1).await;
    until_subscribers_on(&server, &lock, 1).await;
    let (readers, sent) = readers_and_their_scripts(&server, &lock, 20).await;
    few_scripts(sent, "20 readers behind their own client's queued writer");
    reading.release().await.unwrap();
    writer_then_readers(writer, readers).await;
}

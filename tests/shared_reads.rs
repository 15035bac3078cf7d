//! Shared reads: the tasks of one client share one read hold of a lock, with no
//! request for a read that joins it; a writer elsewhere calls the hold back and is
//! not starved; every share learns when the hold is lost.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis_rwlock::{Error, LockOptions};
use tokio::time::{Instant, timeout};

use common::{LocalRedis, held_by_nobody, reader_tokens, spawn_writer, unique_name, wait_for};

on_both_backends! {
async fn the_reads_of_one_client_share_one_hold_until_the_last_leaves(backend: Backend) {
    let client = backend.client().await;
    let lock = client.rwlock(unique_name("shared"));
    let first = lock.read().await.unwrap();
    let mut others = Vec::new();
    for _ in 0..7 {
        others.push(lock.read().await.unwrap());
    }
    others.push(lock.try_read().await.expect("a try_read joins too"));
    let state = lock.state().await.unwrap();
    assert_eq!(
        state.readers.len(),
        1,
        "one hold for the process: {state:?}"
    );
    assert!(others.iter().all(|share| share.is_held()));

    first.release().await.unwrap();
    for share in others.drain(..4) {
        share.release().await.unwrap();
    }
    let state = lock.state().await.unwrap();
    assert_eq!(
        state.readers.len(),
        1,
        "the last shares still hold: {state:?}"
    );
    assert!(others.iter().all(|share| share.is_held()));
    for share in others {
        share.release().await.unwrap();
    }
    assert!(lock.state().await.unwrap().is_free());
}
}

on_both_backends! {
async fn another_client_and_a_recursive_read_hold_on_their_own(backend: Backend) {
    let client = backend.client().await;
    let other = backend.client().await;
    let name = unique_name("shared-own");
    let lock = client.rwlock(&name);
    let reader = lock.read().await.unwrap();
    let recursive = lock.read_recursive().await.unwrap();
    let elsewhere = other.rwlock(&name).read().await.unwrap();
    let different = client
        .rwlock_with(
            &name,
            LockOptions::default().read_lease(Duration::from_secs(7)),
        )
        .read()
        .await
        .unwrap();
    let state = lock.state().await.unwrap();
    assert_eq!(state.readers.len(), 4, "{state:?}");
    for guard in [reader, recursive, elsewhere, different] {
        guard.release().await.unwrap();
    }
    assert!(lock.state().await.unwrap().is_free());
}
}

on_both_backends! {
/// A lone reader's hold listens for nothing; the read that would share it first
/// looks whether a writer waits: behind a queued writer a `try_read` is refused and
/// a `read` waits its turn, as from any other client.
async fn a_read_does_not_join_a_hold_behind_a_queued_writer(backend: Backend) {
    let client = backend.client().await;
    let writers = backend.client().await;
    let name = unique_name("shared-queued");
    let lock = client.rwlock(&name);
    let first = lock.read().await.unwrap();
    let writer = spawn_writer(&writers.rwlock(&name));
    wait_for(&lock, |s| !s.queued_writers.is_empty()).await;

    assert!(matches!(lock.try_read().await, Err(Error::WouldBlock)));
    let reading = tokio::spawn({
        let lock = lock.clone();
        async move {
            let guard = lock.read().await.unwrap();
            let at = Instant::now();
            guard.release().await.unwrap();
            at
        }
    });
    first.release().await.unwrap();
    let wrote = writer.await.unwrap();
    let read = reading.await.unwrap();
    assert!(wrote <= read, "the writer went first");
}
}

on_both_backends! {
/// Sixteen tasks of one client keep a shared hold busy; a writer on another client
/// calls it back and is granted once the shares that joined before have left,
/// while the readers that come after wait behind it.
async fn a_writer_is_not_starved_by_a_process_whose_tasks_keep_reading(backend: Backend) {
    let client = backend.client().await;
    let writers = backend.client().await;
    let name = unique_name("shared-busy");
    let lock = client.rwlock(&name);
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..16 {
        let (lock, stop) = (lock.clone(), stop.clone());
        readers.push(tokio::spawn(async move {
            let mut reads = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let guard = lock.read().await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
                guard.release().await.unwrap();
                reads += 1;
            }
            reads
        }));
    }
    wait_for(&lock, |s| s.readers.len() == 1).await;
    let writer = writers.rwlock(&name);
    for _ in 0..3 {
        let asked = Instant::now();
        let guard = timeout(Duration::from_secs(3), writer.write())
            .await
            .expect("the writer is granted while the readers keep reading")
            .unwrap();
        let waited = asked.elapsed();
        assert!(waited < Duration::from_secs(2), "waited {waited:?}");
        guard.release().await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        assert!(reader.await.unwrap() > 0);
    }
}
}

on_both_backends! {
/// Every share learns that the hold was lost (here: an operator's forced release),
/// and a read after that takes a new hold.
async fn every_share_learns_that_the_hold_is_lost(backend: Backend) {
    let client = backend.client().await;
    let lease = Duration::from_secs(1);
    let name = unique_name("shared-lost");
    let lock = client.rwlock_with(&name, LockOptions::default().read_lease(lease));
    let first = lock.read().await.unwrap();
    let second = lock.read().await.unwrap();
    assert_eq!(lock.state().await.unwrap().readers.len(), 1);
    assert_eq!(lock.force_release().await.unwrap(), 1);
    for share in [&first, &second] {
        timeout(lease * 3, share.lost())
            .await
            .expect("the renewal finds the hold gone");
        assert!(!share.is_held());
    }
    let fresh = lock.read().await.unwrap();
    assert!(fresh.is_held());
    assert_eq!(reader_tokens(&lock.state().await.unwrap()).len(), 1);
    assert!(matches!(first.release().await, Err(Error::LeaseLost { .. })));
    assert!(matches!(second.release().await, Err(Error::LeaseLost { .. })));
    fresh.release().await.unwrap();
    assert!(held_by_nobody(&lock.state().await.unwrap()));
}
}

on_both_backends! {
/// Shares dropped without `release` leave like released ones: the last one's hold
/// is released in the background.
async fn dropped_shares_release_the_hold_with_the_last(backend: Backend) {
    let client = backend.client().await;
    let lock = client.rwlock(unique_name("shared-drop"));
    let first = lock.read().await.unwrap();
    let second = lock.read().await.unwrap();
    drop(first);
    assert_eq!(lock.state().await.unwrap().readers.len(), 1);
    drop(second);
    wait_for(&lock, |s| s.is_free()).await;
}
}

/// The client listens on a lock across its holds: the first shared hold subscribes
/// and looks (one `HMGET`, one `SUBSCRIBE`); a later hold of the lock, within the
/// few seconds the listening lingers, is shared at once and costs neither. Counted
/// on a private server. Redis-only: it counts the commands the server ran.
#[tokio::test]
async fn a_lock_read_over_and_over_subscribes_and_looks_once() {
    let server = Arc::new(LocalRedis::standalone());
    let client = redis_rwlock::LockClient::standalone(server.url())
        .await
        .unwrap();
    let lock = client.rwlock(unique_name("shared-listen"));
    let counted = |command: &'static str| {
        let server = server.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                let stats = server.commandstats(&server.nodes[0]);
                stats.get(command).copied().unwrap_or(0)
            })
            .await
            .unwrap()
        }
    };
    // The scripts read fields with `HMGET` too: the look is one more in the first
    // round than in each later one.
    let mut looks = Vec::new();
    for round in 0..3 {
        let before = counted("hmget").await;
        let first = lock.read().await.unwrap();
        let second = lock.read().await.unwrap();
        assert_eq!(
            lock.state().await.unwrap().readers.len(),
            1,
            "round {round}"
        );
        second.release().await.unwrap();
        first.release().await.unwrap();
        assert!(lock.state().await.unwrap().is_free());
        looks.push(counted("hmget").await - before);
    }
    assert_eq!(looks[1], looks[2], "{looks:?}");
    assert_eq!(
        looks[0],
        looks[1] + 1,
        "one look, in the first round: {looks:?}"
    );
    assert_eq!(counted("subscribe").await, 1, "one subscription");
}

on_both_backends! {
/// A hold granted after a wait in line may have writers queued behind it (a batch
/// of readers goes ahead of the writers that came after it): the client looks
/// before a task joins it, also while it already listens on the lock.
async fn a_hold_let_in_ahead_of_a_queued_writer_takes_no_share(backend: Backend) {
    let client = backend.client().await;
    let other = backend.client().await;
    let name = unique_name("shared-batch");
    let lock = client.rwlock(&name);
    // A shared hold: the client listens on the lock from now on.
    let (a, b) = (lock.read().await.unwrap(), lock.read().await.unwrap());
    a.release().await.unwrap();
    b.release().await.unwrap();

    let first = other.rwlock(&name).write().await.unwrap();
    let waiting = lock.read();
    let reader = tokio::spawn(waiting);
    wait_for(&lock, |s| s.waiting_readers.len() == 1).await;
    let behind = tokio::spawn(other.rwlock(&name).write());
    wait_for(&lock, |s| s.queued_writers.len() == 1).await;
    first.release().await.unwrap();
    let granted = reader.await.unwrap().expect("the batch is let in");

    let refused = lock.try_read().await;
    assert!(
        matches!(refused, Err(Error::WouldBlock)),
        "a new read passed the queued writer: {refused:?}"
    );
    granted.release().await.unwrap();
    let writer = timeout(Duration::from_secs(10), behind)
        .await
        .expect("the writer behind is served")
        .unwrap()
        .unwrap();
    writer.release().await.unwrap();
}
}

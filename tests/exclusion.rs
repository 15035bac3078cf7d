//! Readers share, writers exclude, and waiting ends on time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redis_rwlock::{Error, LockOptions};
use tokio::time::{Instant, timeout};

use common::{unique_name, wait_for};

const GENEROUS: Duration = Duration::from_secs(10);

on_both_backends! {
/// Readers of six clients hold at once.
async fn many_readers_hold_at_once(backend: Backend) {
    let name = unique_name("readers");
    let mut locks = Vec::new();
    for _ in 0..6 {
        locks.push(backend.client().await.rwlock(&name));
    }
    let mut guards = Vec::new();
    for lock in &locks {
        guards.push(
            lock.try_read()
                .await
                .expect("readers never wait for readers"),
        );
    }
    let state = locks[0].state().await.unwrap();
    assert_eq!(state.readers.len(), 6);
    assert!(state.writer.is_none());
    for guard in guards {
        guard.release().await.unwrap();
    }
    assert!(locks[0].state().await.unwrap().is_free());
}
}

on_both_backends! {
async fn a_writer_excludes_readers_and_other_writers(backend: Backend) {
    let client = backend.client().await;
    let lock = client.rwlock(unique_name("exclusive"));
    let writer = lock.write().await.unwrap();
    assert!(matches!(lock.try_read().await, Err(Error::WouldBlock)));
    assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));

    // A writer waits in line behind a reader that waits, and both behind the writer.
    let waiting_reader = tokio::spawn({
        let lock = lock.clone();
        async move { lock.read().await }
    });
    wait_for(&lock, |s| s.waiting_readers.len() == 1).await;
    let waiting_writer = tokio::spawn({
        let lock = lock.clone();
        async move { lock.write().await }
    });
    wait_for(&lock, |s| s.queued_writers.len() == 1).await;
    assert!(!waiting_reader.is_finished() && !waiting_writer.is_finished());
    assert!(lock.state().await.unwrap().writer.unwrap().token.is_some());

    writer.release().await.unwrap();
    // In arrival order: the reader goes first, then the writer, alone.
    let reader = timeout(GENEROUS, waiting_reader)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        !waiting_writer.is_finished(),
        "a writer entered beside a reader"
    );
    reader.release().await.unwrap();
    let second = timeout(GENEROUS, waiting_writer)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(matches!(lock.try_read().await, Err(Error::WouldBlock)));
    second.release().await.unwrap();
}
}

on_both_backends! {
async fn a_writer_waits_until_every_reader_has_left(backend: Backend) {
    let client = backend.client().await;
    let lock = client.rwlock(unique_name("every-reader"));
    let first = lock.read().await.unwrap();
    let second = lock.read().await.unwrap();

    // The later reader leaves first: the original design let a writer in here.
    second.release().await.unwrap();
    assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));

    let writer = tokio::spawn({
        let lock = lock.clone();
        async move { lock.write().await }
    });
    wait_for(&lock, |s| s.queued_writers.len() == 1).await;
    assert!(
        !writer.is_finished(),
        "a writer entered while a reader held"
    );
    first.release().await.unwrap();
    let writer = timeout(GENEROUS, writer).await.unwrap().unwrap().unwrap();
    assert!(writer.is_held());
    writer.release().await.unwrap();
}
}

on_both_backends! {
async fn a_writer_waits_for_readers_in_every_release_order(backend: Backend) {
    let client = backend.client().await;
    for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0]] {
        let lock = client.rwlock(unique_name("orders"));
        let mut readers: Vec<_> = Vec::new();
        for _ in 0..3 {
            readers.push(Some(lock.read().await.unwrap()));
        }
        for (i, index) in order.iter().enumerate() {
            assert!(
                matches!(lock.try_write().await, Err(Error::WouldBlock)),
                "writer admitted with {} readers left",
                3 - i
            );
            readers[*index].take().unwrap().release().await.unwrap();
        }
        lock.try_write().await.unwrap().release().await.unwrap();
    }
}
}

on_both_backends! {
async fn try_calls_never_wait(backend: Backend) {
    let client = backend.client().await;
    let lock = client.rwlock(unique_name("try"));
    let reader = lock.try_read().await.unwrap();
    let started = Instant::now();
    assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));
    assert!(started.elapsed() < Duration::from_secs(1));
    reader.release().await.unwrap();

    let writer = lock.try_write().await.unwrap();
    assert!(matches!(lock.try_read().await, Err(Error::WouldBlock)));
    assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));
    writer.release().await.unwrap();
}
}

on_both_backends! {
async fn try_read_defers_to_a_queued_writer(backend: Backend) {
    let client = backend.client().await;
    let lock = client.rwlock(unique_name("queued"));
    let reader = lock.read().await.unwrap();
    let writer = tokio::spawn({
        let lock = lock.clone();
        async move { lock.write().await }
    });
    wait_for(&lock, |s| !s.queued_writers.is_empty()).await;
    assert!(matches!(lock.try_read().await, Err(Error::WouldBlock)));
    assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));
    reader.release().await.unwrap();
    timeout(GENEROUS, writer)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
}
}

on_both_backends! {
async fn wait_timeout_returns_timeout_on_time(backend: Backend) {
    let client = backend.client().await;
    let name = unique_name("timeout");
    let holder = client.rwlock(&name).write().await.unwrap();
    let limit = Duration::from_millis(700);
    let lock = client.rwlock_with(&name, LockOptions::default().wait_timeout(limit));
    for attempt in [lock.read().await.map(drop), lock.write().await.map(drop)] {
        assert!(matches!(attempt, Err(Error::Timeout { .. })), "{attempt:?}");
    }
    let started = Instant::now();
    assert!(matches!(lock.write().await, Err(Error::Timeout { .. })));
    let waited = started.elapsed();
    assert!(waited >= limit, "gave up early: {waited:?}");
    assert!(
        waited < limit + Duration::from_millis(1500),
        "gave up late: {waited:?}"
    );
    // The timed-out writer left the queue before returning: nothing waits any more.
    assert!(lock.state().await.unwrap().queued_writers.is_empty());
    holder.release().await.unwrap();
    assert!(lock.state().await.unwrap().is_free());
}
}

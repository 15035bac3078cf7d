//! Kept reads (`LockOptions::keep_reads`): after its last share leaves, a client
//! keeps its read hold, idle, for the next read to take up with no request; to
//! everyone else it is a hold; a writer elsewhere calls it back and is granted at
//! once; a write on the same client gives it back first, and its release keeps a
//! read in its place; untouched, it ends at its bound.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redis_rwlock::{Error, LockClient, LockOptions, RwLock};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use common::{reader_tokens, unique_name, wait_for};

/// Long enough that a test which passes did not wait for the bound.
const LONG: Duration = Duration::from_secs(60);

fn keeping(client: &LockClient, name: &str, bound: Duration) -> RwLock {
    client.rwlock_with(name, LockOptions::default().keep_reads(bound))
}

/// A task of `lock`'s client that reads it, once its read is known to wait (its
/// first poll is pending: the test fails otherwise). The task returns when the
/// read was granted and whether it held then, and releases it.
async fn a_read_that_waits(lock: &RwLock) -> JoinHandle<Result<(Instant, bool), Error>> {
    let (came, arrived) = tokio::sync::oneshot::channel();
    let reader = tokio::spawn({
        let lock = lock.clone();
        async move {
            let mut read = Box::pin(lock.read());
            let pending = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(read.as_mut().poll(cx).is_pending())
            })
            .await;
            came.send(pending).unwrap();
            let guard = read.await?;
            let granted = (Instant::now(), guard.is_held());
            guard.release().await?;
            Ok(granted)
        }
    });
    assert!(
        arrived.await.unwrap(),
        "a read beside the client's write hold"
    );
    reader
}

/// The token of the lock's only reader.
async fn only_reader(lock: &RwLock) -> String {
    let state = lock.state().await.unwrap();
    let readers = reader_tokens(&state);
    assert_eq!(readers.len(), 1, "{state:?}");
    assert!(state.writer.is_none(), "{state:?}");
    readers[0].clone()
}

on_both_backends! {
async fn the_next_read_takes_up_the_kept_hold_and_others_see_it_held(backend: Backend) {
    let client = backend.client().await;
    let other = backend.client().await;
    let name = unique_name("kept");
    let lock = keeping(&client, &name, LONG);

    lock.read().await.unwrap().release().await.unwrap();
    let kept = only_reader(&lock).await;
    // A kept hold is a hold: a writer elsewhere cannot have the lock beside it.
    let refused = other.rwlock(&name).try_write().await;
    assert!(matches!(refused, Err(Error::WouldBlock)), "{refused:?}");

    for _ in 0..3 {
        let guard = lock.read().await.unwrap();
        assert!(guard.is_held());
        assert_eq!(only_reader(&lock).await, kept, "a new hold was taken");
        drop(guard);
        let again = lock.try_read().await.expect("a try_read takes it up too");
        again.release().await.unwrap();
        assert_eq!(only_reader(&lock).await, kept);
    }
    client.shutdown(Duration::from_secs(5)).await.unwrap();
    assert!(
        lock.state().await.unwrap().is_free(),
        "shutdown releases it"
    );
}
}

on_both_backends! {
async fn a_writer_elsewhere_calls_the_kept_hold_back_and_is_granted_at_once(backend: Backend) {
    let client = backend.client().await;
    let other = backend.client().await;
    let name = unique_name("kept-recall");
    let lock = keeping(&client, &name, LONG);
    lock.read().await.unwrap().release().await.unwrap();
    only_reader(&lock).await;

    let writer = other.rwlock_with(
        &name,
        LockOptions::default().wait_timeout(Duration::from_secs(10)),
    );
    let asked = Instant::now();
    let guard = writer.write().await.expect("granted long before the bound");
    let waited = asked.elapsed();
    assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    let state = lock.state().await.unwrap();
    assert!(
        state.readers.is_empty() && state.writer.is_some(),
        "{state:?}"
    );
    guard.release().await.unwrap();

    // The next read asks the server again, and may be kept again.
    lock.read().await.unwrap().release().await.unwrap();
    only_reader(&lock).await;
}
}

on_both_backends! {
async fn a_write_or_an_upgrade_on_the_same_client_gives_the_kept_hold_back_first(backend: Backend) {
    let client = backend.client().await;
    let name = unique_name("kept-local");
    let lock = keeping(&client, &name, LONG);
    lock.read().await.unwrap().release().await.unwrap();
    only_reader(&lock).await;
    let writer = lock
        .try_write()
        .await
        .expect("no wait for its own kept hold");
    writer.release().await.unwrap();

    lock.read().await.unwrap().release().await.unwrap();
    only_reader(&lock).await;
    let mut upgradable = lock.upgradable_read().await.unwrap();
    let writer = upgradable
        .try_upgrade()
        .await
        .expect("no wait for its own kept hold");
    writer.release().await.unwrap();
    // The write hold the client released is its kept read hold now.
    only_reader(&lock).await;
}
}

on_both_backends! {
async fn an_idle_kept_hold_ends_at_its_bound(backend: Backend) {
    let client = backend.client().await;
    let bound = Duration::from_secs(1);
    let lock = keeping(&client, &unique_name("kept-bound"), bound);
    let guard = lock.read().await.unwrap();
    guard.release().await.unwrap();
    let left = Instant::now();
    only_reader(&lock).await;
    wait_for(&lock, |state| state.is_free()).await;
    let kept = left.elapsed();
    assert!(kept >= bound, "released after {kept:?}");
    assert!(kept < bound + Duration::from_secs(4), "kept for {kept:?}");
}
}

on_both_backends! {
async fn a_hold_that_was_lost_is_not_kept(backend: Backend) {
    let client = backend.client().await;
    let name = unique_name("kept-lost");
    let lock = client.rwlock_with(
        &name,
        LockOptions::default()
            .keep_reads(LONG)
            .read_lease(Duration::from_millis(900)),
    );
    let guard = lock.read().await.unwrap();
    let lost_one = only_reader(&lock).await;
    // An operator ends it; the client learns at its next renewal (a third of the
    // lease).
    assert_eq!(lock.force_release().await.unwrap(), 1);
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the renewal finds the hold gone");
    assert!(matches!(guard.release().await, Err(Error::LeaseLost { .. })));
    let guard = lock.read().await.unwrap();
    assert!(guard.is_held());
    assert_ne!(
        only_reader(&lock).await,
        lost_one,
        "the lost hold was taken up"
    );
    guard.release().await.unwrap();
}
}

on_both_backends! {
async fn a_write_released_by_a_keeping_client_leaves_a_kept_read(backend: Backend) {
    let client = backend.client().await;
    let other = backend.client().await;
    let name = unique_name("kept-after-write");
    let lock = keeping(&client, &name, LONG);
    lock.write().await.unwrap().release().await.unwrap();
    let kept = only_reader(&lock).await;
    let guard = lock.read().await.unwrap();
    assert_eq!(
        only_reader(&lock).await,
        kept,
        "the read took up the kept hold"
    );
    guard.release().await.unwrap();

    // A writer elsewhere calls it back as any kept hold.
    let elsewhere = other.rwlock_with(
        &name,
        LockOptions::default().wait_timeout(Duration::from_secs(10)),
    );
    let asked = Instant::now();
    elsewhere.write().await.unwrap().release().await.unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
}
}

on_both_backends! {
/// A writer queued behind the write hold heard of no reader to call back: the
/// client looks, and releases rather than keep.
async fn a_write_released_while_a_writer_waits_is_handed_over_not_kept(backend: Backend) {
    let client = backend.client().await;
    let other = backend.client().await;
    let name = unique_name("kept-handover");
    let lock = keeping(&client, &name, LONG);
    let writer = lock.write().await.unwrap();
    let waiting = tokio::spawn(other.rwlock(&name).write());
    wait_for(&lock, |state| state.queued_writers.len() == 1).await;
    writer.release().await.unwrap();
    let state = lock.state().await.unwrap();
    assert!(
        state.readers.is_empty() && state.writer.is_some(),
        "handed over by the release itself: {state:?}"
    );
    waiting.await.unwrap().unwrap().release().await.unwrap();
}
}

on_both_backends! {
/// A read that comes while a task of the same client writes waits for that write in
/// the process and takes up the read hold its release keeps: no hold of its own,
/// and a `try_read` meanwhile is refused as the server would refuse it.
async fn a_read_during_the_clients_own_write_takes_up_the_hold_its_release_keeps(backend: Backend) {
    let client = backend.client().await;
    let name = unique_name("kept-behind-own-write");
    let lock = keeping(&client, &name, LONG);
    let writer = lock.write().await.unwrap();
    let write_token = lock.state().await.unwrap().writer.unwrap().token.unwrap();

    let mut read = Box::pin(lock.read());
    let pending = std::future::poll_fn(|cx| {
        std::task::Poll::Ready(read.as_mut().poll(cx).is_pending())
    })
    .await;
    assert!(pending, "a read beside the client's write hold");
    let refused = lock.try_read().await;
    assert!(matches!(refused, Err(Error::WouldBlock)), "{refused:?}");

    writer.release().await.unwrap();
    let guard = read.await.unwrap();
    assert!(guard.is_held());
    assert_eq!(
        only_reader(&lock).await,
        write_token,
        "the read took a hold of its own instead of the one the write kept"
    );
    guard.release().await.unwrap();
    assert_eq!(only_reader(&lock).await, write_token);
}
}

on_both_backends! {
/// A read that waited for the client's write while a writer elsewhere queued behind
/// it: the write's release does not keep the read hold for long (the client looks,
/// learns of the writer and lets the hold go with its last share), so the writer
/// gets in at once rather than at the keeping bound, and the read gets in too.
async fn a_read_waiting_for_the_clients_write_does_not_keep_a_queued_writer_out(backend: Backend) {
    let client = backend.client().await;
    let other = backend.client().await;
    let name = unique_name("kept-own-write-then-writer");
    let lock = keeping(&client, &name, LONG);
    let writer = lock.write().await.unwrap();
    let elsewhere = other.rwlock_with(
        &name,
        LockOptions::default().wait_timeout(Duration::from_secs(30)),
    );
    let waiting = tokio::spawn(async move {
        let guard = elsewhere.write().await?;
        let granted = Instant::now();
        guard.release().await?;
        Ok::<_, Error>(granted)
    });
    wait_for(&lock, |state| state.queued_writers.len() == 1).await;

    let reader = a_read_that_waits(&lock).await;

    let released = Instant::now();
    writer.release().await.unwrap();
    let granted = waiting.await.unwrap().expect("the writer gets in");
    let waited = granted - released;
    assert!(waited < Duration::from_secs(5), "the writer waited {waited:?}");
    let (_, held) = reader.await.unwrap().expect("the read gets in");
    assert!(held);
}
}

on_both_backends! {
/// A client that keeps an idle read hold (with a long bound) and is then dropped,
/// every handle of it (the client, its lock, its guards), gives the hold back: a
/// writer elsewhere gets the lock with `try_write` within a second of the drop,
/// not at the bound.
async fn a_dropped_client_gives_its_kept_read_hold_back(backend: Backend) {
    const WITHIN: Duration = Duration::from_secs(1);
    /// How long the test looks before it reports the hold as kept.
    const LOOK_FOR: Duration = Duration::from_secs(5);
    let client = backend.client().await;
    let other = backend.client().await;
    let name = unique_name("kept-dropped-client");
    let lock = keeping(&client, &name, LONG);
    lock.read().await.unwrap().release().await.unwrap();
    only_reader(&lock).await;
    // The hold is idle and kept (marked so after a tenth of a second), as a client
    // that went quiet leaves it.
    wait_for(&lock, |state| {
        state.readers.len() == 1 && state.readers[0].kept_idle
    })
    .await;

    let writer = other.rwlock(&name);
    drop(lock);
    drop(client);
    let dropped = Instant::now();
    let mut refused = 0u32;
    let granted = loop {
        match writer.try_write().await {
            Ok(guard) => {
                let at = dropped.elapsed();
                guard.release().await.unwrap();
                break Some(at);
            }
            Err(Error::WouldBlock) => refused += 1,
            Err(err) => panic!("try_write failed: {err:?}"),
        }
        if dropped.elapsed() > LOOK_FOR {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!("try_write after the drop: granted at {granted:?}, {refused} refused before");
    let granted = granted.unwrap_or_else(|| {
        panic!(
            "the dropped client's kept hold was still there {LOOK_FOR:?} after the drop \
             ({refused} try_write refused)"
        )
    });
    assert!(
        granted < WITHIN,
        "the dropped client's kept hold went only {granted:?} after the drop (within {WITHIN:?} asked)"
    );
}
}

on_both_backends! {
/// A read that came while its client wrote goes before a writer of another client
/// that queued after it, as a reader in line behind the write would: it joins the
/// read hold the write's release keeps at once, and that writer waits for it. (It
/// used to come back as a new joiner, start listening, find the writer and queue
/// behind it: the writer's whole hold, 2 s here.)
async fn a_read_that_waited_for_its_clients_write_goes_before_a_writer_that_queued_after_it(backend: Backend) {
    const OTHER_HOLDS: Duration = Duration::from_secs(2);
    let client = backend.client().await;
    let other = backend.client().await;
    let name = unique_name("kept-read-before-later-writer");
    let lock = keeping(&client, &name, LONG);
    let writer = lock.write().await.unwrap();

    let reader = a_read_that_waits(&lock).await;
    // The client learns when that writer queued from the write's release, to within
    // the release's round trip: a read that came less than that before the writer
    // queued counts as after it (it waits behind it, erring on the writer's side).
    // Time is the subject here: the read comes well before the writer queues.
    tokio::time::sleep(Duration::from_millis(100)).await;

    // Another client's writer queues after the read came.
    let elsewhere = other.rwlock(&name);
    let later_writer = tokio::spawn(async move {
        let guard = elsewhere.write().await?;
        tokio::time::sleep(OTHER_HOLDS).await;
        guard.release().await
    });
    wait_for(&lock, |state| state.queued_writers.len() == 1).await;

    let released = Instant::now();
    writer.release().await.unwrap();
    let (granted, _) = reader.await.unwrap().expect("the read gets in");
    let waited = granted - released;
    assert!(
        waited < OTHER_HOLDS / 2,
        "the read that came first waited {waited:?} after its client's write, behind the \
         writer that queued after it"
    );
    later_writer.await.unwrap().expect("the later writer gets in");
}
}

on_both_backends! {
/// The other way round: a read that came while its client wrote, but after a writer
/// of another client queued behind that write, does not go before that writer. The
/// write's release learns when the writer queued, and the read waits behind it as
/// it would have in line (it used to join the kept read hold at once, and the
/// writer waited for it).
async fn a_read_that_came_after_a_writer_queued_does_not_pass_it(backend: Backend) {
    const OTHER_HOLDS: Duration = Duration::from_millis(500);
    let client = backend.client().await;
    let other = backend.client().await;
    let name = unique_name("kept-read-after-earlier-writer");
    let lock = keeping(&client, &name, LONG);
    let writer = lock.write().await.unwrap();

    // Another client's writer queues behind the write first.
    let elsewhere = other.rwlock_with(
        &name,
        LockOptions::default().wait_timeout(Duration::from_secs(30)),
    );
    let earlier_writer = tokio::spawn(async move {
        let guard = elsewhere.write().await?;
        tokio::time::sleep(OTHER_HOLDS).await;
        let released = Instant::now();
        guard.release().await?;
        Ok::<_, Error>(released)
    });
    wait_for(&lock, |state| state.queued_writers.len() == 1).await;

    let reader = a_read_that_waits(&lock).await;

    writer.release().await.unwrap();
    let (read_granted, _) = reader.await.unwrap().expect("the read gets in");
    let writer_released = earlier_writer
        .await
        .unwrap()
        .expect("the earlier writer gets in");
    assert!(
        read_granted >= writer_released,
        "the read that came after the writer queued got in {:?} before that writer released",
        writer_released - read_granted
    );
}
}

on_both_backends! {
/// A lost write guard of the client holds nothing: a `try_read` of the same client
/// meanwhile is not refused for it (the lock is free), while the guard still lives.
async fn a_lost_write_of_the_client_does_not_refuse_its_reads(backend: Backend) {
    let client = backend.client().await;
    let name = unique_name("kept-lost-write");
    let lock = client.rwlock_with(
        &name,
        LockOptions::default()
            .keep_reads(LONG)
            .write_lease(Duration::from_millis(1500)),
    );
    let writer = lock.write().await.unwrap();
    backend.delete_lock(&lock).await;
    tokio::time::timeout(Duration::from_secs(10), writer.lost())
        .await
        .expect("the write guard learns at its next renewal that its hold is gone");
    let read = lock.try_read().await;
    assert!(
        read.is_ok(),
        "try_read refused beside a lost write guard of its own client: {read:?}"
    );
    drop(writer);
}
}

/// A keeping write's `release()` is bounded by `release_timeout`, as any release:
/// with the store not answering it returns an error in time, and the hold goes on
/// being released in the background (it used to wait for the client's request
/// limit, 4 s). In memory: the store's silence is what is tested.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keeping_write_release_is_bounded_by_release_timeout() {
    const LIMIT: Duration = Duration::from_millis(300);
    let store = redis_rwlock::MemoryStore::new();
    let client = LockClient::in_memory(&store);
    let lock = client.rwlock_with(
        unique_name("kept-release-bounded"),
        LockOptions::default()
            .keep_reads(LONG)
            .release_timeout(LIMIT),
    );
    let writer = lock.write().await.unwrap();
    store.stop_answering(Duration::from_secs(10));
    let asked = Instant::now();
    let released = writer.release().await;
    let took = asked.elapsed();
    assert!(
        released.is_err(),
        "an unconfirmed release says so: {released:?}"
    );
    assert!(
        took < LIMIT + Duration::from_millis(700),
        "release() took {took:?} with release_timeout {LIMIT:?}"
    );
}

on_both_backends! {
/// Two writes of a keeping client: the first's release hands the lock on to the
/// second, which waits in line behind it, and no read hold of the client is left
/// in its place. (The release now skips the read it would have kept; before, that
/// read was kept, found called back and released, to the same end state, a few
/// round trips later: BENCHMARKS.md, "Sharing where it does not pay".)
async fn a_write_released_while_another_write_of_the_client_waits_hands_it_on(backend: Backend) {
    let client = backend.client().await;
    let name = unique_name("kept-two-writes");
    let lock = keeping(&client, &name, LONG);
    let first = lock.write().await.unwrap();
    let (checked, check) = tokio::sync::oneshot::channel::<()>();
    let second = tokio::spawn({
        let lock = lock.clone();
        async move {
            let guard = lock.write().await?;
            let _ = check.await;
            guard.release().await
        }
    });
    wait_for(&lock, |state| state.queued_writers.len() == 1).await;
    first.release().await.unwrap();
    let state = wait_for(&lock, |state| state.queued_writers.is_empty()).await;
    assert!(
        state.readers.is_empty() && state.writer.is_some(),
        "the first write's release kept a read instead of handing the lock on: {state:?}"
    );
    checked.send(()).unwrap();
    second.await.unwrap().unwrap();
}
}

//! A writer that waits holds a place in the writers' queue, refreshed at each of its
//! re-checks; a waiter that dies (its process killed) stops refreshing it, and the
//! place lapses. Nothing a dead waiter leaves behind may block the lock longer than
//! its place would have: not the place, and not a hold handed to it just before the
//! place lapsed. And a place lives no longer than its writer's lease needs: a
//! crashed writer with a short lease blocks readers for about that lease.
//!
//! On a real cluster (3 masters, 3 replicas: this binary's shared one, as nothing is
//! injected into the servers), the dead waiter is a real process: the crate's tool,
//! `redis-rwlock exec --write --lease <write lease>`, queued like any writer and
//! killed with SIGKILL right after it refreshed its place. So these tests need the
//! `cli` feature (`cargo test --all-features`).
#![cfg(all(unix, feature = "cli"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redis_rwlock::{Error, LockMode, LockOptions, RwLock};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until, timeout};

use common::{Exec, cluster_client, unique_name, until_changed};

/// How long a queued place lives after its waiter's last attempt with the default
/// 10 s write lease: a place lives the write lease kept between 1.5 s and 3.3 s
/// (`intent_ttl` in src/lock/waiting.rs), so 3.3 s.
const PLACE_LIFETIME: Duration = Duration::from_millis(3300);
/// The longest gap between a waiter's re-checks (1 s and up to 100 ms of jitter),
/// and a little more.
const RECHECK: Duration = Duration::from_millis(1200);
/// What a loaded 2-core machine may add.
const SLACK: Duration = Duration::from_millis(500);
/// How long before the dead waiter's place lapses the reader releases: the lock is
/// then handed to the dead waiter, the worst moment.
const BEFORE_LAPSE: Duration = Duration::from_millis(500);

/// Who waits behind the dead writer.
#[derive(Clone, Copy, Debug)]
enum Behind {
    /// Another writer, queued behind it.
    Writer,
    /// A reader, kept out by its place (writer preference).
    Reader,
}

/// When the lock let others in again after the dead writer's death.
struct Blocked {
    /// The waiter behind it got the lock (it looks again at its re-checks).
    waiter: Duration,
    /// A plain `try_read` of a third client, every 20 ms, was first granted (readers
    /// only; no re-check period in it).
    try_read: Option<Duration>,
}

/// The deadline of the place at the head of the queue, in server time (ms).
async fn head_place(lock: &RwLock) -> i64 {
    let state = lock.state().await.unwrap();
    state.queued_writers[0].until.timestamp_millis()
}

/// A reader holds; writer W1 (a `redis-rwlock exec --write` process, write lease
/// `write_lease`) queues behind it, then a waiter of kind `behind` (another client)
/// waits too. W1 is SIGKILLed right after it refreshed its place; the reader releases
/// [`BEFORE_LAPSE`] before W1's place lapses. Returns how long after W1's death the
/// waiter got the lock (and, with a reader behind, a third client's `try_read`).
async fn waiter_behind_a_dead_writer(write_lease: Duration, behind: Behind) -> Blocked {
    let (holders, waiters, probes) = (
        cluster_client().await,
        cluster_client().await,
        cluster_client().await,
    );
    let name = unique_name("dead-waiter");
    let options = LockOptions::default().write_lease(write_lease);
    let lock = holders.rwlock_with(&name, options.clone());
    let reader = lock.read().await.unwrap();

    // The writer that dies: `cat` would run only if it ever got the lock.
    let mut doomed = Exec::start(&name, LockMode::Write, write_lease, &["cat"]);
    doomed
        .until(&lock, "the writer queued", |s| s.queued_writers.len() == 1)
        .await;
    let waiter: JoinHandle<Instant> = {
        let lock = waiters.rwlock_with(&name, options);
        match behind {
            Behind::Writer => tokio::spawn(async move {
                let guard = lock.write().await.expect("the waiting writer's write()");
                let at = Instant::now();
                guard.release().await.unwrap();
                at
            }),
            Behind::Reader => tokio::spawn(async move {
                let guard = lock.read().await.expect("the waiting reader's read()");
                let at = Instant::now();
                guard.release().await.unwrap();
                at
            }),
        }
    };
    if let Behind::Writer = behind {
        doomed
            .until(&lock, "2 writers queued", |s| s.queued_writers.len() == 2)
            .await;
    }

    // W1 dies right after a refresh of its place (a re-check comes every 0.5 s to a
    // third of the place's lifetime).
    let before = head_place(&lock).await;
    let within = Instant::now() + Duration::from_secs(3);
    until_changed(&before, || head_place(&lock), within)
        .await
        .expect("the queued writer never refreshed its place");
    let died = Instant::now();
    doomed.kill();
    assert!(
        !waiter.is_finished(),
        "the {behind:?} behind the writer did not wait"
    );
    let probe = matches!(behind, Behind::Reader).then(|| {
        let lock = probes.rwlock(&name);
        tokio::spawn(async move {
            loop {
                match lock.try_read().await {
                    Ok(guard) => {
                        let at = Instant::now();
                        guard.release().await.unwrap();
                        return at;
                    }
                    Err(Error::WouldBlock) => sleep(Duration::from_millis(20)).await,
                    Err(err) => panic!("try_read failed: {err:?}"),
                }
            }
        })
    });
    let state = lock.state().await.unwrap();
    let read_at = Instant::now();
    let place = &state.queued_writers[0];
    let lapses_in = (place.until - state.server_time)
        .to_std()
        .unwrap_or_default();
    sleep_until(read_at + lapses_in.saturating_sub(BEFORE_LAPSE)).await;
    reader.release().await.unwrap();
    let released = died.elapsed();

    let got = timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter got the lock in the end")
        .unwrap();
    let waited = got - died;
    let try_read = match probe {
        Some(probe) => Some(
            timeout(Duration::from_secs(20), probe)
                .await
                .expect("a try_read was granted in the end")
                .unwrap()
                - died,
        ),
        None => None,
    };
    println!(
        "write lease {write_lease:?}: the dead writer's place lapsed {lapses_in:?} after its \
         death; the reader released {released:?} after it; the {behind:?} behind got the lock \
         {waited:?} after the death; a try_read first granted {try_read:?} after it"
    );
    Blocked {
        waiter: waited,
        try_read,
    }
}

/// The lock is handed to a queued writer that died just before its place lapsed
/// (default 10 s lease): the writer behind it gets the lock within the place's
/// lifetime and a re-check of the death, not after a second lifetime (the handed hold
/// lasting a full place lifetime from the hand-over).
/// Redis-only: the dead waiter is a child process (the CLI) killed with SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_queued_writer_handed_the_lock_blocks_the_next_writer_no_longer_than_its_place() {
    let waited = waiter_behind_a_dead_writer(Duration::from_secs(10), Behind::Writer)
        .await
        .waiter;
    let bound = PLACE_LIFETIME + RECHECK + SLACK;
    assert!(
        waited <= bound,
        "the writer behind a dead queued writer got the lock {waited:?} after its death \
         (bound: its place's lifetime {PLACE_LIFETIME:?} + a re-check {RECHECK:?} + {SLACK:?})"
    );
}

/// A queued writer with a 2 s write lease dies: readers are kept out by its place,
/// and by a hold handed to it before the place lapsed, for about its lease (a
/// waiting reader: and a re-check), not a whole 3.3 s place lifetime (plus a handed
/// hold).
/// Redis-only: the dead waiter is a child process (the CLI) killed with SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_queued_writer_with_a_short_lease_blocks_readers_for_about_that_lease() {
    let write_lease = Duration::from_secs(2);
    let blocked = waiter_behind_a_dead_writer(write_lease, Behind::Reader).await;
    let try_read = blocked.try_read.expect("probed");
    assert!(
        try_read <= write_lease + SLACK,
        "readers were kept out {try_read:?} after the death of a queued writer with a \
         {write_lease:?} lease (first try_read granted; bound: the lease + {SLACK:?})"
    );
    let bound = write_lease + RECHECK + SLACK;
    assert!(
        blocked.waiter <= bound,
        "a reader waiting behind a dead queued writer (write lease {write_lease:?}) got the \
         lock {:?} after its death (bound: the lease + a re-check {RECHECK:?} + {SLACK:?})",
        blocked.waiter
    );
}

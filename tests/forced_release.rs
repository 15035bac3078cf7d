//! `force_release` (the operator's break-glass) ends every hold at once; the evicted
//! holders learn it at their next renewal. What it leaves behind must not confuse
//! the readers that come after it: an evicted reader never comes back (its renewal
//! finds its hold gone, whatever other readers did meanwhile), and a reader that
//! arrives after the forced release holds, renews and releases like any other.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redis_rwlock::LockOptions;
use tokio::time::{Instant, sleep_until, timeout};

use common::{Backend, held_by_nobody, unique_name};

/// The evicted reader's lease: it renews every 2 s.
const EVICTED_LEASE: Duration = Duration::from_secs(6);
/// A few of its renewal periods: by then a renewal has told it.
const EVICTED_LEARNS_WITHIN: Duration = Duration::from_secs(6);
/// How long a forced release that ended read holds keeps writers out (longer than
/// an evicted client's tasks may join its hold without asking), and a margin.
const FENCE_AND_MARGIN: Duration = Duration::from_secs(5);
/// The lease of the reader that comes after the forced release (shorter than what
/// the evicted reader had left).
const NEXT_LEASE: Duration = Duration::from_secs(1);

/// What the reader that comes after the forced release does with its hold.
#[derive(Clone, Copy, Debug)]
enum Then {
    /// Releases it at once.
    Releases,
    /// Never renews it and lets it run out.
    LetsItLapse,
}

/// Reader A holds (6 s lease), an operator forces the lock free, reader B (another
/// client, 1 s lease) takes a read hold and then releases it or lets it lapse. A's
/// next renewal must find its hold gone: A's guard reports the lease lost within a
/// few renewal periods, and a writer (a third client) is never granted the lock while
/// A still believes it holds.
async fn an_evicted_reader_stays_evicted(backend: &Backend, then: Then) {
    let (a, b, c) = (
        backend.client().await,
        backend.client().await,
        backend.client().await,
    );
    let name = unique_name("evicted");
    let evicted = a.rwlock_with(&name, LockOptions::default().read_lease(EVICTED_LEASE));
    let reader_a = evicted.read().await.unwrap();
    let forced = Instant::now();
    assert_eq!(evicted.force_release().await.unwrap(), 1, "A's hold ended");

    let next = b.rwlock_with(
        &name,
        LockOptions::default()
            .read_lease(NEXT_LEASE)
            .auto_renew(matches!(then, Then::Releases)),
    );
    let reader_b = next.read().await.unwrap();
    // Kept until the end when it lapses: dropping it would release it.
    let mut lapsing = None;
    let b_did = match then {
        Then::Releases => format!("released: {:?}", reader_b.release().await),
        Then::LetsItLapse => {
            // Past its local deadline, and then past the server's (never earlier).
            sleep_until(Instant::from_std(reader_b.deadline()) + Duration::from_millis(300)).await;
            lapsing = Some(reader_b);
            "lapsed".to_owned()
        }
    };

    let learned = timeout(EVICTED_LEARNS_WITHIN, reader_a.lost())
        .await
        .is_ok();
    let waited = forced.elapsed();
    let writer = timeout(FENCE_AND_MARGIN, c.rwlock(&name).write())
        .await
        .unwrap_or(Err(redis_rwlock::Error::WouldBlock));
    let a_believes = reader_a.is_held();
    let state = evicted.state().await.unwrap();
    println!(
        "B {b_did}; {waited:?} after the forced release A's guard learned it was evicted: \
         {learned}, believes it holds: {a_believes}; C's try_write: {}; the lock: readers \
         {:?}, writer {:?}",
        match &writer {
            Ok(_) => "granted".to_owned(),
            Err(err) => format!("{err:?}"),
        },
        state.readers,
        state.writer
    );
    let granted = writer.is_ok();
    if let Ok(writer) = writer {
        writer.release().await.unwrap();
    }
    assert!(
        !(granted && a_believes),
        "C was granted the write lock while the evicted reader A still believes it holds \
         ({waited:?} after the forced release, after its renewals; B {b_did})"
    );
    assert!(
        learned,
        "the evicted reader A never learned it was evicted: its renewals kept succeeding for \
         {EVICTED_LEARNS_WITHIN:?} (B {b_did})"
    );
    assert!(
        granted,
        "the lock is free once its evicted reader knows, B is gone and the forced release's \
         fence has passed, yet C's write was not granted within {FENCE_AND_MARGIN:?}"
    );
    drop(lapsing);
}

on_both_backends! {
async fn a_reader_evicted_by_force_release_does_not_come_back_after_the_next_reader_released(backend: Backend) {
    an_evicted_reader_stays_evicted(&backend, Then::Releases).await;
}

async fn a_reader_evicted_by_force_release_does_not_come_back_after_the_next_reader_lapsed(backend: Backend) {
    an_evicted_reader_stays_evicted(&backend, Then::LetsItLapse).await;
}
}

on_both_backends! {
/// Reader A holds (6 s lease), an operator forces the lock free, reader B (another
/// client, 1.5 s lease: renewals every 0.5 s) takes a read hold: it must stay held
/// across its renewals, its release must succeed, and then the lock has no readers
/// and a writer (a third client) is granted it once the forced release's fence ends.
async fn a_reader_after_a_forced_release_holds_renews_and_releases_like_any_other(backend: Backend) {
    let (a, b, c) = (
        backend.client().await,
        backend.client().await,
        backend.client().await,
    );
    let name = unique_name("after-forced");
    let evicted = a.rwlock_with(&name, LockOptions::default().read_lease(EVICTED_LEASE));
    let _reader_a = evicted.read().await.unwrap();
    assert_eq!(evicted.force_release().await.unwrap(), 1, "A's hold ended");

    let lease = Duration::from_millis(1500);
    let next = b.rwlock_with(&name, LockOptions::default().read_lease(lease));
    let reader_b = next.read().await.unwrap();
    let granted = Instant::now();
    // Three renewals (every third of the lease), and a little more.
    let renewals = lease + Duration::from_millis(200);
    let lost_after = timeout(renewals, reader_b.lost())
        .await
        .ok()
        .map(|()| granted.elapsed());
    let held = reader_b.is_held();
    let released = reader_b.release().await;
    let state = next.state().await.unwrap();
    let writer = timeout(FENCE_AND_MARGIN, c.rwlock(&name).write())
        .await
        .unwrap_or(Err(redis_rwlock::Error::WouldBlock));
    println!(
        "B: lost after {lost_after:?}, held after {renewals:?}: {held}, release: {released:?}; \
         then the lock's readers {:?}; C's try_write: {}",
        state.readers,
        match &writer {
            Ok(_) => "granted".to_owned(),
            Err(err) => format!("{err:?}"),
        }
    );
    let writer_granted = writer.is_ok();
    if let Ok(writer) = writer {
        writer.release().await.unwrap();
    }
    assert!(
        lost_after.is_none() && held,
        "B's hold was lost at a renewal ({lost_after:?} after its grant): the reader that came \
         after the forced release was taken for one of the evicted"
    );
    assert!(released.is_ok(), "B's release failed: {released:?}");
    // The forced release's fence shows as a reader no client is, until it ends.
    assert!(
        held_by_nobody(&state),
        "readers left after B's release: {:?}",
        state.readers
    );
    assert!(
        writer_granted,
        "C's write was not granted within {FENCE_AND_MARGIN:?} after B, the only reader, \
         released (the forced release's fence lasts 3 s)"
    );
}
}

/// How the evicted client's hold ended, behind its back.
#[derive(Clone, Copy, Debug)]
enum Eviction {
    /// An operator's `force_release` (which the holders can be told of).
    ForceRelease,
    /// The lock's key deleted by hand (`DEL`; `lose_holds` in memory): no signal at
    /// all, so the client may go on believing for one renewal period.
    KeyDeleted,
}

/// The evicted client's lease: it renews every second.
const SHARED_LEASE: Duration = Duration::from_secs(3);
/// How long the next writer holds while the evicted client keeps trying to read:
/// longer than two of the evicted hold's renewal periods.
const NEXT_WRITER_HOLDS: Duration = Duration::from_millis(2500);

/// Two tasks of client A share a read hold; it ends behind A's back (`eviction`);
/// a writer on client B is granted and holds for [`NEXT_WRITER_HOLDS`], while A
/// calls `try_read()` every 10 ms. Returns when each granted read of A came (after
/// B's grant, while B held), and checks that A's two evicted guards learn it.
async fn reads_of_an_evicted_client_beside_the_next_writer(
    backend: &Backend,
    eviction: Eviction,
) -> Vec<Duration> {
    let (a, b) = (backend.client().await, backend.client().await);
    let name = unique_name("evicted-shared");
    let lock_a = a.rwlock_with(&name, LockOptions::default().read_lease(SHARED_LEASE));
    let first = lock_a.read().await.unwrap();
    let second = lock_a.read().await.unwrap();
    let state = lock_a.state().await.unwrap();
    assert_eq!(state.readers.len(), 1, "one shared hold: {state:?}");
    match eviction {
        Eviction::ForceRelease => {
            let operator = backend.client().await;
            assert_eq!(
                operator.rwlock(&name).force_release().await.unwrap(),
                1,
                "A's hold ended"
            );
        }
        Eviction::KeyDeleted => backend.delete_lock(&lock_a).await,
    }
    let writer = timeout(Duration::from_secs(5), b.rwlock(&name).write())
        .await
        .expect("the lock is free: B's writer is granted")
        .unwrap();
    let granted = Instant::now();
    let mut joined = Vec::new();
    let mut refused = 0u32;
    while granted.elapsed() < NEXT_WRITER_HOLDS {
        // Whether A had heard that its hold is gone (the release's `x` message, or a
        // renewal) before this read: from then on no read may join the old hold.
        let heard = !first.is_held();
        match lock_a.try_read().await {
            Ok(read) => {
                joined.push(granted.elapsed());
                assert!(!heard, "a read joined the evicted hold after A heard of it");
                assert!(writer.is_held(), "B lost its write hold");
                drop(read);
            }
            Err(_) => refused += 1,
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let b_still_held = writer.is_held();
    writer.release().await.unwrap();
    println!(
        "{eviction:?}: {} of A's try_read() calls granted while B held (the first {:?}, the \
         last {:?} after B's grant), {refused} refused",
        joined.len(),
        joined.first(),
        joined.last()
    );
    assert!(b_still_held, "B's write hold was lost");
    for share in [&first, &second] {
        timeout(SHARED_LEASE * 2, share.lost())
            .await
            .expect("an evicted share learns that its hold is gone");
        assert!(!share.is_held(), "an evicted share still reports is_held()");
    }
    // A reader of A after all that holds like any other.
    let fresh = lock_a.try_read().await.expect("the lock is free again");
    assert!(fresh.is_held());
    fresh.release().await.unwrap();
    joined
}

on_both_backends! {
/// After an operator's `force_release` and another client's writer being granted,
/// no read of the evicted client joins its old hold: the client hears the release's
/// message within microseconds, and the release keeps writers out for longer than
/// the client lets tasks join a hold without asking (so even a client that never
/// hears it stops first: `tests/silent_subscriptions.rs`). The evicted shares learn
/// that their hold is gone.
async fn no_read_of_a_client_evicted_by_force_release_joins_its_old_hold_beside_the_next_writer(backend: Backend) {
    let joined = reads_of_an_evicted_client_beside_the_next_writer(&backend, Eviction::ForceRelease).await;
    assert!(
        joined.is_empty(),
        "{} reads of the evicted client were granted while the next writer held, the first \
         {:?} after its grant",
        joined.len(),
        joined[0]
    );
}
}

on_both_backends! {
/// The lock's key deleted by hand tells nobody: the evicted client may let reads
/// join its old hold until its next renewal finds the hold gone (one renewal
/// period, a third of the lease), never later.
async fn reads_of_a_client_whose_hold_was_deleted_join_it_for_at_most_one_renewal_period(backend: Backend) {
    let joined = reads_of_an_evicted_client_beside_the_next_writer(&backend, Eviction::KeyDeleted).await;
    // One renewal period, and a second of margin for a loaded machine.
    let bound = SHARED_LEASE / 3 + Duration::from_secs(1);
    if let Some(last) = joined.last() {
        assert!(
            *last < bound,
            "a read of the evicted client joined its deleted hold {last:?} after the next \
             writer's grant (bound {bound:?}; {} in all)",
            joined.len()
        );
    }
}
}

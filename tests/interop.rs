//! Interoperation with clients that still run the original design's scripts on the
//! same keys, in both directions: the hash layout on a cluster, the two-key layout on
//! a standalone server and on a cluster.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redis::AsyncCommands;
use redis_rwlock::{Error, LockClient, LockOptions};

use common::{
    OriginalHash, OriginalTwoKey, client_now_ms, cluster_client, raw_cluster, shared_standalone,
    standalone_client, unique_name,
};

#[tokio::test]
async fn our_writer_blocks_original_readers_and_writers() {
    let client = cluster_client().await;
    let mut raw = raw_cluster().await;
    let lock = client.rwlock(unique_name("interop-w"));
    let original = OriginalHash::new(lock.key().unwrap());
    let writer = lock.write().await.unwrap();
    assert_eq!(original.acquire_read(&mut raw).await, None);
    assert_eq!(original.acquire_write(&mut raw).await, None);
    writer.release().await.unwrap();
    let stamp = original
        .acquire_write(&mut raw)
        .await
        .expect("free after our release");
    original.release(&mut raw, "write", stamp).await;
}

#[tokio::test]
async fn our_readers_block_original_writers_until_the_last_one_leaves() {
    let client = cluster_client().await;
    let mut raw = raw_cluster().await;
    let lock = client.rwlock(unique_name("interop-r"));
    let original = OriginalHash::new(lock.key().unwrap());
    let first = lock.read().await.unwrap();
    let second = lock.read().await.unwrap();
    second.release().await.unwrap();
    assert_eq!(
        original.acquire_write(&mut raw).await,
        None,
        "one of our readers still holds"
    );
    first.release().await.unwrap();
    let stamp = original
        .acquire_write(&mut raw)
        .await
        .expect("free after our last reader");
    original.release(&mut raw, "write", stamp).await;
}

/// An original reader shares with ours; its release deletes the `read` stamp and
/// hides our readers from original writers until our next refresh (the documented
/// window), which comes within half the original read timeout.
#[tokio::test]
async fn an_original_readers_release_hides_ours_only_until_our_next_refresh() {
    let client = cluster_client().await;
    let mut raw = raw_cluster().await;
    let lock = client.rwlock_with(
        unique_name("interop-window"),
        LockOptions::default().original_timeouts(Duration::from_secs(1), Duration::from_secs(3)),
    );
    let original = OriginalHash::new(lock.key().unwrap()); // read timeout 1 s
    let ours = lock.read().await.unwrap();
    let theirs = original
        .acquire_read(&mut raw)
        .await
        .expect("readers share");
    original.release(&mut raw, "read", theirs).await;
    // Our renewal runs every 500 ms and stamps `read` again.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        original.acquire_write(&mut raw).await,
        None,
        "our reader stayed hidden"
    );
    ours.release().await.unwrap();
}

#[tokio::test]
async fn an_original_writer_blocks_our_readers_and_writers() {
    let client = cluster_client().await;
    let mut raw = raw_cluster().await;
    let lock = client.rwlock_with(
        unique_name("interop-ow"),
        LockOptions::default().original_timeouts(Duration::from_secs(1), Duration::from_secs(3)),
    );
    let original = OriginalHash::new(lock.key().unwrap());
    let stamp = original.acquire_write(&mut raw).await.unwrap();
    assert!(matches!(lock.try_read().await, Err(Error::WouldBlock)));
    assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));
    let state = lock.state().await.unwrap();
    assert_eq!(state.writer.as_ref().unwrap().token, None, "{state:?}");
    // Waiters get in once the original writer releases.
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.write().await }
    });
    original.release(&mut raw, "write", stamp).await;
    let writer = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    writer.release().await.unwrap();
}

#[tokio::test]
async fn an_original_reader_blocks_our_writers_but_not_our_readers() {
    let client = cluster_client().await;
    let mut raw = raw_cluster().await;
    let lock = client.rwlock_with(
        unique_name("interop-or"),
        LockOptions::default().original_timeouts(Duration::from_secs(1), Duration::from_secs(3)),
    );
    let original = OriginalHash::new(lock.key().unwrap());
    let theirs = original.acquire_read(&mut raw).await.unwrap();
    assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));
    let ours = lock.try_read().await.unwrap();
    // Our reader overwrote their `read` stamp: their hold must still count.
    ours.release().await.unwrap();
    assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));
    original.release(&mut raw, "read", theirs).await;
    // Their release cannot remove a stamp that is no longer theirs; the hold still
    // counts until its timeout (1 s) runs out.
    let writer = lock.write().await.unwrap();
    assert!(client_now_ms() - theirs >= 900);
    writer.release().await.unwrap();
}

#[tokio::test]
async fn a_long_dead_original_stamp_does_not_block() {
    let client = cluster_client().await;
    let mut raw = raw_cluster().await;
    let lock = client.rwlock(unique_name("interop-dead"));
    let stale = client_now_ms() - 60_000;
    let _: () = raw.hset(lock.key().unwrap(), "write", stale).await.unwrap();
    let _: () = raw.hset(lock.key().unwrap(), "read", stale).await.unwrap();
    let writer = lock
        .try_write()
        .await
        .expect("a dead original stamp blocked us");
    writer.release().await.unwrap();
}

#[tokio::test]
async fn renewal_keeps_our_holds_fresh_for_original_clients() {
    let client = cluster_client().await;
    let mut raw = raw_cluster().await;
    let name = unique_name("interop-fresh");
    let lock = client.rwlock_with(
        &name,
        LockOptions::default().original_timeouts(Duration::from_secs(1), Duration::from_secs(3)),
    );
    let original = OriginalHash::new(lock.key().unwrap()); // read 1 s, write 3 s
    let reader = lock.read().await.unwrap();
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            original.acquire_write(&mut raw).await,
            None,
            "our reader looked stale"
        );
    }
    let writer_lock = client.rwlock_with(
        &name,
        LockOptions::default().original_timeouts(Duration::from_secs(1), Duration::from_secs(1)),
    );
    reader.release().await.unwrap();
    let writer = writer_lock.write().await.unwrap();
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            original.acquire_read(&mut raw).await,
            None,
            "our writer looked stale"
        );
    }
    writer.release().await.unwrap();
}

// ---- the two-key layout ----

async fn two_key_both_directions(
    client: LockClient,
    mut raw: impl redis::aio::ConnectionLike + Send,
    tag: &str,
) {
    let read_key = format!("{{{tag}}}:read");
    let write_key = format!("{{{tag}}}:write");
    let original = OriginalTwoKey::new(&read_key, &write_key);
    let lock = client.legacy_rwlock(&read_key, &write_key);

    // Our writer blocks their readers and writers.
    let writer = lock.write().await.unwrap();
    assert!(!original.acquire_read(&mut raw).await);
    assert!(!original.acquire_write(&mut raw).await);
    writer.release().await.unwrap();

    // Our readers block their writers, also after one of several left.
    let a = lock.read().await.unwrap();
    let b = lock.read().await.unwrap();
    assert!(!original.acquire_write(&mut raw).await);
    b.release().await.unwrap();
    assert!(
        !original.acquire_write(&mut raw).await,
        "one of our readers still holds"
    );
    a.release().await.unwrap();
    assert!(
        original.acquire_write(&mut raw).await,
        "free after our last reader"
    );

    // Their writer blocks our readers and writers.
    assert!(matches!(lock.try_read().await, Err(Error::WouldBlock)));
    assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));
    assert_eq!(lock.state().await.unwrap().writer.unwrap().token, None);
    original.release(&mut raw, &write_key).await;

    // Their reader blocks our writers, not our readers.
    assert!(original.acquire_read(&mut raw).await);
    assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));
    let ours = lock.try_read().await.unwrap();
    ours.release().await.unwrap();
    assert!(
        matches!(lock.try_write().await, Err(Error::WouldBlock)),
        "their reader was forgotten"
    );
    // Their release deletes the read key for every original reader: they are gone.
    original.release(&mut raw, &read_key).await;
    let writer = lock.try_write().await.unwrap();
    writer.release().await.unwrap();
}

#[tokio::test]
async fn the_two_key_layout_interoperates_on_a_standalone_server() {
    let raw = redis::Client::open(shared_standalone().url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    two_key_both_directions(standalone_client().await, raw, &unique_name("legacy")).await;
}

#[tokio::test]
async fn the_two_key_layout_interoperates_on_a_cluster() {
    two_key_both_directions(
        cluster_client().await,
        raw_cluster().await,
        &unique_name("legacy"),
    )
    .await;
}

#[tokio::test]
async fn any_two_keys_work_on_a_standalone_server() {
    let client = standalone_client().await;
    let (read_key, write_key) = (unique_name("plain-read"), unique_name("plain-write"));
    let lock = client.legacy_rwlock(&read_key, &write_key);
    let reader = lock.read().await.unwrap();
    assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));
    reader.release().await.unwrap();
    lock.try_write().await.unwrap().release().await.unwrap();
}

#[tokio::test]
async fn legacy_keys_in_different_slots_fail_before_anything_is_written() {
    let client = cluster_client().await;
    let mut raw = raw_cluster().await;
    let (read_key, write_key) = (unique_name("a-read"), unique_name("b-write"));
    let lock = client.legacy_rwlock(&read_key, &write_key);
    for result in [
        lock.read().await.map(drop),
        lock.try_write().await.map(drop),
        lock.state().await.map(drop),
        lock.key().map(drop),
    ] {
        match result {
            Err(Error::CrossSlot { key, other }) => {
                assert_eq!((key, other), (write_key.clone(), read_key.clone()))
            }
            other => panic!("expected CrossSlot, got {other:?}"),
        }
    }
    let exists: u32 = raw.exists(&[&read_key, &write_key]).await.unwrap();
    assert_eq!(exists, 0);
}

#[tokio::test]
async fn legacy_readers_are_counted_and_only_owners_release() {
    let client = standalone_client().await;
    let tag = unique_name("legacy-count");
    let lock = client.legacy_rwlock_with(
        format!("{{{tag}}}:read"),
        format!("{{{tag}}}:write"),
        LockOptions::default()
            .read_lease(Duration::from_millis(800))
            .auto_renew(false),
    );
    let short = lock.read().await.unwrap();
    let long_lock = client.legacy_rwlock(format!("{{{tag}}}:read"), format!("{{{tag}}}:write"));
    let long = long_lock.read().await.unwrap();
    // The short reader's lease ends: the long one still holds.
    tokio::time::timeout(Duration::from_secs(3), short.lost())
        .await
        .unwrap();
    assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));
    assert!(matches!(
        short.release().await,
        Err(Error::LeaseLost { .. })
    ));
    assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));
    long.release().await.unwrap();
    let writer = lock.try_write().await.unwrap();
    assert!(writer.fencing_token() > 0);
    writer.release().await.unwrap();
}

#[tokio::test]
async fn legacy_waiters_are_woken_by_releases() {
    let client = standalone_client().await;
    let tag = unique_name("legacy-wake");
    let lock = client.legacy_rwlock(format!("{{{tag}}}:read"), format!("{{{tag}}}:write"));
    let reader = lock.read().await.unwrap();
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.write().await }
    });
    common::wait_for(&lock, |s| s.queued_writers.len() == 1).await;
    let released = tokio::time::Instant::now();
    reader.release().await.unwrap();
    let writer = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(released.elapsed() < Duration::from_millis(300));
    writer.release().await.unwrap();
}

/// Found by the model (docs/PROTOCOL.md): our writer's lease runs out without a
/// release, an original writer takes the lock, and our next script must keep the
/// original writer's `write` stamp while it purges our expired owner.
#[tokio::test]
async fn an_original_writer_after_our_expired_writer_keeps_its_hold() {
    let client = cluster_client().await;
    let mut raw = raw_cluster().await;
    let lease = Duration::from_millis(400);
    let lock = client.rwlock_with(
        unique_name("interop-after-expiry"),
        LockOptions::default()
            .write_lease(lease)
            .auto_renew(false)
            .original_timeouts(Duration::from_secs(1), Duration::from_secs(3)),
    );
    let original = OriginalHash::new(lock.key().unwrap()); // write timeout 3 s
    let crashed = lock.write().await.unwrap();
    tokio::time::timeout(Duration::from_secs(3), crashed.lost())
        .await
        .unwrap();
    std::mem::forget(crashed); // never released: its owner entry is only expired
    // Something else keeps the hash alive (a queued writer, renewals of another
    // state): here, take its expiry away, so the expired entry is still there.
    let _: bool = raw.persist(lock.key().unwrap()).await.unwrap();
    // The original client judges our stamp stale by its 3 s timeout; wait it out.
    let stamp = loop {
        if let Some(stamp) = original.acquire_write(&mut raw).await {
            break stamp;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        matches!(lock.try_read().await, Err(Error::WouldBlock)),
        "a reader entered beside the original writer"
    );
    assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));
    let held: Option<String> = raw.hget(lock.key().unwrap(), "write").await.unwrap();
    assert_eq!(
        held,
        Some(stamp.to_string()),
        "the original writer's stamp was deleted"
    );
    original.release(&mut raw, "write", stamp).await;
    lock.try_write().await.unwrap().release().await.unwrap();
}

// ---- original clients with timeouts shorter than our leases ----

/// Original clients that time out sooner than our leases last (read 1 s, write 3 s
/// beside 10 s leases): our guard stops believing it holds by the time an original
/// client may judge its stamp stale. An original writer that then enters keeps its
/// hold: our release reports the lease lost and our readers stay out.
#[tokio::test]
async fn a_hold_ends_for_us_when_original_clients_may_judge_it_stale() {
    let client = cluster_client().await;
    let mut raw = raw_cluster().await;
    let lock = client.rwlock_with(
        unique_name("interop-short"),
        LockOptions::default()
            .auto_renew(false)
            .original_timeouts(Duration::from_secs(1), Duration::from_secs(3)),
    );
    let original = OriginalHash::new(lock.key().unwrap()); // read 1 s, write 3 s
    for (mode, original_timeout) in [("write", 3_000), ("read", 1_000)] {
        let acquired = tokio::time::Instant::now();
        let hold = if mode == "write" {
            Hold::Write(lock.write().await.unwrap())
        } else {
            Hold::Read(lock.read().await.unwrap())
        };
        assert!(hold.is_held(), "{mode}: not held right after the acquire");
        tokio::time::sleep_until(acquired + Duration::from_millis(original_timeout + 200)).await;
        assert!(
            !hold.is_held(),
            "{mode}: our guard still believes it holds past the original timeout"
        );
        let stamp = original.acquire_write(&mut raw).await.unwrap_or_else(|| {
            panic!("{mode}: our stale stamp still kept the original writer out")
        });
        assert!(
            matches!(hold.release().await, Err(Error::LeaseLost { .. })),
            "{mode}: the release did not report the lease lost"
        );
        assert!(
            matches!(lock.try_read().await, Err(Error::WouldBlock)),
            "{mode}: our reader entered beside the original writer"
        );
        original.release(&mut raw, "write", stamp).await;
    }
}

/// An original client's stamp, in a later millisecond than every stamp of ours on
/// the lock's `key` (a stamp equal to ours cannot be told apart from it: a known limit).
async fn later_stamp(raw: &mut redis::cluster_async::ClusterConnection, key: &str) -> i64 {
    let ours: Vec<Option<i64>> = redis::cmd("HMGET")
        .arg(key)
        .arg(&["wstamp", "rstamp"])
        .query_async(raw)
        .await
        .unwrap();
    let latest = ours.into_iter().flatten().max().unwrap_or(0);
    client_now_ms().max(latest + 1)
}

/// A read or write guard, for tests that treat both alike.
enum Hold {
    Read(redis_rwlock::RwLockReadGuard),
    Write(redis_rwlock::RwLockWriteGuard),
}

impl Hold {
    fn is_held(&self) -> bool {
        match self {
            Hold::Read(guard) => guard.is_held(),
            Hold::Write(guard) => guard.is_held(),
        }
    }

    async fn release(self) -> Result<(), Error> {
        match self {
            Hold::Read(guard) => guard.release().await,
            Hold::Write(guard) => guard.release().await,
        }
    }

    async fn lost(&self) {
        match self {
            Hold::Read(guard) => guard.lost().await,
            Hold::Write(guard) => guard.lost().await,
        }
    }
}

/// An original writer that entered beside our hold (it judged our stamp stale, e.g.
/// after a renewal was delayed past its timeout): our next renewal reports the lease
/// lost instead of renewing, leaves the original writer's stamp alone, and our
/// clients stay out until the original writer's hold ends.
#[tokio::test]
async fn a_renewal_that_finds_an_original_writer_beside_our_hold_reports_it_lost() {
    let client = cluster_client().await;
    let mut raw = raw_cluster().await;
    for mode in ["write", "read"] {
        let name = unique_name("interop-beside");
        let lock = client.rwlock_with(
            &name,
            LockOptions::default()
                .original_timeouts(Duration::from_secs(1), Duration::from_secs(3)),
        );
        let hold = if mode == "write" {
            Hold::Write(lock.write().await.unwrap())
        } else {
            Hold::Read(lock.read().await.unwrap())
        };
        // The original writer's acquire, as if our stamp had been judged stale.
        let key = lock.key().unwrap();
        let theirs = later_stamp(&mut raw, key).await;
        let _: () = raw.hset(key, "write", theirs).await.unwrap();
        tokio::time::timeout(Duration::from_secs(3), hold.lost())
            .await
            .unwrap_or_else(|_| panic!("{mode}: the renewal did not report the lease lost"));
        let write: i64 = raw.hget(key, "write").await.unwrap();
        assert_eq!(
            write, theirs,
            "{mode}: our renewal overwrote the original writer's stamp"
        );
        assert!(matches!(hold.release().await, Err(Error::LeaseLost { .. })));
        assert!(
            matches!(lock.try_read().await, Err(Error::WouldBlock)),
            "{mode}: our reader entered beside the original writer"
        );
    }
}

/// A fenced write refuses to write while an original client holds beside our writer.
#[tokio::test]
async fn a_fenced_write_is_refused_while_an_original_client_holds_beside_ours() {
    let client = cluster_client().await;
    let mut raw = raw_cluster().await;
    for field in ["write", "read"] {
        let name = unique_name("interop-fenced");
        let lock = client.rwlock_with(
            &name,
            LockOptions::default()
                .original_timeouts(Duration::from_secs(1), Duration::from_secs(3)),
        );
        let writer = lock.write().await.unwrap();
        let key = lock.key().unwrap();
        let theirs = later_stamp(&mut raw, key).await;
        let _: () = raw.hset(key, field, theirs).await.unwrap();
        let cache = format!("cache:{{{name}}}");
        let result = writer
            .fenced_write(redis_rwlock::FencedWrites::new().set(&cache, "stale"))
            .await;
        assert!(
            matches!(result, Err(Error::LeaseLost { .. })),
            "{field}: {result:?}"
        );
        let written: bool = raw.exists(&cache).await.unwrap();
        assert!(
            !written,
            "{field}: the fenced write landed beside an original client"
        );
        assert!(!writer.is_held());
    }
}

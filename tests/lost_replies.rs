//! Replies lost on their way back, each followed by a reset of the connection (a
//! relay in front of the servers: tests/common/proxy.rs). The server ran the
//! command; the client never learns the answer, reconnects, and either its driver
//! resends (cluster) or the call fails (standalone) and the application may call
//! again. An upgrade that is run again by the token that already writes must not
//! shorten the write hold below what its holder may still count on: the read hold
//! it believes in, or the write hold it was told of.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redis_rwlock::{Error, LockClient, LockOptions, RwLock};
use tokio::time::{Instant, sleep, timeout};

use common::{LocalRedis, Proxied, blocking, unique_name};

/// The end of the write-acquire function's name in an `FCALL` (the name is
/// `rwlock_<hash>_acquire_write`, a bulk string ended by CRLF): matches the upgrade's
/// call and not the library's source (`FUNCTION LOAD`), where the name is quoted.
const ACQUIRE_WRITE: &str = "_acquire_write\r\n";

/// The upgrader's read lease: its first renewal comes 10 s after the grant, far
/// after the checks below, so it believes in its read hold all along unless told
/// otherwise.
const READ_LEASE: Duration = Duration::from_secs(30);
/// The write lease: what a resent upgrade re-leases the write hold to today.
const WRITE_LEASE: Duration = Duration::from_secs(2);
/// How long another client keeps trying to write after the upgrade returned: the
/// write lease and a second more.
const WATCH_FOR: Duration = Duration::from_secs(WRITE_LEASE.as_secs() + 1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxied_cluster_carries_every_connection_of_a_lock_client() {
    let proxied = blocking(|| LocalRedis::cluster().behind_proxies());
    let client = LockClient::cluster(proxied.urls()).await.unwrap();
    let other = LockClient::cluster(proxied.urls()).await.unwrap();
    // Locks on every master, with a waiter each (its subscription too).
    for i in 0..6 {
        let name = unique_name(&format!("proxied-{i}"));
        let lock = client.rwlock(&name);
        let reader = lock.read().await.unwrap();
        let writer = {
            let lock = other.rwlock(&name);
            tokio::spawn(async move { lock.write().await.unwrap().release().await })
        };
        common::wait_for(&lock, |s| s.queued_writers.len() == 1).await;
        reader.release().await.unwrap();
        timeout(Duration::from_secs(5), writer)
            .await
            .expect("the queued writer is handed the lock")
            .unwrap()
            .unwrap();
    }
    let relayed = blocking(|| proxied.assert_all_traffic_proxied());
    let masters_relayed = proxied
        .proxies
        .iter()
        .filter(|p| p.connections() > 0)
        .count();
    println!("{relayed} relayed connections; relays used: {masters_relayed}");
    // Two clients, each with a lock connection and a subscription connection to
    // every master it used (3 masters).
    assert!(relayed >= 6, "only {relayed} relayed connections");
    assert!(masters_relayed >= 3, "only {masters_relayed} relays used");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_loses_replies_after_the_server_ran_the_command_and_resets_the_connection() {
    let proxied = blocking(|| LocalRedis::standalone().behind_proxies());
    let proxy = &proxied.proxies[0];
    let server = &proxied.redis;
    let key = unique_name("probe");
    proxy.drop_replies("lost-reply-probe", 2);
    for attempt in 1..=3 {
        let value = format!("lost-reply-probe-{attempt}");
        let reply = blocking(|| {
            let client = redis::Client::open(proxied.url()).unwrap();
            let mut conn = client
                .get_connection_with_timeout(Duration::from_secs(2))
                .unwrap();
            conn.set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            // A command before it on the same connection is answered as usual.
            let _: () = redis::cmd("PING").query(&mut conn).unwrap();
            redis::cmd("SET")
                .arg(&key)
                .arg(&value)
                .query::<()>(&mut conn)
        });
        let stored: String =
            redis::from_redis_value(blocking(|| server.raw(&server.nodes[0], &["GET", &key])))
                .unwrap();
        assert_eq!(stored, value, "attempt {attempt}: the server ran the SET");
        if attempt <= 2 {
            let err = reply.expect_err("the reply is lost");
            assert!(
                err.is_connection_dropped() || err.is_io_error(),
                "attempt {attempt}: {err:?}"
            );
            assert_eq!(proxy.dropped(), attempt);
        } else {
            reply.expect("disarmed after two: the third reply comes through");
        }
    }
    assert_eq!(proxy.armed(), 0);
    assert!(proxy.until_dropped(2, Duration::from_secs(1)).await);
}

/// Whether `upgrader` (the read guard, or the write guard it became) believes it
/// holds; `true` while any of them `is_held()`.
fn believes(
    upgradable: &redis_rwlock::RwLockUpgradableReadGuard,
    writer: Option<&redis_rwlock::RwLockWriteGuard>,
) -> bool {
    upgradable.is_held() || writer.is_some_and(|w| w.is_held())
}

/// Another client's `try_write` every 50 ms for [`WATCH_FOR`]: every grant while the
/// upgrader believes it holds is a violation, reported with when it came (since the
/// watch began) and what the lock looked like.
async fn watch_writers(
    lock: &RwLock,
    upgradable: &redis_rwlock::RwLockUpgradableReadGuard,
    writer: Option<&redis_rwlock::RwLockWriteGuard>,
) -> Vec<String> {
    let started = Instant::now();
    let mut violations = Vec::new();
    let mut granted_at = None;
    while started.elapsed() < WATCH_FOR {
        match lock.try_write().await {
            Ok(other) => {
                let at = started.elapsed();
                let beside = believes(upgradable, writer);
                if beside {
                    violations.push(format!(
                        "another client's try_write was granted {at:?} after the upgrade \
                         returned, while the upgrader still believes it holds (read guard \
                         is_held: {}, write guard is_held: {:?})",
                        upgradable.is_held(),
                        writer.map(|w| w.is_held())
                    ));
                }
                granted_at.get_or_insert(at);
                other.release().await.unwrap();
            }
            Err(Error::WouldBlock) => {}
            Err(err) => panic!("try_write failed: {err:?}"),
        }
        sleep(Duration::from_millis(50)).await;
    }
    println!(
        "another writer: first granted {granted_at:?} after the upgrade returned; the upgrader \
         believes it holds at the end: {}",
        believes(upgradable, writer)
    );
    violations
}

/// The upgrader `lock` (read lease [`READ_LEASE`], write lease [`WRITE_LEASE`]) takes
/// the upgradable read; the relay in front of the lock's master loses the replies to
/// its next `lost` write-acquire calls (the upgrade and whatever the driver resends);
/// then `try_upgrade` is called `calls` times in a row (the application calling again
/// after an error), stopping at the first success. Another client then tries to
/// write for [`WATCH_FOR`]: it must never be granted while the upgrader believes it
/// holds.
async fn upgrade_through_lost_replies(proxied: &Proxied, cluster: bool, lost: u64, calls: u32) {
    let connect = || async {
        if cluster {
            LockClient::cluster(proxied.urls()).await.unwrap()
        } else {
            LockClient::standalone(proxied.url()).await.unwrap()
        }
    };
    let (upgrader, others) = (connect().await, connect().await);
    let name = unique_name("lost-upgrade");
    let options = LockOptions::default()
        .read_lease(READ_LEASE)
        .write_lease(WRITE_LEASE);
    let lock = upgrader.rwlock_with(&name, options.clone());
    let other = others.rwlock_with(&name, options);
    let mut upgradable = lock.upgradable_read().await.unwrap();
    let proxy = blocking(|| proxied.proxy_for_key(lock.key().unwrap()));
    proxy.drop_replies(ACQUIRE_WRITE, lost);

    let mut writer = None;
    let mut outcomes = Vec::new();
    for _ in 0..calls {
        let sent = Instant::now();
        let outcome = timeout(Duration::from_secs(10), upgradable.try_upgrade())
            .await
            .expect("try_upgrade returns within its request limits");
        outcomes.push(format!(
            "{} after {:?} ({} replies lost so far)",
            match &outcome {
                Ok(w) => format!("Ok (fence {})", w.fencing_token()),
                Err(err) => format!("Err({err})"),
            },
            sent.elapsed(),
            proxy.dropped()
        ));
        if let Ok(granted) = outcome {
            writer = Some(granted);
            break;
        }
    }
    let unused = proxy.disarm();
    let state = lock.state().await.unwrap();
    println!(
        "try_upgrade: {outcomes:?}; {} replies lost ({unused} armed but unused); the lock: \
         writer until {:?} (server time {}), readers {:?}",
        proxy.dropped(),
        state.writer.as_ref().map(|w| w.until),
        state.server_time,
        state.readers
    );
    assert!(
        proxy.dropped() >= 1,
        "no reply was lost: the relay missed the upgrade"
    );
    assert!(
        believes(&upgradable, writer.as_ref()),
        "the upgrader no longer believes it holds right after the upgrade: nothing to check"
    );

    let violations = watch_writers(&other, &upgradable, writer.as_ref()).await;
    assert!(
        violations.is_empty(),
        "{} of another client's try_write calls were granted beside the upgrader; the first: {}",
        violations.len(),
        violations[0]
    );
    if let Some(writer) = writer {
        writer.release().await.unwrap();
    }
    drop(upgradable);
}

/// Cluster: the reply to the upgrade and to every resend of it are lost
/// (`try_upgrade` fails after the driver's retries). The first run upgraded the read
/// hold (the write hold lasts as long as the read hold had left, 30 s); each resend
/// finds the token writing and re-leases it for the write lease only, so without a
/// fix another writer gets in about 2 s later while the upgrader's read guard still
/// says it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_upgrade_whose_replies_are_all_lost_never_lets_a_writer_in_beside_the_upgrader() {
    let proxied = blocking(|| LocalRedis::cluster().behind_proxies());
    upgrade_through_lost_replies(&proxied, true, 100, 1).await;
}

/// Cluster: only the first reply is lost; the driver's resend is answered and
/// `try_upgrade` returns the write guard. The write guard (and nothing else) then
/// keeps other writers out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_upgrade_answered_the_second_time_keeps_other_writers_out() {
    let proxied = blocking(|| LocalRedis::cluster().behind_proxies());
    upgrade_through_lost_replies(&proxied, true, 1, 1).await;
}

/// Standalone (no resend): the first `try_upgrade` fails with the lost reply; the
/// application calls it again, which finds the token writing and succeeds. No other
/// writer may get in while either guard says it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_called_again_after_a_lost_reply_keeps_other_writers_out() {
    let proxied = blocking(|| LocalRedis::standalone().behind_proxies());
    upgrade_through_lost_replies(&proxied, false, 1, 2).await;
}

/// Standalone: the application calls `try_upgrade` again after a lost reply, and
/// that reply is lost too. The second call re-leased the write hold for the write
/// lease only: without a fix another writer gets in about 2 s later while the read
/// guard still says it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_called_again_whose_reply_is_lost_too_never_lets_a_writer_in_beside_the_upgrader()
 {
    let proxied = blocking(|| LocalRedis::standalone().behind_proxies());
    upgrade_through_lost_replies(&proxied, false, 2, 2).await;
}

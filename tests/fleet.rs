//! The fleet view, `LockClient::list_locks`: every lock on every master of a cluster
//! (and on one server) in the state `RwLock::state` reads, nothing that is not a
//! lock, and pages that stop at their bounds and continue where they stopped.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use redis::AsyncCommands;
use redis_rwlock::{Error, ListOptions, LockClient, LockMode, LockOptions, LockSummary};

use common::{
    LocalRedis, blocking, cluster_client, raw_cluster, shared_cluster, shared_standalone,
    standalone_client, unique_name, wait_for,
};

/// A long write lease: a lock written and released keeps its key (and fencing
/// counter) about this long, well past any test's end.
const LONG: Duration = Duration::from_secs(60);

/// Every page of a listing, followed to its end (at most `pages` pages): the locks
/// by name (a lock found twice, as SCAN may, counts once) and how many pages it took.
async fn list_all(
    client: &LockClient,
    options: ListOptions,
    pages: usize,
) -> (BTreeMap<String, LockSummary>, usize) {
    let mut found = BTreeMap::new();
    let mut next = options.clone();
    for page_number in 1..=pages {
        let page = client.list_locks(next).await.unwrap();
        for lock in page.locks {
            found.entry(lock.name.clone()).or_insert(lock);
        }
        match page.next {
            Some(cursor) => next = options.clone().after(cursor),
            None => return (found, page_number),
        }
    }
    panic!("the listing did not end within {pages} pages");
}

/// The names of one page, checking that none is listed twice in it.
fn names(locks: &[LockSummary]) -> BTreeSet<String> {
    let names: BTreeSet<String> = locks.iter().map(|l| l.name.clone()).collect();
    assert_eq!(
        names.len(),
        locks.len(),
        "a lock twice in one page: {locks:?}"
    );
    names
}

/// Redis-only: locks placed on each master (hash slots), a legacy-layout lock and
/// keys that are not locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lock_on_every_master_is_listed_in_its_state() {
    let cluster = shared_cluster();
    let client = cluster_client().await;
    let group = unique_name("fleet");
    let masters = blocking(|| cluster.masters());
    assert_eq!(masters.len(), 3);
    let on = |what: &str, master: usize| {
        blocking(|| cluster.name_on_master(&format!("{group}-{what}"), masters[master]))
    };
    let (written, read, queued, fenced) = (on("w", 0), on("r", 1), on("q", 2), on("f", 0));
    // The four locks live on all three masters.
    let homes: HashSet<u16> = [&written, &read, &queued, &fenced]
        .iter()
        .map(|name| {
            let key = format!("rwlock:{{{name}}}");
            blocking(|| cluster.master_for_key(&key).port)
        })
        .collect();
    assert_eq!(homes.len(), 3, "the locks are not on every master");

    // Write-held; read-held by two; read-held with a writer queued behind; free
    // but present with its fencing counter.
    let writer = client.rwlock(&written).write().await.unwrap();
    let read_lock = client.rwlock(&read);
    let readers = [
        read_lock.read().await.unwrap(),
        read_lock.read_recursive().await.unwrap(),
    ];
    let queued_lock = client.rwlock(&queued);
    let holder = queued_lock.read().await.unwrap();
    let waiter = tokio::spawn({
        let lock = queued_lock.clone();
        async move { lock.write().await.unwrap().release().await.unwrap() }
    });
    wait_for(&queued_lock, |s| s.queued_writers.len() == 1).await;
    let fenced_lock = client.rwlock_with(&fenced, LockOptions::default().write_lease(LONG));
    let fenced_writer = fenced_lock.write().await.unwrap();
    let fence = fenced_writer.fencing_token();
    fenced_writer.release().await.unwrap();

    // Keys that match the pattern but are no locks, and locks of other kinds.
    let mut raw = raw_cluster().await;
    let _: () = raw
        .set(format!("rwlock:{{{group}-string}}"), "not a lock")
        .await
        .unwrap();
    let _: () = raw
        .hset(format!("rwlock:{{{group}-odd}}x}}"), "f", "1")
        .await
        .unwrap();
    let legacy = client.legacy_rwlock(
        format!("{{{group}-legacy}}:read"),
        format!("{{{group}-legacy}}:write"),
    );
    let legacy_hold = legacy.write().await.unwrap();
    let other_prefix = LockOptions::default().key_prefix("elsewhere");
    let elsewhere = client.rwlock_with(format!("{group}-elsewhere"), other_prefix);
    let elsewhere_hold = elsewhere.write().await.unwrap();

    let pattern = format!("{group}-*");
    let page = client
        .list_locks(ListOptions::default().pattern(&pattern))
        .await
        .unwrap();
    assert!(page.is_complete(), "cut short: {:?}", page.next);
    let expected: BTreeSet<String> = [&written, &read, &queued, &fenced]
        .into_iter()
        .cloned()
        .collect();
    assert_eq!(names(&page.locks), expected);
    let by_name: BTreeMap<&str, &LockSummary> =
        page.locks.iter().map(|l| (l.name.as_str(), l)).collect();

    let w = by_name[written.as_str()];
    assert_eq!(w.key, format!("rwlock:{{{written}}}"));
    assert_eq!(
        (w.mode(), w.holders(), w.queued_writers()),
        (Some(LockMode::Write), 1, 0)
    );
    assert_eq!(w.state.fencing_token, writer.fencing_token());
    assert_eq!(w.held_until(), w.state.writer.as_ref().map(|h| h.until));
    assert!(w.held_until().unwrap() > w.state.server_time);

    let r = by_name[read.as_str()];
    assert_eq!(
        (r.mode(), r.holders(), r.queued_writers()),
        (Some(LockMode::Read), 2, 0)
    );
    let now = read_lock.state().await.unwrap();
    let tokens = |l: &LockSummary| -> BTreeSet<Option<String>> {
        l.state.readers.iter().map(|h| h.token.clone()).collect()
    };
    assert_eq!(
        tokens(r),
        now.readers.iter().map(|h| h.token.clone()).collect()
    );

    let q = by_name[queued.as_str()];
    assert_eq!(
        (q.mode(), q.holders(), q.queued_writers()),
        (Some(LockMode::Read), 1, 1)
    );
    let first = q.first_in_line().unwrap();
    assert_eq!(
        first.token,
        queued_lock.state().await.unwrap().queued_writers[0].token
    );
    assert!(first.until > q.state.server_time, "the place has lapsed");

    let f = by_name[fenced.as_str()];
    assert_eq!((f.mode(), f.holders(), f.queued_writers()), (None, 0, 0));
    assert_eq!(f.state.fencing_token, fence);
    assert_eq!(f.held_until(), None);

    // One name, exactly; and the other prefix's lock under its own prefix only.
    let one = client
        .list_locks(ListOptions::default().pattern(&written))
        .await
        .unwrap();
    assert_eq!(names(&one.locks), BTreeSet::from([written.clone()]));
    let other = client
        .list_locks(
            ListOptions::default()
                .key_prefix("elsewhere")
                .pattern(&pattern),
        )
        .await
        .unwrap();
    assert_eq!(
        names(&other.locks),
        BTreeSet::from([format!("{group}-elsewhere")])
    );
    assert_eq!(
        other.locks[0].key,
        format!("elsewhere:{{{group}-elsewhere}}")
    );
    assert_eq!(other.locks[0].mode(), Some(LockMode::Write));

    writer.release().await.unwrap();
    for reader in readers {
        reader.release().await.unwrap();
    }
    holder.release().await.unwrap();
    waiter.await.unwrap();
    legacy_hold.release().await.unwrap();
    elsewhere_hold.release().await.unwrap();
}

/// Redis-only: a standalone server's listing (its SCAN), beside a key of another
/// type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_is_listed_like_a_cluster() {
    let server = shared_standalone();
    let client = standalone_client().await;
    let group = unique_name("fleet-one");
    let (written, read, fenced) = (
        format!("{group}-w"),
        format!("{group}-r"),
        format!("{group}-f"),
    );
    let writer = client.rwlock(&written).write().await.unwrap();
    let read_lock = client.rwlock(&read);
    let readers = [
        read_lock.read().await.unwrap(),
        read_lock.read_recursive().await.unwrap(),
    ];
    let fenced_writer = client
        .rwlock_with(&fenced, LockOptions::default().write_lease(LONG))
        .write()
        .await
        .unwrap();
    let fence = fenced_writer.fencing_token();
    fenced_writer.release().await.unwrap();
    let mut raw = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = raw
        .set(format!("rwlock:{{{group}-string}}"), "not a lock")
        .await
        .unwrap();

    let page = client
        .list_locks(ListOptions::default().pattern(&format!("{group}-*")))
        .await
        .unwrap();
    assert!(page.is_complete());
    assert_eq!(
        names(&page.locks),
        BTreeSet::from([written.clone(), read.clone(), fenced.clone()])
    );
    for lock in &page.locks {
        let expected = if lock.name == written {
            (Some(LockMode::Write), 1, writer.fencing_token())
        } else if lock.name == read {
            (Some(LockMode::Read), 2, 0)
        } else {
            (None, 0, fence)
        };
        assert_eq!(
            (lock.mode(), lock.holders(), lock.state.fencing_token),
            expected,
            "{lock:?}"
        );
    }

    writer.release().await.unwrap();
    for reader in readers {
        reader.release().await.unwrap();
    }
}

on_both_backends! {
async fn a_page_stops_at_its_limit_and_the_next_goes_on(backend: Backend) {
    let client = backend.client().await;
    let group = unique_name("fleet-pages");
    let all: BTreeSet<String> = (0..7).map(|i| format!("{group}-{i}")).collect();
    for name in &all {
        let lock = client.rwlock_with(name, LockOptions::default().write_lease(LONG));
        lock.write().await.unwrap().release().await.unwrap();
    }
    let options = ListOptions::default()
        .pattern(&format!("{group}-*"))
        .limit(3);

    let first = client.list_locks(options.clone()).await.unwrap();
    assert_eq!(first.locks.len(), 3, "{first:?}");
    let cursor = first.next.clone().expect("7 locks, 3 a page: cut short");
    // The cursor survives a trip through JSON (a tool may keep it).
    let cursor: redis_rwlock::ListCursor =
        serde_json::from_str(&serde_json::to_string(&cursor).unwrap()).unwrap();
    let second = client
        .list_locks(options.clone().after(cursor))
        .await
        .unwrap();
    assert!(second.locks.len() <= 3);
    assert!(
        names(&first.locks).is_disjoint(&names(&second.locks)),
        "the second page starts over"
    );

    let mut pages = 0;
    let mut seen = BTreeSet::new();
    let mut next = options.clone();
    loop {
        let page = client.list_locks(next).await.unwrap();
        assert!(page.locks.len() <= 3, "{page:?}");
        assert!(
            page.locks
                .iter()
                .all(|l| l.state.fencing_token > 0 && l.state.is_free())
        );
        seen.extend(names(&page.locks));
        pages += 1;
        assert!(pages <= 20, "no end");
        match page.next {
            Some(cursor) => next = options.clone().after(cursor),
            None => break,
        }
    }
    assert_eq!(seen, all);
    assert!(pages >= 3, "{pages} pages of at most 3 for 7 locks");
}
}

/// Redis-only: counts the server's SCAN commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_sends_at_most_max_scans_scans() {
    // A private server: its SCAN count is this test's alone.
    let server = blocking(LocalRedis::standalone);
    let client = LockClient::standalone(server.url()).await.unwrap();
    let group = unique_name("fleet-scans");
    let all: BTreeSet<String> = (0..7).map(|i| format!("{group}-{i}")).collect();
    for name in &all {
        let lock = client.rwlock_with(name, LockOptions::default().write_lease(LONG));
        lock.write().await.unwrap().release().await.unwrap();
    }
    // Many keys that are not locks, for SCAN to go through.
    let mut raw = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for i in 0..300 {
        let _: () = raw.set(format!("filler:{i}"), i).await.unwrap();
    }
    let scans = || {
        let server = &server;
        blocking(|| {
            server
                .commandstats(&server.nodes[0])
                .get("scan")
                .copied()
                .unwrap_or(0)
        })
    };
    let options = ListOptions::default()
        .pattern(&format!("{group}-*"))
        .scan_count(10)
        .max_scans(1);
    let before = scans();
    let page = client.list_locks(options.clone()).await.unwrap();
    assert_eq!(scans() - before, 1, "one SCAN a page");
    assert!(page.next.is_some(), "307 keys in one SCAN of 10?");

    let (found, pages) = list_all(&client, options, 10_000).await;
    assert_eq!(found.keys().cloned().collect::<BTreeSet<_>>(), all);
    assert!(pages > 1, "{pages}");
    assert_eq!(scans() - before, pages as u64 + 1, "one SCAN per page");

    // With room enough, one page lists them all.
    let whole = client
        .list_locks(ListOptions::default().pattern(&format!("{group}-*")))
        .await
        .unwrap();
    assert!(whole.is_complete());
    assert_eq!(names(&whole.locks), all);
}

on_both_backends! {
async fn bad_options_are_refused_before_any_io(backend: Backend) {
    let client = backend.client().await;
    for options in [
        ListOptions::default().pattern(""),
        ListOptions::default().key_prefix("a{b}"),
        ListOptions::default().key_prefix(""),
        ListOptions::default().limit(0),
        ListOptions::default().scan_count(0),
        ListOptions::default().max_scans(0),
    ] {
        match client.list_locks(options.clone()).await {
            Err(Error::InvalidOptions(_)) => {}
            other => panic!("{options:?}: {other:?}"),
        }
    }
}
}

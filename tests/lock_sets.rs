//! Lock sets (`LockClient::lock_set`): several locks at once, some read and some
//! written, all or nothing; never a deadlock whatever order the callers list the
//! members in; nothing left held (no hold, no place in line) after a set fails,
//! times out or is dropped; one member's lost lease is the set's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use redis_rwlock::{Error, LockClient, LockMode, LockOptions, LockSet, LockState};

use common::{Backend, HoldChecker, raw_cluster, unique_name, wait_for};

/// A wait limit no passing test comes near: a set that hits it was stuck.
const STUCK: Duration = Duration::from_secs(30);

fn patient(client: &LockClient) -> LockSet {
    client.lock_set_with(LockOptions::default().wait_timeout(STUCK))
}

/// Nobody holds the lock, and nobody waits for it.
fn idle(state: &LockState) -> bool {
    state.is_free() && state.queued_writers.is_empty() && state.waiting_readers.is_empty()
}

/// Two clients loop over the same two locks, a and b, `rounds` times each: the
/// first lists them a, b, the second b, a. `modes[client]` is what that client
/// takes a and b in. Every hold is checked for exclusion in this process; every
/// set must be taken (none times out), and both locks are idle at the end.
async fn opposite_orders(
    backend: &Backend,
    names: [String; 2],
    modes: [[LockMode; 2]; 2],
    rounds: usize,
) {
    let checkers = Arc::new([HoldChecker::default(), HoldChecker::default()]);
    let mut loops = Vec::new();
    for (client, listed) in [[0, 1], [1, 0]].into_iter().enumerate() {
        let modes = modes[client];
        let lock_client = backend.client().await;
        let set = listed
            .iter()
            .fold(patient(&lock_client), |set, &i| match modes[i] {
                LockMode::Read => set.read(names[i].as_str()),
                LockMode::Write => set.write(names[i].as_str()),
            });
        let checkers = checkers.clone();
        loops.push(tokio::spawn(async move {
            let _client = lock_client;
            for _ in 0..rounds {
                let held = set.acquire().await?;
                for (checker, mode) in checkers.iter().zip(modes) {
                    match mode {
                        LockMode::Read => checker.enter_read(),
                        LockMode::Write => checker.enter_write(),
                    }
                }
                tokio::task::yield_now().await;
                for (checker, mode) in checkers.iter().zip(modes) {
                    match mode {
                        LockMode::Read => checker.leave_read(),
                        LockMode::Write => checker.leave_write(),
                    }
                }
                held.release().await?;
            }
            Ok::<usize, Error>(rounds)
        }));
    }
    for done in loops {
        let taken = done.await.unwrap().expect("a set never times out or fails");
        assert_eq!(taken, rounds);
    }
    for checker in checkers.iter() {
        let counts = checker.report();
        assert_eq!(counts.violations, 0, "{counts:?}");
    }
    let client = backend.client().await;
    for name in &names {
        let state = client.rwlock(name.as_str()).state().await.unwrap();
        assert!(idle(&state), "{name}: {state:?}");
    }
}

on_both_backends! {
/// Both as writers: {a, b} against {b, a}, a thousand times each.
async fn writers_in_opposite_orders_never_deadlock(backend: Backend) {
    let both = [LockMode::Write, LockMode::Write];
    let names = [unique_name("set-a"), unique_name("set-b")];
    opposite_orders(&backend, names, [both, both], 1000).await;
}

/// Mixed: one reads a and writes b; the other lists b first, reads it and writes a.
async fn mixed_sets_in_opposite_orders_never_deadlock(backend: Backend) {
    let modes = [[LockMode::Read, LockMode::Write], [LockMode::Write, LockMode::Read]];
    let names = [unique_name("set-a"), unique_name("set-b")];
    opposite_orders(&backend, names, modes, 1000).await;
}

/// The same in one slot (names sharing a hash tag), where each set asks for both
/// members in one request and, refused, takes them one by one.
async fn sets_in_one_slot_in_opposite_orders_never_deadlock(backend: Backend) {
    let tag = unique_name("slot");
    let names = [format!("{{{tag}}}:a"), format!("{{{tag}}}:b")];
    let both = [LockMode::Write, LockMode::Write];
    opposite_orders(&backend, names.clone(), [both, both], 300).await;
    let modes = [[LockMode::Read, LockMode::Write], [LockMode::Write, LockMode::Read]];
    opposite_orders(&backend, names, modes, 300).await;
}

/// A set in one slot is all or nothing there too: refused at its last member, it
/// holds none of the others; waiting, it gets them all once that member is free.
async fn a_set_in_one_slot_takes_all_or_none(backend: Backend) {
    let client = backend.client().await;
    let other = backend.client().await;
    let tag = unique_name("whole");
    let names = ["a", "b", "c"].map(|n| format!("{{{tag}}}:{n}"));
    let set = patient(&client).write(names[0].as_str()).read(names[1].as_str()).write(names[2].as_str());
    let blocker = other.rwlock(names[2].as_str()).read().await.unwrap();
    let refused = set.try_acquire().await;
    assert!(matches!(refused, Err(Error::WouldBlock)), "{refused:?}");
    for name in &names[..2] {
        let state = client.rwlock(name.as_str()).state().await.unwrap();
        assert!(idle(&state), "{name} held after a refusal: {state:?}");
    }
    let waiting = tokio::spawn({
        let set = set.clone();
        async move { set.acquire().await }
    });
    wait_for(&client.rwlock(names[2].as_str()), |s| !s.queued_writers.is_empty()).await;
    blocker.release().await.unwrap();
    let held = waiting.await.unwrap().unwrap();
    for (name, mode) in names.iter().zip([LockMode::Write, LockMode::Read, LockMode::Write]) {
        let state = client.rwlock(name.as_str()).state().await.unwrap();
        assert_eq!(state.mode(), Some(mode), "{name}: {state:?}");
    }
    let fences: Vec<Option<u64>> = names.iter().map(|n| held.fencing_token(n)).collect();
    assert!(fences[0].is_some() && fences[1].is_none() && fences[2].is_some(), "{fences:?}");
    held.release().await.unwrap();
    for name in &names {
        wait_for(&client.rwlock(name.as_str()), idle).await;
    }
}

/// A set whose last member is held elsewhere gives up at its wait limit, and by the
/// time the error returns its other members are free and it has no place in the
/// held member's line.
async fn a_set_that_times_out_leaves_nothing_held(backend: Backend) {
    let client = backend.client().await;
    let other = backend.client().await;
    let names = ["a", "b", "c"].map(|n| unique_name(&format!("timeout-{n}")));
    let blocker = other.rwlock(names[2].as_str()).write().await.unwrap();
    let set = client
        .lock_set_with(LockOptions::default().wait_timeout(Duration::from_millis(500)))
        .write(names[2].as_str())
        .read(names[0].as_str())
        .write(names[1].as_str());
    let last_in_order = set.members().last().unwrap().0.to_owned();
    let err = set.acquire().await.expect_err("a member is held elsewhere");
    let returned = std::time::Instant::now();
    match &err {
        Error::Timeout { lock, mode, waited } => {
            assert_eq!(*waited, Duration::from_millis(500));
            assert_eq!(*lock, names[2], "{err}");
            assert_eq!(*mode, redis_rwlock::Mode::Write);
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(err.to_string().contains(&names[2]), "{err}");
    for name in &names[..2] {
        let state = client.rwlock(name.as_str()).state().await.unwrap();
        assert!(idle(&state), "{name} still held after the error: {state:?}");
    }
    // The place it waited in is withdrawn as the attempt is dropped, in the
    // background (as a dropped acquire's is): it goes, long before it would lapse.
    let blocked = client.rwlock(names[2].as_str());
    let gone = wait_for(&blocked, |s| s.queued_writers.is_empty()).await;
    assert_eq!(gone.mode(), Some(LockMode::Write), "{gone:?}");
    assert!(
        returned.elapsed() < Duration::from_millis(1000),
        "the place lapsed (after {:?}) instead of being withdrawn",
        returned.elapsed()
    );
    blocker.release().await.unwrap();
    // The blocked member was not necessarily the last in the set's order: whichever
    // it was, the set now takes everything.
    assert!(names.contains(&last_in_order));
    let held = set.acquire().await.unwrap();
    assert!(held.is_held());
    held.release().await.unwrap();
}

/// A set dropped while it waits (holding the members before the one it waits for)
/// releases them and withdraws its place in the background.
async fn a_dropped_set_leaves_nothing_held(backend: Backend) {
    let client = backend.client().await;
    let other = backend.client().await;
    let set = patient(&client).write(unique_name("drop-x")).write(unique_name("drop-y"));
    let order: Vec<String> = set.members().map(|(name, _)| name.to_owned()).collect();
    let (first, last) = (&order[0], &order[1]);
    let blocker = other.rwlock(last.as_str()).write().await.unwrap();
    let waiting = tokio::spawn({
        let set = set.clone();
        async move { set.acquire().await.map(drop) }
    });
    // It holds the first member and waits in the second's line.
    wait_for(&client.rwlock(first.as_str()), |s| s.writer.is_some()).await;
    wait_for(&client.rwlock(last.as_str()), |s| !s.queued_writers.is_empty()).await;
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    wait_for(&client.rwlock(first.as_str()), idle).await;
    wait_for(&client.rwlock(last.as_str()), |s| s.queued_writers.is_empty()).await;
    blocker.release().await.unwrap();
    wait_for(&client.rwlock(last.as_str()), idle).await;
}

/// try_acquire takes all or nothing, and never waits.
async fn try_acquire_is_all_or_nothing(backend: Backend) {
    let client = backend.client().await;
    let other = backend.client().await;
    let set = client.lock_set().write(unique_name("try-p")).write(unique_name("try-q"));
    let order: Vec<String> = set.members().map(|(name, _)| name.to_owned()).collect();
    let blocker = other.rwlock(order[1].as_str()).read().await.unwrap();
    let refused = set.try_acquire().await;
    assert!(matches!(refused, Err(Error::WouldBlock)), "{refused:?}");
    for name in &order {
        let state = client.rwlock(name.as_str()).state().await.unwrap();
        assert!(state.writer.is_none() && state.queued_writers.is_empty(), "{name}: {state:?}");
    }
    blocker.release().await.unwrap();
    let held = set.try_acquire().await.unwrap();
    assert_eq!(held.names().collect::<Vec<_>>(), order);
    held.release().await.unwrap();
}

/// One member's lease lost (its state deleted behind the holder's back) makes the
/// whole set lost.
async fn one_lost_member_loses_the_set(backend: Backend) {
    let client = backend.client().await;
    let options = LockOptions::default().write_lease(Duration::from_millis(1500));
    let (a, b) = (unique_name("lost-a"), unique_name("lost-b"));
    let held = client
        .lock_set_with(options)
        .write(a.as_str())
        .read(b.as_str())
        .acquire()
        .await
        .unwrap();
    assert!(held.is_held());
    backend.delete_lock(&client.rwlock(a.as_str())).await;
    tokio::time::timeout(Duration::from_secs(10), held.lost())
        .await
        .expect("the set hears of its member's lost lease");
    assert!(!held.is_held());
    let released = held.release().await;
    assert!(matches!(released, Err(Error::LeaseLost { .. })), "{released:?}");
    wait_for(&client.rwlock(b.as_str()), idle).await;
}

/// The client's own idle kept read of a member does not refuse its set that
/// writes it: the kept hold goes first, as before a write.
async fn a_kept_read_makes_way_for_the_clients_set(backend: Backend) {
    let client = backend.client().await;
    let tag = unique_name("kept");
    let (a, b) = (format!("{{{tag}}}:a"), format!("{{{tag}}}:b"));
    let keeping = client.rwlock_with(a.as_str(), LockOptions::default().keep_reads(STUCK));
    keeping.read().await.unwrap().release().await.unwrap();
    let state = client.rwlock(a.as_str()).state().await.unwrap();
    assert_eq!(state.readers.len(), 1, "the read is kept: {state:?}");
    let held = client.lock_set().write(a.as_str()).write(b.as_str()).try_acquire().await;
    let held = held.expect("the kept read gave way");
    let state = client.rwlock(a.as_str()).state().await.unwrap();
    assert_eq!(state.mode(), Some(LockMode::Write), "{state:?}");
    assert!(state.readers.is_empty(), "{state:?}");
    held.release().await.unwrap();
}

/// Written members have fencing tokens, read ones none; a read member joins the
/// client's read hold of the lock instead of taking one of its own.
async fn fencing_tokens_and_shared_reads(backend: Backend) {
    let client = backend.client().await;
    let (r, w) = (unique_name("fence-r"), unique_name("fence-w"));
    let reading = client.rwlock(r.as_str()).read().await.unwrap();
    let held = client.lock_set().read(r.as_str()).write(w.as_str()).acquire().await.unwrap();
    let state = client.rwlock(r.as_str()).state().await.unwrap();
    assert_eq!(state.readers.len(), 1, "the set's read joins the client's hold: {state:?}");
    let fence = held.fencing_token(&w).expect("a written member has a fencing token");
    assert_eq!(fence, client.rwlock(w.as_str()).state().await.unwrap().fencing_token);
    assert_eq!(held.fencing_token(&r), None);
    assert_eq!(held.fencing_token("not a member"), None);
    held.release().await.unwrap();
    reading.release().await.unwrap();
    let again = client.lock_set().write(w.as_str()).acquire().await.unwrap();
    assert!(again.fencing_token(&w).unwrap() > fence);
    again.release().await.unwrap();
}

/// Sets that cannot be taken say why before any I/O.
async fn invalid_sets_are_refused(backend: Backend) {
    let client = backend.client().await;
    let empty = client.lock_set().acquire().await;
    assert!(
        matches!(&empty, Err(Error::InvalidOptions(m)) if m.contains("no members")),
        "{empty:?}"
    );
    let twice = client.lock_set().read("dup").write("other").write("dup").acquire().await;
    assert!(
        matches!(&twice, Err(Error::InvalidOptions(m)) if m.contains("\"dup\" twice")),
        "{twice:?}"
    );
    let braces = client.lock_set().write("ok").write("a{b}c").try_acquire().await;
    assert!(matches!(&braces, Err(Error::InvalidOptions(m)) if m.contains("a{b}c")), "{braces:?}");
    // Nothing was taken on the way to the refusals.
    for name in ["dup", "other", "ok"] {
        let state = client.rwlock(name).state().await.unwrap();
        assert!(idle(&state), "{name}: {state:?}");
    }
}
}

/// The order a set takes its members in does not depend on how they were listed.
#[tokio::test]
async fn every_listing_takes_the_members_in_one_order() {
    let store = redis_rwlock::MemoryStore::new();
    let client = LockClient::in_memory(&store);
    let names = ["m", "c", "x", "a", "q"];
    let forward = names.iter().fold(client.lock_set(), |set, n| set.write(*n));
    let backward = names
        .iter()
        .rev()
        .fold(client.lock_set(), |set, n| set.read(*n));
    let order = |set: &LockSet| set.members().map(|(n, _)| n.to_owned()).collect::<Vec<_>>();
    assert_eq!(order(&forward), order(&backward));
    let mut sorted = names.map(str::to_owned).to_vec();
    sorted.sort();
    assert_eq!(order(&forward), sorted, "plain names order by their keys");
}

/// A set over locks on all three masters of the cluster takes and releases them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_spanning_three_masters() {
    let client = common::cluster_client().await;
    let mut raw = raw_cluster().await;
    // One name per master's slot range (the test cluster splits the 16384 slots
    // evenly in three).
    let mut names: [Option<String>; 3] = [None, None, None];
    for i in 0.. {
        let name = unique_name(&format!("masters-{i}"));
        let key = client.rwlock(name.as_str()).key().unwrap().to_owned();
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(&key)
            .query_async(&mut raw)
            .await
            .unwrap();
        let third = usize::from(slot / 5462).min(2);
        names[third].get_or_insert(name);
        if names.iter().all(Option::is_some) {
            break;
        }
    }
    let names = names.map(Option::unwrap);
    let other = common::cluster_client().await;
    let set = patient(&client)
        .write(names[0].as_str())
        .read(names[1].as_str())
        .write(names[2].as_str());
    // A rival on another client, listing two of the members the other way round.
    let rival = patient(&other)
        .read(names[2].as_str())
        .write(names[0].as_str());
    let loops = [set.clone(), rival].map(|set| {
        tokio::spawn(async move {
            for _ in 0..50 {
                let held = set.acquire().await?;
                assert!(held.is_held());
                held.release().await?;
            }
            Ok::<(), Error>(())
        })
    });
    for done in loops {
        done.await.unwrap().expect("no set times out");
    }
    let held = set.acquire().await.unwrap();
    for (i, name) in names.iter().enumerate() {
        let state = client.rwlock(name.as_str()).state().await.unwrap();
        let mode = if i == 1 {
            LockMode::Read
        } else {
            LockMode::Write
        };
        assert_eq!(state.mode(), Some(mode), "{name}: {state:?}");
    }
    held.release().await.unwrap();
    for name in &names {
        let state = client.rwlock(name.as_str()).state().await.unwrap();
        assert!(idle(&state), "{name}: {state:?}");
    }
}

/// Four members in one slot: one request takes them all (`acquire_set`), and none
/// of them is asked for alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_in_one_slot_is_one_request() {
    let client = common::cluster_client().await;
    let tag = unique_name("one-request");
    let names = ["a", "b", "c", "d"].map(|n| format!("{{{tag}}}:{n}"));
    let keys: Vec<String> = names
        .iter()
        .map(|n| client.rwlock(n.as_str()).key().unwrap().to_owned())
        .collect();
    // The library is loaded on that master first: a call that finds it missing
    // is sent again after the load.
    client.rwlock(names[0].as_str()).state().await.unwrap();
    let port = common::blocking(|| common::shared_cluster().master_for_key(&keys[0]).port);
    let monitor = common::blocking(move || common::Monitor::start(port));
    let set = client
        .lock_set()
        .read(names[3].as_str())
        .write(names[1].as_str())
        .read(names[0].as_str())
        .write(names[2].as_str());
    let held = set.acquire().await.unwrap();
    let calls = monitor
        .until_scripts(&keys[0], |calls| !calls.is_empty(), Duration::from_secs(5))
        .await
        .expect("the set's request reached the master");
    let operations: Vec<&str> = calls.iter().map(|c| c.operation.as_str()).collect();
    assert_eq!(operations, ["acquire_set"], "{calls:?}");
    for key in &keys[1..] {
        assert!(
            monitor.script_calls(key).is_empty(),
            "{key} asked for alone"
        );
    }
    for (name, mode) in names.iter().zip([
        LockMode::Read,
        LockMode::Write,
        LockMode::Write,
        LockMode::Read,
    ]) {
        let state = client.rwlock(name.as_str()).state().await.unwrap();
        assert_eq!(state.mode(), Some(mode), "{name}: {state:?}");
    }
    held.release().await.unwrap();
}

//! Readers that must wait (writer preference) wait in line in batches: a batch
//! holds one place, `wait:<batch>`, that lives while any of its readers re-checks,
//! and the release of the writer before it grants the whole batch in one script.
//! Two promises of the line hold for its readers as they do for queued writers
//! (tests/queue_bounds.rs):
//!
//! * a reader that was paused (SIGSTOP) past its place's lifetime, and so lost its
//!   place, takes a new place in line at its next re-check: it is let in at the next
//!   release that lets readers in, not after every writer that comes later;
//! * a reader that dies while it waits in a batch blocks nobody longer than its own
//!   place would have lived after its last attempt: not through the batch's place,
//!   which its live companions keep fresh, nor through its share of the batch's grant.
//!
//! On a real cluster (this binary's shared one), the reader that is paused or killed
//! is a real process: the crate's tool, `redis-rwlock exec --read --lease 2s`. So
//! these tests need the `cli` feature (`cargo test --all-features`).
#![cfg(all(unix, feature = "cli"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use redis_rwlock::{LockMode, LockOptions, LockState, RwLock, RwLockWriteGuard};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until, timeout};

use common::{
    Exec, Paused, cluster_client, raw_cluster, spawn_writer, unique_name, until_changed, wait_for,
};

/// Every lease of the tool's reader and of the writers: 2 s.
const LEASE: Duration = Duration::from_secs(2);
/// How long a place in line lives after its waiter's last attempt with a 2 s write
/// lease: the write lease, kept between 1.5 s and 3.3 s (`intent_ttl` in
/// src/lock/waiting.rs).
const PLACE: Duration = LEASE;
/// The longest gap between a waiter's re-checks (1 s and up to 100 ms of jitter),
/// and a little more.
const RECHECK: Duration = Duration::from_millis(1200);
/// What a loaded 2-core machine may add.
const SLACK: Duration = Duration::from_millis(500);

fn options() -> LockOptions {
    LockOptions::default().read_lease(LEASE).write_lease(LEASE)
}

/// Where the reader with `token` waits, as stored: its `rw:` field (the batch it
/// names and its own place's deadline, `"<batch>:<deadline>"`) and that batch's
/// place (`wait:<batch>`).
async fn stored_place(
    mut raw: ClusterConnection,
    key: &str,
    token: &str,
) -> (Option<String>, Option<String>) {
    let batch: Option<String> = redis::cmd("HGET")
        .arg(key)
        .arg(format!("rw:{token}"))
        .query_async(&mut raw)
        .await
        .unwrap();
    let place = match batch.as_deref().and_then(|b| b.split(':').next()) {
        Some(batch) => redis::cmd("HGET")
            .arg(key)
            .arg(format!("wait:{batch}"))
            .query_async(&mut raw)
            .await
            .unwrap(),
        None => None,
    };
    (batch, place)
}

/// The deadline of the first waiting batch's place, if a batch waits.
async fn batch_place(lock: &RwLock) -> Option<chrono::DateTime<chrono::Utc>> {
    let state = lock.state().await.unwrap();
    // Each waiting reader shows its own place; the batch's is the latest of them.
    state
        .waiting_readers
        .iter()
        .map(|reader| reader.until)
        .max()
}

/// The batches the lock's readers wait in, from their `rw:` fields
/// (`"<batch>:<deadline>"`).
async fn batches_waited_in(key: &str) -> Vec<String> {
    let fields: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg(key)
        .query_async(&mut raw_cluster().await)
        .await
        .unwrap();
    let mut batches: Vec<String> = fields
        .iter()
        .filter(|(field, _)| field.starts_with("rw:"))
        .filter_map(|(_, member)| member.split(':').next().map(str::to_owned))
        .collect();
    batches.sort();
    batches.dedup();
    batches
}

/// Two writers that take turns until `stop`: write, hold 300 ms, release, ask
/// again. Returns how many writes they made.
fn writers_taking_turns(locks: [RwLock; 2], stop: &Arc<AtomicBool>) -> JoinHandle<u32> {
    let turns = |lock: RwLock| {
        let stop = stop.clone();
        async move {
            let mut writes = 0;
            while !stop.load(Ordering::Relaxed) {
                let guard = lock.write().await.expect("a writer's write()");
                writes += 1;
                sleep(Duration::from_millis(300)).await;
                guard.release().await.expect("a writer's release()");
            }
            writes
        }
    };
    let [first, second] = locks;
    let (first, second) = (turns(first), turns(second));
    tokio::spawn(async move {
        let (a, b) = tokio::join!(first, second);
        a + b
    })
}

/// Writer W1 holds; reader R (`redis-rwlock exec --read --lease 2s`, whose command
/// prints `granted`) waits in a batch behind it. R's process is stopped (SIGSTOP)
/// until its place has lapsed, then continued while W1 still holds: its next
/// re-check finds its place gone and waits in line again. Two writers then queue,
/// W1 releases, and they take turns for up to 10 s. R waited in line before both
/// writers arrived, so W1's release lets it in (it learns it from the batch's
/// message, or at its next re-check): it must not wait until the writers stop.
/// Redis-only: the paused reader is a child process (the CLI) stopped with SIGSTOP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_paused_past_its_place_in_line_is_let_in_at_the_next_release() {
    /// How long the writers take turns at most.
    const WRITERS_FOR: Duration = Duration::from_secs(10);
    let (holders, writers) = (cluster_client().await, cluster_client().await);
    let name = unique_name("paused-reader");
    let lock = holders.rwlock_with(&name, options());
    let key = lock.key().unwrap().to_owned();
    let raw = raw_cluster().await;
    let w1 = lock.write().await.unwrap();

    let mut reader = Exec::start(&name, LockMode::Read, LEASE, &["echo", "granted"]);
    let mut printed = reader.lines();
    let state = reader
        .until(&lock, "the reader waits in a batch", |s| {
            s.waiting_readers.len() == 1
        })
        .await;
    let token = state.waiting_readers[0].token.clone().unwrap();

    // Stopped until its place has lapsed (the state lists only live places).
    let paused = Paused::new(reader.pid());
    let stopped = Instant::now();
    wait_for(&lock, |s| s.waiting_readers.is_empty()).await;
    let lapsed_place = stored_place(raw.clone(), &key, &token).await;
    paused.resume();
    let stopped_for = stopped.elapsed();
    // Its re-check was due while it was stopped: it runs now, and finds its place
    // gone (whatever it then stores for itself differs from the lapsed place).
    let within = Instant::now() + Duration::from_secs(5);
    until_changed(
        &lapsed_place,
        || stored_place(raw.clone(), &key, &token),
        within,
    )
    .await
    .unwrap_or_else(|| panic!("the continued reader never came back: {lapsed_place:?}"));
    reader.assert_running();
    assert!(
        printed.try_recv().is_err(),
        "the reader got the lock while W1 held it"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let turns = writers_taking_turns(
        [
            writers.rwlock_with(&name, options()),
            writers.rwlock_with(&name, options()),
        ],
        &stop,
    );
    wait_for(&lock, |s| s.queued_writers.len() == 2).await;
    let released = Instant::now();
    w1.release().await.unwrap();

    let early = timeout(WRITERS_FOR, printed.recv()).await;
    stop.store(true, Ordering::Relaxed);
    let (granted, line) = match early {
        Ok(line) => line,
        Err(_) => timeout(Duration::from_secs(20), printed.recv())
            .await
            .expect("the reader got the lock once the writers stopped"),
    }
    .unwrap_or_else(|| panic!("the reader printed nothing: {}", reader.stderr()));
    assert_eq!(line, "granted");
    let writes = timeout(Duration::from_secs(20), turns)
        .await
        .expect("the writers stopped")
        .unwrap();
    let waited = granted - released;
    println!(
        "the reader was stopped {stopped_for:?}; it got the lock {waited:?} after W1's \
         release; the writers wrote {writes} times meanwhile"
    );
    let bound = RECHECK + SLACK;
    assert!(
        waited <= bound,
        "a reader stopped past its place in line ({stopped_for:?}, place {PLACE:?}) and \
         continued while W1 held got the lock {waited:?} after W1's release, after {writes} \
         writes by two writers that queued after it came back (bound: a re-check {RECHECK:?} \
         + {SLACK:?})"
    );
}

/// What the batch waits behind.
#[derive(Clone, Copy, Debug)]
enum Ahead {
    /// A writer that holds.
    Writer,
    /// An upgradable reader whose upgrade waits for another reader (the pending
    /// upgrade keeps new readers out); that reader leaves and the upgrade becomes
    /// the write hold.
    Upgrade,
}

/// Takes the write hold that the batch will wait behind: a writer's, or an
/// upgrade's; only then starts reader D (the tool, reading `name`), so that it
/// cannot take the lock first, and waits until D waits in a batch behind the hold.
/// For an upgrade, D starts once the upgrade is pending, and the upgrade is granted
/// once D waits. Returns the write guard, the state that showed D waiting, and D.
async fn hold_ahead(
    lock: &RwLock,
    ahead: Ahead,
    name: &str,
) -> (RwLockWriteGuard, LockState, Exec) {
    let waits = |s: &LockState| s.waiting_readers.len() == 1;
    let start_doomed = || Exec::start(name, LockMode::Read, LEASE, &["cat"]);
    match ahead {
        Ahead::Writer => {
            let writer = lock.write().await.unwrap();
            let mut doomed = start_doomed();
            let state = doomed
                .until(lock, "the reader waits in a batch", waits)
                .await;
            (writer, state, doomed)
        }
        Ahead::Upgrade => {
            let upgradable = lock.upgradable_read().await.unwrap();
            let other = lock.read().await.unwrap();
            // The upgrade waits for the other reader, which leaves once the batch formed.
            let batch_formed = async {
                wait_for(lock, |s| s.upgrade_pending).await;
                let mut doomed = start_doomed();
                let state = doomed
                    .until(lock, "the reader waits in a batch", waits)
                    .await;
                other.release().await.unwrap();
                (state, doomed)
            };
            let (writer, (state, doomed)) = timeout(Duration::from_secs(15), async {
                tokio::join!(upgradable.upgrade(), batch_formed)
            })
            .await
            .expect("the upgrade was granted when the other reader left");
            (writer.unwrap(), state, doomed)
        }
    }
}

/// A write hold (W1, or an upgrade: `ahead`, 2 s leases) keeps readers out. Reader
/// D (`redis-rwlock exec --read --lease 2s`) waits in a batch behind it and is
/// SIGKILLed right after one of its attempts refreshed the batch's place; so its
/// own place ends 2 s later. Live reader L (default leases: its place lives 3.3 s)
/// joins the same batch and keeps it fresh, and writer W2 (2 s leases) queues
/// behind the batch. W1 releases at the worst moment: right after one of L's
/// re-checks refreshed the batch, and before D's place ends. The batch is granted;
/// L holds and releases at once; W2 must then get the lock within a re-check of the
/// end of D's place. Returns how long after the end of D's place W2 got the lock
/// (zero if before), and what was measured.
async fn writer_behind_a_batch_with_a_dead_reader(ahead: Ahead) -> (Duration, String) {
    /// W1 releases at the first refresh of the batch's place from this long before
    /// D's place ends (L re-checks every 1 s and up to 100 ms of jitter)...
    const WATCH_FROM: Duration = Duration::from_millis(1200);
    /// ... or this long before, if none came.
    const LAST_MOMENT: Duration = Duration::from_millis(100);
    let (holders, others) = (cluster_client().await, cluster_client().await);
    let name = unique_name("dead-batch-reader");
    let lock = holders.rwlock_with(&name, options());

    let (w1, state, mut doomed) = hold_ahead(&lock, ahead, &name).await;
    let dead = state.waiting_readers[0].token.clone().unwrap();

    // D dies right after an attempt refreshed the batch's place (it waits alone in
    // it so far, so the refresh is its own): its place ends PLACE after the attempt.
    let before = batch_place(&lock).await;
    let within = Instant::now() + Duration::from_secs(3);
    let refreshed = until_changed(&before, || batch_place(&lock), within)
        .await
        .expect("the waiting reader never refreshed its place")
        .expect("the waiting reader's place");
    doomed.kill();
    let died = Instant::now();
    let state = lock.state().await.unwrap();
    // The refreshed place's deadline is the end of D's place.
    let left = (refreshed - state.server_time).to_std().unwrap_or_default();
    let place_ends = Instant::now() + left;
    let attempted = place_ends - PLACE;

    let live = others.rwlock(&name);
    let live_reader = tokio::spawn(async move {
        let guard = live.read().await.expect("the live reader's read()");
        let at = Instant::now();
        guard.release().await.unwrap();
        at
    });
    // It joins the dead reader's batch, whose place it refreshes from now on.
    let state = wait_for(&lock, |s| s.waiting_readers.len() == 2).await;
    let batches = batches_waited_in(&format!("rwlock:{{{name}}}")).await;
    assert_eq!(
        batches.len(),
        1,
        "the live reader waits in the dead one's batch: {batches:?}, {state:?}"
    );
    let w2 = spawn_writer(&others.rwlock_with(&name, options()));
    wait_for(&lock, |s| s.queued_writers.len() == 1).await;

    sleep_until(place_ends - WATCH_FROM).await;
    let before = batch_place(&lock).await;
    until_changed(&before, || batch_place(&lock), place_ends - LAST_MOMENT).await;
    let releasing = Instant::now();
    w1.release().await.unwrap();
    let released = Instant::now();
    assert!(
        released < place_ends,
        "the hold ahead was released {:?} after the dead reader's place ended: the test \
         was too slow",
        released - place_ends
    );
    let state = lock.state().await.unwrap();
    let share = state
        .readers
        .iter()
        .find(|reader| reader.token.as_deref() == Some(dead.as_str()))
        .and_then(|reader| (reader.until - state.server_time).to_std().ok())
        .map_or("not counted".to_owned(), |left| {
            format!("counted until {}", after(Instant::now() + left, place_ends))
        });

    let live_at = timeout(Duration::from_secs(10), live_reader)
        .await
        .expect("the live reader got the lock")
        .unwrap();
    let w2_at = timeout(Duration::from_secs(20), w2)
        .await
        .expect("W2 got the lock in the end")
        .unwrap();
    let report = format!(
        "{ahead:?} ahead: the dead reader's last attempt {:?} before its death; the hold \
         ahead released {:?} before the dead reader's place ended; the live reader got the \
         lock {:?} after that; the dead reader's share of the grant: {share}; W2 got the lock \
         {:?} after the death, {:?} after the dead reader's last attempt ({})",
        died - attempted,
        place_ends - released,
        live_at - releasing,
        w2_at - died,
        w2_at - attempted,
        after(w2_at, place_ends),
    );
    println!("{report}");
    (w2_at.saturating_duration_since(place_ends), report)
}

/// `at` relative to `end`: "<duration> after its place ended" or "... before ...".
fn after(at: Instant, end: Instant) -> String {
    if at >= end {
        format!("{:?} after its place ended", at - end)
    } else {
        format!("{:?} before its place ended", end - at)
    }
}

/// A reader killed while it waits in a batch behind a writer, the batch granted
/// just before the dead reader's place would have ended: the writer behind the
/// batch gets the lock within a re-check of that end, not when the batch's first
/// lease from the grant ends.
/// Redis-only: the dead reader is a child process (the CLI) killed with SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_reader_in_a_batch_blocks_the_next_writer_no_longer_than_its_place() {
    let (late, report) = writer_behind_a_batch_with_a_dead_reader(Ahead::Writer).await;
    assert!(
        late <= RECHECK + SLACK,
        "the writer behind a batch with a dead reader got the lock {late:?} after the dead \
         reader's place ended ({PLACE:?} after its last attempt; bound: a re-check \
         {RECHECK:?} + {SLACK:?}). {report}"
    );
}

/// The same with the batch waiting behind an upgrade: formed while the upgrade
/// waited, granted when the upgraded write hold is released.
/// Redis-only: the dead reader is a child process (the CLI) killed with SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_reader_in_a_batch_behind_an_upgrade_blocks_no_longer_than_its_place() {
    let (late, report) = writer_behind_a_batch_with_a_dead_reader(Ahead::Upgrade).await;
    assert!(
        late <= RECHECK + SLACK,
        "the writer behind a batch (behind an upgrade) with a dead reader got the lock \
         {late:?} after the dead reader's place ended ({PLACE:?} after its last attempt; \
         bound: a re-check {RECHECK:?} + {SLACK:?}). {report}"
    );
}

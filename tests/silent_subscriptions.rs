//! A subscription that goes silent: the readers' client keeps its connections, but
//! everything the server sends on its subscribed one is swallowed, with no reset (a
//! NAT or firewall that forgot an idle pub/sub flow); its lock connection goes on,
//! so its renewals are answered. A writer's call-back then never arrives, and a
//! writer on another client must still be granted within a bound that rests on no
//! message: the next renewal of the readers' hold, then a re-check.
//!
//! With the default options (10 s read lease; a read hold renews every second) that
//! bound is one renewal period and a re-check period, about 1 s + 1 s: the tests
//! ask for [`RENEWAL_BOUND`], 5 s, the bound the renewals had when they came every
//! third of the lease.
//!
//! Redis only (a private standalone server, the readers' client behind a relay that
//! silences its subscription, the writer's client straight to the server): the
//! in-memory store has no connection to silence.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use redis_rwlock::{LockClient, LockOptions, RwLock};
use tokio::time::{Instant, timeout};

use common::{HoldChecker, LocalRedis, Proxied, unique_name, wait_for};

/// What a writer waits at most behind a process's shared or kept read hold whose
/// subscription is silent, with the default options: one renewal period (a second)
/// and a re-check period (about a second), with a generous margin.
const RENEWAL_BOUND: Duration = Duration::from_secs(5);

/// How long a test gives the writer before it reports it as not granted (longer
/// than every bound here, so a failure says how far off it was).
const GIVE_UP: Duration = Duration::from_secs(10);

/// A private standalone server; `readers` connects through the relay, `writers`
/// straight to the server.
struct Setup {
    server: Arc<Proxied>,
    readers: LockClient,
    writers: LockClient,
}

impl Setup {
    async fn start() -> Setup {
        let server =
            tokio::task::spawn_blocking(|| Arc::new(LocalRedis::standalone().behind_proxies()))
                .await
                .unwrap();
        let readers = LockClient::standalone(server.url()).await.unwrap();
        let writers = LockClient::standalone(server.redis.url()).await.unwrap();
        Setup {
            server,
            readers,
            writers,
        }
    }

    /// Waits until the readers' client has subscribed to `lock`'s channel through
    /// the relay and the server counts the subscription (so the silence comes after
    /// a subscription that worked), then silences it.
    async fn silence_once_subscribed(&self, lock: &RwLock) {
        let proxy = &self.server.proxies[0];
        assert!(
            proxy.until_subscribed(1, Duration::from_secs(10)).await,
            "the readers' client never subscribed"
        );
        let channel = format!("{}:released", lock.key().unwrap());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (server, listened) = (self.server.clone(), channel.clone());
            let subscribers = tokio::task::spawn_blocking(move || {
                server.redis.subscribers(&server.redis.nodes[0], &listened)
            })
            .await
            .unwrap();
            if subscribers >= 1 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the server never counted the readers' subscription to {channel}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        proxy.silence_subscriptions();
    }

    /// Asks for the write lock on `name` from the writers' client and holds it
    /// briefly (checked against `checker`); how long it waited, `None` if not
    /// granted within [`GIVE_UP`].
    async fn timed_write(&self, name: &str, checker: &HoldChecker) -> Option<Duration> {
        let writer = self.writers.rwlock(name);
        let asked = Instant::now();
        let guard = timeout(GIVE_UP, writer.write()).await.ok()?.unwrap();
        let waited = asked.elapsed();
        checker.enter_write();
        tokio::time::sleep(Duration::from_millis(20)).await;
        checker.leave_write();
        guard.release().await.unwrap();
        Some(waited)
    }

    /// How many reads of the server's stream were swallowed on the readers'
    /// subscription (waiting a little for the first).
    async fn swallowed(&self) -> u64 {
        let proxy = &self.server.proxies[0];
        proxy.until_silenced(1, Duration::from_secs(5)).await;
        proxy.silenced()
    }
}

/// Checks that the writer's call-backs were sent and swallowed: the silence is what
/// the test is about.
fn assert_swallowed(swallowed: u64) {
    assert!(
        swallowed > 0,
        "nothing the server sent on the readers' subscription was swallowed: the silence \
         did not happen"
    );
}

/// 16 tasks of the readers' client keep one shared read hold busy (each: read, hold
/// 5 ms, release, again); the subscription that would carry the writer's call-back
/// is silenced. A writer on another client is granted within [`RENEWAL_BOUND`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_behind_busy_shared_reads_is_granted_within_the_renewal_bound_when_the_subscription_is_silent()
 {
    let setup = Setup::start().await;
    let name = unique_name("silent-busy");
    let lock = setup.readers.rwlock(&name);
    let checker = Arc::new(HoldChecker::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (lock, stop, checker) = (lock.clone(), stop.clone(), checker.clone());
        tasks.push(tokio::spawn(async move {
            let mut reads = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let guard = lock.read().await.unwrap();
                checker.enter_read();
                tokio::time::sleep(Duration::from_millis(5)).await;
                checker.leave_read();
                // A hold lost meanwhile is no failure here; exclusion is checked.
                let _ = guard.release().await;
                reads += 1;
            }
            reads
        }));
    }
    wait_for(&lock, |s| s.readers.len() == 1).await;
    setup.silence_once_subscribed(&lock).await;
    let reads_before = checker.report().reads;

    let waited = setup.timed_write(&name, &checker).await;
    let swallowed = setup.swallowed().await;
    let reads_during = checker.report().reads - reads_before;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        assert!(task.await.unwrap() > 0, "a reading task never read");
    }
    let counts = checker.report();
    println!(
        "the writer waited {waited:?} behind 16 busy shares ({reads_during} reads \
         meanwhile); {swallowed} reads of the server's stream swallowed"
    );
    assert_swallowed(swallowed);
    assert_eq!(counts.violations, 0, "a writer beside a reader: {counts:?}");
    let waited = waited.unwrap_or_else(|| {
        panic!(
            "the writer was not granted within {GIVE_UP:?} behind the busy shares \
             ({reads_during} reads of the silenced client meanwhile)"
        )
    });
    assert!(
        waited < RENEWAL_BOUND,
        "the writer waited {waited:?}, more than the renewal bound {RENEWAL_BOUND:?}"
    );
}

/// The readers' client keeps its read hold (`keep_reads(4 s)`) and one task reads
/// for 10 ms every 500 ms, so the kept hold is taken up and left over and over; the
/// subscription is silenced. A writer on another client is granted within the kept
/// bound (4 s, plus a re-check and some margin: [`KEPT_LIMIT`]) and within the
/// renewal bound ([`RENEWAL_BOUND`]), whichever the fix leans on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_behind_sparse_kept_reads_is_granted_within_the_bounds_when_the_subscription_is_silent()
 {
    const KEPT: Duration = Duration::from_secs(4);
    const KEPT_LIMIT: Duration = Duration::from_secs(6);
    let setup = Setup::start().await;
    let name = unique_name("silent-kept");
    let lock = setup
        .readers
        .rwlock_with(&name, LockOptions::default().keep_reads(KEPT));
    // A kept hold listens for call-backs: the subscription comes with it.
    lock.read().await.unwrap().release().await.unwrap();
    wait_for(&lock, |s| s.readers.len() == 1).await;
    setup.silence_once_subscribed(&lock).await;

    let checker = Arc::new(HoldChecker::default());
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let reader = tokio::spawn({
        let (lock, stop, checker, reads) =
            (lock.clone(), stop.clone(), checker.clone(), reads.clone());
        async move {
            let mut next = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                let guard = lock.read().await.unwrap();
                checker.enter_read();
                tokio::time::sleep(Duration::from_millis(10)).await;
                checker.leave_read();
                let _ = guard.release().await;
                reads.fetch_add(1, Ordering::Relaxed);
                next += Duration::from_millis(500);
                tokio::time::sleep_until(next).await;
            }
        }
    });
    // The first sparse read has taken the kept hold up (and left it again).
    while reads.load(Ordering::Relaxed) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let waited = setup.timed_write(&name, &checker).await;
    let swallowed = setup.swallowed().await;
    let reads_during = reads.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    reader.await.unwrap();
    let counts = checker.report();
    println!(
        "the writer waited {waited:?} behind sparse kept reads ({reads_during} reads); \
         {swallowed} reads of the server's stream swallowed"
    );
    assert_swallowed(swallowed);
    assert_eq!(counts.violations, 0, "a writer beside a reader: {counts:?}");
    let waited = waited.unwrap_or_else(|| {
        panic!(
            "the writer was not granted within {GIVE_UP:?} behind a kept hold with a \
             {KEPT:?} bound ({reads_during} sparse reads took it up meanwhile)"
        )
    });
    assert!(
        waited < KEPT_LIMIT,
        "the writer waited {waited:?}: the kept bound {KEPT:?} did not hold (limit {KEPT_LIMIT:?})"
    );
    assert!(
        waited < RENEWAL_BOUND,
        "the writer waited {waited:?}, more than the renewal bound {RENEWAL_BOUND:?}"
    );
}

/// Two tasks of the readers' client share a read hold; its subscription is silenced,
/// so the forced release's message never reaches it. An operator forces the lock
/// free, a writer on another client takes it (after the release's fence) and holds
/// it for two seconds, while the readers' client calls `try_read()` every 10 ms. No
/// read is granted while the writer holds: the client lets tasks join a hold only
/// within two seconds of its last answered renewal, and the release keeps writers
/// out for longer than that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_read_of_a_silenced_client_evicted_by_force_release_is_granted_beside_the_next_writer() {
    const WRITER_HOLDS: Duration = Duration::from_secs(2);
    let setup = Setup::start().await;
    let name = unique_name("silent-forced");
    let lock = setup.readers.rwlock(&name);
    let first = lock.read().await.unwrap();
    let second = lock.read().await.unwrap();
    wait_for(&lock, |s| s.readers.len() == 1).await;
    setup.silence_once_subscribed(&lock).await;
    let forced = setup.writers.rwlock(&name).force_release().await.unwrap();
    assert_eq!(forced, 1, "the shared hold ended");

    let writer = timeout(GIVE_UP, setup.writers.rwlock(&name).write())
        .await
        .expect("the writer is granted once the forced release's fence ends")
        .unwrap();
    let granted = Instant::now();
    let (mut joined, mut refused) = (Vec::new(), 0u32);
    while granted.elapsed() < WRITER_HOLDS {
        match lock.try_read().await {
            Ok(read) => {
                joined.push(granted.elapsed());
                drop(read);
            }
            Err(_) => refused += 1,
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let writer_held = writer.is_held();
    writer.release().await.unwrap();
    let swallowed = setup.swallowed().await;
    println!(
        "{} of the evicted client's try_read() calls granted while the writer held (first \
         {:?}), {refused} refused; {swallowed} reads of the server's stream swallowed",
        joined.len(),
        joined.first()
    );
    assert_swallowed(swallowed);
    assert!(writer_held, "the writer lost its hold");
    assert!(
        joined.is_empty(),
        "{} reads of the evicted client were granted beside the writer, the first {:?} \
         after its grant",
        joined.len(),
        joined[0]
    );
    for share in [&first, &second] {
        timeout(GIVE_UP, share.lost())
            .await
            .expect("an evicted share learns at a renewal that its hold is gone");
    }
}

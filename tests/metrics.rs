//! The `metrics` feature: what the crate records, counted against real servers
//! through a recorder installed for this test binary (`metrics-util`'s
//! `DebuggingRecorder`). The tests run one at a time (they share the recorder, and
//! the scripts counter has no lock label) and compare what they did with what was
//! recorded meanwhile: counters, gauges and the number of histogram samples.
//!
//! Also here, ignored, with or without the feature: the client CPU an uncontended
//! acquire and release costs, for BENCHMARKS.md ("Metrics overhead").
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

#[cfg(feature = "metrics")]
mod recorded {
    use std::collections::{BTreeMap, HashMap};
    use std::sync::{Mutex, OnceLock, PoisonError};
    use std::time::Duration;

    use metrics_util::MetricKind;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
    use redis_rwlock::{Error, LockClient, LockOptions, RwLock};
    use tokio::time::{Instant, sleep, timeout};

    use super::common::{shared_standalone, standalone_client, unique_name};

    /// One test at a time: they share the recorder.
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    /// A metric's name and its labels, sorted.
    type Series = (String, BTreeMap<String, String>);

    /// What was recorded since a test began: the debugging recorder hands out what
    /// came since its last snapshot (counters and gauges as changes, histograms as
    /// samples), added up here.
    #[derive(Default)]
    struct Recorded {
        counters: HashMap<Series, u64>,
        gauges: HashMap<Series, f64>,
        histograms: HashMap<Series, Vec<f64>>,
    }

    fn snapshotter() -> &'static Snapshotter {
        static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
        SNAPSHOTTER.get_or_init(|| {
            let recorder = DebuggingRecorder::new();
            let snapshotter = recorder.snapshotter();
            recorder
                .install()
                .expect("the only recorder of this binary");
            snapshotter
        })
    }

    fn series(name: &str, labels: &[(&str, &str)]) -> Series {
        let labels = labels
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect();
        (name.to_owned(), labels)
    }

    impl Recorded {
        /// Starts counting from now (what came before is dropped).
        fn start() -> Mutex<Recorded> {
            let _ = snapshotter().snapshot();
            Mutex::new(Recorded::default())
        }

        /// Adds what came since the last look.
        fn update(&mut self) {
            for (key, _, _, value) in snapshotter().snapshot().into_vec() {
                let (kind, key) = key.into_parts();
                let labels = key
                    .labels()
                    .map(|label| (label.key().to_owned(), label.value().to_owned()))
                    .collect();
                let series = (key.name().to_owned(), labels);
                match (kind, value) {
                    (MetricKind::Counter, DebugValue::Counter(n)) => {
                        *self.counters.entry(series).or_default() += n;
                    }
                    (MetricKind::Gauge, DebugValue::Gauge(change)) => {
                        *self.gauges.entry(series).or_default() += change.into_inner();
                    }
                    (MetricKind::Histogram, DebugValue::Histogram(samples)) => self
                        .histograms
                        .entry(series)
                        .or_default()
                        .extend(samples.into_iter().map(|sample| sample.into_inner())),
                    (kind, value) => panic!("{kind:?} {value:?}"),
                }
            }
        }

        fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
            self.counters
                .get(&series(name, labels))
                .copied()
                .unwrap_or(0)
        }

        fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
            self.gauges
                .get(&series(name, labels))
                .copied()
                .unwrap_or(0.0)
        }

        fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
            self.histograms
                .get(&series(name, labels))
                .cloned()
                .unwrap_or_default()
        }

        /// Every series of `name` with a count, for failure messages.
        fn all(&self, name: &str) -> Vec<String> {
            let mut all: Vec<String> = self
                .counters
                .iter()
                .filter(|((n, _), count)| n == name && **count > 0)
                .map(|((_, labels), n)| format!("{labels:?} {n}"))
                .collect();
            all.sort();
            all
        }
    }

    /// Looks at what was recorded so far.
    fn look(recorded: &Mutex<Recorded>) -> std::sync::MutexGuard<'_, Recorded> {
        let mut recorded = recorded.lock().unwrap_or_else(PoisonError::into_inner);
        recorded.update();
        recorded
    }

    const ACQUISITIONS: &str = "redis_rwlock_acquisitions_total";
    const WAIT: &str = "redis_rwlock_wait_seconds";
    const HOLD: &str = "redis_rwlock_hold_seconds";
    const GUARDS: &str = "redis_rwlock_guards";
    const WAITERS: &str = "redis_rwlock_waiters";
    const LOST: &str = "redis_rwlock_leases_lost_total";
    const RENEWALS: &str = "redis_rwlock_renewals_total";
    const SCRIPTS: &str = "redis_rwlock_scripts_total";

    /// The labels of `lock`'s series in `mode`.
    fn of<'a>(lock: &'a RwLock, mode: &'a str) -> Vec<(&'a str, &'a str)> {
        vec![("lock", lock.name()), ("mode", mode)]
    }

    fn with<'a>(
        mut labels: Vec<(&'a str, &'a str)>,
        more: &[(&'a str, &'a str)],
    ) -> Vec<(&'a str, &'a str)> {
        labels.extend_from_slice(more);
        labels
    }

    /// Waits until one acquisition of `lock` in `mode` counts as waiting.
    async fn until_waiting(recorded: &Mutex<Recorded>, lock: &RwLock, mode: &str) {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            let waiting = look(recorded).gauge(WAITERS, &of(lock, mode));
            if waiting == 1.0 {
                return;
            }
            assert!(
                Instant::now() < until,
                "no {mode} acquisition counted as waiting: {waiting}; {:?} {:?}",
                look(recorded).gauges,
                look(recorded).all(ACQUISITIONS)
            );
            sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until counter `name` with `labels` reaches `n`: a guard's `lost()` wakes
    /// its waiters just before the lost lease is counted (and its hold ends).
    async fn until_counter(
        recorded: &Mutex<Recorded>,
        name: &str,
        labels: &[(&str, &str)],
        n: u64,
    ) {
        let until = Instant::now() + Duration::from_secs(5);
        while look(recorded).counter(name, labels) < n {
            assert!(
                Instant::now() < until,
                "{name} {labels:?} never reached {n}: {:?}",
                look(recorded).all(name)
            );
            sleep(Duration::from_millis(5)).await;
        }
    }

    /// Three reads at once and two writes: granted 3 and 2, as many waits and
    /// holds, the holds in the guards gauge while they last and none after.
    async fn grants_and_holds(client: LockClient) {
        let recorded = Recorded::start();
        let lock = client
            .rwlock(unique_name("metrics-grants"))
            .with_metrics_name();
        let granted = [("outcome", "granted")];

        let mut readers = Vec::new();
        for _ in 0..3 {
            readers.push(lock.read().await.unwrap());
        }
        {
            let seen = look(&recorded);
            assert_eq!(seen.gauge(GUARDS, &of(&lock, "read")), 3.0);
            assert_eq!(seen.gauge(WAITERS, &of(&lock, "read")), 0.0);
            assert_eq!(seen.samples(HOLD, &of(&lock, "read")).len(), 0);
        }
        sleep(Duration::from_millis(50)).await;
        for reader in readers {
            reader.release().await.unwrap();
        }
        for _ in 0..2 {
            let writer = lock.write().await.unwrap();
            sleep(Duration::from_millis(100)).await;
            writer.release().await.unwrap();
        }

        let seen = look(&recorded);
        for (mode, n) in [("read", 3), ("write", 2)] {
            let labels = of(&lock, mode);
            assert_eq!(
                seen.counter(ACQUISITIONS, &with(labels.clone(), &granted)),
                n,
                "{mode}: {:?}",
                seen.all(ACQUISITIONS)
            );
            assert_eq!(seen.samples(WAIT, &labels).len(), n as usize, "{mode}");
            assert_eq!(seen.samples(HOLD, &labels).len(), n as usize, "{mode}");
            assert_eq!(seen.gauge(GUARDS, &labels), 0.0, "{mode}");
            assert_eq!(seen.gauge(WAITERS, &labels), 0.0, "{mode}");
        }
        for held in seen.samples(HOLD, &of(&lock, "write")) {
            assert!((0.1..5.0).contains(&held), "a write held 100 ms: {held} s");
        }
        for held in seen.samples(HOLD, &of(&lock, "read")) {
            assert!((0.05..5.0).contains(&held), "reads held 50 ms: {held} s");
        }
        // Uncontended: each wait is one round trip.
        for waited in seen.samples(WAIT, &of(&lock, "read")) {
            assert!((0.0..1.0).contains(&waited), "{waited} s");
        }
    }

    // Redis-only: the standalone server deployment (the same body runs on both
    // backends below).
    #[tokio::test]
    async fn grants_waits_and_holds_are_counted_on_a_single_server() {
        let _serial = SERIAL.lock().await;
        grants_and_holds(standalone_client().await).await;
    }

    crate::on_both_backends! {
    async fn grants_waits_and_holds_are_counted(backend: Backend) {
        let _serial = SERIAL.lock().await;
        grants_and_holds(backend.client().await).await;
    }
    }

    crate::on_both_backends! {
    /// A lock set counts once by outcome, and each member counts in its own lock's
    /// metrics, labelled with its name after `with_metrics_name()`.
    async fn a_lock_set_counts_once_and_its_members_as_their_locks(backend: Backend) {
        let _serial = SERIAL.lock().await;
        let client = backend.client().await;
        let recorded = Recorded::start();
        const SETS: &str = "redis_rwlock_lock_set_acquisitions_total";
        let tag = unique_name("metrics-set");
        let (a, b) = (format!("{{{tag}}}:a"), format!("{{{tag}}}:b"));
        let set = client.lock_set().read(a.as_str()).write(b.as_str()).with_metrics_name();
        let count = |outcome| look(&recorded).counter(SETS, &[("outcome", outcome)]);
        let (granted, blocked) = (count("granted"), count("would_block"));

        set.acquire().await.unwrap().release().await.unwrap();
        let blocker = client.rwlock(b.as_str()).write().await.unwrap();
        assert!(matches!(set.try_acquire().await, Err(Error::WouldBlock)));
        blocker.release().await.unwrap();

        assert_eq!(count("granted"), granted + 1);
        assert_eq!(count("would_block"), blocked + 1);
        let seen = look(&recorded);
        let member = |name: &'static str, mode: &'static str| {
            vec![("lock", name), ("mode", mode), ("outcome", "granted")]
        };
        let (a, b): (&'static str, &'static str) = (a.leak(), b.leak());
        assert_eq!(seen.counter(ACQUISITIONS, &member(a, "read")), 1, "{:?}", seen.all(ACQUISITIONS));
        assert_eq!(seen.counter(ACQUISITIONS, &member(b, "write")), 1, "{:?}", seen.all(ACQUISITIONS));
        assert_eq!(seen.gauge(GUARDS, &[("lock", a), ("mode", "read")]), 0.0);
    }
    }

    crate::on_both_backends! {
    /// A `try_write` that would block, a write that times out, one that waits and
    /// is granted, and one cancelled while it waits: each outcome once, the waiters
    /// gauge up while they wait and back to zero, the wait as long as it was.
    async fn refusals_timeouts_waits_and_cancellations_are_counted(backend: Backend) {
        let _serial = SERIAL.lock().await;
        let client = backend.client().await;
        let recorded = Recorded::start();
        let name = unique_name("metrics-outcomes");
        let lock = client.rwlock(&name).with_metrics_name();
        let write = |outcome| with(of(&lock, "write"), &[("outcome", outcome)]);

        let reader = lock.read().await.unwrap();
        assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));
        let impatient = client
            .rwlock_with(
                &name,
                LockOptions::default().wait_timeout(Duration::from_millis(300)),
            )
            .with_metrics_name();
        assert!(matches!(impatient.write().await, Err(Error::Timeout { .. })));
        {
            let seen = look(&recorded);
            assert_eq!(seen.counter(ACQUISITIONS, &write("would_block")), 1);
            assert_eq!(seen.counter(ACQUISITIONS, &write("timed_out")), 1);
            assert_eq!(seen.counter(ACQUISITIONS, &write("granted")), 0);
            assert!(seen.samples(WAIT, &of(&lock, "write")).is_empty());
            assert_eq!(seen.gauge(WAITERS, &of(&lock, "write")), 0.0);
        }

        // A waiting writer counts as a waiter until it is granted...
        let waiting = tokio::spawn({
            let lock = lock.clone();
            async move { lock.write().await.unwrap() }
        });
        until_waiting(&recorded, &lock, "write").await;
        sleep(Duration::from_millis(200)).await;
        reader.release().await.unwrap();
        let writer = timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        {
            let seen = look(&recorded);
            assert_eq!(seen.gauge(WAITERS, &of(&lock, "write")), 0.0);
            assert_eq!(seen.counter(ACQUISITIONS, &write("granted")), 1);
            let waits = seen.samples(WAIT, &of(&lock, "write"));
            assert_eq!(waits.len(), 1);
            assert!(waits[0] >= 0.2, "waited at least 200 ms: {} s", waits[0]);
        }

        // ... and until it is cancelled: no outcome then.
        let cancelled = tokio::spawn({
            let lock = lock.clone();
            async move { lock.read().await }
        });
        until_waiting(&recorded, &lock, "read").await;
        cancelled.abort();
        let _ = cancelled.await;
        writer.release().await.unwrap();

        let seen = look(&recorded);
        assert_eq!(seen.gauge(WAITERS, &of(&lock, "read")), 0.0);
        assert_eq!(seen.gauge(GUARDS, &of(&lock, "write")), 0.0);
        assert_eq!(seen.gauge(GUARDS, &of(&lock, "read")), 0.0);
        // The first reader only: the cancelled one has no outcome.
        let reads: u64 = ["granted", "would_block", "timed_out", "error", "shutdown"]
            .iter()
            .map(|outcome| {
                seen.counter(
                    ACQUISITIONS,
                    &with(of(&lock, "read"), &[("outcome", outcome)]),
                )
            })
            .sum();
        assert_eq!(reads, 1, "{:?}", seen.all(ACQUISITIONS));
        assert_eq!(seen.samples(HOLD, &of(&lock, "read")).len(), 1);
        assert_eq!(seen.samples(HOLD, &of(&lock, "write")).len(), 1);
    }
    }

    crate::on_both_backends! {
    /// An upgradable read, a `try_upgrade` that would block, an upgrade, and a
    /// downgrade of another upgradable read: each hold in its own mode.
    async fn upgrades_and_downgrades_are_counted_in_their_modes(backend: Backend) {
        let _serial = SERIAL.lock().await;
        let client = backend.client().await;
        let recorded = Recorded::start();
        let lock = client
            .rwlock(unique_name("metrics-upgrade"))
            .with_metrics_name();
        let granted = [("outcome", "granted")];

        let mut upgradable = lock.upgradable_read().await.unwrap();
        let reader = lock.read().await.unwrap();
        assert!(matches!(
            upgradable.try_upgrade().await,
            Err(Error::WouldBlock)
        ));
        reader.release().await.unwrap();
        {
            let seen = look(&recorded);
            assert_eq!(seen.gauge(GUARDS, &of(&lock, "upgradable")), 1.0);
            let would_block = with(of(&lock, "upgrade"), &[("outcome", "would_block")]);
            assert_eq!(seen.counter(ACQUISITIONS, &would_block), 1);
        }
        let writer = upgradable.upgrade().await.unwrap();
        {
            let seen = look(&recorded);
            assert_eq!(seen.gauge(GUARDS, &of(&lock, "upgradable")), 0.0);
            assert_eq!(seen.gauge(GUARDS, &of(&lock, "write")), 1.0);
            assert_eq!(
                seen.counter(ACQUISITIONS, &with(of(&lock, "upgrade"), &granted)),
                1
            );
            assert_eq!(seen.samples(WAIT, &of(&lock, "upgrade")).len(), 1);
            assert_eq!(seen.samples(HOLD, &of(&lock, "upgradable")).len(), 1);
        }
        writer.release().await.unwrap();

        let upgradable = lock.upgradable_read().await.unwrap();
        let reader = upgradable.downgrade().await.unwrap();
        {
            let seen = look(&recorded);
            assert_eq!(seen.gauge(GUARDS, &of(&lock, "upgradable")), 0.0);
            assert_eq!(seen.gauge(GUARDS, &of(&lock, "read")), 1.0);
        }
        reader.release().await.unwrap();

        let seen = look(&recorded);
        assert_eq!(
            seen.counter(ACQUISITIONS, &with(of(&lock, "upgradable"), &granted)),
            2
        );
        assert_eq!(seen.samples(WAIT, &of(&lock, "upgradable")).len(), 2);
        assert_eq!(seen.samples(HOLD, &of(&lock, "upgradable")).len(), 2);
        assert_eq!(seen.samples(HOLD, &of(&lock, "write")).len(), 1);
        assert_eq!(seen.samples(HOLD, &of(&lock, "read")).len(), 2);
        for mode in ["read", "write", "upgradable"] {
            assert_eq!(seen.gauge(GUARDS, &of(&lock, mode)), 0.0, "{mode}");
        }
        assert_eq!(
            seen.counter(LOST, &with(of(&lock, "read"), &[("cause", "gone")])),
            0
        );
    }
    }

    crate::on_both_backends! {
    /// Renewals of a short lease, a lease lost to a forced release (found at the
    /// next renewal) and one that expired with `auto_renew` off: counted once each,
    /// the lost hold's duration recorded when it was lost, not again at release.
    async fn renewals_and_lost_leases_are_counted_with_their_cause(backend: Backend) {
        let _serial = SERIAL.lock().await;
        let client = backend.client().await;
        let recorded = Recorded::start();
        let lease = Duration::from_millis(600); // renewed every 200 ms
        let lock = client
            .rwlock_with(
                unique_name("metrics-renewals"),
                LockOptions::default().write_lease(lease),
            )
            .with_metrics_name();
        let renewals = |outcome| vec![("lock", lock.name()), ("outcome", outcome)];

        let writer = lock.write().await.unwrap();
        sleep(Duration::from_millis(700)).await;
        assert!(writer.is_held());
        let renewed = look(&recorded).counter(RENEWALS, &renewals("renewed"));
        assert!(
            (2..=4).contains(&renewed),
            "renewed {renewed} times in 700 ms"
        );

        assert_eq!(lock.force_release().await.unwrap(), 1);
        timeout(Duration::from_secs(2), writer.lost())
            .await
            .expect("the next renewal finds the hold gone");
        let gone = with(of(&lock, "write"), &[("cause", "gone")]);
        until_counter(&recorded, LOST, &gone, 1).await;
        {
            let seen = look(&recorded);
            assert_eq!(seen.counter(LOST, &gone), 1);
            assert_eq!(seen.counter(RENEWALS, &renewals("lost")), 1);
            assert_eq!(seen.counter(RENEWALS, &renewals("error")), 0);
            assert_eq!(seen.gauge(GUARDS, &of(&lock, "write")), 0.0);
            assert_eq!(seen.samples(HOLD, &of(&lock, "write")).len(), 1);
        }
        assert!(matches!(writer.release().await, Err(Error::LeaseLost { .. })));

        let unrenewed = client
            .rwlock_with(
                lock.name(),
                LockOptions::default()
                    .read_lease(Duration::from_millis(200))
                    .auto_renew(false),
            )
            .with_metrics_name();
        let reader = unrenewed.read().await.unwrap();
        timeout(Duration::from_secs(2), reader.lost())
            .await
            .expect("the lease ends without renewals");
        drop(reader);
        let expired = with(of(&lock, "read"), &[("cause", "expired")]);
        until_counter(&recorded, LOST, &expired, 1).await;

        let seen = look(&recorded);
        assert_eq!(seen.counter(LOST, &expired), 1);
        assert_eq!(seen.samples(HOLD, &of(&lock, "write")).len(), 1);
        assert_eq!(seen.samples(HOLD, &of(&lock, "read")).len(), 1);
        assert_eq!(seen.gauge(GUARDS, &of(&lock, "read")), 0.0);
    }
    }

    crate::on_both_backends! {
    /// Acquisitions a shutdown ends count as `shutdown`.
    async fn a_shutdown_ends_waiting_acquisitions_as_such(backend: Backend) {
        let _serial = SERIAL.lock().await;
        let holder = backend.client().await;
        let client = backend.client().await;
        let recorded = Recorded::start();
        let name = unique_name("metrics-shutdown");
        let writer = holder.rwlock(&name).write().await.unwrap();
        let lock = client.rwlock(&name).with_metrics_name();
        let waiting = tokio::spawn({
            let lock = lock.clone();
            async move { lock.read().await }
        });
        until_waiting(&recorded, &lock, "read").await;
        client.shutdown(Duration::from_secs(2)).await.unwrap();
        assert!(matches!(waiting.await.unwrap(), Err(Error::Shutdown)));
        writer.release().await.unwrap();

        let seen = look(&recorded);
        let shutdown = with(of(&lock, "read"), &[("outcome", "shutdown")]);
        assert_eq!(seen.counter(ACQUISITIONS, &shutdown), 1);
        assert_eq!(seen.gauge(WAITERS, &of(&lock, "read")), 0.0);
    }
    }

    /// Scripts are counted by the way they were sent: FCALL for the hash layout's
    /// function library; EVALSHA for the legacy layout, and EVAL after the server
    /// answered NOSCRIPT (its script cache flushed). Without `with_metrics_name`,
    /// a lock's metrics have no `lock` label. Redis-only: the script paths, NOSCRIPT
    /// and the legacy layout.
    #[tokio::test]
    async fn scripts_are_counted_by_path_and_operation() {
        let _serial = SERIAL.lock().await;
        let client = standalone_client().await;
        let lock = client.rwlock(unique_name("metrics-scripts"));
        // The library may need loading first: not counted below.
        lock.read().await.unwrap().release().await.unwrap();

        let recorded = Recorded::start();
        for _ in 0..2 {
            lock.read().await.unwrap().release().await.unwrap();
        }
        {
            let seen = look(&recorded);
            let fcall = |script| [("path", "fcall"), ("script", script)];
            assert_eq!(
                seen.counter(SCRIPTS, &fcall("acquire_read")),
                2,
                "{:?}",
                seen.all(SCRIPTS)
            );
            assert_eq!(seen.counter(SCRIPTS, &fcall("release")), 2);
            assert_eq!(seen.all(SCRIPTS).len(), 2, "{:?}", seen.all(SCRIPTS));
            let unlabelled = [("mode", "read"), ("outcome", "granted")];
            assert_eq!(seen.counter(ACQUISITIONS, &unlabelled), 2);
        }

        let mut raw = redis::Client::open(shared_standalone().url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut raw)
            .await
            .unwrap();
        let tag = unique_name("metrics-legacy");
        let legacy = client.legacy_rwlock(format!("{{{tag}}}:read"), format!("{{{tag}}}:write"));
        for _ in 0..2 {
            legacy.write().await.unwrap().release().await.unwrap();
        }
        let seen = look(&recorded);
        let sent = |path, script| seen.counter(SCRIPTS, &[("path", path), ("script", script)]);
        // The first of each: NOSCRIPT, then the source; the second: cached.
        assert_eq!(
            sent("evalsha", "acquire_write"),
            2,
            "{:?}",
            seen.all(SCRIPTS)
        );
        assert_eq!(sent("eval", "acquire_write"), 1);
        assert_eq!(sent("evalsha", "release"), 2);
        assert_eq!(sent("eval", "release"), 1);
        assert_eq!(sent("fcall", "acquire_write"), 0);
    }
}

/// The client CPU one uncontended acquire and release costs (a read, then a write,
/// on a lock of its own, against this binary's standalone server): the CPU time of
/// every thread of this process (`/proc/self/task/*/schedstat`), per acquire and
/// release, in rounds. On a current-thread runtime, so all the client's work runs
/// on one thread, where a recorder is installed for some rounds only
/// (`metrics::with_local_recorder`): rounds without a recorder, with
/// metrics-exporter-prometheus's (its upkeep, which drains the histograms, counted
/// in) and with it and the lock's name as a label take turns, so that the machine's
/// drifts (its load, a virtual machine's) touch all three alike. Built without the
/// feature `metrics`, the crate records nothing whatever is installed. Run it in
/// release mode, with and without the feature:
///
/// ```text
/// cargo test --release --test metrics -- --ignored --nocapture client_cpu
/// cargo test --release --features metrics --test metrics -- --ignored --nocapture client_cpu
/// ```
///
/// Redis-only: a measurement against a server, for BENCHMARKS.md.
#[test]
#[ignore = "a measurement: run by hand, in release mode (see BENCHMARKS.md)"]
fn client_cpu_per_acquire_and_release() {
    use metrics_exporter_prometheus::PrometheusBuilder;

    const ROUNDS: usize = 9;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let url = common::shared_standalone().url();
    let (plain, labelled) = runtime.block_on(async move {
        let client = redis_rwlock::LockClient::standalone(url).await.unwrap();
        let plain = client.rwlock(common::unique_name("metrics-cpu"));
        let labelled = client
            .rwlock(common::unique_name("metrics-cpu-labelled"))
            .with_metrics_name();
        // Warm up: the library loaded, the connection's buffers grown.
        cpu::round(&plain).await;
        cpu::round(&labelled).await;
        (plain, labelled)
    });
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let recorded = |lock| {
        metrics::with_local_recorder(&recorder, || {
            #[cfg(feature = "metrics")]
            redis_rwlock::describe_metrics();
            let spent = runtime.block_on(cpu::round(lock));
            handle.run_upkeep();
            spent
        })
    };
    let (mut bare, mut prometheus, mut named) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        bare.push(runtime.block_on(cpu::round(&plain)));
        prometheus.push(recorded(&plain));
        named.push(recorded(&labelled));
    }
    let build = if cfg!(feature = "metrics") {
        "feature on"
    } else {
        "feature off"
    };
    cpu::report(build, "no recorder", &bare, None);
    cpu::report(build, "Prometheus recorder", &prometheus, Some(&bare));
    cpu::report(
        build,
        "Prometheus recorder, lock label",
        &named,
        Some(&bare),
    );
}

/// Client CPU time, for `client_cpu_per_acquire_and_release`.
mod cpu {
    use std::time::Duration;

    use redis_rwlock::RwLock;

    const PER_ROUND: u32 = 10_000;

    /// CPU time of every live thread of this process.
    fn used() -> Duration {
        let mut total = 0;
        for task in std::fs::read_dir("/proc/self/task").unwrap() {
            let path = task.unwrap().path().join("schedstat");
            if let Ok(stat) = std::fs::read_to_string(path) {
                let ns: u64 = stat.split_whitespace().next().unwrap().parse().unwrap();
                total += ns;
            }
        }
        Duration::from_nanos(total)
    }

    /// One round of acquires and releases, reads and writes in turn: the CPU per
    /// acquire and release, in µs.
    pub async fn round(lock: &RwLock) -> f64 {
        let before = used();
        for i in 0..PER_ROUND {
            if i % 2 == 0 {
                lock.read().await.unwrap().release().await.unwrap();
            } else {
                lock.write().await.unwrap().release().await.unwrap();
            }
        }
        (used() - before).as_secs_f64() * 1e6 / f64::from(PER_ROUND)
    }

    fn median(values: &[f64]) -> f64 {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        sorted[sorted.len() / 2]
    }

    /// Prints the rounds' median and range; against `base`, the median of the
    /// differences round by round.
    pub fn report(build: &str, what: &str, rounds: &[f64], base: Option<&[f64]>) {
        let (low, high) = rounds
            .iter()
            .fold((f64::MAX, f64::MIN), |(low, high), &us| {
                (low.min(us), high.max(us))
            });
        let mut line = format!(
            "client CPU per acquire+release, {build}, {what}: median {:.2} us, min-max {low:.2}-{high:.2} us",
            median(rounds)
        );
        if let Some(base) = base {
            let extra: Vec<f64> = rounds
                .iter()
                .zip(base)
                .map(|(us, base)| us - base)
                .collect();
            line += &format!(
                "; more than without a recorder, round by round: median {:.2} us",
                median(&extra)
            );
        }
        println!("{line}");
    }
}

on_both_backends! {
/// The spans: a hold's renewals and its lost lease's warning run in its `hold`
/// span (lock, mode, fencing token), and each release in a `release` span inside
/// it. Captured by this binary's global subscriber (installed on first use: a
/// subscriber of this thread alone can miss spans whose callsites other tests'
/// threads register meanwhile), for this test's lock.
async fn renewals_releases_and_lost_leases_nest_in_the_hold_span(backend: Backend) {
    use std::time::Duration;

    use redis_rwlock::LockOptions;
    use spans::{Capture, Seen};

    let capture = Capture::global();
    let client = backend.client().await;
    let name = common::unique_name("spans");
    let lock = client.rwlock_with(
        &name,
        LockOptions::default().write_lease(Duration::from_millis(600)),
    );

    let reader = lock.read().await.unwrap();
    reader.release().await.unwrap();
    let writer = lock.write().await.unwrap();
    let fence = writer.fencing_token().to_string();
    tokio::time::sleep(Duration::from_millis(500)).await; // renewed at 200 and 400 ms
    lock.force_release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), writer.lost())
        .await
        .expect("the next renewal finds the hold gone");
    let _ = writer.release().await;

    let hold = |mode: &'static str| {
        let name = name.clone();
        move |span: &Seen| {
            span.name == "hold"
                && span.fields.get("lock") == Some(&name)
                && span.fields.get("mode").map(String::as_str) == Some(mode)
        }
    };
    // A lost lease's release returns at once and tidies up in the background: the
    // write hold's span closes (and is captured) when that is done.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let seen = loop {
        let seen = capture.seen();
        if seen.spans.iter().any(hold("write")) || tokio::time::Instant::now() >= deadline {
            break seen;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let renewed: Vec<&Seen> = seen.events_in("renewed", hold("write"));
    assert!(!renewed.is_empty(), "renewals in the hold span: {seen:#?}");
    let write_hold = seen
        .spans
        .iter()
        .find(|span| hold("write")(span))
        .expect("a write hold span");
    assert_eq!(write_hold.fields.get("fencing_token"), Some(&fence));
    let read_hold = seen
        .spans
        .iter()
        .find(|span| hold("read")(span))
        .expect("a read hold span");
    assert_eq!(read_hold.fields.get("fencing_token"), None);

    let lost = seen.events_in("lease lost", hold("write"));
    assert_eq!(lost.len(), 1, "{seen:#?}");
    assert_eq!(
        lost[0].fields.get("cause").map(String::as_str),
        Some("gone")
    );
    assert_eq!(lost[0].level, tracing::Level::WARN);

    for mode in ["read", "write"] {
        let releases = seen
            .spans
            .iter()
            .filter(|span| span.name == "release" && span.parent.as_deref().is_some_and(hold(mode)))
            .count();
        assert_eq!(
            releases, 1,
            "one release span in the {mode} hold: {seen:#?}"
        );
    }
}
}

/// A `tracing` layer that keeps every span and event with its fields, and each
/// event's spans (innermost first).
mod spans {
    use std::collections::BTreeMap;
    use std::fmt;
    use std::sync::{Arc, Mutex, OnceLock, PoisonError};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Level, Subscriber};
    use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
    use tracing_subscriber::registry::LookupSpan;

    /// A span or an event as captured: an event's `name` is its message, its
    /// `parent` the innermost span it ran in.
    #[derive(Clone, Debug)]
    pub struct Seen {
        pub name: String,
        pub level: Level,
        pub fields: BTreeMap<String, String>,
        pub parent: Option<Box<Seen>>,
    }

    impl Seen {
        /// This span and the ones it is inside, innermost first.
        fn chain(&self) -> impl Iterator<Item = &Seen> {
            std::iter::successors(Some(self), |seen| seen.parent.as_deref())
        }
    }

    #[derive(Debug, Default)]
    pub struct Captured {
        pub spans: Vec<Seen>,
        pub events: Vec<Seen>,
    }

    impl Captured {
        /// The events whose message starts with `message`, inside a span that `span`
        /// accepts.
        pub fn events_in(&self, message: &str, span: impl Fn(&Seen) -> bool) -> Vec<&Seen> {
            self.events
                .iter()
                .filter(|event| event.name.starts_with(message))
                .filter(|event| {
                    event
                        .parent
                        .as_deref()
                        .is_some_and(|p| p.chain().any(&span))
                })
                .collect()
        }
    }

    #[derive(Clone, Default)]
    pub struct Capture(Arc<Mutex<Captured>>);

    impl Capture {
        /// The capture of this test binary, its global subscriber.
        pub fn global() -> &'static Capture {
            static GLOBAL: OnceLock<Capture> = OnceLock::new();
            GLOBAL.get_or_init(|| {
                let capture = Capture::default();
                let subscriber = tracing_subscriber::registry().with(capture.clone());
                tracing::subscriber::set_global_default(subscriber)
                    .expect("no other global subscriber in this test binary");
                capture
            })
        }

        /// What was captured so far, with each span's fields as they are now.
        pub fn seen(&self) -> Captured {
            let captured = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            Captured {
                spans: captured.spans.clone(),
                events: captured.events.clone(),
            }
        }
    }

    #[derive(Default)]
    struct Fields(BTreeMap<String, String>);

    impl Visit for Fields {
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.insert(field.name().to_owned(), value.to_owned());
        }

        fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
            self.0.insert(field.name().to_owned(), format!("{value:?}"));
        }
    }

    /// A span's captured self, kept in its registry entry.
    struct Entry(Seen);

    fn seen_of<S: Subscriber + for<'a> LookupSpan<'a>>(
        id: &Id,
        ctx: &Context<'_, S>,
    ) -> Option<Seen> {
        let span = ctx.span(id)?;
        let extensions = span.extensions();
        let mut seen = extensions.get::<Entry>()?.0.clone();
        seen.parent = span
            .parent()
            .and_then(|parent| seen_of(&parent.id(), ctx))
            .map(Box::new);
        Some(seen)
    }

    impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
        fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
            let mut fields = Fields::default();
            attrs.record(&mut fields);
            let Some(span) = ctx.span(id) else { return };
            span.extensions_mut().insert(Entry(Seen {
                name: attrs.metadata().name().to_owned(),
                level: *attrs.metadata().level(),
                fields: fields.0,
                parent: None,
            }));
        }

        fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
            let Some(span) = ctx.span(id) else { return };
            let mut extensions = span.extensions_mut();
            if let Some(Entry(seen)) = extensions.get_mut::<Entry>() {
                let mut fields = Fields(std::mem::take(&mut seen.fields));
                values.record(&mut fields);
                seen.fields = fields.0;
            }
        }

        fn on_close(&self, id: Id, ctx: Context<'_, S>) {
            // Its fields as they ended up, with the spans it was inside.
            if let Some(seen) = seen_of(&id, &ctx) {
                let mut captured = self.0.lock().unwrap_or_else(PoisonError::into_inner);
                captured.spans.push(seen);
            }
        }

        fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
            let mut fields = Fields::default();
            event.record(&mut fields);
            let message = fields.0.remove("message").unwrap_or_default();
            let parent = ctx
                .event_span(event)
                .and_then(|span| seen_of(&span.id(), &ctx))
                .map(Box::new);
            let mut captured = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            captured.events.push(Seen {
                name: message,
                level: *event.metadata().level(),
                fields: fields.0,
                parent,
            });
        }
    }
}

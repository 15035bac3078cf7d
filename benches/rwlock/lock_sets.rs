//! The `lock_sets` scenario: what a lock set (`LockClient::lock_set`) costs against
//! the locks it holds taken alone, and whether two sets listed in opposite orders
//! ever deadlock. This crate only. Three parts per run:
//!
//! - **one slot, uncontended**: a set of 4 members sharing a hash tag (2 read, 2
//!   write: `{tag}:r0`, `{tag}:r1`, `{tag}:w0`, `{tag}:w1`, so one slot of master
//!   0), `acquire()` timed, interleaved with a single `write()` on a lock of the
//!   same tag (same slot, same master) timed the same way; releases are outside the
//!   timed part, and which of the two goes first alternates. Then the script calls
//!   per acquire: [`COUNTED`] sets, each of its own hash tag on that master, are
//!   acquired one after another and kept, with the master's `INFO commandstats`
//!   read before the first and after the last (then all are released); the same
//!   for [`COUNTED`] single `write()`s;
//! - **three masters**: a set of 4 members (2 read, 2 write), each in a slot of its
//!   own and every master holding at least one, `acquire()` timed, interleaved with
//!   the same 4 locks taken by hand one by one, in the set's order (`read()` /
//!   `write()` awaited in sequence), timed the same way;
//! - **opposite orders**: two clients (two instances of a service, each its own
//!   `LockClient`) loop on a set of 2 writers {a, b} (a on master 0, b on master
//!   1), one listing a then b, the other b then a, with a wait limit of
//!   [`OPPOSITE_WAIT`]: a timeout counts as a deadlock. Against it, the same loop
//!   with each client taking `a.write()` then `b.write()` by hand (one global order
//!   written out) and releasing both together. Each variant runs
//!   [`opposite_secs`] in two halves, the halves in the order set, by hand, by
//!   hand, set (or the reverse, every other run), so drift hits both alike.

use std::time::Duration;

use redis_rwlock::redis::cluster_routing::Slot;
use redis_rwlock::{Error, LockClient, LockMode, LockOptions, LockSet, RwLock};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::cluster::Counters;
use crate::locks::Impl;
use crate::scenarios::{Bench, LONG_WAIT};

/// Sets (and single writes) acquired between two readings of the master's
/// counters, for the script calls per acquire.
pub const COUNTED: usize = 100;
/// The opposite-orders loops' wait limit: a set (or a by-hand `write()`) that
/// waits this long counts as a deadlock.
pub const OPPOSITE_WAIT: Duration = Duration::from_secs(3);
/// Iterations of the timed loops run first and not recorded.
const WARM_UP: usize = 20;

/// How long each variant of the opposite-orders part loops per run (s).
pub fn opposite_secs(quick: bool) -> f64 {
    if quick { 5.0 } else { 30.0 }
}

/// Result names of the scenario's parts.
pub mod names {
    pub const SET_ONE_SLOT: &str = "lock_set_one_slot";
    pub const SET_THREE_MASTERS: &str = "lock_set_three_masters";
    pub const SET_OPPOSITE: &str = "lock_set_opposite_orders";
}
use names::*;

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// What one side of an interleaved timing acquires.
enum Side<'a> {
    /// The set, at once.
    Set(&'a LockSet),
    /// One lock's `write()`.
    Write(&'a RwLock),
    /// These locks one by one, in order: the first failure stops it.
    ByHand(&'a [(RwLock, LockMode)]),
}

impl Side<'_> {
    /// One timed acquire: how long it took (us; the releases after it are not
    /// timed), or `None` if it failed, and how many acquires and releases failed.
    async fn time(&self) -> (Option<f64>, u64) {
        let t0 = Instant::now();
        let mut held = Vec::new();
        let mut failed = false;
        match self {
            Side::Set(set) => match set.acquire().await {
                Ok(h) => held.push(Held::Set(h)),
                Err(_) => failed = true,
            },
            Side::Write(lock) => match lock.write().await {
                Ok(h) => held.push(Held::Write(h)),
                Err(_) => failed = true,
            },
            Side::ByHand(locks) => {
                for (lock, mode) in locks.iter() {
                    let taken = match mode {
                        LockMode::Read => lock.read().await.map(Held::Read),
                        LockMode::Write => lock.write().await.map(Held::Write),
                    };
                    match taken {
                        Ok(h) => held.push(h),
                        Err(_) => {
                            failed = true;
                            break;
                        }
                    }
                }
            }
        }
        let took = us(t0.elapsed());
        let mut failures = u64::from(failed);
        for h in held {
            failures += u64::from(h.release().await.is_err());
        }
        (Some(took).filter(|_| !failed), failures)
    }
}

/// Runs `a` and `b` in turns, [`WARM_UP`] untimed rounds and then `iters` timed
/// ones, which of the two goes first alternating: the times of each, and the
/// failures of both.
async fn interleaved(iters: usize, a: Side<'_>, b: Side<'_>) -> (Vec<f64>, Vec<f64>, u64) {
    let (mut times_a, mut times_b, mut failures) = (Vec::new(), Vec::new(), 0);
    for i in 0..iters + WARM_UP {
        for a_first in [i % 2 == 0, i % 2 == 1] {
            let (took, failed) = if a_first {
                a.time().await
            } else {
                b.time().await
            };
            failures += failed;
            match took {
                Some(took) if i >= WARM_UP && a_first => times_a.push(took),
                Some(took) if i >= WARM_UP => times_b.push(took),
                _ => {}
            }
        }
    }
    (times_a, times_b, failures)
}

/// What one client's loop in the opposite-orders part did.
#[derive(Default)]
struct Looped {
    /// Acquires (of the set, or of both locks by hand) granted before the window ended.
    done: u64,
    timeouts: u64,
    failures: u64,
    /// Each granted acquire's time from asking to holding both, ms.
    waits: Vec<f64>,
}

impl Looped {
    fn add(&mut self, other: Looped) {
        self.done += other.done;
        self.timeouts += other.timeouts;
        self.failures += other.failures;
        self.waits.extend(other.waits);
    }

    /// A grant received at `now`: counted when it came within the window.
    fn record(&mut self, asked: Instant, end: Instant) {
        let now = Instant::now();
        if now <= end {
            self.done += 1;
            self.waits.push((now - asked).as_secs_f64() * 1e3);
        }
    }

    fn failed(&mut self, err: &Error) {
        match err {
            Error::Timeout { .. } => self.timeouts += 1,
            _ => self.failures += 1,
        }
    }
}

/// One client's side of the opposite-orders part: its set, or its two locks in
/// the global order.
#[derive(Clone)]
enum Looper {
    Set(LockSet),
    ByHand(RwLock, RwLock),
}

impl Looper {
    /// Acquires and releases until `end`.
    async fn run(self, end: Instant) -> Looped {
        let mut out = Looped::default();
        while Instant::now() < end {
            let asked = Instant::now();
            let result = match &self {
                Looper::Set(set) => match set.acquire().await {
                    Ok(held) => {
                        out.record(asked, end);
                        held.release().await
                    }
                    Err(err) => Err(err),
                },
                Looper::ByHand(a, b) => match a.write().await {
                    Ok(first) => match b.write().await {
                        Ok(second) => {
                            out.record(asked, end);
                            let (x, y) = tokio::join!(second.release(), first.release());
                            x.and(y)
                        }
                        Err(err) => {
                            let _ = first.release().await;
                            Err(err)
                        }
                    },
                    Err(err) => Err(err),
                },
            };
            if let Err(err) = result {
                out.failed(&err);
            }
        }
        out
    }
}

impl Bench {
    /// The `lock_sets` scenario, one run.
    pub async fn lock_sets(&mut self, run: usize) {
        self.lock_set_one_slot(run).await;
        self.lock_set_three_masters(run).await;
        self.lock_set_opposite(run).await;
    }

    fn set_options() -> LockOptions {
        LockOptions::default().wait_timeout(LONG_WAIT)
    }

    /// A set of 2 readers and 2 writers, all with the hash tag `{tag}`.
    fn one_slot_set(&self, tag: &str) -> LockSet {
        self.clients
            .ours
            .lock_set_with(Self::set_options())
            .read(format!("{{{tag}}}:r0"))
            .write(format!("{{{tag}}}:w0"))
            .read(format!("{{{tag}}}:r1"))
            .write(format!("{{{tag}}}:w1"))
    }

    /// Uncontended `acquire()` of a one-slot set of 4 against a single `write()`.
    async fn lock_set_one_slot(&mut self, run: usize) {
        let master = 0;
        let tag = self.name_on(master, &format!("set1-{run}"));
        let set = self.one_slot_set(&tag);
        let single = self
            .clients
            .ours
            .rwlock_with(format!("{{{tag}}}:single"), Self::set_options());
        let (mut sets, mut writes, mut failures) = interleaved(
            self.cfg.uncontended_iters,
            Side::Set(&set),
            Side::Write(&single),
        )
        .await;
        // Script calls per acquire: COUNTED sets of their own tags on the master,
        // acquired and kept between two readings of its counters; the same for
        // single writes.
        let counted_sets: Vec<LockSet> = (0..COUNTED)
            .map(|i| self.one_slot_set(&self.name_on(master, &format!("set1c-{run}-{i}"))))
            .collect();
        let (set_counts, set_done, set_failed) = self
            .counted_block(master, &counted_sets, |set| {
                let set = set.clone();
                async move { set.acquire().await.map(Held::Set) }
            })
            .await;
        let counted_writes: Vec<RwLock> = (0..COUNTED)
            .map(|i| {
                let name = self.name_on(master, &format!("set1w-{run}-{i}"));
                self.clients.ours.rwlock_with(name, Self::set_options())
            })
            .collect();
        let (write_counts, write_done, write_failed) = self
            .counted_block(master, &counted_writes, |lock| {
                let lock = lock.clone();
                async move { lock.write().await.map(Held::Write) }
            })
            .await;
        failures += set_failed + write_failed;
        if failures > 0 {
            self.note(format!(
                "lock sets, one slot: {failures} acquires or releases failed"
            ));
        }
        let mut r = self.results.of(SET_ONE_SLOT, Impl::Ours);
        r.percentiles("set_acquire", "us", &mut sets, &[50, 99]);
        r.percentiles("write_acquire", "us", &mut writes, &[50, 99]);
        for (what, counts, done) in [
            ("set", set_counts, set_done),
            ("write", write_counts, write_done),
        ] {
            let (Some(c), true) = (counts, done > 0) else {
                continue;
            };
            let per = |v: f64| v / done as f64;
            r.put(
                format!("{what}_scripts_per_acquire"),
                "",
                per(c.scripts as f64),
            );
            r.put(
                format!("{what}_commands_per_acquire"),
                "",
                per(c.commands as f64),
            );
            r.put(
                format!("{what}_script_us_per_acquire"),
                "us",
                per(c.script_usec as f64),
            );
        }
    }

    /// Acquires each of `items` in turn, keeping every hold, between two readings
    /// of master `master`'s counters; then releases them all. What the master
    /// counted (`None` if INFO failed), the acquires granted, and the failures.
    async fn counted_block<T, F, Fut>(
        &mut self,
        master: usize,
        items: &[T],
        acquire: F,
    ) -> (Option<Counters>, u64, u64)
    where
        F: Fn(&T) -> Fut,
        Fut: Future<Output = Result<Held, Error>>,
    {
        let mut held = Vec::with_capacity(items.len());
        let mut failures = 0u64;
        let before = self.masters.counters(master).await;
        for item in items {
            match acquire(item).await {
                Ok(h) => held.push(h),
                Err(_) => failures += 1,
            }
        }
        let after = self.masters.counters(master).await;
        let done = held.len() as u64;
        for h in held {
            failures += u64::from(h.release().await.is_err());
        }
        let counts = match (before, after) {
            (Ok(before), Ok(after)) => Some(after.since(&before)),
            _ => {
                self.note("lock sets: INFO on the lock's master failed".to_owned());
                None
            }
        };
        (counts, done, failures)
    }

    /// Four lock names, one slot each, over every master (the fourth on master
    /// `run`'s), modes read, write, read, write.
    fn spread_names(&mut self, run: usize) -> Vec<(String, LockMode)> {
        let masters = self.topology.masters.len();
        let mut names: Vec<(String, LockMode)> = Vec::new();
        let mut slots: Vec<Slot> = Vec::new();
        for i in 0..4 {
            let master = if i < masters { i } else { run % masters };
            let mode = if i % 2 == 0 {
                LockMode::Read
            } else {
                LockMode::Write
            };
            // A name whose slot no earlier member has.
            let name = (0..)
                .map(|n| self.name_on(master, &format!("set3-{run}-{i}-{n}")))
                .find(|name| !slots.contains(&Slot::for_key(format!("{{{name}}}"))))
                .unwrap_or_default();
            slots.push(Slot::for_key(format!("{{{name}}}")));
            names.push((name, mode));
        }
        names
    }

    /// Uncontended `acquire()` of a set of 4 on 3 masters against the same locks
    /// taken one by one in the set's order.
    async fn lock_set_three_masters(&mut self, run: usize) {
        let names = self.spread_names(run);
        let client: &LockClient = &self.clients.ours;
        let mut set = client.lock_set_with(Self::set_options());
        for (name, mode) in &names {
            set = match mode {
                LockMode::Read => set.read(name.clone()),
                LockMode::Write => set.write(name.clone()),
            };
        }
        // The set's own order, for the locks taken by hand.
        let by_hand: Vec<(RwLock, LockMode)> = set
            .members()
            .map(|(name, mode)| (client.rwlock_with(name, Self::set_options()), mode))
            .collect();
        let masters_used: std::collections::BTreeSet<usize> = by_hand
            .iter()
            .filter_map(|(lock, _)| lock.key().ok())
            .map(|key| self.topology.master_of(key))
            .collect();
        if masters_used.len() < self.topology.masters.len().min(3) {
            self.note(format!(
                "lock sets, three masters: the members are on masters {masters_used:?} only"
            ));
        }
        let (mut sets, mut hands, failures) = interleaved(
            self.cfg.uncontended_iters,
            Side::Set(&set),
            Side::ByHand(&by_hand),
        )
        .await;
        if failures > 0 {
            self.note(format!(
                "lock sets, three masters: {failures} acquires or releases failed"
            ));
        }
        let mut r = self.results.of(SET_THREE_MASTERS, Impl::Ours);
        r.percentiles("set_acquire", "us", &mut sets, &[50, 99]);
        r.percentiles("by_hand_acquire", "us", &mut hands, &[50, 99]);
        r.put("masters", "count", masters_used.len() as f64);
    }

    /// Two clients looping on sets of {a, b} listed in opposite orders, against the
    /// same loop with one global order written by hand.
    async fn lock_set_opposite(&mut self, run: usize) {
        let instances = self.instances(2).await;
        let [one, two] = instances.as_slice() else {
            self.note("lock sets, opposite orders: no second client".into());
            return;
        };
        let (one, two) = (one.ours.clone(), two.ours.clone());
        let a = self.name_on(0, &format!("setopp-a-{run}"));
        let b = self.name_on(1, &format!("setopp-b-{run}"));
        let options = LockOptions::default().wait_timeout(OPPOSITE_WAIT);
        let sets = [
            Looper::Set(
                one.lock_set_with(options.clone())
                    .write(a.clone())
                    .write(b.clone()),
            ),
            Looper::Set(
                two.lock_set_with(options.clone())
                    .write(b.clone())
                    .write(a.clone()),
            ),
        ];
        let hands = [&one, &two].map(|client| {
            Looper::ByHand(
                client.rwlock_with(a.clone(), options.clone()),
                client.rwlock_with(b.clone(), options.clone()),
            )
        });
        let half = opposite_secs(self.cfg.quick) / 2.0;
        let mut order = [true, false, false, true];
        if run % 2 == 1 {
            order = order.map(|set| !set);
        }
        let mut totals: [Looped; 2] = Default::default();
        let mut per_client: [[u64; 2]; 2] = Default::default();
        let mut elapsed = [0.0f64; 2];
        for set in order {
            let (loopers, v) = if set { (&sets, 0) } else { (&hands, 1) };
            let started = Instant::now();
            let end = started + Duration::from_secs_f64(half);
            let mut tasks = JoinSet::new();
            for (c, looper) in loopers.iter().enumerate() {
                let looper = looper.clone();
                tasks.spawn(async move { (c, looper.run(end).await) });
            }
            while let Some(joined) = tasks.join_next().await {
                match joined {
                    Ok((c, looped)) => {
                        per_client[v][c] += looped.done;
                        totals[v].add(looped);
                    }
                    Err(_) => totals[v].failures += 1,
                }
            }
            elapsed[v] += half;
        }
        for (v, what) in [(0, "set"), (1, "by hand")] {
            let t = &totals[v];
            if t.failures > 0 || t.timeouts > 0 {
                self.note(format!(
                    "lock sets, opposite orders, {what}: {} timeouts, {} other failures",
                    t.timeouts, t.failures
                ));
            }
        }
        let mut r = self.results.of(SET_OPPOSITE, Impl::Ours);
        for (v, m) in [(0, "set"), (1, "by_hand")] {
            let t = &mut totals[v];
            r.put(format!("{m}_per_s"), "1/s", t.done as f64 / elapsed[v]);
            r.put(format!("{m}_timeouts"), "count", t.timeouts as f64);
            r.put(format!("{m}_failures"), "count", t.failures as f64);
            r.percentiles(&format!("{m}_wait_ms"), "ms", &mut t.waits, &[50, 99]);
            let fewest = per_client[v].iter().copied().min().unwrap_or(0) as f64;
            let most = per_client[v].iter().copied().max().unwrap_or(0) as f64;
            r.put(
                format!("{m}_client_share"),
                "",
                if most > 0.0 { fewest / most } else { f64::NAN },
            );
        }
    }
}

/// A hold taken in the scenario: a set's, or one lock's.
enum Held {
    Set(redis_rwlock::LockSetGuard),
    Read(redis_rwlock::RwLockReadGuard),
    Write(redis_rwlock::RwLockWriteGuard),
}

impl Held {
    async fn release(self) -> Result<(), Error> {
        match self {
            Held::Set(guard) => guard.release().await,
            Held::Read(guard) => guard.release().await,
            Held::Write(guard) => guard.release().await,
        }
    }
}

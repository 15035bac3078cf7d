//! Keeps the model honest: random sequences of script calls run against the REAL
//! Lua scripts (prelude + operation, as `src/backend/redis/scripts/mod.rs` builds them) on a real
//! server and against their mirror in Rust (the engine, `src/protocol/engine/`), and every reply,
//! every wake-up message, the fencing tokens' order and every field of the hash
//! (`HGETALL`, and the key's TTL) must agree. See docs/PROTOCOL.md.
//!
//! Locks: each run has [`LOCKS`] locks in one slot (one hash tag). Single-lock
//! steps act on one; a set step runs acquire_set.lua (the set's own file after the
//! operations it calls, `common::hash_set_script`) over some of them against
//! `engine::acquire_set` on the model's hashes: the reply, the messages of every
//! operation the set ran (in order, each on its member's channel), and every
//! member's fields and TTL must agree the same way. Messages are checked on every
//! lock's channel after each step, every lock's hash after each wait.
//!
//! Time: the model runs each tick at a nominal instant `base + k * TICK`; the real
//! scripts run a few milliseconds after it (the test sleeps until the nominal
//! instant, and checks after every call that it was not more than `SLACK` late).
//! Every lease, intent and expiry span is chosen away from a multiple of `TICK` by
//! more than `SLACK`, so each "expired yet?" comparison comes out the same on both
//! sides; time-valued fields are compared within `SLACK`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
mod model;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redis::{Script, Value};

use model::ModelTok as _;
use model::lua::{self, Field, Hash, Outcome, Params, Reply, Time, Tok, Val, Wake};

/// One tick of model time, in ms.
const TICK: i64 = 286;
/// How late after its nominal instant a script may run.
const SLACK: i64 = 60;
const READ_LEASE: i64 = 2 * TICK + 71;
/// The read lease of odd-numbered tokens: holders' leases differ, and this one is
/// longer than the write lease (an upgrade's write hold takes over what is left).
const LONG_READ_LEASE: i64 = 5 * TICK + 71;
const WRITE_LEASE: i64 = 3 * TICK + 71;
const INTENT_TTL: i64 = 2 * TICK + 71;
/// Original-design clients' read and write timeouts, shorter than our leases (as in a
/// fleet that kept the original's short timeouts); their stamps are written 1 ms
/// before the tick.
const ORIGINAL_READ: i64 = TICK + 72;
const ORIGINAL_WRITE: i64 = 2 * TICK + 72;
/// The whole-key TTL original-design clients set.
const ORIGINAL_KEY_TTL: i64 = 3 * TICK + 143;
/// The `+ 1000` of `set_expiry`.
const IDLE: i64 = 1000;
const STEPS: usize = 300;
/// The locks of a run, in one slot: `rwlock:{<tag>}a`, `...b`, `...c`. The first
/// gets the steps a run on one lock had (the fixed first steps, then `STEPS`
/// random ones, from the seed's generator); now and then a step on another lock
/// or a set comes in between (from a generator of their own).
const LOCKS: usize = 3;
/// After how many in a hundred of the first lock's random steps comes a set.
const SET_STEPS: u32 = 10;
/// After how many in a hundred comes a step on another lock (none when a wait is
/// drawn for it: time passes only in the first lock's steps).
const OTHER_STEPS: u32 = 10;
const SEEDS: [u64; 4] = [1, 2, 3, 4];
/// Tokens in play: few, so they collide (resends, releases by non-owners).
const TOKENS: usize = 5;
const ATTEMPTS: usize = 3;

fn script(operation: &str) -> Script {
    Script::new(&common::hash_script(operation))
}

struct Scripts {
    acquire_read: Script,
    acquire_write: Script,
    release: Script,
    renew: Script,
    downgrade: Script,
    fenced_write: Script,
    force_release: Script,
    original_read: Script,
    original_write: Script,
    original_release: Script,
    /// acquire_set.lua with the operations it calls.
    acquire_set: Script,
    /// Runs only the fast path of the operation named by the last argument (on a
    /// copy of the lock): 1 when it decided, 0 when it would go the full way.
    fast_probe: Script,
}

impl Scripts {
    fn load() -> Self {
        Scripts {
            acquire_read: script(include_str!("../lua/acquire_read.lua")),
            acquire_write: script(include_str!("../lua/acquire_write.lua")),
            release: script(include_str!("../lua/release.lua")),
            renew: script(include_str!("../lua/renew.lua")),
            downgrade: script(include_str!("../lua/downgrade.lua")),
            fenced_write: script(include_str!("../lua/fenced_write.lua")),
            force_release: script(include_str!("../lua/force_release.lua")),
            original_read: Script::new(include_str!("original/hash_acquire_read.lua")),
            original_write: Script::new(include_str!("original/hash_acquire_write.lua")),
            original_release: Script::new(include_str!("original/hash_release.lua")),
            acquire_set: Script::new(&common::hash_set_script()),
            fast_probe: script(
                "bind(KEYS, ARGV)\nlocal operation = table.remove(ARGV)\n\
                 if layout.fast_path(operation, ARGV) then\n  return 1\nend\nreturn 0",
            ),
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Step {
    /// A plain (false) or upgradable (true) read acquire; with `wait` (the third), a
    /// plain reader that is refused waits in line.
    AcquireRead(usize, bool, bool),
    /// A write acquire that queues (true) or not.
    AcquireWrite(usize, bool),
    /// An upgrade of the token's upgradable hold that waits (true: keeps new readers
    /// out) or not (try_upgrade).
    Upgrade(usize, bool),
    Release(usize),
    /// Renews in the write mode (true) or the read mode.
    Renew(usize, bool),
    /// Downgrades the write hold (true) or the upgradable hold.
    Downgrade(usize, bool),
    FencedWrite(usize),
    /// An operator ends every hold.
    ForceRelease,
    /// An original-design client acquires (read / write), with its own clock: the
    /// original design's script from tests/original/.
    OriginalAcquire(bool),
    /// It releases: deletes its field if it still holds its stamp.
    OriginalRelease(bool),
    /// Time moves on by this many ticks.
    Wait(i64),
    /// acquire_set.lua over some of the locks (the only step that is not on one lock).
    AcquireSet(SetStep),
}

/// One call of acquire_set.lua: its first `len` members, each a lock, a token and
/// a mode (true: write), in the set's order; its common writer preference and read
/// lease ([`LONG_READ_LEASE`] or [`READ_LEASE`]).
#[derive(Clone, Copy, PartialEq, Eq)]
struct SetStep {
    members: [(usize, usize, bool); LOCKS],
    len: usize,
    writer_preferred: bool,
    long_reads: bool,
}

impl SetStep {
    fn members(&self) -> &[(usize, usize, bool)] {
        &self.members[..self.len]
    }

    fn read_lease(&self) -> i64 {
        if self.long_reads {
            LONG_READ_LEASE
        } else {
            READ_LEASE
        }
    }
}

/// As the log shows it: `[b w3, a r1]` is token 3 writing lock b, then token 1
/// reading lock a.
impl std::fmt::Debug for SetStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let members: Vec<String> = self
            .members()
            .iter()
            .map(|&(at, t, write)| {
                format!("{} {}{t}", lock_name(at), if write { 'w' } else { 'r' })
            })
            .collect();
        write!(
            f,
            "[{}] writer_preferred={} read_lease={}",
            members.join(", "),
            self.writer_preferred,
            self.read_lease()
        )
    }
}

/// A lock's letter, the end of its key.
fn lock_name(at: usize) -> char {
    char::from(b'a' + at as u8)
}

/// A random set: 1 to [`LOCKS`] distinct locks in a random order, each with a
/// random token and mode. A third of the time it is `resend`, the last set granted,
/// sent again: its holds may still be there (the resend must renew them and grant
/// again), or have been released, lost or taken over since. A quarter of the others
/// write every lock, the first (the busiest) last: such a set is often refused
/// there after taking the others, and each of their releases back wakes (`*`), so
/// the order of those messages shows the order of the releases.
fn random_set(rng: &mut StdRng, resend: Option<SetStep>) -> SetStep {
    if let Some(set) = resend.filter(|_| rng.random_bool(0.3)) {
        return set;
    }
    let writes_all = rng.random_bool(0.25);
    let len = if writes_all {
        LOCKS
    } else {
        rng.random_range(1..=LOCKS)
    };
    let mut free: Vec<usize> = (0..LOCKS).collect();
    let mut members = [(0, 0, false); LOCKS];
    for member in &mut members[..len] {
        let at = free.swap_remove(rng.random_range(0..free.len()));
        *member = (
            at,
            rng.random_range(0..TOKENS),
            writes_all || rng.random_bool(0.4),
        );
    }
    if writes_all {
        members.sort_by_key(|&(at, _, _)| at == 0);
    }
    SetStep {
        members,
        len,
        writer_preferred: rng.random_bool(0.7),
        long_reads: rng.random_bool(0.5),
    }
}

/// A random step on the lock as the model has it (`view`). Upgrades and upgradable
/// downgrades go mostly to the upgradable reader's token, and while there is one,
/// releases mostly to a reader's: so the steps reach the waiting, handed-over and
/// refused upgrades, not only lost ones.
fn random_step(rng: &mut StdRng, view: &lua::View) -> Step {
    let t = rng.random_range(0..TOKENS);
    let owner = view.upgradable.map(|(owner, _)| owner.client() as usize);
    let upgrader = owner.filter(|_| rng.random_bool(0.9)).unwrap_or(t);
    // While an upgrade waits, the other readers.
    let holders: Vec<usize> = (view
        .readers
        .keys()
        .chain(view.writer.as_ref().map(|(w, _)| w)))
    .filter(|h| !h.is_stranger()) // a forced release's fence is no client's
    .map(|h| h.client() as usize)
    .filter(|&h| view.upgrade.is_none() || Some(h) != owner)
    .collect();
    let releaser = if !holders.is_empty() && rng.random_bool(0.6) {
        holders[rng.random_range(0..holders.len())]
    } else {
        t
    };
    let upgradable = rng.random_bool(if owner.is_some() { 0.2 } else { 0.5 });
    match rng.random_range(0..100) {
        0..18 => Step::AcquireRead(t, upgradable, rng.random_bool(0.7)),
        18..26 => Step::AcquireWrite(t, rng.random_bool(0.8)),
        26..36 if owner.is_none() && rng.random_bool(0.7) => Step::AcquireRead(t, true, false),
        26..36 => Step::Upgrade(upgrader, rng.random_bool(0.75)),
        36..50 => Step::Release(releaser),
        // Mostly the writer's (which may hold past its write lease after an upgrade).
        50..59 => match view.writer {
            Some((w, _)) if rng.random_bool(0.5) => Step::Renew(w.client() as usize, true),
            _ => Step::Renew(t, rng.random_bool(0.5)),
        },
        59..61 => Step::Downgrade(t, true),
        61..66 => Step::Downgrade(upgrader, false),
        66..68 => Step::FencedWrite(t),
        68 if rng.random_bool(0.5) => Step::ForceRelease,
        68..71 => Step::OriginalAcquire(rng.random_bool(0.5)),
        71..72 => Step::OriginalRelease(rng.random_bool(0.5)),
        72..98 => Step::Wait(1),
        _ => Step::Wait(4),
    }
}

/// The read lease token `i` asks for.
fn read_lease(i: usize) -> i64 {
    if i % 2 == 1 {
        LONG_READ_LEASE
    } else {
        READ_LEASE
    }
}

/// Token number `i` in the model.
fn tok(i: usize) -> Tok {
    model::tok(i as u8, 0)
}

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Why a run stopped early.
enum Stop {
    /// The machine was too slow to keep a script within `SLACK` of its tick.
    Late(i64),
    /// Model and scripts disagree.
    Mismatch(String),
}

/// One lock of a run: its key and channel, its model hash, and what the run paired
/// between the model's hash and the real one (each lock numbers its own fences and
/// batches).
struct Lock {
    key: String,
    channel: String,
    model: Hash,
    /// The stamps of the original clients' last grants (read, write).
    original_stamps: [Option<Time>; 2],
    /// Fencing tokens seen, model -> real.
    fences: BTreeMap<i64, i64>,
    /// The largest fence a refusal reported (real): every fence issued later must
    /// be larger, so a hand-over message can be told from an older one.
    refusal_floor: i64,
    /// Batches of readers, model -> real name (paired when a refusal names one;
    /// the numbers differ: the model's clock is the nominal tick's).
    batches: BTreeMap<Tok, String>,
}

struct Run<'a> {
    seed: u64,
    /// By number; single-lock steps name theirs (`at`), a set its members'.
    locks: Vec<Lock>,
    conn: redis::Connection,
    scripts: &'a Scripts,
    tokens: Vec<String>,
    params: Params,
    /// Nominal instant of the current tick (ms), and of the first.
    now: Time,
    start: Time,
    log: Vec<String>,
    messages: usize,
    /// How often each state worth reaching was reached (`Run::note`).
    reached: BTreeMap<&'static str, usize>,
    /// The current step's script went its fast path (`goes_fast`).
    fast: bool,
    /// The last set granted, for a resend.
    last_set: Option<SetStep>,
}

impl Run<'_> {
    /// A token, or a batch of readers (`r#<n>`) the run has seen named on lock `at`.
    fn token_of(&self, at: usize, s: &str) -> Option<Tok> {
        if s.starts_with("r#") {
            return self.locks[at]
                .batches
                .iter()
                .find(|(_, real)| real.as_str() == s)
                .map(|(&b, _)| b);
        }
        if s == Tok::FORCED_READER.to_string() {
            return Some(Tok::FORCED_READER);
        }
        self.tokens.iter().position(|t| t == s).map(tok)
    }

    fn fail(&self, what: String) -> Stop {
        let mut msg = format!(
            "seed {}: the model and the real scripts disagree: {what}\nsteps (model time in ms from the start):\n",
            self.seed
        );
        for line in self.log.iter().rev().take(40).rev() {
            let _ = writeln!(msg, "  {line}");
        }
        for (at, lock) in self.locks.iter().enumerate() {
            let _ = writeln!(msg, "model hash {}: {}", lock_name(at), lock.model);
        }
        Stop::Mismatch(msg)
    }

    /// Calls `script` on lock `at` with the common arguments and `args`, like
    /// src/backend/redis/scripts/mod.rs.
    fn call(&mut self, at: usize, script: &Script, args: &[String]) -> Result<Value, Stop> {
        self.call_plain(&[at], script, &[&self.common_args()[..], args].concat())
    }

    fn common_args(&self) -> [String; 3] {
        [
            "PUBLISH".to_owned(),
            self.params.original_read.to_string(),
            self.params.original_write.to_string(),
        ]
    }

    /// Whether `operation` with `args` would go its fast path on lock `at` as it is
    /// now: tried on a copy of the key (its messages go to the copy's channel).
    fn goes_fast(&mut self, at: usize, operation: &str, args: &[String]) -> Result<bool, Stop> {
        let copy = format!("{}:fast-probe", self.locks[at].key);
        let exists: bool = redis::cmd("COPY")
            .arg(&self.locks[at].key)
            .arg(&copy)
            .arg("REPLACE")
            .query(&mut self.conn)
            .map_err(|e| self.fail(format!("COPY: {e}")))?;
        if !exists {
            let _: () = redis::cmd("DEL").arg(&copy).query(&mut self.conn).unwrap();
        }
        let mut invocation = self.scripts.fast_probe.key(&copy);
        for a in self.common_args().iter().chain(args) {
            invocation.arg(a);
        }
        let fast: i64 = invocation
            .arg(operation)
            .invoke(&mut self.conn)
            .map_err(|e| self.fail(format!("fast path probe: {e}")))?;
        let _: () = redis::cmd("DEL").arg(&copy).query(&mut self.conn).unwrap();
        Ok(fast == 1)
    }

    /// Calls a script on the locks `keys` (by number) with `args` only (the
    /// original design's take no common ones).
    fn call_plain(
        &mut self,
        keys: &[usize],
        script: &Script,
        args: &[String],
    ) -> Result<Value, Stop> {
        let mut invocation = script.prepare_invoke();
        for &at in keys {
            invocation.key(&self.locks[at].key);
        }
        for a in args {
            invocation.arg(a);
        }
        let reply: Value = invocation
            .invoke(&mut self.conn)
            .map_err(|e| self.fail(format!("script error: {e}")))?;
        let late = wall_ms() - self.now;
        if late > SLACK - 5 {
            return Err(Stop::Late(late));
        }
        Ok(reply)
    }

    /// Runs `step` on lock `at` (a set's on its members) on both sides and compares
    /// everything.
    fn run_step(
        &mut self,
        at: usize,
        step: Step,
        pubsub: &mut redis::PubSub<'_>,
    ) -> Result<(), Stop> {
        let p = self.params;
        let now = self.now;
        let before = lua::live_view(&self.locks[at].model, &p, now);
        let hash_before = self.locks[at].model.clone();
        self.fast = false;
        let (expected, real): (Option<Outcome>, Option<Value>) = match step {
            Step::Wait(ticks) => {
                self.now += ticks * TICK;
                while wall_ms() < self.now {
                    std::thread::sleep(Duration::from_millis(
                        (self.now - wall_ms()).clamp(1, 50) as u64
                    ));
                }
                (None, None)
            }
            Step::AcquireSet(set) => return self.run_set(set, pubsub),
            Step::OriginalAcquire(write) => {
                // The original client's clock: 1 ms behind the tick, so its stamps
                // never equal ours.
                let caller = now - 1;
                let lock = &mut self.locks[at];
                let granted =
                    lua::original_acquire(&mut lock.model, &p, caller, write, ORIGINAL_KEY_TTL);
                if granted {
                    lock.original_stamps[usize::from(write)] = Some(caller);
                }
                let args = [
                    ORIGINAL_KEY_TTL.to_string(),
                    ORIGINAL_READ.to_string(),
                    ORIGINAL_WRITE.to_string(),
                    caller.to_string(),
                ];
                let s = self.scripts;
                let script = if write {
                    &s.original_write
                } else {
                    &s.original_read
                };
                let out = Outcome {
                    reply: Reply::Int(i64::from(granted)),
                    published: None,
                    granted: None,
                    unlinked: 0,
                    new_grant: false,
                    recalled: false,
                    evicted: false,
                };
                (Some(out), Some(self.call_plain(&[at], script, &args)?))
            }
            Step::OriginalRelease(write) => {
                let lock = &mut self.locks[at];
                let stamp = lock.original_stamps[usize::from(write)].unwrap_or(now - 1);
                let released = lua::original_release(&mut lock.model, now - 1, write, stamp);
                let field = if write { "write" } else { "read" };
                let args = [field.to_owned(), stamp.to_string()];
                let s = self.scripts;
                let out = Outcome {
                    reply: Reply::Int(i64::from(released)),
                    published: None,
                    granted: None,
                    unlinked: 0,
                    new_grant: false,
                    recalled: false,
                    evicted: false,
                };
                (
                    Some(out),
                    Some(self.call_plain(&[at], &s.original_release, &args)?),
                )
            }
            Step::AcquireRead(t, upgradable, wait) => {
                let ttl = if wait { INTENT_TTL } else { 0 };
                let out = lua::acquire_read(
                    &mut self.locks[at].model,
                    &p,
                    now,
                    tok(t),
                    read_lease(t),
                    true,
                    upgradable,
                    ttl,
                );
                let args = [
                    self.tokens[t].clone(),
                    read_lease(t).to_string(),
                    "1".into(),
                    flag(upgradable),
                    ttl.to_string(),
                ];
                self.fast = self.goes_fast(at, "acquire_read", &args)?;
                let s = self.scripts;
                (Some(out), Some(self.call(at, &s.acquire_read, &args)?))
            }
            Step::AcquireWrite(t, wait) | Step::Upgrade(t, wait) => {
                let upgrade = matches!(step, Step::Upgrade(..));
                let ttl = if wait { INTENT_TTL } else { 0 };
                let out = lua::acquire_write(
                    &mut self.locks[at].model,
                    &p,
                    now,
                    tok(t),
                    WRITE_LEASE,
                    ttl,
                    upgrade,
                );
                let args = [
                    self.tokens[t].clone(),
                    WRITE_LEASE.to_string(),
                    ttl.to_string(),
                    flag(upgrade),
                ];
                self.fast = self.goes_fast(at, "acquire_write", &args)?;
                let s = self.scripts;
                (Some(out), Some(self.call(at, &s.acquire_write, &args)?))
            }
            Step::Release(t) => {
                let out = lua::release(&mut self.locks[at].model, &p, now, tok(t));
                let args = [self.tokens[t].clone()];
                self.fast = self.goes_fast(at, "release", &args)?;
                let s = self.scripts;
                (Some(out), Some(self.call(at, &s.release, &args)?))
            }
            Step::Renew(t, write) => {
                let lease = if write { WRITE_LEASE } else { read_lease(t) };
                let out = lua::renew(&mut self.locks[at].model, &p, now, tok(t), lease, write);
                let mode = if write { "write" } else { "read" };
                let args = [self.tokens[t].clone(), lease.to_string(), mode.into()];
                self.fast = self.goes_fast(at, "renew", &args)?;
                let s = self.scripts;
                (Some(out), Some(self.call(at, &s.renew, &args)?))
            }
            Step::Downgrade(t, from_write) => {
                let lease = read_lease(t);
                let model = &mut self.locks[at].model;
                let out = lua::downgrade(model, &p, now, tok(t), lease, from_write);
                let from = if from_write { "write" } else { "upgradable" };
                let args = [self.tokens[t].clone(), lease.to_string(), from.into()];
                let s = self.scripts;
                (Some(out), Some(self.call(at, &s.downgrade, &args)?))
            }
            Step::FencedWrite(t) => {
                let out = lua::fenced_write(&mut self.locks[at].model, &p, now, tok(t));
                let args = [self.tokens[t].clone()];
                let s = self.scripts;
                (Some(out), Some(self.call(at, &s.fenced_write, &args)?))
            }
            Step::ForceRelease => {
                let out = lua::force_release(&mut self.locks[at].model, &p, now);
                let s = self.scripts;
                (Some(out), Some(self.call(at, &s.force_release, &[])?))
            }
        };
        if let Some(out) = expected {
            let after = lua::live_view(&self.locks[at].model, &p, now);
            self.note(step, &before, &after, out);
            for what in reached_in_hash(step, now, &hash_before, &self.locks[at].model) {
                *self.reached.entry(what).or_default() += 1;
            }
        }
        let mut line = format!("t={:>5} {} {step:?}", now - self.start, lock_name(at));
        if let (Some(out), Some(real)) = (expected, real) {
            let _ = write!(line, " -> model {:?}, real {real:?}", out.reply);
            self.log.push(line);
            self.compare_reply(at, step, out, &real)?;
            self.compare_messages(&[(at, out)], pubsub)?;
            self.compare_hashes([at])
        } else {
            // Time passed: every lock (an expiry, or a stray write to a lock no step
            // since touched).
            self.log.push(line);
            self.compare_hashes(0..self.locks.len())
        }
    }

    /// Runs acquire_set.lua over `set`'s members and `engine::acquire_set` on their
    /// model hashes: the reply (each granted member's fence paired on its own lock),
    /// the messages of every operation the set ran on each member, in order, and
    /// every lock's fields must agree.
    fn run_set(&mut self, set: SetStep, pubsub: &mut redis::PubSub<'_>) -> Result<(), Stop> {
        let p = self.params;
        let now = self.now;
        let before: Vec<lua::View> = (self.locks.iter())
            .map(|lock| lua::live_view(&lock.model, &p, now))
            .collect();
        let members: Vec<lua::SetMember> = (set.members().iter())
            .map(|&(at, t, write)| lua::SetMember {
                hash: at,
                token: tok(t),
                write,
            })
            .collect();
        let mut hashes: Vec<Hash> = self.locks.iter().map(|l| l.model.clone()).collect();
        let out = lua::acquire_set(
            &mut hashes,
            &p,
            now,
            &members,
            set.writer_preferred,
            set.read_lease(),
            WRITE_LEASE,
        );
        for (lock, hash) in self.locks.iter_mut().zip(hashes) {
            lock.model = hash;
        }
        let mut args = vec![
            flag(set.writer_preferred),
            set.read_lease().to_string(),
            WRITE_LEASE.to_string(),
        ];
        for &(_, t, write) in set.members() {
            args.push(if write { "w" } else { "r" }.to_owned());
            args.push(self.tokens[t].clone());
        }
        let keys: Vec<usize> = set.members().iter().map(|&(at, _, _)| at).collect();
        let s = self.scripts;
        let args = [&self.common_args()[..], &args].concat();
        let real = self.call_plain(&keys, &s.acquire_set, &args)?;
        let runs: Vec<(char, lua::Reply)> = (out.runs.iter())
            .map(|&(at, run)| (lock_name(at), run.reply))
            .collect();
        self.log.push(format!(
            "t={:>5} AcquireSet({set:?}) -> model {:?} (runs {runs:?}), real {real:?}",
            now - self.start,
            out.reply
        ));
        self.note_set(set, &before, &out);
        self.compare_set_reply(set, &out.reply, &real)?;
        self.compare_messages(&out.runs, pubsub)?;
        self.compare_hashes(keys)
    }

    /// Counts the states worth reaching that a set reached.
    fn note_set(&mut self, set: SetStep, before: &[lua::View], out: &lua::SetOutcome) {
        let reply = &out.reply;
        let holds = |&(at, t, write): &(usize, usize, bool)| {
            let view: &lua::View = &before[at];
            if write {
                view.writer.is_some_and(|(w, _)| w == tok(t))
            } else {
                view.readers.contains_key(&tok(t))
            }
        };
        let what = match reply {
            lua::SetReply::Granted(_) if set.members().iter().all(holds) => {
                Some("a set resent while it holds, granted again")
            }
            lua::SetReply::Granted(_) if set.len > 1 => {
                Some("a set of several locks granted whole")
            }
            lua::SetReply::Refused(i, _) if *i > 1 => {
                Some("a set refused at a later member, the earlier ones released again")
            }
            _ => None,
        };
        // The releases back come after the refused member's run; only the messages
        // they publish on their channels show in which order they ran.
        let waking = |runs: &[(usize, Outcome)]| {
            runs.iter()
                .filter(|(_, run)| run.published.is_some() || run.granted.is_some())
                .count()
        };
        let released_back = match reply {
            lua::SetReply::Refused(i, _) => out.runs.get(*i..).unwrap_or_default(),
            lua::SetReply::Granted(_) => &[],
        };
        let two_waking = (waking(released_back) >= 2)
            .then_some("a set refused after releasing two members again, each waking others");
        for what in what.into_iter().chain(two_waking) {
            *self.reached.entry(what).or_default() += 1;
        }
        if matches!(reply, lua::SetReply::Granted(_)) {
            self.last_set = Some(set);
        }
    }

    /// Counts the states worth reaching that `step` reached.
    fn note(&mut self, step: Step, before: &lua::View, after: &lua::View, out: Outcome) {
        let fast = self.fast.then(|| fast_way(step, before));
        for what in reached(step, self.now, before, after, out)
            .into_iter()
            .chain(fast)
        {
            *self.reached.entry(what).or_default() += 1;
        }
    }
}

/// What a step that went its fast path did, as the states worth reaching name it.
fn fast_way(step: Step, before: &lua::View) -> &'static str {
    match step {
        Step::AcquireRead(_, true, _) => "an upgradable read acquired the fast way",
        Step::AcquireRead(..) if before.writer.is_some() || !before.queue.is_empty() => {
            "a reader put in line the fast way"
        }
        Step::AcquireRead(..) => "a read acquired the fast way",
        Step::AcquireWrite(..) if before.writer.is_some() || !before.readers.is_empty() => {
            "a writer put in line the fast way"
        }
        Step::AcquireWrite(..) | Step::Upgrade(..) => "a write acquired the fast way",
        Step::Release(t)
            if before.writer.is_some_and(|(w, _)| w == tok(t)) && before.queue.len() > 1 =>
        {
            "a writer handed the lock over the fast way, the line going on"
        }
        Step::Release(t)
            if before.writer.is_some_and(|(w, _)| w == tok(t)) && !before.queue.is_empty() =>
        {
            "a writer handed the lock over the fast way"
        }
        Step::Release(t) if before.writer.is_some_and(|(w, _)| w == tok(t)) => {
            "a writer released the fast way"
        }
        Step::Release(t) if before.upgradable.is_some_and(|(u, _)| u == tok(t)) => {
            "an upgradable reader released the fast way"
        }
        Step::Release(t) if before.members.contains(&tok(t)) => {
            "a batch reader released the fast way"
        }
        Step::Release(_) if !before.queue.is_empty() => {
            "a reader released the fast way, a writer in line"
        }
        Step::Release(_) => "a reader released the fast way",
        Step::Renew(_, true) => "a write renewed the fast way",
        _ => "a read renewed the fast way",
    }
}

/// The states worth reaching that `step` (at `now`, with outcome `out`, on a lock
/// that looked like `before` and then like `after`) reached.
fn reached(
    step: Step,
    now: Time,
    before: &lua::View,
    after: &lua::View,
    out: Outcome,
) -> Vec<&'static str> {
    let free_but_for_readers = before.writer.is_none()
        && before.original_writer_until.is_none()
        && before.queue.is_empty();
    let upgrader = before.upgradable.map(|(t, _)| t);
    let mut reached = Vec::new();
    if let Some(Wake::Handed(t, _)) = out.published
        && upgrader == Some(t)
    {
        reached.push(match step {
            Step::Release(_) => "an upgrade handed over by a reader's release",
            _ => "an upgrade handed over",
        });
    }
    if out.published == Some(Wake::Upgradable) {
        reached.push("a 'u' wake-up");
    }
    // A hand-over to a queued writer whose place ends before its first lease
    // would: the hold ends with the place.
    if let (Some(Wake::Handed(t, _)), Some((_, until))) = (out.published, after.writer)
        && upgrader != Some(t)
        && before
            .queue
            .iter()
            .any(|&(q, deadline)| q == t && deadline == until && deadline < now + INTENT_TTL)
    {
        reached.push("a hand-over cut to its place's end");
    }
    if matches!(step, Step::ForceRelease) && !before.readers.is_empty() {
        reached.push("a forced release of readers");
    }
    if matches!(out.reply, Reply::InLine(..)) {
        reached.push("a reader waits in line in a batch");
    }
    if out.granted.is_some() {
        reached.push(match step {
            Step::Release(_) => "a batch of readers granted by a release",
            _ => "a batch of readers granted",
        });
    }
    if let Some(t) = step_token(step)
        && before.members.contains(&t)
        && before.readers.contains_key(&t)
        && !after.members.contains(&t)
        && after.readers.contains_key(&t)
    {
        reached.push("a batch reader's share becomes its own hold");
    }
    if matches!(step, Step::Renew(_, false)) && out.reply == Reply::Int(2) {
        reached.push("a read renewal says a writer waits");
    }
    if out.recalled {
        reached.push(match step {
            Step::Upgrade(..) => "readers called back by a waiting upgrade",
            _ => "readers called back by a waiting writer",
        });
    }
    // A write hold renewed (or granted again to its holder) whose deadline was
    // later than the write lease from now: it keeps that deadline.
    let renews_write = matches!(
        step,
        Step::Renew(_, true) | Step::AcquireWrite(..) | Step::Upgrade(..)
    );
    if let (true, Some((holder, until)), Some((_, kept))) =
        (renews_write, before.writer, after.writer)
        && step_token(step) == Some(holder)
        && until > now + WRITE_LEASE
        && kept == until
    {
        reached.push("a write renewal that keeps a later deadline");
    }
    reached.extend(match (step, out.reply) {
        (Step::AcquireRead(t, true, _), Reply::Granted(_))
            if !before.readers.contains_key(&tok(t)) && !before.readers.is_empty() =>
        {
            Some("an upgradable read granted beside a reader")
        }
        (Step::AcquireRead(_, false, _), Reply::Refused(..) | Reply::InLine(..))
            if free_but_for_readers && before.upgrade.is_some() =>
        {
            Some("a reader refused behind a pending upgrade")
        }
        (Step::AcquireRead(_, true, _), Reply::Refused(..))
            if free_but_for_readers && before.upgrade.is_none() && upgrader.is_some() =>
        {
            Some("an upgradable read refused behind another")
        }
        (Step::Upgrade(..), Reply::Granted(_)) if out.new_grant => {
            Some("an upgrade granted at once")
        }
        (Step::Upgrade(_, true), Reply::Refused(..)) => Some("an upgrade waits"),
        (Step::Upgrade(_, false), Reply::Refused(..)) => Some("a try_upgrade refused"),
        (Step::Upgrade(..), Reply::Lost) => Some("an upgrade lost"),
        (Step::Downgrade(t, false), Reply::Downgraded(1, _)) if upgrader == Some(tok(t)) => {
            Some("an upgradable hold downgraded")
        }
        (Step::Downgrade(_, true), Reply::Downgraded(1, 0..)) => {
            Some("a write hold downgraded ahead of a queued writer")
        }
        _ => None,
    });
    reached
}

impl Run<'_> {
    /// The reply the script gave must be the model's (time-valued parts within
    /// `SLACK`; fencing tokens by their order).
    fn compare_reply(
        &mut self,
        at: usize,
        step: Step,
        out: Outcome,
        real: &Value,
    ) -> Result<(), Stop> {
        // A reader's refusal: {0, ms, 0, batch}, batch '' when it does not wait in line.
        let in_line: Option<(i64, i64, i64, String)> = redis::from_redis_value(real.clone()).ok();
        if let Some((0, real_hint, 0, batch)) = in_line {
            let ok = match out.reply {
                Reply::Refused(hint, 0) => batch.is_empty() && (hint - real_hint).abs() <= SLACK,
                Reply::InLine(hint, model) => {
                    (hint - real_hint).abs() <= SLACK && self.same_batch(at, model, &batch)?
                }
                _ => false,
            };
            return if ok {
                Ok(())
            } else {
                Err(self.fail(format!("reply: model {:?}, real {real:?}", out.reply)))
            };
        }
        let array: Option<Vec<i64>> = redis::from_redis_value(real.clone()).ok();
        let int: Option<i64> = redis::from_redis_value(real.clone()).ok();
        let ok = match (out.reply, array.as_deref(), int) {
            // force_release returns how many holds it ended; renew 0, 1, or 2 for a
            // read hold renewed while a writer waits.
            (Reply::Int(n), _, Some(real))
                if matches!(step, Step::ForceRelease | Step::Renew(..)) =>
            {
                n == real
            }
            (Reply::Granted(0), Some([1, 0]), _) => true,
            (Reply::Granted(fence), Some(&[1, real]), _) => self.same_fence(at, fence, real)?,
            // Readers: no fence.
            (Reply::Refused(hint, 0), Some(&[0, real]), _) => (hint - real).abs() <= SLACK,
            (Reply::Refused(hint, 0), Some(&[0, real, 0]), _) => (hint - real).abs() <= SLACK,
            // The lock's last fence (seen already, or the hand-over this script
            // made) or the server time in µs, whichever is larger.
            (Reply::Refused(hint, fence), Some(&[0, real, real_fence]), _) => {
                let handed = matches!(out.published, Some(Wake::Handed(_, f)) if f == fence);
                (hint - real).abs() <= SLACK
                    && self.same_refusal_fence(at, fence, real_fence, handed)?
            }
            (Reply::Lost, Some([-1, 0]), _) => true,
            // downgrade: done, and how long ago the first writer in line queued.
            (Reply::Downgraded(done, ago), Some(&[real_done, real_ago]), _) => {
                done == real_done
                    && if ago < 0 || real_ago < 0 {
                        ago == real_ago
                    } else {
                        (ago - real_ago).abs() <= 2 * SLACK
                    }
            }
            (Reply::Int(0), _, Some(0)) => true,
            (Reply::Int(n), _, Some(real)) if n <= 1 => n == real,
            // fenced_write returns the fence.
            (Reply::Int(fence), _, Some(real)) => self.same_fence(at, fence, real)?,
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(self.fail(format!("reply: model {:?}, real {real:?}", out.reply)))
        }
    }

    /// acquire_set.lua's reply must be the model's: `{1, fence...}` with each
    /// member's fence paired on its own lock (a reader's is 0), or `{0, i, ms}` with
    /// the same member and the hint within `SLACK`.
    fn compare_set_reply(
        &mut self,
        set: SetStep,
        reply: &lua::SetReply,
        real: &Value,
    ) -> Result<(), Stop> {
        let array: Vec<i64> = redis::from_redis_value(real.clone()).unwrap_or_default();
        let ok = match (reply, array.as_slice()) {
            (lua::SetReply::Granted(fences), [1, reals @ ..]) if reals.len() == fences.len() => {
                let mut all = true;
                for ((&(at, _, _), &model), &real) in set.members().iter().zip(fences).zip(reals) {
                    all &= if model == 0 {
                        real == 0
                    } else {
                        self.same_fence(at, model, real)?
                    };
                }
                all
            }
            (&lua::SetReply::Refused(i, hint), &[0, real_i, real_hint]) => {
                i64::try_from(i) == Ok(real_i) && (hint - real_hint).abs() <= SLACK
            }
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(self.fail(format!("set reply: model {reply:?}, real {real:?}")))
        }
    }

    /// Model fence `model` and real fence `real` of lock `at` name the same grant: a
    /// new pair must rise on both sides (tokens strictly increase), a known one must
    /// match.
    fn same_fence(&mut self, at: usize, model: i64, real: i64) -> Result<bool, Stop> {
        let lock = &self.locks[at];
        if let Some(&seen) = lock.fences.get(&model) {
            return Ok(seen == real);
        }
        let rises = lock.fences.last_key_value().is_none_or(|(&m, _)| model > m)
            && lock.fences.values().all(|&r| real > r)
            && real > lock.refusal_floor;
        if !rises {
            return Err(self.fail(format!(
                "fencing token of {} did not rise: model {model}, real {real}, seen {:?}",
                lock_name(at),
                lock.fences
            )));
        }
        self.locks[at].fences.insert(model, real);
        Ok(true)
    }

    /// A refusal's fence, `max(fence, server time in µs)`. Where the model's is the
    /// server time, the real one is too (its clock runs apart from the model's
    /// ticks): it must be at least every fence issued so far. Where the model's is a
    /// fence, the real one is that fence, or the real clock if it ran past it within
    /// the same model tick. `handed`: it is the fence of the hand-over this script
    /// made, paired like a grant's. Either way every later fence must exceed it.
    fn same_refusal_fence(
        &mut self,
        at: usize,
        model: i64,
        real: i64,
        handed: bool,
    ) -> Result<bool, Stop> {
        let model_now_us = self.now * self.params.us_per_unit;
        let fences = &self.locks[at].fences;
        let agrees = if handed {
            self.same_fence(at, model, real)?
        } else if model == model_now_us && !fences.contains_key(&model) {
            fences.values().all(|&r| real >= r)
        } else {
            match fences.get(&model) {
                Some(&seen) => real >= seen,
                None => self.same_fence(at, model, real)?,
            }
        };
        let lock = &mut self.locks[at];
        lock.refusal_floor = lock.refusal_floor.max(real);
        Ok(agrees)
    }

    /// The scripts published exactly what the model's operations did: `runs` are
    /// the operations in order, each on its lock (by number). One subscriber gets
    /// every channel's messages in the order they were published, so the runs'
    /// messages must come in the runs' order, each on its own lock's channel, and
    /// nothing else on any channel (a set's releases back, last member first, are
    /// told from first member first so). A marker we publish afterwards ends the
    /// script's messages.
    fn compare_messages(
        &mut self,
        runs: &[(usize, Outcome)],
        pubsub: &mut redis::PubSub<'_>,
    ) -> Result<(), Stop> {
        self.messages += 1;
        let marker = format!("#marker{}", self.messages);
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&self.locks[0].channel)
            .arg(&marker)
            .query(&mut self.conn)
            .unwrap();
        let mut got: Vec<(usize, String)> = Vec::new();
        loop {
            let msg = pubsub.get_message().unwrap();
            let payload: String = msg.get_payload().unwrap();
            let channel = msg.get_channel_name();
            let Some(on) = self.locks.iter().position(|l| l.channel == channel) else {
                return Err(self.fail(format!("a message on {channel}: {payload}")));
            };
            if payload == marker {
                break;
            }
            got.push((on, payload));
        }
        let mut got = got.into_iter();
        for &(at, out) in runs {
            let count = usize::from(out.evicted)
                + usize::from(out.granted.is_some())
                + usize::from(out.published.is_some())
                + usize::from(out.recalled);
            let mut mine = Vec::new();
            for (on, message) in got.by_ref().take(count) {
                if on != at {
                    return Err(self.fail(format!(
                        "wake-ups: the model's next on {}, real {message} on {}",
                        lock_name(at),
                        lock_name(on)
                    )));
                }
                mine.push(message);
            }
            self.compare_wakeups(at, out, &mut mine.into_iter())?;
        }
        let rest: Vec<String> = got
            .map(|(on, m)| format!("{} {m}", lock_name(on)))
            .collect();
        if rest.is_empty() {
            Ok(())
        } else {
            Err(self.fail(format!("wake-ups: the model no more, real {rest:?}")))
        }
    }

    /// The messages one run published on lock `at`, `got`, are the model's, in the
    /// scripts' order: a forced release's `x`, a batch's grant (a batch seen for the
    /// first time pairs here), the wake-up, the call-back `w`.
    fn compare_wakeups(
        &mut self,
        at: usize,
        out: Outcome,
        got: &mut impl Iterator<Item = String>,
    ) -> Result<(), Stop> {
        let name = lock_name(at);
        if out.evicted {
            let next = got.next();
            if next.as_deref() != Some("x") {
                return Err(self.fail(format!("eviction on {name}: model x, real {next:?}")));
            }
        }
        if let Some(batch) = out.granted {
            let Some(first) = got.next() else {
                return Err(self.fail(format!(
                    "wake-ups on {name}: model grants {batch}, real none"
                )));
            };
            if !self.same_batch(at, batch, &first)? {
                return Err(self.fail(format!(
                    "wake-ups on {name}: model grants {batch}, real {first}"
                )));
            }
        }
        if let Some(wake) = out.published {
            let Some(message) = got.next() else {
                return Err(self.fail(format!("wake-ups on {name}: model {wake:?}, real none")));
            };
            let ok = match wake {
                // A hand-over names a new grant: its fence pairs like an acquire's.
                Wake::Handed(t, fence) => match message.split_once(':') {
                    Some((named, real)) if named == self.tokens[t.client() as usize] => {
                        match real.parse() {
                            Ok(real) => self.same_fence(at, fence, real)?,
                            Err(_) => false,
                        }
                    }
                    _ => false,
                },
                Wake::All => message == "*",
                Wake::Readers => message == "r",
                Wake::Upgradable => message == "u",
                Wake::Batch(b) => self.locks[at].batches.get(&b) == Some(&message),
            };
            if !ok {
                return Err(self.fail(format!(
                    "wake-ups on {name}: model {wake:?}, real {message}"
                )));
            }
        }
        if out.recalled {
            let next = got.next();
            if next.as_deref() != Some("w") {
                return Err(self.fail(format!("call-back on {name}: model w, real {next:?}")));
            }
        }
        Ok(())
    }

    /// Model batch `model` and real batch `real` of lock `at` are the same: a new pair is
    /// recorded (each side's name once), a known one must match.
    fn same_batch(&mut self, at: usize, model: Tok, real: &str) -> Result<bool, Stop> {
        let batches = &mut self.locks[at].batches;
        if let Some(known) = batches.get(&model) {
            return Ok(known == real);
        }
        if !real.starts_with("r#") || batches.values().any(|r| r == real) {
            return Ok(false);
        }
        batches.insert(model, real.to_owned());
        Ok(true)
    }

    /// The real hashes of `locks` match their models' ([`compare_hash`](Self::compare_hash)).
    fn compare_hashes(&mut self, locks: impl IntoIterator<Item = usize>) -> Result<(), Stop> {
        locks.into_iter().try_for_each(|at| self.compare_hash(at))
    }

    /// Every field of lock `at`'s real hash, and its TTL, match the model's.
    fn compare_hash(&mut self, at: usize) -> Result<(), Stop> {
        let now = self.now;
        self.locks[at].model.expire_if_due(now);
        let key = &self.locks[at].key;
        let (fields, pttl): (Vec<(String, String)>, i64) = redis::pipe()
            .cmd("HGETALL")
            .arg(key)
            .cmd("PTTL")
            .arg(key)
            .query(&mut self.conn)
            .unwrap();
        let late = wall_ms() - self.now;
        if late > SLACK - 5 {
            return Err(Stop::Late(late));
        }
        let mut real = BTreeMap::new();
        for (name, value) in &fields {
            let Some(field) = self.parse_field(at, name) else {
                return Err(self.fail(format!("unknown field {name}={value} on {}", lock_name(at))));
            };
            let Some(value) = self.parse_value(at, field, value) else {
                return Err(self.fail(format!("bad value {name}={value} on {}", lock_name(at))));
            };
            real.insert(field, value);
        }
        let model = self.locks[at].model.fields.clone();
        let name = lock_name(at);
        let keys = |m: &BTreeMap<Field, Val>| m.keys().copied().collect::<Vec<_>>();
        if keys(&model) != keys(&real) {
            return Err(self.fail(format!(
                "fields of {name}: model {:?}\n  real {fields:?}",
                keys(&model)
            )));
        }
        for (field, want) in &model {
            let got = real[field];
            let ok = match (field, *want, got) {
                // A fence only the hash shows pairs here: a set's member granted
                // and released again in the same call (neither the reply nor a
                // message names it).
                (Field::Fence, Val::Int(m), Val::Int(r)) => self.same_fence(at, m, r)?,
                // Batch numbers follow each side's clock in µs: compared by the names.
                (Field::Rseq, Val::Int(_), Val::Int(_)) => true,
                (Field::Rn(_), Val::Int(m), Val::Int(r)) => m == r,
                (Field::Readers | Field::Shares, Val::Int(m), Val::Int(r)) => m == r,
                (_, Val::Int(m), Val::Int(r)) => (m - r).abs() <= SLACK,
                (_, Val::Tok(m), Val::Tok(r)) => m == r,
                (_, Val::Place(md, ml), Val::Place(rd, rl)) => ml == rl && (md - rd).abs() <= SLACK,
                (_, Val::Member(mb, md), Val::Member(rb, rd)) => {
                    mb == rb && (md - rd).abs() <= SLACK
                }
                _ => false,
            };
            if !ok {
                return Err(self.fail(format!(
                    "field {field:?} of {name}: model {want:?}, real {got:?}"
                )));
            }
        }
        let model = &self.locks[at].model;
        let want_ttl = match (model.fields.is_empty(), model.expires) {
            (true, _) => -2,
            (false, None) => -1,
            (false, Some(at)) => at - self.now,
        };
        let ttl_ok = if want_ttl < 0 {
            pttl == want_ttl
        } else {
            (pttl - want_ttl).abs() <= 2 * SLACK
        };
        if !ttl_ok {
            return Err(self.fail(format!("PTTL of {name}: model {want_ttl}, real {pttl}")));
        }
        // The model goes on from the real TTL: a script refreshes it only below a
        // threshold, and the real one runs a few ms after the model's `now`, which
        // shifts its TTL and its threshold alike, but not the model's TTL.
        if want_ttl >= 0 {
            self.locks[at].model.expires = Some(self.now + pttl);
        }
        Ok(())
    }

    /// A field's name as lock `at`'s hash writes it.
    fn parse_field(&self, at: usize, name: &str) -> Option<Field> {
        Some(match name {
            "w:owner" => Field::WOwner,
            "w:until" => Field::WUntil,
            "readers_until" => Field::ReadersUntil,
            "readers_gone" => Field::ReadersGone,
            "q:head" => Field::QHead,
            "q:tail" => Field::QTail,
            "fence" => Field::Fence,
            "write" => Field::Write,
            "wstamp" => Field::Wstamp,
            "read" => Field::Read,
            "rstamp" => Field::Rstamp,
            "orig:read" => Field::OrigRead,
            "readers" => Field::Readers,
            "queue_until" => Field::QueueUntil,
            "u:owner" => Field::UOwner,
            "u:until" => Field::UUntil,
            "u:upgrade" => Field::UUpgrade,
            "u:wanted" => Field::UWanted,
            "u:others" => Field::UOthers,
            "rseq" => Field::Rseq,
            "shares" => Field::Shares,
            "layout" => Field::Layout,
            _ => {
                if let Some(t) = name.strip_prefix("rw:") {
                    Field::Rw(self.token_of(at, t)?)
                } else if let Some(b) = name.strip_prefix("rn:") {
                    Field::Rn(self.token_of(at, b)?)
                } else if let Some(b) = name.strip_prefix("rg:") {
                    Field::Rg(self.token_of(at, b)?)
                } else if let Some(t) = name.strip_prefix("r:") {
                    Field::R(self.token_of(at, t)?)
                } else if let Some(t) = name.strip_prefix("wn:") {
                    Field::Wn(self.token_of(at, t)?)
                } else if let Some(t) = name.strip_prefix("wq:") {
                    Field::Wq(self.token_of(at, t)?)
                } else {
                    Field::Wait(self.token_of(at, name.strip_prefix("wait:")?)?)
                }
            }
        })
    }

    /// A field's value as lock `at`'s hash writes it.
    fn parse_value(&self, at: usize, field: Field, value: &str) -> Option<Val> {
        Some(match field {
            Field::WOwner | Field::QHead | Field::QTail | Field::Wn(_) | Field::UOwner => {
                Val::Tok(self.token_of(at, value)?)
            }
            Field::Rw(_) => {
                let (batch, deadline) = value.split_once(':')?;
                Val::Member(self.token_of(at, batch)?, deadline.parse().ok()?)
            }
            // Its text does not matter, its length does.
            Field::Layout => (value.len() > 64).then_some(Val::Int(0))?,
            Field::Wait(_) | Field::UUpgrade => {
                let (deadline, first_lease) = value.split_once(':')?;
                Val::Place(deadline.parse().ok()?, first_lease.parse().ok()?)
            }
            _ => Val::Int(value.parse().ok()?),
        })
    }
}

/// `'1'` or `'0'`, as the scripts take flags.
fn flag(on: bool) -> String {
    if on { "1" } else { "0" }.to_owned()
}

/// What one seed's run did: script calls, and how often it reached each state
/// worth reaching.
struct Ran {
    calls: usize,
    reached: BTreeMap<&'static str, usize>,
}

/// Runs one seed on fresh keys; `Err(Stop::Late)` when the machine was too slow.
fn run_seed(url: &str, scripts: &Scripts, seed: u64) -> Result<Ran, Stop> {
    let client = redis::Client::open(url).unwrap();
    // One hash tag, so one slot: a set may take any of the locks.
    let tag = common::unique_name("conformance");
    let locks: Vec<Lock> = (0..LOCKS)
        .map(|at| {
            let key = format!("rwlock:{{{tag}}}{}", lock_name(at));
            Lock {
                channel: format!("{key}:released"),
                key,
                model: Hash::default(),
                original_stamps: [None; 2],
                fences: BTreeMap::new(),
                refusal_floor: 0,
                batches: BTreeMap::new(),
            }
        })
        .collect();
    let mut sub = client.get_connection().unwrap();
    let mut pubsub = sub.as_pubsub();
    for lock in &locks {
        pubsub.subscribe(&lock.channel).unwrap();
    }
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let tokens = (0..TOKENS)
        .map(|_| format!("{:032x}", rng.random::<u128>()))
        .collect();
    let start = (wall_ms() / TICK + 2) * TICK;
    let mut run = Run {
        seed,
        locks,
        conn: client.get_connection().unwrap(),
        scripts,
        tokens,
        params: Params {
            idle: IDLE,
            us_per_unit: 1000,
            original_read: ORIGINAL_READ,
            original_write: ORIGINAL_WRITE,
            forced_fence: 3000,
        },
        now: start,
        start,
        log: Vec::new(),
        messages: 0,
        reached: BTreeMap::new(),
        fast: false,
        last_set: None,
    };
    run.run_step(0, Step::Wait(0), &mut pubsub)?;
    let mut calls = 0;
    for step in FIRST_STEPS {
        calls += usize::from(!matches!(step, Step::Wait(_)));
        run.run_step(0, step, &mut pubsub)?;
    }
    // The steps in between: sets, and the other locks' steps.
    let mut between = StdRng::seed_from_u64(seed.wrapping_add(1 << 32));
    for _ in 0..STEPS {
        let view = lua::live_view(&run.locks[0].model, &run.params, run.now);
        let step = random_step(&mut rng, &view);
        if !matches!(step, Step::Wait(_)) {
            calls += 1;
        }
        run.run_step(0, step, &mut pubsub)?;
        let draw = between.random_range(0..100);
        let (at, step) = if draw < SET_STEPS {
            let set = random_set(&mut between, run.last_set);
            (0, Step::AcquireSet(set))
        } else if draw < SET_STEPS + OTHER_STEPS {
            let at = between.random_range(1..LOCKS);
            let view = lua::live_view(&run.locks[at].model, &run.params, run.now);
            (at, random_step(&mut between, &view))
        } else {
            continue;
        };
        if !matches!(step, Step::Wait(_)) {
            calls += 1;
            run.run_step(at, step, &mut pubsub)?;
        }
    }
    Ok(Ran {
        calls,
        reached: run.reached,
    })
}

/// The steps every seed starts with (on the first lock), before its random ones, for what random steps
/// with few tokens rarely reach: a batch of two readers granted by a writer's
/// release while another writer waits behind them, whose first reader's release
/// goes the fast way (a share of a batch, the batch not the last of the readers);
/// then a writer's release handing the lock to a writer with another behind it; a
/// reader whose batch's place lapses while a writer holds, coming back; and two
/// readers in a batch with a writer queued behind it, one of which stops coming back
/// just before a writer's release grants the batch: once its own place lapses, the
/// queued writer's next attempt ends its share.
const FIRST_STEPS: [Step; 36] = [
    Step::AcquireWrite(0, true),
    Step::AcquireRead(1, false, true),
    Step::AcquireRead(2, false, true),
    Step::AcquireWrite(3, true),
    Step::Release(0),
    Step::Release(1),
    Step::Release(2),
    Step::Release(3),
    Step::Wait(1),
    Step::AcquireWrite(0, true),
    Step::AcquireWrite(1, true),
    Step::AcquireWrite(2, true),
    Step::Release(0),
    Step::Release(1),
    Step::Release(2),
    // A reader's batch lapses behind a writer; it comes back while the writer holds.
    Step::AcquireWrite(0, true),
    Step::AcquireRead(1, false, true),
    Step::Wait(3),
    Step::AcquireRead(1, false, true),
    Step::Release(0),
    Step::Release(1),
    // Reader 1 stops coming back; reader 2 keeps the batch's place alive.
    Step::AcquireWrite(0, true),
    Step::AcquireRead(1, false, true),
    Step::AcquireRead(2, false, true),
    Step::AcquireWrite(3, true),
    Step::Wait(1),
    Step::AcquireRead(2, false, true),
    Step::AcquireWrite(3, true),
    Step::Wait(1),
    Step::Release(0),
    Step::Release(2),
    Step::Wait(1),
    Step::AcquireWrite(3, true),
    Step::Release(3),
    Step::Release(1),
    Step::Wait(1),
];

/// The states worth reaching that only the hash shows (`before` and `after` the
/// step at `now`): a reader coming back to a batch whose place lapsed while a writer
/// held, and a writer's attempt that ended the shares of readers whose own places in
/// a granted batch had lapsed.
fn reached_in_hash(step: Step, now: Time, before: &Hash, after: &Hash) -> Vec<&'static str> {
    let mut reached = Vec::new();
    let member = |h: &Hash, t: Tok| match h.fields.get(&Field::Rw(t)) {
        Some(&Val::Member(batch, own)) => Some((batch, own)),
        _ => None,
    };
    if let Step::AcquireRead(t, false, true) = step
        && before.fields.contains_key(&Field::WOwner)
        && let Some((batch, _)) = member(before, tok(t))
        && matches!(before.fields.get(&Field::Wait(batch)), Some(&Val::Place(d, _)) if d <= now)
    {
        reached.push("a reader back in line after its batch's place lapsed");
    }
    let lapsed_shares = |h: &Hash| {
        (0..TOKENS)
            .filter(|&t| {
                member(h, tok(t)).is_some_and(|(batch, own)| {
                    own <= now && h.fields.contains_key(&Field::Rg(batch))
                })
            })
            .count()
    };
    if matches!(step, Step::AcquireWrite(..) | Step::Upgrade(..))
        && lapsed_shares(after) < lapsed_shares(before)
    {
        reached.push("a share whose reader's place lapsed ended by a writer's attempt");
    }
    reached
}

/// The token a step acts for, if any.
fn step_token(step: Step) -> Option<Tok> {
    match step {
        Step::AcquireRead(t, _, _)
        | Step::AcquireWrite(t, _)
        | Step::Upgrade(t, _)
        | Step::Release(t)
        | Step::Renew(t, _)
        | Step::Downgrade(t, _)
        | Step::FencedWrite(t) => Some(tok(t)),
        _ => None,
    }
}

/// The states the seeds together must reach, or the test proves less than it says.
const MUST_REACH: [&str; 40] = [
    "readers called back by a waiting writer",
    "a read renewal says a writer waits",
    "readers called back by a waiting upgrade",
    "a reader back in line after its batch's place lapsed",
    "a share whose reader's place lapsed ended by a writer's attempt",
    "an upgrade handed over by a reader's release",
    "a 'u' wake-up",
    "an upgradable read granted beside a reader",
    "a reader refused behind a pending upgrade",
    "an upgradable read refused behind another",
    "an upgrade granted at once",
    "an upgrade waits",
    "a try_upgrade refused",
    "an upgrade lost",
    "an upgradable hold downgraded",
    "a write hold downgraded ahead of a queued writer",
    "a hand-over cut to its place's end",
    "a forced release of readers",
    "a write renewal that keeps a later deadline",
    "a reader waits in line in a batch",
    "a batch of readers granted by a release",
    "a batch reader's share becomes its own hold",
    "a read acquired the fast way",
    "a write acquired the fast way",
    "a writer put in line the fast way",
    "a writer released the fast way",
    "a writer handed the lock over the fast way",
    "a writer handed the lock over the fast way, the line going on",
    "a reader released the fast way",
    "a reader released the fast way, a writer in line",
    "a batch reader released the fast way",
    "a reader put in line the fast way",
    "an upgradable read acquired the fast way",
    "an upgradable reader released the fast way",
    "a write renewed the fast way",
    "a read renewed the fast way",
    "a set of several locks granted whole",
    "a set refused at a later member, the earlier ones released again",
    "a set resent while it holds, granted again",
    "a set refused after releasing two members again, each waking others",
];

/// The spans are far enough from multiples of a tick that a script running up to
/// `SLACK` late decides every expiry as the model does.
#[test]
fn spans_keep_expiry_decisions_exact() {
    for span in [
        READ_LEASE,
        LONG_READ_LEASE,
        WRITE_LEASE,
        INTENT_TTL,
        IDLE,
        READ_LEASE + IDLE,
        LONG_READ_LEASE + IDLE,
        WRITE_LEASE + IDLE,
        INTENT_TTL + IDLE,
        ORIGINAL_READ - 1,
        ORIGINAL_READ - 1 + IDLE,
        ORIGINAL_WRITE - 1,
        ORIGINAL_WRITE - 1 + IDLE,
        ORIGINAL_KEY_TTL,
        ORIGINAL_KEY_TTL - 1,
    ] {
        let offset = span.rem_euclid(TICK);
        assert!(
            offset > SLACK && offset < TICK - SLACK,
            "span {span} ms is {offset} ms past a tick"
        );
    }
}

#[test]
fn real_scripts_agree_with_the_model() {
    let url = common::shared_standalone().url();
    let scripts = Scripts::load();
    let results: Vec<(u64, Result<Ran, String>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = SEEDS
            .iter()
            .map(|&seed| {
                let (url, scripts) = (&url, &scripts);
                scope.spawn(move || {
                    let mut late = Vec::new();
                    for _ in 0..ATTEMPTS {
                        match run_seed(url, scripts, seed) {
                            Ok(ran) => return (seed, Ok(ran)),
                            Err(Stop::Mismatch(msg)) => return (seed, Err(msg)),
                            Err(Stop::Late(ms)) => late.push(ms),
                        }
                    }
                    (
                        seed,
                        Err(format!(
                            "seed {seed}: the machine was too slow to run scripts within {SLACK} ms of their tick ({late:?} ms late)"
                        )),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut failures = Vec::new();
    let mut reached: BTreeMap<&str, usize> = BTreeMap::new();
    for (seed, result) in results {
        match result {
            Ok(ran) => {
                println!(
                    "seed {seed}: {STEPS} steps, {} script calls agree",
                    ran.calls
                );
                for (what, n) in ran.reached {
                    *reached.entry(what).or_default() += n;
                }
            }
            Err(msg) => failures.push(msg),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    println!("reached: {reached:?}");
    let missed: Vec<&str> = MUST_REACH
        .into_iter()
        .filter(|what| !reached.contains_key(what))
        .collect();
    assert!(
        missed.is_empty(),
        "the random steps never reached {missed:?} (reached: {reached:?})"
    );
}

//! Differential fuzzing of the scripts' fast paths (lua/fast_path.lua) against their
//! full paths, on a real standalone server.
//!
//! Every step runs on two copies of one lock: the "real" copy gets the scripts as
//! `src/backend/redis/scripts/mod.rs` assembles them, the "full" copy the same scripts with
//! `layout.fast_path` switched off (`NO_FAST_PATH`, a function returning nil, defined
//! between the shared parts and the operation), so every operation goes the full way
//! there. After each step the two copies must agree exactly: the replies, every field
//! (`HGETALL`), the key's expiry, the messages each published on its channel
//! (`<key>:released`) and what a fenced write wrote. The real copy must also keep what
//! the fast paths take for granted (the header of `lua/fast_path.lua`) and what the
//! line and the reader count need: `check_invariants`. Both copies' scripts note when
//! their fast path decided (`NOTE_FAST`, a wrapper that writes a key beside the lock):
//! the full copy's never may, and a CI run must see each kind of fast decision
//! (`MUST_DECIDE`).
//!
//! Time: both copies run on a clock the test sets. The script texts run here start
//! with `CLOCK`, a Lua prelude that shadows `redis` with a table whose `call` answers
//! `TIME` from the key `<key>:clock`, and keeps the lock key's expiry on that clock
//! too: `PEXPIRE` (with `NX`) and `PTTL` act on `<key>:expires` (an absolute deadline
//! in ms), and a `HDEL` or `DEL` that empties the hash drops it, as Redis drops a
//! deleted key's TTL. The keys get no real TTL, so nothing expires by the wall clock
//! while the test runs (a `PEXPIRE` relative to the wall clock would let the two copies
//! expire a few ms apart, and long after the test's clock says); the test deletes a
//! copy, as Redis would, once the clock has passed its deadline. So time jumps are
//! exact, both copies see identical instants, and expiries compare exactly.
//! `scripts_run_on_the_test_clock` checks the substitution. None of this is in `lua/`:
//! it exists only in this file.
//!
//! Steps: few tokens (so they collide: releases and renewals by tokens that no longer
//! hold, resent acquires), each keeping one role for the seed, as a token is one
//! acquisition (`Role`: reader, recursive reader, upgradable reader, writer), with its
//! own leases and intent lifetime (0: the `try_` forms); every operation (read acquire,
//! plain or upgradable, under writer preference or not, waiting in line or not; write
//! acquire and upgrade, waiting or not; release, renew, downgrade from write or from
//! upgradable, fenced write, force release), the original design's acquire and
//! release (tests/original/, the original client's clock a little off ours), the last
//! command again (a resend), and time jumps of every size: microseconds, a few ms, to
//! an instant the hash names and 1 ms either side of it, past leases and places, past
//! the key's expiry.
//!
//! A failure names the seed and the step, prints the steps so far and the real copy
//! before and after the step, then the same failure in fewer steps where leaving steps
//! out keeps it (`shrink`, for up to `SHRINK_SECONDS`). Run it again, or longer (every
//! variable optional):
//!
//! ```sh
//! FUZZ_SEED=<seed> FUZZ_STEPS=<n> cargo test --test differential_fuzz   # replay a failure
//! FUZZ_SEEDS=200 FUZZ_STEPS=5000 cargo test --test differential_fuzz -- --nocapture
//! ```
//!
//! `FUZZ_SEED` is the first seed (alone, it runs that one seed), `FUZZ_SEEDS` how many
//! seeds from there, `FUZZ_STEPS` the steps per seed, `FUZZ_LOG` how many of the last
//! steps a failure prints, `FUZZ_SHRINK_SECONDS` how long it shrinks (0: not at all).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redis::{Script, Value};

/// Seeds and steps per seed in CI: about 20 s of test time in a debug build on 2
/// cores (50 s while other builds load them).
const SEEDS: u64 = 24;
const STEPS: usize = 1_000;
/// Threads running seeds side by side.
const THREADS: usize = 2;
/// Tokens in play: few, so they collide.
const TOKENS: usize = 5;
/// Leases (ms) a token may be given for the whole seed, and intent lifetimes.
const LEASES: [i64; 6] = [40, 150, 400, 1_000, 2_500, 3_300];
const INTENTS: [i64; 5] = [30, 300, 1_500, 2_200, 3_300];
/// How long a failure's steps are shrunk (left out while it still fails the same
/// way) before it is reported, in seconds.
const SHRINK_SECONDS: u64 = 30;

/// The Lua prelude of every script run here: the server's clock and the lock key's
/// expiry on the test's clock (see the module's header). `redis` becomes a local table
/// that passes every other call to the real one.
const CLOCK: &str = r"
local fuzz_redis = redis
local redis = setmetatable({}, { __index = fuzz_redis })
local function fuzz_now_us()
  return tonumber(fuzz_redis.call('GET', KEYS[1] .. ':clock'))
end
local function fuzz_now_ms()
  return math.floor(fuzz_now_us() / 1000)
end
local FUZZ_NOT_EMULATED = { EXPIRE = true, PEXPIREAT = true, EXPIREAT = true, PERSIST = true,
  TTL = true, EXPIRETIME = true, PEXPIRETIME = true, GETEX = true }
function redis.pcall()
  error('differential_fuzz: redis.pcall is not emulated')
end
function redis.call(command, ...)
  local name, args = string.upper(command), { ... }
  if name == 'TIME' then
    local us = fuzz_now_us()
    return { string.format('%d', math.floor(us / 1000000)), string.format('%d', us % 1000000) }
  end
  if FUZZ_NOT_EMULATED[name] then
    error('differential_fuzz: ' .. name .. ' is not emulated')
  end
  if name == 'PTTL' or name == 'PEXPIRE' then
    if args[1] ~= KEYS[1] then
      error('differential_fuzz: ' .. name .. ' of another key than the lock')
    end
    local record = KEYS[1] .. ':expires'
    if fuzz_redis.call('EXISTS', KEYS[1]) == 0 then
      if name == 'PTTL' then
        return -2
      end
      return 0
    end
    local at = tonumber(fuzz_redis.call('GET', record))
    if name == 'PTTL' then
      if not at then
        return -1
      end
      return math.max(at - fuzz_now_ms(), 0)
    end
    local ms, flag = tonumber(args[2]), args[3]
    if flag and string.upper(flag) ~= 'NX' or args[4] then
      error('differential_fuzz: PEXPIRE with ' .. tostring(flag) .. ' is not emulated')
    end
    if flag and at then
      return 0
    end
    if ms <= 0 then
      fuzz_redis.call('DEL', KEYS[1], record)
    else
      fuzz_redis.call('SET', record, string.format('%d', fuzz_now_ms() + ms))
    end
    return 1
  end
  local reply = fuzz_redis.call(command, ...)
  if (name == 'HDEL' or name == 'DEL') and args[1] == KEYS[1]
      and fuzz_redis.call('EXISTS', KEYS[1]) == 0 then
    fuzz_redis.call('DEL', KEYS[1] .. ':expires')
  end
  return reply
end
";

/// Put before the operation of both copies' scripts (after `NO_FAST_PATH` on the full
/// copy): notes in `<key>:went` that the fast path decided, so the test counts what
/// the fast paths decided, and knows that the full copy's never do.
const NOTE_FAST: &str = "
local fuzz_fast_path = layout.fast_path
function layout.fast_path(operation, argv)
  local reply, now, now_us = fuzz_fast_path(operation, argv)
  if reply then
    fuzz_redis.call('SET', KEYS[1] .. ':went', operation)
  end
  return reply, now, now_us
end
";

/// Put before the operation of the full copy's scripts: no fast path.
const NO_FAST_PATH: &str = "
function layout.fast_path()
  return nil
end
";

/// One operation's scripts: for the real copy and for the full copy.
struct Pair {
    real: Script,
    full: Script,
}

impl Pair {
    fn new(operation: &str) -> Pair {
        Pair {
            real: Script::new(&clocked(&common::hash_script(&format!(
                "{NOTE_FAST}\n{operation}"
            )))),
            full: Script::new(&clocked(&common::hash_script(&format!(
                "{NO_FAST_PATH}\n{NOTE_FAST}\n{operation}"
            )))),
        }
    }
}

/// `source` on the test's clock.
fn clocked(source: &str) -> String {
    format!("{CLOCK}\n{source}")
}

struct Scripts {
    acquire_read: Pair,
    acquire_write: Pair,
    release: Pair,
    renew: Pair,
    downgrade: Pair,
    fenced_write: Pair,
    force_release: Pair,
    original_read: Script,
    original_write: Script,
    original_release: Script,
}

impl Scripts {
    fn load() -> Scripts {
        let original = |source: &str| Script::new(&clocked(source));
        Scripts {
            acquire_read: Pair::new(include_str!("../lua/acquire_read.lua")),
            acquire_write: Pair::new(include_str!("../lua/acquire_write.lua")),
            release: Pair::new(include_str!("../lua/release.lua")),
            renew: Pair::new(include_str!("../lua/renew.lua")),
            downgrade: Pair::new(include_str!("../lua/downgrade.lua")),
            fenced_write: Pair::new(include_str!("../lua/fenced_write.lua")),
            force_release: Pair::new(include_str!("../lua/force_release.lua")),
            original_read: original(include_str!("original/hash_acquire_read.lua")),
            original_write: original(include_str!("original/hash_acquire_write.lua")),
            original_release: original(include_str!("original/hash_release.lua")),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Step {
    /// A read acquire: upgradable or plain, under writer preference or not
    /// (`read_recursive`), with an intent lifetime (0: never waits in line).
    AcquireRead {
        t: usize,
        lease: i64,
        upgradable: bool,
        preferred: bool,
        intent: i64,
    },
    /// A write acquire (intent 0: `try_write`).
    AcquireWrite {
        t: usize,
        lease: i64,
        intent: i64,
    },
    /// An upgrade of the token's upgradable hold (intent 0: `try_upgrade`).
    Upgrade {
        t: usize,
        lease: i64,
        intent: i64,
    },
    Release {
        t: usize,
    },
    Renew {
        t: usize,
        lease: i64,
        write: bool,
    },
    /// Downgrades the write hold (`from_write`) or the upgradable one.
    Downgrade {
        t: usize,
        lease: i64,
        from_write: bool,
    },
    FencedWrite {
        t: usize,
    },
    ForceRelease,
    /// An original-design client acquires, its clock `skew` ms behind ours.
    OriginalAcquire {
        write: bool,
        skew: i64,
    },
    /// It releases with the stamp of its last grant in that mode.
    OriginalRelease {
        write: bool,
    },
    /// The clock moves on by this many µs.
    Wait {
        us: i64,
    },
}

impl Step {
    fn token(self) -> Option<usize> {
        match self {
            Step::AcquireRead { t, .. }
            | Step::AcquireWrite { t, .. }
            | Step::Upgrade { t, .. }
            | Step::Release { t }
            | Step::Renew { t, .. }
            | Step::Downgrade { t, .. }
            | Step::FencedWrite { t } => Some(t),
            _ => None,
        }
    }
}

/// What a token is for. A token is one acquisition, so it keeps one kind: a reader
/// that waited in line and then read recursively, or a writer that then read with
/// the same token, would be counted twice, which no client can do.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Role {
    /// `read()` (writer preference: it waits in line) or `try_read()`.
    Reader,
    /// `read_recursive()`: no writer preference.
    RecursiveReader,
    /// `upgradable_read()`, then `upgrade()`, downgrades, fenced writes.
    Upgradable,
    /// `write()` or `try_write()`, then a downgrade, fenced writes.
    Writer,
}

/// A seed's clients: each token's role, leases and intent lifetime (0: the `try_`
/// form), and the original clients' timeouts.
struct Cast {
    tokens: Vec<String>,
    roles: Vec<Role>,
    read_lease: Vec<i64>,
    write_lease: Vec<i64>,
    intent: Vec<i64>,
    original_read: i64,
    original_write: i64,
    original_key_ttl: i64,
}

impl Cast {
    fn new(rng: &mut StdRng) -> Cast {
        let tokens = (0..TOKENS)
            .map(|_| format!("{:032x}", rng.random::<u128>()))
            .collect();
        let lease = |rng: &mut StdRng| LEASES[rng.random_range(0..LEASES.len())];
        // A writer and a reader in every seed; the others anything.
        let roles = (0..TOKENS)
            .map(|i| match (i, rng.random_range(0..100)) {
                (0, _) | (2.., 0..30) => Role::Writer,
                (1, _) | (2.., 30..55) => Role::Reader,
                (2.., 55..70) => Role::RecursiveReader,
                _ => Role::Upgradable,
            })
            .collect();
        Cast {
            tokens,
            roles,
            read_lease: (0..TOKENS).map(|_| lease(rng)).collect(),
            write_lease: (0..TOKENS).map(|_| lease(rng)).collect(),
            intent: (0..TOKENS)
                .map(|_| {
                    if rng.random_bool(0.2) {
                        0
                    } else {
                        INTENTS[rng.random_range(0..INTENTS.len())]
                    }
                })
                .collect(),
            original_read: [100, 1_000, 3_000][rng.random_range(0..3)],
            original_write: [300, 1_000, 3_000][rng.random_range(0..3)],
            original_key_ttl: [2_000, 10_000][rng.random_range(0..2)],
        }
    }

    fn index(&self, token: &str) -> Option<usize> {
        self.tokens.iter().position(|t| t == token)
    }

    fn describe(&self) -> String {
        format!(
            "tokens {:?}\nroles {:?}\nread leases {:?}, write leases {:?}, intents {:?}\n\
             original clients: read {} ms, write {} ms, key {} ms",
            self.tokens,
            self.roles,
            self.read_lease,
            self.write_lease,
            self.intent,
            self.original_read,
            self.original_write,
            self.original_key_ttl
        )
    }

    /// The tokens that may write (writers and upgradable readers).
    fn writers(&self) -> Vec<usize> {
        (0..TOKENS)
            .filter(|&t| matches!(self.roles[t], Role::Writer | Role::Upgradable))
            .collect()
    }
}

/// The lock as the real copy has it, as far as choosing the next step needs.
struct View<'a> {
    fields: &'a BTreeMap<String, String>,
    expires: Option<i64>,
}

impl View<'_> {
    fn owner(&self, cast: &Cast, field: &str) -> Option<usize> {
        self.fields.get(field).and_then(|t| cast.index(t))
    }

    /// Tokens with any field of their own: holders and waiters.
    fn involved(&self, cast: &Cast) -> Vec<usize> {
        let mut out = BTreeSet::new();
        for (name, value) in self.fields {
            let token = match name.split_once(':') {
                Some(("r" | "rw" | "wait", t)) => t,
                _ if name == "w:owner" || name == "u:owner" => value,
                _ => continue,
            };
            out.extend(cast.index(token));
        }
        out.into_iter().collect()
    }

    /// Every instant (ms) the hash names: deadlines, places, stamps.
    fn instants(&self, cast: &Cast) -> Vec<i64> {
        let mut out: Vec<i64> = self.expires.into_iter().collect();
        for (name, value) in self.fields {
            let Some(ms) = leading_int(value) else {
                continue;
            };
            match name.as_str() {
                "write" => out.push(ms + cast.original_write),
                "read" => out.push(ms + cast.original_read),
                "fence" | "rseq" | "readers" | "layout" => {}
                _ if name.starts_with("rn:") => {}
                _ => out.push(ms),
            }
        }
        out
    }
}

/// One of `tokens` at random (`fallback` when there is none).
fn pick(rng: &mut StdRng, tokens: &[usize], fallback: usize) -> usize {
    if tokens.is_empty() {
        fallback
    } else {
        tokens[rng.random_range(0..tokens.len())]
    }
}

/// The next step: a token's command as its role sends them, a release, renewal,
/// downgrade or fenced write mostly by a token that holds or waits (so they are
/// mostly its own, and sometimes a non-owner's or a late one), an original client's
/// command, a forced release, or time passing; now and then the last command again
/// (a resend).
fn random_step(
    rng: &mut StdRng,
    cast: &Cast,
    view: &View<'_>,
    now_us: i64,
    last: Option<Step>,
) -> Step {
    if let Some(last) = last
        && rng.random_bool(0.06)
    {
        return last;
    }
    let t = rng.random_range(0..TOKENS);
    let involved = view.involved(cast);
    let holder = if rng.random_bool(0.7) {
        pick(rng, &involved, t)
    } else {
        t
    };
    // The writer or the upgradable reader, mostly.
    let held: Vec<usize> = ["w:owner", "u:owner"]
        .into_iter()
        .filter_map(|field| view.owner(cast, field))
        .collect();
    let writer = if rng.random_bool(0.7) {
        pick(rng, &held, t)
    } else {
        pick(rng, &cast.writers(), t)
    };
    // Mostly the token's own leases; sometimes another (a command of another
    // client's options, sent with this token).
    let lease = |rng: &mut StdRng, own: i64| {
        if rng.random_bool(0.1) {
            LEASES[rng.random_range(0..LEASES.len())]
        } else {
            own
        }
    };
    match rng.random_range(0..100) {
        0..36 => match cast.roles[t] {
            Role::Reader | Role::RecursiveReader => Step::AcquireRead {
                t,
                lease: lease(rng, cast.read_lease[t]),
                upgradable: false,
                preferred: cast.roles[t] == Role::Reader,
                intent: cast.intent[t],
            },
            Role::Upgradable if rng.random_bool(0.6) => Step::AcquireRead {
                t,
                lease: lease(rng, cast.read_lease[t]),
                upgradable: true,
                preferred: true,
                intent: 0,
            },
            Role::Upgradable => Step::Upgrade {
                t,
                lease: lease(rng, cast.write_lease[t]),
                intent: cast.intent[t],
            },
            Role::Writer => Step::AcquireWrite {
                t,
                lease: lease(rng, cast.write_lease[t]),
                intent: cast.intent[t],
            },
        },
        36..54 => Step::Release { t: holder },
        54..65 => {
            // A write renewal by a token that may write (also a late one, after a
            // downgrade); else a read renewal.
            let (t, write) = if rng.random_bool(0.5) {
                (writer, true)
            } else {
                (holder, false)
            };
            let own = if write {
                cast.write_lease[t]
            } else {
                cast.read_lease[t]
            };
            Step::Renew {
                t,
                lease: lease(rng, own),
                write,
            }
        }
        65..70 => Step::Downgrade {
            t: writer,
            lease: lease(rng, cast.read_lease[writer]),
            from_write: cast.roles[writer] == Role::Writer
                || view.owner(cast, "w:owner") == Some(writer)
                || rng.random_bool(0.2),
        },
        70..72 => Step::FencedWrite { t: writer },
        72 => Step::ForceRelease,
        73..76 => Step::OriginalAcquire {
            write: rng.random_bool(0.5),
            skew: rng.random_range(-1..=3),
        },
        76..78 => Step::OriginalRelease {
            write: rng.random_bool(0.5),
        },
        _ => Step::Wait {
            us: random_wait(rng, cast, view, now_us),
        },
    }
}

/// A time jump (µs): a few µs, a few ms, to an instant the hash names (or 1 ms either
/// side of it), a lease's length, or well past every lease and the key's expiry.
fn random_wait(rng: &mut StdRng, cast: &Cast, view: &View<'_>, now_us: i64) -> i64 {
    match rng.random_range(0..100) {
        0..15 => rng.random_range(1..1_000),
        15..40 => rng.random_range(1..30) * 1_000 + rng.random_range(0..1_000),
        40..70 => {
            let now_ms = now_us.div_euclid(1_000);
            let ahead: Vec<i64> = view
                .instants(cast)
                .into_iter()
                .filter(|&ms| ms + 1 >= now_ms)
                .collect();
            if ahead.is_empty() {
                return rng.random_range(1..300) * 1_000;
            }
            let target_ms = ahead[rng.random_range(0..ahead.len())] + rng.random_range(-1..=1);
            // The first µs of that ms, or its last.
            let target_us = target_ms * 1_000 + [0, 999][rng.random_range(0..2)];
            (target_us - now_us).max(1)
        }
        70..92 => rng.random_range(30..3_500) * 1_000 + rng.random_range(0..1_000),
        _ => rng.random_range(3_500..15_000) * 1_000,
    }
}

/// The integer a field's value starts with ("<deadline>:<first lease>" gives the
/// deadline), if it does.
fn leading_int(value: &str) -> Option<i64> {
    value.split(':').next()?.parse().ok()
}

/// A reply, compactly.
fn show(value: &Value) -> String {
    match value {
        Value::Nil => "nil".to_owned(),
        Value::Int(n) => n.to_string(),
        Value::BulkString(b) => format!("{:?}", String::from_utf8_lossy(b)),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(show).collect();
            format!("[{}]", items.join(", "))
        }
        other => format!("{other:?}"),
    }
}

/// What a seed's run saw: steps run and the fast paths' decisions by kind.
#[derive(Default)]
struct Ran {
    steps: usize,
    fast: BTreeMap<&'static str, usize>,
}

/// One copy of the lock: its key, and the keys beside it.
struct LockCopy {
    key: String,
    /// Where its scripts publish.
    channel: String,
    /// Its scripts' clock (µs), set by the test.
    clock: String,
    /// The key's expiry (ms on that clock), kept by `CLOCK`.
    expires: String,
    /// The key fenced writes write.
    data: String,
    /// The operation whose fast path decided, set by `NOTE_FAST`.
    went: String,
}

impl LockCopy {
    /// Deletes the key and the keys beside it.
    fn delete(&self, conn: &mut redis::Connection) {
        let _: i64 = redis::cmd("DEL")
            .arg(&self.key)
            .arg(&self.clock)
            .arg(&self.expires)
            .arg(&self.data)
            .arg(&self.went)
            .query(conn)
            .unwrap();
    }

    fn new(key: String) -> LockCopy {
        LockCopy {
            channel: format!("{key}:released"),
            clock: format!("{key}:clock"),
            expires: format!("{key}:expires"),
            data: format!("{key}:data"),
            went: format!("{key}:went"),
            key,
        }
    }
}

struct Run<'a> {
    seed: u64,
    scripts: &'a Scripts,
    cast: Cast,
    conn: redis::Connection,
    real: LockCopy,
    full: LockCopy,
    now_us: i64,
    start_us: i64,
    /// The original clients' last stamps (read, write).
    original_stamps: [Option<i64>; 2],
    /// The real copy's fields and expiry after the last step, and before it.
    fields: BTreeMap<String, String>,
    expires: Option<i64>,
    before: BTreeMap<String, String>,
    /// The steps run so far, and a line for each.
    steps: Vec<Step>,
    log: Vec<String>,
    markers: u64,
    ran: Ran,
}

/// The result of one step on both copies.
type Replies = Option<(Value, Value)>;

/// A copy's fields, expiry, fenced-write data and fast decision (`Run::states`).
type CopyState = (
    BTreeMap<String, String>,
    Option<i64>,
    Option<String>,
    Option<String>,
);

impl Run<'_> {
    fn common_args(&self) -> [String; 3] {
        [
            "PUBLISH".to_owned(),
            self.cast.original_read.to_string(),
            self.cast.original_write.to_string(),
        ]
    }

    /// Runs `pair` on both copies with the common arguments and `args`; `data`: the
    /// copy's fenced-write key follows the lock's.
    fn call(&mut self, pair: &Pair, args: &[String], data: bool) -> Result<(Value, Value), String> {
        let args = [&self.common_args()[..], args].concat();
        self.call_both([&pair.real, &pair.full], &args, data)
    }

    /// Runs `scripts` (the real copy's, then the full copy's) on the two copies with
    /// `args` only: returns their replies.
    fn call_both(
        &mut self,
        scripts: [&Script; 2],
        args: &[String],
        data: bool,
    ) -> Result<(Value, Value), String> {
        let mut replies = Vec::new();
        for (script, copy) in scripts.into_iter().zip([&self.real, &self.full]) {
            let mut invocation = script.key(&copy.key);
            if data {
                invocation.key(&copy.data);
            }
            for a in args {
                invocation.arg(a);
            }
            replies.push(
                invocation
                    .invoke::<Value>(&mut self.conn)
                    .map_err(|e| format!("script error: {e}"))?,
            );
        }
        let full = replies.pop().unwrap();
        Ok((replies.pop().unwrap(), full))
    }

    fn now_ms(&self) -> i64 {
        self.now_us.div_euclid(1_000)
    }

    /// Sets both copies' clocks to `now_us`, and deletes a copy whose expiry it passed
    /// (a key lives while `now <= deadline`, as in Redis).
    fn set_clock(&mut self) {
        let now = self.now_us.to_string();
        let mut pipe = redis::pipe();
        pipe.cmd("MSET")
            .arg(&self.real.clock)
            .arg(&now)
            .arg(&self.full.clock)
            .arg(&now)
            .ignore();
        if self.expires.is_some_and(|at| self.now_ms() > at) {
            for copy in [&self.real, &self.full] {
                pipe.cmd("DEL").arg(&copy.key).arg(&copy.expires).ignore();
            }
        }
        let () = pipe.query(&mut self.conn).unwrap();
    }

    fn run_step(&mut self, step: Step, pubsub: &mut redis::PubSub<'_>) -> Result<(), String> {
        self.before.clone_from(&self.fields);
        self.steps.push(step);
        let s = self.scripts;
        let tok = |t: usize| self.cast.tokens[t].clone();
        let replies: Replies = match step {
            Step::Wait { us } => {
                self.now_us += us;
                self.set_clock();
                None
            }
            Step::AcquireRead {
                t,
                lease,
                upgradable,
                preferred,
                intent,
            } => {
                let args = [
                    tok(t),
                    lease.to_string(),
                    u8::from(preferred).to_string(),
                    u8::from(upgradable).to_string(),
                    intent.to_string(),
                ];
                Some(self.call(&s.acquire_read, &args, false)?)
            }
            Step::AcquireWrite { t, lease, intent } | Step::Upgrade { t, lease, intent } => {
                let upgrade = matches!(step, Step::Upgrade { .. });
                let args = [
                    tok(t),
                    lease.to_string(),
                    intent.to_string(),
                    u8::from(upgrade).to_string(),
                ];
                Some(self.call(&s.acquire_write, &args, false)?)
            }
            Step::Release { t } => Some(self.call(&s.release, &[tok(t)], false)?),
            Step::Renew { t, lease, write } => {
                let mode = if write { "write" } else { "read" };
                let args = [tok(t), lease.to_string(), mode.to_owned()];
                Some(self.call(&s.renew, &args, false)?)
            }
            Step::Downgrade {
                t,
                lease,
                from_write,
            } => {
                let from = if from_write { "write" } else { "upgradable" };
                let args = [tok(t), lease.to_string(), from.to_owned()];
                Some(self.call(&s.downgrade, &args, false)?)
            }
            Step::FencedWrite { t } => {
                let value = format!("written at step {}", self.log.len());
                let args = [tok(t), "set".to_owned(), value, "0".to_owned()];
                Some(self.call(&s.fenced_write, &args, true)?)
            }
            Step::ForceRelease => Some(self.call(&s.force_release, &[], false)?),
            Step::OriginalAcquire { write, skew } => {
                let stamp = self.now_ms() - skew;
                let args = [
                    self.cast.original_key_ttl.to_string(),
                    self.cast.original_read.to_string(),
                    self.cast.original_write.to_string(),
                    stamp.to_string(),
                ];
                let script = if write {
                    &s.original_write
                } else {
                    &s.original_read
                };
                let replies = self.call_both([script, script], &args, false)?;
                if replies.0 == Value::Int(1) {
                    self.original_stamps[usize::from(write)] = Some(stamp);
                }
                Some(replies)
            }
            Step::OriginalRelease { write } => {
                let stamp = self.original_stamps[usize::from(write)].unwrap_or(self.now_ms());
                let field = if write { "write" } else { "read" };
                let args = [field.to_owned(), stamp.to_string()];
                Some(self.call_both([&s.original_release; 2], &args, false)?)
            }
        };
        let elapsed = self.now_us - self.start_us;
        let mut line = format!(
            "{:>5}  t={}.{:03} ms  {step:?}",
            self.log.len() + 1,
            elapsed / 1_000,
            elapsed % 1_000
        );
        let Some((real, full)) = replies else {
            self.log.push(line);
            self.compare_state()?;
            return check_invariants(&self.fields)
                .map_err(|e| format!("an invariant broke on the real copy: {e}"));
        };
        let _ = write!(line, " -> {}", show(&real));
        self.log.push(line);
        if real != full {
            return Err(format!(
                "the replies differ: fast path {}, full path {}",
                show(&real),
                show(&full)
            ));
        }
        let published = self.compare_messages(pubsub)?;
        if !published.is_empty() {
            let _ = write!(self.log.last_mut().unwrap(), ", published {published:?}");
        }
        if let Some(operation) = self.compare_state()? {
            let kind = fast_kind(
                &operation,
                step,
                &real,
                &self.before,
                &published,
                &self.cast,
            );
            *self.ran.fast.entry(kind).or_default() += 1;
        }
        check_invariants(&self.fields)
            .map_err(|e| format!("an invariant broke on the real copy: {e}"))
    }

    /// Both copies published the same messages (a marker published on each channel
    /// afterwards ends what the step published there): returns them.
    fn compare_messages(&mut self, pubsub: &mut redis::PubSub<'_>) -> Result<Vec<String>, String> {
        self.markers += 1;
        let marker = format!("#marker{}", self.markers);
        let mut pipe = redis::pipe();
        for copy in [&self.real, &self.full] {
            pipe.cmd("PUBLISH").arg(&copy.channel).arg(&marker).ignore();
        }
        let () = pipe.query(&mut self.conn).unwrap();
        let mut got: [Vec<String>; 2] = Default::default();
        let mut ended = [false; 2];
        while ended != [true; 2] {
            let msg = pubsub
                .get_message()
                .map_err(|e| format!("subscription: {e}"))?;
            let payload: String = msg.get_payload().unwrap();
            let i = usize::from(msg.get_channel_name() == self.full.channel);
            if payload == marker {
                ended[i] = true;
            } else if ended[i] {
                return Err(format!("a message after the marker: {payload}"));
            } else {
                got[i].push(payload);
            }
        }
        if got[0] == got[1] {
            let [real, _] = got;
            Ok(real)
        } else {
            Err(format!(
                "the messages differ: fast path {:?}, full path {:?}",
                got[0], got[1]
            ))
        }
    }

    /// Each copy's fields, expiry (ms on the test's clock), what fenced writes wrote,
    /// and the operation whose fast path decided in the last step, if one did (taken:
    /// read once).
    fn states(&mut self) -> [CopyState; 2] {
        let mut pipe = redis::pipe();
        for copy in [&self.real, &self.full] {
            pipe.cmd("HGETALL")
                .arg(&copy.key)
                .cmd("GET")
                .arg(&copy.expires)
                .cmd("GET")
                .arg(&copy.data)
                .cmd("GETDEL")
                .arg(&copy.went);
        }
        let mut values: Vec<Value> = pipe.query(&mut self.conn).unwrap();
        let full = redis::from_redis_value(Value::Array(values.split_off(4))).unwrap();
        let real = redis::from_redis_value(Value::Array(values)).unwrap();
        [real, full]
    }

    /// Both copies hold the same fields and expiry, and the same fenced-write data.
    /// Keeps the real copy's fields for the next step; returns the operation whose fast
    /// path decided, if one did.
    fn compare_state(&mut self) -> Result<Option<String>, String> {
        let [
            (real, real_expires, real_data, went),
            (full, full_expires, full_data, full_went),
        ] = self.states();
        if let Some(operation) = full_went {
            return Err(format!(
                "the full copy's {operation} went a fast path: NO_FAST_PATH no longer switches it off"
            ));
        }
        self.fields = real;
        self.expires = real_expires;
        if self.fields != full {
            let mut diff = String::new();
            let names: BTreeSet<&String> = self.fields.keys().chain(full.keys()).collect();
            for name in names {
                let (a, b) = (self.fields.get(name), full.get(name));
                if a != b {
                    let _ = write!(diff, "\n    {name}: fast path {a:?}, full path {b:?}");
                }
            }
            return Err(format!("the fields differ:{diff}"));
        }
        if real_expires != full_expires {
            return Err(format!(
                "the key's expiry differs: fast path {}, full path {}",
                self.show_expiry(real_expires),
                self.show_expiry(full_expires)
            ));
        }
        if real_data != full_data {
            return Err(format!(
                "the fenced writes differ: fast path {real_data:?}, full path {full_data:?}"
            ));
        }
        Ok(went)
    }

    fn show_expiry(&self, at: Option<i64>) -> String {
        match at {
            Some(at) => format!("in {} ms", at - self.now_ms()),
            None => "none".to_owned(),
        }
    }

    /// The failure of step `step` (counted from 1): `what`, with the steps so far and
    /// the real copy before and after the step.
    fn failure(&mut self, step: usize, what: String) -> Failure {
        let mut report = "steps (t: the test's clock from the start):\n".to_owned();
        let shown = log_shown();
        if self.log.len() > shown {
            let _ = writeln!(
                report,
                "  ({} earlier steps: FUZZ_LOG=<n> shows the last n)",
                self.log.len() - shown
            );
        }
        for line in self.log.iter().skip(self.log.len().saturating_sub(shown)) {
            let _ = writeln!(report, "  {line}");
        }
        let _ = writeln!(report, "the real copy before the last step:");
        for (name, value) in &self.before {
            let _ = writeln!(report, "  {name} = {value}");
        }
        let [(after, expires, ..), _] = self.states();
        let _ = writeln!(
            report,
            "the real copy after it (expiry {}):",
            self.show_expiry(expires)
        );
        for (name, value) in &after {
            let _ = writeln!(report, "  {name} = {value}");
        }
        Failure {
            seed: self.seed,
            step,
            what,
            steps: self.steps.clone(),
            report,
        }
    }

    fn cleanup(&mut self) {
        for copy in [&self.real, &self.full] {
            copy.delete(&mut self.conn);
        }
    }
}

/// What kind of decision a fast path made, from the operation, the step, its reply
/// and messages, and the real copy's fields `before` the step.
fn fast_kind(
    operation: &str,
    step: Step,
    reply: &Value,
    before: &BTreeMap<String, String>,
    published: &[String],
    cast: &Cast,
) -> &'static str {
    let granted = matches!(reply, Value::Array(items) if items.first() == Some(&Value::Int(1)));
    let token = step.token().map_or("", |t| cast.tokens[t].as_str());
    let has = |field: String| before.contains_key(&field);
    let holds = |field: &str| before.get(field).map(String::as_str) == Some(token);
    match (operation, step) {
        (
            "acquire_read",
            Step::AcquireRead {
                upgradable: true, ..
            },
        ) => "an upgradable read acquired",
        ("acquire_read", _) if granted => "a read acquired",
        ("acquire_read", _) => match reply {
            Value::Array(items)
                if matches!(items.get(3), Some(Value::BulkString(b))
                    if has(format!("wait:{}", String::from_utf8_lossy(b)))) =>
            {
                "a reader put in the batch at the tail of the line"
            }
            _ => "a reader put in line in a new batch",
        },
        ("acquire_write", _) if granted => "a write acquired",
        ("acquire_write", _) if before.contains_key("w:owner") => {
            "a writer put in line behind a writer"
        }
        ("acquire_write", _) => "a writer put in line behind readers",
        ("release", _) if holds("w:owner") => match published.first() {
            Some(message) if message.contains(':') => {
                let head = before.get("q:head").cloned().unwrap_or_default();
                if has(format!("wn:{head}")) {
                    "a writer handed the lock over, the line going on"
                } else {
                    "a writer handed the lock over"
                }
            }
            _ => "a writer released",
        },
        ("release", _) if holds("u:owner") => "an upgradable reader released",
        ("release", _) if has(format!("rw:{token}")) => "a batch reader released",
        ("release", _) if before.contains_key("q:head") => "a reader released, a writer in line",
        ("release", _) => "a reader released",
        ("renew", Step::Renew { write: true, .. }) => "a write renewed",
        ("renew", _) => "a read renewed",
        _ => "something else",
    }
}

/// The fast paths' decisions every CI run must see, or it proves less than it says.
const MUST_DECIDE: [&str; 16] = [
    "an upgradable read acquired",
    "a read acquired",
    "a reader put in the batch at the tail of the line",
    "a reader put in line in a new batch",
    "a write acquired",
    "a writer put in line behind a writer",
    "a writer put in line behind readers",
    "a writer handed the lock over, the line going on",
    "a writer handed the lock over",
    "a writer released",
    "an upgradable reader released",
    "a batch reader released",
    "a reader released, a writer in line",
    "a reader released",
    "a write renewed",
    "a read renewed",
];

/// What the fast paths take for granted (the header of lua/fast_path.lua), and what
/// the line and the reader count must be, in the hash `h`. Values are parsed by their
/// leading integer only, and unknown fields are ignored, so a new field or a longer
/// value does not break this.
fn check_invariants(h: &BTreeMap<String, String>) -> Result<(), String> {
    let int = |name: &str| h.get(name).and_then(|v| leading_int(v));
    let with_prefix = |prefix: &'static str| {
        h.iter()
            .filter_map(move |(name, value)| Some((name.strip_prefix(prefix)?, value.as_str())))
    };
    // 1. The line: `q:head` and `q:tail` together; nothing of the line without them;
    // every entry with a place, and every link, reachable from the head; the walk
    // ends at the tail.
    match (h.get("q:head"), h.get("q:tail")) {
        (None, None) => {
            for prefix in ["wait:", "wn:", "wq:"] {
                if let Some((entry, _)) = with_prefix(prefix).next() {
                    return Err(format!("{prefix}{entry} without q:head"));
                }
            }
            for name in ["queue_until", "layout"] {
                if h.contains_key(name) {
                    return Err(format!("{name} without q:head"));
                }
            }
        }
        (Some(head), Some(tail)) => {
            let links = with_prefix("wn:").count();
            let mut line = vec![head.as_str()];
            while let Some(next) = h.get(&format!("wn:{}", line[line.len() - 1])) {
                if line.len() > links {
                    return Err(format!("the line from q:head loops: {line:?}"));
                }
                line.push(next);
            }
            if line[line.len() - 1] != tail {
                return Err(format!(
                    "the line from q:head {line:?} does not end at q:tail {tail}"
                ));
            }
            for prefix in ["wait:", "wn:", "wq:"] {
                if let Some((entry, _)) = with_prefix(prefix).find(|(e, _)| !line.contains(e)) {
                    return Err(format!(
                        "{prefix}{entry} is not reachable from q:head (the line: {line:?})"
                    ));
                }
            }
        }
        (head, tail) => {
            return Err(format!("q:head {head:?} and q:tail {tail:?} not together"));
        }
    }
    // 2. Nothing of an upgradable hold without `u:owner`; with it, its read hold has
    // the same deadline.
    match h.get("u:owner") {
        None => {
            for name in ["u:until", "u:upgrade", "u:others"] {
                if h.contains_key(name) {
                    return Err(format!("{name} without u:owner"));
                }
            }
        }
        Some(owner) => {
            let read = h.get(&format!("r:{owner}")).and_then(|v| leading_int(v));
            if int("u:until").is_none() || read != int("u:until") {
                return Err(format!(
                    "the upgradable reader's u:until {:?} is not its read hold's deadline {read:?}",
                    h.get("u:until")
                ));
            }
        }
    }
    // 3. `readers` and `readers_until` together; `readers` counts the counted holds
    // (an `r:` field above `readers_gone`, a granted batch's readers); none ends
    // after `readers_until`.
    let gone = int("readers_gone").unwrap_or(0);
    let mut counted = 0;
    let mut latest = None;
    for (token, value) in with_prefix("r:") {
        let deadline = leading_int(value).ok_or_else(|| format!("r:{token} = {value}"))?;
        if deadline > gone {
            counted += 1;
            latest = latest.max(Some(deadline));
        }
    }
    for (batch, value) in with_prefix("rg:") {
        let deadline = leading_int(value).ok_or_else(|| format!("rg:{batch} = {value}"))?;
        if deadline > gone {
            counted += int(&format!("rn:{batch}")).unwrap_or(0);
            latest = latest.max(Some(deadline));
        }
    }
    match (int("readers"), int("readers_until")) {
        (None, None) if counted == 0 => {}
        (Some(n), Some(until)) if n == counted && n > 0 => {
            if let Some(latest) = latest.filter(|&l| l > until) {
                return Err(format!(
                    "a counted hold ends at {latest}, after readers_until {until}"
                ));
            }
        }
        (n, until) => {
            return Err(format!(
                "readers {n:?} (readers_until {until:?}), but {counted} counted holds"
            ));
        }
    }
    Ok(())
}

/// A seed's run that stopped at a step that differed or broke an invariant.
struct Failure {
    seed: u64,
    /// The step that failed, counted from 1.
    step: usize,
    /// What went wrong.
    what: String,
    /// The steps run, the failing one last.
    steps: Vec<Step>,
    /// The steps' log and the real copy before and after the failing step.
    report: String,
}

impl Failure {
    fn summary(&self) -> String {
        let what = self.what.lines().next().unwrap_or_default();
        format!("seed {}, step {}: {what}", self.seed, self.step)
    }

    /// What went wrong without the particulars (numbers, lists): a shorter sequence
    /// fails "the same way" when this is the same.
    fn kind(&self) -> &str {
        let end = self
            .what
            .find(|c: char| c.is_ascii_digit() || c == '(' || c == '[')
            .unwrap_or(self.what.len());
        &self.what[..end]
    }
}

/// The steps a run takes: `steps` random ones, or these.
#[derive(Clone, Copy)]
enum Source<'a> {
    Random(usize),
    Fixed(&'a [Step]),
}

/// Runs `seed` (its cast, its clock, and its random steps or `source`'s) on fresh keys.
fn run_seed(
    client: &redis::Client,
    scripts: &Scripts,
    seed: u64,
    source: Source<'_>,
) -> Result<Ran, Failure> {
    let mut rng = StdRng::seed_from_u64(seed);
    let cast = Cast::new(&mut rng);
    let base = format!("rwlock:{{{}}}", common::unique_name("fuzz"));
    let (real, full) = (
        LockCopy::new(format!("{base}:real")),
        LockCopy::new(format!("{base}:full")),
    );
    let mut sub = client.get_connection().unwrap();
    let mut pubsub = sub.as_pubsub();
    pubsub.subscribe(&real.channel).unwrap();
    pubsub.subscribe(&full.channel).unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // Some instant in late 2023, a different µs per seed.
    let start_us = 1_700_000_000_000_000 + rng.random_range(0..1_000_000_000_000);
    let mut run = Run {
        seed,
        scripts,
        cast,
        conn: client.get_connection().unwrap(),
        real,
        full,
        now_us: start_us,
        start_us,
        original_stamps: [None; 2],
        fields: BTreeMap::new(),
        expires: None,
        before: BTreeMap::new(),
        steps: Vec::new(),
        log: Vec::new(),
        markers: 0,
        ran: Ran::default(),
    };
    run.set_clock();
    let count = match source {
        Source::Random(steps) => steps,
        Source::Fixed(steps) => steps.len(),
    };
    let mut last = None;
    for n in 1..=count {
        let step = match source {
            Source::Fixed(steps) => steps[n - 1],
            Source::Random(_) => {
                let view = View {
                    fields: &run.fields,
                    expires: run.expires,
                };
                random_step(&mut rng, &run.cast, &view, run.now_us, last)
            }
        };
        if !matches!(step, Step::Wait { .. }) {
            last = Some(step);
        }
        if let Err(what) = run.run_step(step, &mut pubsub) {
            let failure = run.failure(n, what);
            run.cleanup();
            return Err(failure);
        }
    }
    run.cleanup();
    run.ran.steps = count;
    Ok(run.ran)
}

/// A shorter sequence of steps than `failure`'s that fails the same way, if one is
/// found within `budget`: chunks of steps left out, halving the chunk while none can
/// go (a sequence is cut at the step that fails).
fn shrink(
    client: &redis::Client,
    scripts: &Scripts,
    failure: &Failure,
    budget: Duration,
) -> Option<Failure> {
    let deadline = Instant::now() + budget;
    let mut best: Option<Failure> = None;
    let mut steps = failure.steps.clone();
    let mut chunk = steps.len().div_ceil(2);
    while chunk > 0 && Instant::now() < deadline {
        let mut shorter = false;
        let mut i = 0;
        while i < steps.len() && Instant::now() < deadline {
            let candidate: Vec<Step> = steps[..i]
                .iter()
                .chain(&steps[(i + chunk).min(steps.len())..])
                .copied()
                .collect();
            match run_seed(client, scripts, failure.seed, Source::Fixed(&candidate)) {
                Err(found) if found.kind() == failure.kind() => {
                    steps.clone_from(&found.steps);
                    best = Some(found);
                    shorter = true;
                }
                _ => i += chunk,
            }
        }
        if !shorter {
            chunk /= 2;
        }
    }
    best
}

fn env_number<T: std::str::FromStr>(name: &str) -> Option<T> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value} is not a number")),
    )
}

/// How many steps a failure shows, the last ones (`FUZZ_LOG`).
fn log_shown() -> usize {
    env_number("FUZZ_LOG").unwrap_or(STEPS)
}

/// The substitutions work: both copies' scripts take the time from the test's clock
/// (a write grant on a new key gets that clock's µs as its fence, and a hold to a
/// lease after it) and keep the key's expiry on it, with no real TTL; only the real
/// copy's fast path decides.
#[test]
fn scripts_run_on_the_test_clock() {
    let client = redis::Client::open(common::shared_standalone().url()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let scripts = Scripts::load();
    let base = format!("rwlock:{{{}}}", common::unique_name("fuzz-clock"));
    // 2001-09-09 01:46:40.000123 UTC: far from the server's clock.
    let now_us: i64 = 1_000_000_000_000_123;
    let now_ms = now_us / 1_000;
    let pair = &scripts.acquire_write;
    for (script, name, fast) in [(&pair.real, "real", true), (&pair.full, "full", false)] {
        let copy = LockCopy::new(format!("{base}:{name}"));
        let () = redis::cmd("SET")
            .arg(&copy.clock)
            .arg(now_us)
            .query(&mut conn)
            .unwrap();
        let reply: Vec<i64> = script
            .key(&copy.key)
            .arg(&["PUBLISH", "1000", "1000", "token", "400", "0", "0"])
            .invoke(&mut conn)
            .unwrap();
        assert_eq!(reply, [1, now_us], "{name}: the fence is the clock's µs");
        let (until, expires, went): (i64, i64, Option<String>) = redis::pipe()
            .cmd("HGET")
            .arg(&copy.key)
            .arg("w:until")
            .cmd("GET")
            .arg(&copy.expires)
            .cmd("GET")
            .arg(&copy.went)
            .query(&mut conn)
            .unwrap();
        assert_eq!(until, now_ms + 400, "{name}: w:until");
        assert_eq!(expires, now_ms + 400 + 1_000, "{name}: the key's expiry");
        assert_eq!(went.is_some(), fast, "{name}: the fast path decided");
        let pttl: i64 = redis::cmd("PTTL").arg(&copy.key).query(&mut conn).unwrap();
        assert_eq!(pttl, -1, "{name}: the key has no real TTL");
        copy.delete(&mut conn);
    }
}

#[test]
fn fast_paths_decide_as_the_full_paths() {
    let first: Option<u64> = env_number("FUZZ_SEED");
    let seeds: u64 = env_number("FUZZ_SEEDS").unwrap_or(if first.is_some() { 1 } else { SEEDS });
    let steps: usize = env_number("FUZZ_STEPS").unwrap_or(STEPS);
    let shrink_for =
        Duration::from_secs(env_number("FUZZ_SHRINK_SECONDS").unwrap_or(SHRINK_SECONDS));
    let first = first.unwrap_or(1);
    let client = redis::Client::open(common::shared_standalone().url()).unwrap();
    let scripts = Scripts::load();
    let started = Instant::now();
    let next = AtomicU64::new(first);
    let failures = Mutex::new(Vec::new());
    let total = Mutex::new(Ran::default());
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= first + seeds {
                        return;
                    }
                    match run_seed(&client, &scripts, seed, Source::Random(steps)) {
                        Ok(ran) => {
                            let mut total = total.lock().unwrap();
                            total.steps += ran.steps;
                            for (kind, n) in ran.fast {
                                *total.fast.entry(kind).or_default() += n;
                            }
                        }
                        Err(failure) => failures.lock().unwrap().push(failure),
                    }
                }
            });
        }
    });
    let mut failures: Vec<Failure> = failures.into_inner().unwrap();
    failures.sort_by_key(|f| f.seed);
    if let Some(failure) = failures.first() {
        let summaries: Vec<String> = failures.iter().map(Failure::summary).collect();
        let mut msg = format!(
            "{} of {seeds} seeds failed after {:.1?}:\n  {}\n\nthe first: seed {seed}, step {step}: \
             {what}\nreplay: FUZZ_SEED={seed} FUZZ_STEPS={step} cargo test --test differential_fuzz\n\
             {cast}\n{report}",
            failures.len(),
            started.elapsed(),
            summaries.join("\n  "),
            seed = failure.seed,
            step = failure.step,
            what = failure.what,
            cast = Cast::new(&mut StdRng::seed_from_u64(failure.seed)).describe(),
            report = failure.report,
        );
        let shrinking = Instant::now();
        if let Some(short) = shrink(&client, &scripts, failure, shrink_for) {
            let _ = write!(
                msg,
                "\nthe same failure in {} steps (some of the steps above left out, found in \
                 {:.1?}): {}\n{}",
                short.step,
                shrinking.elapsed(),
                short.what,
                short.report
            );
        }
        panic!("{msg}");
    }
    let total = total.into_inner().unwrap();
    println!(
        "{seeds} seeds from {first}, {} steps in {:.1?}; fast decisions: {:?}",
        total.steps,
        started.elapsed(),
        total.fast
    );
    // A short replay need not reach every kind of fast decision; a full run must.
    if seeds * steps as u64 >= SEEDS * STEPS as u64 {
        let missed: Vec<&str> = MUST_DECIDE
            .into_iter()
            .filter(|kind| !total.fast.contains_key(kind))
            .collect();
        assert!(
            missed.is_empty(),
            "the fast paths never decided {missed:?} (decided: {:?})",
            total.fast
        );
    }
}

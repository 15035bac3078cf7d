//! The lock as a whole: one Redis hash, the clients that run the scripts on it (as
//! `src/waiting.rs` and `src/lease.rs` drive them) and the environment's faults.
//!
//! Time moves in ticks (`Tick`); every script runs atomically at the current tick,
//! as on the server. A client's local deadline is `sent + lease` like the crate's
//! (`Lease::start(.., sent)`): the tick at which it sent the request that granted or
//! renewed the hold, so a resent request keeps the first send time.
//!
//! Fairness is built into when time may pass: `Tick` is disabled while an unpaused
//! client owes a step (its re-check timer fired, its wait timed out, the driver must
//! resend a lost request, or the application has held longer than `max_hold`).

use std::fmt::{self, Write as _};

use stateright::{Model, Property};

use super::lua::{self, Hash, Outcome, Params, Reply, Time, Tok, Wake};

/// Read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    Read,
    Write,
}

/// A script call as a client makes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// `read()`/`write()` when `wait`, `try_write()` otherwise.
    Acquire {
        mode: Mode,
        wait: bool,
    },
    Renew,
    Release,
    Downgrade,
    FencedWrite,
}

/// Faults the environment may inject, as budgets for the whole run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Faults {
    /// A client process dies (its holds expire, nothing is published).
    pub crashes: u8,
    /// A client stops (GC, VM migration) for longer than its lease, then goes on.
    pub pauses: u8,
    /// A reply is lost; the driver resends the same script with the same token.
    pub lost_replies: u8,
    /// A wake-up message is lost (pub/sub is at-most-once).
    pub lost_messages: u8,
    /// The master fails and the promoted replica lacks the last script's writes.
    pub failovers: u8,
    /// A renewal the renewal task sent reaches the server late (a driver retry, a
    /// slow node): at any later tick, also after the guard moved on (downgraded,
    /// released) and its renewal task was stopped.
    pub late_renewals: u8,
}

/// What the checker explores.
#[derive(Clone, Debug)]
pub struct Config {
    pub name: &'static str,
    pub readers: u8,
    pub writers: u8,
    /// Clients of the original design (no tokens, no renewal; they see only the
    /// `read`/`write` stamps), after ours.
    pub original_readers: u8,
    pub original_writers: u8,
    /// The whole-key TTL their scripts set at every acquire.
    pub original_key_ttl: Time,
    /// Their peers judge a stamp live while `now - stamp <= timeout` (inclusive), and
    /// so do our scripts. True: the original holds end after `stamp + timeout`;
    /// false: at it (a weaker check, kept for comparison).
    pub original_inclusive: bool,
    pub read_lease: Time,
    pub write_lease: Time,
    /// `INTENT_TTL` of src/waiting.rs.
    pub intent_ttl: Time,
    /// `MIN_RECHECK`, `MAX_RECHECK`: the re-check timer is the retry hint clamped to these.
    pub recheck: (Time, Time),
    /// The application ends every hold within this many ticks of acquiring it.
    pub max_hold: Time,
    /// `wait_timeout` (None: wait without limit).
    pub wait_timeout: Option<Time>,
    /// Acquisitions per client over the run (re-arrivals), at most one per tick.
    pub acquisitions: u8,
    /// The last tick explored.
    pub horizon: Time,
    pub try_write: bool,
    pub downgrade: bool,
    pub fenced_writes: bool,
    pub faults: Faults,
    pub params: Params,
    /// Check that no two believed holds conflict (off with failover: it cannot hold).
    pub exclusion: bool,
    /// Bounded liveness: no unpaused waiter waits longer than this many ticks
    /// (only writers when `bound_writers_only`: under writer preference, writers that
    /// keep coming back may starve readers, by design).
    pub wait_bound: Option<Time>,
    pub bound_writers_only: bool,
    /// Names of the `sometimes` properties this configuration must reach (a sign that
    /// the model still gets where the checks matter).
    pub examples: Vec<&'static str>,
}

impl Config {
    fn lease(&self, mode: Mode) -> Time {
        match mode {
            Mode::Read => self.read_lease,
            Mode::Write => self.write_lease,
        }
    }

    /// How long a client believes a hold after sending the request that granted or
    /// renewed it (`RwLock::held_for`): the lease, cut to the original clients'
    /// timeout for the stamp they judge that mode by, since after it they may enter.
    fn held_for(&self, mode: Mode) -> Time {
        let original = match mode {
            Mode::Read => self.params.original_read,
            Mode::Write => self.params.original_write,
        };
        self.lease(mode).min(original)
    }

    fn clients(&self) -> u8 {
        self.readers + self.writers
    }

    fn all_clients(&self) -> u8 {
        self.clients() + self.original_readers + self.original_writers
    }

    /// The mode of original client `i` (`None`: one of ours).
    fn original(&self, i: usize) -> Option<Mode> {
        let first = self.clients() as usize;
        if i < first {
            None
        } else if i < first + self.original_readers as usize {
            Some(Mode::Read)
        } else {
            Some(Mode::Write)
        }
    }

    /// R1, W1 (ours), OR1, OW1 (original design).
    fn name(&self, i: usize) -> String {
        let first = self.clients() as usize;
        match self.original(i) {
            None => lua::client_name(self.id(i)),
            Some(Mode::Read) => format!("OR{}", i - first + 1),
            Some(Mode::Write) => format!("OW{}", i - first - self.original_readers as usize + 1),
        }
    }

    /// Client number `i` as tokens carry it: readers 0.., writers 100.. (so tokens
    /// print as R1.0, W1.0; see `lua::client_name`).
    fn id(&self, i: usize) -> u8 {
        let i = i as u8;
        if i < self.readers {
            i
        } else {
            100 + i - self.readers
        }
    }

    fn role(&self, i: usize) -> Mode {
        if (i as u8) < self.readers {
            Mode::Read
        } else {
            Mode::Write
        }
    }
}

/// Where a client is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    Idle,
    /// Refused, waiting for a wake-up or its re-check timer.
    Waiting {
        token: Tok,
        mode: Mode,
        since: Time,
        recheck_at: Time,
        /// Was paused while waiting (exempt from the wait bound: it may lose its place).
        paused: bool,
    },
    Holding {
        token: Tok,
        mode: Mode,
        since: Time,
        /// The local deadline (`sent + lease`).
        until: Time,
        fence: i64,
        /// A renewal, downgrade or fenced write found the hold gone.
        lost: bool,
    },
    /// An original-design client holds since its stamp; its peers judge the hold
    /// live while `now - stamp <= timeout`, i.e. up to `until` inclusive.
    Original {
        mode: Mode,
        stamp: Time,
        until: Time,
        /// An original reader stamped `read` with the value our readers' stamp had
        /// (same millisecond): indistinguishable from ours, a known limit.
        collided: bool,
    },
    Crashed,
}

/// A request whose reply was lost: the driver sends it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Inflight {
    pub op: Op,
    pub token: Tok,
    pub sent: Time,
}

/// A renewal on its way to the server (fault `late_renewals`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Late {
    pub token: Tok,
    pub mode: Mode,
    pub sent: Time,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Client {
    pub phase: Phase,
    pub inflight: Option<Inflight>,
    /// A renewal sent by the renewal task that has not reached the server yet.
    pub late: Option<Late>,
    /// Takes no step before this tick.
    pub paused_until: Time,
    /// A wake-up message that concerns it arrived.
    pub woken: bool,
    pub acquisitions: u8,
    /// Already made a request this tick (one request per client per tick).
    pub acted: bool,
    /// Has given up waiting (`wait_timeout`) at least once.
    pub gave_up: bool,
    /// Since when the client has been waiting although its acquire would be granted.
    pub grantable_since: Option<Time>,
}

/// Violations recorded when they happen (bits of `State::violations`).
pub const FENCE_NOT_RISING: u8 = 1;
pub const STRAY_RELEASE_CHANGED: u8 = 2;
pub const FENCED_WRITE_WENT_BACK: u8 = 4;
pub const WRITER_JUMPED_QUEUE: u8 = 8;
pub const READER_PASSED_QUEUED_WRITER: u8 = 16;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct State {
    pub now: Time,
    pub hash: Hash,
    /// The hash before the last script, while a failover could still lose that script.
    pub unreplicated: Option<Hash>,
    pub clients: Vec<Client>,
    pub budget: Faults,
    /// Largest fencing token issued so far.
    pub max_fence: i64,
    /// Largest fence a fenced write was accepted with.
    pub max_written: i64,
    pub violations: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    /// Client runs a script; with `lose_reply` the script runs but the reply is lost.
    Call(u8, Op, bool),
    /// The driver resends the request whose reply was lost.
    Resend(u8),
    /// `wait_timeout` passed: the acquire gives up and withdraws its token.
    GiveUp(u8),
    Crash(u8),
    Pause(u8),
    LoseWakeup(u8),
    Failover,
    /// An original-design client acquires (when idle) or releases.
    Original(u8),
    /// The renewal task sends a renewal that will reach the server late.
    SendLateRenewal(u8),
    /// That renewal reaches the server now.
    LateRenewalArrives(u8),
    Tick,
}

pub struct Lock {
    pub cfg: Config,
}

impl Client {
    /// Believes it holds: the guard's `is_held()`. `release(self)` and
    /// `downgrade(self)` consume the guard, so a client with one in flight does not.
    fn believes(&self, now: Time) -> Option<Mode> {
        if self
            .inflight
            .is_some_and(|f| matches!(f.op, Op::Release | Op::Downgrade))
        {
            return None;
        }
        match self.phase {
            Phase::Holding {
                mode, until, lost, ..
            } if !lost && now < until => Some(mode),
            Phase::Original {
                mode,
                until,
                collided: false,
                ..
            } if now < until => Some(mode),
            _ => None,
        }
    }

    fn token(&self) -> Option<Tok> {
        match self.phase {
            Phase::Waiting { token, .. } | Phase::Holding { token, .. } => Some(token),
            _ => self.inflight.map(|i| i.token),
        }
    }
}

impl Lock {
    /// Does the client owe a step before time may pass?
    fn owes_step(&self, s: &State, c: &Client) -> bool {
        if c.paused_until > s.now || c.phase == Phase::Crashed || c.acted {
            return false;
        }
        if let Some(inflight) = c.inflight {
            return inflight.sent < s.now;
        }
        match c.phase {
            Phase::Waiting {
                since, recheck_at, ..
            } => self.timed_out(s, since) || s.now >= recheck_at,
            Phase::Holding { since, .. } | Phase::Original { stamp: since, .. } => {
                s.now >= since + self.cfg.max_hold
            }
            _ => false,
        }
    }

    fn timed_out(&self, s: &State, since: Time) -> bool {
        self.cfg.wait_timeout.is_some_and(|t| s.now >= since + t)
    }

    /// The smallest generation no part of the state mentions: as good as 128 fresh
    /// random bits, since the scripts only compare tokens for equality.
    fn fresh_token(&self, s: &State, i: usize) -> Tok {
        let client = self.cfg.id(i);
        let mut used = [false; 16];
        let mut mark = |t: Tok| {
            if t.client == client {
                used[t.generation as usize] = true;
            }
        };
        for h in std::iter::once(&s.hash).chain(s.unreplicated.as_ref()) {
            for (field, value) in &h.fields {
                match (field, value) {
                    (lua::Field::R(t) | lua::Field::Wait(t), _) => mark(*t),
                    (_, lua::Val::Tok(t)) => mark(*t),
                    _ => {}
                }
            }
        }
        if let Some(t) = s.clients[i].token() {
            mark(t);
        }
        let generation = used.iter().position(|u| !u).unwrap_or(15) as u8;
        Tok { client, generation }
    }

    /// Runs one script on the hash, with the checks that must hold at every run.
    fn exec(&self, s: &mut State, op: Op, token: Tok, mode: Mode) -> Outcome {
        let cfg = &self.cfg;
        let p = &cfg.params;
        let before = s.hash.clone();
        let view_before = lua::live_view(&s.hash, p, s.now);
        let now = s.now;
        let out = match op {
            Op::Acquire {
                mode: Mode::Read, ..
            } => lua::acquire_read(&mut s.hash, p, now, token, cfg.read_lease, true),
            Op::Acquire {
                mode: Mode::Write,
                wait,
            } => {
                let ttl = if wait { cfg.intent_ttl } else { 0 };
                lua::acquire_write(&mut s.hash, p, now, token, cfg.write_lease, ttl)
            }
            Op::Renew => lua::renew(
                &mut s.hash,
                p,
                now,
                token,
                cfg.lease(mode),
                mode == Mode::Write,
            ),
            Op::Release => lua::release(&mut s.hash, p, now, token),
            Op::Downgrade => lua::downgrade(&mut s.hash, p, now, token, cfg.read_lease),
            Op::FencedWrite => lua::fenced_write(&mut s.hash, p, now, token),
        };
        if let (Op::Acquire { mode, .. }, Reply::Granted(_)) = (op, out.reply) {
            let queued = &view_before.0.intents;
            match mode {
                Mode::Write
                    if out.new_grant && queued.first().is_some_and(|i| i.token != token) =>
                {
                    s.violations |= WRITER_JUMPED_QUEUE;
                }
                Mode::Read if !queued.is_empty() && !view_before.0.readers.contains_key(&token) => {
                    s.violations |= READER_PASSED_QUEUED_WRITER;
                }
                _ => {}
            }
        }
        if let (true, Reply::Granted(fence)) = (out.new_grant, out.reply) {
            if fence <= s.max_fence {
                s.violations |= FENCE_NOT_RISING;
            }
            s.max_fence = s.max_fence.max(fence);
        }
        if op == Op::Release
            && !view_before.0.owns(token)
            && lua::live_view(&s.hash, p, s.now) != view_before
        {
            s.violations |= STRAY_RELEASE_CHANGED;
        }
        if let (Op::FencedWrite, Reply::Int(fence)) = (op, out.reply)
            && fence > 0
        {
            if fence < s.max_written {
                s.violations |= FENCED_WRITE_WENT_BACK;
            }
            s.max_written = s.max_written.max(fence);
        }
        if cfg.faults.failovers > 0 && s.hash != before {
            s.unreplicated = Some(before);
        }
        if let Some(wake) = out.published {
            self.deliver(s, wake);
        }
        out
    }

    /// A wake-up reaches every waiter it concerns (`concerns` in src/waiting.rs,
    /// writer preference).
    fn deliver(&self, s: &mut State, wake: Wake) {
        for c in &mut s.clients {
            if let Phase::Waiting { token, mode, .. } = c.phase {
                let concerns = match (wake, mode) {
                    (Wake::All, _) => true,
                    (Wake::Readers, Mode::Read) => true,
                    (Wake::Writer(named), Mode::Write) => named == token,
                    _ => false,
                };
                c.woken |= concerns;
            }
        }
    }

    /// The client takes the reply of `op`, sent at `sent`.
    fn take_reply(&self, s: &mut State, i: usize, op: Op, token: Tok, sent: Time, out: Outcome) {
        let cfg = &self.cfg;
        let now = s.now;
        let c = &mut s.clients[i];
        match (op, out.reply, c.phase) {
            (Op::Acquire { mode, .. }, Reply::Granted(fence), _) => {
                c.phase = Phase::Holding {
                    token,
                    mode,
                    since: now,
                    until: sent + cfg.held_for(mode),
                    fence,
                    lost: false,
                };
                c.woken = false;
            }
            (Op::Acquire { wait: false, .. }, _, _) => c.phase = Phase::Idle,
            (Op::Acquire { mode, .. }, Reply::Refused(hint), phase) => {
                let recheck_at = now + hint.clamp(cfg.recheck.0, cfg.recheck.1);
                c.phase = match phase {
                    Phase::Waiting { since, paused, .. } => {
                        c.woken = false;
                        Phase::Waiting {
                            token,
                            mode,
                            since,
                            recheck_at,
                            paused,
                        }
                    }
                    _ => {
                        // First refusal: subscribe, then try again at once.
                        c.woken = true;
                        Phase::Waiting {
                            token,
                            mode,
                            since: now,
                            recheck_at,
                            paused: false,
                        }
                    }
                };
            }
            (Op::Release, _, _) => c.phase = Phase::Idle,
            (
                Op::Renew | Op::Downgrade | Op::FencedWrite,
                reply,
                Phase::Holding {
                    token,
                    mode,
                    since,
                    until,
                    fence,
                    ..
                },
            ) => {
                let ok = reply != Reply::Int(0);
                let (mode, until) = match (op, ok) {
                    (Op::Renew, true) => (mode, sent + cfg.held_for(mode)),
                    (Op::Downgrade, true) => (Mode::Read, sent + cfg.held_for(Mode::Read)),
                    _ => (mode, until),
                };
                c.phase = Phase::Holding {
                    token,
                    mode,
                    since,
                    until,
                    fence,
                    lost: !ok,
                };
            }
            _ => {}
        }
    }

    /// The script calls a client may make now.
    fn calls(&self, s: &State, i: usize, out: &mut Vec<Op>) {
        let c = &s.clients[i];
        let cfg = &self.cfg;
        match c.phase {
            Phase::Idle if c.acquisitions < cfg.acquisitions => {
                let mode = cfg.role(i);
                out.push(Op::Acquire { mode, wait: true });
                if mode == Mode::Write && cfg.try_write {
                    out.push(Op::Acquire { mode, wait: false });
                }
            }
            Phase::Waiting {
                mode,
                since,
                recheck_at,
                ..
            } if !self.timed_out(s, since) && (c.woken || s.now >= recheck_at) => {
                out.push(Op::Acquire { mode, wait: true });
            }
            Phase::Holding { since, .. } if s.now >= since + cfg.max_hold => {
                out.push(Op::Release);
            }
            Phase::Holding { mode, .. } => {
                let believes = c.believes(s.now).is_some();
                // One renewal at a time: the renewal task awaits each.
                if believes && c.late.is_none() {
                    out.push(Op::Renew);
                }
                out.push(Op::Release);
                if mode == Mode::Write && believes && cfg.downgrade {
                    out.push(Op::Downgrade);
                }
                // A write may come late: the application checked is_held(), then paused.
                if mode == Mode::Write && cfg.fenced_writes {
                    out.push(Op::FencedWrite);
                }
            }
            _ => {}
        }
    }

    fn step(&self, last: &State, action: Action, note: Option<&mut String>) -> Option<State> {
        let mut s = last.clone();
        let now = s.now;
        match action {
            Action::Call(i, op, lose_reply) => {
                let i = i as usize;
                let token = match (op, s.clients[i].token()) {
                    (Op::Acquire { .. }, Some(t)) => t, // a retry of a waiting acquire
                    (Op::Acquire { .. }, None) => self.fresh_token(&s, i),
                    (_, Some(t)) => t,
                    (_, None) => return None,
                };
                let mode = match s.clients[i].phase {
                    Phase::Holding { mode, .. } | Phase::Waiting { mode, .. } => mode,
                    _ => self.cfg.role(i),
                };
                if matches!(op, Op::Acquire { .. }) && s.clients[i].phase == Phase::Idle {
                    s.clients[i].acquisitions += 1;
                }
                s.clients[i].acted = true;
                let out = self.exec(&mut s, op, token, mode);
                if let Some(note) = note {
                    let _ = write!(note, "{}", describe(op, &out));
                    if lose_reply {
                        note.push_str(" (reply lost)");
                    }
                }
                if lose_reply {
                    s.budget.lost_replies -= 1;
                    s.clients[i].inflight = Some(Inflight {
                        op,
                        token,
                        sent: now,
                    });
                } else {
                    self.take_reply(&mut s, i, op, token, now, out);
                }
            }
            Action::Resend(i) => {
                let i = i as usize;
                let inflight = s.clients[i].inflight.take()?;
                s.clients[i].acted = true;
                let mode = match (inflight.op, s.clients[i].phase) {
                    (_, Phase::Holding { mode, .. }) => mode,
                    (Op::Acquire { mode, .. }, _) => mode,
                    _ => self.cfg.role(i),
                };
                let out = self.exec(&mut s, inflight.op, inflight.token, mode);
                if let Some(note) = note {
                    let _ = write!(note, "{}", describe(inflight.op, &out));
                }
                self.take_reply(&mut s, i, inflight.op, inflight.token, inflight.sent, out);
            }
            Action::GiveUp(i) => {
                let i = i as usize;
                let token = s.clients[i].token()?;
                let out = self.exec(&mut s, Op::Release, token, Mode::Read);
                if let Some(note) = note {
                    let _ = write!(note, "withdraws: {}", describe(Op::Release, &out));
                }
                s.clients[i].phase = Phase::Idle;
                s.clients[i].woken = false;
                s.clients[i].acted = true;
                s.clients[i].gave_up = true;
            }
            Action::Crash(i) => {
                s.budget.crashes -= 1;
                let c = &mut s.clients[i as usize];
                c.phase = Phase::Crashed;
                c.inflight = None;
                c.woken = false;
            }
            Action::Pause(i) => {
                s.budget.pauses -= 1;
                let c = &mut s.clients[i as usize];
                c.paused_until = now + self.cfg.read_lease.max(self.cfg.write_lease) + 1;
                if let Phase::Waiting { paused, .. } = &mut c.phase {
                    *paused = true;
                }
            }
            Action::LoseWakeup(i) => {
                s.budget.lost_messages -= 1;
                s.clients[i as usize].woken = false;
            }
            Action::Failover => {
                s.budget.failovers -= 1;
                s.hash = s.unreplicated.take()?;
                // The promotion takes time; subscriptions are restored with a `*`.
                self.advance(&mut s);
                self.deliver(&mut s, Wake::All);
                // Waiters could not reach the server meanwhile: count from now.
                for c in &mut s.clients {
                    c.grantable_since = None;
                }
            }
            Action::Original(i) => {
                let i = i as usize;
                let p = &self.cfg.params;
                let c = &mut s.clients[i];
                c.acted = true;
                let text = match (c.phase, self.cfg.original(i)) {
                    (Phase::Original { mode, stamp, .. }, _) => {
                        let write = mode == Mode::Write;
                        let done = lua::original_release(&mut s.hash, now, write, stamp);
                        c.phase = Phase::Idle;
                        format!(
                            "original release: {}",
                            if done { "deleted" } else { "stamp gone" }
                        )
                    }
                    (_, Some(mode)) => {
                        let write = mode == Mode::Write;
                        let ttl = self.cfg.original_key_ttl;
                        let ours = s.hash.fields.get(&lua::Field::Rstamp).copied();
                        if lua::original_acquire(&mut s.hash, p, now, write, ttl) {
                            let timeout = if write {
                                p.original_write
                            } else {
                                p.original_read
                            };
                            let inclusive = i64::from(self.cfg.original_inclusive);
                            c.acquisitions += 1;
                            c.phase = Phase::Original {
                                mode,
                                stamp: now,
                                until: now + timeout + inclusive,
                                collided: !write && ours == Some(lua::Val::Int(now)),
                            };
                            "original acquire: granted".to_owned()
                        } else {
                            "original acquire: refused".to_owned()
                        }
                    }
                    _ => return None,
                };
                if let Some(note) = note {
                    note.push_str(&text);
                }
            }
            Action::SendLateRenewal(i) => {
                s.budget.late_renewals -= 1;
                let c = &mut s.clients[i as usize];
                let Phase::Holding { token, mode, .. } = c.phase else {
                    return None;
                };
                c.late = Some(Late {
                    token,
                    mode,
                    sent: now,
                });
            }
            Action::LateRenewalArrives(i) => {
                let i = i as usize;
                let late = s.clients[i].late.take()?;
                let out = self.exec(&mut s, Op::Renew, late.token, late.mode);
                if let Some(note) = note {
                    let _ = write!(note, "{}", describe(Op::Renew, &out));
                }
                // The renewal task still awaits it only if the guard holds in that
                // mode; it gave up (lease lost) at the local deadline.
                if let Phase::Holding {
                    token,
                    mode,
                    until,
                    lost,
                    ..
                } = &mut s.clients[i].phase
                    && *token == late.token
                    && *mode == late.mode
                {
                    if out.reply == Reply::Int(1) && now < *until {
                        *until = late.sent + self.cfg.held_for(late.mode);
                    } else {
                        *lost = true;
                    }
                }
            }
            Action::Tick => self.advance(&mut s),
        }
        self.note_grantable(&mut s);
        Some(s)
    }

    /// Updates `grantable_since` of every waiter: would its acquire be granted now?
    fn note_grantable(&self, s: &mut State) {
        for i in 0..s.clients.len() {
            let c = s.clients[i];
            let grantable = match c.phase {
                Phase::Waiting {
                    token,
                    mode,
                    paused: false,
                    ..
                } if c.paused_until <= s.now && c.inflight.is_none() => {
                    let mut h = s.hash.clone();
                    let (p, now) = (&self.cfg.params, s.now);
                    let out = match mode {
                        Mode::Read => lua::acquire_read(&mut h, p, now, token, 1, true),
                        Mode::Write => lua::acquire_write(&mut h, p, now, token, 1, 1),
                    };
                    matches!(out.reply, Reply::Granted(_))
                }
                _ => false,
            };
            let since = &mut s.clients[i].grantable_since;
            *since = match (grantable, *since) {
                (false, _) => None,
                (true, None) => Some(s.now),
                (true, kept) => kept,
            };
        }
    }

    fn advance(&self, s: &mut State) {
        s.now += 1;
        s.unreplicated = None;
        for c in &mut s.clients {
            c.acted = false;
        }
    }

    /// One step as a line of a trace.
    pub fn describe_step(&self, last: &State, action: Action) -> String {
        let mut note = String::new();
        self.step(last, action, Some(&mut note));
        let who = |i: u8| self.cfg.name(i as usize);
        let what = match action {
            Action::Call(i, op, _) => format!("{} {}", who(i), op_name(op)),
            Action::Resend(i) => {
                let op = last.clients[i as usize].inflight.map(|f| f.op);
                format!("{} resends {}", who(i), op.map_or("?".into(), op_name))
            }
            Action::GiveUp(i) => format!("{} times out", who(i)),
            Action::Crash(i) => format!("{} crashes", who(i)),
            Action::Pause(i) => format!("{} pauses past its lease", who(i)),
            Action::LoseWakeup(i) => format!("a wake-up for {} is lost", who(i)),
            Action::Failover => "failover: the last script's writes are lost".into(),
            Action::Original(i) => who(i),
            Action::SendLateRenewal(i) => format!(
                "{}'s renewal task sends a renewal that will arrive late",
                who(i)
            ),
            Action::LateRenewalArrives(i) => format!("{}'s late renewal arrives", who(i)),
            Action::Tick => "time passes".into(),
        };
        if note.is_empty() {
            what
        } else {
            format!("{what}: {note}")
        }
    }

    /// A state as a few lines of a trace.
    pub fn describe_state(&self, s: &State) -> String {
        let mut out = format!("    t={}  {}\n", s.now, s.hash);
        for (bit, what) in [
            (FENCE_NOT_RISING, "a fencing token did not rise"),
            (
                STRAY_RELEASE_CHANGED,
                "a release by a non-owner changed the lock",
            ),
            (
                FENCED_WRITE_WENT_BACK,
                "a fenced write went back to a smaller fence",
            ),
            (
                WRITER_JUMPED_QUEUE,
                "a writer was granted ahead of the queue",
            ),
            (
                READER_PASSED_QUEUED_WRITER,
                "a new reader entered past a queued writer",
            ),
        ] {
            if s.violations & bit != 0 {
                let _ = writeln!(out, "    VIOLATION: {what}");
            }
        }
        for (i, c) in s.clients.iter().enumerate() {
            let name = self.cfg.name(i);
            let phase = match c.phase {
                Phase::Idle => "idle".to_owned(),
                Phase::Crashed => "crashed".to_owned(),
                Phase::Original {
                    mode,
                    stamp,
                    until,
                    collided,
                } => {
                    let note = if collided {
                        " (its stamp equals ours: invisible)"
                    } else {
                        ""
                    };
                    format!(
                        "holds {mode:?} (original design) with stamp {stamp} until t={until}{note}"
                    )
                }
                Phase::Waiting {
                    token,
                    mode,
                    since,
                    recheck_at,
                    ..
                } => format!(
                    "waits to {mode:?} as {token} since t={since}, re-checks at t={recheck_at}"
                ),
                Phase::Holding {
                    token,
                    mode,
                    until,
                    fence,
                    lost,
                    ..
                } => {
                    let belief = if c.believes(s.now).is_some() {
                        "believes it holds"
                    } else if lost {
                        "knows its lease is lost"
                    } else {
                        "its local deadline passed"
                    };
                    format!("holds {mode:?} as {token} until t={until} (fence {fence}): {belief}")
                }
            };
            let mut extra = String::new();
            if c.paused_until > s.now {
                let _ = write!(extra, ", paused until t={}", c.paused_until);
            }
            if c.woken {
                extra.push_str(", woken");
            }
            if let Some(f) = c.inflight {
                let _ = write!(extra, ", awaiting a resend of {}", op_name(f.op));
            }
            if let Some(late) = c.late {
                let _ = write!(
                    extra,
                    ", a {:?} renewal of {} sent at t={} on its way",
                    late.mode, late.token, late.sent
                );
            }
            let _ = writeln!(out, "    {name}: {phase}{extra}");
        }
        out
    }
}

fn op_name(op: Op) -> String {
    match op {
        Op::Acquire {
            mode: Mode::Read, ..
        } => "acquire_read".into(),
        Op::Acquire {
            mode: Mode::Write,
            wait: true,
        } => "acquire_write (queues)".into(),
        Op::Acquire {
            mode: Mode::Write,
            wait: false,
        } => "acquire_write (try)".into(),
        Op::Renew => "renew".into(),
        Op::Release => "release".into(),
        Op::Downgrade => "downgrade".into(),
        Op::FencedWrite => "fenced_write".into(),
    }
}

fn describe(op: Op, out: &Outcome) -> String {
    let reply = match (op, out.reply) {
        (_, Reply::Granted(0)) => "granted".to_owned(),
        (_, Reply::Granted(f)) => format!("granted, fence {f}"),
        (_, Reply::Refused(hint)) => format!("refused (retry in {hint})"),
        (Op::FencedWrite, Reply::Int(0)) => "rejected".to_owned(),
        (Op::FencedWrite, Reply::Int(f)) => format!("written with fence {f}"),
        (_, Reply::Int(n)) => format!("returns {n}"),
    };
    match out.published {
        Some(w) => format!("{reply}, publishes {w}"),
        None => reply,
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

impl Model for Lock {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let idle = Client {
            phase: Phase::Idle,
            inflight: None,
            late: None,
            paused_until: 0,
            woken: false,
            acquisitions: 0,
            acted: false,
            gave_up: false,
            grantable_since: None,
        };
        vec![State {
            now: 0,
            hash: Hash::default(),
            unreplicated: None,
            clients: vec![idle; self.cfg.all_clients() as usize],
            budget: self.cfg.faults,
            max_fence: 0,
            max_written: 0,
            violations: 0,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let mut calls = Vec::new();
        for (i, c) in s.clients.iter().enumerate() {
            let id = i as u8;
            if c.phase == Phase::Crashed {
                continue;
            }
            if self.cfg.original(i).is_some() {
                let idle = c.phase == Phase::Idle && c.acquisitions < self.cfg.acquisitions;
                if !c.acted && (idle || matches!(c.phase, Phase::Original { .. })) {
                    actions.push(Action::Original(id));
                }
                if s.budget.crashes > 0 && c.phase != Phase::Idle {
                    actions.push(Action::Crash(id));
                }
                continue;
            }
            if c.paused_until <= s.now && !c.acted {
                if c.inflight.is_some() {
                    actions.push(Action::Resend(id));
                } else {
                    calls.clear();
                    self.calls(s, i, &mut calls);
                    for &op in &calls {
                        actions.push(Action::Call(id, op, false));
                        if s.budget.lost_replies > 0 {
                            actions.push(Action::Call(id, op, true));
                        }
                    }
                    if let Phase::Waiting { since, .. } = c.phase
                        && self.timed_out(s, since)
                    {
                        actions.push(Action::GiveUp(id));
                    }
                }
            }
            if s.budget.crashes > 0 && (c.phase != Phase::Idle || c.inflight.is_some()) {
                actions.push(Action::Crash(id));
            }
            let busy = matches!(c.phase, Phase::Waiting { .. } | Phase::Holding { .. });
            if s.budget.pauses > 0 && busy && c.paused_until <= s.now {
                actions.push(Action::Pause(id));
            }
            if s.budget.lost_messages > 0 && c.woken {
                actions.push(Action::LoseWakeup(id));
            }
            if c.late.is_some() {
                actions.push(Action::LateRenewalArrives(id));
            } else if s.budget.late_renewals > 0
                && c.paused_until <= s.now
                && c.inflight.is_none()
                && matches!(c.phase, Phase::Holding { .. })
                && c.believes(s.now).is_some()
            {
                actions.push(Action::SendLateRenewal(id));
            }
        }
        if s.now < self.cfg.horizon {
            if s.budget.failovers > 0 && s.unreplicated.is_some() {
                actions.push(Action::Failover);
            }
            if !s.clients.iter().any(|c| self.owes_step(s, c)) {
                actions.push(Action::Tick);
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let next = self.step(last, action, None)?;
        // Steps that change nothing (a renewal that renews to the same deadline, a
        // lost wake-up nobody would have used) are not new states.
        (next != *last).then(|| self.canonical(&next).0)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut props = vec![
            Property::always("fencing tokens strictly increase", |_: &Lock, s: &State| {
                s.violations & FENCE_NOT_RISING == 0
            }),
            Property::always(
                "a release by a non-owner changes nothing",
                |_: &Lock, s: &State| s.violations & STRAY_RELEASE_CHANGED == 0,
            ),
            Property::always(
                "fenced writes never go back to a smaller fence",
                |_: &Lock, s: &State| s.violations & FENCED_WRITE_WENT_BACK == 0,
            ),
            Property::always(
                "writers are served in arrival order",
                |_: &Lock, s: &State| s.violations & WRITER_JUMPED_QUEUE == 0,
            ),
            Property::always(
                "no new reader enters while a writer is queued",
                |_: &Lock, s: &State| s.violations & READER_PASSED_QUEUED_WRITER == 0,
            ),
            Property::always(
                "readers and queue_until summarise their entries",
                |_: &Lock, s: &State| s.hash.summaries_agree(),
            ),
            Property::sometimes("a writer holds", |_: &Lock, s: &State| {
                s.clients
                    .iter()
                    .any(|c| c.believes(s.now) == Some(Mode::Write))
            }),
            Property::sometimes("two readers hold at once", |_: &Lock, s: &State| {
                s.clients
                    .iter()
                    .filter(|c| c.believes(s.now) == Some(Mode::Read))
                    .count()
                    >= 2
            }),
            Property::sometimes(
                "a writer waits while another holds",
                |_: &Lock, s: &State| {
                    let waiting = s.clients.iter().any(|c| {
                        matches!(
                            c.phase,
                            Phase::Waiting {
                                mode: Mode::Write,
                                ..
                            }
                        )
                    });
                    waiting && s.clients.iter().any(|c| c.believes(s.now).is_some())
                },
            ),
            Property::sometimes(
                "a reader waits behind a queued writer",
                |_: &Lock, s: &State| {
                    let queued = s
                        .hash
                        .fields
                        .keys()
                        .any(|f| matches!(f, lua::Field::Wait(_)));
                    let writer = s
                        .clients
                        .iter()
                        .any(|c| c.believes(s.now) == Some(Mode::Write));
                    queued
                        && !writer
                        && s.clients.iter().any(|c| {
                            matches!(
                                c.phase,
                                Phase::Waiting {
                                    mode: Mode::Read,
                                    ..
                                }
                            )
                        })
                },
            ),
            Property::sometimes(
                "a holder learns its lease is lost",
                |_: &Lock, s: &State| {
                    s.clients
                        .iter()
                        .any(|c| matches!(c.phase, Phase::Holding { lost: true, .. }))
                },
            ),
        ];
        props.push(Property::sometimes(
            "two writers believe they hold (exclusion lost)",
            |_: &Lock, s: &State| {
                s.clients
                    .iter()
                    .filter(|c| c.believes(s.now) == Some(Mode::Write))
                    .count()
                    >= 2
            },
        ));
        props.push(Property::sometimes(
            "an original-design client holds",
            |_: &Lock, s: &State| {
                s.clients.iter().any(|c| {
                    matches!(c.phase, Phase::Original { .. }) && c.believes(s.now).is_some()
                })
            },
        ));
        props.push(Property::sometimes(
            "one of ours and an original-design client read together",
            |_: &Lock, s: &State| {
                let theirs = s.clients.iter().any(|c| {
                    matches!(
                        c.phase,
                        Phase::Original {
                            mode: Mode::Read,
                            ..
                        }
                    ) && c.believes(s.now).is_some()
                });
                theirs
                    && s.clients.iter().any(|c| {
                        matches!(c.phase, Phase::Holding { .. })
                            && c.believes(s.now) == Some(Mode::Read)
                    })
            },
        ));
        props.push(Property::sometimes(
            "a waiter gives up",
            |_: &Lock, s: &State| s.clients.iter().any(|c| c.gave_up),
        ));
        props.push(Property::sometimes(
            "a fenced write is accepted",
            |_: &Lock, s: &State| s.max_written > 0,
        ));
        // Examples the configuration asks for; the checker fails if one is unreachable.
        props.retain(|p| {
            p.expectation != stateright::Expectation::Sometimes
                || self.cfg.examples.contains(&p.name)
        });
        if self.cfg.exclusion {
            props.push(Property::always(
                "no writer beside another believed hold",
                |m: &Lock, s: &State| exclusion_holds(m, s),
            ));
        }
        props.push(Property::always(
            "no waiter stays refused longer than a re-check period once it could go",
            |m: &Lock, s: &State| {
                s.clients.iter().all(|c| {
                    c.grantable_since
                        .is_none_or(|since| s.now - since <= m.cfg.recheck.1)
                })
            },
        ));
        if self.cfg.wait_bound.is_some() {
            props.push(Property::always(
                "every waiter is served within the wait bound",
                |m: &Lock, s: &State| waits_bounded(m, s),
            ));
        }
        props
    }
}

fn exclusion_holds(_: &Lock, s: &State) -> bool {
    let beliefs: Vec<Mode> = s.clients.iter().filter_map(|c| c.believes(s.now)).collect();
    beliefs.len() < 2 || !beliefs.contains(&Mode::Write)
}

fn waits_bounded(m: &Lock, s: &State) -> bool {
    let Some(bound) = m.cfg.wait_bound else {
        return true;
    };
    s.clients.iter().all(|c| match c.phase {
        Phase::Waiting {
            since,
            mode,
            paused: false,
            ..
        } if mode == Mode::Write || !m.cfg.bound_writers_only => s.now - since <= bound,
        _ => true,
    })
}

/// A release by a token that never held anything (`X.0`), run on a copy of `s`,
/// leaves the live state as it was: only expired entries may go.
fn stray_release_is_noop(m: &Lock, s: &State) -> bool {
    let p = &m.cfg.params;
    let token = Tok {
        client: lua::OUTSIDER,
        generation: 0,
    };
    let mut h = s.hash.clone();
    let before = lua::live_view(&h, p, s.now);
    let out = lua::release(&mut h, p, s.now, token);
    out.reply == Reply::Int(0) && lua::live_view(&h, p, s.now) == before
}

// ---- symmetry ---------------------------------------------------------------------

/// A renaming of clients: `perm[i]` is the new index of client `i` (readers map to
/// readers, writers to writers).
type Perm = Vec<usize>;

impl Lock {
    /// Every renaming that keeps roles.
    fn perms(&self) -> Vec<Perm> {
        fn all(items: &[usize]) -> Vec<Vec<usize>> {
            if items.len() <= 1 {
                return vec![items.to_vec()];
            }
            let mut out = Vec::new();
            for i in 0..items.len() {
                let mut rest = items.to_vec();
                let first = rest.remove(i);
                for mut tail in all(&rest) {
                    tail.insert(0, first);
                    out.push(tail);
                }
            }
            out
        }
        let r = self.cfg.readers as usize;
        let n = self.cfg.clients() as usize;
        let readers: Vec<usize> = (0..r).collect();
        let writers: Vec<usize> = (r..n).collect();
        let originals: Vec<usize> = (n..self.cfg.all_clients() as usize).collect();
        let mut out = Vec::new();
        for pr in all(&readers) {
            for pw in all(&writers) {
                out.push(pr.iter().chain(&pw).chain(&originals).copied().collect());
            }
        }
        out
    }

    fn rename_tok(&self, perm: &Perm, t: Tok) -> Tok {
        if t.client == lua::OUTSIDER {
            return t;
        }
        let r = self.cfg.readers;
        let index = if t.client >= 100 {
            (t.client - 100 + r) as usize
        } else {
            t.client as usize
        };
        Tok {
            client: self.cfg.id(perm[index]),
            generation: t.generation,
        }
    }

    fn rename_hash(&self, perm: &Perm, h: &Hash) -> Hash {
        let fields = h
            .fields
            .iter()
            .map(|(&field, &value)| {
                let field = match field {
                    lua::Field::R(t) => lua::Field::R(self.rename_tok(perm, t)),
                    lua::Field::Wait(t) => lua::Field::Wait(self.rename_tok(perm, t)),
                    other => other,
                };
                let value = match value {
                    lua::Val::Tok(t) => lua::Val::Tok(self.rename_tok(perm, t)),
                    other => other,
                };
                (field, value)
            })
            .collect();
        Hash {
            fields,
            expires: h.expires,
        }
    }

    fn rename(&self, perm: &Perm, s: &State) -> State {
        let mut out = s.clone();
        out.hash = self.rename_hash(perm, &s.hash);
        out.unreplicated = s.unreplicated.as_ref().map(|h| self.rename_hash(perm, h));
        for (i, c) in s.clients.iter().enumerate() {
            let mut c = *c;
            match &mut c.phase {
                Phase::Waiting { token, .. } | Phase::Holding { token, .. } => {
                    *token = self.rename_tok(perm, *token);
                }
                _ => {}
            }
            if let Some(f) = &mut c.inflight {
                f.token = self.rename_tok(perm, f.token);
            }
            if let Some(late) = &mut c.late {
                late.token = self.rename_tok(perm, late.token);
            }
            out.clients[perm[i]] = c;
        }
        out
    }

    /// The least renaming of `s` (states equal up to renaming are explored once),
    /// and the renaming that gives it.
    pub fn canonical(&self, s: &State) -> (State, Perm) {
        let mut best: Option<(State, Perm)> = None;
        for perm in self.perms() {
            let renamed = self.rename(&perm, s);
            if best.as_ref().is_none_or(|(b, _)| renamed < *b) {
                best = Some((renamed, perm));
            }
        }
        best.unwrap_or_else(|| (s.clone(), Vec::new()))
    }

    /// A checker path (of canonical states) as a readable trace with stable names:
    /// replays it on concrete states, renaming each action back.
    pub fn trace(&self, path: &[(State, Option<Action>)]) -> String {
        let Some((first, _)) = path.first() else {
            return String::new();
        };
        let n = self.cfg.all_clients() as usize;
        // `to_concrete[i]`: the concrete index of canonical client `i`.
        let mut to_concrete: Vec<usize> = (0..n).collect();
        let mut concrete = first.clone();
        let mut out = self.describe_state(&concrete);
        for (k, (_, action)) in path.iter().enumerate() {
            let Some(action) = *action else { break };
            let map = |i: u8| to_concrete[i as usize] as u8;
            let action = match action {
                Action::Call(i, op, lost) => Action::Call(map(i), op, lost),
                Action::Resend(i) => Action::Resend(map(i)),
                Action::GiveUp(i) => Action::GiveUp(map(i)),
                Action::Crash(i) => Action::Crash(map(i)),
                Action::Pause(i) => Action::Pause(map(i)),
                Action::LoseWakeup(i) => Action::LoseWakeup(map(i)),
                Action::Original(i) => Action::Original(map(i)),
                Action::SendLateRenewal(i) => Action::SendLateRenewal(map(i)),
                Action::LateRenewalArrives(i) => Action::LateRenewalArrives(map(i)),
                other => other,
            };
            let _ = writeln!(
                out,
                "{:>3}. {}",
                k + 1,
                self.describe_step(&concrete, action)
            );
            let Some(next) = self.step(&concrete, action, None) else {
                out.push_str("    (the step does not replay)\n");
                break;
            };
            // canonical(next) = perm(next): concrete client j is canonical perm[j].
            let (_, perm) = self.canonical(&next);
            for (j, &p) in perm.iter().enumerate() {
                to_concrete[p] = j;
            }
            concrete = next;
            out.push_str(&self.describe_state(&concrete));
        }
        out
    }
}

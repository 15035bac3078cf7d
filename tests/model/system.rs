//! The lock as a whole: one Redis hash, the clients that run the scripts on it (as
//! `src/lock/waiting.rs` and `src/guard/lease.rs` drive them) and the environment's faults.
//!
//! Time moves in ticks (`Tick`); every script runs atomically at the current tick,
//! as on the server. A client's local deadline is `sent + lease` like the crate's
//! (`Lease::start(.., sent)`): the tick at which it sent the request that granted or
//! renewed the hold, so a resent request keeps the first send time.
//!
//! Fairness is built into when time may pass: `Tick` is disabled while an unpaused
//! client owes a step (its re-check timer fired, its wait timed out, the driver must
//! resend a lost request, or the application has held longer than `max_hold`).

use std::fmt;

use stateright::{Model, Property};

use super::lua::{Hash, Params, Time, Tok};

/// Read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    Read,
    Write,
}

/// What an acquire asks for (`Access` in src/protocol/mod.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Access {
    Read,
    Write,
    /// A read hold that excludes other upgradable ones and may become the write hold.
    UpgradableRead,
    /// The upgradable hold's holder asks for the write hold (acquire_write with
    /// `upgrade`, the same token).
    Upgrade,
}

impl Access {
    pub fn mode(self) -> Mode {
        match self {
            Access::Read | Access::UpgradableRead => Mode::Read,
            Access::Write | Access::Upgrade => Mode::Write,
        }
    }
}

/// A script call as a client makes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// `read()`, `write()`, `upgradable_read()`, `upgrade()` when `wait`; their
    /// `try_` forms otherwise.
    Acquire {
        access: Access,
        wait: bool,
    },
    Renew,
    Release,
    /// A write hold to a read hold, or an upgradable hold to a plain one (by the
    /// hold's mode).
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
    /// A reply is lost; the driver resends the same script with the same token
    /// (whose reply may be lost again, from the same budget).
    pub lost_replies: u8,
    /// After a lost reply the caller gets an error instead (the driver gave up, or
    /// did not resend): the script ran once or more, and the caller does not know.
    pub errors: u8,
    /// An operator ends every hold (`force_release`).
    pub forced_releases: u8,
    /// A wake-up message is lost (pub/sub is at-most-once).
    pub lost_messages: u8,
    /// The master fails and the promoted replica lacks the last script's writes.
    pub failovers: u8,
    /// A renewal the renewal task sent reaches the server late (a driver retry, a
    /// slow node): at any later tick, also after the guard moved on (downgraded,
    /// released) and its renewal task was stopped.
    pub late_renewals: u8,
    /// A listening process's subscription goes silent for good (a middlebox drops
    /// what the server sends on it, with no reset): every later message to it is
    /// lost, while its scripts' replies still arrive.
    pub silenced: u8,
    /// The application drops every handle of a process that keeps its read hold
    /// idle (`LockClient`'s last handle).
    pub dropped_clients: u8,
}

/// What the checker explores.
#[derive(Clone, Debug)]
pub struct Config {
    pub name: &'static str,
    pub readers: u8,
    pub writers: u8,
    /// Clients that take upgradable read holds, then release, downgrade or upgrade
    /// them (numbered after the readers and writers).
    pub upgraders: u8,
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
    /// Read leases per client (by index), for holders whose leases differ; a client
    /// past the end takes `read_lease`.
    pub read_leases: Vec<Time>,
    /// The first reader reads recursively (`read_recursive`): it ignores the line
    /// (waits only for a writer that holds) and never waits in it.
    pub recursive_reader: bool,
    /// `INTENT_TTL` of src/lock/waiting.rs.
    pub intent_ttl: Time,
    /// `MIN_RECHECK`, `MAX_RECHECK`: the re-check timer is the retry hint clamped to these.
    pub recheck: (Time, Time),
    /// The application ends every hold within this many ticks of acquiring it (with
    /// shared reads, of the newest share's start).
    pub max_hold: Time,
    /// Shared reads (src/lock/shared_reads/): each reader is a process whose tasks may
    /// join its plain read hold, this many times over the run; a join needs no
    /// script, and the hold lasts until the newest share ends. 0: no sharing.
    pub shares: u8,
    /// A process's tasks join its read hold only within this many ticks of sending
    /// the hold's last acquire or renewal that the server answered (the client's
    /// `JOIN_TRUST`, src/guard/lease.rs). A forced release's fence
    /// (`Params::forced_fence`) at least this long keeps every such join away from
    /// the next writer.
    pub trust: Time,
    /// Kept reads: after its last share a reader process may keep the hold idle for
    /// up to this many ticks, until a writer calls it back.
    pub keep: Option<Time>,
    /// `wait_timeout` (None: wait without limit).
    pub wait_timeout: Option<Time>,
    /// Acquisitions per client over the run (re-arrivals), at most one per tick.
    pub acquisitions: u8,
    /// The last tick explored.
    pub horizon: Time,
    /// The `try_` forms too: `try_write()`, `try_upgradable_read()`, `try_upgrade()`.
    pub try_ops: bool,
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
    /// Client `i`'s lease in `mode` (its lock's options).
    pub(super) fn lease(&self, i: usize, mode: Mode) -> Time {
        match mode {
            Mode::Read => self.read_leases.get(i).copied().unwrap_or(self.read_lease),
            Mode::Write => self.write_lease,
        }
    }

    /// How long client `i` believes a hold after sending the request that granted
    /// or renewed it (`RwLock::held_for`): the lease, cut to the original clients'
    /// timeout for the stamp they judge that mode by, since after it they may enter.
    pub(super) fn held_for(&self, i: usize, mode: Mode) -> Time {
        let original = match mode {
            Mode::Read => self.params.original_read,
            Mode::Write => self.params.original_write,
        };
        self.lease(i, mode).min(original)
    }

    /// How long a hold handed over by another script (a write hold, or a batch's
    /// read grant) counts from the waiter's last refused attempt (`handed_lease` in
    /// src/lock/waiting.rs).
    pub(super) fn handed_lease(&self, i: usize, mode: Mode) -> Time {
        self.held_for(i, mode).min(self.intent_ttl)
    }

    /// Whether client `i` reads recursively (ignores the line).
    pub(super) fn recursive(&self, i: usize) -> bool {
        self.recursive_reader && i == 0 && self.readers > 0
    }

    pub(super) fn clients(&self) -> u8 {
        self.readers + self.writers + self.upgraders
    }

    pub(super) fn all_clients(&self) -> u8 {
        self.clients() + self.original_readers + self.original_writers
    }

    /// The mode of original client `i` (`None`: one of ours).
    pub(super) fn original(&self, i: usize) -> Option<Mode> {
        let first = self.clients() as usize;
        if i < first {
            None
        } else if i < first + self.original_readers as usize {
            Some(Mode::Read)
        } else {
            Some(Mode::Write)
        }
    }

    /// R1, W1, U1 (ours), OR1, OW1 (original design).
    pub(super) fn name(&self, i: usize) -> String {
        let first = self.clients() as usize;
        match self.original(i) {
            None => super::client_name(self.id(i)),
            Some(Mode::Read) => format!("OR{}", i - first + 1),
            Some(Mode::Write) => format!("OW{}", i - first - self.original_readers as usize + 1),
        }
    }

    /// Client number `i` as tokens carry it: readers 0.., writers 100.., upgraders
    /// 200.. (so tokens print as R1.0, W1.0, U1.0; see `client_name`).
    pub(super) fn id(&self, i: usize) -> u8 {
        let i = i as u8;
        if i < self.readers {
            i
        } else if i < self.readers + self.writers {
            100 + i - self.readers
        } else {
            200 + i - self.readers - self.writers
        }
    }

    /// The index of the client a token's number names (the inverse of `id`).
    pub(super) fn index(&self, client: u8) -> usize {
        let index = if client >= 200 {
            client - 200 + self.readers + self.writers
        } else if client >= 100 {
            client - 100 + self.readers
        } else {
            client
        };
        index as usize
    }

    /// What client `i` acquires when idle.
    pub(super) fn role(&self, i: usize) -> Access {
        let i = i as u8;
        if i < self.readers {
            Access::Read
        } else if i < self.readers + self.writers {
            Access::Write
        } else {
            Access::UpgradableRead
        }
    }
}

/// A refused acquire (or upgrade) that waits for a wake-up or its re-check timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Wait {
    pub since: Time,
    pub recheck_at: Time,
    /// Was paused while waiting (exempt from the wait bound: it may lose its place).
    pub paused: bool,
    /// When its last refused attempt was sent, and the fence that refusal saw
    /// (`refused` in src/lock/waiting.rs): a hand-over with a larger fence came after it.
    pub refused_sent: Time,
    pub refused_fence: i64,
    /// The batch a waiting plain reader waits in (its last refusal named it).
    pub batch: Option<Tok>,
}

/// What an upgradable read hold has besides the read hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Upgradable {
    /// The largest fencing token issued when the client took the grant: its upgrade
    /// must be the next write grant.
    pub after: i64,
    /// `upgrade()` waits (was refused): the read hold goes on (renewed, believed)
    /// beside it.
    pub upgrading: Option<Wait>,
}

/// Where a client is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    Idle,
    /// Refused, waiting for a wake-up or its re-check timer (`access` is not
    /// `Upgrade`: an upgrade waits in `Holding`).
    Waiting {
        token: Tok,
        access: Access,
        wait: Wait,
    },
    Holding {
        token: Tok,
        mode: Mode,
        since: Time,
        /// The local deadline (`sent + lease`).
        until: Time,
        fence: i64,
        /// A renewal, downgrade, fenced write or upgrade found the hold gone.
        lost: bool,
        /// An upgradable read hold.
        upgradable: Option<Upgradable>,
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
    /// A hand-over message naming its token arrived (the fence it carries), not yet
    /// taken.
    pub handed: Option<i64>,
    pub acquisitions: u8,
    /// Already made a request this tick (one request per client per tick).
    pub acted: bool,
    /// Has given up waiting (`wait_timeout`) at least once.
    pub gave_up: bool,
    /// Since when the client has been waiting although its acquire would be granted.
    pub grantable_since: Option<Time>,
    /// Its hold was ended by a forced release: it may believe until it learns (at
    /// its next renewal, downgrade, upgrade or fenced write), but none of those may
    /// succeed, and its belief does not count for exclusion.
    pub evicted: bool,
    /// It crashed while it waited (or held a write hold, or a share of a batch's
    /// grant): its token, and when what it left in the hash stops blocking others
    /// ([`lua::Hash::waiter_bound`]).
    pub dead: Option<(Tok, Time)>,
    /// Local shares that joined its read holds so far (`Config::shares`).
    pub joins: u8,
    /// Its read hold listens for call-backs (it was shared, or kept).
    pub listening: bool,
    /// A call-back (`w`) arrived and was not taken yet.
    pub recall: bool,
    /// It took a call-back for its read hold: no share joins that hold any more,
    /// and a kept hold goes.
    pub called_back: bool,
    /// Its read hold is kept idle (no share) until this tick.
    pub kept_until: Option<Time>,
    /// Its subscription is silent (`Faults::silenced`): no message reaches it.
    pub silent: bool,
    /// A forced release's message (`x`) arrived and was not taken yet.
    pub eviction_notice: bool,
    /// It took a forced release's message while it held.
    pub told_evicted: bool,
    /// The application dropped its last handle of the process at this tick.
    pub dropped_at: Option<Time>,
}

/// Violations recorded when they happen (bits of `State::violations`).
pub const FENCE_NOT_RISING: u16 = 1;
pub const STRAY_RELEASE_CHANGED: u16 = 2;
pub const FENCED_WRITE_WENT_BACK: u16 = 4;
pub const WRITER_JUMPED_QUEUE: u16 = 8;
pub const READER_PASSED_WAITING_WRITER: u16 = 16;
pub const WRITER_BEFORE_UPGRADE: u16 = 32;
pub const HANDED_PAST_PLACE: u16 = 64;
pub const EVICTED_CAME_BACK: u16 = 128;
/// A task joined a read hold after its process took the forced release's message.
pub const JOINED_AFTER_EVICTION: u16 = 256;
/// A write hold's downgrade let its client's reads that came after a writer queued
/// (one that still waits in line) join the read hold it kept.
pub const READ_PASSED_QUEUED_WRITER: u16 = 512;
/// A write hold's downgrade kept back its client's reads that came before every
/// writer that waits in line queued (the line's head is such a writer's place).
pub const READS_HELD_BACK: u16 = 1024;
/// A task joined a read hold that a forced release had ended while a writer that
/// no forced release ended held (its process had not heard of the release yet).
pub const JOINED_BESIDE_WRITER: u16 = 2048;

/// Events a configuration's examples ask to reach (bits of `State::events`, kept
/// only when the configuration names the example, so as not to split states).
pub const DOWNGRADED_AHEAD_OF_WRITER: u8 = 1;

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
    pub violations: u16,
    /// When each entry in the line joined it, first in line first: the checker's
    /// own record, from the line's links and the count of entries each script took
    /// out at the head (a writer's `wq:` must agree).
    pub queued_at: Vec<(Tok, Time)>,
    pub events: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    /// Client runs a script; with `lose_reply` the script runs but the reply is lost.
    Call(u8, Op, bool),
    /// The driver resends the request whose reply was lost (that reply lost again
    /// when true).
    Resend(u8, bool),
    /// The request whose reply was lost ends with an error to the caller.
    Fail(u8),
    /// An operator runs `force_release`.
    ForceRelease,
    /// `wait_timeout` passed: the acquire gives up and withdraws its token (an
    /// upgrade: releases the upgradable hold).
    GiveUp(u8),
    Crash(u8),
    Pause(u8),
    LoseWakeup(u8),
    /// A waiter takes the hand-over message that arrived for it.
    TakeHanded(u8),
    /// A reader process takes the call-back that arrived for its read hold.
    TakeRecall(u8),
    /// Another task of a reader process joins its read hold (no script).
    Join(u8),
    /// A reader process whose last share ended keeps its hold idle.
    Keep(u8),
    /// A listening process's subscription goes silent for good.
    Silence(u8),
    /// A process takes the forced release's message that arrived for it.
    TakeEviction(u8),
    /// The application drops every handle of a process that keeps its hold idle.
    DropClient(u8),
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
    pub(super) fn believes(&self, now: Time) -> Option<Mode> {
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

    pub(super) fn token(&self) -> Option<Tok> {
        match self.phase {
            Phase::Waiting { token, .. } | Phase::Holding { token, .. } => Some(token),
            _ => self.inflight.map(|i| i.token),
        }
    }

    /// The wait of a refused acquire or upgrade, if it waits.
    pub(super) fn wait(&self) -> Option<Wait> {
        match self.phase {
            Phase::Waiting { wait, .. }
            | Phase::Holding {
                upgradable:
                    Some(Upgradable {
                        upgrading: Some(wait),
                        ..
                    }),
                ..
            } => Some(wait),
            _ => None,
        }
    }

    pub(super) fn wait_mut(&mut self) -> Option<&mut Wait> {
        match &mut self.phase {
            Phase::Waiting { wait, .. }
            | Phase::Holding {
                upgradable:
                    Some(Upgradable {
                        upgrading: Some(wait),
                        ..
                    }),
                ..
            } => Some(wait),
            _ => None,
        }
    }

    /// Believes it holds, and no forced release ended that hold.
    pub(super) fn believes_unevicted(&self, now: Time) -> Option<Mode> {
        self.believes(now).filter(|_| !self.evicted)
    }

    /// Holds an upgradable read hold it believes in.
    pub(super) fn believes_upgradable(&self, now: Time) -> bool {
        matches!(
            self.phase,
            Phase::Holding {
                upgradable: Some(_),
                ..
            }
        ) && self.believes(now).is_some()
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

impl Lock {
    /// A read renewal of a client whose upgrade waits: the renewal task runs beside
    /// the upgrade's attempts (src/guard/lease.rs), so it takes no turn from them.
    pub(super) fn beside_the_upgrade(c: &Client, op: Op) -> bool {
        op == Op::Renew && matches!(c.phase, Phase::Holding { .. }) && c.wait().is_some()
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
            handed: None,
            acquisitions: 0,
            acted: false,
            gave_up: false,
            grantable_since: None,
            evicted: false,
            dead: None,
            joins: 0,
            listening: false,
            recall: false,
            called_back: false,
            kept_until: None,
            silent: false,
            eviction_notice: false,
            told_evicted: false,
            dropped_at: None,
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
            queued_at: Vec::new(),
            events: 0,
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
            if c.paused_until <= s.now && c.inflight.is_some() && !c.acted {
                actions.push(Action::Resend(id, false));
                if s.budget.lost_replies > 0 {
                    actions.push(Action::Resend(id, true));
                }
                if s.budget.errors > 0 {
                    actions.push(Action::Fail(id));
                }
            } else if c.paused_until <= s.now && c.inflight.is_none() {
                calls.clear();
                self.calls(s, i, &mut calls);
                for &op in &calls {
                    if c.acted && !Self::beside_the_upgrade(c, op) {
                        continue;
                    }
                    actions.push(Action::Call(id, op, false));
                    if s.budget.lost_replies > 0 {
                        actions.push(Action::Call(id, op, true));
                    }
                }
                if let Some(wait) = c.wait()
                    && self.timed_out(s, wait.since)
                    && !c.acted
                {
                    actions.push(Action::GiveUp(id));
                }
            }
            if s.budget.crashes > 0 && (c.phase != Phase::Idle || c.inflight.is_some()) {
                actions.push(Action::Crash(id));
            }
            let busy = matches!(c.phase, Phase::Waiting { .. } | Phase::Holding { .. });
            if s.budget.pauses > 0 && busy && c.paused_until <= s.now {
                actions.push(Action::Pause(id));
            }
            let message = c.woken || c.handed.is_some() || c.recall || c.eviction_notice;
            if s.budget.lost_messages > 0 && message {
                actions.push(Action::LoseWakeup(id));
            }
            if s.budget.silenced > 0 && c.listening && !c.silent {
                actions.push(Action::Silence(id));
            }
            if s.budget.dropped_clients > 0 && c.kept_until.is_some() && c.dropped_at.is_none() {
                actions.push(Action::DropClient(id));
            }
            if c.paused_until <= s.now {
                if c.recall {
                    actions.push(Action::TakeRecall(id));
                }
                if c.eviction_notice {
                    actions.push(Action::TakeEviction(id));
                }
                if self.may_join(s, i) {
                    actions.push(Action::Join(id));
                }
                if self.may_keep(s, i) {
                    actions.push(Action::Keep(id));
                }
            }
            if c.handed.is_some() && c.paused_until <= s.now && c.inflight.is_none() {
                actions.push(Action::TakeHanded(id));
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
            if s.budget.forced_releases > 0 {
                actions.push(Action::ForceRelease);
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
        self.all_properties()
    }
}

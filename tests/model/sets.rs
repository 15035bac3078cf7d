//! Lock sets: clients that each take several locks at once, some for reading, some
//! for writing, all or nothing, by the scripts of the engine: the per-lock acquire,
//! and `acquire_set` for members that share a cluster slot (see docs/PROTOCOL.md,
//! "Lock sets in the model").
//!
//! # What is modelled
//!
//! A few locks (one engine [`Hash`] each, the single-lock model's [`Params`], leases
//! and intent lifetimes), each in a cluster slot ([`SetConfig::slots`]; locks may
//! share one), and a few clients, each with a set of [`Member`]s listed in its own
//! order. A client ([`SetClient`]) takes its members in the global order (here: by
//! slot, then lock index; the crate orders by hash tag, then key, so the locks of
//! one slot come together). Its consecutive members in one slot form a group.
//!
//! A group of two or more is first asked for in one request: `engine::acquire_set`
//! over the group's hashes, with a fresh group token per member (`A.g1`: client
//! `A`'s group token for lock 1), each member in order as `acquire_read` (plain,
//! writer preference) or `acquire_write` would take it with no place in line; at the
//! first refusal the members it took are released again in the same call. Granted,
//! the client holds the whole group by the group tokens; refused, it holds none and
//! takes the group's members one by one (the crate's waiting `acquire`; its
//! `try_acquire` would fail here, and is not modelled). A group of one member, and
//! the members of a refused group, are taken by their own acquire, each with a
//! fresh token of its own (`A.1`: client `A`'s token for lock 1): a read member by
//! `acquire_read` with writer preference, not upgradable, with the intent lifetime;
//! a write member by `acquire_write` with the intent lifetime, no upgrade. A refused
//! member keeps its token and its place (a queued writer's place, or a reader's
//! place in a batch) and is attempted again once a tick (the re-check timer, one
//! tick here); a re-attempt whose place was handed the lock (a write hold, or its
//! batch's grant) is granted. A granted member is believed held until its
//! request's send plus its lease; a held member is renewed a tick before that
//! deadline (each by the token it holds by, group or own); once every member is
//! held the set holds for up to `max_hold` ticks, then releases its members one by
//! one, in any order. A client makes at most one script per member per tick
//! (releases and group requests aside: a refused group's first member is attempted
//! at once, as the crate does).
//!
//! Faults, each within a budget per run: a crash (the client stops for good: it
//! renews and re-attempts nothing, so what it holds and its places lapse with
//! time); a pause past every lease, after which the client goes on (a held member
//! whose deadline passed makes the set give up); a lost reply after the script ran,
//! after which the driver resends the same request with the same tokens (its reply
//! lost again from the same budget: a resent group request whose first call was
//! granted finds its holds, renews them and is granted again) or the set gives up;
//! a timeout (the set's wait limit, or a cancellation) at any waiting point. A set
//! that gives up releases every member it holds and withdraws the one it waits for
//! or whose reply it awaits (`release` with that token; after a lost group request,
//! every group token of the group), in any order. Time moves a tick at a time, up
//! to a horizon, and only once no live client owes a step (a due attempt or group
//! request, a due renewal, a resend, a release, a due release of a held set, a
//! give-up after a lapsed member).
//!
//! # Properties
//!
//! Always, in every reachable state:
//!
//! - **exclusion on every lock**: no live writer beside another live holder. A
//!   member counts while its client believes it (its local deadline not passed, no
//!   renewal found it gone), and every such belief must be live in the engine's
//!   live view of its lock ([`lua::live_view`]: leases count only while valid);
//!   that view itself never has a live writer beside a live reader.
//! - **no deadlock**: in every state where no client has crashed or is paused, if
//!   some client waits (its current member was refused), then some client can make
//!   progress now, judged at the state's own tick on copies of the hashes (the
//!   clock is not advanced: no lease or place may lapse first). A client can make
//!   progress when it holds all its members (it will release them), releases what
//!   it has (a finished set, or one that gave up), knows that a member lapsed (it
//!   will give up and release), or when its next request for its current member
//!   would be granted: its group's one request (a first one, or the resend of one
//!   whose reply was lost), else, or once that is refused, the member's own
//!   acquire (a first attempt, a re-attempt, or a resend). Live clients renew and
//!   re-attempt in time, so a state with a waiter and no such client stays as it
//!   is until some set gives up: a deadlock. States after a set gave up are
//!   checked too (a set that gave up releases, which is progress, and then holds
//!   nothing); only crashed and paused clients, whose holds end with time alone,
//!   exempt a state. Members taken in each client's own listed order fail it at
//!   once (two clients each holding what the other waits for, or a cycle through a
//!   writer queued ahead of a reader), and so does a refused group taken one by
//!   one in the listed order. In the global order a set that holds members only
//!   waits for a later lock (a group request never waits, and holds nothing once
//!   refused), so the chain of who blocks whom climbs the order and ends at a set
//!   that holds all its members, or at one whose attempt is granted (the scripts
//!   hand a free lock to the first entry in its line). A deadlock between some
//!   clients while another still progresses is found in the states after that one
//!   is done, as far as the horizon reaches. The property is an invariant rather
//!   than stateright's `eventually`, which checks only paths that end and has
//!   false negatives where paths join; the invariant is checked on every state,
//!   and its counterexample is a finite trace.
//! - **nothing stays held after a set fails**: once a client has given up and its
//!   releases have run, no lock has a hold (`w:owner`, an `r:` field), a place in
//!   line (`wait:`) or a batch membership (`rw:`) under any of its tokens (its own
//!   and its group tokens). Links of
//!   the line (`wn:`, `wq:`, `q:head`, `q:tail`) may still name a withdrawn token:
//!   the scripts skip such entries.
//! - **every lock is free at the end**: once every client has finished or given up
//!   and its releases have run, no lock has a live or counted hold, a batch member,
//!   or a live place in line.
//! - **all or none**: right after a group request (a first one or a resend, its
//!   reply taken or lost), every member of the group is held by its group token in
//!   the engine's live view, or no group token of the group has a hold, a place or
//!   a batch membership. Judged on the hashes by the step itself, which marks a
//!   state that breaks it ([`SetState::split_group`]).
//! - the engine's own invariants on every lock (its summaries, its line, what its
//!   fast paths take for granted).
//!
//! Sometimes (examples the checker must reach, when a configuration names them):
//! every client finishes its set although the orders differ; a set gives up while
//! it holds its first member and leaves nothing behind; a read member waits in a
//! batch behind a queued writer; a set completes after a client that held a member
//! crashed; a set whose member lapsed in a pause gives up and leaves nothing; a
//! lost reply to an attempt is resent and the set still completes; a group is
//! granted whole in one request; a group refused in one request is then taken one
//! by one; a resent group request grants again after its reply was lost (its first
//! call was granted), and the set completes.
//!
//! # Not modelled
//!
//! - Wake-up and hand-over messages: a waiter learns that its place was handed the
//!   lock by its next re-attempt, which the scripts grant (the crate's waiter may
//!   take a hand-over message instead and hold without a script, for the shorter
//!   lease the single-lock model checks).
//! - Read members that join a read hold their client already has (shared reads),
//!   in the crate joined first, with no request.
//! - Upgradable members, downgrades, the `try_` forms (a `try_acquire` whose group
//!   request is refused fails, holding nothing), original-design clients, replicas
//!   to wait for (the crate then takes a group one by one), failover and forced
//!   releases; a request delivered after its set gave up (as in the single-lock
//!   model).
//! - One set per client over the run, one fault of a kind (two lost replies), a
//!   few ticks; the order is by slot, then lock index (any total order that keeps
//!   the locks of one slot together serves the argument above; the crate's is by
//!   hash tag, then key).

use std::fmt::{self, Write as _};
use std::ops::Range;

use stateright::{Model, Property};

use super::ModelTok as _;
use super::lua::{self, Hash, Params, Reply, Time, Tok};
use super::system::Mode;
use super::tok;

/// One member of a set: a lock, by its index, and the mode the set takes it in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Member {
    pub mode: Mode,
    pub lock: u8,
}

impl Member {
    pub fn read(lock: u8) -> Member {
        Member {
            mode: Mode::Read,
            lock,
        }
    }

    pub fn write(lock: u8) -> Member {
        Member {
            mode: Mode::Write,
            lock,
        }
    }
}

impl fmt::Display for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = match self.mode {
            Mode::Read => 'R',
            Mode::Write => 'W',
        };
        write!(f, "{mode}{}", self.lock)
    }
}

/// Faults the environment may inject, as budgets for the whole run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SetFaults {
    /// A client stops for good; what it holds and its places lapse with time.
    pub crashes: u8,
    /// A client stops for longer than any lease, then goes on.
    pub pauses: u8,
    /// A script runs but its reply is lost: the driver resends the request (its reply
    /// lost again from the same budget), or the set gives up.
    pub lost_replies: u8,
    /// The set gives up while it waits: its wait limit passed, or it was cancelled.
    pub timeouts: u8,
}

/// What the checker explores.
#[derive(Clone, Debug)]
pub struct SetConfig {
    pub name: &'static str,
    /// One entry per lock (hash): its cluster slot. Locks that share a slot come
    /// together in the global order, and a client's consecutive members in one slot
    /// form a group, asked for in one request first.
    pub slots: Vec<u8>,
    /// Each client's set, as its user lists it (client `A` first).
    pub sets: Vec<Vec<Member>>,
    pub read_lease: Time,
    pub write_lease: Time,
    /// How long a refused member's place lives after each attempt.
    pub intent_ttl: Time,
    /// A set that holds all its members releases them within this many ticks.
    pub max_hold: Time,
    /// The last tick explored.
    pub horizon: Time,
    pub params: Params,
    pub faults: SetFaults,
    /// Names of the `sometimes` properties this configuration must reach.
    pub examples: Vec<&'static str>,
}

impl SetConfig {
    /// Client `c`'s members in the order it takes them: the global order, by slot,
    /// then by lock index (the crate's: by hash tag, then key).
    pub fn taking_order(&self, c: usize) -> Vec<Member> {
        let mut members = self.sets[c].clone();
        members.sort_by_key(|m| (self.slot(m.lock), m.lock));
        members
    }

    /// Lock `lock`'s cluster slot.
    pub fn slot(&self, lock: u8) -> u8 {
        self.slots[usize::from(lock)]
    }

    pub fn lease(&self, mode: Mode) -> Time {
        match mode {
            Mode::Read => self.read_lease,
            Mode::Write => self.write_lease,
        }
    }
}

/// What a client has of one member (in its taking order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Have {
    /// Not asked for yet: no token was sent.
    Untaken,
    /// Its token was sent and not granted yet (as far as the client knows): it waits
    /// in line, or its attempt's reply is awaited. `together`: asked for in its
    /// group's one request (by the group token), whose reply is awaited.
    Asked { together: bool },
    /// Granted: believed until `until` (the request's send plus the lease) unless a
    /// renewal found it `lost`. `together`: granted in its group's one request, so
    /// held by the group token.
    Held {
        until: Time,
        lost: bool,
        together: bool,
    },
    /// Released or withdrawn.
    Released,
}

impl Have {
    /// Its token may hold, or wait, in its lock: a set that ends releases it.
    fn pending(self) -> bool {
        matches!(self, Have::Asked { .. } | Have::Held { .. })
    }

    /// Its token is the one of its group's one request.
    fn together(self) -> bool {
        matches!(
            self,
            Have::Asked { together: true } | Have::Held { together: true, .. }
        )
    }
}

/// Where a client's set is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SetPhase {
    /// Taking its members in order: every one before the first not held is held.
    Taking,
    /// Holds every member since `since`.
    Holding {
        since: Time,
    },
    /// Releases what it holds or waits for: the set finished, or gave up.
    Releasing {
        gave_up: bool,
    },
    /// Every release ran.
    Finished {
        gave_up: bool,
    },
    Crashed,
}

/// A client's script on one member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SetOp {
    /// The per-lock acquire: a first attempt or a re-attempt with the same token.
    Attempt,
    /// The group's one request (`acquire_set`): every member of the group that
    /// starts at this member, all or none, with no place in line.
    AcquireSet,
    Renew,
    Release,
}

/// A request whose reply was lost: the driver may send it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InFlight {
    /// The member (the first of its group for [`SetOp::AcquireSet`]).
    pub member: u8,
    pub op: SetOp,
    /// The first send: a grant's or renewal's deadline counts from it.
    pub sent: Time,
}

/// One client and its set.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SetClient {
    pub phase: SetPhase,
    /// Its members' state, in taking order.
    pub members: Vec<Have>,
    pub inflight: Option<InFlight>,
    /// Takes no step before this tick.
    pub paused_until: Time,
    /// Bit `k`: member `k` ran a script this tick (its attempt or renewal).
    pub acted: u8,
    /// It gave up while it held its first member (an example's mark).
    pub gave_up_holding: bool,
    /// The driver resent an attempt whose reply was lost (an example's mark).
    pub resent: bool,
    /// Bit `k`: the one request of the group that starts at member `k` was refused,
    /// so its members are taken one by one.
    pub refused: u8,
    /// A resent group request found every member held by the lost one's grant and
    /// granted them again (an example's mark).
    pub regranted: bool,
}

impl SetClient {
    /// The member it takes next: the first one not held, while it takes its set.
    pub fn current(&self) -> Option<usize> {
        if self.phase != SetPhase::Taking {
            return None;
        }
        self.members
            .iter()
            .position(|have| !matches!(have, Have::Held { .. }))
    }

    /// Believes it holds member `k`: its set still holds, the deadline has not
    /// passed and no renewal found it gone.
    pub fn believes(&self, k: usize, now: Time) -> bool {
        let holds = matches!(self.phase, SetPhase::Taking | SetPhase::Holding { .. });
        holds && matches!(self.members[k], Have::Held { until, lost: false, .. } if now < until)
    }

    /// A member it holds is gone by its own knowledge (its deadline passed, or a
    /// renewal found it gone): the set must give up.
    pub fn lapsed(&self, now: Time) -> bool {
        let holds = matches!(self.phase, SetPhase::Taking | SetPhase::Holding { .. });
        holds
            && (0..self.members.len())
                .any(|k| matches!(self.members[k], Have::Held { .. }) && !self.believes(k, now))
    }

    /// Member `k`'s renewal is due: it is believed and would lapse at the next tick.
    fn renewal_due(&self, k: usize, now: Time) -> bool {
        let until = match self.members[k] {
            Have::Held { until, .. } => until,
            _ => return false,
        };
        self.believes(k, now) && until <= now + 1 && self.acted & (1 << k) == 0
    }

    fn alive(&self) -> bool {
        !matches!(self.phase, SetPhase::Finished { .. } | SetPhase::Crashed)
    }

    fn paused(&self, now: Time) -> bool {
        self.paused_until > now
    }

    /// The releasing set has nothing left to release: it is finished.
    fn finish_if_done(&mut self) {
        if let SetPhase::Releasing { gave_up } = self.phase
            && !self.members.iter().any(|have| have.pending())
        {
            self.phase = SetPhase::Finished { gave_up };
        }
    }
}

/// The locks and the clients.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SetState {
    pub now: Time,
    /// One hash per lock.
    pub locks: Vec<Hash>,
    pub clients: Vec<SetClient>,
    pub budget: SetFaults,
    /// A group request left its group neither all held nor all free (a history
    /// variable: set by the step that did it, never cleared).
    pub split_group: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SetAction {
    /// Client `client` runs `op` on its member `member` (the reply lost when
    /// `lose_reply`).
    Script {
        client: u8,
        member: u8,
        op: SetOp,
        lose_reply: bool,
    },
    /// The driver resends the request whose reply was lost (lost again when
    /// `lose_again`).
    Resend {
        client: u8,
        lose_again: bool,
    },
    /// The set gives up: a timeout while it waits, an error after a lost reply, or a
    /// member found lapsed.
    GiveUp(u8),
    Crash(u8),
    Pause(u8),
    Tick,
}

/// A group token's generation is this plus its lock's index (printed `A.g1`).
const GROUP: u64 = 100;

/// The model: a configuration and each client's taking order.
pub struct Sets {
    pub cfg: SetConfig,
    /// Each client's members in the order it takes them.
    pub order: Vec<Vec<Member>>,
    /// Each client's groups: for each member, the members (in taking order) of its
    /// group, the consecutive run of members in its slot.
    pub groups: Vec<Vec<Range<usize>>>,
}

impl Sets {
    pub fn new(cfg: SetConfig) -> Sets {
        let order: Vec<Vec<Member>> = (0..cfg.sets.len()).map(|c| cfg.taking_order(c)).collect();
        let groups = order
            .iter()
            .map(|members| {
                let slot = |k: usize| cfg.slot(members[k].lock);
                (0..members.len())
                    .map(|k| {
                        let start = (0..=k).rev().take_while(|&j| slot(j) == slot(k)).last();
                        let end = (k..members.len())
                            .take_while(|&j| slot(j) == slot(k))
                            .last();
                        start.unwrap_or(k)..end.unwrap_or(k) + 1
                    })
                    .collect()
            })
            .collect();
        Sets { cfg, order, groups }
    }

    /// Client `c`'s fresh token for its member `k` when taken by its own acquire:
    /// one per member, as the set gives.
    pub fn token(&self, c: usize, k: usize) -> Tok {
        tok(c as u8, u64::from(self.order[c][k].lock))
    }

    /// Client `c`'s fresh token for its member `k` in its group's one request (the
    /// crate draws new tokens for the members it takes one by one after a refusal).
    pub fn group_token(&self, c: usize, k: usize) -> Tok {
        tok(c as u8, GROUP + u64::from(self.order[c][k].lock))
    }

    /// The token client `c`'s member `k` is asked for or held by in state `s`.
    fn token_of(&self, s: &SetState, c: usize, k: usize) -> Tok {
        if s.clients[c].members[k].together() {
            self.group_token(c, k)
        } else {
            self.token(c, k)
        }
    }

    /// Client `c`'s next step on its current member `k` is its group's one request:
    /// `k` starts a group of two or more, none of it asked for yet, and that group's
    /// request was not refused.
    fn group_request_due(&self, client: &SetClient, c: usize, k: usize) -> bool {
        let group = &self.groups[c][k];
        group.len() > 1
            && group.start == k
            && client.refused & (1 << k) == 0
            && client.members[group.clone()]
                .iter()
                .all(|&have| have == Have::Untaken)
    }

    /// The per-lock acquire of a member, as the set makes it.
    fn attempt(&self, h: &mut Hash, now: Time, token: Tok, mode: Mode) -> lua::Outcome {
        let cfg = &self.cfg;
        let p = &cfg.params;
        let (writer_preferred, upgradable) = (true, false);
        match mode {
            Mode::Read => lua::acquire_read(
                h,
                p,
                now,
                token,
                cfg.read_lease,
                writer_preferred,
                upgradable,
                cfg.intent_ttl,
            ),
            Mode::Write => {
                let upgrade = false;
                lua::acquire_write(h, p, now, token, cfg.write_lease, cfg.intent_ttl, upgrade)
            }
        }
    }

    /// The one request of client `c`'s group that starts at member `g`, as the set
    /// makes it: `engine::acquire_set` over the group's hashes with its group tokens.
    fn acquire_set(&self, locks: &mut [Hash], now: Time, c: usize, g: usize) -> lua::SetOutcome {
        let cfg = &self.cfg;
        let members: Vec<lua::SetMember> = self.groups[c][g]
            .clone()
            .map(|k| lua::SetMember {
                hash: usize::from(self.order[c][k].lock),
                token: self.group_token(c, k),
                write: self.order[c][k].mode == Mode::Write,
            })
            .collect();
        let writer_preferred = true;
        lua::acquire_set(
            locks,
            &cfg.params,
            now,
            &members,
            writer_preferred,
            cfg.read_lease,
            cfg.write_lease,
        )
    }

    /// Runs `op` of client `c`'s member `k` on its lock (not the group request).
    fn run(&self, s: &mut SetState, c: usize, k: usize, op: SetOp) -> lua::Outcome {
        let member = self.order[c][k];
        let token = self.token_of(s, c, k);
        let now = s.now;
        let p = &self.cfg.params;
        let h = &mut s.locks[member.lock as usize];
        match op {
            SetOp::Attempt => self.attempt(h, now, token, member.mode),
            SetOp::Renew => {
                let lease = self.cfg.lease(member.mode);
                lua::renew(h, p, now, token, lease, member.mode == Mode::Write)
            }
            SetOp::Release => lua::release(h, p, now, token),
            SetOp::AcquireSet => unreachable!("the group request runs by acquire_set"),
        }
    }

    /// Would client `c`'s next request for its current member `k` be granted now
    /// (on copies)? Its group's one request (a first one, or the resend of one whose
    /// reply was lost) and, when that is refused, the member's own acquire after it;
    /// else the member's own acquire.
    fn would_be_granted(&self, s: &SetState, c: usize, k: usize) -> bool {
        let client = &s.clients[c];
        let mut locks = s.locks.clone();
        if client.members[k].together() || self.group_request_due(client, c, k) {
            let out = self.acquire_set(&mut locks, s.now, c, k);
            if matches!(out.reply, lua::SetReply::Granted(_)) {
                return true;
            }
        }
        let member = self.order[c][k];
        let h = &mut locks[usize::from(member.lock)];
        let out = self.attempt(h, s.now, self.token(c, k), member.mode);
        matches!(out.reply, Reply::Granted(_))
    }

    /// Once client `c` holds every member while it takes its set, it holds the set.
    fn holds_all(s: &mut SetState, c: usize) {
        let now = s.now;
        let client = &mut s.clients[c];
        if client.current().is_none() && client.phase == SetPhase::Taking {
            client.phase = SetPhase::Holding { since: now };
        }
    }

    /// Client `c` takes the reply to `request`, its script on member `k`.
    fn take_reply(&self, s: &mut SetState, c: usize, k: usize, request: InFlight, reply: Reply) {
        let lease = self.cfg.lease(self.order[c][k].mode);
        let sent = request.sent;
        let client = &mut s.clients[c];
        match (request.op, reply) {
            (SetOp::Attempt, Reply::Granted(_)) => {
                client.members[k] = Have::Held {
                    until: sent + lease,
                    lost: false,
                    together: false,
                };
                Self::holds_all(s, c);
            }
            // Refused: it waits in line with its token.
            (SetOp::Attempt, _) => {}
            (SetOp::Renew, reply) => {
                if let Have::Held { until, lost, .. } = &mut client.members[k] {
                    if matches!(reply, Reply::Int(1..)) {
                        *until = (*until).max(sent + lease);
                    } else {
                        *lost = true;
                    }
                }
            }
            (SetOp::Release, _) => {
                client.members[k] = Have::Released;
                client.finish_if_done();
            }
            (SetOp::AcquireSet, _) => unreachable!("a group request's reply is a set reply"),
        }
    }

    /// Client `c` takes the reply to its group request (the group that starts at
    /// member `g`): every member held, or none, and then one by one.
    fn take_set_reply(
        &self,
        s: &mut SetState,
        c: usize,
        g: usize,
        sent: Time,
        reply: &lua::SetReply,
    ) {
        let client = &mut s.clients[c];
        for k in self.groups[c][g].clone() {
            client.members[k] = match reply {
                lua::SetReply::Granted(_) => Have::Held {
                    until: sent + self.cfg.lease(self.order[c][k].mode),
                    lost: false,
                    together: true,
                },
                lua::SetReply::Refused(..) => Have::Untaken,
            };
        }
        if matches!(reply, lua::SetReply::Refused(..)) {
            client.refused |= 1 << g;
        }
        Self::holds_all(s, c);
    }

    /// Every member of client `c`'s group that starts at `g` is held by its group
    /// token in the engine's live view of its lock.
    fn group_held(&self, s: &SetState, c: usize, g: usize) -> bool {
        self.groups[c][g].clone().all(|k| {
            let member = self.order[c][k];
            let token = self.group_token(c, k);
            let view = lua::live_view(&s.locks[usize::from(member.lock)], &self.cfg.params, s.now);
            match member.mode {
                Mode::Write => view.writer.is_some_and(|(owner, _)| owner == token),
                Mode::Read => view.readers.contains_key(&token),
            }
        })
    }

    /// Right after a group request: every member held by its group token, or none
    /// of them holding, waiting or in a batch (else `split_group` is set).
    fn judge_group(&self, s: &mut SetState, c: usize, g: usize) {
        let none = self.groups[c][g].clone().all(|k| {
            let lock = usize::from(self.order[c][k].lock);
            !Self::leaves_something(&s.locks[lock], self.group_token(c, k))
        });
        if !none && !self.group_held(s, c, g) {
            s.split_group = true;
        }
    }

    /// Client `c` runs its group request (the group that starts at member `g`), or
    /// the driver resends it: the reply taken, or lost (`lose`, from the budget).
    fn group_request(
        &self,
        s: &mut SetState,
        c: usize,
        g: usize,
        sent: Time,
        lose: bool,
    ) -> String {
        let out = self.acquire_set(&mut s.locks, s.now, c, g);
        let note = self.describe_set_reply(c, g, &out);
        if lose {
            s.budget.lost_replies -= 1;
            s.clients[c].inflight = Some(InFlight {
                member: g as u8,
                op: SetOp::AcquireSet,
                sent,
            });
        } else {
            self.take_set_reply(s, c, g, sent, &out.reply);
        }
        self.judge_group(s, c, g);
        note
    }

    /// Client `c` runs `op` on member `k` (its reply lost when `lose_reply`).
    fn script(
        &self,
        s: &mut SetState,
        (c, k): (usize, usize),
        op: SetOp,
        lose_reply: bool,
        note: Option<&mut String>,
    ) {
        let client = &mut s.clients[c];
        match op {
            SetOp::Attempt => client.members[k] = Have::Asked { together: false },
            SetOp::AcquireSet => {
                for j in self.groups[c][k].clone() {
                    client.members[j] = Have::Asked { together: true };
                }
            }
            // Releasing consumes the set: it no longer believes it holds.
            SetOp::Release if matches!(client.phase, SetPhase::Holding { .. }) => {
                client.phase = SetPhase::Releasing { gave_up: false };
            }
            _ => {}
        }
        if matches!(op, SetOp::Attempt | SetOp::Renew) {
            client.acted |= 1 << k;
        }
        if op == SetOp::AcquireSet {
            let said = self.group_request(s, c, k, s.now, lose_reply);
            if let Some(note) = note {
                note.push_str(&said);
                if lose_reply {
                    note.push_str(" (reply lost)");
                }
            }
            return;
        }
        let out = self.run(s, c, k, op);
        if let Some(note) = note {
            note.push_str(&describe_reply(op, &out));
            if lose_reply {
                note.push_str(" (reply lost)");
            }
        }
        let sent = InFlight {
            member: k as u8,
            op,
            sent: s.now,
        };
        if lose_reply {
            s.budget.lost_replies -= 1;
            s.clients[c].inflight = Some(sent);
        } else {
            self.take_reply(s, c, k, sent, out.reply);
        }
    }

    /// The driver resends client `c`'s request whose reply was lost.
    fn resend(
        &self,
        s: &mut SetState,
        c: usize,
        lose_again: bool,
        note: Option<&mut String>,
    ) -> Option<()> {
        let sent = s.clients[c].inflight.take()?;
        let k = sent.member as usize;
        if sent.op == SetOp::AcquireSet {
            let held = self.group_held(s, c, k);
            let said = self.group_request(s, c, k, sent.sent, lose_again);
            let granted = s.clients[c].members[k].together()
                && matches!(s.clients[c].members[k], Have::Held { .. });
            s.clients[c].regranted |= held && granted;
            if let Some(note) = note {
                note.push_str(&said);
                if lose_again {
                    note.push_str(" (reply lost again)");
                }
            }
            return Some(());
        }
        s.clients[c].resent |= sent.op == SetOp::Attempt;
        let out = self.run(s, c, k, sent.op);
        if let Some(note) = note {
            note.push_str(&describe_reply(sent.op, &out));
            if lose_again {
                note.push_str(" (reply lost again)");
            }
        }
        if lose_again {
            s.budget.lost_replies -= 1;
            s.clients[c].inflight = Some(sent);
        } else {
            self.take_reply(s, c, k, sent, out.reply);
        }
        Some(())
    }

    /// Client `c`'s set gives up: after a lost reply (the request ends in an error:
    /// a release's script ran, so that member is released), when a member it holds
    /// lapsed, or at a timeout (from the budget) while it waits. It then releases
    /// every member it holds or waits for.
    fn give_up(&self, s: &mut SetState, c: usize) -> Option<()> {
        let now = s.now;
        let client = &mut s.clients[c];
        if let Some(sent) = client.inflight.take() {
            if sent.op == SetOp::Release {
                client.members[sent.member as usize] = Have::Released;
                client.finish_if_done();
                return Some(());
            }
        } else if !client.lapsed(now) {
            s.budget.timeouts = s.budget.timeouts.checked_sub(1)?;
        }
        let client = &mut s.clients[c];
        client.gave_up_holding = matches!(client.members[0], Have::Held { .. });
        client.phase = SetPhase::Releasing { gave_up: true };
        client.finish_if_done();
        Some(())
    }

    pub(super) fn step(
        &self,
        last: &SetState,
        action: SetAction,
        note: Option<&mut String>,
    ) -> Option<SetState> {
        let mut s = last.clone();
        match action {
            SetAction::Script {
                client,
                member,
                op,
                lose_reply,
            } => self.script(&mut s, (client.into(), member.into()), op, lose_reply, note),
            SetAction::Resend { client, lose_again } => {
                self.resend(&mut s, client.into(), lose_again, note)?;
            }
            SetAction::GiveUp(c) => self.give_up(&mut s, c.into())?,
            SetAction::Crash(c) => {
                s.budget.crashes -= 1;
                let client = &mut s.clients[usize::from(c)];
                (client.phase, client.inflight) = (SetPhase::Crashed, None);
            }
            SetAction::Pause(c) => {
                s.budget.pauses -= 1;
                let longest = self.cfg.read_lease.max(self.cfg.write_lease);
                s.clients[usize::from(c)].paused_until = s.now + longest + 1;
            }
            SetAction::Tick => {
                s.now += 1;
                for client in &mut s.clients {
                    client.acted = 0;
                }
            }
        }
        Some(s)
    }

    /// Whether client `c` owes a step before time may pass.
    fn owes_step(&self, s: &SetState, c: usize) -> bool {
        let client = &s.clients[c];
        if !client.alive() || client.paused(s.now) {
            return false;
        }
        if client.inflight.is_some() || client.lapsed(s.now) {
            return true;
        }
        let renewal = (0..client.members.len()).any(|k| client.renewal_due(k, s.now));
        match client.phase {
            SetPhase::Taking => {
                renewal
                    || client.current().is_some_and(|k| {
                        self.group_request_due(client, c, k) || client.acted & (1 << k) == 0
                    })
            }
            SetPhase::Holding { since } => renewal || s.now >= since + self.cfg.max_hold,
            SetPhase::Releasing { .. } => true,
            SetPhase::Finished { .. } | SetPhase::Crashed => false,
        }
    }

    /// Client `c`'s scripts, each also with its reply lost while the budget lasts.
    fn scripts(&self, s: &SetState, c: usize, actions: &mut Vec<SetAction>) {
        let client = &s.clients[c];
        let mut push = |k: usize, op: SetOp| {
            for lose_reply in [false, true] {
                if !lose_reply || s.budget.lost_replies > 0 {
                    actions.push(SetAction::Script {
                        client: c as u8,
                        member: k as u8,
                        op,
                        lose_reply,
                    });
                }
            }
        };
        for k in 0..client.members.len() {
            if client.renewal_due(k, s.now) {
                push(k, SetOp::Renew);
            }
        }
        match client.phase {
            SetPhase::Taking => match client.current() {
                Some(k) if self.group_request_due(client, c, k) => push(k, SetOp::AcquireSet),
                Some(k) if client.acted & (1 << k) == 0 => push(k, SetOp::Attempt),
                _ => {}
            },
            SetPhase::Holding { .. } | SetPhase::Releasing { .. } => {
                for k in 0..client.members.len() {
                    if client.members[k].pending() {
                        push(k, SetOp::Release);
                    }
                }
            }
            SetPhase::Finished { .. } | SetPhase::Crashed => {}
        }
    }

    /// What client `c` may do now, and the faults that may strike it.
    fn client_actions(&self, s: &SetState, c: usize, actions: &mut Vec<SetAction>) {
        let client = &s.clients[c];
        if !client.alive() {
            return;
        }
        let id = c as u8;
        if !client.paused(s.now) {
            if client.inflight.is_some() {
                actions.push(SetAction::Resend {
                    client: id,
                    lose_again: false,
                });
                if s.budget.lost_replies > 0 {
                    actions.push(SetAction::Resend {
                        client: id,
                        lose_again: true,
                    });
                }
                actions.push(SetAction::GiveUp(id));
            } else if client.lapsed(s.now) {
                actions.push(SetAction::GiveUp(id));
            } else {
                self.scripts(s, c, actions);
                let waits = client
                    .current()
                    .is_some_and(|k| matches!(client.members[k], Have::Asked { .. }));
                if waits && s.budget.timeouts > 0 {
                    actions.push(SetAction::GiveUp(id));
                }
            }
        }
        if s.budget.crashes > 0 {
            actions.push(SetAction::Crash(id));
        }
        let busy = matches!(client.phase, SetPhase::Taking | SetPhase::Holding { .. });
        if s.budget.pauses > 0 && busy && !client.paused(s.now) {
            actions.push(SetAction::Pause(id));
        }
    }

    /// Client `c` can make progress now (see the module docs): it holds its set or
    /// releases what it has, or knows a member lapsed (it gives up and releases), or
    /// its next request for its current member would be granted.
    fn can_progress(&self, s: &SetState, c: usize) -> bool {
        let client = &s.clients[c];
        match client.phase {
            SetPhase::Holding { .. } | SetPhase::Releasing { .. } => true,
            SetPhase::Taking if client.lapsed(s.now) => true,
            SetPhase::Taking => client
                .current()
                .is_some_and(|k| self.would_be_granted(s, c, k)),
            SetPhase::Finished { .. } | SetPhase::Crashed => false,
        }
    }

    /// Whether `token` has a hold, a place in line or a batch membership in `h`.
    fn leaves_something(h: &Hash, token: Tok) -> bool {
        h.fields.iter().any(|(field, value)| match (field, value) {
            (lua::Field::R(t) | lua::Field::Wait(t) | lua::Field::Rw(t), _) => *t == token,
            (lua::Field::WOwner, lua::Val::Tok(t)) => *t == token,
            _ => false,
        })
    }

    /// Client `c` leaves nothing in any lock under any of its tokens (its own and
    /// its group tokens).
    fn leaves_nothing(&self, s: &SetState, c: usize) -> bool {
        (0..self.order[c].len()).all(|k| {
            let h = &s.locks[self.order[c][k].lock as usize];
            !Self::leaves_something(h, self.token(c, k))
                && !Self::leaves_something(h, self.group_token(c, k))
        })
    }
}

impl Model for Sets {
    type State = SetState;
    type Action = SetAction;

    fn init_states(&self) -> Vec<SetState> {
        let clients = self
            .order
            .iter()
            .map(|members| SetClient {
                phase: SetPhase::Taking,
                members: vec![Have::Untaken; members.len()],
                inflight: None,
                paused_until: 0,
                acted: 0,
                gave_up_holding: false,
                resent: false,
                refused: 0,
                regranted: false,
            })
            .collect();
        vec![SetState {
            now: 0,
            locks: vec![Hash::default(); self.cfg.slots.len()],
            clients,
            budget: self.cfg.faults,
            split_group: false,
        }]
    }

    fn actions(&self, s: &SetState, actions: &mut Vec<SetAction>) {
        for c in 0..s.clients.len() {
            self.client_actions(s, c, actions);
        }
        let owed = (0..s.clients.len()).any(|c| self.owes_step(s, c));
        if s.now < self.cfg.horizon && !owed {
            actions.push(SetAction::Tick);
        }
    }

    fn next_state(&self, last: &SetState, action: SetAction) -> Option<SetState> {
        let next = self.step(last, action, None)?;
        (next != *last).then_some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut props = Self::invariants();
        props.extend(
            Self::examples()
                .into_iter()
                .filter(|p| self.cfg.examples.contains(&p.name)),
        );
        props
    }
}

impl Sets {
    /// What must hold in every reachable state (see the module docs).
    fn invariants() -> Vec<Property<Self>> {
        vec![
            Property::always(
                "exclusion on every lock: no live writer beside another live holder",
                |m: &Sets, s: &SetState| (0..s.locks.len()).all(|l| m.exclusive(s, l)),
            ),
            Property::always(
                "no deadlock: while a live client waits, some live client can make progress",
                |m: &Sets, s: &SetState| m.no_deadlock(s),
            ),
            Property::always(
                "nothing stays held under the tokens of a set that gave up",
                |m: &Sets, s: &SetState| {
                    (0..s.clients.len()).all(|c| {
                        s.clients[c].phase != SetPhase::Finished { gave_up: true }
                            || m.leaves_nothing(s, c)
                    })
                },
            ),
            Property::always(
                "all or none: right after a group request, its group is all held or all free",
                |_: &Sets, s: &SetState| !s.split_group,
            ),
            Property::always(
                "every lock is free once every set has finished or given up",
                |m: &Sets, s: &SetState| m.free_at_the_end(s),
            ),
            Property::always(
                "every lock's summaries and line agree with its fields",
                |_: &Sets, s: &SetState| {
                    s.locks.iter().all(|h| {
                        h.summaries_agree() && h.line_is_linked() && h.fast_paths_may_skip()
                    })
                },
            ),
        ]
    }

    /// States the checker must reach when a configuration names them.
    fn examples() -> Vec<Property<Self>> {
        vec![
            Property::sometimes(
                "both clients finish their sets despite opposite orders",
                |_: &Sets, s: &SetState| every_set_finished(s),
            ),
            Property::sometimes(
                "every client finishes its set, the orders mixed",
                |_: &Sets, s: &SetState| every_set_finished(s),
            ),
            Property::sometimes(
                "a set gives up while holding its first member and leaves nothing",
                |m: &Sets, s: &SetState| {
                    (0..s.clients.len()).any(|c| {
                        let client = &s.clients[c];
                        client.gave_up_holding
                            && client.phase == SetPhase::Finished { gave_up: true }
                            && m.leaves_nothing(s, c)
                    })
                },
            ),
            Property::sometimes(
                "a read member waits in a batch behind a queued writer",
                |m: &Sets, s: &SetState| {
                    (0..s.clients.len()).any(|c| m.waits_in_a_batch_behind_a_writer(s, c))
                },
            ),
            Property::sometimes(
                "a set completes after a client that held a member crashed",
                |_: &Sets, s: &SetState| {
                    let crashed_holding = s.clients.iter().any(|client| {
                        client.phase == SetPhase::Crashed
                            && client
                                .members
                                .iter()
                                .any(|have| matches!(have, Have::Held { .. }))
                    });
                    let finished = s
                        .clients
                        .iter()
                        .any(|client| client.phase == SetPhase::Finished { gave_up: false });
                    crashed_holding && finished
                },
            ),
            Property::sometimes(
                "a set whose member lapsed in a pause gives up and leaves nothing",
                |m: &Sets, s: &SetState| {
                    (0..s.clients.len()).any(|c| {
                        let client = &s.clients[c];
                        client.paused_until > 0
                            && client.gave_up_holding
                            && client.phase == SetPhase::Finished { gave_up: true }
                            && m.leaves_nothing(s, c)
                    })
                },
            ),
            Property::sometimes(
                "a group is granted whole in one request",
                |m: &Sets, s: &SetState| (0..s.clients.len()).any(|c| m.group_taken(s, c, true)),
            ),
            Property::sometimes(
                "a group refused in one request is then taken one by one",
                |m: &Sets, s: &SetState| (0..s.clients.len()).any(|c| m.group_taken(s, c, false)),
            ),
            Property::sometimes(
                "a resent group request grants again after its reply was lost, and the set completes",
                |_: &Sets, s: &SetState| {
                    s.clients.iter().any(|client| {
                        client.regranted && client.phase == SetPhase::Finished { gave_up: false }
                    })
                },
            ),
            Property::sometimes(
                "a lost reply is resent and the set still completes",
                |_: &Sets, s: &SetState| {
                    s.clients.iter().any(|client| {
                        client.resent && client.phase == SetPhase::Finished { gave_up: false }
                    })
                },
            ),
        ]
    }

    /// Client `c` holds every member of one of its groups (of two or more): all
    /// granted in the group's one request (`together`), or, that request refused, each
    /// by its own acquire.
    fn group_taken(&self, s: &SetState, c: usize, together: bool) -> bool {
        let client = &s.clients[c];
        self.groups[c].iter().enumerate().any(|(k, group)| {
            let refused = client.refused & (1 << k) != 0;
            group.len() > 1
                && group.start == k
                && refused != together
                && client.members[group.clone()]
                    .iter()
                    .all(|&have| matches!(have, Have::Held { together: t, .. } if t == together))
        })
    }

    /// Client `c` waits for a read member in a batch, and a writer's place is ahead
    /// of that batch in the lock's line.
    fn waits_in_a_batch_behind_a_writer(&self, s: &SetState, c: usize) -> bool {
        let client = &s.clients[c];
        let Some(k) = client.current() else {
            return false;
        };
        let member = self.order[c][k];
        let h = &s.locks[usize::from(member.lock)];
        let batch = match h.fields.get(&lua::Field::Rw(self.token(c, k))) {
            Some(&lua::Val::Member(batch, _)) => batch,
            _ => return false,
        };
        let line = lua::live_view(h, &self.cfg.params, s.now).queue;
        let at = line.iter().position(|&(t, _)| t == batch);
        client.members[k] == (Have::Asked { together: false })
            && at.is_some_and(|at| line[..at].iter().any(|&(t, _)| !t.is_batch()))
    }

    /// On lock `l`: the engine's live view has no live writer beside a live reader,
    /// every member a client believes it holds there is live in that view, and no
    /// believed writer is beside another believed holder.
    fn exclusive(&self, s: &SetState, l: usize) -> bool {
        let view = lua::live_view(&s.locks[l], &self.cfg.params, s.now);
        if view.writer.is_some() && !view.readers.is_empty() {
            return false;
        }
        let believed = self.believed_on(s, l);
        let live = believed.iter().all(|&(token, mode)| match mode {
            Mode::Write => view.writer.is_some_and(|(owner, _)| owner == token),
            Mode::Read => view.readers.contains_key(&token),
        });
        let writers = believed.iter().filter(|&&(_, m)| m == Mode::Write).count();
        live && (writers == 0 || believed.len() == 1)
    }

    /// The members on lock `l` that their clients believe they hold: token and mode.
    fn believed_on(&self, s: &SetState, l: usize) -> Vec<(Tok, Mode)> {
        let mut believed = Vec::new();
        for (c, client) in s.clients.iter().enumerate() {
            for (k, member) in self.order[c].iter().enumerate() {
                if usize::from(member.lock) == l && client.believes(k, s.now) {
                    believed.push((self.token_of(s, c, k), member.mode));
                }
            }
        }
        believed
    }

    /// See the module docs: judged only where every client is live and running.
    fn no_deadlock(&self, s: &SetState) -> bool {
        let running = s
            .clients
            .iter()
            .all(|client| client.phase != SetPhase::Crashed && !client.paused(s.now));
        let waits = s.clients.iter().any(|client| {
            client
                .current()
                .is_some_and(|k| matches!(client.members[k], Have::Asked { .. }))
        });
        !running || !waits || (0..s.clients.len()).any(|c| self.can_progress(s, c))
    }

    /// Once every set finished or gave up: no lock has a hold (live or counted), a
    /// batch member or a live place.
    fn free_at_the_end(&self, s: &SetState) -> bool {
        let ended = s
            .clients
            .iter()
            .all(|client| matches!(client.phase, SetPhase::Finished { .. }));
        !ended
            || s.locks.iter().all(|h| {
                let view = lua::live_view(h, &self.cfg.params, s.now);
                view.writer.is_none()
                    && view.counted.is_empty()
                    && view.members.is_empty()
                    && view.queue.is_empty()
            })
    }
}

/// Every client finished its set without giving up.
fn every_set_finished(s: &SetState) -> bool {
    s.clients
        .iter()
        .all(|client| client.phase == SetPhase::Finished { gave_up: false })
}

/// `A`, `B`, `C`, ...
fn client_name(c: usize) -> char {
    char::from(b'A' + c as u8)
}

/// A token as the traces print it: `A.1` (client `A`'s token for lock 1), `A.g1` (its
/// token for lock 1 in its group's one request), `r#1` (a batch of readers).
fn token_name(t: Tok) -> String {
    match t {
        Tok::Batch(n) => format!("r#{n}"),
        _ if t.is_stranger() => "X".to_owned(),
        _ if t.generation() >= GROUP => {
            let lock = t.generation() - GROUP;
            format!("{}.g{lock}", client_name(t.client().into()))
        }
        _ => format!("{}.{}", client_name(t.client().into()), t.generation()),
    }
}

/// A lock's hash as the traces print it, its tokens by [`token_name`].
struct Named<'a>(&'a Hash);

impl fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.render(f, &|f, t| f.write_str(&token_name(t)))
    }
}

/// A script's reply as a trace prints it.
fn describe_reply(op: SetOp, out: &lua::Outcome) -> String {
    let reply = match (op, out.reply) {
        (_, Reply::Granted(0)) => "granted".to_owned(),
        (_, Reply::Granted(fence)) => format!("granted, fence {fence}"),
        (_, Reply::Refused(hint, _)) => format!("refused, queued (retry in {hint})"),
        (_, Reply::InLine(hint, b)) => {
            format!(
                "refused, waits in batch {} (retry in {hint})",
                token_name(b)
            )
        }
        (_, Reply::Int(n)) => format!("returns {n}"),
        (_, reply) => format!("{reply:?}"),
    };
    format!("{reply}{}", describe_handing(out))
}

/// What a script handed on as it ran: a batch it granted, a lock it handed over.
fn describe_handing(out: &lua::Outcome) -> String {
    match (out.granted, out.published) {
        (Some(batch), _) => format!("; grants batch {}", token_name(batch)),
        (None, Some(lua::Wake::Handed(t, _))) => {
            format!("; hands the lock to {}", token_name(t))
        }
        _ => String::new(),
    }
}

impl Sets {
    /// A checker path as a readable trace: each step, then the state it leads to.
    pub fn trace(&self, path: &[(SetState, Option<SetAction>)]) -> String {
        let mut out = String::new();
        for (n, (state, action)) in path.iter().enumerate() {
            if n == 0 {
                out.push_str(&self.describe_state(state));
            }
            let Some(action) = *action else { break };
            let _ = writeln!(out, "{:>3}. {}", n + 1, self.describe_step(state, action));
            match self.step(state, action, None) {
                Some(next) => out.push_str(&self.describe_state(&next)),
                None => out.push_str("    (the step does not replay)\n"),
            }
        }
        out
    }

    /// Client `c`'s group request (the group that starts at member `g`)'s reply as a
    /// trace prints it.
    fn describe_set_reply(&self, c: usize, g: usize, out: &lua::SetOutcome) -> String {
        let mut said = match &out.reply {
            lua::SetReply::Granted(fences) => {
                let fences: Vec<String> = fences.iter().map(i64::to_string).collect();
                format!("all granted (fences {})", fences.join(", "))
            }
            lua::SetReply::Refused(i, hint) => {
                let refused = self.order[c][g + i - 1];
                let before = if *i > 1 {
                    "; the members taken before it released again"
                } else {
                    ""
                };
                format!("refused at {refused} (retry in {hint}){before}")
            }
        };
        for (_, run) in &out.runs {
            said.push_str(&describe_handing(run));
        }
        said
    }

    /// One step as a line of a trace.
    fn describe_step(&self, last: &SetState, action: SetAction) -> String {
        let mut note = String::new();
        self.step(last, action, Some(&mut note));
        let member = |c: u8, k: u8| {
            let c = usize::from(c);
            let k = usize::from(k);
            format!(
                "{} ({})",
                self.order[c][k],
                token_name(self.token_of(last, c, k))
            )
        };
        let group = |c: u8, g: u8| {
            let c = usize::from(c);
            let members: Vec<String> = self.groups[c][usize::from(g)]
                .clone()
                .map(|k| {
                    let token = token_name(self.group_token(c, k));
                    format!("{} ({token})", self.order[c][k])
                })
                .collect();
            members.join(", ")
        };
        let what = match action {
            SetAction::Script {
                client,
                member: k,
                op: SetOp::AcquireSet,
                ..
            } => format!(
                "{} asks for its group {} in one request",
                client_name(client.into()),
                group(client, k)
            ),
            SetAction::Script {
                client,
                member: k,
                op,
                ..
            } => {
                let verb = match op {
                    SetOp::Attempt => "attempts",
                    SetOp::Renew => "renews",
                    SetOp::Release | SetOp::AcquireSet => "releases",
                };
                format!(
                    "{} {verb} {}",
                    client_name(client.into()),
                    member(client, k)
                )
            }
            SetAction::Resend { client, .. } => {
                let sent = last.clients[usize::from(client)].inflight;
                let what = match sent {
                    Some(f) if f.op == SetOp::AcquireSet => {
                        format!("group request on {}", group(client, f.member))
                    }
                    Some(f) => format!("request on {}", member(client, f.member)),
                    None => "request on ?".to_owned(),
                };
                format!("the driver resends {}'s {what}", client_name(client.into()))
            }
            SetAction::GiveUp(c) => format!("{} gives up", client_name(c.into())),
            SetAction::Crash(c) => format!("{} crashes", client_name(c.into())),
            SetAction::Pause(c) => format!("{} pauses past every lease", client_name(c.into())),
            SetAction::Tick => "time passes".to_owned(),
        };
        if note.is_empty() {
            what
        } else {
            format!("{what}: {note}")
        }
    }

    /// A state as a few lines of a trace.
    fn describe_state(&self, s: &SetState) -> String {
        let mut out = format!("    t={}\n", s.now);
        for (l, h) in s.locks.iter().enumerate() {
            let slot = self.cfg.slots[l];
            let _ = writeln!(out, "    lock {l} (slot {slot}): {}", Named(h));
        }
        for (c, client) in s.clients.iter().enumerate() {
            let _ = writeln!(out, "    {}", self.describe_client(s, c, client));
        }
        out
    }

    fn describe_client(&self, s: &SetState, c: usize, client: &SetClient) -> String {
        let listed: Vec<String> = self.cfg.sets[c].iter().map(Member::to_string).collect();
        let releasing = matches!(client.phase, SetPhase::Releasing { .. });
        let phase = match client.phase {
            SetPhase::Taking => "takes its set".to_owned(),
            SetPhase::Holding { since } => format!("holds its set since t={since}"),
            SetPhase::Releasing { gave_up: false } => "releases its finished set".to_owned(),
            SetPhase::Releasing { gave_up: true } => "gave up, releases".to_owned(),
            SetPhase::Finished { gave_up: false } => "finished".to_owned(),
            SetPhase::Finished { gave_up: true } => "gave up, released all".to_owned(),
            SetPhase::Crashed => "crashed".to_owned(),
        };
        let members: Vec<String> = (0..client.members.len())
            .map(|k| {
                let state = match client.members[k] {
                    Have::Untaken => "not asked".to_owned(),
                    Have::Asked { .. } if releasing => "asked, to withdraw".to_owned(),
                    Have::Asked { together: true } => "asked in its group request".to_owned(),
                    Have::Asked { together: false } => "asked, waits".to_owned(),
                    Have::Held { .. } if releasing => "held, to release".to_owned(),
                    Have::Held {
                        until,
                        together: true,
                        ..
                    } if client.believes(k, s.now) => {
                        format!("held by its group request until t={until}")
                    }
                    Have::Held { until, .. } if client.believes(k, s.now) => {
                        format!("held until t={until}")
                    }
                    Have::Held { until, .. } => format!("held, lapsed (deadline t={until})"),
                    Have::Released => "released".to_owned(),
                };
                format!("{} {state}", self.order[c][k])
            })
            .collect();
        let mut extra = String::new();
        if client.paused(s.now) {
            let _ = write!(extra, ", paused until t={}", client.paused_until);
        }
        for (k, member) in self.order[c].iter().enumerate() {
            if client.refused & (1 << k) != 0 {
                let _ = write!(extra, ", its group from {member} refused: one by one");
            }
        }
        if let Some(f) = client.inflight {
            let _ = write!(
                extra,
                ", a reply of its {:?} on {} lost",
                f.op,
                self.order[c][usize::from(f.member)]
            );
        }
        format!(
            "{} (listed {{{}}}): {phase}: {}{extra}",
            client_name(c),
            listed.join(", "),
            members.join(", ")
        )
    }
}

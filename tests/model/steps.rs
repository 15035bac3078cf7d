//! How each action changes the state: the scripts a client calls, the replies it
//! takes, the faults and time passing (`Lock::step`).

use std::fmt::Write as _;

use super::ModelTok as _;
use super::lua::{self, Outcome, Reply, Time, Tok, Wake};
use super::system::{
    Access, Action, Client, DOWNGRADED_AHEAD_OF_WRITER, EVICTED_CAME_BACK, FENCE_NOT_RISING,
    FENCED_WRITE_WENT_BACK, HANDED_PAST_PLACE, Inflight, JOINED_AFTER_EVICTION,
    JOINED_BESIDE_WRITER, Late, Lock, Mode, Op, Phase, READ_PASSED_QUEUED_WRITER,
    READER_PASSED_WAITING_WRITER, READS_HELD_BACK, STRAY_RELEASE_CHANGED, State, Upgradable,
    WRITER_BEFORE_UPGRADE, WRITER_JUMPED_QUEUE, Wait,
};
use super::traces::describe;

impl Lock {
    /// Does the client owe a step before time may pass?
    pub(super) fn owes_step(&self, s: &State, c: &Client) -> bool {
        if c.paused_until > s.now || c.phase == Phase::Crashed {
            return false;
        }
        // Taking a call-back or a forced release's message sends nothing: no turn
        // needed.
        if c.recall || c.eviction_notice {
            return true;
        }
        if c.acted {
            return false;
        }
        if let Some(inflight) = c.inflight {
            return inflight.sent < s.now;
        }
        if c.handed.is_some() {
            return true;
        }
        // A waiting upgrade holds its read hold as long as it waits.
        if let Some(wait) = c.wait() {
            return self.timed_out(s, wait.since) || s.now >= wait.recheck_at;
        }
        match c.phase {
            Phase::Holding { .. } if c.kept_until.is_some() => self.kept_hold_ends(s, c),
            Phase::Holding { since, .. } | Phase::Original { stamp: since, .. } => {
                s.now >= since + self.cfg.max_hold
            }
            _ => false,
        }
    }

    /// A kept read hold goes when a writer called it back (by a message or the
    /// renewal's reply), its bound passed, or the application dropped the client.
    fn kept_hold_ends(&self, s: &State, c: &Client) -> bool {
        c.called_back || c.dropped_at.is_some() || c.kept_until.is_some_and(|until| s.now >= until)
    }

    /// A plain read hold of a reader process (`Config::shares`), believed held; or,
    /// in a process that keeps reads (`Config::keep`), the read hold a writer's
    /// downgrade left, which the reads that waited for the write join
    /// (src/lock/shared_reads/writes.rs).
    fn shareable(&self, s: &State, i: usize) -> bool {
        let c = &s.clients[i];
        let role = self.cfg.role(i);
        (role == Access::Read || (role == Access::Write && self.cfg.keep.is_some()))
            && !self.cfg.recursive(i)
            && matches!(
                c.phase,
                Phase::Holding {
                    mode: Mode::Read,
                    upgradable: None,
                    ..
                }
            )
            && c.believes(s.now).is_some()
            && self.confirmed(s, i)
    }

    /// The process is sure enough of its hold to let a task join it: the hold's
    /// last acquire or renewal the server answered was sent less than `trust` ago
    /// (`Hold::is_confirmed`).
    fn confirmed(&self, s: &State, i: usize) -> bool {
        let c = &s.clients[i];
        let Phase::Holding { until, mode, .. } = c.phase else {
            return false;
        };
        let sent = until - self.cfg.lease(i, mode);
        s.now < sent + self.cfg.trust
    }

    /// Another task may join the process's read hold: it is shared while a share
    /// lives or it is kept, and no writer called it back (src/lock/shared_reads/).
    pub(super) fn may_join(&self, s: &State, i: usize) -> bool {
        let c = &s.clients[i];
        let Phase::Holding { since, .. } = c.phase else {
            return false;
        };
        let live = c.kept_until.is_some() || s.now < since + self.cfg.max_hold;
        c.joins < self.cfg.shares
            && !c.called_back
            && c.dropped_at.is_none()
            && live
            && self.shareable(s, i)
    }

    /// The process's last share ended: it may keep the hold idle instead of
    /// releasing it.
    pub(super) fn may_keep(&self, s: &State, i: usize) -> bool {
        let c = &s.clients[i];
        let Phase::Holding { since, .. } = c.phase else {
            return false;
        };
        self.cfg.keep.is_some()
            && c.kept_until.is_none()
            && c.dropped_at.is_none()
            && s.now >= since + self.cfg.max_hold
            && !c.called_back
            && c.inflight.is_none()
            && self.shareable(s, i)
    }

    pub(super) fn timed_out(&self, s: &State, since: Time) -> bool {
        self.cfg.wait_timeout.is_some_and(|t| s.now >= since + t)
    }

    /// The smallest generation no part of the state mentions: as good as 128 fresh
    /// random bits, since the scripts only compare tokens for equality.
    fn fresh_token(&self, s: &State, i: usize) -> Tok {
        let client = self.cfg.id(i);
        let mut used = [false; 16];
        let mut mark = |t: Tok| {
            if t.client() == client && t.generation() < 16 {
                used[t.generation() as usize] = true;
            }
        };
        for h in std::iter::once(&s.hash).chain(s.unreplicated.as_ref()) {
            for (field, value) in &h.fields {
                match (field, value) {
                    (
                        lua::Field::R(t)
                        | lua::Field::Wait(t)
                        | lua::Field::Wn(t)
                        | lua::Field::Wq(t)
                        | lua::Field::Rw(t),
                        _,
                    ) => mark(*t),
                    (_, lua::Val::Tok(t)) => mark(*t),
                    _ => {}
                }
            }
        }
        if let Some(t) = s.clients[i].token() {
            mark(t);
        }
        let generation = used.iter().position(|u| !u).unwrap_or(15) as u64;
        super::tok(client, generation)
    }

    /// Runs acquire `access` as the crate does (writer preference).
    pub(super) fn acquire(
        &self,
        h: &mut lua::Hash,
        now: Time,
        token: Tok,
        access: Access,
        wait: bool,
    ) -> Outcome {
        let cfg = &self.cfg;
        let p = &cfg.params;
        let ttl = if wait { cfg.intent_ttl } else { 0 };
        let i = cfg.index(token.client());
        let read_lease = cfg.lease(i, Mode::Read);
        match access {
            Access::Read | Access::UpgradableRead => {
                let upgradable = access == Access::UpgradableRead;
                let in_line = !cfg.recursive(i);
                lua::acquire_read(h, p, now, token, read_lease, in_line, upgradable, ttl)
            }
            Access::Write | Access::Upgrade => {
                let upgrade = access == Access::Upgrade;
                lua::acquire_write(h, p, now, token, cfg.write_lease, ttl, upgrade)
            }
        }
    }

    /// A write hold's downgrade answered that the writer first in line queued `ago`
    /// ticks before (-1: none waits; -2: one may, since before the write). The
    /// client lets the reads that came while it wrote join the read hold it keeps if
    /// they came before that: at ticks `< now - ago`. None of them may have come at
    /// or after a writer that still waits in line (by the checker's own record of
    /// when each entry joined the line), and when the line's head is a writer's live
    /// place, none that came before every such writer is kept back.
    fn judge_downgrade(&self, s: &mut State, ago: Time) {
        let live = lua::live_view(&s.hash, &self.cfg.params, s.now).queue;
        let first_writer = s
            .queued_at
            .iter()
            .find(|&&(t, _)| !t.is_batch() && live.iter().any(|&(u, _)| u == t))
            .map(|&(_, at)| at);
        let joins_before = match ago {
            -1 => Time::MAX,
            -2 => Time::MIN,
            ago => s.now - ago,
        };
        if first_writer.is_some_and(|at| joins_before > at) {
            s.violations |= READ_PASSED_QUEUED_WRITER;
        }
        let head = s.hash.line().first().copied();
        let head_is_writer =
            head.is_some_and(|h| !h.is_batch() && live.first().map(|&(t, _)| t) == Some(h));
        let exact = first_writer.unwrap_or(Time::MAX);
        if (head.is_none() || head_is_writer) && joins_before < exact {
            s.violations |= READS_HELD_BACK;
        }
        if first_writer.is_some()
            && self
                .cfg
                .examples
                .contains(&"a write hold is downgraded ahead of a queued writer")
        {
            s.events |= DOWNGRADED_AHEAD_OF_WRITER;
        }
    }

    /// Runs one script on the hash, with the checks that must hold at every run.
    fn exec(&self, s: &mut State, op: Op, token: Tok, mode: Mode) -> Outcome {
        let cfg = &self.cfg;
        let p = &cfg.params;
        note_line(s, 0); // the key may have expired since the last script
        let before = s.hash.clone();
        let view_before = lua::live_view(&s.hash, p, s.now);
        // What any script would do here besides its own operation.
        let untouched = {
            let mut h = s.hash.clone();
            lua::settle_only(&mut h, p, s.now);
            lua::live_view(&h, p, s.now)
        };
        let now = s.now;
        let i = cfg.index(token.client());
        let out = match op {
            Op::Acquire { access, wait } => self.acquire(&mut s.hash, now, token, access, wait),
            Op::Renew => lua::renew(
                &mut s.hash,
                p,
                now,
                token,
                cfg.lease(i, mode),
                mode == Mode::Write,
            ),
            Op::Release => lua::release(&mut s.hash, p, now, token),
            Op::Downgrade => {
                let from_write = mode == Mode::Write;
                let read_lease = cfg.lease(i, Mode::Read);
                lua::downgrade(&mut s.hash, p, now, token, read_lease, from_write)
            }
            Op::FencedWrite => lua::fenced_write(&mut s.hash, p, now, token),
        };
        let queued = &view_before.queue;
        // A reader whose batch heads the line (behind places that lapsed) goes with it.
        let first_in_its_batch = match before.fields.get(&lua::Field::Rw(token)) {
            Some(&lua::Val::Member(batch, _)) => queued.first().is_some_and(|&(t, _)| t == batch),
            _ => false,
        };
        if let (Op::Acquire { access, .. }, Reply::Granted(_)) = (op, out.reply) {
            match access {
                Access::Write
                    if out.new_grant && queued.first().is_some_and(|&(t, _)| t != token) =>
                {
                    s.violations |= WRITER_JUMPED_QUEUE;
                }
                Access::Read | Access::UpgradableRead
                    if (queued.iter().any(|&(t, _)| !t.is_batch())
                        || view_before.upgrade.is_some())
                        && !view_before.readers.contains_key(&token)
                        && !cfg.recursive(cfg.index(token.client()))
                        && !first_in_its_batch =>
                {
                    s.violations |= READER_PASSED_WAITING_WRITER;
                }
                _ => {}
            }
        }
        // The upgradable reader waiting to upgrade goes first (no writer can hold
        // beside it anyway); else a hand-over goes to the first live place, or the
        // one after the caller's when the caller's own operation withdrew that.
        let upgrader = view_before.upgradable.map(|(t, _)| t);
        if let Some(Wake::Handed(grantee, _)) = out.published
            && !(view_before.upgrade.is_some() && upgrader == Some(grantee))
            && queued.first().is_none_or(|&(t, _)| t != grantee)
            && queued
                .iter()
                .find(|&&(t, _)| t != token)
                .is_none_or(|&(t, _)| t != grantee)
        {
            s.violations |= WRITER_JUMPED_QUEUE;
        }
        // A hand-over's hold ends no later than the place it was handed to (a dead
        // waiter blocks nobody past its place's lifetime); an upgrade's, no later
        // than its read hold or its pending upgrade, whichever lasts longer. (A
        // script of the grantee's own, e.g. its renewal, may have extended those.)
        if let Some(Wake::Handed(grantee, _)) = out.published
            && grantee != token
        {
            let place = if upgrader == Some(grantee) && view_before.upgrade.is_some() {
                view_before
                    .upgrade
                    .zip(view_before.upgradable)
                    .map(|(upgrade, (_, read_until))| upgrade.max(read_until))
            } else {
                queued
                    .iter()
                    .find(|&&(t, _)| t == grantee)
                    .map(|&(_, deadline)| deadline)
            };
            let until = lua::live_view(&s.hash, p, s.now)
                .writer
                .map(|(_, until)| until);
            if until.zip(place).is_none_or(|(until, place)| until > place) {
                s.violations |= HANDED_PAST_PLACE;
            }
        }
        // A batch of readers goes when it heads the line (no writer before it), and
        // its grant ends no later than its place.
        if let Some(batch) = out.granted
            && let Some(at) = queued.iter().position(|&(t, _)| t == batch)
        {
            // (A writer ahead that leaves in this very script, e.g. withdraws, may.)
            if queued[..at]
                .iter()
                .any(|&(t, _)| !t.is_batch() && t != token)
            {
                s.violations |= READER_PASSED_WAITING_WRITER;
            }
            let deadline = s.hash.fields.get(&lua::Field::Rg(batch));
            if deadline.is_some_and(|&d| d > lua::Val::Int(queued[at].1)) {
                s.violations |= HANDED_PAST_PLACE;
            }
        }
        let new_fence = match (out.new_grant, out.reply, out.published) {
            (true, Reply::Granted(fence), _) => Some((token, fence)),
            (_, _, Some(Wake::Handed(grantee, fence))) => Some((grantee, fence)),
            _ => None,
        };
        if let Some((grantee, fence)) = new_fence {
            if fence <= s.max_fence {
                s.violations |= FENCE_NOT_RISING;
            }
            if upgrader == Some(grantee) && !self.upgrade_follows_its_grant(s, grantee) {
                s.violations |= WRITER_BEFORE_UPGRADE;
            }
            s.max_fence = s.max_fence.max(fence);
        }
        if op == Op::Release
            && !view_before.owns(token)
            && lua::live_view(&s.hash, p, s.now) != untouched
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
        note_line(s, out.unlinked);
        if let (Op::Downgrade, Mode::Write, Reply::Downgraded(1, ago)) = (op, mode, out.reply)
            && cfg.faults.failovers == 0
        {
            self.judge_downgrade(s, ago);
        }
        if cfg.faults.failovers > 0 && s.hash != before {
            s.unreplicated = Some(before);
        }
        if let Some(batch) = out.granted {
            self.deliver(s, Wake::Batch(batch));
        }
        if let Some(wake) = out.published {
            self.deliver(s, wake);
        }
        if out.recalled {
            // Reaches the processes that listen: their read holds were shared or kept.
            for c in &mut s.clients {
                if c.listening && !c.silent {
                    c.recall = true;
                }
            }
        }
        out
    }

    /// The upgrade of `token`'s upgradable hold is about to get a new fencing token:
    /// no write hold was granted since its holder took the upgradable grant (the
    /// largest fence is still the one it saw then). A holder that crashed or moved on
    /// is not asked.
    fn upgrade_follows_its_grant(&self, s: &State, token: Tok) -> bool {
        s.clients.iter().all(|c| match c.phase {
            Phase::Holding {
                token: holder,
                upgradable: Some(Upgradable { after, .. }),
                ..
            } if holder == token => after == s.max_fence,
            _ => true,
        })
    }

    /// A wake-up reaches every waiter it concerns (`wants` in src/lock/wakeups.rs,
    /// writer preference); a hand-over reaches the writer or upgrade it names. An
    /// upgrade waits for nothing else.
    fn deliver(&self, s: &mut State, wake: Wake) {
        for c in s.clients.iter_mut().filter(|c| !c.silent) {
            let (token, access) = match c.phase {
                Phase::Waiting { token, access, .. } => (token, access),
                Phase::Holding { token, .. } if c.wait().is_some() => (token, Access::Upgrade),
                _ => continue,
            };
            match (wake, access) {
                (Wake::Handed(named, fence), Access::Write | Access::Upgrade) if named == token => {
                    c.handed = Some(fence);
                }
                // Its batch was granted: it holds (the message is its hand-over; it
                // names the batch, which the reader checks when it takes it).
                (Wake::Batch(batch), Access::Read)
                    if c.wait().and_then(|w| w.batch) == Some(batch) =>
                {
                    c.handed = Some(batch.generation() as i64);
                }
                (Wake::Batch(_), Access::Read | Access::UpgradableRead) => c.woken = true,
                (_, Access::Upgrade) => {}
                (Wake::All, _)
                | (Wake::Readers, Access::Read | Access::UpgradableRead)
                | (Wake::Upgradable, Access::UpgradableRead) => c.woken = true,
                _ => {}
            }
        }
    }

    /// A waiter takes a hand-over message: it holds if the fence shows the
    /// hand-over came after its last refusal, counting from that refusal's send;
    /// otherwise the message only wakes it. An upgrade's read hold ends with it.
    fn take_handed(&self, s: &mut State, i: u8) -> Option<()> {
        let now = s.now;
        let write_lease = self.cfg.handed_lease(i as usize, Mode::Write);
        let read_lease = self.cfg.handed_lease(i as usize, Mode::Read);
        let c = &mut s.clients[i as usize];
        let fence = c.handed.take()?;
        let wait = c.wait()?;
        let token = c.token()?;
        if let Phase::Waiting {
            access: Access::Read,
            ..
        } = c.phase
        {
            if wait.batch.map(|b| b.generation() as i64) != Some(fence) {
                c.woken = true; // a message for a batch it no longer waits in
                return Some(());
            }
            // Its batch's grant: read until its last refusal's send plus the first lease.
            c.phase = Phase::Holding {
                token,
                mode: Mode::Read,
                since: now,
                until: wait.refused_sent + read_lease,
                fence: 0,
                lost: false,
                upgradable: None,
            };
            c.woken = false;
            return Some(());
        }
        let handed_lease = write_lease;
        if fence > wait.refused_fence {
            c.phase = Phase::Holding {
                token,
                mode: Mode::Write,
                since: now,
                until: wait.refused_sent + handed_lease,
                fence,
                lost: false,
                upgradable: None,
            };
            c.woken = false;
        } else {
            c.woken = true;
        }
        Some(())
    }

    /// A refusal of a waiting acquire or upgrade (its retry hint, the fence it saw,
    /// the batch it waits in): the wait it starts or goes on with. The first
    /// refusal subscribes, then tries again at once.
    fn refused(
        &self,
        woken: &mut bool,
        previous: Option<Wait>,
        (now, sent): (Time, Time),
        (hint, refused_fence, batch): (Time, i64, Option<Tok>),
    ) -> Wait {
        let recheck_at = now + hint.clamp(self.cfg.recheck.0, self.cfg.recheck.1);
        let (since, paused) = match previous {
            Some(wait) => (wait.since, wait.paused),
            None => (now, false),
        };
        *woken = previous.is_none();
        Wait {
            since,
            recheck_at,
            paused,
            refused_sent: sent,
            refused_fence,
            batch,
        }
    }

    /// The client takes the reply of `op`, sent at `sent`.
    fn take_reply(&self, s: &mut State, i: usize, op: Op, token: Tok, sent: Time, out: Outcome) {
        let cfg = &self.cfg;
        let now = s.now;
        let max_fence = s.max_fence;
        let c = &mut s.clients[i];
        // An evicted hold may only learn that it is gone.
        let continues = matches!(
            op,
            Op::Renew
                | Op::Downgrade
                | Op::FencedWrite
                | Op::Acquire {
                    access: Access::Upgrade,
                    ..
                }
        );
        let succeeded = matches!(
            out.reply,
            Reply::Granted(_) | Reply::Int(1..) | Reply::Downgraded(1, _)
        );
        if c.evicted && continues && succeeded {
            s.violations |= EVICTED_CAME_BACK;
        }
        if !continues {
            c.evicted = false;
        }
        match (op, out.reply, c.phase) {
            (Op::Acquire { access, .. }, Reply::Granted(fence), _) => {
                let mode = access.mode();
                c.phase = Phase::Holding {
                    token,
                    mode,
                    since: now,
                    until: sent + cfg.held_for(i, mode),
                    fence,
                    lost: false,
                    upgradable: (access == Access::UpgradableRead).then_some(Upgradable {
                        after: max_fence,
                        upgrading: None,
                    }),
                };
                c.woken = false;
                c.handed = None;
            }
            (
                Op::Acquire {
                    access: Access::Upgrade,
                    wait,
                },
                reply,
                Phase::Holding {
                    upgradable: Some(held),
                    ..
                },
            ) => {
                let upgrading = match reply {
                    Reply::Refused(hint, fence) if wait => Some(self.refused(
                        &mut c.woken,
                        held.upgrading,
                        (now, sent),
                        (hint, fence, None),
                    )),
                    // try_upgrade refused: the hold stays upgradable.
                    _ => None,
                };
                if let Phase::Holding {
                    upgradable: Some(u),
                    lost,
                    ..
                } = &mut c.phase
                {
                    u.upgrading = upgrading;
                    // The upgradable hold is gone: the guard's lease is lost.
                    *lost |= reply == Reply::Lost;
                }
                if upgrading.is_none() {
                    c.woken = false;
                }
            }
            (Op::Acquire { wait: false, .. }, _, _) => c.phase = Phase::Idle,
            (
                Op::Acquire { access, .. },
                reply @ (Reply::Refused(..) | Reply::InLine(..)),
                phase,
            ) => {
                let previous = match phase {
                    Phase::Waiting { wait, .. } => Some(wait),
                    _ => None,
                };
                let (hint, refused_fence, batch) = match reply {
                    Reply::InLine(hint, batch) => (hint, 0, Some(batch)),
                    Reply::Refused(hint, fence) => (hint, fence, None),
                    _ => unreachable!(),
                };
                let wait = self.refused(
                    &mut c.woken,
                    previous,
                    (now, sent),
                    (hint, refused_fence, batch),
                );
                c.phase = Phase::Waiting {
                    token,
                    access,
                    wait,
                };
            }
            (Op::Release, _, _) => {
                c.phase = Phase::Idle;
                c.woken = false;
                c.handed = None;
            }
            (
                Op::Renew | Op::Downgrade | Op::FencedWrite,
                reply,
                Phase::Holding {
                    token,
                    mode,
                    since,
                    until,
                    fence,
                    upgradable,
                    ..
                },
            ) => {
                let ok = !matches!(reply, Reply::Int(0) | Reply::Downgraded(0, _));
                let (mode, until, upgradable) = match (op, ok) {
                    (Op::Renew, true) => {
                        (mode, until.max(sent + cfg.held_for(i, mode)), upgradable)
                    }
                    (Op::Downgrade, true) if mode == Mode::Write => {
                        (Mode::Read, sent + cfg.held_for(i, Mode::Read), None)
                    }
                    // An upgradable hold becomes a plain one; its lease goes on.
                    (Op::Downgrade, true) => (mode, until, None),
                    _ => (mode, until, upgradable),
                };
                c.phase = Phase::Holding {
                    token,
                    mode,
                    since,
                    until,
                    fence,
                    lost: !ok,
                    upgradable,
                };
                // A read renewal that says a writer waits calls the hold back, as
                // a call-back message does, but cannot be lost (lua/renew.lua).
                if op == Op::Renew && reply == Reply::Int(2) && mode == Mode::Read {
                    c.called_back = true;
                }
            }
            _ => {}
        }
    }

    /// The script calls a client may make now.
    pub(super) fn calls(&self, s: &State, i: usize, out: &mut Vec<Op>) {
        let c = &s.clients[i];
        let cfg = &self.cfg;
        let due =
            |wait: Wait| !self.timed_out(s, wait.since) && (c.woken || s.now >= wait.recheck_at);
        let believes = c.believes(s.now).is_some();
        match c.phase {
            Phase::Idle if c.acquisitions < cfg.acquisitions => {
                let access = cfg.role(i);
                out.push(Op::Acquire { access, wait: true });
                if access != Access::Read && cfg.try_ops {
                    out.push(Op::Acquire {
                        access,
                        wait: false,
                    });
                }
            }
            Phase::Waiting { access, wait, .. } if due(wait) => {
                out.push(Op::Acquire { access, wait: true });
            }
            Phase::Holding {
                upgradable:
                    Some(Upgradable {
                        upgrading: Some(wait),
                        ..
                    }),
                ..
            } => {
                // The read renewals go on while the upgrade waits.
                if believes && c.late.is_none() {
                    out.push(Op::Renew);
                }
                // The upgrade future dropped: the guard goes with it, released.
                out.push(Op::Release);
                if due(wait) {
                    out.push(Op::Acquire {
                        access: Access::Upgrade,
                        wait: true,
                    });
                }
            }
            Phase::Holding { .. } if c.kept_until.is_some() && self.kept_hold_ends(s, c) => {
                out.push(Op::Release);
            }
            Phase::Holding { since, .. }
                if c.kept_until.is_none() && s.now >= since + cfg.max_hold =>
            {
                out.push(Op::Release);
            }
            Phase::Holding {
                mode, upgradable, ..
            } => {
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
                if upgradable.is_some() && believes {
                    if cfg.downgrade {
                        out.push(Op::Downgrade);
                    }
                    out.push(Op::Acquire {
                        access: Access::Upgrade,
                        wait: true,
                    });
                    if cfg.try_ops {
                        out.push(Op::Acquire {
                            access: Access::Upgrade,
                            wait: false,
                        });
                    }
                }
            }
            _ => {}
        }
    }

    pub(super) fn step(
        &self,
        last: &State,
        action: Action,
        note: Option<&mut String>,
    ) -> Option<State> {
        let mut s = last.clone();
        let now = s.now;
        match action {
            Action::Call(i, op, lose_reply) => self.call(&mut s, i, op, lose_reply, note)?,
            Action::Resend(i, lose_reply) => self.resend(&mut s, i, lose_reply, note)?,
            Action::Fail(i) => self.fail(&mut s, i, note)?,
            Action::ForceRelease => self.force_release(&mut s, note),
            Action::GiveUp(i) => self.give_up(&mut s, i, note)?,
            Action::Crash(i) => {
                s.budget.crashes -= 1;
                let token = s.clients[i as usize].token();
                // A renewal still on its way may extend what it left: no bound then.
                let bound = token
                    .filter(|_| s.clients[i as usize].late.is_none())
                    .and_then(|t| s.hash.waiter_bound(t, now).map(|b| (t, b)));
                let c = &mut s.clients[i as usize];
                c.dead = bound;
                c.phase = Phase::Crashed;
                c.inflight = None;
                c.woken = false;
                c.handed = None;
            }
            Action::Pause(i) => {
                s.budget.pauses -= 1;
                let c = &mut s.clients[i as usize];
                let longest = (0..self.cfg.clients() as usize)
                    .flat_map(|i| [self.cfg.lease(i, Mode::Read), self.cfg.write_lease])
                    .max()
                    .unwrap_or(0);
                c.paused_until = now + longest + 1;
                if let Some(wait) = c.wait_mut() {
                    wait.paused = true;
                }
            }
            Action::LoseWakeup(i) => {
                s.budget.lost_messages -= 1;
                let c = &mut s.clients[i as usize];
                (c.woken, c.handed, c.recall) = (false, None, false);
                c.eviction_notice = false;
            }
            Action::Silence(i) => {
                s.budget.silenced -= 1;
                let c = &mut s.clients[i as usize];
                (c.silent, c.woken, c.handed, c.recall) = (true, false, None, false);
                c.eviction_notice = false;
            }
            Action::TakeEviction(i) => {
                let c = &mut s.clients[i as usize];
                c.eviction_notice = false;
                if let Phase::Holding { lost, .. } = &mut c.phase {
                    // The process marks its shared or kept read hold lost.
                    c.told_evicted = true;
                    *lost = true;
                }
            }
            Action::DropClient(i) => {
                s.budget.dropped_clients -= 1;
                s.clients[i as usize].dropped_at = Some(now);
            }
            Action::TakeHanded(i) => self.take_handed(&mut s, i)?,
            Action::TakeRecall(i) => {
                let c = &mut s.clients[i as usize];
                (c.recall, c.called_back) = (false, true);
            }
            Action::Join(i) => {
                if s.clients[i as usize].told_evicted {
                    s.violations |= JOINED_AFTER_EVICTION;
                }
                let beside_writer = s
                    .clients
                    .iter()
                    .any(|w| w.believes_unevicted(now) == Some(Mode::Write));
                if s.clients[i as usize].evicted && beside_writer {
                    s.violations |= JOINED_BESIDE_WRITER;
                }
                let c = &mut s.clients[i as usize];
                if let Phase::Holding { since, .. } = &mut c.phase {
                    *since = now;
                }
                (c.kept_until, c.listening) = (None, true);
                c.joins += 1;
            }
            Action::Keep(i) => {
                let keep = self.cfg.keep?;
                let c = &mut s.clients[i as usize];
                (c.kept_until, c.listening) = (Some(now + keep), true);
            }
            Action::Failover => self.failover(&mut s)?,
            Action::Original(i) => self.original(&mut s, i, note)?,
            Action::SendLateRenewal(i) => self.send_late_renewal(&mut s, i)?,
            Action::LateRenewalArrives(i) => self.late_renewal_arrives(&mut s, i, note)?,
            Action::Tick => self.advance(&mut s),
        }
        // What a process knows of its read hold goes with the hold.
        for c in &mut s.clients {
            let read = matches!(
                c.phase,
                Phase::Holding {
                    mode: Mode::Read,
                    upgradable: None,
                    ..
                }
            );
            if !read {
                (c.listening, c.recall, c.called_back, c.kept_until) = (false, false, false, None);
                (c.eviction_notice, c.told_evicted) = (false, false);
            }
        }
        self.note_grantable(&mut s);
        Some(s)
    }

    /// A client calls `op` (its reply lost when `lose_reply`).
    fn call(
        &self,
        s: &mut State,
        i: u8,
        op: Op,
        lose_reply: bool,
        note: Option<&mut String>,
    ) -> Option<()> {
        let now = s.now;
        let i = i as usize;
        let token = match (op, s.clients[i].token()) {
            (Op::Acquire { .. }, Some(t)) => t, // a retry of a waiting acquire
            (Op::Acquire { .. }, None) => self.fresh_token(s, i),
            (_, Some(t)) => t,
            (_, None) => return None,
        };
        let mode = match (op, s.clients[i].phase) {
            (Op::Acquire { access, .. }, _) => access.mode(),
            (_, Phase::Holding { mode, .. }) => mode,
            _ => self.cfg.role(i).mode(),
        };
        if matches!(op, Op::Acquire { .. }) && s.clients[i].phase == Phase::Idle {
            s.clients[i].acquisitions += 1;
        }
        if !Self::beside_the_upgrade(&s.clients[i], op) {
            s.clients[i].acted = true;
        }
        let out = self.exec(s, op, token, mode);
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
            self.take_reply(s, i, op, token, now, out);
        }
        Some(())
    }

    /// The driver resends a request whose reply was lost; the client takes this
    /// reply, unless it is lost again (`lose_reply`: the request stays in flight).
    fn resend(
        &self,
        s: &mut State,
        i: u8,
        lose_reply: bool,
        note: Option<&mut String>,
    ) -> Option<()> {
        let i = i as usize;
        let inflight = s.clients[i].inflight.take()?;
        s.clients[i].acted = true;
        let mode = match (inflight.op, s.clients[i].phase) {
            (Op::Acquire { access, .. }, _) => access.mode(),
            (_, Phase::Holding { mode, .. }) => mode,
            _ => self.cfg.role(i).mode(),
        };
        let out = self.exec(s, inflight.op, inflight.token, mode);
        if let Some(note) = note {
            let _ = write!(note, "{}", describe(inflight.op, &out));
            if lose_reply {
                note.push_str(" (reply lost)");
            }
        }
        if lose_reply {
            s.budget.lost_replies -= 1;
            s.clients[i].inflight = Some(inflight);
        } else {
            self.take_reply(s, i, inflight.op, inflight.token, inflight.sent, out);
        }
        Some(())
    }

    /// A request whose reply was lost (its script ran once or more) ends in an error,
    /// and the client does what the crate does then: a failed acquire withdraws its
    /// token (`Pending`); a failed `try_upgrade` keeps the upgradable guard as it
    /// was, a failed `upgrade` or `downgrade` drops the guard, which releases it; a
    /// failed renewal is tried again by the renewal task; a failed release leaves
    /// the hold to its lease; a failed fenced write changes nothing.
    fn fail(&self, s: &mut State, i: u8, note: Option<&mut String>) -> Option<()> {
        let i = i as usize;
        let inflight = s.clients[i].inflight.take()?;
        s.budget.errors -= 1;
        s.clients[i].acted = true;
        let drops_guard = match inflight.op {
            Op::Acquire {
                access: Access::Upgrade,
                wait,
            } => wait,
            Op::Acquire { .. } | Op::Downgrade => true,
            Op::Release => {
                s.clients[i].phase = Phase::Idle;
                false
            }
            Op::Renew | Op::FencedWrite => false,
        };
        if drops_guard {
            let out = self.exec(s, Op::Release, inflight.token, Mode::Read);
            if let Some(note) = note {
                let _ = write!(note, "releases its token: {}", describe(Op::Release, &out));
            }
            let c = &mut s.clients[i];
            (c.phase, c.woken, c.handed) = (Phase::Idle, false, None);
        }
        Some(())
    }

    /// An operator ends every hold (`force_release`).
    fn force_release(&self, s: &mut State, note: Option<&mut String>) {
        s.budget.forced_releases -= 1;
        let p = self.cfg.params;
        let before = s.hash.clone();
        note_line(s, 0);
        let out = lua::force_release(&mut s.hash, &p, s.now);
        note_line(s, out.unlinked);
        // Holders, and waiters the lock was handed to that have not taken the message.
        for c in &mut s.clients {
            if matches!(c.phase, Phase::Holding { .. }) || c.handed.is_some() {
                c.evicted = true;
            }
            // `x`, published first, reaches the processes that listen on the lock.
            if out.evicted && c.listening && !c.silent {
                c.eviction_notice = true;
            }
        }
        if let Some(note) = note {
            let _ = write!(note, "{}", describe(Op::Release, &out));
        }
        if self.cfg.faults.failovers > 0 && s.hash != before {
            s.unreplicated = Some(before);
        }
        if let Some(Wake::Handed(_, fence)) = out.published {
            if fence <= s.max_fence {
                s.violations |= FENCE_NOT_RISING;
            }
            s.max_fence = s.max_fence.max(fence);
        }
        if let Some(wake) = out.published {
            self.deliver(s, wake);
        }
    }

    /// A waiter times out and withdraws its request; an upgrade that times out
    /// releases the upgradable hold (`RwLockUpgradableReadGuard::upgrade`).
    fn give_up(&self, s: &mut State, i: u8, note: Option<&mut String>) -> Option<()> {
        let i = i as usize;
        let token = s.clients[i].token()?;
        let out = self.exec(s, Op::Release, token, Mode::Read);
        if let Some(note) = note {
            let _ = write!(note, "withdraws: {}", describe(Op::Release, &out));
        }
        s.clients[i].phase = Phase::Idle;
        s.clients[i].woken = false;
        s.clients[i].handed = None;
        s.clients[i].acted = true;
        s.clients[i].gave_up = true;
        Some(())
    }

    /// A replica without the last script's writes takes over.
    fn failover(&self, s: &mut State) -> Option<()> {
        s.budget.failovers -= 1;
        s.hash = s.unreplicated.take()?;
        note_line(s, 0);
        // The promotion takes time; restored subscriptions wake every waiter.
        self.advance(s);
        for c in &mut s.clients {
            if c.wait().is_some() {
                c.woken = true;
            }
        }
        // Waiters could not reach the server meanwhile: count from now.
        for c in &mut s.clients {
            c.grantable_since = None;
        }
        Some(())
    }

    /// An original-design client acquires (when idle) or releases.
    fn original(&self, s: &mut State, i: u8, note: Option<&mut String>) -> Option<()> {
        let now = s.now;
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
        Some(())
    }

    /// The renewal task sends a renewal that will reach the server late.
    fn send_late_renewal(&self, s: &mut State, i: u8) -> Option<()> {
        let now = s.now;
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
        Some(())
    }

    /// That renewal reaches the server now.
    fn late_renewal_arrives(&self, s: &mut State, i: u8, note: Option<&mut String>) -> Option<()> {
        let now = s.now;
        let i = i as usize;
        let late = s.clients[i].late.take()?;
        let out = self.exec(s, Op::Renew, late.token, late.mode);
        if let Some(note) = note {
            let _ = write!(note, "{}", describe(Op::Renew, &out));
        }
        let c = &s.clients[i];
        if out.reply == Reply::Int(1) && c.evicted && c.token() == Some(late.token) {
            s.violations |= EVICTED_CAME_BACK;
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
                // Two renewals may finish out of order: the later send decides.
                *until = (*until).max(late.sent + self.cfg.held_for(i, late.mode));
            } else {
                *lost = true;
            }
        }
        Some(())
    }

    /// Updates `grantable_since` of every waiter: would its acquire be granted now?
    fn note_grantable(&self, s: &mut State) {
        for i in 0..s.clients.len() {
            let c = s.clients[i];
            let access = match c.phase {
                Phase::Waiting { access, .. } => Some(access),
                Phase::Holding { .. } => Some(Access::Upgrade),
                _ => None,
            };
            let grantable = match (c.wait(), c.token(), access) {
                (Some(wait), Some(token), Some(access))
                    if !wait.paused && c.paused_until <= s.now && c.inflight.is_none() =>
                {
                    let mut h = s.hash.clone();
                    let out = self.acquire(&mut h, s.now, token, access, true);
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
}

/// Brings the checker's record of when each entry joined the line up to
/// date after a script that took `unlinked` entries out at the head of the line:
/// the others keep their times, and the entries after them joined it now. (By the
/// links alone a token taken out and put back at the tail in one script, a waiter
/// whose place lapsed at the head, would look as if it had stayed.)
pub(super) fn note_line(s: &mut State, unlinked: usize) {
    let now = s.now;
    let kept: Vec<(Tok, Time)> = s.queued_at.iter().skip(unlinked).copied().collect();
    let line = s.hash.line();
    let stayed = kept.len() <= line.len() && kept.iter().zip(&line).all(|(&(t, _), &u)| t == u);
    let kept = if stayed { kept } else { Vec::new() }; // a failover, an expired key
    s.queued_at = line
        .iter()
        .enumerate()
        .map(|(i, &t)| kept.get(i).copied().unwrap_or((t, now)))
        .collect();
}

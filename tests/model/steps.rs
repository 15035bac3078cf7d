//! How each action changes the state: the scripts a client calls, the replies it
//! takes, the faults and time passing (`Lock::step`).

use std::fmt::Write as _;

use super::lua::{self, Outcome, Reply, Time, Tok, Wake};
use super::system::{
    Action, Client, FENCE_NOT_RISING, FENCED_WRITE_WENT_BACK, Inflight, Late, Lock, Mode, Op,
    Phase, READER_PASSED_QUEUED_WRITER, STRAY_RELEASE_CHANGED, State, WRITER_JUMPED_QUEUE,
};
use super::traces::describe;

impl Lock {
    /// Does the client owe a step before time may pass?
    pub(super) fn owes_step(&self, s: &State, c: &Client) -> bool {
        if c.paused_until > s.now || c.phase == Phase::Crashed || c.acted {
            return false;
        }
        if let Some(inflight) = c.inflight {
            return inflight.sent < s.now;
        }
        if c.handed.is_some() {
            return true;
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

    pub(super) fn timed_out(&self, s: &State, since: Time) -> bool {
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
                    (lua::Field::R(t) | lua::Field::Wait(t) | lua::Field::Wn(t), _) => mark(*t),
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
        // What any script would do here besides its own operation.
        let untouched = {
            let mut h = s.hash.clone();
            lua::settle_only(&mut h, p, s.now);
            lua::live_view(&h, p, s.now)
        };
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
        let queued = &view_before.queue;
        if let (Op::Acquire { mode, .. }, Reply::Granted(_)) = (op, out.reply) {
            match mode {
                Mode::Write
                    if out.new_grant && queued.first().is_some_and(|&(t, _)| t != token) =>
                {
                    s.violations |= WRITER_JUMPED_QUEUE;
                }
                Mode::Read if !queued.is_empty() && !view_before.readers.contains_key(&token) => {
                    s.violations |= READER_PASSED_QUEUED_WRITER;
                }
                _ => {}
            }
        }
        // A hand-over goes to the first live place, or the one after the caller's
        // when the caller's own operation withdrew that.
        if let Some(Wake::Handed(grantee, _)) = out.published
            && queued.first().is_none_or(|&(t, _)| t != grantee)
            && queued
                .iter()
                .find(|&&(t, _)| t != token)
                .is_none_or(|&(t, _)| t != grantee)
        {
            s.violations |= WRITER_JUMPED_QUEUE;
        }
        let new_fence = match (out.new_grant, out.reply, out.published) {
            (true, Reply::Granted(fence), _) | (_, _, Some(Wake::Handed(_, fence))) => Some(fence),
            _ => None,
        };
        if let Some(fence) = new_fence {
            if fence <= s.max_fence {
                s.violations |= FENCE_NOT_RISING;
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
        if cfg.faults.failovers > 0 && s.hash != before {
            s.unreplicated = Some(before);
        }
        if let Some(wake) = out.published {
            self.deliver(s, wake);
        }
        out
    }

    /// A wake-up reaches every waiter it concerns (`wants` in src/wakeups.rs,
    /// writer preference); a hand-over reaches the writer it names.
    fn deliver(&self, s: &mut State, wake: Wake) {
        for c in &mut s.clients {
            if let Phase::Waiting { token, mode, .. } = c.phase {
                match (wake, mode) {
                    (Wake::All, _) | (Wake::Readers, Mode::Read) => c.woken = true,
                    (Wake::Handed(named, fence), Mode::Write) if named == token => {
                        c.handed = Some(fence);
                    }
                    _ => {}
                }
            }
        }
    }

    /// A waiter takes a hand-over message: it holds if the fence shows the
    /// hand-over came after its last refusal, counting from that refusal's send;
    /// otherwise the message only wakes it.
    fn take_handed(&self, s: &mut State, i: u8) -> Option<()> {
        let now = s.now;
        let handed_lease = self.cfg.handed_lease();
        let c = &mut s.clients[i as usize];
        let fence = c.handed.take()?;
        let Phase::Waiting {
            token,
            refused_sent,
            refused_fence,
            ..
        } = c.phase
        else {
            return None;
        };
        if fence > refused_fence {
            c.phase = Phase::Holding {
                token,
                mode: Mode::Write,
                since: now,
                until: refused_sent + handed_lease,
                fence,
                lost: false,
            };
            c.woken = false;
        } else {
            c.woken = true;
        }
        Some(())
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
                c.handed = None;
            }
            (Op::Acquire { wait: false, .. }, _, _) => c.phase = Phase::Idle,
            (Op::Acquire { mode, .. }, Reply::Refused(hint, refused_fence), phase) => {
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
                            refused_sent: sent,
                            refused_fence,
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
                            refused_sent: sent,
                            refused_fence,
                        }
                    }
                };
            }
            (Op::Release, _, _) => {
                c.phase = Phase::Idle;
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
    pub(super) fn calls(&self, s: &State, i: usize, out: &mut Vec<Op>) {
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
            Action::Resend(i) => self.resend(&mut s, i, note)?,
            Action::GiveUp(i) => self.give_up(&mut s, i, note)?,
            Action::Crash(i) => {
                s.budget.crashes -= 1;
                let c = &mut s.clients[i as usize];
                c.phase = Phase::Crashed;
                c.inflight = None;
                c.woken = false;
                c.handed = None;
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
                let c = &mut s.clients[i as usize];
                (c.woken, c.handed) = (false, None);
            }
            Action::TakeHanded(i) => self.take_handed(&mut s, i)?,
            Action::Failover => self.failover(&mut s)?,
            Action::Original(i) => self.original(&mut s, i, note)?,
            Action::SendLateRenewal(i) => self.send_late_renewal(&mut s, i)?,
            Action::LateRenewalArrives(i) => self.late_renewal_arrives(&mut s, i, note)?,
            Action::Tick => self.advance(&mut s),
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
        let mode = match s.clients[i].phase {
            Phase::Holding { mode, .. } | Phase::Waiting { mode, .. } => mode,
            _ => self.cfg.role(i),
        };
        if matches!(op, Op::Acquire { .. }) && s.clients[i].phase == Phase::Idle {
            s.clients[i].acquisitions += 1;
        }
        s.clients[i].acted = true;
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

    /// The driver resends a request whose reply was lost; the client takes this reply.
    fn resend(&self, s: &mut State, i: u8, note: Option<&mut String>) -> Option<()> {
        let i = i as usize;
        let inflight = s.clients[i].inflight.take()?;
        s.clients[i].acted = true;
        let mode = match (inflight.op, s.clients[i].phase) {
            (_, Phase::Holding { mode, .. }) => mode,
            (Op::Acquire { mode, .. }, _) => mode,
            _ => self.cfg.role(i),
        };
        let out = self.exec(s, inflight.op, inflight.token, mode);
        if let Some(note) = note {
            let _ = write!(note, "{}", describe(inflight.op, &out));
        }
        self.take_reply(s, i, inflight.op, inflight.token, inflight.sent, out);
        Some(())
    }

    /// A waiter times out and withdraws its request.
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
        // The promotion takes time; subscriptions are restored with a `*`.
        self.advance(s);
        self.deliver(s, Wake::All);
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
        Some(())
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
}

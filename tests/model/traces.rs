//! Readable traces: a checker path replayed with stable client names, each step and
//! state as text.

use std::fmt::Write as _;

use super::lua::{Outcome, Reply};
use super::system::{
    Access, Action, EVICTED_CAME_BACK, FENCE_NOT_RISING, FENCED_WRITE_WENT_BACK, HANDED_PAST_PLACE,
    Lock, Op, Phase, READER_PASSED_WAITING_WRITER, STRAY_RELEASE_CHANGED, State, Upgradable,
    WRITER_BEFORE_UPGRADE, WRITER_JUMPED_QUEUE,
};
use super::{Named, wake_name};

impl Lock {
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
                Action::Resend(i, lost) => Action::Resend(map(i), lost),
                Action::Fail(i) => Action::Fail(map(i)),
                Action::GiveUp(i) => Action::GiveUp(map(i)),
                Action::Crash(i) => Action::Crash(map(i)),
                Action::Pause(i) => Action::Pause(map(i)),
                Action::LoseWakeup(i) => Action::LoseWakeup(map(i)),
                Action::TakeHanded(i) => Action::TakeHanded(map(i)),
                Action::TakeRecall(i) => Action::TakeRecall(map(i)),
                Action::Join(i) => Action::Join(map(i)),
                Action::Keep(i) => Action::Keep(map(i)),
                Action::Silence(i) => Action::Silence(map(i)),
                Action::TakeEviction(i) => Action::TakeEviction(map(i)),
                Action::DropClient(i) => Action::DropClient(map(i)),
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

    /// One step as a line of a trace.
    pub fn describe_step(&self, last: &State, action: Action) -> String {
        let mut note = String::new();
        self.step(last, action, Some(&mut note));
        let who = |i: u8| self.cfg.name(i as usize);
        let what = match action {
            Action::Call(i, op, _) => format!("{} {}", who(i), op_name(op)),
            Action::Resend(i, lost) => {
                let op = last.clients[i as usize].inflight.map(|f| f.op);
                let lost = if lost { " (reply lost again)" } else { "" };
                format!(
                    "{} resends {}{lost}",
                    who(i),
                    op.map_or("?".into(), op_name)
                )
            }
            Action::Fail(i) => {
                let op = last.clients[i as usize].inflight.map(|f| f.op);
                format!(
                    "{}'s {} ends in an error",
                    who(i),
                    op.map_or("?".into(), op_name)
                )
            }
            Action::ForceRelease => "an operator forces a release".into(),
            Action::GiveUp(i) => format!("{} times out", who(i)),
            Action::Crash(i) => format!("{} crashes", who(i)),
            Action::Pause(i) => format!("{} pauses past its lease", who(i)),
            Action::LoseWakeup(i) => format!("a wake-up for {} is lost", who(i)),
            Action::TakeHanded(i) => format!("{} takes the hand-over message", who(i)),
            Action::TakeRecall(i) => format!("{} takes a writer's call-back", who(i)),
            Action::Join(i) => format!("another task of {} shares its read hold", who(i)),
            Action::Keep(i) => format!("{} keeps its read hold, idle", who(i)),
            Action::Silence(i) => format!("{}'s subscription goes silent", who(i)),
            Action::TakeEviction(i) => format!("{} takes the forced release's message", who(i)),
            Action::DropClient(i) => format!("the application drops {}'s client", who(i)),
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
        let mut out = format!("    t={}  {}\n", s.now, Named(&s.hash));
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
                READER_PASSED_WAITING_WRITER,
                "a new reader entered past a queued writer or a pending upgrade",
            ),
            (
                WRITER_BEFORE_UPGRADE,
                "a writer was granted between an upgradable hold and its upgrade",
            ),
            (
                HANDED_PAST_PLACE,
                "a hand-over's hold outlasts the place it was handed to",
            ),
            (
                EVICTED_CAME_BACK,
                "a hold ended by a forced release was renewed, upgraded or downgraded",
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
                    access,
                    wait,
                } => format!(
                    "waits to {access} as {} since t={}, re-checks at t={}",
                    super::name(token),
                    wait.since,
                    wait.recheck_at
                ),
                Phase::Holding {
                    token,
                    mode,
                    until,
                    fence,
                    lost,
                    upgradable,
                    ..
                } => {
                    let belief = if c.believes(s.now).is_some() {
                        "believes it holds"
                    } else if lost {
                        "knows its lease is lost"
                    } else {
                        "its local deadline passed"
                    };
                    let kind = match upgradable {
                        None => String::new(),
                        Some(Upgradable {
                            upgrading: None, ..
                        }) => " (upgradable)".to_owned(),
                        Some(Upgradable {
                            upgrading: Some(wait),
                            ..
                        }) => format!(
                            " (upgradable; its upgrade waits since t={}, re-checks at t={})",
                            wait.since, wait.recheck_at
                        ),
                    };
                    format!(
                        "holds {mode:?}{kind} as {} until t={until} (fence {fence}): {belief}",
                        super::name(token)
                    )
                }
            };
            let mut extra = String::new();
            if c.paused_until > s.now {
                let _ = write!(extra, ", paused until t={}", c.paused_until);
            }
            if c.woken {
                extra.push_str(", woken");
            }
            if let Some(fence) = c.handed {
                let _ = write!(extra, ", a hand-over message with fence {fence} arrived");
            }
            if let Some(until) = c.kept_until {
                let _ = write!(extra, ", kept idle until t={until}");
            } else if c.listening {
                extra.push_str(", shared");
            }
            if c.recall {
                extra.push_str(", a call-back arrived");
            }
            if c.called_back {
                extra.push_str(", called back");
            }
            if c.silent {
                extra.push_str(", its subscription silent");
            }
            if c.eviction_notice {
                extra.push_str(", a forced release's message arrived");
            }
            if let Some(at) = c.dropped_at {
                let _ = write!(extra, ", its client dropped at t={at}");
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
    let how = |wait| if wait { "" } else { ", try" };
    match op {
        Op::Acquire {
            access: Access::Read,
            ..
        } => "acquire_read".into(),
        Op::Acquire {
            access: Access::UpgradableRead,
            wait,
        } => format!("acquire_read (upgradable{})", how(wait)),
        Op::Acquire {
            access: Access::Write,
            wait: true,
        } => "acquire_write (queues)".into(),
        Op::Acquire {
            access: Access::Write,
            wait: false,
        } => "acquire_write (try)".into(),
        Op::Acquire {
            access: Access::Upgrade,
            wait,
        } => format!("acquire_write (upgrade{})", how(wait)),
        Op::Renew => "renew".into(),
        Op::Release => "release".into(),
        Op::Downgrade => "downgrade".into(),
        Op::FencedWrite => "fenced_write".into(),
    }
}

pub(super) fn describe(op: Op, out: &Outcome) -> String {
    let reply = match (op, out.reply) {
        (_, Reply::Granted(0)) => "granted".to_owned(),
        (_, Reply::Granted(f)) => format!("granted, fence {f}"),
        (_, Reply::Refused(hint, _)) => format!("refused (retry in {hint})"),
        (_, Reply::InLine(hint, b)) => {
            format!(
                "refused, waits in line in {} (retry in {hint})",
                super::name(b)
            )
        }
        (_, Reply::Lost) => "lost (the upgradable hold is gone)".to_owned(),
        (Op::FencedWrite, Reply::Int(0)) => "rejected".to_owned(),
        (Op::FencedWrite, Reply::Int(f)) => format!("written with fence {f}"),
        (_, Reply::Int(n)) => format!("returns {n}"),
        (_, Reply::Downgraded(0, _)) => "returns 0".to_owned(),
        (_, Reply::Downgraded(_, -1)) => "returns 1, no writer waits".to_owned(),
        (_, Reply::Downgraded(_, ago)) => {
            format!("returns 1, a writer waits since {ago} ago")
        }
    };
    let reply = match out.granted {
        Some(b) => format!("{reply}, grants {0} and publishes {0}", super::name(b)),
        None => reply,
    };
    match out.published {
        Some(w) => format!("{reply}, publishes {}", wake_name(w)),
        None => reply,
    }
}

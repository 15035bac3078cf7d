//! What the checker holds the model to: invariants on every state, examples it
//! must reach, and the bounds on waiting.

use stateright::Property;

use super::lua::{self, Reply, Tok};
use super::system::{
    Access, DOWNGRADED_AHEAD_OF_WRITER, EVICTED_CAME_BACK, FENCE_NOT_RISING,
    FENCED_WRITE_WENT_BACK, HANDED_PAST_PLACE, JOINED_AFTER_EVICTION, JOINED_BESIDE_WRITER, Lock,
    Mode, Phase, READ_PASSED_QUEUED_WRITER, READER_PASSED_WAITING_WRITER, READS_HELD_BACK,
    STRAY_RELEASE_CHANGED, State, WRITER_BEFORE_UPGRADE, WRITER_JUMPED_QUEUE,
};

impl Lock {
    pub(super) fn all_properties(&self) -> Vec<Property<Self>> {
        let mut props = Self::script_invariants();
        // Examples the configuration asks for; the checker fails if one is unreachable.
        props.extend(
            Self::examples()
                .into_iter()
                .filter(|p| self.cfg.examples.contains(&p.name)),
        );
        props.extend(self.holds_and_waits());
        props
    }

    /// What every script run must keep (`exec` records breaches in `violations`),
    /// and the hash's summaries.
    fn script_invariants() -> Vec<Property<Self>> {
        vec![
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
                "no new reader enters while a writer is queued or an upgrade waits",
                |_: &Lock, s: &State| s.violations & READER_PASSED_WAITING_WRITER == 0,
            ),
            Property::always(
                "no writer is granted between an upgradable hold's grant and its upgrade",
                |_: &Lock, s: &State| s.violations & WRITER_BEFORE_UPGRADE == 0,
            ),
            Property::always(
                "a hand-over's hold ends no later than the place it was handed to",
                |_: &Lock, s: &State| s.violations & HANDED_PAST_PLACE == 0,
            ),
            Property::always(
                "a hold ended by a forced release is never renewed, upgraded or downgraded",
                |_: &Lock, s: &State| s.violations & EVICTED_CAME_BACK == 0,
            ),
            Property::always(
                "a downgrade lets in no read of its client that came after a writer in line queued",
                |_: &Lock, s: &State| s.violations & READ_PASSED_QUEUED_WRITER == 0,
            ),
            Property::always(
                "a downgrade lets in the reads of its client that came before every writer in line",
                |_: &Lock, s: &State| s.violations & READS_HELD_BACK == 0,
            ),
            Property::always(
                "no task joins a read hold after its process heard of a forced release",
                |_: &Lock, s: &State| s.violations & JOINED_AFTER_EVICTION == 0,
            ),
            Property::always(
                "no task joins a read hold a forced release ended while a writer holds",
                |_: &Lock, s: &State| s.violations & JOINED_BESIDE_WRITER == 0,
            ),
            Property::always(
                "a dropped client's kept read hold ends within a tick",
                |_: &Lock, s: &State| {
                    s.clients.iter().all(|c| {
                        c.dropped_at
                            .is_none_or(|at| s.now <= at + 1 || c.kept_until.is_none())
                    })
                },
            ),
            Property::always(
                "the readers' and the queue's summaries bound their entries",
                |_: &Lock, s: &State| s.hash.summaries_agree(),
            ),
            Property::always(
                "every place in line is reachable from q:head",
                |_: &Lock, s: &State| s.hash.line_is_linked(),
            ),
            Property::always(
                "what the fast paths take for granted holds",
                |_: &Lock, s: &State| s.hash.fast_paths_may_skip(),
            ),
        ]
    }

    /// States the checker must reach when a configuration names them.
    fn examples() -> Vec<Property<Self>> {
        let mut props = vec![
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
                    let waiting = some_waiting(s, Access::Write);
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
                    queued && !writer && some_waiting(s, Access::Read)
                },
            ),
            Property::sometimes(
                "a write hold is downgraded ahead of a queued writer",
                |_: &Lock, s: &State| s.events & DOWNGRADED_AHEAD_OF_WRITER != 0,
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
            "a reader holds by its batch's grant",
            |_: &Lock, s: &State| {
                let granted = s.hash.fields.keys().any(|f| matches!(f, lua::Field::Rg(_)));
                granted
                    && s.clients.iter().any(|c| {
                        matches!(
                            c.phase,
                            Phase::Holding {
                                mode: Mode::Read,
                                ..
                            }
                        ) && c.believes(s.now).is_some()
                    })
            },
        ));
        props.push(Property::sometimes(
            "a reader reads recursively beside a queued writer",
            |m: &Lock, s: &State| {
                let queued_writer = s
                    .hash
                    .fields
                    .keys()
                    .any(|f| matches!(f, lua::Field::Wait(t) if !t.is_batch()));
                queued_writer
                    && m.cfg.recursive_reader
                    && s.clients[0].believes(s.now) == Some(Mode::Read)
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
        props.extend(Self::upgrade_examples());
        props.extend(Self::sharing_examples());
        props
    }

    /// States of reader processes whose tasks share their read hold.
    fn sharing_examples() -> Vec<Property<Self>> {
        vec![
            Property::sometimes(
                "a writer waits while a process shares its read hold",
                |_: &Lock, s: &State| {
                    let shared = s
                        .clients
                        .iter()
                        .any(|c| c.listening && c.believes(s.now).is_some());
                    shared && some_waiting(s, Access::Write)
                },
            ),
            Property::sometimes(
                "a process learns that a writer waits",
                |_: &Lock, s: &State| s.clients.iter().any(|c| c.called_back),
            ),
            Property::sometimes(
                "a process keeps its read hold idle",
                |_: &Lock, s: &State| {
                    s.clients
                        .iter()
                        .any(|c| c.kept_until.is_some() && c.believes(s.now).is_some())
                },
            ),
            Property::sometimes("a kept read hold is called back", |_: &Lock, s: &State| {
                s.clients
                    .iter()
                    .any(|c| c.kept_until.is_some() && c.called_back)
            }),
            Property::sometimes(
                "a process whose subscription is silent learns that a writer waits",
                |_: &Lock, s: &State| s.clients.iter().any(|c| c.silent && c.called_back),
            ),
            Property::sometimes(
                "a sharing process hears of a forced release",
                |_: &Lock, s: &State| s.clients.iter().any(|c| c.told_evicted),
            ),
            Property::sometimes(
                "the application drops a client that keeps its read hold",
                |_: &Lock, s: &State| s.clients.iter().any(|c| c.dropped_at.is_some()),
            ),
        ]
    }

    /// States with upgradable holds the checker must reach when asked.
    fn upgrade_examples() -> Vec<Property<Self>> {
        vec![
            Property::sometimes(
                "an upgradable holder reads beside a plain reader",
                |_: &Lock, s: &State| {
                    let plain = s.clients.iter().any(|c| {
                        matches!(
                            c.phase,
                            Phase::Holding {
                                upgradable: None,
                                ..
                            }
                        ) && c.believes(s.now) == Some(Mode::Read)
                    });
                    plain && s.clients.iter().any(|c| c.believes_upgradable(s.now))
                },
            ),
            Property::sometimes(
                "a reader waits behind a pending upgrade",
                |_: &Lock, s: &State| {
                    let fields = &s.hash.fields;
                    let only_the_upgrade = fields.contains_key(&lua::Field::UUpgrade)
                        && !fields.contains_key(&lua::Field::WOwner)
                        && !fields.keys().any(|f| matches!(f, lua::Field::Wait(_)));
                    only_the_upgrade && some_waiting(s, Access::Read)
                },
            ),
            Property::sometimes(
                "an upgrade is handed over by a reader's release",
                |_: &Lock, s: &State| {
                    s.clients.iter().any(|c| {
                        c.handed.is_some()
                            && matches!(
                                c.phase,
                                Phase::Holding {
                                    upgradable: Some(_),
                                    ..
                                }
                            )
                    })
                },
            ),
            Property::sometimes("an upgrader holds the write hold", |m: &Lock, s: &State| {
                s.clients.iter().enumerate().any(|(i, c)| {
                    m.cfg.role(i) == Access::UpgradableRead
                        && c.believes(s.now) == Some(Mode::Write)
                })
            }),
            Property::sometimes(
                "an upgradable reader waits behind another",
                |_: &Lock, s: &State| {
                    let waiting = some_waiting(s, Access::UpgradableRead);
                    waiting && s.clients.iter().any(|c| c.believes_upgradable(s.now))
                },
            ),
        ]
    }

    /// Exclusion among believed holds (when the configuration promises it) and how
    /// long waiters wait. An upgradable hold is a read hold to exclusion (also while
    /// its upgrade waits), and excludes other upgradable holds.
    fn holds_and_waits(&self) -> Vec<Property<Self>> {
        let mut props = Vec::new();
        if self.cfg.exclusion {
            props.push(Property::always(
                "no writer beside another believed hold",
                |m: &Lock, s: &State| exclusion_holds(m, s),
            ));
            props.push(Property::always(
                "at most one client believes it holds the upgradable read",
                |_: &Lock, s: &State| {
                    s.clients
                        .iter()
                        .filter(|c| c.believes_upgradable(s.now) && !c.evicted)
                        .count()
                        <= 1
                },
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
        props.push(Property::always(
            "a client that died blocks nobody past its write hold or its place in line",
            |m: &Lock, s: &State| dead_block_nobody(m, s),
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

/// A hold a forced release ended does not count: the operator chose to let others
/// in (the `evicted` property checks that it never comes back).
fn exclusion_holds(_: &Lock, s: &State) -> bool {
    let beliefs: Vec<Mode> = s
        .clients
        .iter()
        .filter_map(|c| c.believes_unevicted(s.now))
        .collect();
    beliefs.len() < 2 || !beliefs.contains(&Mode::Write)
}

fn waits_bounded(m: &Lock, s: &State) -> bool {
    let Some(bound) = m.cfg.wait_bound else {
        return true;
    };
    s.clients.iter().all(|c| {
        // An upgrade waits like a writer.
        let mode = match c.phase {
            Phase::Waiting { access, .. } => access.mode(),
            _ => Mode::Write,
        };
        match c.wait() {
            Some(wait) if !wait.paused && (mode == Mode::Write || !m.cfg.bound_writers_only) => {
                s.now - wait.since <= bound
            }
            _ => true,
        }
    })
}

/// Once a dead client's bound has passed ([`lua::Hash::waiter_bound`]), every
/// waiter's acquire that would be granted had the dead client released is granted.
fn dead_block_nobody(m: &Lock, s: &State) -> bool {
    let p = &m.cfg.params;
    s.clients.iter().all(|d| {
        let Some((dead, _)) = d.dead.filter(|&(_, bound)| s.now >= bound) else {
            return true;
        };
        s.clients.iter().all(|w| {
            // A waiting acquire, or an upgrade (it waits while its read hold goes on).
            let access = match w.phase {
                Phase::Waiting { access, .. } => access,
                _ => Access::Upgrade,
            };
            let (Some(wait), Some(token)) = (w.wait(), w.token()) else {
                return true;
            };
            if wait.paused || w.paused_until > s.now || w.inflight.is_some() {
                return true;
            }
            let granted = |h: &mut lua::Hash| {
                let out = m.acquire(h, s.now, token, access, true);
                matches!(out.reply, Reply::Granted(_))
            };
            let mut without = s.hash.clone();
            lua::release(&mut without, p, s.now, dead);
            !granted(&mut without) || granted(&mut s.hash.clone())
        })
    })
}

/// A release by a token that never held anything (`X.0`), run on a copy of `s`,
/// leaves the live state as any script would: only expired entries may go, and a
/// free lock is handed to the first queued writer.
fn stray_release_is_noop(m: &Lock, s: &State) -> bool {
    let p = &m.cfg.params;
    let token = Tok::stranger(0);
    let mut h = s.hash.clone();
    let mut untouched = s.hash.clone();
    lua::settle_only(&mut untouched, p, s.now);
    let out = lua::release(&mut h, p, s.now, token);
    out.reply == Reply::Int(0)
        && lua::live_view(&h, p, s.now) == lua::live_view(&untouched, p, s.now)
}

/// Whether a client waits to acquire with `access`.
fn some_waiting(s: &State, access: Access) -> bool {
    s.clients
        .iter()
        .any(|c| matches!(c.phase, Phase::Waiting { access: a, .. } if a == access))
}

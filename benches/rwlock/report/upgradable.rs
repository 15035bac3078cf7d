//! The upgradable-read tables: the uncontended cost against a plain read, an
//! upgrade with no other reader against `try_write`, and upgrades behind readers
//! against a writer queued behind a writer.

use std::fmt::Write as _;

use super::{at, header, ratio_cell, ratios, row};
use crate::locks::Impl;
use crate::scenarios::Bench;
use crate::stats::Results;
use crate::upgradable::{BEHIND, COUNTED_UPGRADES, PairNames, SLOW_HAND_OVER, metric::*, names::*};

/// The three tables, when the scenario ran.
pub(super) fn tables(o: &mut String, b: &Bench) {
    let r = &b.results;
    if r.get(UPGRADABLE_COST, Impl::Ours, PairNames::READ.pair_p50)
        .is_none()
    {
        return;
    }
    cost_table(o, r);
    alone_table(o, r);
    behind_table(o, b);
}

fn cost_table(o: &mut String, r: &Results) {
    let _ = writeln!(
        o,
        "\n### Upgradable reads: uncontended cost against a plain read (redis-rwlock, one task, the lock's master)\n"
    );
    let _ = writeln!(
        o,
        "`try_upgradable_read` + release and `try_read` + release in alternating blocks of {} pairs; script time and main-thread CPU per acquisition (acquire + release) as in the server-cost table.\n",
        crate::upgradable::COST_BLOCK
    );
    header(
        o,
        &[
            "mode",
            "acquire p50 (us)",
            "acquire+release p50 (us)",
            "acquire+release p99 (us)",
            "script time per acquisition (us)",
            "scripts per acquisition",
            "commands per acquisition (scripts and the commands they ran)",
            "main-thread CPU per acquisition (us)",
        ],
    );
    let (read, up) = (PairNames::READ, PairNames::UPGRADABLE);
    for (mode, m) in [("read", &read), ("upgradable read", &up)] {
        row(
            o,
            &[
                mode.into(),
                at(r, UPGRADABLE_COST, Impl::Ours, m.acquire_p50),
                at(r, UPGRADABLE_COST, Impl::Ours, m.pair_p50),
                at(r, UPGRADABLE_COST, Impl::Ours, m.pair_p99),
                at(r, UPGRADABLE_COST, Impl::Ours, m.script_us),
                at(r, UPGRADABLE_COST, Impl::Ours, m.scripts),
                at(r, UPGRADABLE_COST, Impl::Ours, m.commands),
                at(r, UPGRADABLE_COST, Impl::Ours, m.cpu_us),
            ],
        );
    }
    let ratio = |a: &str, b: &str| {
        ratio_cell(ratios(
            r.get(UPGRADABLE_COST, Impl::Ours, a),
            r.get(UPGRADABLE_COST, Impl::Ours, b),
        ))
    };
    row(
        o,
        &[
            "upgradable / read".into(),
            ratio(up.acquire_p50, read.acquire_p50),
            ratio(up.pair_p50, read.pair_p50),
            ratio(up.pair_p99, read.pair_p99),
            ratio(up.script_us, read.script_us),
            ratio(up.scripts, read.scripts),
            ratio(up.commands, read.commands),
            ratio(up.cpu_us, read.cpu_us),
        ],
    );
}

fn alone_table(o: &mut String, r: &Results) {
    let _ = writeln!(
        o,
        "\n### Upgrade with no other reader (redis-rwlock, one task)\n"
    );
    let _ = writeln!(
        o,
        "`try_upgradable_read`, then `upgrade()` timed, interleaved with a timed `try_write`; server time per script call, scripts and (un)subscribes from every master's `INFO commandstats` around each of {COUNTED_UPGRADES} further upgrades and as many `try_write`s.\n"
    );
    header(
        o,
        &[
            "",
            "p50 (us)",
            "p99 (us)",
            "server time per script call (us)",
            "scripts per upgrade (mean / most)",
            "(un)subscribes per upgrade",
        ],
    );
    let s = UPGRADE_ALONE;
    row(
        o,
        &[
            "`upgrade()`".into(),
            at(r, s, Impl::Ours, UPGRADE_P50),
            at(r, s, Impl::Ours, UPGRADE_P99),
            at(r, s, Impl::Ours, UPGRADE_SCRIPT_US),
            format!(
                "{} / {}",
                at(r, s, Impl::Ours, SCRIPTS_PER_UPGRADE),
                at(r, s, Impl::Ours, SCRIPTS_PER_UPGRADE_MAX)
            ),
            at(r, s, Impl::Ours, SUBSCRIPTIONS_PER_UPGRADE),
        ],
    );
    row(
        o,
        &[
            "`try_write`".into(),
            at(r, s, Impl::Ours, TRY_WRITE_P50),
            at(r, s, Impl::Ours, TRY_WRITE_P99),
            at(r, s, Impl::Ours, TRY_WRITE_SCRIPT_US),
            "-".into(),
            "-".into(),
        ],
    );
    let ratio =
        |a: &str, b: &str| ratio_cell(ratios(r.get(s, Impl::Ours, a), r.get(s, Impl::Ours, b)));
    row(
        o,
        &[
            "upgrade / try_write".into(),
            ratio(UPGRADE_P50, TRY_WRITE_P50),
            ratio(UPGRADE_P99, TRY_WRITE_P99),
            ratio(UPGRADE_SCRIPT_US, TRY_WRITE_SCRIPT_US),
            "-".into(),
            "-".into(),
        ],
    );
}

fn behind_table(o: &mut String, b: &Bench) {
    let r = &b.results;
    let _ = writeln!(
        o,
        "\n### Upgrade behind readers, against a writer queued behind a writer (redis-rwlock)\n"
    );
    let _ = writeln!(
        o,
        "{} iterations per reader count and run: the readers hold, `upgrade()` is refused and waits, the readers release one by one. Gap: from the last reader's release (sent / reply received) to `upgrade()` returning. Control, after each iteration on the same lock: a writer holds, `write()` queues, the holder releases. Scripts while waiting: what the waiter sent from its call to its return (every master's `INFO commandstats`, the releases taken out), after the first iteration, which subscribes to the lock's channel and is counted apart. Second attempts: iterations in which the upgrader sent a second script. Timer hand-overs: iterations slower than {} ms from the last release sent (only the 0.5-1.1 s re-check timer takes that long).\n",
        b.cfg.upgrade_iters,
        SLOW_HAND_OVER.as_millis()
    );
    header(
        o,
        &[
            "readers",
            "upgrade gap from release sent p50 (ms)",
            "p99 (ms)",
            "writer's gap p50 (ms)",
            "p99 (ms)",
            "upgrade / writer p50",
            "upgrade gap from release reply p50 (ms)",
            "p99 (ms)",
            "writer's gap from reply p50 (ms)",
            "upgrader's scripts while waiting (mean / most)",
            "first wait (subscribes)",
            "second attempts",
            "timer hand-overs",
            "writer's scripts while waiting",
        ],
    );
    for behind in &BEHIND {
        let s = behind.scenario;
        let get = |name| at(r, s, Impl::Ours, name);
        row(
            o,
            &[
                behind.readers.to_string(),
                get(GAP_SENT_P50),
                get(GAP_SENT_P99),
                get(WRITER_GAP_SENT_P50),
                get(WRITER_GAP_SENT_P99),
                ratio_cell(ratios(
                    r.get(s, Impl::Ours, GAP_SENT_P50),
                    r.get(s, Impl::Ours, WRITER_GAP_SENT_P50),
                )),
                get(GAP_REPLY_P50),
                get(GAP_REPLY_P99),
                get(WRITER_GAP_REPLY_P50),
                format!("{} / {}", get(WAITING_SCRIPTS), get(WAITING_SCRIPTS_MAX)),
                get(FIRST_WAIT_SCRIPTS),
                get(SECOND_ATTEMPTS),
                get(TIMER_WAKEUPS),
                get(WRITER_WAITING_SCRIPTS),
            ],
        );
    }
}

//! The upgradable-read tables: the uncontended cost against a plain read, an
//! upgrade with no other reader against `try_write`, and upgrades behind readers
//! against a writer queued behind a writer.

use std::fmt::Write as _;

use super::{at, cell, header, ratio_cell, ratios, row};
use crate::locks::Impl;
use crate::scenarios::Bench;
use crate::stats::Results;
use crate::upgradable::{BEHIND, COUNTED_UPGRADES, SLOW_HAND_OVER, names::*};

/// The three tables, when the scenario ran.
pub(super) fn tables(o: &mut String, b: &Bench) {
    let r = &b.results;
    if r.get(UPGRADABLE_COST, Impl::Ours, "read_pair_p50")
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
    let metrics = [
        "acquire_p50",
        "pair_p50",
        "pair_p99",
        "script_us_per_acq",
        "scripts_per_acq",
        "commands_per_acq",
        "cpu_us_per_acq",
    ];
    let get =
        |mode: &str, metric: &str| r.get(UPGRADABLE_COST, Impl::Ours, &format!("{mode}_{metric}"));
    for (label, mode) in [("read", "read"), ("upgradable read", "upgradable")] {
        let mut cells = vec![label.to_owned()];
        cells.extend(metrics.map(|metric| cell(get(mode, metric))));
        row(o, &cells);
    }
    let mut cells = vec!["upgradable / read".to_owned()];
    cells.extend(
        metrics.map(|metric| ratio_cell(ratios(get("upgradable", metric), get("read", metric)))),
    );
    row(o, &cells);
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
            at(r, s, Impl::Ours, "upgrade_p50"),
            at(r, s, Impl::Ours, "upgrade_p99"),
            at(r, s, Impl::Ours, "upgrade_script_us"),
            format!(
                "{} / {}",
                at(r, s, Impl::Ours, "scripts_per_upgrade"),
                at(r, s, Impl::Ours, "scripts_per_upgrade_max")
            ),
            at(r, s, Impl::Ours, "subscriptions_per_upgrade"),
        ],
    );
    row(
        o,
        &[
            "`try_write`".into(),
            at(r, s, Impl::Ours, "try_write_p50"),
            at(r, s, Impl::Ours, "try_write_p99"),
            at(r, s, Impl::Ours, "try_write_script_us"),
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
            ratio("upgrade_p50", "try_write_p50"),
            ratio("upgrade_p99", "try_write_p99"),
            ratio("upgrade_script_us", "try_write_script_us"),
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
                get("gap_from_release_sent_p50"),
                get("gap_from_release_sent_p99"),
                get("writer_gap_from_release_sent_p50"),
                get("writer_gap_from_release_sent_p99"),
                ratio_cell(ratios(
                    r.get(s, Impl::Ours, "gap_from_release_sent_p50"),
                    r.get(s, Impl::Ours, "writer_gap_from_release_sent_p50"),
                )),
                get("gap_from_release_reply_p50"),
                get("gap_from_release_reply_p99"),
                get("writer_gap_from_release_reply_p50"),
                format!(
                    "{} / {}",
                    get("scripts_while_waiting"),
                    get("scripts_while_waiting_max")
                ),
                get("first_wait_scripts"),
                get("second_attempts"),
                get("timer_wakeups"),
                get("writer_scripts_while_waiting"),
            ],
        );
    }
}

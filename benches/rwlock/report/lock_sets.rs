//! The lock-set table and its targets: a set of one slot against a single write,
//! a set over the three masters against its members taken by hand, and two clients
//! looping on sets listed in opposite orders against one global order by hand.

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::{Target, at, cell, header, ratio_cell, ratio_target, ratios, row, value_target};
use crate::lock_sets::{COUNTED, OPPOSITE_WAIT, names::*, opposite_secs};
use crate::locks::Impl;
use crate::scenarios::{Bench, Config};
use crate::stats::Results;

/// The table, when the scenario ran.
pub(super) fn tables(o: &mut String, b: &Bench) {
    let r = &b.results;
    let ran = [SET_ONE_SLOT, SET_THREE_MASTERS, SET_OPPOSITE]
        .iter()
        .any(|s| r.metrics.keys().any(|(scenario, _, _)| scenario == s));
    if !ran {
        return;
    }
    let _ = writeln!(
        o,
        "\n### Lock sets (redis-rwlock)\n\nOne slot: a set of 4 members sharing a hash tag (2 read, 2 write) on master 0, `acquire()` against a single `write()` of the same tag, interleaved, {} each, releases untimed; script calls per acquire from the master's `INFO commandstats` around {COUNTED} sets (and {COUNTED} single writes) acquired in a row and kept. Three masters: a set of 4 members (2 read, 2 write), one slot each, over the 3 masters, against the same locks taken by hand one by one in the set's order, interleaved. Opposite orders: two clients loop `acquire()` + release on a set of 2 writers {{a, b}} (a on master 0, b on master 1), one listing a then b, the other b then a, wait limit {} s (a timeout counts as a deadlock), {} s; against the same loop with each client taking `a.write()` then `b.write()` by hand and releasing both together, {} s, in alternating halves.\n",
        b.cfg.uncontended_iters,
        OPPOSITE_WAIT.as_secs(),
        opposite_secs(b.cfg.quick),
        opposite_secs(b.cfg.quick),
    );
    header(o, &["measure", "set", "baseline", "set / baseline"]);
    let both = |s: &'static str, what: &str, set: &str, base: &str| {
        vec![
            what.to_owned(),
            at(r, s, Impl::Ours, set),
            at(r, s, Impl::Ours, base),
            ratio_cell(ratios(
                r.get(s, Impl::Ours, set),
                r.get(s, Impl::Ours, base),
            )),
        ]
    };
    for (s, what, set, base) in [
        (
            SET_ONE_SLOT,
            "one slot: acquire p50 (us), against a single write()",
            "set_acquire_p50",
            "write_acquire_p50",
        ),
        (
            SET_ONE_SLOT,
            "one slot: acquire p99 (us)",
            "set_acquire_p99",
            "write_acquire_p99",
        ),
        (
            SET_ONE_SLOT,
            "one slot: script calls per acquire",
            "set_scripts_per_acquire",
            "write_scripts_per_acquire",
        ),
        (
            SET_ONE_SLOT,
            "one slot: commands per acquire (script calls and the commands they ran)",
            "set_commands_per_acquire",
            "write_commands_per_acquire",
        ),
        (
            SET_ONE_SLOT,
            "one slot: script time per acquire (us)",
            "set_script_us_per_acquire",
            "write_script_us_per_acquire",
        ),
        (
            SET_THREE_MASTERS,
            "three masters: acquire p50 (us), against the 4 locks one by one",
            "set_acquire_p50",
            "by_hand_acquire_p50",
        ),
        (
            SET_THREE_MASTERS,
            "three masters: acquire p99 (us)",
            "set_acquire_p99",
            "by_hand_acquire_p99",
        ),
        (
            SET_OPPOSITE,
            "opposite orders: acquires/s (both clients), against one order by hand",
            "set_per_s",
            "by_hand_per_s",
        ),
        (
            SET_OPPOSITE,
            "opposite orders: wait for both p50 (ms)",
            "set_wait_ms_p50",
            "by_hand_wait_ms_p50",
        ),
        (
            SET_OPPOSITE,
            "opposite orders: wait for both p99 (ms)",
            "set_wait_ms_p99",
            "by_hand_wait_ms_p99",
        ),
        (
            SET_OPPOSITE,
            "opposite orders: fewer client's acquires / the other's",
            "set_client_share",
            "by_hand_client_share",
        ),
    ] {
        row(o, &both(s, what, set, base));
    }
    for (what, set, base) in [
        (
            "opposite orders: timeouts",
            "set_timeouts",
            "by_hand_timeouts",
        ),
        (
            "opposite orders: other failures",
            "set_failures",
            "by_hand_failures",
        ),
    ] {
        row(
            o,
            &[
                what.to_owned(),
                at(r, SET_OPPOSITE, Impl::Ours, set),
                at(r, SET_OPPOSITE, Impl::Ours, base),
                "-".to_owned(),
            ],
        );
    }
}

/// The lock sets' targets.
pub(super) fn targets(r: &Results, out: &mut Vec<Target>) {
    let get = |s, m: &str| r.get(s, Impl::Ours, m);
    if get(SET_ONE_SLOT, "set_acquire_p50").is_some() {
        out.push(value_target(
            "a set of 4 members in one slot, uncontended: one request per acquire (script calls per acquire = 1)".into(),
            get(SET_ONE_SLOT, "set_scripts_per_acquire"),
            "",
            |x| (x - 1.0).abs() < 1e-9,
        ));
        out.push(ratio_target(
            "... acquire p50 <= 1.2x a single write() p50 (interleaved)".into(),
            get(SET_ONE_SLOT, "set_acquire_p50"),
            get(SET_ONE_SLOT, "write_acquire_p50"),
            "us",
            |x| x <= 1.2,
        ));
    }
    if get(SET_THREE_MASTERS, "set_acquire_p50").is_some() {
        out.push(ratio_target(
            "a set of 4 members on 3 masters: acquire p50 <= 1.2x the members taken one by one in order (interleaved)".into(),
            get(SET_THREE_MASTERS, "set_acquire_p50"),
            get(SET_THREE_MASTERS, "by_hand_acquire_p50"),
            "us",
            |x| x <= 1.2,
        ));
    }
    if let Some(timeouts) = get(SET_OPPOSITE, "set_timeouts") {
        out.push(Target {
            name: "two clients looping opposite-order sets of 2 writers: 0 timeouts, in every run"
                .into(),
            measured: format!(
                "{} (by hand, one order: {})",
                cell(Some(timeouts)),
                cell(get(SET_OPPOSITE, "by_hand_timeouts"))
            ),
            met: Some(timeouts.max() == 0.0 && !timeouts.runs.is_empty()),
        });
        out.push(ratio_target(
            "... throughput >= 1/1.2 of the same loop with one global order written by hand (interleaved)".into(),
            get(SET_OPPOSITE, "set_per_s"),
            get(SET_OPPOSITE, "by_hand_per_s"),
            "/s",
            |x| x >= 1.0 / 1.2,
        ));
    }
}

/// The scenario's parameters, for the result file.
pub(super) fn parameters(cfg: &Config) -> Value {
    json!({
        "one_slot_members": 4,
        "three_masters_members": 4,
        "timed_iterations": cfg.uncontended_iters,
        "counted_acquires": COUNTED,
        "opposite_wait_ms": OPPOSITE_WAIT.as_millis() as u64,
        "opposite_secs_per_variant": opposite_secs(cfg.quick),
    })
}

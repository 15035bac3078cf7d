//! The at-scale table: each script's server time per call with many read holds
//! and a long writers' queue, against the same script with 2 readers and 2 writers.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use super::{header, ratio_cell, row, runs_cell};
use crate::at_scale::safe_and_in_order;
use crate::scale::{PHASES, SMALL};
use crate::scenarios::Bench;

/// Per (phase, script), one value per run: calls and time per call, small and at
/// scale, and their ratio.
#[derive(Default)]
struct Series {
    small_calls: Vec<f64>,
    small_us: Vec<f64>,
    large_calls: Vec<f64>,
    large_us: Vec<f64>,
    ratio: Vec<f64>,
}

/// Every (phase, script) of every run's comparison.
fn series(b: &Bench) -> BTreeMap<(usize, String), Series> {
    let mut all: BTreeMap<(usize, String), Series> = BTreeMap::new();
    for c in &b.at_scale {
        for r in c.rows() {
            let s = all.entry((r.phase, r.script.clone())).or_default();
            s.small_calls.push(r.small.calls as f64);
            s.small_us.push(r.small.per_call());
            s.large_calls.push(r.large.calls as f64);
            s.large_us.push(r.large.per_call());
            s.ratio.push(r.ratio());
        }
    }
    all
}

/// Only the finite values (a script one case never ran has no time per call).
fn finite(v: &[f64]) -> Vec<f64> {
    v.iter().copied().filter(|x| x.is_finite()).collect()
}

/// Each script's time per call, small and at scale, then each phase's wall time
/// and the slowlog's call count beside commandstats'.
pub(super) fn table(o: &mut String, b: &Bench) {
    let Some(first) = b.at_scale.first() else {
        return;
    };
    let _ = writeln!(
        o,
        "\n### At scale: one lock, {} read holds and {} queued writers (redis-rwlock; server time per script call, the lock's master)\n",
        first.large.readers, first.large.writers
    );
    let _ = writeln!(
        o,
        "The steps are `tests/common/scale.rs` (also run by `tests/at_scale.rs`): take the read holds (long leases, no renewal), queue the writers one at a time (each started once the previous one is in the lock's hash), release the readers one by one, let the writers through. Each script call's time comes from the master's slowlog (threshold 0, so every call is logged with its duration and its SHA; `INFO commandstats` has one row for all scripts); a script is named after the phase it first runs in. The small case is {SMALL} readers and {SMALL} writers, {} times (half before, half after), pooled. Exclusion and queue order kept in every run: {}.\n",
        first.small.len(),
        if b.at_scale.iter().all(safe_and_in_order) {
            "yes"
        } else {
            "**no**"
        }
    );
    header(
        o,
        &[
            "phase",
            "script",
            "calls, small (pooled)",
            "us/call, small",
            "calls at scale",
            "us/call at scale",
            "at scale / small",
        ],
    );
    for ((phase, script), s) in series(b) {
        row(
            o,
            &[
                PHASES[phase].into(),
                script,
                runs_cell(s.small_calls),
                runs_cell(finite(&s.small_us)),
                runs_cell(s.large_calls),
                runs_cell(finite(&s.large_us)),
                ratio_cell(finite(&s.ratio)),
            ],
        );
    }
    let _ = writeln!(o);
    header(
        o,
        &[
            "phase",
            "wall time at scale (s)",
            "wall time, small (ms)",
            "script calls at scale: slowlog / commandstats",
        ],
    );
    for (phase, name) in PHASES.iter().enumerate() {
        let each = |f: &dyn Fn(&crate::scale::Comparison) -> f64| -> String {
            runs_cell(b.at_scale.iter().map(f).collect())
        };
        row(
            o,
            &[
                (*name).into(),
                each(&|c| c.large.phase_time[phase].as_secs_f64()),
                each(&|c| c.small_phase_time(phase).as_secs_f64() * 1e3),
                format!(
                    "{} / {}",
                    each(&|c| c.large.logged(phase).calls as f64),
                    each(&|c| c.large.commandstats[phase].calls as f64)
                ),
            ],
        );
    }
}

/// The comparisons for the result file, run by run.
pub(super) fn json(b: &Bench) -> Value {
    let runs: Vec<Value> = b
        .at_scale
        .iter()
        .map(|c| {
            let rows: Vec<Value> = c
                .rows()
                .iter()
                .map(|r| {
                    json!({
                        "phase": PHASES[r.phase], "script": r.script,
                        "small_calls": r.small.calls, "small_usec": r.small.usec,
                        "large_calls": r.large.calls, "large_usec": r.large.usec,
                    })
                })
                .collect();
            let phases: Vec<Value> = PHASES
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    json!({
                        "phase": name,
                        "large_secs": c.large.phase_time[i].as_secs_f64(),
                        "small_secs": c.small_phase_time(i).as_secs_f64(),
                        "large_commandstats_script_calls": c.large.commandstats[i].calls,
                        "large_commandstats_script_usec": c.large.commandstats[i].usec,
                    })
                })
                .collect();
            json!({
                "readers": c.large.readers, "writers": c.large.writers,
                "small": SMALL, "small_reps": c.small.len(),
                "safe_and_in_order": safe_and_in_order(c), "scripts": rows, "phases": phases,
            })
        })
        .collect();
    json!(runs)
}

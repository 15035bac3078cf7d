//! The reader-behind-writers table and its targets: a reader asking for reads while
//! four writers loop on the lock, with the writers on another client and on the
//! reader's own.

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::{Target, at, cell, header, num, row};
use crate::locks::Impl;
use crate::reader_behind_writers::{
    ASK_FOR, READ_EVERY, READ_HOLD, READ_WAIT, Variant, WRITE_HOLD, WRITERS,
};
use crate::scenarios::{Bench, Config};
use crate::stats::{Results, percentile};

/// The table, when the scenario ran.
pub(super) fn table(o: &mut String, b: &Bench) {
    let r = &b.results;
    let ran = |imp: Impl| {
        Variant::ALL
            .iter()
            .any(|v| r.get(v.scenario(), imp, "reads_asked").is_some())
    };
    if !Impl::ALL.into_iter().any(ran) {
        return;
    }
    let _ = writeln!(
        o,
        "\n### Reader behind a stream of writers ({WRITERS} writers looping write, hold {} ms, release, without pause; a reader asks every {} ms with a {} s wait, {} times or for {} s)\n",
        WRITE_HOLD.as_millis(),
        READ_EVERY.as_millis(),
        READ_WAIT.as_secs(),
        b.cfg.reader_behind_writers_reads,
        ASK_FOR.as_secs()
    );
    let _ = writeln!(
        o,
        "Reader wait: from asking to the grant; a read that timed out counts as its whole wait{}.\n",
        if b.cfg.reader_behind_writers_reads < 100 {
            format!(
                ". With {} reads a run, p99 (nearest rank) is the run's worst wait",
                b.cfg.reader_behind_writers_reads
            )
        } else {
            String::new()
        }
    );
    header(
        o,
        &[
            "implementation",
            "writers",
            "reads granted / asked",
            "reads timed out",
            "reader wait p50 (ms)",
            "p99 (ms)",
            "max (ms)",
            "first read's wait (ms)",
            "writes/s",
            "exclusion violations",
        ],
    );
    for imp in Impl::ALL {
        if imp == Impl::Rslock {
            let dash = "-".to_owned();
            let mut cells = vec![imp.label().to_owned(), "no read mode".into()];
            cells.extend(std::iter::repeat_n(dash, 8));
            row(o, &cells);
            continue;
        }
        if !ran(imp) {
            continue;
        }
        for variant in Variant::ALL {
            let s = variant.scenario();
            row(
                o,
                &[
                    imp.label().into(),
                    variant.label().into(),
                    format!(
                        "{} / {}",
                        at(r, s, imp, "reads_granted"),
                        at(r, s, imp, "reads_asked")
                    ),
                    at(r, s, imp, "reads_timed_out"),
                    at(r, s, imp, "read_wait_p50"),
                    at(r, s, imp, "read_wait_p99"),
                    at(r, s, imp, "read_wait_max"),
                    at(r, s, imp, "first_read_wait"),
                    at(r, s, imp, "writes_per_s"),
                    at(r, s, imp, "violations"),
                ],
            );
        }
    }
    let mut pooled_lines = Vec::new();
    for imp in Impl::ALL {
        for variant in Variant::ALL {
            if let Some((n, p50, p99, max)) = pooled(r, variant.scenario(), imp) {
                pooled_lines.push(format!(
                    "{}, {}: {n} reads, p50 {} ms, p99 {} ms, max {} ms",
                    imp.label(),
                    variant.label(),
                    num(p50),
                    num(p99),
                    num(max)
                ));
            }
        }
    }
    if !pooled_lines.is_empty() {
        let _ = writeln!(
            o,
            "\nThe reader's waits pooled over the runs: {}.",
            pooled_lines.join("; ")
        );
    }
}

/// Pooled over every run: p50, p99 and the worst of all the reader's waits.
pub(super) fn pooled(
    r: &Results,
    scenario: &'static str,
    imp: Impl,
) -> Option<(usize, f64, f64, f64)> {
    let mut all: Vec<f64> = r.samples.get(&(scenario, imp))?.concat();
    let n = all.len();
    (n > 0).then(|| {
        (
            n,
            percentile(&mut all, 50.0),
            percentile(&mut all, 99.0),
            percentile(&mut all, 100.0),
        )
    })
}

/// The crate's targets, judged on every run (not the median): every read granted,
/// and no read waiting 100 ms or more.
pub(super) fn targets(r: &Results, out: &mut Vec<Target>) {
    for variant in Variant::ALL {
        let s = variant.scenario();
        let (Some(asked), Some(granted)) = (
            r.get(s, Impl::Ours, "reads_asked"),
            r.get(s, Impl::Ours, "reads_granted"),
        ) else {
            continue;
        };
        let all_granted = asked
            .runs
            .iter()
            .zip(&granted.runs)
            .all(|(a, g)| a == g && *a > 0.0);
        out.push(Target {
            name: format!(
                "reader behind {WRITERS} writers ({}): every read granted, in every run",
                variant.label()
            ),
            measured: format!(
                "{} of {} granted, {} timed out",
                cell(Some(granted)),
                cell(Some(asked)),
                cell(r.get(s, Impl::Ours, "reads_timed_out"))
            ),
            met: Some(all_granted),
        });
        if let Some(worst) = r.get(s, Impl::Ours, "read_wait_max") {
            out.push(Target {
                name: format!(
                    "reader behind {WRITERS} writers ({}): worst read wait < 100 ms, in every run",
                    variant.label()
                ),
                measured: format!("{} ms", cell(Some(worst))),
                met: Some(worst.max() < 100.0),
            });
        }
    }
}

/// The scenario's parameters, for the result file.
pub(super) fn parameters(cfg: &Config) -> Value {
    json!({
        "writers": WRITERS,
        "write_hold_ms": WRITE_HOLD.as_millis() as u64,
        "read_hold_ms": READ_HOLD.as_millis() as u64,
        "read_every_ms": READ_EVERY.as_millis() as u64,
        "read_wait_ms": READ_WAIT.as_millis() as u64,
        "ask_for_ms": ASK_FOR.as_millis() as u64,
        "reads": cfg.reader_behind_writers_reads,
    })
}

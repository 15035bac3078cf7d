//! The contention tables and plot: server work per acquisition against the number
//! of tasks on one lock, this crate beside the original design.

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

use super::{PlotResult, Spread, at, draw_legend, draw_spread, header, ratio_cell, ratios, row};
use crate::contention::{CONTENTION_HOLD, Family};
use crate::locks::{Impl, Original};
use crate::scenarios::Bench;
use crate::stats::{Results, percentile};

/// One table per family that ran, with its flatness row.
pub(super) fn tables(o: &mut String, b: &Bench) {
    let r = &b.results;
    let [ours, original] = Family::IMPLS;
    for family in Family::ALL {
        let sizes = family.sizes();
        let ran = |imp: Impl| {
            (0..sizes.len()).any(|i| r.get(family.scenario(i), imp, "cpu_us_per_acq").is_some())
        };
        if !ran(ours) && !ran(original) {
            continue;
        }
        let _ = writeln!(
            o,
            "\n### Server work per acquisition under contention: {}\n",
            family.title()
        );
        let _ = writeln!(
            o,
            "Each task loops: acquire (waiting), hold `sleep({} ms)`, release; the tasks run {} s first, then are counted over {} s. Per acquisition granted in that window, on the lock's master unless marked: main-thread CPU (`used_cpu_user_main_thread + used_cpu_sys_main_thread`), commands (every `INFO commandstats` row: script calls and the commands they ran), scripts and script time (EVAL*/FCALL* rows). The original design polls every {} ms while it waits. Flatness: the largest size's value over the smallest's, run by run.\n",
            CONTENTION_HOLD.as_millis(),
            b.cfg.contention_settle_secs,
            b.cfg.contention_secs,
            Original::POLL.as_millis()
        );
        header(
            o,
            &[
                "tasks",
                "redis-rwlock CPU us/acq",
                "original CPU us/acq",
                "CPU ratio (redis-rwlock / original)",
                "redis-rwlock commands/acq",
                "original commands/acq",
                "redis-rwlock scripts/acq",
                "original scripts/acq",
                "redis-rwlock script us/acq",
                "original script us/acq",
                "redis-rwlock acq/s",
                "original acq/s",
                "CPU us/acq, all masters: redis-rwlock / original",
                "violations: redis-rwlock / original",
            ],
        );
        for (index, tasks) in sizes.iter().enumerate() {
            let s = family.scenario(index);
            row(
                o,
                &[
                    tasks.to_string(),
                    at(r, s, ours, "cpu_us_per_acq"),
                    at(r, s, original, "cpu_us_per_acq"),
                    ratio_cell(ratios(
                        r.get(s, ours, "cpu_us_per_acq"),
                        r.get(s, original, "cpu_us_per_acq"),
                    )),
                    at(r, s, ours, "commands_per_acq"),
                    at(r, s, original, "commands_per_acq"),
                    at(r, s, ours, "scripts_per_acq"),
                    at(r, s, original, "scripts_per_acq"),
                    at(r, s, ours, "script_us_per_acq"),
                    at(r, s, original, "script_us_per_acq"),
                    at(r, s, ours, "acquisitions_per_s"),
                    at(r, s, original, "acquisitions_per_s"),
                    format!(
                        "{} / {}",
                        at(r, s, ours, "cpu_us_per_acq_all_masters"),
                        at(r, s, original, "cpu_us_per_acq_all_masters")
                    ),
                    format!(
                        "{} / {}",
                        at(r, s, ours, "violations"),
                        at(r, s, original, "violations")
                    ),
                ],
            );
        }
        let (small, large) = (family.scenario(0), family.scenario(sizes.len() - 1));
        let flat = |imp: Impl, name: &str| {
            ratio_cell(ratios(r.get(large, imp, name), r.get(small, imp, name)))
        };
        row(
            o,
            &[
                format!("flatness ({} / {})", sizes[sizes.len() - 1], sizes[0]),
                flat(ours, "cpu_us_per_acq"),
                flat(original, "cpu_us_per_acq"),
                "-".into(),
                flat(ours, "commands_per_acq"),
                flat(original, "commands_per_acq"),
                flat(ours, "scripts_per_acq"),
                flat(original, "scripts_per_acq"),
                flat(ours, "script_us_per_acq"),
                flat(original, "script_us_per_acq"),
                flat(ours, "acquisitions_per_s"),
                flat(original, "acquisitions_per_s"),
                format!(
                    "{} / {}",
                    flat(ours, "cpu_us_per_acq_all_masters"),
                    flat(original, "cpu_us_per_acq_all_masters")
                ),
                "-".into(),
            ],
        );
        ceiling(o, r, family);
    }
}

/// The readers' family beside two locks with no Redis, under the same tasks and
/// holds: `tokio::sync::RwLock` in one process, and this crate on its in-memory
/// store. What they reach is what the order and the holds allow.
fn ceiling(o: &mut String, r: &Results, family: Family) {
    let sizes = family.sizes();
    let rate = |s: &'static str, imp: Impl| r.get(s, imp, "acquisitions_per_s");
    if !(0..sizes.len()).any(|i| {
        Impl::REFERENCES
            .iter()
            .any(|&imp| rate(family.scenario(i), imp).is_some())
    }) {
        return;
    }
    let _ = writeln!(
        o,
        "\nThe same tasks and holds on two locks with no Redis, whose steps cost (next to) nothing: `tokio::sync::RwLock` shared in the benchmark's process (strict arrival order, so a waiting writer holds new readers back, as this crate's default does), and this crate on its in-memory store (the same protocol and order, no network). Their throughput is what the order and the holds allow.\n"
    );
    header(
        o,
        &[
            "tasks",
            "tokio::sync::RwLock acq/s",
            "in-memory store acq/s",
            "redis-rwlock / tokio::sync::RwLock",
            "tokio::sync::RwLock / original",
        ],
    );
    let [ours, original] = Family::IMPLS;
    for (index, tasks) in sizes.iter().enumerate() {
        let s = family.scenario(index);
        row(
            o,
            &[
                tasks.to_string(),
                at(r, s, Impl::InProcess, "acquisitions_per_s"),
                at(r, s, Impl::InMemory, "acquisitions_per_s"),
                ratio_cell(ratios(rate(s, ours), rate(s, Impl::InProcess))),
                ratio_cell(ratios(rate(s, Impl::InProcess), rate(s, original))),
            ],
        );
    }
}

/// Main-thread CPU per acquisition on the lock's master against the number of
/// tasks: one panel per family, median and min-max per point. Nothing is written
/// when no contention scenario ran.
pub fn plot_contention(b: &Bench, path: &Path, subtitle: &str) -> PlotResult {
    let r = &b.results;
    let ran = Family::ALL.iter().any(|family| {
        (0..family.sizes().len()).any(|i| {
            Family::IMPLS
                .iter()
                .any(|&imp| r.get(family.scenario(i), imp, "cpu_us_per_acq").is_some())
        })
    });
    if !ran {
        return Ok(());
    }
    let root = SVGBackend::new(path, (1100, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, body) = root.split_vertically(40);
    title.titled(
        "Server CPU per acquisition against the number of tasks on one lock (the lock's master)",
        ("sans-serif", 18),
    )?;
    let panels = body.split_evenly((1, Family::ALL.len()));
    for (panel, family) in panels.iter().zip(Family::ALL) {
        let sizes = family.sizes();
        let top = (0..sizes.len())
            .flat_map(|i| Family::IMPLS.map(|imp| r.get(family.scenario(i), imp, "cpu_us_per_acq")))
            .flatten()
            .flat_map(|m| m.runs.iter().copied())
            .filter(|v| v.is_finite())
            .fold(1.0f64, f64::max)
            * 1.15;
        let (lo, hi) = (sizes[0] as f64 * 0.7, sizes[sizes.len() - 1] as f64 * 1.4);
        let mut chart = ChartBuilder::on(panel)
            .caption(family.title(), ("sans-serif", 15))
            .margin(15)
            .x_label_area_size(50)
            .y_label_area_size(60)
            .build_cartesian_2d(
                (lo..hi)
                    .log_scale()
                    .with_key_points(sizes.iter().map(|&t| t as f64).collect::<Vec<_>>()),
                0f64..top,
            )?;
        chart
            .configure_mesh()
            .x_desc(format!("tasks (log scale) — {subtitle}"))
            .y_desc("main-thread CPU per acquisition, us")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()?;
        for imp in Family::IMPLS {
            let points: Vec<Spread> = sizes
                .iter()
                .enumerate()
                .filter_map(|(index, &tasks)| {
                    let m = r.get(family.scenario(index), imp, "cpu_us_per_acq")?;
                    let mut runs = m.runs.clone();
                    let med = percentile(&mut runs, 50.0);
                    Some((tasks as f64, med, m.min(), m.max()))
                })
                .collect();
            draw_spread(&mut chart, imp, &points)?;
        }
        draw_legend(&mut chart)?;
    }
    root.present()?;
    Ok(())
}

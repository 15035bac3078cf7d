//! The output: a markdown report (printed and saved), a JSON result file and three
//! SVG plots.

mod contention;
mod lock_sets;
mod reader_behind_writers;
mod shared_reads;
mod upgradable;

use std::fmt::Write as _;
use std::path::Path;

use plotters::coord::combinators::WithKeyPoints;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use serde_json::{Value, json};

use crate::contention::{CONTENTION_HOLD, CONTENTION_WRITE_PERCENT, Family};
use crate::locks::{Impl, Original};
use crate::scenarios::{
    Bench, HANDOFF_HOLD, INSTANCES, STREAM_READ_HOLD, STREAM_READERS, STREAM_WRITER_EVERY,
    SWEEP_TASKS, TASKS, WAITERS, WRITE_PERCENT, WRITERS, names::*,
};
use crate::stats::{Metric, Results, percentile};
use crate::upgradable::{BEHIND, names::*};

pub use contention::plot_contention;

/// Where and on what the benchmark ran.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Machine {
    pub date_utc: String,
    pub nproc: usize,
    pub cpu: String,
    pub loadavg_start: String,
    pub loadavg_end: String,
    pub redis_server: String,
    pub command: String,
    pub cluster: String,
}

impl Machine {
    pub fn probe(command: &str, cluster: &str) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")?
                    .split_once(':')
                    .map(|(_, v)| v.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".into());
        // The binary the launcher runs (REDIS_SERVER, as local-cluster.sh picks it).
        let server = std::env::var("REDIS_SERVER")
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "redis-server".to_owned());
        let redis_server = std::process::Command::new(server)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_else(|_| "unknown".into());
        Machine {
            date_utc: chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string(),
            nproc: std::thread::available_parallelism().map_or(1, usize::from),
            cpu,
            loadavg_start: loadavg(),
            loadavg_end: String::new(),
            redis_server,
            command: command.to_owned(),
            cluster: cluster.to_owned(),
        }
    }
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// A number with as many digits as it deserves.
fn num(v: f64) -> String {
    if v.is_nan() {
        "n/a".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// "median (min-max)" over the runs.
fn cell(m: Option<&Metric>) -> String {
    match m {
        None => "-".into(),
        Some(m) if m.runs.len() == 1 => num(m.median()),
        Some(m) => format!("{} ({}-{})", num(m.median()), num(m.min()), num(m.max())),
    }
}

/// Run-by-run ratios `a[i] / b[i]`: both come from the same run.
fn ratios(a: Option<&Metric>, b: Option<&Metric>) -> Vec<f64> {
    match (a, b) {
        (Some(a), Some(b)) => a
            .runs
            .iter()
            .zip(&b.runs)
            .map(|(x, y)| x / y)
            .filter(|r| r.is_finite())
            .collect(),
        _ => Vec::new(),
    }
}

fn ratio_cell(mut r: Vec<f64>) -> String {
    if r.is_empty() {
        return "-".into();
    }
    let lo = r.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = r.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let med = percentile(&mut r, 50.0);
    if r.len() == 1 {
        format!("{med:.2}x")
    } else {
        format!("{med:.2}x ({lo:.2}-{hi:.2})")
    }
}

fn median_of(mut r: Vec<f64>) -> f64 {
    percentile(&mut r, 50.0)
}

/// One target: what it asks, what was measured, met or not.
pub struct Target {
    pub name: String,
    pub measured: String,
    pub met: Option<bool>,
}

/// A target that compares the runs of `a` with those of `b` (ratio a/b), met when
/// the median ratio satisfies `ok`.
fn ratio_target(
    name: String,
    a: Option<&Metric>,
    b: Option<&Metric>,
    unit: &str,
    ok: impl Fn(f64) -> bool,
) -> Target {
    let ratio = ratios(a, b);
    let med = median_of(ratio.clone());
    Target {
        name,
        measured: format!("{} vs {} {unit}: {}", cell(a), cell(b), ratio_cell(ratio)),
        met: (!med.is_nan()).then(|| ok(med)),
    }
}

/// A target on one metric's median.
fn value_target(name: String, m: Option<&Metric>, unit: &str, ok: impl Fn(f64) -> bool) -> Target {
    let med = m.map_or(f64::NAN, Metric::median);
    Target {
        name,
        measured: format!("{} {unit}", cell(m)),
        met: (!med.is_nan()).then(|| ok(med)),
    }
}

/// The targets the crate holds itself to (the targets table of BENCHMARKS.md).
pub fn targets(b: &Bench) -> Vec<Target> {
    let r = &b.results;
    let mut out = Vec::new();
    let ours = |scenario, name: &str| r.get(scenario, Impl::Ours, name);
    let against = |scenario, imp, name: &str| (ours(scenario, name), r.get(scenario, imp, name));
    for mode in ["read", "write"] {
        for (place, suffix) in [
            ("in a spawned task", ""),
            ("on the thread blocking on the runtime", "_main_thread"),
        ] {
            out.push(ratio_target(
                format!(
                    "uncontended try_{mode} p50 <= 1.3x trivial EVALSHA p50 (interleaved, {place})"
                ),
                ours(UNCONTENDED, &format!("{mode}_acquire_p50{suffix}")),
                ours(UNCONTENDED, &format!("{mode}_evalsha_p50{suffix}")),
                "us",
                |x| x <= 1.3,
            ));
        }
    }
    for mode in ["read", "write"] {
        let med = |name: &str| r.median(UNCONTENDED, Impl::Ours, &format!("{mode}_{name}"));
        let client = med("acquire_p50") - med("evalsha_p50") - med("server_us_per_script");
        out.push(Target {
            name: format!(
                "client-side cost per uncontended {mode} acquire (acquire p50 - trivial EVALSHA p50 - the script's server time), reported"
            ),
            measured: format!("{} us", num(client)),
            met: None,
        });
    }
    for mode in ["read", "write"] {
        let (a, b) = against(
            SERVER_COST,
            Impl::Original,
            &format!("{mode}_script_us_per_acq"),
        );
        out.push(ratio_target(
            format!("server script time per uncontended {mode} acquisition (acquire + release) <= the original design's"),
            a,
            b,
            "us",
            |x| x <= 1.0,
        ));
    }
    for mode in ["read", "write"] {
        for (what, metric, whose, limit) in [
            ("server script time", "script_us_per_acq", "", 2.0),
            (
                "main-thread CPU",
                "cpu_us_per_acq",
                ", the lock's master",
                1.25,
            ),
        ] {
            let (a, b) = against(SERVER_COST, Impl::Original, &format!("{mode}_{metric}"));
            out.push(ratio_target(
                format!("{what} per uncontended {mode} acquisition (acquire + release{whose}) <= {limit:?}x the original design's"),
                a,
                b,
                "us",
                move |x| x <= limit,
            ));
        }
    }
    out.push(ratio_target(
        "read-heavy, 64 tasks, 64 locks: main-thread CPU per acquisition (all masters) <= 1.4x the original design's".to_owned(),
        r.get(READ_HEAVY_64, Impl::Ours, "cpu_us_per_acquisition"),
        r.get(READ_HEAVY_64, Impl::Original, "cpu_us_per_acquisition"),
        "us",
        |x| x <= 1.4,
    ));
    // Read-heavy throughput: (what, scenario, against, at least this ratio).
    for (what, scenario, against, floor) in [
        (
            "64 tasks, one lock: throughput >= 1.5x the original design's",
            READ_HEAVY_1,
            Impl::Original,
            1.5,
        ),
        (
            "64 tasks, 64 locks: throughput >= 1.0x the original design's",
            READ_HEAVY_64,
            Impl::Original,
            1.0,
        ),
        (
            "64 tasks, 64 locks: throughput ahead of rds_lock",
            READ_HEAVY_64,
            Impl::RdsLock,
            1.0,
        ),
    ] {
        out.push(ratio_target(
            format!("read-heavy, {what}"),
            r.get(scenario, Impl::Ours, "acquisitions_per_s"),
            r.get(scenario, against, "acquisitions_per_s"),
            "acq/s",
            move |x| x >= floor,
        ));
    }
    out.push(ratio_target(
        format!("writer handoff ({WRITERS} writers): rate >= 1.0x the original design's"),
        r.get(HANDOFF, Impl::Ours, "acquisitions_per_s"),
        r.get(HANDOFF, Impl::Original, "acquisitions_per_s"),
        "acq/s",
        |x| x >= 1.0,
    ));
    out.push(ratio_target(
        format!(
            "writer handoff: p99 wait <= 1.2x fair-queue bound ({WRITERS} x (hold p50 + gap p50))"
        ),
        r.get(HANDOFF, Impl::Ours, "wait_p99"),
        r.get(HANDOFF, Impl::Ours, "fair_bound"),
        "ms",
        |x| x <= 1.2,
    ));
    // Single measures: (what, scenario, metric, unit, at most this).
    let mut single: Vec<(String, &str, &str, &str, f64)> = [
        (
            "scripts per acquisition in the read-heavy mix (one lock) <= 2.1",
            READ_HEAVY_1,
            "scripts_per_acquisition",
            "",
            2.1,
        ),
        (
            "writer handoff: idle gap p50 <= 0.5 ms",
            HANDOFF,
            "gap_p50",
            "ms",
            0.5,
        ),
        // One script per second, with room for the re-check jitter.
        (
            "<= 1 lock script per waiter per second while waiting",
            WAITING,
            "scripts_per_waiter_s",
            "",
            1.05,
        ),
        (
            "upgrade with no other reader: scripts per upgrade (the most) <= 1",
            UPGRADE_ALONE,
            "scripts_per_upgrade_max",
            "",
            1.0,
        ),
    ]
    .into_iter()
    .map(|(what, scenario, metric, unit, limit)| (what.to_owned(), scenario, metric, unit, limit))
    .collect();
    for behind in &BEHIND {
        let readers = behind.label();
        single.push((
            format!("upgrade behind {readers}: scripts the upgrader sends while waiting, mean (channel subscribed: the refused attempt only) <= 1.01"),
            behind.scenario,
            "scripts_while_waiting",
            "",
            1.01,
        ));
        single.push((
            format!("upgrade behind {readers}: hand-overs left to the 0.5-1 s re-check timer (slower than 250 ms) = 0"),
            behind.scenario,
            "timer_wakeups",
            "",
            0.0,
        ));
    }
    for (what, scenario, metric, unit, limit) in single {
        out.push(value_target(
            what,
            r.get(scenario, Impl::Ours, metric),
            unit,
            move |x| x <= limit,
        ));
    }
    out.push(value_target(
        "writer behind busy readers: p99 wait < 20 ms".into(),
        r.get(STREAM, Impl::Ours, "writer_wait_p99"),
        "ms",
        |x| x < 20.0,
    ));
    reader_behind_writers::targets(r, &mut out);
    for (what, metric, limit) in [
        (
            "scripts per acquisition (MONITOR) <= 2.02",
            "scripts_per_acquisition",
            2.02,
        ),
        (
            "read attempts beyond the first per read (MONITOR) <= 0.01",
            "extra_read_attempts_per_read",
            0.01,
        ),
    ] {
        out.push(value_target(
            format!("read-heavy mix on one lock from {INSTANCES} clients: {what}"),
            r.get(READ_HEAVY_SCRIPTS_CLIENTS, Impl::Ours, metric),
            "",
            move |x| x <= limit,
        ));
    }
    upgradable_targets(r, &mut out);
    shared_read_targets(r, &mut out);
    sharing_cost_targets(r, &mut out);
    lock_sets::targets(r, &mut out);
    for family in Family::ALL {
        let sizes = family.sizes();
        // The first bound from when the scripts were first measured, the second
        // from when they got their fast paths.
        for (i, size, limit) in [1.0, 1.5]
            .into_iter()
            .flat_map(|limit| sizes.iter().enumerate().map(move |(i, s)| (i, s, limit)))
        {
            out.push(ratio_target(
                format!(
                    "{}, {size} tasks: server CPU per acquisition <= {limit:.1}x the original design's",
                    family.id()
                ),
                r.get(
                    family.scenario(i),
                    Impl::Ours,
                    "cpu_us_per_acq",
                ),
                r.get(
                    family.scenario(i),
                    Impl::Original,
                    "cpu_us_per_acq",
                ),
                "us",
                move |x| x <= limit,
            ));
        }
        out.push(ratio_target(
            format!(
                "{}: flat, CPU per acquisition at {} tasks <= 1.25x at {}",
                family.id(),
                sizes[2],
                sizes[0]
            ),
            r.get(family.scenario(2), Impl::Ours, "cpu_us_per_acq"),
            r.get(family.scenario(0), Impl::Ours, "cpu_us_per_acq"),
            "us",
            |x| x <= 1.25,
        ));
    }
    out
}

/// Sharing where it does not pay: no slower and no hungrier than not sharing.
fn sharing_cost_targets(r: &Results, out: &mut Vec<Target>) {
    use crate::sharing_cost::names::*;
    let soak = |name: &str| r.get(SOAK_MIX, Impl::Ours, name);
    out.push(ratio_target(
        "soak-like mix (96 tasks over 3 clients, 300 locks, 90% reads, holds 0-2 ms, 10% dropped, 5% cancelled): acquisitions/s with shared reads >= 1.0x without".into(),
        soak("acquisitions_per_s_shared"),
        soak("acquisitions_per_s_unshared"),
        "/s",
        |x| x >= 1.0,
    ));
    out.push(ratio_target(
        "... live tasks after the mix with shared reads <= 1.2x without (plus the 3 clients' listening: see the values)".into(),
        soak("live_tasks_after_shared"),
        soak("live_tasks_after_unshared"),
        "tasks",
        |x| x <= 1.2,
    ));
    out.push(ratio_target(
        "... the heap at its peak during the mix with shared reads <= 1.2x without (the process's RSS follows it)".into(),
        soak("heap_peak_mib_shared"),
        soak("heap_peak_mib_unshared"),
        "MiB",
        |x| x <= 1.2,
    ));
    let hot = |name: &str| r.get(ONE_LOCK_KEPT, Impl::Ours, name);
    out.push(ratio_target(
        "one lock, 64 tasks of one client, 5% writes from the same client: acquisitions/s with keep_reads(500 ms) >= 1.0x the default".into(),
        hot("acquisitions_per_s_kept"),
        hot("acquisitions_per_s_default"),
        "/s",
        |x| x >= 1.0,
    ));
}

/// Shared reads: a join's latency, and a writer's wait behind a busy shared hold.
fn shared_read_targets(r: &Results, out: &mut Vec<Target>) {
    use crate::shared_reads::names::*;
    out.push(value_target(
        "a read that joins the client's read hold: p50 <= 10 us".into(),
        r.get(SHARED_JOIN, Impl::Ours, "join_us_p50"),
        "us",
        |x| x <= 10.0,
    ));
    out.push(value_target(
        "a writer on another client behind 16 busy local readers sharing one hold: p99 wait < 20 ms".into(),
        r.get(WRITER_BEHIND_SHARED, Impl::Ours, "writer_wait_ms_p99"),
        "ms",
        |x| x < 20.0,
    ));
    out.push(value_target(
        "... and no wait over 100 ms".into(),
        r.get(WRITER_BEHIND_SHARED, Impl::Ours, "writer_wait_ms_max"),
        "ms",
        |x| x <= 100.0,
    ));
    out.push(value_target(
        "a writer on another client behind an idle kept read hold: p50 <= 1 ms".into(),
        r.get(WRITER_BEHIND_KEPT, Impl::Ours, "writer_wait_ms_p50"),
        "ms",
        |x| x <= 1.0,
    ));
    out.push(value_target(
        "... p99 <= 5 ms".into(),
        r.get(WRITER_BEHIND_KEPT, Impl::Ours, "writer_wait_ms_p99"),
        "ms",
        |x| x <= 5.0,
    ));
    let kept = |imp: Impl, name: &str| r.get(READ_HEAVY_64_KEPT, imp, name);
    out.push(ratio_target(
        "reads kept: 64 tasks over 64 locks, 95% reads: server CPU per acquisition <= 0.5x the original design's".into(),
        kept(Impl::Ours, "cpu_us_per_acquisition"),
        kept(Impl::Original, "cpu_us_per_acquisition"),
        "us",
        |x| x <= 0.5,
    ));
    out.push(ratio_target(
        "... throughput >= 1.5x the original design's".into(),
        kept(Impl::Ours, "acquisitions_per_s"),
        kept(Impl::Original, "acquisitions_per_s"),
        "/s",
        |x| x >= 1.5,
    ));
    out.push(ratio_target(
        "... throughput >= 1.2x rds_lock's".into(),
        kept(Impl::Ours, "acquisitions_per_s"),
        kept(Impl::RdsLock, "acquisitions_per_s"),
        "/s",
        |x| x >= 1.2,
    ));
    // One lock, 64 tasks of one client, 98% reads (contention_readers' middle size).
    let scenario = Family::Readers.scenario(1);
    let metric = |imp: Impl, name: &str| r.get(scenario, imp, name);
    out.push(value_target(
        "one lock, 64 tasks of one client, 98% reads: scripts per acquisition <= 0.3".into(),
        metric(Impl::Ours, "scripts_per_acq"),
        "",
        |x| x <= 0.3,
    ));
    out.push(ratio_target(
        "... server CPU per acquisition <= 0.5x the original design's".into(),
        metric(Impl::Ours, "cpu_us_per_acq"),
        metric(Impl::Original, "cpu_us_per_acq"),
        "us",
        |x| x <= 0.5,
    ));
    out.push(ratio_target(
        "... throughput >= 3x the original design's".into(),
        metric(Impl::Ours, "acquisitions_per_s"),
        metric(Impl::Original, "acquisitions_per_s"),
        "/s",
        |x| x >= 3.0,
    ));
    out.push(value_target(
        "one lock, 64 tasks from 3 clients, 95% reads (MONITOR): scripts per acquisition <= 0.6"
            .into(),
        r.get(
            READ_HEAVY_SCRIPTS_CLIENTS,
            Impl::Ours,
            "scripts_per_acquisition",
        ),
        "",
        |x| x <= 0.6,
    ));
}

/// The upgradable reads' ratio targets, each against its interleaved baseline.
fn upgradable_targets(r: &Results, out: &mut Vec<Target>) {
    for (what, metric) in [
        (
            "uncontended try_upgradable_read + release p50 <= 1.1x try_read + release p50",
            "pair_p50",
        ),
        (
            "server script time per uncontended upgradable acquisition <= 1.1x a read's",
            "script_us_per_acq",
        ),
        (
            "main-thread CPU per uncontended upgradable acquisition on the lock's master <= 1.1x a read's",
            "cpu_us_per_acq",
        ),
    ] {
        out.push(ratio_target(
            format!("{what} (interleaved)"),
            r.get(UPGRADABLE_COST, Impl::Ours, &format!("upgradable_{metric}")),
            r.get(UPGRADABLE_COST, Impl::Ours, &format!("read_{metric}")),
            "us",
            |x| x <= 1.1,
        ));
    }
    // One round trip: a second one would show as nearly 2x. The upgrade's one
    // script also ends the read hold, so it is allowed a little more than a
    // try_write's.
    out.push(ratio_target(
        "upgrade with no other reader: p50 <= 1.25x try_write p50, one round trip (interleaved)"
            .into(),
        r.get(UPGRADE_ALONE, Impl::Ours, "upgrade_p50"),
        r.get(UPGRADE_ALONE, Impl::Ours, "try_write_p50"),
        "us",
        |x| x <= 1.25,
    ));
    for behind in &BEHIND {
        out.push(ratio_target(
            format!(
                "upgrade behind {}: from the last release sent to the upgrade's return, p50 <= 1.25x a queued writer's hand-over (interleaved)",
                behind.label()
            ),
            r.get(behind.scenario, Impl::Ours, "gap_from_release_sent_p50"),
            r.get(behind.scenario, Impl::Ours, "writer_gap_from_release_sent_p50"),
            "ms",
            |x| x <= 1.25,
        ));
    }
}

fn row(out: &mut String, cells: &[String]) {
    let _ = writeln!(out, "| {} |", cells.join(" | "));
}

fn header(out: &mut String, cells: &[&str]) {
    let _ = writeln!(out, "| {} |", cells.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(cells.len()));
}

/// The cell of one metric: "median (min-max)" over the runs.
fn at(r: &Results, scenario: &'static str, imp: Impl, metric: &str) -> String {
    cell(r.get(scenario, imp, metric))
}

/// The markdown report: a heading, then one table per scenario and the targets.
pub fn markdown(b: &Bench, machine: &Machine) -> String {
    let mut o = String::new();
    heading(&mut o, b, machine);
    limits_table(&mut o, &b.results);
    uncontended_table(&mut o, &b.results);
    server_cost_table(&mut o, &b.results);
    read_heavy_tables(&mut o, b);
    handoff_table(&mut o, &b.results);
    stream_table(&mut o, b);
    reader_behind_writers::table(&mut o, b);
    waiting_table(&mut o, b);
    contention::tables(&mut o, b);
    upgradable::tables(&mut o, b);
    shared_reads::tables(&mut o, b);
    lock_sets::tables(&mut o, b);
    targets_table(&mut o, b);
    if !b.notes.is_empty() {
        let _ = writeln!(o, "\n### Notes from this run\n");
        for note in &b.notes {
            let _ = writeln!(o, "- {note}");
        }
    }
    o
}

/// Where, when and how the benchmark ran.
fn heading(o: &mut String, b: &Bench, machine: &Machine) {
    let _ = writeln!(o, "## Results\n");
    let _ = writeln!(
        o,
        "{} · {} x {} · load {} -> {} · {} · `{}` · {} runs per scenario{}\n",
        machine.date_utc,
        machine.nproc,
        machine.cpu,
        machine.loadavg_start,
        machine.loadavg_end,
        machine
            .redis_server
            .split(" sha=")
            .next()
            .unwrap_or_default(),
        machine.command,
        b.cfg.runs,
        if b.cfg.quick { " (BENCH_QUICK)" } else { "" }
    );
    let _ = writeln!(
        o,
        "Cells: median over runs (min-max). Ratios are taken run by run, against the baseline measured in the same run.\n"
    );
}

/// PING and a trivial EVALSHA to the lock's master.
fn limits_table(o: &mut String, r: &Results) {
    if !ran(r, LIMITS) {
        return;
    }
    let _ = writeln!(o, "### Round-trip limits (one task, the lock's master)\n");
    header(o, &["", "p50 (us)", "p99 (us)", "server us/call"]);
    for (label, call, server) in [
        ("PING", "ping", None),
        ("EVALSHA `return 1`", "evalsha", Some("evalsha_server_us")),
    ] {
        let at = |metric: &str| at(r, LIMITS, Impl::Ours, metric);
        let server = server.map_or("-".to_owned(), at);
        row(
            o,
            &[
                label.into(),
                at(&format!("{call}_p50")),
                at(&format!("{call}_p99")),
                server,
            ],
        );
    }
}

/// One task's acquire and acquire+release, per implementation and mode.
fn uncontended_table(o: &mut String, r: &Results) {
    if !ran(r, UNCONTENDED) {
        return;
    }
    let _ = writeln!(
        o,
        "\n### Uncontended acquire and acquire+release (one task)\n"
    );
    header(
        o,
        &[
            "implementation",
            "mode",
            "acquire p50 (us)",
            "acquire p99 (us)",
            "interleaved EVALSHA p50 (us)",
            "acquire / EVALSHA p50",
            "acquire+release p50 (us)",
            "acquire+release p99 (us)",
            "server us/script",
        ],
    );
    for imp in Impl::ALL {
        for mode in ["read", "write"] {
            let get = |name: &str| r.get(UNCONTENDED, imp, &format!("{mode}_{name}"));
            if get("acquire_p50").is_none() {
                continue;
            }
            let mut cells = vec![imp.label().to_owned(), mode.to_owned()];
            cells.extend(["acquire_p50", "acquire_p99", "evalsha_p50"].map(|name| cell(get(name))));
            cells.push(ratio_cell(ratios(get("acquire_p50"), get("evalsha_p50"))));
            cells.extend(
                ["pair_p50", "pair_p99", "server_us_per_script"].map(|name| cell(get(name))),
            );
            row(o, &cells);
        }
    }
}

/// The server's cost per uncontended acquisition (acquire + release), measured on
/// the lock's master.
fn server_cost_table(o: &mut String, r: &Results) {
    if !ran(r, SERVER_COST) {
        return;
    }
    let _ = writeln!(
        o,
        "\n### Server cost per uncontended acquisition (acquire + release, one task; the lock's master)\n"
    );
    header(
        o,
        &[
            "implementation",
            "mode",
            "script time per acquisition (us)",
            "scripts per acquisition",
            "main-thread CPU per acquisition (us)",
        ],
    );
    for imp in Impl::ALL {
        for mode in ["read", "write"] {
            let m = |name: &str| format!("{mode}_{name}");
            if r.get(SERVER_COST, imp, &m("cpu_us_per_acq")).is_none() {
                continue;
            }
            let mut cells = vec![imp.label().to_owned(), mode.to_owned()];
            cells.extend(
                ["script_us_per_acq", "scripts_per_acq", "cpu_us_per_acq"]
                    .map(|name| at(r, SERVER_COST, imp, &m(name))),
            );
            row(o, &cells);
        }
    }
}

/// The read-heavy mix on one and on 64 locks, the redis-benchmark reference and
/// the task-count sweep.
fn read_heavy_tables(o: &mut String, b: &Bench) {
    let r = &b.results;
    if ran(r, READ_HEAVY_1) {
        let _ = writeln!(
            o,
            "\n### Read-heavy throughput ({TASKS} tasks, {}% reads / {WRITE_PERCENT}% writes, hold = one `yield_now`)\n",
            100 - WRITE_PERCENT
        );
        header(
            o,
            &[
                "implementation",
                "1 lock: acq/s",
                "vs original",
                "64 locks: acq/s",
                "vs original",
                "server us/script (1 lock)",
                "server us/script (64 locks)",
                "scripts/acq (1 lock)",
                "(un)subscribes/acq (1 lock)",
                "exclusion violations (1 / 64 locks)",
            ],
        );
        for imp in Impl::RW {
            let (one, many) = (
                |m| at(r, READ_HEAVY_1, imp, m),
                |m| at(r, READ_HEAVY_64, imp, m),
            );
            let vs = |s| {
                ratio_cell(ratios(
                    r.get(s, imp, "acquisitions_per_s"),
                    r.get(s, Impl::Original, "acquisitions_per_s"),
                ))
            };
            row(
                o,
                &[
                    imp.label().into(),
                    one("acquisitions_per_s"),
                    vs(READ_HEAVY_1),
                    many("acquisitions_per_s"),
                    vs(READ_HEAVY_64),
                    one("server_us_per_script"),
                    many("server_us_per_script"),
                    one("scripts_per_acquisition"),
                    one("subscriptions_per_acquisition"),
                    format!("{} / {}", one("violations"), many("violations")),
                ],
            );
        }
    }
    if !b.redis_benchmarks.is_empty() {
        let _ = writeln!(
            o,
            "\n`redis-benchmark`, the crate's read-acquire script (as captured with MONITOR), pipelined, same master as the one-lock scenario: {} requests/s, p50 {} ms, server {} us/script.\n",
            at(r, REDIS_BENCHMARK, Impl::Ours, "read_script_rps"),
            at(r, REDIS_BENCHMARK, Impl::Ours, "read_script_p50"),
            at(r, REDIS_BENCHMARK, Impl::Ours, "server_us_per_script")
        );
        let _ = writeln!(o, "```\n{}\n```", b.redis_benchmarks[0].command_line);
    }
    many_clients_table(o, r);
    let passes = [
        ("one lock, 1 client", READ_HEAVY_SCRIPTS),
        ("one lock, 3 clients", READ_HEAVY_SCRIPTS_CLIENTS),
        ("64 locks, reads kept", READ_HEAVY_SCRIPTS_KEPT),
    ];
    if passes.iter().any(|&(_, scenario)| ran(r, scenario)) {
        let _ = writeln!(
            o,
            "\n{}'s scripts per acquisition in the read-heavy mixes, by kind (a separate run watched with MONITOR on every master; counts only, MONITOR slows the server). A read that waited and was let in by a release's grant sent one attempt:\n",
            Impl::Ours.label()
        );
        // (column, metric); "read attempts beyond one per read/acq" is the older
        // "refused reads", per acquisition of either kind.
        let cols = [
            ("scripts/acq", "scripts_per_acquisition"),
            ("read attempts per read", "read_attempts_per_read"),
            (
                "read attempts beyond the first per read",
                "extra_read_attempts_per_read",
            ),
            ("write attempts per write", "write_attempts_per_write"),
            (
                "read attempts beyond one per read/acq",
                "refused_reads_per_acquisition",
            ),
            (
                "write attempts beyond one per write/acq",
                "extra_write_attempts_per_acquisition",
            ),
            ("releases/acq", "releases_per_acquisition"),
            ("other scripts/acq", "other_scripts_per_acquisition"),
            ("scripts/write", "scripts_per_write"),
        ];
        let mut titles = vec!["mix"];
        titles.extend(cols.map(|(title, _)| title));
        header(o, &titles);
        for (mix, scenario) in passes.into_iter().filter(|&(_, s)| ran(r, s)) {
            let mut cells = vec![mix.to_string()];
            cells.extend(cols.map(|(_, metric)| at(r, scenario, Impl::Ours, metric)));
            row(o, &cells);
        }
    }
    if !r.sweep.is_empty() {
        let _ = writeln!(
            o,
            "\nThroughput against task count (one lock, same mix; acquisitions/s):\n"
        );
        let mut titles = vec!["implementation".to_owned()];
        titles.extend(SWEEP_TASKS.iter().map(|t| format!("{t} tasks")));
        header(o, &titles.iter().map(String::as_str).collect::<Vec<_>>());
        for imp in Impl::RW {
            let mut cells = vec![imp.label().to_owned()];
            cells.extend(SWEEP_TASKS.map(|t| {
                r.sweep
                    .get(&(imp, t))
                    .map_or("-".to_owned(), |runs| runs_cell(runs.clone()))
            }));
            row(o, &cells);
        }
    }
}

/// One cell of a row of [`impl_table`].
#[derive(Clone, Copy)]
enum Col {
    /// A metric's median (min-max).
    At(&'static str),
    /// A metric over the original design's, run by run.
    VsOriginal(&'static str),
    /// One metric over another, run by run.
    Ratio(&'static str, &'static str),
    /// Two metrics, "a / b".
    Both(&'static str, &'static str),
}

/// Whether any implementation recorded anything in `scenario`.
fn ran(r: &Results, scenario: &str) -> bool {
    r.metrics.keys().any(|(s, _, _)| *s == scenario)
}

/// The table of `scenario`: a header of column titles, then a row per
/// implementation of `impls`, its label and a cell per column.
fn impl_table(
    o: &mut String,
    r: &Results,
    scenario: &'static str,
    impls: &[Impl],
    cols: &[(&str, Col)],
) {
    let mut titles = vec!["implementation"];
    titles.extend(cols.iter().map(|(title, _)| *title));
    header(o, &titles);
    for &imp in impls {
        let get = |metric| r.get(scenario, imp, metric);
        let mut cells = vec![imp.label().to_owned()];
        cells.extend(cols.iter().map(|&(_, col)| match col {
            Col::At(m) => cell(get(m)),
            Col::VsOriginal(m) => ratio_cell(ratios(get(m), r.get(scenario, Impl::Original, m))),
            Col::Ratio(a, b) => ratio_cell(ratios(get(a), get(b))),
            Col::Both(a, b) => format!("{} / {}", cell(get(a)), cell(get(b))),
        }));
        row(o, &cells);
    }
}

/// The one-lock mix from several clients (instances), when it ran.
fn many_clients_table(o: &mut String, r: &Results) {
    if !ran(r, READ_HEAVY_1_CLIENTS) {
        return;
    }
    let _ = writeln!(
        o,
        "\nThe same mix on one lock from {INSTANCES} clients ({INSTANCES} instances of a service, the {TASKS} tasks dealt out round robin):\n"
    );
    use Col::*;
    let cols = [
        ("acq/s", At("acquisitions_per_s")),
        ("vs original", VsOriginal("acquisitions_per_s")),
        ("server us/script", At("server_us_per_script")),
        ("scripts/acq", At("scripts_per_acquisition")),
        ("(un)subscribes/acq", At("subscriptions_per_acquisition")),
        ("exclusion violations", At("violations")),
    ];
    impl_table(o, r, READ_HEAVY_1_CLIENTS, &Impl::RW, &cols);
}

/// Writers handing the lock to each other.
fn handoff_table(o: &mut String, r: &Results) {
    if !ran(r, HANDOFF) {
        return;
    }
    let _ = writeln!(
        o,
        "\n### Writer handoff ({WRITERS} writers, each holding {} ms)\n",
        HANDOFF_HOLD.as_millis()
    );
    use Col::*;
    let cols = [
        ("acq/s", At("acquisitions_per_s")),
        ("idle gap p50 (ms)", At("gap_p50")),
        ("idle gap p99 (ms)", At("gap_p99")),
        ("hold p50 (ms)", At("hold_p50")),
        ("wait p50 (ms)", At("wait_p50")),
        ("wait p99 (ms)", At("wait_p99")),
        ("fair bound (ms)", At("fair_bound")),
        ("p99 wait / bound", Ratio("wait_p99", "fair_bound")),
        (
            "min / max acq per writer",
            Both("min_per_writer", "max_per_writer"),
        ),
        ("scripts/acq", At("scripts_per_acquisition")),
        ("(un)subscribes/acq", At("subscriptions_per_acquisition")),
        ("violations", At("violations")),
    ];
    impl_table(o, r, HANDOFF, &Impl::ALL, &cols);
}

/// A writer behind a continuous stream of readers.
fn stream_table(o: &mut String, b: &Bench) {
    if !ran(&b.results, STREAM) {
        return;
    }
    let _ = writeln!(
        o,
        "\n### Writer behind a continuous stream of readers ({STREAM_READERS} readers holding {} ms back to back; a writer asks every {} ms, gives up after {} s)\n",
        STREAM_READ_HOLD.as_millis(),
        STREAM_WRITER_EVERY.as_millis(),
        b.cfg.stream_cap_secs
    );
    use Col::*;
    let cols = [
        ("writer wait p50 (ms)", At("writer_wait_p50")),
        ("p99 (ms)", At("writer_wait_p99")),
        ("max (ms)", At("writer_wait_max")),
        ("writer attempts", At("writer_attempts")),
        ("starved (gave up)", At("writer_starved")),
        ("reads/s", At("reads_per_s")),
        ("exclusion violations", At("violations")),
    ];
    impl_table(o, &b.results, STREAM, &Impl::RW, &cols);
}

/// What waiters send while they wait.
fn waiting_table(o: &mut String, b: &Bench) {
    if !ran(&b.results, WAITING) {
        return;
    }
    let _ = writeln!(
        o,
        "\n### Cost of waiting ({WAITERS} waiters behind one writer, counted with MONITOR on every master over {} s)\n",
        b.cfg.waiting_secs
    );
    use Col::*;
    let cols = [
        ("lock scripts sent / waiter / s", At("scripts_per_waiter_s")),
        ("commands sent / waiter / s", At("commands_per_waiter_s")),
        (
            "commands run inside scripts / waiter / s",
            At("in_script_commands_per_waiter_s"),
        ),
    ];
    impl_table(o, &b.results, WAITING, &Impl::ALL, &cols);
}

/// The targets, each met or not.
fn targets_table(o: &mut String, b: &Bench) {
    let _ = writeln!(o, "\n### Targets\n");
    header(o, &["target", "measured", "met"]);
    for t in targets(b) {
        let met = match t.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "n/a",
        };
        row(o, &[t.name, t.measured, met.into()]);
    }
}

/// "median (min-max)" of values kept outside [`Results`], one per run.
fn runs_cell(runs: Vec<f64>) -> String {
    if runs.is_empty() {
        return "-".into();
    }
    cell(Some(&Metric::of(runs)))
}

/// The machine-readable result file.
pub fn json(b: &Bench, machine: &Machine) -> Value {
    let metrics: Vec<Value> = b
        .results
        .metrics
        .iter()
        .map(|((scenario, imp, name), m)| {
            json!({
                "scenario": scenario,
                "implementation": imp.id(),
                "metric": name,
                "unit": m.unit,
                "median": m.median(),
                "min": m.min(),
                "max": m.max(),
                "runs": m.runs,
            })
        })
        .collect();
    let sweep: Vec<Value> = b
        .results
        .sweep
        .iter()
        .map(|((imp, tasks), runs)| json!({"implementation": imp.id(), "tasks": tasks, "acquisitions_per_s": runs}))
        .collect();
    let gaps: Vec<Value> = b
        .results
        .handoff_gaps
        .iter()
        .map(|(imp, gaps)| {
            let mut g = gaps.clone();
            let pct: Vec<Value> = [
                1.0, 5.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 100.0,
            ]
            .iter()
            .map(|&p| json!({"p": p, "ms": percentile(&mut g, p)}))
            .collect();
            json!({"implementation": imp.id(), "samples": gaps.len(), "percentiles": pct})
        })
        .collect();
    let samples: Vec<Value> = b
        .results
        .samples
        .iter()
        .map(|((scenario, imp), runs)| {
            json!({"scenario": scenario, "implementation": imp.id(), "runs": runs})
        })
        .collect();
    let targets: Vec<Value> = targets(b)
        .into_iter()
        .map(|t| json!({"target": t.name, "measured": t.measured, "met": t.met}))
        .collect();
    json!({
        "machine": machine,
        "config": b.cfg,
        "parameters": {
            "read_heavy_tasks": TASKS, "write_percent": WRITE_PERCENT,
            "handoff_writers": WRITERS, "handoff_hold_ms": HANDOFF_HOLD.as_millis() as u64,
            "stream_readers": STREAM_READERS, "stream_read_hold_ms": STREAM_READ_HOLD.as_millis() as u64,
            "stream_writer_every_ms": STREAM_WRITER_EVERY.as_millis() as u64,
            "waiters": WAITERS,
            "read_heavy_clients": INSTANCES,
            "reader_behind_writers": reader_behind_writers::parameters(&b.cfg),
            "lock_sets": lock_sets::parameters(&b.cfg),
            "contention": {
                "writers_tasks": Family::Writers.sizes(), "readers_tasks": Family::Readers.sizes(),
                "write_percent": CONTENTION_WRITE_PERCENT, "hold_ms": CONTENTION_HOLD.as_millis() as u64,
            },
            "upgradable": {"cost_block": crate::upgradable::COST_BLOCK, "counted_upgrades": crate::upgradable::COUNTED_UPGRADES,
                           "behind_readers": BEHIND.iter().map(|b| b.readers).collect::<Vec<_>>()},
            "original": {"key_timeout_ms": Original::KEY_TIMEOUT_MS, "read_timeout_ms": Original::READ_TIMEOUT_MS,
                         "write_timeout_ms": Original::WRITE_TIMEOUT_MS, "poll_ms": Original::POLL.as_millis() as u64},
        },
        "implementations": Impl::ALL.iter().chain(&Impl::REFERENCES).map(|i| json!({"id": i.id(), "label": i.label()})).collect::<Vec<_>>(),
        "metrics": metrics,
        "sweep": sweep,
        "handoff_gap_distribution": gaps,
        "samples_in_order": samples,
        "redis_benchmark": b.redis_benchmarks.iter().map(|rb| json!({"command": rb.command_line, "requests_per_sec": rb.requests_per_sec, "p50_ms": rb.p50_ms})).collect::<Vec<_>>(),
        "targets": targets,
        "notes": b.notes,
    })
}

fn color(imp: Impl) -> RGBColor {
    match imp {
        Impl::Ours => RGBColor(0x1f, 0x77, 0xb4),
        Impl::Original => RGBColor(0xd6, 0x27, 0x28),
        Impl::Rslock => RGBColor(0x2c, 0xa0, 0x2c),
        Impl::RdsLock => RGBColor(0xff, 0x7f, 0x0e),
        Impl::InProcess => RGBColor(0x7f, 0x7f, 0x7f),
        Impl::InMemory => RGBColor(0x94, 0x67, 0xbd),
    }
}

type PlotResult = Result<(), Box<dyn std::error::Error>>;

/// A chart with tasks on a log scale across and a linear value up.
type LogChart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<WithKeyPoints<LogCoord<f64>>, RangedCoordf64>>;

/// One point of a series: (x, median, min, max) over the runs.
type Spread = (f64, f64, f64, f64);

/// One implementation's series: its medians joined by a line, a min-max bar at each
/// point, and its entry in the legend. Draws nothing for no points.
fn draw_spread<'a, 'b: 'a>(
    chart: &mut LogChart<'a, 'b>,
    imp: Impl,
    points: &[Spread],
) -> PlotResult {
    if points.is_empty() {
        return Ok(());
    }
    let col = color(imp);
    let medians: Vec<(f64, f64)> = points.iter().map(|&(x, med, _, _)| (x, med)).collect();
    chart
        .draw_series(LineSeries::new(medians.clone(), col.stroke_width(2)))?
        .label(imp.label())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(2)));
    chart.draw_series(medians.iter().map(|&p| Circle::new(p, 4, col.filled())))?;
    chart.draw_series(
        points
            .iter()
            .map(|&(x, med, lo, hi)| ErrorBar::new_vertical(x, lo, med, hi, col.filled(), 6)),
    )?;
    Ok(())
}

/// The legend of the series drawn by [`draw_spread`], top left.
fn draw_legend<'a, 'b: 'a>(chart: &mut LogChart<'a, 'b>) -> PlotResult {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// The handoff idle gap as a cumulative distribution, log time axis.
pub fn plot_handoff(b: &Bench, path: &Path, subtitle: &str) -> PlotResult {
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let max = b
        .results
        .handoff_gaps
        .values()
        .flatten()
        .copied()
        .fold(1.0f64, f64::max)
        * 1.2;
    let min = b
        .results
        .handoff_gaps
        .values()
        .flatten()
        .copied()
        .filter(|g| *g > 0.0)
        .fold(1.0f64, f64::min)
        .max(0.01)
        * 0.8;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Writer handoff: idle gap between release and next acquire ({WRITERS} writers, {} ms holds)", HANDOFF_HOLD.as_millis()),
            ("sans-serif", 18),
        )
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(60)
        .build_cartesian_2d((min..max).log_scale(), 0f64..1f64)?;
    chart
        .configure_mesh()
        .x_desc(format!("idle gap, ms (log scale) — {subtitle}"))
        .y_desc("fraction of handoffs <= x")
        .draw()?;
    for (imp, gaps) in &b.results.handoff_gaps {
        let mut g: Vec<f64> = gaps.iter().map(|x| x.max(min)).collect();
        if g.is_empty() {
            continue;
        }
        g.sort_by(f64::total_cmp);
        let n = g.len() as f64;
        let step = (g.len() / 400).max(1);
        let points: Vec<(f64, f64)> = g
            .iter()
            .enumerate()
            .filter(|(i, _)| i % step == 0 || *i == g.len() - 1)
            .map(|(i, &x)| (x, (i + 1) as f64 / n))
            .collect();
        let col = color(*imp);
        chart
            .draw_series(LineSeries::new(points, col.stroke_width(2)))?
            .label(format!(
                "{} (p50 {:.2} ms)",
                imp.label(),
                percentile(&mut g.clone(), 50.0)
            ))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Acquisitions per second against task count, one lock, read-heavy mix.
pub fn plot_throughput(b: &Bench, path: &Path, subtitle: &str) -> PlotResult {
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let top = b
        .results
        .sweep
        .values()
        .flatten()
        .copied()
        .fold(1.0f64, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Read-heavy throughput on one lock ({}% reads / {WRITE_PERCENT}% writes)",
                100 - WRITE_PERCENT
            ),
            ("sans-serif", 18),
        )
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (0.8f64..80f64)
                .log_scale()
                .with_key_points(vec![1.0, 4.0, 16.0, 64.0]),
            0f64..top,
        )?;
    chart
        .configure_mesh()
        .x_desc(format!("concurrent tasks (log scale) — {subtitle}"))
        .y_desc("acquisitions per second")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    for imp in Impl::RW {
        let points: Vec<Spread> = SWEEP_TASKS
            .iter()
            .filter_map(|&t| {
                let mut runs = b.results.sweep.get(&(imp, t))?.clone();
                let med = percentile(&mut runs, 50.0);
                let lo = runs.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = runs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                Some((t as f64, med, lo, hi))
            })
            .collect();
        draw_spread(&mut chart, imp, &points)?;
    }
    draw_legend(&mut chart)?;
    root.present()?;
    Ok(())
}

//! Benchmark of `redis-rwlock` against the original design and its peers; BENCHMARKS.md
//! describes the scenarios and the latest results.
//!
//! `cargo bench --bench rwlock` starts a private local 6-node cluster through
//! `cluster-compose/local-cluster.sh` (or uses `REDIS_CLUSTER_NODES`), runs every
//! scenario several times with the implementations interleaved, prints a markdown
//! report and writes `bench-results/rwlock.{json,md}` and three SVG plots there.
//! `BENCH_QUICK=1` gives a 2-3 minute run; `BENCH_RUNS=n` overrides the run count;
//! `BENCH_SCENARIOS=uncontended,read_heavy` runs only the named scenarios (for
//! profiling; names: limits, uncontended, server_cost, read_heavy, read_heavy_scripts,
//! read_heavy_kept, read_heavy_3_clients, read_heavy_scripts_3_clients,
//! read_heavy_scripts_kept,
//! redis_benchmark, handoff,
//! stream, reader_behind_writers, waiting, contention_writers, contention_readers,
//! upgradable, shared_reads, sharing_cost, lock_sets, sweep);
//! `BENCH_IMPLS=redis_rwlock,original` likewise limits the implementations
//! (redis_rwlock, original, rslock, rds_lock); `BENCH_OUT=dir` writes the report
//! there instead of `bench-results/`; `BENCH_SHARING=shared` (or `unshared`) runs
//! the soak-like mix of `sharing_cost` one way only, so that the process's RSS
//! (`rss_mib_after_*`) is that way's alone.
//! The launcher runs `REDIS_SERVER` / `REDIS_CLI` when set, so
//! `eval "$(bash cluster-compose/ensure-redis.sh --valkey)"` first benchmarks on the
//! pinned Valkey; `redis-benchmark` (or `valkey-benchmark`, or `REDIS_BENCHMARK`) is
//! the load client for the pipelined scenario.
//! See BENCHMARKS.md for what each scenario measures.
//!
//! Without `--bench` (as `cargo test --all-targets` runs it) it prints how to run it
//! and exits at once.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cluster;
mod contention;
mod lock_sets;
mod locks;
mod process;
mod read_heavy;
mod reader_behind_writers;
mod report;
mod scenarios;
mod shared_reads;
mod sharing_cost;
mod stats;
mod upgradable;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use cluster::{Cluster, Masters, Topology};
use contention::Family;
use locks::{Clients, Impl, cluster_connection};
use reader_behind_writers::Variant;
use report::Machine;
use scenarios::{Bench, Config, INSTANCES, KEEP_READS, SWEEP_TASKS, TASKS, names::*};
use stats::Results;

fn main() -> ExitCode {
    if !std::env::args().any(|arg| arg == "--bench") {
        println!("run with `cargo bench --bench rwlock`");
        return ExitCode::SUCCESS;
    }
    let quick = std::env::var("BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let cluster = match Cluster::start_or_from_env() {
        Ok(cluster) => cluster,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    // Everything runs in a spawned task, as an application's lock calls do: from the
    // thread that called `block_on`, every task a call spawns (a drop-release, the
    // renewal queue's driver) is handed to a sleeping worker thread.
    let cluster = std::sync::Arc::new(cluster);
    let shared = cluster.clone();
    let outcome = runtime
        .block_on(runtime.spawn(async move { run(&shared, quick).await }))
        .unwrap_or_else(|err| Err(format!("the benchmark task failed: {err}")));
    // Background tasks (drop-releases, subscriptions) end with the runtime, before
    // the cluster goes away.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    drop(cluster);
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The implementations in a different order every run, so none always goes first.
fn rotated(list: &[Impl], run: usize) -> Vec<Impl> {
    let mut v = list.to_vec();
    v.rotate_left(run % list.len());
    v
}

async fn run(cluster: &Cluster, quick: bool) -> Result<(), String> {
    let nodes = &cluster.nodes;
    let cfg = Config::new(quick);
    let command = if quick {
        "BENCH_QUICK=1 cargo bench --bench rwlock"
    } else {
        "cargo bench --bench rwlock"
    };
    let cluster_desc = if cluster.started_here() {
        "local 3 masters + 3 replicas on loopback, started by the benchmark (cluster-compose/local-cluster.sh)".to_owned()
    } else {
        format!("REDIS_CLUSTER_NODES={}", nodes.join(","))
    };
    let mut machine = Machine::probe(command, &cluster_desc);
    eprintln!(
        "redis-rwlock benchmark: {} runs{}, cluster {}",
        cfg.runs,
        if quick { " (quick)" } else { "" },
        nodes.join(",")
    );

    let topology = Topology::discover(&nodes[0]).await?;
    let masters = Masters::connect(&topology).await?;
    let clients = Arc::new(Clients::connect(nodes).await?);
    let raw = cluster_connection(nodes).await?;
    let mut b = Bench {
        clients,
        topology,
        masters,
        raw,
        cfg: cfg.clone(),
        results: Results::default(),
        notes: Vec::new(),
        redis_benchmarks: Vec::new(),
        read_script: None,
        nodes: nodes.to_vec(),
        more_clients: Vec::new(),
    };
    for imp in Impl::ALL {
        b.warm_up(imp).await;
    }
    b.capture_read_script().await;

    let only: Option<Vec<String>> = std::env::var("BENCH_SCENARIOS")
        .ok()
        .map(|s| s.split(',').map(|x| x.trim().to_owned()).collect());
    let impls: Option<Vec<String>> = std::env::var("BENCH_IMPLS")
        .ok()
        .map(|s| s.split(',').map(|x| x.trim().to_owned()).collect());
    let use_impl = |imp: Impl| {
        impls
            .as_ref()
            .is_none_or(|o| o.iter().any(|x| x == imp.id()))
    };
    let on = |name: &str| only.as_ref().is_none_or(|o| o.iter().any(|x| x == name));
    let started = std::time::Instant::now();
    for run in 0..cfg.runs {
        eprintln!(
            "run {}/{} ({:.0} s so far)",
            run + 1,
            cfg.runs,
            started.elapsed().as_secs_f64()
        );
        let all: Vec<Impl> = rotated(&Impl::ALL, run)
            .into_iter()
            .filter(|i| use_impl(*i))
            .collect();
        let rw: Vec<Impl> = rotated(&Impl::RW, run)
            .into_iter()
            .filter(|i| use_impl(*i))
            .collect();
        if on("limits") {
            eprintln!("  round trips");
            b.limits(run).await;
        }
        if on("uncontended") {
            eprintln!("  uncontended");
            for &imp in &all {
                b.uncontended(run, imp).await;
            }
        }
        if on("read_heavy") {
            eprintln!("  read-heavy throughput");
            for &imp in &rw {
                let secs = cfg.throughput_secs;
                let rate = b
                    .read_heavy(run, imp, TASKS, 1, 1, secs, Some(READ_HEAVY_1), None)
                    .await;
                b.results.sweep.entry((imp, TASKS)).or_default().push(rate);
                b.read_heavy(run, imp, TASKS, 64, 1, secs, Some(READ_HEAVY_64), None)
                    .await;
            }
        }
        if on("read_heavy_kept") {
            eprintln!("  read-heavy throughput over 64 locks, reads kept");
            for &imp in &rw {
                let secs = cfg.throughput_secs;
                let keep = Some(KEEP_READS);
                b.read_heavy(run, imp, TASKS, 64, 1, secs, Some(READ_HEAVY_64_KEPT), keep)
                    .await;
            }
        }
        if on("read_heavy_3_clients") {
            eprintln!("  read-heavy throughput, one lock, {INSTANCES} clients");
            for &imp in &rw {
                let secs = cfg.throughput_secs;
                b.read_heavy(
                    run,
                    imp,
                    TASKS,
                    1,
                    INSTANCES,
                    secs,
                    Some(READ_HEAVY_1_CLIENTS),
                    None,
                )
                .await;
            }
        }
        if on("read_heavy_scripts") && use_impl(Impl::Ours) {
            eprintln!("  read-heavy: scripts by kind (MONITOR)");
            b.read_heavy_scripts(run, cfg.throughput_secs, 1, 1, None, READ_HEAVY_SCRIPTS)
                .await;
        }
        if on("read_heavy_scripts_3_clients") && use_impl(Impl::Ours) {
            eprintln!("  read-heavy from {INSTANCES} clients: scripts by kind (MONITOR)");
            b.read_heavy_scripts(
                run,
                cfg.throughput_secs,
                INSTANCES,
                1,
                None,
                READ_HEAVY_SCRIPTS_CLIENTS,
            )
            .await;
        }
        if on("read_heavy_scripts_kept") && use_impl(Impl::Ours) {
            eprintln!("  read-heavy over 64 locks, reads kept: scripts by kind (MONITOR)");
            let keep = Some(KEEP_READS);
            let scenario = READ_HEAVY_SCRIPTS_KEPT;
            b.read_heavy_scripts(run, cfg.throughput_secs, 1, 64, keep, scenario)
                .await;
        }
        if on("shared_reads") && use_impl(Impl::Ours) {
            eprintln!("  shared reads: a join, and a writer behind busy readers");
            b.shared_reads(run).await;
        }
        if on("sharing_cost") && use_impl(Impl::Ours) {
            eprintln!("  sharing's cost: a soak-like mix shared and not, a hot lock kept and not");
            b.sharing_cost(run).await;
        }
        if on("server_cost") {
            eprintln!("  server cost per acquisition");
            for &imp in &all {
                b.server_cost(run, imp).await;
            }
        }
        if on("redis_benchmark") {
            eprintln!("  redis-benchmark");
            b.redis_benchmark().await;
        }
        if on("handoff") {
            eprintln!("  writer handoff");
            for &imp in &all {
                b.handoff(run, imp).await;
            }
        }
        if on("stream") {
            eprintln!("  writer behind readers");
            for &imp in &rw {
                b.writer_behind_readers(run, imp).await;
            }
        }
        if on("reader_behind_writers") {
            eprintln!("  reader behind a stream of writers");
            // Both variants of each implementation, the variants' order alternating.
            let mut variants = Variant::ALL;
            if run % 2 == 1 {
                variants.reverse();
            }
            for &imp in &rw {
                for variant in variants {
                    b.reader_behind_writers(run, imp, variant).await;
                }
            }
        }
        if on("waiting") {
            eprintln!("  cost of waiting");
            for &imp in &all {
                b.waiting_cost(run, imp).await;
            }
        }
        for family in Family::ALL {
            if on(family.id()) {
                eprintln!("  contention: {}", family.title());
                // Every implementation at each size before the next size.
                let impls: Vec<Impl> = rotated(&family.impls(), run)
                    .into_iter()
                    .filter(|i| use_impl(*i))
                    .collect();
                for index in 0..family.sizes().len() {
                    for &imp in &impls {
                        b.contention(run, imp, family, index).await;
                    }
                }
            }
        }
        if on("upgradable") && use_impl(Impl::Ours) {
            eprintln!("  upgradable reads");
            b.upgradable(run).await;
        }
        if on("lock_sets") && use_impl(Impl::Ours) {
            eprintln!("  lock sets: one slot, three masters, opposite orders");
            b.lock_sets(run).await;
        }
        if run < cfg.sweep_runs && on("sweep") {
            eprintln!("  task-count sweep");
            for tasks in SWEEP_TASKS.into_iter().filter(|&t| t != TASKS) {
                for &imp in &rw {
                    let rate = b
                        .read_heavy(run, imp, tasks, 1, 1, cfg.sweep_secs, None, None)
                        .await;
                    b.results.sweep.entry((imp, tasks)).or_default().push(rate);
                }
            }
        }
    }
    machine.loadavg_end = report::loadavg();
    eprintln!("done in {:.0} s", started.elapsed().as_secs_f64());

    let dir = std::env::var_os("BENCH_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench-results"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let markdown = report::markdown(&b, &machine);
    let json = report::json(&b, &machine);
    let subtitle = format!("{} · {} x {}", machine.date_utc, machine.nproc, machine.cpu);
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).map_err(|e| format!("cannot write {name}: {e}"))
    };
    write("rwlock.md", &markdown)?;
    write(
        "rwlock.json",
        &serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?,
    )?;
    if let Err(err) = report::plot_handoff(&b, &dir.join("handoff_gaps.svg"), &subtitle) {
        eprintln!("warning: handoff plot failed: {err}");
    }
    if let Err(err) = report::plot_throughput(&b, &dir.join("throughput.svg"), &subtitle) {
        eprintln!("warning: throughput plot failed: {err}");
    }
    if let Err(err) = report::plot_contention(&b, &dir.join("contention_cpu.svg"), &subtitle) {
        eprintln!("warning: contention plot failed: {err}");
    }
    println!("{markdown}");
    println!(
        "Wrote {0}/rwlock.json, {0}/rwlock.md, {0}/handoff_gaps.svg, {0}/throughput.svg, {0}/contention_cpu.svg",
        dir.display()
    );
    Ok(())
}

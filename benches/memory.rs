//! What an uncontended acquire and release costs on the in-memory backend: one
//! task, one lock, nothing else running. No server: `cargo bench --bench memory`.
//!
//! Prints microseconds per acquire + release for each kind of hold, and for a lone
//! read with shared reads on (the default: what the sharing's bookkeeping costs a
//! read that has no one to share with, against the plain read above it) (median of
//! `MEMORY_BENCH_RUNS` runs, default 5, of `MEMORY_BENCH_ITERS` pairs each, default
//! 100,000), with the runs' min and max. Without `--bench` (as `cargo test
//! --benches` runs it, unoptimized) it only checks that it works: one run of 100.

use std::time::{Duration, Instant};

use redis_rwlock::{LockClient, LockOptions, MemoryStore};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), redis_rwlock::Error> {
    let measuring = std::env::args().any(|arg| arg == "--bench");
    let runs = if measuring {
        env("MEMORY_BENCH_RUNS", 5)
    } else {
        1
    };
    let iters = if measuring {
        env("MEMORY_BENCH_ITERS", 100_000)
    } else {
        100
    };
    let store = MemoryStore::new();
    let client = LockClient::in_memory(&store);
    // Shared reads off: every read is a request to the store, as a write is.
    let options = LockOptions::default().share_reads(false);
    let lock = client.rwlock_with("bench", options);
    let sharing = client.rwlock("bench-shared");
    println!(
        "in-memory backend: us per uncontended acquire + release, median (min-max) of {runs} runs of {iters}"
    );
    for kind in ["write", "read", "read, shared", "upgradable read"] {
        let mut per_pair = Vec::with_capacity(runs);
        for _ in 0..runs {
            let started = Instant::now();
            for _ in 0..iters {
                match kind {
                    "write" => lock.write().await?.release().await?,
                    "read" => lock.read().await?.release().await?,
                    "read, shared" => sharing.read().await?.release().await?,
                    _ => lock.upgradable_read().await?.release().await?,
                }
            }
            per_pair.push(started.elapsed() / iters as u32);
        }
        per_pair.sort();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        println!(
            "  {kind:<16} {:6.2} us ({:.2}-{:.2})",
            us(per_pair[runs / 2]),
            us(per_pair[0]),
            us(per_pair[runs - 1])
        );
    }
    Ok(())
}

//! Randomized exclusion: many tasks on two clients hammer one lock with a random
//! mix of reads, writes and upgradable reads (half of which upgrade); an in-process
//! invariant checks every hold. Once with each client's plain reads shared, once
//! with them kept too (idle holds a writer must call back).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use redis_rwlock::LockOptions;
use tokio::time::Instant;

use common::{Backend, HoldChecker, unique_name};

const TASKS: usize = 16;
/// How long the tasks run: on the in-memory store, a request takes microseconds
/// rather than a round trip, so a shorter run takes far more holds.
const RUN_FOR: Duration = Duration::from_secs(10);
const RUN_FOR_IN_MEMORY: Duration = Duration::from_secs(3);

on_both_backends! {
    async fn random_readers_and_writers_never_overlap_a_writer(backend: Backend) {
        hammer(&backend, LockOptions::default()).await;
    }

    async fn random_readers_and_writers_never_overlap_a_writer_with_reads_kept(backend: Backend) {
        hammer(&backend, LockOptions::default().keep_reads(Duration::from_secs(2))).await;
    }
}

/// Every task of two clients takes random holds with `options` for a while.
async fn hammer(backend: &Backend, options: LockOptions) {
    let clients = [backend.client().await, backend.client().await];
    let name = unique_name("random");
    let checker = Arc::new(HoldChecker::default());
    let run_for = match backend {
        Backend::Cluster => RUN_FOR,
        Backend::Memory(_) => RUN_FOR_IN_MEMORY,
    };
    let stop = Instant::now() + run_for;
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let lock = clients[i % 2].rwlock_with(name.as_str(), options.clone());
        let checker = checker.clone();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < stop {
                checker.random_hold(&lock, 8).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let report = checker.report();
    println!("{report:?}");
    assert_eq!(report.violations, 0, "{report:?}");
    assert!(report.writes >= 100, "writes barely exercised: {report:?}");
    assert!(report.reads >= 300, "reads barely exercised: {report:?}");
    assert!(
        report.upgrades >= 10,
        "upgrades barely exercised: {report:?}"
    );
    assert!(
        report.max_concurrent_readers >= 2,
        "readers never shared: {report:?}"
    );
}

//! The `at_scale` scenario: one lock, 10,000 read holds, then 1,000 writers queued
//! behind them and served one by one; each script's server time per call at that
//! scale against the same script with 2 readers and 2 writers. The run itself is
//! `tests/common/scale.rs`, shared with `tests/at_scale.rs` (which asserts on it);
//! here it is only measured and reported. This crate only: the original design
//! has no queue. About 7 s a run; scripts that do not scale can overload the
//! master (scripts that read the whole hash on every write acquire did, into a
//! failover).

use crate::scale::{self, Comparison};
use crate::scenarios::Bench;

/// Read holds and queued writers of the run at scale.
pub const SCALE_READERS: usize = 10_000;
pub const SCALE_WRITERS: usize = 1_000;
/// Repetitions of the small case (2 readers, 2 writers), pooled.
pub const SCALE_SMALL_REPS: usize = 20;

impl Bench {
    /// One at-scale comparison on a lock of master `run` (round robin).
    pub async fn at_scale(&mut self, run: usize) {
        let name = self.name_on(run, &format!("scale-{run}"));
        let lock = self.clients.ours.rwlock(&name);
        let Ok(key) = lock.key() else {
            self.note(format!("at_scale: no key for the lock {name}"));
            return;
        };
        let master = self.topology.masters[self.topology.master_of(key)].url();
        let compared = scale::compare(
            &self.clients.ours,
            &name,
            &master,
            SCALE_SMALL_REPS,
            SCALE_READERS,
            SCALE_WRITERS,
        )
        .await;
        match compared {
            Ok(comparison) => self.at_scale.push(comparison),
            Err(err) => self.note(format!("at_scale (run {}): {err}", run + 1)),
        }
    }
}

/// Whether a comparison kept exclusion and served the writers in queue order, in
/// every run (small and at scale).
pub fn safe_and_in_order(c: &Comparison) -> bool {
    c.small
        .iter()
        .chain([&c.large])
        .all(|run| run.violations == 0 && run.in_order())
}

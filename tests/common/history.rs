//! The checker of the partition tests: reads the whole history the workers recorded
//! ([`super::workload`]) and measures what went wrong.
//!
//! * (a) **writes out of token order**, per register: an acknowledged write whose
//!   token is smaller than that of a write acknowledged before it started (real time:
//!   one process clock). Counted for the fenced register (must stay 0) and for the
//!   plain one (what fencing saves you from).
//! * (b) **overlapping holds**: two guards of different workers in modes that exclude
//!   each other (a writer and anyone; two upgradable readers), believing they held
//!   at once. Two measures per hold, both from the
//!   acquire's end: *checked*, up to its last `is_held()` that said yes (what the
//!   crate promises to keep exclusive), and *acted*, up to the end of the last write
//!   or read that succeeded, begun on such an answer (what a paused or slow process
//!   actually does: fencing is the answer to that).
//! * (c) **lost writes**: acknowledged writes whose own key is gone once the cluster
//!   settled after the fault (a failover threw them away).
//! * (d) **unusable after healing**: from the heal to the end of the first successful
//!   acquire of the lock.

use std::collections::HashMap;

use serde_json::Value;

/// What one lock's history shows.
#[derive(Clone, Debug, Default)]
pub struct LockReport {
    pub name: String,
    pub min_replicas: u32,
    /// Acquires granted, and attempted.
    pub granted: u64,
    pub attempted: u64,
    /// Acknowledged fenced and plain writes.
    pub fenced_acked: u64,
    pub plain_acked: u64,
    /// (a)
    pub fenced_out_of_order: u64,
    pub plain_out_of_order: u64,
    /// (b): pairs of overlapping incompatible holds, and the longest overlap (ms).
    pub checked_overlaps: u64,
    pub checked_overlap_ms: f64,
    /// The longest checked overlap's two holds, for the report.
    pub checked_worst: String,
    pub acted_overlaps: u64,
    pub acted_overlap_ms: f64,
    /// (c)
    pub fenced_lost: u64,
    pub plain_lost: u64,
    /// (d): ms from the heal to the first grant after it (None: no grant after it).
    pub unusable_ms: Option<f64>,
}

/// One hold: the worker, the mode, and its belief intervals (µs).
struct Hold {
    worker: u64,
    fence: u64,
    /// `write`, `read` or `upgradable` (an upgradable read before its upgrade:
    /// beside readers, not beside a writer or another upgradable holder).
    mode: String,
    from: u64,
    checked: u64,
    acted: u64,
}

/// Whether `record` is for `lock`.
fn of_lock(record: &Value, lock: &str) -> bool {
    record["lock"] == lock
}

fn us(record: &Value, field: &str) -> u64 {
    record[field].as_u64().unwrap_or(0)
}

/// Checks the history of `lock`: `records` from every worker, `heal_us` the heal's
/// wall-clock time, `present` whether each `ack` key was still there afterwards.
pub fn check_lock(
    lock: &str,
    min_replicas: u32,
    records: &[Value],
    heal_us: u64,
    present: &HashMap<String, bool>,
) -> LockReport {
    let mut report = LockReport {
        name: lock.to_owned(),
        min_replicas,
        ..LockReport::default()
    };
    let records: Vec<&Value> = records.iter().filter(|r| of_lock(r, lock)).collect();

    for record in records.iter().filter(|r| r["kind"] == "acquire") {
        report.attempted += 1;
        if record["ok"] == true {
            report.granted += 1;
            let end = us(record, "end");
            if end >= heal_us {
                let ms = (end - heal_us) as f64 / 1000.0;
                report.unusable_ms = Some(report.unusable_ms.map_or(ms, |m: f64| m.min(ms)));
            }
        }
    }

    for (register, out_of_order, acked, lost) in [
        (
            "fenced",
            &mut report.fenced_out_of_order,
            &mut report.fenced_acked,
            &mut report.fenced_lost,
        ),
        (
            "plain",
            &mut report.plain_out_of_order,
            &mut report.plain_acked,
            &mut report.plain_lost,
        ),
    ] {
        let writes: Vec<&&Value> = records
            .iter()
            .filter(|r| r["kind"] == "write" && r["reg"] == register && r["ok"] == true)
            .collect();
        *acked = writes.len() as u64;
        for late in &writes {
            let bigger_before = writes.iter().any(|early| {
                us(early, "end") < us(late, "start") && us(early, "token") > us(late, "token")
            });
            if bigger_before {
                *out_of_order += 1;
            }
        }
        *lost = writes
            .iter()
            .filter(|w| {
                let key = w["ack"].as_str().unwrap_or("");
                !present.get(key).copied().unwrap_or(false)
            })
            .count() as u64;
    }

    // The last `is_held()` that said yes is the latest check before each action;
    // holds record it as `to` when it came from an action, so rebuild both measures
    // from the actions within each hold.
    let holds: Vec<Hold> = records
        .iter()
        .filter(|r| r["kind"] == "hold")
        .map(|h| Hold {
            worker: us(h, "w"),
            fence: us(h, "fence"),
            mode: h["mode"].as_str().unwrap_or("").to_owned(),
            from: us(h, "from"),
            checked: us(h, "checked").max(us(h, "from")),
            acted: us(h, "to").max(us(h, "from")),
        })
        .collect();
    for (i, a) in holds.iter().enumerate() {
        for b in &holds[i + 1..] {
            let exclusive = |m: &str| m == "write" || m == "upgradable";
            let conflict = a.mode == "write"
                || b.mode == "write"
                || (exclusive(&a.mode) && exclusive(&b.mode));
            if a.worker == b.worker || !conflict {
                continue;
            }
            let start = a.from.max(b.from);
            let checked = a.checked.min(b.checked);
            if checked > start {
                report.checked_overlaps += 1;
                let ms = (checked - start) as f64 / 1000.0;
                if ms > report.checked_overlap_ms {
                    report.checked_overlap_ms = ms;
                    // Times in ms from the heal (negative: before it).
                    let at = |t: u64| (t as f64 - heal_us as f64) / 1000.0;
                    let describe = |h: &Hold| {
                        format!(
                            "worker {} {} (fence {}) from {:.0} to {:.0} ms",
                            h.worker,
                            h.mode,
                            h.fence,
                            at(h.from),
                            at(h.checked)
                        )
                    };
                    report.checked_worst = format!("{}; {}", describe(a), describe(b));
                }
            }
            let acted = a.acted.min(b.acted);
            if acted > start {
                report.acted_overlaps += 1;
                report.acted_overlap_ms =
                    report.acted_overlap_ms.max((acted - start) as f64 / 1000.0);
            }
        }
    }
    report
}

/// The `ack` keys of acknowledged writes to `lock`, for the presence check.
pub fn ack_keys(records: &[Value], lock: &str) -> Vec<String> {
    records
        .iter()
        .filter(|r| of_lock(r, lock) && r["kind"] == "write" && r["ok"] == true)
        .filter_map(|r| r["ack"].as_str().map(str::to_owned))
        .collect()
}

impl std::fmt::Display for LockReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "min_replicas={}: granted {}/{}; writes acked fenced {} plain {}; \
             (a) out of order fenced {} plain {}; (b) overlaps checked {} (max {:.0} ms) \
             acted {} (max {:.0} ms); (c) lost fenced {} plain {}; (d) unusable after heal {}",
            self.min_replicas,
            self.granted,
            self.attempted,
            self.fenced_acked,
            self.plain_acked,
            self.fenced_out_of_order,
            self.plain_out_of_order,
            self.checked_overlaps,
            self.checked_overlap_ms,
            self.acted_overlaps,
            self.acted_overlap_ms,
            self.fenced_lost,
            self.plain_lost,
            self.unusable_ms
                .map_or("never".to_owned(), |ms| format!("{ms:.0} ms")),
        )?;
        if !self.checked_worst.is_empty() {
            write!(f, "; longest checked overlap: {}", self.checked_worst)?;
        }
        Ok(())
    }
}

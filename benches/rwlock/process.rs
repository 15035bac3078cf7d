//! What the benchmark process itself uses: its heap (counted by the global
//! allocator, `peak_alloc`) and its CPU time. A scenario reads them around a mix to
//! compare what two configurations cost the client within one run (the process's
//! RSS cannot be split between two mixes run one after the other: the allocator
//! keeps what the first freed, so the heap's live bytes stand in for it).

use peak_alloc::PeakAlloc;

/// The system allocator, counted: two relaxed atomic operations per allocation,
/// the same for every implementation measured.
#[global_allocator]
static HEAP: PeakAlloc = PeakAlloc;

/// Bytes allocated and not freed.
pub fn live() -> usize {
    HEAP.current_usage()
}

/// The most [`live`] was since the last [`reset_peak`].
pub fn peak() -> usize {
    HEAP.peak_usage()
}

/// Starts a new peak from what is live now.
pub fn reset_peak() {
    HEAP.reset_peak_usage();
}

/// The process's CPU time (user + system, every thread) in microseconds, from
/// `/proc/self/stat` (clock ticks of 10 ms: read around runs of seconds).
pub fn process_cpu_us() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    // The fields after the command name, which is in parentheses and may hold spaces.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return f64::NAN;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) * 1e6 / 100.0,
        _ => f64::NAN,
    }
}

/// The process's resident set (`VmRSS`, `/proc/self/status`) in MiB: what it
/// holds in memory now, its binary, runtime and connections included.
pub fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

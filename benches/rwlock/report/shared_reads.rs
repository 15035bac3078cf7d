//! The shared-reads table: a read that joins the client's hold against a server
//! read, and a writer's wait behind a busy shared hold.

use std::fmt::Write as _;

use super::{at, header, ratio_cell, ratios, row};
use crate::locks::Impl;
use crate::scenarios::Bench;
use crate::shared_reads::{BUSY_READERS, names::*};

/// The table, when the scenario ran.
pub(super) fn tables(o: &mut String, b: &Bench) {
    let r = &b.results;
    if r.get(SHARED_JOIN, Impl::Ours, "join_us_p50").is_none() {
        return;
    }
    let _ = writeln!(
        o,
        "\n### Shared reads (redis-rwlock, the lock's master)\n\n`read()` + release while another task of the client holds a read (a join), against the same pair on a handle with `share_reads(false)` (a server acquire and release), in alternating blocks; then {BUSY_READERS} tasks of one client loop read / hold 1 ms / release while a writer on another client asks again and again, 10-30 ms apart; then a client with `keep_reads` reads and releases, and 2-10 ms later a writer on another client asks (the call-back, the release and the hand-over).\n"
    );
    header(o, &["measure", "value", "ratio"]);
    let join = r.get(SHARED_JOIN, Impl::Ours, "join_us_p50");
    let server = r.get(SHARED_JOIN, Impl::Ours, "server_read_us_p50");
    row(
        o,
        &[
            "read() that joins, p50 (us)".into(),
            at(r, SHARED_JOIN, Impl::Ours, "join_us_p50"),
            format!("{} of a server read", ratio_cell(ratios(join, server))),
        ],
    );
    for (what, m) in [
        ("read() that joins, p99 (us)", "join_us_p99"),
        ("read() of the server, p50 (us)", "server_read_us_p50"),
        ("read() of the server, p99 (us)", "server_read_us_p99"),
    ] {
        row(
            o,
            &[what.into(), at(r, SHARED_JOIN, Impl::Ours, m), "-".into()],
        );
    }
    for (what, m) in [
        (
            "writer's wait behind the busy shared hold, p50 (ms)",
            "writer_wait_ms_p50",
        ),
        ("writer's wait, p99 (ms)", "writer_wait_ms_p99"),
        ("writer's wait, max (ms)", "writer_wait_ms_max"),
        ("writes measured per run", "writes"),
    ] {
        row(
            o,
            &[
                what.into(),
                at(r, WRITER_BEHIND_SHARED, Impl::Ours, m),
                "-".into(),
            ],
        );
    }
    for (what, m) in [
        (
            "writer's wait behind an idle kept read hold, p50 (ms)",
            "writer_wait_ms_p50",
        ),
        (
            "writer's wait behind a kept hold, p99 (ms)",
            "writer_wait_ms_p99",
        ),
        (
            "writer's wait behind a kept hold, max (ms)",
            "writer_wait_ms_max",
        ),
        ("writes behind a kept hold per run", "writes"),
    ] {
        row(
            o,
            &[
                what.into(),
                at(r, WRITER_BEHIND_KEPT, Impl::Ours, m),
                "-".into(),
            ],
        );
    }
}

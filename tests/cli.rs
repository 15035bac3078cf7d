//! The `redis-rwlock` command-line tool, end to end: the built binary against the
//! shared test cluster, judged by exit codes, output and the lock's state as the
//! library sees it.
#![cfg(all(unix, feature = "cli"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use redis_rwlock::LockOptions;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::{Instant, timeout};

use common::{
    RUN_LIMIT, bare, cluster_client, finish, held_by_nobody, read_only_user, run, shared_cluster,
    shared_standalone, standalone_client, unique_name, wait_for,
};

/// Exit codes the tool documents.
const HELD: i32 = 0;
const FREE: i32 = 1;
const USAGE: i32 = 64;
const UNAVAILABLE: i32 = 69;
const NOT_ACQUIRED: i32 = 75;
const LEASE_LOST: i32 = 79;
const NOT_FOUND: i32 = 127;

/// The tool on the shared cluster (`--cluster` flag), with `args`.
fn cli(args: &[&str]) -> Command {
    let mut cmd = bare();
    cmd.arg("--cluster")
        .arg(shared_cluster().urls().join(","))
        .args(args);
    cmd
}

/// Starts the tool on a command that prints `ready` once it is set up (its traps
/// installed), and returns when it has: the hold is taken and the command runs.
async fn start_ready(mut cmd: Command) -> (Child, BufReader<ChildStdout>) {
    let mut child = cmd.spawn().expect("start redis-rwlock");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    timeout(RUN_LIMIT, stdout.read_line(&mut line))
        .await
        .expect("the command never got ready")
        .unwrap();
    assert_eq!(line, "ready\n");
    (child, stdout)
}

/// Like [`finish`] for a tool started by [`start_ready`]: stdout after `ready`.
async fn finish_ready(child: Child, mut stdout: BufReader<ChildStdout>) -> (i32, String, String) {
    let mut rest = String::new();
    timeout(RUN_LIMIT, stdout.read_to_string(&mut rest))
        .await
        .expect("the command's stdout stayed open")
        .unwrap();
    let (code, _, stderr) = finish(child).await;
    (code, rest, stderr)
}

fn json(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// Sends `signal` to a process.
fn signal(pid: u32, signal: Signal) {
    let pid = Pid::from_raw(i32::try_from(pid).unwrap());
    kill(pid, signal).unwrap_or_else(|err| panic!("kill {signal} {pid}: {err}"));
}

#[tokio::test]
async fn status_of_a_free_lock_says_it_is_free_and_exits_1() {
    let name = unique_name("cli-free");
    let lock = cluster_client().await.rwlock(&name);
    let key = lock.key().unwrap();

    let (code, stdout, stderr) = run(cli(&["status", &name])).await;
    assert_eq!(code, FREE, "{stderr}");
    assert_eq!(stderr, "", "free is no failure");
    assert!(
        stdout.contains(&format!("lock \"{name}\" (key {key}) is free")),
        "{stdout}"
    );
    assert!(stdout.contains("queued writers: 0"), "{stdout}");

    let (code, stdout, stderr) = run(cli(&["status", &name, "--json"])).await;
    assert_eq!(code, FREE, "{stderr}");
    let status = json(&stdout);
    assert_eq!(status["mode"], "free");
    assert_eq!(status["lock"], name.as_str());
    assert_eq!(status["key"], key);
    assert!(status["writer"].is_null());
    assert_eq!(status["readers"].as_array().unwrap().len(), 0);
    assert_eq!(status["queued_writers"].as_array().unwrap().len(), 0);
    assert_eq!(status["fencing_token"], 0);
}

#[tokio::test]
async fn status_of_a_held_lock_shows_each_holder_the_queue_and_the_fence() {
    let client = cluster_client().await;
    let name = unique_name("cli-held");
    let lock = client.rwlock(name.as_str());
    let first = lock.read().await.unwrap();
    let second = lock.read_recursive().await.unwrap(); // a hold of its own
    let queued = tokio::spawn({
        let lock = lock.clone();
        async move { lock.write().await }
    });
    wait_for(&lock, |s| s.queued_writers.len() == 1).await;
    let state = lock.state().await.unwrap();

    let (code, stdout, stderr) = run(cli(&["status", &name, "--json"])).await;
    assert_eq!(code, HELD, "{stderr}");
    let status = json(&stdout);
    assert_eq!(status["mode"], "read");
    assert!(status["writer"].is_null());
    let readers = status["readers"].as_array().unwrap();
    assert_eq!(readers.len(), 2, "{stdout}");
    for reader in readers {
        let token = reader["token"].as_str().unwrap();
        assert!(
            state
                .readers
                .iter()
                .any(|r| r.token.as_deref() == Some(token)),
            "unknown reader {token}"
        );
        let remaining = reader["remaining_ms"].as_i64().unwrap();
        assert!((1..=10_000).contains(&remaining), "{remaining} ms left");
        let until = chrono::DateTime::parse_from_rfc3339(reader["until"].as_str().unwrap())
            .expect("until is RFC 3339");
        assert_eq!(
            until.timestamp_millis(),
            reader["until_ms"].as_i64().unwrap()
        );
    }
    let queue = status["queued_writers"].as_array().unwrap();
    assert_eq!(queue.len(), 1, "{stdout}");
    assert_eq!(
        queue[0]["token"].as_str(),
        state.queued_writers[0].token.as_deref()
    );

    let (code, stdout, _) = run(cli(&["status", &name])).await;
    assert_eq!(code, HELD);
    assert!(stdout.contains("is held for read"), "{stdout}");
    for reader in &state.readers {
        let line = stdout
            .lines()
            .find(|l| l.contains(reader.token.as_deref().unwrap()))
            .unwrap_or_else(|| panic!("reader missing: {stdout}"));
        assert!(
            line.trim_start().starts_with("reader") && line.contains("left)"),
            "{line}"
        );
    }
    assert!(stdout.contains("queued writers: 1"), "{stdout}");

    first.release().await.unwrap();
    second.release().await.unwrap();
    let writer = timeout(RUN_LIMIT, queued).await.unwrap().unwrap().unwrap();
    let (code, stdout, _) = run(cli(&["status", &name, "--json"])).await;
    assert_eq!(code, HELD);
    let status = json(&stdout);
    assert_eq!(status["mode"], "write");
    assert!(status["writer"]["token"].is_string(), "{stdout}");
    assert_eq!(status["fencing_token"], writer.fencing_token());
    let (_, text, _) = run(cli(&["status", &name])).await;
    assert!(text.contains("is held for write"), "{text}");
    assert!(
        text.contains(&format!("fencing counter: {}", writer.fencing_token())),
        "{text}"
    );
    writer.release().await.unwrap();
}

#[tokio::test]
async fn status_shows_the_upgradable_reader_and_a_pending_upgrade() {
    let client = cluster_client().await;
    let name = unique_name("cli-upgradable");
    let lock = client.rwlock(name.as_str());
    let reader = lock.read().await.unwrap();
    let upgradable = lock.upgradable_read().await.unwrap();
    let (_, stdout, stderr) = run(cli(&["status", &name, "--json"])).await;
    let status = json(&stdout);
    assert_eq!(status["mode"], "read", "{stderr}");
    let token = status["upgradable"]["token"].as_str().unwrap().to_owned();
    assert_eq!(status["readers"].as_array().unwrap().len(), 2, "{stdout}");
    assert_eq!(status["upgrade_pending"], false);

    let upgrade = tokio::spawn(upgradable.upgrade());
    wait_for(&lock, |s| s.upgrade_pending).await;
    let (_, text, _) = run(cli(&["status", &name])).await;
    let line = text
        .lines()
        .find(|l| l.contains(&token))
        .unwrap_or_else(|| panic!("upgradable reader missing: {text}"));
    assert!(line.trim_start().starts_with("upgradable reader"), "{line}");
    assert!(text.contains("waits to upgrade"), "{text}");
    let (_, stdout, _) = run(cli(&["status", &name, "--json"])).await;
    assert_eq!(json(&stdout)["upgrade_pending"], true, "{stdout}");

    reader.release().await.unwrap();
    let writer = timeout(RUN_LIMIT, upgrade).await.unwrap().unwrap().unwrap();
    let (_, stdout, _) = run(cli(&["status", &name, "--json"])).await;
    let status = json(&stdout);
    assert_eq!(status["mode"], "write");
    assert_eq!(status["writer"]["token"].as_str(), Some(token.as_str()));
    assert!(status["upgradable"].is_null());
    writer.release().await.unwrap();
}

#[tokio::test]
async fn status_exit_code_tells_held_from_free_for_a_script() {
    let client = cluster_client().await;
    let name = unique_name("cli-test");
    let lock = client.rwlock(name.as_str());
    // As a shell script tests it: no output parsed.
    let script = |name: &str| {
        format!(
            "if {} --cluster {} status {name} >/dev/null; then echo held; else echo \"free $?\"; fi",
            env!("CARGO_BIN_EXE_redis-rwlock"),
            shared_cluster().urls().join(",")
        )
    };
    let shell = |name: &str| {
        let mut sh = Command::new("sh");
        sh.args(["-c", &script(name)])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        sh
    };

    let (_, stdout, stderr) = run(shell(&name)).await;
    assert_eq!(stdout.trim(), "free 1", "{stderr}");

    let reader = lock.read().await.unwrap();
    let (_, stdout, stderr) = run(shell(&name)).await;
    assert_eq!(stdout.trim(), "held", "{stderr}");
    reader.release().await.unwrap();

    let writer = lock.write().await.unwrap();
    let (code, stdout, _) = run(cli(&["status", "--json", &name])).await;
    assert_eq!(code, HELD);
    assert_eq!(json(&stdout)["mode"], "write");
    writer.release().await.unwrap();

    let (code, _, _) = run(cli(&["status", &name])).await;
    assert_eq!(code, FREE);
    // A failure is never mistaken for "free": it has a code of its own.
    let (code, _, _) = run(cli(&["status", "bad{name}"])).await;
    assert_eq!(code, USAGE);
}

#[tokio::test]
async fn status_works_for_a_read_only_user() {
    let server = shared_standalone();
    let owner = standalone_client().await;
    let name = unique_name("cli-read-only");
    let lock = owner.rwlock(name.as_str());
    // A read-only user: it may read keys under `rwlock:` and run read-only
    // scripts. No INFO, so the version check at connect is skipped.
    let (user, url) = read_only_user(&[]);
    let viewer = |args: &[&str]| {
        let mut cmd = bare();
        cmd.arg("--url").arg(&url).args(args);
        cmd
    };

    let (code, stdout, stderr) = run(viewer(&["status", "--json", &name])).await;
    assert_eq!(code, FREE, "{stderr}");
    assert_eq!(json(&stdout)["mode"], "free");

    let writer = lock.write().await.unwrap();
    let (code, stdout, stderr) = run(viewer(&["status", "--json", &name])).await;
    assert_eq!(code, HELD, "{stderr}");
    let status = json(&stdout);
    assert_eq!(status["mode"], "write");
    assert_eq!(status["fencing_token"], writer.fencing_token());
    let (code, stdout, stderr) = run(viewer(&["status", &name])).await;
    assert_eq!(code, HELD, "{stderr}");
    assert!(stdout.contains("is held for write"), "{stdout}");
    assert!(writer.is_held());

    // Looking is all it may do: taking the lock is refused by the server.
    let (code, stdout, stderr) = run(viewer(&["exec", "--read", &name, "--", "echo", "ran"])).await;
    assert_eq!(code, UNAVAILABLE, "{stderr}");
    assert_eq!(stdout, "", "the command ran");
    assert!(stderr.contains("no permissions"), "{stderr}");
    writer.release().await.unwrap();
    server.raw(&server.nodes[0], &["ACL", "DELUSER", &user]);
}

/// `exec --<mode> --wait <wait>` on a lock someone else holds: gives up after at
/// least `at_least` without running its command, saying it timed out after `shown`.
async fn exec_times_out(name: &str, mode: &str, wait: &str, at_least: Duration, shown: &str) {
    let started = Instant::now();
    let flag = format!("--{mode}");
    let (code, stdout, stderr) = run(cli(&[
        "exec", &flag, "--wait", wait, name, "--", "echo", "ran",
    ]))
    .await;
    assert_eq!(code, NOT_ACQUIRED, "{stderr}");
    assert!(started.elapsed() >= at_least);
    assert_eq!(stdout, "", "the command ran");
    let said = format!("redis-rwlock: timed out after {shown} waiting for the {mode} lock");
    assert!(stderr.starts_with(&said), "{stderr}");
}

/// `exec --<mode> --wait <wait>` that may not wait at all: refused at once as busy,
/// without running its command.
async fn exec_is_busy(name: &str, mode: &str, wait: &str) {
    let flag = format!("--{mode}");
    let (code, stdout, stderr) = run(cli(&[
        "exec", &flag, "--wait", wait, name, "--", "echo", "ran",
    ]))
    .await;
    assert_eq!(code, NOT_ACQUIRED, "{stderr}");
    assert_eq!(stdout, "", "the command ran");
    assert!(stderr.contains("busy"), "{stderr}");
}

#[tokio::test]
async fn exec_wait_takes_plain_seconds_like_flock() {
    let client = cluster_client().await;
    let name = unique_name("cli-wait-secs");
    let lock = client.rwlock(name.as_str());
    let guard = lock.write().await.unwrap();

    exec_times_out(&name, "read", "1", Duration::from_secs(1), "1s").await;
    // 0 does not wait at all, as `flock -w 0`.
    exec_is_busy(&name, "read", "0").await;
    guard.release().await.unwrap();

    let (code, stdout, stderr) = run(cli(&[
        "exec", "--read", "--wait", "30", &name, "--", "echo", "ran",
    ]))
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "ran\n");

    let (code, _, stderr) = run(cli(&[
        "exec", "--read", "--wait", "1.2.3", &name, "--", "true",
    ]))
    .await;
    assert_eq!(code, USAGE);
    assert!(stderr.contains("not a number of seconds"), "{stderr}");
}

#[tokio::test]
async fn exec_passes_the_exit_status_through_and_releases_the_lock() {
    let client = cluster_client().await;
    let name = unique_name("cli-status");
    let lock = client.rwlock(name.as_str());

    let (code, _, stderr) = run(cli(&["exec", "--write", &name, "--", "sh", "-c", "exit 7"])).await;
    assert_eq!(code, 7, "{stderr}");
    assert!(lock.state().await.unwrap().is_free(), "not released");

    let (code, _, _) = run(cli(&["exec", "--read", &name, "--", "true"])).await;
    assert_eq!(code, 0);
    assert!(lock.state().await.unwrap().is_free(), "not released");

    // Death by a signal is reported like a shell does: 128 + N.
    let (code, _, _) = run(cli(&[
        "exec",
        "--read",
        &name,
        "--",
        "sh",
        "-c",
        "kill -TERM $$",
    ]))
    .await;
    assert_eq!(code, 128 + 15);
    assert!(lock.state().await.unwrap().is_free(), "not released");
}

#[tokio::test]
async fn exec_write_hands_the_fencing_token_to_the_command() {
    let client = cluster_client().await;
    let name = unique_name("cli-fence");
    let lock = client.rwlock(name.as_str());

    let (code, stdout, stderr) = run(cli(&[
        "exec",
        "--write",
        &name,
        "--",
        "sh",
        "-c",
        "echo \"$REDIS_RWLOCK_FENCING_TOKEN\"",
    ]))
    .await;
    assert_eq!(code, 0, "{stderr}");
    let fence: u64 = stdout.trim().parse().expect("a fencing token");
    assert!(fence > 0);
    let next = lock.write().await.unwrap();
    assert!(
        next.fencing_token() > fence,
        "{} <= {fence}",
        next.fencing_token()
    );
    next.release().await.unwrap();
}

#[tokio::test]
async fn exec_write_excludes_others_while_the_command_runs() {
    let client = cluster_client().await;
    let name = unique_name("cli-exclusive");
    let lock = client.rwlock(name.as_str());

    // The holder's command runs until the test creates the gate file.
    let gate = std::env::temp_dir().join(format!("{name}.gate"));
    let script = format!(
        "echo ready; while [ ! -e '{}' ]; do sleep 0.05; done",
        gate.display()
    );
    let (holder, holder_out) =
        start_ready(cli(&["exec", "--write", &name, "--", "sh", "-c", &script])).await;
    assert!(lock.state().await.unwrap().writer.is_some());

    // Another writer gives up after --wait, without running its command.
    exec_times_out(&name, "write", "200ms", Duration::from_millis(200), "200ms").await;
    // A reader that may not wait at all is refused at once.
    exec_is_busy(&name, "read", "0s").await;

    // A writer that waits runs only after the holder's command is done.
    let mut waiter = cli(&["exec", "--write", "--wait", "20s", &name, "--", "true"])
        .spawn()
        .unwrap();
    wait_for(&lock, |s| s.queued_writers.len() == 1).await;
    assert!(
        waiter.try_wait().unwrap().is_none(),
        "ran beside the holder"
    );
    std::fs::write(&gate, "").unwrap();
    let (code, _, stderr) = finish_ready(holder, holder_out).await;
    std::fs::remove_file(&gate).unwrap();
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) = finish(waiter).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(lock.state().await.unwrap().is_free(), "not released");
}

#[tokio::test]
async fn exec_terminates_the_command_when_the_lease_is_lost() {
    let client = cluster_client().await;
    let name = unique_name("cli-lost");
    let lock = client.rwlock(name.as_str());

    let (child, stdout) = start_ready(cli(&[
        "exec",
        "--write",
        "--lease",
        "1s",
        &name,
        "--",
        "sh",
        "-c",
        "trap 'echo got SIGTERM; exit 3' TERM; echo ready; while :; do sleep 0.1; done",
    ]))
    .await;
    let started = Instant::now();
    assert_eq!(lock.force_release().await.unwrap(), 1);

    // The next renewal (a third of the lease) finds the hold gone.
    let (code, stdout, stderr) = finish_ready(child, stdout).await;
    assert_eq!(code, LEASE_LOST, "{stderr}");
    assert_eq!(
        stdout.trim(),
        "got SIGTERM",
        "the command was not terminated"
    );
    assert!(
        stderr.contains(&format!("redis-rwlock: lost the write lock on \"{name}\"")),
        "{stderr}"
    );
    assert!(stderr.contains("exited with 3"), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_lost_lease_stops_everything_the_command_started() {
    let client = cluster_client().await;
    let name = unique_name("cli-lost-group");
    let lock = client.rwlock(name.as_str());

    // The command leaves a background process of its own; SIGTERM goes to both.
    let (child, stdout) = start_ready(cli(&[
        "exec",
        "--write",
        "--lease",
        "1s",
        &name,
        "--",
        "sh",
        "-c",
        "sh -c \"trap 'echo helper got SIGTERM; exit 0' TERM; while :; do sleep 0.1; done\" & \
         trap 'wait; echo main got SIGTERM; exit 3' TERM; echo ready; while :; do sleep 0.1; done",
    ]))
    .await;
    lock.force_release().await.unwrap();

    let (code, stdout, stderr) = finish_ready(child, stdout).await;
    assert_eq!(code, LEASE_LOST, "{stderr}");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["helper got SIGTERM", "main got SIGTERM"],
        "{stderr}"
    );
    assert!(stderr.contains("exited with 3"), "{stderr}");
}

#[tokio::test]
async fn exec_kills_a_command_that_ignores_sigterm_after_the_grace_period() {
    let client = cluster_client().await;
    let name = unique_name("cli-stubborn");
    let lock = client.rwlock(name.as_str());

    let (child, stdout) = start_ready(cli(&[
        "exec",
        "--write",
        "--lease",
        "1s",
        "--kill-after",
        "500ms",
        &name,
        "--",
        "sh",
        "-c",
        "trap '' TERM; echo ready; while :; do sleep 0.1; done",
    ]))
    .await;
    lock.force_release().await.unwrap();

    let (code, _, stderr) = finish_ready(child, stdout).await;
    assert_eq!(code, LEASE_LOST, "{stderr}");
    assert!(stderr.contains("sending SIGKILL"), "{stderr}");
    assert!(stderr.contains("killed by signal 9"), "{stderr}");
}

#[tokio::test]
async fn an_interrupt_is_passed_to_the_command_and_the_lock_released() {
    let client = cluster_client().await;
    let name = unique_name("cli-interrupt");
    let lock = client.rwlock(name.as_str());

    let (child, stdout) = start_ready(cli(&[
        "exec",
        "--write",
        &name,
        "--",
        "sh",
        "-c",
        "trap 'echo got SIGINT; exit 5' INT; echo ready; while :; do sleep 0.1; done",
    ]))
    .await;
    assert!(lock.state().await.unwrap().writer.is_some());
    signal(child.id().unwrap(), Signal::SIGINT);

    let (code, stdout, stderr) = finish_ready(child, stdout).await;
    assert_eq!(code, 5, "{stderr}");
    assert_eq!(stdout.trim(), "got SIGINT");
    assert!(lock.state().await.unwrap().is_free(), "not released");
}

#[tokio::test]
async fn an_interrupted_wait_leaves_no_queued_writer_behind() {
    let client = cluster_client().await;
    let name = unique_name("cli-interrupt-wait");
    let lock = client.rwlock(name.as_str());
    let guard = lock.read().await.unwrap();

    let child = cli(&["exec", "--write", &name, "--", "echo", "ran"])
        .spawn()
        .unwrap();
    wait_for(&lock, |s| s.queued_writers.len() == 1).await;
    signal(child.id().unwrap(), Signal::SIGTERM);

    let (code, stdout, stderr) = finish(child).await;
    assert_eq!(code, 128 + 15, "{stderr}");
    assert_eq!(stdout, "", "the command ran");
    assert!(stderr.contains("interrupted by SIGTERM"), "{stderr}");
    // Withdrawn before exiting, not left to lapse seconds later.
    let state = lock.state().await.unwrap();
    assert!(state.queued_writers.is_empty(), "{state:?}");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn release_refuses_without_force() {
    let client = cluster_client().await;
    let name = unique_name("cli-refuse");
    let lock = client.rwlock(name.as_str());
    let guard = lock.write().await.unwrap();

    let (code, stdout, stderr) = run(cli(&["release", &name])).await;
    assert_eq!(code, USAGE);
    assert_eq!(stdout, "");
    assert!(
        stderr.starts_with(&format!(
            "redis-rwlock: refusing to release lock \"{name}\" without --force"
        )),
        "{stderr}"
    );
    assert!(lock.state().await.unwrap().writer.is_some(), "released");
    assert!(guard.is_held());
    guard.release().await.unwrap();
}

#[tokio::test]
async fn release_force_ends_every_hold() {
    let client = cluster_client().await;
    let name = unique_name("cli-force");
    let lock = client.rwlock_with(
        name.as_str(),
        LockOptions::default().read_lease(Duration::from_secs(1)),
    );
    let first = lock.read().await.unwrap();
    let second = lock.read_recursive().await.unwrap(); // a hold of its own

    let (code, stdout, stderr) = run(cli(&["release", "--force", &name])).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.trim(), format!("lock \"{name}\": ended 2 holds"));
    assert!(held_by_nobody(&lock.state().await.unwrap()));
    // What is left keeps writers out for a while, and says so.
    let (code, stdout, stderr) = run(cli(&["status", &name])).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("forced release's fence (no client; writers wait for it)"),
        "{stdout}"
    );
    // The evicted holders learn it at their next renewal.
    timeout(Duration::from_secs(5), first.lost()).await.unwrap();
    timeout(Duration::from_secs(5), second.lost())
        .await
        .unwrap();

    let (code, stdout, _) = run(cli(&["release", "--force", &name])).await;
    assert_eq!(code, 0);
    assert_eq!(stdout.trim(), format!("lock \"{name}\" was not held"));
}

#[tokio::test]
async fn exec_of_a_missing_command_is_127_and_releases_the_lock() {
    let client = cluster_client().await;
    let name = unique_name("cli-missing");
    let lock = client.rwlock(name.as_str());

    let (code, _, stderr) = run(cli(&[
        "exec",
        "--write",
        &name,
        "--",
        "/nonexistent/redis-rwlock-test-command",
    ]))
    .await;
    assert_eq!(code, NOT_FOUND);
    assert!(
        stderr.starts_with("redis-rwlock: cannot run \"/nonexistent/redis-rwlock-test-command\""),
        "{stderr}"
    );
    assert!(lock.state().await.unwrap().is_free(), "not released");
}

#[tokio::test]
async fn without_a_redis_to_connect_to_it_says_how_to_name_one() {
    let mut cmd = bare();
    cmd.args(["status", "anything"]);
    let (code, _, stderr) = run(cmd).await;
    assert_eq!(code, USAGE);
    assert!(
        stderr.starts_with("redis-rwlock: no Redis to connect to")
            && stderr.contains("--url")
            && stderr.contains("REDIS_CLUSTER_NODES"),
        "{stderr}"
    );
}

#[tokio::test]
async fn bad_usage_is_64() {
    for args in [
        &["exec", "name", "--", "true"][..],
        &["exec", "--read", "name", "--wait", "soon", "--", "true"],
        &["exec", "--read", "name"],
        &["status", "bad{name}"],
    ] {
        let (code, _, stderr) = run(cli(args)).await;
        assert_eq!(code, USAGE, "{args:?}: {stderr}");
    }
}

/// A URL that is not a Redis URL (refused before any connection) and a lock name
/// over the documented 1,024 bytes are usage errors, and the message says why.
#[tokio::test]
async fn a_bad_url_or_an_overlong_name_is_64_with_the_reason() {
    let mut bad_url = bare();
    bad_url.args(["--url", "http://127.0.0.1:1", "status", "anything"]);
    let long_name = cli(&["status", &"n".repeat(1025)]);
    for (cmd, reason) in [
        (bad_url, "the server URL is not a usable Redis URL"),
        (long_name, "lock name is 1025 bytes long, longer than 1024"),
    ] {
        let (code, _, stderr) = run(cmd).await;
        assert_eq!(code, USAGE, "{stderr}");
        assert!(
            stderr.contains(&format!("invalid options: {reason}")),
            "{stderr}"
        );
        // The name is shortened, not echoed whole.
        assert!(!stderr.contains(&"n".repeat(65)), "{stderr}");
    }
}

/// Every command that prints, with its stdout a pipe whose reader is gone: each
/// stops at once, says nothing, and exits 141 as a tool killed by SIGPIPE would
/// (`redis-rwlock list | head -1`).
#[tokio::test]
async fn a_closed_output_ends_every_printing_command_quietly_with_141() {
    const OUTPUT_CLOSED: i32 = 141;
    let name = unique_name("cli-closed-output");
    let lock = cluster_client().await.rwlock(&name);
    let _guard = lock.write().await.unwrap();
    for args in [
        &["status", &name][..],
        &["status", &name, "--json"],
        &["list", &name],
        &["list", &name, "--json"],
        &["watch", &name, "--interval", "10ms"],
        &["libraries"],
        &["libraries", "--json"],
        &["release", "--force", &name],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut cmd = cli(args);
        cmd.stdout(Stdio::from(writer));
        let (code, _, stderr) = run(cmd).await;
        assert_eq!(code, OUTPUT_CLOSED, "{args:?}: {stderr}");
        assert_eq!(stderr, "", "{args:?}");
    }
    // The release went through, though nobody read that it did.
    assert!(lock.state().await.unwrap().is_free());
}

#[tokio::test]
async fn an_unreachable_redis_is_69_with_the_cause() {
    let mut cmd = bare();
    cmd.args(["--url", "redis://127.0.0.1:1", "status", "anything"]);
    let (code, _, stderr) = run(cmd).await;
    assert_eq!(code, UNAVAILABLE);
    assert!(
        stderr.starts_with("redis-rwlock: cannot connect to Redis at redis://127.0.0.1:1: "),
        "{stderr}"
    );
    assert!(stderr.to_lowercase().contains("refused"), "{stderr}");
}

#[tokio::test]
async fn the_environment_names_the_cluster_or_the_server() {
    let name = unique_name("cli-env");

    let mut cmd = bare();
    cmd.env("REDIS_CLUSTER_NODES", shared_cluster().urls().join(","))
        .args(["exec", "--write", &name, "--", "true"]);
    let (code, _, stderr) = run(cmd).await;
    assert_eq!(code, 0, "{stderr}");

    let server = shared_standalone().url();
    let mut cmd = bare();
    cmd.env("REDIS_URL", &server)
        .args(["exec", "--read", &name, "--", "sh", "-c", "exit 3"]);
    let (code, _, stderr) = run(cmd).await;
    assert_eq!(code, 3, "{stderr}");

    let mut cmd = bare();
    cmd.env("REDIS_URL", &server)
        .args(["status", "--json", &name]);
    let (code, stdout, stderr) = run(cmd).await;
    assert_eq!(code, FREE, "{stderr}");
    assert_eq!(json(&stdout)["mode"], "free");
}

/// `list PATTERN` on the shared cluster: the tool's table and JSON of three locks in
/// three states, sorted by name; `--limit` cuts it short and says so; no match is 1.
#[tokio::test]
async fn list_shows_the_matching_locks_as_a_table_and_as_json() {
    let client = cluster_client().await;
    let group = unique_name("cli-list");
    let (written, read, free) = (
        format!("{group}-a"),
        format!("{group}-b"),
        format!("{group}-c"),
    );
    let writer = client.rwlock(written.as_str()).write().await.unwrap();
    let read_lock = client.rwlock(read.as_str());
    let readers = [
        read_lock.read().await.unwrap(),
        read_lock.read_recursive().await.unwrap(),
    ];
    let queued = tokio::spawn({
        let lock = read_lock.clone();
        async move { lock.write().await.unwrap().release().await.unwrap() }
    });
    wait_for(&read_lock, |s| s.queued_writers.len() == 1).await;
    let long = LockOptions::default().write_lease(Duration::from_secs(60));
    let released = client
        .rwlock_with(free.as_str(), long)
        .write()
        .await
        .unwrap();
    let free_fence = released.fencing_token();
    released.release().await.unwrap();
    let pattern = format!("{group}-*");

    let (code, stdout, stderr) = run(cli(&["list", &pattern])).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stderr, "");
    let lines: Vec<Vec<&str>> = stdout
        .lines()
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        [
            "NAME", "MODE", "HOLDERS", "QUEUED", "LEASE", "ENDS", "FENCE"
        ],
        "{stdout}"
    );
    assert_eq!(lines.len(), 5, "{stdout}");
    let fence = writer.fencing_token().to_string();
    assert_eq!(
        lines[1][..4],
        [written.as_str(), "write", "1", "0"],
        "{stdout}"
    );
    assert!(
        lines[1][5].starts_with('(') && lines[1][6] == "left)",
        "{stdout}"
    );
    assert_eq!(lines[1].last(), Some(&fence.as_str()));
    assert_eq!(lines[2][..4], [read.as_str(), "read", "2", "1"], "{stdout}");
    let free_fence_text = free_fence.to_string();
    assert_eq!(
        lines[3],
        [
            free.as_str(),
            "free",
            "0",
            "0",
            "-",
            free_fence_text.as_str()
        ],
        "{stdout}"
    );
    assert_eq!(
        stdout.lines().last(),
        Some(format!("3 locks match {pattern:?}").as_str())
    );

    let (code, stdout, stderr) = run(cli(&["list", &pattern, "--json"])).await;
    assert_eq!(code, 0, "{stderr}");
    let view = json(&stdout);
    assert_eq!(view["truncated"], false);
    assert_eq!(view["pattern"], pattern.as_str());
    let locks = view["locks"].as_array().unwrap();
    let shown: Vec<(&str, &str, i64, i64)> = locks
        .iter()
        .map(|l| {
            (
                l["lock"].as_str().unwrap(),
                l["mode"].as_str().unwrap(),
                l["holders"].as_i64().unwrap(),
                l["queued_writers"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            (written.as_str(), "write", 1, 0),
            (read.as_str(), "read", 2, 1),
            (free.as_str(), "free", 0, 0),
        ]
    );
    assert_eq!(locks[0]["fencing_token"], writer.fencing_token());
    assert_eq!(locks[0]["key"], format!("rwlock:{{{written}}}"));
    let remaining = locks[0]["remaining_ms"].as_i64().unwrap();
    assert!((1..=10_000).contains(&remaining), "{remaining} ms left");
    let until = chrono::DateTime::parse_from_rfc3339(locks[0]["held_until"].as_str().unwrap())
        .expect("held_until is RFC 3339");
    assert_eq!(
        until.timestamp_millis(),
        locks[0]["held_until_ms"].as_i64().unwrap()
    );
    let state = read_lock.state().await.unwrap();
    assert_eq!(
        locks[1]["first_in_line"]["token"].as_str(),
        state.queued_writers[0].token.as_deref()
    );
    assert_eq!(locks[1]["state"]["readers"].as_array().unwrap().len(), 2);
    assert!(locks[2]["held_until"].is_null());
    assert_eq!(locks[2]["fencing_token"], free_fence);

    // Cut short: the first two by name, and it says more match.
    let (code, stdout, _) = run(cli(&["list", &pattern, "--json", "--limit", "2"])).await;
    assert_eq!(code, 0);
    let view = json(&stdout);
    assert_eq!(view["truncated"], true);
    let names: Vec<&str> = view["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["lock"].as_str().unwrap())
        .collect();
    assert_eq!(names, [written.as_str(), read.as_str()]);
    let (code, stdout, _) = run(cli(&["list", &pattern, "--limit", "2"])).await;
    assert_eq!(code, 0);
    assert!(
        stdout.lines().last().unwrap().contains("raise --limit"),
        "{stdout}"
    );

    // Nothing matches: 1, as grep (a pattern with braces is a pattern like any
    // other: tagged names have them). An empty pattern: usage.
    let none = format!("{group}-none-*");
    let (code, stdout, stderr) = run(cli(&["list", &none])).await;
    assert_eq!(code, FREE, "{stderr}");
    assert_eq!(stdout, format!("no locks match {none:?}\n"));
    let (code, stdout, _) = run(cli(&["list", &none, "--json"])).await;
    assert_eq!(code, FREE);
    assert_eq!(json(&stdout)["locks"].as_array().unwrap().len(), 0);
    let (code, _, stderr) = run(cli(&["list", &format!("{{{group}-none}}*")])).await;
    assert_eq!(code, FREE, "{stderr}");
    let (code, _, stderr) = run(cli(&["list", ""])).await;
    assert_eq!(code, USAGE, "{stderr}");

    writer.release().await.unwrap();
    for reader in readers {
        reader.release().await.unwrap();
    }
    queued.await.unwrap();
}

/// More locks than `--limit`: the table shows the first found, sorted, and its last
/// line says exactly that (not "the first by name", which they are not), and how to
/// see them all; `--limit` above their number shows them all. Then the JSON of all of
/// them, more than a pipe holds, to a reader that takes one line and goes: the tool
/// stops and exits 141, as the README and `--help` promise for output that does not
/// fit in the pipe (`list | head -1`).
#[tokio::test]
async fn a_long_list_says_what_it_shows_and_stops_with_141_when_its_reader_goes() {
    const LOCKS: usize = 300;
    const OUTPUT_CLOSED: i32 = 141;
    let client = cluster_client().await;
    let group = unique_name("cli-bulk");
    // Released write holds with a long lease: each key stays, listed as free.
    let long = LockOptions::default().write_lease(Duration::from_secs(120));
    let mut made = tokio::task::JoinSet::new();
    for i in 1..=LOCKS {
        let lock = client.rwlock_with(format!("{group}-{i}"), long.clone());
        made.spawn(async move { lock.write().await.unwrap().release().await.unwrap() });
    }
    made.join_all().await;
    let pattern = format!("{group}-*");

    let (code, stdout, stderr) = run(cli(&["list", &pattern])).await;
    assert_eq!(code, 0, "{stderr}");
    let names: Vec<&str> = stdout
        .lines()
        .skip(1)
        .take(100)
        .map(|line| line.split_whitespace().next().unwrap())
        .collect();
    assert!(names.is_sorted(), "{names:?}");
    assert_eq!(stdout.lines().count(), 1 + 100 + 1, "{stdout}");
    assert_eq!(
        stdout.lines().last(),
        Some(
            format!(
                "100 locks shown of more that match {pattern:?}: the first 100 found, not \
                 the first by name; raise --limit (now 100) above their number to see them all"
            )
            .as_str()
        )
    );

    let all = LOCKS.to_string();
    let (code, stdout, stderr) = run(cli(&["list", &pattern, "--json", "--limit", &all])).await;
    assert_eq!(code, 0, "{stderr}");
    let view = json(&stdout);
    assert_eq!(view["truncated"], false);
    let mut expected: Vec<String> = (1..=LOCKS).map(|i| format!("{group}-{i}")).collect();
    expected.sort();
    let listed: Vec<&str> = view["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["lock"].as_str().unwrap())
        .collect();
    assert_eq!(listed, expected);
    // More than a Linux pipe holds (64 KiB), with room to spare.
    assert!(stdout.len() > 128 * 1024, "{} bytes", stdout.len());

    let mut child = cli(&["list", &pattern, "--json", "--limit", &all])
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).await.unwrap();
    assert_eq!(line, "{\n");
    drop(stdout);
    let (code, _, stderr) = finish(child).await;
    assert_eq!(code, OUTPUT_CLOSED, "{stderr}");
    assert_eq!(stderr, "");
}

/// Reads lines of a running `watch` until one satisfies `pred`; returns how many
/// views (status's first line, `lock "NAME" ...`) began meanwhile.
async fn watch_until(
    stdout: &mut BufReader<ChildStdout>,
    name: &str,
    pred: impl Fn(&str) -> bool,
) -> usize {
    let view = format!("lock {name:?} (key ");
    let mut views = 0;
    loop {
        let mut line = String::new();
        let read = timeout(RUN_LIMIT, stdout.read_line(&mut line))
            .await
            .expect("watch printed nothing for too long")
            .unwrap();
        assert!(read > 0, "watch closed its output");
        views += usize::from(line.starts_with(&view));
        if pred(&line) {
            return views;
        }
    }
}

/// `watch NAME --interval 100ms` redraws the lock's status, follows a change, and
/// exits 0 on SIGTERM (waiting on its output, not on time).
#[tokio::test]
async fn watch_redraws_the_status_until_sigterm_and_exits_0() {
    let client = cluster_client().await;
    let name = unique_name("cli-watch");
    let lock = client.rwlock(name.as_str());
    let mut child = cli(&["watch", &name, "--interval", "100ms"])
        .spawn()
        .expect("start redis-rwlock watch");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());

    let free = format!("lock {name:?} (key {}) is free", lock.key().unwrap());
    let views = watch_until(&mut stdout, &name, |line| line.starts_with(&free)).await;
    assert_eq!(views, 1, "the first view shows the free lock");
    let writer = lock.write().await.unwrap();
    let views = watch_until(&mut stdout, &name, |line| {
        line.ends_with("is held for write\n")
    })
    .await;
    assert!(views >= 1, "the change came without a new view");
    // Another redraw after that: it goes on.
    let more = watch_until(&mut stdout, &name, |line| line.starts_with("every 100ms: ")).await;
    assert_eq!(more, 0);

    signal(child.id().unwrap(), Signal::SIGTERM);
    let (code, _, stderr) = finish(child).await;
    assert_eq!(code, 0, "{stderr}");
    drop(stdout);
    writer.release().await.unwrap();

    // A name that cannot be a lock is a usage error at once.
    let (code, _, stderr) = run(cli(&["watch", "bad{name}"])).await;
    assert_eq!(code, USAGE, "{stderr}");
    let (code, _, _) = run(cli(&["watch", &name, "--interval", "0"])).await;
    assert_eq!(code, USAGE);
}

/// A read hold its process keeps idle (`keep_reads`) shows as kept in `status` and
/// `list`, and as a plain reader again once a read takes it up.
#[tokio::test]
async fn a_kept_idle_read_hold_shows_as_kept() {
    let client = cluster_client().await;
    let name = unique_name("cli-kept");
    let lock = client.rwlock_with(
        &name,
        LockOptions::default().keep_reads(Duration::from_secs(60)),
    );
    lock.read().await.unwrap().release().await.unwrap();
    wait_for(&lock, |s| s.readers.len() == 1 && s.readers[0].kept_idle).await;
    let (code, stdout, stderr) = run(cli(&["status", &name])).await;
    assert_eq!(code, HELD, "{stderr}");
    assert!(stdout.contains("  reader (kept, idle)  "), "{stdout}");
    let (_, stdout, _) = run(cli(&["status", &name, "--json"])).await;
    assert_eq!(json(&stdout)["readers"][0]["kept_idle"], true, "{stdout}");
    let (_, stdout, stderr) = run(cli(&["list", &name])).await;
    assert!(stdout.contains("read (1 kept idle)"), "{stdout}{stderr}");

    let guard = lock.read().await.unwrap();
    wait_for(&lock, |s| s.readers.len() == 1 && !s.readers[0].kept_idle).await;
    let (_, stdout, _) = run(cli(&["status", &name])).await;
    assert!(!stdout.contains("(kept, idle)"), "{stdout}");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn exec_takes_a_lock_set_all_at_once_and_releases_it() {
    let client = cluster_client().await;
    let (a, b, c) = (
        unique_name("cli-set-a"),
        unique_name("cli-set-b"),
        unique_name("cli-set-c"),
    );
    // The command sees every lock held in its mode, and the written one's token.
    let script = format!(
        "redis-rwlock --cluster {} status {a} && redis-rwlock --cluster {} status {c} \
         && echo \"fence=$REDIS_RWLOCK_FENCING_TOKEN\"",
        shared_cluster().urls().join(","),
        shared_cluster().urls().join(","),
    );
    let tool_dir = std::path::Path::new(env!("CARGO_BIN_EXE_redis-rwlock"))
        .parent()
        .unwrap()
        .to_owned();
    let mut cmd = cli(&[
        "exec", "--write", &c, "--read", &a, "--read", &b, "--", "sh", "-c", &script,
    ]);
    cmd.env(
        "PATH",
        format!("{}:{}", tool_dir.display(), std::env::var("PATH").unwrap()),
    );
    let (code, stdout, stderr) = run(cmd).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let fence: u64 = stdout
        .lines()
        .find_map(|line| line.strip_prefix("fence="))
        .and_then(|token| token.parse().ok())
        .unwrap_or_else(|| panic!("no fencing token: {stdout}"));
    assert_eq!(
        fence,
        client
            .rwlock(c.as_str())
            .state()
            .await
            .unwrap()
            .fencing_token
    );
    for name in [&a, &b, &c] {
        let state = client.rwlock(name.as_str()).state().await.unwrap();
        assert!(state.is_free(), "{name} not released: {state:?}");
    }

    // Busy with --wait 0: nothing is taken, and the tool says which locks.
    let blocker = client.rwlock(b.as_str()).write().await.unwrap();
    let (code, _, stderr) = run(cli(&[
        "exec", "--read", &a, "--read", &b, "--wait", "0", "--", "true",
    ]))
    .await;
    assert_eq!(code, NOT_ACQUIRED, "{stderr}");
    assert!(stderr.contains(&a) && stderr.contains(&b), "{stderr}");
    assert!(client.rwlock(a.as_str()).state().await.unwrap().is_free());
    blocker.release().await.unwrap();
}

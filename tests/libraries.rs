//! `redis-rwlock libraries`, end to end: the built binary lists the crate's function
//! libraries on every master (this version's after a lock was used, and old ones
//! planted with `FUNCTION LOAD`), removes the old ones from every master (and so from
//! the replicas) while this version's stays and the locks keep running on it, removes
//! nothing when only listing or with `--dry-run`, removes this version's only when
//! named, and tells a user without the FUNCTION permissions which one to add.
#![cfg(all(unix, feature = "cli"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;

use redis::Value;
use redis_rwlock::{LockClient, library_name};
use serde_json::json;
use tokio::process::Command;

use common::{
    LocalRedis, Node, bare, blocking, read_only_user, run, shared_cluster, shared_standalone,
    unique_name,
};

/// Exit codes the tool documents.
const USAGE: i32 = 64;
const UNAVAILABLE: i32 = 69;

/// A library of an older version, as a test plants it.
const OLD: &str = "rwlock_000000000000";

/// The tool on `redis` (`--cluster` or `--url`), with `args`.
fn tool(redis: &LocalRedis, args: &[&str]) -> Command {
    let mut cmd = bare();
    if redis.is_cluster() {
        cmd.arg("--cluster").arg(redis.urls().join(","));
    } else {
        cmd.arg("--url").arg(redis.url());
    }
    cmd.args(args);
    cmd
}

/// Runs the tool, which must succeed; its stdout.
async fn succeeds(cmd: Command) -> String {
    let (code, stdout, stderr) = run(cmd).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    stdout
}

/// Runs `libraries --json` with `args`, which must succeed; its JSON.
async fn libraries_json(redis: &LocalRedis, args: &[&str]) -> serde_json::Value {
    let args = [&["libraries", "--json"], args].concat();
    let stdout = succeeds(tool(redis, &args)).await;
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// Loads a one-function library named `name` on `node`, as an older version (or
/// another application) would have.
fn plant(redis: &LocalRedis, node: &Node, name: &str) {
    let source = format!(
        "#!lua name={name}\nredis.register_function('{name}_state', function() return 1 end)"
    );
    redis.raw(node, &["FUNCTION", "LOAD", &source]);
}

/// The names of the libraries loaded on `node`.
fn loaded(redis: &LocalRedis, node: &Node) -> BTreeSet<String> {
    redis.library_names(node).into_iter().collect()
}

/// `node`'s libraries once `done` accepts them, or as they are after 5 s.
fn settled(
    redis: &LocalRedis,
    node: &Node,
    done: impl Fn(&BTreeSet<String>) -> bool,
) -> BTreeSet<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let now = loaded(redis, node);
        if done(&now) || std::time::Instant::now() >= deadline {
            return now;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Waits until `master`'s replicas have what it wrote so far (`WAIT`), so a replica
/// shows the libraries its master has.
fn replicated(redis: &LocalRedis, master: &Node) {
    let acked = redis.raw(master, &["WAIT", "1", "10000"]);
    assert_eq!(acked, Value::Int(1), "the replica of {} lags", master.url);
}

/// `host:port` of a node, as the tool names masters.
fn address(node: &Node) -> String {
    format!("127.0.0.1:{}", node.port)
}

/// `FUNCTION LOAD` calls on `node` so far.
fn loads(redis: &LocalRedis, node: &Node) -> u64 {
    redis
        .commandstats(node)
        .get("function|load")
        .copied()
        .unwrap_or(0)
}

/// A write and a read hold of `name`, taken and released.
async fn use_lock(client: &LockClient, name: &str) {
    let lock = client.rwlock(name);
    lock.write().await.unwrap().release().await.unwrap();
    lock.read().await.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_libraries_are_listed_and_removed_from_every_master_keeping_this_version_s() {
    let redis = shared_cluster();
    let client = LockClient::cluster(redis.urls()).await.unwrap();
    let own = library_name();
    let masters: Vec<Node> = blocking(|| redis.masters().into_iter().cloned().collect());
    assert_eq!(masters.len(), 3);
    // A lock on each master loads this version's library there.
    let names: Vec<String> = masters
        .iter()
        .map(|m| blocking(|| redis.name_on_master("libraries", m)))
        .collect();
    for name in &names {
        use_lock(&client, name).await;
    }
    // An old version's library on two of the three masters, and a library that is
    // not the crate's on one.
    for master in &masters[..2] {
        blocking(|| plant(redis, master, OLD));
    }
    blocking(|| plant(redis, &masters[0], "mylib"));
    for master in &masters {
        blocking(|| replicated(redis, master));
    }
    let replicas: Vec<Node> = masters
        .iter()
        .map(|m| blocking(|| redis.replica_of(m).unwrap().clone()))
        .collect();
    // `WAIT` counts a replica that has the write; Valkey's may apply it a moment later.
    let on_replica = blocking(|| settled(redis, &replicas[0], |now| now.contains(OLD)));
    assert!(on_replica.contains(OLD), "{on_replica:?}");

    // The listing: both libraries of the crate, on the masters that have them.
    let all: Vec<String> = masters.iter().map(address).collect();
    let listing = libraries_json(redis, &[]).await;
    assert_eq!(listing["this_version"], own);
    assert_eq!(listing["masters"], json!(all));
    assert!(listing.get("removed").is_none(), "{listing}");
    let libraries = listing["libraries"].as_array().unwrap();
    let names_listed: Vec<&str> = libraries
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names_listed, [own, OLD], "this version's first, no mylib");
    assert_eq!(libraries[0]["this_version"], true);
    assert_eq!(libraries[0]["masters"], json!(all));
    assert!(libraries[0]["functions"].as_u64().unwrap() >= 8);
    assert!(libraries[0]["code_bytes"].as_u64().unwrap() > 10_000);
    assert_eq!(libraries[1]["this_version"], false);
    assert_eq!(libraries[1]["masters"], json!(all[..2]));
    assert_eq!(libraries[1]["functions"], 1);

    let text = succeeds(tool(redis, &["libraries"])).await;
    assert!(
        text.lines()
            .any(|l| l.starts_with(own) && l.contains("this tool's") && l.contains("all 3")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with(OLD) && l.contains("other") && l.contains("2 of 3")),
        "{text}"
    );
    assert!(text.contains("--remove-others"), "{text}");

    // A dry run says what would go, and removes nothing.
    let dry = libraries_json(redis, &["--remove-others", "--dry-run"]).await;
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["removed"], json!([{"name": OLD, "masters": all[..2]}]));
    let text = succeeds(tool(redis, &["libraries", "--remove-others", "--dry-run"])).await;
    assert!(
        text.starts_with(&format!("would remove {OLD} from 2 of 3")),
        "{text}"
    );
    for master in &masters[..2] {
        assert!(blocking(|| loaded(redis, master)).contains(OLD));
    }

    // The removal: the old library leaves every master, then every replica; this
    // version's and the other application's stay.
    let loads_before: Vec<u64> = masters
        .iter()
        .map(|m| blocking(|| loads(redis, m)))
        .collect();
    let text = succeeds(tool(redis, &["libraries", "--remove-others"])).await;
    assert_eq!(
        text,
        format!("removed {OLD} from 2 of 3: {}\n", all[..2].join(", "))
    );
    for (master, replica) in masters.iter().zip(&replicas) {
        blocking(|| replicated(redis, master));
        for node in [master, replica] {
            // A replica that acknowledged the removal may apply it a moment later (seen
            // on Valkey: an empty list, or the old list, right after the WAIT).
            let now =
                blocking(|| settled(redis, node, |now| !now.contains(OLD) && now.contains(own)));
            assert!(!now.contains(OLD), "{} still has it: {now:?}", node.url);
            assert!(
                now.contains(own),
                "{} lost this version's: {now:?}",
                node.url
            );
        }
    }
    assert!(blocking(|| loaded(redis, &masters[0])).contains("mylib"));

    // The locks run on as before, on the library that stayed: nothing is loaded.
    for name in &names {
        use_lock(&client, name).await;
    }
    let loads_after: Vec<u64> = masters
        .iter()
        .map(|m| blocking(|| loads(redis, m)))
        .collect();
    assert_eq!(loads_after, loads_before, "a library was loaded again");
    // Nothing left to remove.
    let again = libraries_json(redis, &["--remove-others"]).await;
    assert_eq!(again["removed"], json!([]));
    blocking(|| redis.raw(&masters[0], &["FUNCTION", "DELETE", "mylib"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn this_version_s_library_goes_only_when_named_and_comes_back_at_the_next_call() {
    let redis = blocking(LocalRedis::standalone);
    let server = redis.nodes[0].clone();
    let client = LockClient::standalone(redis.url()).await.unwrap();
    let own = library_name();
    let name = unique_name("libraries-own");
    let (old_a, old_b) = ("rwlock_00000000000a", "rwlock_00000000000b");

    // With this version's library loaded nowhere, --remove-others would likely
    // remove what the services run: refused, nothing removed.
    blocking(|| plant(&redis, &server, old_a));
    let (code, _, stderr) = run(tool(&redis, &["libraries", "--remove-others"])).await;
    assert_eq!(code, USAGE, "{stderr}");
    assert!(stderr.contains("loaded on no master"), "{stderr}");
    assert!(stderr.contains("--keep"), "{stderr}");
    assert!(blocking(|| loaded(&redis, &server)).contains(old_a));

    // --keep spares a version still running; a --keep of a library no master has
    // (a typo) is refused before anything is removed.
    use_lock(&client, &name).await;
    blocking(|| plant(&redis, &server, old_b));
    let typo = [
        "libraries",
        "--remove-others",
        "--keep",
        "rwlock_00000000000c",
    ];
    let (code, _, stderr) = run(tool(&redis, &typo)).await;
    assert_eq!(code, USAGE, "{stderr}");
    assert!(stderr.contains("--keep rwlock_00000000000c"), "{stderr}");
    let both: BTreeSet<String> = [own, old_a, old_b].map(str::to_owned).into();
    assert_eq!(blocking(|| loaded(&redis, &server)), both);
    let kept = libraries_json(&redis, &["--remove-others", "--keep", old_a]).await;
    assert_eq!(
        kept["removed"],
        json!([{"name": old_b, "masters": [address(&server)]}])
    );
    let left: BTreeSet<String> = [own, old_a].map(str::to_owned).into();
    assert_eq!(blocking(|| loaded(&redis, &server)), left);

    // Named, this version's goes too (and is said to come back); so does a name no
    // master has, as nothing.
    let text = succeeds(tool(
        &redis,
        &[
            "libraries",
            "--remove",
            old_a,
            "--remove",
            own,
            "--remove",
            old_b,
        ],
    ))
    .await;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].starts_with(&format!("removed {old_a} from ")),
        "{text}"
    );
    assert!(
        lines[1].starts_with(&format!("removed {own} from ")),
        "{text}"
    );
    assert!(lines[1].contains("load it again"), "{text}");
    assert_eq!(
        lines[2],
        format!("{old_b}: on no master, nothing to remove")
    );
    assert!(blocking(|| loaded(&redis, &server)).is_empty());

    // The lock's next call loads it again, once, and the lock works.
    let before = blocking(|| loads(&redis, &server));
    use_lock(&client, &name).await;
    assert_eq!(blocking(|| loads(&redis, &server)), before + 1);
    let again: BTreeSet<String> = [own.to_owned()].into();
    assert_eq!(blocking(|| loaded(&redis, &server)), again);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_the_function_permissions_is_told_which_to_add() {
    let redis = shared_standalone();
    let server = &redis.nodes[0];
    blocking(|| plant(redis, server, OLD));
    let as_user = |url: String, args: &[&str]| {
        let mut cmd = bare();
        cmd.arg("--url").arg(url).arg("libraries").args(args);
        cmd
    };

    // Without FUNCTION LIST, even the listing is refused, by name.
    let (_, url) = blocking(|| read_only_user(&[]));
    let (code, stdout, stderr) = run(as_user(url, &[])).await;
    assert_eq!((code, stdout.as_str()), (UNAVAILABLE, ""), "{stderr}");
    assert!(
        stderr.contains("may not run FUNCTION LIST") && stderr.contains("+function|list"),
        "{stderr}"
    );

    // With it, listing works and removing is refused, naming FUNCTION DELETE;
    // the library stays.
    let (_, url) = blocking(|| read_only_user(&["+function|list"]));
    let (code, stdout, stderr) = run(as_user(url.clone(), &[])).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains(OLD), "{stdout}");
    let (code, _, stderr) = run(as_user(url, &["--remove", OLD])).await;
    assert_eq!(code, UNAVAILABLE, "{stderr}");
    assert!(
        stderr.contains("may not run FUNCTION DELETE") && stderr.contains("+function|delete"),
        "{stderr}"
    );
    assert!(blocking(|| loaded(redis, server)).contains(OLD));
    blocking(|| redis.raw(server, &["FUNCTION", "DELETE", OLD]));
}

/// Only the crate's shape of name is accepted for `--keep` and `--remove`, before
/// any connection: another application's library cannot be named by mistake.
#[tokio::test]
async fn names_that_are_not_the_crate_s_are_refused() {
    for args in [
        &["libraries", "--remove", "mylib"][..],
        &["libraries", "--remove-others", "--keep", "rwlock_XYZ"],
        &["libraries", "--dry-run"],
    ] {
        let mut cmd = bare();
        cmd.args(["--url", "redis://127.0.0.1:1"]).args(args);
        let (code, _, stderr) = run(cmd).await;
        assert_eq!(code, USAGE, "{args:?}: {stderr}");
    }
}

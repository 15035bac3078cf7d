//! ACL users: the README's least-privilege rule is enough for every feature of the
//! lock, on every node of a cluster and on a single server, runs it through the
//! function library and leaves `ACL LOG` empty; a user without the library's
//! commands still runs every feature through EVALSHA, after one refusal per client;
//! a user missing any other permission gets the server's NOPERM, not a hang.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redis::Value;
use redis_rwlock::{Error, FencedWrites, LockClient, LockOptions};
use tokio::time::{Instant, timeout};

use common::{LocalRedis, blocking, unique_name, wait_for};

/// The README's rule, after `ACL SETUSER <name> on ><password>`.
const RULE: &str = "resetkeys ~rwlock:* resetchannels &rwlock:* -@all +fcall +fcall_ro \
    +function|load +evalsha +eval +evalsha_ro +eval_ro +ssubscribe +sunsubscribe \
    +subscribe +unsubscribe \
    +spublish +publish +wait +info +cluster|slots +ping +hello +auth +time +hgetall +hmget \
    +hscan +hset +hdel +pexpire +pttl +del +set +get +type";

#[test]
fn the_readme_gives_the_tested_rule() {
    let readme = include_str!("../README.md")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        readme.contains(&format!("ACL SETUSER locker on >PASSWORD {RULE}")),
        "README.md lacks the rule tested here"
    );
    assert!(
        readme.contains("+client|setinfo"),
        "README.md must say when to add client|setinfo"
    );
}

/// Creates `user` (password `secret`) on every node with the rule plus `extra`,
/// and clears `ACL LOG`. Adds `client|setinfo` where the server knows it (7.2+,
/// Valkey); Redis 7.0 refuses the name, and the driver's CLIENT SETINFO fails there
/// as an unknown subcommand, never reaching the ACL.
fn create_user(redis: &LocalRedis, user: &str, extra: &str) {
    for node in &redis.nodes {
        let mut args = vec!["ACL", "SETUSER", user, "reset", "on", ">secret"];
        args.extend(RULE.split_whitespace());
        args.extend(extra.split_whitespace());
        redis.raw(node, &args);
        let _ = redis.try_raw(node, &["ACL", "SETUSER", user, "+client|setinfo"]);
        redis.raw(node, &["ACL", "LOG", "RESET"]);
    }
}

fn urls_as(redis: &LocalRedis, user: &str) -> Vec<String> {
    redis
        .nodes
        .iter()
        .map(|n| format!("redis://{user}:secret@127.0.0.1:{}", n.port))
        .collect()
}

/// A client of the lock as `user`, of the kind `redis` is.
async fn connect_as(redis: &LocalRedis, user: &str) -> LockClient {
    let urls = urls_as(redis, user);
    if redis.is_cluster() {
        LockClient::cluster(urls).await.unwrap()
    } else {
        LockClient::standalone(&urls[0]).await.unwrap()
    }
}

/// `ACL LOG` of every node: (user, reason, object, count) per entry.
fn acl_log(redis: &LocalRedis) -> Vec<(String, String, String, i64)> {
    let mut entries = Vec::new();
    for node in &redis.nodes {
        let Value::Array(log) = redis.raw(node, &["ACL", "LOG"]) else {
            panic!("ACL LOG on {} is not a list", node.url);
        };
        for entry in log {
            let fields: Vec<Value> = redis::from_redis_value(entry).unwrap();
            let field = |name: &str| {
                let at = fields
                    .iter()
                    .position(|f| redis::from_redis_value::<String>(f.clone()).unwrap() == name)
                    .unwrap_or_else(|| panic!("an ACL LOG entry without {name}"));
                fields[at + 1].clone()
            };
            let text = |name: &str| redis::from_redis_value::<String>(field(name)).unwrap();
            let count = redis::from_redis_value::<i64>(field("count")).unwrap();
            entries.push((text("username"), text("reason"), text("object"), count));
        }
    }
    entries
}

/// Calls of EVAL, EVALSHA and their `_RO` forms, and of FCALL and FCALL_RO, on
/// every node so far.
fn script_calls(redis: &LocalRedis) -> (u64, u64) {
    let stats = redis.commandstats_all();
    let sum = |prefix: &str| {
        stats
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .map(|(_, calls)| calls)
            .sum()
    };
    (sum("eval"), sum("fcall"))
}

/// The rule's user loaded the library (the servers started without it) and ran
/// every script through it: no EVAL* at all.
fn assert_the_library_ran(redis: &LocalRedis) {
    let (evals, fcalls) = script_calls(redis);
    assert_eq!(
        evals, 0,
        "the least-privileged user's scripts went as EVAL*"
    );
    assert!(fcalls > 0);
    let loads: u64 = redis
        .commandstats_all()
        .get("function|load")
        .copied()
        .unwrap_or(0);
    assert!(loads > 0, "nobody loaded the library");
}

fn assert_acl_log_empty(redis: &LocalRedis) {
    for node in &redis.nodes {
        match redis.raw(node, &["ACL", "LOG"]) {
            Value::Array(entries) if entries.is_empty() => {}
            other => panic!("ACL LOG on {} is not empty: {other:?}", node.url),
        }
    }
}

/// Subscribers of `channel` on all nodes, sharded or not (as the admin user).
fn subscribers(redis: &LocalRedis, channel: &str) -> i64 {
    let count = |reply: Value| match reply {
        Value::Array(items) => match items.as_slice() {
            [_, Value::Int(n)] => *n,
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    redis
        .nodes
        .iter()
        .map(|node| {
            count(redis.raw(node, &["PUBSUB", "NUMSUB", channel]))
                + count(redis.raw(node, &["PUBSUB", "SHARDNUMSUB", channel]))
        })
        .sum()
}

/// The command-line tool's `status` as the user: exit 0 when the lock is held, 1
/// when it is free. `flag` is `--cluster` or `--url`.
#[cfg(all(unix, feature = "cli"))]
async fn cli_status(flag: &str, urls: &[String], name: &str) -> i32 {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_redis-rwlock"))
        .env_remove("REDIS_URL")
        .env_remove("REDIS_CLUSTER_NODES")
        .arg(flag)
        .arg(urls.join(","))
        .arg("status")
        .arg(name)
        .output()
        .await
        .expect("run redis-rwlock status");
    assert!(
        out.status.code().is_some_and(|code| code <= 1),
        "status failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.status.code().unwrap_or(-1)
}

/// `status` tells a held lock from a free one as the user (then `ACL LOG` must
/// still be empty).
#[cfg(all(unix, feature = "cli"))]
async fn status_as_the_user(client: &LockClient, flag: &str, urls: &[String]) {
    let name = unique_name("acl-cli");
    let held = client.rwlock(&name).write().await.unwrap();
    assert_eq!(
        cli_status(flag, urls, &name).await,
        0,
        "held, as the CLI sees it"
    );
    held.release().await.unwrap();
    assert_eq!(
        cli_status(flag, urls, &name).await,
        1,
        "free, as the CLI sees it"
    );
}

/// Every feature as the least-privileged user.
async fn run_everything(
    redis: &LocalRedis,
    client: &LockClient,
    other: &LockClient,
    cluster: bool,
) {
    let name = unique_name("acl");
    let lock = client.rwlock(&name);

    // Reads, writes, try_*.
    let r = lock.read().await.unwrap();
    let r2 = lock.try_read().await.unwrap();
    assert!(matches!(lock.try_write().await, Err(Error::WouldBlock)));
    r.release().await.unwrap();
    r2.release().await.unwrap();

    // A reader that never releases: once its lease ends, the next script sweeps
    // its entry (HSCAN).
    let short = LockOptions::default()
        .read_lease(Duration::from_millis(300))
        .auto_renew(false);
    std::mem::forget(client.rwlock_with(&name, short).read().await.unwrap());
    lock.write().await.unwrap().release().await.unwrap();

    // Waiting with wake-ups: a reader on another client waits for the writer.
    let long = LockOptions::default().write_lease(Duration::from_secs(30));
    let writer = client
        .rwlock_with(&name, long.clone())
        .write()
        .await
        .unwrap();
    let waiter_lock = other.rwlock_with(&name, long.clone());
    let waiter = tokio::spawn(async move {
        let guard = waiter_lock.read().await.unwrap();
        let at = Instant::now();
        guard.release().await.unwrap();
        at
    });
    // The reader was refused once it subscribed (its re-check timer is about a
    // second; it retries once right after subscribing).
    let channel = format!("{}:released", lock.key().unwrap());
    let deadline = Instant::now() + Duration::from_secs(5);
    while blocking(|| subscribers(redis, &channel)) == 0 {
        assert!(Instant::now() < deadline, "the reader never subscribed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    writer.release().await.unwrap();
    let got_in = timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(
        got_in.saturating_duration_since(released) < Duration::from_millis(500),
        "the reader was not woken by the release"
    );

    // Renewal, downgrade, fencing and fenced writes to the user's own keys.
    let short = client.rwlock_with(
        &name,
        LockOptions::default().write_lease(Duration::from_secs(1)),
    );
    let guard = short.write().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(guard.is_held());
    let fence = guard.fencing_token();
    assert!(fence > 0);
    guard
        .fenced_write(FencedWrites::new().set(format!("cache:{{{name}}}"), "v1"))
        .await
        .unwrap();
    let read = guard.downgrade().await.unwrap();
    assert_eq!(lock.state().await.unwrap().readers.len(), 1);
    read.release().await.unwrap();

    // Upgradable reads: an upgrade handed over by the last reader's release.
    let upgradable = lock.upgradable_read().await.unwrap();
    let reader = lock.read().await.unwrap();
    let upgrade = tokio::spawn(upgradable.upgrade());
    wait_for(&lock, |s| s.upgrade_pending).await;
    reader.release().await.unwrap();
    let upgraded = upgrade.await.unwrap().unwrap();
    assert!(upgraded.fencing_token() > fence);
    upgraded.downgrade().await.unwrap().release().await.unwrap();

    // min_replicas (the cluster has a replica per master).
    if cluster {
        let replicated = client.rwlock_with(&name, LockOptions::default().min_replicas(1));
        replicated.write().await.unwrap().release().await.unwrap();
    }

    // state and force_release.
    let stuck = lock.write().await.unwrap();
    assert!(lock.state().await.unwrap().writer.is_some());
    assert_eq!(lock.force_release().await.unwrap(), 1);
    assert!(lock.state().await.unwrap().is_free());
    drop(stuck);
}

/// Users whose rule lacks `function|load`, or `fcall` and `fcall_ro`, on servers
/// that lost the library: every feature still works, through EVALSHA, and `ACL
/// LOG` shows nothing but the one refusal each of the two clients met before it
/// switched.
async fn without_functions_the_lock_falls_back_to_evalsha(redis: &LocalRedis) {
    for (user, missing, refused) in [
        ("nofunction", "-function|load", &["function|load"][..]),
        ("nofcall", "-fcall -fcall_ro", &["fcall", "fcall_ro"][..]),
    ] {
        blocking(|| {
            redis.function_flush_all();
            create_user(redis, user, &format!("~cache:* {missing}"));
        });
        let (evals, _) = blocking(|| script_calls(redis));
        let client = connect_as(redis, user).await;
        let other = connect_as(redis, user).await;
        run_everything(redis, &client, &other, redis.is_cluster()).await;

        let log = blocking(|| acl_log(redis));
        for (name, reason, object, _) in &log {
            assert!(
                name == user && reason == "command" && refused.contains(&object.as_str()),
                "{user}: unexpected ACL LOG entry {log:?}"
            );
        }
        let refusals: i64 = log.iter().map(|entry| entry.3).sum();
        assert_eq!(refusals, 2, "{user}: one refusal per client: {log:?}");
        let (evals_after, _) = blocking(|| script_calls(redis));
        assert!(evals_after > evals, "{user}: no EVALSHA was sent");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_least_privileged_user_runs_every_feature_on_a_cluster() {
    let redis = blocking(LocalRedis::cluster);
    blocking(|| create_user(&redis, "locker", "~cache:*"));
    let client = LockClient::cluster(urls_as(&redis, "locker"))
        .await
        .unwrap();
    let other = LockClient::cluster(urls_as(&redis, "locker"))
        .await
        .unwrap();
    run_everything(&redis, &client, &other, true).await;
    #[cfg(all(unix, feature = "cli"))]
    status_as_the_user(&client, "--cluster", &urls_as(&redis, "locker")).await;
    blocking(|| assert_acl_log_empty(&redis));
    blocking(|| assert_the_library_ran(&redis));

    without_functions_the_lock_falls_back_to_evalsha(&redis).await;

    // Without EVALSHA and FCALL: the server's refusal, named.
    blocking(|| create_user(&redis, "nosha", "-evalsha -fcall"));
    let client = LockClient::cluster(urls_as(&redis, "nosha")).await.unwrap();
    let err = client
        .rwlock(unique_name("acl-nosha"))
        .write()
        .await
        .unwrap_err();
    let Error::Redis(cause) = &err else {
        panic!("{err:?}")
    };
    let text = cause.redis_error().to_string().to_lowercase();
    assert!(
        text.contains("noperm") && text.contains("evalsha"),
        "{cause}"
    );

    // Without INFO: the version check is skipped with a warning, the lock works.
    blocking(|| create_user(&redis, "noinfo", "~cache:* -info"));
    let client = LockClient::cluster(urls_as(&redis, "noinfo"))
        .await
        .unwrap();
    let lock = client.rwlock(unique_name("acl-noinfo"));
    lock.write().await.unwrap().release().await.unwrap();

    // Without the channel: a waiter fails at once with the refusal, no polling.
    blocking(|| create_user(&redis, "nochannel", "resetchannels"));
    let holder = LockClient::cluster(urls_as(&redis, "locker"))
        .await
        .unwrap();
    let deaf = LockClient::cluster(urls_as(&redis, "nochannel"))
        .await
        .unwrap();
    let name = unique_name("acl-nochannel");
    let held = holder.rwlock(&name).write().await.unwrap();
    let started = Instant::now();
    let err = timeout(Duration::from_secs(5), deaf.rwlock(&name).read())
        .await
        .expect("the waiter hung")
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3));
    let Error::Redis(cause) = &err else {
        panic!("{err:?}")
    };
    let text = cause.redis_error().to_string().to_lowercase();
    assert!(
        text.contains("noperm") && text.contains("channel"),
        "{cause}"
    );
    held.release().await.unwrap();
    // Nothing of the refused waiter is left behind.
    assert!(holder.rwlock(&name).state().await.unwrap().is_free());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_least_privileged_user_runs_every_feature_on_one_server() {
    let redis = blocking(LocalRedis::standalone);
    blocking(|| create_user(&redis, "locker", "~cache:*"));
    let url = &urls_as(&redis, "locker")[0];
    let client = LockClient::standalone(url).await.unwrap();
    let other = LockClient::standalone(url).await.unwrap();
    run_everything(&redis, &client, &other, false).await;
    #[cfg(all(unix, feature = "cli"))]
    status_as_the_user(&client, "--url", &urls_as(&redis, "locker")).await;
    blocking(|| assert_acl_log_empty(&redis));
    blocking(|| assert_the_library_ran(&redis));

    without_functions_the_lock_falls_back_to_evalsha(&redis).await;
}

/// The README's rule for a user that only looks: the fleet view and `status`.
const VIEW_RULE: &str = "resetkeys %R~rwlock:* resetchannels -@all +fcall_ro +evalsha_ro \
    +eval_ro +scan +dbsize +info +cluster|slots +ping +hello +auth +time +hgetall +hmget";

/// The fleet view (`list_locks`, and the tool's `list` and `status`) as a user of
/// the README's read-only rule, on a cluster and on one server: it sees every lock
/// in its state, `ACL LOG` stays empty, and without `SCAN` it gets the server's
/// refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_view_needs_reads_and_scan_only() {
    use std::collections::BTreeMap;

    use redis_rwlock::{ListOptions, LockMode};

    let readme = include_str!("../README.md")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        readme.contains(&format!("ACL SETUSER viewer on >PASSWORD {VIEW_RULE}")),
        "README.md lacks the fleet view's rule tested here"
    );

    for redis in [
        blocking(LocalRedis::cluster),
        blocking(LocalRedis::standalone),
    ] {
        blocking(|| create_user(&redis, "locker", ""));
        blocking(|| {
            for node in &redis.nodes {
                let mut args = vec!["ACL", "SETUSER", "viewer", "reset", "on", ">secret"];
                args.extend(VIEW_RULE.split_whitespace());
                redis.raw(node, &args);
                let _ = redis.try_raw(node, &["ACL", "SETUSER", "viewer", "+client|setinfo"]);
                redis.raw(node, &["ACL", "LOG", "RESET"]);
            }
        });
        let locker = connect_as(&redis, "locker").await;
        // A lock on every master (each master loads the function library on its
        // first lock, as the locker may): write-held, read-held by two, free.
        let group = unique_name("acl-fleet");
        let masters = blocking(|| redis.masters().into_iter().cloned().collect::<Vec<_>>());
        let on = |what: &str, master: usize| {
            let prefix = format!("{group}-{what}");
            if redis.is_cluster() {
                blocking(|| redis.name_on_master(&prefix, &masters[master % masters.len()]))
            } else {
                prefix
            }
        };
        let (written, read, free) = (on("w", 0), on("r", 1), on("f", 2));
        let writer = locker.rwlock(&written).write().await.unwrap();
        let read_lock = locker.rwlock(&read);
        // Two holds: a second plain read of this client would share the first.
        let readers = [
            read_lock.read().await.unwrap(),
            read_lock.read_recursive().await.unwrap(),
        ];
        let long = LockOptions::default().write_lease(Duration::from_secs(60));
        let released = locker.rwlock_with(&free, long).write().await.unwrap();
        released.release().await.unwrap();

        let viewer = connect_as(&redis, "viewer").await;
        let pattern = format!("{group}-*");
        let page = viewer
            .list_locks(ListOptions::default().pattern(&pattern))
            .await
            .unwrap();
        assert!(page.is_complete());
        let seen: BTreeMap<String, (Option<LockMode>, usize)> = page
            .locks
            .iter()
            .map(|l| (l.name.clone(), (l.mode(), l.holders())))
            .collect();
        assert_eq!(
            seen,
            BTreeMap::from([
                (written.clone(), (Some(LockMode::Write), 1)),
                (read.clone(), (Some(LockMode::Read), 2)),
                (free.clone(), (None, 0)),
            ])
        );
        #[cfg(all(unix, feature = "cli"))]
        {
            let flag = if redis.is_cluster() {
                "--cluster"
            } else {
                "--url"
            };
            let urls = urls_as(&redis, "viewer");
            let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_redis-rwlock"))
                .env_remove("REDIS_URL")
                .env_remove("REDIS_CLUSTER_NODES")
                .args([flag, &urls.join(","), "list", &pattern, "--json"])
                .output()
                .await
                .expect("run redis-rwlock list");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "{stderr}");
            let view: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(view["locks"].as_array().unwrap().len(), 3, "{view}");
            status_as_the_user(&locker, flag, &urls).await;
        }
        blocking(|| assert_acl_log_empty(&redis));
        blocking(|| assert_the_library_ran(&redis));

        // Without SCAN: the server's refusal, named.
        blocking(|| {
            for node in &redis.nodes {
                redis.raw(node, &["ACL", "SETUSER", "viewer", "-scan"]);
            }
        });
        let err = viewer
            .list_locks(ListOptions::default().pattern(&pattern))
            .await
            .unwrap_err();
        let Error::Redis(cause) = &err else {
            panic!("{err:?}")
        };
        let text = cause.redis_error().to_string().to_lowercase();
        assert!(text.contains("noperm") && text.contains("scan"), "{cause}");

        writer.release().await.unwrap();
        for reader in readers {
            reader.release().await.unwrap();
        }
    }
}

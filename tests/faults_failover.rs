//! Failover: wake-ups survive a manual failover, and holds taken with
//! `min_replicas(1)` survive a master crash; the lock recovers within the cluster's
//! node timeout and no call hangs past the client's limits.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::future::Future;
use std::time::Duration;

use redis_rwlock::{Error, LockClient, LockOptions};
use tokio::time::{Instant, timeout};

use common::{LocalRedis, Node, blocking, kill9, wait_for};

/// The cluster's `cluster-node-timeout` (the launcher's default).
const NODE_TIMEOUT: Duration = Duration::from_secs(2);
/// The client's limit for one request with its retries (4 s), plus scheduling
/// slack on a loaded 2-core machine.
const CALL_LIMIT: Duration = Duration::from_secs(5);

/// Runs one lock call and fails the test if it took longer than [`CALL_LIMIT`].
async fn timed<T>(what: &str, call: impl Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let out = timeout(CALL_LIMIT * 3, call)
        .await
        .unwrap_or_else(|_| panic!("{what} hung for {:?}", CALL_LIMIT * 3));
    let took = started.elapsed();
    assert!(took <= CALL_LIMIT, "{what} took {took:?}");
    (out, took)
}

/// After `CLUSTER FAILOVER` on the replica of the lock's shard, the waiters'
/// subscription is restored: a waiter behind a long-lease holder is woken by the
/// release message (within 100 ms), not by its re-check timer (about a second with
/// such a holder). The release comes once the new master knows its new replica
/// (Redis forwards sharded messages only to the replicas it knows of).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wake_ups_still_arrive_after_a_manual_failover() {
    wake_up_trials_across_failovers(true, Duration::from_millis(100)).await;
}

/// The same, with the release right after the failover. Redis drops sharded
/// subscriptions from the old master (SUNSUBSCRIBE); the client re-subscribes
/// through its stale slot map, so the SSUBSCRIBE lands on the old master, now a
/// replica, which accepts it; the new master forwards nothing to that replica
/// until gossip tells it about its new replica (a few hundred ms). A release in
/// that window wakes no one. Known limit of redis-rs 1.8.1 (no way to route the
/// SSUBSCRIBE to the new master); see the next test for what the lock does about it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "redis-rs 1.8.1 restores the subscription through a stale slot map; a release in \
            the next few hundred ms after a failover reaches no subscriber"]
async fn a_release_right_after_a_manual_failover_wakes_the_waiter() {
    wake_up_trials_across_failovers(false, Duration::from_millis(100)).await;
}

/// Right after a failover, waiters re-check every 200 ms for two seconds after
/// their subscription was restored, so a release whose message is lost in that
/// window still hands over within a few hundred ms, not a full re-check period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_right_after_a_manual_failover_hands_over_within_the_unsettled_recheck() {
    wake_up_trials_across_failovers(false, Duration::from_millis(600)).await;
}

/// One trial per shard (a master's replicas may fail over only once per two node
/// timeouts): hold, queue a waiter on another client, fail the shard over, release,
/// and measure how soon the waiter gets the lock.
async fn wake_up_trials_across_failovers(await_gossip: bool, bound: Duration) {
    let redis = blocking(LocalRedis::cluster);
    let holders = LockClient::cluster(redis.urls()).await.unwrap();
    let waiters = LockClient::cluster(redis.urls()).await.unwrap();
    let options = LockOptions::default().write_lease(Duration::from_secs(30));
    let masters: Vec<Node> = blocking(|| redis.masters().into_iter().cloned().collect());

    for (trial, master) in (0u64..).zip(&masters) {
        let name = blocking(|| redis.name_on_master("failover-wake", master));
        let holder_lock = holders.rwlock_with(&name, options.clone());
        let waiter_lock = waiters.rwlock_with(&name, options.clone());
        let channel = format!("{}:released", holder_lock.key().unwrap());
        let replica = blocking(|| redis.replica_of(master).unwrap().clone());
        let holder = holder_lock.write().await.unwrap();
        let waiter = tokio::spawn({
            let lock = waiter_lock.clone();
            async move {
                let guard = lock.write().await.unwrap();
                let at = Instant::now();
                guard.release().await.unwrap();
                at
            }
        });
        wait_for(&holder_lock, |s| s.queued_writers.len() == 1).await;
        await_subscribers(&redis, master, &channel, "before the failover").await;

        let started = Instant::now();
        blocking(|| redis.manual_failover(&replica, Duration::from_secs(15)));
        let failover = started.elapsed();
        // Redis drops the subscription; the client restores it somewhere in the shard.
        await_subscribers(&redis, &replica, &channel, "after the failover").await;
        let restored = started.elapsed();
        if await_gossip {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !blocking(|| redis.master_knows_replica(&replica, master)) {
                assert!(
                    Instant::now() < deadline,
                    "trial {trial}: gossip never converged"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let converged = started.elapsed();
        assert!(
            !waiter.is_finished(),
            "trial {trial}: the waiter got in early"
        );
        // The hold itself survived the (graceful) failover.
        let state = holder_lock.state().await.unwrap();
        assert_eq!(
            state.fencing_token,
            holder.fencing_token(),
            "trial {trial}: {state:?}"
        );
        assert!(holder.is_held());

        if await_gossip {
            // Release at a varying point of the waiter's re-check period.
            tokio::time::sleep(Duration::from_millis(100 + 300 * trial)).await;
        }
        let released = Instant::now();
        holder.release().await.unwrap();
        let release_took = released.elapsed();
        let acquired = timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the waiter was never served")
            .unwrap();
        let gap = acquired.saturating_duration_since(released);
        println!(
            "trial {trial}: failover {failover:?}, subscription restored after {restored:?}, \
             new master knew its replica after {converged:?}, waiter woken {gap:?} after the release (which took {release_took:?})"
        );
        assert!(
            gap < bound,
            "trial {trial}: woken {gap:?} after the release (bound {bound:?})"
        );
    }
}

/// Polls `PUBSUB SHARDNUMSUB` until someone listens on `channel` on `node` or
/// on one of its replicas (Redis 7 delivers sharded messages to subscribers on
/// every node of the shard, and accepts `SSUBSCRIBE` on replicas).
async fn await_subscribers(redis: &LocalRedis, node: &Node, channel: &str, when: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let counts: Vec<(u16, u64)> = blocking(|| {
            let mut shard = vec![node.clone()];
            shard.extend(redis.replica_of(node).cloned());
            shard
                .iter()
                .map(|n| (n.port, redis.shard_subscribers(n, channel)))
                .collect()
        });
        if counts.iter().any(|&(_, n)| n > 0) {
            println!("subscribers {when}: {counts:?} (master first)");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "nobody subscribed to {channel} in the shard of {} {when}",
            node.url
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// kill -9 of the master that owns a held lock, once per original master.
///
/// With `min_replicas(1)` the hold is on the replica before `write()` returns, so
/// it survives the failover: the promoted replica shows the holder, others are
/// refused, the guard renews there and releases. Without it the hold usually
/// survives too (replication is fast on loopback) but nothing promises it: the
/// outcome is printed. Either way the guard never believes in a hold that is gone,
/// new acquisitions work within the node timeout plus a few seconds, and no call
/// takes longer than the client's limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_crash_keeps_replicated_holds_and_the_lock_recovers() {
    let redis = blocking(LocalRedis::cluster);
    let client = LockClient::cluster(redis.urls()).await.unwrap();
    let others = LockClient::cluster(redis.urls()).await.unwrap();
    let replicated = LockOptions::default()
        .min_replicas(1)
        .replica_timeout(Duration::from_secs(1));
    let originals: Vec<Node> = redis
        .nodes
        .iter()
        .filter(|n| n.role == "master")
        .cloned()
        .collect();
    let mut unreplicated_lost = 0;

    for (trial, master) in originals.iter().enumerate() {
        let replica = blocking(|| redis.replica_of(master).unwrap().clone());
        let (name_a, name_b, name_c) = blocking(|| {
            (
                redis.name_on_master("replicated", master),
                redis.name_on_master("unreplicated", master),
                redis.name_on_master("probe", master),
            )
        });
        let lock_a = client.rwlock_with(&name_a, replicated.clone());
        let lock_b = client.rwlock(&name_b);
        let probe = others.rwlock(&name_c);
        let guard_a = lock_a.write().await.unwrap();
        let until_a = lock_a.state().await.unwrap().writer.unwrap().until;
        let guard_b = lock_b.write().await.unwrap();
        // Crash right after the unreplicated acquire returned.
        let killed = Instant::now();
        kill9(master.pid);

        // New acquisitions on the shard work again soon; no attempt hangs.
        let (mut attempts, mut errors, mut longest) = (0, Vec::new(), Duration::ZERO);
        let recovered = loop {
            attempts += 1;
            let (result, took) = timed("try_write during the failover", probe.try_write()).await;
            longest = longest.max(took);
            match result {
                Ok(guard) => {
                    let recovered = killed.elapsed();
                    timed("release after the failover", guard.release())
                        .await
                        .0
                        .unwrap();
                    break recovered;
                }
                Err(Error::Redis(err)) => errors.push(err.to_string()),
                Err(other) => panic!("trial {trial}: unexpected {other:?}"),
            }
            assert!(
                killed.elapsed() < NODE_TIMEOUT + Duration::from_secs(8),
                "trial {trial}: no acquisition {:?} after the crash; errors: {errors:?}",
                killed.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        blocking(|| redis.wait_cluster_ok(Duration::from_secs(10)));
        let owner = blocking(|| redis.master_for_key(lock_a.key().unwrap()).clone());
        assert_eq!(owner.port, replica.port, "trial {trial}: unexpected owner");
        println!(
            "trial {trial}: acquisitions work again {recovered:?} after the crash \
             ({attempts} attempts, longest {longest:?}); errors meanwhile: {:?}",
            summarize(&errors)
        );
        assert!(
            recovered <= NODE_TIMEOUT + Duration::from_secs(5),
            "trial {trial}: recovery took {recovered:?}"
        );

        // min_replicas(1): the promoted replica has the hold.
        let (state, _) = timed("state", lock_a.state()).await;
        let state = state.unwrap();
        assert!(
            state.writer.is_some() && state.fencing_token == guard_a.fencing_token(),
            "trial {trial}: the replicated hold did not survive: {state:?}"
        );
        let on_replica =
            blocking(|| redis.raw(&replica, &["HGET", lock_a.key().unwrap(), "fence"]));
        let on_replica: u64 = redis::from_redis_value(on_replica).unwrap();
        assert_eq!(on_replica, guard_a.fencing_token(), "trial {trial}");
        let intruder = others.rwlock(&name_a);
        assert!(matches!(
            timed("try_write", intruder.try_write()).await.0,
            Err(Error::WouldBlock)
        ));
        assert!(matches!(
            timed("try_read", intruder.try_read()).await.0,
            Err(Error::WouldBlock)
        ));
        // The guard renews on the promoted replica (its deadline moves on) and
        // still believes it holds.
        let renew_deadline = Instant::now() + Duration::from_secs(8);
        loop {
            let state = timed("state", lock_a.state()).await.0.unwrap();
            if state.writer.as_ref().is_some_and(|w| w.until > until_a) {
                break;
            }
            assert!(
                Instant::now() < renew_deadline,
                "trial {trial}: never renewed on the promoted replica: {state:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(guard_a.is_held(), "trial {trial}");
        timed("release", guard_a.release()).await.0.unwrap();
        assert!(timed("state", lock_a.state()).await.0.unwrap().is_free());

        // Without min_replicas: record what happened, and check the guard agrees.
        let state_b = timed("state", lock_b.state()).await.0.unwrap();
        let survived = state_b.fencing_token == guard_b.fencing_token() && state_b.writer.is_some();
        if survived {
            println!("trial {trial}: without min_replicas the hold survived the crash");
            assert!(guard_b.is_held(), "trial {trial}");
            timed("release", guard_b.release()).await.0.unwrap();
        } else {
            unreplicated_lost += 1;
            println!(
                "trial {trial}: without min_replicas the hold was LOST in the crash: {state_b:?}"
            );
            // The guard must find out at its next renewal.
            timeout(Duration::from_secs(10), guard_b.lost())
                .await
                .expect("the guard of a lost hold never reported it");
            assert!(!guard_b.is_held());
            let released = timed("release", guard_b.release()).await.0;
            assert!(
                matches!(released, Err(Error::LeaseLost { .. })),
                "{released:?}"
            );
        }
        timed("write", lock_b.write())
            .await
            .0
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    println!(
        "without min_replicas, {unreplicated_lost} of {} holds were lost",
        originals.len()
    );
}

/// Error messages with how often each occurred.
fn summarize(errors: &[String]) -> Vec<(String, usize)> {
    let mut seen: Vec<(String, usize)> = Vec::new();
    for err in errors {
        match seen.iter_mut().find(|(e, _)| e == err) {
            Some((_, n)) => *n += 1,
            None => seen.push((err.clone(), 1)),
        }
    }
    seen
}

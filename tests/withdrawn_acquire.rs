//! A withdrawn acquire: the caller gave up on `write()` (its future dropped, or the
//! request failed) and the token was released in the background. Whatever the
//! network and the driver still deliver of that acquire afterwards, the token must
//! never be granted again: nobody would renew or release that hold, and it would
//! keep everyone else out for a whole lease.
//!
//! Relays in front of the servers (tests/common/proxy.rs) lose the acquire's reply,
//! stall the driver's reconnection, or hold a request to deliver it after the
//! release; `MONITOR` on the lock's master (tests/common/monitor.rs) shows the order
//! in which the server ran the token's scripts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redis_rwlock::{Error, LockClient, LockOptions, RwLock, RwLockWriteGuard};
use tokio::task::JoinHandle;

use common::{LocalRedis, Monitor, Proxied, Proxy, ScriptCall, blocking, unique_name};

/// The end of the write-acquire function's name in an `FCALL` (see
/// tests/lost_replies.rs).
const ACQUIRE_WRITE: &str = "_acquire_write\r\n";

/// The write lease: long, so a hold nobody owns is still there at every check.
const WRITE_LEASE: Duration = Duration::from_secs(30);

/// How long the tests wait for an event (a lost reply, a held request, a script
/// run on the server).
const LIMIT: Duration = Duration::from_secs(10);

/// How long a driver may still send a request after its caller gave up: the
/// client's overall request limit (4 s), and a second more.
const DRIVER_LIMITS: Duration = Duration::from_secs(5);

/// How many resends a relay holds at most: the driver's retries (3).
const RESENDS: u64 = 3;

/// What every test starts from: two clients of `proxied`, the lock as each sees it
/// (with a [`WRITE_LEASE`] write lease), the relay in front of its master, `MONITOR`
/// on that master, and how many of the lock's scripts the warm-up ran (the test's
/// come after).
struct Setup<'a> {
    lock: RwLock,
    other: RwLock,
    key: String,
    relay: &'a Proxy,
    monitor: Monitor,
    skip: usize,
}

impl<'a> Setup<'a> {
    async fn new(proxied: &'a Proxied, cluster: bool, name: &str) -> Setup<'a> {
        let connect = || async {
            if cluster {
                LockClient::cluster(proxied.urls()).await.unwrap()
            } else {
                LockClient::standalone(proxied.url()).await.unwrap()
            }
        };
        let name = unique_name(name);
        let options = LockOptions::default().write_lease(WRITE_LEASE);
        let lock = connect().await.rwlock_with(&name, options.clone());
        let other = connect().await.rwlock_with(&name, options);
        let key = lock.key().unwrap().to_owned();
        let relay = blocking(|| proxied.proxy_for_key(&key));
        let monitor = blocking(|| Monitor::start(proxied.master_for_key(&key).port));
        let mut setup = Setup {
            lock,
            other,
            key,
            relay,
            monitor,
            skip: 0,
        };
        setup.skip = setup.warm_up().await;
        setup
    }

    /// Takes and releases the lock once from `other`: the server then has the
    /// crate's function library (a first call loads it), so every script later in
    /// the test runs the first time it reaches the server. Returns how many of the
    /// lock's scripts the server has run so far.
    async fn warm_up(&self) -> usize {
        self.other
            .try_write()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        let release = |calls: &[ScriptCall]| calls.iter().any(|c| c.operation == "release");
        self.monitor
            .until_scripts(&self.key, release, LIMIT)
            .await
            .expect("the warm-up's release never reached the server")
            .len()
    }

    /// The lock's scripts the test made the server run, in order.
    fn calls(&self) -> Vec<ScriptCall> {
        let mut calls = self.monitor.script_calls(&self.key);
        calls.drain(..self.skip.min(calls.len()));
        calls
    }

    /// Starts `write()` on a task of its own (so the test can drop it), whose reply
    /// the relay loses, and holds the next `then_hold` acquires after it (the
    /// driver's resends); returns once the server has granted it.
    async fn write_losing_the_reply(
        &self,
        then_hold: u64,
    ) -> JoinHandle<Result<RwLockWriteGuard, Error>> {
        self.relay.drop_next_reply(ACQUIRE_WRITE);
        self.relay.and_then_hold(ACQUIRE_WRITE, then_hold);
        let acquire = self.spawn_write();
        assert!(
            self.relay.until_dropped(1, LIMIT).await,
            "the relay never lost the acquire's reply"
        );
        self.assert_first_acquire_granted().await;
        acquire
    }

    fn spawn_write(&self) -> JoinHandle<Result<RwLockWriteGuard, Error>> {
        let lock = self.lock.clone();
        tokio::spawn(async move { lock.write().await })
    }

    /// Waits until the server has run the test's first `operation` script; returns
    /// it, or `None` if [`LIMIT`] passed first.
    async fn until_first(&self, operation: &str) -> Option<ScriptCall> {
        let first = |calls: &[ScriptCall]| {
            calls
                .iter()
                .skip(self.skip)
                .find(|c| c.operation == operation)
                .cloned()
        };
        self.monitor
            .until_scripts(&self.key, |calls| first(calls).is_some(), LIMIT)
            .await
            .and_then(|calls| first(&calls))
    }

    /// The test's first acquire was granted: the lock's writer is its token.
    async fn assert_first_acquire_granted(&self) {
        let first = self.until_first("acquire_write").await;
        let token = first.as_ref().and_then(|c| c.token.clone());
        let writer = self.other.state().await.unwrap().writer;
        assert!(
            token.is_some() && writer.as_ref().and_then(|w| w.token.clone()) == token,
            "the acquire whose reply was lost was not granted: first acquire {first:?}, \
             writer {writer:?}"
        );
    }

    /// Waits until the server has run the release of the abandoned acquire (the
    /// test's first release); returns its token.
    async fn withdrawal(&self) -> String {
        let Some(release) = self.until_first("release").await else {
            panic!(
                "the background release of the abandoned acquire never reached the server \
                 within {LIMIT:?}: the server ran {:?}; the lock: {:?}",
                self.calls(),
                self.other.state().await
            );
        };
        release.token.expect("a release names its token")
    }

    /// The check: `token` was withdrawn, so the lock holds nothing of it (no hold,
    /// no place in line), and another client's `try_write` gets in at once.
    async fn assert_never_granted_again(&self, token: &str) {
        let calls = self.calls();
        let ran = by_token(&calls, token);
        let state = self.other.state().await.unwrap();
        let ours = |h: &redis_rwlock::Holder| h.token.as_deref() == Some(token);
        let held = state.writer.iter().chain(&state.readers).any(ours);
        let queued = state.queued_writers.iter().any(ours);
        assert!(
            !held && !queued,
            "a withdrawn token {} the lock: the server ran its scripts in the order {ran:?} \
             (an acquire after the release grants it again); writer {:?}, queued writers \
             {:?}, server time {}: a hold nobody owns, which nobody renews or releases, and \
             every other client is refused until its lease ends ({WRITE_LEASE:?} after the \
             grant)",
            if held { "holds" } else { "is queued for" },
            state.writer,
            state.queued_writers,
            state.server_time,
        );
        match self.other.try_write().await {
            Ok(guard) => guard.release().await.unwrap(),
            Err(err) => panic!(
                "another client's try_write after the withdrawal: {err:?} (the token's \
                 scripts on the server: {ran:?}; the lock: {state:?})"
            ),
        }
    }
}

/// Drops the acquire (aborts its task), or finds it failed already: either way
/// its token is released in the background.
async fn abandon(acquire: JoinHandle<Result<RwLockWriteGuard, Error>>) {
    acquire.abort();
    match acquire.await {
        Err(err) if err.is_cancelled() => {}
        Ok(Err(err)) => println!("the acquire failed before it was dropped: {err}"),
        Ok(Ok(_)) => panic!("the acquire was granted: its reply was not lost"),
        Err(err) => panic!("the acquire's task failed: {err}"),
    }
}

/// The operations of `token` the server ran, in order.
fn by_token<'a>(calls: &'a [ScriptCall], token: &str) -> Vec<&'a str> {
    calls
        .iter()
        .filter(|c| c.by(token))
        .map(|c| c.operation.as_str())
        .collect()
}

/// How many acquires of `token` the server ran after its first release.
fn acquires_after_withdrawal(calls: &[ScriptCall], token: &str) -> usize {
    let ops = by_token(calls, token);
    match ops.iter().position(|op| *op == "release") {
        Some(at) => ops[at..]
            .iter()
            .filter(|op| op.starts_with("acquire"))
            .count(),
        None => 0,
    }
}

/// Cluster: the reply to the acquire is lost and its connection reset, and the
/// driver cannot reconnect to the lock's master (every relay stalls new
/// connections): its resend waits for a connection while the caller drops the
/// acquire. Then connections go through again: the background release runs, and
/// the driver, whose caller is gone, must never send the acquire again. (redis-rs
/// 1.8 checks before each send, in `Request::poll` and `dispatch_pending`, that the
/// caller's receiver is still open, and drops the request if not; a send it made
/// while the caller still waited is queued on the node's connection ahead of the
/// release.) The first run of the acquire, granted, is what the release removes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_dropped_while_its_resend_waits_for_a_connection_is_never_resent() {
    let proxied = blocking(|| LocalRedis::cluster().behind_proxies());
    let t = Setup::new(&proxied, true, "withdrawn-reconnecting").await;
    for proxy in &proxied.proxies {
        proxy.stall_connections();
    }
    let acquire = t.write_losing_the_reply(0).await;
    assert!(
        t.relay.until_stalled(1, LIMIT).await,
        "the driver never reconnected to the lock's master after the reset"
    );
    abandon(acquire).await;
    for proxy in &proxied.proxies {
        proxy.resume_connections();
    }
    let token = t.withdrawal().await;

    // The driver sends nothing of a dropped request later than its limits.
    let late = t
        .monitor
        .until_scripts(
            &t.key,
            |calls| acquires_after_withdrawal(calls, &token) > 0,
            DRIVER_LIMITS,
        )
        .await;
    if let Some(calls) = late {
        panic!(
            "the driver sent the dropped acquire again after its withdrawal: the token's \
             scripts on the server: {:?}",
            by_token(&calls, &token)
        );
    }
    println!(
        "the token's scripts on the server: {:?}",
        by_token(&t.calls(), &token)
    );
    t.assert_never_granted_again(&token).await;
}

/// The acquire on `proxied` (a cluster, or one server) loses its first `lost`
/// replies (the relay resets the connection after the server answered), and its
/// next request, a resend after a lost reply or else the first send, is held: the
/// relay resets the client's connection at once and keeps the request. The caller
/// drops the acquire, its token is released in the background, and only then does
/// the held request reach the server (a TCP-terminating middlebox still delivering
/// what it read before the client's side of the connection broke). Checks that
/// the token is not granted again.
async fn delivered_after_the_withdrawal(proxied: &Proxied, cluster: bool, lost: bool) {
    let t = Setup::new(proxied, cluster, "withdrawn-late").await;
    let acquire = if lost {
        t.write_losing_the_reply(RESENDS).await
    } else {
        t.relay.hold_requests(ACQUIRE_WRITE, RESENDS);
        t.spawn_write()
    };
    assert!(
        t.relay.until_held(1, LIMIT).await,
        "the relay never held the acquire (after a lost reply: the driver's resend)"
    );
    abandon(acquire).await;
    let token = t.withdrawal().await;
    t.relay.disarm();
    t.relay.deliver_held();
    let held = t.relay.held();
    assert!(
        t.relay.until_delivered(held, LIMIT).await,
        "the server never answered the {held} held requests"
    );
    let calls = t.calls();
    println!(
        "{} replies lost, {held} requests held; the token's scripts on the server: {:?}",
        t.relay.dropped(),
        by_token(&calls, &token)
    );
    assert!(
        acquires_after_withdrawal(&calls, &token) > 0,
        "no acquire reached the server after the withdrawal: the test missed its case \
         (the token's scripts: {:?})",
        by_token(&calls, &token)
    );
    t.assert_never_granted_again(&token).await;
}

/// Cluster: the reply to the acquire is lost and the connection reset (the server
/// granted it); the driver's resend is held on its way while the caller drops the
/// acquire; the background release removes the grant; then the resend reaches the
/// server, and must not grant the withdrawn token again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a known gap: the scripts do not refuse a withdrawn token yet, so a request \
            a middlebox delivers after the withdrawal grants it for a lease (redis-rs \
            itself never sends a dropped request again; see the first test)"]
async fn a_resend_delivered_after_the_withdrawal_never_grants_the_withdrawn_token() {
    let proxied = blocking(|| LocalRedis::cluster().behind_proxies());
    delivered_after_the_withdrawal(&proxied, true, true).await;
}

/// One server (its driver never resends): the acquire itself is held on its way
/// and its connection reset, so `write()` fails and the token is released in the
/// background; then the acquire reaches the server, and must not grant the
/// withdrawn token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a known gap: the scripts do not refuse a withdrawn token yet, so a request \
            a middlebox delivers after the withdrawal grants it for a lease (redis-rs \
            itself never sends a dropped request again; see the first test)"]
async fn an_acquire_delivered_after_the_withdrawal_never_grants_the_withdrawn_token() {
    let proxied = blocking(|| LocalRedis::standalone().behind_proxies());
    delivered_after_the_withdrawal(&proxied, false, false).await;
}

/// One server: the acquire's reply is lost (the server granted it), and the caller
/// drops the acquire before the client has seen the connection fail (the relay
/// resets it only then). The background release goes out on that connection and
/// is lost with it: the connection manager reconnects but never resends, so the
/// withdrawal must be sent again, or the grant stays, owned by nobody, for a whole
/// lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawal_lost_with_the_broken_connection_is_sent_again() {
    let proxied = blocking(|| LocalRedis::standalone().behind_proxies());
    let t = Setup::new(&proxied, false, "withdrawn-reset").await;
    t.relay.delay_resets();
    let acquire = t.write_losing_the_reply(0).await;
    abandon(acquire).await;
    t.relay.allow_resets();
    let token = t.withdrawal().await;
    println!(
        "the token's scripts on the server: {:?}",
        by_token(&t.calls(), &token)
    );
    t.assert_never_granted_again(&token).await;
}

//! A loopback TCP relay in front of one Redis node that can lose a reply on command:
//! armed with a needle (bytes of a request, e.g. `_acquire_write\r\n`, the end of
//! the function name in an `FCALL`), it forwards the next request that contains the
//! needle, waits until the server has answered it, swallows the answer and resets
//! the client's connection (TCP RST). The client sees a lost reply followed by a
//! reset, as after a network fault right after the server ran the command; its
//! driver then reconnects (through the relay again) and may resend.
//!
//! * [`Proxy`]: one relay; [`Proxy::drop_replies`] arms it for N requests in a row
//!   (a resend is lost too), [`Proxy::dropped`] counts what it lost.
//! * [`Proxy::hold_requests`] (or [`Proxy::and_then_hold`], after lost replies):
//!   the relay resets the client's connection as soon as the request arrives, and
//!   keeps the request to forward it later ([`Proxy::deliver_held`]) on its own
//!   connection to the node, as a TCP-terminating middlebox whose client side broke
//!   may: the server runs the request after the client has given it up.
//! * [`Proxy::stall_connections`]: new connections are accepted but relay nothing
//!   until [`Proxy::resume_connections`] (the client's reconnects hang);
//!   [`Proxy::delay_resets`]: a connection whose reply was lost is reset only on
//!   [`Proxy::allow_resets`] (the client has not seen the fault yet meanwhile).
//! * [`Proxied`] ([`LocalRedis::behind_proxies`]): a relay in front of every node
//!   of a private cluster or standalone server. A cluster client learns the nodes'
//!   addresses from `CLUSTER SLOTS` (and `MOVED`), so every node announces its
//!   relay's port (`cluster-announce-port`); the cluster bus keeps the real ports.
//!   Clients given [`Proxied::urls`] then talk through the relays only:
//!   [`Proxied::assert_all_traffic_proxied`] checks that with `CLIENT LIST`.
//!   The nodes' own view (`CLUSTER NODES`) then names the relays' ports, so use
//!   [`Proxied::master_for_key`] rather than the [`LocalRedis`] helpers that map a
//!   port of that view to a node.
//!
//! * [`Proxy::sever`]: the relay closes every connection and refuses new ones, for
//!   good: to the server, the client's process died.
//! * [`Proxy::silence_subscriptions`]: a connection on which the client subscribed
//!   (it sent `SUBSCRIBE`, `SSUBSCRIBE` or `PSUBSCRIBE`, before or after) stays
//!   open, but everything the server sends on it is swallowed: no message, no reply,
//!   no reset, what a NAT or firewall does to an idle pub/sub flow it forgot. What
//!   the client sends still reaches the server, and its other connections (its
//!   commands: renewals, acquires) go on as before. [`Proxy::silenced`] counts what
//!   was swallowed, [`Proxy::subscribed`] the subscribed connections;
//!   [`Proxy::unsilence`] resets the connections that lost something (their
//!   streams have a gap) and lets the others talk again.
//!
//! Each relay runs on a runtime of its own (one worker thread), so it works under any
//! test runtime, also one blocked in harness code; dropping the [`Proxy`] stops it
//! and closes every relayed connection. `PROXY_DEBUG=1` prints what each lost reply
//! counted.
//!
//! To know when the server has answered, the relay counts complete RESP frames in
//! both directions (requests are arrays of bulk strings; replies are RESP2/RESP3
//! values, pushes not counted): the lost reply is the one that brings the replies up
//! to the requests sent so far. Should a stream not parse, it falls back to waiting
//! for the server's first bytes and then a short quiet spell.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::inspect::{raw_command, value_to_string};
use super::{LocalRedis, Node};

/// How long a relay waits for the server to answer a request whose reply it is to
/// lose before it resets the connection anyway.
const ANSWER_LIMIT: Duration = Duration::from_secs(5);

/// Without parseable streams: how long the server must stay quiet after its first
/// bytes before the relay takes the reply as complete.
const QUIET: Duration = Duration::from_millis(100);

/// The longest needle (the relay keeps that much of a client's stream, so a needle
/// split across two reads is still found).
const MAX_NEEDLE: usize = 256;

/// How long [`Proxy::sever`] waits for the relay's tasks to stop.
const STOP_LIMIT: Duration = Duration::from_secs(2);

/// How long [`LocalRedis::behind_proxies`] waits for every node to announce the
/// relays' ports.
const ANNOUNCE_LIMIT: Duration = Duration::from_secs(30);

/// One relay: listens on 127.0.0.1 at a free port and forwards each accepted
/// connection to the node at `127.0.0.1:<upstream port>`.
pub struct Proxy {
    port: u16,
    upstream: u16,
    shared: Arc<Shared>,
    /// `None` once severed.
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
}

/// What the relay's connections share with the test.
struct Shared {
    /// What to do to the next requests that hold a needle, first arm first.
    arm: Mutex<VecDeque<Arm>>,
    /// Replies lost so far (each with its connection reset).
    dropped: watch::Sender<u64>,
    /// Requests held so far (each with its client's connection reset).
    held: watch::Sender<u64>,
    /// True once the test lets the held requests through ([`Proxy::deliver_held`]).
    deliver: watch::Sender<bool>,
    /// Held connections whose requests reached the server and were answered.
    delivered: watch::Sender<u64>,
    /// True while new connections are stalled ([`Proxy::stall_connections`]).
    stall: watch::Sender<bool>,
    /// Connections that were accepted while stalled.
    stalled: watch::Sender<u64>,
    /// False while a connection whose reply was lost waits to be reset
    /// ([`Proxy::delay_resets`]).
    resets: watch::Sender<bool>,
    /// Client connections accepted so far.
    accepted: AtomicU64,
    /// Local ports of the relay's live connections to the node (what the node sees
    /// as its clients' addresses).
    upstream_ports: Mutex<HashSet<u16>>,
    /// True while subscribed connections are silenced
    /// ([`Proxy::silence_subscriptions`]).
    silence: watch::Sender<bool>,
    /// Reads of a server's stream swallowed on silenced connections so far.
    silenced: watch::Sender<u64>,
    /// Connections on which the client subscribed, so far.
    subscribed: watch::Sender<u64>,
}

/// `action` on the next `remaining` requests that contain `needle`.
struct Arm {
    needle: Vec<u8>,
    remaining: u64,
    action: Action,
}

/// What the relay does to a request that holds its needle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    /// Forwards it, swallows the server's answer, resets the client's connection.
    Lose,
    /// Resets the client's connection at once and forwards the request when the
    /// test says so.
    Hold,
}

impl Shared {
    /// The first arm's action (and one request fewer for it) when its needle ends
    /// within the last `new` bytes of `window` (the client's stream so far, or its
    /// end): a needle seen before is never taken for a new one.
    fn take_arm(&self, window: &[u8], new: usize) -> Option<Action> {
        let mut arms = self.arm.lock().unwrap();
        let current = arms.front_mut()?;
        let from = window.len().saturating_sub(new + current.needle.len() - 1);
        if !contains(&window[from..], &current.needle) {
            return None;
        }
        let action = current.action;
        current.remaining -= 1;
        if current.remaining == 0 {
            arms.pop_front();
        }
        Some(action)
    }

    /// Waits until `counter` reaches `n`; false if `limit` passed first.
    async fn until(counter: &watch::Sender<u64>, n: u64, limit: Duration) -> bool {
        let mut count = counter.subscribe();
        tokio::time::timeout(limit, count.wait_for(|&count| count >= n))
            .await
            .is_ok_and(|waited| waited.is_ok())
    }
}

impl Proxy {
    /// Starts a relay to the node at `127.0.0.1:<upstream>`.
    pub fn start(upstream: u16) -> Proxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a relay port");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let port = listener.local_addr().expect("the relay's address").port();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(format!("proxy-{port}"))
            .enable_all()
            .build()
            .expect("the relay's runtime");
        let shared = Arc::new(Shared {
            arm: Mutex::new(VecDeque::new()),
            dropped: watch::channel(0).0,
            held: watch::channel(0).0,
            deliver: watch::channel(false).0,
            delivered: watch::channel(0).0,
            stall: watch::channel(false).0,
            stalled: watch::channel(0).0,
            resets: watch::channel(true).0,
            accepted: AtomicU64::new(0),
            upstream_ports: Mutex::new(HashSet::new()),
            silence: watch::channel(false).0,
            silenced: watch::channel(0).0,
            subscribed: watch::channel(0).0,
        });
        let listener = {
            let _entered = runtime.enter();
            TcpListener::from_std(listener).expect("a tokio listener")
        };
        let accepting = shared.clone();
        runtime.spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    // Out of file descriptors, say: try again a little later.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                accepting.accepted.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(relay(client, upstream, accepting.clone()));
            }
        });
        Proxy {
            port,
            upstream,
            shared,
            runtime: Mutex::new(Some(runtime)),
        }
    }

    /// The relay's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<relay port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The node's (real) port.
    pub fn upstream_port(&self) -> u16 {
        self.upstream
    }

    /// Loses the reply to the next request that contains `needle` and resets its
    /// connection. Replaces whatever was armed before.
    pub fn drop_next_reply(&self, needle: impl AsRef<[u8]>) {
        self.drop_replies(needle, 1);
    }

    /// Loses the replies to the next `n` requests that contain `needle`, one after
    /// the other (each time resetting the connection it came on): a driver's resends
    /// are lost too. Replaces whatever was armed before.
    pub fn drop_replies(&self, needle: impl AsRef<[u8]>, n: u64) {
        self.disarm();
        self.arm(needle, n, Action::Lose);
    }

    /// Holds the next `n` requests that contain `needle`: resets the client's
    /// connection as each arrives and forwards it (on the relay's own connection to
    /// the node, still open) only once [`Proxy::deliver_held`] is called. Replaces
    /// whatever was armed before.
    pub fn hold_requests(&self, needle: impl AsRef<[u8]>, n: u64) {
        self.disarm();
        self.arm(needle, n, Action::Hold);
    }

    /// Once what is armed now is used up, holds the next `n` requests that contain
    /// `needle` as [`Proxy::hold_requests`] does: e.g. after a lost reply, the
    /// driver's resend.
    pub fn and_then_hold(&self, needle: impl AsRef<[u8]>, n: u64) {
        self.arm(needle, n, Action::Hold);
    }

    fn arm(&self, needle: impl AsRef<[u8]>, n: u64, action: Action) {
        let needle = needle.as_ref().to_vec();
        assert!(
            (1..=MAX_NEEDLE).contains(&needle.len()),
            "a needle has 1 to {MAX_NEEDLE} bytes"
        );
        if n > 0 {
            self.shared.arm.lock().unwrap().push_back(Arm {
                needle,
                remaining: n,
                action,
            });
        }
    }

    /// Stops losing replies and holding requests; returns how many of the armed
    /// ones were left unused.
    pub fn disarm(&self) -> u64 {
        let mut arms = self.shared.arm.lock().unwrap();
        arms.drain(..).map(|arm| arm.remaining).sum()
    }

    /// How many replies are still to be lost or requests to be held.
    pub fn armed(&self) -> u64 {
        let arms = self.shared.arm.lock().unwrap();
        arms.iter().map(|arm| arm.remaining).sum()
    }

    /// How many replies this relay has lost so far (each followed by a reset).
    pub fn dropped(&self) -> u64 {
        *self.shared.dropped.borrow()
    }

    /// Waits until this relay has lost `n` replies in all; false if `limit` passed
    /// first.
    pub async fn until_dropped(&self, n: u64, limit: Duration) -> bool {
        Shared::until(&self.shared.dropped, n, limit).await
    }

    /// How many requests this relay has held so far (each client's connection
    /// reset as it came).
    pub fn held(&self) -> u64 {
        *self.shared.held.borrow()
    }

    /// Waits until this relay has held `n` requests in all; false if `limit` passed
    /// first.
    pub async fn until_held(&self, n: u64, limit: Duration) -> bool {
        Shared::until(&self.shared.held, n, limit).await
    }

    /// Forwards the held requests to the node, and any held from now on as soon as
    /// they come (their clients' connections are still reset).
    pub fn deliver_held(&self) {
        self.shared.deliver.send_replace(true);
    }

    /// Waits until the server has answered the requests of `n` held connections;
    /// false if `limit` passed first.
    pub async fn until_delivered(&self, n: u64, limit: Duration) -> bool {
        Shared::until(&self.shared.delivered, n, limit).await
    }

    /// New connections are accepted but relay nothing (not even a connection to the
    /// node) until [`Proxy::resume_connections`]; connections relayed already go on.
    pub fn stall_connections(&self) {
        self.shared.stall.send_replace(true);
    }

    /// Lets the stalled connections, and new ones, through.
    pub fn resume_connections(&self) {
        self.shared.stall.send_replace(false);
    }

    /// A connection whose reply is lost is not reset at once: it stays open, relaying
    /// nothing more (what the client sends meanwhile goes no further), until
    /// [`Proxy::allow_resets`]. The lost reply is counted as soon as it is lost.
    pub fn delay_resets(&self) {
        self.shared.resets.send_replace(false);
    }

    /// Resets the connections whose replies were lost, now and from now on.
    pub fn allow_resets(&self) {
        self.shared.resets.send_replace(true);
    }

    /// Waits until `n` connections in all were accepted while stalled; false if
    /// `limit` passed first.
    pub async fn until_stalled(&self, n: u64, limit: Duration) -> bool {
        Shared::until(&self.shared.stalled, n, limit).await
    }

    /// Client connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared.accepted.load(Ordering::Relaxed)
    }

    /// The local ports of the relay's live connections to its node: the addresses
    /// the node's `CLIENT LIST` shows for the relayed clients.
    pub fn upstream_ports(&self) -> HashSet<u16> {
        self.shared.upstream_ports.lock().unwrap().clone()
    }

    /// Silences every connection on which the client subscribed (already, or from
    /// now on): it stays open, what the client sends still reaches the server, but
    /// everything the server sends on it (messages, replies, pushes) is swallowed,
    /// with no reset. On a connection that subscribes from now on, the reply to the
    /// subscription is swallowed too. The client's other connections are untouched.
    pub fn silence_subscriptions(&self) {
        self.shared.silence.send_replace(true);
    }

    /// Ends [`Proxy::silence_subscriptions`]: a silenced connection that lost
    /// something is reset (its stream has a gap), the others talk again.
    pub fn unsilence(&self) {
        self.shared.silence.send_replace(false);
    }

    /// How many reads of the server's stream were swallowed on silenced
    /// connections so far (a message or a reply each, or a few together).
    pub fn silenced(&self) -> u64 {
        *self.shared.silenced.borrow()
    }

    /// Waits until `n` reads in all were swallowed on silenced connections; false if
    /// `limit` passed first.
    pub async fn until_silenced(&self, n: u64, limit: Duration) -> bool {
        Shared::until(&self.shared.silenced, n, limit).await
    }

    /// How many relayed connections have subscribed so far.
    pub fn subscribed(&self) -> u64 {
        *self.shared.subscribed.borrow()
    }

    /// Waits until `n` relayed connections in all have subscribed; false if `limit`
    /// passed first.
    pub async fn until_subscribed(&self, n: u64, limit: Duration) -> bool {
        Shared::until(&self.shared.subscribed, n, limit).await
    }

    /// Cuts the relay off for good, as a crash of the client's host would: every
    /// relayed connection closes and the port refuses new ones, so nothing the
    /// client sends from now on reaches the server.
    pub fn sever(&self) {
        // Cancels the accept loop and every relay task, whose sockets close; waits
        // (on a thread of its own: a runtime may not be shut down from inside
        // another) until they are gone.
        if let Some(runtime) = self
            .runtime
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            let stopping = std::thread::spawn(move || runtime.shutdown_timeout(STOP_LIMIT));
            let _ = stopping.join();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.sever();
    }
}

/// Relays one client connection until either side closes, or until it has lost a
/// reply (then it resets the client's connection).
async fn relay(mut client: TcpStream, upstream: u16, shared: Arc<Shared>) {
    let mut stall = shared.stall.subscribe();
    if *stall.borrow_and_update() {
        shared.stalled.send_modify(|count| *count += 1);
        let _ = stall.wait_for(|stalled| !*stalled).await;
    }
    let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
        return; // the client sees its connection closed
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let local = server.local_addr().map(|addr| addr.port()).unwrap_or(0);
    shared.upstream_ports.lock().unwrap().insert(local);
    let _forget = Forget {
        shared: &shared,
        port: local,
    };

    let mut requests = RespCounter::default();
    let mut replies = RespCounter::default();
    // The end of the client's stream so far, so a needle split across two reads is
    // still found.
    let mut window: Vec<u8> = Vec::new();
    let mut from_client = vec![0u8; 64 * 1024];
    let mut from_server = vec![0u8; 64 * 1024];
    // The client subscribed on this connection; the relay swallowed some of what
    // the server sent on it.
    let (mut subscribed, mut swallowed) = (false, false);
    let mut silence = shared.silence.subscribe();
    loop {
        tokio::select! {
            read = client.read(&mut from_client) => {
                let n = match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                let chunk = &from_client[..n];
                requests.feed(chunk, false);
                window.extend_from_slice(chunk);
                let action = shared.take_arm(&window, n);
                if !subscribed && subscribes(&window, n) {
                    // Known before the request goes on, so its reply is swallowed too.
                    subscribed = true;
                    shared.subscribed.send_modify(|count| *count += 1);
                }
                if window.len() > MAX_NEEDLE {
                    window.drain(..window.len() - MAX_NEEDLE);
                }
                if action == Some(Action::Hold) {
                    let held = chunk.to_vec();
                    let buffers = (&mut from_client[..], &mut from_server[..]);
                    hold(client, server, (requests, replies), held, buffers, &shared).await;
                    return;
                }
                if server.write_all(chunk).await.is_err() {
                    return;
                }
                if action == Some(Action::Lose) {
                    let buffers = (&mut from_client[..], &mut from_server[..]);
                    lose_reply(client, server, (requests, replies), buffers, &shared).await;
                    return;
                }
            }
            read = server.read(&mut from_server) => {
                let n = match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                replies.feed(&from_server[..n], true);
                if subscribed && *shared.silence.borrow() {
                    swallowed = true;
                    shared.silenced.send_modify(|count| *count += 1);
                    continue;
                }
                if client.write_all(&from_server[..n]).await.is_err() {
                    return;
                }
            }
            changed = silence.changed(), if swallowed => {
                if changed.is_err() || !*silence.borrow_and_update() {
                    // The stream lost bytes: the client must not read on from a gap.
                    let _ = client.set_zero_linger();
                    return;
                }
            }
        }
    }
}

/// The request that holds the needle was forwarded: lets the rest of a request
/// still on its way through (to the server), swallows every reply until the server
/// has answered all requests sent so far, then resets the client's connection.
async fn lose_reply(
    mut client: TcpStream,
    mut server: TcpStream,
    (mut requests, mut replies): (RespCounter, RespCounter),
    (from_client, from_server): (&mut [u8], &mut [u8]),
    shared: &Shared,
) {
    let give_up = tokio::time::Instant::now() + ANSWER_LIMIT;
    let parsed =
        |requests: &RespCounter, replies: &RespCounter| !requests.broken && !replies.broken;
    let mut heard = false;
    loop {
        let answered = if parsed(&requests, &replies) {
            !requests.partial() && replies.complete >= requests.complete
        } else {
            false
        };
        if answered {
            break;
        }
        // Unparseable streams: the first bytes, then a quiet spell.
        let quiet_limit = if !parsed(&requests, &replies) && heard {
            tokio::time::Instant::now() + QUIET
        } else {
            give_up
        };
        let limit = quiet_limit.min(give_up);
        tokio::select! {
            read = client.read(from_client), if requests.partial() => {
                match read {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        requests.feed(&from_client[..n], false);
                        if server.write_all(&from_client[..n]).await.is_err() {
                            break;
                        }
                    }
                }
            }
            read = server.read(from_server) => {
                match read {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        heard = true;
                        replies.feed(&from_server[..n], true);
                    }
                }
            }
            () = tokio::time::sleep_until(limit) => {
                if limit == give_up {
                    eprintln!(
                        "proxy: the server did not answer within {ANSWER_LIMIT:?}; \
                         resetting anyway"
                    );
                }
                break;
            }
        }
    }
    if std::env::var_os("PROXY_DEBUG").is_some() {
        eprintln!(
            "proxy: lost the replies; requests {} (partial {}, broken {}), replies {} \
             (broken {}), heard {heard}",
            requests.complete,
            requests.partial(),
            requests.broken,
            replies.complete,
            replies.broken
        );
    }
    // Counted before the reset, so a client that sees the reset finds it counted.
    shared.dropped.send_modify(|count| *count += 1);
    let _ = shared.resets.subscribe().wait_for(|allowed| *allowed).await;
    // RST, not FIN: the client's read fails with "connection reset".
    let _ = client.set_zero_linger();
    drop(client);
    drop(server);
}

/// A request that holds the needle came in `held` (with whatever came before it in
/// the same read): reads the rest of a request still on its way, resets the
/// client's connection (counted as held), and once the test lets it through,
/// forwards it all to the server and waits until the server has answered every
/// request of the connection (counted as delivered). Replies go nowhere.
async fn hold(
    mut client: TcpStream,
    mut server: TcpStream,
    (mut requests, mut replies): (RespCounter, RespCounter),
    mut held: Vec<u8>,
    (from_client, from_server): (&mut [u8], &mut [u8]),
    shared: &Shared,
) {
    let give_up = tokio::time::Instant::now() + ANSWER_LIMIT;
    while requests.partial() {
        tokio::select! {
            read = client.read(from_client) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    requests.feed(&from_client[..n], false);
                    held.extend_from_slice(&from_client[..n]);
                }
            },
            () = tokio::time::sleep_until(give_up) => break,
        }
    }
    // RST, not FIN: the client's read fails with "connection reset".
    let _ = client.set_zero_linger();
    drop(client);
    shared.held.send_modify(|count| *count += 1);
    let mut deliver = shared.deliver.subscribe();
    if deliver.wait_for(|deliver| *deliver).await.is_err() || server.write_all(&held).await.is_err()
    {
        return;
    }
    let give_up = tokio::time::Instant::now() + ANSWER_LIMIT;
    while requests.broken || replies.broken || replies.complete < requests.complete {
        tokio::select! {
            read = server.read(from_server) => match read {
                Ok(0) | Err(_) => return,
                // Unparseable streams: the first bytes stand for the answer.
                Ok(_) if requests.broken || replies.broken => break,
                Ok(n) => replies.feed(&from_server[..n], true),
            },
            () = tokio::time::sleep_until(give_up) => {
                eprintln!("proxy: a held request was not answered within {ANSWER_LIMIT:?}");
                return;
            }
        }
    }
    shared.delivered.send_modify(|count| *count += 1);
}

/// Removes a relayed connection's port from the live set when it ends.
struct Forget<'a> {
    shared: &'a Shared,
    port: u16,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.shared
            .upstream_ports
            .lock()
            .unwrap()
            .remove(&self.port);
    }
}

/// Counts complete RESP frames in one direction of a connection.
#[derive(Default)]
struct RespCounter {
    /// Bytes of a frame not yet complete.
    pending: Vec<u8>,
    /// Complete frames (push frames left out).
    complete: u64,
    /// The stream did not parse: counting stopped.
    broken: bool,
}

impl RespCounter {
    /// Adds `bytes`; `replies`: a server's stream (push frames are not replies).
    fn feed(&mut self, bytes: &[u8], replies: bool) {
        if self.broken {
            return;
        }
        self.pending.extend_from_slice(bytes);
        let mut at = 0;
        loop {
            match skip_value(&self.pending[at..]) {
                Ok(Some(len)) => {
                    if !(replies && self.pending[at] == b'>') {
                        self.complete += 1;
                    }
                    at += len;
                }
                Ok(None) => break,
                Err(()) => {
                    self.broken = true;
                    self.pending.clear();
                    return;
                }
            }
        }
        self.pending.drain(..at);
    }

    /// A frame has begun but not ended.
    fn partial(&self) -> bool {
        !self.broken && !self.pending.is_empty()
    }
}

/// The length of the RESP value at the start of `b`: `Ok(None)` if it is not
/// complete yet, `Err` if `b` is not RESP.
fn skip_value(b: &[u8]) -> Result<Option<usize>, ()> {
    let Some(&kind) = b.first() else {
        return Ok(None);
    };
    let Some(end) = b.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let line = &b[1..end];
    let after = end + 2;
    let number = || -> Result<i64, ()> {
        std::str::from_utf8(line)
            .map_err(|_| ())?
            .parse::<i64>()
            .map_err(|_| ())
    };
    match kind {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Ok(Some(after)),
        b'$' | b'!' | b'=' => {
            let len = number()?;
            if len < 0 {
                return Ok(Some(after));
            }
            let total = after + len as usize + 2;
            if b.len() < total {
                Ok(None)
            } else if &b[total - 2..total] != b"\r\n" {
                Err(())
            } else {
                Ok(Some(total))
            }
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let count = number()?;
            if count < 0 {
                return Ok(Some(after));
            }
            let items = if matches!(kind, b'%' | b'|') {
                count * 2
            } else {
                count
            };
            let mut at = after;
            for _ in 0..items {
                match skip_value(&b[at..])? {
                    Some(len) => at += len,
                    None => return Ok(None),
                }
            }
            if kind == b'|' {
                // An attribute comes with the value it describes: one frame.
                match skip_value(&b[at..])? {
                    Some(len) => at += len,
                    None => return Ok(None),
                }
            }
            Ok(Some(at))
        }
        _ => Err(()),
    }
}

/// Whether a subscribing command (`SUBSCRIBE`, `SSUBSCRIBE`, `PSUBSCRIBE`, any case,
/// as the bulk string that names the command) ends within the last `new` bytes of
/// `window`.
pub(super) fn subscribes(window: &[u8], new: usize) -> bool {
    const NAMES: [&[u8]; 3] = [
        b"$9\r\nSUBSCRIBE\r\n",
        b"$10\r\nSSUBSCRIBE\r\n",
        b"$10\r\nPSUBSCRIBE\r\n",
    ];
    NAMES.iter().any(|name| {
        let from = window.len().saturating_sub(new + name.len() - 1);
        window[from..]
            .windows(name.len())
            .any(|w| w.eq_ignore_ascii_case(name))
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Servers behind relays: one [`Proxy`] per node, in node order.
pub struct Proxied {
    /// The servers (their own ports stay reachable for harness commands).
    pub redis: LocalRedis,
    /// One relay per node, in the order of `redis.nodes`.
    pub proxies: Vec<Proxy>,
}

impl LocalRedis {
    /// Puts a relay in front of every node. On a cluster, every node then announces
    /// its relay's port (`cluster-announce-port`; `cluster-announce-bus-port` stays
    /// the real bus port), and this waits until `CLUSTER SLOTS` on every node names
    /// the relays only, so cluster clients discover the relays and never the nodes.
    pub fn behind_proxies(self) -> Proxied {
        let proxies: Vec<Proxy> = self.nodes.iter().map(|n| Proxy::start(n.port)).collect();
        let proxied = Proxied {
            redis: self,
            proxies,
        };
        if proxied.redis.is_cluster() {
            proxied.announce_relays();
        }
        proxied
    }
}

impl Proxied {
    /// The URLs clients should use: the relays'.
    pub fn urls(&self) -> Vec<String> {
        self.proxies.iter().map(Proxy::url).collect()
    }

    /// The first relay's URL (the only one in front of a standalone server).
    pub fn url(&self) -> String {
        self.proxies[0].url()
    }

    /// The relay in front of `node`.
    pub fn proxy_of(&self, node: &Node) -> &Proxy {
        self.proxies
            .iter()
            .find(|p| p.upstream_port() == node.port)
            .unwrap_or_else(|| panic!("no relay in front of {}", node.url))
    }

    /// The node behind the relay listening on `port`.
    pub fn node_behind(&self, port: u16) -> &Node {
        let proxy = self
            .proxies
            .iter()
            .find(|p| p.port() == port)
            .unwrap_or_else(|| panic!("no relay on port {port}"));
        self.redis.node_by_port(proxy.upstream_port())
    }

    /// The master that serves `key` now (the server itself when standalone).
    pub fn master_for_key(&self, key: &str) -> &Node {
        if !self.redis.is_cluster() {
            return &self.redis.nodes[0];
        }
        // The view names the relays' ports: map them back.
        let slot = self.redis.keyslot(key);
        let view = self.redis.cluster_view();
        let owner = view
            .iter()
            .find(|n| n.is_master() && n.owns_slot(slot))
            .unwrap_or_else(|| panic!("no master owns slot {slot} (key {key:?})"));
        self.node_behind(owner.port)
    }

    /// The relay in front of the master that serves `key`.
    pub fn proxy_for_key(&self, key: &str) -> &Proxy {
        self.proxy_of(self.master_for_key(key))
    }

    /// Replies lost by all relays together.
    pub fn dropped(&self) -> u64 {
        self.proxies.iter().map(Proxy::dropped).sum()
    }

    /// Checks that every client connected to any node (but replication links and
    /// this check's own connection) comes through that node's relay; returns how
    /// many relayed connections there are.
    pub fn assert_all_traffic_proxied(&self) -> usize {
        let mut relayed = 0;
        for (node, proxy) in self.redis.nodes.iter().zip(&self.proxies) {
            let listed = value_to_string(self.redis.raw(node, &["CLIENT", "LIST"]));
            let ours = proxy.upstream_ports();
            for line in listed.lines() {
                let field = |name: &str| {
                    line.split_whitespace()
                        .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                        .unwrap_or("")
                };
                let flags = field("flags");
                if field("cmd") == "client|list" || flags.contains('S') || flags.contains('M') {
                    continue;
                }
                let port: u16 = field("addr")
                    .rsplit(':')
                    .next()
                    .and_then(|p| p.parse().ok())
                    .unwrap_or_else(|| panic!("no address in CLIENT LIST line {line:?}"));
                assert!(
                    ours.contains(&port),
                    "{} has a client that bypasses its relay (port {}): {line}\nrelayed: {ours:?}",
                    node.url,
                    proxy.port()
                );
                relayed += 1;
            }
        }
        relayed
    }

    /// Makes every node announce its relay's port, then waits until every node's
    /// `CLUSTER SLOTS` names the relays (all of them) and nothing else.
    fn announce_relays(&self) {
        for (node, proxy) in self.redis.nodes.iter().zip(&self.proxies) {
            let bus = (node.port + 10_000).to_string();
            let announced = proxy.port().to_string();
            self.redis
                .raw(node, &["CONFIG", "SET", "cluster-announce-bus-port", &bus]);
            self.redis.raw(
                node,
                &["CONFIG", "SET", "cluster-announce-port", &announced],
            );
        }
        let relays: HashSet<u16> = self.proxies.iter().map(Proxy::port).collect();
        let started = Instant::now();
        loop {
            let problem = self.redis.nodes.iter().find_map(|node| {
                let slots =
                    match raw_command(node.port, &["CLUSTER", "SLOTS"], Duration::from_secs(2)) {
                        Ok(slots) => slots,
                        Err(e) => return Some(format!("{}: CLUSTER SLOTS failed: {e}", node.url)),
                    };
                let named = slot_ports(&slots);
                (named != relays).then(|| {
                    format!(
                        "{}: CLUSTER SLOTS names ports {named:?}, the relays are {relays:?}",
                        node.url
                    )
                })
            });
            let Some(problem) = problem else {
                return;
            };
            assert!(
                started.elapsed() < ANNOUNCE_LIMIT,
                "the nodes did not announce their relays within {ANNOUNCE_LIMIT:?}: {problem}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Every port `CLUSTER SLOTS` names: `[[start, end, [ip, port, id, ...], ...], ...]`.
fn slot_ports(slots: &Value) -> HashSet<u16> {
    let Value::Array(ranges) = slots else {
        panic!("CLUSTER SLOTS is not a list: {slots:?}");
    };
    let mut ports = HashSet::new();
    for range in ranges {
        let Value::Array(fields) = range else {
            panic!("a CLUSTER SLOTS range is not a list: {range:?}");
        };
        for node in fields.iter().skip(2) {
            if let Value::Array(node) = node
                && let Some(Value::Int(port)) = node.get(1)
            {
                ports.insert(*port as u16);
            }
        }
    }
    ports
}

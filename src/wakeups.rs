//! Wake-ups: one subscription connection per client, shared by every waiter.
//!
//! Release, downgrade and purge scripts publish on the lock's channel; waiters
//! listen here instead of polling. The connection carries nothing but subscriptions
//! (the driver can mistake an unsolicited SUNSUBSCRIBE for another command's reply),
//! re-subscribes when Redis drops a subscription (failover, slot migration,
//! reconnection), and hands each waiter a [`Listener`] for its lock's channel. A
//! channel is subscribed while at least one waiter listens on it.
//!
//! Messages are hints: pub/sub is at-most-once, so waiters also keep a re-check timer.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use redis::{PushInfo, PushKind, Value};
use tokio::sync::{broadcast, mpsc};

use crate::Error;
use crate::connection::Connection;

/// Sent to a channel's listeners when its subscription was restored: messages may
/// have been lost in between, so everyone re-checks. (Not a token: tokens are hex.)
pub(crate) const RESUBSCRIBED: &str = "~resubscribed";
/// What a listener that fell behind, or whose hub is gone, reads: "re-check now".
const RECHECK: &str = "*";

/// How many unread messages a listener may fall behind before it is told it lagged
/// (a lag counts as a wake-up).
const BACKLOG: usize = 16;

/// The subscription side of a client.
#[derive(Clone)]
pub(crate) struct Wakeups {
    hub: Arc<Hub>,
}

struct Hub {
    conn: Connection,
    channels: Mutex<HashMap<String, broadcast::Sender<Arc<str>>>>,
    /// The channels Redis confirmed; the lock also serializes (un)subscribe
    /// requests, so the last one always matches `channels`.
    subscribed: tokio::sync::Mutex<HashSet<String>>,
}

impl Wakeups {
    /// Opens the subscription connection (the same kind as the command connection).
    pub(crate) async fn connect(cluster: Option<&[String]>, url: &str) -> Result<Self, Error> {
        let (push_tx, push_rx) = mpsc::unbounded_channel();
        let conn = match cluster {
            Some(nodes) => Connection::cluster(nodes, Some(push_tx)).await?,
            None => Connection::standalone(url, Some(push_tx)).await?,
        };
        let hub = Arc::new(Hub {
            conn,
            channels: Mutex::new(HashMap::new()),
            subscribed: tokio::sync::Mutex::new(HashSet::new()),
        });
        tokio::spawn(dispatch(Arc::downgrade(&hub), push_rx));
        Ok(Wakeups { hub })
    }

    /// Starts listening on `channel`; messages published after this returns reach
    /// the listener. If Redis refuses the subscription (a failover in progress), the
    /// listener still works as a timer-only waiter and a later listener or
    /// reconnection subscribes again.
    pub(crate) async fn listen(&self, channel: &str) -> Listener {
        let receiver = self
            .hub
            .lock()
            .entry(channel.to_owned())
            .or_insert_with(|| broadcast::channel(BACKLOG).0)
            .subscribe();
        let listener = Listener {
            hub: self.hub.clone(),
            channel: channel.to_owned(),
            receiver,
        };
        // Every listener makes sure the subscription is in place: a concurrent
        // first listener may still be subscribing.
        if let Err(err) = self.hub.sync(channel).await {
            tracing::warn!(channel, %err, "could not subscribe to wake-ups; waiting on the re-check timer");
        }
        listener
    }
}

impl Hub {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, broadcast::Sender<Arc<str>>>> {
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn deliver(&self, channel: &str, payload: Arc<str>) {
        if let Some(sender) = self.lock().get(channel) {
            let _ = sender.send(payload);
        }
    }

    /// Subscribes or unsubscribes `channel`, whichever its listeners want now, unless
    /// it already is.
    async fn sync(&self, channel: &str) -> redis::RedisResult<()> {
        let mut subscribed = self.subscribed.lock().await;
        let wanted = self.lock().contains_key(channel);
        let mut conn = self.conn.clone();
        match (wanted, subscribed.contains(channel)) {
            (true, false) => {
                conn.subscribe(channel).await?;
                subscribed.insert(channel.to_owned());
            }
            (false, true) => {
                subscribed.remove(channel);
                conn.unsubscribe(channel).await?;
            }
            _ => {}
        }
        Ok(())
    }

    fn wanted(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Subscribes `channels` again (Redis dropped them) and tells their listeners to
    /// re-check.
    async fn resubscribe(self: Arc<Self>, channels: Vec<String>) {
        for channel in channels {
            self.subscribed.lock().await.remove(&channel);
            match self.sync(&channel).await {
                Ok(()) => tracing::debug!(channel, "wake-up subscription restored"),
                Err(err) => {
                    tracing::warn!(channel, %err, "could not restore a wake-up subscription; waiters fall back to their re-check timers")
                }
            }
            self.deliver(&channel, Arc::from(RESUBSCRIBED));
        }
    }
}

/// Routes pushes to listeners and restores dropped subscriptions; ends when the
/// client is gone.
async fn dispatch(hub: Weak<Hub>, mut pushes: mpsc::UnboundedReceiver<PushInfo>) {
    while let Some(push) = pushes.recv().await {
        let Some(hub) = hub.upgrade() else { return };
        match push.kind {
            PushKind::Message | PushKind::SMessage => {
                if let [channel, payload, ..] = push.data.as_slice()
                    && let (Some(channel), Some(payload)) = (text(channel), text(payload))
                {
                    tracing::trace!(channel, payload, "wake-up");
                    hub.deliver(&channel, Arc::from(payload));
                }
            }
            PushKind::SUnsubscribe | PushKind::Unsubscribe => {
                // Redis drops sharded subscriptions on failover and slot moves.
                let wanted: Vec<String> = push
                    .data
                    .first()
                    .and_then(text)
                    .filter(|channel| hub.lock().contains_key(channel))
                    .into_iter()
                    .collect();
                if !wanted.is_empty() {
                    tokio::spawn(hub.resubscribe(wanted));
                }
            }
            PushKind::Disconnection => {
                let wanted = hub.wanted();
                tokio::spawn(hub.resubscribe(wanted));
            }
            _ => {}
        }
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// One waiter's view of a channel; unsubscribes when the last listener goes.
pub(crate) struct Listener {
    hub: Arc<Hub>,
    channel: String,
    receiver: broadcast::Receiver<Arc<str>>,
}

impl Listener {
    /// The next message; a lag or a closed hub reads as "re-check now".
    pub(crate) async fn recv(&mut self) -> Arc<str> {
        match self.receiver.recv().await {
            Ok(payload) => payload,
            Err(_) => Arc::from(RECHECK),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let mut channels = self.hub.lock();
        let last = channels
            .get(&self.channel)
            .is_some_and(|sender| sender.receiver_count() <= 1);
        if last {
            channels.remove(&self.channel);
            drop(channels);
            let hub = self.hub.clone();
            let channel = std::mem::take(&mut self.channel);
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    if let Err(err) = hub.sync(&channel).await {
                        tracing::debug!(channel, %err, "unsubscribe failed");
                    }
                });
            }
        }
    }
}

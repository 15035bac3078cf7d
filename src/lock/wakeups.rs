//! Wake-ups: one subscription side per client, shared by every waiter.
//!
//! Release, downgrade and purge scripts publish on the lock's channel who may go
//! next; waiters listen here instead of polling. Both backends feed this dispatch
//! the same way: the client's [`Subscriber`] says which channels it listens on, and
//! what the store publishes or drops arrives as a [`Push`] (on Redis, over a
//! connection that carries nothing but subscriptions, since the driver can mistake
//! an unsolicited SUNSUBSCRIBE for another command's reply). The dispatch
//! re-subscribes when the store drops a subscription (failover, slot migration,
//! reconnection), and hands each waiter a [`Listener`] that receives only the
//! messages that concern it: a release naming another writer wakes nobody else.
//! A channel stays subscribed while someone listens, and a few seconds more, so a
//! busy lock does not subscribe and unsubscribe for every wait.
//!
//! Messages are hints: pub/sub is at-most-once, so waiters also keep a re-check timer.
//!
//! The same channel carries writers' call-backs (`w`) and forced releases (`x`) to
//! the processes whose tasks share a read hold ([`crate::lock::shared_reads`]); no
//! waiter wants them.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::backend::{Push, Pushes, Subscriber};
use crate::error::ErrorChain;
use crate::protocol::Access;
use crate::protocol::token::Token;
pub(crate) use crate::protocol::{CALL_BACK, EVICTED};
use crate::{Error, Fairness};

/// Sent to a channel's listeners when its subscription was restored: messages may
/// have been lost in between, so everyone re-checks. (Not a token: tokens are hex.)
pub(crate) const RESUBSCRIBED: &str = "~resubscribed";

/// How long a channel stays subscribed after its last listener left.
const LINGER: Duration = Duration::from_secs(5);

/// What a waiter waits for; decides which release messages concern it.
pub(crate) struct Interest {
    pub(crate) access: Access,
    pub(crate) token: Token,
    pub(crate) fairness: Fairness,
}

impl Interest {
    /// Whether a message concerns this waiter: `*` wakes everyone but upgrades, `r`
    /// and a batch's grant (`r#<number>`: those readers hold, and no writer does)
    /// the readers, `u` (the upgradable hold ended) the upgradable readers,
    /// `<token>:<fence>` (the lock was handed to that queued writer or upgrade) the
    /// one it names (readers that do not defer to writers try on every message). A
    /// reader that waits in line then looks only for its own batch's grant.
    fn wants(&self, payload: &str) -> bool {
        if payload == CALL_BACK || payload == EVICTED {
            return false;
        }
        let named =
            || payload.split_once(':').map_or(payload, |(token, _)| token) == self.token.as_str();
        let readers = "r" == payload || payload.starts_with("r#");
        match (payload, self.access) {
            (_, Access::Upgrade) => named(),
            ("*", _) => true,
            (_, Access::Read | Access::RecursiveRead | Access::UpgradableRead) if readers => true,
            ("u", Access::UpgradableRead) => true,
            (_, Access::RecursiveRead) => true,
            (_, Access::Read | Access::UpgradableRead) => {
                self.fairness == Fairness::ReaderPreferred
            }
            (_, Access::Write) => named(),
        }
    }
}

/// The subscription side of a client.
#[derive(Clone)]
pub(crate) struct Wakeups {
    hub: Arc<Hub>,
}

struct Hub {
    subscriber: Subscriber,
    /// Channel -> its listeners.
    channels: Mutex<HashMap<String, Channel>>,
    /// The channels Redis confirmed; the lock also serializes (un)subscribe
    /// requests, so the last one always matches `channels`.
    subscribed: tokio::sync::Mutex<HashSet<String>>,
    next_id: AtomicU64,
    /// Channel -> when its last listener left: one task per channel unsubscribes it
    /// `LINGER` after that, unless someone listens again (however often a busy
    /// lock's listeners come and go meanwhile).
    lingering: Mutex<HashMap<String, Instant>>,
}

/// One lock's channel, while anyone listens on it.
#[derive(Default)]
struct Channel {
    /// Each listener's mailbox, by id.
    listeners: HashMap<u64, Mailbox>,
}

enum Mailbox {
    /// A waiter's: the messages its interest wants go to its [`Listener`].
    Waiter {
        interest: Interest,
        sender: mpsc::UnboundedSender<Arc<str>>,
    },
    /// A shared read hold's: writers' call-backs, forced releases and restored
    /// subscriptions, handed to it as they come, with no task of its own.
    CallBacks(OnCallBack),
}

/// What a client that shares a lock's read hold does with a call-back (`w`), a
/// forced release (`x`) or [`RESUBSCRIBED`]. Called by the dispatch, outside every
/// lock of the hub's.
pub(crate) type OnCallBack = Arc<dyn Fn(&str) + Send + Sync>;

impl Wakeups {
    /// Serves wake-ups through `subscriber`, the client's subscription side, whose
    /// pushes arrive on `pushes` (from either backend). Spawns the task that routes
    /// them.
    pub(crate) fn new(subscriber: Subscriber, pushes: Pushes) -> Self {
        let hub = Arc::new(Hub {
            subscriber,
            channels: Mutex::new(HashMap::new()),
            subscribed: tokio::sync::Mutex::new(HashSet::new()),
            next_id: AtomicU64::new(0),
            lingering: Mutex::new(HashMap::new()),
        });
        tokio::spawn(dispatch(Arc::downgrade(&hub), pushes));
        Wakeups { hub }
    }

    /// A listener on `channel` at no cost, if the channel is already subscribed:
    /// registered before the caller's first attempt, it cannot miss a release that
    /// follows that attempt.
    pub(crate) fn listen_if_subscribed(
        &self,
        channel: &str,
        interest: Interest,
    ) -> Result<Listener, Interest> {
        // Holding the (un)subscribe lock keeps the subscription in place until the
        // listener is registered; if it is busy, take the slow path.
        match self.hub.subscribed.try_lock() {
            Ok(subscribed) if subscribed.contains(channel) => {
                Ok(self.hub.listener(&self.hub, channel, interest))
            }
            _ => Err(interest),
        }
    }

    /// Starts listening on `channel`, subscribing if needed; messages published
    /// after this returns reach the listener. If Redis refuses the subscription (a
    /// failover in progress), the listener still works as a timer-only waiter and a
    /// later listener or reconnection subscribes again.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when an ACL forbids the subscription (NOPERM): that is a
    /// configuration to fix, not a fault to wait out on a timer.
    pub(crate) async fn listen(
        &self,
        channel: &str,
        interest: Interest,
    ) -> Result<Listener, Error> {
        self.subscribe(channel, interest).await
    }

    /// Starts listening on `channel` for writers' call-backs (`w`), forced
    /// releases (`x`) and [`RESUBSCRIBED`] only: each is handed to `on` as it comes,
    /// until the returned registration is dropped.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when the channel could not be subscribed: unlike a waiter,
    /// which has its re-check timer, the caller would not hear a call-back.
    pub(crate) async fn listen_for_call_backs(
        &self,
        channel: &str,
        on: OnCallBack,
    ) -> Result<Registration, Error> {
        let registration = self
            .hub
            .register(&self.hub, channel, Mailbox::CallBacks(on));
        self.hub.sync(channel).await?;
        Ok(registration)
    }

    async fn subscribe(&self, channel: &str, interest: Interest) -> Result<Listener, Error> {
        let listener = self.hub.listener(&self.hub, channel, interest);
        if let Err(err) = self.hub.sync(channel).await {
            if matches!(&err, Error::Redis(failure) if failure.code() == Some("NOPERM")) {
                return Err(err);
            }
            tracing::warn!(channel, error = %ErrorChain(&err), "could not subscribe to wake-ups; waiting on the re-check timer");
        }
        Ok(listener)
    }
}

impl Hub {
    fn channels(&self) -> MutexGuard<'_, HashMap<String, Channel>> {
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lingering(&self) -> MutexGuard<'_, HashMap<String, Instant>> {
        self.lingering
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn register(&self, hub: &Arc<Hub>, channel: &str, mailbox: Mailbox) -> Registration {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.channels()
            .entry(channel.to_owned())
            .or_default()
            .listeners
            .insert(id, mailbox);
        Registration {
            hub: hub.clone(),
            channel: channel.to_owned(),
            id,
        }
    }

    fn listener(&self, hub: &Arc<Hub>, channel: &str, interest: Interest) -> Listener {
        let (sender, receiver) = mpsc::unbounded_channel();
        let registration = self.register(hub, channel, Mailbox::Waiter { interest, sender });
        Listener {
            _registration: registration,
            receiver,
        }
    }

    /// Hands `payload` to the listeners of `channel` it concerns (all of them for a
    /// restored subscription).
    fn deliver(&self, channel: &str, payload: &str) {
        let mut call_backs = Vec::new();
        if let Some(channel) = self.channels().get(channel) {
            let shared: Arc<str> = Arc::from(payload);
            for mailbox in channel.listeners.values() {
                match mailbox {
                    Mailbox::Waiter { interest, sender } => {
                        if payload == RESUBSCRIBED || interest.wants(payload) {
                            let _ = sender.send(shared.clone());
                        }
                    }
                    // Listening for call-backs: also forced releases, and that
                    // messages may have been lost.
                    Mailbox::CallBacks(on) => {
                        if [CALL_BACK, EVICTED, RESUBSCRIBED].contains(&payload) {
                            call_backs.push(on.clone());
                        }
                    }
                }
            }
        }
        // Outside the channels' lock: a call-back takes the client's shared reads'
        // lock, under which a registration may go (and take the channels' lock).
        for on in call_backs {
            on(payload);
        }
    }

    /// Subscribes or unsubscribes `channel`, whichever its listeners want now, unless
    /// it already is.
    async fn sync(&self, channel: &str) -> Result<(), Error> {
        let mut subscribed = self.subscribed.lock().await;
        let wanted = self.channels().contains_key(channel);
        match (wanted, subscribed.contains(channel)) {
            (true, false) => {
                self.subscriber.subscribe(channel).await?;
                subscribed.insert(channel.to_owned());
            }
            (false, true) => {
                subscribed.remove(channel);
                self.subscriber.unsubscribe(channel).await?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Redis dropped the subscription to `channels` (or the connection): forget them,
    /// subscribe again those still wanted, and tell their listeners to re-check.
    /// `None`: every channel (a lost connection).
    async fn resubscribe(self: Arc<Self>, channels: Option<Vec<String>>) {
        let channels = match channels {
            Some(channels) => channels,
            None => {
                let mut all: HashSet<String> = std::mem::take(&mut *self.subscribed.lock().await);
                all.extend(self.channels().keys().cloned());
                all.into_iter().collect()
            }
        };
        for channel in channels {
            self.subscribed.lock().await.remove(&channel);
            if !self.channels().contains_key(&channel) {
                continue;
            }
            match self.sync(&channel).await {
                Ok(()) => tracing::debug!(channel, "wake-up subscription restored"),
                Err(err) => {
                    tracing::warn!(channel, error = %ErrorChain(&err), "could not restore a wake-up subscription; waiters fall back to their re-check timers")
                }
            }
            self.deliver(&channel, RESUBSCRIBED);
        }
    }
}

/// Routes pushes to listeners and restores dropped subscriptions; ends when the
/// client is gone.
async fn dispatch(hub: Weak<Hub>, mut pushes: Pushes) {
    while let Some(push) = pushes.recv().await {
        let Some(hub) = hub.upgrade() else { return };
        match push {
            Push::Message { channel, payload } => {
                tracing::trace!(channel, payload, "wake-up");
                hub.deliver(&channel, &payload);
            }
            Push::Dropped(channel) => {
                tokio::spawn(hub.resubscribe(channel.map(|channel| vec![channel])));
            }
        }
    }
}

/// One waiter's mailbox on a channel: receives the messages that concern it.
pub(crate) struct Listener {
    _registration: Registration,
    receiver: mpsc::UnboundedReceiver<Arc<str>>,
}

/// A mailbox's place on its channel: dropped, the mailbox goes, and the channel is
/// unsubscribed `LINGER` after its last one went.
pub(crate) struct Registration {
    hub: Arc<Hub>,
    channel: String,
    id: u64,
}

impl Listener {
    /// Forgets the messages received so far (an attempt about to be sent sees the
    /// state they announced); true if one said the subscription was restored.
    pub(crate) fn clear(&mut self) -> bool {
        let mut resubscribed = false;
        while let Ok(payload) = self.receiver.try_recv() {
            resubscribed |= payload.as_ref() == RESUBSCRIBED;
        }
        resubscribed
    }

    /// The next message for this waiter (a closed hub reads as "re-check now").
    pub(crate) async fn recv(&mut self) -> Arc<str> {
        self.receiver
            .recv()
            .await
            .unwrap_or_else(|| Arc::from(RESUBSCRIBED))
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut channels = self.hub.channels();
        let Some(channel) = channels.get_mut(&self.channel) else {
            return;
        };
        channel.listeners.remove(&self.id);
        if !channel.listeners.is_empty() {
            return;
        }
        channels.remove(&self.channel);
        drop(channels);
        // The last listener left: unsubscribe unless someone listens again soon.
        let since = Instant::now();
        let channel = std::mem::take(&mut self.channel);
        let first = self
            .hub
            .lingering()
            .insert(channel.clone(), since)
            .is_none();
        if let (true, Ok(runtime)) = (first, tokio::runtime::Handle::try_current()) {
            runtime.spawn(linger(Arc::downgrade(&self.hub), channel, since));
        }
    }
}

/// Unsubscribes `channel` once `LINGER` has passed since its last listener left
/// (`since`, moved on by every listener that leaves it again meanwhile), if no one
/// listens then. Holds the hub weakly: a dropped client is not kept for it.
async fn linger(hub: Weak<Hub>, channel: String, mut since: Instant) {
    loop {
        tokio::time::sleep_until(since + LINGER).await;
        let Some(hub) = hub.upgrade() else {
            return;
        };
        {
            let mut lingering = hub.lingering();
            match lingering.get(&channel) {
                Some(&left) if left > since => {
                    since = left;
                    continue;
                }
                _ => lingering.remove(&channel),
            };
        }
        if let Err(err) = hub.sync(&channel).await {
            tracing::debug!(channel, error = %ErrorChain(&err), "unsubscribe failed");
        }
        return;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interest(access: Access, token: &Token, fairness: Fairness) -> Interest {
        Interest {
            access,
            token: token.clone(),
            fairness,
        }
    }

    #[test]
    fn messages_concern_only_who_can_proceed() {
        let me = Token::random();
        let other = Token::random();
        let handed = |token: &Token| format!("{}:42", token.as_str());
        let wp = Fairness::WriterPreferred;
        let writer = interest(Access::Write, &me, wp);
        assert!(writer.wants("*"));
        assert!(writer.wants(&handed(&me)));
        assert!(!writer.wants(&handed(&other)));
        assert!(!writer.wants("r"));
        assert!(!writer.wants("u"));
        let reader = interest(Access::Read, &me, wp);
        assert!(reader.wants("r"));
        assert!(reader.wants("*"));
        assert!(!reader.wants("u"));
        assert!(!reader.wants(&handed(&other)));
        let upgradable = interest(Access::UpgradableRead, &me, wp);
        for message in ["*", "r", "u"] {
            assert!(upgradable.wants(message), "{message}");
        }
        assert!(!upgradable.wants(&handed(&other)));
        let upgrade = interest(Access::Upgrade, &me, wp);
        assert!(upgrade.wants(&handed(&me)));
        for message in ["*", "r", "u"] {
            assert!(!upgrade.wants(message), "{message}");
        }
        let eager = interest(Access::Read, &me, Fairness::ReaderPreferred);
        assert!(eager.wants(&handed(&other)));
        let recursive = interest(Access::RecursiveRead, &me, wp);
        for waiter in [&writer, &reader, &upgradable, &upgrade, &eager, &recursive] {
            assert!(!waiter.wants(CALL_BACK), "a call-back wakes no waiter");
        }
    }
}

//! The lock's requests, run on a [`MemoryStore`]: each takes the store's lock (a
//! request runs alone, as a script does on Redis), runs the engine's transition
//! function for it and publishes what the script would have published, then
//! answers as the contract (`backend/mod.rs`) types its replies.

use std::time::Duration;

use redis::{ErrorKind, RedisError};
use tokio::time::Instant;

use super::{MemoryStore, State, micros};
use crate::Error;
use crate::Result;
use crate::backend::{
    Acquire, Backend, Fenced, Held, Node, PushSender, Pushes, Scan, SetAsk, Target,
};
use crate::protocol::engine::{self, Field, Outcome, Reply, Time, Tok, Val};
use crate::protocol::token::Token;
use crate::protocol::{
    Access, Acquired, CALL_BACK, Downgraded, EVICTED, LockMode, RawState, Renewed, Replicas,
    SetAcquired,
};

/// How long a forced release waits before it returns: on a server its `x` message
/// is on its way to the subscribers before the reply reaches the operator, and here
/// it takes two task hops in each subscribing client (its dispatch, then the
/// listener) to be heard, which this covers on any runtime that is not starved (and
/// exactly under tokio's paused clock, which moves on only when every task waits).
const EVICTION_LEAD: Duration = Duration::from_millis(5);

/// A client's way to the store: its lock side, or its subscription side.
#[derive(Clone)]
pub(crate) struct MemoryLink {
    pub(crate) store: MemoryStore,
    /// The subscription side's id and where its messages go.
    subscriber: Option<(u64, PushSender)>,
    /// The longest a request waits for a store that does not answer.
    overall: Duration,
}

/// One lock's keys in the store, and the original-design leases its scripts take.
struct MemoryKey<'a> {
    hash: &'a str,
    channel: &'a str,
    /// Read and write, in ms (`ARGV[2]`, `ARGV[3]`).
    original_ms: (u64, u64),
}

impl<'a> MemoryKey<'a> {
    /// `target`'s key in the store: the hash layout's only (the store has no
    /// original-design clients to share keys with).
    fn of(target: &'a Target) -> Result<Self, Error> {
        if target.is_legacy() {
            return Err(Error::InvalidOptions(
                "the in-memory store has the hash layout only: LockClient::legacy_rwlock needs Redis".into(),
            ));
        }
        Ok(MemoryKey {
            hash: target.key(),
            channel: &target.channel,
            original_ms: target.original_ms,
        })
    }
}

impl MemoryLink {
    /// A client's two links to `store` (for requests, and for subscriptions), and
    /// the pushes its subscriptions receive.
    pub(crate) fn pair(store: &MemoryStore, overall: Duration) -> (MemoryLink, MemoryLink, Pushes) {
        let (id, pushes, receiver) = store.subscriber();
        let lock = MemoryLink {
            store: store.clone(),
            subscriber: None,
            overall,
        };
        let subscriptions = MemoryLink {
            subscriber: Some((id, pushes)),
            ..lock.clone()
        };
        (lock, subscriptions, receiver)
    }

    /// The subscription side's `subscribe` (see [`Subscriber`](crate::backend::Subscriber)).
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<(), Error> {
        if let Some((id, pushes)) = &self.subscriber {
            self.store.state().subscribe(channel, *id, pushes);
        }
        Ok(())
    }

    /// The subscription side's `unsubscribe`.
    pub(crate) async fn unsubscribe(&self, channel: &str) -> Result<(), Error> {
        if let Some((id, _)) = &self.subscriber {
            self.store.state().unsubscribe(channel, *id);
        }
        Ok(())
    }

    /// Runs `request` on the store once it answers: after a silence
    /// ([`MemoryStore::stop_answering`]) ends, or fails when the client's overall
    /// limit passes first; an injected failure ([`MemoryStore::fail_next`]) fails it
    /// before it runs.
    async fn request<T>(&self, request: impl FnOnce(&mut State) -> T) -> Result<T, Error> {
        let deadline = Instant::now() + self.overall;
        loop {
            let silent = self.store.state().silent_until();
            let Some(until) = silent else { break };
            if until > deadline {
                tokio::time::sleep_until(deadline).await;
                return Err(Error::from(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the in-memory store did not answer (MemoryStore::stop_answering)",
                ))));
            }
            tokio::time::sleep_until(until).await;
        }
        let mut state = self.store.state();
        if state.take_failure() {
            return Err(Error::from(RedisError::from((
                ErrorKind::Io,
                "injected failure (MemoryStore::fail_next)",
            ))));
        }
        Ok(request(&mut state))
    }

    /// Runs one of the engine's operations on `key`'s hash, publishes what it
    /// published (a batch's grant first, a call-back to the readers last), and
    /// stores the hash back (none when it has no fields left).
    async fn run(
        &self,
        key: &MemoryKey<'_>,
        operation: impl FnOnce(&mut engine::Hash, &engine::Params, Time) -> Outcome,
    ) -> Result<Outcome, Error> {
        self.request(|state| operate(state, key, operation)).await
    }
}

/// The contract's requests on the store. It has no replicas (every count asked for
/// acknowledges), one node, and every key in one place.
impl Backend for MemoryLink {
    async fn acquire(&self, target: &Target, ask: &Acquire<'_>) -> Result<(Acquired, u32)> {
        let key = &MemoryKey::of(target)?;
        let Acquire {
            access, in_line, ..
        } = *ask;
        let (token, lease, intent) = (tok(ask.token), micros(ask.lease), micros(ask.intent));
        let out = self
            .run(key, |h, p, now| match access.mode() {
                LockMode::Read => {
                    let upgradable = access == Access::UpgradableRead;
                    engine::acquire_read(h, p, now, token, lease, in_line, upgradable, intent)
                }
                LockMode::Write => {
                    let upgrade = access == Access::Upgrade;
                    engine::acquire_write(h, p, now, token, lease, intent, upgrade)
                }
            })
            .await?;
        Ok((acquired(out.reply), acknowledged(ask.replicas)))
    }

    async fn acquire_set(&self, set: &SetAsk<'_>) -> Result<SetAcquired> {
        let keys = set
            .members
            .iter()
            .map(|(target, _, _)| MemoryKey::of(target))
            .collect::<Result<Vec<_>>>()?;
        let members: Vec<engine::SetMember> = set
            .members
            .iter()
            .enumerate()
            .map(|(hash, (_, token, mode))| engine::SetMember {
                hash,
                token: tok(token),
                write: *mode == LockMode::Write,
            })
            .collect();
        let (read_lease, write_lease) = (micros(set.read_lease), micros(set.write_lease));
        let out = self
            .request(|state| {
                operate_set(state, &keys, |hashes, p, now| {
                    let preferred = set.writer_preferred;
                    engine::acquire_set(
                        hashes,
                        p,
                        now,
                        &members,
                        preferred,
                        read_lease,
                        write_lease,
                    )
                })
            })
            .await?;
        Ok(match out.reply {
            engine::SetReply::Granted(fences) => SetAcquired::Granted(
                fences
                    .into_iter()
                    .map(|f| u64::try_from(f).unwrap_or(0))
                    .collect(),
            ),
            engine::SetReply::Refused(member, _) => SetAcquired::Refused(member.saturating_sub(1)),
        })
    }

    async fn release(&self, target: &Target, token: &Token) -> Result<bool> {
        let key = &MemoryKey::of(target)?;
        let token = tok(token);
        let out = self
            .run(key, |h, p, now| engine::release(h, p, now, token))
            .await?;
        Ok(out.reply == Reply::Int(1))
    }

    async fn renew(&self, target: &Target, held: Held<'_>, mode: LockMode) -> Result<Renewed> {
        let key = &MemoryKey::of(target)?;
        let (token, lease) = (tok(held.token), micros(held.lease));
        let write = mode == LockMode::Write;
        let out = self
            .run(key, |h, p, now| {
                engine::renew(h, p, now, token, lease, write)
            })
            .await?;
        Ok(match out.reply {
            Reply::Int(n) => Renewed::from_reply(n),
            _ => Renewed::Lost,
        })
    }

    async fn downgrade(&self, target: &Target, held: Held<'_>, from: Access) -> Result<Downgraded> {
        let key = &MemoryKey::of(target)?;
        let (token, lease) = (tok(held.token), micros(held.lease));
        let from_write = from.mode() == LockMode::Write;
        let out = self
            .run(key, |h, p, now| {
                engine::downgrade(h, p, now, token, lease, from_write)
            })
            .await?;
        // The store's unit is the microsecond (the scripts' the millisecond).
        Ok(match out.reply {
            Reply::Downgraded(1, queued) => Downgraded::Done {
                writer_queued: match queued {
                    -1 => None,
                    ..-1 => Some(Duration::MAX),
                    ago => Some(Duration::from_micros(ago.unsigned_abs())),
                },
            },
            _ => Downgraded::Lost,
        })
    }

    /// Applies `writes` when `token` holds the write lock. The store has no
    /// replicas: every count asked for acknowledges.
    async fn fenced_write(&self, target: &Target, ask: &Fenced<'_>) -> Result<(bool, u32)> {
        let key = &MemoryKey::of(target)?;
        let Fenced {
            writes, replicas, ..
        } = *ask;
        let token = tok(ask.token);
        let written = self
            .request(|state| {
                let out = operate(state, key, |h, p, now| {
                    engine::fenced_write(h, p, now, token)
                });
                let holds = matches!(out.reply, Reply::Int(fence) if fence > 0);
                if holds {
                    let now = state.tick();
                    for write in writes {
                        if write.op == "del" {
                            state.values.remove(&write.key);
                        } else {
                            let expires = write.expiry.map(|span| now + micros(span));
                            state
                                .values
                                .insert(write.key.clone(), (write.value.clone(), expires));
                        }
                    }
                }
                holds
            })
            .await?;
        Ok((written, acknowledged(replicas)))
    }

    async fn force_release(&self, target: &Target) -> Result<u64> {
        let key = &MemoryKey::of(target)?;
        let out = self.run(key, engine::force_release).await?;
        // The subscribers hear of the eviction before anyone acts on the reply.
        tokio::time::sleep(EVICTION_LEAD).await;
        Ok(match out.reply {
            Reply::Int(n) => u64::try_from(n).unwrap_or(0),
            _ => 0,
        })
    }

    /// Who holds the lock, in the shape of `state.lua`'s reply.
    async fn state(&self, target: &Target) -> Result<RawState> {
        let key = &MemoryKey::of(target)?;
        self.request(|state| {
            let now = state.tick();
            let params = State::params(original_us(key));
            let hash = state.hashes.get(key.hash).cloned().unwrap_or_default();
            let view = engine::live_view(&hash, &params, now);
            let wall = |t: Time| state.wall_ms(t);
            let pairs = |items: Vec<(Tok, Time)>| -> Vec<(String, i64)> {
                items
                    .into_iter()
                    .map(|(t, until)| (t.to_string(), wall(until)))
                    .collect()
            };
            let (queue, batches): (Vec<_>, Vec<_>) =
                view.queue.iter().partition(|(entry, _)| !entry.is_batch());
            // Readers that wait in a batch in line, with their own place's deadline.
            let waiting = batches
                .iter()
                .flat_map(|&&(batch, _)| {
                    hash.fields
                        .iter()
                        .filter_map(move |(field, value)| match (field, value) {
                            (Field::Rw(t), Val::Member(b, own)) if *b == batch && *own > now => {
                                Some((*t, *own))
                            }
                            _ => None,
                        })
                })
                .collect();
            let kept = state
                .kept
                .get(key.hash)
                .map(|tokens| tokens.iter().cloned().collect())
                .unwrap_or_default();
            let until_or_none = |t: Option<Time>| t.map_or(0, wall);
            (
                wall(now),
                u64::try_from(view.fence).unwrap_or(0),
                view.writer.map_or_else(String::new, |(t, _)| t.to_string()),
                until_or_none(view.writer.map(|(_, until)| until)),
                until_or_none(view.original_writer_until),
                until_or_none(view.original_reader_until),
                pairs(view.readers.into_iter().collect()),
                pairs(queue.into_iter().copied().collect()),
                view.upgradable
                    .map_or_else(String::new, |(t, _)| t.to_string()),
                i64::from(view.upgrade.is_some()),
                pairs(waiting),
                kept,
            )
        })
        .await
    }

    /// Whether a writer or an upgrade waits, or readers wait in line: the lock's
    /// line or pending upgrade exists (`HMGET q:head u:upgrade` on Redis).
    async fn writer_waits(&self, target: &Target) -> Result<bool> {
        let key = &MemoryKey::of(target)?;
        self.request(|state| {
            let now = state.tick();
            state.hashes.get_mut(key.hash).is_some_and(|hash| {
                hash.expire_if_due(now);
                [Field::QHead, Field::UUpgrade]
                    .iter()
                    .any(|field| hash.fields.contains_key(field))
            })
        })
        .await
    }

    /// Marks `token`'s read hold as kept idle (`on`), or clears the mark.
    async fn mark_kept(&self, target: &Target, held: Held<'_>, on: bool) -> Result<()> {
        let key = &MemoryKey::of(target)?;
        let token = held.token;
        self.request(|state| {
            if on && !state.hashes.contains_key(key.hash) {
                // The hold is gone with its hash: nothing to mark.
                return;
            }
            let marks = state.kept.entry(key.hash.to_owned()).or_default();
            if on {
                marks.insert(token.as_str().to_owned());
            } else {
                marks.remove(token.as_str());
                if marks.is_empty() {
                    state.kept.remove(key.hash);
                }
            }
        })
        .await
    }

    async fn nodes(&self) -> Result<Vec<Node>> {
        Ok(vec![Node::single()])
    }

    /// The keys of the lock hashes in the store that match `glob` (Redis's glob), in
    /// order: one `SCAN` that sees everything.
    async fn scan(&self, scan: &Scan<'_>) -> Result<(u64, Vec<String>)> {
        let glob = scan.glob;
        let keys = self.request(|state| {
            let now = state.tick();
            state.hashes.retain(|_, hash| {
                hash.expire_if_due(now);
                !hash.fields.is_empty()
            });
            let mut keys: Vec<String> = state
                .hashes
                .keys()
                .filter(|key| crate::backend::glob::matches(glob, key))
                .cloned()
                .collect();
            keys.sort();
            keys
        });
        Ok((0, keys.await?))
    }

    fn shares_slot(&self, _: &str, _: &str) -> bool {
        true
    }

    fn is_cluster(&self) -> bool {
        false
    }
}

/// What the store's replicas acknowledge: every count asked for (it has none).
fn acknowledged(replicas: Option<Replicas>) -> u32 {
    replicas.map_or(0, |r| r.count)
}

/// Runs `operation` on `key`'s hash at the store's next tick, as the store's one
/// request of the moment.
fn operate(
    state: &mut State,
    key: &MemoryKey<'_>,
    operation: impl FnOnce(&mut engine::Hash, &engine::Params, Time) -> Outcome,
) -> Outcome {
    let now = state.tick();
    let params = State::params(original_us(key));
    let mut hash = take_hash(state, key, now);
    let out = operation(&mut hash, &params, now);
    put_hash(state, key, hash);
    publish(state, key, &out);
    out
}

/// [`operate`] for a script on several keys (a lock set's, `keys` sharing their
/// options): each operation it ran publishes on its own key's channel, in order.
fn operate_set(
    state: &mut State,
    keys: &[MemoryKey<'_>],
    operation: impl FnOnce(&mut [engine::Hash], &engine::Params, Time) -> engine::SetOutcome,
) -> engine::SetOutcome {
    let now = state.tick();
    let params = State::params(keys.first().map_or((0, 0), original_us));
    let mut hashes: Vec<engine::Hash> = keys.iter().map(|key| take_hash(state, key, now)).collect();
    let out = operation(&mut hashes, &params, now);
    for (key, hash) in keys.iter().zip(hashes) {
        put_hash(state, key, hash);
    }
    for (i, run) in &out.runs {
        publish(state, &keys[*i], run);
    }
    out
}

/// `key`'s hash, out of the store (a new one when it has none), its expiry applied.
fn take_hash(state: &mut State, key: &MemoryKey<'_>, now: Time) -> engine::Hash {
    let mut hash = state.hashes.remove(key.hash).unwrap_or_default();
    hash.expire_if_due(now);
    hash
}

/// Stores `hash` back at `key`; none when it has no fields left.
fn put_hash(state: &mut State, key: &MemoryKey<'_>, hash: engine::Hash) {
    if hash.fields.is_empty() {
        state.kept.remove(key.hash);
    } else {
        state.hashes.insert(key.hash.to_owned(), hash);
    }
}

/// Publishes on `key`'s channel what the script published: an eviction or a
/// batch's grant first, a call-back to the readers last.
fn publish(state: &mut State, key: &MemoryKey<'_>, out: &Outcome) {
    if out.evicted {
        state.publish(key.channel, EVICTED);
    }
    if let Some(batch) = out.granted {
        state.publish(key.channel, &batch.to_string());
    }
    if let Some(wake) = out.published {
        state.publish(key.channel, &wake.to_string());
    }
    if out.recalled {
        state.publish(key.channel, CALL_BACK);
    }
}

fn original_us(key: &MemoryKey<'_>) -> (Time, Time) {
    let us = |ms: u64| Time::try_from(ms).unwrap_or(Time::MAX / 1000) * 1000;
    (us(key.original_ms.0), us(key.original_ms.1))
}

/// A token as the engine carries it: its two halves.
fn tok(token: &Token) -> Tok {
    let text = token.as_str();
    let half = |range: std::ops::Range<usize>| {
        text.get(range)
            .and_then(|digits| u64::from_str_radix(digits, 16).ok())
            .unwrap_or(0)
    };
    Tok::Holder(half(0..16), half(16..32))
}

/// An acquire script's reply as the Redis backend decodes it; the engine's retry
/// hints are microseconds, the scripts' whole milliseconds (at least one).
fn acquired(reply: Reply) -> Acquired {
    let hint = |us: Time| {
        let us = u64::try_from(us).unwrap_or(0);
        Duration::from_millis(us.div_ceil(1000).max(1))
    };
    let fence = |f: i64| u64::try_from(f).unwrap_or(0);
    match reply {
        Reply::Granted(f) => Acquired::Granted { fence: fence(f) },
        Reply::Refused(us, f) => Acquired::Refused {
            holds_for: hint(us),
            fence: fence(f),
            batch: None,
        },
        Reply::InLine(us, batch) => Acquired::Refused {
            holds_for: hint(us),
            fence: 0,
            batch: Some(batch.to_string()),
        },
        Reply::Lost | Reply::Int(_) | Reply::Downgraded(..) => Acquired::Lost,
    }
}

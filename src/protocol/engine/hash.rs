//! The lock's key: its fields, its expiry, the Redis commands the scripts use on
//! it, what must hold of it between scripts, and how it prints.

use std::collections::BTreeMap;
use std::fmt;

use super::*;

/// The lock's Redis key: its fields and its expiry (absolute, like PEXPIREAT).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hash {
    pub fields: BTreeMap<Field, Val>,
    /// When Redis deletes the key: it is gone once `now > expires`.
    pub expires: Option<Time>,
}

impl Hash {
    pub(super) fn get(&self, field: Field) -> Option<Val> {
        self.fields.get(&field).copied()
    }

    pub(super) fn int(&self, field: Field) -> Option<i64> {
        match self.get(field) {
            Some(Val::Int(n)) => Some(n),
            _ => None,
        }
    }

    pub(super) fn tok(&self, field: Field) -> Option<Tok> {
        match self.get(field) {
            Some(Val::Tok(t)) => Some(t),
            _ => None,
        }
    }

    pub(super) fn member(&self, field: Field) -> Option<(Tok, Time)> {
        match self.get(field) {
            Some(Val::Member(b, d)) => Some((b, d)),
            _ => None,
        }
    }

    pub(super) fn hset(&mut self, field: Field, value: Val) {
        self.fields.insert(field, value);
    }

    /// HDEL; the key (and its expiry) goes with its last field.
    pub(super) fn hdel(&mut self, fields: &[Field]) {
        for field in fields {
            self.fields.remove(field);
        }
        if self.fields.is_empty() {
            self.expires = None;
        }
    }

    /// PTTL: -2 for a missing key, -1 for one without expiry.
    pub(super) fn pttl(&self, now: Time) -> Time {
        match (self.fields.is_empty(), self.expires) {
            (true, _) => -2,
            (false, None) => -1,
            (false, Some(at)) => at - now,
        }
    }

    /// PEXPIRE: a no-op on a missing key.
    pub(super) fn pexpire(&mut self, now: Time, span: Time) {
        if !self.fields.is_empty() {
            self.expires = Some(now + span);
        }
    }

    /// `readers` counts the `r:` fields above `readers_gone` and `readers_until` is
    /// at least their deadlines (both absent: none); `queue_until` is at least every
    /// place's deadline and is there exactly while the queue is (`q:head`);
    /// `u:owner` and `u:until` come together, `u:until` equals the owner's `r:` field
    /// when both are there, `u:upgrade` and `u:others` are there only with
    /// `u:owner`, and `u:others` is at least every other counted reader's deadline
    /// (absent: there is none).
    pub fn summaries_agree(&self) -> bool {
        let gone = self.int(Field::ReadersGone).unwrap_or(0);
        // Each `r:` field above the cutoff, and each reader a live grant counts.
        let counted: Vec<Time> = self
            .fields
            .iter()
            .flat_map(|(k, v)| match (k, v) {
                (Field::R(_), Val::Int(d)) if *d > gone => vec![*d],
                (Field::Rg(b), Val::Int(d)) if *d > gone => {
                    vec![*d; self.int(Field::Rn(*b)).unwrap_or(0) as usize]
                }
                _ => vec![],
            })
            .collect();
        // A batch counts exactly the readers that name it.
        let batches_ok = self.fields.iter().all(|(k, v)| match (k, v) {
            (Field::Rn(b), Val::Int(n)) => {
                let named = self
                    .fields
                    .values()
                    .filter(|v| matches!(v, Val::Member(m, _) if m == b))
                    .count() as i64;
                *n > 0 && named == *n
            }
            _ => true,
        });
        // `shares` counts the readers of the grants that count.
        let shares: i64 = self
            .fields
            .iter()
            .filter_map(|(k, v)| match (k, v) {
                (Field::Rg(b), Val::Int(d)) if *d > gone => self.int(Field::Rn(*b)),
                _ => None,
            })
            .sum();
        let shares_ok = match self.int(Field::Shares) {
            None => shares == 0,
            Some(n) => n > 0 && n == shares,
        };
        let readers_ok = self.int(Field::Readers).unwrap_or(0) == counted.len() as i64
            && match self.int(Field::ReadersUntil) {
                None => counted.is_empty(),
                Some(until) => !counted.is_empty() && counted.iter().all(|&d| d <= until),
            };
        let places: Vec<Time> = self
            .fields
            .iter()
            .filter_map(|(k, v)| match (k, v) {
                (Field::Wait(_), Val::Place(deadline, _)) => Some(*deadline),
                _ => None,
            })
            .collect();
        let queue_ok = match self.int(Field::QueueUntil) {
            None => self.get(Field::QHead).is_none() && places.is_empty(),
            Some(until) => self.get(Field::QHead).is_some() && places.iter().all(|&d| d <= until),
        };
        let owner = self.tok(Field::UOwner);
        let others_bounded = |owner: Tok| {
            let others = self.int(Field::UOthers).unwrap_or(0);
            self.fields.iter().all(|(k, v)| match (k, v) {
                (Field::R(t), Val::Int(d)) if *t != owner && *d > gone => *d <= others,
                (Field::Rg(_), Val::Int(d)) if *d > gone => *d <= others,
                _ => true,
            })
        };
        let upgradable_ok = owner.is_some() == self.get(Field::UUntil).is_some()
            && (owner.is_some()
                || (self.get(Field::UUpgrade).is_none() && self.get(Field::UOthers).is_none()))
            && owner.is_none_or(|t| match self.int(Field::R(t)) {
                Some(read_until) => self.int(Field::UUntil) == Some(read_until),
                None => true,
            })
            && owner.is_none_or(others_bounded);
        readers_ok && queue_ok && upgradable_ok && batches_ok && shares_ok
    }

    /// What the fast paths (lua/fast_path.lua) take for granted without reading it:
    /// nothing of the line without `q:head` (no place, link, tail, `queue_until`, or
    /// batch waiting for its grant), `q:head` and `q:tail` together, nothing of an
    /// upgradable hold without `u:owner` (`u:until`, `u:upgrade`, `u:others`,
    /// `u:wanted`),
    /// and (with [`summaries_agree`](Self::summaries_agree)) `readers_until` bounding
    /// every counted hold.
    pub fn fast_paths_may_skip(&self) -> bool {
        let line = self.get(Field::QHead).is_some()
            || !self.fields.keys().any(|f| match f {
                Field::Wait(_)
                | Field::Wn(_)
                | Field::Wq(_)
                | Field::QTail
                | Field::QueueUntil
                | Field::Layout => true,
                Field::Rn(b) => self.get(Field::Rg(*b)).is_none(),
                _ => false,
            });
        let ends = self.get(Field::QHead).is_some() == self.get(Field::QTail).is_some();
        let upgradable = self.get(Field::UOwner).is_some()
            || [
                Field::UUntil,
                Field::UUpgrade,
                Field::UOthers,
                Field::UWanted,
            ]
            .iter()
            .all(|&f| self.get(f).is_none());
        line && ends && upgradable
    }

    /// The line's entries from `q:head` by the `wn:` links (live, withdrawn and
    /// lapsed alike), first first; it stops at a link that loops.
    pub fn line(&self) -> Vec<Tok> {
        let mut line = Vec::new();
        let mut at = self.tok(Field::QHead);
        while let Some(entry) = at.filter(|entry| !line.contains(entry)) {
            line.push(entry);
            at = self.tok(Field::Wn(entry));
        }
        line
    }

    /// Every entry with a place (`wait:`) or a queue time (`wq:`) is in the line:
    /// reached from `q:head` by the `wn:` links, which end at `q:tail` (releases
    /// grant only what heads the line, so an entry outside it is never served).
    pub fn line_is_linked(&self) -> bool {
        let mut reached = Vec::new();
        let mut at = self.tok(Field::QHead);
        while let Some(entry) = at {
            if reached.contains(&entry) {
                return false; // a cycle
            }
            reached.push(entry);
            at = self.tok(Field::Wn(entry));
        }
        let tail_ok = reached.last().copied() == self.tok(Field::QTail);
        tail_ok
            && self.fields.keys().all(|f| match f {
                Field::Wait(entry) | Field::Wq(entry) => reached.contains(entry),
                _ => true,
            })
    }

    /// When nothing that `token` left stops others any more, had its client died now:
    /// the end of its write hold, of its place in line (a queued writer's place, or
    /// its own place in a batch of readers, also once the batch is granted). None for
    /// a client with a counted read hold of its own (`r:`): that one ends with the
    /// readers' summary (at most one read lease after the last live reader's last
    /// renewal), or when it holds nothing at all.
    pub fn waiter_bound(&self, token: Tok, now: Time) -> Option<Time> {
        let gone = self.int(Field::ReadersGone).unwrap_or(0);
        if self
            .int(Field::R(token))
            .is_some_and(|d| d > gone && d > now)
        {
            return None;
        }
        let writer = (self.tok(Field::WOwner) == Some(token))
            .then(|| self.int(Field::WUntil))
            .flatten();
        let place = match self.get(Field::Wait(token)) {
            Some(Val::Place(deadline, _)) => Some(deadline),
            _ => None,
        };
        let member = self.member(Field::Rw(token)).map(|(_, own)| own);
        [writer, place, member].into_iter().flatten().max()
    }

    /// Lazy (and active) expiry: Redis drops the key once `now > expires`.
    pub fn expire_if_due(&mut self, now: Time) {
        if self.expires.is_some_and(|at| now > at) {
            *self = Hash::default();
        }
    }
}

impl fmt::Display for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.render(f, &|f, t| write!(f, "{t}"))
    }
}

/// How [`Hash::render`] writes a token.
pub type RenderTok<'a> = &'a dyn Fn(&mut fmt::Formatter<'_>, Tok) -> fmt::Result;

impl Hash {
    /// The fields and expiry, each token written by `tok` (the model checker names
    /// its clients).
    pub fn render(&self, f: &mut fmt::Formatter<'_>, tok: RenderTok<'_>) -> fmt::Result {
        if self.fields.is_empty() {
            return write!(f, "(no key)");
        }
        let mut first = true;
        for (field, value) in &self.fields {
            if !first {
                write!(f, " ")?;
            }
            first = false;
            let (name, about) = field.parts();
            write!(f, "{name}")?;
            if let Some(t) = about {
                tok(f, t)?;
            }
            match value {
                Val::Int(n) => write!(f, "={n}")?,
                Val::Tok(t) => {
                    write!(f, "=")?;
                    tok(f, *t)?;
                }
                Val::Place(deadline, lease) => write!(f, "={deadline}:{lease}")?,
                Val::Member(batch, deadline) => {
                    write!(f, "=")?;
                    tok(f, *batch)?;
                    write!(f, ":{deadline}")?;
                }
            }
        }
        if let Some(at) = self.expires {
            write!(f, " (key expires after {at})")?;
        }
        Ok(())
    }
}

impl fmt::Display for Wake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wake::Handed(t, fence) => write!(f, "{t}:{fence}"),
            Wake::All => write!(f, "*"),
            Wake::Readers => write!(f, "r"),
            Wake::Upgradable => write!(f, "u"),
            Wake::Batch(b) => write!(f, "{b}"),
        }
    }
}

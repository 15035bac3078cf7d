//! The lock hash and the hash-layout scripts of `lua/`, line for line in Rust.
//!
//! Each function below mirrors one Lua function or script of the same name; the
//! comments say which. Times are plain integers in one unit: ticks in the model
//! checker, milliseconds in the conformance test (there [`Params`] holds the real
//! 1000 ms of `set_expiry` and the real leases). The server's microsecond clock is
//! `now * us_per_unit`.

use std::collections::BTreeMap;
use std::fmt;

/// A point in time or a span, in the model's unit.
pub type Time = i64;

/// A token: 128 random bits in the crate, here a client number and a generation
/// (fresh per acquisition; see `system::fresh_token`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tok {
    pub client: u8,
    /// For a batch of readers ([`BATCH`]): its number.
    pub generation: u64,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", client_name(self.client), self.generation)
    }
}

/// `R1`, `R2`, ... for readers, `W1`, ... for writers and `U1`, ... for upgraders
/// is decided by the system model; the hash only knows numbers. `X` is the outsider
/// of stray releases.
pub fn client_name(client: u8) -> String {
    match client {
        OUTSIDER => "X".to_owned(),
        BATCH => "B".to_owned(),
        c if c >= 200 => format!("U{}", c - 199),
        c if c >= 100 => format!("W{}", c - 99),
        c => format!("R{}", c + 1),
    }
}

/// The client number of the outsider, a token that never holds anything.
pub const OUTSIDER: u8 = 255;
/// The "client" of a batch of readers waiting in line (`r#<number>` in the scripts):
/// `Tok { client: BATCH, generation: number }`.
pub const BATCH: u8 = 254;

/// `is_batch`: a batch of readers, not a writer's token.
pub fn is_batch(entry: Tok) -> bool {
    entry.client == BATCH
}

/// One field of the hash (holds.lua, queue.lua and hash_layout.lua list them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Field {
    WOwner,
    WUntil,
    /// `r:<token>`
    R(Tok),
    /// `readers`: how many `r:` fields count.
    Readers,
    /// `readers_until`: no counted reader's deadline is later.
    ReadersUntil,
    /// `readers_gone`: `r:` fields with a deadline up to this are leftovers.
    ReadersGone,
    /// `wait:<entry>`: a queued writer's place, or a batch of readers'.
    Wait(Tok),
    /// `wn:<entry>`: the next entry in line.
    Wn(Tok),
    /// `rw:<token>`: `"<batch>:<deadline>"`, the batch a reader waits in, or holds
    /// by, and the deadline of its own place in it.
    Rw(Tok),
    /// `rn:<batch>`: its readers that wait, or hold by its grant.
    Rn(Tok),
    /// `rg:<batch>`: a granted batch's deadline.
    Rg(Tok),
    /// `rseq`: the last batch number.
    Rseq,
    /// `shares`: how many counted readers hold by a batch's grant without an `r:`
    /// field of their own yet.
    Shares,
    QHead,
    QTail,
    /// `queue_until`: no place lives past it.
    QueueUntil,
    /// `layout`: a long text while a line exists (it keeps the hash a hashtable);
    /// here `Int(0)`.
    Layout,
    /// `u:owner`, `u:until`: the upgradable reader's token and deadline.
    UOwner,
    UUntil,
    /// `u:upgrade`: `"<deadline>:<first lease>"` while that reader waits to upgrade.
    UUpgrade,
    /// `u:wanted`: `1` once an upgradable acquire was refused by that reader's hold.
    UWanted,
    UOthers,
    Fence,
    Write,
    Wstamp,
    Read,
    Rstamp,
    OrigRead,
}

/// A field's value: the Lua scripts store strings; these are the shapes they use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Val {
    Int(i64),
    Tok(Tok),
    /// `"<deadline>:<first lease>"` (a queue place, or a pending upgrade)
    Place(Time, Time),
    /// `"<batch>:<deadline>"` (a reader's `rw:` field: its batch and its own place)
    Member(Tok, Time),
}

/// The lock's Redis key: its fields and its expiry (absolute, like PEXPIREAT).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hash {
    pub fields: BTreeMap<Field, Val>,
    /// When Redis deletes the key: it is gone once `now > expires`.
    pub expires: Option<Time>,
}

/// Script settings that the model checker scales down and the conformance test
/// sets to the crate's real values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Params {
    /// The `+ 1000` of `set_expiry`: how long an idle key outlives its deadlines.
    pub idle: Time,
    /// Server microseconds per unit of time (fencing tokens are `max(fence + 1, now_us)`).
    pub us_per_unit: i64,
    /// ARGV[2], ARGV[3]: leases of original-design readers and writers after their stamp.
    pub original_read: Time,
    pub original_write: Time,
}

/// What a message on the lock's channel says (`settle` in holds.lua).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Wake {
    /// `<token>:<fence>`: the lock was handed to that queued writer or upgrader.
    Handed(Tok, i64),
    /// `*`: everyone (but upgrade waiters).
    All,
    /// `r`: the readers, upgradable or not.
    Readers,
    /// `u`: the upgradable hold ended: the upgradable readers.
    Upgradable,
    /// `r#<number>`: that batch of readers holds (to other readers: `r`).
    Batch(Tok),
}

/// A script's reply, in the shapes of `src/redis_backend/scripts/mod.rs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reply {
    /// `{1, fence}` (0 for readers).
    Granted(i64),
    /// `{0, ms}` (readers) or `{0, ms, fence}` (writers): the retry hint and the
    /// lock's last fence (0 for readers).
    Refused(Time, i64),
    /// `{-1, 0}`: an upgrade whose upgradable hold is gone.
    Lost,
    /// `{0, ms, 0, batch}`: a reader refused, waiting in line in that batch.
    InLine(Time, Tok),
    /// `1` / `0` of release, renew, downgrade; the fence (or 0) of fenced_write.
    Int(i64),
}

/// One script run: the reply, the message it published, and what the model checker
/// wants to know besides (not visible to the crate).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub reply: Reply,
    pub published: Option<Wake>,
    /// The batch of readers the script granted (its message, published first).
    pub granted: Option<Tok>,
    /// acquire_write granted a hold that did not exist before (a new fencing token),
    /// to a new writer or as an upgrade.
    pub new_grant: bool,
    /// A waiting writer or upgrade, refused while other readers hold, called them
    /// back: `w`, published last.
    pub recalled: bool,
}

/// The live state a script works on: `s` in holds.lua.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Loaded {
    pub now: Time,
    pub now_us: i64,
    pub token: Tok,
    /// Field -> new value (`None`: deleted), written by `flush`.
    pub changes: BTreeMap<Field, Option<Val>>,
    pub fence: i64,
    pub nreaders: i64,
    pub readers_until: Time,
    pub gone: Time,
    pub head: Option<Tok>,
    pub tail: Option<Tok>,
    pub head_next: Option<Tok>,
    pub queue_until: Time,
    /// The token's counted read deadline (its own, or its batch's grant).
    pub mine: Option<Time>,
    /// The batch the token's reader holds by (counted or a leftover).
    pub grouped: Option<Tok>,
    /// The batch it waits in, and that batch's place (deadline, first lease).
    pub batch: Option<Tok>,
    pub batch_place: Option<(Time, Time)>,
    /// The deadline of the token's own place in its batch (its `rw:` field).
    pub member_until: Option<Time>,
    /// `shares`: counted readers that hold by a grant without an `r:` field yet.
    pub shares: i64,
    /// The batch this script granted.
    pub granted: Option<Tok>,
    pub leftover: bool,
    /// The token's place deadline.
    pub place: Option<Time>,
    pub linked: bool,
    pub writer: Option<(Tok, Time)>,
    pub original_writer_until: Option<Time>,
    pub original_reader_until: Option<Time>,
    /// The live upgradable reader and its deadline.
    pub upgradable: Option<Tok>,
    pub upgradable_until: Option<Time>,
    /// Its live pending upgrade: (deadline, first lease).
    pub upgrade: Option<(Time, Time)>,
    pub others_until: Time,
    pub freed_writer: bool,
    pub dequeued: bool,
    pub extended: bool,
    pub upgradable_ended: bool,
    pub upgrade_ended: bool,
    /// `s.h['write'] == s.h['wstamp']` as loaded.
    write_is_ours: bool,
    /// `s.h['u:upgrade'] ~= nil` as loaded.
    upgrade_was_stored: bool,
    /// `s.h['u:wanted'] ~= nil` as loaded.
    wanted_was_stored: bool,
}

/// Who holds and waits, as the scripts judge it (what a release by a stranger must
/// leave alone); not a script: the model checker's view.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct View {
    pub writer: Option<(Tok, Time)>,
    pub readers: BTreeMap<Tok, Time>,
    /// Tokens whose `r:` field (or batch grant) still counts, expired or not: their
    /// release lowers the count.
    pub counted: Vec<Tok>,
    /// Tokens with an `rw:` field: readers that wait in a batch or hold by its grant.
    pub members: Vec<Tok>,
    /// Live places, first in line first.
    pub queue: Vec<(Tok, Time)>,
    pub fence: i64,
    pub original_writer_until: Option<Time>,
    pub original_reader_until: Option<Time>,
    /// The live upgradable reader (also one of `readers`) and its deadline.
    pub upgradable: Option<(Tok, Time)>,
    /// Its live pending upgrade's deadline.
    pub upgrade: Option<Time>,
}

impl View {
    /// What a token holds or waits for, or a counted entry it left.
    pub fn owns(&self, token: Tok) -> bool {
        self.writer.is_some_and(|(owner, _)| owner == token)
            || self.counted.contains(&token)
            || self.members.contains(&token)
            || self.queue.iter().any(|&(t, _)| t == token)
    }
}

// ---- Redis commands on the key ------------------------------------------------

impl Hash {
    fn get(&self, field: Field) -> Option<Val> {
        self.fields.get(&field).copied()
    }

    fn int(&self, field: Field) -> Option<i64> {
        match self.get(field) {
            Some(Val::Int(n)) => Some(n),
            _ => None,
        }
    }

    fn tok(&self, field: Field) -> Option<Tok> {
        match self.get(field) {
            Some(Val::Tok(t)) => Some(t),
            _ => None,
        }
    }

    fn member(&self, field: Field) -> Option<(Tok, Time)> {
        match self.get(field) {
            Some(Val::Member(b, d)) => Some((b, d)),
            _ => None,
        }
    }

    fn hset(&mut self, field: Field, value: Val) {
        self.fields.insert(field, value);
    }

    /// HDEL; the key (and its expiry) goes with its last field.
    fn hdel(&mut self, fields: &[Field]) {
        for field in fields {
            self.fields.remove(field);
        }
        if self.fields.is_empty() {
            self.expires = None;
        }
    }

    /// PTTL: -2 for a missing key, -1 for one without expiry.
    fn pttl(&self, now: Time) -> Time {
        match (self.fields.is_empty(), self.expires) {
            (true, _) => -2,
            (false, None) => -1,
            (false, Some(at)) => at - now,
        }
    }

    /// PEXPIRE: a no-op on a missing key.
    fn pexpire(&mut self, now: Time, span: Time) {
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

    /// Every entry with a place (`wait:`) is in the line: reached from `q:head` by
    /// the `wn:` links, which end at `q:tail` (releases grant only what heads the
    /// line, so an entry outside it is never served).
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
                Field::Wait(entry) => reached.contains(entry),
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

// ---- helpers.lua ------------------------------------------------------------------

fn set(s: &mut Loaded, field: Field, value: Val) {
    s.changes.insert(field, Some(value));
}

fn del(s: &mut Loaded, field: Field) {
    s.changes.insert(field, None);
}

/// `fields`: one field as this script has left it so far.
fn field(h: &Hash, s: &Loaded, f: Field) -> Option<Val> {
    match s.changes.get(&f) {
        Some(changed) => *changed,
        None => h.get(f),
    }
}

/// `flush`: the deletions, then the writes.
fn flush(h: &mut Hash, s: &Loaded) {
    let deleted: Vec<Field> = s
        .changes
        .iter()
        .filter_map(|(&f, v)| v.is_none().then_some(f))
        .collect();
    if !deleted.is_empty() {
        h.hdel(&deleted);
    }
    for (&f, v) in &s.changes {
        if let Some(v) = v {
            h.hset(f, *v);
        }
    }
}

// ---- hash_layout.lua ----------------------------------------------------------------

/// `layout.original_holds`: original-design clients' holds; deletes stale stamps.
fn layout_original_holds(s: &mut Loaded, h: &Hash, p: &Params) {
    // `write` is ours while it equals `wstamp`; original holds are inclusive.
    if let Some(write) = h.int(Field::Write)
        && Some(write) != h.int(Field::Wstamp)
    {
        let deadline = write + p.original_write;
        if deadline >= s.now {
            s.original_writer_until = Some(deadline);
        } else {
            del(s, Field::Write);
            s.freed_writer = true;
        }
    }
    let mut reader_until = h.int(Field::OrigRead).unwrap_or(0);
    if let Some(read) = h.int(Field::Read)
        && Some(read) != h.int(Field::Rstamp)
    {
        reader_until = reader_until.max(read + p.original_read);
    }
    if reader_until > 0 && reader_until >= s.now {
        s.original_reader_until = Some(reader_until);
    } else {
        if h.get(Field::OrigRead).is_some() {
            del(s, Field::OrigRead);
        }
        if h.get(Field::Read).is_some() && s.nreaders == 0 {
            del(s, Field::Read);
            del(s, Field::Rstamp);
        }
    }
}

fn stamp_read(s: &mut Loaded) {
    set(s, Field::Read, Val::Int(s.now));
    set(s, Field::Rstamp, Val::Int(s.now));
    if let Some(until) = s.original_reader_until {
        set(s, Field::OrigRead, Val::Int(until));
    }
}

fn clear_read(s: &mut Loaded) {
    if s.original_reader_until.is_none() {
        del(s, Field::Read);
        del(s, Field::Rstamp);
    }
}

fn stamp_write(s: &mut Loaded) {
    let (owner, until) = s.writer.expect("a writer to stamp");
    set(s, Field::WOwner, Val::Tok(owner));
    set(s, Field::WUntil, Val::Int(until));
    set(s, Field::Write, Val::Int(s.now));
    set(s, Field::Wstamp, Val::Int(s.now));
}

fn clear_write(s: &mut Loaded) {
    if s.write_is_ours {
        del(s, Field::Write);
        del(s, Field::Wstamp);
    }
}

/// `layout.clear_all`: every hold ends (force release), original clients' too.
fn clear_all(s: &mut Loaded) {
    for field in [
        Field::Write,
        Field::Wstamp,
        Field::Read,
        Field::Rstamp,
        Field::OrigRead,
    ] {
        del(s, field);
    }
}

// ---- queue.lua ------------------------------------------------------------------------

fn queued(s: &Loaded) -> bool {
    s.head.is_some() && s.queue_until > s.now
}

fn set_head(s: &mut Loaded, token: Option<Tok>) {
    s.head = token;
    match token {
        Some(t) => set(s, Field::QHead, Val::Tok(t)),
        None => {
            (s.tail, s.queue_until) = (None, 0);
            del(s, Field::QHead);
            del(s, Field::QTail);
            del(s, Field::QueueUntil);
            del(s, Field::Layout);
        }
    }
}

/// `join_queue`: `entry` gets a place `ttl` from now, at the tail or (`linked`)
/// where it is; a batch's `place` keeps its latest deadline and longest first lease.
fn join_queue(
    s: &mut Loaded,
    entry: Tok,
    linked: bool,
    ttl: Time,
    first_lease: Time,
    place: Option<(Time, Time)>,
) -> Time {
    let (mut deadline, mut first_lease) = (s.now + ttl, first_lease);
    if let Some((d, l)) = place {
        (deadline, first_lease) = (deadline.max(d), first_lease.max(l));
    }
    set(s, Field::Wait(entry), Val::Place(deadline, first_lease));
    if !linked {
        match s.tail {
            Some(tail) => set(s, Field::Wn(tail), Val::Tok(entry)),
            None => {
                set_head(s, Some(entry));
                set(s, Field::Layout, Val::Int(0));
            }
        }
        s.tail = Some(entry);
        set(s, Field::QTail, Val::Tok(entry));
    }
    if deadline > s.queue_until {
        s.queue_until = deadline;
        set(s, Field::QueueUntil, Val::Int(deadline));
    }
    s.extended = true;
    deadline
}

fn leave_queue(s: &mut Loaded) {
    del(s, Field::Wait(s.token));
    s.place = None;
    s.dequeued = true;
}

fn unlink_head(s: &mut Loaded, next: Option<Tok>) {
    let head = s.head.expect("a head to unlink");
    del(s, Field::Wait(head));
    del(s, Field::Wn(head));
    if head == s.token {
        (s.place, s.linked) = (None, false);
    }
    set_head(s, next);
}

/// `first_in_line`: the first live entry, its first lease and its place's deadline.
fn first_in_line(h: &Hash, s: &mut Loaded) -> Option<(Tok, Time, Time)> {
    while let Some(head) = s.head {
        let place = field(h, s, Field::Wait(head));
        let next = match field(h, s, Field::Wn(head)) {
            Some(Val::Tok(t)) => Some(t),
            _ => None,
        };
        if let Some(Val::Place(deadline, first_lease)) = place {
            if deadline > s.now {
                s.head_next = next;
                return Some((head, first_lease, deadline));
            }
            s.dequeued = true;
            if is_batch(head) {
                del(s, Field::Rn(head)); // its readers' `rw:` fields now name nothing
            }
        }
        unlink_head(s, next);
    }
    None
}

fn serve_head(s: &mut Loaded) {
    let next = s.head_next;
    unlink_head(s, next);
}

// ---- holds.lua ------------------------------------------------------------------------

/// `end_upgrade`: the pending upgrade ends without the write hold.
fn end_upgrade(s: &mut Loaded) {
    if s.upgrade.is_some() || s.upgrade_was_stored {
        del(s, Field::UUpgrade);
        (s.upgrade, s.upgrade_ended) = (None, true);
    }
}

/// `end_upgradable`: the upgradable hold ends without becoming the write hold, and
/// its pending upgrade with it.
fn end_upgradable(s: &mut Loaded) {
    del(s, Field::UOwner);
    del(s, Field::UUntil);
    del(s, Field::UOthers);
    (s.upgradable, s.upgradable_until) = (None, None);
    s.upgradable_ended = true;
    end_upgrade(s);
}

/// `load(token)`: with `serve`, also the grant of a batch of readers that nothing
/// keeps out any more (`load(token, as_found)` with `as_found` false).
pub fn load(h: &mut Hash, p: &Params, now: Time, token: Tok) -> Loaded {
    load_as(h, p, now, token, true)
}

pub fn load_as(h: &mut Hash, p: &Params, now: Time, token: Tok, serve: bool) -> Loaded {
    h.expire_if_due(now);
    let mut s = Loaded {
        now,
        now_us: now * p.us_per_unit,
        token,
        changes: BTreeMap::new(),
        fence: h.int(Field::Fence).unwrap_or(0),
        nreaders: h.int(Field::Readers).unwrap_or(0),
        readers_until: h.int(Field::ReadersUntil).unwrap_or(0),
        gone: h.int(Field::ReadersGone).unwrap_or(0),
        head: h.tok(Field::QHead),
        tail: h.tok(Field::QTail),
        head_next: None,
        queue_until: h.int(Field::QueueUntil).unwrap_or(0),
        mine: None,
        grouped: None,
        batch: None,
        batch_place: None,
        member_until: None,
        shares: h.int(Field::Shares).unwrap_or(0),
        granted: None,
        leftover: false,
        place: None,
        linked: false,
        writer: None,
        original_writer_until: None,
        original_reader_until: None,
        upgradable: None,
        upgradable_until: None,
        upgrade: None,
        others_until: h.int(Field::UOthers).unwrap_or(0),
        freed_writer: false,
        dequeued: false,
        extended: false,
        upgradable_ended: false,
        upgrade_ended: false,
        write_is_ours: h.get(Field::Write) == h.get(Field::Wstamp),
        upgrade_was_stored: h.get(Field::UUpgrade).is_some(),
        wanted_was_stored: h.get(Field::UWanted).is_some(),
    };
    if let Some(owner) = h.tok(Field::WOwner) {
        let deadline = h.int(Field::WUntil).unwrap_or(0);
        if deadline > now {
            s.writer = Some((owner, deadline));
        } else {
            del(&mut s, Field::WOwner);
            del(&mut s, Field::WUntil);
            clear_write(&mut s);
            s.freed_writer = true;
        }
    }
    if s.nreaders > 0 && s.readers_until <= now {
        (s.gone, s.nreaders, s.readers_until) = (s.readers_until, 0, 0);
        let gone = s.gone;
        set(&mut s, Field::ReadersGone, Val::Int(gone));
        del(&mut s, Field::Readers);
        del(&mut s, Field::ReadersUntil);
        forget_shares(&mut s);
        sweep_leftovers(h, &mut s);
    }
    // The upgradable reader (its deadline is its `r:` field's) and its pending upgrade.
    if let Some(owner) = h.tok(Field::UOwner) {
        let deadline = h.int(Field::UUntil).unwrap_or(0);
        if deadline > now {
            (s.upgradable, s.upgradable_until) = (Some(owner), Some(deadline));
            if let Some(Val::Place(deadline, first_lease)) = h.get(Field::UUpgrade) {
                if deadline > now {
                    s.upgrade = Some((deadline, first_lease));
                } else {
                    end_upgrade(&mut s);
                }
            }
        } else {
            end_upgradable(&mut s);
        }
    }
    match h.int(Field::R(token)) {
        Some(mine) if mine > s.gone => s.mine = Some(mine),
        Some(_) => s.leftover = true,
        None => {}
    }
    if let Some(Val::Place(deadline, _)) = h.get(Field::Wait(token)) {
        s.place = Some(deadline);
    }
    s.linked = h.get(Field::Wn(token)).is_some() || s.head == Some(token) || s.tail == Some(token);
    // The batch the token's reader waits in, or holds by.
    if let Some((batch, own)) = h.member(Field::Rw(token)) {
        if let Some(deadline) = h.int(Field::Rg(batch)) {
            s.grouped = Some(batch);
            if deadline > s.gone {
                // Its share ends with the grant, or with its own place if that is earlier.
                s.mine = Some(deadline.min(own));
            }
        } else if let Some(Val::Place(deadline, first_lease)) = h.get(Field::Wait(batch)) {
            (s.batch, s.batch_place) = (Some(batch), Some((deadline, first_lease)));
            s.member_until = Some(own);
            if deadline <= now || own <= now {
                leave_batch(h, &mut s, batch, false); // its place lapsed
            }
        } else {
            del(&mut s, Field::Rw(token));
        }
    }
    layout_original_holds(&mut s, h, p);
    if serve {
        serve_readers(h, &mut s);
    }
    s
}

/// `sweep_leftovers`: the model's hashes are small, so HSCAN sees every field.
fn sweep_leftovers(h: &Hash, s: &mut Loaded) {
    let leftovers: Vec<Field> = h
        .fields
        .iter()
        .filter_map(|(&f, v)| match (f, v) {
            (Field::R(_), Val::Int(d)) if *d <= s.gone => Some(f),
            _ => None,
        })
        .collect();
    for f in leftovers {
        del(s, f);
    }
    let grants: Vec<Tok> = h
        .fields
        .iter()
        .filter_map(|(&f, v)| match (f, v) {
            (Field::Rg(b), Val::Int(d)) if *d <= s.gone => Some(b),
            _ => None,
        })
        .collect();
    for b in grants {
        del(s, Field::Rg(b));
        del(s, Field::Rn(b));
    }
}

/// `batches.drop_member`: `token`'s reader leaves `batch` (`granted`: it held by
/// its grant).
fn drop_member(h: &Hash, s: &mut Loaded, token: Tok, batch: Tok, granted: bool) {
    del(s, Field::Rw(token));
    let n = match field(h, s, Field::Rn(batch)) {
        Some(Val::Int(n)) => n,
        _ => 1,
    } - 1;
    if n > 0 {
        set(s, Field::Rn(batch), Val::Int(n));
    } else {
        del(s, Field::Rn(batch));
        if granted {
            del(s, Field::Rg(batch));
        } else {
            del(s, Field::Wait(batch));
            s.dequeued = true;
        }
    }
}

/// `batches.add_shares`: `shares` moves by `n`.
fn add_shares(s: &mut Loaded, n: i64) {
    s.shares += n;
    if s.shares > 0 {
        set(s, Field::Shares, Val::Int(s.shares));
    } else {
        del(s, Field::Shares);
    }
}

/// `batches.forget`: no share counts any more (every counted reader's hold ended).
fn forget_shares(s: &mut Loaded) {
    if s.shares > 0 {
        s.shares = 0;
        del(s, Field::Shares);
    }
}

/// `batches.leave`: the caller's reader leaves `batch` (`granted`: it held by its
/// grant, counted while `mine` is set).
fn leave_batch(h: &Hash, s: &mut Loaded, batch: Tok, granted: bool) {
    let token = s.token;
    drop_member(h, s, token, batch, granted);
    if granted {
        s.grouped = None;
        if s.mine.is_some() {
            add_shares(s, -1);
        }
    } else {
        (s.batch, s.batch_place, s.member_until) = (None, None, None);
    }
}

/// `wait_in_line`: the caller's plain reader waits in its batch, the tail's, or a
/// new one; returns the batch.
fn wait_in_line(h: &Hash, s: &mut Loaded, ttl: Time, first_lease: Time) -> Tok {
    // A hold it had expired: it ends here, so the batch's grant counts it once.
    if s.mine.is_some() {
        let token = s.token;
        drop_reader(h, s, token);
    } else if let Some(batch) = s.grouped {
        leave_batch(h, s, batch, true);
    } else if s.leftover {
        del(s, Field::R(s.token));
    }
    let (mut batch, mut place) = (s.batch, s.batch_place);
    if batch.is_none() {
        // The batch at the tail, if its place is live; else a new one (its name from
        // `rseq`).
        let mut count = None;
        if let Some(t) = s.tail.filter(|&t| is_batch(t))
            && let Some(Val::Place(d, l)) = field(h, s, Field::Wait(t))
            && d > s.now
        {
            (batch, place) = (Some(t), Some((d, l)));
            count = match field(h, s, Field::Rn(t)) {
                Some(Val::Int(n)) => Some(n),
                _ => None,
            };
        }
        if batch.is_none() {
            let last = match field(h, s, Field::Rseq) {
                Some(Val::Int(n)) => n,
                _ => 0,
            };
            let n = (last + 1).max(s.now_us);
            set(s, Field::Rseq, Val::Int(n));
            batch = Some(Tok {
                client: BATCH,
                generation: n as u64,
            });
        }
        let b = batch.expect("a batch");
        set(s, Field::Rn(b), Val::Int(count.unwrap_or(0) + 1));
    }
    let batch = batch.expect("a batch");
    let deadline = join_queue(s, batch, place.is_some(), ttl, first_lease, place);
    let longest = first_lease.max(place.map_or(0, |(_, l)| l));
    (s.batch, s.batch_place) = (Some(batch), Some((deadline, longest)));
    // Its own place: the batch's lives while any of its readers comes back.
    let own = s.now + ttl;
    s.member_until = Some(own);
    set(s, Field::Rw(s.token), Val::Member(batch, own));
    batch
}

/// `batches.drop_lapsed`: the shares of granted batches whose readers' own places
/// have lapsed end (a reader that died while it waited in line blocks nobody past
/// its place); the model's hashes are small, so HSCAN sees every field.
fn drop_lapsed_shares(h: &Hash, s: &mut Loaded) {
    if s.shares == 0 {
        return;
    }
    let members: Vec<(Tok, Tok, Time)> = h
        .fields
        .iter()
        .filter_map(|(&f, &v)| match (f, v) {
            (Field::Rw(t), Val::Member(b, own)) => Some((t, b, own)),
            _ => None,
        })
        .collect();
    for (token, batch, own) in members {
        if own <= s.now && token != s.token && !s.changes.contains_key(&Field::Rw(token)) {
            let granted = matches!(field(h, s, Field::Rg(batch)), Some(Val::Int(d)) if d > s.gone);
            if granted {
                drop_member(h, s, token, batch, true);
                add_shares(s, -1);
                drop_reader(h, s, token);
            }
        }
    }
}

/// `grant_batch`: every reader of `batch` (first in line) holds from now, counted,
/// until the first lease from now but never past the place.
fn grant_batch(h: &Hash, s: &mut Loaded, batch: Tok, first_lease: Time, place_deadline: Time) {
    let n = match field(h, s, Field::Rn(batch)) {
        Some(Val::Int(n)) => n,
        _ => 0,
    };
    serve_head(s);
    if n == 0 {
        return;
    }
    let deadline = (s.now + first_lease).min(place_deadline);
    s.nreaders += n;
    set(s, Field::Readers, Val::Int(s.nreaders));
    if deadline > s.readers_until {
        s.readers_until = deadline;
        set(s, Field::ReadersUntil, Val::Int(deadline));
    }
    if s.upgradable.is_some() && deadline > s.others_until {
        s.others_until = deadline;
        set(s, Field::UOthers, Val::Int(deadline));
    }
    set(s, Field::Rg(batch), Val::Int(deadline));
    add_shares(s, n);
    stamp_read(s);
    (s.extended, s.granted) = (true, Some(batch));
    if s.batch == Some(batch) {
        let own = s.member_until.unwrap_or(deadline);
        (s.grouped, s.mine) = (Some(batch), Some(deadline.min(own)));
        (s.batch, s.batch_place, s.member_until) = (None, None, None);
    }
}

/// `serve_readers`: the batch first in line goes when no writer (ours or an
/// original client's) and no pending upgrade keeps readers out.
fn serve_readers(h: &Hash, s: &mut Loaded) {
    let Some(head) = s.head else { return };
    if s.writer.is_some() || s.original_writer_until.is_some() || s.upgrade.is_some() {
        return;
    }
    let free = s.nreaders == 0 && s.original_reader_until.is_none();
    if !(is_batch(head) || free || s.dequeued) {
        return;
    }
    if let Some((first, first_lease, deadline)) = first_in_line(h, s)
        && is_batch(first)
    {
        grant_batch(h, s, first, first_lease, deadline);
    }
}

fn reading(s: &Loaded) -> bool {
    s.mine.is_some_and(|d| d > s.now)
}

fn writer_is(s: &Loaded, token: Tok) -> bool {
    s.writer.is_some_and(|(owner, _)| owner == token)
}

/// `original_beside`: an original-design client holds in a mode that conflicts with
/// our hold in mode `write`: it judged our stamp stale and entered.
fn original_beside(s: &Loaded, write: bool) -> bool {
    s.original_writer_until.is_some() || (write && s.original_reader_until.is_some())
}

fn is_free(s: &Loaded) -> bool {
    s.writer.is_none()
        && s.original_writer_until.is_none()
        && s.nreaders == 0
        && s.original_reader_until.is_none()
}

fn holds_until(s: &Loaded) -> Time {
    let readers = if s.nreaders > 0 { s.readers_until } else { 0 };
    [
        s.writer.map_or(0, |(_, until)| until),
        readers,
        s.original_writer_until.unwrap_or(0),
        s.original_reader_until.unwrap_or(0),
    ]
    .into_iter()
    .max()
    .unwrap_or(0)
}

fn retry_hint(s: &Loaded) -> Time {
    (holds_until(s) - s.now).max(1)
}

fn queue_hint(s: &Loaded) -> Time {
    (s.queue_until - s.now).max(1)
}

/// `hold_read`: never shortens the token's hold.
fn hold_read(h: &Hash, s: &mut Loaded, lease: Time) {
    let deadline = (s.now + lease).max(s.mine.unwrap_or(0));
    if let Some(batch) = s.grouped {
        leave_batch(h, s, batch, true);
    }
    if s.mine.is_none() {
        s.nreaders += 1;
        let n = s.nreaders;
        set(s, Field::Readers, Val::Int(n));
    }
    s.mine = Some(deadline);
    set(s, Field::R(s.token), Val::Int(deadline));
    if deadline > s.readers_until {
        s.readers_until = deadline;
        set(s, Field::ReadersUntil, Val::Int(deadline));
    }
    if s.upgradable == Some(s.token) {
        s.upgradable_until = Some(deadline);
        set(s, Field::UUntil, Val::Int(deadline));
    } else if s.upgradable.is_some() && deadline > s.others_until {
        s.others_until = deadline;
        set(s, Field::UOthers, Val::Int(deadline));
    }
    stamp_read(s);
    s.extended = true;
}

/// `hold_upgradable`: the token's read hold (just granted) becomes the upgradable one.
fn hold_upgradable(s: &mut Loaded, others_until: Time) {
    let mine = s.mine.expect("a read hold to make upgradable");
    (s.upgradable, s.upgradable_until) = (Some(s.token), Some(mine));
    set(s, Field::UOwner, Val::Tok(s.token));
    set(s, Field::UUntil, Val::Int(mine));
    if others_until > 0 {
        s.others_until = others_until;
        set(s, Field::UOthers, Val::Int(others_until));
    }
}

/// `hold_write`: never shortens the token's own write hold.
fn hold_write(s: &mut Loaded, token: Tok, lease: Time) {
    let deadline = match s.writer {
        Some((owner, until)) if owner == token => (s.now + lease).max(until),
        _ => s.now + lease,
    };
    s.writer = Some((token, deadline));
    stamp_write(s);
    s.extended = true;
}

fn grant_write(s: &mut Loaded, token: Tok, lease: Time) -> i64 {
    s.fence = (s.fence + 1).max(s.now_us);
    set(s, Field::Fence, Val::Int(s.fence));
    hold_write(s, token, lease);
    s.fence
}

/// `drop_reader(s, token)`: `token`'s counted read hold ends (with the upgradable
/// hold, if it was that).
fn drop_reader(h: &Hash, s: &mut Loaded, token: Tok) {
    if Some(token) == s.upgradable {
        end_upgradable(s);
    }
    del(s, Field::R(token));
    if token == s.token {
        if let Some(batch) = s.grouped {
            leave_batch(h, s, batch, true);
        }
        s.mine = None;
    }
    s.nreaders -= 1;
    if s.nreaders > 0 {
        set(s, Field::Readers, Val::Int(s.nreaders));
    } else {
        s.readers_until = 0;
        del(s, Field::Readers);
        del(s, Field::ReadersUntil);
        clear_read(s);
    }
}

fn drop_writer(s: &mut Loaded) {
    del(s, Field::WOwner);
    del(s, Field::WUntil);
    clear_write(s);
    s.writer = None;
    s.freed_writer = true;
}

/// `upgrade_ready`: the upgradable reader is the only reader left.
fn upgrade_ready(s: &Loaded) -> bool {
    s.upgradable.is_some()
        && (s.nreaders == 1 || s.others_until <= s.now)
        && s.original_reader_until.is_none()
        && s.writer.is_none()
        && s.original_writer_until.is_none()
}

/// `upgrade_to_write`: the upgradable reader becomes the writer, for `lease` but
/// never less than its read hold had left; returns the new fence.
fn upgrade_to_write(h: &Hash, s: &mut Loaded, lease: Time) -> i64 {
    let token = s.upgradable.expect("an upgradable reader");
    let read_until = s.upgradable_until.expect("its deadline");
    let others_until = s.others_until;
    del(s, Field::UOwner);
    del(s, Field::UUntil);
    del(s, Field::UOthers);
    if s.upgrade.is_some() || s.upgrade_was_stored {
        del(s, Field::UUpgrade);
    }
    if s.wanted_was_stored || s.changes.get(&Field::UWanted).is_some_and(Option::is_some) {
        del(s, Field::UWanted); // waiting upgradable readers now wait for the writer
    }
    (s.upgradable, s.upgradable_until, s.upgrade) = (None, None, None);
    drop_reader(h, s, token);
    if s.nreaders > 0 {
        // Only readers that expired without releasing are left: leftovers now.
        s.gone = s.gone.max(others_until);
        let gone = s.gone;
        set(s, Field::ReadersGone, Val::Int(gone));
        (s.nreaders, s.readers_until) = (0, 0);
        del(s, Field::Readers);
        del(s, Field::ReadersUntil);
        clear_read(s);
        forget_shares(s);
        sweep_leftovers(h, s);
    }
    grant_write(s, token, lease.max(read_until - s.now))
}

/// `refusal_fence`: at least the server time in µs, as every later fence is.
fn refusal_fence(s: &Loaded) -> i64 {
    s.fence.max(s.now_us)
}

fn set_expiry(h: &mut Hash, s: &Loaded, p: &Params) {
    let queue = if s.head.is_some() { s.queue_until } else { 0 };
    let needed = (holds_until(s).max(queue) - s.now).max(0);
    if h.pttl(s.now) < needed + p.idle / 2 {
        h.pexpire(s.now, needed + p.idle);
    }
}

/// `settle`: hands the lock to the upgrader waiting to upgrade once it is the last
/// reader, else a free lock to the first queued writer; writes the changes and
/// returns what it published (`u` only if an upgradable acquire was refused by the
/// hold that ended).
fn settle(h: &mut Hash, s: &mut Loaded, p: &Params) -> Published {
    if s.dequeued {
        first_in_line(h, s);
    }
    // A handed hold never outlives the place it was handed to.
    let mut handed = None;
    if let Some((deadline, first_lease)) = s.upgrade
        && upgrade_ready(s)
    {
        let token = s.upgradable.expect("an upgradable reader");
        let lease = first_lease.min(deadline - s.now);
        handed = Some(Wake::Handed(token, upgrade_to_write(h, s, lease)));
    } else {
        serve_readers(h, s);
        if is_free(s)
            && let Some((first, first_lease, deadline)) = first_in_line(h, s)
            && !is_batch(first)
        {
            serve_head(s);
            let lease = first_lease.min(deadline - s.now);
            handed = Some(Wake::Handed(first, grant_write(s, first, lease)));
        }
    }
    // An upgradable waiter was refused by the hold that ended: it is told below.
    let wanted = s.upgradable_ended && s.wanted_was_stored;
    if wanted {
        del(s, Field::UWanted);
    }
    flush(h, s);
    if s.extended {
        set_expiry(h, s, p);
    }
    let written = s.writer.is_some() || s.original_writer_until.is_some();
    let wake = if handed.is_some() {
        handed
    } else if s.granted.is_some() {
        None // the batch's message is the readers' 'r'
    } else if is_free(s) {
        (s.freed_writer || s.dequeued || s.upgrade_ended || wanted).then_some(Wake::All)
    } else if !written && (s.freed_writer || (s.head.is_none() && (s.dequeued || s.upgrade_ended)))
    {
        Some(Wake::Readers)
    } else if !written && wanted {
        Some(Wake::Upgradable)
    } else {
        None
    };
    Published {
        wake,
        granted: s.granted,
    }
}

/// What `settle` published: the batch it granted (if any), then its message.
#[derive(Clone, Copy)]
pub struct Published {
    wake: Option<Wake>,
    granted: Option<Tok>,
}

fn done(reply: Reply, published: Published) -> Outcome {
    Outcome {
        reply,
        published: published.wake,
        granted: published.granted,
        new_grant: false,
        recalled: false,
    }
}

/// A grant of a new write hold (a new fencing token).
fn new_grant(fence: i64, published: Published) -> Outcome {
    Outcome {
        reply: Reply::Granted(fence),
        published: published.wake,
        granted: published.granted,
        new_grant: true,
        recalled: false,
    }
}

// ---- the operation scripts --------------------------------------------------------

/// acquire_read.lua; `upgradable`: the upgradable hold; `intent_ttl` > 0: a plain
/// reader refused under writer preference waits in line that long.
#[allow(clippy::too_many_arguments)]
pub fn acquire_read(
    h: &mut Hash,
    p: &Params,
    now: Time,
    token: Tok,
    lease: Time,
    writer_preferred: bool,
    upgradable: bool,
    intent_ttl: Time,
) -> Outcome {
    let mut s = load(h, p, now, token);
    if reading(&s) {
        hold_read(h, &mut s, lease);
        let published = settle(h, &mut s, p);
        return done(Reply::Granted(0), published);
    }
    let written = s.writer.is_some() || s.original_writer_until.is_some();
    let mut first = if writer_preferred && queued(&s) {
        first_in_line(h, &mut s)
    } else {
        None
    };
    if first.is_some_and(|(f, _, _)| is_batch(f)) && !written && s.upgrade.is_none() {
        // A batch heads the line behind a place that just lapsed: it goes now.
        serve_readers(h, &mut s);
        if reading(&s) {
            hold_read(h, &mut s, lease);
            let published = settle(h, &mut s, p);
            return done(Reply::Granted(0), published);
        }
        first = if queued(&s) {
            first_in_line(h, &mut s)
        } else {
            None
        };
    }
    if written
        || first.is_some()
        || (writer_preferred && s.upgrade.is_some())
        || (upgradable && s.upgradable.is_some())
    {
        if upgradable && s.upgradable.is_some() && !s.wanted_was_stored {
            set(&mut s, Field::UWanted, Val::Int(1)); // so the end of that hold is announced
        }
        let batch = (intent_ttl > 0 && writer_preferred && !upgradable)
            .then(|| wait_in_line(h, &mut s, intent_ttl, intent_ttl.min(lease)));
        let published = settle(h, &mut s, p);
        let hint = if first.is_some() && !(s.writer.is_some() || s.original_writer_until.is_some())
        {
            queue_hint(&s)
        } else {
            retry_hint(&s)
        };
        let reply = match batch {
            Some(batch) => Reply::InLine(hint, batch),
            None => Reply::Refused(hint, 0),
        };
        return done(reply, published);
    }
    let others_until = if s.nreaders > 0 { s.readers_until } else { 0 };
    hold_read(h, &mut s, lease);
    if upgradable {
        hold_upgradable(&mut s, others_until);
    }
    let published = settle(h, &mut s, p);
    done(Reply::Granted(0), published)
}

/// acquire_write.lua; `intent_ttl` 0 never queues (try_write, try_upgrade);
/// `upgrade`: upgrades the token's upgradable hold.
pub fn acquire_write(
    h: &mut Hash,
    p: &Params,
    now: Time,
    token: Tok,
    lease: Time,
    intent_ttl: Time,
    upgrade: bool,
) -> Outcome {
    let mut s = load(h, p, now, token);
    if writer_is(&s, token) {
        hold_write(&mut s, token, lease);
        let published = settle(h, &mut s, p);
        return done(Reply::Granted(s.fence), published);
    }
    if upgrade || s.place.is_some() || s.linked {
        // A waiter's attempt: readers that died in line keep it out no longer than
        // their places (a new writer takes its place in line first).
        drop_lapsed_shares(h, &mut s);
    }
    if upgrade {
        if s.upgradable != Some(token) || original_beside(&s, false) {
            let published = settle(h, &mut s, p);
            return done(Reply::Lost, published);
        }
        if upgrade_ready(&s) {
            let fence = upgrade_to_write(h, &mut s, lease);
            let published = settle(h, &mut s, p);
            return new_grant(fence, published);
        }
        if intent_ttl > 0 {
            let deadline = s.now + intent_ttl;
            let first_lease = intent_ttl.min(lease);
            s.upgrade = Some((deadline, first_lease));
            set(&mut s, Field::UUpgrade, Val::Place(deadline, first_lease));
        }
        return refused(h, &mut s, p, intent_ttl, upgrade);
    }
    if is_free(&s) {
        let first = first_in_line(h, &mut s);
        if first.is_none_or(|(t, _, _)| t == token) {
            if first.is_some() {
                serve_head(&mut s);
            }
            let fence = grant_write(&mut s, token, lease);
            let published = settle(h, &mut s, p);
            return new_grant(fence, published);
        }
    }
    if intent_ttl > 0 {
        let linked = s.linked;
        s.place = Some(join_queue(
            &mut s,
            token,
            linked,
            intent_ttl,
            intent_ttl.min(lease),
            None,
        ));
        s.linked = true;
    }
    refused(h, &mut s, p, intent_ttl, upgrade)
}

/// acquire_write.lua `refused`: settles, and calls other readers back when the
/// writer (or upgrade) waits.
fn refused(h: &mut Hash, s: &mut Loaded, p: &Params, intent_ttl: Time, upgrade: bool) -> Outcome {
    let published = settle(h, s, p);
    // The upgradable reader's own hold is one of the readers.
    let recalled = intent_ttl > 0 && s.nreaders > i64::from(upgrade);
    Outcome {
        recalled,
        ..done(Reply::Refused(retry_hint(s), refusal_fence(s)), published)
    }
}

/// release.lua
pub fn release(h: &mut Hash, p: &Params, now: Time, token: Tok) -> Outcome {
    let mut s = load(h, p, now, token);
    let mut removed = 0;
    if writer_is(&s, token) {
        drop_writer(&mut s);
        removed = 1;
    } else if s.mine.is_some() {
        if reading(&s) {
            removed = 1;
        }
        drop_reader(h, &mut s, token);
    } else if s.leftover {
        del(&mut s, Field::R(token));
    }
    if let Some(batch) = s.grouped {
        leave_batch(h, &mut s, batch, true); // a share of a grant that expired uncounted
    }
    if s.place.is_some() {
        leave_queue(&mut s);
    }
    if let Some(batch) = s.batch {
        leave_batch(h, &mut s, batch, false);
    }
    let published = settle(h, &mut s, p);
    done(Reply::Int(removed), published)
}

/// force_release.lua: an operator ends every hold, whoever owns it; queued writers
/// keep their places and the fencing counter is kept.
pub fn force_release(h: &mut Hash, p: &Params, now: Time) -> Outcome {
    let operator = Tok {
        client: OUTSIDER,
        generation: 3,
    };
    let mut s = load_as(h, p, now, operator, false);
    let removed = s.nreaders;
    // Every `r:` field and every batch's grant goes, counted or not (the HSCAN pages).
    let readers: Vec<Field> = h
        .fields
        .keys()
        .flat_map(|&f| match f {
            Field::R(_) => vec![f],
            Field::Rg(b) => vec![f, Field::Rn(b)],
            _ => vec![],
        })
        .collect();
    for field in readers {
        h.fields.remove(&field);
    }
    del(&mut s, Field::Readers);
    del(&mut s, Field::ReadersUntil);
    del(&mut s, Field::ReadersGone);
    forget_shares(&mut s);
    if s.upgradable.is_some() {
        end_upgradable(&mut s);
    }
    let mut removed = removed;
    if s.writer.is_some() || s.original_writer_until.is_some() {
        removed += 1;
        s.freed_writer = true;
    }
    if s.original_reader_until.is_some() {
        removed += 1;
    }
    del(&mut s, Field::WOwner);
    del(&mut s, Field::WUntil);
    clear_all(&mut s);
    (s.nreaders, s.readers_until, s.gone, s.writer) = (0, 0, 0, None);
    (s.mine, s.leftover, s.grouped) = (None, false, None);
    (s.original_writer_until, s.original_reader_until) = (None, None);
    let published = settle(h, &mut s, p);
    done(Reply::Int(removed), published)
}

/// renew.lua; `write`: the mode of the hold the caller renews.
pub fn renew(h: &mut Hash, p: &Params, now: Time, token: Tok, lease: Time, write: bool) -> Outcome {
    let mut s = load(h, p, now, token);
    let mut renewed = 0;
    if original_beside(&s, write) {
        // The hold no longer excludes an original client: lost.
    } else if write && writer_is(&s, token) {
        hold_write(&mut s, token, lease);
        renewed = 1;
    } else if !write && reading(&s) {
        hold_read(h, &mut s, lease);
        renewed = 1;
    }
    let published = settle(h, &mut s, p);
    done(Reply::Int(renewed), published)
}

/// downgrade.lua; `from_write`: the write hold ('write'), else the upgradable one.
pub fn downgrade(
    h: &mut Hash,
    p: &Params,
    now: Time,
    token: Tok,
    lease: Time,
    from_write: bool,
) -> Outcome {
    let mut s = load(h, p, now, token);
    let mut ok = 0;
    if from_write && writer_is(&s, token) {
        drop_writer(&mut s);
        hold_read(h, &mut s, lease);
        ok = 1;
    } else if reading(&s) {
        if s.upgradable == Some(token) {
            end_upgradable(&mut s);
        }
        ok = 1;
    }
    let published = settle(h, &mut s, p);
    done(Reply::Int(ok), published)
}

/// fenced_write.lua with its user keys reduced to whether the write was made: the
/// reply is the fence when the token holds the write lock, else 0 (nothing written).
pub fn fenced_write(h: &mut Hash, p: &Params, now: Time, token: Tok) -> Outcome {
    let mut s = load(h, p, now, token);
    let holds = writer_is(&s, token) && !original_beside(&s, true);
    let published = settle(h, &mut s, p);
    done(Reply::Int(if holds { s.fence } else { 0 }), published)
}

/// What any script does on this state besides its own operation (expired entries
/// purged, a free lock handed to the first queued writer): a renewal by a stranger.
pub fn settle_only(h: &mut Hash, p: &Params, now: Time) -> Option<Wake> {
    let stranger = Tok {
        client: OUTSIDER,
        generation: 1,
    };
    renew(h, p, now, stranger, 1, true).published
}

/// Who holds and waits, read without changing the hash (like state.lua).
pub fn live_view(h: &Hash, p: &Params, now: Time) -> View {
    let mut copy = h.clone();
    copy.expire_if_due(now);
    let stranger = Tok {
        client: OUTSIDER,
        generation: 2,
    };
    let s = load(&mut copy, p, now, stranger);
    // What loading noted (expired entries purged, a batch of readers granted).
    flush(&mut copy, &s);
    let gone = s.gone;
    // A member's share counts while its batch's grant does; it holds until the
    // grant's deadline or its own place's, whichever is earlier.
    let grant = |t: Tok| match copy.member(Field::Rw(t)) {
        Some((b, own)) => copy
            .int(Field::Rg(b))
            .filter(|&d| d > gone)
            .map(|d| d.min(own)),
        _ => None,
    };
    let counted: BTreeMap<Tok, Time> = if s.nreaders > 0 {
        copy.fields
            .iter()
            .filter_map(|(f, v)| match (f, v) {
                (Field::R(t), Val::Int(d)) if *d > gone => Some((*t, *d)),
                (Field::Rw(t), _) => grant(*t).map(|d| (*t, d)),
                _ => None,
            })
            .collect()
    } else {
        BTreeMap::new()
    };
    let members = copy
        .fields
        .keys()
        .filter_map(|f| match f {
            Field::Rw(t) => Some(*t),
            _ => None,
        })
        .collect();
    let readers = counted
        .iter()
        .filter(|&(_, &d)| d > now)
        .map(|(&t, &d)| (t, d))
        .collect();
    let mut queue = Vec::new();
    let mut at = copy.tok(Field::QHead);
    while let Some(t) = at {
        if let Some(Val::Place(deadline, _)) = copy.get(Field::Wait(t))
            && deadline > now
        {
            queue.push((t, deadline));
        }
        at = copy.tok(Field::Wn(t));
    }
    View {
        writer: s.writer,
        readers,
        counted: counted.into_keys().collect(),
        members,
        queue,
        fence: s.fence,
        original_writer_until: s.original_writer_until,
        original_reader_until: s.original_reader_until,
        upgradable: s.upgradable.zip(s.upgradable_until),
        upgrade: s.upgrade.map(|(deadline, _)| deadline),
    }
}

// ---- display ------------------------------------------------------------------------

impl fmt::Display for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.fields.is_empty() {
            return write!(f, "(no key)");
        }
        let mut first = true;
        for (field, value) in &self.fields {
            if !first {
                write!(f, " ")?;
            }
            first = false;
            match field {
                Field::WOwner => write!(f, "w:owner")?,
                Field::WUntil => write!(f, "w:until")?,
                Field::R(t) => write!(f, "r:{t}")?,
                Field::Readers => write!(f, "readers")?,
                Field::ReadersUntil => write!(f, "readers_until")?,
                Field::ReadersGone => write!(f, "readers_gone")?,
                Field::Wait(t) => write!(f, "wait:{t}")?,
                Field::Wn(t) => write!(f, "wn:{t}")?,
                Field::Rw(t) => write!(f, "rw:{t}")?,
                Field::Rn(t) => write!(f, "rn:{t}")?,
                Field::Rg(t) => write!(f, "rg:{t}")?,
                Field::Rseq => write!(f, "rseq")?,
                Field::Shares => write!(f, "shares")?,
                Field::QHead => write!(f, "q:head")?,
                Field::QTail => write!(f, "q:tail")?,
                Field::QueueUntil => write!(f, "queue_until")?,
                Field::UOwner => write!(f, "u:owner")?,
                Field::UUntil => write!(f, "u:until")?,
                Field::UUpgrade => write!(f, "u:upgrade")?,
                Field::UWanted => write!(f, "u:wanted")?,
                Field::Layout => write!(f, "layout")?,
                Field::UOthers => write!(f, "u:others")?,
                Field::Fence => write!(f, "fence")?,
                Field::Write => write!(f, "write")?,
                Field::Wstamp => write!(f, "wstamp")?,
                Field::Read => write!(f, "read")?,
                Field::Rstamp => write!(f, "rstamp")?,
                Field::OrigRead => write!(f, "orig:read")?,
            }
            match value {
                Val::Int(n) => write!(f, "={n}")?,
                Val::Tok(t) => write!(f, "={t}")?,
                Val::Place(deadline, lease) => write!(f, "={deadline}:{lease}")?,
                Val::Member(batch, deadline) => write!(f, "={batch}:{deadline}")?,
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

// ---- the original design's scripts (docs/ORIGINAL_DESIGN.md) -------------------------

/// An original-design client's acquire (cluster version), with the caller's clock:
/// a reader needs `write` absent or stale by the write timeout, a writer also `read`
/// absent or stale by the read timeout; then it stamps its field and resets the
/// whole key's TTL to `key_ttl`. True when acquired (the stamp is its proof).
pub fn original_acquire(h: &mut Hash, p: &Params, now: Time, write: bool, key_ttl: Time) -> bool {
    h.expire_if_due(now);
    let stale = |field, timeout| h.int(field).is_none_or(|stamp| now - stamp > timeout);
    let free =
        stale(Field::Write, p.original_write) && (!write || stale(Field::Read, p.original_read));
    if free {
        let field = if write { Field::Write } else { Field::Read };
        h.hset(field, Val::Int(now));
        h.pexpire(now, key_ttl);
    }
    free
}

/// An original-design client's release: deletes its field if it still holds its stamp.
pub fn original_release(h: &mut Hash, now: Time, write: bool, stamp: Time) -> bool {
    h.expire_if_due(now);
    let field = if write { Field::Write } else { Field::Read };
    let mine = h.int(field) == Some(stamp);
    if mine {
        h.hdel(&[field]);
    }
    mine
}

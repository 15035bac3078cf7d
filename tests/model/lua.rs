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
    pub generation: u8,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", client_name(self.client), self.generation)
    }
}

/// `R1`, `R2`, ... for readers and `W1`, ... for writers is decided by the system
/// model; the hash only knows numbers. `X` is the outsider of stray releases.
pub fn client_name(client: u8) -> String {
    match client {
        OUTSIDER => "X".to_owned(),
        c if c >= 100 => format!("W{}", c - 99),
        c => format!("R{}", c + 1),
    }
}

/// The client number of the outsider, a token that never holds anything.
pub const OUTSIDER: u8 = 255;

/// One field of the hash (prelude.lua lists them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Field {
    WOwner,
    WUntil,
    /// `r:<token>`
    R(Tok),
    /// `wait:<token>`
    Wait(Tok),
    Wseq,
    Fence,
    Write,
    Wstamp,
    Read,
    Rstamp,
    OrigRead,
    /// `readers`: how many `r:` fields there are.
    Readers,
    /// `queue_until`: the latest deadline among the `wait:` fields.
    QueueUntil,
}

/// A field's value: the Lua scripts store strings; these are the shapes they use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Val {
    Int(i64),
    Tok(Tok),
    /// `"<seq>:<deadline>"`
    Wait(i64, Time),
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

/// What a wake-up message names (`wake` in prelude.lua).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Wake {
    /// The first queued writer's token.
    Writer(Tok),
    /// `*`: everyone.
    All,
    /// `r`: the readers.
    Readers,
}

/// A script's reply, in the shapes of `src/scripts.rs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reply {
    /// `{1, fence}` (0 for readers).
    Granted(i64),
    /// `{0, ms}`: the retry hint.
    Refused(Time),
    /// `1` / `0` of release, renew, downgrade; the fence (or 0) of fenced_write.
    Int(i64),
}

/// One script run: the reply, the message it published, and what the model checker
/// wants to know besides (not visible to the crate).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub reply: Reply,
    pub published: Option<Wake>,
    /// acquire_write granted a hold that did not exist before (a new fencing token).
    pub new_grant: bool,
}

/// A queued writer (`s.intents` entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Intent {
    pub token: Tok,
    pub seq: i64,
    pub deadline: Time,
}

/// The live state a script works on: `s` in prelude.lua.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Loaded {
    pub now: Time,
    pub now_us: i64,
    pub readers: BTreeMap<Tok, Time>,
    pub nreaders: i64,
    pub intents: Vec<Intent>,
    pub freed: bool,
    pub freed_writer: bool,
    /// A queued writer left (withdrawn or lapsed).
    pub dequeued: bool,
    pub fence: i64,
    pub writer: Option<(Tok, Time)>,
    pub original_writer_until: Option<Time>,
    pub original_reader_until: Option<Time>,
}

impl Loaded {
    fn writer_is(&self, token: Tok) -> bool {
        self.writer.is_some_and(|(owner, _)| owner == token)
    }

    /// What a token holds or waits for, as the scripts judge it.
    pub fn owns(&self, token: Tok) -> bool {
        self.writer_is(token)
            || self.readers.contains_key(&token)
            || self.intents.iter().any(|i| i.token == token)
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

    fn hincrby(&mut self, field: Field) -> i64 {
        let n = self.int(field).unwrap_or(0) + 1;
        self.hset(field, Val::Int(n));
        n
    }

    /// PEXPIRE: a no-op on a missing key.
    fn pexpire(&mut self, now: Time, span: Time) {
        if !self.fields.is_empty() {
            self.expires = Some(now + span);
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

    /// `readers` counts the `r:` fields and `queue_until` is the latest `wait:`
    /// deadline (both absent: none).
    pub fn summaries_agree(&self) -> bool {
        let readers = self
            .fields
            .keys()
            .filter(|k| matches!(k, Field::R(_)))
            .count();
        let queue_until = self
            .fields
            .values()
            .filter_map(|v| match v {
                Val::Wait(_, deadline) => Some(*deadline),
                _ => None,
            })
            .max();
        self.int(Field::Readers).unwrap_or(0) == readers as i64
            && self.int(Field::QueueUntil) == queue_until
    }

    /// Lazy (and active) expiry: Redis drops the key once `now > expires`.
    pub fn expire_if_due(&mut self, now: Time) {
        if self.expires.is_some_and(|at| now > at) {
            *self = Hash::default();
        }
    }
}

// ---- prelude.lua ----------------------------------------------------------------

/// `count_readers`: a zero count is no field.
fn count_readers(h: &mut Hash, n: i64) {
    if n > 0 {
        h.hset(Field::Readers, Val::Int(n));
    } else {
        h.hdel(&[Field::Readers]);
    }
}

/// `latest_intent` (0: nobody queues).
fn latest_intent(s: &Loaded) -> Time {
    s.intents.iter().map(|i| i.deadline).max().unwrap_or(0)
}

/// `mark_queue`: stores `queue_until` after the queue changed.
fn mark_queue(h: &mut Hash, s: &Loaded) {
    match latest_intent(s) {
        0 => h.hdel(&[Field::QueueUntil]),
        t => h.hset(Field::QueueUntil, Val::Int(t)),
    }
}

/// `load()` with the hash layout's `layout.original_holds`: reads the hash, deletes
/// every expired entry, returns the live state.
pub fn load(h: &mut Hash, p: &Params, now: Time) -> Loaded {
    h.expire_if_due(now);
    let mut s = Loaded {
        now,
        now_us: now * p.us_per_unit,
        readers: BTreeMap::new(),
        nreaders: 0,
        intents: Vec::new(),
        freed: false,
        freed_writer: false,
        dequeued: false,
        fence: h.int(Field::Fence).unwrap_or(0),
        writer: None,
        original_writer_until: None,
        original_reader_until: None,
    };
    let mut stale = Vec::new();
    for (&field, &value) in &h.fields {
        match (field, value) {
            (Field::R(tok), Val::Int(deadline)) => {
                if deadline > now {
                    s.readers.insert(tok, deadline);
                    s.nreaders += 1;
                } else {
                    stale.push(field);
                    s.freed = true;
                }
            }
            (Field::Wait(tok), Val::Wait(seq, deadline)) => {
                if deadline > now {
                    s.intents.push(Intent {
                        token: tok,
                        seq,
                        deadline,
                    });
                } else {
                    stale.push(field);
                    s.dequeued = true;
                }
            }
            _ => {}
        }
    }
    s.intents.sort_by_key(|i| i.seq);

    let mut expired_writer = false;
    if let Some(Val::Tok(owner)) = h.get(Field::WOwner) {
        let deadline = h.int(Field::WUntil).unwrap_or(0);
        if deadline > now {
            s.writer = Some((owner, deadline));
        } else {
            stale.extend([Field::WOwner, Field::WUntil]);
            (s.freed, s.freed_writer, expired_writer) = (true, true, true);
        }
    }
    layout_original_holds(&mut s, h, p, &mut stale);

    if !stale.is_empty() {
        h.hdel(&stale);
    }
    if expired_writer {
        clear_write(h);
    }
    if s.nreaders != h.int(Field::Readers).unwrap_or(0) {
        count_readers(h, s.nreaders);
    }
    if latest_intent(&s) != h.int(Field::QueueUntil).unwrap_or(0) {
        mark_queue(h, &s);
    }
    s
}

/// What `quick` returns: the reader paths may decide in constant time.
struct Quick {
    writer: Option<Tok>,
    writer_until: Time,
    queue_until: Option<Time>,
    readers: i64,
    /// The deadline of the token's `r:` field.
    mine: Option<Time>,
    read_stamp: bool,
    fence: i64,
    /// How many of the fields it read are there.
    found: usize,
}

/// `no_readers_nor_queue`: besides what `q` shows, no reader, queue or stamp of one,
/// and no field `quick` did not read (HLEN).
fn no_readers_nor_queue(h: &Hash, q: &Quick) -> bool {
    q.readers == 0
        && q.mine.is_none()
        && !q.read_stamp
        && q.queue_until.is_none()
        && h.fields.len() == q.found
}

/// `quick`: `None` when original-design clients left a trace (a `write` stamp not
/// ours, `orig:read`, a `read` stamp not ours).
fn quick(h: &mut Hash, now: Time, token: Tok) -> Option<Quick> {
    h.expire_if_due(now);
    if h.int(Field::Write) != h.int(Field::Wstamp)
        || h.get(Field::OrigRead).is_some()
        || h.int(Field::Read) != h.int(Field::Rstamp)
    {
        return None;
    }
    let found = [
        Field::Write,
        Field::Wstamp,
        Field::OrigRead,
        Field::Read,
        Field::Rstamp,
        Field::WOwner,
        Field::WUntil,
        Field::QueueUntil,
        Field::Readers,
        Field::R(token),
        Field::Fence,
        Field::Wseq,
    ]
    .into_iter()
    .filter(|&field| h.get(field).is_some())
    .count();
    Some(Quick {
        writer: match h.get(Field::WOwner) {
            Some(Val::Tok(owner)) => Some(owner),
            _ => None,
        },
        writer_until: h.int(Field::WUntil).unwrap_or(0),
        queue_until: h.int(Field::QueueUntil),
        readers: h.int(Field::Readers).unwrap_or(0),
        mine: h.int(Field::R(token)),
        read_stamp: h.get(Field::Read).is_some(),
        fence: h.int(Field::Fence).unwrap_or(0),
        found,
    })
}

/// `outlive`: the key outlives a hold of `lease` by at least `idle / 2`; when it
/// would not, its TTL becomes `lease + idle`. Never shortened.
fn outlive(h: &mut Hash, p: &Params, now: Time, lease: Time, created: bool) {
    if created || h.pttl(now) < lease + p.idle / 2 {
        h.pexpire(now, lease + p.idle);
    }
}

/// `layout.clear_write`: our writer's stamp goes, unless an original writer's stamp
/// replaced it.
fn clear_write(h: &mut Hash) {
    if h.int(Field::Write) == h.int(Field::Wstamp) {
        h.hdel(&[Field::Write, Field::Wstamp]);
    }
}

/// `layout.original_holds` of the hash layout: original-design clients' holds.
fn layout_original_holds(s: &mut Loaded, h: &Hash, p: &Params, stale: &mut Vec<Field>) {
    // `write` is ours while it equals `wstamp`; original holds are inclusive.
    if let Some(write) = h.int(Field::Write)
        && Some(write) != h.int(Field::Wstamp)
    {
        let deadline = write + p.original_write;
        if deadline >= s.now {
            s.original_writer_until = Some(deadline);
        } else {
            stale.push(Field::Write);
            s.freed = true;
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
            stale.push(Field::OrigRead);
        }
        if h.get(Field::Read).is_some() && s.nreaders == 0 {
            stale.extend([Field::Read, Field::Rstamp]);
        }
    }
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
    let mut t = [
        s.writer.map_or(0, |(_, until)| until),
        s.original_writer_until.unwrap_or(0),
        s.original_reader_until.unwrap_or(0),
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    for &deadline in s.readers.values() {
        t = t.max(deadline);
    }
    t
}

fn retry_hint(s: &Loaded) -> Time {
    (holds_until(s) - s.now).max(1)
}

fn queue_hint(s: &Loaded) -> Time {
    (latest_intent(s) - s.now).max(1)
}

fn set_expiry(h: &mut Hash, s: &Loaded, p: &Params) {
    let t = holds_until(s).max(latest_intent(s));
    h.pexpire(s.now, (t - s.now).max(0) + p.idle);
}

fn stamp_read(h: &mut Hash, s: &Loaded) {
    if let Some(until) = s.original_reader_until {
        h.hset(Field::OrigRead, Val::Int(until));
    }
    h.hset(Field::Read, Val::Int(s.now));
    h.hset(Field::Rstamp, Val::Int(s.now));
}

fn hold_read(h: &mut Hash, s: &mut Loaded, token: Tok, lease: Time) {
    if !s.readers.contains_key(&token) {
        s.nreaders += 1;
        count_readers(h, s.nreaders);
    }
    s.readers.insert(token, s.now + lease);
    h.hset(Field::R(token), Val::Int(s.now + lease));
    stamp_read(h, s);
}

fn hold_write(h: &mut Hash, s: &mut Loaded, token: Tok, lease: Time) {
    s.writer = Some((token, s.now + lease));
    h.hset(Field::WOwner, Val::Tok(token));
    h.hset(Field::WUntil, Val::Int(s.now + lease));
    h.hset(Field::Write, Val::Int(s.now)); // layout.stamp_write
    h.hset(Field::Wstamp, Val::Int(s.now));
}

fn drop_reader(h: &mut Hash, s: &mut Loaded, token: Tok) {
    h.hdel(&[Field::R(token)]);
    s.readers.remove(&token);
    s.nreaders -= 1;
    count_readers(h, s.nreaders);
    if s.nreaders == 0 && s.original_reader_until.is_none() {
        h.hdel(&[Field::Read, Field::Rstamp]); // layout.clear_read
    }
    s.freed = true;
}

fn drop_writer(h: &mut Hash, s: &mut Loaded) {
    h.hdel(&[Field::WOwner, Field::WUntil]);
    clear_write(h);
    s.writer = None;
    (s.freed, s.freed_writer) = (true, true);
}

fn drop_intent(h: &mut Hash, s: &mut Loaded, token: Tok) -> bool {
    let Some(i) = s.intents.iter().position(|i| i.token == token) else {
        return false;
    };
    s.intents.remove(i);
    h.hdel(&[Field::Wait(token)]);
    mark_queue(h, s);
    s.dequeued = true;
    true
}

fn wake(s: &Loaded) -> Option<Wake> {
    if !(s.freed || s.dequeued) {
        return None;
    }
    if is_free(s) {
        Some(
            s.intents
                .first()
                .map_or(Wake::All, |i| Wake::Writer(i.token)),
        )
    } else if s.writer.is_none()
        && s.original_writer_until.is_none()
        && (s.freed_writer || (s.dequeued && s.intents.is_empty()))
    {
        Some(Wake::Readers)
    } else {
        None
    }
}

fn done(reply: Reply, published: Option<Wake>) -> Outcome {
    Outcome {
        reply,
        published,
        new_grant: false,
    }
}

// ---- the operation scripts --------------------------------------------------------

/// acquire_read.lua
pub fn acquire_read(
    h: &mut Hash,
    p: &Params,
    now: Time,
    token: Tok,
    lease: Time,
    writer_preferred: bool,
) -> Outcome {
    if let Some(q) = quick(h, now, token) {
        let held = q.mine.is_some_and(|until| until > now);
        if q.writer.is_some() {
            if q.writer_until > now && !held {
                return done(Reply::Refused(q.writer_until - now), None);
            }
        } else if let Some(until) = q.queue_until.filter(|_| writer_preferred && !held) {
            if until > now {
                return done(Reply::Refused(until - now), None);
            }
        } else {
            h.hset(Field::R(token), Val::Int(now + lease));
            h.hset(Field::Read, Val::Int(now));
            h.hset(Field::Rstamp, Val::Int(now));
            if q.mine.is_none() {
                h.hset(Field::Readers, Val::Int(q.readers + 1));
            }
            outlive(h, p, now, lease, q.found == 0);
            return done(Reply::Granted(0), None);
        }
    }
    let mut s = load(h, p, now);
    let held = s.readers.contains_key(&token);
    let blocked = s.writer.is_some()
        || s.original_writer_until.is_some()
        || (writer_preferred && !s.intents.is_empty());
    if blocked && !held {
        set_expiry(h, &s, p);
        let hint = if s.writer.is_some() || s.original_writer_until.is_some() {
            retry_hint(&s)
        } else {
            queue_hint(&s)
        };
        return done(Reply::Refused(hint), wake(&s));
    }
    hold_read(h, &mut s, token, lease);
    set_expiry(h, &s, p);
    done(Reply::Granted(0), wake(&s))
}

/// acquire_write.lua; `intent_ttl` 0 never queues (try_write).
pub fn acquire_write(
    h: &mut Hash,
    p: &Params,
    now: Time,
    token: Tok,
    lease: Time,
    intent_ttl: Time,
) -> Outcome {
    if let Some(q) = quick(h, now, token)
        && q.writer.is_none()
        && no_readers_nor_queue(h, &q)
    {
        let fence = (q.fence + 1).max(now * p.us_per_unit);
        h.hset(Field::Fence, Val::Int(fence));
        h.hset(Field::WOwner, Val::Tok(token));
        h.hset(Field::WUntil, Val::Int(now + lease));
        h.hset(Field::Write, Val::Int(now));
        h.hset(Field::Wstamp, Val::Int(now));
        h.pexpire(now, lease + p.idle);
        return Outcome {
            reply: Reply::Granted(fence),
            published: None,
            new_grant: true,
        };
    }
    let mut s = load(h, p, now);
    if s.writer_is(token) {
        set_expiry(h, &s, p);
        return done(Reply::Granted(s.fence), wake(&s));
    }
    let first = s.intents.first().copied();
    if !is_free(&s) || first.is_some_and(|i| i.token != token) {
        if intent_ttl > 0 {
            let seq = match s.intents.iter_mut().find(|i| i.token == token) {
                Some(intent) => {
                    intent.deadline = now + intent_ttl;
                    intent.seq
                }
                None => {
                    let seq = h.hincrby(Field::Wseq);
                    s.intents.push(Intent {
                        token,
                        seq,
                        deadline: now + intent_ttl,
                    });
                    seq
                }
            };
            h.hset(Field::Wait(token), Val::Wait(seq, now + intent_ttl));
            mark_queue(h, &s);
        }
        set_expiry(h, &s, p);
        return done(Reply::Refused(retry_hint(&s)), wake(&s));
    }
    drop_intent(h, &mut s, token);
    let fence = (s.fence + 1).max(s.now_us);
    h.hset(Field::Fence, Val::Int(fence));
    hold_write(h, &mut s, token, lease);
    set_expiry(h, &s, p);
    Outcome {
        reply: Reply::Granted(fence),
        published: None,
        new_grant: true,
    }
}

/// release.lua
pub fn release(h: &mut Hash, p: &Params, now: Time, token: Tok) -> Outcome {
    if let Some(q) = quick(h, now, token)
        && q.mine.is_some_and(|until| until > now)
    {
        if q.readers > 1 {
            h.hdel(&[Field::R(token)]);
            h.hset(Field::Readers, Val::Int(q.readers - 1));
            return done(Reply::Int(1), None);
        }
        if q.writer.is_none() && q.queue_until.is_none() && h.fields.len() == q.found {
            h.hdel(&[Field::R(token), Field::Readers, Field::Read, Field::Rstamp]);
            if q.found > 4 {
                h.pexpire(now, p.idle);
            }
            return done(Reply::Int(1), None);
        }
    }
    if let Some(q) = quick(h, now, token)
        && q.writer == Some(token)
        && q.writer_until > now
        && no_readers_nor_queue(h, &q)
    {
        h.hdel(&[Field::WOwner, Field::WUntil, Field::Write, Field::Wstamp]);
        h.pexpire(now, p.idle);
        return done(Reply::Int(1), Some(Wake::All));
    }
    let mut s = load(h, p, now);
    let mut removed = 0;
    if s.writer_is(token) {
        drop_writer(h, &mut s);
        removed = 1;
    } else if s.readers.contains_key(&token) {
        drop_reader(h, &mut s, token);
        removed = 1;
    }
    drop_intent(h, &mut s, token);
    set_expiry(h, &s, p);
    done(Reply::Int(removed), wake(&s))
}

/// renew.lua; `write`: the mode of the hold the caller renews.
pub fn renew(h: &mut Hash, p: &Params, now: Time, token: Tok, lease: Time, write: bool) -> Outcome {
    let mut s = load(h, p, now);
    let mut renewed = 0;
    if original_beside(&s, write) {
        // The hold no longer excludes an original client: lost.
    } else if write && s.writer_is(token) {
        hold_write(h, &mut s, token, lease);
        renewed = 1;
    } else if !write && s.readers.contains_key(&token) {
        hold_read(h, &mut s, token, lease);
        renewed = 1;
    }
    set_expiry(h, &s, p);
    done(Reply::Int(renewed), wake(&s))
}

/// downgrade.lua
pub fn downgrade(h: &mut Hash, p: &Params, now: Time, token: Tok, lease: Time) -> Outcome {
    let mut s = load(h, p, now);
    if s.readers.contains_key(&token) && !s.writer_is(token) {
        set_expiry(h, &s, p);
        return done(Reply::Int(1), wake(&s));
    }
    if !s.writer_is(token) {
        set_expiry(h, &s, p);
        return done(Reply::Int(0), wake(&s));
    }
    drop_writer(h, &mut s);
    hold_read(h, &mut s, token, lease);
    set_expiry(h, &s, p);
    done(Reply::Int(1), wake(&s))
}

/// fenced_write.lua with its user keys reduced to whether the write was made: the
/// reply is the fence when the token holds the write lock, else 0 (nothing written).
pub fn fenced_write(h: &mut Hash, p: &Params, now: Time, token: Tok) -> Outcome {
    let s = load(h, p, now);
    if !s.writer_is(token) || original_beside(&s, true) {
        set_expiry(h, &s, p);
        return done(Reply::Int(0), wake(&s));
    }
    done(Reply::Int(s.fence), None)
}

/// What a release must leave alone: the live view, without the expiry bookkeeping.
pub fn live_view(h: &Hash, p: &Params, now: Time) -> (Loaded, Option<i64>) {
    let mut copy = h.clone();
    let mut s = load(&mut copy, p, now);
    (s.freed, s.freed_writer, s.dequeued) = (false, false, false);
    (s, copy.int(Field::Wseq))
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
                Field::Wait(t) => write!(f, "wait:{t}")?,
                Field::Wseq => write!(f, "wseq")?,
                Field::Fence => write!(f, "fence")?,
                Field::Write => write!(f, "write")?,
                Field::Wstamp => write!(f, "wstamp")?,
                Field::Read => write!(f, "read")?,
                Field::Rstamp => write!(f, "rstamp")?,
                Field::OrigRead => write!(f, "orig:read")?,
                Field::Readers => write!(f, "readers")?,
                Field::QueueUntil => write!(f, "queue_until")?,
            }
            match value {
                Val::Int(n) => write!(f, "={n}")?,
                Val::Tok(t) => write!(f, "={t}")?,
                Val::Wait(seq, deadline) => write!(f, "={seq}:{deadline}")?,
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
            Wake::Writer(t) => write!(f, "{t}"),
            Wake::All => write!(f, "*"),
            Wake::Readers => write!(f, "r"),
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

//! holds.lua: loading the live state, the holds, and settling after an operation.

use std::collections::BTreeMap;

use super::*;

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
    /// How many entries the script took out at the head of the line (the model
    /// checker's record of the line; the Lua keeps no count).
    pub unlinked: usize,
    pub extended: bool,
    pub upgradable_ended: bool,
    pub upgrade_ended: bool,
    /// `s.h['write'] == s.h['wstamp']` as loaded.
    pub(super) write_is_ours: bool,
    /// `s.h['u:upgrade'] ~= nil` as loaded.
    pub(super) upgrade_was_stored: bool,
    /// `s.h['u:wanted'] ~= nil` as loaded.
    pub(super) wanted_was_stored: bool,
}

/// `end_upgrade`: the pending upgrade ends without the write hold.
pub(super) fn end_upgrade(s: &mut Loaded) {
    if s.upgrade.is_some() || s.upgrade_was_stored {
        del(s, Field::UUpgrade);
        (s.upgrade, s.upgrade_ended) = (None, true);
    }
}

/// `end_upgradable`: the upgradable hold ends without becoming the write hold, and
/// its pending upgrade with it.
pub(super) fn end_upgradable(s: &mut Loaded) {
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
        unlinked: 0,
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
pub(super) fn sweep_leftovers(h: &Hash, s: &mut Loaded) {
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
pub(super) fn drop_member(h: &Hash, s: &mut Loaded, token: Tok, batch: Tok, granted: bool) {
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
pub(super) fn add_shares(s: &mut Loaded, n: i64) {
    s.shares += n;
    if s.shares > 0 {
        set(s, Field::Shares, Val::Int(s.shares));
    } else {
        del(s, Field::Shares);
    }
}

/// `batches.forget`: no share counts any more (every counted reader's hold ended).
pub(super) fn forget_shares(s: &mut Loaded) {
    if s.shares > 0 {
        s.shares = 0;
        del(s, Field::Shares);
    }
}

/// `batches.leave`: the caller's reader leaves `batch` (`granted`: it held by its
/// grant, counted while `mine` is set).
pub(super) fn leave_batch(h: &Hash, s: &mut Loaded, batch: Tok, granted: bool) {
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
pub(super) fn wait_in_line(h: &Hash, s: &mut Loaded, ttl: Time, first_lease: Time) -> Tok {
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
        if let Some(t) = s.tail.filter(|t| t.is_batch())
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
            batch = Some(Tok::Batch(n as u64));
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
pub(super) fn drop_lapsed_shares(h: &Hash, s: &mut Loaded) {
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
pub(super) fn grant_batch(
    h: &Hash,
    s: &mut Loaded,
    batch: Tok,
    first_lease: Time,
    place_deadline: Time,
) {
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
pub(super) fn serve_readers(h: &Hash, s: &mut Loaded) {
    let Some(head) = s.head else { return };
    if s.writer.is_some() || s.original_writer_until.is_some() || s.upgrade.is_some() {
        return;
    }
    let free = s.nreaders == 0 && s.original_reader_until.is_none();
    if !(head.is_batch() || free || s.dequeued) {
        return;
    }
    if let Some((first, first_lease, deadline)) = first_in_line(h, s)
        && first.is_batch()
    {
        grant_batch(h, s, first, first_lease, deadline);
    }
}

pub(super) fn reading(s: &Loaded) -> bool {
    s.mine.is_some_and(|d| d > s.now)
}

pub(super) fn writer_is(s: &Loaded, token: Tok) -> bool {
    s.writer.is_some_and(|(owner, _)| owner == token)
}

/// `original_beside`: an original-design client holds in a mode that conflicts with
/// our hold in mode `write`: it judged our stamp stale and entered.
pub(super) fn original_beside(s: &Loaded, write: bool) -> bool {
    s.original_writer_until.is_some() || (write && s.original_reader_until.is_some())
}

pub(super) fn is_free(s: &Loaded) -> bool {
    s.writer.is_none()
        && s.original_writer_until.is_none()
        && s.nreaders == 0
        && s.original_reader_until.is_none()
}

pub(super) fn holds_until(s: &Loaded) -> Time {
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

pub(super) fn retry_hint(s: &Loaded) -> Time {
    (holds_until(s) - s.now).max(1)
}

pub(super) fn queue_hint(s: &Loaded) -> Time {
    (s.queue_until - s.now).max(1)
}

/// `hold_read`: never shortens the token's hold.
pub(super) fn hold_read(h: &Hash, s: &mut Loaded, lease: Time) {
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
pub(super) fn hold_upgradable(s: &mut Loaded, others_until: Time) {
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
pub(super) fn hold_write(s: &mut Loaded, token: Tok, lease: Time) {
    let deadline = match s.writer {
        Some((owner, until)) if owner == token => (s.now + lease).max(until),
        _ => s.now + lease,
    };
    s.writer = Some((token, deadline));
    stamp_write(s);
    s.extended = true;
}

pub(super) fn grant_write(s: &mut Loaded, token: Tok, lease: Time) -> i64 {
    s.fence = (s.fence + 1).max(s.now_us);
    set(s, Field::Fence, Val::Int(s.fence));
    hold_write(s, token, lease);
    s.fence
}

/// `drop_reader(s, token)`: `token`'s counted read hold ends (with the upgradable
/// hold, if it was that).
pub(super) fn drop_reader(h: &Hash, s: &mut Loaded, token: Tok) {
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

pub(super) fn drop_writer(s: &mut Loaded) {
    del(s, Field::WOwner);
    del(s, Field::WUntil);
    clear_write(s);
    s.writer = None;
    s.freed_writer = true;
}

/// `upgrade_ready`: the upgradable reader is the only reader left.
pub(super) fn upgrade_ready(s: &Loaded) -> bool {
    s.upgradable.is_some()
        && (s.nreaders == 1 || s.others_until <= s.now)
        && s.original_reader_until.is_none()
        && s.writer.is_none()
        && s.original_writer_until.is_none()
}

/// `upgrade_to_write`: the upgradable reader becomes the writer, for `lease` but
/// never less than its read hold had left; returns the new fence.
pub(super) fn upgrade_to_write(h: &Hash, s: &mut Loaded, lease: Time) -> i64 {
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
pub(super) fn refusal_fence(s: &Loaded) -> i64 {
    s.fence.max(s.now_us)
}

pub(super) fn set_expiry(h: &mut Hash, s: &Loaded, p: &Params) {
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
pub(super) fn settle(h: &mut Hash, s: &mut Loaded, p: &Params) -> Published {
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
            && !first.is_batch()
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
        unlinked: s.unlinked,
    }
}

/// What `settle` published: the batch it granted (if any), then its message.
#[derive(Clone, Copy)]
pub struct Published {
    wake: Option<Wake>,
    granted: Option<Tok>,
    unlinked: usize,
}

pub(super) fn done(reply: Reply, published: Published) -> Outcome {
    Outcome {
        reply,
        published: published.wake,
        granted: published.granted,
        unlinked: published.unlinked,
        new_grant: false,
        recalled: false,
        evicted: false,
    }
}

/// A grant of a new write hold (a new fencing token).
pub(super) fn new_grant(fence: i64, published: Published) -> Outcome {
    Outcome {
        reply: Reply::Granted(fence),
        published: published.wake,
        granted: published.granted,
        unlinked: published.unlinked,
        new_grant: true,
        recalled: false,
        evicted: false,
    }
}

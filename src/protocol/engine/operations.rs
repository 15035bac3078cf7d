//! The operation scripts (acquire_read.lua, acquire_write.lua, release.lua, ...),
//! and what any script would do to a hash, or read of it.

use super::*;

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
    if first.is_some_and(|(f, _, _)| f.is_batch()) && !written && s.upgrade.is_none() {
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
    let operator = Tok::stranger(3);
    let mut s = load_as(h, p, now, operator, false);
    // A fence an earlier forced release left is no client's hold: not counted.
    let fence = h.int(Field::R(Tok::FORCED_READER));
    let fenced = s.nreaders > 0 && fence.is_some_and(|fence| fence > s.gone);
    let readers_ended = s.nreaders > 0;
    let removed = s.nreaders - i64::from(fenced);
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
    if readers_ended {
        s.token = Tok::FORCED_READER;
        hold_read(h, &mut s, p.forced_fence);
    }
    let published = settle(h, &mut s, p);
    Outcome {
        evicted: true,
        ..done(Reply::Int(removed), published)
    }
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
    if renewed == 1 && !write && (s.head.is_some() || s.upgrade.is_some()) {
        renewed = 2;
    }
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
    let mut queued = -1;
    if let Some(head) = s.head.filter(|_| ok == 1 && from_write) {
        queued = -2;
        if !head.is_batch()
            && let Some(Val::Place(deadline, _)) = field(h, &s, Field::Wait(head))
            && let Some(Val::Int(at)) = field(h, &s, Field::Wq(head))
            && deadline > now
        {
            queued = now - at;
        }
    }
    done(Reply::Downgraded(ok, queued), published)
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
    let stranger = Tok::stranger(1);
    renew(h, p, now, stranger, 1, true).published
}

/// Who holds and waits, read without changing the hash (like state.lua).
pub fn live_view(h: &Hash, p: &Params, now: Time) -> View {
    let mut copy = h.clone();
    copy.expire_if_due(now);
    let stranger = Tok::stranger(2);
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

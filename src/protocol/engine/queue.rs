//! queue.lua: the line of writers and batches of readers.

use super::*;

pub(super) fn queued(s: &Loaded) -> bool {
    s.head.is_some() && s.queue_until > s.now
}

pub(super) fn set_head(s: &mut Loaded, token: Option<Tok>) {
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
pub(super) fn join_queue(
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
        if !entry.is_batch() {
            set(s, Field::Wq(entry), Val::Int(s.now));
        }
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

pub(super) fn leave_queue(s: &mut Loaded) {
    del(s, Field::Wait(s.token));
    s.place = None;
    s.dequeued = true;
}

pub(super) fn unlink_head(s: &mut Loaded, next: Option<Tok>) {
    let head = s.head.expect("a head to unlink");
    del(s, Field::Wait(head));
    del(s, Field::Wn(head));
    if !head.is_batch() {
        del(s, Field::Wq(head));
    }
    if head == s.token {
        (s.place, s.linked) = (None, false);
    }
    s.unlinked += 1;
    set_head(s, next);
}

/// `first_in_line`: the first live entry, its first lease and its place's deadline.
pub(super) fn first_in_line(h: &Hash, s: &mut Loaded) -> Option<(Tok, Time, Time)> {
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
            if head.is_batch() {
                del(s, Field::Rn(head)); // its readers' `rw:` fields now name nothing
            }
        }
        unlink_head(s, next);
    }
    None
}

pub(super) fn serve_head(s: &mut Loaded) {
    let next = s.head_next;
    unlink_head(s, next);
}

//! hash_layout.lua: the hash layout's hooks.

use super::*;

/// `layout.original_holds`: original-design clients' holds; deletes stale stamps.
pub(super) fn layout_original_holds(s: &mut Loaded, h: &Hash, p: &Params) {
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

pub(super) fn stamp_read(s: &mut Loaded) {
    set(s, Field::Read, Val::Int(s.now));
    set(s, Field::Rstamp, Val::Int(s.now));
    if let Some(until) = s.original_reader_until {
        set(s, Field::OrigRead, Val::Int(until));
    }
}

pub(super) fn clear_read(s: &mut Loaded) {
    if s.original_reader_until.is_none() {
        del(s, Field::Read);
        del(s, Field::Rstamp);
    }
}

pub(super) fn stamp_write(s: &mut Loaded) {
    let (owner, until) = s.writer.expect("a writer to stamp");
    set(s, Field::WOwner, Val::Tok(owner));
    set(s, Field::WUntil, Val::Int(until));
    set(s, Field::Write, Val::Int(s.now));
    set(s, Field::Wstamp, Val::Int(s.now));
}

pub(super) fn clear_write(s: &mut Loaded) {
    if s.write_is_ours {
        del(s, Field::Write);
        del(s, Field::Wstamp);
    }
}

/// `layout.clear_all`: every hold ends (force release), original clients' too.
pub(super) fn clear_all(s: &mut Loaded) {
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

//! helpers.lua: a script's view of the hash, its changes written once.

use super::*;

pub(super) fn set(s: &mut Loaded, field: Field, value: Val) {
    s.changes.insert(field, Some(value));
}

pub(super) fn del(s: &mut Loaded, field: Field) {
    s.changes.insert(field, None);
}

/// `fields`: one field as this script has left it so far.
pub(super) fn field(h: &Hash, s: &Loaded, f: Field) -> Option<Val> {
    match s.changes.get(&f) {
        Some(changed) => *changed,
        None => h.get(f),
    }
}

/// `flush`: the deletions, then the writes.
pub(super) fn flush(h: &mut Hash, s: &Loaded) {
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

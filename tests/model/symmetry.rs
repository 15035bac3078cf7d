//! Symmetry: clients of one role are interchangeable, so states equal up to a
//! renaming of them are explored once (`Lock::canonical`).

use super::ModelTok as _;
use super::lua::{self, Hash, Tok};
use super::system::{Lock, Phase, State};

/// A renaming of clients: `perm[i]` is the new index of client `i` (readers map to
/// readers, writers to writers, upgraders to upgraders, each to one with the same
/// lease).
pub type Perm = Vec<usize>;

impl Lock {
    /// Every renaming that keeps roles and leases.
    fn perms(&self) -> Vec<Perm> {
        fn all(items: &[usize]) -> Vec<Vec<usize>> {
            if items.len() <= 1 {
                return vec![items.to_vec()];
            }
            let mut out = Vec::new();
            for i in 0..items.len() {
                let mut rest = items.to_vec();
                let first = rest.remove(i);
                for mut tail in all(&rest) {
                    tail.insert(0, first);
                    out.push(tail);
                }
            }
            out
        }
        let r = self.cfg.readers as usize;
        let w = r + self.cfg.writers as usize;
        let n = self.cfg.clients() as usize;
        let readers: Vec<usize> = (0..r).collect();
        let writers: Vec<usize> = (r..w).collect();
        let upgraders: Vec<usize> = (w..n).collect();
        let originals: Vec<usize> = (n..self.cfg.all_clients() as usize).collect();
        // Clients with different leases are not interchangeable.
        let same_leases = |perm: &Perm| {
            let read = |i: usize| self.cfg.lease(i, super::system::Mode::Read);
            (0..n).all(|i| read(perm[i]) == read(i) && !(self.cfg.recursive(i) && perm[i] != i))
        };
        let mut out = Vec::new();
        for pr in all(&readers) {
            for pw in all(&writers) {
                for pu in all(&upgraders) {
                    let perm: Perm = pr
                        .iter()
                        .chain(&pw)
                        .chain(&pu)
                        .chain(&originals)
                        .copied()
                        .collect();
                    if same_leases(&perm) {
                        out.push(perm);
                    }
                }
            }
        }
        out
    }

    fn rename_tok(&self, perm: &Perm, t: Tok) -> Tok {
        if t.is_stranger() || t.is_batch() {
            return t;
        }
        super::tok(
            self.cfg.id(perm[self.cfg.index(t.client())]),
            t.generation(),
        )
    }

    fn rename_hash(&self, perm: &Perm, h: &Hash) -> Hash {
        let fields = h
            .fields
            .iter()
            .map(|(&field, &value)| {
                let field = match field {
                    lua::Field::R(t) => lua::Field::R(self.rename_tok(perm, t)),
                    lua::Field::Wait(t) => lua::Field::Wait(self.rename_tok(perm, t)),
                    lua::Field::Wn(t) => lua::Field::Wn(self.rename_tok(perm, t)),
                    lua::Field::Wq(t) => lua::Field::Wq(self.rename_tok(perm, t)),
                    lua::Field::Rw(t) => lua::Field::Rw(self.rename_tok(perm, t)),
                    other => other,
                };
                let value = match value {
                    lua::Val::Tok(t) => lua::Val::Tok(self.rename_tok(perm, t)),
                    other => other,
                };
                (field, value)
            })
            .collect();
        Hash {
            fields,
            expires: h.expires,
        }
    }

    fn rename(&self, perm: &Perm, s: &State) -> State {
        let mut out = s.clone();
        out.hash = self.rename_hash(perm, &s.hash);
        out.unreplicated = s.unreplicated.as_ref().map(|h| self.rename_hash(perm, h));
        for (i, c) in s.clients.iter().enumerate() {
            let mut c = *c;
            match &mut c.phase {
                Phase::Waiting { token, .. } | Phase::Holding { token, .. } => {
                    *token = self.rename_tok(perm, *token);
                }
                _ => {}
            }
            if let Some(f) = &mut c.inflight {
                f.token = self.rename_tok(perm, f.token);
            }
            if let Some(late) = &mut c.late {
                late.token = self.rename_tok(perm, late.token);
            }
            if let Some((token, _)) = &mut c.dead {
                *token = self.rename_tok(perm, *token);
            }
            out.clients[perm[i]] = c;
        }
        for (token, _) in &mut out.queued_at {
            *token = self.rename_tok(perm, *token);
        }
        out
    }

    /// The least renaming of `s` (states equal up to renaming are explored once),
    /// and the renaming that gives it.
    pub fn canonical(&self, s: &State) -> (State, Perm) {
        let mut best: Option<(State, Perm)> = None;
        for perm in self.perms() {
            let renamed = self.rename(&perm, s);
            if best.as_ref().is_none_or(|(b, _)| renamed < *b) {
                best = Some((renamed, perm));
            }
        }
        best.unwrap_or_else(|| (s.clone(), Vec::new()))
    }
}

//! A model of the lock protocol, checked with stateright (see docs/PROTOCOL.md).
//!
//! * [`lua`]: the engine (`src/protocol/engine/`): the lock hash and the hash-layout scripts of
//!   `lua/`, mirrored line for line; `tests/protocol_conformance.rs` runs it side by
//!   side with the real scripts.
//! * [`system`]: clients that run those scripts the way `src/lock/waiting.rs`
//!   and `src/guard/lease.rs` do, and the environment's faults: the types and the
//!   `stateright::Model` glue.
//! * `steps`: how each action changes the state; `properties`: what the checker
//!   holds it to; `symmetry`: states equal up to renaming clients are explored once;
//!   `traces`: counterexamples as readable traces.
//! * [`sets`]: lock sets, clients that take several locks at once (in one global
//!   order, all or nothing) by the same scripts: a model of its own, beside the
//!   single-lock one.
#![allow(dead_code)] // each test binary uses its own part

pub use redis_rwlock::engine as lua;
mod properties;
pub mod sets;
mod steps;
mod symmetry;
pub mod system;
mod traces;

use lua::Tok;

/// The model's tokens carry a client number and a generation in a holder token's
/// two halves (the scripts only compare tokens for equality).
pub trait ModelTok {
    /// The client number (`R1` is 0, `W1` 100, `U1` 200; see [`client_name`]).
    fn client(self) -> u8;
    /// A holder's generation, or a batch's number.
    fn generation(self) -> u64;
}

impl ModelTok for Tok {
    fn client(self) -> u8 {
        match self {
            Tok::Holder(_, _) if self.is_stranger() => OUTSIDER,
            Tok::Holder(client, _) => client as u8,
            Tok::Batch(_) => BATCH,
        }
    }

    fn generation(self) -> u64 {
        match self {
            Tok::Holder(_, generation) | Tok::Batch(generation) => generation,
        }
    }
}

/// Client `client`'s token of generation `generation`.
pub fn tok(client: u8, generation: u64) -> Tok {
    Tok::Holder(u64::from(client), generation)
}

/// The client number of the outsider, a token that never holds anything.
pub const OUTSIDER: u8 = 255;
/// The "client" of a batch of readers.
pub const BATCH: u8 = 254;

/// `R1`, `R2`, ... for readers, `W1`, ... for writers and `U1`, ... for upgraders
/// is decided by the system model; the hash only knows numbers. `X` is the outsider
/// of stray releases, `B` a batch of readers.
pub fn client_name(client: u8) -> String {
    match client {
        OUTSIDER => "X".to_owned(),
        BATCH => "B".to_owned(),
        c if c >= 200 => format!("U{}", c - 199),
        c if c >= 100 => format!("W{}", c - 99),
        c => format!("R{}", c + 1),
    }
}

/// A token as the traces print it: `R1.0`, `B.1700000000000`.
pub fn name(t: Tok) -> String {
    format!("{}.{}", client_name(t.client()), t.generation())
}

/// A hash as the traces print it, its tokens by [`name`].
pub struct Named<'a>(pub &'a lua::Hash);

impl std::fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.render(f, &|f, t| f.write_str(&name(t)))
    }
}

/// A message as the traces print it, its token by [`name`].
pub fn wake_name(wake: lua::Wake) -> String {
    match wake {
        lua::Wake::Handed(t, fence) => format!("{}:{fence}", name(t)),
        lua::Wake::Batch(b) => name(b),
        other => other.to_string(),
    }
}

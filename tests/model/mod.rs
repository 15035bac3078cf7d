//! A model of the lock protocol, checked with stateright (see docs/PROTOCOL.md).
//!
//! * [`lua`]: the lock hash and the hash-layout scripts of `lua/`, mirrored line for
//!   line; `tests/protocol_conformance.rs` runs it side by side with the real scripts.
//! * [`system`]: clients that run those scripts the way `src/lock/waiting.rs` and
//!   `src/guard/lease.rs` do, and the environment's faults: the types and the
//!   `stateright::Model` glue.
//! * `steps`: how each action changes the state; `properties`: what the checker
//!   holds it to; `symmetry`: states equal up to renaming clients are explored once;
//!   `traces`: counterexamples as readable traces.
#![allow(dead_code)] // each test binary uses its own part

pub mod lua;
mod properties;
mod steps;
mod symmetry;
pub mod system;
mod traces;

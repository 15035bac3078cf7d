//! A model of the lock protocol, checked with stateright (see docs/PROTOCOL.md).
//!
//! * [`lua`]: the lock hash and the hash-layout scripts of `lua/`, mirrored line for
//!   line; `tests/protocol_conformance.rs` runs it side by side with the real scripts.
//! * [`system`]: clients that run those scripts the way `src/waiting.rs` and
//!   `src/lease.rs` do, the environment's faults, and the properties.
#![allow(dead_code)] // each test binary uses its own part

pub mod lua;
pub mod system;

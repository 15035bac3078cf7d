//! The backends a lock's requests go to: Redis (`redis/`) and the in-memory store
//! (`memory/`).

pub(crate) mod memory;
pub(crate) mod redis;

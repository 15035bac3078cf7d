//! The hash layout's scripts as `src/backend/redis/scripts/mod.rs` assembles them, for tests that run
//! a script directly.

/// The source of the hash-layout script whose operation file is `operation`: the
/// shared parts in the crate's order, then the operation.
pub fn hash_script(operation: &str) -> String {
    [
        include_str!("../../lua/helpers.lua"),
        include_str!("../../lua/hash_layout.lua"),
        include_str!("../../lua/fast_path.lua"),
        include_str!("../../lua/queue.lua"),
        include_str!("../../lua/holds.lua"),
        operation,
    ]
    .join("\n")
}

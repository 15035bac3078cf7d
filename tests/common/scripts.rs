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

/// The source of acquire_set.lua as a script of its own (EVAL): the shared parts,
/// then the operations it calls as the local functions `op_acquire_read`,
/// `op_acquire_write` and `op_release` (as `called()` in
/// `src/backend/redis/scripts/mod.rs` and `library::as_function` write them), then
/// the set's own file.
pub fn hash_set_script() -> String {
    let called: String = [
        ("acquire_read", include_str!("../../lua/acquire_read.lua")),
        ("acquire_write", include_str!("../../lua/acquire_write.lua")),
        ("release", include_str!("../../lua/release.lua")),
    ]
    .iter()
    .map(|(name, body)| format!("local function op_{name}(KEYS, ARGV)\n{body}\nend\n"))
    .collect();
    hash_script(&format!(
        "{called}{}",
        include_str!("../../lua/acquire_set.lua")
    ))
}

//! `release --force`: the operator's break-glass.

use redis_rwlock::RwLock;

use crate::failure::{Failure, code};
use crate::output;

/// Ends every hold on the lock when `force` is set; refuses otherwise.
pub async fn run(lock: &RwLock, force: bool) -> Result<(), Failure> {
    let name = output::quoted(lock.name());
    if !force {
        return Err(Failure::new(
            code::USAGE,
            format!(
                "refusing to release lock {name} without --force: it ends every hold on \
                 the lock, whoever owns it, and the holders may keep acting until their next \
                 renewal; check `redis-rwlock status {name}` first"
            ),
        ));
    }
    let ended = lock.force_release().await.map_err(Failure::error)?;
    output::print(&match ended {
        0 => format!("lock {name} was not held\n"),
        1 => format!("lock {name}: ended 1 hold\n"),
        n => format!("lock {name}: ended {n} holds\n"),
    })
}

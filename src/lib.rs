// The crate page is the README (below): what the lock is, how to try and use it,
// what it guarantees, its options and errors, testing without Redis, operations.
//
// The README links to other files of the repository by reference (`[protocol]`...)
// and defines those references at its end as relative paths, for a Markdown
// viewer. The definitions here come first, so they win on the crate page: on
// docs.rs they name the file in the published crate's source, in a local `cargo
// doc` the file in this checkout (`tests`: `the_crate_page_links_every_file_the_readme_links`).
#![cfg_attr(
    docsrs,
    doc = concat!(
    "[benchmarks]: https://docs.rs/crate/redis-rwlock/", env!("CARGO_PKG_VERSION"), "/source/BENCHMARKS.md\n",
    "[bench-libraries]: https://docs.rs/crate/redis-rwlock/", env!("CARGO_PKG_VERSION"), "/source/BENCHMARKS.md#libraries-left-behind-fcalls-floor\n",
    "[bench-metrics]: https://docs.rs/crate/redis-rwlock/", env!("CARGO_PKG_VERSION"), "/source/BENCHMARKS.md#metrics-overhead\n",
    "[changelog]: https://docs.rs/crate/redis-rwlock/", env!("CARGO_PKG_VERSION"), "/source/CHANGELOG.md\n",
    "[coming-from]: https://docs.rs/crate/redis-rwlock/", env!("CARGO_PKG_VERSION"), "/source/docs/COMING_FROM_OTHER_LOCKS.md\n",
    "[decisions]: https://docs.rs/crate/redis-rwlock/", env!("CARGO_PKG_VERSION"), "/source/docs/DECISIONS.md\n",
    "[guarantees-measured]: https://docs.rs/crate/redis-rwlock/", env!("CARGO_PKG_VERSION"), "/source/docs/GUARANTEES.md\n",
    "[internals]: https://docs.rs/crate/redis-rwlock/", env!("CARGO_PKG_VERSION"), "/source/docs/INTERNALS.md\n",
    "[license-apache]: https://docs.rs/crate/redis-rwlock/", env!("CARGO_PKG_VERSION"), "/source/LICENSE-APACHE\n",
    "[license-mit]: https://docs.rs/crate/redis-rwlock/", env!("CARGO_PKG_VERSION"), "/source/LICENSE-MIT\n",
    "[metrics-example]: https://docs.rs/crate/redis-rwlock/", env!("CARGO_PKG_VERSION"), "/source/examples/metrics_service.rs\n",
    "[migration]: https://docs.rs/crate/redis-rwlock/", env!("CARGO_PKG_VERSION"), "/source/docs/MIGRATION.md\n",
    "[original]: https://docs.rs/crate/redis-rwlock/", env!("CARGO_PKG_VERSION"), "/source/docs/ORIGINAL_DESIGN.md\n",
    "[protocol]: https://docs.rs/crate/redis-rwlock/", env!("CARGO_PKG_VERSION"), "/source/docs/PROTOCOL.md\n",
    )
)]
#![cfg_attr(
    not(docsrs),
    doc = concat!(
    "[benchmarks]: file://", env!("CARGO_MANIFEST_DIR"), "/BENCHMARKS.md\n",
    "[bench-libraries]: file://", env!("CARGO_MANIFEST_DIR"), "/BENCHMARKS.md#libraries-left-behind-fcalls-floor\n",
    "[bench-metrics]: file://", env!("CARGO_MANIFEST_DIR"), "/BENCHMARKS.md#metrics-overhead\n",
    "[changelog]: file://", env!("CARGO_MANIFEST_DIR"), "/CHANGELOG.md\n",
    "[coming-from]: file://", env!("CARGO_MANIFEST_DIR"), "/docs/COMING_FROM_OTHER_LOCKS.md\n",
    "[decisions]: file://", env!("CARGO_MANIFEST_DIR"), "/docs/DECISIONS.md\n",
    "[guarantees-measured]: file://", env!("CARGO_MANIFEST_DIR"), "/docs/GUARANTEES.md\n",
    "[internals]: file://", env!("CARGO_MANIFEST_DIR"), "/docs/INTERNALS.md\n",
    "[license-apache]: file://", env!("CARGO_MANIFEST_DIR"), "/LICENSE-APACHE\n",
    "[license-mit]: file://", env!("CARGO_MANIFEST_DIR"), "/LICENSE-MIT\n",
    "[metrics-example]: file://", env!("CARGO_MANIFEST_DIR"), "/examples/metrics_service.rs\n",
    "[migration]: file://", env!("CARGO_MANIFEST_DIR"), "/docs/MIGRATION.md\n",
    "[original]: file://", env!("CARGO_MANIFEST_DIR"), "/docs/ORIGINAL_DESIGN.md\n",
    "[protocol]: file://", env!("CARGO_MANIFEST_DIR"), "/docs/PROTOCOL.md\n",
    )
)]
#![doc = include_str!("../README.md")]
#![doc = "
## The API at a glance

Start with [`RwLock`]: its page states the priority policy, upgradable reads and
the drop contract. Each guard ([`RwLockReadGuard`], [`RwLockWriteGuard`],
[`RwLockUpgradableReadGuard`]) renews its lease while it lives, reports a lost one
([`RwLockWriteGuard::lost`]) and is ended by `release()`, which returns errors.
[`LockClient`] connects ([`LockClient::cluster`], [`LockClient::standalone`],
[`LockClient::builder`], [`LockClient::in_memory`]) and names locks; [`LockOptions`]
tunes them; every failure is one [`Error`]."]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod client;
mod error;
mod fleet;
mod guard;
mod lock;
mod lock_set;
mod metrics;
mod protocol;
#[doc(hidden)]
pub use protocol::engine;

#[cfg(feature = "metrics")]
pub use crate::metrics::describe_metrics;
pub use backend::memory::MemoryStore;
pub use backend::redis::connection::cluster_client_builder;
pub use backend::redis::library_name;
pub use client::LockClient;
pub use client::builder::LockClientBuilder;
pub use error::{Error, ErrorChain, Mode, Operation, RedisFailure, Result};
pub use fleet::{ListCursor, ListOptions, LockPage, LockSummary};
pub use guard::{FencedWrites, RwLockReadGuard, RwLockUpgradableReadGuard, RwLockWriteGuard};
pub use lock::RwLock;
pub use lock::options::{Fairness, LockOptions};
pub use lock_set::{LockSet, LockSetGuard};
pub use protocol::{Holder, LockMode, LockState};
pub use redis;

#[cfg(test)]
mod tests {
    /// Every file the README links by reference has a definition on the crate page,
    /// for docs.rs and for a local `cargo doc` (else rustdoc would show the README's
    /// relative path, which leads nowhere there).
    #[test]
    fn the_crate_page_links_every_file_the_readme_links() {
        let readme = include_str!("../README.md");
        let lib = include_str!("lib.rs");
        let mut names = 0;
        for line in readme.lines() {
            let Some((name, path)) = line
                .strip_prefix('[')
                .and_then(|rest| rest.split_once("]: "))
            else {
                continue;
            };
            names += 1;
            let defined = format!("\"[{name}]: ");
            assert_eq!(
                lib.matches(&defined).count(),
                2,
                "src/lib.rs must define [{name}] once for docs.rs and once for local docs"
            );
            assert!(
                lib.contains(&format!("/{path}\\n\"")),
                "src/lib.rs's [{name}] must lead to {path}"
            );
        }
        assert!(names > 0, "no link definitions found in the README");
    }
}

//! One test body, two backends: a semantic test written with [`on_both_backends!`]
//! runs once against the shared Redis Cluster and once against an in-memory store
//! of its own, with clients from its [`Backend`].

use std::time::Duration;

use redis_rwlock::{LockClient, MemoryStore, RwLock};

use super::{LocalRedis, cluster_client, pause, raw_cluster, until_counted, until_subscribers};

/// Where a test's clients connect: each client of a test is a process of its own,
/// and they all share the test's backend.
#[derive(Clone)]
pub enum Backend {
    /// The test binary's shared cluster (3 masters, 3 replicas).
    Cluster,
    /// A store of the test's own.
    Memory(MemoryStore),
}

impl Backend {
    /// A new client on the backend.
    pub async fn client(&self) -> LockClient {
        match self {
            Backend::Cluster => cluster_client().await,
            Backend::Memory(store) => LockClient::in_memory(store),
        }
    }

    /// [`until_subscribers`] on the backend: `n` clients listen on the lock's channel.
    pub async fn until_subscribers(&self, lock: &RwLock, n: u64) {
        match self {
            Backend::Cluster => until_subscribers(lock, n).await,
            Backend::Memory(store) => {
                let channel = format!("{}:released", lock.key().expect("a usable lock"));
                let store = store.clone();
                until_counted(n, move || store.subscribers(&channel)).await;
            }
        }
    }

    /// The value at `key` (what a fenced write left there), if any: `GET` on the
    /// cluster, [`MemoryStore::value`] in memory.
    pub async fn value(&self, key: &str) -> Option<Vec<u8>> {
        match self {
            Backend::Cluster => {
                let mut raw = raw_cluster().await;
                redis::AsyncCommands::get(&mut raw, key)
                    .await
                    .expect("GET the value")
            }
            Backend::Memory(store) => store.value(key),
        }
    }

    /// Deletes `lock`'s state behind its holders' backs, as an operator's `DEL` of
    /// its key on the cluster would ([`MemoryStore::lose_holds`] in memory).
    pub async fn delete_lock(&self, lock: &RwLock) {
        match self {
            Backend::Cluster => {
                let mut raw = raw_cluster().await;
                let _: () = redis::AsyncCommands::del(&mut raw, lock.key().expect("a usable lock"))
                    .await
                    .expect("DEL the lock");
            }
            Backend::Memory(store) => store.lose_holds(lock.name()),
        }
    }

    /// A client none of whose requests is ever answered (on Redis: a private
    /// standalone server, paused with SIGSTOP, returned to be kept while the test
    /// runs; in memory: the store stops answering for a minute), so a fast error
    /// proves that nothing was sent.
    pub async fn unanswered_client(&self) -> (LockClient, Option<LocalRedis>) {
        match self.store() {
            Some(store) => {
                store.stop_answering(Duration::from_secs(60));
                (self.client().await, None)
            }
            None => {
                let server = LocalRedis::standalone();
                let client = LockClient::standalone(server.url()).await.unwrap();
                pause(server.nodes[0].pid);
                (client, Some(server))
            }
        }
    }

    /// The in-memory store, if that is the backend.
    pub fn store(&self) -> Option<&MemoryStore> {
        match self {
            Backend::Cluster => None,
            Backend::Memory(store) => Some(store),
        }
    }
}

/// `async fn name(backend: Backend) { ... }` as two tests, `name::redis` and
/// `name::memory`, each on a multi-threaded tokio runtime.
#[macro_export]
macro_rules! on_both_backends {
    ($(
        $(#[doc = $doc:literal])*
        async fn $name:ident($backend:ident: Backend) $body:block
    )*) => {$(
        $(#[doc = $doc])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            async fn body($backend: $crate::common::Backend) $body

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                body($crate::common::Backend::Cluster).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                body($crate::common::Backend::Memory(redis_rwlock::MemoryStore::new())).await;
            }
        }
    )*};
}

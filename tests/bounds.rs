//! Compile-time guarantees: everything can cross tasks and threads (the in-memory
//! store too). Nothing here talks to a server, so there is no backend to choose.
#![allow(dead_code)]

use redis_rwlock::{
    Error, LockClient, LockOptions, LockState, MemoryStore, RwLock, RwLockReadGuard,
    RwLockUpgradableReadGuard, RwLockWriteGuard,
};

fn is_send_sync_static<T: Send + Sync + 'static>(_: &T) {}
fn type_is_send_sync_static<T: Send + Sync + 'static>() {}

/// Never run: it only has to compile.
fn futures_of_read_and_write_can_be_spawned(lock: RwLock) {
    is_send_sync_static(&lock.read());
    is_send_sync_static(&lock.write());
    is_send_sync_static(&lock.try_read());
    is_send_sync_static(&lock.try_write());
    is_send_sync_static(&lock.upgradable_read());
    is_send_sync_static(&lock.try_upgradable_read());
}

fn futures_of_other_calls_are_send(
    lock: RwLock,
    r: RwLockReadGuard,
    w: RwLockWriteGuard,
    mut u: RwLockUpgradableReadGuard,
    client: LockClient,
) {
    fn is_send<T: Send>(_: T) {}
    is_send(lock.state());
    is_send(r.lost());
    is_send(w.lost());
    is_send(r.extend());
    is_send(w.extend());
    is_send(w.downgrade());
    is_send(r.release());
    is_send(u.lost());
    is_send(u.extend());
    is_send(u.try_upgrade());
    is_send(async move {
        let _ = u.upgrade().await;
    });
    fn downgrade_is_send(u: RwLockUpgradableReadGuard) {
        is_send(u.downgrade());
    }
    fn release_is_send(u: RwLockUpgradableReadGuard) {
        is_send(u.release());
    }
    is_send(client.shutdown(std::time::Duration::from_secs(1)));
    is_send(LockClient::cluster(["redis://127.0.0.1:7000"]));
    is_send(LockClient::standalone("redis://127.0.0.1:6379"));
    is_send(client.list_locks(Default::default()));
}

#[test]
fn public_types_are_send_sync_static() {
    type_is_send_sync_static::<LockClient>();
    type_is_send_sync_static::<RwLock>();
    type_is_send_sync_static::<RwLockReadGuard>();
    type_is_send_sync_static::<RwLockWriteGuard>();
    type_is_send_sync_static::<RwLockUpgradableReadGuard>();
    type_is_send_sync_static::<LockOptions>();
    type_is_send_sync_static::<LockState>();
    type_is_send_sync_static::<Error>();
    type_is_send_sync_static::<MemoryStore>();
}

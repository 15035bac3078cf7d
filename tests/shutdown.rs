//! `LockClient::shutdown`: a process that redeploys frees every lock it holds or
//! waits for at once, instead of leaving holds until their leases end.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use redis_rwlock::{Error, LockOptions};
use tokio::runtime::Handle;
use tokio::time::timeout;

use common::{capture_warnings, unique_name, wait_for, warnings_about};

on_both_backends! {
async fn shutdown_frees_every_hold_and_withdraws_every_wait(backend: Backend) {
    let client = backend.client().await;
    let observer = backend.client().await;
    let lease = Duration::from_secs(30);
    let options = LockOptions::default().read_lease(lease).write_lease(lease);
    let (read_name, write_name) = (unique_name("shutdown-r"), unique_name("shutdown-w"));
    let read_lock = client.rwlock_with(&read_name, options.clone());
    let write_lock = client.rwlock_with(&write_name, options.clone());
    let reader = read_lock.read().await.unwrap();
    let writer = write_lock.write().await.unwrap();
    let waiter = tokio::spawn({
        let lock = write_lock.clone();
        async move { lock.write().await.map(drop) }
    });
    wait_for(&observer.rwlock(&write_name), |s| {
        s.queued_writers.len() == 1
    })
    .await;

    timeout(
        Duration::from_secs(10),
        client.shutdown(Duration::from_secs(5)),
    )
    .await
    .expect("shutdown did not return")
    .unwrap();

    // Right after: nothing held, nobody queued, as another client sees it.
    for name in [&read_name, &write_name] {
        let state = observer.rwlock(name.as_str()).state().await.unwrap();
        assert!(
            state.is_free() && state.queued_writers.is_empty(),
            "{name} after shutdown: {state:?}"
        );
    }
    assert!(matches!(waiter.await.unwrap(), Err(Error::Shutdown)));
    assert!(!reader.is_held() && !writer.is_held());
    timeout(Duration::from_secs(1), reader.lost())
        .await
        .expect("a guard did not learn of the shutdown");
    assert!(matches!(writer.release().await, Err(Error::LeaseLost { .. })));
    assert!(matches!(reader.release().await, Err(Error::LeaseLost { .. })));
    assert!(matches!(read_lock.try_read().await, Err(Error::Shutdown)));
    assert!(matches!(
        client.rwlock("other").write().await,
        Err(Error::Shutdown)
    ));

    // Another client takes both locks at once.
    for name in [&read_name, &write_name] {
        let lock = observer.rwlock(name.as_str());
        lock.try_write().await.unwrap().release().await.unwrap();
    }
}
}

on_both_backends! {
/// The pattern the README recommends: shut the client down, then return from `main`
/// with a guard still in scope. The shutdown released its hold, so the guard's drop
/// starts no second release (no task), and nothing warns that the runtime stopped
/// before one ran. The same drop without the shutdown does both (the checks work).
/// Each `main` runs on a thread and runtime of its own.
async fn a_guard_dropped_after_shutdown_as_main_returns_sends_and_warns_nothing(backend: Backend) {
    capture_warnings();
    // As `#[tokio::main]` would: the guard drops at the end of the body, then the
    // runtime stops. Returns how many tasks the drop started.
    let exit_with_guard = |name: &str, shut_down: bool| {
        let (backend, name) = (backend.clone(), name.to_owned());
        std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let client = backend.client().await;
            let name = name.as_str();
            let guard = client.rwlock(name).write().await.unwrap();
            if shut_down {
                client.shutdown(Duration::from_secs(5)).await.unwrap();
            }
            // Nothing runs between the two counts: this thread is the runtime's.
            let tasks = || Handle::current().metrics().num_alive_tasks();
            let before = tasks();
            drop(guard);
            tasks() - before
        })
        })
        .join()
        .unwrap()
    };
    let (clean, abrupt) = (
        unique_name("shutdown-exit"),
        unique_name("no-shutdown-exit"),
    );
    assert_eq!(
        exit_with_guard(&clean, true),
        0,
        "a second release was started"
    );
    assert_eq!(exit_with_guard(&abrupt, false), 1);
    assert_eq!(warnings_about(&clean), Vec::<String>::new());
    let warnings = warnings_about(&abrupt);
    assert!(
        warnings.len() == 1 && warnings[0].contains("the runtime shut down before"),
        "{warnings:?}"
    );
}
}

on_both_backends! {
/// A shutdown with nothing in flight returns at once.
async fn an_idle_client_shuts_down_at_once(backend: Backend) {
    let client = backend.client().await;
    let lock = client.rwlock(unique_name("shutdown-idle"));
    lock.write().await.unwrap().release().await.unwrap();
    timeout(
        Duration::from_secs(1),
        client.shutdown(Duration::from_secs(5)),
    )
    .await
    .expect("an idle shutdown waited")
    .unwrap();
}
}

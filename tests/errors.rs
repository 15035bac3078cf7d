//! What an error says when printed: `{}` names what happened and to which lock (the
//! lock, the mode, the limit, what was being done, the kind of a server error),
//! `{:#}` of an application's `anyhow::Error` (and [`ErrorChain`]) adds each cause
//! once, and `{:?}` shows the fields. Real errors from a lock on the in-memory
//! backend, on tokio's paused clock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::error::Error as _;
use std::time::Duration;

use redis_rwlock::redis::{ErrorKind, RedisError};
use redis_rwlock::{Error, ErrorChain, LockClient, LockOptions, MemoryStore, Mode, Operation};

/// `{:#}` as an application using anyhow prints it.
fn with_anyhow(err: Error) -> String {
    format!("{:#}", anyhow::Error::new(err))
}

#[tokio::test(start_paused = true)]
async fn a_timeout_names_the_lock_the_mode_and_the_limit() {
    let store = MemoryStore::new();
    let client = LockClient::in_memory(&store);
    let held = client.rwlock("inventory").write().await.unwrap();
    let impatient = client.rwlock_with(
        "inventory",
        LockOptions::default().wait_timeout(Duration::from_secs(1)),
    );
    let err = impatient.write().await.unwrap_err();
    let said = r#"timed out after 1s waiting for the write lock on "inventory""#;
    assert_eq!(err.to_string(), said);
    assert_eq!(
        format!("{:?}", err),
        r#"Timeout { lock: "inventory", mode: Write, waited: 1s }"#
    );
    assert!(err.source().is_none());
    assert_eq!(ErrorChain(&err).to_string(), said);
    assert!(matches!(
        &err,
        Error::Timeout { lock, mode: Mode::Write, waited } if lock == "inventory" && *waited == Duration::from_secs(1)
    ));
    assert_eq!(with_anyhow(err), said);

    let err = impatient.read().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"timed out after 1s waiting for the read lock on "inventory""#
    );
    held.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_lost_lease_names_the_lock_and_the_mode() {
    let store = MemoryStore::new();
    let lock = LockClient::in_memory(&store).rwlock("inventory");
    let guard = lock.write().await.unwrap();
    store.lose_holds("inventory");
    guard.extend().await.unwrap_err();
    let err = guard.release().await.unwrap_err();
    let said = r#"the write lock on "inventory" lost its lease"#;
    assert_eq!(err.to_string(), said);
    assert_eq!(
        format!("{err:?}"),
        r#"LeaseLost { lock: "inventory", mode: Write }"#
    );
    assert_eq!(with_anyhow(err), said);

    let upgradable = lock.upgradable_read().await.unwrap();
    store.lose_holds("inventory");
    let err = upgradable.upgrade().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"the upgradable read lock on "inventory" lost its lease"#
    );
}

#[tokio::test(start_paused = true)]
async fn a_redis_error_says_its_kind_what_was_done_and_on_which_lock() {
    let store = MemoryStore::new();
    let lock = LockClient::in_memory(&store).rwlock("inventory");

    store.fail_next(1);
    let err = lock.try_write().await.unwrap_err();
    let said = r#"redis request failed (connection dropped) while acquiring the write lock on "inventory""#;
    assert_eq!(err.to_string(), said);
    // The cause is the source, printed after the message once, never inside it.
    let cause = err.source().expect("the driver's error").to_string();
    assert!(cause.contains("injected failure"), "{cause}");
    assert!(!said.contains(&cause));
    let debug = format!("{err:?}");
    assert!(
        debug.starts_with(
            r#"Redis(RedisFailure { lock: Some("inventory"), doing: Some(Acquire(Write)), source: "#
        ),
        "{debug}"
    );
    assert!(matches!(
        &err,
        Error::Redis(failure) if failure.lock() == Some("inventory") && failure.doing() == Some(Operation::Acquire(Mode::Write))
    ));
    assert_eq!(ErrorChain(&err).to_string(), format!("{said}: {cause}"));
    assert_eq!(with_anyhow(err), format!("{said}: {cause}"));

    let reader = lock.read().await.unwrap();
    store.fail_next(1);
    let err = reader.extend().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"redis request failed (connection dropped) while renewing the read lock on "inventory""#
    );
    reader.release().await.unwrap();

    store.fail_next(1);
    let err = lock.state().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"redis request failed (connection dropped) while reading the state of the lock on "inventory""#
    );
}

#[test]
fn a_bare_driver_error_converts_and_says_its_kind() {
    let driver = RedisError::from((ErrorKind::Io, "connection reset"));
    let err: Error = driver.into();
    assert_eq!(err.to_string(), "redis request failed (connection dropped)");
    assert!(
        format!("{err:?}").starts_with("Redis(RedisFailure { lock: None, doing: None, source: ")
    );
    let err = Error::from(RedisError::from(std::io::Error::from(
        std::io::ErrorKind::ConnectionRefused,
    )));
    assert_eq!(err.to_string(), "redis request failed (connection refused)");
    let err = Error::from(RedisError::from(std::io::Error::from(
        std::io::ErrorKind::TimedOut,
    )));
    assert_eq!(err.to_string(), "redis request failed (timed out)");
}

#[tokio::test(start_paused = true)]
async fn would_block_stays_a_plain_signal() {
    let store = MemoryStore::new();
    let lock = LockClient::in_memory(&store).rwlock("inventory");
    let held = lock.write().await.unwrap();
    let err = lock.try_read().await.unwrap_err();
    assert!(matches!(err, Error::WouldBlock));
    assert_eq!(err.to_string(), "operation would block");
    assert_eq!(format!("{err:?}"), "WouldBlock");
    held.release().await.unwrap();
}

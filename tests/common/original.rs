//! Clients of the original design (tests/original/), run beside the crate.

use std::time::{SystemTime, UNIX_EPOCH};

use redis::Script;
use redis::aio::ConnectionLike;

fn script(source: &str) -> Script {
    Script::new(source)
}

/// The caller's clock in ms, as the original design stamps holds.
pub fn client_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// An original-design client on the cluster version's hash.
pub struct OriginalHash {
    pub key: String,
    pub key_ttl_ms: u64,
    pub read_timeout_ms: u64,
    pub write_timeout_ms: u64,
}

impl OriginalHash {
    /// The post's defaults: key 10 s, read 1 s, write 3 s.
    pub fn new(key: impl Into<String>) -> Self {
        OriginalHash {
            key: key.into(),
            key_ttl_ms: 10_000,
            read_timeout_ms: 1_000,
            write_timeout_ms: 3_000,
        }
    }

    async fn acquire(
        &self,
        source: &str,
        conn: &mut (impl ConnectionLike + Send),
        now: i64,
    ) -> bool {
        let granted: i64 = script(source)
            .key(&self.key)
            .arg(self.key_ttl_ms)
            .arg(self.read_timeout_ms)
            .arg(self.write_timeout_ms)
            .arg(now)
            .invoke_async(conn)
            .await
            .expect("original acquire script");
        granted == 1
    }

    /// Returns the stamp it holds by, or None when refused.
    pub async fn acquire_read(&self, conn: &mut (impl ConnectionLike + Send)) -> Option<i64> {
        let now = client_now_ms();
        self.acquire(include_str!("../original/hash_acquire_read.lua"), conn, now)
            .await
            .then_some(now)
    }

    pub async fn acquire_write(&self, conn: &mut (impl ConnectionLike + Send)) -> Option<i64> {
        let now = client_now_ms();
        self.acquire(
            include_str!("../original/hash_acquire_write.lua"),
            conn,
            now,
        )
        .await
        .then_some(now)
    }

    pub async fn release(&self, conn: &mut (impl ConnectionLike + Send), field: &str, stamp: i64) {
        let _: i64 = script(include_str!("../original/hash_release.lua"))
            .key(&self.key)
            .arg(field)
            .arg(stamp)
            .invoke_async(conn)
            .await
            .expect("original release script");
    }
}

/// An original-design client on the single-instance version's two keys.
pub struct OriginalTwoKey {
    pub read_key: String,
    pub write_key: String,
    pub timeout_secs: u64,
}

impl OriginalTwoKey {
    pub fn new(read_key: impl Into<String>, write_key: impl Into<String>) -> Self {
        OriginalTwoKey {
            read_key: read_key.into(),
            write_key: write_key.into(),
            timeout_secs: 10,
        }
    }

    async fn run(&self, source: &str, conn: &mut (impl ConnectionLike + Send)) -> bool {
        let granted: i64 = script(source)
            .key(&self.read_key)
            .key(&self.write_key)
            .arg(self.timeout_secs)
            .invoke_async(conn)
            .await
            .expect("original two-key script");
        granted == 1
    }

    pub async fn acquire_read(&self, conn: &mut (impl ConnectionLike + Send)) -> bool {
        self.run(include_str!("../original/twokey_acquire_read.lua"), conn)
            .await
    }

    pub async fn acquire_write(&self, conn: &mut (impl ConnectionLike + Send)) -> bool {
        self.run(include_str!("../original/twokey_acquire_write.lua"), conn)
            .await
    }

    /// Deletes `key` (the read or the write key), without any owner check.
    pub async fn release(&self, conn: &mut (impl ConnectionLike + Send), key: &str) {
        let _: i64 = script(include_str!("../original/twokey_release.lua"))
            .key(key)
            .invoke_async(conn)
            .await
            .expect("original release script");
    }
}

//! Typed wrappers around the Lua scripts in `lua/`: the only place that knows their
//! argument order and reply shapes.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Cmd, FromRedisValue, Script};

use crate::Error;
use crate::connection::Connection;
pub(crate) use crate::state::LockMode;
use crate::token::Token;

/// Builds a hash-layout script: the shared prelude, then the operation.
fn hash_script(operation: &str) -> Script {
    Script::new(&format!(
        "{}\n{operation}",
        include_str!("../lua/prelude.lua")
    ))
}

static ACQUIRE_READ: LazyLock<Script> =
    LazyLock::new(|| hash_script(include_str!("../lua/acquire_read.lua")));
static ACQUIRE_WRITE: LazyLock<Script> =
    LazyLock::new(|| hash_script(include_str!("../lua/acquire_write.lua")));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| hash_script(include_str!("../lua/release.lua")));
static RENEW: LazyLock<Script> = LazyLock::new(|| hash_script(include_str!("../lua/renew.lua")));
static DOWNGRADE: LazyLock<Script> =
    LazyLock::new(|| hash_script(include_str!("../lua/downgrade.lua")));
static FENCED_WRITE: LazyLock<Script> =
    LazyLock::new(|| hash_script(include_str!("../lua/fenced_write.lua")));
static FORCE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| hash_script(include_str!("../lua/force_release.lua")));
static STATE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/state.lua")));

/// The answer of an acquire script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// The hold is ours; `fence` is the fencing token (0 for readers).
    Granted { fence: u64 },
    /// Someone else holds or is first in line; their holds end within `holds_for`
    /// unless renewed.
    Refused { holds_for: Duration },
}

/// One lock's hash and the settings every script call carries.
#[derive(Clone, Debug)]
pub(crate) struct HashLock {
    /// The hash, `"{prefix}:{name}"`.
    pub(crate) key: String,
    /// Where releases are announced, in the key's slot.
    pub(crate) channel: String,
    /// Leases of original-design clients (read, write), in ms.
    pub(crate) original_ms: (u64, u64),
}

impl HashLock {
    pub(crate) fn new(prefix: &str, name: &str, original: (Duration, Duration)) -> Self {
        let key = format!("{prefix}:{{{name}}}");
        HashLock {
            channel: format!("{key}:released"),
            key,
            original_ms: (millis(original.0), millis(original.1)),
        }
    }

    /// Runs `script` on the lock's key (then `extra_keys`) with the common
    /// arguments and `args`; with `replicas`, pipelines `WAIT` behind it on the same
    /// node connection and also returns how many replicas acknowledged.
    ///
    /// Sends EVALSHA; on NOSCRIPT (a flushed or failed-over node) loads the script on
    /// every node and tries once more.
    async fn eval<T: FromRedisValue>(
        &self,
        conn: &Connection,
        script: &Script,
        extra_keys: &[&str],
        args: impl FnOnce(&mut Cmd),
        replicas: Option<Replicas>,
    ) -> Result<(T, u32), Error> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash())
            .arg(1 + extra_keys.len())
            .arg(&self.key)
            .arg(extra_keys)
            .arg(conn.publish_command())
            .arg(self.original_ms.0)
            .arg(self.original_ms.1);
        args(&mut cmd);
        let mut conn = conn.clone();
        let mut loaded = false;
        loop {
            let reply = match replicas {
                None => cmd
                    .query_async::<T>(&mut conn)
                    .await
                    .map(|reply| (reply, 0)),
                Some(Replicas { count, timeout }) => {
                    redis::pipe()
                        .add_command(cmd.clone())
                        .cmd("WAIT")
                        .arg(count)
                        .arg(millis(timeout))
                        .query_async::<(T, u32)>(&mut conn)
                        .await
                }
            };
            match reply {
                Err(err) if err.code() == Some("NOSCRIPT") && !loaded => {
                    script.load_async(&mut conn).await?;
                    loaded = true;
                }
                other => return other.map_err(|err| Error::from_script(err, &self.key)),
            }
        }
    }

    /// Runs `script` without waiting for replicas.
    async fn run<T: FromRedisValue>(
        &self,
        conn: &Connection,
        script: &Script,
        args: impl FnOnce(&mut Cmd),
    ) -> Result<T, Error> {
        Ok(self.eval(conn, script, &[], args, None).await?.0)
    }

    /// Tries to take a read hold for `token`.
    pub(crate) async fn acquire_read(
        &self,
        conn: &Connection,
        token: &Token,
        lease: Duration,
        writer_preferred: bool,
        replicas: Option<Replicas>,
    ) -> Result<(Acquired, u32), Error> {
        let args = |cmd: &mut Cmd| {
            cmd.arg(token.as_str())
                .arg(millis(lease))
                .arg(u8::from(writer_preferred));
        };
        let (reply, acked) = self.eval(conn, &ACQUIRE_READ, &[], args, replicas).await?;
        Ok((decode_acquired(reply), acked))
    }

    /// Tries to take the write hold for `token`; when refused, queues it for
    /// `intent` (zero: does not queue).
    pub(crate) async fn acquire_write(
        &self,
        conn: &Connection,
        token: &Token,
        lease: Duration,
        intent: Duration,
        replicas: Option<Replicas>,
    ) -> Result<(Acquired, u32), Error> {
        let args = |cmd: &mut Cmd| {
            cmd.arg(token.as_str())
                .arg(millis(lease))
                .arg(millis(intent));
        };
        let (reply, acked) = self.eval(conn, &ACQUIRE_WRITE, &[], args, replicas).await?;
        Ok((decode_acquired(reply), acked))
    }

    /// Ends whatever `token` has (a hold in either mode, a place in the writers'
    /// queue); true when a hold was removed.
    pub(crate) async fn release(&self, conn: &Connection, token: &Token) -> Result<bool, Error> {
        let removed: i64 = self
            .run(conn, &RELEASE, |cmd| {
                cmd.arg(token.as_str());
            })
            .await?;
        Ok(removed == 1)
    }

    /// Extends `token`'s hold to `lease` from now; false when the hold is gone.
    pub(crate) async fn renew(
        &self,
        conn: &Connection,
        token: &Token,
        lease: Duration,
    ) -> Result<bool, Error> {
        let renewed: i64 = self
            .run(conn, &RENEW, |cmd| {
                cmd.arg(token.as_str()).arg(millis(lease));
            })
            .await?;
        Ok(renewed == 1)
    }

    /// Turns `token`'s write hold into a read hold of `lease`; false when it is gone.
    pub(crate) async fn downgrade(
        &self,
        conn: &Connection,
        token: &Token,
        lease: Duration,
    ) -> Result<bool, Error> {
        let done: i64 = self
            .run(conn, &DOWNGRADE, |cmd| {
                cmd.arg(token.as_str()).arg(millis(lease));
            })
            .await?;
        Ok(done == 1)
    }

    /// Applies `writes` if `token` still holds the write lock; false (nothing
    /// written) when it does not.
    pub(crate) async fn fenced_write(
        &self,
        conn: &Connection,
        token: &Token,
        writes: &[Write],
    ) -> Result<bool, Error> {
        let keys: Vec<&str> = writes.iter().map(|w| w.key.as_str()).collect();
        let args = |cmd: &mut Cmd| {
            cmd.arg(token.as_str());
            for write in writes {
                // The script reads an expiry of 0 as "none".
                let expiry_ms = write.expiry.map_or(0, millis);
                cmd.arg(write.op).arg(&write.value).arg(expiry_ms);
            }
        };
        let (fence, _): (u64, u32) = self.eval(conn, &FENCED_WRITE, &keys, args, None).await?;
        Ok(fence > 0)
    }

    /// Ends every hold (the operator's break-glass); returns how many there were.
    pub(crate) async fn force_release(&self, conn: &Connection) -> Result<u64, Error> {
        self.run(conn, &FORCE_RELEASE, |_| {}).await
    }

    /// The server's time (ms) and every field of the hash.
    pub(crate) async fn fields(
        &self,
        conn: &Connection,
    ) -> Result<(i64, Vec<(String, String)>), Error> {
        self.run(conn, &STATE, |_| {}).await
    }
}

/// `WAIT` for this many replicas, at most this long, after a script.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Replicas {
    pub(crate) count: u32,
    pub(crate) timeout: Duration,
}

/// One key write of a fenced batch, as the script takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Write {
    pub(crate) key: String,
    /// `set` or `del`.
    pub(crate) op: &'static str,
    pub(crate) value: Vec<u8>,
    /// Expiry of a `set` (at least a millisecond: checked before sending).
    pub(crate) expiry: Option<Duration>,
}

fn decode_acquired((granted, value): (i64, i64)) -> Acquired {
    if granted == 1 {
        Acquired::Granted {
            fence: u64::try_from(value).unwrap_or(0),
        }
    } else {
        Acquired::Refused {
            holds_for: Duration::from_millis(u64::try_from(value).unwrap_or(0)),
        }
    }
}

/// Whole milliseconds, as the scripts count.
pub(crate) fn millis(span: Duration) -> u64 {
    u64::try_from(span.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slot::key_slot;

    #[test]
    fn key_and_channel_share_the_name_as_hash_tag() {
        let lock = HashLock::new(
            "rwlock",
            "inventory",
            (Duration::from_secs(1), Duration::from_secs(3)),
        );
        assert_eq!(lock.key, "rwlock:{inventory}");
        assert_eq!(lock.channel, "rwlock:{inventory}:released");
        assert_eq!(lock.original_ms, (1000, 3000));
        assert_eq!(
            key_slot(lock.key.as_bytes()),
            key_slot(lock.channel.as_bytes())
        );
    }

    #[test]
    fn replies_decode() {
        assert_eq!(decode_acquired((1, 42)), Acquired::Granted { fence: 42 });
        assert_eq!(
            decode_acquired((0, 1500)),
            Acquired::Refused {
                holds_for: Duration::from_millis(1500)
            }
        );
    }
}

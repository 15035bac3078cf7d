//! Typed wrappers around the Lua scripts in `lua/`: the only place that knows their
//! argument order and reply shapes.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

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

    /// Runs `script` with the common arguments, then `args`.
    async fn run<T: redis::FromRedisValue>(
        &self,
        conn: &Connection,
        script: &Script,
        args: &[&dyn ToArg],
    ) -> Result<T, Error> {
        let mut call = script.key(&self.key);
        call.arg(conn.publish_command())
            .arg(self.original_ms.0)
            .arg(self.original_ms.1);
        for arg in args {
            arg.push(&mut call);
        }
        call.invoke_async(&mut conn.clone())
            .await
            .map_err(|err| Error::from_script(err, &self.key))
    }

    /// Tries to take a read hold for `token`.
    pub(crate) async fn acquire_read(
        &self,
        conn: &Connection,
        token: &Token,
        lease: Duration,
        writer_preferred: bool,
    ) -> Result<Acquired, Error> {
        let reply: (i64, i64) = self
            .run(
                conn,
                &ACQUIRE_READ,
                &[&token.as_str(), &millis(lease), &(writer_preferred as u8)],
            )
            .await?;
        Ok(decode_acquired(reply))
    }

    /// Tries to take the write hold for `token`; when refused, queues it for
    /// `intent` (zero: does not queue).
    pub(crate) async fn acquire_write(
        &self,
        conn: &Connection,
        token: &Token,
        lease: Duration,
        intent: Duration,
    ) -> Result<Acquired, Error> {
        let reply: (i64, i64) = self
            .run(
                conn,
                &ACQUIRE_WRITE,
                &[&token.as_str(), &millis(lease), &millis(intent)],
            )
            .await?;
        Ok(decode_acquired(reply))
    }

    /// Ends whatever `token` has (a hold in either mode, a place in the writers'
    /// queue); true when a hold was removed.
    pub(crate) async fn release(&self, conn: &Connection, token: &Token) -> Result<bool, Error> {
        let removed: i64 = self.run(conn, &RELEASE, &[&token.as_str()]).await?;
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
            .run(conn, &RENEW, &[&token.as_str(), &millis(lease)])
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
            .run(conn, &DOWNGRADE, &[&token.as_str(), &millis(lease)])
            .await?;
        Ok(done == 1)
    }

    /// The server's time (ms) and every field of the hash.
    pub(crate) async fn fields(
        &self,
        conn: &Connection,
    ) -> Result<(i64, Vec<(String, String)>), Error> {
        STATE
            .key(&self.key)
            .invoke_async(&mut conn.clone())
            .await
            .map_err(|err| Error::from_script(err, &self.key))
    }
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

/// A script argument of any type the wrappers pass.
trait ToArg: Sync {
    fn push(&self, call: &mut redis::ScriptInvocation<'_>);
}

impl<T: redis::ToRedisArgs + Sync> ToArg for T {
    fn push(&self, call: &mut redis::ScriptInvocation<'_>) {
        call.arg(self);
    }
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

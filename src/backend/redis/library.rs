//! The hash layout's scripts as one Redis function library (Redis 7.0+, Valkey):
//! loaded once per server with `FUNCTION LOAD`, then called by name with `FCALL`
//! and `FCALL_RO`.
//!
//! Why: every `EVALSHA` runs the whole script from the top, so the shared prelude
//! defines its thirty-odd local functions again on every call. A library runs the
//! prelude once, when it is loaded, and each call only runs its operation. Functions
//! are also replicated to replicas and persisted with the data set, so a promoted
//! replica has them; `SCRIPT LOAD`ed scripts are neither.
//!
//! When it is loaded: lazily. The first call that meets `Function not found` on a
//! server (a new node, `FUNCTION FLUSH`, a restart without persistence) loads the
//! library there and calls again; a concurrent loader's `already exists` counts as
//! loaded. That path is needed in any case, and loading eagerly at connect as well
//! would cost every client an extra request to every master before its first lock
//! (also on masters it never uses), could not reach a master that is down at that
//! moment, and would ask for the `FUNCTION LOAD` permission just to connect. A
//! loaded library stays until it is flushed, so the lazy load happens about once
//! per server and crate version.
//!
//! When it is not used: a server that refuses `FCALL`, `FCALL_RO` or `FUNCTION
//! LOAD` (an ACL user without those commands) or cannot load the library makes the
//! client send `EVALSHA` from then on ([`Functions`]); the legacy layout always
//! does (its scripts read `KEYS` before the operation starts).

use std::sync::atomic::{AtomicBool, Ordering};

use redis::Script;

use crate::backend::redis::connection::Connection;

/// How many hex digits of the content hash name a library: enough that two
/// versions of the crate never meet under one name.
const HASH_DIGITS: usize = 12;

/// One library's name and source.
pub(crate) struct Library {
    /// `rwlock_<hash>`, where `<hash>` is a hash of the library's own text: a
    /// different crate version loads a library of another name, and both run side
    /// by side in one fleet.
    name: String,
    source: String,
}

/// One function of a library: an operation file's text as its body.
pub(crate) struct Function<'a> {
    /// The function's name within the library (`acquire_read`).
    pub(crate) name: &'a str,
    /// The operation file: it finds `KEYS` and `ARGV` as the function's parameters.
    pub(crate) body: &'a str,
    /// Its flags, as `redis.register_function` takes them (`no-writes`...).
    pub(crate) flags: &'a [&'a str],
}

/// An operation's text as the local function `op_<name>(KEYS, ARGV)`: how the
/// library registers it, and how an operation that calls others finds them.
pub(crate) fn as_function(name: &str, body: &str) -> String {
    format!("local function op_{name}(KEYS, ARGV)\n{body}\nend\n")
}

impl Library {
    /// The library of `prelude` (run once, at load) and `functions`, each of which
    /// sees the prelude's locals as upvalues, and the functions defined before it
    /// (as `op_<name>`).
    pub(crate) fn new(prelude: &str, functions: &[Function<'_>]) -> Self {
        let text = |name: &str| {
            let mut source = format!("#!lua name={name}\n{prelude}\n");
            for f in functions {
                source.push_str(&as_function(f.name, f.body));
            }
            for f in functions {
                let flags: Vec<String> = f.flags.iter().map(|flag| format!("'{flag}'")).collect();
                source.push_str(&format!(
                    "redis.register_function{{function_name='{name}_{0}', callback=op_{0}, flags={{{1}}}}}\n",
                    f.name,
                    flags.join(", ")
                ));
            }
            source
        };
        // The hash of the text under a fixed name, so the name does not feed itself.
        let hash = Script::new(&text("rwlock")).get_hash().to_owned();
        let name = format!("rwlock_{}", &hash[..HASH_DIGITS]);
        Library {
            source: text(&name),
            name,
        }
    }

    /// `rwlock_<hash>`: what `FUNCTION LIST` and `FUNCTION DELETE` call it.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The text `FUNCTION LOAD` takes.
    #[cfg(test)]
    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// What `FCALL` names `function` by: function names are global on a server, so
    /// they carry the library's name.
    pub(crate) fn function_name(&self, function: &str) -> String {
        format!("{}_{function}", self.name)
    }

    /// Loads the library on the master of `key` (the server itself when standalone),
    /// where a call on `key` just found it missing. Done when it is there, also when
    /// another client loaded it first.
    pub(crate) async fn load(&self, conn: &Connection, key: &str) -> redis::RedisResult<()> {
        let mut cmd = redis::cmd("FUNCTION");
        cmd.arg("LOAD").arg(&self.source);
        match conn.on_master_of(cmd, key).await {
            Ok(_) => Ok(()),
            Err(err) if already_loaded(&err) => Ok(()),
            Err(err) => Err(err),
        }
    }
}

/// `Function not found`: the server has no library of this name (never loaded there,
/// flushed, or lost in a restart without persistence).
pub(crate) fn is_missing(err: &redis::RedisError) -> bool {
    err.code() == Some("ERR") && err.detail() == Some("Function not found")
}

/// `Library '...' already exists`: someone loaded it meanwhile.
fn already_loaded(err: &redis::RedisError) -> bool {
    err.code() == Some("ERR")
        && err.detail().is_some_and(|detail| {
            detail.starts_with("Library ") && detail.ends_with("already exists")
        })
}

/// The user may not run `FCALL`, `FCALL_RO` or `FUNCTION LOAD` at all. Other NOPERM
/// replies (a key, a channel) would refuse `EVALSHA` just the same.
pub(crate) fn is_refused(err: &redis::RedisError) -> bool {
    err.code() == Some("NOPERM")
        && err
            .detail()
            .is_some_and(|detail| detail.contains("'fcall") || detail.contains("'function"))
}

/// A failed `FUNCTION LOAD` that would fail again every time: the user may not
/// load (NOPERM), or the server rejects the library itself (`ERR`: it does not
/// compile, or its function names are taken). Other codes (OOM, READONLY, LOADING,
/// BUSY...) tell of the server's state of the moment.
pub(crate) fn refuses_for_good(err: &redis::RedisError) -> bool {
    is_refused(err) || err.code() == Some("ERR")
}

/// Whether a client still calls the library. Set aside for good at the first
/// refusal or failed load, so a locked-down user pays for it once.
#[derive(Debug, Default)]
pub(crate) struct Functions {
    given_up: AtomicBool,
}

impl Functions {
    /// True until [`give_up`](Self::give_up).
    pub(crate) fn in_use(&self) -> bool {
        !self.given_up.load(Ordering::Relaxed)
    }

    /// From now on this client sends `EVALSHA`; says why, once.
    pub(crate) fn give_up(&self, why: &redis::RedisError) {
        if self.given_up.swap(true, Ordering::Relaxed) {
            return;
        }
        if why.code() == Some("NOPERM") {
            tracing::info!(reason = %why, "the server refuses function calls or loads to this user: lock scripts go as EVALSHA from now on (add +fcall +fcall_ro +function|load to the ACL rule for the faster path)");
        } else {
            tracing::warn!(reason = %why, "the lock's function library could not be loaded: lock scripts go as EVALSHA from now on");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server's error reply as the driver hands it over.
    fn reply(line: &str) -> redis::RedisError {
        redis::parse_redis_value(format!("-{line}\r\n").as_bytes())
            .and_then(redis::Value::extract_error)
            .expect_err("an error reply")
    }

    #[test]
    fn server_replies_are_told_apart() {
        // As Redis 7.0 and Valkey 8 word them.
        assert!(is_missing(&reply("ERR Function not found")));
        assert!(!is_missing(&reply("NOSCRIPT No matching script.")));
        assert!(already_loaded(&reply(
            "ERR Library 'rwlock_0123456789ab' already exists"
        )));
        assert!(!already_loaded(&reply(
            "ERR Function rwlock_0123456789ab_state already exists"
        )));
        for refusal in [
            "NOPERM this user has no permissions to run the 'fcall' command",
            "NOPERM User locker has no permissions to run the 'fcall_ro' command",
            "NOPERM User locker has no permissions to run the 'function|load' command",
        ] {
            assert!(is_refused(&reply(refusal)), "{refusal}");
        }
        // A load that will never succeed, and one that may later.
        assert!(refuses_for_good(&reply(
            "NOPERM User locker has no permissions to run the 'function|load' command"
        )));
        assert!(refuses_for_good(&reply(
            "ERR Error compiling function: user_function:2: '=' expected near 'y'"
        )));
        assert!(!refuses_for_good(&reply(
            "OOM command not allowed when used memory > 'maxmemory'."
        )));
        assert!(!refuses_for_good(&reply(
            "READONLY You can't write against a read only replica."
        )));
        // Refusals that EVALSHA would meet just the same.
        for other in [
            "NOPERM No permissions to access a key",
            "NOPERM this user has no permissions to access one of the channels used as arguments",
            "NOPERM this user has no permissions to run the 'evalsha' command",
        ] {
            assert!(!is_refused(&reply(other)), "{other}");
        }
    }

    #[test]
    fn the_name_follows_the_text() {
        let f = |body| Function {
            name: "op",
            body,
            flags: &[],
        };
        let one = Library::new("local x = 1", &[f("return x")]);
        let same = Library::new("local x = 1", &[f("return x")]);
        let other = Library::new("local x = 1", &[f("return x + 1")]);
        assert_eq!(one.name, same.name);
        assert_ne!(one.name, other.name);
        assert_eq!(one.name.len(), "rwlock_".len() + HASH_DIGITS);
        assert!(
            one.source
                .starts_with(&format!("#!lua name={}\n", one.name))
        );
        assert!(
            one.source
                .contains(&format!("function_name='{}'", one.function_name("op")))
        );
    }
}

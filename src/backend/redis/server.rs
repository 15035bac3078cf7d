//! The server check at connect: one `INFO server` tells which server this is, which
//! Redis version it speaks, and whether it runs in cluster mode.
//!
//! The lock needs Redis 7.0-level commands: on a cluster, sharded pub/sub
//! (`SPUBLISH` inside scripts, `SSUBSCRIBE`), which older servers lack; a standalone
//! server is held to the same floor, the oldest version the crate is tested on.
//! Servers that are not Redis state the Redis version they are compatible with in
//! the same `redis_version` field (Valkey 8 reports `redis_version:7.2.4` beside
//! `valkey_version:8.1.8`), so that field is what is compared.

use crate::Error;

/// The oldest Redis version (major, minor) whose commands the lock uses.
pub(crate) const MIN_REDIS: (u32, u32) = (7, 0);

/// What `INFO server` says about a server.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct ServerInfo {
    /// `server_name` (`"valkey"`), or `"redis"` when the field is absent.
    pub(crate) name: String,
    /// The server's own version: `<name>_version` when it names itself, else
    /// `redis_version`.
    pub(crate) version: Option<String>,
    /// `redis_version`: the Redis version the server implements.
    pub(crate) redis_version: Option<String>,
    /// `redis_mode` (Redis, Valkey 7) or `server_mode` (Valkey 8): `standalone`,
    /// `cluster` or `sentinel`.
    pub(crate) mode: Option<String>,
}

impl ServerInfo {
    /// Reads the fields of an `INFO server` (or full `INFO`) reply.
    pub(crate) fn parse(info: &str) -> Self {
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
                .map(|value| value.trim().to_owned())
                .filter(|value| !value.is_empty())
        };
        let redis_version = field("redis_version");
        let name = field("server_name").unwrap_or_else(|| "redis".to_owned());
        let version = if name == "redis" {
            redis_version.clone()
        } else {
            field(&format!("{name}_version")).or_else(|| redis_version.clone())
        };
        ServerInfo {
            name,
            version,
            redis_version,
            mode: field("redis_mode").or_else(|| field("server_mode")),
        }
    }

    /// `"redis 7.0.15"`, `"valkey 8.1.8 (redis_version 7.2.4)"`.
    pub(crate) fn describe(&self) -> String {
        let version = self.version.as_deref().unwrap_or("(version unknown)");
        match &self.redis_version {
            Some(redis) if self.name != "redis" => {
                format!("{} {version} (redis_version {redis})", self.name)
            }
            _ => format!("{} {version}", self.name),
        }
    }

    /// `(major, minor)` of `redis_version`, if it reads as `<major>.<minor>...`.
    pub(crate) fn redis_major_minor(&self) -> Option<(u32, u32)> {
        let mut parts = self.redis_version.as_deref()?.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts
            .next()?
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .ok()?;
        Some((major, minor))
    }

    /// Checks the version for a server reached as `what` (e.g. "the server at
    /// 127.0.0.1:6379"), a cluster node or not. `Ok(false)` when the reply names no
    /// readable version: the caller cannot tell and lets the first lock call find out.
    pub(crate) fn check_version(&self, what: &str, cluster: bool) -> Result<bool, Error> {
        let Some(found) = self.redis_major_minor() else {
            return Ok(false);
        };
        if found < MIN_REDIS {
            let (major, minor) = MIN_REDIS;
            let why = if cluster {
                format!(
                    "sharded pub/sub (SPUBLISH/SSUBSCRIBE) needs redis {major}.{minor} or newer"
                )
            } else {
                format!(
                    "the lock needs redis {major}.{minor} or newer (the oldest it is tested on)"
                )
            };
            return Err(Error::InvalidOptions(format!(
                "{what} runs {}, too old: {why}",
                self.describe()
            )));
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REDIS_7_0: &str = "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\n\
        redis_mode:standalone\r\nos:Linux 6.1 x86_64\r\ntcp_port:6379\r\n";
    const VALKEY_8_1: &str = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\n\
        valkey_version:8.1.8\r\nvalkey_release_stage:ga\r\nserver_mode:cluster\r\n";
    const REDIS_6_2: &str = "# Server\r\nredis_version:6.2.14\r\nredis_mode:cluster\r\n";

    #[test]
    fn reads_redis() {
        let info = ServerInfo::parse(REDIS_7_0);
        assert_eq!(info.name, "redis");
        assert_eq!(info.version.as_deref(), Some("7.0.15"));
        assert_eq!(info.redis_major_minor(), Some((7, 0)));
        assert_eq!(info.mode.as_deref(), Some("standalone"));
        assert_eq!(info.describe(), "redis 7.0.15");
        assert!(info.check_version("the server at x", false).unwrap());
    }

    #[test]
    fn reads_valkey_by_its_redis_version() {
        let info = ServerInfo::parse(VALKEY_8_1);
        assert_eq!(info.name, "valkey");
        assert_eq!(info.version.as_deref(), Some("8.1.8"));
        assert_eq!(info.redis_major_minor(), Some((7, 2)));
        // Valkey 8 calls the field server_mode.
        assert_eq!(info.mode.as_deref(), Some("cluster"));
        assert_eq!(info.describe(), "valkey 8.1.8 (redis_version 7.2.4)");
        assert!(info.check_version("the cluster at x", true).unwrap());
    }

    #[test]
    fn refuses_redis_6_naming_server_and_version() {
        let info = ServerInfo::parse(REDIS_6_2);
        let err = info
            .check_version("the cluster at 127.0.0.1:7000", true)
            .unwrap_err();
        assert!(matches!(err, Error::InvalidOptions(_)), "{err:?}");
        assert_eq!(
            err.to_string(),
            "invalid options: the cluster at 127.0.0.1:7000 runs redis 6.2.14, too old: \
             sharded pub/sub (SPUBLISH/SSUBSCRIBE) needs redis 7.0 or newer"
        );
        let err = info.check_version("the server at h:1", false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid options: the server at h:1 runs redis 6.2.14, too old: \
             the lock needs redis 7.0 or newer (the oldest it is tested on)"
        );
    }

    #[test]
    fn compares_numbers_not_text() {
        for (version, ok) in [
            ("7.0.0", true),
            ("7.0.0-rc1", true),
            ("7.10.1", true),
            ("8.0.2", true),
            ("10.0.0", true),
            ("255.255.255", true), // unstable builds
            ("6.2.14", false),
            ("6.9", false),
            ("5.0.14", false),
        ] {
            let info = ServerInfo::parse(&format!("redis_version:{version}\n"));
            assert_eq!(
                info.check_version("x", true).is_ok(),
                ok,
                "redis_version {version}"
            );
        }
    }

    #[test]
    fn an_old_server_of_another_name_is_named_in_the_error() {
        let info =
            ServerInfo::parse("redis_version:6.0.16\nserver_name:keydb\nkeydb_version:6.3.4\n");
        let err = info.check_version("the server at h:1", false).unwrap_err();
        assert!(
            err.to_string()
                .contains("runs keydb 6.3.4 (redis_version 6.0.16), too old"),
            "{err}"
        );
    }

    #[test]
    fn an_unreadable_version_is_not_an_error() {
        for text in [
            "",
            "# Server\nos:Linux\n",
            "redis_version:\n",
            "redis_version:x.y\n",
        ] {
            let info = ServerInfo::parse(text);
            assert!(!info.check_version("x", true).unwrap(), "{text:?}");
        }
        // A named server without its own version field falls back to redis_version.
        let info = ServerInfo::parse("server_name:other\nredis_version:7.2.0\n");
        assert_eq!(info.describe(), "other 7.2.0 (redis_version 7.2.0)");
    }
}

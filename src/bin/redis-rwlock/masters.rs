//! Server-wide commands (`FUNCTION ...`) on every master of the cluster, or on the
//! one server: the lock client sends commands on a lock's key only, so the tool opens
//! a plain connection of its own for these.

use std::time::Duration;

use redis_rwlock::redis::aio::MultiplexedConnection;
use redis_rwlock::redis::cluster_async::ClusterConnection;
use redis_rwlock::redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis_rwlock::redis::{self, AsyncConnectionConfig, RedisError, Value};
use redis_rwlock::{Error, cluster_client_builder};

use crate::connect::Endpoint;
use crate::failure::Failure;

/// The limits of a standalone request, as the lock client's: 1 s to connect, 2 s for
/// a reply (a cluster connection gets them from [`cluster_client_builder`]).
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Every master: a cluster's (as the driver knows them), or the one server.
pub enum Masters {
    /// A cluster's masters, reached through the driver's routing.
    Cluster(ClusterConnection),
    /// The one server, and its `host:port` for messages.
    Standalone(MultiplexedConnection, String),
}

/// Why a command to the masters failed.
#[derive(Debug, thiserror::Error)]
pub enum MastersError {
    /// The ACL user may not run the command (NOPERM).
    #[error(
        "the Redis user may not run {command} on {master}: add +{permission} to its ACL \
         rule (on every node)"
    )]
    Refused {
        /// The command, as `FUNCTION DELETE`.
        command: String,
        /// The ACL rule's name for it, as `function|delete`.
        permission: String,
        /// `host:port`.
        master: String,
        /// The server's reply.
        #[source]
        source: RedisError,
    },
    /// The server is a replica (a standalone URL naming one): it takes no writes.
    #[error(
        "{master} is a replica and refuses {command}: point --url at its master (the \
         replicas follow their master)"
    )]
    Replica {
        /// The command, as `FUNCTION DELETE`.
        command: String,
        /// `host:port`.
        master: String,
        /// The server's reply.
        #[source]
        source: RedisError,
    },
    /// Another error reply of one master.
    #[error("{master} failed {command}")]
    Failed {
        /// The command, as `FUNCTION LIST`.
        command: String,
        /// `host:port`.
        master: String,
        /// The server's reply.
        #[source]
        source: RedisError,
    },
    /// A master could not be reached, or did not answer in time.
    #[error("{command} did not reach every master")]
    Unreachable {
        /// The command, as `FUNCTION LIST`.
        command: String,
        /// The driver's error.
        #[source]
        source: RedisError,
    },
}

impl MastersError {
    /// `master`'s error reply `err` to `args`, told apart by its code.
    pub fn reply(args: &[&str], master: &str, err: RedisError) -> Self {
        let command = command_name(args);
        let master = master.to_owned();
        match err.code() {
            Some("NOPERM") => MastersError::Refused {
                permission: command.to_lowercase().replace(' ', "|"),
                command,
                master,
                source: err,
            },
            Some("READONLY") => MastersError::Replica {
                command,
                master,
                source: err,
            },
            _ => MastersError::Failed {
                command,
                master,
                source: err,
            },
        }
    }
}

/// `FUNCTION LIST` for `["FUNCTION", "LIST", "WITHCODE"]`: the command and its
/// subcommand, as ACL rules and error messages name them.
fn command_name(args: &[&str]) -> String {
    args.iter()
        .take(2)
        .map(|arg| arg.to_uppercase())
        .collect::<Vec<_>>()
        .join(" ")
}

impl Masters {
    /// Connects to `endpoint`'s servers. Called after the lock client connected, so
    /// the servers' version and mode are checked and TLS is set up (the lock client
    /// installs rustls's crypto provider).
    pub async fn connect(endpoint: &Endpoint) -> Result<Self, Failure> {
        let cannot = |err: RedisError| {
            Failure::lock("cannot open a connection to the masters", Error::from(err))
        };
        match endpoint {
            Endpoint::Cluster(nodes) => {
                let conn = cluster_client_builder(nodes)
                    .build()
                    .map_err(cannot)?
                    .get_async_connection()
                    .await
                    .map_err(cannot)?;
                Ok(Masters::Cluster(conn))
            }
            Endpoint::Standalone(url) => {
                let client = redis::Client::open(url.as_str()).map_err(cannot)?;
                let address = client.get_connection_info().addr().to_string();
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(CONNECTION_TIMEOUT))
                    .set_response_timeout(Some(RESPONSE_TIMEOUT));
                let conn = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .map_err(cannot)?;
                Ok(Masters::Standalone(conn, address))
            }
        }
    }

    /// Sends `args` to every master at once: each master's `host:port` and its reply
    /// (an error reply as `Err`), in address order. Fails as a whole only when a
    /// master cannot be reached.
    pub async fn send(
        &self,
        args: &[&str],
    ) -> Result<Vec<(String, Result<Value, RedisError>)>, MastersError> {
        let mut cmd = redis::Cmd::new();
        for arg in args {
            cmd.arg(*arg);
        }
        let unreachable = |source| MastersError::Unreachable {
            command: command_name(args),
            source,
        };
        let mut replies = match self {
            Masters::Cluster(conn) => {
                // No response policy: the driver answers with a map from each master's
                // address to its reply, error replies included as values.
                let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                let reply = conn
                    .clone()
                    .route_command(cmd, routing)
                    .await
                    .map_err(unreachable)?;
                let Value::Map(replies) = reply else {
                    return Err(unreachable(unexpected(&reply)));
                };
                let mut each = Vec::with_capacity(replies.len());
                for (address, reply) in replies {
                    let address: String =
                        redis::from_redis_value(address).map_err(|err| unreachable(err.into()))?;
                    each.push((address, reply.extract_error()));
                }
                each
            }
            Masters::Standalone(conn, address) => {
                let reply = match cmd.query_async(&mut conn.clone()).await {
                    Err(err) if err.code().is_none() => return Err(unreachable(err)),
                    reply => reply,
                };
                vec![(address.clone(), reply)]
            }
        };
        replies.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(replies)
    }
}

/// A reply of a shape the driver never gives.
fn unexpected(reply: &Value) -> RedisError {
    RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected reply",
        format!("{reply:?}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server's error reply as the driver hands it over.
    fn reply(line: &str) -> RedisError {
        redis::parse_redis_value(format!("-{line}\r\n").as_bytes())
            .and_then(Value::extract_error)
            .expect_err("an error reply")
    }

    #[test]
    fn a_refusal_names_the_permission_to_add() {
        let err = MastersError::reply(
            &["FUNCTION", "DELETE", "rwlock_000000000000"],
            "10.0.0.1:6379",
            reply("NOPERM this user has no permissions to run the 'function|delete' command"),
        );
        assert!(
            err.to_string().starts_with(
                "the Redis user may not run FUNCTION DELETE on 10.0.0.1:6379: add +function|delete"
            ),
            "{err}"
        );
        let err = MastersError::reply(
            &["function", "delete", "x"],
            "r:1",
            reply("READONLY You can't write against a read only replica."),
        );
        assert!(matches!(err, MastersError::Replica { .. }), "{err}");
        let err = MastersError::reply(&["FUNCTION", "LIST"], "r:1", reply("ERR odd"));
        assert_eq!(err.to_string(), "r:1 failed FUNCTION LIST");
    }
}

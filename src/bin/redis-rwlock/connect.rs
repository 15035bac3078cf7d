//! Which Redis to talk to: flags first, then the environment.

use redis_rwlock::LockClient;

use crate::cli::ConnectionArgs;
use crate::failure::{Failure, code};

/// The variable naming one server when no flag does.
pub const URL_VAR: &str = "REDIS_URL";
/// The variable naming cluster nodes (comma-separated) when no flag does.
pub const CLUSTER_VAR: &str = "REDIS_CLUSTER_NODES";

/// Where the tool connects: one server or a cluster (from flags or the environment).
#[derive(Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// One server.
    Standalone(String),
    /// Nodes of a cluster.
    Cluster(Vec<String>),
}

impl Endpoint {
    /// `--url`/`--cluster` if given, else `REDIS_URL`/`REDIS_CLUSTER_NODES` (read
    /// through `var`; empty counts as unset). Both variables set is ambiguous.
    pub fn resolve(
        args: &ConnectionArgs,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, Failure> {
        if let Some(url) = &args.url {
            return Ok(Endpoint::Standalone(url.clone()));
        }
        if !args.cluster.is_empty() {
            return Endpoint::cluster(args.cluster.iter().map(String::as_str), "--cluster");
        }
        let set = |name| var(name).filter(|value| !value.trim().is_empty());
        match (set(URL_VAR), set(CLUSTER_VAR)) {
            (Some(_), Some(_)) => Err(Failure::new(
                code::USAGE,
                format!(
                    "both {URL_VAR} and {CLUSTER_VAR} are set; choose one with --url or --cluster"
                ),
            )),
            (Some(url), None) => Ok(Endpoint::Standalone(url.trim().to_owned())),
            (None, Some(nodes)) => Endpoint::cluster(nodes.split(','), CLUSTER_VAR),
            (None, None) => Err(Failure::new(
                code::USAGE,
                format!(
                    "no Redis to connect to: pass --url URL (one server) or \
                     --cluster URL[,URL...] (a cluster), or set {URL_VAR} or {CLUSTER_VAR}"
                ),
            )),
        }
    }

    fn cluster<'a>(nodes: impl Iterator<Item = &'a str>, from: &str) -> Result<Self, Failure> {
        let nodes: Vec<String> = nodes
            .map(str::trim)
            .filter(|node| !node.is_empty())
            .map(str::to_owned)
            .collect();
        if nodes.is_empty() {
            return Err(Failure::new(
                code::USAGE,
                format!("{from} names no cluster node"),
            ));
        }
        Ok(Endpoint::Cluster(nodes))
    }

    /// Connects.
    pub async fn connect(&self) -> Result<LockClient, Failure> {
        match self {
            Endpoint::Standalone(url) => LockClient::standalone(url)
                .await
                .map_err(|err| Failure::lock(format!("cannot connect to Redis at {url}"), err)),
            Endpoint::Cluster(nodes) => LockClient::cluster(nodes).await.map_err(|err| {
                Failure::lock(
                    format!("cannot connect to the Redis Cluster at {}", nodes.join(",")),
                    err,
                )
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn args(url: Option<&str>, cluster: &[&str]) -> ConnectionArgs {
        ConnectionArgs {
            url: url.map(str::to_owned),
            cluster: cluster.iter().map(|s| s.to_string()).collect(),
            prefix: "rwlock".into(),
        }
    }

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.to_string())
        }
    }

    #[test]
    fn flags_win_over_the_environment() {
        let vars = [(URL_VAR, "redis://env"), (CLUSTER_VAR, "redis://c1")];
        assert_eq!(
            Endpoint::resolve(&args(Some("redis://flag"), &[]), env(&vars)).unwrap(),
            Endpoint::Standalone("redis://flag".into())
        );
        assert_eq!(
            Endpoint::resolve(&args(None, &["redis://a", "redis://b"]), env(&vars)).unwrap(),
            Endpoint::Cluster(vec!["redis://a".into(), "redis://b".into()])
        );
    }

    #[test]
    fn the_environment_names_one_server_or_cluster_nodes() {
        assert_eq!(
            Endpoint::resolve(&args(None, &[]), env(&[(URL_VAR, "redis://one")])).unwrap(),
            Endpoint::Standalone("redis://one".into())
        );
        assert_eq!(
            Endpoint::resolve(
                &args(None, &[]),
                env(&[(CLUSTER_VAR, "redis://a, redis://b,"), (URL_VAR, "")])
            )
            .unwrap(),
            Endpoint::Cluster(vec!["redis://a".into(), "redis://b".into()])
        );
    }

    #[test]
    fn nothing_or_both_variables_is_a_usage_error() {
        let none = Endpoint::resolve(&args(None, &[]), env(&[])).unwrap_err();
        assert!(none.report().contains("REDIS_URL"), "{}", none.report());
        let both = [(URL_VAR, "redis://a"), (CLUSTER_VAR, "redis://b")];
        let both = Endpoint::resolve(&args(None, &[]), env(&both)).unwrap_err();
        assert!(both.report().contains("both"), "{}", both.report());
        let empty = Endpoint::resolve(&args(None, &[]), env(&[(CLUSTER_VAR, " , ")])).unwrap_err();
        assert!(
            empty.report().contains("no cluster node"),
            "{}",
            empty.report()
        );
    }
}

//! Connecting checks the server with one `INFO server`: Redis 7.0 or newer, or a
//! server compatible with it (Valkey, by the `redis_version` it reports), and the
//! right mode. The servers the suite runs on are accepted; older ones and the wrong
//! kind are refused with a message naming server and version, as shown by a fake
//! server that answers like them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::*;
use redis_rwlock::{Error, LockClient};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::time::timeout;

const LIMIT: Duration = Duration::from_secs(15);

#[tokio::test]
async fn the_cluster_under_test_is_accepted_and_serves_locks() {
    let cluster = shared_cluster();
    let server = server_description(&cluster.nodes[0]);
    let client = timeout(LIMIT, LockClient::cluster(cluster.urls()))
        .await
        .expect("connect hung")
        .unwrap_or_else(|e| panic!("a cluster of {server} was refused: {e}"));
    let lock = client.rwlock(unique_name("server-check"));
    lock.write().await.unwrap().release().await.unwrap();
    lock.read().await.unwrap().release().await.unwrap();
    eprintln!("cluster of {server}: accepted");
}

#[tokio::test]
async fn the_standalone_server_under_test_is_accepted_and_serves_locks() {
    let server = shared_standalone();
    let name = server_description(&server.nodes[0]);
    let client = timeout(LIMIT, LockClient::standalone(server.url()))
        .await
        .expect("connect hung")
        .unwrap_or_else(|e| panic!("a standalone {name} was refused: {e}"));
    let lock = client.rwlock(unique_name("server-check"));
    lock.write().await.unwrap().release().await.unwrap();
    eprintln!("standalone {name}: accepted");
}

#[tokio::test]
async fn a_redis_6_server_is_refused_with_its_name_and_version() {
    let fake = FakeServer::start(Info::text(
        "redis_version:6.2.14\r\nredis_mode:standalone\r\n",
    ))
    .await;
    let err = timeout(LIMIT, LockClient::standalone(fake.url()))
        .await
        .expect("connect hung")
        .unwrap_err();
    assert!(matches!(err, Error::InvalidOptions(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "invalid options: the server at {} runs redis 6.2.14, too old: the lock needs \
             redis 7.0 or newer (the oldest it is tested on)",
            fake.addr
        )
    );
}

#[tokio::test]
async fn a_redis_6_cluster_is_refused_with_its_name_and_version() {
    let fake =
        FakeServer::start(Info::text("redis_version:6.2.14\r\nredis_mode:cluster\r\n")).await;
    let err = timeout(LIMIT, LockClient::cluster([fake.url()]))
        .await
        .expect("connect hung")
        .unwrap_err();
    assert!(matches!(err, Error::InvalidOptions(_)), "{err:?}");
    assert!(
        err.to_string().ends_with(&format!(
            "the cluster at {} runs redis 6.2.14, too old: sharded pub/sub \
             (SPUBLISH/SSUBSCRIBE) needs redis 7.0 or newer",
            fake.addr
        )),
        "{err}"
    );
}

#[tokio::test]
async fn an_old_server_of_another_name_is_named_with_both_versions() {
    let fake = FakeServer::start(Info::text(
        "redis_version:6.0.16\r\nserver_name:keydb\r\nkeydb_version:6.3.4\r\n",
    ))
    .await;
    let err = LockClient::standalone(fake.url()).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("runs keydb 6.3.4 (redis_version 6.0.16), too old"),
        "{err}"
    );
}

#[tokio::test]
async fn a_valkey_8_cluster_node_is_told_apart_by_server_mode() {
    // Valkey 8 reports its mode as server_mode, not redis_mode.
    let fake = FakeServer::start(Info::text(
        "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.8\r\nserver_mode:cluster\r\n",
    ))
    .await;
    let err = LockClient::standalone(fake.url()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "invalid options: the server at {} is a cluster node: use LockClient::cluster",
            fake.addr
        )
    );
}

#[tokio::test]
async fn a_server_that_denies_info_is_not_refused() {
    // An ACL without INFO: the check is skipped (with a warning), not the server.
    let fake = FakeServer::start(Info::Error(
        "NOPERM User lock has no permissions to run the 'info' command",
    ))
    .await;
    timeout(LIMIT, LockClient::standalone(fake.url()))
        .await
        .expect("connect hung")
        .unwrap();
}

/// What the fake server answers to INFO.
#[derive(Clone)]
enum Info {
    Text(String),
    Error(&'static str),
}

impl Info {
    fn text(fields: &str) -> Info {
        Info::Text(format!("# Server\r\n{fields}"))
    }
}

/// A RESP2 server on 127.0.0.1 that answers INFO as told, CLUSTER SLOTS with one
/// master (itself) owning every slot, PING with PONG and anything else with OK:
/// enough for the clients' connect, not for a lock.
struct FakeServer {
    addr: String,
    task: tokio::task::JoinHandle<()>,
}

impl FakeServer {
    async fn start(info: Info) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let info = info.clone();
                tokio::spawn(async move {
                    let _ = serve(socket, info, port).await;
                });
            }
        });
        FakeServer {
            addr: format!("127.0.0.1:{port}"),
            task,
        }
    }

    fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(socket: tokio::net::TcpStream, info: Info, port: u16) -> std::io::Result<()> {
    let (read, mut write) = socket.into_split();
    let mut read = BufReader::new(read);
    loop {
        let Some(args) = read_command(&mut read).await? else {
            return Ok(());
        };
        let name: Vec<String> = args.iter().take(2).map(|a| a.to_uppercase()).collect();
        let reply = match name.first().map(String::as_str) {
            Some("INFO") => match &info {
                Info::Text(text) => format!("${}\r\n{text}\r\n", text.len()),
                Info::Error(err) => format!("-{err}\r\n"),
            },
            Some("PING") => "+PONG\r\n".to_owned(),
            Some("CLUSTER") if name.get(1).is_some_and(|s| s == "SLOTS") => format!(
                "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:{port}\r\n$40\r\n{}\r\n",
                "f".repeat(40)
            ),
            _ => "+OK\r\n".to_owned(),
        };
        write.write_all(reply.as_bytes()).await?;
    }
}

/// One command (a RESP array of bulk strings), or `None` at EOF.
async fn read_command<R: AsyncBufReadExt + Unpin>(
    read: &mut R,
) -> std::io::Result<Option<Vec<String>>> {
    let mut line = String::new();
    if read.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    let count: usize = line
        .trim_end()
        .strip_prefix('*')
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an array: {line:?}")))?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        line.clear();
        read.read_line(&mut line).await?;
        let len: usize = line
            .trim_end()
            .strip_prefix('$')
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("not a bulk string: {line:?}")))?;
        let mut data = vec![0; len + 2];
        read.read_exact(&mut data).await?;
        data.truncate(len);
        args.push(String::from_utf8_lossy(&data).into_owned());
    }
    Ok(Some(args))
}

//! examples/metrics_service.rs as a user runs it: against this binary's standalone
//! server or cluster, for a few seconds, its Prometheus endpoint scraped over HTTP
//! once it is done. The wait and hold histograms count exactly the reads and
//! writes the example says it did, under the lock's name.
//!
//! The example binary is built by `cargo build --all-features --example
//! metrics_service` from here (cargo does not run examples' builds for a test, and
//! gives tests no path to them); its path comes from cargo's JSON messages. Cargo
//! holds no lock while tests run, so that build only waits for others' builds.
#![cfg(feature = "metrics")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use common::{shared_cluster, shared_standalone, unique_name};

/// The example's executable, built once per test binary.
fn example() -> &'static PathBuf {
    static EXAMPLE: OnceLock<PathBuf> = OnceLock::new();
    EXAMPLE.get_or_init(|| {
        // Without the variables cargo sets for this test's package: build scripts
        // that watch them (ring's) would run again here, and again in the next
        // `cargo test`, rebuilding the TLS stack and this crate each time.
        let package_vars = std::env::vars_os().filter_map(|(name, _)| {
            let text = name.to_str()?;
            let per_package = [
                "CARGO_PKG_",
                "CARGO_MANIFEST_",
                "CARGO_CRATE_",
                "CARGO_BIN_",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "CARGO_RUSTC_CURRENT_DIR",
            ];
            per_package
                .iter()
                .any(|prefix| text.starts_with(prefix))
                .then_some(name)
        });
        let mut build = Command::new(env!("CARGO"));
        for name in package_vars {
            build.env_remove(name);
        }
        let output = build
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args([
                "build",
                "--all-features",
                "--example",
                "metrics_service",
                "--message-format=json-render-diagnostics",
            ])
            .stderr(Stdio::inherit())
            .output()
            .expect("run cargo build");
        assert!(output.status.success(), "cargo build --example failed");
        String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .find(|message| {
                message["reason"] == "compiler-artifact"
                    && message["target"]["name"] == "metrics_service"
            })
            .and_then(|message| message["executable"].as_str().map(PathBuf::from))
            .expect("cargo names the example's executable")
    })
}

/// The example running, its stdout lines arriving on a channel; killed on drop.
struct Running {
    child: Child,
    lines: Receiver<String>,
}

impl Running {
    fn start(env: &[(&str, String)]) -> Self {
        let mut command = Command::new(example());
        command
            .env_remove("REDIS_URL")
            .env_remove("REDIS_CLUSTER_NODES")
            .env_remove("METRICS_PORT")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("start the example");
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                println!("example: {line}");
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        Running { child, lines }
    }

    /// The rest of the first line that starts with `prefix`, within `within`.
    fn line_after(&self, prefix: &str, within: Duration) -> String {
        let until = Instant::now() + within;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.to_owned();
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!("no {prefix:?} line within {within:?}"),
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("the example ended before a {prefix:?} line")
                }
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET /metrics` on 127.0.0.1:`port`: the body.
fn scrape(port: u16) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to the exporter");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

/// The samples of a Prometheus text exposition: (name, labels) -> value.
fn samples(text: &str) -> HashMap<(String, BTreeMap<String, String>), f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("a sample line");
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => {
                    let labels = labels.strip_suffix('}').expect("closing brace");
                    let labels = labels
                        .split(',')
                        .filter(|pair| !pair.is_empty())
                        .map(|pair| {
                            let (key, value) = pair.split_once('=').expect("label=value");
                            (key.to_owned(), value.trim_matches('"').to_owned())
                        })
                        .collect();
                    (name, labels)
                }
                None => (series, BTreeMap::new()),
            };
            ((name.to_owned(), labels), value.parse().expect("a number"))
        })
        .collect()
}

/// Runs the example against `server` (its environment) for a few seconds, then
/// checks what its endpoint says against what it says it did.
fn the_histograms_count_what_the_example_did(server: (&str, String)) {
    let name = unique_name("metrics-example");
    let running = Running::start(&[
        server,
        ("RUN_SECONDS", "3".into()),
        ("LINGER_SECONDS", "120".into()),
        ("LOCK_NAME", name.clone()),
    ]);
    let url = running.line_after("metrics: ", Duration::from_secs(30));
    let port: u16 = url
        .strip_prefix("http://127.0.0.1:")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("a port in {url:?}"));
    let done = running.line_after("done: ", Duration::from_secs(60));
    let did: HashMap<&str, f64> = done
        .split_whitespace()
        .map(|pair| {
            let (what, count) = pair.split_once('=').expect("what=count");
            (what, count.parse().expect("a count"))
        })
        .collect();
    let (reads, writes) = (did["reads"], did["writes"]);
    assert!(reads >= 10.0 && writes >= 3.0, "did little: {done}");

    let text = scrape(port);
    let samples = samples(&text);
    let value = |metric: &str, labels: &[(&str, &str)]| {
        let mut all: BTreeMap<String, String> = labels
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect();
        all.insert("lock".into(), name.clone());
        samples
            .get(&(metric.to_owned(), all))
            .copied()
            .unwrap_or_else(|| panic!("no {metric} {labels:?} in:\n{text}"))
    };
    for (mode, did) in [("read", reads), ("write", writes)] {
        let mode = [("mode", mode)];
        assert_eq!(
            value("redis_rwlock_wait_seconds_count", &mode),
            did,
            "{mode:?}"
        );
        assert_eq!(
            value("redis_rwlock_hold_seconds_count", &mode),
            did,
            "{mode:?}"
        );
        let granted = [mode[0], ("outcome", "granted")];
        assert_eq!(value("redis_rwlock_acquisitions_total", &granted), did);
        assert_eq!(value("redis_rwlock_guards", &mode), 0.0, "{mode:?}");
        assert_eq!(value("redis_rwlock_waiters", &mode), 0.0, "{mode:?}");
    }
    // Histograms, not summaries: the example gives them buckets. Every wait and
    // hold falls in the last bucket.
    for metric in ["wait", "hold"] {
        let kind = format!("# TYPE redis_rwlock_{metric}_seconds histogram");
        assert!(text.contains(&kind), "{text}");
        for (mode, did) in [("read", reads), ("write", writes)] {
            let bucket = format!("redis_rwlock_{metric}_seconds_bucket");
            assert_eq!(value(&bucket, &[("mode", mode), ("le", "+Inf")]), did);
        }
    }
    // Described: units and help text.
    assert!(text.contains("# HELP redis_rwlock_hold_seconds "), "{text}");
}

#[test]
fn the_example_exports_what_it_did_on_a_single_server() {
    the_histograms_count_what_the_example_did(("REDIS_URL", shared_standalone().url()));
}

#[test]
fn the_example_exports_what_it_did_on_a_cluster() {
    let nodes = shared_cluster().urls().join(",");
    the_histograms_count_what_the_example_did(("REDIS_CLUSTER_NODES", nodes));
}

//! The `redis-rwlock` binary (feature `cli`): started with no Redis configured,
//! run to its end, judged by exit code and output.

use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::time::timeout;

/// No run of the tool in these tests should take longer.
pub const RUN_LIMIT: Duration = Duration::from_secs(30);

/// The tool with no Redis configured at all: no flags, no environment.
pub fn bare() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redis-rwlock"));
    cmd.env_remove("REDIS_URL")
        .env_remove("REDIS_CLUSTER_NODES")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Runs to the end; (exit code, stdout, stderr).
pub async fn run(mut cmd: Command) -> (i32, String, String) {
    let child = cmd.spawn().expect("start redis-rwlock");
    finish(child).await
}

/// Waits for a started tool; (exit code, stdout, stderr).
pub async fn finish(child: Child) -> (i32, String, String) {
    let output: Output = timeout(RUN_LIMIT, child.wait_with_output())
        .await
        .expect("redis-rwlock did not finish in time")
        .expect("wait for redis-rwlock");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let code = output
        .status
        .code()
        .unwrap_or_else(|| panic!("redis-rwlock died of a signal; stderr: {stderr}"));
    (code, stdout, stderr)
}

//! The `redis-rwlock` binary (feature `cli`): started with no Redis configured,
//! run to its end, judged by exit code and output; or, as [`Exec`], waiting for a
//! lock on the shared cluster in a process of its own, to be paused or killed.

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

/// `redis-rwlock exec` on the shared cluster, in a process of its own, so that a
/// test can pause it (SIGSTOP) or kill it (SIGKILL) while it waits for a lock:
/// `exec --read|--write --lease <lease> <name> -- <command>`. The command, run only
/// if the tool gets the lock, inherits the tool's stdio: stdin is a pipe the test
/// holds (`cat` runs until it is closed), stdout a pipe the test may read
/// ([`Exec::lines`]). Dropping it SIGKILLs the tool if it still runs (paused or not)
/// and closes that stdin, so a failing test leaves no process behind.
pub struct Exec {
    child: std::process::Child,
    /// The write end of the command's stdin.
    stdin: Option<std::process::ChildStdin>,
    killed: bool,
}

impl Exec {
    /// Starts the tool, asking for `mode` with `lease` as its read and write lease.
    pub fn start(
        name: &str,
        mode: redis_rwlock::LockMode,
        lease: Duration,
        command: &[&str],
    ) -> Exec {
        let mode = match mode {
            redis_rwlock::LockMode::Read => "--read",
            redis_rwlock::LockMode::Write => "--write",
        };
        let lease = format!("{}ms", lease.as_millis());
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_redis-rwlock"))
            .env_remove("REDIS_URL")
            .env_remove("REDIS_CLUSTER_NODES")
            .arg("--cluster")
            .arg(super::shared_cluster().urls().join(","))
            .args(["exec", mode, "--lease", &lease, name, "--"])
            .args(command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start redis-rwlock");
        let stdin = child.stdin.take();
        Exec {
            child,
            stdin,
            killed: false,
        }
    }

    /// The tool's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails, with what the tool said, if it has exited.
    pub fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!(
                "redis-rwlock exited ({status}) while waiting: {}",
                self.stderr()
            );
        }
    }

    /// Polls `lock`'s state until `pred` holds and returns that state; fails after
    /// 10 s (saying it waited for `what`), or at once if the tool exited.
    pub async fn until(
        &mut self,
        lock: &redis_rwlock::RwLock,
        what: &str,
        pred: impl Fn(&redis_rwlock::LockState) -> bool,
    ) -> redis_rwlock::LockState {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            self.assert_running();
            let state = lock.state().await.unwrap();
            if pred(&state) {
                return state;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "never: {what}; last state: {state:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The lines the command writes to stdout, each with when the test read it; the
    /// channel closes when stdout does. Once only.
    pub fn lines(
        &mut self,
    ) -> tokio::sync::mpsc::UnboundedReceiver<(tokio::time::Instant, String)> {
        use std::io::BufRead;
        let stdout = self.child.stdout.take().expect("stdout read once");
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send((tokio::time::Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        receiver
    }

    /// SIGKILLs the tool (it never sends another command) and waits until it is gone.
    pub fn kill(&mut self) {
        self.assert_running();
        super::kill9(self.pid());
        self.killed = true;
    }

    /// What the tool wrote to stderr (read once it has exited).
    pub fn stderr(&mut self) -> String {
        use std::io::Read;
        let mut text = String::new();
        if let Some(mut stderr) = self.child.stderr.take() {
            let _ = stderr.read_to_string(&mut text);
        }
        text
    }
}

impl Drop for Exec {
    fn drop(&mut self) {
        if !self.killed {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        // Ends `cat` if the tool ever started it.
        self.stdin = None;
    }
}

//! The command line: subcommands, flags and their help.

use std::ffi::OsString;
use std::time::Duration;

use clap::{ArgGroup, Args, Parser, Subcommand};
use redis_rwlock::LockMode;

const AFTER_HELP: &str = "\
Connection: --url (one server) or --cluster (a cluster); without either, the
environment variable REDIS_URL or REDIS_CLUSTER_NODES (comma-separated URLs).

Durations: 500ms, 30s, 2m, 1h 30m; a plain number is seconds (30, 0.5), as for
flock -w.

Exit codes (exec passes the command's own status through):
   0  success; status: the lock is held (for read or write); list: a lock matched;
      watch: stopped by Ctrl-C, SIGTERM or SIGHUP
   1  status: the lock is free (no holder; writers may be queued); list: no lock
      matched
  64  usage error: bad arguments, no Redis given, bad lock name, release without --force,
      a libraries removal refused (see libraries --help)
  65  the lock's key holds another Redis type
  69  Redis unreachable or failed
  70  unexpected internal error
  71  operating-system error (signals, waiting for the command)
  75  lock not acquired: busy (--wait 0) or --wait ran out
  79  exec: the lease was lost while the command ran; the command was terminated
 126  exec: the command could not be started
 127  exec: the command was not found
 128+N  exec: the command died of signal N, or redis-rwlock was stopped by signal N
        while waiting for the lock
 141  the output was closed by its reader before all of it was written: stopped
      quietly, as a tool killed by SIGPIPE (128+13). Output that fits in the pipe
      (64 KiB on Linux) is written whole before `| head -1` can close it: the
      exit code is then the command's own, as for `seq 10 | head -1`";

/// Inspect and use redis-rwlock read-write locks from the shell.
#[derive(Debug, Parser)]
#[command(name = "redis-rwlock", version, after_help = AFTER_HELP)]
pub struct Cli {
    /// Where the locks live.
    #[command(flatten)]
    pub connection: ConnectionArgs,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Connection flags, accepted before or after the subcommand.
#[derive(Debug, Args)]
#[command(next_help_heading = "Redis")]
pub struct ConnectionArgs {
    /// A single Redis server (7.0 or newer), e.g. redis://127.0.0.1:6379
    /// [default: $REDIS_URL]
    #[arg(long, global = true, value_name = "URL", conflicts_with = "cluster")]
    pub url: Option<String>,

    /// Redis Cluster nodes, comma-separated (any one reachable node is enough)
    /// [default: $REDIS_CLUSTER_NODES]
    #[arg(
        long,
        global = true,
        value_name = "URL[,URL...]",
        value_delimiter = ','
    )]
    pub cluster: Vec<String>,

    /// The first part of the lock's key, `PREFIX:{NAME}`, as in the services'
    /// `LockOptions::key_prefix`
    #[arg(long, global = true, value_name = "PREFIX", default_value = "rwlock")]
    pub prefix: String,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show who holds a lock: mode, each holder with its lease deadline (local time)
    /// and time left, queued writers, the fencing counter.
    ///
    /// Exits 0 if the lock is held (for read or write) and 1 if it is free (writers
    /// may be queued), so a script can test it without reading the output:
    /// `if redis-rwlock status NAME >/dev/null; then ...`. Codes from 64 up are
    /// failures, as listed below. It only reads, so a Redis user allowed to read keys
    /// and run read-only scripts (EVALSHA_RO, EVAL_RO) is enough; with FCALL_RO too,
    /// it calls the lock's function library where that is loaded.
    #[command(after_help = AFTER_HELP)]
    Status(StatusArgs),
    /// Run a command while holding a lock, like flock(1) across machines.
    ///
    /// Waits for the lock (up to --wait), runs COMMAND on redis-rwlock's stdin,
    /// stdout and stderr, renews the lease in the background while it runs, releases
    /// the lock when it exits and exits with its status (128+N if it died of
    /// signal N). For --write, COMMAND finds the hold's fencing token in
    /// $REDIS_RWLOCK_FENCING_TOKEN.
    ///
    /// Several locks at once (a lock set: `--read A --read B --write C`): all are
    /// taken or none, in one order every client agrees on, so sets never deadlock
    /// whatever order their locks are listed in; --wait bounds the whole set. When
    /// exactly one of them is written, $REDIS_RWLOCK_FENCING_TOKEN is its token.
    ///
    /// If the lease is lost while COMMAND runs (Redis unreachable for the whole
    /// lease, or an operator's `release --force`), COMMAND gets SIGTERM, then
    /// SIGKILL after --kill-after, and redis-rwlock exits with 79.
    ///
    /// SIGINT, SIGTERM and SIGHUP are passed on to COMMAND (SIGKILL after
    /// --kill-after; a second signal kills at once), and the lock is released when it
    /// exits. Unless stdin, stdout or stderr is a terminal, COMMAND runs in its own
    /// process group and every signal goes to the whole group, so what it started is
    /// stopped too. At a terminal it stays in the terminal's foreground group so it
    /// can read from it: Ctrl-C then reaches it directly, and redis-rwlock only sends
    /// SIGTERM if it is still running --kill-after later.
    ///
    /// If the release fails at the end, a warning is printed, the exit status stays
    /// COMMAND's and the hold ends when its lease does. If redis-rwlock itself is
    /// killed with SIGKILL, COMMAND keeps running without the lock; if it is
    /// suspended (Ctrl-Z) for longer than the lease, others may take the lock
    /// meanwhile, and COMMAND is stopped as above when it resumes.
    #[command(
        group(ArgGroup::new("mode").required(true).multiple(true).args(["read", "write"])),
        after_help = AFTER_HELP
    )]
    Exec(ExecArgs),
    /// Operator's break-glass: end every hold on a lock, whoever owns it.
    ///
    /// The evicted holders learn it at their next renewal (a third of their lease)
    /// and may act until then: check `status` first. Refuses without --force.
    Release(ReleaseArgs),
    /// List the locks whose names match PATTERN, on every master of the cluster (or
    /// the server): mode, holders, queued writers, when the holds end, the fencing
    /// counter.
    ///
    /// Scans each master with SCAN (keys PREFIX:{NAME} holding hashes; legacy
    /// two-key locks are not listed) and reads each lock found as `status` does, a
    /// page at a time: at most --limit locks are shown, sorted by name. When more
    /// match, the last line says so: those shown are the first --limit that SCAN
    /// found, which are not the first by name; raise --limit to see them all. Exits 0 if a lock matched and 1 if none did. It
    /// only reads: a user that may run `status` and also SCAN and (on a cluster)
    /// DBSIZE is enough; +@read has both.
    #[command(after_help = AFTER_HELP)]
    List(ListArgs),
    /// Watch one lock: redraw its `status` every --interval until interrupted.
    ///
    /// At a terminal the screen is cleared before each view, as watch(1) does;
    /// otherwise the views follow each other, each after a line of its own. A failed
    /// read (Redis unreachable, a failover) is shown in the view and tried again at
    /// the next interval. Ctrl-C, SIGTERM or SIGHUP ends it with exit code 0.
    #[command(after_help = AFTER_HELP)]
    Watch(WatchArgs),
    /// List the lock's function libraries on every master, and remove those of crate
    /// versions no longer running.
    ///
    /// Each version of redis-rwlock loads its scripts as one Redis function library,
    /// rwlock_<hash>, named after a hash of its text, at its first lock call on each
    /// master; nothing ever removes one. So after upgrades the masters keep the
    /// libraries of every version that ran, and each one loaded slows every function
    /// call on its server (Lua's garbage collector steps through all of them).
    ///
    /// Without options it lists them: each library's name, whether it is this
    /// tool's own version's, its function count and code size, and which masters have
    /// it. Only names of the crate's shape are listed (rwlock_ and hex digits); other
    /// libraries are never listed or removed.
    ///
    /// --remove-others removes every library but this tool's version's and those
    /// named with --keep, --remove LIBRARY the named ones (this tool's version's too,
    /// if named): with FUNCTION DELETE on every master, which replicates it to the
    /// replicas. Do it once a rolling upgrade has finished and no service runs the
    /// old versions any more, with a tool of the version the services now run (or
    /// name theirs with --keep). Removing a library that a running version still uses
    /// is safe, but costs it a reload: its next call on each master finds the
    /// function missing, loads the library again (FUNCTION LOAD) and calls again.
    /// --dry-run prints what would be removed. --remove-others is refused (exit 64)
    /// while this version's library is loaded on no master, since the services then
    /// likely run another version, unless --keep names theirs; and so is a --keep
    /// that names no loaded library (a typo would remove the library meant).
    ///
    /// Listing needs +function|list, removing also +function|delete.
    #[command(after_help = AFTER_HELP)]
    Libraries(LibrariesArgs),
}

/// `libraries [--json] [--remove-others [--keep LIBRARY]... | --remove LIBRARY...]
/// [--dry-run]`
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("removal").args(["remove_others", "remove"])))]
pub struct LibrariesArgs {
    /// Remove from every master every library but this tool's version's and those
    /// named with --keep.
    #[arg(long)]
    pub remove_others: bool,

    /// With --remove-others: keep this library too (a version still running, e.g.
    /// during a rolling upgrade). Repeatable.
    #[arg(long, value_name = "LIBRARY", requires = "remove_others", value_parser = parse_library)]
    pub keep: Vec<String>,

    /// Remove this library from every master (this tool's version's too, when named
    /// here). Repeatable.
    #[arg(long, value_name = "LIBRARY", value_parser = parse_library)]
    pub remove: Vec<String>,

    /// With --remove-others or --remove: print what would be removed, and remove
    /// nothing.
    #[arg(long, requires = "removal")]
    pub dry_run: bool,

    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `list [PATTERN] [--json] [--limit N]`
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Which lock names to list: a glob (*, ?, [abc], \ escapes), e.g. 'inv*'.
    #[arg(default_value = "*")]
    pub pattern: String,

    /// Print JSON instead of a table (times in RFC 3339, local offset).
    #[arg(long)]
    pub json: bool,

    /// Show at most this many locks: the first found (SCAN's order), sorted by name.
    #[arg(long, value_name = "N", default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: u32,
}

/// `watch NAME [--interval D]`
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The lock's name.
    pub name: String,

    /// How often to redraw, e.g. 500ms, 2s, or plain seconds; at least 10ms.
    #[arg(long, value_name = "DURATION", value_parser = parse_interval, default_value = "1s")]
    pub interval: Duration,
}

/// `status NAME [--json]`
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The lock's name.
    pub name: String,

    /// Print JSON instead of text (times in RFC 3339, local offset).
    #[arg(long)]
    pub json: bool,
}

/// `exec (--read|--write) NAME [--wait D] [--lease D] [--kill-after D] -- COMMAND...`,
/// or for several locks at once `exec --read A --write B ... -- COMMAND...`
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Take a shared read hold: of NAME, or (given a value) of the lock named so;
    /// repeat it for several locks (a lock set)
    #[arg(long, value_name = "LOCK", num_args = 0..=1, default_missing_value = "")]
    pub read: Vec<String>,

    /// Take the exclusive write hold: of NAME, or (given a value) of the lock named
    /// so; repeat it for several locks (a lock set)
    #[arg(long, value_name = "LOCK", num_args = 0..=1, default_missing_value = "")]
    pub write: Vec<String>,

    /// The lock's name, for a bare --read or --write.
    pub name: Option<String>,

    /// How long to wait for the lock, e.g. 500ms, 30s, 2m, or plain seconds as in
    /// `flock -w 30`; 0: do not wait [default: wait without limit]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub wait: Option<Duration>,

    /// The hold's lease: how long it outlives this process if it dies without
    /// releasing; renewed every third of it [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub lease: Option<Duration>,

    /// How long COMMAND gets to exit after SIGTERM (or an interrupt) before SIGKILL.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "5s")]
    pub kill_after: Duration,

    /// The command to run and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

impl ExecArgs {
    /// The locks to take, each with its mode: `--read NAME`/`--write NAME` flags, or
    /// one bare `--read`/`--write` for the positional NAME.
    pub fn locks(&self) -> Result<Vec<(String, LockMode)>, String> {
        let flagged = |names: &[String], mode| {
            names
                .iter()
                .map(move |name| (name.clone(), mode))
                .collect::<Vec<_>>()
        };
        let mut locks = flagged(&self.read, LockMode::Read);
        locks.extend(flagged(&self.write, LockMode::Write));
        let (bare, named): (Vec<_>, Vec<_>) = locks.into_iter().partition(|(n, _)| n.is_empty());
        match (bare.as_slice(), &self.name) {
            ([], None) => Ok(named),
            ([(_, mode)], Some(name)) => {
                Ok([(name.clone(), *mode)].into_iter().chain(named).collect())
            }
            ([], Some(name)) => Err(format!(
                "say how to take {name:?}: --read {name:?} or --write {name:?}"
            )),
            (_, None) => Err(
                "--read or --write without a lock name: name it after the flag \
                 (--read NAME) or after the options"
                    .to_owned(),
            ),
            (_, Some(_)) => Err(
                "only one bare --read or --write may take the lock named after \
                 the options; name the others after their flags (--read NAME)"
                    .to_owned(),
            ),
        }
    }
}

/// `release --force NAME`
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The lock's name.
    pub name: String,

    /// Really end every hold on the lock.
    #[arg(long)]
    pub force: bool,
}

/// Human durations: `500ms`, `30s`, `2m`, `1h 30m`; or a plain number of seconds,
/// `30` or `0.5`, as `flock -w` and `timeout` take it.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let plain = |b: u8| b.is_ascii_digit() || b == b'.';
    if !text.is_empty() && text.bytes().all(plain) {
        return seconds(text).ok_or_else(|| {
            format!("{text:?} is not a number of seconds (write e.g. 30, 0.5 or 500ms)")
        });
    }
    humantime::parse_duration(text).map_err(|err| err.to_string())
}

/// A library of the crate, as `--keep` and `--remove` take it: `rwlock_` and hex
/// digits, so no other library can be named by mistake.
fn parse_library(text: &str) -> Result<String, String> {
    if crate::libraries::is_ours(text) {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{text:?} is not a library of redis-rwlock (rwlock_ and hex digits, as \
             `redis-rwlock libraries` lists them)"
        ))
    }
}

/// The shortest `watch --interval`: a view at most a hundred times a second.
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// A duration ([`parse_duration`]) of at least [`MIN_INTERVAL`].
fn parse_interval(text: &str) -> Result<Duration, String> {
    let interval = parse_duration(text)?;
    if interval < MIN_INTERVAL {
        return Err(format!("{text:?} is too short: at least 10ms"));
    }
    Ok(interval)
}

/// `30`, `0.5`, `.25`, `2.`: whole seconds and up to nine decimals, exactly.
fn seconds(text: &str) -> Option<Duration> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty())
        || !digits(whole)
        || !digits(fraction)
        || fraction.len() > 9
    {
        return None;
    }
    let secs = match whole {
        "" => 0,
        whole => whole.parse().ok()?,
    };
    let nanos = match fraction {
        "" => 0,
        fraction => format!("{fraction:0<9}").parse().ok()?,
    };
    Some(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn exec_takes_a_mode_durations_and_the_command_after_the_separator() {
        let cli = Cli::try_parse_from([
            "redis-rwlock",
            "exec",
            "--write",
            "cache",
            "--wait",
            "2m",
            "--lease",
            "500ms",
            "--cluster",
            "redis://a:1,redis://b:2",
            "--",
            "sh",
            "-c",
            "exit 7",
        ])
        .unwrap();
        assert_eq!(cli.connection.cluster, ["redis://a:1", "redis://b:2"]);
        let Command::Exec(exec) = cli.command else {
            panic!("not exec");
        };
        assert_eq!(
            exec.locks().unwrap(),
            [("cache".to_owned(), LockMode::Write)]
        );
        assert_eq!(exec.wait, Some(Duration::from_secs(120)));
        assert_eq!(exec.lease, Some(Duration::from_millis(500)));
        assert_eq!(exec.kill_after, Duration::from_secs(5));
        assert_eq!(exec.command, ["sh", "-c", "exit 7"]);
    }

    #[test]
    fn exec_needs_exactly_one_mode_and_a_command() {
        for args in [
            &["redis-rwlock", "exec", "x", "--", "true"][..],
            &["redis-rwlock", "exec", "--read", "x"],
            &[
                "redis-rwlock",
                "exec",
                "--read",
                "x",
                "--wait",
                "soon",
                "--",
                "true",
            ],
        ] {
            assert!(Cli::try_parse_from(args).is_err(), "{args:?} accepted");
        }
    }

    /// The locks of an `exec`, as parsed from its arguments (after the global ones).
    fn exec_locks(args: &[&str]) -> Result<Vec<(String, LockMode)>, String> {
        let all = ["redis-rwlock", "exec"]
            .iter()
            .chain(args)
            .chain(&["--", "true"]);
        let Command::Exec(exec) = Cli::try_parse_from(all).unwrap().command else {
            panic!("not exec");
        };
        exec.locks()
    }

    #[test]
    fn exec_takes_one_lock_by_a_bare_flag_or_several_by_named_flags() {
        let (read, write) = (LockMode::Read, LockMode::Write);
        let one = |name: &str, mode| Ok(vec![(name.to_owned(), mode)]);
        assert_eq!(exec_locks(&["--read", "x"]), one("x", read));
        assert_eq!(exec_locks(&["--read", "--wait", "3", "x"]), one("x", read));
        assert_eq!(
            exec_locks(&["--write", "x", "--wait", "3"]),
            one("x", write)
        );
        assert_eq!(
            exec_locks(&["--read", "a", "--write", "c", "--read", "b"]),
            Ok(vec![
                ("a".to_owned(), read),
                ("b".to_owned(), read),
                ("c".to_owned(), write)
            ])
        );
        assert_eq!(
            exec_locks(&["--write", "--read", "a", "x"]),
            Ok(vec![("x".to_owned(), write), ("a".to_owned(), read)])
        );
        for bad in [
            &["--read", "--write", "x"][..],
            &["--read", "a", "x"],
            &["--read", "--write"],
        ] {
            assert!(exec_locks(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_plain_number_is_seconds_like_flock_w() {
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration(".25"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2."), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.000000001"), Ok(Duration::new(1, 1)));
        for bad in [".", "1.2.3", "1.0000000001", "99999999999999999999999"] {
            assert!(parse_duration(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn units_are_still_read_by_humantime() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1").is_err());
    }

    #[test]
    fn exec_takes_wait_in_plain_seconds() {
        let cli = Cli::try_parse_from([
            "redis-rwlock",
            "exec",
            "--read",
            "x",
            "--wait",
            "30",
            "--kill-after",
            "2",
            "--",
            "true",
        ])
        .unwrap();
        let Command::Exec(exec) = cli.command else {
            panic!("not exec");
        };
        assert_eq!(exec.wait, Some(Duration::from_secs(30)));
        assert_eq!(exec.kill_after, Duration::from_secs(2));
    }

    #[test]
    fn list_takes_an_optional_pattern_and_watch_an_interval() {
        let cli = Cli::try_parse_from(["redis-rwlock", "list"]).unwrap();
        let Command::List(list) = cli.command else {
            panic!("not list");
        };
        assert_eq!(
            (list.pattern.as_str(), list.json, list.limit),
            ("*", false, 100)
        );
        let cli = Cli::try_parse_from(["redis-rwlock", "list", "inv*", "--json", "--limit", "5"])
            .unwrap();
        let Command::List(list) = cli.command else {
            panic!("not list");
        };
        assert_eq!(
            (list.pattern.as_str(), list.json, list.limit),
            ("inv*", true, 5)
        );
        assert!(Cli::try_parse_from(["redis-rwlock", "list", "--limit", "0"]).is_err());

        let cli = Cli::try_parse_from(["redis-rwlock", "watch", "x"]).unwrap();
        let Command::Watch(watch) = cli.command else {
            panic!("not watch");
        };
        assert_eq!(
            (watch.name.as_str(), watch.interval),
            ("x", Duration::from_secs(1))
        );
        let cli =
            Cli::try_parse_from(["redis-rwlock", "watch", "x", "--interval", "250ms"]).unwrap();
        let Command::Watch(watch) = cli.command else {
            panic!("not watch");
        };
        assert_eq!(watch.interval, Duration::from_millis(250));
        for short in ["0", "1ms"] {
            let args = ["redis-rwlock", "watch", "x", "--interval", short];
            assert!(Cli::try_parse_from(args).is_err(), "{short} accepted");
        }
        assert!(Cli::try_parse_from(["redis-rwlock", "watch"]).is_err());
    }

    #[test]
    fn libraries_lists_unless_told_to_remove() {
        let parse = |args: &[&str]| {
            let cli = Cli::try_parse_from([&["redis-rwlock", "libraries"], args].concat());
            cli.map(|cli| match cli.command {
                Command::Libraries(args) => args,
                other => panic!("not libraries: {other:?}"),
            })
        };
        let list = parse(&[]).unwrap();
        assert!(!list.remove_others && list.remove.is_empty() && !list.dry_run);
        let old = "rwlock_0123456789ab";
        let others = parse(&["--remove-others", "--keep", old, "--dry-run"]).unwrap();
        assert!(others.remove_others && others.dry_run);
        assert_eq!(others.keep, [old]);
        let named = parse(&["--remove", old, "--remove", "rwlock_000000000000"]).unwrap();
        assert_eq!(named.remove, [old, "rwlock_000000000000"]);
        for bad in [
            &["--dry-run"][..],
            &["--keep", old],
            &["--remove-others", "--remove", old],
            &["--remove", "mylib"],
            &["--remove", "rwlock_"],
            &["--remove-others", "--keep", "rwlock_xyz"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn url_and_cluster_exclude_each_other() {
        let args = [
            "redis-rwlock",
            "--url",
            "redis://a",
            "--cluster",
            "redis://b",
            "status",
            "x",
        ];
        assert!(Cli::try_parse_from(args).is_err());
    }
}

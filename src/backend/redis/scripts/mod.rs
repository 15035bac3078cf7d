//! The Redis backend's side of the contract (`backend/mod.rs`): typed wrappers
//! around the Lua scripts in `lua/`, the only place that knows their argument order
//! and reply shapes, and the few plain commands the shared reads and the listing
//! send.

use std::sync::{LazyLock, OnceLock};
use std::time::Duration;

use redis::{Cmd, FromRedisValue, Script};

use super::connection::{Connection, masters, scan_node};
use super::library::{self, Function, Functions, Library};
use super::slot::key_slot;
use crate::Error;
use crate::Result;
use crate::backend::{Acquire, Backend, Fenced, Held, Node, Scan, SetAsk, Target};
use crate::error::ErrorChain;
use crate::protocol::token::Token;
use crate::protocol::{
    Access, Acquired, Downgraded, LockMode, RawState, Renewed, Replicas, SetAcquired, Write, millis,
};

/// The operations, one file each in `lua/` (after the [`prelude`]).
#[derive(Clone, Copy)]
enum Operation {
    AcquireRead,
    AcquireWrite,
    Release,
    Renew,
    Downgrade,
    FencedWrite,
    ForceRelease,
    State,
    AcquireSet,
}

impl Operation {
    /// In the order the library defines them: an operation that calls others
    /// ([`calls`](Self::calls)) comes after them.
    const ALL: [Operation; 9] = [
        Operation::AcquireRead,
        Operation::AcquireWrite,
        Operation::Release,
        Operation::Renew,
        Operation::Downgrade,
        Operation::FencedWrite,
        Operation::ForceRelease,
        Operation::State,
        Operation::AcquireSet,
    ];

    /// The file's name without `.lua`; also the function's name in the library.
    fn name(self) -> &'static str {
        match self {
            Operation::AcquireRead => "acquire_read",
            Operation::AcquireWrite => "acquire_write",
            Operation::Release => "release",
            Operation::Renew => "renew",
            Operation::Downgrade => "downgrade",
            Operation::FencedWrite => "fenced_write",
            Operation::ForceRelease => "force_release",
            Operation::State => "state",
            Operation::AcquireSet => "acquire_set",
        }
    }

    /// The operations this one calls, as the functions `op_<name>` (see
    /// [`Library::new`]): a lock set's members are taken as each lock's own
    /// acquire takes it.
    fn calls(self) -> &'static [Operation] {
        match self {
            Operation::AcquireSet => &[
                Operation::AcquireRead,
                Operation::AcquireWrite,
                Operation::Release,
            ],
            _ => &[],
        }
    }

    fn source(self) -> &'static str {
        match self {
            Operation::AcquireRead => include_str!("../../../../lua/acquire_read.lua"),
            Operation::AcquireWrite => include_str!("../../../../lua/acquire_write.lua"),
            Operation::Release => include_str!("../../../../lua/release.lua"),
            Operation::Renew => include_str!("../../../../lua/renew.lua"),
            Operation::Downgrade => include_str!("../../../../lua/downgrade.lua"),
            Operation::FencedWrite => include_str!("../../../../lua/fenced_write.lua"),
            Operation::ForceRelease => include_str!("../../../../lua/force_release.lua"),
            Operation::State => include_str!("../../../../lua/state.lua"),
            Operation::AcquireSet => include_str!("../../../../lua/acquire_set.lua"),
        }
    }

    /// Only reads: sent as FCALL_RO / EVALSHA_RO / EVAL_RO, which Redis lets a user
    /// run with read-only access to the keys (and which refuse any write the script
    /// tries).
    fn read_only(self) -> bool {
        matches!(self, Operation::State)
    }

    /// The function's flags in the library. Without any, a function may write, so
    /// Redis refuses to start it while the server is out of memory (an `EVALSHA`
    /// fails only at its first write that could grow the data). Releases only
    /// remove holds, and a lock that cannot be released until its lease ends is
    /// worse than a few bytes over the limit: they may run then (`allow-oom`).
    fn flags(self) -> &'static [&'static str] {
        match self {
            Operation::State => &["no-writes"],
            Operation::Release | Operation::ForceRelease => &["allow-oom"],
            _ => &[],
        }
    }
}

/// The hash layout's operations as one function library: the prelude once, each
/// operation file as a function's body.
pub(crate) static LIBRARY: LazyLock<Library> = LazyLock::new(|| {
    let functions = Operation::ALL.map(|op| Function {
        name: op.name(),
        body: op.source(),
        flags: op.flags(),
    });
    Library::new(&prelude(HASH_LAYOUT), &functions)
});

/// One layout's compiled scripts: each is the layout's [`prelude`] and the operation.
pub(crate) struct Scripts {
    /// By [`Operation`], in the order of [`Operation::ALL`].
    scripts: [Lua; Operation::ALL.len()],
}

/// One script's source and SHA1, as EVAL and EVALSHA take them, and its name in
/// the function library when its layout has one.
struct Lua {
    source: String,
    /// Worked out at the first EVALSHA of this script: a layout with a library
    /// calls its functions by name and may never need it.
    sha: OnceLock<String>,
    read_only: bool,
    function: Option<String>,
}

/// How one request calls a script.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    /// `FCALL`/`FCALL_RO`: the library's function, by name.
    Function,
    /// `EVALSHA`/`EVALSHA_RO`: the script cached on the server, by its SHA1.
    Sha,
    /// `EVAL`/`EVAL_RO`: the whole source, which the server runs and caches.
    Source,
}

impl Lua {
    /// The verb and its first argument for a call `via`.
    fn call(&self, via: Via) -> (&'static str, &str) {
        match (via, &self.function, self.read_only) {
            (Via::Function, Some(name), false) => ("FCALL", name),
            (Via::Function, Some(name), true) => ("FCALL_RO", name),
            (Via::Function | Via::Sha, _, false) => ("EVALSHA", self.sha()),
            (Via::Function | Via::Sha, _, true) => ("EVALSHA_RO", self.sha()),
            (Via::Source, _, false) => ("EVAL", &self.source),
            (Via::Source, _, true) => ("EVAL_RO", &self.source),
        }
    }

    /// The SHA1 EVALSHA names the script by.
    fn sha(&self) -> &str {
        self.sha
            .get_or_init(|| Script::new(&self.source).get_hash().to_owned())
    }
}

impl Scripts {
    /// The scripts of a layout whose hooks are `layout`; `library` when the
    /// layout's operations can also be called as its functions.
    fn build(layout: &str, library: Option<&Library>) -> Self {
        let prelude = prelude(layout);
        let make = |op: Operation| Lua {
            source: format!("{prelude}\n{}{}", called(op), op.source()),
            sha: OnceLock::new(),
            read_only: op.read_only(),
            function: library.map(|library| library.function_name(op.name())),
        };
        Scripts {
            scripts: Operation::ALL.map(make),
        }
    }

    fn get(&self, op: Operation) -> &Lua {
        &self.scripts[op as usize]
    }
}

/// The connection lock scripts go through, and whether its servers still take the
/// function library (see [`library`]).
pub(crate) struct ScriptConnection {
    pub(crate) conn: Connection,
    functions: Functions,
}

impl ScriptConnection {
    pub(crate) fn new(conn: Connection) -> Self {
        // The hash layout's scripts and the library's name are put together once
        // per process, at the first connect, not in some lock's first request,
        // which would wait for it.
        LazyLock::force(&HASH);
        ScriptConnection {
            conn,
            functions: Functions::default(),
        }
    }
}

/// The operations `op` calls, as local functions before its text (in a script of
/// its own; the library defines every operation so).
fn called(op: Operation) -> String {
    op.calls()
        .iter()
        .map(|callee| library::as_function(callee.name(), callee.source()))
        .collect()
}

/// The shared part of every script, in order: the helpers, then (where `{layout}`
/// stands) one layout's hooks, then the writers' queue and the holds, which use them.
const SHARED: [&str; 3] = [
    include_str!("../../../../lua/helpers.lua"),
    include_str!("../../../../lua/queue.lua"),
    include_str!("../../../../lua/holds.lua"),
];

/// The hash layout's hooks, then its fast paths: the common operations decided from
/// a few fields, before the full way (the queue, the holds and the operation).
const HASH_LAYOUT: &str = concat!(
    include_str!("../../../../lua/hash_layout.lua"),
    "\n",
    include_str!("../../../../lua/fast_path.lua")
);

/// What comes before the operation in every script: the shared part with `layout`'s
/// hooks. In the hash layout's function library it runs once, when it is loaded.
fn prelude(layout: &str) -> String {
    let [helpers, queue, holds] = SHARED;
    format!("{helpers}\n{layout}\n{queue}\n{holds}")
}

/// How often a call is retried while its slot moves between nodes (about 3 s in
/// all): while a slot is half migrated, concurrent calls of one client can keep
/// bouncing (redis-rs sends ASKING apart from the command it belongs to).
const SLOT_MOVE_RETRIES: u32 = 16;
/// The pause before the first such retry; it doubles (with jitter, so concurrent
/// calls spread out) up to [`SLOT_MOVE_MAX_PAUSE`].
const SLOT_MOVE_PAUSE: Duration = Duration::from_millis(10);
const SLOT_MOVE_MAX_PAUSE: Duration = Duration::from_millis(250);

/// A pipeline's failure as its failing command's own error. The driver gives a
/// pipeline failure an error code only for the codes it knows, so WRONGTYPE raised
/// by the script in front of WAIT would otherwise lose its code.
fn unpipelined(err: redis::RedisError) -> redis::RedisError {
    match err.clone().into_server_errors().as_deref() {
        Some([(_, failed)]) => failed.clone().into(),
        _ => err,
    }
}

/// Errors that mean "ask again shortly": the slot is migrating or failing over.
fn is_slot_moving(err: &redis::RedisError) -> bool {
    matches!(
        err.code(),
        Some("MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN")
    )
}

/// The hash layout: everything in one hash.
static HASH: LazyLock<Scripts> = LazyLock::new(|| Scripts::build(HASH_LAYOUT, Some(&LIBRARY)));
/// The legacy two-key layout: our state in a companion hash, mirrored into the keys.
/// No library: its hooks read `KEYS` at the top, before the operation binds them.
static LEGACY: LazyLock<Scripts> =
    LazyLock::new(|| Scripts::build(include_str!("../../../../lua/legacy_layout.lua"), None));

/// The compiled scripts of `target`'s layout.
fn scripts(target: &Target) -> &'static Scripts {
    if target.is_legacy() { &LEGACY } else { &HASH }
}

impl ScriptConnection {
    /// Runs `script` on the lock's key (then `extra_keys`) with the common
    /// arguments and `args`; with `replicas`, pipelines `WAIT` behind it on the same
    /// node connection and also returns how many replicas acknowledged.
    ///
    /// Calls the library's function (FCALL) when the layout has one and the client
    /// has not given up on functions, else sends EVALSHA. Only the verb and its first
    /// argument change between attempts:
    /// - `Function not found` (a node that never had the library, or lost it) loads
    ///   the library on the lock's master and calls again; a second miss in one
    ///   call (the slot moved meanwhile) sends EVALSHA this once;
    /// - a refused FCALL or FUNCTION LOAD (an ACL user without them), or a library
    ///   the server will not load, makes the client send EVALSHA from then on; a
    ///   load that fails for a passing reason (OOM, READONLY...) only this call;
    /// - NOSCRIPT (a flushed or failed-over node) sends the same call as EVAL with
    ///   the source, which runs it and caches it on that node only, so a frozen
    ///   node elsewhere never stalls this lock;
    /// - a slot on the move (MOVED, ASK, TRYAGAIN, CLUSTERDOWN that the driver did
    ///   not resolve) is retried a few times after a short pause: every script is
    ///   idempotent per token.
    async fn eval<T: FromRedisValue>(
        &self,
        target: &Target,
        op: Operation,
        extra_keys: &[&str],
        args: impl Fn(&mut Cmd),
        replicas: Option<Replicas>,
    ) -> Result<(T, u32), Error> {
        let script = scripts(target).get(op);
        let functions = &self.functions;
        let mut via = match script.function {
            Some(_) if functions.in_use() => Via::Function,
            _ => Via::Sha,
        };
        let mut loaded = false;
        let mut redirects = 0;
        let mut link = self.conn.clone();
        loop {
            let (verb, body) = script.call(via);
            crate::metrics::script_sent(verb, || op.name());
            let mut cmd = redis::cmd(verb);
            cmd.arg(body)
                .arg(target.keys().len() + extra_keys.len())
                .arg(target.keys())
                .arg(extra_keys);
            common_args(&mut cmd, self.conn.publish_command(), target.original_ms);
            args(&mut cmd);
            let reply = match replicas {
                None => cmd
                    .query_async::<T>(&mut link)
                    .await
                    .map(|reply| (reply, 0)),
                Some(Replicas { count, timeout }) => redis::pipe()
                    .add_command(cmd)
                    .cmd("WAIT")
                    .arg(count)
                    .arg(millis(timeout))
                    .query_async::<(T, u32)>(&mut link)
                    .await
                    .map_err(unpipelined),
            };
            match reply {
                Err(err) if via == Via::Function && library::is_missing(&err) => {
                    via = if loaded {
                        Via::Sha
                    } else {
                        loaded = true;
                        match LIBRARY.load(&self.conn, target.key()).await {
                            Ok(()) => Via::Function,
                            Err(err) if library::refuses_for_good(&err) => {
                                functions.give_up(&err);
                                Via::Sha
                            }
                            // The server's state of the moment (out of memory, a
                            // failover): this call goes as a script.
                            Err(err) if err.code().is_some() => Via::Sha,
                            Err(err) => return Err(Error::from(err)),
                        }
                    };
                }
                Err(err) if via == Via::Function && library::is_refused(&err) => {
                    functions.give_up(&err);
                    via = Via::Sha;
                }
                Err(err) if err.code() == Some("NOSCRIPT") && via == Via::Sha => via = Via::Source,
                Err(err) if is_slot_moving(&err) && redirects < SLOT_MOVE_RETRIES => {
                    redirects += 1;
                    tracing::debug!(error = %ErrorChain(&err), redirects, "slot on the move; retrying");
                    let pause = (SLOT_MOVE_PAUSE * 2u32.pow(redirects)).min(SLOT_MOVE_MAX_PAUSE);
                    tokio::time::sleep(pause.mul_f64(rand::random_range(0.5..1.0))).await;
                }
                other => return other.map_err(|err| Error::from_script(err, target.keys())),
            }
        }
    }

    /// Runs `op` on `target` and `extra_keys` without waiting for replicas.
    async fn run_with<T: FromRedisValue>(
        &self,
        target: &Target,
        op: Operation,
        extra_keys: &[&str],
        args: impl Fn(&mut Cmd),
    ) -> Result<T, Error> {
        Ok(self.eval(target, op, extra_keys, args, None).await?.0)
    }

    /// Runs `op` on `target` without waiting for replicas.
    async fn run<T: FromRedisValue>(
        &self,
        target: &Target,
        op: Operation,
        args: impl Fn(&mut Cmd),
    ) -> Result<T, Error> {
        self.run_with(target, op, &[], args).await
    }
}

/// The requests as script calls, and the shared reads' look and mark as plain
/// commands on the lock's hash (`HMGET`, `HSET`, `HDEL`).
impl Backend for ScriptConnection {
    async fn acquire(&self, target: &Target, ask: &Acquire<'_>) -> Result<(Acquired, u32)> {
        let Acquire {
            token,
            access,
            lease,
            in_line,
            intent,
            replicas,
        } = *ask;
        let (reply, acked) = if access.mode() == LockMode::Read {
            let upgradable = access == Access::UpgradableRead;
            let args = args::acquire_read(token, lease, in_line, upgradable, intent);
            self.eval::<reply::Acquire>(target, Operation::AcquireRead, &[], args, replicas)
                .await?
        } else {
            let args = args::acquire_write(token, lease, intent, access == Access::Upgrade);
            self.eval::<reply::Acquire>(target, Operation::AcquireWrite, &[], args, replicas)
                .await?
        };
        Ok((decode_acquired(reply), acked))
    }

    async fn acquire_set(&self, set: &SetAsk<'_>) -> Result<SetAcquired> {
        let Some(((first, _, _), others)) = set.members.split_first() else {
            return Ok(SetAcquired::Granted(Vec::new()));
        };
        let keys: Vec<&str> = others.iter().map(|(target, _, _)| target.key()).collect();
        let reply: reply::Fences = self
            .run_with(first, Operation::AcquireSet, &keys, args::acquire_set(set))
            .await?;
        Ok(decode_set(&reply))
    }

    async fn release(&self, target: &Target, token: &Token) -> Result<bool> {
        let removed: reply::Done = self
            .run(target, Operation::Release, args::release(token))
            .await?;
        Ok(removed == 1)
    }

    async fn renew(&self, target: &Target, held: Held<'_>, mode: LockMode) -> Result<Renewed> {
        let args = args::renew(held.token, held.lease, mode);
        let renewed: reply::Done = self.run(target, Operation::Renew, args).await?;
        Ok(Renewed::from_reply(renewed))
    }

    async fn downgrade(&self, target: &Target, held: Held<'_>, from: Access) -> Result<Downgraded> {
        let args = args::downgrade(held.token, held.lease, from);
        let (done, queued): reply::Downgraded =
            self.run(target, Operation::Downgrade, args).await?;
        Ok(Downgraded::from_reply(done, queued))
    }

    async fn fenced_write(&self, target: &Target, ask: &Fenced<'_>) -> Result<(bool, u32)> {
        let Fenced {
            token,
            writes,
            replicas,
        } = *ask;
        let keys: Vec<&str> = writes.iter().map(|w| w.key.as_str()).collect();
        let args = args::fenced_write(token, writes);
        let (fence, acknowledged) = self
            .eval::<reply::Fence>(target, Operation::FencedWrite, &keys, args, replicas)
            .await?;
        Ok((fence > 0, acknowledged))
    }

    async fn force_release(&self, target: &Target) -> Result<u64> {
        self.run::<reply::Count>(target, Operation::ForceRelease, args::none)
            .await
    }

    async fn state(&self, target: &Target) -> Result<RawState> {
        self.run::<reply::State>(target, Operation::State, args::none)
            .await
    }

    /// The lock's line or pending upgrade exists: `HMGET q:head u:upgrade`.
    async fn writer_waits(&self, target: &Target) -> Result<bool> {
        let fields: (Option<String>, Option<String>) = redis::cmd("HMGET")
            .arg(target.key())
            .arg("q:head")
            .arg("u:upgrade")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(fields.0.is_some() || fields.1.is_some())
    }

    /// `token`'s `k:` field. No script writes it; `state.lua` reports it. The set
    /// also gives the hash a TTL of `lease` if it has none (`NX`), so a mark that
    /// comes after the lock's hash went leaves no key behind for good; the scripts
    /// keep any live hash's TTL past its holds.
    async fn mark_kept(&self, target: &Target, held: Held<'_>, on: bool) -> Result<()> {
        let key = target.key();
        let field = format!("k:{}", held.token.as_str());
        let mut link = self.conn.clone();
        if on {
            redis::pipe()
                .atomic()
                .hset(key, &field, 1)
                .ignore()
                .cmd("PEXPIRE")
                .arg(key)
                .arg(millis(held.lease))
                .arg("NX")
                .ignore()
                .query_async::<()>(&mut link)
                .await?;
        } else {
            redis::cmd("HDEL")
                .arg(key)
                .arg(&field)
                .query_async::<()>(&mut link)
                .await?;
        }
        Ok(())
    }

    async fn nodes(&self) -> Result<Vec<Node>> {
        masters(&self.conn).await
    }

    async fn scan(&self, scan: &Scan<'_>) -> Result<(u64, Vec<String>)> {
        scan_node(&self.conn, scan).await
    }

    fn shares_slot(&self, a: &str, b: &str) -> bool {
        !self.is_cluster() || key_slot(a.as_bytes()) == key_slot(b.as_bytes())
    }

    fn is_cluster(&self) -> bool {
        matches!(self.conn, Connection::Cluster(_))
    }
}

/// The common arguments of every script, `ARGV[1..3]` (see `lua/helpers.lua`).
fn common_args(cmd: &mut Cmd, publish: &str, original_ms: (u64, u64)) {
    cmd.arg(publish).arg(original_ms.0).arg(original_ms.1);
}

/// Each script's own arguments (from `ARGV[4]`), in the order its header in `lua/`
/// lists them; `tests::headers_state_the_contracts` holds the two together.
mod args {
    use std::time::Duration;

    use redis::Cmd;

    use super::{Access, LockMode, SetAsk, Write, millis};
    use crate::protocol::token::Token;

    pub(super) fn acquire_set<'a>(set: &'a SetAsk<'a>) -> impl Fn(&mut Cmd) + 'a {
        move |cmd| {
            cmd.arg(u8::from(set.writer_preferred))
                .arg(millis(set.read_lease))
                .arg(millis(set.write_lease));
            for (_, token, mode) in &set.members {
                let mode = if *mode == LockMode::Write { "w" } else { "r" };
                cmd.arg(mode).arg(token.as_str());
            }
        }
    }

    pub(super) fn acquire_read(
        token: &Token,
        lease: Duration,
        writer_preferred: bool,
        upgradable: bool,
        intent: Duration,
    ) -> impl Fn(&mut Cmd) + '_ {
        move |cmd| {
            cmd.arg(token.as_str())
                .arg(millis(lease))
                .arg(u8::from(writer_preferred))
                .arg(u8::from(upgradable))
                .arg(millis(intent));
        }
    }

    pub(super) fn acquire_write(
        token: &Token,
        lease: Duration,
        intent: Duration,
        upgrade: bool,
    ) -> impl Fn(&mut Cmd) + '_ {
        move |cmd| {
            cmd.arg(token.as_str())
                .arg(millis(lease))
                .arg(millis(intent))
                .arg(u8::from(upgrade));
        }
    }

    pub(super) fn release(token: &Token) -> impl Fn(&mut Cmd) + '_ {
        move |cmd| {
            cmd.arg(token.as_str());
        }
    }

    pub(super) fn renew(token: &Token, lease: Duration, mode: LockMode) -> impl Fn(&mut Cmd) + '_ {
        let mode = match mode {
            LockMode::Read => "read",
            LockMode::Write => "write",
        };
        move |cmd| {
            cmd.arg(token.as_str()).arg(millis(lease)).arg(mode);
        }
    }

    pub(super) fn downgrade(
        token: &Token,
        lease: Duration,
        from: Access,
    ) -> impl Fn(&mut Cmd) + '_ {
        let from = match from {
            Access::UpgradableRead => "upgradable",
            _ => "write",
        };
        move |cmd| {
            cmd.arg(token.as_str()).arg(millis(lease)).arg(from);
        }
    }

    /// The token, then three arguments per write.
    pub(super) fn fenced_write<'a>(
        token: &'a Token,
        writes: &'a [Write],
    ) -> impl Fn(&mut Cmd) + 'a {
        move |cmd| {
            cmd.arg(token.as_str());
            for write in writes {
                // The script reads an expiry of 0 as "none".
                let expiry_ms = write.expiry.map_or(0, millis);
                cmd.arg(write.op).arg(&write.value).arg(expiry_ms);
            }
        }
    }

    /// `force_release` and `state` take only the common arguments.
    pub(super) fn none(_: &mut Cmd) {}
}

/// The reply each wrapper decodes, as the script's header states it.
mod reply {
    /// `acquire_read`, `acquire_write`: `{1, fence}` granted, `{0, ms, fence}`
    /// (writers) or `{0, ms, 0, batch}` (readers) refused, `{-1, 0}` (upgrades)
    /// lost: two or three integers, and for readers the batch's name ('' when the
    /// reader does not wait in line).
    pub(super) struct Acquire(pub(super) Vec<i64>, pub(super) String);

    impl redis::FromRedisValue for Acquire {
        fn from_redis_value_ref(v: &redis::Value) -> Result<Self, redis::ParsingError> {
            // A reader's refusal: three integers and the batch's name (a string).
            if let redis::Value::Array(items) = v
                && let [a, b, c, redis::Value::BulkString(batch)] = items.as_slice()
            {
                let int = |v| redis::from_redis_value_ref::<i64>(v);
                let batch = String::from_utf8(batch.clone()).map_err(|e| e.to_string())?;
                return Ok(Acquire(vec![int(a)?, int(b)?, int(c)?], batch));
            }
            let items: Vec<i64> = redis::from_redis_value_ref(v)?;
            match items.len() {
                2 | 3 => Ok(Acquire(items, String::new())),
                n => Err(format!("an acquire reply has 2 to 4 elements, not {n}").into()),
            }
        }

        fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
            Self::from_redis_value_ref(&v)
        }
    }
    /// `acquire_set`: `{1, fence...}` every member granted, `{0, member, ms}` one
    /// refused.
    pub(super) type Fences = Vec<i64>;
    /// `release`: 1 done, 0 not; `renew`: also 2, renewed while a writer waits.
    pub(super) type Done = i64;
    /// `downgrade`: `{done, queued}` (1 / 0, and ms since the first writer in
    /// line queued, or -1).
    pub(super) type Downgraded = (i64, i64);
    /// `fenced_write`: the hold's fence, 0 when nothing was written.
    pub(super) type Fence = u64;
    /// `force_release`: how many holds were removed.
    pub(super) type Count = u64;
    /// `state`: see [`RawState`](super::RawState).
    pub(super) type State = super::RawState;
}

fn decode_acquired(reply::Acquire(reply, batch): reply::Acquire) -> Acquired {
    let number = |i: usize| reply.get(i).map_or(0, |&n| u64::try_from(n).unwrap_or(0));
    if reply.first() == Some(&1) {
        Acquired::Granted { fence: number(1) }
    } else if reply.first() == Some(&-1) {
        Acquired::Lost
    } else {
        Acquired::Refused {
            holds_for: Duration::from_millis(number(1)),
            fence: number(2),
            batch: (!batch.is_empty()).then_some(batch),
        }
    }
}

fn decode_set(reply: &[i64]) -> SetAcquired {
    let number = |n: &i64| u64::try_from(*n).unwrap_or(0);
    match reply {
        [1, fences @ ..] => SetAcquired::Granted(fences.iter().map(number).collect()),
        [_, member, ..] => {
            SetAcquired::Refused(usize::try_from(*member).unwrap_or(1).saturating_sub(1))
        }
        _ => SetAcquired::Refused(0),
    }
}

/// The scripts' contracts with these wrappers, checked without a server.
#[cfg(test)]
mod contracts;

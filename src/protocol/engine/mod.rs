//! The engine: the lock hash and the hash-layout scripts of `lua/`, line for line in
//! Rust. One transition function per script, used three ways: the model checker
//! explores it (`tests/model/`), the conformance test runs it side by side with the
//! real scripts on a server and compares every reply, message and field
//! (`tests/protocol_conformance.rs`), and the in-memory backend runs it in place of
//! the server.
//!
//! Each file mirrors one Lua file of the same name ([`operations`] the operation
//! scripts) and each function one Lua function or script; the comments say which.
//! A change to a script is the same change here, or the conformance test fails.
//!
//! Times are plain integers in one unit: ticks in the model checker, milliseconds in
//! the conformance test (there [`Params`] holds the real 1000 ms of `set_expiry` and
//! the real leases). The server's microsecond clock is `now * us_per_unit`.
//!
//! Not part of the crate's API: its names and shapes change with the scripts.
//!
//! Each `expect` here is a precondition its caller established just before, where
//! the Lua indexes the same field without a check; the model checker reaches every
//! state those callers can, and none breaks one.
#![allow(clippy::expect_used)]

use std::collections::BTreeMap;
use std::fmt;

/// A point in time or a span, in the model's unit.
pub type Time = i64;

/// A token as the hash stores it: a holder's 128 bits (random in the crate; a client
/// number and a generation in the model checker), or the number of a batch of
/// readers waiting in line (`r#<number>` in the scripts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tok {
    /// The token's high and low 64 bits.
    Holder(u64, u64),
    Batch(u64),
}

impl Tok {
    /// `is_batch`: a batch of readers, not a writer's token.
    pub fn is_batch(self) -> bool {
        matches!(self, Tok::Batch(_))
    }

    /// A token that never holds anything: the operator of a forced release, or the
    /// stranger whose renewal only settles the hash. `n` tells them apart.
    pub fn stranger(n: u64) -> Tok {
        Tok::Holder(STRANGER, n)
    }

    /// The reader that stands for a forced release's fence (`FORCED_READER` of
    /// force_release.lua): writers wait for it, other readers enter beside it.
    pub const FORCED_READER: Tok = Tok::Holder(STRANGER, 4);

    /// A token that [`stranger`](Self::stranger) made.
    pub fn is_stranger(self) -> bool {
        matches!(self, Tok::Holder(STRANGER, _))
    }
}

/// The high bits of a stranger's token (random tokens have them with odds of 2^-64).
const STRANGER: u64 = u64::MAX;

/// As the scripts write it: 32 hex digits, or `r#<number>`.
impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Holder(high, low) => write!(f, "{high:016x}{low:016x}"),
            Tok::Batch(n) => write!(f, "r#{n}"),
        }
    }
}

/// One field of the hash (holds.lua, queue.lua and hash_layout.lua list them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Field {
    WOwner,
    WUntil,
    /// `r:<token>`
    R(Tok),
    /// `readers`: how many `r:` fields count.
    Readers,
    /// `readers_until`: no counted reader's deadline is later.
    ReadersUntil,
    /// `readers_gone`: `r:` fields with a deadline up to this are leftovers.
    ReadersGone,
    /// `wait:<entry>`: a queued writer's place, or a batch of readers'.
    Wait(Tok),
    /// `wn:<entry>`: the next entry in line.
    Wn(Tok),
    /// `wq:<entry>`: when a writer's entry joined the line.
    Wq(Tok),
    /// `rw:<token>`: `"<batch>:<deadline>"`, the batch a reader waits in, or holds
    /// by, and the deadline of its own place in it.
    Rw(Tok),
    /// `rn:<batch>`: its readers that wait, or hold by its grant.
    Rn(Tok),
    /// `rg:<batch>`: a granted batch's deadline.
    Rg(Tok),
    /// `rseq`: the last batch number.
    Rseq,
    /// `shares`: how many counted readers hold by a batch's grant without an `r:`
    /// field of their own yet.
    Shares,
    QHead,
    QTail,
    /// `queue_until`: no place lives past it.
    QueueUntil,
    /// `layout`: a long text while a line exists (it keeps the hash a hashtable);
    /// here `Int(0)`.
    Layout,
    /// `u:owner`, `u:until`: the upgradable reader's token and deadline.
    UOwner,
    UUntil,
    /// `u:upgrade`: `"<deadline>:<first lease>"` while that reader waits to upgrade.
    UUpgrade,
    /// `u:wanted`: `1` once an upgradable acquire was refused by that reader's hold.
    UWanted,
    UOthers,
    Fence,
    Write,
    Wstamp,
    Read,
    Rstamp,
    OrigRead,
}

impl Field {
    /// The field's name as the scripts spell it: a fixed part, then the token it is
    /// about (if any).
    pub fn parts(self) -> (&'static str, Option<Tok>) {
        match self {
            Field::WOwner => ("w:owner", None),
            Field::WUntil => ("w:until", None),
            Field::R(t) => ("r:", Some(t)),
            Field::Readers => ("readers", None),
            Field::ReadersUntil => ("readers_until", None),
            Field::ReadersGone => ("readers_gone", None),
            Field::Wait(t) => ("wait:", Some(t)),
            Field::Wn(t) => ("wn:", Some(t)),
            Field::Wq(t) => ("wq:", Some(t)),
            Field::Rw(t) => ("rw:", Some(t)),
            Field::Rn(t) => ("rn:", Some(t)),
            Field::Rg(t) => ("rg:", Some(t)),
            Field::Rseq => ("rseq", None),
            Field::Shares => ("shares", None),
            Field::QHead => ("q:head", None),
            Field::QTail => ("q:tail", None),
            Field::QueueUntil => ("queue_until", None),
            Field::UOwner => ("u:owner", None),
            Field::UUntil => ("u:until", None),
            Field::UUpgrade => ("u:upgrade", None),
            Field::UWanted => ("u:wanted", None),
            Field::Layout => ("layout", None),
            Field::UOthers => ("u:others", None),
            Field::Fence => ("fence", None),
            Field::Write => ("write", None),
            Field::Wstamp => ("wstamp", None),
            Field::Read => ("read", None),
            Field::Rstamp => ("rstamp", None),
            Field::OrigRead => ("orig:read", None),
        }
    }
}

/// A field's value: the Lua scripts store strings; these are the shapes they use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Val {
    Int(i64),
    Tok(Tok),
    /// `"<deadline>:<first lease>"` (a queue place, or a pending upgrade)
    Place(Time, Time),
    /// `"<batch>:<deadline>"` (a reader's `rw:` field: its batch and its own place)
    Member(Tok, Time),
}

/// Script settings that the model checker scales down and the conformance test
/// sets to the crate's real values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Params {
    /// The `+ 1000` of `set_expiry`: how long an idle key outlives its deadlines.
    pub idle: Time,
    /// Server microseconds per unit of time (fencing tokens are `max(fence + 1, now_us)`).
    pub us_per_unit: i64,
    /// `ARGV[2]`, `ARGV[3]`: leases of original-design readers and writers after their stamp.
    pub original_read: Time,
    pub original_write: Time,
    /// `FORCED_FENCE`: how long a forced release that ended read holds keeps
    /// writers out.
    pub forced_fence: Time,
}

/// What a message on the lock's channel says (`settle` in holds.lua).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Wake {
    /// `<token>:<fence>`: the lock was handed to that queued writer or upgrader.
    Handed(Tok, i64),
    /// `*`: everyone (but upgrade waiters).
    All,
    /// `r`: the readers, upgradable or not.
    Readers,
    /// `u`: the upgradable hold ended: the upgradable readers.
    Upgradable,
    /// `r#<number>`: that batch of readers holds (to other readers: `r`).
    Batch(Tok),
}

/// A script's reply, in the shapes of `src/scripts.rs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reply {
    /// `{1, fence}` (0 for readers).
    Granted(i64),
    /// `{0, ms}` (readers) or `{0, ms, fence}` (writers): the retry hint and the
    /// lock's last fence (0 for readers).
    Refused(Time, i64),
    /// `{-1, 0}`: an upgrade whose upgradable hold is gone.
    Lost,
    /// `{0, ms, 0, batch}`: a reader refused, waiting in line in that batch.
    InLine(Time, Tok),
    /// `1` / `0` of release, renew; the fence (or 0) of fenced_write.
    Int(i64),
    /// `{done, queued}` of downgrade: 1 / 0, and how long ago the writer first in
    /// line queued (-1: none waits; -2: one may wait, since before the write).
    Downgraded(i64, Time),
}

/// One script run: the reply, the message it published, and what the model checker
/// wants to know besides (not visible to the crate).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub reply: Reply,
    pub published: Option<Wake>,
    /// The batch of readers the script granted (its message, published first).
    pub granted: Option<Tok>,
    /// How many entries it took out at the head of the line (withdrawn, lapsed or
    /// served): the model checker's record of when each entry joined the line.
    pub unlinked: usize,
    /// acquire_write granted a hold that did not exist before (a new fencing token),
    /// to a new writer or as an upgrade.
    pub new_grant: bool,
    /// A waiting writer or upgrade, refused while other readers hold, called them
    /// back: `w`, published last.
    pub recalled: bool,
    /// force_release ended every hold: `x`, published first, tells the processes
    /// that listen on the lock (their shared and kept read holds are lost).
    pub evicted: bool,
}

/// Who holds and waits, as the scripts judge it (what a release by a stranger must
/// leave alone); not a script: the model checker's view.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct View {
    pub writer: Option<(Tok, Time)>,
    pub readers: BTreeMap<Tok, Time>,
    /// Tokens whose `r:` field (or batch grant) still counts, expired or not: their
    /// release lowers the count.
    pub counted: Vec<Tok>,
    /// Tokens with an `rw:` field: readers that wait in a batch or hold by its grant.
    pub members: Vec<Tok>,
    /// Live places, first in line first.
    pub queue: Vec<(Tok, Time)>,
    pub fence: i64,
    pub original_writer_until: Option<Time>,
    pub original_reader_until: Option<Time>,
    /// The live upgradable reader (also one of `readers`) and its deadline.
    pub upgradable: Option<(Tok, Time)>,
    /// Its live pending upgrade's deadline.
    pub upgrade: Option<Time>,
}

impl View {
    /// What a token holds or waits for, or a counted entry it left.
    pub fn owns(&self, token: Tok) -> bool {
        self.writer.is_some_and(|(owner, _)| owner == token)
            || self.counted.contains(&token)
            || self.members.contains(&token)
            || self.queue.iter().any(|&(t, _)| t == token)
    }
}

mod acquire_set;
mod hash;
mod hash_layout;
mod helpers;
mod holds;
pub mod operations;
mod original;
mod queue;

use hash_layout::*;
use helpers::*;
use holds::*;
use queue::*;

pub use acquire_set::{SetMember, SetOutcome, SetReply, acquire_set};
pub use hash::{Hash, RenderTok};
pub use holds::{Loaded, load, load_as};
pub use operations::*;
pub use original::*;

//! acquire_set.lua: several locks of one slot taken in one call, all or none.

use super::*;

/// One member of a set, as the script's arguments give it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SetMember {
    /// Its hash, by index into the hashes the call is given.
    pub hash: usize,
    pub token: Tok,
    pub write: bool,
}

/// What acquire_set.lua replies.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SetReply {
    /// `{1, fence_1, ..., fence_n}`: every member holds (a read member's fence is 0).
    Granted(Vec<i64>),
    /// `{0, i, ms}`: member `i` (from 1) was refused, with that retry hint; none holds.
    Refused(usize, Time),
}

/// One run of acquire_set.lua: its reply, and each operation it ran on a member's
/// hash, in order (what each published is in its outcome).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetOutcome {
    pub reply: SetReply,
    pub runs: Vec<(usize, Outcome)>,
}

/// acquire_set.lua: each member in order as acquire_read.lua (plain, no place in
/// line) or acquire_write.lua (no place in line) would take it; at the first
/// refusal, the members taken before it are released again (release.lua), last
/// first.
pub fn acquire_set(
    hashes: &mut [Hash],
    p: &Params,
    now: Time,
    members: &[SetMember],
    writer_preferred: bool,
    read_lease: Time,
    write_lease: Time,
) -> SetOutcome {
    let mut runs = Vec::new();
    let mut fences = Vec::new();
    for (i, member) in members.iter().enumerate() {
        let h = &mut hashes[member.hash];
        let out = if member.write {
            acquire_write(h, p, now, member.token, write_lease, 0, false)
        } else {
            acquire_read(
                h,
                p,
                now,
                member.token,
                read_lease,
                writer_preferred,
                false,
                0,
            )
        };
        runs.push((member.hash, out));
        let Reply::Granted(fence) = out.reply else {
            for taken in members[..i].iter().rev() {
                let out = release(&mut hashes[taken.hash], p, now, taken.token);
                runs.push((taken.hash, out));
            }
            return SetOutcome {
                reply: SetReply::Refused(i + 1, refusal_hint(out.reply)),
                runs,
            };
        };
        fences.push(fence);
    }
    SetOutcome {
        reply: SetReply::Granted(fences),
        runs,
    }
}

/// A refusal's retry hint (`reply[2]` of acquire_read.lua and acquire_write.lua).
fn refusal_hint(reply: Reply) -> Time {
    match reply {
        Reply::Refused(hint, _) | Reply::InLine(hint, _) => hint,
        _ => 0,
    }
}

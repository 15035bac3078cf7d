//! The members of one slot in one request: a set whose members share a slot (all
//! of them, on a single server) asks for them together, and the server grants all
//! or none (`lua/acquire_set.lua`). Read members that can join this client's read
//! hold of their lock join it first, with no request.

use tokio::time::Instant;

use super::guard::{Held, Member};
use crate::backend::{Backend, SetAsk};
use crate::error::Doing;
use crate::guard::lease::Lease;
use crate::lock::shared_reads;
use crate::lock::waiting::Pending;
use crate::metrics::{Acquiring, Mode};
use crate::protocol::state::LockMode;
use crate::protocol::token::Token;
use crate::protocol::{Access, SetAcquired};
use crate::{Error, Fairness, Operation, RwLockReadGuard, RwLockWriteGuard};

/// Takes every member of `group` (one slot's, in the set's order) at once, or none:
/// `Ok(None)` when one is refused (nothing is held then). A member that fails to
/// start its lease fails the whole.
pub(super) async fn take(group: &[Member]) -> Result<Option<Vec<Held>>, Error> {
    let mut held: Vec<(usize, Held)> = Vec::with_capacity(group.len());
    let mut asked: Vec<(usize, &Member)> = Vec::with_capacity(group.len());
    for (i, member) in group.iter().enumerate() {
        match joined(member).await {
            Some(share) => held.push((i, share)),
            None => asked.push((i, member)),
        }
    }
    let granted = match asked.as_slice() {
        [] => Some(Vec::new()),
        [(i, one)] => match one.take(false).await {
            Ok(hold) => Some(vec![(*i, hold)]),
            Err(Error::WouldBlock) => None,
            Err(err) => return Err(failed(held, err).await),
        },
        _ => match in_one_request(&asked).await {
            Ok(granted) => granted,
            Err(err) => return Err(failed(held, err).await),
        },
    };
    let Some(granted) = granted else {
        // Taken again in the set's order, if at all: a joined share held while an
        // earlier member is waited for would break the order.
        let _ = super::guard::release_all(held.into_iter().map(|(_, h)| h).collect()).await;
        return Ok(None);
    };
    held.extend(granted);
    held.sort_by_key(|(i, _)| *i);
    Ok(Some(held.into_iter().map(|(_, hold)| hold).collect()))
}

/// A read member's share of this client's read hold of its lock, if it can join one.
async fn joined(member: &Member) -> Option<Held> {
    if member.mode != LockMode::Read {
        return None;
    }
    let share = shared_reads::join_held(&member.lock).await?;
    Some(Held::Read(RwLockReadGuard::shared(share)))
}

/// Releases what was taken, and gives back `err`.
async fn failed(held: Vec<(usize, Held)>, err: Error) -> Error {
    let _ = super::guard::release_all(held.into_iter().map(|(_, h)| h).collect()).await;
    err
}

/// The members `asked` (two or more, of one slot) in one script: their holds, or
/// `None` when one was refused.
async fn in_one_request(asked: &[(usize, &Member)]) -> Result<Option<Vec<(usize, Held)>>, Error> {
    let first = &asked[0].1.lock;
    if first.client().inner.live.is_closed() {
        return Err(Error::Shutdown);
    }
    let options = first.options();
    for (_, member) in asked {
        if member.mode == LockMode::Write {
            // As a write does: this client's idle kept read hold of the lock goes
            // first, so the set is not refused by the client's own reads.
            shared_reads::make_way(&member.lock).await;
        }
    }
    let mut pending: Vec<Pending<'_>> = Vec::with_capacity(asked.len());
    let mut members = Vec::with_capacity(asked.len());
    for (_, member) in asked {
        pending.push(Pending::new(
            &member.lock,
            Token::random(),
            access(member.mode),
        ));
    }
    for ((_, member), pending) in asked.iter().zip(&pending) {
        members.push((member.lock.target()?, pending.token(), member.mode));
    }
    let ask = SetAsk {
        members,
        read_lease: options.read_lease,
        write_lease: options.write_lease,
        writer_preferred: options.fairness == Fairness::WriterPreferred,
    };
    let sent = Instant::now();
    let reply = first
        .link()
        .acquire_set(&ask)
        .await
        .doing(first.name(), Operation::Acquire(asked[0].1.error_mode()))?;
    let fences = match reply {
        SetAcquired::Granted(fences) if fences.len() == asked.len() => fences,
        SetAcquired::Refused(_) => {
            // The script kept nothing it took.
            for pending in &mut pending {
                pending.disarm();
            }
            return Ok(None);
        }
        // Not this version's script: the armed tokens release whatever it took.
        SetAcquired::Granted(_) => return Ok(None),
    };
    let mut held = Vec::with_capacity(asked.len());
    for (((i, member), mut pending), fence) in asked.iter().zip(pending).zip(fences) {
        let token = pending.disarm();
        let lock = member.lock.clone();
        let lasts = lock.held_for(member.mode);
        // Each member counts as an acquisition of its lock, granted without a wait.
        let acquiring = Acquiring::start(lock.metrics_label(), Mode::of(access(member.mode)));
        acquiring.finish(&Ok::<(), Error>(()));
        let lease = Lease::start(lock, token, access(member.mode), fence, sent, lasts);
        let hold = match member.mode {
            LockMode::Read => Held::Read(RwLockReadGuard::new(lease)?),
            LockMode::Write => Held::Write(RwLockWriteGuard::new(lease, fence)),
        };
        held.push((*i, hold));
    }
    Ok(Some(held))
}

fn access(mode: LockMode) -> Access {
    match mode {
        LockMode::Read => Access::Read,
        LockMode::Write => Access::Write,
    }
}

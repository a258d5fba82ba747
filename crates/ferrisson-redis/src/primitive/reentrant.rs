//! One acquire attempt of a reentrant lock, written once for `Lock`, `FairLock` and both
//! sides of `RwLock`: which owner id to send, whether it is a re-entry, and what to do
//! with the client's record of holds once Redis answered.
//!
//! Re-entry is transparent inside one tokio task: the task that holds a lock finds its
//! live hold in the client's [`Holds`](crate::backend::holds::Holds) and sends the hold's
//! owner id in re-entry mode. Another task never finds that hold (holds are found by task
//! and by live guards), so it sends a fresh owner id and waits like anyone else.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::api::error::Result;
use crate::api::fencing::FencingToken;
use crate::api::lease::Lease;
use crate::backend::client::Client;
use crate::backend::holds::{Hold, Renewal};
use crate::backend::ids::{OwnerId, TaskKey};
use crate::backend::keys::Keys;
use crate::observe::probe::Probe;
use crate::primitive::wait::Attempt;

/// The lock an attempt is for, as the hold record needs it.
pub(crate) struct HoldSpec<'a> {
    /// The lock's name and metrics.
    pub(crate) probe: &'a Probe,
    /// The lock's keys: holds are recorded under the main key.
    pub(crate) keys: &'a Keys,
    pub(crate) lease: Lease,
    pub(crate) renewal: Renewal,
    /// An owner id the caller chose (`Lock::with_owner`): shared on purpose, found by
    /// owner rather than by task.
    pub(crate) explicit_owner: Option<OwnerId>,
}

/// How the attempt is sent, as the primitive's acquire script needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sent {
    /// A first hold, under a fresh owner id or the explicit one.
    First(OwnerId),
    /// One more hold for this task's live hold under its owner id.
    Reentry(OwnerId),
}

impl Sent {
    pub(crate) fn owner(self) -> OwnerId {
        match self {
            Self::First(owner) | Self::Reentry(owner) => owner,
        }
    }
}

/// What the primitive's acquire script answered, in the words the core needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    Granted {
        token: FencingToken,
        count: u32,
    },
    /// Not granted: retry after at most this long (`None`: the holder has no expiry).
    Blocked(Option<Duration>),
    /// A re-entry found the hold gone.
    NotReentered,
}

/// Runs one attempt: `send` sends the script for the owner and mode it is given.
///
/// `fresh` is the owner id to use for a first hold (the waiter's id, kept for a whole
/// wait, for primitives whose queue entries are keyed by it).
///
/// # Cancel safety
///
/// As cancel safe as `send`: the client's record changes only after Redis answered.
pub(crate) async fn attempt<F, Fut>(
    client: &Client,
    spec: &HoldSpec<'_>,
    fresh: OwnerId,
    mut send: F,
) -> Result<Attempt<Arc<Hold>>>
where
    F: FnMut(Sent) -> Fut,
    Fut: Future<Output = Result<Answer>>,
{
    let task = TaskKey::current();
    let holds = &client.inner.holds;
    let lease = spec.lease.duration(client.watchdog_lease());
    loop {
        let existing = holds
            .find(spec.keys.main(), spec.explicit_owner, task)
            .filter(|h| h.is_held());
        let request = match (&existing, spec.explicit_owner) {
            // An explicit owner may hold the lock in another process: always a first hold
            // as far as this client's record goes; the script counts the re-entry.
            (_, Some(owner)) => Sent::First(owner),
            (Some(hold), None) => Sent::Reentry(hold.owner),
            (None, None) => Sent::First(fresh),
        };
        let sent_at = Instant::now();
        match send(request).await? {
            Answer::Blocked(wait) => return Ok(Attempt::Held(wait)),
            Answer::NotReentered => {
                // The hold this task believed it had is gone; try for a fresh one.
                if let Some(hold) = existing {
                    hold.mark_lost();
                }
            }
            Answer::Granted { token, count } => {
                let deadline = sent_at + lease;
                let reentered = matches!(request, Sent::Reentry(_)) || count > 1;
                if !reentered && let Some(stale) = &existing {
                    // Redis started a new hold under an explicit owner whose old one was
                    // lost (expired or force-unlocked): a new hold, a new token.
                    stale.mark_lost();
                }
                let hold = match existing {
                    Some(hold) if reentered && holds.reattach(&hold) => {
                        hold.extend(deadline);
                        hold
                    }
                    _ => holds.attach(
                        Hold::new(
                            spec.probe,
                            spec.keys.clone(),
                            request.owner(),
                            token,
                            spec.explicit_owner.is_none().then_some(task),
                            deadline,
                        )
                        .renewed_as(spec.renewal),
                    ),
                };
                if spec.lease == Lease::Watchdog {
                    client.inner.watchdog.watch(&hold);
                }
                return Ok(Attempt::Acquired(hold));
            }
        }
    }
}

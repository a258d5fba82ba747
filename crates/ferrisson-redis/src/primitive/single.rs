//! One acquire attempt of a single-owner hold (no re-entry), written once for
//! `SimpleLock` and `Election`: a fresh owner id per attempt, undone if the caller goes
//! away, and on a grant a [`Hold`] the watchdog renews when the lease asks for it.
//!
//! Both keep their holder in a string key holding the owner id, so the watchdog renews
//! them with one script ([`Renewal::Simple`]).

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::api::error::{Result, is_unacknowledged};
use crate::api::fencing::FencingToken;
use crate::api::lease::Lease;
use crate::backend::client::Client;
use crate::backend::holds::{Hold, Renewal};
use crate::backend::ids::{OwnerId, ReleaseId};
use crate::backend::keys::Keys;
use crate::observe::probe::Probe;
use crate::primitive::guard::{HoldGuard, SendRelease};
use crate::primitive::undo::UndoOnDrop;
use crate::primitive::wait::Attempt;

/// What a single-owner acquire script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SingleAnswer<T> {
    /// Granted with this token, and whatever else the primitive's script reports.
    Granted(FencingToken, T),
    /// Held by another owner, for `pttl` ms more (-1: no expiry).
    Held { pttl: i64 },
}

/// The primitive an attempt is for.
pub(crate) struct SingleSpec<'a, R> {
    pub(crate) client: &'a Client,
    /// The primitive's name and metrics.
    pub(crate) probe: &'a Probe,
    pub(crate) keys: &'a Keys,
    pub(crate) lease: Lease,
    /// How the hold is released: also how a cancelled attempt is undone (the owner id is
    /// the attempt's alone, so releasing it is right whether or not the acquire landed).
    pub(crate) release: R,
}

/// Runs one attempt: `send(owner, lease)` sends the primitive's acquire script.
///
/// # Cancel safety
///
/// Cancel safe: dropped before the reply, the attempt's owner is released on a spawned
/// task, which removes the hold if the script ran.
pub(crate) async fn attempt<R, T, F, Fut>(
    spec: SingleSpec<'_, R>,
    send: F,
) -> Result<Attempt<(HoldGuard<R>, T)>>
where
    R: SendRelease + Clone,
    F: FnOnce(OwnerId, Duration) -> Fut,
    Fut: Future<Output = Result<SingleAnswer<T>>>,
{
    let SingleSpec {
        client,
        probe,
        keys,
        lease: lease_kind,
        release,
    } = spec;
    let owner = OwnerId::random();
    let lease = lease_kind.duration(client.watchdog_lease());
    let undo = UndoOnDrop::arm(
        &probe.name,
        "undoing a cancelled acquire",
        "it expires with its lease",
        || {
            let client = client.clone();
            let release = release.clone();
            async move { release.send(&client, owner, ReleaseId::random()).await }
        },
    );
    let sent_at = Instant::now();
    let reply = match send(owner, lease).await {
        Ok(reply) => reply,
        Err(e) if is_unacknowledged(&e) => {
            // Granted, but not acknowledged as required: give it back before reporting it.
            let _ = undo.run_now().await;
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    undo.disarm();
    match reply {
        SingleAnswer::Held { pttl } => Ok(Attempt::held(pttl)),
        SingleAnswer::Granted(token, extra) => {
            let hold = client.inner.holds.attach(
                Hold::new(probe, keys.clone(), owner, token, None, sent_at + lease)
                    .renewed_as(Renewal::Simple),
            );
            if lease_kind == Lease::Watchdog {
                client.inner.watchdog.watch(&hold);
            }
            Ok(Attempt::Acquired((
                HoldGuard::new(client.clone(), hold, release),
                extra,
            )))
        }
    }
}

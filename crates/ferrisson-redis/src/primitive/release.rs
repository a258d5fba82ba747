//! Releasing, the same way for every primitive: a release whose reply was lost (or that
//! the connection refused) is sent again, a bounded number of times, and read knowing
//! that its first try may have been applied.
//!
//! A lock's release carries a random release id; the lock's release script remembers the
//! ids it applied while other holds remain, so a retry after a lost reply is recognised.

use std::future::Future;
use std::time::Duration;

use crate::api::error::{Error, Result};
use crate::backend::ids::ReleaseId;
use crate::backend::scripts::Released;

/// How often a release is sent at most.
const ATTEMPTS: u32 = 3;

/// A release's reply, and whether it answered a second (or later) try, whose first may
/// have been applied without its reply arriving.
pub(crate) struct Answered<T> {
    pub(crate) reply: T,
    pub(crate) resent: bool,
}

/// Sends `send()` until it is answered, sending it again (after 20 ms, then 40 ms) when
/// `may_resend` says the failure left a resend harmless; at most [`ATTEMPTS`] times.
/// `name` is the primitive's, for the debug log.
pub(crate) async fn resend_until_answered<T, F, Fut>(
    name: &str,
    may_resend: impl Fn(&Error) -> bool,
    mut send: F,
) -> Result<Answered<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut attempt = 0;
    loop {
        attempt += 1;
        match send().await {
            Ok(reply) => {
                return Ok(Answered {
                    reply,
                    resent: attempt > 1,
                });
            }
            Err(e) if may_resend(&e) && attempt < ATTEMPTS => {
                tracing::debug!(name = %name, error = %e, "release failed; sending it again");
                tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt))).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Releases one hold of the lock `name` with `send(release_id)`, retrying on connection
/// errors with the same release id.
///
/// After a lost reply, "gone" or "someone else's" most likely means the first try went
/// through, so a retry that finds either reports success; the holder learns of a real
/// loss from its guard's `lost()`.
pub(crate) async fn release_with_retry<F, Fut>(name: &str, mut send: F) -> Result<()>
where
    F: FnMut(ReleaseId) -> Fut,
    Fut: Future<Output = Result<Released>>,
{
    let release_id = ReleaseId::random();
    let answered =
        resend_until_answered(name, Error::is_connection_error, || send(release_id)).await?;
    match answered.reply {
        Released::Freed | Released::StillHeld | Released::AlreadyApplied => Ok(()),
        Released::Expired | Released::OtherOwner if answered.resent => Ok(()),
        Released::Expired => Err(Error::LeaseExpired {
            name: name.to_owned(),
        }),
        Released::OtherOwner => Err(Error::NotOwner {
            name: name.to_owned(),
        }),
    }
}

//! Releasing one hold of a lock, the same way for every lock kind: retried when the reply
//! was lost, never applied twice.
//!
//! Each release carries a random release id; the lock's release script remembers the ids
//! it applied while other holds remain, so a retry after a lost reply is recognised.

use std::future::Future;
use std::time::Duration;

use crate::api::error::{Error, Result};
use crate::backend::ids::ReleaseId;
use crate::backend::scripts::Released;

/// How often a release whose reply was lost is sent.
const ATTEMPTS: u32 = 3;

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
    let mut attempt = 0;
    loop {
        attempt += 1;
        match send(release_id).await {
            Ok(Released::Freed | Released::StillHeld | Released::AlreadyApplied) => return Ok(()),
            Ok(Released::Expired | Released::OtherOwner) if attempt > 1 => return Ok(()),
            Ok(Released::Expired) => {
                return Err(Error::LeaseExpired {
                    name: name.to_owned(),
                });
            }
            Ok(Released::OtherOwner) => {
                return Err(Error::NotOwner {
                    name: name.to_owned(),
                });
            }
            Err(e) if e.is_connection_error() && attempt < ATTEMPTS => {
                tracing::debug!(lock = %name, error = %e, "release failed; retrying");
                tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt))).await;
            }
            Err(e) => return Err(e),
        }
    }
}

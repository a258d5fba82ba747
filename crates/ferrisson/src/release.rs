//! Releasing one hold of a lock, the same way for every lock kind: retried when the reply
//! was lost, never applied twice.
//!
//! Each release carries a random release id; the lock's release script remembers the ids
//! it applied while other holds remain, so a retry after a lost reply is recognised.

use std::future::Future;
use std::time::Duration;

use crate::error::{Error, Result};

/// How often a release whose reply was lost is sent.
const ATTEMPTS: u32 = 3;

/// What a lock's release script did; the scripts share these reply codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// `1`: the last hold went; the lock is free.
    Freed,
    /// `2`: one hold went, others of the same owner remain.
    StillHeld,
    /// `3`: this release id was applied before (a retry).
    AlreadyApplied,
    /// `0`: no such lock: its lease ran out.
    Expired,
    /// `-1`: the lock is held, but not by this owner.
    OtherOwner,
}

impl Released {
    /// Maps a release script's reply code; `script` names it in the error.
    pub(crate) fn from_code(code: i64, script: &str) -> Result<Self> {
        match code {
            1 => Ok(Self::Freed),
            2 => Ok(Self::StillHeld),
            3 => Ok(Self::AlreadyApplied),
            0 => Ok(Self::Expired),
            -1 => Ok(Self::OtherOwner),
            other => Err(Error::Protocol(format!("{script} returned {other}"))),
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
    F: FnMut(u64) -> Fut,
    Fut: Future<Output = Result<Released>>,
{
    let release_id: u64 = rand::random();
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

/// The release id in the form the scripts store it.
pub(crate) fn release_id_arg(release_id: u64) -> String {
    format!("{release_id:016x}")
}

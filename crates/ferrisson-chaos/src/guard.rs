//! One view of every guard the scenarios hold, so that the recording helpers (belief
//! samples, lost signals, releases, critical sections) are written once.

use std::future::Future;
use std::time::Duration;

use ferrisson::{
    Error, ExpirablePermit, FairLockGuard, LockGuard, RwLockReadGuard, RwLockWriteGuard,
};

use crate::history::{EventKind, Recorder};

/// What the scenarios observe of a held lock, lock side or permit.
pub(crate) trait Guard: Send + Sync {
    /// The guard's own belief that it holds.
    fn is_held(&self) -> bool;
    /// Time left before the guard's own deadline (zero once lost).
    fn remaining(&self) -> Duration;
    /// The fencing token presented to the resource; 0 where the primitive has none.
    fn fencing_token(&self) -> u64;
    /// Resolves when the guard learns that it lost what it held.
    fn lost(&self) -> impl Future<Output = ()> + Send;
    /// Gives it back.
    fn unlock(self) -> impl Future<Output = ferrisson::Result<()>> + Send
    where
        Self: Sized;
}

impl Guard for LockGuard {
    fn is_held(&self) -> bool {
        LockGuard::is_held(self)
    }
    fn remaining(&self) -> Duration {
        LockGuard::remaining(self)
    }
    fn fencing_token(&self) -> u64 {
        LockGuard::fencing_token(self).get()
    }
    fn lost(&self) -> impl Future<Output = ()> + Send {
        LockGuard::lost(self)
    }
    fn unlock(self) -> impl Future<Output = ferrisson::Result<()>> + Send {
        LockGuard::unlock(self)
    }
}

impl Guard for FairLockGuard {
    fn is_held(&self) -> bool {
        FairLockGuard::is_held(self)
    }
    fn remaining(&self) -> Duration {
        FairLockGuard::remaining(self)
    }
    fn fencing_token(&self) -> u64 {
        FairLockGuard::fencing_token(self).get()
    }
    fn lost(&self) -> impl Future<Output = ()> + Send {
        FairLockGuard::lost(self)
    }
    fn unlock(self) -> impl Future<Output = ferrisson::Result<()>> + Send {
        FairLockGuard::unlock(self)
    }
}

impl Guard for RwLockWriteGuard {
    fn is_held(&self) -> bool {
        RwLockWriteGuard::is_held(self)
    }
    fn remaining(&self) -> Duration {
        RwLockWriteGuard::remaining(self)
    }
    fn fencing_token(&self) -> u64 {
        RwLockWriteGuard::fencing_token(self).get()
    }
    fn lost(&self) -> impl Future<Output = ()> + Send {
        RwLockWriteGuard::lost(self)
    }
    fn unlock(self) -> impl Future<Output = ferrisson::Result<()>> + Send {
        RwLockWriteGuard::unlock(self)
    }
}

impl Guard for RwLockReadGuard {
    fn is_held(&self) -> bool {
        RwLockReadGuard::is_held(self)
    }
    fn remaining(&self) -> Duration {
        RwLockReadGuard::remaining(self)
    }
    /// Readers get no fencing token from the library (the acquire script answers 0 for
    /// a read): a resource can order writers only. See docs/SAFETY.md.
    fn fencing_token(&self) -> u64 {
        0
    }
    fn lost(&self) -> impl Future<Output = ()> + Send {
        RwLockReadGuard::lost(self)
    }
    fn unlock(self) -> impl Future<Output = ferrisson::Result<()>> + Send {
        RwLockReadGuard::unlock(self)
    }
}

impl Guard for ExpirablePermit {
    /// A permit has no held flag: its lease, counted by the client from before the
    /// acquire was sent, is all it knows.
    fn is_held(&self) -> bool {
        !ExpirablePermit::remaining(self).is_zero()
    }
    fn remaining(&self) -> Duration {
        ExpirablePermit::remaining(self)
    }
    /// Permits carry no fencing token.
    fn fencing_token(&self) -> u64 {
        0
    }
    /// A permit has no lost-lock signal (nothing watches it; its end is its deadline,
    /// which the belief samples already record), so this never resolves rather than
    /// inventing a signal the library does not give.
    fn lost(&self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }
    /// `release()` answers `false` when the lease had run out before it: reported as
    /// `LeaseExpired`, the way the locks report the same case.
    fn unlock(self) -> impl Future<Output = ferrisson::Result<()>> + Send {
        let name = self.name().to_owned();
        async move {
            if ExpirablePermit::release(self).await? {
                Ok(())
            } else {
                Err(Error::LeaseExpired { name })
            }
        }
    }
}

/// Acquire with a bounded wait (inside `attempt`), recording the outcome. A guard that
/// arrives already expired (its reply was slower than the lease) is recorded as a void
/// grant `grant + 1000 * retry`, released, and the acquire retried, up to three times.
pub(crate) async fn acquire_with<G, F, Fut>(
    rec: &Recorder,
    grant: usize,
    mut attempt: F,
) -> anyhow::Result<Option<G>>
where
    G: Guard,
    F: FnMut() -> Fut,
    Fut: Future<Output = ferrisson::Result<Option<G>>>,
{
    for retry in 1..=4 {
        rec.record(grant, EventKind::AcquireInvoked);
        let reason = match attempt().await {
            Ok(Some(guard)) if guard.is_held() => {
                crate::scenarios::granted(rec, grant, &guard);
                return Ok(Some(guard));
            }
            Ok(Some(guard)) => {
                let void = grant + 1000 * retry;
                crate::scenarios::granted(rec, void, &guard);
                crate::scenarios::release(rec, void, guard).await;
                continue;
            }
            Ok(None) => "timed out".to_owned(),
            Err(e) => e.to_string(),
        };
        rec.record(grant, EventKind::AcquireFailed { reason });
        return Ok(None);
    }
    Ok(None)
}

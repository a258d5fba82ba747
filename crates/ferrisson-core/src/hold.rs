//! How long a hold is known to be valid, and its lost signal: the part of a hold every
//! store shares. A store keeps one [`HoldState`] per hold and moves its deadline when a
//! renewal (or a heartbeat, for a session) succeeds; guards read it for `is_held`,
//! `remaining` and `lost`.

use std::future::Future;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_util::FutureExt as _;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::observe::hold::HoldMeter;
use crate::observe::probe::Probe;

/// Until when a hold is valid, from the holder's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    /// Local monotonic deadline: the lease (or the session's timeout), counted from
    /// before the request that set it.
    pub deadline: Instant,
    /// Set once the hold was found gone or taken, or a deadline passed.
    pub lost: bool,
}

/// One hold's validity, its lost signal and its metrics; see the module docs.
///
/// ```
/// use std::time::Duration;
/// use tokio::time::Instant;
/// use ferrisson_core::hold::HoldState;
/// use ferrisson_core::observe::{Classes, Kind};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let probe = Classes::new("memory", None).probe(Kind::Lock, &"a".into());
/// let hold = HoldState::new(probe, Instant::now() + Duration::from_secs(10));
/// assert!(hold.is_held());
/// hold.mark_lost();
/// hold.lost().await; // resolves at once
/// assert_eq!(hold.remaining(), Duration::ZERO);
/// # });
/// ```
#[derive(Debug)]
pub struct HoldState {
    /// Kept here rather than in a `watch` channel, whose shared state would be one more
    /// allocation per hold.
    validity: Mutex<Validity>,
    /// Woken when the hold is lost or its deadline moves earlier (see
    /// [`HoldState::lost`]).
    changed: Notify,
    /// The hold's metrics, counted from [`HoldState::start`].
    meter: HoldMeter,
}

impl HoldState {
    /// A hold valid until `deadline`, its metrics under `probe` (not counted until
    /// [`HoldState::start`]).
    pub fn new(probe: Probe, deadline: Instant) -> Self {
        Self {
            validity: Mutex::new(Validity {
                deadline,
                lost: false,
            }),
            changed: Notify::new(),
            meter: HoldMeter::new(probe),
        }
    }

    /// The hold's metrics and its release span.
    pub fn meter(&self) -> &HoldMeter {
        &self.meter
    }

    /// Counts the hold in the metrics from now (once it is attached to a guard).
    pub fn start(&self) {
        self.meter.start();
    }

    fn validity_mut(&self) -> MutexGuard<'_, Validity> {
        self.validity.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The deadline and the lost flag now.
    pub fn validity(&self) -> Validity {
        *self.validity_mut()
    }

    /// True while the hold is not lost and its deadline has not passed.
    pub fn is_held(&self) -> bool {
        let v = self.validity();
        !v.lost && Instant::now() < v.deadline
    }

    /// Sends one release of this hold under its metrics and span
    /// ([`HoldMeter::release`]). A hold that had already ended here when the release
    /// began (its deadline passed or it was found lost, so its `lost()` had fired) answers
    /// [`Error::LeaseExpired`] even when the release went through: a store counts a lease
    /// from when it granted it, a little after the holder started counting, so the hold
    /// may still have been there, but a holder that stopped on `lost()` must not be told
    /// afterwards that it held to the end. The release is sent all the same, so the
    /// store frees the hold at once.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use ferrisson_core::Error;
    /// use ferrisson_core::hold::HoldState;
    /// use ferrisson_core::observe::{Classes, Kind};
    ///
    /// # fn main() -> std::io::Result<()> {
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// let probe = Classes::new("memory", None).probe(Kind::Lock, &"a".into());
    /// let hold = HoldState::new(probe, Instant::now() + Duration::from_secs(10));
    /// hold.mark_lost();
    /// let released = hold.release(None, true, async { Ok(()) }).await;
    /// assert!(matches!(released, Err(Error::LeaseExpired { .. })));
    /// # });
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// What `release` returns, or [`Error::LeaseExpired`] as above.
    ///
    /// # Cancel safety
    ///
    /// As cancel safe as `release`.
    pub fn release<'a>(
        &'a self,
        token: Option<FencingToken>,
        last: bool,
        release: impl Future<Output = Result<()>> + 'a,
    ) -> impl Future<Output = Result<()>> + 'a {
        let ended = !self.is_held();
        // A combinator, not an `async` block: a block awaiting a future it captured keeps
        // room for both, which doubled every release's future (ARCHITECTURE.md, future
        // sizes).
        let release = release.map(move |outcome| match outcome {
            Ok(()) if ended => Err(Error::LeaseExpired {
                name: self.meter.name().to_owned(),
            }),
            other => other,
        });
        self.meter.release(token, last, release, |()| false)
    }

    /// How long the hold stays valid without another renewal (zero once lost).
    pub fn remaining(&self) -> Duration {
        let v = self.validity();
        if v.lost {
            return Duration::ZERO;
        }
        v.deadline.saturating_duration_since(Instant::now())
    }

    /// Moves the deadline to `deadline` (a renewal, heartbeat or re-entry succeeded).
    /// Returns false, and marks the hold lost, when its deadline had already passed: its
    /// guards may have acted on that already, so a late renewal does not revive it.
    ///
    /// A later deadline is stored without notifying: a task in [`HoldState::lost`] wakes
    /// at the deadline it saw and reads the new one then (notifying on every renewal
    /// costs a watchdog renewing thousands of holds a noticeable share of its CPU). An
    /// earlier deadline or a loss notifies.
    pub fn extend(&self, deadline: Instant) -> bool {
        let now = Instant::now();
        let (notify, held) = {
            let mut v = self.validity_mut();
            if v.lost {
                (false, false)
            } else if now >= v.deadline {
                v.lost = true;
                (true, false)
            } else {
                let earlier = deadline < v.deadline;
                v.deadline = deadline;
                (earlier, true)
            }
        };
        // The loss is counted before anyone waiting on `lost()` hears of it, so that what
        // a woken task reads of the metrics includes it.
        if !held {
            self.meter.end(true);
        }
        if notify {
            self.changed.notify_waiters();
        }
        held
    }

    /// Marks the hold lost: every guard's `lost()` resolves, `is_held()` turns false.
    /// Returns true when this call lost it (false when it was lost already).
    pub fn mark_lost(&self) -> bool {
        let changed = !std::mem::replace(&mut self.validity_mut().lost, true);
        // Counted before the waiters wake, as in `extend`.
        self.meter.end(true);
        if changed {
            self.changed.notify_waiters();
        }
        changed
    }

    /// Resolves once the hold is lost or its deadline passes. A renewal's later deadline
    /// is read when the one it replaced passes (see [`HoldState::extend`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    pub async fn lost(&self) {
        loop {
            // Listening before reading: a loss between the read and the wait still wakes.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let v = self.validity();
            if v.lost || Instant::now() >= v.deadline {
                return;
            }
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep_until(v.deadline) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::time::Instant;

    use super::HoldState;
    use crate::observe::metrics::Kind;
    use crate::observe::probe::Classes;

    /// A hold with its deadline `deadline` from now, and a task waiting in `lost()`.
    async fn waited_on(deadline: Duration) -> (Arc<HoldState>, tokio::task::JoinHandle<()>) {
        let probe = Classes::new("test", None).probe(Kind::Lock, &Arc::from("l"));
        let hold = Arc::new(HoldState::new(probe, Instant::now() + deadline));
        let waiter = tokio::spawn({
            let hold = Arc::clone(&hold);
            async move { hold.lost().await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        (hold, waiter)
    }

    #[tokio::test(start_paused = true)]
    async fn lost_resolves_at_a_silently_extended_deadline() {
        let start = Instant::now();
        let (hold, waiter) = waited_on(Duration::from_secs(10)).await;
        assert!(hold.extend(start + Duration::from_secs(20)));
        waiter.await.expect("waiter");
        assert_eq!(start.elapsed(), Duration::from_secs(20));
        assert!(!hold.is_held());
    }

    #[tokio::test(start_paused = true)]
    async fn a_loss_wakes_lost_at_once() {
        let start = Instant::now();
        let (hold, waiter) = waited_on(Duration::from_secs(30)).await;
        assert!(hold.mark_lost());
        assert!(!hold.mark_lost());
        waiter.await.expect("waiter");
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        assert!(!hold.is_held());
        assert_eq!(hold.remaining(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_deadline_wakes_lost() {
        let start = Instant::now();
        let (hold, waiter) = waited_on(Duration::from_secs(30)).await;
        assert!(hold.extend(start + Duration::from_secs(5)));
        waiter.await.expect("waiter");
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_after_the_deadline_does_not_revive_the_hold() {
        let probe = Classes::new("test", None).probe(Kind::Lock, &Arc::from("l"));
        let hold = HoldState::new(probe, Instant::now() + Duration::from_secs(1));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(!hold.extend(Instant::now() + Duration::from_secs(10)));
        assert!(!hold.is_held());
    }
}

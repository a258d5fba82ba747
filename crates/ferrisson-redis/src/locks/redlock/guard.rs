//! The guard of a Redlock hold: its validity, token, extension and release.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::fanout::answers;
use super::quorum::{MajorityGrant, release_everywhere};
use super::renewal::{extend_hold, keep_extended};
use super::{MIN_TTL, Redlock};
use crate::api::error::{Error, Result};
use crate::api::fencing::FencingToken;
use crate::api::lease::{Lease, validate_lease};
use crate::backend::holds::Hold;
use crate::backend::ids::OwnerId;
use crate::backend::scripts::simple::Compared;
use crate::observe::acquire::Grant;
use crate::primitive::cleanup::spawn_cleanup;

/// Proof of holding a [`Redlock`] for a limited validity; released on every server by
/// `unlock()` or, best effort, on drop.
///
/// With a fixed lease nothing renews the hold: check [`RedlockGuard::is_held`] before
/// acting and call [`RedlockGuard::extend`] before [`RedlockGuard::remaining`] runs out if
/// the work takes longer. With [`Lease::Watchdog`] a task this guard owns extends it.
///
/// ```no_run
/// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
/// use std::time::Duration;
///
/// let guard = redlock.lock().await?;
/// if guard.remaining() < Duration::from_secs(1) && !guard.extend(redlock.ttl()).await? {
///     return Ok(()); // lost: stop before touching the resource
/// }
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
pub struct RedlockGuard {
    redlock: Redlock,
    /// The owner id, the token and the validity (not registered with any client: the
    /// hold spans several).
    hold: Arc<Hold>,
    /// The task that extends the hold under [`Lease::Watchdog`].
    renewal: Option<JoinHandle<()>>,
    released: bool,
}

impl fmt::Debug for RedlockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockGuard")
            .field("name", &self.redlock.name)
            .field("owner", &self.hold.owner)
            .field("fencing_token", &self.hold.token)
            .field("held", &self.hold.is_held())
            .field("renewed", &self.renewal.is_some())
            .finish_non_exhaustive()
    }
}

impl RedlockGuard {
    pub(super) fn new(redlock: Redlock, owner: OwnerId, grant: MajorityGrant) -> Self {
        let hold = Arc::new(Hold::new(
            &redlock.probe,
            redlock.nodes[0].keys.clone(),
            owner,
            grant.token,
            None,
            grant.deadline,
        ));
        hold.meter().start();
        let renewal = (redlock.lease == Lease::Watchdog).then(|| {
            tokio::spawn(keep_extended(
                redlock.clone(),
                Arc::clone(&hold),
                grant.started,
            ))
        });
        Self {
            redlock,
            hold,
            renewal,
            released: false,
        }
    }

    /// The lock's name.
    ///
    /// ```no_run
    /// # fn demo(guard: ferrisson_redis::RedlockGuard) {
    /// assert_eq!(guard.name(), "orders");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.redlock.name
    }

    /// The owner id this guard's keys hold on the servers (compare with
    /// [`RedlockInfo::holder`](super::RedlockInfo::holder)).
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
    /// let guard = redlock.lock().await?;
    /// assert_eq!(redlock.inspect().await?.holder, Some(guard.owner()));
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> OwnerId {
        self.hold.owner
    }

    /// The fencing token of this hold: the largest the granting majority handed out,
    /// written back to them, so the next holder's is larger (see `docs/REDLOCK.md` for
    /// what can break that). Pass it with every write to the protected resource.
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
    /// let first = redlock.lock().await?;
    /// let token = first.fencing_token();
    /// first.unlock().await?;
    /// assert!(redlock.lock().await?.fencing_token() > token);
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> FencingToken {
        self.hold.token
    }

    /// True while the hold is valid by this process' monotonic clock: `TTL - elapsed -
    /// drift` from the acquisition or the last extension has not run out, and no
    /// extension found the lock gone from a majority.
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
    /// let guard = redlock.lock().await?;
    /// if !guard.is_held() {
    ///     return Ok(()); // too late: do not touch the resource
    /// }
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        self.hold.is_held()
    }

    /// How much longer the lock is held for sure: `TTL - elapsed - drift` at the
    /// acquisition (or the last extension), counting down; zero once lost.
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
    /// let guard = redlock.lock().await?;
    /// assert!(guard.remaining() < redlock.ttl());
    /// # Ok(()) }
    /// ```
    pub fn remaining(&self) -> Duration {
        self.hold.remaining()
    }

    /// Resolves when the hold is no longer valid: its validity ran out (no extension in
    /// time), or an extension found a majority no longer holding it.
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
    /// let guard = redlock.lock().await?;
    /// tokio::select! {
    ///     () = guard.lost() => eprintln!("lost the lock: stop writing"),
    ///     () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    pub async fn lost(&self) {
        self.hold.lost().await;
    }

    /// Sets the TTL of this guard's key to `ttl` on every server that still holds it
    /// (compare and `PEXPIRE`). Returns `true`, with a new validity of `ttl - elapsed -
    /// drift`, when a majority did so before the current validity ran out; `false`
    /// otherwise (the validity then never grows, and shrinks to what a shorter `ttl`
    /// allows).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a `ttl` under 10 ms or over a year;
    /// [`Error::Store`] or [`RedisStoreError::NoQuorum`](crate::RedisStoreError::NoQuorum) when fewer than a majority of the servers
    /// answered.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the validity only grows once a majority has answered, so a dropped
    /// call leaves it as it was (some servers may have extended their key).
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// let guard = redlock.lock().await?;
    /// if guard.extend(Duration::from_secs(10)).await? {
    ///     assert!(guard.remaining() > Duration::from_secs(9));
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn extend(&self, ttl: Duration) -> Result<bool> {
        validate_lease(ttl)?;
        if ttl < MIN_TTL {
            return Err(Error::invalid(format!(
                "redlock ttl must be at least {MIN_TTL:?}, got {ttl:?}"
            )));
        }
        extend_hold(&self.redlock, &self.hold, ttl).await
    }

    /// Deletes this guard's key on every server (only where it still holds this owner).
    ///
    /// # Errors
    ///
    /// [`Error::Store`] or [`RedisStoreError::NoQuorum`](crate::RedisStoreError::NoQuorum) when fewer than a majority of the servers
    /// answered (their keys expire after the TTL); [`Error::NotOwner`] when a majority
    /// holds another owner; [`Error::LeaseExpired`] when this guard's keys were no longer
    /// on a majority, or its validity had already run out here
    /// ([`is_held`](Self::is_held) false) before the call, even if the keys were still
    /// there and are now deleted.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe in the sense that the release may have reached only some
    /// servers; whatever it missed expires after the TTL.
    ///
    /// ```no_run
    /// # async fn demo(redlock: ferrisson_redis::Redlock) -> ferrisson_redis::Result<()> {
    /// let guard = redlock.lock().await?;
    /// guard.unlock().await?;
    /// assert_eq!(redlock.inspect().await?.holder, None);
    /// # Ok(()) }
    /// ```
    pub async fn unlock(mut self) -> Result<()> {
        self.released = true;
        self.stop_renewal();
        self.hold
            .release(Some(self.hold.token), true, self.release_on_quorum())
            .await
    }

    /// Deletes this guard's key everywhere and reads the outcome off the majority.
    pub(super) async fn release_on_quorum(&self) -> Result<()> {
        let replies = release_everywhere(&self.redlock, self.hold.owner).await;
        let quorum = self.redlock.quorum();
        let (answers, first_error) = answers(replies);
        let answered = answers.len();
        let count = |wanted| answers.iter().filter(|&&c| c == wanted).count();
        let (freed, others) = (count(Compared::Done), count(Compared::Other));
        let name = self.redlock.name.to_string();
        if freed >= quorum {
            Ok(())
        } else if answered < quorum {
            Err(first_error.unwrap_or_else(|| self.redlock.no_quorum(answered)))
        } else if others >= quorum {
            Err(Error::NotOwner { name })
        } else {
            Err(Error::LeaseExpired { name })
        }
    }

    pub(super) fn stop_renewal(&mut self) {
        if let Some(task) = self.renewal.take() {
            task.abort();
        }
    }
}

impl Grant for RedlockGuard {
    fn fencing_token(&self) -> Option<FencingToken> {
        Some(self.hold.token)
    }
}

impl ferrisson_core::Fenced for RedlockGuard {
    fn fencing_token(&self) -> FencingToken {
        RedlockGuard::fencing_token(self)
    }
}

impl ferrisson_core::Guard for RedlockGuard {
    fn name(&self) -> &str {
        RedlockGuard::name(self)
    }

    fn is_held(&self) -> bool {
        RedlockGuard::is_held(self)
    }

    fn remaining(&self) -> Duration {
        RedlockGuard::remaining(self)
    }

    async fn lost(&self) {
        RedlockGuard::lost(self).await;
    }

    async fn unlock(self) -> Result<()> {
        RedlockGuard::unlock(self).await
    }
}

impl Drop for RedlockGuard {
    fn drop(&mut self) {
        self.stop_renewal();
        if self.released {
            return;
        }
        let redlock = self.redlock.clone();
        let hold = Arc::clone(&self.hold);
        spawn_cleanup(
            &self.redlock.name,
            "releasing a dropped redlock guard",
            "its keys expire after the ttl",
            async move {
                let release = async {
                    release_everywhere(&redlock, hold.owner).await;
                    Ok(())
                };
                hold.meter()
                    .release(Some(hold.token), true, release, |()| false)
                    .await
            },
        );
    }
}

//! What every guard over a [`Hold`] does, written once: report the hold's validity,
//! release it once (checked by `unlock`, best effort on drop, retried but never applied
//! twice), and stop its renewal the moment the guard goes.
//!
//! A primitive supplies only how one release is sent ([`SendRelease`]); its public guard
//! type wraps a [`HoldGuard`] and gets its methods from [`hold_guard_methods!`].

use std::future::Future;
use std::sync::Arc;

use crate::api::error::Result;
use crate::api::fencing::FencingToken;
use crate::backend::client::Client;
use crate::backend::holds::Hold;
use crate::backend::ids::OwnerId;
use crate::backend::ids::ReleaseId;
use crate::backend::scripts::Released;
use crate::observe::acquire::Grant;
use crate::primitive::cleanup::spawn_cleanup;
use crate::primitive::release::release_with_retry;

/// How a primitive sends one release of one hold.
pub(crate) trait SendRelease: Send + Sync + 'static {
    /// What the guard is, for the warning a failed release on drop logs
    /// ("releasing a dropped lock guard").
    const DROPPED: &'static str;

    /// Sends one release of `owner`'s hold carrying `release_id`.
    fn send(
        &self,
        client: &Client,
        owner: OwnerId,
        release_id: ReleaseId,
    ) -> impl Future<Output = Result<Released>> + Send;
}

/// A live hold and how to release it; see the module docs.
pub(crate) struct HoldGuard<R: SendRelease> {
    client: Client,
    hold: Arc<Hold>,
    /// `None` once released (by `unlock`, or taken by `Drop`).
    release: Option<R>,
}

impl<R: SendRelease> HoldGuard<R> {
    pub(crate) fn new(client: Client, hold: Arc<Hold>, release: R) -> Self {
        Self {
            client,
            hold,
            release: Some(release),
        }
    }

    pub(crate) fn hold(&self) -> &Hold {
        &self.hold
    }

    /// Releases the hold: stops its renewal at once, then sends the release.
    pub(crate) async fn unlock(mut self) -> Result<()> {
        let Some(release) = self.release.take() else {
            return Ok(());
        };
        let last = self.client.inner.holds.detach(&self.hold);
        release_hold(&self.client, &self.hold, &release, last).await
    }
}

impl<R: SendRelease> Drop for HoldGuard<R> {
    fn drop(&mut self) {
        let Some(release) = self.release.take() else {
            return;
        };
        let last = self.client.inner.holds.detach(&self.hold);
        let client = self.client.clone();
        let hold = Arc::clone(&self.hold);
        spawn_cleanup(
            &self.hold.name,
            R::DROPPED,
            "the hold expires after its lease",
            async move { release_hold(&client, &hold, &release, last).await },
        );
    }
}

/// Releases one hold count; `last` when no other guard shares the hold (its metrics
/// then end with this release).
async fn release_hold<R: SendRelease>(
    client: &Client,
    hold: &Hold,
    release: &R,
    last: bool,
) -> Result<()> {
    let released = release_with_retry(&hold.name, |release_id| {
        release.send(client, hold.owner, release_id)
    });
    hold.release(Some(hold.token), last, released).await
}

impl<R: SendRelease> Grant for HoldGuard<R> {
    fn fencing_token(&self) -> Option<FencingToken> {
        Some(self.hold.token)
    }
}

/// The public methods every guard over a [`HoldGuard`] (in a field `inner`) offers, with
/// their docs: `name`, `owner`, `is_held`, `remaining`, `lost`, `unlock`; with `token`,
/// also `fencing_token` and the [`Guard`](crate::Guard) contract.
macro_rules! hold_guard_methods {
    ($guard:ident, $released:literal) => {
        impl $guard {
            /// The name of the lock this guard holds.
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(guard: ferrisson_redis::", stringify!($guard), ") {")]
            /// println!("holding {}", guard.name());
            /// # }
            /// ```
            pub fn name(&self) -> &str {
                &self.inner.hold().name
            }

            /// The owner id this hold is registered under in Redis.
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(guard: ferrisson_redis::", stringify!($guard), ") {")]
            /// println!("held as {}", guard.owner());
            /// # }
            /// ```
            pub fn owner(&self) -> $crate::OwnerId {
                self.inner.hold().owner
            }

            /// True until the lock is found gone or taken, or its lease runs out without
            /// a renewal (measured on this machine's monotonic clock from before the
            /// request that set it).
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(guard: ferrisson_redis::", stringify!($guard), ") {")]
            /// if !guard.is_held() {
            ///     return; // stop: another owner may hold it now
            /// }
            /// # }
            /// ```
            pub fn is_held(&self) -> bool {
                self.inner.hold().is_held()
            }

            /// How long the hold stays valid without another renewal; zero once lost.
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(guard: ferrisson_redis::", stringify!($guard), ") {")]
            /// if guard.remaining() < std::time::Duration::from_secs(1) {
            ///     eprintln!("renewal is late");
            /// }
            /// # }
            /// ```
            pub fn remaining(&self) -> std::time::Duration {
                self.inner.hold().remaining()
            }

            /// Resolves when the lock is no longer held: the watchdog found it gone or
            /// taken, or its lease ran out (renewals failing, or a fixed lease ending).
            ///
            /// ```no_run
            #[doc = concat!("# async fn demo(guard: ferrisson_redis::", stringify!($guard), ") {")]
            /// tokio::select! {
            ///     () = guard.lost() => eprintln!("lost the lock: stop writing"),
            ///     () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
            /// }
            /// # }
            /// ```
            ///
            /// # Cancel safety
            ///
            /// Cancel safe: it only observes.
            pub async fn lost(&self) {
                self.inner.hold().lost().await;
            }

            #[doc = concat!("Releases this hold; ", $released, ".")]
            ///
            /// Dropping the guard releases too, on a spawned task (it never blocks);
            /// `unlock` is the way to learn whether the release worked.
            ///
            /// ```no_run
            #[doc = concat!("# async fn demo(guard: ferrisson_redis::", stringify!($guard), ") -> ferrisson_redis::Result<()> {")]
            /// guard.unlock().await?;
            /// # Ok(()) }
            /// ```
            ///
            /// # Errors
            ///
            /// [`Error::LeaseExpired`](crate::Error::LeaseExpired) when the lock had
            /// expired (in Redis, or here: when `is_held()` was already false, its key,
            /// if still there, is deleted all the same), [`Error::NotOwner`](crate::Error::NotOwner) when another owner
            /// holds it now, [`Error::Store`](crate::Error::Store) when Redis could not be
            /// reached (the hold then expires after its lease).
            ///
            /// # Cancel safety
            ///
            /// The release may or may not have reached Redis when the future is dropped;
            /// renewal has stopped either way, so the hold ends after its lease at worst.
            pub async fn unlock(self) -> $crate::Result<()> {
                self.inner.unlock().await
            }
        }
        impl $crate::Guard for $guard {
            fn name(&self) -> &str {
                $guard::name(self)
            }

            fn is_held(&self) -> bool {
                $guard::is_held(self)
            }

            fn remaining(&self) -> std::time::Duration {
                $guard::remaining(self)
            }

            async fn lost(&self) {
                $guard::lost(self).await;
            }

            async fn unlock(self) -> $crate::Result<()> {
                $guard::unlock(self).await
            }
        }
    };
    ($guard:ident, $released:literal, token) => {
        hold_guard_methods!($guard, $released);

        impl $guard {
            /// The fencing token of this hold: greater than every earlier holder's, the
            /// same for every re-entry. Pass it with every write to the protected
            /// resource.
            ///
            /// ```no_run
            #[doc = concat!("# async fn demo(client: ferrisson_redis::Client, guard: ferrisson_redis::", stringify!($guard), ") -> ferrisson_redis::Result<()> {")]
            /// let write = client.fenced_set("ledger", b"100", guard.fencing_token()).await?;
            /// assert!(write.is_accepted());
            /// # Ok(()) }
            /// ```
            pub fn fencing_token(&self) -> $crate::FencingToken {
                self.inner.hold().token
            }
        }

        impl $crate::observe::acquire::Grant for $guard {
            fn fencing_token(&self) -> Option<$crate::FencingToken> {
                Some(self.inner.hold().token)
            }
        }

        impl $crate::Fenced for $guard {
            fn fencing_token(&self) -> $crate::FencingToken {
                $guard::fencing_token(self)
            }
        }

    };
}

pub(crate) use hold_guard_methods;

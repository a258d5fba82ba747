//! What the recorder reads of anything a scenario holds.
//!
//! Every guard of the public contract ([`ferrisson::redis::Guard`]) is recorded as it is. Two
//! holds of the library are not guards of that contract because they carry no fencing
//! token: the read side of an `RwLock` and an `ExpirablePermit`. Each is wrapped in an
//! adapter named for what it lacks ([`TokenlessRead`], [`TokenlessPermit`]), and the
//! history records `None` for their token rather than an invented one. A `RedlockGuard`
//! has a token since 0.2, but the Redlock scenarios still record it as tokenless
//! ([`TokenlessRedlock`]), as their tables in docs/SAFETY.md were measured.

use std::future::Future;
use std::time::Duration;

use ferrisson::redis::{
    ExpirablePermit, Fenced, FencingToken, Guard, RedlockGuard, RwLockReadGuard,
};

/// A hold as the scenarios observe it: [`ferrisson::redis::Guard`] with the token optional and
/// the name left out (the history knows the lock by its iteration).
pub(crate) trait ObservedHold: Send + Sync {
    /// The token to present to the resource; `None` for a hold that has none.
    fn fencing_token(&self) -> Option<FencingToken>;
    /// The hold's own belief that it is valid.
    fn is_held(&self) -> bool;
    /// Time left before the hold's own deadline (zero once lost).
    fn remaining(&self) -> Duration;
    /// Resolves when the hold learns that it is no longer valid.
    fn lost(&self) -> impl Future<Output = ()> + Send;
    /// Gives it back: `Err(LeaseExpired)` when it had ended, as the guards report it.
    fn unlock(self) -> impl Future<Output = ferrisson::redis::Result<()>> + Send
    where
        Self: Sized;
}

impl<G: Guard + Fenced> ObservedHold for G {
    fn fencing_token(&self) -> Option<FencingToken> {
        Some(Fenced::fencing_token(self))
    }
    fn is_held(&self) -> bool {
        Guard::is_held(self)
    }
    fn remaining(&self) -> Duration {
        Guard::remaining(self)
    }
    fn lost(&self) -> impl Future<Output = ()> + Send {
        Guard::lost(self)
    }
    fn unlock(self) -> impl Future<Output = ferrisson::redis::Result<()>> + Send {
        Guard::unlock(self)
    }
}

/// The read side of an `RwLock`: a guard in every way but the token (the acquire script
/// answers none for a read), so a resource can order writers only. See docs/SAFETY.md.
pub(crate) struct TokenlessRead(pub(crate) RwLockReadGuard);

impl ObservedHold for TokenlessRead {
    fn fencing_token(&self) -> Option<FencingToken> {
        None
    }
    fn is_held(&self) -> bool {
        self.0.is_held()
    }
    fn remaining(&self) -> Duration {
        self.0.remaining()
    }
    fn lost(&self) -> impl Future<Output = ()> + Send {
        self.0.lost()
    }
    fn unlock(self) -> impl Future<Output = ferrisson::redis::Result<()>> + Send {
        self.0.unlock()
    }
}

/// A permit of an `ExpirableSemaphore`: a lease counted by the client from before the
/// acquire was sent, and no token.
pub(crate) struct TokenlessPermit(pub(crate) ExpirablePermit);

impl ObservedHold for TokenlessPermit {
    fn fencing_token(&self) -> Option<FencingToken> {
        None
    }
    fn is_held(&self) -> bool {
        self.0.is_held()
    }
    fn remaining(&self) -> Duration {
        self.0.remaining()
    }
    /// The scenario's permit has a fixed lease: its end is its deadline, which the
    /// belief samples record, so the signal is not observed here.
    fn lost(&self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }
    /// `release()` reports a lease that had run out before it as `LeaseExpired`, the way
    /// the locks report the same case.
    fn unlock(self) -> impl Future<Output = ferrisson::redis::Result<()>> + Send {
        self.0.release()
    }
}

/// A Redlock guard with a fixed lease: a validity counted from before the first node was
/// asked; its token and lost signal are not recorded (see the module docs).
pub(crate) struct TokenlessRedlock(pub(crate) RedlockGuard);

impl ObservedHold for TokenlessRedlock {
    fn fencing_token(&self) -> Option<FencingToken> {
        None
    }
    fn is_held(&self) -> bool {
        self.0.is_held()
    }
    fn remaining(&self) -> Duration {
        self.0.remaining()
    }
    /// Nothing watches a Redlock guard: its end is its validity, which the belief
    /// samples record.
    fn lost(&self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }
    fn unlock(self) -> impl Future<Output = ferrisson::redis::Result<()>> + Send {
        self.0.unlock()
    }
}

//! The wait loop every blocking acquire shares: try, then wait for a release message or
//! the holder's remaining TTL, whichever comes first, and try again.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::future::Future;
use std::time::Duration;

use futures_util::FutureExt as _;
use tokio::time::Instant;

use crate::api::error::Result;
use crate::backend::client::Client;
use crate::backend::ids::OwnerId;
use crate::backend::pubsub::Subscription;
use crate::observe::acquire::{Grant, observe_acquire, observe_wait};
use crate::observe::probe::Probe;

/// Wait used when the holder's key has no expiry (set by someone outside ferrisson).
const NO_TTL_FALLBACK: Duration = Duration::from_secs(5);
/// Shortest wait, so a key about to expire is not hammered.
const MIN_WAIT: Duration = Duration::from_millis(1);

/// The channel a waiter joins after a first refusal: one the primitive names, or the
/// waiter's own, named by a prefix and the waiter's owner id. An own channel's name is
/// built only when the waiter waits: the uncontended acquire formats nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Channel<'a> {
    Named(&'a str),
    Own { prefix: &'a str, owner: OwnerId },
}

impl<'a> From<&'a str> for Channel<'a> {
    fn from(name: &'a str) -> Self {
        Self::Named(name)
    }
}

impl Channel<'_> {
    fn name(&self) -> Cow<'_, str> {
        match *self {
            Self::Named(name) => Cow::Borrowed(name),
            Self::Own { prefix, owner } => {
                let mut name = String::with_capacity(prefix.len() + 32);
                name.push_str(prefix);
                let _ = write!(name, "{owner}");
                Cow::Owned(name)
            }
        }
    }
}

/// What one acquire attempt found.
pub(crate) enum Attempt<G> {
    /// Acquired: the guard.
    Acquired(G),
    /// Held elsewhere; `None` when the holder's key has no expiry.
    Held(Option<Duration>),
}

impl<G> Attempt<G> {
    /// Held, by a holder whose key has `pttl` ms to live.
    pub(crate) fn held(pttl: i64) -> Self {
        Self::Held(holder_wait(pttl))
    }

    /// The same outcome with the guard made into another type.
    pub(crate) fn map<H>(self, f: impl FnOnce(G) -> H) -> Attempt<H> {
        match self {
            Self::Acquired(guard) => Attempt::Acquired(f(guard)),
            Self::Held(wait) => Attempt::Held(wait),
        }
    }
}

/// How long to wait for a holder whose key has `pttl` ms to live (a `PTTL` reply): `None`
/// for no expiry (-1), zero for a key already gone (-2: retry at once).
pub(crate) fn holder_wait(pttl: i64) -> Option<Duration> {
    match pttl {
        -1 => None,
        ms if ms < 0 => Some(Duration::ZERO),
        ms => Some(Duration::from_millis(ms.unsigned_abs())),
    }
}

/// Makes one attempt, without waiting: `Ok(None)` when the primitive is taken. Observed
/// as an acquire whose outcome is `acquired`, `busy` or `error`.
///
/// # Cancel safety
///
/// As cancel safe as `attempt`.
pub(crate) fn try_once<'a, G: Grant + 'a>(
    probe: &'a Probe,
    attempt: impl Future<Output = Result<Attempt<G>>> + 'a,
) -> impl Future<Output = Result<Option<G>>> + 'a {
    observe_acquire(
        probe,
        Some(Duration::ZERO),
        attempt.map(|attempt| match attempt? {
            Attempt::Acquired(guard) => Ok(Some(guard)),
            Attempt::Held(_) => Ok(None),
        }),
    )
}

/// Tries `attempt` until it acquires or `wait` (if any) runs out; observed as one
/// acquire of `probe` (see `observe::acquire`).
///
/// The first attempt runs without a subscription (the uncontended path costs one round
/// trip); after a failure the waiter joins `channel` before trying again, so a release
/// between the failed attempt and the wait cannot be missed. No command is sent while
/// waiting.
///
/// An attempt that fails because Redis is unreachable or in transition (a failover, a
/// slot moving, replicas not back yet) is tried again, with growing pauses, for up to the
/// client's watchdog lease (the time a lock held by a vanished holder takes to free, so a
/// waiter that would wait that long anyway loses nothing) and never past `wait`.
/// Attempts are safe to repeat: each acquire either uses an owner id of its own that a
/// repeat recognises, or undoes what a failed call may have left.
///
/// # Cancel safety
///
/// As cancel safe as `attempt`; the subscription is left when the future is dropped.
pub(crate) async fn acquire_with_wait<'c, G, F, Fut>(
    client: &Client,
    probe: &Probe,
    channel: impl Into<Channel<'c>>,
    wait: Option<Duration>,
    mut attempt: F,
) -> Result<Option<G>>
where
    G: Grant,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<G>>>,
{
    acquire_with_registration(
        client,
        probe,
        channel.into(),
        wait,
        |_: Registration| attempt(),
        None::<fn(usize)>,
    )
    .await
}

/// What one attempt of a waiter tells Redis about its wait, for primitives whose release
/// wakes one waiting client rather than every subscriber of a shared channel (`Lock`,
/// `SimpleLock`; see `primitive::wake`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Registration {
    /// The first attempt, before the waiter subscribed: a refusal registers nothing (a
    /// wake-up could not reach this waiter yet; it tries again once subscribed).
    Unsubscribed,
    /// The waiter listens on its client's channel: a refusal registers the client as
    /// waiting; a grant keeps it registered when `others` local waiters of the same
    /// channel still wait (the release that woke this waiter took the registration), and
    /// takes it off otherwise.
    Subscribed { others: usize },
}

/// [`acquire_with_wait`] for a primitive whose waiters register in Redis: `attempt` is
/// told whether the waiter is subscribed (see [`Registration`]), and `leave`, when given,
/// runs if the waiter stops waiting without the grant (its wait ran out, its future was
/// dropped, an error), with the number of other local waiters of the channel. A leaving
/// waiter first passes a wake-up on to another local waiter, in case it took the one a
/// release meant for this client; `leave` is for what Redis must learn (with no other
/// local waiter: that this client waits no more, and to wake the next client if the lock
/// is free).
///
/// # Cancel safety
///
/// As cancel safe as `attempt` and `leave`.
pub(crate) async fn acquire_with_registration<G, F, Fut, L>(
    client: &Client,
    probe: &Probe,
    channel: Channel<'_>,
    wait: Option<Duration>,
    mut attempt: F,
    leave: Option<L>,
) -> Result<Option<G>>
where
    G: Grant,
    F: FnMut(Registration) -> Fut,
    Fut: Future<Output = Result<Attempt<G>>>,
    L: FnOnce(usize),
{
    observe_acquire(probe, wait, async {
        // A wait too long to add to the clock (`Duration::MAX`) has no deadline.
        let deadline = wait.and_then(|w| Instant::now().checked_add(w));
        let budget = client.watchdog_lease();
        let first = riding_out_outages(
            &mut || attempt(Registration::Unsubscribed),
            deadline,
            budget,
        )
        .await?;
        if let Attempt::Acquired(guard) = first {
            return Ok(Some(guard));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
        // Boxed: only a refused first attempt waits (and then subscribes and sleeps);
        // unboxed, the waiting state would be in every acquire's future
        // (ARCHITECTURE.md, future sizes).
        Box::pin(observe_wait(
            probe,
            wait_for_release(client, channel, deadline, attempt, leave),
        ))
        .await
    })
    .await
}

/// A waiter's membership of its channel, and what it does if it leaves without the grant.
struct Waiter<L: FnOnce(usize)> {
    subscription: Subscription,
    leave: Option<L>,
}

impl<L: FnOnce(usize)> Drop for Waiter<L> {
    fn drop(&mut self) {
        if let Some(leave) = self.leave.take() {
            let others = self.subscription.others();
            if others > 0 {
                // This waiter may have taken the wake-up a release meant for its client.
                self.subscription.pass_on();
            }
            leave(others);
        }
    }
}

/// The waiting part of [`acquire_with_registration`], after a first refusal.
async fn wait_for_release<G, F, Fut, L>(
    client: &Client,
    channel: Channel<'_>,
    deadline: Option<Instant>,
    mut attempt: F,
    leave: Option<L>,
) -> Result<Option<G>>
where
    F: FnMut(Registration) -> Fut,
    Fut: Future<Output = Result<Attempt<G>>>,
    L: FnOnce(usize),
{
    let budget = client.watchdog_lease();
    let channel = channel.name();
    let subscribe = client.inner.subscriptions.join(&channel);
    let subscription = match deadline {
        Some(d) => match tokio::time::timeout_at(d, subscribe).await {
            Ok(subscription) => subscription?,
            Err(_) => return Ok(None),
        },
        None => subscribe.await?,
    };
    let mut waiter = Waiter {
        subscription,
        leave,
    };
    loop {
        if !waiter.subscription.is_confirmed() {
            // The subscription failed on an unreachable Redis: ask again, and meanwhile
            // do not count on a message.
            let _ = waiter.subscription.confirm().await;
        }
        let subscription = &waiter.subscription;
        // Listen before trying: a release that lands while the attempt is in flight
        // wakes this waiter instead of being stored for whichever waiter parks first.
        let woken = subscription.listen();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let registration = Registration::Subscribed {
            others: subscription.others(),
        };
        let ttl = match riding_out_outages(&mut || attempt(registration), deadline, budget).await? {
            Attempt::Acquired(guard) => {
                waiter.leave = None;
                if registration == (Registration::Subscribed { others: 0 })
                    && subscription.others() > 0
                {
                    // A local waiter joined while this attempt said there was none, so
                    // the grant took the client off the waiting clients: that waiter
                    // tries again, and registers if refused.
                    subscription.pass_on();
                }
                return Ok(Some(guard));
            }
            Attempt::Held(ttl) => ttl,
        };
        let mut nap = ttl.unwrap_or(NO_TTL_FALLBACK).max(MIN_WAIT);
        if !subscription.is_confirmed() {
            nap = nap.min(UNCONFIRMED_RECHECK);
        }
        if let Some(d) = deadline {
            let now = Instant::now();
            if now >= d {
                return Ok(None);
            }
            nap = nap.min(d - now);
        }
        let _ = tokio::time::timeout(nap, woken).await;
    }
}

/// First pause after an attempt failed on an unreachable Redis; it doubles up to
/// [`MAX_OUTAGE_PAUSE`].
const FIRST_OUTAGE_PAUSE: Duration = Duration::from_millis(50);
const MAX_OUTAGE_PAUSE: Duration = Duration::from_secs(1);
/// Longest wait of a waiter whose subscription is not confirmed (Redis was unreachable
/// when it subscribed): it may miss the release message.
const UNCONFIRMED_RECHECK: Duration = Duration::from_millis(500);

/// Runs `attempt`, trying again after errors that say Redis is unreachable or in
/// transition, for at most `budget` and never past `deadline` (then the last error is
/// returned). Held is a result, not an error: it is returned at once.
async fn riding_out_outages<G, F, Fut>(
    attempt: &mut F,
    deadline: Option<Instant>,
    budget: Duration,
) -> Result<Attempt<G>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<G>>>,
{
    let started = Instant::now();
    let mut pause = FIRST_OUTAGE_PAUSE;
    loop {
        let error = match attempt().await {
            Err(e) if e.is_transient() => e,
            outcome => return outcome,
        };
        let give_up_at = deadline.map_or(started + budget, |d| d.min(started + budget));
        if Instant::now() + pause >= give_up_at {
            return Err(error);
        }
        tracing::debug!(error = %error, "acquire attempt failed on an unreachable redis; trying again");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_OUTAGE_PAUSE);
    }
}

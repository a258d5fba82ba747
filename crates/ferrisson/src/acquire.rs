//! The wait loop every blocking acquire shares: try, then wait for a release message or
//! the holder's remaining TTL, whichever comes first, and try again.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::error::Result;

/// Wait used when the holder's key has no expiry (set by someone outside ferrisson).
const NO_TTL_FALLBACK: Duration = Duration::from_secs(5);
/// Shortest wait, so a key about to expire is not hammered.
const MIN_WAIT: Duration = Duration::from_millis(1);

/// What one acquire attempt found.
pub(crate) enum Attempt<G> {
    /// Acquired: the guard.
    Acquired(G),
    /// Held elsewhere; `None` when the holder's key has no expiry.
    Held(Option<Duration>),
}

impl<G> Attempt<G> {
    /// Maps a `PTTL` reply: -1 no expiry, -2 gone (retry at once).
    pub(crate) fn held(pttl: i64) -> Self {
        match pttl {
            -1 => Self::Held(None),
            ms if ms < 0 => Self::Held(Some(Duration::ZERO)),
            ms => Self::Held(Some(Duration::from_millis(ms.unsigned_abs()))),
        }
    }
}

/// Tries `attempt` until it acquires or `wait` (if any) runs out.
///
/// The first attempt runs without a subscription (the uncontended path costs one round
/// trip); after a failure the waiter joins `channel` before trying again, so a release
/// between the failed attempt and the wait cannot be missed. No command is sent while
/// waiting.
///
/// # Cancel safety
///
/// As cancel safe as `attempt`; the subscription is left when the future is dropped.
pub(crate) async fn acquire_with_wait<G, F, Fut>(
    client: &Client,
    channel: &str,
    wait: Option<Duration>,
    mut attempt: F,
) -> Result<Option<G>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<G>>>,
{
    let deadline = wait.map(|w| Instant::now() + w);
    if let Attempt::Acquired(guard) = attempt().await? {
        return Ok(Some(guard));
    }
    if deadline.is_some_and(|d| Instant::now() >= d) {
        return Ok(None);
    }
    let subscribe = client.inner.subscriptions.join(channel);
    let subscription = match deadline {
        Some(d) => match tokio::time::timeout_at(d, subscribe).await {
            Ok(subscription) => subscription?,
            Err(_) => return Ok(None),
        },
        None => subscribe.await?,
    };
    loop {
        // Listen before trying: a release that lands while the attempt is in flight
        // wakes this waiter instead of being stored for whichever waiter parks first.
        let woken = subscription.listen();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let ttl = match attempt().await? {
            Attempt::Acquired(guard) => return Ok(Some(guard)),
            Attempt::Held(ttl) => ttl,
        };
        let mut nap = ttl.unwrap_or(NO_TTL_FALLBACK).max(MIN_WAIT);
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

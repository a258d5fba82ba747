//! The watchdog of a Redlock hold: extensions every third of the TTL on every server.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Redlock;
use crate::api::error::Result;
use crate::backend::holds::Hold;

/// Extends `hold`'s keys to `ttl` on every server; moves its validity on success, and
/// never lengthens it otherwise. Returns whether a majority extended in time.
pub(super) async fn extend_hold(redlock: &Redlock, hold: &Hold, ttl: Duration) -> Result<bool> {
    let round = redlock.extend_everywhere(hold.owner, ttl).await;
    let current = hold.validity().deadline;
    let in_time = round.finished < current && round.finished < round.new_deadline;
    if round.extended >= redlock.quorum() && in_time {
        hold.extend(round.new_deadline);
        return Ok(true);
    }
    // A shorter ttl may have reached some servers: never claim more than it allows.
    hold.extend(current.min(round.new_deadline));
    if round.answered < redlock.quorum() {
        return Err(round
            .first_error
            .unwrap_or_else(|| redlock.no_quorum(round.answered)));
    }
    Ok(false)
}

/// The renewal task of a [`Lease::Watchdog`] guard: extends the keys every third of the
/// TTL (counted from before each successful round), retries an extension that too few
/// servers answered until the validity runs out, and marks the hold lost when a majority
/// answered without extending it. Stops when the hold is lost; the guard aborts it on
/// release.
pub(super) async fn keep_extended(redlock: Redlock, hold: Arc<Hold>, acquired: Instant) {
    let ttl = redlock.ttl();
    let retry = (ttl / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let mut next = acquired + ttl / 3;
    loop {
        tokio::select! {
            () = hold.lost() => return,
            () = tokio::time::sleep_until(next) => {}
        }
        let started = Instant::now();
        match extend_hold(&redlock, &hold, ttl).await {
            Ok(true) => next = started + ttl / 3,
            Ok(false) => {
                tracing::warn!(lock = %redlock.name, "redlock lost: an extension did not reach a majority in time");
                hold.mark_lost();
                return;
            }
            Err(e) => {
                tracing::warn!(lock = %redlock.name, error = %e, "redlock extension failed; retrying until the validity runs out");
                next = Instant::now() + retry;
            }
        }
    }
}

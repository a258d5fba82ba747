//! The Redlock algorithm: an attempt on every server, the tally against the quorum,
//! the validity left after the drift allowance, the fencing floors, the release.

use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::fanout::{answers, within};
use super::{Node, Redlock, RedlockGuard};
use crate::api::error::{Error, Result};
use crate::api::fencing::FencingToken;
use crate::backend::ids::OwnerId;
use crate::backend::scripts::simple::{
    Compared, KeyAcquired, RedlockAcquire, RedlockExtend, RedlockRaiseFloor, RedlockRelease,
};
use crate::observe::acquire::observe_wait;

/// A hold a majority granted: until when it is valid, and its token.
#[derive(Clone, Copy)]
pub(super) struct MajorityGrant {
    /// When the requests were sent (renewals count from there).
    pub(super) started: Instant,
    /// Local validity deadline.
    pub(super) deadline: Instant,
    pub(super) token: FencingToken,
}

/// What one acquire attempt found, counted over the nodes.
pub(super) struct Tally {
    /// A majority said yes in time and took the token.
    pub(super) grant: Option<MajorityGrant>,
    /// Nodes that answered at all (yes or no).
    pub(super) answered: usize,
    /// The first failure of a node that did not answer.
    pub(super) first_error: Option<Error>,
}

/// What one round of extensions found, counted over the nodes.
pub(super) struct ExtendRound {
    /// Nodes that extended this owner's key.
    pub(super) extended: usize,
    /// Nodes that answered at all.
    pub(super) answered: usize,
    pub(super) first_error: Option<Error>,
    /// The validity a successful extension gives, counted from before the requests.
    pub(super) new_deadline: Instant,
    /// When the last answer arrived.
    pub(super) finished: Instant,
}

impl Redlock {
    pub(super) async fn acquire(&self, deadline: Option<Instant>) -> Result<Option<RedlockGuard>> {
        if let Some(guard) = self.attempt().await? {
            return Ok(Some(guard));
        }
        observe_wait(&self.probe, self.retry(deadline)).await
    }

    /// Attempts again after a random pause until one succeeds or `deadline` passes.
    pub(super) async fn retry(&self, deadline: Option<Instant>) -> Result<Option<RedlockGuard>> {
        loop {
            let jitter = millis_between(self.retry_jitter);
            let mut pause = self.retry_delay + jitter;
            if let Some(deadline) = deadline {
                let now = Instant::now();
                if now >= deadline {
                    return Ok(None);
                }
                pause = pause.min(deadline - now);
            }
            tokio::time::sleep(pause).await;
            if let Some(guard) = self.attempt().await? {
                return Ok(Some(guard));
            }
        }
    }

    pub(super) async fn attempt(&self) -> Result<Option<RedlockGuard>> {
        let owner = OwnerId::random();
        let (tx, rx) = oneshot::channel();
        let this = self.clone();
        // Spawned so that an attempt whose caller went away is undone, not leaked.
        tokio::spawn(async move {
            let tally = this.run_attempt(owner).await;
            if let Err(Tally { grant: Some(_), .. }) = tx.send(tally) {
                release_everywhere(&this, owner).await;
            }
        });
        let tally = rx.await.map_err(|_| Error::cancelled(&self.name))?;
        if let Some(grant) = tally.grant {
            return Ok(Some(RedlockGuard::new(self.clone(), owner, grant)));
        }
        if tally.answered < self.quorum() {
            return Err(tally
                .first_error
                .unwrap_or_else(|| self.no_quorum(tally.answered)));
        }
        Ok(None)
    }

    pub(super) async fn run_attempt(&self, owner: OwnerId) -> Tally {
        let ttl = self.ttl();
        let started = Instant::now();
        let replies = self
            .on_every_node(|node| RedlockAcquire {
                key: node.keys.main(),
                fence: node.keys.fence(),
                owner,
                ttl,
            })
            .await;
        let mut granted = Vec::new();
        let mut answered = 0;
        let mut first_error = None;
        for (node, reply) in self.nodes.iter().zip(replies) {
            match reply {
                Ok(reply) => {
                    answered += 1;
                    if let KeyAcquired::Granted { token } = reply {
                        granted.push((node, token));
                    }
                }
                Err(e) => {
                    tracing::debug!(lock = %self.name, error = %e, "redlock node did not answer");
                    first_error.get_or_insert(e);
                }
            }
        }
        let grant = match granted.iter().map(|&(_, token)| token).max() {
            Some(token) if granted.len() >= self.quorum() && time_left(started, ttl) => {
                let raised = self.raise_floors(owner, token, &granted).await;
                // The second round counts against the validity as well.
                (raised >= self.quorum() && time_left(started, ttl)).then(|| MajorityGrant {
                    started,
                    deadline: started + ttl.saturating_sub(drift(ttl)),
                    token,
                })
            }
            _ => None,
        };
        if grant.is_none() {
            // Including the nodes that timed out: their SET may still land, and a release
            // sent on the same connection is executed after it.
            release_everywhere(self, owner).await;
        }
        Tally {
            grant,
            answered,
            first_error,
        }
    }

    /// Raises the fencing floor of every granting server to `token` (where the key still
    /// holds `owner`); returns on how many it did.
    ///
    /// Each server handed out its own token from its own clock; the guard's is the
    /// largest. Every later majority shares a server with this one, and once that server's
    /// floor is at least `token`, it hands out a larger one, whatever the clocks of the
    /// others say. That holds only if a majority took `token`: any majority then meets one
    /// of them.
    pub(super) async fn raise_floors(
        &self,
        owner: OwnerId,
        token: FencingToken,
        granted: &[(&Node, FencingToken)],
    ) -> usize {
        let timeout = self.node_timeout();
        let replies = join_all(granted.iter().map(|&(node, _)| {
            Box::pin(within(&self.name, timeout, async move {
                node.client
                    .connection()
                    .run(&RedlockRaiseFloor {
                        key: node.keys.main(),
                        fence: node.keys.fence(),
                        owner,
                        token,
                    })
                    .await
            }))
        }))
        .await;
        replies
            .into_iter()
            .filter(|r| matches!(r, Ok(true)))
            .count()
    }

    /// Extends this owner's key to `ttl` on every server that still holds it.
    pub(super) async fn extend_everywhere(&self, owner: OwnerId, ttl: Duration) -> ExtendRound {
        let started = Instant::now();
        let replies = self
            .on_every_node(|node| RedlockExtend {
                key: node.keys.main(),
                owner,
                ttl,
            })
            .await;
        let finished = Instant::now();
        let (answers, first_error) = answers(replies);
        ExtendRound {
            extended: answers.iter().filter(|&&c| c == Compared::Done).count(),
            answered: answers.len(),
            first_error,
            new_deadline: started + ttl.saturating_sub(drift(ttl)),
            finished,
        }
    }
}

/// True while `ttl - elapsed - drift` is above zero, `elapsed` counted from `started`.
pub(super) fn time_left(started: Instant, ttl: Duration) -> bool {
    ttl.checked_sub(started.elapsed() + drift(ttl))
        .is_some_and(|left| !left.is_zero())
}

/// The clock drift allowance of Redis' Redlock description: 1% of the TTL plus 2 ms
/// for the granularity of expiry on the servers.
pub(super) fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// A uniformly random duration in `0..=max`, in whole milliseconds.
pub(super) fn millis_between(max: Duration) -> Duration {
    let max = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
    if max == 0 {
        return Duration::ZERO;
    }
    Duration::from_millis(rand::random_range(0..=max))
}

/// Compare-and-delete of `owner`'s key on every node at once.
pub(super) async fn release_everywhere(redlock: &Redlock, owner: OwnerId) -> Vec<Result<Compared>> {
    redlock
        .on_every_node(|node| RedlockRelease {
            key: node.keys.main(),
            channel: node.keys.channel(),
            owner,
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(drift(Duration::from_secs(10)), Duration::from_millis(102));
        assert_eq!(drift(Duration::from_millis(200)), Duration::from_millis(4));
    }

    #[test]
    fn jitter_stays_in_range() {
        assert_eq!(millis_between(Duration::ZERO), Duration::ZERO);
        for _ in 0..1000 {
            assert!(millis_between(Duration::from_millis(7)) <= Duration::from_millis(7));
        }
    }
}

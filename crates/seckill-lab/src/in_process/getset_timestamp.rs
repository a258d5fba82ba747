//! `getset-timestamp`: the lock of the old `SETNX` documentation of Redis. The value is
//! the holder's expiry time; a waiter that finds it in the past by its own clock takes
//! the lock over with `GETSET` and checks that the old value was still the expired one.
//! No `EXPIRE`, so a holder that dies is taken over, but every client's clock is
//! compared with every other's.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::AsyncCommands as _;
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

/// A hold: the expiry this holder wrote, and the expiry it took over, if it took one
/// over.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Taken {
    /// The expiry written, ms since the epoch by this instance's clock.
    pub expires_ms: i64,
    /// The value `GETSET` returned when the lock was taken over (`None`: `SETNX` won).
    pub took_over: Option<i64>,
}

/// One instance's timestamp lock: its key, lease, and clock.
#[derive(Debug, Clone)]
pub(crate) struct GetsetLock {
    key: String,
    lease: Duration,
    /// How far ahead of the machine's clock this instance's clock runs.
    skew: Duration,
}

impl GetsetLock {
    pub(crate) fn new(key: String, lease: Duration, skew: Duration) -> Self {
        Self { key, lease, skew }
    }

    /// This instance's idea of now, ms since the epoch: the machine's clock plus its skew.
    pub(crate) fn now_ms(&self) -> i64 {
        let now = SystemTime::now() + self.skew;
        now.duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    /// Takes the lock, waiting at most `wait` (then `None`):
    ///
    /// ```text
    /// expires = now + lease + 1
    /// if SETNX lock expires == 1: held
    /// current = GET lock
    /// if current < now:                      # expired, by this instance's clock
    ///     if GETSET lock expires < now: held # nobody else took it over first
    /// ```
    pub(crate) async fn acquire(
        &self,
        conn: &mut MultiplexedConnection,
        wait: Duration,
    ) -> anyhow::Result<Option<Taken>> {
        let deadline = Instant::now() + wait;
        let lease_ms = i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX);
        loop {
            let now = self.now_ms();
            let expires_ms = now.saturating_add(lease_ms).saturating_add(1);
            let set: bool = conn.set_nx(&self.key, expires_ms).await?;
            if set {
                return Ok(Some(Taken {
                    expires_ms,
                    took_over: None,
                }));
            }
            let current: Option<i64> = conn.get(&self.key).await?;
            if let Some(current) = current.filter(|c| *c < now) {
                let old: Option<i64> = conn.getset(&self.key, expires_ms).await?;
                if old.is_none_or(|o| o < now) {
                    return Ok(Some(Taken {
                        expires_ms,
                        took_over: Some(old.unwrap_or(current)),
                    }));
                }
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(rand::random_range(2..=8))).await;
        }
    }

    /// The documented release: `DEL` the lock, but only while this holder's own expiry
    /// has not passed by its own clock (after it, another client may hold the lock).
    pub(crate) async fn release(
        &self,
        conn: &mut MultiplexedConnection,
        taken: Taken,
    ) -> anyhow::Result<()> {
        if self.now_ms() < taken.expires_ms {
            let _: i64 = conn.del(&self.key).await?;
        }
        Ok(())
    }
}

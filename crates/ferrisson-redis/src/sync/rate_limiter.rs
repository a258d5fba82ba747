//! The rate limiter: a token bucket shared by every client, computed in one script on
//! the Redis server's clock.
//!
//! The bucket is kept as the generic cell rate algorithm keeps it: one timestamp, the
//! server time at which the bucket would be full again. Taking `n` permits moves it
//! `n` emission intervals later; the call is allowed when the result is at most `burst`
//! intervals ahead of now. That is a token bucket exactly (a steady `rate`, bursts up
//! to `burst`), in one key of a few bytes that expires when the bucket is full, with the
//! exact time the next permits are due. A sliding-window log would cost one entry per
//! call, and a sliding-window counter only approximates the rate at window edges.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::api::error::{Error, Result};
use crate::backend::client::Client;
use crate::backend::keys::Keys;
use crate::backend::scripts::rate::{RateAcquire, RateAcquired};
use crate::observe::acquire::{Decided, observe_decision};
use crate::observe::metrics::Kind;
use crate::observe::probe::Probe;

/// The fastest rate a [`Rate`] may have: one permit per microsecond (the resolution of
/// the server clock the limiter computes with).
pub const MAX_RATE_PER_SECOND: u32 = 1_000_000;

/// Longest time a full bucket may take to refill (`burst` × the time per permit), and
/// longest period of a [`Rate`]: a year.
const MAX_REFILL: Duration = Duration::from_secs(365 * 24 * 3600);

/// How many permits come back per period: the steady rate of a [`RateLimiter`].
///
/// ```
/// use std::time::Duration;
/// use ferrisson_redis::Rate;
///
/// let rate = Rate::per_second(5)?;
/// assert_eq!(rate, Rate::new(5, Duration::from_secs(1))?);
/// assert_eq!(rate.interval(), Duration::from_millis(200));
/// assert!(Rate::per_second(0).is_err());
/// # Ok::<(), ferrisson_redis::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    permits: u32,
    per: Duration,
}

impl Rate {
    /// `permits` every `per`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for zero permits, a period under 1 ms or over a year,
    /// or more than [`MAX_RATE_PER_SECOND`] permits a second.
    pub fn new(permits: u32, per: Duration) -> Result<Self> {
        if permits == 0 {
            return Err(Error::invalid("a rate needs at least 1 permit per period"));
        }
        if per < Duration::from_millis(1) || per > MAX_REFILL {
            return Err(Error::invalid(format!(
                "a rate's period must be between 1 ms and a year, got {per:?}"
            )));
        }
        if per.as_micros() < u128::from(permits) {
            return Err(Error::invalid(format!(
                "{permits} permits per {per:?} is faster than {MAX_RATE_PER_SECOND} a second"
            )));
        }
        Ok(Self { permits, per })
    }

    /// `permits` a second.
    ///
    /// # Errors
    ///
    /// As [`Rate::new`].
    pub fn per_second(permits: u32) -> Result<Self> {
        Self::new(permits, Duration::from_secs(1))
    }

    /// `permits` a minute.
    ///
    /// # Errors
    ///
    /// As [`Rate::new`].
    pub fn per_minute(permits: u32) -> Result<Self> {
        Self::new(permits, Duration::from_secs(60))
    }

    /// The permits per period.
    pub fn permits(self) -> u32 {
        self.permits
    }

    /// The period.
    pub fn per(self) -> Duration {
        self.per
    }

    /// The time one permit takes to come back, in whole microseconds, rounded up so the
    /// limiter never allows more than the rate.
    pub fn interval(self) -> Duration {
        Duration::from_micros(self.interval_micros())
    }

    fn interval_micros(self) -> u64 {
        let per = u64::try_from(self.per.as_micros()).unwrap_or(u64::MAX);
        per.div_ceil(u64::from(self.permits))
    }
}

impl Client {
    /// A handle to the rate limiter called `name`, allowing `rate` with bursts of up to
    /// `rate.permits()` (change it with [`RateLimiter::with_burst`]). No Redis traffic
    /// until used.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// use ferrisson_redis::Rate;
    /// let limiter = client.rate_limiter("api:alice", Rate::per_second(10)?)?;
    /// assert_eq!(limiter.burst(), 10);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `name` is empty, longer than 1 KiB or holds `{` or
    /// `}` (see [`MAX_NAME_LEN`](crate::MAX_NAME_LEN)), or when a full bucket would take
    /// more than a year to refill.
    pub fn rate_limiter(&self, name: &str, rate: Rate) -> Result<RateLimiter> {
        let keys = self.keys(name)?;
        let name = Arc::from(name);
        RateLimiter {
            client: self.clone(),
            probe: self.probe(Kind::RateLimiter, &name),
            name,
            keys,
            rate,
            burst: rate.permits,
        }
        .with_burst(rate.permits)
    }
}

/// A distributed rate limiter (Redisson's `RRateLimiter`): a token bucket that every
/// client sharing its name draws from.
///
/// Permits come back at a steady [`Rate`]; a full bucket holds `burst` of them, so up to
/// `burst` calls may go at once after a quiet spell, and the rate holds on average over
/// any longer time. Each decision is one script call computed on the Redis server's
/// clock, so the limit holds across processes and machines whatever their clocks say.
///
/// Every handle on the same name should use the same rate and burst: the bucket is
/// stored once, and each call applies its own handle's settings to it. The bucket's key
/// is the name's, as for every primitive of a client: a lock or semaphore of the same
/// name would share it, so give limiters names of their own (`"api:alice"`).
///
/// ```no_run
/// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
/// use ferrisson_redis::{Rate, RateDecision};
///
/// let limiter = client.rate_limiter("buy:alice", Rate::per_second(2)?)?.with_burst(5)?;
/// match limiter.try_acquire(1).await? {
///     RateDecision::Allowed { remaining } => println!("go ({remaining} left)"),
///     RateDecision::Denied { retry_after } => println!("retry in {retry_after:?}"),
/// }
/// limiter.acquire(1).await?; // sleeps until a permit is due
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RateLimiter {
    client: Client,
    name: Arc<str>,
    probe: Probe,
    keys: Keys,
    rate: Rate,
    burst: u32,
}

impl fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("name", &self.name)
            .field("rate", &self.rate)
            .field("burst", &self.burst)
            .finish_non_exhaustive()
    }
}

/// Whether a [`RateLimiter`] gave the permits asked for.
///
/// Unlike a lock's `try_lock`, a refusal says when to come back, so the answer is a
/// decision rather than an `Option`.
///
/// ```
/// use std::time::Duration;
/// use ferrisson_redis::RateDecision;
///
/// let denied = RateDecision::Denied { retry_after: Duration::from_millis(250) };
/// assert!(!denied.is_allowed());
/// assert_eq!(denied.retry_after(), Some(Duration::from_millis(250)));
/// assert!(RateDecision::Allowed { remaining: 3 }.is_allowed());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum RateDecision {
    /// The permits were taken.
    Allowed {
        /// Permits that could still be taken at once, after these.
        remaining: u32,
    },
    /// Nothing was taken: the permits asked for are due in `retry_after` (unless others
    /// take them first).
    Denied {
        /// How long until the asked permits are due, by the server's clock.
        retry_after: Duration,
    },
}

impl RateDecision {
    /// True when the permits were taken.
    pub fn is_allowed(self) -> bool {
        matches!(self, Self::Allowed { .. })
    }

    /// How long until the permits are due; `None` when they were taken.
    pub fn retry_after(self) -> Option<Duration> {
        match self {
            Self::Allowed { .. } => None,
            Self::Denied { retry_after } => Some(retry_after),
        }
    }
}

impl RateLimiter {
    /// The limiter's name.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// let limiter = client.rate_limiter("api", ferrisson_redis::Rate::per_second(1)?)?;
    /// assert_eq!(limiter.name(), "api");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The steady rate.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// use ferrisson_redis::Rate;
    /// let limiter = client.rate_limiter("api", Rate::per_minute(30)?)?;
    /// assert_eq!(limiter.rate(), Rate::per_minute(30)?);
    /// # Ok(()) }
    /// ```
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// How many permits a full bucket holds.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// let limiter = client.rate_limiter("api", ferrisson_redis::Rate::per_second(4)?)?;
    /// assert_eq!(limiter.burst(), 4);
    /// # Ok(()) }
    /// ```
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// The same limiter with a bucket of `burst` permits: how many may go at once after
    /// a quiet spell (1: calls are spaced by at least one interval).
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// use ferrisson_redis::Rate;
    /// let limiter = client.rate_limiter("api", Rate::per_second(10)?)?.with_burst(50)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a burst of zero, or one that would take more than a
    /// year to refill at the limiter's rate.
    pub fn with_burst(mut self, burst: u32) -> Result<Self> {
        if burst == 0 {
            return Err(Error::invalid("a rate limiter's burst must be at least 1"));
        }
        let refill = u128::from(burst) * u128::from(self.rate.interval_micros());
        if refill > MAX_REFILL.as_micros() {
            return Err(Error::invalid(format!(
                "a burst of {burst} at one permit per {:?} takes more than a year to refill",
                self.rate.interval()
            )));
        }
        self.burst = burst;
        Ok(self)
    }

    /// Takes `permits` now if the bucket holds them; otherwise takes nothing and says
    /// when they are due. One round trip.
    ///
    /// ```no_run
    /// # async fn demo(limiter: ferrisson_redis::RateLimiter) -> ferrisson_redis::Result<()> {
    /// if let Some(wait) = limiter.try_acquire(1).await?.retry_after() {
    ///     eprintln!("too fast: retry in {wait:?}");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for zero permits or more than the burst (never
    /// allowed), [`Error::Store`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Dropped after the request reached Redis, the permits may be taken without the
    /// caller knowing: the limiter then errs towards fewer calls, never more.
    pub async fn try_acquire(&self, permits: u32) -> Result<RateDecision> {
        self.check(permits)?;
        let decide = self.decide(permits);
        observe_decision(&self.probe, Some(Duration::ZERO), decide, granted).await
    }

    /// One decision of the server, for `permits` already checked.
    async fn decide(&self, permits: u32) -> Result<RateDecision> {
        let reply = self
            .client
            .connection()
            .run(&RateAcquire {
                key: self.keys.main(),
                interval_micros: self.rate.interval_micros(),
                burst: self.burst,
                permits,
            })
            .await?;
        Ok(match reply {
            RateAcquired::Allowed { remaining } => RateDecision::Allowed { remaining },
            RateAcquired::Denied { retry_after } => RateDecision::Denied { retry_after },
        })
    }

    /// Takes `permits`, sleeping until they are due (the wait the server computed, then
    /// one more try: others may have taken them meanwhile). Sends nothing while asleep.
    ///
    /// ```no_run
    /// # async fn demo(limiter: ferrisson_redis::RateLimiter) -> ferrisson_redis::Result<()> {
    /// for page in 0..100 {
    ///     limiter.acquire(1).await?;
    ///     // fetch(page).await;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`RateLimiter::try_acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`RateLimiter::try_acquire`]: dropped while asleep, nothing is taken.
    pub async fn acquire(&self, permits: u32) -> Result<()> {
        self.check(permits)?;
        let acquire = async {
            loop {
                match self.decide(permits).await? {
                    allowed @ RateDecision::Allowed { .. } => return Ok(allowed),
                    RateDecision::Denied { retry_after } => tokio::time::sleep(retry_after).await,
                }
            }
        };
        observe_decision(&self.probe, None, acquire, granted)
            .await
            .map(|_| ())
    }

    /// Takes `permits`, waiting at most `wait` for them. Returns at once, without
    /// sleeping, when the server says they are due later than the wait allows; the
    /// decision then says when they are due.
    ///
    /// ```no_run
    /// # async fn demo(limiter: ferrisson_redis::RateLimiter) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// if !limiter.acquire_timeout(1, Duration::from_millis(100)).await?.is_allowed() {
    ///     eprintln!("shed this request");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`RateLimiter::try_acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`RateLimiter::acquire`].
    pub async fn acquire_timeout(&self, permits: u32, wait: Duration) -> Result<RateDecision> {
        self.check(permits)?;
        let acquire = self.acquire_until(permits, Instant::now().checked_add(wait));
        observe_decision(&self.probe, Some(wait), acquire, granted).await
    }

    /// Decides until allowed, or until the permits are due after `deadline`.
    async fn acquire_until(&self, permits: u32, deadline: Option<Instant>) -> Result<RateDecision> {
        loop {
            let decision = self.decide(permits).await?;
            let RateDecision::Denied { retry_after } = decision else {
                return Ok(decision);
            };
            match (deadline, Instant::now().checked_add(retry_after)) {
                (Some(deadline), Some(due)) if due <= deadline => {
                    tokio::time::sleep_until(due).await;
                }
                (None, _) => tokio::time::sleep(retry_after).await,
                _ => return Ok(decision),
            }
        }
    }

    /// Zero permits or more than the burst: a caller's mistake, refused before any
    /// request (and not counted as an acquire).
    fn check(&self, permits: u32) -> Result<()> {
        if permits == 0 {
            return Err(Error::invalid("ask a rate limiter for at least 1 permit"));
        }
        if permits > self.burst {
            return Err(Error::invalid(format!(
                "rate limiter {:?}: {permits} permits at once is more than its burst of {}, and would never be allowed",
                self.name, self.burst
            )));
        }
        Ok(())
    }
}
/// How the metrics read a decision: allowed is a grant (rate limits have no fencing
/// token), denied a refusal.
fn granted(decision: &RateDecision) -> Decided {
    if decision.is_allowed() {
        Decided::Granted(None)
    } else {
        Decided::Refused
    }
}

//! Contended hand-off between contenders, each on its own `Client` (its own connection
//! and subscription, as separate processes would be).
//!
//! Every contender loops: request, acquire, hold a while, release, pause a while (as a
//! process doing other work would), request again. Per grant the bench records when the
//! request started, when the lock was held and when its release started, all on one
//! monotonic clock. A *hand-off* is a grant to another contender than the previous
//! holder, whose request had started at least a margin (several round trips) before
//! that holder's release started: its attempt had been refused and it was waiting for
//! the release rather than racing it. A contender re-acquiring its own lock, or one whose
//! request was still in flight when the release started, is not a hand-off and is not
//! counted. The hand-off time runs from the start of the previous holder's release to
//! the grant.
//!
//! Without the pause, a lock that lets anyone take it (not queued) mostly goes back to
//! the contender that just released it, whose next attempt starts a round trip before
//! any woken waiter's: then there are next to no hand-offs to measure.
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrisson_redis::{Client, FairLock, Lock, SimpleLock};
use tokio::sync::{Barrier, Notify};

use super::cost::{Cost, Nodes, Snapshot};
use super::stats::env_number;

/// The locks whose hand-off the benches measure (each with its default lease).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    Lock,
    Simple,
    Fair,
}

impl LockKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Lock => "Lock",
            Self::Simple => "SimpleLock",
            Self::Fair => "FairLock",
        }
    }
}

/// One contender's handle on the contended lock.
pub enum Contended {
    Lock(Lock),
    Simple(SimpleLock),
    Fair(FairLock),
}

impl Contended {
    pub fn new(kind: LockKind, client: &Client, name: &str) -> anyhow::Result<Self> {
        Ok(match kind {
            LockKind::Lock => Self::Lock(client.lock(name)?),
            LockKind::Simple => Self::Simple(client.simple_lock(name)?),
            LockKind::Fair => Self::Fair(client.fair_lock(name)?),
        })
    }

    /// Acquires (waiting as long as it takes), holds for `hold`, releases.
    pub async fn hold_once(&self, hold: Duration) -> anyhow::Result<Held> {
        let (times, ()) = self
            .hold_until(async {
                if !hold.is_zero() {
                    tokio::time::sleep(hold).await;
                }
            })
            .await?;
        Ok(times)
    }

    /// Acquires (waiting as long as it takes), holds until `release` completes, then
    /// releases; returns when it held and released, and `release`'s output.
    pub async fn hold_until<T>(
        &self,
        release: impl Future<Output = T>,
    ) -> anyhow::Result<(Held, T)> {
        // The three guard types share no trait: the same steps for each.
        macro_rules! hold {
            ($lock:expr) => {{
                let guard = $lock.lock().await?;
                let granted = Instant::now();
                let out = release.await;
                let released = Instant::now();
                guard.unlock().await?;
                Ok((Held { granted, released }, out))
            }};
        }
        match self {
            Self::Lock(lock) => hold!(lock),
            Self::Simple(lock) => hold!(lock),
            Self::Fair(lock) => hold!(lock),
        }
    }
}

/// When one hold started and when its release started.
#[derive(Clone, Copy)]
pub struct Held {
    pub granted: Instant,
    pub released: Instant,
}

/// What a contended run did: its grants in grant order, its hand-off times, its cost,
/// and the clients it made (one per contender, still connected).
pub struct Contention {
    pub grants: Vec<Grant>,
    pub handoffs: Vec<Duration>,
    pub cost: Cost,
    pub clients: Vec<Client>,
}

/// How contenders use the lock, and what counts as having waited.
#[derive(Clone, Copy)]
pub struct Pace {
    /// How long a contender holds the lock.
    pub hold: Duration,
    /// How long it waits after its release before it asks again.
    pub pause: Duration,
    /// How long before the previous holder's release a request must have started for
    /// its grant to count as a hand-off.
    pub waited: Duration,
}

impl Pace {
    /// 3 ms hold, 1 ms pause, 500 µs margin, or `{prefix}_HOLD_US`, `{prefix}_PAUSE_US`,
    /// `{prefix}_WAITED_US`.
    pub fn from_env(prefix: &str) -> Self {
        let micros = |name: &str, default| {
            Duration::from_micros(env_number(&format!("{prefix}_{name}"), default))
        };
        Self {
            hold: micros("HOLD_US", 3000),
            pause: micros("PAUSE_US", 1000),
            waited: micros("WAITED_US", 500),
        }
    }
}

/// Connects `contenders` clients to `url`, each with a handle on the `kind` lock
/// `name`, and runs them at `pace` until `target` grants; `info` reads Redis's counters.
pub async fn run_contention(
    url: &str,
    info: &mut impl Nodes,
    kind: LockKind,
    contenders: usize,
    name: &str,
    target: usize,
    pace: Pace,
) -> anyhow::Result<Contention> {
    let mut clients = Vec::with_capacity(contenders);
    let mut handles = Vec::with_capacity(contenders);
    for _ in 0..contenders {
        let client = super::connect(url).await?;
        let handle = Arc::new(Contended::new(kind, &client, name)?);
        handles.push(move || {
            let handle = Arc::clone(&handle);
            async move {
                let held = handle.hold_once(pace.hold).await?;
                if !pace.pause.is_zero() {
                    tokio::time::sleep(pace.pause).await;
                }
                anyhow::Ok(held)
            }
        });
        clients.push(client);
    }
    let before = Snapshot::take(info).await?;
    let grants = contend(handles, target).await?;
    let after = Snapshot::take(info).await?;
    Ok(Contention {
        handoffs: handoffs(&grants, pace.waited),
        grants,
        cost: Cost::between(&before, &after),
        clients,
    })
}

/// One grant as its contender saw it.
#[derive(Clone, Copy)]
pub struct Grant {
    pub contender: usize,
    /// When the contender started asking for the lock.
    pub requested: Instant,
    /// When it held the lock.
    pub granted: Instant,
    /// When its release started.
    pub released: Instant,
}

/// Runs `contenders` (one acquire, hold, release and pause each call) in loops from a common
/// start until `target` grants are recorded, then stops them all. Returns the grants in
/// grant order.
async fn contend<F, Fut>(contenders: Vec<F>, target: usize) -> anyhow::Result<Vec<Grant>>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<Held>> + Send,
{
    let grants = Arc::new(Mutex::new(Vec::with_capacity(target + contenders.len())));
    let start = Arc::new(Barrier::new(contenders.len()));
    let reached = Arc::new(Notify::new());
    let mut tasks = Vec::with_capacity(contenders.len());
    for (contender, hold) in contenders.into_iter().enumerate() {
        let (grants, start, reached) = (
            Arc::clone(&grants),
            Arc::clone(&start),
            Arc::clone(&reached),
        );
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let result = async {
                loop {
                    let requested = Instant::now();
                    let held = hold().await?;
                    let mut grants = grants
                        .lock()
                        .map_err(|_| anyhow::anyhow!("grants poisoned"))?;
                    grants.push(Grant {
                        contender,
                        requested,
                        granted: held.granted,
                        released: held.released,
                    });
                    if grants.len() >= target {
                        return anyhow::Ok(());
                    }
                }
            }
            .await;
            // Done or failed: either way the run stops.
            reached.notify_one();
            result
        }));
    }
    // The first contender to see the target stops; the others are stopped here (a
    // stopped acquire is undone by the library, a stopped hold released on drop).
    reached.notified().await;
    for task in &tasks {
        task.abort();
    }
    for task in tasks {
        if let Ok(result) = task.await {
            result?;
        }
    }
    let mut grants = grants
        .lock()
        .map_err(|_| anyhow::anyhow!("grants poisoned"))?
        .clone();
    grants.sort_by_key(|g| g.granted);
    Ok(grants)
}

/// The hand-offs among `grants` (in grant order): from the previous holder's release
/// start to the grant, for each grant to another contender that had asked at least
/// `waited` before that release started.
fn handoffs(grants: &[Grant], waited: Duration) -> Vec<Duration> {
    grants
        .windows(2)
        .filter(|w| w[1].contender != w[0].contender && w[1].requested + waited <= w[0].released)
        .map(|w| w[1].granted.saturating_duration_since(w[0].released))
        .collect()
}

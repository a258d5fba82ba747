//! The trade-off between stores, measured: a few seconds per lock against the servers
//! the lab already started (the Redis lock and the fair lock on the lab's Redis, Redlock
//! over its three servers) and the other stores it could reach or start (the machine's
//! PostgreSQL and MariaDB lock tables, a ZooKeeper and an etcd of its own): how long one
//! uncontended lock + unlock takes, how long a hand-off from one client to a waiting one
//! takes, and how many lock + unlock pairs per second 64 tasks get on 64 locks at once.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context as _;
use ferrisson::redis::{Client, FairLock, Redlock};
use ferrisson::{DistributedLock, Guard as _};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// Tasks (each on its own lock) of the throughput measurement.
pub const THROUGHPUT_TASKS: usize = 64;
/// How long a holder keeps the lock before it hands it off: long enough that the other
/// client's request is refused and waiting when the release starts.
pub const HANDOFF_HOLD: Duration = Duration::from_millis(2);
/// At most this many samples per latency measurement.
const MAX_SAMPLES: usize = 5000;
/// A waiter that has not got a lock in this long counts as an error of the measurement.
const PATIENCE: Duration = Duration::from_secs(10);

/// The stores the lab knows of, in the order the page lists them; those a run measured
/// have a [`StoreRow`], the others are listed as left out, with why.
///
/// ```
/// let (id, name) = seckill_lab::KNOWN_STORES[0];
/// assert_eq!((id, name), ("redis-lock", "Redis lock"));
/// ```
pub const KNOWN_STORES: [(&str, &str); 7] = [
    ("redis-lock", "Redis lock"),
    ("fair-lock", "Redis fair lock"),
    ("redlock", "Redlock"),
    ("postgres", "PostgreSQL"),
    ("mariadb", "MariaDB"),
    ("zookeeper", "ZooKeeper"),
    ("etcd", "etcd"),
];

/// Latency percentiles of one measurement, in µs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Samples taken.
    pub samples: usize,
    /// Median, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
}

impl Latency {
    /// The percentiles of `samples` (none: `None`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use seckill_lab::Latency;
    ///
    /// let l = Latency::of((1..=100).map(Duration::from_micros).collect()).expect("samples");
    /// assert_eq!((l.samples, l.p99_us), (100, 99.0));
    /// ```
    pub fn of(mut samples: Vec<Duration>) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let at = |q: f64| {
            let i = ((samples.len() - 1) as f64 * q).round() as usize;
            samples[i.min(samples.len() - 1)].as_secs_f64() * 1e6
        };
        Some(Self {
            samples: samples.len(),
            p50_us: at(0.5),
            p99_us: at(0.99),
        })
    }
}

/// What one store did in the lab's short measurement.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoreRow {
    /// Its id: one of [`KNOWN_STORES`].
    pub store: String,
    /// The lock, in words (`Lock`, watchdog lease).
    pub lock: String,
    /// The servers it ran on.
    pub servers: String,
    /// One lock + unlock at a time on one client.
    pub uncontended: Option<Latency>,
    /// From the start of the holder's release to the grant of the client waiting for it.
    pub handoff: Option<Latency>,
    /// Lock + unlock pairs per second of [`THROUGHPUT_TASKS`] tasks, each on its own lock.
    pub pairs_per_s_64: Option<f64>,
    /// Acquires and releases that returned an error (counted, not in the samples).
    #[serde(default)]
    pub failed_calls: u64,
    /// Why the measurement stopped or measured nothing, when it did.
    pub error: Option<String>,
}

/// One lock of the measurement: acquire (waiting at most a patience), and release the
/// guard it gave. Every lock of the store-neutral [`DistributedLock`] contract is one, so a
/// store the lab adds later is measured the same way.
trait Measured: Send + Sync + 'static {
    type Held: Send + 'static;

    fn acquire(&self) -> impl Future<Output = anyhow::Result<Self::Held>> + Send;

    fn release(held: Self::Held) -> impl Future<Output = anyhow::Result<()>> + Send;
}

impl<L: DistributedLock + 'static> Measured for L
where
    L::Guard: 'static,
{
    type Held = L::Guard;

    async fn acquire(&self) -> anyhow::Result<L::Guard> {
        self.lock_timeout(PATIENCE)
            .await?
            .with_context(|| format!("no grant of {} within {PATIENCE:?}", self.name()))
    }

    async fn release(held: L::Guard) -> anyhow::Result<()> {
        Ok(held.unlock().await?)
    }
}

/// Where the stores run: the lab's Redis and, when it started them, the Redlock servers.
#[derive(Debug, Clone)]
pub struct StoreServers {
    /// The lab's Redis URL (one server, Sentinel or Cluster).
    pub redis: String,
    /// That Redis in words.
    pub redis_words: String,
    /// The Redlock servers (empty: no Redlock row).
    pub redlock: Vec<String>,
    /// Those servers in words.
    pub redlock_words: String,
    /// The other stores to measure, through the store-neutral client.
    pub others: Vec<OtherStore>,
}

/// A store measured through the store-neutral client (`ferrisson::connect`): its id in
/// [`KNOWN_STORES`], what its lock is, where it runs, and its URL.
///
/// ```
/// let zk = seckill_lab::OtherStore {
///     id: "zookeeper",
///     lock: "Lock (Curator's InterProcessMutex)",
///     words: "a ZooKeeper server started by the lab".into(),
///     url: "zk://127.0.0.1:2181/lab".into(),
/// };
/// assert_eq!(zk.id, "zookeeper");
/// ```
#[derive(Debug, Clone)]
pub struct OtherStore {
    /// Its id in [`KNOWN_STORES`].
    pub id: &'static str,
    /// Its lock, in words.
    pub lock: &'static str,
    /// Where it runs, in words.
    pub words: String,
    /// Its URL (a database's with `?table=`: the lab's own lock table).
    pub url: String,
}

/// Measures every store the lab has servers for, each for three phases of `phase`.
///
/// A store whose measurement fails has its error in its row; the others still run.
///
/// ```no_run
/// # async fn demo() {
/// use std::time::Duration;
/// use seckill_lab::{StoreServers, measure_stores};
///
/// let servers = StoreServers {
///     redis: "redis://127.0.0.1:6390".into(),
///     redis_words: "one Redis server".into(),
///     redlock: Vec::new(),
///     redlock_words: String::new(),
///     others: Vec::new(),
/// };
/// let rows = measure_stores(&servers, Duration::from_millis(500)).await;
/// assert_eq!(rows.len(), 2, "the Redis lock and the fair lock; no Redlock servers");
/// # }
/// ```
///
/// # Cancel safety
///
/// Not cancel safe: a measurement dropped half-way may leave a lock held until its
/// lease runs out (the names are the lab's own, `lab:store:*`).
pub async fn measure_stores(servers: &StoreServers, phase: Duration) -> Vec<StoreRow> {
    let mut rows = Vec::new();
    rows.push(
        measure_one(
            "redis-lock",
            "Lock (watchdog lease, re-entrant)",
            &servers.redis_words,
            phase,
            || async {
                let (a, b) = (client(&servers.redis).await?, client(&servers.redis).await?);
                let make = move |c: &Client, name: &str| Ok(c.lock(name)?);
                Ok((a, b, make))
            },
        )
        .await,
    );
    rows.push(
        measure_one(
            "fair-lock",
            "FairLock (first come, first served)",
            &servers.redis_words,
            phase,
            || async {
                let (a, b) = (client(&servers.redis).await?, client(&servers.redis).await?);
                let make = move |c: &Client, name: &str| -> anyhow::Result<FairLock> {
                    Ok(c.fair_lock(name)?)
                };
                Ok((a, b, make))
            },
        )
        .await,
    );
    if !servers.redlock.is_empty() {
        rows.push(
            measure_one(
                "redlock",
                "Redlock (quorum of independent servers, default retry 50–100 ms)",
                &servers.redlock_words,
                phase,
                || async {
                    let (a, b) = (
                        clients(&servers.redlock).await?,
                        clients(&servers.redlock).await?,
                    );
                    let make = move |c: &Vec<Client>, name: &str| -> anyhow::Result<Redlock> {
                        Ok(Redlock::new(c.as_slice(), name)?)
                    };
                    Ok((a, b, make))
                },
            )
            .await,
        );
    }
    for other in &servers.others {
        rows.push(
            measure_one(other.id, other.lock, &other.words, phase, || async {
                let (a, b) = (any_client(&other.url).await?, any_client(&other.url).await?);
                let make = move |c: &ferrisson::Client,
                                 name: &str|
                      -> anyhow::Result<ferrisson::AnyLock> {
                    Ok(c.lock(name)?)
                };
                Ok((a, b, make))
            })
            .await,
        );
    }
    rows
}

/// A client of any store; a database's lock table is created when missing (the lab's
/// own table, named in the URL).
async fn any_client(url: &str) -> anyhow::Result<ferrisson::Client> {
    let client = ferrisson::connect(url)
        .await
        .map_err(|e| anyhow::anyhow!("cannot connect for the store measurement: {e}"))?;
    if let Some(sql) = client.as_sql() {
        sql.create_schema()
            .await
            .map_err(|e| anyhow::anyhow!("cannot create the lab's lock table: {e}"))?;
    }
    Ok(client)
}

async fn client(url: &str) -> anyhow::Result<Client> {
    Client::connect(url)
        .await
        .map_err(|e| anyhow::anyhow!("cannot connect for the store measurement: {e}"))
}

async fn clients(urls: &[String]) -> anyhow::Result<Vec<Client>> {
    let mut all = Vec::with_capacity(urls.len());
    for url in urls {
        all.push(client(url).await?);
    }
    Ok(all)
}

/// Calls of one store's measurement that returned an error: counted, not retried into a
/// sample (under load a Redlock server can miss its per-node timeout, 100 ms at most).
#[derive(Debug, Default)]
struct Failures {
    count: AtomicU64,
    last: Mutex<Option<String>>,
}

impl Failures {
    fn add(&self, e: &anyhow::Error) {
        self.count.fetch_add(1, Ordering::Relaxed);
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(format!("{e:#}"));
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn last(&self) -> Option<String> {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// One store's row: connects two clients (`connect`), then runs the three phases with
/// locks made by `make` from a client and a name.
async fn measure_one<C, L, M, Conn, Fut>(
    store: &str,
    lock: &str,
    servers: &str,
    phase: Duration,
    connect: Conn,
) -> StoreRow
where
    C: Send + Sync + 'static,
    L: Measured,
    M: Fn(&C, &str) -> anyhow::Result<L>,
    Conn: FnOnce() -> Fut,
    Fut: Future<Output = anyhow::Result<(C, C, M)>>,
{
    let mut row = StoreRow {
        store: store.to_owned(),
        lock: lock.to_owned(),
        servers: servers.to_owned(),
        uncontended: None,
        handoff: None,
        pairs_per_s_64: None,
        failed_calls: 0,
        error: None,
    };
    let failures = Arc::new(Failures::default());
    let result: anyhow::Result<()> = async {
        let (a, b, make) = connect().await?;
        row.uncontended =
            Latency::of(uncontended(&make(&a, "lab:store:uncontended")?, phase, &failures).await);
        row.handoff = Latency::of(
            handoffs(
                &make(&a, "lab:store:handoff")?,
                &make(&b, "lab:store:handoff")?,
                phase,
                &failures,
            )
            .await?,
        );
        let locks = (0..THROUGHPUT_TASKS)
            .map(|i| make(&a, &format!("lab:store:pairs:{i}")))
            .collect::<anyhow::Result<Vec<L>>>()?;
        row.pairs_per_s_64 = Some(pairs_per_second(locks, phase, &failures).await?);
        Ok(())
    }
    .await;
    row.failed_calls = failures.count();
    row.error = match result {
        Err(e) => Some(format!("{e:#}")),
        // Nothing measured: every call failed.
        Ok(()) if row.uncontended.is_none() => failures
            .last()
            .map(|e| format!("every call failed; the last: {e}")),
        Ok(()) => None,
    };
    row
}

/// Lock + unlock, one at a time, for `phase`; the time of each pair that succeeded.
async fn uncontended<L: Measured>(lock: &L, phase: Duration, failures: &Failures) -> Vec<Duration> {
    let end = Instant::now() + phase;
    let mut samples = Vec::new();
    while Instant::now() < end && samples.len() < MAX_SAMPLES {
        let began = Instant::now();
        match pair(lock).await {
            Ok(()) => samples.push(began.elapsed()),
            Err(e) => failures.add(&e),
        }
    }
    samples
}

async fn pair<L: Measured>(lock: &L) -> anyhow::Result<()> {
    let held = lock.acquire().await?;
    L::release(held).await
}

/// Acquires `lock`, counting the calls that fail, until one succeeds or `give_up`.
async fn acquire_until<L: Measured>(
    lock: &L,
    give_up: Instant,
    failures: &Failures,
) -> anyhow::Result<L::Held> {
    loop {
        match lock.acquire().await {
            Ok(held) => return Ok(held),
            Err(e) if Instant::now() >= give_up => return Err(e),
            Err(e) => failures.add(&e),
        }
    }
}

/// Two clients pass one lock back and forth for `phase`: the holder keeps it
/// [`HANDOFF_HOLD`] while the other asks for it, then releases; a sample is the time from
/// the start of the release to the other's grant.
async fn handoffs<L: Measured>(
    a: &L,
    b: &L,
    phase: Duration,
    failures: &Failures,
) -> anyhow::Result<Vec<Duration>> {
    let end = Instant::now() + phase;
    let give_up = end + PATIENCE;
    let mut samples = Vec::new();
    let mut held = acquire_until(a, give_up, failures).await?;
    let mut waiter = b;
    let mut holder = a;
    while Instant::now() < end && samples.len() < MAX_SAMPLES {
        let wait = async {
            let got = waiter.acquire().await;
            (got, Instant::now())
        };
        let release = async {
            tokio::time::sleep(HANDOFF_HOLD).await;
            let began = Instant::now();
            L::release(held).await.map(|()| began)
        };
        let ((got, granted), released) = tokio::join!(wait, release);
        held = match (got, released) {
            (Ok(got), Ok(released)) => {
                // A grant before the release began was no hand-off (the holder's lease
                // ran out): not a sample.
                if let Some(took) = granted.checked_duration_since(released) {
                    samples.push(took);
                }
                got
            }
            (Ok(got), Err(e)) => {
                failures.add(&e);
                got
            }
            (Err(e), _) => {
                failures.add(&e);
                acquire_until(waiter, give_up, failures).await?
            }
        };
        std::mem::swap(&mut holder, &mut waiter);
    }
    if let Err(e) = L::release(held).await {
        failures.add(&e);
    }
    Ok(samples)
}

/// Lock + unlock pairs per second of one task per lock in `locks`, for `phase` (the
/// pairs that succeeded).
async fn pairs_per_second<L: Measured>(
    locks: Vec<L>,
    phase: Duration,
    failures: &Arc<Failures>,
) -> anyhow::Result<f64> {
    let start = Arc::new(tokio::sync::Barrier::new(locks.len() + 1));
    let mut tasks = Vec::with_capacity(locks.len());
    for lock in locks {
        let (start, failures) = (Arc::clone(&start), Arc::clone(failures));
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let end = Instant::now() + phase;
            let mut pairs = 0_u64;
            while Instant::now() < end {
                match pair(&lock).await {
                    Ok(()) => pairs += 1,
                    Err(e) => failures.add(&e),
                }
            }
            pairs
        }));
    }
    start.wait().await;
    let began = Instant::now();
    let mut pairs = 0;
    for task in tasks {
        pairs += task.await.context("a throughput task panicked")?;
    }
    Ok(pairs as f64 / began.elapsed().as_secs_f64().max(1e-9))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Latency;

    #[test]
    fn percentiles_of_samples() {
        let samples = (1..=100).map(Duration::from_micros).collect();
        let l = Latency::of(samples).expect("samples");
        assert_eq!(l.samples, 100);
        assert!((l.p50_us - 51.0).abs() < 1e-6, "{l:?}");
        assert!((l.p99_us - 99.0).abs() < 1e-6, "{l:?}");
        assert_eq!(Latency::of(Vec::new()), None);
    }
}

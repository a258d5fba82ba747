//! The measuring every store shares: uncontended pairs (acquire + release) against a
//! floor, throughput on distinct names against the floor's, and contended hand-offs.
//!
//! A *contestant* is a floor or a lock, made for one name at a time. Each table puts the
//! floor first and measures the contestants in interleaved rounds (floor, A, B, floor,
//! A, B, ...), so that a change in the machine's load hits them alike; a ratio is taken
//! between figures of the same round.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrisson::{DistributedLock, Guard};
use futures_util::future::BoxFuture;
use tokio::sync::{Barrier, Notify};

/// One acquire + release of one name; the lock must be free when it starts.
pub type Pair = Box<dyn FnMut() -> BoxFuture<'static, anyhow::Result<()>> + Send>;

type MakePair = dyn Fn(String) -> BoxFuture<'static, anyhow::Result<Pair>> + Send + Sync;

/// A floor or a lock, as a row of a table: its label and how to make its pair for a name.
pub struct Contestant {
    pub label: String,
    make: Box<MakePair>,
}

impl Contestant {
    /// `make(name)` prepares the pairs of `name` (creating whatever the name needs).
    pub fn new<F, Fut>(label: impl Into<String>, make: F) -> Self
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = anyhow::Result<Pair>> + Send + 'static,
    {
        Self {
            label: label.into(),
            make: Box::new(move |name| Box::pin(make(name))),
        }
    }

    /// The pair of `name`.
    pub async fn pair(&self, name: String) -> anyhow::Result<Pair> {
        (self.make)(name).await
    }
}

/// Reads a server's count of the requests it received (every client's), for the
/// requests-per-pair column of the uncontended table.
pub type RequestCount = dyn Fn() -> BoxFuture<'static, anyhow::Result<u64>> + Send + Sync;

/// The pair of a library lock: `lock().await`, then `unlock().await`.
pub fn lock_pair<L>(lock: L) -> Pair
where
    L: DistributedLock + 'static,
    L::Guard: 'static,
{
    let lock = Arc::new(lock);
    Box::new(move || {
        let lock = Arc::clone(&lock);
        Box::pin(async move {
            lock.lock().await?.unlock().await?;
            Ok(())
        })
    })
}

/// The sizes of a run.
pub struct Config {
    /// Uncontended pairs per contestant and round, and rounds.
    pub pairs: usize,
    pub rounds: usize,
    /// Throughput: tasks, rounds and the length of one slice.
    pub tasks: usize,
    pub slice_rounds: usize,
    pub slice: Duration,
    /// Hand-off: grants per row, and how contenders use the lock.
    pub grants: usize,
    pub pace: Pace,
}

/// `name` from the environment as a number, or `default` when unset or not a number.
pub fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

impl Config {
    /// The full sizes under `cargo bench`, a short smoke pass otherwise (`cargo test
    /// --benches` runs the binary without `--bench`); `STORES_BENCH_*` override them.
    pub fn from_env(quick: bool) -> Self {
        let n = |name: &str, full: u64, smoke: u64| {
            env_number(
                &format!("STORES_BENCH_{name}"),
                if quick { smoke } else { full },
            )
        };
        Self {
            pairs: n("PAIRS", 200, 20) as usize,
            rounds: n("ROUNDS", 5, 1).max(1) as usize,
            tasks: n("TASKS", 64, 8) as usize,
            slice_rounds: n("SLICE_ROUNDS", 5, 1).max(1) as usize,
            slice: Duration::from_millis(n("SLICE_MS", 1000, 200)),
            grants: n("GRANTS", 300, 20) as usize,
            pace: Pace {
                hold: Duration::from_micros(n("HOLD_US", 3000, 1000)),
                pause: Duration::from_micros(n("PAUSE_US", 1000, 1000)),
                waited: Duration::from_micros(n("WAITED_US", 500, 500)),
            },
        }
    }
}

/// The machine's 1-minute load average, as `/proc/loadavg` gives it.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The `q` quantile (0.0–1.0) of `sorted`, nearest rank; zero when empty.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// The median of `values` (the upper one of an even count); NaN when empty.
pub fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// p50 of `samples` round trips of `round_trip` (after a few unmeasured ones): the
/// reference of the hand-off rows, measured right before each.
pub async fn round_trip_p50(round_trip: &mut Pair, samples: usize) -> anyhow::Result<Duration> {
    let mut taken = Vec::with_capacity(samples);
    for i in 0..samples + samples / 10 {
        let started = Instant::now();
        round_trip().await?;
        if i >= samples / 10 {
            taken.push(started.elapsed());
        }
    }
    taken.sort_unstable();
    Ok(percentile(&taken, 0.5))
}

/// Uncontended acquire + release, one pair at a time, each contestant on its own name;
/// the first contestant is the floor. `round_trip` (one request and its answer) is
/// measured in the same rounds as a reference row. With `requests`, each row also gets
/// the requests the server received per pair (counted around each row's pairs).
pub async fn uncontended(
    contestants: &[Contestant],
    round_trip: &Contestant,
    requests: Option<&RequestCount>,
    config: &Config,
) -> anyhow::Result<()> {
    let rows: Vec<&Contestant> = contestants.iter().chain([round_trip]).collect();
    let mut pairs = Vec::with_capacity(rows.len());
    for row in &rows {
        pairs.push(
            row.pair(format!("uncontended-{}", slug(&row.label)))
                .await?,
        );
    }
    let mut samples: Vec<Vec<Duration>> = rows.iter().map(|_| Vec::new()).collect();
    let mut received = vec![0u64; rows.len()];
    // Round 0 warms up (connections, prepared statements, parent nodes) and is not
    // counted.
    for round in 0..=config.rounds {
        for ((pair, samples), received) in pairs.iter_mut().zip(&mut samples).zip(&mut received) {
            let count = if round == 0 { 20 } else { config.pairs };
            let before = match requests {
                Some(count) => count().await?,
                None => 0,
            };
            for _ in 0..count {
                let started = Instant::now();
                pair().await?;
                if round > 0 {
                    samples.push(started.elapsed());
                }
            }
            if let (Some(count), true) = (requests, round > 0) {
                *received += count().await?.saturating_sub(before);
            }
        }
    }
    for s in &mut samples {
        s.sort_unstable();
    }
    let p50 = |i: usize| percentile(&samples[i], 0.5);
    let floor = p50(0);
    let rtt = p50(rows.len() - 1);
    println!(
        "\n### Uncontended acquire + release ({} rounds of {} pairs each)\n",
        config.rounds, config.pairs
    );
    let measured = (config.pairs * config.rounds) as f64;
    let (extra_head, extra_align) = if requests.is_some() {
        (" requests per pair (server's count) |", "---:|")
    } else {
        ("", "")
    };
    println!("| | p50 µs | p99 µs | p50 / floor | p50 / round trip |{extra_head}");
    println!("|---|---:|---:|---:|---:|{extra_align}");
    for (i, row) in rows.iter().enumerate() {
        let extra = if requests.is_some() {
            format!(" {:.2} |", received[i] as f64 / measured)
        } else {
            String::new()
        };
        println!(
            "| {} | {:.0} | {:.0} | {:.2} | {:.2} |{extra}",
            row.label,
            us(p50(i)),
            us(percentile(&samples[i], 0.99)),
            p50(i).as_secs_f64() / floor.as_secs_f64(),
            p50(i).as_secs_f64() / rtt.as_secs_f64(),
        );
    }
    Ok(())
}

/// A label as a name part: lower case, runs of anything else than letters and digits
/// as one `-`.
fn slug(label: &str) -> String {
    let mut out = String::new();
    for c in label.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_owned()
}

/// Throughput of `config.tasks` tasks, each looping on pairs of its own name; the first
/// contestant is the floor. Each ratio is the median of the per-round ratios to the
/// floor of the same round.
pub async fn throughput(contestants: &[Contestant], config: &Config) -> anyhow::Result<()> {
    // One unmeasured short slice each first (connections, names, parents).
    for c in contestants {
        slice(c, config.tasks, config.slice / 5).await?;
    }
    let mut rates: Vec<Vec<f64>> = contestants.iter().map(|_| Vec::new()).collect();
    for _ in 0..config.slice_rounds {
        for (c, rates) in contestants.iter().zip(&mut rates) {
            rates.push(slice(c, config.tasks, config.slice).await?);
        }
    }
    println!(
        "\n### Throughput, {} tasks on distinct names ({} rounds of {:?} per row)\n",
        config.tasks, config.slice_rounds, config.slice
    );
    println!("| | pairs/s | / floor |");
    println!("|---|---:|---:|");
    for (c, row) in contestants.iter().zip(&rates) {
        let ratios = row.iter().zip(&rates[0]).map(|(r, f)| r / f).collect();
        println!(
            "| {} | {:.0} | {:.2} |",
            c.label,
            median(row.clone()),
            median(ratios)
        );
    }
    Ok(())
}

/// Pairs per second of `tasks` tasks looping on `contestant` for `length`.
async fn slice(contestant: &Contestant, tasks: usize, length: Duration) -> anyhow::Result<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let mut pair = contestant
            .pair(format!("throughput-{}-{task}", slug(&contestant.label)))
            .await?;
        let (stop, done) = (Arc::clone(&stop), Arc::clone(&done));
        handles.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                pair().await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(())
        }));
    }
    let before = done.load(Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(length).await;
    let after = done.load(Ordering::Relaxed);
    let seconds = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.await??;
    }
    Ok((after - before) as f64 / seconds)
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

/// When one hold started and when its release started.
#[derive(Clone, Copy)]
pub struct Held {
    pub granted: Instant,
    pub released: Instant,
}

/// One contender: acquires (waiting as long as it takes), holds for the given time,
/// releases.
pub type Hold = Box<dyn FnMut(Duration) -> BoxFuture<'static, anyhow::Result<Held>> + Send>;

/// The contender of a library lock.
pub fn lock_hold<L>(lock: L) -> Hold
where
    L: DistributedLock + 'static,
    L::Guard: 'static,
{
    let lock = Arc::new(lock);
    Box::new(move |hold| {
        let lock = Arc::clone(&lock);
        Box::pin(async move {
            let guard = lock.lock().await?;
            let granted = Instant::now();
            tokio::time::sleep(hold).await;
            let released = Instant::now();
            guard.unlock().await?;
            Ok(Held { granted, released })
        })
    })
}

#[derive(Clone, Copy)]
struct Grant {
    contender: usize,
    requested: Instant,
    granted: Instant,
    released: Instant,
}

/// What a contended row measured.
pub struct Handoffs {
    pub grants: usize,
    /// From the previous holder's release start to the grant, per hand-off.
    pub times: Vec<Duration>,
}

impl Handoffs {
    pub fn p50(&self) -> Duration {
        percentile(&self.times, 0.5)
    }

    pub fn p99(&self) -> Duration {
        percentile(&self.times, 0.99)
    }
}

/// Runs `contenders` on one name from a common start (acquire, hold, release, pause,
/// again) until `target` grants, then stops them all (a stopped acquire or hold is
/// undone by its drop). A *hand-off* is a grant to another contender than the previous
/// holder whose request had started at least `pace.waited` before that holder's release
/// started: it was waiting for the release, not racing it.
pub async fn contend(contenders: Vec<Hold>, target: usize, pace: Pace) -> anyhow::Result<Handoffs> {
    let grants = Arc::new(Mutex::new(Vec::with_capacity(target + contenders.len())));
    let start = Arc::new(Barrier::new(contenders.len()));
    let reached = Arc::new(Notify::new());
    let mut tasks = Vec::with_capacity(contenders.len());
    for (contender, mut hold) in contenders.into_iter().enumerate() {
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
                    let held = hold(pace.hold).await?;
                    {
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
                    tokio::time::sleep(pace.pause).await;
                }
            }
            .await;
            reached.notify_one();
            result
        }));
    }
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
    let mut times: Vec<Duration> = grants
        .windows(2)
        .filter(|w| {
            w[1].contender != w[0].contender && w[1].requested + pace.waited <= w[0].released
        })
        .map(|w| w[1].granted.saturating_duration_since(w[0].released))
        .collect();
    times.sort_unstable();
    Ok(Handoffs {
        grants: grants.len(),
        times,
    })
}

/// The header of a hand-off table.
pub fn handoff_header(config: &Config) {
    println!(
        "\n### Contended hand-off (release start -> another contender, already waiting, holds; {} grants per row, each held {:?}, then {:?} apart; each contender on its own client)\n",
        config.grants, config.pace.hold, config.pace.pause
    );
    println!(
        "| contenders | | hand-offs / grants | p50 µs | p99 µs | round trip p50 µs | p50 / round trip | p50 / floor |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|");
}

/// One row of a hand-off table; `floor` is the p50 of the floor's row of the same
/// contenders, when the store has one.
pub fn handoff_row(
    contenders: usize,
    label: &str,
    run: &Handoffs,
    round_trip: Duration,
    floor: Option<Duration>,
) {
    let ratio = floor.map_or_else(
        || "–".to_owned(),
        |f| format!("{:.2}", run.p50().as_secs_f64() / f.as_secs_f64()),
    );
    println!(
        "| {contenders} | {label} | {} / {} | {:.0} | {:.0} | {:.0} | {:.2} | {ratio} |",
        run.times.len(),
        run.grants,
        us(run.p50()),
        us(run.p99()),
        us(round_trip),
        run.p50().as_secs_f64() / round_trip.as_secs_f64(),
    );
}

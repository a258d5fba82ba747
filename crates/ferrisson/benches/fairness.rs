//! M3 and M4: contended hand-off and fairness of `FairLock` against `Lock`, with 8 and 32
//! contenders, each on its own `Client` (its own connection and subscription, as separate
//! processes would be), against one private redis-server.
//!
//! Every contender loops: request, acquire, release at once, request again. Per grant
//! the bench records when the request started, when it was granted and when the release
//! started (one process, so one monotonic clock). From that:
//!
//! - **inversions**: pairs of requests where `a` started more than `FAIRNESS_BENCH_SLACK_US`
//!   (default 1000 µs, far above one round trip) before `b`, yet `b` was granted first;
//! - **Jain index** of the grants per contender, (Σx)² / (n·Σx²): 1.0 when every
//!   contender got the same share, 1/n when one got everything;
//! - **hand-off**: from the start of a release to the next grant, counted only when the
//!   next grantee was already waiting (a contended hand-off), p50 and p99, also as a
//!   ratio to the round-trip floor measured in the same run (`PING` p50 through redis-rs);
//! - **longest wait** from request to grant;
//! - **script calls per grant** (`EVALSHA` on the server): 2.00 is one acquire and one
//!   release, anything above is failed retries and waiter keep-alives.
//!
//! Run: `cargo bench -p ferrisson --bench fairness` (`FAIRNESS_BENCH_GRANTS=N` grants per
//! row, default 2000). Prints a markdown table for BENCHMARKS.md.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrisson::Client;
use ferrisson_testkit::RedisServer;
use redis::aio::MultiplexedConnection;
use tokio::sync::{Barrier, Notify};

const CONTENDERS: [usize; 2] = [8, 32];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Fair,
    Plain,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Fair => "FairLock",
            Self::Plain => "Lock",
        }
    }
}

/// One grant as seen by its contender.
#[derive(Clone, Copy)]
struct Grant {
    contender: usize,
    requested: Instant,
    granted: Instant,
    released: Instant,
}

struct Row {
    kind: Kind,
    contenders: usize,
    grants: usize,
    inversions: u64,
    pairs: u64,
    jain: f64,
    handoff_p50: Duration,
    handoff_p99: Duration,
    longest_wait: Duration,
    scripts_per_grant: f64,
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[index]
}

async fn evalsha_calls(conn: &mut MultiplexedConnection) -> anyhow::Result<u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0))
}

/// p50 of one `PING` round trip through redis-rs: the floor every figure is divided by.
async fn rtt_floor(conn: &mut MultiplexedConnection) -> anyhow::Result<Duration> {
    let mut samples = Vec::with_capacity(2000);
    for i in 0..2200 {
        let started = Instant::now();
        let _: String = redis::cmd("PING").query_async(conn).await?;
        if i >= 200 {
            samples.push(started.elapsed());
        }
    }
    samples.sort();
    Ok(percentile(&samples, 0.5))
}

async fn run_row(
    server: &RedisServer,
    kind: Kind,
    contenders: usize,
    target: usize,
) -> anyhow::Result<Row> {
    let name = format!("bench-{}-{contenders}", kind.name());
    let mut clients = Vec::with_capacity(contenders);
    for _ in 0..contenders {
        clients.push(Client::connect(&server.url()).await?);
    }
    let mut raw = redis::Client::open(server.url())?
        .get_multiplexed_async_connection()
        .await?;
    let grants = Arc::new(Mutex::new(Vec::with_capacity(target + contenders)));
    let start = Arc::new(Barrier::new(contenders));
    let reached = Arc::new(Notify::new());
    let scripts_before = evalsha_calls(&mut raw).await?;
    let mut tasks = Vec::with_capacity(contenders);
    for (contender, client) in clients.iter().enumerate() {
        let (grants, start, reached) = (
            Arc::clone(&grants),
            Arc::clone(&start),
            Arc::clone(&reached),
        );
        let fair = client.fair_lock(&name)?;
        let plain = client.lock(&name)?;
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            loop {
                let requested = Instant::now();
                let (granted, released) = match kind {
                    Kind::Fair => {
                        let guard = fair.lock().await?;
                        let granted = Instant::now();
                        let released = Instant::now();
                        guard.unlock().await?;
                        (granted, released)
                    }
                    Kind::Plain => {
                        let guard = plain.lock().await?;
                        let granted = Instant::now();
                        let released = Instant::now();
                        guard.unlock().await?;
                        (granted, released)
                    }
                };
                let mut grants = grants.lock().expect("grants");
                grants.push(Grant {
                    contender,
                    requested,
                    granted,
                    released,
                });
                if grants.len() >= target {
                    reached.notify_one();
                    return anyhow::Ok(());
                }
            }
        }));
    }
    // The first contender to see the target stops; the others are stopped here.
    reached.notified().await;
    for task in &tasks {
        task.abort();
    }
    for task in tasks {
        if let Ok(result) = task.await {
            result?;
        }
    }
    let scripts = evalsha_calls(&mut raw).await? - scripts_before;
    let grants = grants.lock().expect("grants").clone();
    Ok(summarize(kind, contenders, grants, scripts))
}

/// Inversions, Jain index, hand-offs and waits of one row's grants.
fn summarize(kind: Kind, contenders: usize, mut grants: Vec<Grant>, scripts: u64) -> Row {
    grants.sort_by_key(|g| g.granted);

    let slack = Duration::from_micros(env_number("FAIRNESS_BENCH_SLACK_US", 1000));
    let (mut inversions, mut pairs) = (0_u64, 0_u64);
    for (i, later) in grants.iter().enumerate() {
        for earlier in &grants[..i] {
            // `earlier` was granted first; was it requested clearly after `later`?
            if later.requested + slack < earlier.requested {
                inversions += 1;
            }
            if later.requested + slack < earlier.requested
                || earlier.requested + slack < later.requested
            {
                pairs += 1;
            }
        }
    }

    let mut per_contender = vec![0_f64; contenders];
    for g in &grants {
        per_contender[g.contender] += 1.0;
    }
    let sum: f64 = per_contender.iter().sum();
    let squares: f64 = per_contender.iter().map(|x| x * x).sum();
    let jain = sum * sum / (contenders as f64 * squares);

    let mut handoffs: Vec<Duration> = grants
        .windows(2)
        .filter(|w| w[1].requested < w[0].released)
        .map(|w| w[1].granted.saturating_duration_since(w[0].released))
        .collect();
    handoffs.sort();
    let longest_wait = grants
        .iter()
        .map(|g| g.granted - g.requested)
        .max()
        .unwrap_or_default();
    Row {
        kind,
        contenders,
        grants: grants.len(),
        inversions,
        pairs,
        jain,
        handoff_p50: percentile(&handoffs, 0.5),
        handoff_p99: percentile(&handoffs, 0.99),
        longest_wait,
        scripts_per_grant: scripts as f64 / grants.len() as f64,
    }
}

fn micros(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e6)
}

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let server = RedisServer::start()?;
        let target = usize::try_from(env_number("FAIRNESS_BENCH_GRANTS", 2000))?;
        let mut raw = redis::Client::open(server.url())?
            .get_multiplexed_async_connection()
            .await?;
        let floor = rtt_floor(&mut raw).await?;
        println!("round-trip floor (PING p50 through redis-rs): {} µs", micros(floor));
        println!();
        println!(
            "| lock | contenders | grants | inversions / ordered pairs | Jain index | hand-off p50 µs (× RTT) | hand-off p99 µs (× RTT) | longest wait ms | scripts per grant |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for contenders in CONTENDERS {
            for kind in [Kind::Fair, Kind::Plain] {
                let row = run_row(&server, kind, contenders, target).await?;
                let ratio = |d: Duration| d.as_secs_f64() / floor.as_secs_f64();
                println!(
                    "| {} | {} | {} | {} / {} | {:.3} | {} ({:.1}) | {} ({:.1}) | {:.1} | {:.2} |",
                    row.kind.name(),
                    row.contenders,
                    row.grants,
                    row.inversions,
                    row.pairs,
                    row.jain,
                    micros(row.handoff_p50),
                    ratio(row.handoff_p50),
                    micros(row.handoff_p99),
                    ratio(row.handoff_p99),
                    row.longest_wait.as_secs_f64() * 1e3,
                    row.scripts_per_grant,
                );
            }
        }
        anyhow::Ok(())
    })
}

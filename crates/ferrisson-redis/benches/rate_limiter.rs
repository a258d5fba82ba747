//! The rate limiter's decisions per second against a fixed-window floor, measured in the
//! same run on one private redis-server:
//!
//! - **floor**: the cheapest distributed limiter there is, a fixed window: `INCR key` and
//!   `PEXPIRE key 1000` in one pipelined round trip (atomic), the count compared in the
//!   client;
//! - **`RateLimiter::try_acquire(1)`, allowed**: a limiter so fast it always allows (one
//!   script call that reads the server clock, computes and writes the bucket);
//! - **`RateLimiter::try_acquire(1)`, denied**: a limiter whose bucket is empty (the same
//!   script, which then writes nothing).
//!
//! Each at 1 task and at 64 tasks on one `Client` (one multiplexed connection) against
//! one key, in interleaved rounds (floor, allowed, denied, floor, ...) so that the load
//! of the shared machine hits them alike; a row shows the median rate over rounds, the
//! median of the per-round ratios to the floor, and Redis's own time per call (`INFO
//! commandstats`).
//!
//! Run: `cargo bench -p ferrisson-redis --bench rate_limiter` (`RATE_BENCH_ROUNDS`, default 5;
//! `RATE_BENCH_SLICE_MS`, default 600). Prints a markdown table for BENCHMARKS.md.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ferrisson_redis::{Client, Rate, RateDecision, RateLimiter};
use ferrisson_testkit::RedisServer;
use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use redis::aio::MultiplexedConnection;

/// How a contestant makes one decision.
type Call = Arc<dyn Fn() -> BoxFuture<'static, anyhow::Result<()>> + Send + Sync>;

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Redis's total time in commands so far, in microseconds (`INFO commandstats`).
async fn redis_usec(conn: &mut MultiplexedConnection) -> anyhow::Result<u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    Ok(info
        .lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info"))
        .filter_map(|l| {
            l.split("usec=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum())
}

/// Calls per second and Redis µs per call of `call` on `tasks` tasks for `slice`.
async fn measure(
    stats: &mut MultiplexedConnection,
    call: &Call,
    tasks: usize,
    slice: Duration,
) -> anyhow::Result<(f64, f64)> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (call, stop, done) = (Arc::clone(call), Arc::clone(&stop), Arc::clone(&done));
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    call().await?;
                    done.fetch_add(1, Ordering::Relaxed);
                }
                anyhow::Ok(())
            })
        })
        .collect();
    let (usec_before, done_before, started) = (
        redis_usec(stats).await?,
        done.load(Ordering::Relaxed),
        Instant::now(),
    );
    tokio::time::sleep(slice).await;
    let calls = done.load(Ordering::Relaxed) - done_before;
    let elapsed = started.elapsed();
    let usec = redis_usec(stats).await? - usec_before;
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.await??;
    }
    let calls = calls.max(1) as f64;
    Ok((calls / elapsed.as_secs_f64(), usec as f64 / calls))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The fixed-window floor: `INCR` + `PEXPIRE` in one atomic round trip.
fn fixed_window(conn: MultiplexedConnection) -> Call {
    Arc::new(move || {
        let mut conn = conn.clone();
        async move {
            let (count, _): (u64, bool) = redis::pipe()
                .atomic()
                .cmd("INCR")
                .arg("floor:window")
                .cmd("PEXPIRE")
                .arg("floor:window")
                .arg(1000)
                .query_async(&mut conn)
                .await?;
            std::hint::black_box(count < u64::MAX);
            Ok(())
        }
        .boxed()
    })
}

/// `try_acquire(1)` on `limiter`, checking it decides as `allowed` says it should.
fn decisions(limiter: RateLimiter, allowed: bool) -> Call {
    Arc::new(move || {
        let limiter = limiter.clone();
        async move {
            let decision = limiter.try_acquire(1).await?;
            anyhow::ensure!(
                matches!(decision, RateDecision::Allowed { .. }) == allowed,
                "{decision:?}"
            );
            Ok(())
        }
        .boxed()
    })
}

fn main() -> anyhow::Result<()> {
    let rounds = setting("RATE_BENCH_ROUNDS", 5).max(1);
    let slice = Duration::from_millis(setting("RATE_BENCH_SLICE_MS", 600));
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let server = RedisServer::start()?;
            let redis = redis::Client::open(server.url())?;
            let mut stats = redis.get_multiplexed_async_connection().await?;
            let floor_conn = redis.get_multiplexed_async_connection().await?;
            let client = Client::connect(&server.url()).await?;
            let open = client
                .rate_limiter("bench:open", Rate::per_second(1_000_000)?)?
                .with_burst(1_000_000)?;
            let empty =
                client.rate_limiter("bench:empty", Rate::new(1, Duration::from_secs(3600))?)?;
            assert!(empty.try_acquire(1).await?.is_allowed());
            let contestants: [(&str, Call); 3] = [
                (
                    "raw INCR+PEXPIRE fixed window (floor)",
                    fixed_window(floor_conn),
                ),
                (
                    "`RateLimiter::try_acquire(1)`, allowed",
                    decisions(open, true),
                ),
                (
                    "`RateLimiter::try_acquire(1)`, denied",
                    decisions(empty, false),
                ),
            ];
            println!("## Rate limiter ({rounds} rounds of {slice:?} per row)\n");
            println!("| tasks | contestant | calls/s | / floor | Redis µs per call | / floor |");
            println!("|---:|---|---:|---:|---:|---:|");
            for tasks in [1, 64] {
                // Warm-up: scripts loaded, connections busy, allocator settled.
                for (_, call) in &contestants {
                    measure(&mut stats, call, tasks, slice / 5).await?;
                }
                let mut results = vec![Vec::new(); contestants.len()];
                for _ in 0..rounds {
                    for ((_, call), result) in contestants.iter().zip(&mut results) {
                        result.push(measure(&mut stats, call, tasks, slice).await?);
                    }
                }
                let floor = results[0].clone();
                for ((name, _), result) in contestants.iter().zip(&results) {
                    let ratio = |pick: fn(&(f64, f64)) -> f64| {
                        median(
                            result
                                .iter()
                                .zip(&floor)
                                .map(|(r, f)| pick(r) / pick(f))
                                .collect(),
                        )
                    };
                    println!(
                        "| {tasks} | {name} | {:.0} | {:.2} | {:.1} | {:.2} |",
                        median(result.iter().map(|r| r.0).collect()),
                        ratio(|r| r.0),
                        median(result.iter().map(|r| r.1).collect()),
                        ratio(|r| r.1),
                    );
                }
            }
            Ok(())
        })
}

//! Semaphore throughput and latch wake-up latency (M7), against floors measured in the
//! same run on the same private redis-server:
//!
//! - acquire + release pairs per second for `Semaphore` and `ExpirableSemaphore`, with
//!   1 task and with 64 tasks (over 64, 8 and 1 permits), against raw `DECR` + `INCR`
//!   pairs through redis-rs with as many tasks; plus script calls per pair, which shows
//!   what waiting costs in Redis commands;
//! - latch wake-up: time from sending the final `count_down` to the waiter (on another
//!   client) returning, against a raw `PUBLISH` -> RESP3 push on a subscribed redis-rs
//!   connection and against one `PING` round trip.
//!
//! The machine is shared and noisy, so each throughput row alternates short slices of
//! the floor and of the primitive (`SYNC_BENCH_ROUNDS` rounds, default 5, of
//! `SYNC_BENCH_SLICE_MS` each, default 600) and reports medians; the ratio is the median
//! of the per-round ratios.
//!
//! Run: `cargo bench -p ferrisson --bench synchronizers` (`SYNC_BENCH_LATCH_ITERS=N`
//! latch samples, default 500). Prints markdown tables for BENCHMARKS.md.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ferrisson::{Client, ExpirableSemaphore, Semaphore};
use ferrisson_testkit::RedisServer;
use redis::aio::MultiplexedConnection;

const CONTENDERS: usize = 64;
const LEASE: Duration = Duration::from_secs(60);

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// p50 and p99 of `samples`, in microseconds.
fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let at = |q: f64| {
        let index = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples[index].as_secs_f64() * 1e6
    };
    (at(0.50), at(0.99))
}

async fn raw(server: &RedisServer) -> anyhow::Result<MultiplexedConnection> {
    Ok(redis::Client::open(server.url())?
        .get_multiplexed_async_connection()
        .await?)
}

/// How many scripts the server has run so far.
async fn script_calls(conn: &mut MultiplexedConnection) -> anyhow::Result<u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    Ok(info
        .lines()
        .filter_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .filter_map(|rest| rest.split(',').next()?.parse::<u64>().ok())
        .sum())
}

/// Runs `pair` in a loop on `tasks` tasks for `slice`; returns pairs per second.
async fn rate<F, Fut>(tasks: usize, slice: Duration, pair: F) -> anyhow::Result<f64>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send,
{
    let pair = Arc::new(pair);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    // Warm-up: one pair per task, not counted.
    for _ in 0..tasks.min(8) {
        pair().await?;
    }
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (pair, stop, done) = (Arc::clone(&pair), Arc::clone(&stop), Arc::clone(&done));
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    pair().await?;
                    done.fetch_add(1, Ordering::Relaxed);
                }
                anyhow::Ok(())
            })
        })
        .collect();
    let started = Instant::now();
    tokio::time::sleep(slice).await;
    let counted = done.load(Ordering::Relaxed);
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.await??;
    }
    Ok(counted as f64 / elapsed.as_secs_f64())
}

async fn raw_pairs(
    conn: &MultiplexedConnection,
    tasks: usize,
    slice: Duration,
) -> anyhow::Result<f64> {
    let conn = conn.clone();
    let key = format!("raw:{tasks}");
    rate(tasks, slice, move || {
        let mut conn = conn.clone();
        let key = key.clone();
        async move {
            let _: i64 = redis::cmd("DECR").arg(&key).query_async(&mut conn).await?;
            let _: i64 = redis::cmd("INCR").arg(&key).query_async(&mut conn).await?;
            Ok(())
        }
    })
    .await
}

async fn semaphore_pairs(
    semaphore: &Semaphore,
    tasks: usize,
    slice: Duration,
) -> anyhow::Result<f64> {
    let semaphore = semaphore.clone();
    rate(tasks, slice, move || {
        let semaphore = semaphore.clone();
        async move {
            semaphore.acquire().await?.release().await?;
            Ok(())
        }
    })
    .await
}

async fn expirable_pairs(
    semaphore: &ExpirableSemaphore,
    tasks: usize,
    slice: Duration,
) -> anyhow::Result<f64> {
    let semaphore = semaphore.clone();
    rate(tasks, slice, move || {
        let semaphore = semaphore.clone();
        async move {
            semaphore.acquire(LEASE).await?.release().await?;
            Ok(())
        }
    })
    .await
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// One throughput row: rounds of (floor slice, primitive slice); medians of both rates,
/// of their ratio, and script calls per primitive pair.
async fn row<P, PF, R, RF>(
    label: &str,
    tasks: usize,
    conn: &mut MultiplexedConnection,
    rounds: u64,
    slice: Duration,
    floor: RF,
    primitive: PF,
) -> anyhow::Result<()>
where
    RF: Fn() -> R,
    R: Future<Output = anyhow::Result<f64>>,
    PF: Fn() -> P,
    P: Future<Output = anyhow::Result<f64>>,
{
    let (mut floors, mut rates, mut ratios, mut per_pair) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let floor_rate = floor().await?;
        let before = script_calls(conn).await?;
        let pairs = primitive().await?;
        let calls = script_calls(conn).await? - before;
        floors.push(floor_rate);
        rates.push(pairs);
        ratios.push(pairs / floor_rate);
        // Calls also include the warm-up and the pairs in flight at the stop.
        per_pair.push(calls as f64 / (pairs * slice.as_secs_f64()).max(1.0));
    }
    println!(
        "| {label} | {tasks} | {:.0} | {:.0} | {:.2} | {:.2} |",
        median(rates),
        median(floors),
        median(ratios),
        median(per_pair)
    );
    Ok(())
}

async fn throughput(
    server: &RedisServer,
    client: &Client,
    rounds: u64,
    slice: Duration,
) -> anyhow::Result<()> {
    let mut conn = raw(server).await?;
    let floor_conn = raw(server).await?;
    println!(
        "| primitive (permits) | tasks | pairs/s | raw DECR+INCR pairs/s | ratio | script calls per pair |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (tasks, permits) in [
        (1usize, 1u32),
        (CONTENDERS, 64),
        (CONTENDERS, 8),
        (CONTENDERS, 1),
    ] {
        let floor = || raw_pairs(&floor_conn, tasks, slice);
        let semaphore = client.semaphore(&format!("bench:sem:{tasks}:{permits}"))?;
        semaphore.try_set_permits(permits).await?;
        let label = format!("Semaphore ({permits})");
        row(&label, tasks, &mut conn, rounds, slice, floor, || {
            semaphore_pairs(&semaphore, tasks, slice)
        })
        .await?;

        let expirable = client.expirable_semaphore(&format!("bench:xsem:{tasks}:{permits}"))?;
        expirable.try_set_permits(permits).await?;
        let label = format!("ExpirableSemaphore ({permits})");
        row(&label, tasks, &mut conn, rounds, slice, floor, || {
            expirable_pairs(&expirable, tasks, slice)
        })
        .await?;
    }
    Ok(())
}

/// Raw floors for a wake-up: `PUBLISH` to a RESP3 push on another connection, and a
/// `PING` round trip.
async fn raw_wakeup(server: &RedisServer, iters: u64) -> anyhow::Result<((f64, f64), (f64, f64))> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let config = redis::AsyncConnectionConfig::new().set_push_sender(tx);
    let mut subscriber = redis::Client::open(format!("{}/?protocol=resp3", server.url()))?
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    subscriber.subscribe("bench:raw-wakeup").await?;
    let mut publisher = raw(server).await?;
    let mut publish = Vec::new();
    let mut ping = Vec::new();
    for _ in 0..iters {
        let started = Instant::now();
        let _: i64 = redis::cmd("PUBLISH")
            .arg("bench:raw-wakeup")
            .arg("all")
            .query_async(&mut publisher)
            .await?;
        loop {
            let push = rx
                .recv()
                .await
                .ok_or_else(|| anyhow::anyhow!("push channel closed"))?;
            if push.kind == redis::PushKind::Message {
                break;
            }
        }
        publish.push(started.elapsed());
        let started = Instant::now();
        let _: String = redis::cmd("PING").query_async(&mut publisher).await?;
        ping.push(started.elapsed());
    }
    Ok((percentiles(publish), percentiles(ping)))
}

async fn latch_wakeup(server: &RedisServer, iters: u64) -> anyhow::Result<()> {
    let waiter_client = Client::connect(&server.url()).await?;
    let counter_client = Client::connect(&server.url()).await?;
    let mut samples = Vec::new();
    for i in 0..iters {
        let name = format!("bench:latch:{i}");
        let latch = waiter_client.count_down_latch(&name)?;
        latch.try_set_count(1).await?;
        let waiter = tokio::spawn(async move {
            latch.wait().await?;
            anyhow::Ok(Instant::now())
        });
        // Let the waiter reach its wait (a bench may sleep; it only makes the sample honest).
        tokio::time::sleep(Duration::from_millis(3)).await;
        let started = Instant::now();
        counter_client.count_down_latch(&name)?.count_down().await?;
        let woke = waiter.await??;
        samples.push(woke.saturating_duration_since(started));
    }
    let (latch_p50, latch_p99) = percentiles(samples);
    let ((pub_p50, pub_p99), (ping_p50, ping_p99)) = raw_wakeup(server, iters).await?;
    println!("| path | p50 µs | p99 µs | p50 / raw publish->push |");
    println!("|---|---:|---:|---:|");
    println!(
        "| latch: final count_down sent -> waiter returns | {latch_p50:.0} | {latch_p99:.0} | {:.2} |",
        latch_p50 / pub_p50
    );
    println!("| raw PUBLISH -> RESP3 push received | {pub_p50:.0} | {pub_p99:.0} | 1.00 |");
    println!(
        "| raw PING round trip | {ping_p50:.0} | {ping_p99:.0} | {:.2} |",
        ping_p50 / pub_p50
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let rounds = env_number("SYNC_BENCH_ROUNDS", 5).max(1);
    let slice = Duration::from_millis(env_number("SYNC_BENCH_SLICE_MS", 600));
    let iters = env_number("SYNC_BENCH_LATCH_ITERS", 500);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let server = RedisServer::start()?;
        let client = Client::connect(&server.url()).await?;
        println!("## Semaphore throughput ({rounds} rounds of {slice:?} per row and side)\n");
        throughput(&server, &client, rounds, slice).await?;
        println!("\n## Latch wake-up ({iters} samples)\n");
        latch_wakeup(&server, iters).await
    })
}

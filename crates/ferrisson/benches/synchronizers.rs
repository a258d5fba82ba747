//! Semaphore throughput and latch wake-up latency, against floors measured in the same
//! run on the same private redis-server:
//!
//! - acquire + release pairs per second for `Semaphore` and `ExpirableSemaphore`, with
//!   1 task and with 64 tasks (over 64, 8 and 1 permits), against raw `DECR` + `INCR`
//!   pairs through redis-rs with as many tasks; with what each pair costs: client CPU
//!   (this process, `getrusage`), Redis CPU (`INFO cpu`) and Redis calls by command
//!   (`INFO commandstats`, scripts' inner calls included), which also shows what waiting
//!   costs in commands;
//! - latch wake-up: time from sending the final `count_down` to the waiter (on another
//!   client) returning, against a raw `PUBLISH` -> RESP3 push on a subscribed redis-rs
//!   connection and against one `PING` round trip.
//!
//! The machine is shared and noisy, so each throughput table alternates short slices of
//! the floor and of the primitives (`SYNC_BENCH_ROUNDS` rounds, default 5, of
//! `SYNC_BENCH_SLICE_MS` each, default 600) and reports medians; each ratio is the median
//! of the per-round ratios.
//!
//! Run: `cargo bench -p ferrisson --bench synchronizers` (`SYNC_BENCH_LATCH_ITERS=N`
//! latch samples, default 500). Prints markdown tables for BENCHMARKS.md.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrisson::{Client, Lease};
use ferrisson_testkit::RedisServer;
use redis::aio::MultiplexedConnection;

use common::stats::{env_number, p50_p99_us};
use common::throughput::{self, Contestant, Pairs};

const CONTENDERS: usize = 64;
const LEASE: Duration = Duration::from_secs(60);

async fn raw(server: &RedisServer) -> anyhow::Result<MultiplexedConnection> {
    common::raw_connection(&server.url()).await
}

/// Loops `pair` while the slice runs.
macro_rules! pairs_loop {
    ($pairs:expr, $pair:expr) => {
        async move {
            while $pairs.running() {
                $pair;
                $pairs.done();
            }
            anyhow::Ok(())
        }
    };
}

async fn throughput(
    server: &RedisServer,
    client: &Client,
    rounds: usize,
    slice: Duration,
) -> anyhow::Result<()> {
    let mut info = raw(server).await?;
    let floor_conn = raw(server).await?;
    println!("| tasks | permits | primitive | {}", throughput::COLUMNS);
    println!("|---:|---:|---|{}", throughput::ALIGNMENT);
    for (tasks, permits) in [
        (1usize, 1u32),
        (CONTENDERS, 64),
        (CONTENDERS, 8),
        (CONTENDERS, 1),
    ] {
        let semaphore = client.semaphore(&format!("bench:sem:{tasks}:{permits}"))?;
        semaphore.try_set_permits(permits).await?;
        let expirable = client
            .expirable_semaphore(&format!("bench:xsem:{tasks}:{permits}"))?
            .with_lease(Lease::Fixed(LEASE))?;
        expirable.try_set_permits(permits).await?;
        let key = format!("raw:{tasks}:{permits}");
        let floor_conn = floor_conn.clone();
        let contestants = [
            Contestant::new("raw DECR+INCR (floor)", move |_, pairs: Arc<Pairs>| {
                let (mut conn, key) = (floor_conn.clone(), key.clone());
                Ok(pairs_loop!(pairs, {
                    let _: i64 = redis::cmd("DECR").arg(&key).query_async(&mut conn).await?;
                    let _: i64 = redis::cmd("INCR").arg(&key).query_async(&mut conn).await?;
                }))
            }),
            Contestant::new("`Semaphore`", move |_, pairs: Arc<Pairs>| {
                let semaphore = semaphore.clone();
                Ok(pairs_loop!(
                    pairs,
                    semaphore.acquire().await?.release().await?
                ))
            }),
            Contestant::new("`ExpirableSemaphore`", move |_, pairs: Arc<Pairs>| {
                let expirable = expirable.clone();
                Ok(pairs_loop!(
                    pairs,
                    expirable.acquire().await?.release().await?
                ))
            }),
        ];
        let slices = throughput::compare(&mut info, &contestants, tasks, rounds, slice).await?;
        throughput::print_rows(&format!("{tasks} | {permits}"), &contestants, &slices);
    }
    Ok(())
}

/// Raw floors for a wake-up: `PUBLISH` to a RESP3 push on another connection, and a
/// `PING` round trip.
async fn raw_wakeup(server: &RedisServer, iters: u64) -> anyhow::Result<((f64, f64), (f64, f64))> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let config = redis::AsyncConnectionConfig::new()
        .set_push_sender(tx)
        .set_response_timeout(Some(common::RAW_RESPONSE_TIMEOUT));
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
    Ok((p50_p99_us(publish), p50_p99_us(ping)))
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
    let (latch_p50, latch_p99) = p50_p99_us(samples);
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
    let rounds = usize::try_from(env_number("SYNC_BENCH_ROUNDS", 5))?.max(1);
    let slice = Duration::from_millis(env_number("SYNC_BENCH_SLICE_MS", 600));
    let iters = env_number("SYNC_BENCH_LATCH_ITERS", 500);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let server = RedisServer::start()?;
        let client = Client::connect(&server.url()).await?;
        println!("## Semaphore throughput ({rounds} rounds of {slice:?} per row)\n");
        throughput(&server, &client, rounds, slice).await?;
        println!("\n## Latch wake-up ({iters} samples)\n");
        latch_wakeup(&server, iters).await
    })
}

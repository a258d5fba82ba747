//! Semaphore throughput and latch wake-up latency, against floors measured in the same
//! run on the same private redis-server:
//!
//! - acquire + release pairs per second for `Semaphore` and `ExpirableSemaphore`, with
//!   1 task and with 64 tasks (over 64, 8 and 1 permits), against raw `DECR` + `INCR`
//!   pairs through redis-rs with as many tasks; with what each pair costs: client CPU
//!   (this process, `getrusage`), Redis CPU (`INFO cpu`) and Redis calls by command
//!   (`INFO commandstats`, scripts' inner calls included), which also shows what waiting
//!   costs in commands; where no task waits (1 task, and 64 tasks over 64 permits), also
//!   each primitive's own two scripts called raw (redis-rs alone, one multiplexed
//!   connection, `EVALSHA` through `redis::Script`, the library's KEYS and ARGV): the
//!   least any client can spend with those scripts, so the primitive / its raw row is
//!   the library's client overhead and the raw row / the floor the scripts' cost in
//!   Redis (texts from `common/scripts.rs`, checked against what the library loaded);
//!   and the floor's `DECR` and `INCR` each in a minimal script, to tell what being a
//!   script costs from what the semaphores' checks cost;
//! - latch wake-up: time from sending the final `count_down` to the waiter (on another
//!   client) returning, against a raw `PUBLISH` -> RESP3 push on a subscribed redis-rs
//!   connection and against one `PING` round trip.
//!
//! `LOCK_BENCH_COALESCE=0` builds ferrisson's clients with `coalesce_calls(false)`, to
//! compare with the default (several tasks' calls of one script sent together).
//!
//! The machine is shared and noisy, so each throughput table alternates short slices of
//! the floor and of the primitives (`SYNC_BENCH_ROUNDS` rounds, default 5, of
//! `SYNC_BENCH_SLICE_MS` each, default 600) and reports medians; each ratio is the median
//! of the per-round ratios.
//!
//! Run: `cargo bench -p ferrisson-redis --bench synchronizers` (`SYNC_BENCH_LATCH_ITERS=N`
//! latch samples, default 500). Prints markdown tables for BENCHMARKS.md.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrisson_redis::{Client, Lease};
use ferrisson_testkit::RedisServer;
use redis::aio::MultiplexedConnection;

use common::scripts::{self as lua, granted};
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

/// The library's semaphore scripts, for the raw rows.
#[derive(Clone)]
struct RawScripts {
    /// The floor's `DECR` and `INCR`, each in a minimal script (with the shebangs of the
    /// semaphore's scripts): what being a script costs at all.
    minimal_acquire: redis::Script,
    minimal_release: redis::Script,
    semaphore_acquire: redis::Script,
    semaphore_release: redis::Script,
    xsem_acquire: redis::Script,
    xsem_release: redis::Script,
}

impl RawScripts {
    fn new() -> Self {
        Self {
            minimal_acquire: redis::Script::new(
                "#!lua\nredis.call('DECRBY', KEYS[1], ARGV[1])\nreturn 1\n",
            ),
            minimal_release: redis::Script::new(
                "#!lua flags=allow-oom\nredis.call('INCRBY', KEYS[1], ARGV[1])\nreturn 1\n",
            ),
            semaphore_acquire: redis::Script::new(lua::SEMAPHORE_ACQUIRE),
            semaphore_release: redis::Script::new(lua::SEMAPHORE_RELEASE),
            xsem_acquire: redis::Script::new(lua::XSEM_ACQUIRE),
            xsem_release: redis::Script::new(lua::XSEM_RELEASE),
        }
    }

    /// The copies of the library's scripts, by the library's names.
    fn library(&self) -> [(&'static str, &redis::Script); 4] {
        [
            ("semaphore_acquire", &self.semaphore_acquire),
            ("semaphore_release", &self.semaphore_release),
            ("xsem_acquire", &self.xsem_acquire),
            ("xsem_release", &self.xsem_release),
        ]
    }
}

/// One acquire + release of one permit through `Semaphore`'s scripts called raw (or the
/// minimal ones), with the KEYS and ARGV of the library's typed calls
/// (`src/redis/scripts/semaphore.rs`): the counter `{name}`, the release channel
/// `{name}:released`, one permit.
async fn raw_semaphore_pair(
    conn: &mut MultiplexedConnection,
    (acquire, release): (&redis::Script, &redis::Script),
    name: &str,
) -> anyhow::Result<()> {
    let (counter, channel) = (format!("{{{name}}}"), format!("{{{name}}}:released"));
    let taken: i64 = acquire.key(&counter).arg(1).invoke_async(conn).await?;
    anyhow::ensure!(taken == 1, "{counter}: no permit taken ({taken})");
    let returned: i64 = release
        .key(&counter)
        .key(&channel)
        .arg(1)
        .invoke_async(conn)
        .await?;
    anyhow::ensure!(returned == 1, "{counter}: permit not returned ({returned})");
    Ok(())
}

/// One acquire + release of one permit through `ExpirableSemaphore`'s scripts called raw,
/// with the KEYS and ARGV of the library's typed calls (`src/redis/scripts/xsem.rs`): the
/// counter `{name}`, the held permits `{name}:permits`, the channel `{name}:released`,
/// the lease in ms and a 32-hex-digit permit id.
async fn raw_xsem_pair(
    conn: &mut MultiplexedConnection,
    scripts: &RawScripts,
    name: &str,
) -> anyhow::Result<()> {
    let counter = format!("{{{name}}}");
    let (held, channel) = (format!("{counter}:permits"), format!("{counter}:released"));
    let id = format!("{:032x}", rand::random::<u128>());
    let taken: redis::Value = scripts
        .xsem_acquire
        .key(&counter)
        .key(&held)
        .key(&channel)
        .arg(LEASE.as_millis() as u64)
        .arg(&id)
        .invoke_async(conn)
        .await?;
    anyhow::ensure!(granted(&taken), "{counter}: no permit taken ({taken:?})");
    let returned: i64 = scripts
        .xsem_release
        .key(&counter)
        .key(&held)
        .key(&channel)
        .arg(&id)
        .invoke_async(conn)
        .await?;
    anyhow::ensure!(returned == 1, "{counter}: permit not returned ({returned})");
    Ok(())
}

/// The primitives whose scripts have a raw row.
#[derive(Clone, Copy)]
enum Primitive {
    /// `DECR` and `INCR` in minimal scripts.
    Minimal,
    Semaphore,
    Expirable,
}

/// The raw row of `primitive`'s scripts on the shared connection `conn`, over a fresh
/// counter holding `permits` (one per table row).
async fn raw_contestant(
    info: &mut MultiplexedConnection,
    conn: &MultiplexedConnection,
    scripts: &RawScripts,
    primitive: Primitive,
    tasks: usize,
    permits: u32,
) -> anyhow::Result<Contestant> {
    let (title, name) = match primitive {
        Primitive::Minimal => ("raw: DECR, INCR each in a minimal script", "min-raw"),
        Primitive::Semaphore => ("raw: `Semaphore`'s scripts", "sem-raw"),
        Primitive::Expirable => ("raw: `ExpirableSemaphore`'s scripts", "xsem-raw"),
    };
    let name = format!("bench:{name}:{tasks}:{permits}");
    let _: () = redis::cmd("SET")
        .arg(format!("{{{name}}}"))
        .arg(permits)
        .query_async(info)
        .await?;
    let (conn, scripts) = (conn.clone(), scripts.clone());
    Ok(Contestant::new(title, move |_, pairs: Arc<Pairs>| {
        let (mut conn, scripts, name) = (conn.clone(), scripts.clone(), name.clone());
        Ok(pairs_loop!(
            pairs,
            match primitive {
                Primitive::Minimal => {
                    let pair = (&scripts.minimal_acquire, &scripts.minimal_release);
                    raw_semaphore_pair(&mut conn, pair, &name).await?;
                }
                Primitive::Semaphore => {
                    let pair = (&scripts.semaphore_acquire, &scripts.semaphore_release);
                    raw_semaphore_pair(&mut conn, pair, &name).await?;
                }
                Primitive::Expirable => raw_xsem_pair(&mut conn, &scripts, &name).await?,
            }
        ))
    }))
}

async fn throughput(
    server: &RedisServer,
    client: &Client,
    rounds: usize,
    slice: Duration,
) -> anyhow::Result<()> {
    let mut info = raw(server).await?;
    let floor_conn = raw(server).await?;
    let scripts = RawScripts::new();
    // The client loaded every script of the library when it connected, and no raw row
    // ran yet: the raw copies must be in the cache already.
    lua::check_loaded_by_library(std::slice::from_mut(&mut info), &scripts.library()).await?;
    let mut versus = Vec::new();
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
        let lead = format!("{tasks} | {permits}");
        let conn = floor_conn.clone();
        let mut contestants = vec![Contestant::new(
            "raw DECR+INCR (floor)",
            move |_, pairs: Arc<Pairs>| {
                let (mut conn, key) = (conn.clone(), key.clone());
                Ok(pairs_loop!(pairs, {
                    let _: i64 = redis::cmd("DECR").arg(&key).query_async(&mut conn).await?;
                    let _: i64 = redis::cmd("INCR").arg(&key).query_async(&mut conn).await?;
                }))
            },
        )];
        // The raw rows cannot wait (no subscription): only where no task ever has to.
        let mut raw_rows = Vec::new();
        if permits as usize >= tasks {
            for primitive in [
                Primitive::Minimal,
                Primitive::Semaphore,
                Primitive::Expirable,
            ] {
                let row =
                    raw_contestant(&mut info, &floor_conn, &scripts, primitive, tasks, permits);
                raw_rows.push(row.await?);
            }
        }
        let has_raw_rows = !raw_rows.is_empty();
        let mut raw_rows = raw_rows.into_iter();
        contestants.extend(raw_rows.next());
        contestants.extend(raw_rows.next());
        contestants.push(Contestant::new(
            "`Semaphore`",
            move |_, pairs: Arc<Pairs>| {
                let semaphore = semaphore.clone();
                Ok(pairs_loop!(
                    pairs,
                    semaphore.acquire().await?.release().await?
                ))
            },
        ));
        contestants.extend(raw_rows.next());
        contestants.push(Contestant::new(
            "`ExpirableSemaphore`",
            move |_, pairs: Arc<Pairs>| {
                let expirable = expirable.clone();
                Ok(pairs_loop!(
                    pairs,
                    expirable.acquire().await?.release().await?
                ))
            },
        ));
        let slices = throughput::compare(&mut info, &contestants, tasks, rounds, slice).await?;
        throughput::print_rows(&lead, &contestants, &slices);
        if has_raw_rows {
            // floor, minimal scripts, raw semaphore, `Semaphore`, raw expirable,
            // `ExpirableSemaphore`.
            versus.push((lead, contestants, slices));
        }
    }
    println!(
        "\n### Same rounds: each primitive against its own scripts called raw, each raw row against the minimal scripts\n"
    );
    println!("| tasks | permits | rows | {}", throughput::VERSUS_COLUMNS);
    println!("|---:|---:|---|{}", throughput::VERSUS_ALIGNMENT);
    for (lead, contestants, slices) in &versus {
        for (row, reference) in [(3, 2), (5, 4), (2, 1), (4, 1)] {
            throughput::print_versus(lead, contestants, slices, row, reference);
        }
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
    let waiter_client = common::connect(&server.url()).await?;
    let counter_client = common::connect(&server.url()).await?;
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
        let client = common::connect(&server.url()).await?;
        println!(
            "(ferrisson clients coalesce script calls: {})\n",
            if common::coalesce_calls() {
                "on"
            } else {
                "off (LOCK_BENCH_COALESCE=0)"
            }
        );
        println!("## Semaphore throughput ({rounds} rounds of {slice:?} per row)\n");
        throughput(&server, &client, rounds, slice).await?;
        println!("\n## Latch wake-up ({iters} samples)\n");
        latch_wakeup(&server, iters).await
    })
}

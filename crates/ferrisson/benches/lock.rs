//! Lock benchmarks M1–M3 against a raw redis-rs floor measured in the same run.
//!
//! `cargo bench -p ferrisson --bench lock` (add `-- --quick` for a short run). Starts its
//! own redis-server; prints markdown tables for BENCHMARKS.md.
//!
//! - floor: `SET key token NX PX 30000` + a compare-and-delete script (`EVALSHA`) through
//!   one redis-rs multiplexed connection: the least any correct lock can do.
//! - M1: uncontended lock+unlock latency, p50/p99.
//! - M2: lock+unlock throughput on distinct keys at 1/16/64/256 tasks.
//! - M3: contended hand-off: from the holder starting its release to the next waiter
//!   holding, with 2/8/32 contenders each on its own client (as separate processes would
//!   be), and the Redis commands spent per hand-off.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrisson::{Client, Lease};
use ferrisson_testkit::RedisServer;
use redis::aio::MultiplexedConnection;

const CAD: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

struct Config {
    m1_iterations: usize,
    m2_slice: Duration,
    m3_handoffs: usize,
    rounds: usize,
}

fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let config = if quick {
        Config {
            m1_iterations: 500,
            m2_slice: Duration::from_millis(200),
            m3_handoffs: 200,
            rounds: 1,
        }
    } else {
        Config {
            m1_iterations: 4000,
            m2_slice: Duration::from_millis(700),
            m3_handoffs: 2000,
            rounds: 3,
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run(&config))
}

async fn run(config: &Config) -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let mut raw = redis::Client::open(server.url())?
        .get_multiplexed_async_connection()
        .await?;
    let cad = redis::Script::new(CAD);

    // M1: alternate floor and lock in rounds so drift in machine load hits both alike.
    // Redis's own time per pair (commandstats), to tell server work from client work.
    let (mut floor, mut lock, mut simple) = (Vec::new(), Vec::new(), Vec::new());
    let mut server_us = [0.0_f64; 3];
    for _ in 0..config.rounds {
        let before = server_usec(&mut raw).await?;
        floor.extend(m1_floor(&mut raw, &cad, config.m1_iterations).await?);
        let after_floor = server_usec(&mut raw).await?;
        lock.extend(m1_lock(&client, config.m1_iterations).await?);
        let after_lock = server_usec(&mut raw).await?;
        simple.extend(m1_simple(&client, config.m1_iterations).await?);
        let after_simple = server_usec(&mut raw).await?;
        for (slot, (from, to)) in server_us.iter_mut().zip([
            (before, after_floor),
            (after_floor, after_lock),
            (after_lock, after_simple),
        ]) {
            *slot += (to - from) / (config.m1_iterations * config.rounds) as f64;
        }
    }
    let (fp50, fp99) = percentiles(&mut floor);
    println!(
        "## M1 uncontended lock+unlock ({} pairs each)\n",
        floor.len()
    );
    println!(
        "| | p50 | p99 | p50 / floor | p99 / floor | Redis time per pair |\n|---|---:|---:|---:|---:|---:|"
    );
    println!(
        "| raw floor (SET NX PX + CAD script) | {} | {} | 1.00 | 1.00 | {:.1} µs |",
        us(fp50),
        us(fp99),
        server_us[0]
    );
    for (name, samples, server) in [
        ("`Lock` (watchdog)", &mut lock, server_us[1]),
        ("`SimpleLock`", &mut simple, server_us[2]),
    ] {
        let (p50, p99) = percentiles(samples);
        println!(
            "| {name} | {} | {} | {:.2} | {:.2} | {server:.1} µs |",
            us(p50),
            us(p99),
            ratio(p50, fp50),
            ratio(p99, fp99)
        );
    }

    // M2: distinct keys, N tasks, pairs per second.
    println!("\n## M2 distinct-key throughput (lock+unlock pairs/s)\n");
    println!("| tasks | raw floor | `Lock` | ratio |\n|---:|---:|---:|---:|");
    for tasks in [1, 16, 64, 256] {
        let (mut floor_rates, mut lock_rates) = (Vec::new(), Vec::new());
        for _ in 0..config.rounds {
            floor_rates.push(m2_floor(&raw, &cad, tasks, config.m2_slice).await?);
            lock_rates.push(m2_lock(&client, tasks, config.m2_slice).await?);
        }
        let floor_rate = median(&mut floor_rates);
        let lock_rate = median(&mut lock_rates);
        println!(
            "| {tasks} | {floor_rate:.0} | {lock_rate:.0} | {:.2} |",
            lock_rate / floor_rate
        );
    }

    // M3: contended hand-off.
    println!("\n## M3 contended hand-off (release start -> next holder)\n");
    println!(
        "| contenders | p50 | p99 | p50 / floor M1 p50 | commands per hand-off | commands while waiting |\n|---:|---:|---:|---:|---:|---:|"
    );
    for contenders in [2, 8, 32] {
        let result = m3(&server, contenders, config.m3_handoffs).await?;
        let mut samples = result.handoffs;
        let (p50, p99) = percentiles(&mut samples);
        println!(
            "| {contenders} | {} | {} | {:.2} | {:.2} | {} |",
            us(p50),
            us(p99),
            ratio(p50, fp50),
            result.commands_per_handoff,
            result.commands_while_waiting
        );
    }
    Ok(())
}

async fn m1_floor(
    raw: &mut MultiplexedConnection,
    cad: &redis::Script,
    n: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        let token = format!("{:032x}", rand::random::<u128>());
        let started = Instant::now();
        let ok: Option<String> = redis::cmd("SET")
            .arg("floor")
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query_async(raw)
            .await?;
        anyhow::ensure!(ok.is_some(), "floor lock {i} not acquired");
        let _: i64 = cad.key("floor").arg(&token).invoke_async(raw).await?;
        samples.push(started.elapsed());
    }
    Ok(samples)
}

async fn m1_lock(client: &Client, n: usize) -> anyhow::Result<Vec<Duration>> {
    let lock = client.lock("m1")?;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let guard = lock.lock().await?;
        guard.unlock().await?;
        samples.push(started.elapsed());
    }
    Ok(samples)
}

async fn m1_simple(client: &Client, n: usize) -> anyhow::Result<Vec<Duration>> {
    let lock = client.simple_lock("m1-simple")?;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let guard = lock.lock().await?;
        guard.unlock().await?;
        samples.push(started.elapsed());
    }
    Ok(samples)
}

async fn m2_floor(
    raw: &MultiplexedConnection,
    cad: &redis::Script,
    tasks: usize,
    slice: Duration,
) -> anyhow::Result<f64> {
    let deadline = Instant::now() + slice;
    let mut handles = Vec::new();
    for t in 0..tasks {
        let mut raw = raw.clone();
        let cad = cad.clone();
        handles.push(tokio::spawn(async move {
            let key = format!("floor:{t}");
            let mut pairs = 0u64;
            while Instant::now() < deadline {
                let token = format!("{:032x}", rand::random::<u128>());
                let _: Option<String> = redis::cmd("SET")
                    .arg(&key)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000)
                    .query_async(&mut raw)
                    .await?;
                let _: i64 = cad.key(&key).arg(&token).invoke_async(&mut raw).await?;
                pairs += 1;
            }
            anyhow::Ok(pairs)
        }));
    }
    let started = Instant::now();
    let mut total = 0;
    for handle in handles {
        total += handle.await??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64().max(slice.as_secs_f64()))
}

async fn m2_lock(client: &Client, tasks: usize, slice: Duration) -> anyhow::Result<f64> {
    let deadline = Instant::now() + slice;
    let mut handles = Vec::new();
    for t in 0..tasks {
        let lock = client.lock(&format!("m2:{t}"))?;
        handles.push(tokio::spawn(async move {
            let mut pairs = 0u64;
            while Instant::now() < deadline {
                lock.lock().await?.unlock().await?;
                pairs += 1;
            }
            anyhow::Ok(pairs)
        }));
    }
    let started = Instant::now();
    let mut total = 0;
    for handle in handles {
        total += handle.await??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64().max(slice.as_secs_f64()))
}

struct HandOff {
    handoffs: Vec<Duration>,
    commands_per_handoff: f64,
    commands_while_waiting: u64,
}

async fn m3(server: &RedisServer, contenders: usize, handoffs: usize) -> anyhow::Result<HandOff> {
    let mut clients = Vec::new();
    for _ in 0..contenders {
        clients.push(Client::connect(&server.url()).await?);
    }
    let mut info = redis::Client::open(server.url())?
        .get_multiplexed_async_connection()
        .await?;
    // Released at: the instant the previous holder started its unlock.
    let released_at: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let samples: Arc<Mutex<Vec<Duration>>> = Arc::new(Mutex::new(Vec::new()));
    let before = commands_processed(&mut info).await?;
    let per_task = handoffs / contenders;
    let mut handles = Vec::new();
    for client in &clients {
        // A fixed lease: no watchdog renewals mixed into the command count.
        let lock = client
            .lock("m3")?
            .with_lease(Lease::Fixed(Duration::from_secs(30)))?;
        let released_at = Arc::clone(&released_at);
        let samples = Arc::clone(&samples);
        handles.push(tokio::spawn(async move {
            for _ in 0..per_task {
                let guard = lock.lock().await?;
                let now = Instant::now();
                if let Some(at) = released_at
                    .lock()
                    .map_err(|_| anyhow::anyhow!("poisoned"))?
                    .take()
                {
                    samples
                        .lock()
                        .map_err(|_| anyhow::anyhow!("poisoned"))?
                        .push(now - at);
                }
                *released_at
                    .lock()
                    .map_err(|_| anyhow::anyhow!("poisoned"))? = Some(Instant::now());
                guard.unlock().await?;
            }
            anyhow::Ok(())
        }));
    }
    for handle in handles {
        handle.await??;
    }
    let after = commands_processed(&mut info).await?;
    let acquisitions = (per_task * contenders) as u64;
    let commands = after - before - 1;
    let samples = Arc::try_unwrap(samples)
        .map_err(|_| anyhow::anyhow!("samples still shared"))?
        .into_inner()
        .map_err(|_| anyhow::anyhow!("poisoned"))?;
    let commands_while_waiting = commands_while_waiting(&clients, &mut info).await?;
    // Every command beyond acquire + release is a failed try right after a wake-up, or a
    // subscribe/unsubscribe.
    Ok(HandOff {
        handoffs: samples,
        commands_per_handoff: commands as f64 / acquisitions as f64,
        commands_while_waiting,
    })
}

/// One client holds the lock while every other one waits: the commands the server sees
/// in a 300 ms window then are the waiters' (minus the two `INFO` calls).
async fn commands_while_waiting(
    clients: &[Client],
    info: &mut MultiplexedConnection,
) -> anyhow::Result<u64> {
    let holder = clients[0]
        .lock("m3")?
        .with_lease(Lease::Fixed(Duration::from_secs(30)))?;
    let guard = holder.lock().await?;
    let mut waiters = Vec::new();
    for client in &clients[1..] {
        let lock = client.lock("m3")?;
        waiters.push(tokio::spawn(
            async move { lock.lock().await?.unlock().await },
        ));
    }
    // Every waiter's client subscribed, and its attempts done (a waiter tries once more
    // right after subscribing)...
    let channel = "{m3}:released";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, subscribed): (String, usize) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query_async(info)
            .await?;
        let joined = clients[1..].iter().all(|c| c.stats().waiting_channels == 1);
        if joined && subscribed == clients.len() - 1 {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "waiters never subscribed");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // ...and the holder's own subscription from the hand-off phase has lingered out
    // (500 ms), so its UNSUBSCRIBE does not land in the window.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let before = commands_processed(info).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = commands_processed(info).await?;
    guard.unlock().await?;
    for waiter in waiters {
        waiter.await??;
    }
    Ok(after - before - 1)
}

/// Commands clients sent (script calls, subscribe, unsubscribe, INFO), not counting the
/// commands scripts run inside Redis, which `total_commands_processed` would include.
async fn commands_processed(conn: &mut MultiplexedConnection) -> anyhow::Result<u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let calls = |command: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
            .and_then(|rest| rest.split(',').next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(["evalsha", "subscribe", "unsubscribe", "info"]
        .iter()
        .map(|c| calls(c))
        .sum())
}

/// Microseconds Redis spent executing commands so far (all commands, scripts included).
async fn server_usec(conn: &mut MultiplexedConnection) -> anyhow::Result<f64> {
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
                .parse::<f64>()
                .ok()
        })
        .sum())
}

fn percentiles(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.50), at(0.99))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn ratio(value: Duration, floor: Duration) -> f64 {
    value.as_secs_f64() / floor.as_secs_f64()
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

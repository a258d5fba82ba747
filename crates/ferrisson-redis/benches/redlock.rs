//! Redlock and MultiLock cost, against floors measured in the same run on the same
//! private redis-server processes:
//!
//! - latency of one uncontended acquire + release (p50/p99) for Redlock over 1/3/5
//!   nodes and MultiLock over 1/2/3 members, against the raw `SET NX PX` + scripted
//!   compare-and-delete pair on one node and on N nodes at once (join_all);
//! - Redlock with one of five nodes frozen (SIGSTOP), against its per-node timeout;
//! - throughput under contention (20 Redlock clients on 5 nodes; 8 MultiLock clients
//!   in opposite member orders), against one uncontended client.
//!
//! Run: `cargo bench -p ferrisson-redis --bench redlock` (`REDLOCK_BENCH_ITERS=N` latency
//! samples per row, default 2000; `REDLOCK_BENCH_SECONDS=N` per contention row,
//! default 3; `REDLOCK_BENCH_ROUNDS=N` rounds of every table but the frozen-node one,
//! default 3, medians shown). Prints markdown tables for BENCHMARKS.md.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ferrisson_redis::{Client, MultiLock, Redlock};
use ferrisson_testkit::RedisServer;
use futures_util::future::join_all;
use redis::Script;
use redis::aio::MultiplexedConnection;

use common::stats::{env_number, median, p50_p99_us};

const NODES: usize = 5;
const COMPARE_AND_DELETE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// Times `iters` runs of `op` after a short warm-up.
async fn sample<F, Fut>(iters: u64, mut op: F) -> (f64, f64)
where
    F: FnMut(u64) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for i in 0..iters.min(100) {
        op(i).await;
    }
    let mut samples = Vec::with_capacity(iters as usize);
    for i in 0..iters {
        let started = Instant::now();
        op(i).await;
        samples.push(started.elapsed());
    }
    p50_p99_us(samples)
}

/// The raw pair on every connection in `conns` at once.
async fn raw_pair(conns: &[MultiplexedConnection], script: &Script, key: &str, i: u64) {
    let token = format!("t{i}");
    join_all(conns.iter().map(|conn| {
        let mut conn = conn.clone();
        let token = token.clone();
        async move {
            let set: Option<String> = redis::cmd("SET")
                .arg(key)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(10_000)
                .query_async(&mut conn)
                .await
                .expect("SET");
            assert!(set.is_some(), "raw floor key was taken");
            let _: i64 = script
                .key(key)
                .arg(&token)
                .invoke_async(&mut conn)
                .await
                .expect("compare-and-delete");
        }
    }))
    .await;
}

async fn connect_all(servers: &[RedisServer]) -> Vec<Client> {
    let mut clients = Vec::new();
    for server in servers {
        clients.push(Client::connect(&server.url()).await.expect("connect"));
    }
    clients
}

/// Total acquisitions per second of `tasks` tasks, and the fewest and most
/// acquisitions one task made (how evenly the lock was shared).
struct Throughput {
    rate: f64,
    least: u64,
    most: u64,
}

/// Sums per-task counts after the run.
fn throughput(counts: &[Arc<AtomicU64>], elapsed: Duration) -> Throughput {
    let counts: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    Throughput {
        rate: counts.iter().sum::<u64>() as f64 / elapsed.as_secs_f64(),
        least: counts.iter().copied().min().unwrap_or(0),
        most: counts.iter().copied().max().unwrap_or(0),
    }
}

/// Acquisitions of `tasks` independent clients looping lock/unlock on one Redlock.
async fn redlock_throughput(
    servers: &[RedisServer],
    tasks: usize,
    retry: Option<(Duration, Duration)>,
    duration: Duration,
) -> Throughput {
    let stop = Arc::new(AtomicBool::new(false));
    let mut counts = Vec::new();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let mut redlock = Redlock::new(&connect_all(servers).await, "bench:contended")
            .expect("redlock")
            .with_node_timeout(Duration::from_millis(500))
            .expect("timeout");
        if let Some((delay, jitter)) = retry {
            redlock = redlock.with_retry(delay, jitter).expect("retry");
        }
        let stop = Arc::clone(&stop);
        let done = Arc::new(AtomicU64::new(0));
        counts.push(Arc::clone(&done));
        handles.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let guard = redlock.lock().await.expect("lock");
                guard.unlock().await.expect("unlock");
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed();
    let result = throughput(&counts, elapsed);
    for handle in handles {
        handle.await.expect("task");
    }
    result
}

/// Acquisitions of `tasks` clients on the same two locks, half of them naming the
/// members in the opposite order (`multi`), or on one plain lock (`!multi`).
async fn multi_lock_throughput(
    servers: &[RedisServer],
    tasks: usize,
    multi: bool,
    duration: Duration,
) -> Throughput {
    let stop = Arc::new(AtomicBool::new(false));
    let mut counts = Vec::new();
    let mut handles = Vec::new();
    for task in 0..tasks {
        let clients = connect_all(&servers[..2]).await;
        let a = clients[0].lock("bench:a").expect("lock");
        let b = clients[1].lock("bench:b").expect("lock");
        let members = if task % 2 == 0 {
            vec![a, b]
        } else {
            vec![b, a]
        };
        let multi_lock = MultiLock::new(members).expect("multi");
        let single = clients[0].lock("bench:single").expect("lock");
        let stop = Arc::clone(&stop);
        let done = Arc::new(AtomicU64::new(0));
        counts.push(Arc::clone(&done));
        handles.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if multi {
                    multi_lock
                        .lock()
                        .await
                        .expect("lock")
                        .unlock()
                        .await
                        .expect("unlock");
                } else {
                    single
                        .lock()
                        .await
                        .expect("lock")
                        .unlock()
                        .await
                        .expect("unlock");
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed();
    let result = throughput(&counts, elapsed);
    for handle in handles {
        handle.await.expect("task");
    }
    result
}

/// Latency rows (label, p50 µs, p99 µs): raw floors, Redlock over 1/3/5 nodes, Lock,
/// MultiLock over 1/2/3 members. The first row is the floor.
async fn latency_rows(
    clients: &[Client],
    raw: &[MultiplexedConnection],
    iters: u64,
    round: usize,
) -> Vec<(String, (f64, f64))> {
    let script = Script::new(COMPARE_AND_DELETE);
    let mut rows = Vec::new();
    let key = format!("raw:{round}:1");
    let floor = sample(iters, |i| raw_pair(&raw[..1], &script, &key, i)).await;
    rows.push((
        "floor: raw SET NX PX + compare-and-delete, 1 node".to_owned(),
        floor,
    ));
    for n in [3, 5] {
        let key = format!("raw:{round}:{n}");
        let floor_n = sample(iters, |i| raw_pair(&raw[..n], &script, &key, i)).await;
        rows.push((format!("floor on {n} nodes at once (join_all)"), floor_n));
    }
    for n in [1, 3, 5] {
        let redlock = Redlock::new(&clients[..n], &format!("bench:{n}")).expect("redlock");
        let result = sample(iters, |_| async {
            let guard = redlock.try_lock().await.expect("try_lock").expect("free");
            guard.unlock().await.expect("unlock");
        })
        .await;
        rows.push((
            format!("Redlock over {n} node(s): try_lock + unlock"),
            result,
        ));
    }
    let lock = clients[0].lock("bench:lock").expect("lock");
    let lock_row = sample(iters, |_| async {
        lock.lock()
            .await
            .expect("lock")
            .unlock()
            .await
            .expect("unlock");
    })
    .await;
    rows.push(("Lock (watchdog lease): lock + unlock".to_owned(), lock_row));
    for n in [1, 2, 3] {
        let members = (0..n)
            .map(|i| clients[i].lock(&format!("bench:m{n}")).expect("lock"))
            .collect();
        let multi = MultiLock::new(members).expect("multi");
        let result = sample(iters, |_| async {
            multi
                .lock()
                .await
                .expect("lock")
                .unlock()
                .await
                .expect("unlock");
        })
        .await;
        rows.push((
            format!("MultiLock over {n} member(s) on {n} node(s): lock + unlock"),
            result,
        ));
    }
    rows
}

/// Runs the latency rows `rounds` times and prints each row's median p50/p99.
async fn latency_table(
    clients: &[Client],
    raw: &[MultiplexedConnection],
    iters: u64,
    rounds: usize,
) {
    let mut all: Vec<Vec<(String, (f64, f64))>> = Vec::new();
    for round in 0..rounds {
        all.push(latency_rows(clients, raw, iters, round).await);
    }
    println!(
        "## Latency of one uncontended acquire + release (µs; {iters} samples per row, median of {rounds} rounds)\n"
    );
    println!("| operation | p50 µs | p99 µs | p50 / floor | p99 / floor |");
    println!("|---|---|---|---|---|");
    let column = |i: usize, p99: bool| {
        median(
            all.iter()
                .map(|rows| if p99 { rows[i].1.1 } else { rows[i].1.0 })
                .collect(),
        )
    };
    let (floor50, floor99) = (column(0, false), column(0, true));
    for (i, (label, _)) in all[0].iter().enumerate() {
        let (p50, p99) = (column(i, false), column(i, true));
        println!(
            "| {label} | {p50:.0} | {p99:.0} | {:.2}x | {:.2}x |",
            p50 / floor50,
            p99 / floor99
        );
    }
}

/// Redlock over five nodes with one frozen, against the per-node timeout.
async fn frozen_node_table(servers: &[RedisServer], clients: &[Client], iters: u64) {
    let node_timeout = Duration::from_millis(20);
    let redlock = Redlock::new(clients, "bench:paused")
        .expect("redlock")
        .with_node_timeout(node_timeout)
        .expect("timeout");
    servers[4].pause().expect("SIGSTOP");
    let mut acquire = Vec::new();
    for _ in 0..iters {
        let started = Instant::now();
        let guard = redlock.try_lock().await.expect("try_lock").expect("4 of 5");
        acquire.push(started.elapsed());
        guard.unlock().await.expect("unlock");
    }
    servers[4].resume().expect("SIGCONT");
    let (p50, p99) = p50_p99_us(acquire);
    let timeout_us = node_timeout.as_secs_f64() * 1e6;
    println!(
        "\n## One of five nodes frozen (SIGSTOP), per-node timeout {node_timeout:?} ({iters} samples)\n"
    );
    println!("| operation | p50 µs | p99 µs | p50 / node timeout | p99 / node timeout |");
    println!("|---|---|---|---|---|");
    println!(
        "| Redlock over 5 nodes, 1 frozen: try_lock | {p50:.0} | {p99:.0} | {:.2}x | {:.2}x |",
        p50 / timeout_us,
        p99 / timeout_us
    );
}

/// Contended throughput rows (label, result, index of its floor row).
async fn contention_rows(
    servers: &[RedisServer],
    seconds: Duration,
) -> Vec<(&'static str, Throughput, usize)> {
    let fast = Some((Duration::from_millis(2), Duration::from_millis(20)));
    vec![
        (
            "Redlock, 5 nodes, 1 client (floor)",
            redlock_throughput(servers, 1, None, seconds).await,
            0,
        ),
        (
            "Redlock, 5 nodes, 20 clients, default retry 50 ms + up to 50 ms",
            redlock_throughput(servers, 20, None, seconds).await,
            0,
        ),
        (
            "Redlock, 5 nodes, 20 clients, retry 2 ms + up to 20 ms",
            redlock_throughput(servers, 20, fast, seconds).await,
            0,
        ),
        (
            "Lock, 1 client (floor)",
            multi_lock_throughput(servers, 1, false, seconds).await,
            3,
        ),
        (
            "Lock, 8 clients",
            multi_lock_throughput(servers, 8, false, seconds).await,
            3,
        ),
        (
            "MultiLock over 2 nodes, 1 client",
            multi_lock_throughput(servers, 1, true, seconds).await,
            3,
        ),
        (
            "MultiLock over 2 nodes, 8 clients, half in opposite order",
            multi_lock_throughput(servers, 8, true, seconds).await,
            3,
        ),
    ]
}

/// Runs the contention rows `rounds` times; prints, per row, the round with the median
/// rate (its fewest/most per client) and the median ratio to the row's floor.
async fn contention_table(servers: &[RedisServer], seconds: Duration, rounds: usize) {
    let mut all = Vec::new();
    for _ in 0..rounds {
        all.push(contention_rows(servers, seconds).await);
    }
    println!(
        "\n## Throughput under contention ({} s per row, median of {rounds} rounds)\n",
        seconds.as_secs()
    );
    println!("| workload | acquisitions/s | / floor row | fewest / most by one client |");
    println!("|---|---|---|---|");
    for i in 0..all[0].len() {
        let (label, _, floor) = all[0][i];
        let ratio = median(
            all.iter()
                .map(|rows| rows[i].1.rate / rows[floor].1.rate)
                .collect(),
        );
        let mut by_rate: Vec<&Throughput> = all.iter().map(|rows| &rows[i].1).collect();
        by_rate.sort_by(|a, b| a.rate.total_cmp(&b.rate));
        let mid = by_rate[by_rate.len() / 2];
        println!(
            "| {label} | {:.0} | {ratio:.2}x | {} / {} |",
            mid.rate, mid.least, mid.most
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let iters = env_number("REDLOCK_BENCH_ITERS", 2000);
    let seconds = Duration::from_secs(env_number("REDLOCK_BENCH_SECONDS", 3));
    let rounds = env_number("REDLOCK_BENCH_ROUNDS", 3).max(1) as usize;
    let servers: Vec<RedisServer> = (0..NODES)
        .map(|_| RedisServer::start().expect("redis-server"))
        .collect();
    let clients = connect_all(&servers).await;
    let mut raw = Vec::new();
    for server in &servers {
        let client = redis::Client::open(server.url()).expect("url");
        raw.push(
            client
                .get_multiplexed_async_connection()
                .await
                .expect("raw connection"),
        );
    }
    latency_table(&clients, &raw, iters, rounds).await;
    frozen_node_table(&servers, &clients, iters.min(100)).await;
    contention_table(&servers, seconds, rounds).await;
}

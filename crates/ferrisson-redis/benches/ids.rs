//! Id generation: `IdGenerator` per id and batched against raw `INCR` through
//! redis-rs, measured in the same run against one private redis-server.
//!
//! Run: `cargo bench -p ferrisson-redis --bench ids` (`IDS_BENCH_MILLIS=N` per figure, default
//! 1000; `IDS_BENCH_ROUNDS=N` interleaved rounds, default 5, the median is shown;
//! `IDS_BENCH_TASKS=1,64` to measure only some task counts).
//! Prints markdown tables for BENCHMARKS.md.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ferrisson_redis::{Client, IdGenerator};
use ferrisson_testkit::RedisServer;
use redis::aio::{ConnectionManager, MultiplexedConnection};

use common::cost::client_cpu;
use common::stats::{env_number, median};

/// Task counts measured unless `IDS_BENCH_TASKS` (e.g. `1,64`) says otherwise.
const TASKS: [usize; 4] = [1, 16, 64, 300];

fn task_counts() -> Vec<usize> {
    std::env::var("IDS_BENCH_TASKS")
        .ok()
        .map(|list| {
            list.split(',')
                .filter_map(|t| t.trim().parse().ok())
                .collect::<Vec<_>>()
        })
        .filter(|counts| !counts.is_empty())
        .unwrap_or_else(|| TASKS.to_vec())
}
/// How many operations a task does between two looks at the stop flag.
const STRIDE: usize = 64;

#[derive(Clone, Copy)]
enum Mode {
    RawIncr,
    RawIncrManager,
    PerId,
    Batched,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Self::RawIncr => "raw INCR (redis-rs)",
            Self::RawIncrManager => "raw INCR (ConnectionManager, RESP3)",
            Self::PerId => "IdGenerator per id",
            Self::Batched => "IdGenerator batched",
        }
    }
}

struct Setup {
    raw: MultiplexedConnection,
    manager: ConnectionManager,
    per_id: IdGenerator,
    batched: IdGenerator,
}

/// One measurement: operations per wall-clock second, and per second of this process's
/// CPU time (which other processes on the machine do not dilute).
#[derive(Clone, Copy)]
struct Rate {
    wall: f64,
    cpu: f64,
}

/// How fast `tasks` tasks looping on `mode` for `duration` go.
async fn throughput(
    setup: &Setup,
    mode: Mode,
    tasks: usize,
    duration: Duration,
    run: usize,
) -> anyhow::Result<Rate> {
    let stop = Arc::new(AtomicBool::new(false));
    let prefix = format!("bench{run}");
    let started = Instant::now();
    let cpu_started = client_cpu()?;
    let mut handles = Vec::with_capacity(tasks);
    for _ in 0..tasks {
        let stop = Arc::clone(&stop);
        let prefix = prefix.clone();
        let mut raw = setup.raw.clone();
        let mut manager = setup.manager.clone();
        let per_id = setup.per_id.clone();
        let batched = setup.batched.clone();
        handles.push(tokio::spawn(async move {
            let key = format!("raw:{prefix}");
            let mut done = 0_u64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..STRIDE {
                    match mode {
                        Mode::RawIncr => {
                            let _: i64 = redis::cmd("INCR")
                                .arg(&key)
                                .query_async(&mut raw)
                                .await
                                .expect("INCR");
                        }
                        Mode::RawIncrManager => {
                            let _: i64 = redis::cmd("INCR")
                                .arg(&key)
                                .query_async(&mut manager)
                                .await
                                .expect("INCR");
                        }
                        Mode::PerId => {
                            per_id.next_id(&prefix).await.expect("per-id id");
                        }
                        Mode::Batched => {
                            batched.next_id(&prefix).await.expect("batched id");
                        }
                    }
                }
                done += STRIDE as u64;
            }
            done
        }));
    }
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for handle in handles {
        total += handle.await.expect("bench task");
    }
    let cpu = client_cpu()?
        .saturating_sub(cpu_started)
        .as_secs_f64()
        .max(0.01);
    Ok(Rate {
        wall: total as f64 / started.elapsed().as_secs_f64(),
        cpu: total as f64 / cpu,
    })
}

/// 300 tasks x 100 ids, all collected: the wall time.
async fn three_hundred_tasks(ids: &IdGenerator, prefix: &str) -> Duration {
    let started = Instant::now();
    let handles: Vec<_> = (0..300)
        .map(|_| {
            let ids = ids.clone();
            let prefix = prefix.to_owned();
            tokio::spawn(async move {
                let mut got = Vec::with_capacity(100);
                for _ in 0..100 {
                    got.push(ids.next_id(&prefix).await.expect("id"));
                }
                got
            })
        })
        .collect();
    let mut all = std::collections::HashSet::with_capacity(30_000);
    for handle in handles {
        all.extend(handle.await.expect("a task of the 300"));
    }
    let took = started.elapsed();
    assert_eq!(all.len(), 30_000, "duplicate ids");
    took
}

/// The 1-minute load average, to judge how noisy the machine was.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

fn main() -> anyhow::Result<()> {
    let millis = env_number("IDS_BENCH_MILLIS", 1000);
    let rounds = env_number("IDS_BENCH_ROUNDS", 5).max(1) as usize;
    let duration = Duration::from_millis(millis);
    let load_before = load_average();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let server = RedisServer::start()?;
    runtime.block_on(async {
        let client = Client::connect(&server.url()).await?;
        let setup = Setup {
            raw: common::raw_connection(&server.url()).await?,
            manager: {
                let info = redis::IntoConnectionInfo::into_connection_info(server.url())?;
                let settings = info
                    .redis_settings()
                    .clone()
                    .set_protocol(redis::ProtocolVersion::RESP3);
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_response_timeout(Some(common::RAW_RESPONSE_TIMEOUT));
                ConnectionManager::new_with_config(
                    redis::Client::open(info.set_redis_settings(settings))?,
                    config,
                )
                .await?
            },
            per_id: client.id_generator(),
            batched: IdGenerator::builder(&client).batched().build()?,
        };
        let modes = [
            Mode::RawIncr,
            Mode::RawIncrManager,
            Mode::PerId,
            Mode::Batched,
        ];
        // results[task index][mode] = one figure per round
        let task_counts = task_counts();
        let mut results = vec![vec![Vec::new(); modes.len()]; task_counts.len()];
        let mut run = 0;
        for _ in 0..rounds {
            for (t, &tasks) in task_counts.iter().enumerate() {
                for (m, &mode) in modes.iter().enumerate() {
                    run += 1;
                    results[t][m].push(throughput(&setup, mode, tasks, duration, run).await?);
                }
            }
        }
        let mut collect_times = [Vec::new(), Vec::new()];
        for round in 0..rounds.max(5) {
            for (i, ids) in [&setup.per_id, &setup.batched].into_iter().enumerate() {
                collect_times[i].push(
                    three_hundred_tasks(ids, &format!("tasks{round}"))
                        .await
                        .as_secs_f64(),
                );
            }
        }

        print_report(
            &task_counts,
            modes,
            &results,
            &collect_times,
            rounds,
            millis,
            &load_before,
        );
        anyhow::Ok(())
    })
}

/// Prints the figures as markdown tables.
fn print_report(
    task_counts: &[usize],
    modes: [Mode; 4],
    results: &[Vec<Vec<Rate>>],
    collect_times: &[Vec<f64>; 2],
    rounds: usize,
    millis: u64,
    load_before: &str,
) {
    println!(
        "{} workers; {rounds} interleaved rounds of {millis} ms per figure, median shown; \
         load average before: {load_before}, after: {}\n",
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
        load_average()
    );
    println!(
        "| tasks | {} | {} | {} | {} | per id / raw | per id / manager | batched / raw |",
        modes[0].name(),
        modes[1].name(),
        modes[2].name(),
        modes[3].name()
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (t, &tasks) in task_counts.iter().enumerate() {
        let wall = |m: usize| median(results[t][m].iter().map(|r: &Rate| r.wall).collect());
        // Ratios are taken within a round, then the median: drift between rounds
        // (other load on the machine) cancels out.
        let ratio = |a: usize, b: usize| {
            median(
                results[t][a]
                    .iter()
                    .zip(&results[t][b])
                    .map(|(x, y)| x.wall / y.wall)
                    .collect(),
            )
        };
        println!(
            "| {tasks} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2}x | {:.2}x | {:.0}x |",
            wall(0),
            wall(1),
            wall(2),
            wall(3),
            ratio(2, 0),
            ratio(2, 1),
            ratio(3, 0)
        );
    }
    println!();
    // Client-side cost: CPU time of this process (not of redis-server) per id.
    println!(
        "| tasks | client CPU ns per id: {} | {} | {} | {} | batched, ids per CPU-second |",
        modes[0].name(),
        modes[1].name(),
        modes[2].name(),
        modes[3].name()
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for (t, &tasks) in task_counts.iter().enumerate() {
        let cpu = |m: usize| median(results[t][m].iter().map(|r| r.cpu).collect());
        println!(
            "| {tasks} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
            1e9 / cpu(0),
            1e9 / cpu(1),
            1e9 / cpu(2),
            1e9 / cpu(3),
            cpu(3)
        );
    }
    println!();
    println!("| 300 tasks x 100 ids | per id | batched |");
    println!("|---|---:|---:|");
    let [per_id, batched] = collect_times.clone().map(|s| median(s) * 1000.0);
    println!(
        "| wall time (median of {}) | {per_id:.1} ms | {batched:.1} ms |",
        rounds.max(5)
    );
}

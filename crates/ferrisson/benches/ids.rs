//! M7, id generation: `IdGenerator` per id and batched against raw `INCR` through
//! redis-rs, measured in the same run against one private redis-server.
//!
//! Run: `cargo bench -p ferrisson --bench ids` (`IDS_BENCH_SECONDS=N` per measurement,
//! default 1; `IDS_BENCH_ROUNDS=N` interleaved rounds, default 3, the median is shown).
//! Prints markdown tables for BENCHMARKS.md.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ferrisson::{Client, IdGenerator};
use ferrisson_testkit::RedisServer;
use redis::aio::{ConnectionManager, MultiplexedConnection};

const TASKS: [usize; 4] = [1, 16, 64, 300];
/// How many operations a task does between two looks at the stop flag.
const STRIDE: usize = 64;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

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

/// Operations per second of `tasks` tasks looping on `mode` for `duration`.
async fn throughput(
    setup: &Setup,
    mode: Mode,
    tasks: usize,
    duration: Duration,
    run: usize,
) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let prefix = format!("bench{run}");
    let started = Instant::now();
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
    total as f64 / started.elapsed().as_secs_f64()
}

/// The seed's test: 300 tasks x 100 ids, all collected; the wall time.
async fn seed_test(ids: &IdGenerator, prefix: &str) -> Duration {
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
        all.extend(handle.await.expect("seed task"));
    }
    let took = started.elapsed();
    assert_eq!(all.len(), 30_000, "duplicate ids");
    took
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let seconds = env_number("IDS_BENCH_SECONDS", 1);
    let rounds = env_number("IDS_BENCH_ROUNDS", 3).max(1) as usize;
    let duration = Duration::from_secs(seconds);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let server = RedisServer::start()?;
    runtime.block_on(async {
        let client = Client::connect(&server.url()).await?;
        let setup = Setup {
            raw: redis::Client::open(server.url())?
                .get_multiplexed_async_connection()
                .await?,
            manager: {
                let info = redis::IntoConnectionInfo::into_connection_info(server.url())?;
                let settings = info.redis_settings().clone().set_protocol(redis::ProtocolVersion::RESP3);
                ConnectionManager::new(redis::Client::open(info.set_redis_settings(settings))?).await?
            },
            per_id: client.id_generator(),
            batched: IdGenerator::builder(&client).batched().build()?,
        };
        let modes = [Mode::RawIncr, Mode::RawIncrManager, Mode::PerId, Mode::Batched];
        // results[task index][mode] = one figure per round
        let mut results = vec![vec![Vec::new(); modes.len()]; TASKS.len()];
        let mut run = 0;
        for _ in 0..rounds {
            for (t, &tasks) in TASKS.iter().enumerate() {
                for (m, &mode) in modes.iter().enumerate() {
                    run += 1;
                    results[t][m].push(throughput(&setup, mode, tasks, duration, run).await);
                }
            }
        }
        let mut seed = [Vec::new(), Vec::new()];
        for round in 0..rounds.max(5) {
            for (i, ids) in [&setup.per_id, &setup.batched].into_iter().enumerate() {
                seed[i].push(seed_test(ids, &format!("seed{round}")).await.as_secs_f64());
            }
        }

        println!(
            "{} workers; {rounds} interleaved rounds of {seconds} s each, median shown\n",
            std::thread::available_parallelism().map_or(0, std::num::NonZero::get)
        );
        println!(
            "| tasks | {} | {} | {} | {} | per id / raw | per id / manager | batched / raw |",
            modes[0].name(),
            modes[1].name(),
            modes[2].name(),
            modes[3].name()
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
        for (t, &tasks) in TASKS.iter().enumerate() {
            let [raw, manager, per_id, batched] = [0, 1, 2, 3].map(|m| median(results[t][m].clone()));
            println!(
                "| {tasks} | {raw:.0} | {manager:.0} | {per_id:.0} | {batched:.0} | {:.2}x | {:.2}x | {:.0}x |",
                per_id / raw,
                per_id / manager,
                batched / raw
            );
        }
        println!();
        println!("| seed test, 300 tasks x 100 ids | per id | batched |");
        println!("|---|---:|---:|");
        let [per_id, batched] = seed.map(|s| median(s) * 1000.0);
        println!("| wall time (median of {}) | {per_id:.1} ms | {batched:.1} ms |", rounds.max(5));
        anyhow::Ok(())
    })
}

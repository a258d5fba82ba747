//! What fencing leaves in Redis: memory and keys after many distinct lock names were each
//! taken once and released.
//!
//! `cargo bench -p ferrisson-redis --bench fence_memory` (add `-- --names N` for another count
//! than 1,000,000). Starts its own redis-server; prints a markdown table for
//! BENCHMARKS.md. The floor is the same server before any lock was taken.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ferrisson_redis::{Client, Lease};
use ferrisson_testkit::RedisServer;

/// Tasks taking locks at once (each lock is taken by exactly one of them).
const TASKS: usize = 64;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let names = args
        .iter()
        .position(|a| a == "--names")
        .and_then(|i| args.get(i + 1))
        .map_or(Ok(1_000_000), |n| n.parse::<usize>())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run(names))
}

async fn run(names: usize) -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let before = server.used_memory()?;
    let keys_before = dbsize(&server)?;
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let client = client.clone();
        let next = Arc::clone(&next);
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= names {
                    return anyhow::Ok(());
                }
                let lock = client
                    .lock(&format!("user:{i}"))?
                    .with_lease(Lease::Fixed(Duration::from_secs(30)))?;
                lock.lock().await?.unlock().await?;
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    let elapsed = started.elapsed();
    let after = server.used_memory()?;
    let keys_after = dbsize(&server)?;
    println!("{names} distinct lock names, each taken once and released, in {elapsed:.1?}");
    println!();
    println!("| | used_memory | keys |");
    println!("|---|---:|---:|");
    println!("| empty server (floor) | {} | {keys_before} |", mib(before));
    println!("| after the locks | {} | {keys_after} |", mib(after));
    println!(
        "| left by the locks | {} | {} |",
        mib(after.saturating_sub(before)),
        keys_after.saturating_sub(keys_before)
    );
    Ok(())
}

fn dbsize(server: &RedisServer) -> anyhow::Result<u64> {
    Ok(server
        .command(&["DBSIZE"])?
        .trim_start_matches(':')
        .parse()?)
}

fn mib(bytes: u64) -> String {
    #[expect(clippy::cast_precision_loss, reason = "a figure for a table")]
    let mib = bytes as f64 / (1024.0 * 1024.0);
    format!("{mib:.1} MiB")
}

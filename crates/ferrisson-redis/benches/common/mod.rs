//! Measuring pieces the bench binaries share: what a stretch of work cost (client CPU,
//! Redis CPU, Redis commands), interleaved throughput slices against a floor, contended
//! hand-offs, and the small statistics every table uses.
//!
//! Each bench binary compiles this module and uses only part of it.
#![allow(dead_code)]

pub mod cost;
pub mod handoff;
pub mod scripts;
pub mod stats;
pub mod throughput;
pub mod topology;

use std::time::Duration;

use redis::aio::MultiplexedConnection;

/// How long a raw connection waits for a reply. redis-rs's default (500 ms) is shorter
/// than the stalls a loaded 2-core machine gives a bench with 64 tasks in flight.
pub const RAW_RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether the benches' ferrisson clients coalesce script calls: `LOCK_BENCH_COALESCE=0`
/// turns it off (on unless told: the benches measure it; a client's default is off).
pub fn coalesce_calls() -> bool {
    std::env::var("LOCK_BENCH_COALESCE").map_or(true, |v| v != "0")
}

/// A ferrisson client for `url`, coalescing script calls or not per [`coalesce_calls`].
///
/// # Errors
///
/// When it cannot connect.
pub async fn connect(url: &str) -> ferrisson_redis::Result<ferrisson_redis::Client> {
    ferrisson_redis::Client::builder(url)
        .coalesce_calls(coalesce_calls())
        .connect()
        .await
}

/// p50 of `samples` `PING` round trips through `conn` (after a few unmeasured ones): the
/// floor of anything that needs a reply, measured when the figure it divides is.
pub async fn ping_p50(
    conn: &mut MultiplexedConnection,
    samples: usize,
) -> anyhow::Result<Duration> {
    let mut taken = Vec::with_capacity(samples);
    for i in 0..samples + samples / 10 {
        let started = std::time::Instant::now();
        let _: String = redis::cmd("PING").query_async(conn).await?;
        if i >= samples / 10 {
            taken.push(started.elapsed());
        }
    }
    Ok(stats::p50_p99(&mut taken).0)
}

/// A redis-rs multiplexed connection to `url` with [`RAW_RESPONSE_TIMEOUT`]: the floors'
/// connection, and the one that reads Redis's counters.
pub async fn raw_connection(url: &str) -> anyhow::Result<MultiplexedConnection> {
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(RAW_RESPONSE_TIMEOUT));
    Ok(redis::Client::open(url)?
        .get_multiplexed_async_connection_with_config(&config)
        .await?)
}

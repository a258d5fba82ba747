//! Contended hand-off and fairness of `FairLock` against `Lock`, with 8 and 32
//! contenders, each on its own `Client` (its own connection and subscription, as separate
//! processes would be), against one private redis-server.
//!
//! Every contender loops: request, acquire, hold 3 ms, release, pause 1 ms, request again
//! (`FAIRNESS_BENCH_HOLD_US`, `FAIRNESS_BENCH_PAUSE_US`). Per grant the bench records when
//! the request started, when it was granted and when its release started (one process,
//! so one monotonic clock). From that:
//!
//! - **inversions**: pairs of requests where `a` started more than `FAIRNESS_BENCH_SLACK_US`
//!   (default 1000 µs, far above one round trip) before `b`, yet `b` was granted first;
//! - **Jain index** of the grants per contender, (Σx)² / (n·Σx²): 1.0 when every
//!   contender got the same share, 1/n when one got everything;
//! - **hand-off**: from the start of a release to the next grant, counted only when the
//!   next grantee is another contender that asked at least 500 µs before the release
//!   started (`FAIRNESS_BENCH_WAITED_US`), so was waiting for it (not a contender
//!   re-acquiring its own lock, nor one whose request was still in flight), p50 and p99, as a
//!   ratio to the round-trip floor measured in the same run (`PING` p50 through redis-rs);
//! - **longest wait** from request to grant;
//! - **script calls per grant** (`EVALSHA` and `EVAL` on the server): 2.00 is one acquire and one
//!   release, anything above is failed retries and waiter keep-alives.
//!
//! Run: `cargo bench -p ferrisson-redis --bench fairness` (`FAIRNESS_BENCH_GRANTS=N` grants per
//! row, default 2000). Prints a markdown table for BENCHMARKS.md.

mod common;

use std::time::Duration;

use ferrisson_testkit::RedisServer;
use redis::aio::MultiplexedConnection;

use common::handoff::{Contention, LockKind, Pace, run_contention};
use common::stats::{env_number, micros, percentile};

const CONTENDERS: [usize; 2] = [8, 32];

struct Row {
    kind: LockKind,
    contenders: usize,
    grants: usize,
    inversions: u64,
    pairs: u64,
    jain: f64,
    handoff_p50: Duration,
    handoff_p99: Duration,
    longest_wait: Duration,
    scripts_per_grant: f64,
}

async fn run_row(
    server: &RedisServer,
    info: &mut MultiplexedConnection,
    kind: LockKind,
    contenders: usize,
    target: usize,
) -> anyhow::Result<Row> {
    let name = format!("bench-{}-{contenders}", kind.name());
    let pace = Pace::from_env("FAIRNESS_BENCH");
    let run = run_contention(&server.url(), info, kind, contenders, &name, target, pace).await?;
    let scripts = ["evalsha", "eval"]
        .iter()
        .filter_map(|c| run.cost.calls.get(*c))
        .sum();
    Ok(summarize(kind, contenders, run, scripts))
}

/// Inversions, Jain index, hand-offs and waits of one row's grants.
fn summarize(kind: LockKind, contenders: usize, run: Contention, scripts: u64) -> Row {
    let grants = &run.grants;
    let slack = Duration::from_micros(env_number("FAIRNESS_BENCH_SLACK_US", 1000));
    let (mut inversions, mut pairs) = (0_u64, 0_u64);
    for (i, later) in grants.iter().enumerate() {
        for earlier in &grants[..i] {
            // `earlier` was granted first; was it requested clearly after `later`?
            if later.requested + slack < earlier.requested {
                inversions += 1;
            }
            if later.requested + slack < earlier.requested
                || earlier.requested + slack < later.requested
            {
                pairs += 1;
            }
        }
    }

    let mut per_contender = vec![0_f64; contenders];
    for g in grants {
        per_contender[g.contender] += 1.0;
    }
    let sum: f64 = per_contender.iter().sum();
    let squares: f64 = per_contender.iter().map(|x| x * x).sum();
    let jain = sum * sum / (contenders as f64 * squares);

    let mut handoffs = run.handoffs;
    handoffs.sort();
    let longest_wait = grants
        .iter()
        .map(|g| g.granted - g.requested)
        .max()
        .unwrap_or_default();
    Row {
        kind,
        contenders,
        grants: grants.len(),
        inversions,
        pairs,
        jain,
        handoff_p50: percentile(&handoffs, 0.5),
        handoff_p99: percentile(&handoffs, 0.99),
        longest_wait,
        scripts_per_grant: scripts as f64 / grants.len() as f64,
    }
}

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let server = RedisServer::start()?;
        let target = usize::try_from(env_number("FAIRNESS_BENCH_GRANTS", 2000))?;
        let mut raw = common::raw_connection(&server.url()).await?;
        let floor = common::ping_p50(&mut raw, 2000).await?;
        println!("round-trip floor (PING p50 through redis-rs): {} µs", micros(floor));
        println!();
        println!(
            "| lock | contenders | grants | inversions / ordered pairs | Jain index | hand-off p50 µs (× RTT) | hand-off p99 µs (× RTT) | longest wait ms | scripts per grant |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for contenders in CONTENDERS {
            for kind in [LockKind::Fair, LockKind::Lock] {
                let row = run_row(&server, &mut raw, kind, contenders, target).await?;
                let ratio = |d: Duration| d.as_secs_f64() / floor.as_secs_f64();
                println!(
                    "| {} | {} | {} | {} / {} | {:.3} | {} ({:.1}) | {} ({:.1}) | {:.1} | {:.2} |",
                    row.kind.name(),
                    row.contenders,
                    row.grants,
                    row.inversions,
                    row.pairs,
                    row.jain,
                    micros(row.handoff_p50),
                    ratio(row.handoff_p50),
                    micros(row.handoff_p99),
                    ratio(row.handoff_p99),
                    row.longest_wait.as_secs_f64() * 1e3,
                    row.scripts_per_grant,
                );
            }
        }
        anyhow::Ok(())
    })
}

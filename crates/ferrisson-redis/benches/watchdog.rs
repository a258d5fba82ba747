//! What the watchdog costs to keep 1,000 and 10,000 locks alive, against a raw
//! redis-rs floor measured in the same run.
//!
//! `cargo bench -p ferrisson-redis --bench watchdog` (add `-- --quick` for a short run: the 3 s
//! lease only, a one-lease window; `-- --topology sentinel` or `-- --topology cluster`
//! for a Sentinel group or a 3-master Redis Cluster instead of one server, see
//! `common/topology.rs`). Starts its own Redis processes; prints markdown tables for
//! BENCHMARKS.md.
//!
//! On a cluster the floor keeps one connection per master and renews each key on its own
//! master (one pipeline of up to 100 `PEXPIRE` per 100 keys of a master); a script call
//! with declared keys may only touch keys of one hash slot there, so the bare script
//! sends one call per slot of up to 100 keys. The watchdog sends one script call per 100
//! holds of a master (its keys as arguments, in any slots of that master), as many as the
//! floor's pipelines, and all calls for one master together in one pipeline. Redis counts
//! calls, not pipelines: the watchdog's requests/s column counts its `EVALSHA` calls. The floor's keys hash to the same slots as the locks'
//! (`watchdog:floor:{watchdog:lock:N}`). Redis's counters are summed over the masters.
//!
//! For each lease (the client's default, 30 s, then 3 s to make the numbers bigger) and
//! each number of locks:
//!
//! - **floor**: the same number of plain keys (`SET key v PX lease`) kept alive by the
//!   cheapest loop that does it: every lease/3, one pipeline of 100 `PEXPIRE` per 100
//!   keys, all pipelines sent at once on one redis-rs multiplexed connection. It checks
//!   nothing (no owner), so it is a floor, not a correct lock.
//! - **bare script**: the same keys, every lease/3, one `EVALSHA` per 100 keys of a script
//!   that only runs `PEXPIRE` on each (no owner check): what running the renewal through
//!   Lua costs by itself, to tell it from the owner check and the client's bookkeeping.
//! - **watchdog**: one `Client` with that watchdog lease holds the locks (distinct
//!   names, acquired by 64 tasks at once) and does nothing else.
//!
//! Both are measured over the same steady-state window (3 leases; it starts half a
//! renewal period after a renewal round, so it holds 9 whole rounds), while the bench
//! process does nothing else:
//!
//! - **requests/s**: renewal requests: `EVALSHA` calls for the watchdog (Redis's
//!   `INFO commandstats`) for the watchdog and the bare script, pipelines sent for the
//!   floor (Redis cannot see pipelines);
//! - **renewals/s**: `PEXPIRE` calls Redis executed (top-level for the floor, inside the
//!   script otherwise: Redis 7 counts both in `commandstats`);
//! - **client CPU**: user+sys CPU time of this process (`getrusage(RUSAGE_SELF)`) per
//!   second of window;
//! - **Redis command time**: the `usec` Redis spent in the renewal commands (`EVALSHA`,
//!   which includes the script's inner calls, or `PEXPIRE` for the floor), per second
//!   (wall-clock time inside Redis: it grows when other processes take Redis's core);
//! - **Redis CPU**: `used_cpu_user` + `used_cpu_sys` of the server (`INFO cpu`) per
//!   second: command time plus reading requests and writing replies, plus its idle
//!   housekeeping (shown on its own in the idle row).
//!
//! At the end of each window every guard must still be `is_held()` (and every floor key
//! must still exist); the table says how many were, and the least lease left on any.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ferrisson_redis::{Client, LockGuard};
use ferrisson_testkit::key_slot;
use futures_util::future::join_all;
use futures_util::{StreamExt, TryStreamExt};
use redis::aio::MultiplexedConnection;
use tokio::sync::oneshot;
use tokio::time::Instant;

use common::cost::Snapshot;
use common::topology::{Deployment, Masters, Topology};

/// Keys per renewal request: the watchdog's batch size, and the floor's pipeline size.
const BATCH: usize = 100;
/// Tasks acquiring the locks at once before a watchdog window.
const ACQUIRE_TASKS: usize = 64;
const LOCKS: [usize; 2] = [1_000, 10_000];
/// Renews every key it is given, checking nothing.
const BARE_RENEW: &str =
    "for _, key in ipairs(KEYS) do redis.call('PEXPIRE', key, ARGV[1]) end return 0";

/// How a reference row keeps its plain keys alive.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keeper {
    /// One pipeline of 100 `PEXPIRE` per 100 keys.
    Pipeline,
    /// One `EVALSHA` of [`BARE_RENEW`] per 100 keys.
    BareScript,
}

struct Config {
    leases: Vec<Duration>,
    /// The measured window, in leases.
    window_leases: u32,
    idle_window: Duration,
}

fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let topology = Topology::from_args()?;
    let config = if quick {
        Config {
            leases: vec![Duration::from_secs(3)],
            window_leases: 1,
            idle_window: Duration::from_secs(2),
        }
    } else {
        Config {
            leases: vec![Duration::from_secs(30), Duration::from_secs(3)],
            window_leases: 3,
            idle_window: Duration::from_secs(10),
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let deployment = Deployment::start(topology)?;
    runtime.block_on(run(&config, &deployment))
}

async fn run(config: &Config, deployment: &Deployment) -> anyhow::Result<()> {
    let topology = deployment.topology();
    let url = deployment.url();
    let mut info = deployment.masters().await?;
    let default_lease = Client::connect(&url).await?.watchdog_lease();
    if !topology.is_single() {
        println!("(topology: {topology}; {})\n", deployment.describe());
    }

    // Idle: a connected client and a raw connection, nothing held, nothing sent.
    let idle = {
        let _client = Client::connect(&url).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = Snapshot::take(&mut info).await?;
        tokio::time::sleep(config.idle_window).await;
        let after = Snapshot::take(&mut info).await?;
        Window::between(&before, &after, "evalsha")
    };
    println!(
        "## Watchdog cost (default watchdog lease {} s)\n",
        default_lease.as_secs()
    );
    println!(
        "Idle (client connected, nothing held, {:.0} s): client CPU {:.2} ms/s, Redis CPU {:.2} ms/s.\n",
        idle.seconds,
        idle.client_cpu_ms_per_s(),
        idle.redis_cpu_ms_per_s()
    );
    println!(
        "| lease | locks | keeper | requests/s (expected) | renewals/s (expected) | client CPU ms/s | x floor | client CPU µs/renewal | Redis cmd time ms/s | x floor | Redis CPU ms/s | x floor | held at end (least left) |"
    );
    println!("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for &lease in &config.leases {
        for locks in LOCKS {
            measure(
                deployment,
                &mut info,
                &url,
                lease,
                locks,
                config.window_leases,
            )
            .await?;
        }
    }
    Ok(())
}

/// The three rows of one lease and number of locks, printed.
async fn measure(
    deployment: &Deployment,
    info: &mut Masters,
    url: &str,
    lease: Duration,
    locks: usize,
    window_leases: u32,
) -> anyhow::Result<()> {
    let topology = deployment.topology();
    let window = lease * window_leases;
    let period = (lease / 3).as_secs_f64();
    let keys = floor_keys(topology, locks);
    let floor = floor_row(deployment, info, &keys, lease, window, Keeper::Pipeline).await?;
    flush(info).await?;
    let bare = floor_row(deployment, info, &keys, lease, window, Keeper::BareScript).await?;
    flush(info).await?;
    let watchdog = watchdog_row(url, info, locks, lease, window).await?;
    flush(info).await?;
    let expected_renewals = locks as f64 / period;
    // Requests per round: the floor's and the watchdog's per master (and 100 keys), the
    // bare script's per call group (on a cluster a hash slot; the lock names hash to the
    // floor keys' slots).
    let pipeline_round = batches(topology, info, &keys, Keeper::Pipeline).len();
    let script_round = batches(topology, info, &keys, Keeper::BareScript).len();
    for (name, row, is_floor, round) in [
        ("raw PEXPIRE floor", &floor, true, pipeline_round),
        ("bare script (no owner check)", &bare, false, script_round),
        ("`Lock` watchdog", &watchdog, false, pipeline_round),
    ] {
        let expected_requests = round as f64 / period;
        let w = &row.window;
        let ratio = |value: f64, floor_value: f64| {
            if is_floor {
                "1.00".to_owned()
            } else {
                format!("{:.2}", value / floor_value)
            }
        };
        println!(
            "| {} s | {locks} | {name} | {:.1} ({expected_requests:.1}) | {:.0} ({expected_renewals:.0}) | {:.2} | {} | {:.2} | {:.2} | {} | {:.2} | {} | {}/{locks} ({:.2} s) |",
            lease.as_secs(),
            w.requests_per_s(row.requests),
            w.renewals_per_s(),
            w.client_cpu_ms_per_s(),
            ratio(w.client_cpu_ms_per_s(), floor.window.client_cpu_ms_per_s()),
            w.client_cpu_us_per_renewal(),
            w.command_ms_per_s(),
            ratio(w.command_ms_per_s(), floor.window.command_ms_per_s()),
            w.redis_cpu_ms_per_s(),
            ratio(w.redis_cpu_ms_per_s(), floor.window.redis_cpu_ms_per_s()),
            row.held,
            row.least_left.as_secs_f64(),
        );
    }
    if !topology.is_single() {
        let slots: std::collections::BTreeSet<u16> = keys.iter().map(key_slot).collect();
        let groups = if topology == Topology::Cluster {
            format!(
                ": {} distinct hash slots among the names, over {} masters",
                slots.len(),
                info.conns.len()
            )
        } else {
            String::new()
        };
        println!(
            "\n{locks} locks, {} s lease: requests per renewal round (requests/s × lease/3): floor {:.0} (expected {pipeline_round}), bare script {:.0} (expected {script_round}{groups}), watchdog {:.0} (expected {pipeline_round})\n",
            lease.as_secs(),
            floor.window.requests_per_s(floor.requests) * period,
            bare.window.requests_per_s(bare.requests) * period,
            watchdog.window.requests_per_s(watchdog.requests) * period,
        );
    }
    if watchdog.held < locks || floor.held < locks || bare.held < locks {
        println!("\n**LOST**: a lock or reference key was not held at the end of the window.\n");
    }
    if watchdog.acquired_in.is_some_and(|took| took > lease / 6) {
        let acquired_in = watchdog.acquired_in.unwrap_or_default();
        println!(
            "\nnote: acquiring took {:.2} s, more than lease/6: the holds renew in more than one round per period.\n",
            acquired_in.as_secs_f64()
        );
    }
    Ok(())
}

/// One keeper's figures over its window.
struct Row {
    window: Window,
    /// Renewal requests sent in the window (script calls or pipelines).
    requests: u64,
    /// Locks still held (keys still present) at the end of the window.
    held: usize,
    /// The least lease any of them had left then.
    least_left: Duration,
    /// How long acquiring the locks took (watchdog only).
    acquired_in: Option<Duration>,
}

/// The reference rows' plain keys: `watchdog:floor:N` on one server; elsewhere
/// `watchdog:floor:{watchdog:lock:N}`, in the hash slot of the lock `watchdog:lock:N`.
fn floor_keys(topology: Topology, keys: usize) -> Vec<String> {
    (0..keys)
        .map(|i| {
            if topology.is_single() {
                format!("watchdog:floor:{i}")
            } else {
                format!("watchdog:floor:{{watchdog:lock:{i}}}")
            }
        })
        .collect()
}

/// Up to [`BATCH`] keys that one request of the keeper covers, and the master they are on.
struct Batch {
    node: usize,
    keys: Vec<String>,
}

/// How `keeper` splits `keys` into requests: a pipeline holds keys of one master; a script
/// call keys of one call group (on a cluster, one hash slot), as the watchdog's do.
fn batches(topology: Topology, masters: &Masters, keys: &[String], keeper: Keeper) -> Vec<Batch> {
    let mut groups: std::collections::BTreeMap<(usize, u16), Vec<String>> =
        std::collections::BTreeMap::new();
    for key in keys {
        let group = match (topology, keeper) {
            (Topology::Cluster, Keeper::BareScript) => key_slot(key),
            _ => 0,
        };
        groups
            .entry((masters.of_key(key), group))
            .or_default()
            .push(key.clone());
    }
    groups
        .into_iter()
        .flat_map(|((node, _), keys)| {
            keys.chunks(BATCH)
                .map(|chunk| Batch {
                    node,
                    keys: chunk.to_vec(),
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A reference row: plain keys kept alive by `keeper`, every lease/3.
async fn floor_row(
    deployment: &Deployment,
    info: &mut Masters,
    keys: &[String],
    lease: Duration,
    window: Duration,
    keeper: Keeper,
) -> anyhow::Result<Row> {
    let conns = deployment.floor_node_connections(info).await?;
    let batches = Arc::new(batches(deployment.topology(), info, keys, keeper));
    let ms = lease.as_millis() as u64;
    let anchor = Instant::now();
    join_all(batches.iter().map(|batch| {
        let mut conn = conns[batch.node].clone();
        let mut pipe = redis::pipe();
        for key in &batch.keys {
            pipe.cmd("SET").arg(key).arg(1).arg("PX").arg(ms).ignore();
        }
        async move { pipe.query_async::<()>(&mut conn).await }
    }))
    .await
    .into_iter()
    .collect::<Result<Vec<()>, _>>()?;

    let pipelines = Arc::new(AtomicU64::new(0));
    let (stop, stopped) = oneshot::channel();
    let keeper_task = tokio::spawn(floor_keeper(
        keeper,
        conns.clone(),
        Arc::clone(&batches),
        lease,
        anchor,
        Arc::clone(&pipelines),
        stopped,
    ));
    sleep_to_window_start(anchor, lease).await;
    let before = Snapshot::take(info).await?;
    let sent_before = pipelines.load(Ordering::SeqCst);
    tokio::time::sleep(window).await;
    let after = Snapshot::take(info).await?;
    let requests = pipelines.load(Ordering::SeqCst) - sent_before;
    let _ = stop.send(());
    keeper_task.await??;

    // Every key still there, and the least TTL left.
    let mut held = 0;
    let mut least_left = lease;
    let mut conns = conns;
    for batch in batches.iter() {
        let mut pipe = redis::pipe();
        for key in &batch.keys {
            pipe.cmd("PTTL").arg(key);
        }
        let ttls: Vec<i64> = pipe.query_async(&mut conns[batch.node]).await?;
        for ttl in ttls.into_iter().filter(|&t| t > 0) {
            held += 1;
            least_left = least_left.min(Duration::from_millis(ttl as u64));
        }
    }
    Ok(Row {
        window: Window::between(
            &before,
            &after,
            match keeper {
                Keeper::Pipeline => "pexpire",
                Keeper::BareScript => "evalsha",
            },
        ),
        requests,
        held,
        least_left,
        acquired_in: None,
    })
}

async fn floor_keeper(
    keeper: Keeper,
    conns: Vec<MultiplexedConnection>,
    batches: Arc<Vec<Batch>>,
    lease: Duration,
    anchor: Instant,
    pipelines: Arc<AtomicU64>,
    mut stop: oneshot::Receiver<()>,
) -> anyhow::Result<()> {
    let period = lease / 3;
    let ms = lease.as_millis() as u64;
    let mut next = anchor + period;
    let script = redis::Script::new(BARE_RENEW);
    if keeper == Keeper::BareScript {
        for conn in &conns {
            script.load_async(&mut conn.clone()).await?;
        }
    }
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            () = tokio::time::sleep_until(next) => {}
        }
        let replies = join_all(batches.iter().map(|batch| {
            let mut conn = conns[batch.node].clone();
            let mut pipe = redis::pipe();
            match keeper {
                Keeper::Pipeline => {
                    for key in &batch.keys {
                        pipe.cmd("PEXPIRE").arg(key).arg(ms).ignore();
                    }
                }
                Keeper::BareScript => {
                    pipe.cmd("EVALSHA")
                        .arg(script.get_hash())
                        .arg(batch.keys.len());
                    for key in &batch.keys {
                        pipe.arg(key);
                    }
                    pipe.arg(ms).ignore();
                }
            }
            let pipelines = &pipelines;
            async move {
                let reply = pipe.query_async::<()>(&mut conn).await;
                // Counted as it is answered: a round late enough to straddle the window's
                // end counts the requests answered within it.
                if reply.is_ok() {
                    pipelines.fetch_add(1, Ordering::SeqCst);
                }
                reply
            }
        }))
        .await;
        for reply in replies {
            reply?;
        }
        next += period;
    }
}

/// The watchdog: one client holds the locks and renews them.
async fn watchdog_row(
    url: &str,
    info: &mut Masters,
    locks: usize,
    lease: Duration,
    window: Duration,
) -> anyhow::Result<Row> {
    let client = Client::builder(url).watchdog_lease(lease).connect().await?;
    // Every hold's first renewal falls a third of the lease after its acquire was sent.
    let anchor = Instant::now();
    let guards: Vec<LockGuard> = futures_util::stream::iter(0..locks)
        .map(|i| {
            let client = client.clone();
            async move { client.lock(&format!("watchdog:lock:{i}"))?.lock().await }
        })
        .buffer_unordered(ACQUIRE_TASKS)
        .try_collect()
        .await?;
    let acquired_in = anchor.elapsed();

    sleep_to_window_start(anchor, lease).await;
    let before = Snapshot::take(info).await?;
    tokio::time::sleep(window).await;
    let after = Snapshot::take(info).await?;

    let held = guards.iter().filter(|g| g.is_held()).count();
    let least_left = guards
        .iter()
        .map(LockGuard::remaining)
        .min()
        .unwrap_or_default();
    let window = Window::between(&before, &after, "evalsha");
    let requests = window.calls;
    futures_util::stream::iter(guards)
        .map(LockGuard::unlock)
        .buffer_unordered(ACQUIRE_TASKS)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(Row {
        window,
        requests,
        held,
        least_left,
        acquired_in: Some(acquired_in),
    })
}

/// Sleeps until half a renewal period after a renewal round, at least one round after
/// `anchor` (when the keys were set or the first acquire was sent): a window of whole
/// leases then holds whole rounds only.
async fn sleep_to_window_start(anchor: Instant, lease: Duration) {
    let period = lease / 3;
    let mut start = anchor + period + period / 2;
    while start < Instant::now() {
        start += period;
    }
    tokio::time::sleep_until(start).await;
}

/// Empties every master.
async fn flush(info: &mut Masters) -> anyhow::Result<()> {
    info.on_all(&redis::cmd("FLUSHALL")).await
}

/// The differences between two snapshots.
struct Window {
    seconds: f64,
    /// Calls of the renewal command (`EVALSHA` or `PEXPIRE`) and the µs Redis spent in it.
    calls: u64,
    command_usec: f64,
    /// `PEXPIRE` executed by Redis, top-level or inside scripts: keys renewed.
    renewals: u64,
    client_cpu: Duration,
    redis_cpu: Duration,
}

impl Window {
    fn between(before: &Snapshot, after: &Snapshot, command: &str) -> Self {
        let (then, now) = (before.command(command), after.command(command));
        Self {
            seconds: (after.at - before.at).as_secs_f64(),
            calls: now.calls - then.calls,
            command_usec: now.usec - then.usec,
            renewals: after.command("pexpire").calls - before.command("pexpire").calls,
            client_cpu: after.client_cpu.saturating_sub(before.client_cpu),
            redis_cpu: after.redis_cpu.saturating_sub(before.redis_cpu),
        }
    }

    fn requests_per_s(&self, requests: u64) -> f64 {
        requests as f64 / self.seconds
    }

    fn renewals_per_s(&self) -> f64 {
        self.renewals as f64 / self.seconds
    }

    fn client_cpu_ms_per_s(&self) -> f64 {
        self.client_cpu.as_secs_f64() * 1e3 / self.seconds
    }

    fn client_cpu_us_per_renewal(&self) -> f64 {
        self.client_cpu.as_secs_f64() * 1e6 / self.renewals.max(1) as f64
    }

    fn command_ms_per_s(&self) -> f64 {
        self.command_usec / 1e3 / self.seconds
    }

    fn redis_cpu_ms_per_s(&self) -> f64 {
        self.redis_cpu.as_secs_f64() * 1e3 / self.seconds
    }
}

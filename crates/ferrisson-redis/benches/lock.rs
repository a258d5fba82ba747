//! Lock benchmarks against a raw redis-rs floor and the peer crate rslock, measured in the
//! same run on one private redis-server.
//!
//! `cargo bench -p ferrisson-redis --bench lock` (add `-- --quick` for a short run, and
//! `-- --noop-recorder` to install a `metrics` recorder that records nothing, which
//! measures what the library's metric calls cost when an application has a recorder;
//! `LOCK_BENCH_ROUNDS`, `LOCK_BENCH_SLICE_MS`, `LOCK_BENCH_GRANTS`, `LOCK_BENCH_WAIT_MS`,
//! and for the hand-off `LOCK_BENCH_HOLD_US`, `LOCK_BENCH_PAUSE_US`, `LOCK_BENCH_WAITED_US`
//! change the sizes; `LOCK_BENCH_COALESCE=0` builds ferrisson's clients with
//! `coalesce_calls(false)`; `LOCK_BENCH_LATENCY_US=500` puts every client of the rows
//! behind a proxy that delays each chunk that long each way (one server only; the
//! distinct-key table alone); `-- --topology sentinel` or `-- --topology cluster` runs everything
//! on a Sentinel group or a 3-master Redis Cluster instead of one server, see
//! `common/topology.rs`).
//! Prints markdown tables for BENCHMARKS.md.
//!
//! - floor: `SET key token NX PX 30000` + a compare-and-delete script (`EVALSHA`) through
//!   one redis-rs multiplexed connection: the least any correct lock can do.
//! - rslock (0.10, one server): `SET NX PX` + a compare-and-delete script, no watchdog,
//!   no fencing, no re-entry; its waiters poll. Left out on a Sentinel group or cluster,
//!   which it cannot use.
//! - On a Sentinel group the floor runs on the master connection redis-rs's
//!   `SentinelClient` hands out, on a cluster through redis-rs's `ClusterConnection`;
//!   Redis CPU and calls are summed over the masters.
//! - Uncontended lock+unlock latency, p50/p99, and what a pair costs: client CPU (this
//!   process, `getrusage`), Redis CPU (`INFO cpu`), Redis calls by command
//!   (`INFO commandstats`, scripts' inner calls included).
//! - Throughput on distinct keys at 1/16/64/256 tasks, with the same cost columns, and
//!   with a ladder of raw rows between the floor and the library's locks: the same pair
//!   driven by redis-rs alone (one multiplexed connection, `EVALSHA` through
//!   `redis::Script`, no ferrisson code), one guarantee more on each rung: `SET NX PX`
//!   inside a minimal script; plus the library's fencing token (`lua/fencing_token.lua`);
//!   `SimpleLock`'s own two scripts; the fenced acquire with `Lock`'s re-entrant hold hash
//!   (its free-lock path alone, released without marker or wake-up); `Lock`'s own two
//!   scripts (`fresh` mode, no waiter registration, a release id per release). A raw row is the least any client can spend
//!   with those scripts, so `SimpleLock` / its raw row is the library's client overhead
//!   and the raw row / the floor the cost of the guarantees in Redis. The raw texts are
//!   the library's files joined as the library joins them (`common/scripts.rs`), checked
//!   against the server's script cache after the library loaded its scripts.
//! - Contended hand-off with 2/8/32 contenders, each on its own `Client` (as separate
//!   processes would be), each holding the lock 3 ms and pausing 1 ms after its release:
//!   from the holder starting its release to another contender that was already waiting
//!   holding the lock (a contender re-acquiring its own lock, or one whose request was
//!   still in flight, is not a hand-off and is not counted), also over a `PING` round trip
//!   measured right before the row; the requests per grant, and the requests sent while
//!   one client holds and every other one waits (over 3.5 s, longer than a `FairLock`
//!   waiter's keep-alive period).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrisson_redis::{Client, Lock, SimpleLock};

use common::cost::{Cost, Snapshot};
use common::handoff::{Contended, LockKind, Pace, run_contention};
use common::scripts::{self as lua, granted};
use common::stats::{env_number, micros, p50_p99};
use common::throughput::{self, Contestant, Pairs};
use common::topology::{Deployment, Masters, Raw, Topology};

const CAD: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
/// The first raw rung's acquire: the floor's `SET NX PX`, inside a script (with the
/// shebang every acquire of the library carries), replying as the library's acquires do.
const SCRIPT_SET: &str = "#!lua
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1}
end
return {0, redis.call('PTTL', KEYS[1])}
";
/// The second rung's acquire, after the library's `fencing_token.lua` (which carries the
/// shebang): the first rung's plus a fencing token from the floor key `KEYS[2]`. On a
/// free key it runs the commands `simple_acquire.lua` runs for a first attempt.
const FENCED_SET: &str = "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, fencing_token(KEYS[2])}
end
return {0, redis.call('PTTL', KEYS[1])}
";
/// The lease of the floor's and rslock's keys (ferrisson's locks use their defaults).
const LEASE: Duration = Duration::from_secs(30);

struct Config {
    /// Uncontended pairs per kind and round, and rounds.
    m1_iterations: usize,
    m1_rounds: usize,
    slice: Duration,
    grants: usize,
    rounds: usize,
    /// How the contenders of the hand-off runs use the lock.
    pace: Pace,
    /// The window in which the waiters' requests are counted.
    wait: Duration,
}

fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let topology = Topology::from_args()?;
    if std::env::args().any(|a| a == "--noop-recorder") {
        metrics::set_global_recorder(metrics::NoopRecorder)
            .map_err(|_| anyhow::anyhow!("a recorder was installed already"))?;
        println!("(a no-op metrics recorder is installed)\n");
    }
    let (iterations, m1_rounds, slice_ms, grants, rounds, wait_ms) = if quick {
        (250, 2, 200, 200, 1, 1000)
    } else {
        (1000, 12, 700, 1000, 3, 3500)
    };
    let config = Config {
        m1_iterations: iterations,
        m1_rounds,
        slice: Duration::from_millis(env_number("LOCK_BENCH_SLICE_MS", slice_ms)),
        grants: usize::try_from(env_number("LOCK_BENCH_GRANTS", grants))?,
        rounds: usize::try_from(env_number("LOCK_BENCH_ROUNDS", rounds))?.max(1),
        pace: Pace::from_env("LOCK_BENCH"),
        wait: Duration::from_millis(env_number("LOCK_BENCH_WAIT_MS", wait_ms)),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    println!(
        "(ferrisson clients coalesce script calls: {})\n",
        if common::coalesce_calls() {
            "on"
        } else {
            "off (LOCK_BENCH_COALESCE=0)"
        }
    );
    let deployment = Deployment::start(topology)?;
    runtime.block_on(run(&config, &deployment))
}

/// The hold-hash rung's acquire, after `fencing_token.lua`: the free-lock path of
/// `lock_acquire.lua` alone (a re-entrant hold hash `{owner: count, fence: token}` with a
/// lease), no re-entry branches, no waiter registration.
const HASH_ACQUIRE: &str = "if redis.call('EXISTS', KEYS[1]) == 0 then
  local token = fencing_token(KEYS[2])
  redis.call('HSET', KEYS[1], ARGV[1], 1, 'fence', token)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, token, 1}
end
return {0, redis.call('PTTL', KEYS[1])}
";
/// The hold-hash rung's release: one hold of the hash, no release-id marker, no wake-up.
const HASH_RELEASE: &str = "#!lua flags=allow-oom
local count = redis.call('HGET', KEYS[1], ARGV[1])
if not count then
  return 0
end
if tonumber(count) > 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
  return 2
end
redis.call('DEL', KEYS[1])
return 1
";

/// The locks compared in the uncontended tables.
#[derive(Clone, Copy)]
enum Kind {
    Floor,
    /// A raw rung of the distinct-key table's ladder.
    Raw(Rung),
    Simple,
    Lock,
    Rslock,
}

/// The raw rows between the floor and the library's locks, each the one before plus one
/// guarantee, all driven by redis-rs alone.
#[derive(Clone, Copy)]
enum Rung {
    /// `SET NX PX` in a minimal script + the floor's compare-and-delete script.
    ScriptSet,
    /// The same plus the library's fencing token (TIME, GET and SET of a floor key).
    Fenced,
    /// `SimpleLock`'s own acquire and release scripts.
    SimpleScripts,
    /// The fenced acquire with a re-entrant hold hash instead of a string (`Lock`'s
    /// free-lock path), released by a plain hash compare-and-delete.
    HoldHash,
    /// `Lock`'s own acquire and release scripts.
    LockScripts,
}

const RUNGS: [Rung; 5] = [
    Rung::ScriptSet,
    Rung::Fenced,
    Rung::SimpleScripts,
    Rung::HoldHash,
    Rung::LockScripts,
];

const KINDS: [Kind; 4] = [Kind::Floor, Kind::Simple, Kind::Lock, Kind::Rslock];

/// The kinds that run on `topology`: rslock talks to single servers only.
fn kinds(topology: Topology) -> Vec<Kind> {
    KINDS
        .into_iter()
        .filter(|kind| topology.is_single() || !matches!(kind, Kind::Rslock))
        .collect()
}

/// The rows of the distinct-key table: the floor, the raw rungs, then the locks.
fn ladder(topology: Topology) -> Vec<Kind> {
    let mut rows = vec![Kind::Floor];
    rows.extend(RUNGS.map(Kind::Raw));
    rows.extend(kinds(topology).into_iter().skip(1));
    rows
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Floor => "raw floor (SET NX PX + CAD script)",
            Self::Raw(Rung::ScriptSet) => "raw: SET NX PX in a script + CAD script",
            Self::Raw(Rung::Fenced) => "raw: + fencing token (`fencing_token.lua`)",
            Self::Raw(Rung::SimpleScripts) => "raw: `SimpleLock`'s scripts",
            Self::Raw(Rung::HoldHash) => "raw: fenced + re-entrant hold hash",
            Self::Raw(Rung::LockScripts) => "raw: `Lock`'s scripts",
            Self::Simple => "`SimpleLock`",
            Self::Lock => "`Lock` (watchdog)",
            Self::Rslock => "rslock 0.10",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Floor => "floor",
            Self::Raw(Rung::ScriptSet) => "script-set",
            Self::Raw(Rung::Fenced) => "fenced",
            Self::Raw(Rung::SimpleScripts) => "simple-raw",
            Self::Raw(Rung::HoldHash) => "hash-raw",
            Self::Raw(Rung::LockScripts) => "lock-raw",
            Self::Simple => "simple",
            Self::Lock => "lock",
            Self::Rslock => "rslock",
        }
    }
}

/// What the contestants run on: one connection or client each, shared by all tasks.
struct Peers {
    raw: Raw,
    cad: redis::Script,
    scripts: RawScripts,
    client: Client,
    /// On one server only.
    rslock: Option<rslock::LockManager>,
}

/// The scripts of the raw rungs, hashed once.
struct RawScripts {
    script_set: redis::Script,
    fenced_set: redis::Script,
    simple_acquire: redis::Script,
    simple_release: redis::Script,
    hash_acquire: redis::Script,
    hash_release: redis::Script,
    lock_acquire: redis::Script,
    lock_release: redis::Script,
}

impl RawScripts {
    fn new() -> Self {
        Self {
            script_set: redis::Script::new(SCRIPT_SET),
            fenced_set: redis::Script::new(&lua::with_fencing_token(FENCED_SET)),
            simple_acquire: redis::Script::new(lua::SIMPLE_ACQUIRE),
            simple_release: redis::Script::new(lua::SIMPLE_RELEASE),
            hash_acquire: redis::Script::new(&lua::with_fencing_token(HASH_ACQUIRE)),
            hash_release: redis::Script::new(HASH_RELEASE),
            lock_acquire: redis::Script::new(lua::LOCK_ACQUIRE),
            lock_release: redis::Script::new(lua::LOCK_RELEASE),
        }
    }

    /// The copies of the library's scripts, by the library's names.
    fn library(&self) -> [(&'static str, &redis::Script); 4] {
        [
            ("simple_acquire", &self.simple_acquire),
            ("simple_release", &self.simple_release),
            ("lock_acquire", &self.lock_acquire),
            ("lock_release", &self.lock_release),
        ]
    }

    /// The acquire and release scripts of `rung`.
    fn of(&self, rung: Rung, cad: &redis::Script) -> (redis::Script, redis::Script) {
        let (acquire, release) = match rung {
            Rung::ScriptSet => (&self.script_set, cad),
            Rung::Fenced => (&self.fenced_set, cad),
            Rung::SimpleScripts => (&self.simple_acquire, &self.simple_release),
            Rung::HoldHash => (&self.hash_acquire, &self.hash_release),
            Rung::LockScripts => (&self.lock_acquire, &self.lock_release),
        };
        (acquire.clone(), release.clone())
    }
}

/// The Redis names of a raw rung's lock called `name`, laid out as the library lays out
/// its own (`src/redis/keys.rs`): every key in the name's hash slot.
/// The fencing floor is one key per lock here (the library's is one per hash slot, which
/// for distinct names is one per lock too).
struct RawKeys {
    lock: String,
    fence: String,
    /// The waiting clients and the prefix of their wake-up channels (`Lock`'s and
    /// `SimpleLock`'s).
    waiters: String,
    channels: String,
}

impl RawKeys {
    fn new(name: &str) -> Self {
        let lock = format!("{{{name}}}");
        Self {
            fence: format!("bench:fence:{lock}"),
            waiters: format!("{lock}:waiters"),
            channels: format!("{lock}:c:"),
            lock,
        }
    }
}

/// One lock of one kind, ready for lock+unlock pairs.
enum Subject {
    Floor {
        raw: Raw,
        cad: redis::Script,
        key: String,
    },
    Raw {
        raw: Raw,
        rung: Rung,
        acquire: redis::Script,
        release: redis::Script,
        keys: RawKeys,
    },
    Simple(SimpleLock),
    Lock(Lock),
    Rslock {
        manager: rslock::LockManager,
        key: String,
    },
}

impl Subject {
    fn new(kind: Kind, peers: &Peers, key: String) -> anyhow::Result<Self> {
        Ok(match kind {
            Kind::Floor => Self::Floor {
                raw: peers.raw.clone(),
                cad: peers.cad.clone(),
                key,
            },
            Kind::Raw(rung) => {
                let (acquire, release) = peers.scripts.of(rung, &peers.cad);
                Self::Raw {
                    raw: peers.raw.clone(),
                    rung,
                    acquire,
                    release,
                    keys: RawKeys::new(&key),
                }
            }
            Kind::Simple => Self::Simple(peers.client.simple_lock(&key)?),
            Kind::Lock => Self::Lock(peers.client.lock(&key)?),
            Kind::Rslock => Self::Rslock {
                manager: peers
                    .rslock
                    .clone()
                    .ok_or_else(|| anyhow::anyhow!("rslock runs on one server only"))?,
                key,
            },
        })
    }

    /// One lock + unlock; the lock must be free.
    async fn pair(&mut self) -> anyhow::Result<()> {
        match self {
            Self::Floor { raw, cad, key } => {
                let token = format!("{:032x}", rand::random::<u128>());
                let ok: Option<String> = redis::cmd("SET")
                    .arg(&*key)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(LEASE.as_millis() as u64)
                    .query_async(raw)
                    .await?;
                anyhow::ensure!(ok.is_some(), "floor lock {key} not acquired");
                let _: i64 = cad.key(&*key).arg(&token).invoke_async(raw).await?;
            }
            Self::Raw {
                raw,
                rung,
                acquire,
                release,
                keys,
            } => raw_pair(raw, *rung, acquire, release, keys).await?,
            Self::Simple(lock) => lock.lock().await?.unlock().await?,
            Self::Lock(lock) => lock.lock().await?.unlock().await?,
            Self::Rslock { manager, key } => {
                manager.acquire(key.as_str(), LEASE).await?.release().await;
            }
        }
        Ok(())
    }
}

/// One lock + unlock of a raw rung, with the KEYS and ARGV the library's typed calls pass
/// (`src/redis/scripts/simple.rs`, `lock.rs`, `wake.rs`): a 32-hex-digit owner id, the
/// lease in ms, no waiter registration (a first attempt: client id '', others '0'), for
/// `Lock` mode `fresh`, and a release id of 16 hex digits per release.
async fn raw_pair(
    raw: &mut Raw,
    rung: Rung,
    acquire: &redis::Script,
    release: &redis::Script,
    keys: &RawKeys,
) -> anyhow::Result<()> {
    let owner = format!("{:032x}", rand::random::<u128>());
    let lease = LEASE.as_millis() as u64;
    let mut call = acquire.key(&keys.lock);
    match rung {
        Rung::ScriptSet => call.arg(&owner).arg(lease),
        Rung::Fenced | Rung::HoldHash => call.key(&keys.fence).arg(&owner).arg(lease),
        Rung::SimpleScripts => call
            .key(&keys.fence)
            .key(&keys.waiters)
            .arg(&owner)
            .arg(lease)
            .arg("")
            .arg("0"),
        Rung::LockScripts => call
            .key(&keys.fence)
            .key(&keys.waiters)
            .arg(&owner)
            .arg(lease)
            .arg("fresh")
            .arg("")
            .arg("0"),
    };
    let reply: redis::Value = call.invoke_async(raw).await?;
    anyhow::ensure!(granted(&reply), "{} not acquired: {reply:?}", keys.lock);
    let mut call = release.key(&keys.lock);
    match rung {
        Rung::ScriptSet | Rung::Fenced | Rung::HoldHash => call.arg(&owner),
        Rung::SimpleScripts => call.key(&keys.waiters).key(&keys.channels).arg(&owner),
        Rung::LockScripts => call
            .key(&keys.waiters)
            .key(&keys.channels)
            .arg(&owner)
            .arg(lease)
            .arg(format!("{:016x}", rand::random::<u64>())),
    };
    let released: i64 = call.invoke_async(raw).await?;
    anyhow::ensure!(released == 1, "{} not released: {released}", keys.lock);
    Ok(())
}

async fn run(config: &Config, deployment: &Deployment) -> anyhow::Result<()> {
    let topology = deployment.topology();
    let mut url = deployment.url();
    // A slow link: every client of the rows (the floor's, ferrisson's and rslock's)
    // reaches the server through a proxy that delays each chunk both ways; Redis's
    // counters are read directly.
    let latency = Duration::from_micros(env_number("LOCK_BENCH_LATENCY_US", 0));
    let proxy = match deployment {
        Deployment::Single(server) if !latency.is_zero() => {
            let proxy = ferrisson_testkit::FaultProxy::start(server.port()).await?;
            proxy.control().set_latency(latency, Duration::ZERO);
            url = proxy.url();
            println!(
                "(every client through a proxy delaying each chunk by {} µs each way; the \
                 distinct-key table alone)\n",
                latency.as_micros()
            );
            Some(proxy)
        }
        _ => None,
    };
    let raw = match &proxy {
        Some(_) => Raw::Node(common::raw_connection(&url).await?),
        None => deployment.floor_connection().await?,
    };
    let peers = Arc::new(Peers {
        raw,
        cad: redis::Script::new(CAD),
        scripts: RawScripts::new(),
        client: common::connect(&url).await?,
        rslock: topology
            .is_single()
            .then(|| rslock::LockManager::new(vec![url.clone()])),
    });
    let mut info = deployment.masters().await?;
    if !topology.is_single() {
        println!("(topology: {}; {})\n", topology, deployment.describe());
    }
    // The client loaded every script of the library when it connected, and no raw row
    // ran yet: the raw copies must be in the cache already.
    lua::check_loaded_by_library(&mut info.conns, &peers.scripts.library()).await?;
    let kinds = kinds(topology);

    if proxy.is_some() {
        return distinct_keys(&peers, &ladder(topology), &mut info, config).await;
    }
    uncontended(&peers, &kinds, &mut info, config).await?;
    distinct_keys(&peers, &ladder(topology), &mut info, config).await?;
    handoff(&url, &mut info, config).await
}

/// Uncontended lock+unlock latency.
async fn uncontended(
    peers: &Peers,
    kinds: &[Kind],
    info: &mut Masters,
    config: &Config,
) -> anyhow::Result<()> {
    let mut samples: Vec<Vec<Duration>> = kinds.iter().map(|_| Vec::new()).collect();
    let mut costs: Vec<Cost> = kinds.iter().map(|_| Cost::default()).collect();
    // Short rounds alternate the kinds, so that drift in the machine's load hits them
    // alike (on this VM latency moves with load either way: idle cores wake up slowly).
    for round in 0..=config.m1_rounds {
        for ((kind, samples), cost) in kinds.iter().zip(&mut samples).zip(&mut costs) {
            let mut subject = Subject::new(*kind, peers, format!("m1:{}", kind.label()))?;
            // Round 0 warms up (script loading, connections) and is not counted.
            let iterations = if round == 0 { 50 } else { config.m1_iterations };
            let before = Snapshot::take(info).await?;
            let mut taken = Vec::with_capacity(iterations);
            for _ in 0..iterations {
                let started = Instant::now();
                subject.pair().await?;
                taken.push(started.elapsed());
            }
            let after = Snapshot::take(info).await?;
            if round > 0 {
                samples.extend(taken);
                cost.add(&Cost::between(&before, &after));
            }
        }
    }
    let pairs = (config.m1_iterations * config.m1_rounds) as f64;
    let (floor_p50, floor_p99) = p50_p99(&mut samples[0]);
    let (floor_client, floor_redis) = (costs[0].client_us_per(pairs), costs[0].redis_us_per(pairs));
    println!("## Uncontended lock+unlock ({pairs} pairs each)\n");
    println!(
        "| | p50 µs | p99 µs | p50 / floor | p99 / floor | client CPU µs/pair | / floor | Redis CPU µs/pair | / floor | Redis calls per pair (scripts' inner calls included) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for ((kind, samples), cost) in kinds.iter().zip(&mut samples).zip(&costs) {
        let (p50, p99) = p50_p99(samples);
        let (client, redis) = (cost.client_us_per(pairs), cost.redis_us_per(pairs));
        println!(
            "| {} | {} | {} | {:.2} | {:.2} | {client:.1} | {:.2} | {redis:.1} | {:.2} | {} |",
            kind.name(),
            micros(p50),
            micros(p99),
            p50.as_secs_f64() / floor_p50.as_secs_f64(),
            p99.as_secs_f64() / floor_p99.as_secs_f64(),
            client / floor_client,
            redis / floor_redis,
            cost.calls_per(pairs),
        );
    }
    Ok(())
}

/// Lock+unlock throughput on distinct keys: every task has its own lock.
async fn distinct_keys(
    peers: &Arc<Peers>,
    kinds: &[Kind],
    info: &mut Masters,
    config: &Config,
) -> anyhow::Result<()> {
    println!(
        "\n## Distinct-key throughput (lock+unlock pairs; {} rounds of {:?} per row)\n",
        config.rounds, config.slice
    );
    println!("| tasks | lock | {}", throughput::COLUMNS);
    println!("|---:|---|{}", throughput::ALIGNMENT);
    let mut tables = Vec::new();
    for tasks in [1, 16, 64, 256] {
        let contestants: Vec<Contestant> = kinds
            .iter()
            .map(|&kind| {
                let peers = Arc::clone(peers);
                Contestant::new(kind.name(), move |task, pairs: Arc<Pairs>| {
                    let key = format!("m2:{}:{task}", kind.label());
                    let mut subject = Subject::new(kind, &peers, key)?;
                    Ok(async move {
                        while pairs.running() {
                            subject.pair().await?;
                            pairs.done();
                        }
                        anyhow::Ok(())
                    })
                })
            })
            .collect();
        let slices =
            throughput::compare(info, &contestants, tasks, config.rounds, config.slice).await?;
        throughput::print_rows(&tasks.to_string(), &contestants, &slices);
        tables.push((tasks, contestants, slices));
    }
    // Each lock against its own scripts called raw (the client's overhead), and each
    // rung against the one below it (what one more guarantee costs).
    let index = |wanted: Kind| kinds.iter().position(|k| k.label() == wanted.label());
    let pairs: Vec<(usize, usize)> = [
        (Kind::Simple, Kind::Raw(Rung::SimpleScripts)),
        (Kind::Lock, Kind::Raw(Rung::LockScripts)),
        (Kind::Raw(Rung::ScriptSet), Kind::Floor),
        (Kind::Raw(Rung::Fenced), Kind::Raw(Rung::ScriptSet)),
        (Kind::Raw(Rung::SimpleScripts), Kind::Raw(Rung::Fenced)),
        (Kind::Raw(Rung::HoldHash), Kind::Raw(Rung::Fenced)),
        (Kind::Raw(Rung::LockScripts), Kind::Raw(Rung::HoldHash)),
    ]
    .into_iter()
    .filter_map(|(row, reference)| Some((index(row)?, index(reference)?)))
    .collect();
    println!(
        "\n### Same rounds: each lock against its own scripts called raw, each rung against the one it adds to\n"
    );
    println!("| tasks | rows | {}", throughput::VERSUS_COLUMNS);
    println!("|---:|---|{}", throughput::VERSUS_ALIGNMENT);
    for (tasks, contestants, slices) in &tables {
        for &(row, reference) in &pairs {
            throughput::print_versus(&tasks.to_string(), contestants, slices, row, reference);
        }
    }
    Ok(())
}

/// Contended hand-off between contenders on their own clients.
async fn handoff(url: &str, info: &mut Masters, config: &Config) -> anyhow::Result<()> {
    println!(
        "\n## Contended hand-off (release start -> another contender, already waiting, holds; {} grants per row, each held {:?}, then {:?} apart)\n",
        config.grants, config.pace.hold, config.pace.pause
    );
    println!(
        "| contenders | lock | hand-offs / grants | hand-off p50 µs | hand-off p99 µs | PING p50 µs | p50 / RTT | requests per grant | Redis calls per grant (scripts' inner calls included) | requests/s while waiting |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---|---:|");
    for contenders in [2, 8, 32] {
        for kind in [LockKind::Lock, LockKind::Simple, LockKind::Fair] {
            let name = format!("m3:{}:{contenders}", kind.name());
            // The round trip right before the row, under the same machine load, to the
            // node that serves the lock.
            let rtt = common::ping_p50(info.conn_of_key(&format!("{{{name}}}")), 500).await?;
            let run = run_contention(
                url,
                info,
                kind,
                contenders,
                &name,
                config.grants,
                config.pace,
            )
            .await?;
            let mut samples = run.handoffs;
            let counted = samples.len();
            let (p50, p99) = p50_p99(&mut samples);
            let grants = run.grants.len() as f64;
            let waiting = requests_while_waiting(&run.clients, info, kind, config.wait).await?;
            println!(
                "| {contenders} | `{}` | {counted} / {} | {} | {} | {} | {:.2} | {:.2} | {} | {:.1} |",
                kind.name(),
                run.grants.len(),
                micros(p50),
                micros(p99),
                micros(rtt),
                p50.as_secs_f64() / rtt.as_secs_f64(),
                run.cost.requests() as f64 / grants,
                run.cost.calls_per(grants),
                waiting.requests() as f64 / waiting.seconds,
            );
        }
    }
    Ok(())
}

/// One client holds a fresh lock while every other one waits for it: the cost of a
/// `window` of that (requests = script calls and (un)subscriptions).
async fn requests_while_waiting(
    clients: &[Client],
    info: &mut Masters,
    kind: LockKind,
    window: Duration,
) -> anyhow::Result<Cost> {
    // Subscriptions left from the contended run linger 500 ms; let them go first, so
    // that their UNSUBSCRIBE does not land in the window and every waiter below is seen
    // subscribing to the fresh lock.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let name = format!("m3-wait:{}:{}", kind.name(), clients.len());
    let holder = Contended::new(kind, &clients[0], &name)?;
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let holding = tokio::spawn(async move {
        holder
            .hold_until(async move {
                let _ = held_tx.send(());
                let _ = release_rx.await;
            })
            .await
    });
    held_rx.await?;
    let mut waiters = Vec::new();
    for client in &clients[1..] {
        let waiter = Contended::new(kind, client, &name)?;
        waiters.push(tokio::spawn(async move {
            waiter.hold_once(Duration::ZERO).await
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !clients[1..].iter().all(|c| c.stats().waiting_channels >= 1) {
        anyhow::ensure!(Instant::now() < deadline, "waiters never subscribed");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // A waiter tries once more right after subscribing; let those tries land first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = Snapshot::take(info).await?;
    tokio::time::sleep(window).await;
    let after = Snapshot::take(info).await?;
    let _ = release_tx.send(());
    holding.await??;
    for waiter in waiters {
        waiter.await??;
    }
    Ok(Cost::between(&before, &after))
}

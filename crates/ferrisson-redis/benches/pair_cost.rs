//! What the client spends per lock+unlock (acquire+release) pair, in counts that do not
//! depend on the machine's load: heap allocations and bytes allocated (a counting global
//! allocator in this binary), and instructions (under callgrind).
//!
//! Subjects, each against this bench's own private redis-server, with its default lease:
//!
//! - `floor`: `SET key token NX PX 30000` + a compare-and-delete script (`EVALSHA`)
//!   through one redis-rs multiplexed connection, as in `benches/lock.rs`;
//! - `simple` (`SimpleLock`), `lock` (`Lock`, watchdog), `semaphore` (`Semaphore`, one
//!   permit acquired and released), `expirable` (`ExpirableSemaphore`, watchdog),
//!   `fair` (`FairLock`, watchdog).
//!
//! Each subject runs warm-up pairs first (scripts loaded, connections up, buffers and
//! maps grown), then `N` pairs and `2N` pairs one at a time on one task; a figure per pair
//! is `(count(2N) - count(N)) / N`, so what a run spends once (setup, the first growth of
//! a buffer) cancels out. Then the same with 64 tasks on 64 distinct keys (each its own
//! lock, or semaphore of one permit): allocations per pair should not grow with
//! concurrency.
//!
//! # Allocations (the default mode)
//!
//! ```text
//! cargo bench -p ferrisson-redis --bench pair_cost
//! cargo bench -p ferrisson-redis --bench pair_cost -- --noop-recorder   # with a metrics recorder
//! ```
//!
//! `PAIR_COST_N` (default 1000) and `PAIR_COST_TASK_N` (pairs per task of the 64-task rows,
//! default 20) change the sizes. Allocations count `alloc` and `alloc_zeroed` calls
//! (`realloc` calls are counted apart); bytes are the bytes those calls asked for plus what
//! reallocations grew by. Every thread of the process counts: the runtime's workers,
//! redis-rs's connection tasks, the client's watchdog and subscription tasks.
//!
//! # Instructions (one subject per process, under callgrind)
//!
//! `--subject NAME --pairs N [--tasks T]` sets up `NAME` (one of the names above), runs
//! the warm-up, then `N` pairs (spread over `T` tasks on `T` keys, default 1) and exits.
//! Instructions per pair are `(Ir(2N) - Ir(N)) / N` of two such runs, the client process
//! only (valgrind does not follow the redis-server it starts). `--current-thread` runs
//! everything on a current-thread runtime instead of the 2-worker one: under callgrind the
//! 2-worker runtime's idle workers spin and park a varying number of times (two runs of
//! the same build differed by up to 10% per pair), one thread repeats to within about
//! 1.5% (how often the client finds a reply not there yet still depends on timing).
//!
//! ```text
//! cargo bench -p ferrisson-redis --bench pair_cost --no-run   # prints the executable
//! BIN=target/release/deps/pair_cost-<hash>
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/pc.lock.2000 $BIN --current-thread --subject lock --pairs 2000
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/pc.lock.4000 $BIN --current-thread --subject lock --pairs 4000
//! # Ir per pair = (total of the second - total of the first) / 2000; the totals are the
//! # "summary:" line of each file, or: callgrind_annotate /tmp/pc.lock.4000 | head
//! ```
//!
//! `scripts/pair-cost-callgrind.sh` runs both for every subject and prints the table.
//! Per function: `callgrind_annotate --inclusive=yes /tmp/pc.lock.4000`, or the difference
//! of two runs' self costs to see where a pair's instructions go.

mod common;

use std::alloc::System;
use std::time::Duration;

use ferrisson_redis::{Client, ExpirableSemaphore, FairLock, Lock, Semaphore, SimpleLock};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

use common::stats::env_number;
use common::topology::{Deployment, Raw, Topology};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const CAD: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
/// The floor's lease (ferrisson's primitives use their defaults).
const LEASE: Duration = Duration::from_secs(30);
/// Warm-up pairs per task before anything is counted.
const WARM_UP: usize = 200;
/// Tasks (and distinct keys) of the concurrent rows.
const TASKS: usize = 64;

/// The subjects, in table order.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Floor,
    Simple,
    Lock,
    Semaphore,
    Expirable,
    Fair,
}

const KINDS: [Kind; 6] = [
    Kind::Floor,
    Kind::Simple,
    Kind::Lock,
    Kind::Semaphore,
    Kind::Expirable,
    Kind::Fair,
];

impl Kind {
    /// The name `--subject` takes.
    fn label(self) -> &'static str {
        match self {
            Self::Floor => "floor",
            Self::Simple => "simple",
            Self::Lock => "lock",
            Self::Semaphore => "semaphore",
            Self::Expirable => "expirable",
            Self::Fair => "fair",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Floor => "raw floor (SET NX PX + CAD script)",
            Self::Simple => "`SimpleLock`",
            Self::Lock => "`Lock` (watchdog)",
            Self::Semaphore => "`Semaphore` (1 permit)",
            Self::Expirable => "`ExpirableSemaphore` (watchdog)",
            Self::Fair => "`FairLock` (watchdog)",
        }
    }

    fn parse(label: &str) -> anyhow::Result<Self> {
        KINDS
            .into_iter()
            .find(|kind| kind.label() == label)
            .ok_or_else(|| {
                let names: Vec<&str> = KINDS.iter().map(|k| k.label()).collect();
                anyhow::anyhow!("--subject takes one of {names:?}, not {label:?}")
            })
    }
}

/// What the subjects run on.
struct Peers {
    raw: Raw,
    cad: redis::Script,
    client: Client,
}

/// One lock or semaphore, ready for pairs.
enum Subject {
    Floor {
        raw: Raw,
        cad: redis::Script,
        key: String,
    },
    Simple(SimpleLock),
    Lock(Lock),
    Semaphore(Semaphore),
    Expirable(ExpirableSemaphore),
    Fair(FairLock),
}

impl Subject {
    async fn new(kind: Kind, peers: &Peers, key: String) -> anyhow::Result<Self> {
        let client = &peers.client;
        Ok(match kind {
            Kind::Floor => Self::Floor {
                raw: peers.raw.clone(),
                cad: peers.cad.clone(),
                key,
            },
            Kind::Simple => Self::Simple(client.simple_lock(&key)?),
            Kind::Lock => Self::Lock(client.lock(&key)?),
            Kind::Semaphore => {
                let semaphore = client.semaphore(&key)?;
                anyhow::ensure!(semaphore.try_set_permits(1).await?, "{key} was set up");
                Self::Semaphore(semaphore)
            }
            Kind::Expirable => {
                let semaphore = client.expirable_semaphore(&key)?;
                anyhow::ensure!(semaphore.try_set_permits(1).await?, "{key} was set up");
                Self::Expirable(semaphore)
            }
            Kind::Fair => Self::Fair(client.fair_lock(&key)?),
        })
    }

    /// One lock + unlock (acquire + release); the subject must be free.
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
            Self::Simple(lock) => lock.lock().await?.unlock().await?,
            Self::Lock(lock) => lock.lock().await?.unlock().await?,
            Self::Semaphore(semaphore) => semaphore.acquire().await?.release().await?,
            Self::Expirable(semaphore) => semaphore.acquire().await?.release().await?,
            Self::Fair(lock) => lock.lock().await?.unlock().await?,
        }
        Ok(())
    }
}

/// What a stretch of pairs allocated.
#[derive(Clone, Copy, Default)]
struct Allocated {
    allocations: usize,
    reallocations: usize,
    bytes: usize,
}

impl Allocated {
    fn of(stats: stats_alloc::Stats) -> Self {
        Self {
            allocations: stats.allocations,
            reallocations: stats.reallocations,
            bytes: stats.bytes_allocated,
        }
    }

    /// Per pair, from a run of `n` pairs and one of `2n`.
    fn per_pair(single: Self, double: Self, n: usize) -> [f64; 3] {
        let per = |a: usize, b: usize| (b as f64 - a as f64) / n as f64;
        [
            per(single.allocations, double.allocations),
            per(single.reallocations, double.reallocations),
            per(single.bytes, double.bytes),
        ]
    }
}

/// Runs `pairs` pairs on each of `subjects`, each on a task of its own (as an
/// application's code runs), and returns the subjects.
async fn run_pairs(subjects: Vec<Subject>, pairs: usize) -> anyhow::Result<Vec<Subject>> {
    let tasks: Vec<_> = subjects
        .into_iter()
        .map(|mut subject| {
            tokio::spawn(async move {
                for _ in 0..pairs {
                    subject.pair().await?;
                }
                anyhow::Ok(subject)
            })
        })
        .collect();
    let mut back = Vec::with_capacity(tasks.len());
    for task in tasks {
        back.push(task.await??);
    }
    Ok(back)
}

/// Subjects of `kind` on `tasks` distinct keys, warmed up.
async fn subjects(kind: Kind, peers: &Peers, tasks: usize) -> anyhow::Result<Vec<Subject>> {
    let mut subjects = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let key = format!("pair-cost:{}:{tasks}:{task}", kind.label());
        subjects.push(Subject::new(kind, peers, key).await?);
    }
    run_pairs(subjects, WARM_UP).await
}

/// Allocations per pair of `kind` with `tasks` tasks of `per_task` and `2 * per_task`
/// pairs each.
async fn allocations(
    kind: Kind,
    peers: &Peers,
    tasks: usize,
    per_task: usize,
) -> anyhow::Result<[f64; 3]> {
    let subjects = subjects(kind, peers, tasks).await?;
    let region = Region::new(GLOBAL);
    let subjects = run_pairs(subjects, per_task).await?;
    let single = Allocated::of(region.change());
    let region = Region::new(GLOBAL);
    run_pairs(subjects, 2 * per_task).await?;
    let double = Allocated::of(region.change());
    Ok(Allocated::per_pair(single, double, tasks * per_task))
}

/// `--name value` or `--name=value` among the arguments.
fn arg_value(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let flag = format!("--{name}");
    let prefix = format!("--{name}=");
    args.iter().enumerate().find_map(|(i, arg)| {
        if *arg == flag {
            args.get(i + 1).cloned()
        } else {
            arg.strip_prefix(&prefix).map(str::to_owned)
        }
    })
}

fn main() -> anyhow::Result<()> {
    if std::env::args().any(|a| a == "--noop-recorder") {
        metrics::set_global_recorder(metrics::NoopRecorder)
            .map_err(|_| anyhow::anyhow!("a recorder was installed already"))?;
        println!("(a no-op metrics recorder is installed)\n");
    }
    let runtime = if std::env::args().any(|a| a == "--current-thread") {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?
    };
    let deployment = Deployment::start(Topology::Single)?;
    runtime.block_on(async {
        let peers = Peers {
            raw: deployment.floor_connection().await?,
            cad: redis::Script::new(CAD),
            client: common::connect(&deployment.url()).await?,
        };
        match arg_value("subject") {
            Some(label) => one_subject(Kind::parse(&label)?, &peers).await,
            None => table(&peers).await,
        }
    })
}

/// The callgrind mode: one subject, warm-up, then `--pairs` pairs over `--tasks` tasks.
async fn one_subject(kind: Kind, peers: &Peers) -> anyhow::Result<()> {
    let pairs: usize = arg_value("pairs").map_or(Ok(1000), |v| v.parse())?;
    let tasks: usize = arg_value("tasks").map_or(Ok(1), |v| v.parse())?;
    anyhow::ensure!(
        tasks > 0 && pairs.is_multiple_of(tasks),
        "--pairs must be a multiple of --tasks"
    );
    let subjects = subjects(kind, peers, tasks).await?;
    let region = Region::new(GLOBAL);
    run_pairs(subjects, pairs / tasks).await?;
    let counted = Allocated::of(region.change());
    println!(
        "{}: {pairs} pairs on {tasks} task(s) after {WARM_UP} warm-up pairs per task: {} allocations, {} reallocations, {} bytes",
        kind.label(),
        counted.allocations,
        counted.reallocations,
        counted.bytes
    );
    Ok(())
}

/// The default mode: every subject's allocations per pair, on one task and on 64.
async fn table(peers: &Peers) -> anyhow::Result<()> {
    let n = usize::try_from(env_number("PAIR_COST_N", 1000))?.max(1);
    let per_task = usize::try_from(env_number("PAIR_COST_TASK_N", 20))?.max(1);
    println!(
        "## Client allocations per pair (one task: ({n}+{n}) - {n} pairs; {TASKS} tasks on {TASKS} keys: {TASKS} x (({per_task}+{per_task}) - {per_task}) pairs)\n"
    );
    println!(
        "| subject | allocations/pair | reallocations/pair | bytes/pair | allocations/pair, {TASKS} tasks | reallocations/pair, {TASKS} tasks | bytes/pair, {TASKS} tasks |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for kind in KINDS {
        let [a1, r1, b1] = allocations(kind, peers, 1, n).await?;
        let [a64, r64, b64] = allocations(kind, peers, TASKS, per_task).await?;
        println!(
            "| {} | {a1:.2} | {r1:.2} | {b1:.0} | {a64:.2} | {r64:.2} | {b64:.0} |",
            kind.name()
        );
    }
    Ok(())
}

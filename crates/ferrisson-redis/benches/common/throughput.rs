//! Throughput of pairs (lock + unlock, acquire + release) and what each pair costs.
//!
//! `tasks` tasks loop on one contestant for a slice of time. The contestants of a table
//! (a floor first, then what is compared with it) are measured in interleaved rounds:
//! floor, A, B, floor, A, B, ..., so that a change in the machine's load hits them alike.
//! Every slice is bracketed by two [`Snapshot`]s, so it brings its own client CPU, Redis
//! CPU and Redis commands; a row shows the medians over rounds, and each ratio is the
//! median of the per-round ratios to the floor of the same round.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use super::cost::{Cost, Nodes, Snapshot};
use super::stats::median;

/// The columns [`print_rows`] writes after the caller's leading cells.
pub const COLUMNS: &str = "pairs/s | / floor | client CPU µs/pair | / floor | Redis CPU µs/pair | / floor | Redis calls per pair (scripts' inner calls included) |";
/// Their alignment row.
pub const ALIGNMENT: &str = "---:|---:|---:|---:|---:|---:|---|";

/// Shared by the tasks of one slice: whether to go on, and how many pairs are done.
#[derive(Default)]
pub struct Pairs {
    stop: AtomicBool,
    done: AtomicU64,
}

impl Pairs {
    pub fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
    }

    /// Counts one finished pair.
    pub fn done(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }

    fn count(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }
}

type TaskFn = dyn Fn(usize, Arc<Pairs>) -> anyhow::Result<BoxFuture<'static, anyhow::Result<()>>>;

/// One row of a table: a name and how to make its task number `index`.
pub struct Contestant {
    pub name: String,
    task: Box<TaskFn>,
}

impl Contestant {
    /// `task(index, pairs)` makes the loop of task `index`: it must run pairs while
    /// `pairs.running()` and call `pairs.done()` after each.
    pub fn new<F, Fut>(name: impl Into<String>, task: F) -> Self
    where
        F: Fn(usize, Arc<Pairs>) -> anyhow::Result<Fut> + 'static,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        Self {
            name: name.into(),
            task: Box::new(move |index, pairs| Ok(task(index, pairs)?.boxed())),
        }
    }
}

/// What one slice did and cost.
pub struct Slice {
    pub pairs: u64,
    pub cost: Cost,
}

impl Slice {
    pub fn rate(&self) -> f64 {
        self.pairs as f64 / self.cost.seconds
    }

    fn client_us(&self) -> f64 {
        self.cost.client_us_per(self.pairs.max(1) as f64)
    }

    fn redis_us(&self) -> f64 {
        self.cost.redis_us_per(self.pairs.max(1) as f64)
    }
}

/// Runs `contestant` on `tasks` tasks for `length`; `info` reads Redis's counters.
pub async fn slice(
    info: &mut impl Nodes,
    contestant: &Contestant,
    tasks: usize,
    length: Duration,
) -> anyhow::Result<Slice> {
    let pairs = Arc::new(Pairs::default());
    let mut handles = Vec::with_capacity(tasks);
    for index in 0..tasks {
        handles.push(tokio::spawn((contestant.task)(index, Arc::clone(&pairs))?));
    }
    let done_before = pairs.count();
    let before = Snapshot::take(info).await?;
    tokio::time::sleep(length).await;
    let done_after = pairs.count();
    let after = Snapshot::take(info).await?;
    pairs.stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.await??;
    }
    Ok(Slice {
        pairs: done_after - done_before,
        cost: Cost::between(&before, &after),
    })
}

/// The slices of every contestant, `rounds` interleaved rounds of `length` each, after
/// one uncounted warm-up slice each (script loading, connections, allocator).
pub async fn compare(
    info: &mut impl Nodes,
    contestants: &[Contestant],
    tasks: usize,
    rounds: usize,
    length: Duration,
) -> anyhow::Result<Vec<Vec<Slice>>> {
    for contestant in contestants {
        slice(info, contestant, tasks, length / 5).await?;
    }
    let mut slices: Vec<Vec<Slice>> = contestants.iter().map(|_| Vec::new()).collect();
    for _ in 0..rounds {
        for (contestant, row) in contestants.iter().zip(&mut slices) {
            row.push(slice(info, contestant, tasks, length).await?);
        }
    }
    Ok(slices)
}

/// Prints one markdown row per contestant (`lead` cells first, then [`COLUMNS`]); the
/// first contestant is the floor.
pub fn print_rows(lead: &str, contestants: &[Contestant], slices: &[Vec<Slice>]) {
    let Some(floor) = slices.first() else {
        return;
    };
    for (contestant, row) in contestants.iter().zip(slices) {
        let paired = |value: fn(&Slice) -> f64| paired(row, floor, value);
        let mut total = Cost::default();
        for s in row {
            total.add(&s.cost);
        }
        let pairs: u64 = row.iter().map(|s| s.pairs).sum();
        println!(
            "| {lead} | {} | {:.0} | {:.2} | {:.1} | {:.2} | {:.1} | {:.2} | {} |",
            contestant.name,
            median(row.iter().map(Slice::rate).collect()),
            paired(Slice::rate),
            median(row.iter().map(Slice::client_us).collect()),
            paired(Slice::client_us),
            median(row.iter().map(Slice::redis_us).collect()),
            paired(Slice::redis_us),
            total.calls_per(pairs.max(1) as f64),
        );
    }
}

/// The median over rounds of `value(row's slice) / value(reference's slice)`, each round
/// against the reference of the same round.
fn paired(row: &[Slice], reference: &[Slice], value: fn(&Slice) -> f64) -> f64 {
    median(
        row.iter()
            .zip(reference)
            .map(|(s, r)| value(s) / value(r))
            .collect(),
    )
}

/// The columns [`print_versus`] writes after the caller's leading cells.
pub const VERSUS_COLUMNS: &str =
    "pairs/s ratio | client CPU µs/pair ratio | Redis CPU µs/pair ratio |";
/// Their alignment row.
pub const VERSUS_ALIGNMENT: &str = "---:|---:|---:|";

/// Prints one markdown row comparing contestant `row` with contestant `reference` of the
/// same table (indices into `contestants`): each ratio is the median of the per-round
/// ratios, as [`print_rows`] computes them against the floor.
pub fn print_versus(
    lead: &str,
    contestants: &[Contestant],
    slices: &[Vec<Slice>],
    row: usize,
    reference: usize,
) {
    let (Some(r), Some(f)) = (slices.get(row), slices.get(reference)) else {
        return;
    };
    println!(
        "| {lead} | {} / {} | {:.2} | {:.2} | {:.2} |",
        contestants[row].name,
        contestants[reference].name,
        paired(r, f, Slice::rate),
        paired(r, f, Slice::client_us),
        paired(r, f, Slice::redis_us),
    );
}

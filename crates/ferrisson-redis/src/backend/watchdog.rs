//! One task per client that renews every held watchdog lock, in batches.
//!
//! On one server or a Sentinel master a batch is one script call per layout and 100 holds.
//! On a cluster a script call with declared keys must stay in one hash slot, and distinct
//! lock names are almost all alone in theirs; so there the holds are grouped by the master
//! serving their slot, and each master gets one request per round: a pipeline of
//! `renew_on_node.lua` calls of up to 100 holds each, of any layouts and slots. A hold
//! whose slot that master no longer serves (moved, or moving and its key gone) is renewed
//! per slot, where the call follows `MOVED` and `ASK`.
//!
//! Each renewal is timed from before its request: a hold stays valid until that instant
//! plus the lease. Errors are retried until the hold's local deadline; a lock found gone
//! or taken, or a deadline that passes, fires the hold's lost-lock signal.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::{join, join_all};
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;
use tracing::Instrument;
use tracing::field::Empty;

use crate::backend::connection::Connection;
use crate::backend::holds::{Hold, Renewal};
use crate::backend::ids::OwnerId;
use crate::backend::scripts::lock::Renew;
use crate::backend::scripts::renew_on_node::{NodeRenewal, RenewOnNode};
use crate::backend::slot::key_slot;
use crate::observe::metrics::Instruments;

/// Most locks renewed by one script call.
pub(crate) const BATCH: usize = 100;

/// Fewest entries before released holds are pruned from the list outside a scan.
const PRUNE_FLOOR: usize = 64;

struct Shared {
    registry: Mutex<Registry>,
    wake: Notify,
    lease: Duration,
}

struct Registry {
    holds: Vec<Arc<Hold>>,
    /// Prune released holds when the list reaches this length (amortised O(1) per hold).
    prune_at: usize,
    /// What the renewal task is doing, so that a new hold wakes it only when needed.
    state: TaskState,
}

#[derive(Clone, Copy)]
enum TaskState {
    /// Renewing: it scans the list again when done.
    Busy,
    /// Asleep until this instant.
    SleepingUntil(Instant),
    /// Asleep with nothing to renew.
    Idle,
}

impl Shared {
    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Handle to the client's renewal task.
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

impl Watchdog {
    pub(crate) fn start(
        connection: Connection,
        lease: Duration,
        shutdown: oneshot::Receiver<()>,
    ) -> Self {
        let shared = Arc::new(Shared {
            registry: Mutex::new(Registry {
                holds: Vec::new(),
                prune_at: PRUNE_FLOOR,
                state: TaskState::Idle,
            }),
            wake: Notify::new(),
            lease,
        });
        tokio::spawn(run(connection, Arc::clone(&shared), shutdown));
        Self { shared }
    }

    /// Starts renewing `hold` every lease/3 until it is released or lost.
    pub(crate) fn watch(&self, hold: &Arc<Hold>) {
        if hold.is_renewing() {
            return;
        }
        hold.start_renewing(self.shared.lease);
        let due = hold.next_renewal();
        let mut registry = self.shared.registry();
        if registry.holds.len() >= registry.prune_at {
            registry.holds.retain(|h| h.is_renewing());
            registry.prune_at = (registry.holds.len() * 2).max(PRUNE_FLOOR);
        }
        registry.holds.push(Arc::clone(hold));
        // Lock-heavy code takes and releases thousands of locks a second: wake the task
        // only if it would otherwise sleep past this hold's first renewal.
        let must_wake = match registry.state {
            TaskState::Busy => false,
            TaskState::SleepingUntil(at) => at > due,
            TaskState::Idle => true,
        };
        if must_wake {
            registry.state = TaskState::Busy;
            self.shared.wake.notify_one();
        }
    }

    /// Number of holds being renewed (for tests and inspection).
    pub(crate) fn len(&self) -> usize {
        let mut registry = self.shared.registry();
        registry.holds.retain(|h| h.is_renewing());
        registry.holds.len()
    }
}

async fn run(connection: Connection, shared: Arc<Shared>, mut shutdown: oneshot::Receiver<()>) {
    let lease = shared.lease;
    // Renew holds that fall due within this margin together, to fill batches.
    let early = lease / 6;
    let retry_delay = (lease / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
    loop {
        let now = Instant::now();
        let (due, next_wake) = {
            let mut registry = shared.registry();
            registry.holds.retain(|h| h.is_renewing());
            registry.prune_at = (registry.holds.len() * 2).max(PRUNE_FLOOR);
            let mut due = Vec::new();
            let mut next_wake: Option<Instant> = None;
            for hold in &registry.holds {
                if now >= hold.validity().deadline {
                    // Starved past the deadline: the lock may be gone; never renew it now.
                    tracing::warn!(lock = %hold.name, "lock lost: its lease ran out before a renewal");
                    hold.mark_lost();
                    continue;
                }
                let at = hold.next_renewal();
                let margin = if hold.is_retrying() {
                    Duration::ZERO
                } else {
                    early
                };
                if at <= now + margin {
                    due.push(Arc::clone(hold));
                } else {
                    next_wake = Some(next_wake.map_or(at, |w| w.min(at)));
                }
            }
            registry.state = match (due.is_empty(), next_wake) {
                (false, _) => TaskState::Busy,
                (true, Some(at)) => TaskState::SleepingUntil(at),
                (true, None) => TaskState::Idle,
            };
            (due, next_wake)
        };

        if due.is_empty() {
            let sleep = async {
                match next_wake {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = &mut shutdown => return,
                () = shared.wake.notified() => {}
                () = sleep => {}
            }
            continue;
        }

        tokio::select! {
            _ = &mut shutdown => return,
            () = renew_round(&connection, due, lease, retry_delay) => {}
        }
    }
}

/// Renews the holds that fell due, all requests at once: on a cluster one request per
/// node (a pipeline of calls of up to [`BATCH`] holds each), elsewhere one call per
/// layout and [`BATCH`] holds.
async fn renew_round(
    connection: &Connection,
    due: Vec<Arc<Hold>>,
    lease: Duration,
    retry_delay: Duration,
) {
    let Some(routes) = connection.renewal_routes().await else {
        return renew_per_slot(connection, due, lease, retry_delay).await;
    };
    // The cluster's slot map as last read: each hold goes to the master that serves its
    // key's slot there. A key whose slot moved since is answered "elsewhere" by that
    // node and sent again on its own, where the cluster routes it now.
    let mut by_node: HashMap<&str, Vec<Arc<Hold>>> = HashMap::new();
    let mut unrouted = Vec::new();
    for hold in due {
        match routes.address_of(key_slot(hold.key().as_bytes())) {
            Some(address) => by_node.entry(address).or_default().push(hold),
            None => unrouted.push(hold),
        }
    }
    let on_nodes = by_node.iter().map(|(address, holds)| {
        renew_on_node(connection, address, holds, lease, retry_delay).instrument(renew_span(holds))
    });
    let unrouted = async {
        if !unrouted.is_empty() {
            connection.forget_renewal_routes();
            renew_per_slot(connection, unrouted, lease, retry_delay).await;
        }
    };
    join(join_all(on_nodes), unrouted).await;
}

/// Renews `due` with one call per layout and call group (on a cluster a hash slot, where
/// the call follows `MOVED` and `ASK`), [`BATCH`] holds at most per call.
async fn renew_per_slot(
    connection: &Connection,
    mut due: Vec<Arc<Hold>>,
    lease: Duration,
    retry_delay: Duration,
) {
    let group = |hold: &Arc<Hold>| (hold.renewal, connection.call_group(hold.key()));
    due.sort_by_cached_key(group);
    let batches = due
        .chunk_by(|a, b| group(a) == group(b))
        .flat_map(|same| same.chunks(BATCH))
        .map(|batch| {
            renew_batch(connection, batch, lease, retry_delay).instrument(renew_span(batch))
        });
    join_all(batches).await;
}

/// Renews holds of any layouts on the cluster node at `address` in one request: a
/// pipeline of one call per [`BATCH`] holds. Holds the node no longer serves, those of a
/// call the node refused, and all of them when the node cannot be reached (it failed
/// over, it left), are renewed per slot instead.
async fn renew_on_node(
    connection: &Connection,
    address: &str,
    holds: &[Arc<Hold>],
    lease: Duration,
    retry_delay: Duration,
) {
    let batches: Vec<Vec<(Renewal, &str, OwnerId)>> = holds
        .chunks(BATCH)
        .map(|batch| {
            batch
                .iter()
                .map(|h| (h.renewal, h.key(), h.owner))
                .collect()
        })
        .collect();
    let calls: Vec<RenewOnNode<'_>> = batches
        .iter()
        .map(|batch| RenewOnNode {
            lease,
            holds: batch,
        })
        .collect();
    let sent_at = Instant::now();
    let reply = tokio::time::timeout_at(
        give_up_at(holds, sent_at, retry_delay),
        connection.run_all_on_node(&calls, address),
    )
    .await;
    let replies = match reply {
        Ok(Ok(replies)) if replies.len() == calls.len() => replies,
        Ok(Err(e)) if reached_no_node(&e) => {
            tracing::debug!(node = address, error = %e, "renewal request to a node failed; renewing per slot");
            connection.forget_renewal_routes();
            return renew_per_slot(connection, holds.to_vec(), lease, retry_delay).await;
        }
        Ok(Ok(_)) => return settle(holds, lease, Ok(Ok(Vec::new())), sent_at, retry_delay),
        Ok(Err(e)) => return settle(holds, lease, Ok(Err(e)), sent_at, retry_delay),
        Err(elapsed) => return settle(holds, lease, Err(elapsed), sent_at, retry_delay),
    };
    let mut answered = Vec::with_capacity(holds.len());
    let mut renewed = Vec::with_capacity(holds.len());
    let mut elsewhere = Vec::new();
    for (batch, reply) in holds.chunks(BATCH).zip(replies) {
        match reply {
            Ok(results) if results.len() == batch.len() => {
                for (hold, result) in batch.iter().zip(results) {
                    match result {
                        NodeRenewal::Elsewhere => elsewhere.push(Arc::clone(hold)),
                        NodeRenewal::Renewed | NodeRenewal::Lost => {
                            answered.push(Arc::clone(hold));
                            renewed.push(result == NodeRenewal::Renewed);
                        }
                    }
                }
            }
            Ok(_) => settle(batch, lease, Ok(Ok(Vec::new())), sent_at, retry_delay),
            Err(e) => {
                tracing::debug!(node = address, error = %e, "a renewal call was refused; renewing its holds per slot");
                elsewhere.extend(batch.iter().cloned());
            }
        }
    }
    settle(&answered, lease, Ok(Ok(renewed)), sent_at, retry_delay);
    if !elsewhere.is_empty() {
        tracing::debug!(
            node = address,
            holds = elsewhere.len(),
            "renewals for slots the node no longer serves; sending them where the slots are"
        );
        connection.forget_renewal_routes();
        renew_per_slot(connection, elsewhere, lease, retry_delay).await;
    }
}

/// True when a call sent to one node failed because that node could not take it (it went
/// away, refused the connection, is not a master any more), not for want of time: sent
/// per slot, the calls go wherever the cluster routes them now.
fn reached_no_node(e: &crate::api::error::Error) -> bool {
    crate::api::error::failed_command(e).is_some_and(|e| !e.is_timeout())
}

/// A reply that arrives after every hold's deadline is useless: give up at the earliest.
fn give_up_at(batch: &[Arc<Hold>], sent_at: Instant, retry_delay: Duration) -> Instant {
    let earliest_deadline = batch
        .iter()
        .map(|h| h.validity().deadline)
        .min()
        .unwrap_or(sent_at);
    earliest_deadline.max(sent_at + retry_delay)
}

async fn renew_batch(
    connection: &Connection,
    batch: &[Arc<Hold>],
    lease: Duration,
    retry_delay: Duration,
) {
    let Some(first) = batch.first() else {
        return;
    };
    let holds: Vec<(&str, OwnerId)> = batch.iter().map(|h| (h.key(), h.owner)).collect();
    let call = Renew {
        script: first.renewal.script(),
        lease,
        holds: &holds,
    };
    let sent_at = Instant::now();
    let reply = tokio::time::timeout_at(
        give_up_at(batch, sent_at, retry_delay),
        connection.run(&call),
    )
    .await;
    settle(batch, lease, reply, sent_at, retry_delay);
}

/// Records what a renewal call sent at `sent_at` did for each hold of `batch`: extended,
/// lost, or (the call failed) to be tried again until its deadline. Records the outcome
/// on the current `ferrisson.renew` span.
fn settle(
    batch: &[Arc<Hold>],
    lease: Duration,
    reply: Result<crate::api::error::Result<Vec<bool>>, tokio::time::error::Elapsed>,
    sent_at: Instant,
    retry_delay: Duration,
) {
    if batch.is_empty() {
        return;
    }
    let span = tracing::Span::current();
    match reply {
        Ok(Ok(renewed)) if renewed.len() == batch.len() => {
            let mut lost = 0_u64;
            for (hold, renewed) in batch.iter().zip(&renewed) {
                if *renewed {
                    hold.extend(sent_at + lease);
                    hold.set_next_renewal(sent_at + lease / 3);
                } else {
                    tracing::warn!(lock = %hold.name, "lock lost: renewal found it gone or taken");
                    hold.mark_lost();
                    lost += 1;
                }
            }
            count_per_kind(
                batch
                    .iter()
                    .zip(renewed)
                    .filter(|(_, r)| *r)
                    .map(|(h, _)| h),
            )
            .for_each(|(instruments, n)| instruments.renewed(n));
            span.record("outcome", if lost == 0 { "renewed" } else { "lost" });
            span.record("renewed", batch.len() as u64 - lost);
            span.record("lost", lost);
        }
        other => {
            let now = Instant::now();
            let outcome = match other {
                Ok(Ok(_)) => {
                    tracing::warn!("lock renewal: malformed reply");
                    "malformed"
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "lock renewal failed; retrying until the lease runs out");
                    "error"
                }
                Err(_) => {
                    tracing::warn!("lock renewal timed out; retrying until the lease runs out");
                    "timeout"
                }
            };
            count_per_kind(batch.iter()).for_each(|(instruments, n)| instruments.renewal_failed(n));
            let mut lost = 0_u64;
            for hold in batch {
                if now >= hold.validity().deadline {
                    tracing::warn!(lock = %hold.name, "lock lost: no renewal succeeded before its lease ran out");
                    hold.mark_lost();
                    lost += 1;
                } else {
                    hold.set_retry(now + retry_delay);
                }
            }
            span.record("outcome", outcome);
            span.record("renewed", 0_u64);
            span.record("lost", lost);
        }
    }
}

/// The `ferrisson.renew` span of one renewal call; a batch of one lock names it.
fn renew_span(batch: &[Arc<Hold>]) -> tracing::Span {
    let span = tracing::debug_span!(
        "ferrisson.renew",
        holds = batch.len(),
        name = Empty,
        kind = Empty,
        outcome = Empty,
        renewed = Empty,
        lost = Empty,
    );
    if let [hold] = batch {
        let probe = hold.meter().probe();
        span.record("name", &*probe.name);
        span.record("kind", probe.kind().label());
    }
    span
}

/// How many of `holds` each set of metric keys has, counting runs of holds that share
/// one (most batches hold one kind and class), so that a batch of a hundred renewals
/// costs a few recorder calls, not a hundred.
fn count_per_kind<'a>(
    holds: impl Iterator<Item = &'a Arc<Hold>>,
) -> impl Iterator<Item = (&'a Instruments, u64)> {
    let mut holds = holds.peekable();
    std::iter::from_fn(move || {
        let first = &holds.next()?.meter().probe().instruments;
        let mut n = 1;
        while holds
            .next_if(|h| Arc::ptr_eq(&h.meter().probe().instruments, first))
            .is_some()
        {
            n += 1;
        }
        Some((&**first, n))
    })
}

//! A held watchdog lock, clients waiting for it, and a topology fault in between: what
//! the Sentinel and Cluster scenarios share.
//!
//! Client A (client 0) takes the lock and enters the resource with its token; each
//! waiter (clients 1 to [`WAITERS`]) tries once (refused: A holds it) and then waits.
//! The fault runs while A watches its guard (every 5 ms, and its `lost()`); A goes on
//! watching for a while after the fault, writes with its token if it still holds the
//! lock, leaves and releases. Each waiter, once granted, runs a critical section and
//! releases; a waiter whose wait ends in an error (a failover in progress) waits again,
//! up to a bound counted from A's release.
//!
//! Two counts per iteration, summed over the run (`extra` column):
//!
//! - `waiters_not_granted`: waiters not granted within the bound after A's release;
//! - `silent_losses`: a client (A or a waiter) still believed it held the lock
//!   (`is_held()`, so its `lost()` had not fired) when its release found the lock gone
//!   or another owner's;
//! - `silent_double_grants`: iterations with a double grant in which A's `lost()` never
//!   fired (A believed to its release while another client held the lock).

use std::sync::Arc;
use std::time::Duration;

use ferrisson::redis::{Lock, LockGuard};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use crate::checker::{Counters, check};
use crate::harness::expectations::Expectations;
use crate::harness::record::{
    acquire, belief, enter_checked, outcome, token, try_acquire, watch, write_with_token,
};
use crate::harness::scenario::Iteration;
use crate::history::{EventKind, Recorder, ReleaseOutcome};
use crate::resource::Resource;

/// Clients waiting for the lock besides its holder.
pub(crate) const WAITERS: usize = 2;

/// How long a waiter may take to be granted after the holder released: every waiter is
/// granted well within it when the topology is whole again.
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

/// The count of waiters never granted.
const NOT_GRANTED: &str = "waiters_not_granted";

/// How many acquires A makes before an iteration gives up on holding the lock.
const HOLDER_ATTEMPTS: usize = 5;
/// The count of releases that found the lock gone while its holder believed it held.
const SILENT_LOSSES: &str = "silent_losses";

/// One iteration's locks: A's, and one per waiter (each on a client of its own).
pub(crate) struct Contest<'a> {
    /// Client A's recorder (the holder); waiters record as clients 1, 2, ...
    pub(crate) a: &'a Recorder,
    /// Recorders of the waiters, one per lock in `waiters`.
    pub(crate) waiter_recorders: Vec<Recorder>,
    /// A's handle on the lock.
    pub(crate) holder: Lock,
    /// The waiters' handles on the same lock.
    pub(crate) waiters: Vec<Lock>,
    /// The clients' watchdog lease.
    pub(crate) lease: Duration,
    /// How long a waiter waits after A's release, errors included, before it counts as
    /// never granted.
    pub(crate) patience: Duration,
}

/// What came of A's acquire.
pub(crate) enum Held {
    /// A holds the lock and the waiters wait: run the fault.
    Holding(Running),
    /// A was not granted (recorded); nothing to run the fault against.
    NotGranted,
}

/// A contest under way: A watching its guard on a task of its own, the waiters waiting
/// on theirs. The fault runs between [`Contest::start`] and [`Running::finish`].
pub(crate) struct Running {
    stop_a: oneshot::Sender<()>,
    a: tokio::task::JoinHandle<()>,
    waiters: Vec<tokio::task::JoinHandle<()>>,
}

impl Contest<'_> {
    /// A takes the lock and enters the resource; each waiter is refused once and then
    /// waits. Returns once every waiter is waiting.
    pub(crate) async fn start(self) -> Held {
        let resource = Arc::new(Resource::default());
        // Before any fault, an acquire ends without a grant only on an error (recorded):
        // under load, a grant that needs replica acknowledgements can miss their timeout.
        // That is the machine, not the topology, so A tries again, a few times.
        let mut granted = None;
        for _ in 0..HOLDER_ATTEMPTS {
            granted = acquire(self.a, 0, &self.holder, self.lease * 10).await;
            if granted.is_some() {
                break;
            }
        }
        let Some(guard) = granted else {
            return Held::NotGranted;
        };
        enter_checked(self.a, 0, &guard, &resource);
        let (stop_a, stopped) = oneshot::channel();
        let (released_tx, released) = watch::channel(None);
        let a = tokio::spawn(hold_until(
            self.a.clone(),
            guard,
            Arc::clone(&resource),
            stopped,
            released_tx,
        ));
        let mut waiters = Vec::new();
        for (rec, lock) in self.waiter_recorders.into_iter().zip(self.waiters) {
            let (ready, waiting) = oneshot::channel();
            waiters.push(tokio::spawn(wait_turn(
                rec,
                lock,
                Arc::clone(&resource),
                self.lease,
                self.patience,
                ready,
                released.clone(),
            )));
            let _ = waiting.await;
        }
        Held::Holding(Running { stop_a, a, waiters })
    }
}

impl Running {
    /// After the fault: A watches for `after` more, then writes if it still holds the
    /// lock, leaves and releases; returns once every waiter has had its turn (or given
    /// up).
    ///
    /// # Errors
    ///
    /// When a task of the contest panicked.
    pub(crate) async fn finish(self, after: Duration) -> anyhow::Result<()> {
        tokio::time::sleep(after).await;
        let _ = self.stop_a.send(());
        self.a.await?;
        for waiter in self.waiters {
            waiter.await?;
        }
        Ok(())
    }
}

/// A's side: watches the guard until told to stop, writes with its token if it still
/// holds the lock, leaves and releases, counting a release that finds the lock gone
/// while A still believed it held.
async fn hold_until(
    rec: Recorder,
    guard: LockGuard,
    resource: Arc<Resource>,
    mut stop: oneshot::Receiver<()>,
    released_tx: watch::Sender<Option<Instant>>,
) {
    let mut lost_recorded = false;
    loop {
        belief(&rec, 0, &guard);
        let tick = tokio::time::sleep(Duration::from_millis(5));
        tokio::select! {
            _ = &mut stop => break,
            () = guard.lost(), if !lost_recorded => {
                rec.record(0, EventKind::Lost);
                lost_recorded = true;
            }
            () = tick => {}
        }
    }
    if guard.is_held() {
        write_with_token(&rec, 0, &guard, &resource);
    }
    resource.exit(&rec, 0);
    release_noting_silent_loss(&rec, 0, guard).await;
    released_tx.send_replace(Some(Instant::now()));
}

/// Releases `guard` as `record::release` does, and counts a release that found the lock
/// gone or another owner's while the guard still believed it held it (`silent_losses`).
async fn release_noting_silent_loss(rec: &Recorder, grant: usize, guard: LockGuard) {
    belief(rec, grant, &guard);
    let believed = guard.is_held();
    rec.record(grant, EventKind::ReleaseInvoked);
    let released = outcome(guard.unlock().await);
    let gone = matches!(released, ReleaseOutcome::NotOwner | ReleaseOutcome::Expired);
    rec.record(grant, EventKind::Released { outcome: released });
    count(rec, SILENT_LOSSES, believed && gone);
}

/// A waiter's critical section (as `record::critical_section`): enter, work while
/// watching, write if still held, leave; then the release, noting a silent loss.
async fn waiter_section(
    rec: &Recorder,
    grant: usize,
    guard: LockGuard,
    resource: &Resource,
    work: Duration,
) {
    if guard.is_held() {
        resource.enter(rec, grant, token(&guard));
        watch(rec, grant, &guard, work).await;
        if guard.is_held() {
            write_with_token(rec, grant, &guard, resource);
        }
        resource.exit(rec, grant);
    }
    release_noting_silent_loss(rec, grant, guard).await;
}

/// A waiter's side: one try while A holds the lock (refused), `ready`, then waits; an
/// acquire that ends without a grant (an error while the topology changes) waits again.
/// It gives up `patience` after A has released (`released` says when): however long
/// the fault keeps A holding, the waiter is judged on what follows A's release. Granted,
/// it runs a critical section and releases.
async fn wait_turn(
    rec: Recorder,
    lock: Lock,
    resource: Arc<Resource>,
    lease: Duration,
    patience: Duration,
    ready: oneshot::Sender<()>,
    mut released: watch::Receiver<Option<Instant>>,
) {
    let work = lease / 10;
    if let Some(guard) = try_acquire(&rec, 0, &lock).await {
        // Granted while A holds it: the checker counts the double grant.
        let _ = ready.send(());
        waiter_section(&rec, 0, guard, &resource, work).await;
        count(&rec, NOT_GRANTED, false);
        return;
    }
    let _ = ready.send(());
    let give_up = async {
        let at = match released.wait_for(Option::is_some).await {
            Ok(at) => at.unwrap_or_else(Instant::now),
            // A's task ended without saying so (it panicked): nothing to wait for.
            Err(_) => Instant::now(),
        };
        tokio::time::sleep_until(at + patience).await;
    };
    tokio::pin!(give_up);
    loop {
        tokio::select! {
            granted = acquire(&rec, 1, &lock, FOREVER) => {
                if let Some(guard) = granted {
                    waiter_section(&rec, 1, guard, &resource, work).await;
                    count(&rec, NOT_GRANTED, false);
                    return;
                }
            }
            () = &mut give_up => {
                count(&rec, NOT_GRANTED, true);
                return;
            }
        }
        // The acquire gave up on an error (recorded): a short pause before waiting again.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A waiter's wait: bounded by its patience after A's release, not by the call.
const FOREVER: Duration = Duration::from_secs(24 * 3600);

fn count(rec: &Recorder, name: &str, happened: bool) {
    rec.record(
        0,
        EventKind::Count {
            name: name.to_owned(),
            count: u64::from(happened),
        },
    );
}

/// Runs a blocking fault that a topology may let lapse (a failover the servers asked for
/// abort, or do not carry out within the test kit's 30 s), asking again at most twice.
/// Records how many times it asked again as the count `failovers_asked_again` of `rec`
/// (the table's `extra` column), so that a run shows how often that happened.
///
/// # Errors
///
/// The third failure.
pub(crate) fn ask_until_done<T>(
    rec: &Recorder,
    mut fault: impl FnMut() -> std::io::Result<T>,
) -> anyhow::Result<T> {
    let mut again = 0;
    loop {
        match fault() {
            Ok(done) => {
                rec.record(
                    0,
                    EventKind::Count {
                        name: ASKED_AGAIN.to_owned(),
                        count: again,
                    },
                );
                return Ok(done);
            }
            Err(e) if again < 2 => {
                tracing::warn!(error = %e, "the topology did not carry out the fault; asking again");
                again += 1;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The count of faults asked for again by [`ask_until_done`].
const ASKED_AGAIN: &str = "failovers_asked_again";

/// Counts the iteration as a silent double grant (`silent_double_grants`) when its
/// history has a double grant and A never recorded a lost signal: A went on believing to
/// its release while another client held the lock. Called once the contest finished.
pub(crate) fn record_silent_double_grant(it: &Iteration) {
    let events = it.history.events();
    let a_lost = events
        .iter()
        .any(|e| e.client == it.a.client() && e.kind == EventKind::Lost);
    count(
        &it.a,
        SILENT_DOUBLE_GRANTS,
        check(&events).double_grants > 0 && !a_lost,
    );
}

/// The count of iterations with a double grant A never learned of.
const SILENT_DOUBLE_GRANTS: &str = "silent_double_grants";

/// What every contest must show on top of [`Expectations::for_every_scenario`]: every
/// waiter granted in every iteration, no silent loss, no silent double grant. A count missing from the
/// counters means the contest never got that far: a failure too.
pub(crate) fn expect_waiters_granted_no_silent_loss(c: &Counters, expect: &mut Expectations) {
    expect_recorded(
        c,
        expect,
        &[NOT_GRANTED, SILENT_LOSSES, SILENT_DOUBLE_GRANTS],
    );
}

/// What a documented unsafe contest must still show: every waiter granted. Its silent
/// losses and double grants are counted and reported, not required to be zero.
pub(crate) fn expect_waiters_granted(c: &Counters, expect: &mut Expectations) {
    expect_recorded(c, expect, &[NOT_GRANTED]);
    for name in [SILENT_LOSSES, SILENT_DOUBLE_GRANTS] {
        if !c.counts.contains_key(name) {
            expect.fail(format!("{name} never recorded"));
        }
    }
}

/// Each count of `names` recorded and zero.
fn expect_recorded(c: &Counters, expect: &mut Expectations, names: &[&str]) {
    for &name in names {
        match c.counts.get(name) {
            Some(&n) => expect.zero(name, n),
            None => expect.fail(format!("{name} never recorded")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failures(counts: &[(&str, u64)]) -> Vec<String> {
        let c = Counters {
            counts: counts.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
            ..Counters::default()
        };
        let mut expect = Expectations::default();
        expect_waiters_granted_no_silent_loss(&c, &mut expect);
        expect.into_failures()
    }

    #[test]
    fn a_waiter_never_granted_or_a_silent_loss_fails_and_so_does_a_missing_count() {
        let none = [
            (NOT_GRANTED, 0),
            (SILENT_LOSSES, 0),
            (SILENT_DOUBLE_GRANTS, 0),
        ];
        assert!(failures(&none).is_empty());
        assert_eq!(
            failures(&[
                (NOT_GRANTED, 2),
                (SILENT_LOSSES, 1),
                (SILENT_DOUBLE_GRANTS, 1)
            ]),
            [
                "waiters_not_granted = 2, expected 0",
                "silent_losses = 1, expected 0",
                "silent_double_grants = 1, expected 0"
            ]
        );
        assert_eq!(
            failures(&[(NOT_GRANTED, 0), (SILENT_DOUBLE_GRANTS, 0)]),
            ["silent_losses never recorded"]
        );
    }

    #[test]
    fn a_documented_unsafe_contest_needs_only_its_waiters_granted() {
        let c = Counters {
            counts: [
                (NOT_GRANTED, 0),
                (SILENT_LOSSES, 3),
                (SILENT_DOUBLE_GRANTS, 1),
            ]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), *v))
            .collect(),
            ..Counters::default()
        };
        let mut expect = Expectations::default();
        expect_waiters_granted(&c, &mut expect);
        assert!(expect.into_failures().is_empty());
    }
}

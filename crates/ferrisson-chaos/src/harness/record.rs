//! The steps every scenario takes with a hold, each recorded in the history as it
//! happens: acquire, the grant, belief samples and lost signals, a critical section at
//! the resource, the release, and the keys left once the faults are healed.

use std::future::Future;
use std::time::Duration;

use ferrisson::redis::{Client, DistributedLock, Error, Fenced};

use crate::harness::hold::ObservedHold;
use crate::history::{EventKind, Recorder, ReleaseOutcome};
use crate::resource::Resource;

/// Acquires `lock`, waiting at most `wait`, recording the outcome (see [`acquire_with`]).
pub(crate) async fn acquire<L: DistributedLock<Guard: Fenced>>(
    rec: &Recorder,
    grant: usize,
    lock: &L,
    wait: Duration,
) -> Option<L::Guard> {
    acquire_with(rec, grant, || lock.lock_timeout(wait)).await
}

/// One try at `lock`, not waiting, recorded (see [`acquire_with`]).
pub(crate) async fn try_acquire<L: DistributedLock<Guard: Fenced>>(
    rec: &Recorder,
    grant: usize,
    lock: &L,
) -> Option<L::Guard> {
    acquire_with(rec, grant, || lock.try_lock()).await
}

/// A contender's turn: acquires `lock` (waiting at most `wait`) and, if granted, runs a
/// [`critical_section`] of `work`.
pub(crate) async fn acquire_and_work<L: DistributedLock<Guard: Fenced>>(
    rec: &Recorder,
    grant: usize,
    lock: &L,
    wait: Duration,
    resource: &Resource,
    work: Duration,
) {
    if let Some(guard) = acquire(rec, grant, lock, wait).await {
        critical_section(rec, grant, guard, resource, work).await;
    }
}

/// One acquire by `attempt` (bounded by the caller: a timeout or a single try), recorded.
/// A hold that arrives already expired (its reply was slower than its lease) is recorded
/// as a void grant `grant + 1000 * retry`, released, and the acquire retried, up to three
/// times.
pub(crate) async fn acquire_with<H, F, Fut>(
    rec: &Recorder,
    grant: usize,
    mut attempt: F,
) -> Option<H>
where
    H: ObservedHold,
    F: FnMut() -> Fut,
    Fut: Future<Output = ferrisson::redis::Result<Option<H>>>,
{
    for retry in 1..=4 {
        rec.record(grant, EventKind::AcquireInvoked);
        match attempt().await {
            Ok(Some(hold)) if !hold.is_held() => {
                let void = grant + 1000 * retry;
                granted(rec, void, &hold);
                release(rec, void, hold).await;
            }
            answer => return answered(rec, grant, answer),
        }
    }
    None
}

/// Records what an acquire answered (its invocation recorded already): the grant, or why
/// there is none. The hold is handed back as it came, expired or not.
pub(crate) fn answered<H: ObservedHold>(
    rec: &Recorder,
    grant: usize,
    answer: ferrisson::redis::Result<Option<H>>,
) -> Option<H> {
    let reason = match answer {
        Ok(Some(hold)) => {
            granted(rec, grant, &hold);
            return Some(hold);
        }
        Ok(None) => "not granted".to_owned(),
        // The record must say *why* (an OOM refusal, say), which the error may keep in
        // its source rather than in its own message.
        Err(e) => match std::error::Error::source(&e) {
            Some(cause) if !e.to_string().contains(&cause.to_string()) => format!("{e}: {cause}"),
            _ => e.to_string(),
        },
    };
    rec.record(grant, EventKind::AcquireFailed { reason });
    None
}

/// Records the grant and the hold's first belief.
pub(crate) fn granted(rec: &Recorder, grant: usize, hold: &impl ObservedHold) {
    let deadline = rec.now() + hold.remaining();
    rec.record(
        grant,
        EventKind::AcquireOk {
            token: token(hold),
            deadline,
        },
    );
    belief(rec, grant, hold);
}

/// Records one belief sample: `is_held()` and the deadline `remaining()` gives.
pub(crate) fn belief(rec: &Recorder, grant: usize, hold: &impl ObservedHold) {
    rec.belief(grant, || hold.is_held(), || hold.remaining());
}

/// Samples the hold's belief every 5 ms for `duration`, recording a lost signal.
pub(crate) async fn watch(
    rec: &Recorder,
    grant: usize,
    hold: &impl ObservedHold,
    duration: Duration,
) {
    let end = tokio::time::Instant::now() + duration;
    let mut lost_recorded = false;
    loop {
        belief(rec, grant, hold);
        if tokio::time::Instant::now() >= end {
            break;
        }
        let tick = tokio::time::sleep(Duration::from_millis(5));
        if lost_recorded {
            tick.await;
        } else {
            tokio::select! {
                () = hold.lost() => {
                    rec.record(grant, EventKind::Lost);
                    lost_recorded = true;
                }
                () = tick => {}
            }
        }
    }
}

/// Gives the hold back, recording its last belief, the call and its outcome.
pub(crate) async fn release(rec: &Recorder, grant: usize, hold: impl ObservedHold) {
    belief(rec, grant, &hold);
    rec.record(grant, EventKind::ReleaseInvoked);
    let outcome = outcome(hold.unlock().await);
    rec.record(grant, EventKind::Released { outcome });
}

/// How a release ended, as the history counts it.
pub(crate) fn outcome(result: ferrisson::redis::Result<()>) -> ReleaseOutcome {
    match result {
        Ok(()) => ReleaseOutcome::Ok,
        Err(Error::NotOwner { .. }) => ReleaseOutcome::NotOwner,
        Err(Error::LeaseExpired { .. }) => ReleaseOutcome::Expired,
        Err(e) => ReleaseOutcome::Error(e.to_string()),
    }
}

/// The hold's token as the history and the resource take it.
pub(crate) fn token(hold: &impl ObservedHold) -> Option<u64> {
    hold.fencing_token()
        .map(ferrisson::redis::FencingToken::get)
}

/// Enters the resource presenting the hold's token, and records the check (`is_held()`)
/// the holder goes on to act on.
pub(crate) fn enter_checked(
    rec: &Recorder,
    grant: usize,
    hold: &impl ObservedHold,
    resource: &Resource,
) {
    resource.enter(rec, grant, token(hold));
    belief(rec, grant, hold);
}

/// Writes with the hold's token (a hold without one has nothing to write with).
pub(crate) fn write_with_token(
    rec: &Recorder,
    grant: usize,
    hold: &impl ObservedHold,
    resource: &Resource,
) {
    if let Some(token) = token(hold) {
        resource.write(rec, grant, token);
    }
}

/// A well-behaved critical section: enter, work while watching the hold, write only if
/// still held, leave, release. A hold without a token (a reader) reads and never
/// writes: there is nothing it could present with a write. A hold that arrived too late
/// to be used enters nothing and is released at once.
pub(crate) async fn critical_section(
    rec: &Recorder,
    grant: usize,
    hold: impl ObservedHold,
    resource: &Resource,
    work: Duration,
) {
    if hold.is_held() {
        resource.enter(rec, grant, token(&hold));
        watch(rec, grant, &hold, work).await;
        if hold.is_held() {
            write_with_token(rec, grant, &hold, resource);
        }
        resource.exit(rec, grant);
    }
    release(rec, grant, hold).await;
}

/// A holder that checked `is_held()` before a fault acts on that check after it: writes
/// with its token anyway, leaves the resource and releases.
pub(crate) async fn act_on_stale_check(
    rec: &Recorder,
    grant: usize,
    hold: impl ObservedHold,
    resource: &Resource,
) {
    write_with_token(rec, grant, &hold, resource);
    resource.exit(rec, grant);
    release(rec, grant, hold).await;
}

/// After healing: how many of the scenario's keys are left, counted by `count` now and,
/// if any, once more a lease later (when every lease the scenario gave out has ended).
pub(crate) async fn record_keys_left<F, Fut>(
    rec: &Recorder,
    lease: Duration,
    count: F,
) -> anyhow::Result<()>
where
    F: Fn() -> Fut,
    Fut: Future<Output = anyhow::Result<u64>>,
{
    let mut left = count().await?;
    if left > 0 {
        tokio::time::sleep(lease + Duration::from_millis(100)).await;
        left = count().await?;
    }
    rec.record(0, EventKind::KeysLeft { count: left });
    Ok(())
}

/// After healing: the `Lock` called `name` must be free, at the latest one lease later.
pub(crate) async fn keys_left(
    rec: &Recorder,
    checker: &Client,
    name: &str,
    lease: Duration,
) -> anyhow::Result<()> {
    let lock = checker.lock(name)?;
    record_keys_left(rec, lease, || async {
        Ok(u64::from(lock.is_locked().await?))
    })
    .await
}

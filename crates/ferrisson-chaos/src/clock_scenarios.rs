//! Wall-clock steps: of the server (Redis expires keys by its wall clock, so a step
//! forward ends every lease at once: a documented unsafe case) and of a holder process
//! (no effect: every client-side deadline is monotonic).

use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use ferrisson_testkit::{ClockShift, RedisServer};

use crate::checker::Counters;
use crate::history::{EventKind, History};
use crate::holder_process::HolderProcess;
use crate::resource::Resource;
use crate::scenarios::{
    Config, Scenario, acquire, connect, critical_section, granted, keys_left, rec_belief, release,
    watch,
};

const HOUR: Duration = Duration::from_secs(3600);

/// How far the holder's wall clock was from an hour behind ours when it was told to go
/// on, in milliseconds: proves the step reached the holder.
const STEP_ERROR: &str = "holder_wall_clock_step_error";

/// The largest [`STEP_ERROR`] accepted: reading both clocks takes a few lines of I/O.
const STEP_TOLERANCE_MS: u64 = 2000;

pub(crate) async fn run_once(
    scenario: Scenario,
    config: &Config,
    history: &History,
    name: &str,
) -> anyhow::Result<()> {
    let clock = ClockShift::new()?;
    match scenario {
        Scenario::ServerClockJumped => server_clock_jumped(config, history, name, &clock).await,
        Scenario::ClientClockJumped => client_clock_jumped(config, history, name, &clock).await,
        _ => bail!("{} is not a clock scenario", scenario.name()),
    }
}

/// A holds the lock on a server whose wall clock then steps an hour forward: by the
/// server's clock A's lease ended long ago, so B gets the lock at once, while A's own
/// (monotonic) deadline is still running — a double grant. A checks `is_held()`, which
/// is still true, and writes: only fencing stops it. A's next renewal finds the key
/// gone and signals the loss.
async fn server_clock_jumped(
    config: &Config,
    history: &History,
    name: &str,
    clock: &ClockShift,
) -> anyhow::Result<()> {
    let lease = config.lease;
    let (a, b) = (history.recorder(0), history.recorder(1));
    let resource = Arc::new(Resource::default());
    let server = RedisServer::start_with_clock(clock, &[])?;
    let ca = connect(&server.url(), lease).await?;
    let cb = connect(&server.url(), lease).await?;
    let Some(guard) = acquire(&a, 0, &ca, name, lease * 10).await? else {
        bail!("A could not take the lock");
    };
    resource.enter(&a, 0, guard.fencing_token().get());
    rec_belief(&a, &guard);
    clock.set_ahead(HOUR)?;
    let Some(guard_b) = acquire(&b, 0, &cb, name, lease * 10).await? else {
        bail!("B did not get the lock after the server's clock step");
    };
    let b_token = guard_b.fencing_token().get();
    resource.enter(&b, 0, b_token);
    // A acts on a check that is true by its own clock.
    rec_belief(&a, &guard);
    if guard.is_held() {
        resource.write(&a, 0, guard.fencing_token().get());
    }
    resource.write(&b, 0, b_token);
    resource.exit(&b, 0);
    release(&b, 0, guard_b).await;
    watch(&a, 0, &guard, lease).await;
    resource.exit(&a, 0);
    release(&a, 0, guard).await;
    keys_left(&a, &ca, name, lease).await
}

/// A holder process runs on a wall clock stepped +1 h, then -2 h (one hour behind the
/// real time), for a lease each, across several renewals. B is refused under both steps;
/// the holder still holds when told to go on, writes and releases; then B gets the lock.
async fn client_clock_jumped(
    config: &Config,
    history: &History,
    name: &str,
    clock: &ClockShift,
) -> anyhow::Result<()> {
    let lease = config.lease;
    let (a, b) = (history.recorder(0), history.recorder(1));
    let resource = Arc::new(Resource::default());
    let server = RedisServer::start()?;
    let cb = connect(&server.url(), lease).await?;
    let holder = HolderProcess::spawn(config, &server.url(), name, &a, clock.env())?;
    let token = holder.token;
    resource.enter(&a, 0, token);
    for step in [Step::Ahead(HOUR), Step::Behind(HOUR)] {
        match step {
            Step::Ahead(by) => clock.set_ahead(by)?,
            Step::Behind(by) => clock.set_behind(by)?,
        }
        // Time passing is the point: the holder renews every third of a lease.
        tokio::time::sleep(lease).await;
        b.record(0, EventKind::AcquireInvoked);
        if let Some(guard) = cb.lock(name)?.try_lock().await? {
            granted(&b, 0, &guard);
            release(&b, 0, guard).await;
        } else {
            b.record(
                0,
                EventKind::AcquireFailed {
                    reason: "held".into(),
                },
            );
        }
    }
    let end = holder
        .finish(&a, |held| {
            if held {
                resource.write(&a, 0, token);
            }
            resource.exit(&a, 0);
        })
        .await?;
    if !end.held {
        a.record(0, EventKind::Lost);
    }
    a.record(
        0,
        EventKind::Measure {
            name: STEP_ERROR.into(),
            millis: (end.wall_clock_offset_ms + HOUR.as_millis() as i64).unsigned_abs(),
        },
    );
    if let Some(guard) = acquire(&b, 1, &cb, name, lease * 10).await? {
        critical_section(&b, 1, guard, &resource, lease / 4).await;
    }
    keys_left(&b, &cb, name, lease).await
}

enum Step {
    Ahead(Duration),
    Behind(Duration),
}

/// Scenario-specific expected results, added to `failures`.
pub(crate) fn expectations(scenario: Scenario, c: &Counters, failures: &mut Vec<String>) {
    match scenario {
        // The fencing counter has no TTL: a clock step cannot take it away.
        Scenario::ServerClockJumped if c.stale_writes_accepted_fenced != 0 => {
            failures.push(format!(
                "stale writes accepted with fencing = {}, expected 0",
                c.stale_writes_accepted_fenced
            ));
        }
        Scenario::ClientClockJumped => {
            if c.lost_signals != 0 {
                failures.push(format!(
                    "holders that lost the lock = {}, expected 0",
                    c.lost_signals
                ));
            }
            // The step must have reached the holder: it ends an hour behind.
            match c.measures.get(STEP_ERROR) {
                Some(ms) if *ms <= STEP_TOLERANCE_MS => {}
                other => failures.push(format!(
                    "holder's wall clock {other:?} ms away from an hour behind, expected <= {STEP_TOLERANCE_MS} ms"
                )),
            }
        }
        _ => {}
    }
}

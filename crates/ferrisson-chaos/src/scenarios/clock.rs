//! Wall-clock steps: of the server (Redis expires keys by its wall clock, so a step
//! forward ends every lease at once: a documented unsafe case) and of a holder process
//! (no effect: every client-side deadline is monotonic).

use std::time::Duration;

use anyhow::bail;
use ferrisson_testkit::{ClockShift, RedisServer};

use crate::checker::Counters;
use crate::harness::clients::connect;
use crate::harness::config::Config;
use crate::harness::expectations::Expectations;
use crate::harness::holder_process::HolderProcess;
use crate::harness::record::{
    acquire, acquire_and_work, belief, enter_checked, keys_left, release, token, try_acquire,
    watch, write_with_token,
};
use crate::harness::scenario::{FaultScenario, Iteration};
use crate::history::EventKind;
use crate::resource::Resource;

const HOUR: Duration = Duration::from_secs(3600);

/// How far the holder's wall clock was from an hour behind ours when it was told to go
/// on, in milliseconds: proves the step reached the holder.
const STEP_ERROR: &str = "holder_wall_clock_step_error";

/// The largest [`STEP_ERROR`] accepted: reading both clocks takes a few lines of I/O.
const STEP_TOLERANCE_MS: u64 = 2000;

/// The scenarios of this module: whose wall clock steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClockJump {
    /// `redis-server`'s wall clock stepped +1 h while A holds.
    Server,
    /// The holder process's wall clock stepped +1 h, then -2 h.
    Client,
}

impl FaultScenario for ClockJump {
    /// A server (on a clock of its own for [`ClockJump::Server`]) per iteration.
    type Setup = ();

    fn is_documented_unsafe(self) -> bool {
        self == Self::Server
    }

    async fn run_once(
        self,
        config: &Config,
        _shared: &mut (),
        it: &Iteration,
    ) -> anyhow::Result<()> {
        let clock = ClockShift::new()?;
        match self {
            Self::Server => server_clock_jumped(config, it, &clock).await,
            Self::Client => client_clock_jumped(config, it, &clock).await,
        }
    }

    fn expect(self, _config: &Config, c: &Counters, expect: &mut Expectations) {
        match self {
            // The fencing floor has no TTL: a clock step cannot take it away.
            Self::Server => expect.zero(
                "stale writes accepted with fencing",
                c.stale_writes_accepted_fenced,
            ),
            Self::Client => {
                expect.zero("holders that lost the lock", c.lost_signals);
                // The step must have reached the holder: it ends an hour behind.
                match c.measures.get(STEP_ERROR) {
                    Some(ms) if *ms <= STEP_TOLERANCE_MS => {}
                    other => expect.fail(format!(
                        "holder's wall clock {other:?} ms away from an hour behind, expected <= {STEP_TOLERANCE_MS} ms"
                    )),
                }
            }
        }
    }
}

/// A holds the lock on a server whose wall clock then steps an hour forward: by the
/// server's clock A's lease ended long ago, so B gets the lock at once, while A's own
/// (monotonic) deadline is still running — a double grant. A checks `is_held()`, which
/// is still true, and writes: only fencing stops it. A's next renewal finds the key
/// gone and signals the loss.
async fn server_clock_jumped(
    config: &Config,
    it: &Iteration,
    clock: &ClockShift,
) -> anyhow::Result<()> {
    let (a, b, lease) = (&it.a, &it.b, config.lease);
    let resource = Resource::default();
    let server = RedisServer::start_with_clock(clock, &[])?;
    let ca = connect(&server.url(), lease).await?;
    let lock_b = connect(&server.url(), lease).await?.lock(&it.name)?;
    let Some(guard) = acquire(a, 0, &ca.lock(&it.name)?, lease * 10).await else {
        bail!("A could not take the lock");
    };
    enter_checked(a, 0, &guard, &resource);
    clock.set_ahead(HOUR)?;
    let Some(guard_b) = acquire(b, 0, &lock_b, lease * 10).await else {
        bail!("B did not get the lock after the server's clock step");
    };
    resource.enter(b, 0, token(&guard_b));
    // A acts on a check that is true by its own clock.
    belief(a, 0, &guard);
    if guard.is_held() {
        write_with_token(a, 0, &guard, &resource);
    }
    write_with_token(b, 0, &guard_b, &resource);
    resource.exit(b, 0);
    release(b, 0, guard_b).await;
    watch(a, 0, &guard, lease).await;
    resource.exit(a, 0);
    release(a, 0, guard).await;
    keys_left(a, &ca, &it.name, lease).await
}

/// A holder process runs on a wall clock stepped +1 h, then -2 h (one hour behind the
/// real time), for a lease each, across several renewals. B is refused under both steps;
/// the holder still holds when told to go on, writes and releases; then B gets the lock.
async fn client_clock_jumped(
    config: &Config,
    it: &Iteration,
    clock: &ClockShift,
) -> anyhow::Result<()> {
    let (a, b, lease) = (&it.a, &it.b, config.lease);
    let resource = Resource::default();
    let server = RedisServer::start()?;
    let cb = connect(&server.url(), lease).await?;
    let lock_b = cb.lock(&it.name)?;
    let holder = HolderProcess::spawn(config, &server.url(), &it.name, a, clock.env())?;
    let token = holder.token;
    resource.enter(a, 0, Some(token));
    for step in [Step::Ahead(HOUR), Step::Behind(HOUR)] {
        match step {
            Step::Ahead(by) => clock.set_ahead(by)?,
            Step::Behind(by) => clock.set_behind(by)?,
        }
        // Time passing is the point: the holder renews every third of a lease.
        tokio::time::sleep(lease).await;
        if let Some(guard) = try_acquire(b, 0, &lock_b).await {
            release(b, 0, guard).await;
        }
    }
    let end = holder
        .finish(a, |held| {
            if held {
                resource.write(a, 0, token);
            }
            resource.exit(a, 0);
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
    acquire_and_work(b, 1, &lock_b, lease * 10, &resource, lease / 4).await;
    keys_left(b, &cb, &it.name, lease).await
}

enum Step {
    Ahead(Duration),
    Behind(Duration),
}

//! The fault scenarios: each injects one fault against real servers, records a
//! [`History`] per iteration and checks it against the scenario's expected result.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ferrisson::{Client, Error, LockGuard};
use ferrisson_testkit::{FaultProxy, RedisServer};
use serde::Serialize;

use crate::checker::{Counters, check};
use crate::guard::{Guard, acquire_with};
use crate::history::{EventKind, History, Recorder, ReleaseOutcome};
use crate::holder_process::{HolderCommand, holder_killed, holder_paused};
use crate::redlock_scenarios::{self, Nodes, RedlockFault};
use crate::resource::Resource;
use crate::{clock_scenarios, memory_scenarios, primitive_scenarios};

/// A fault scenario. Serialized as its command-line [`name`](Scenario::name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Every call of both clients delayed by 30–60 % of the lease (each way).
    Latency,
    /// The acquire's reply held back past the lease, then delivered.
    AcquireReplyDelayed,
    /// The holder's link blackholed for two leases after it checked `is_held()`.
    HolderBlackholed,
    /// The connection reset after the server ran the acquire, before its reply.
    ResetDuringAcquire,
    /// The connection reset after the server ran the release, before its reply.
    ResetDuringRelease,
    /// The Redis server frozen (SIGSTOP) for two leases while the lock is held.
    RedisPaused,
    /// `SCRIPT FLUSH` while the lock is held and renewed.
    ScriptFlush,
    /// The holder's tokio executor blocked (a `std::thread::sleep` on a
    /// current-thread runtime) for two leases after it checked `is_held()`.
    ExecutorStarved,
    /// A holder process killed with SIGKILL; the next acquire must come within the lease.
    HolderKilled,
    /// A holder process frozen with SIGSTOP for two leases, then resumed: it must see
    /// the lock lost, and its write with the old token must be refused.
    HolderPaused,
    /// `CLIENT PAUSE ... ALL` on the server for two leases while the lock is held.
    RedisClientPaused,
    /// The master killed while its replica lags (replication blackholed), the replica
    /// promoted and clients pointed at it. A documented unsafe case.
    LaggingReplicaPromoted,
    /// Redlock over five servers with one or two of them killed.
    RedlockMinorityKilled,
    /// Redlock: a node of the holder's bare majority restarted empty at once. A
    /// documented unsafe case.
    RedlockRestartedAtOnce,
    /// Redlock: the same node kept down for longer than the TTL before restarting empty.
    RedlockRestartedAfterTtl,
    /// The server's wall clock stepped forward by an hour while the lock is held: Redis
    /// expires the key at once. A documented unsafe case.
    ServerClockJumped,
    /// The holder process's wall clock stepped +1 h, then -2 h, across renewals: no
    /// effect, since every client-side deadline is monotonic.
    ClientClockJumped,
    /// An evicting `maxmemory-policy` and memory pressure drop the held lock's key. A
    /// documented unsafe case (the client warns about the policy at connect).
    KeyEvicted,
    /// The same memory pressure under `noeviction`: writes are refused, the lock is kept.
    MemoryFull,
    /// A [`FairLock`](ferrisson::FairLock) holder's link blackholed for two leases while
    /// a queued waiter takes over.
    FairLockHolderBlackholed,
    /// A [`RwLock`](ferrisson::RwLock) writer's link blackholed for two leases while a
    /// reader takes over.
    RwLockWriterBlackholed,
    /// An [`ExpirableSemaphore`](ferrisson::ExpirableSemaphore) (one permit) holder's
    /// link blackholed past its permit's lease while another client takes the permit.
    ExpirablePermitBlackholed,
}

impl Serialize for Scenario {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl Scenario {
    /// Every scenario, in report order.
    pub const ALL: [Scenario; 22] = [
        Scenario::Latency,
        Scenario::AcquireReplyDelayed,
        Scenario::HolderBlackholed,
        Scenario::ResetDuringAcquire,
        Scenario::ResetDuringRelease,
        Scenario::RedisPaused,
        Scenario::ScriptFlush,
        Scenario::ExecutorStarved,
        Scenario::HolderKilled,
        Scenario::HolderPaused,
        Scenario::RedisClientPaused,
        Scenario::LaggingReplicaPromoted,
        Scenario::RedlockMinorityKilled,
        Scenario::RedlockRestartedAtOnce,
        Scenario::RedlockRestartedAfterTtl,
        Scenario::ServerClockJumped,
        Scenario::ClientClockJumped,
        Scenario::KeyEvicted,
        Scenario::MemoryFull,
        Scenario::FairLockHolderBlackholed,
        Scenario::RwLockWriterBlackholed,
        Scenario::ExpirablePermitBlackholed,
    ];

    /// The command-line name, e.g. `holder-blackholed`.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Latency => "latency",
            Scenario::AcquireReplyDelayed => "acquire-reply-delayed",
            Scenario::HolderBlackholed => "holder-blackholed",
            Scenario::ResetDuringAcquire => "reset-during-acquire",
            Scenario::ResetDuringRelease => "reset-during-release",
            Scenario::RedisPaused => "redis-paused",
            Scenario::ScriptFlush => "script-flush",
            Scenario::ExecutorStarved => "executor-starved",
            Scenario::HolderKilled => "holder-killed",
            Scenario::HolderPaused => "holder-paused",
            Scenario::RedisClientPaused => "redis-client-paused",
            Scenario::LaggingReplicaPromoted => "lagging-replica-promoted",
            Scenario::RedlockMinorityKilled => "redlock-minority-killed",
            Scenario::RedlockRestartedAtOnce => "redlock-restarted-at-once",
            Scenario::RedlockRestartedAfterTtl => "redlock-restarted-after-ttl",
            Scenario::ServerClockJumped => "server-clock-jumped",
            Scenario::ClientClockJumped => "client-clock-jumped",
            Scenario::KeyEvicted => "key-evicted",
            Scenario::MemoryFull => "memory-full-noeviction",
            Scenario::FairLockHolderBlackholed => "fair-lock-holder-blackholed",
            Scenario::RwLockWriterBlackholed => "rwlock-writer-blackholed",
            Scenario::ExpirablePermitBlackholed => "expirable-permit-blackholed",
        }
    }

    /// The scenario named `name`.
    pub fn from_name(name: &str) -> Option<Scenario> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The fault, in a few words.
    pub fn fault(self) -> &'static str {
        match self {
            Scenario::Latency => "proxy latency 30-60% of the lease on every call, both clients",
            Scenario::AcquireReplyDelayed => "acquire reply held back for 1.5 leases",
            Scenario::HolderBlackholed => "holder's link blackholed for 2 leases",
            Scenario::ResetDuringAcquire => "TCP reset after the server ran the acquire",
            Scenario::ResetDuringRelease => "TCP reset after the server ran the release",
            Scenario::RedisPaused => "redis-server SIGSTOPped for 2 leases",
            Scenario::ScriptFlush => "SCRIPT FLUSH while held",
            Scenario::ExecutorStarved => "holder's current-thread runtime blocked for 2 leases",
            Scenario::HolderKilled => "holder process SIGKILLed",
            Scenario::HolderPaused => "holder process SIGSTOPped for 2 leases, then resumed",
            Scenario::RedisClientPaused => "CLIENT PAUSE ALL for 2 leases",
            Scenario::LaggingReplicaPromoted => {
                "replication blackholed, master killed, replica promoted"
            }
            Scenario::RedlockMinorityKilled => "Redlock, 1 or 2 of 5 servers killed",
            Scenario::RedlockRestartedAtOnce => {
                "Redlock, holder has 3 of 5; one of them restarted empty at once"
            }
            Scenario::RedlockRestartedAfterTtl => {
                "Redlock, holder has 3 of 5; one of them down TTL + 200 ms, restarted empty"
            }
            Scenario::ServerClockJumped => "redis-server's wall clock stepped +1 h while held",
            Scenario::ClientClockJumped => {
                "holder process's wall clock stepped +1 h, then -2 h, while held"
            }
            Scenario::KeyEvicted => "allkeys-random eviction under memory pressure while held",
            Scenario::MemoryFull => "maxmemory reached under noeviction while held",
            Scenario::FairLockHolderBlackholed => {
                "FairLock holder's link blackholed for 2 leases, a waiter queued"
            }
            Scenario::RwLockWriterBlackholed => {
                "RwLock writer's link blackholed for 2 leases, a reader waiting"
            }
            Scenario::ExpirablePermitBlackholed => {
                "1-permit ExpirableSemaphore holder blackholed past its permit lease"
            }
        }
    }

    /// Whether the scenario is a documented unsafe case: it must show double grants.
    pub fn is_documented_unsafe(self) -> bool {
        matches!(
            self,
            Scenario::LaggingReplicaPromoted
                | Scenario::RedlockRestartedAtOnce
                | Scenario::ServerClockJumped
                | Scenario::KeyEvicted
        )
    }

    fn redlock_fault(self) -> Option<RedlockFault> {
        match self {
            Scenario::RedlockMinorityKilled => Some(RedlockFault::MinorityKilled),
            Scenario::RedlockRestartedAtOnce => Some(RedlockFault::RestartedAtOnce),
            Scenario::RedlockRestartedAfterTtl => Some(RedlockFault::RestartedAfterTtl),
            _ => None,
        }
    }
}

/// The size and timing of a run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Iterations of the scenario.
    pub iterations: u32,
    /// The watchdog lease of every client (renewed every third of it).
    pub lease: Duration,
    /// The holder process of [`Scenario::HolderKilled`] (the scenario fails without it).
    pub holder: Option<HolderCommand>,
}

impl Config {
    /// `iterations` with a 300 ms lease and no holder command.
    pub fn new(iterations: u32) -> Self {
        Self {
            iterations,
            lease: Duration::from_millis(300),
            holder: None,
        }
    }
}

/// One scenario's result: counters over every iteration and the expected-result check.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioReport {
    /// The scenario.
    pub scenario: Scenario,
    /// The fault injected.
    pub fault: String,
    /// Iterations run.
    pub iterations: u32,
    /// The lease, in milliseconds.
    pub lease_ms: u64,
    /// Whether this is a documented unsafe case.
    pub documented_unsafe: bool,
    /// Summed counters.
    pub counters: Counters,
    /// Whether every expected result held.
    pub passed: bool,
    /// The expected results that did not hold.
    pub failures: Vec<String>,
}

/// Runs `scenario` for `config.iterations` iterations and checks the expected results.
///
/// # Errors
///
/// When a server, proxy or holder process cannot be set up.
pub async fn run(scenario: Scenario, config: &Config) -> anyhow::Result<ScenarioReport> {
    let redlock_nodes = match scenario.redlock_fault() {
        Some(_) => Some(Nodes::start().await?),
        None => None,
    };
    let env = Env::start().await?;
    let mut counters = Counters::default();
    for iteration in 0..config.iterations {
        let history = History::new();
        let name = format!("chaos-{}-{iteration}", scenario.name());
        let result = match (scenario.redlock_fault(), &redlock_nodes) {
            (Some(fault), Some(nodes)) => {
                redlock_scenarios::run_once(
                    fault,
                    nodes,
                    &history,
                    &name,
                    iteration,
                    config.lease * 3,
                )
                .await
            }
            _ => run_once(scenario, config, &env, &history, &name).await,
        };
        result.with_context(|| format!("{} iteration {iteration}", scenario.name()))?;
        let events = history.events();
        if std::env::var_os("FERRISSON_CHAOS_TRACE").is_some() {
            for e in &events {
                eprintln!(
                    "{iteration} {:>6.1}ms c{} g{} {:?}",
                    e.at.as_secs_f64() * 1e3,
                    e.client,
                    e.grant,
                    e.kind
                );
            }
        }
        counters.merge(&check(&events));
    }
    let failures = expectations(scenario, config, &counters);
    Ok(ScenarioReport {
        scenario,
        fault: scenario.fault().to_owned(),
        iterations: config.iterations,
        lease_ms: config.lease.as_millis() as u64,
        documented_unsafe: scenario.is_documented_unsafe(),
        passed: failures.is_empty(),
        counters,
        failures,
    })
}

/// The expected results, stated up front: what must hold for `scenario`.
fn expectations(scenario: Scenario, config: &Config, c: &Counters) -> Vec<String> {
    let mut failures = Vec::new();
    let mut zero = |what: &str, value: u64| {
        if value != 0 {
            failures.push(format!("{what} = {value}, expected 0"));
        }
    };
    zero("foreign releases", c.foreign_releases);
    zero("foreign renewals", c.foreign_renewals);
    zero("renewals after loss", c.renewals_after_loss);
    zero("held after deadline", c.held_after_deadline);
    zero("keys left after healing", c.keys_left);
    if scenario.is_documented_unsafe() {
        if c.double_grants == 0 {
            failures.push("double grants = 0, expected the documented violation".to_owned());
        }
    } else {
        zero("double grants", c.double_grants);
        zero(
            "stale writes accepted with fencing",
            c.stale_writes_accepted_fenced,
        );
        zero("token regressions", c.token_regressions);
        zero("fresh writes refused", c.fresh_writes_refused);
    }
    if c.acquires_ok == 0 {
        failures.push("no acquire succeeded: the scenario did not run".to_owned());
    }
    clock_scenarios::expectations(scenario, c, &mut failures);
    memory_scenarios::expectations(scenario, c, &mut failures);
    primitive_scenarios::expectations(scenario, c, &mut failures);
    if scenario == Scenario::HolderKilled {
        let bound = config.lease + Duration::from_millis(500);
        match c.measures.get(REACQUIRE) {
            Some(ms) if Duration::from_millis(*ms) <= bound => {}
            other => failures.push(format!(
                "time to the next acquire after SIGKILL {other:?} ms, expected <= {} ms",
                bound.as_millis()
            )),
        }
    }
    failures
}

pub(crate) const REACQUIRE: &str = "reacquire_after_sigkill";

/// The servers and proxies a scenario reuses across iterations.
pub(crate) struct Env {
    pub(crate) server: RedisServer,
    pub(crate) proxy_a: FaultProxy,
    pub(crate) proxy_b: FaultProxy,
}

impl Env {
    async fn start() -> anyhow::Result<Self> {
        let server = RedisServer::start().context("redis-server")?;
        let proxy_a = FaultProxy::start(server.port()).await?;
        let proxy_b = FaultProxy::start(server.port()).await?;
        Ok(Self {
            server,
            proxy_a,
            proxy_b,
        })
    }
}

pub(crate) async fn connect(url: &str, lease: Duration) -> anyhow::Result<Client> {
    Ok(Client::builder(url)
        .watchdog_lease(lease)
        .response_timeout(lease * 10)
        .connect_timeout(lease * 10)
        .connect()
        .await?)
}

/// A client that gives up on a call after one lease (for holders cut off by a fault).
pub(crate) async fn connect_impatient(url: &str, lease: Duration) -> anyhow::Result<Client> {
    Ok(Client::builder(url)
        .watchdog_lease(lease)
        .response_timeout(lease)
        .connect_timeout(lease)
        .reconnect_retries(1)
        .connect()
        .await?)
}

/// Records the grant and the guard's first belief.
pub(crate) fn granted(rec: &Recorder, grant: usize, guard: &impl Guard) {
    let deadline = rec.now() + guard.remaining();
    rec.record(
        grant,
        EventKind::AcquireOk {
            token: guard.fencing_token(),
            deadline,
        },
    );
    rec.belief(grant, || guard.is_held(), || guard.remaining());
}

/// Samples the guard's belief every 5 ms for `duration`, recording a lost signal.
pub(crate) async fn watch(rec: &Recorder, grant: usize, guard: &impl Guard, duration: Duration) {
    let end = tokio::time::Instant::now() + duration;
    let mut lost_recorded = false;
    loop {
        rec.belief(grant, || guard.is_held(), || guard.remaining());
        if tokio::time::Instant::now() >= end {
            break;
        }
        let tick = tokio::time::sleep(Duration::from_millis(5));
        if lost_recorded {
            tick.await;
        } else {
            tokio::select! {
                () = guard.lost() => {
                    rec.record(grant, EventKind::Lost);
                    lost_recorded = true;
                }
                () = tick => {}
            }
        }
    }
}

pub(crate) async fn release(rec: &Recorder, grant: usize, guard: impl Guard) {
    rec.belief(grant, || guard.is_held(), || guard.remaining());
    rec.record(grant, EventKind::ReleaseInvoked);
    let outcome = outcome(guard.unlock().await);
    rec.record(grant, EventKind::Released { outcome });
}

pub(crate) fn outcome(result: ferrisson::Result<()>) -> ReleaseOutcome {
    match result {
        Ok(()) => ReleaseOutcome::Ok,
        Err(Error::NotOwner { .. }) => ReleaseOutcome::NotOwner,
        Err(Error::LeaseExpired { .. }) => ReleaseOutcome::Expired,
        Err(e) => ReleaseOutcome::Error(e.to_string()),
    }
}

/// Acquire with a bounded wait, recording the outcome. A guard that arrives already
/// expired (its reply was slower than the lease) is recorded as a void grant
/// `grant + 1000 * retry`, released, and the acquire retried, up to three times.
pub(crate) async fn acquire(
    rec: &Recorder,
    grant: usize,
    client: &Client,
    name: &str,
    wait: Duration,
) -> anyhow::Result<Option<LockGuard>> {
    let lock = client.lock(name)?;
    acquire_with(rec, grant, || lock.lock_timeout(wait)).await
}

/// A well-behaved critical section: enter, work while watching the guard, write only if
/// still held, leave, release.
pub(crate) async fn critical_section(
    rec: &Recorder,
    grant: usize,
    guard: impl Guard,
    resource: &Resource,
    work: Duration,
) {
    if enter_and_watch(rec, grant, &guard, resource, work).await {
        if guard.is_held() {
            resource.write(rec, grant, guard.fencing_token());
        }
        resource.exit(rec, grant);
    }
    release(rec, grant, guard).await;
}

/// Enters the resource with the guard's token and watches the guard while working;
/// false, with nothing entered, for a grant that arrived too late to be used.
pub(crate) async fn enter_and_watch(
    rec: &Recorder,
    grant: usize,
    guard: &impl Guard,
    resource: &Resource,
    work: Duration,
) -> bool {
    if !guard.is_held() {
        return false;
    }
    resource.enter(rec, grant, guard.fencing_token());
    watch(rec, grant, guard, work).await;
    true
}

/// A's acquire whose reply was held back by the fault: recorded, and used for a short
/// critical section if it still holds.
async fn settle_pending(
    a: &Recorder,
    outcome: ferrisson::Result<Option<LockGuard>>,
    resource: &Resource,
    work: Duration,
) {
    let reason = match outcome {
        Ok(Some(guard)) => {
            granted(a, 0, &guard);
            critical_section(a, 0, guard, resource, work).await;
            return;
        }
        Ok(None) => "held".to_owned(),
        Err(e) => e.to_string(),
    };
    a.record(0, EventKind::AcquireFailed { reason });
}

/// After healing: the lock must be free, at the latest one lease later.
pub(crate) async fn keys_left(
    rec: &Recorder,
    checker: &Client,
    name: &str,
    lease: Duration,
) -> anyhow::Result<()> {
    let lock = checker.lock(name)?;
    let mut left = u64::from(lock.is_locked().await?);
    if left > 0 {
        tokio::time::sleep(lease + Duration::from_millis(100)).await;
        left = u64::from(lock.is_locked().await?);
    }
    rec.record(0, EventKind::KeysLeft { count: left });
    Ok(())
}

#[allow(clippy::too_many_lines)] // one arm per scenario reads best side by side
async fn run_once(
    scenario: Scenario,
    config: &Config,
    env: &Env,
    history: &History,
    name: &str,
) -> anyhow::Result<()> {
    let lease = config.lease;
    let a = history.recorder(0);
    let b = history.recorder(1);
    let resource = Arc::new(Resource::default());
    let direct = connect(&env.server.url(), lease).await?;
    let pa = env.proxy_a.control();
    let pb = env.proxy_b.control();
    match scenario {
        Scenario::Latency => {
            pa.set_latency(lease * 3 / 20, lease * 3 / 20);
            pb.set_latency(lease * 3 / 20, lease * 3 / 20);
            let ca = connect(&env.proxy_a.url(), lease).await?;
            let cb = connect(&env.proxy_b.url(), lease).await?;
            let one = |rec: Recorder, client: Client, resource: Arc<Resource>| {
                let name = name.to_owned();
                async move {
                    for grant in 0..2 {
                        if let Some(guard) =
                            acquire(&rec, grant, &client, &name, lease * 10).await?
                        {
                            critical_section(&rec, grant, guard, &resource, lease).await;
                        }
                    }
                    anyhow::Ok(())
                }
            };
            let (ra, rb) = tokio::join!(
                one(a.clone(), ca, Arc::clone(&resource)),
                one(b.clone(), cb, Arc::clone(&resource))
            );
            ra?;
            rb?;
            pa.set(ferrisson_testkit::Faults::default());
            pb.set(ferrisson_testkit::Faults::default());
        }
        Scenario::AcquireReplyDelayed => {
            let ca = connect(&env.proxy_a.url(), lease).await?;
            pa.set_hold_replies(true);
            let lock = ca.lock(name)?;
            a.record(0, EventKind::AcquireInvoked);
            let pending = tokio::spawn(async move { lock.try_lock().await });
            pa.held_reply().await;
            server_state(&direct, name, true).await?;
            // B waits for the lock while A's grant is stuck on the wire.
            let b_task = {
                let (b, direct, resource, name) = (
                    b.clone(),
                    direct.clone(),
                    Arc::clone(&resource),
                    name.to_owned(),
                );
                tokio::spawn(async move {
                    if let Some(guard) = acquire(&b, 0, &direct, &name, lease * 10).await? {
                        critical_section(&b, 0, guard, &resource, lease / 2).await;
                    }
                    anyhow::Ok(())
                })
            };
            tokio::time::sleep(lease * 3 / 2).await;
            pa.set_hold_replies(false);
            settle_pending(&a, pending.await?, &resource, lease / 4).await;
            b_task.await??;
        }
        Scenario::HolderBlackholed
        | Scenario::RedisPaused
        | Scenario::RedisClientPaused
        | Scenario::ExecutorStarved => {
            stalled_holder(scenario, config, env, history, name, &resource, &direct).await?;
        }
        Scenario::ResetDuringAcquire => {
            let ca = connect(&env.proxy_a.url(), lease).await?;
            pa.set_hold_replies(true);
            let lock = ca.lock(name)?;
            a.record(0, EventKind::AcquireInvoked);
            let pending = tokio::spawn(async move { lock.try_lock().await });
            pa.held_reply().await;
            server_state(&direct, name, true).await?;
            pa.reset_all();
            pa.set_hold_replies(false);
            settle_pending(&a, pending.await?, &resource, lease / 4).await;
            let started = Instant::now();
            if let Some(guard) = acquire(&b, 0, &direct, name, lease * 10).await? {
                b.record(
                    0,
                    EventKind::Measure {
                        name: "next_acquire_after_reset_ms".into(),
                        millis: started.elapsed().as_millis() as u64,
                    },
                );
                critical_section(&b, 0, guard, &resource, lease / 4).await;
            }
        }
        Scenario::ResetDuringRelease => {
            let ca = connect(&env.proxy_a.url(), lease).await?;
            if let Some(guard) = acquire(&a, 0, &ca, name, lease * 10).await? {
                resource.enter(&a, 0, guard.fencing_token().get());
                resource.write(&a, 0, guard.fencing_token().get());
                resource.exit(&a, 0);
                rec_belief(&a, &guard);
                pa.set_hold_replies(true);
                a.record(0, EventKind::ReleaseInvoked);
                let pending = tokio::spawn(async move { outcome(guard.unlock().await) });
                pa.held_reply().await;
                server_state(&direct, name, false).await?;
                pa.reset_all();
                pa.set_hold_replies(false);
                // B takes the lock as soon as the release ran on the server.
                if let Some(guard) = acquire(&b, 0, &direct, name, lease * 10).await? {
                    let outcome = pending.await?;
                    a.record(0, EventKind::Released { outcome });
                    critical_section(&b, 0, guard, &resource, lease / 2).await;
                } else {
                    let outcome = pending.await?;
                    a.record(0, EventKind::Released { outcome });
                }
            }
        }
        Scenario::ScriptFlush => {
            let ca = connect(&env.proxy_a.url(), lease).await?;
            if let Some(guard) = acquire(&a, 0, &ca, name, lease * 10).await? {
                resource.enter(&a, 0, guard.fencing_token().get());
                env.server.command(&["SCRIPT", "FLUSH"])?;
                // Two renewals must go through after the flush.
                watch(&a, 0, &guard, lease).await;
                let contender = direct.lock(name)?.try_lock().await?;
                b.record(0, EventKind::AcquireInvoked);
                if let Some(g) = contender {
                    granted(&b, 0, &g);
                    release(&b, 0, g).await;
                } else {
                    b.record(
                        0,
                        EventKind::AcquireFailed {
                            reason: "held".into(),
                        },
                    );
                }
                if guard.is_held() {
                    resource.write(&a, 0, guard.fencing_token().get());
                }
                resource.exit(&a, 0);
                release(&a, 0, guard).await;
            }
            if let Some(guard) = acquire(&b, 1, &direct, name, lease * 10).await? {
                critical_section(&b, 1, guard, &resource, lease / 4).await;
            }
        }
        Scenario::HolderPaused => {
            holder_paused(config, env, history, name, &resource).await?;
        }
        Scenario::HolderKilled => {
            holder_killed(config, env, history, name).await?;
            if let Some(guard) = acquire(&b, 1, &direct, name, lease * 10).await? {
                critical_section(&b, 1, guard, &resource, lease / 4).await;
            }
        }
        Scenario::LaggingReplicaPromoted => {
            return lagging_replica(config, history, name, &resource).await;
        }
        Scenario::RedlockMinorityKilled
        | Scenario::RedlockRestartedAtOnce
        | Scenario::RedlockRestartedAfterTtl => {
            bail!("Redlock scenarios run on their own nodes")
        }
        Scenario::ServerClockJumped | Scenario::ClientClockJumped => {
            return clock_scenarios::run_once(scenario, config, history, name).await;
        }
        Scenario::KeyEvicted | Scenario::MemoryFull => {
            return memory_scenarios::run_once(scenario, config, history, name).await;
        }
        Scenario::FairLockHolderBlackholed
        | Scenario::RwLockWriterBlackholed
        | Scenario::ExpirablePermitBlackholed => {
            return primitive_scenarios::run_once(scenario, config, env, history, name).await;
        }
    }
    keys_left(&a, &direct, name, lease).await
}

/// Waits until the server shows the lock held (`true`) or free (`false`): the request
/// whose reply is being held back has run. Replies on the direct client are not held.
pub(crate) async fn server_state(direct: &Client, name: &str, locked: bool) -> anyhow::Result<()> {
    let lock = direct.lock(name)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while lock.is_locked().await? != locked {
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "the server never showed the lock {}",
                if locked { "held" } else { "free" }
            );
        }
        // Nothing to await: the server publishes no event for an acquire.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

pub(crate) fn rec_belief(rec: &Recorder, guard: &impl Guard) {
    rec.belief(0, || guard.is_held(), || guard.remaining());
}

/// A holder that checked `is_held()` and then stalls for two leases (network, server or
/// its own executor), writes with its token anyway, and releases. B takes the lock
/// meanwhile and writes.
async fn stalled_holder(
    scenario: Scenario,
    config: &Config,
    env: &Env,
    history: &History,
    name: &str,
    resource: &Arc<Resource>,
    direct: &Client,
) -> anyhow::Result<()> {
    let lease = config.lease;
    let (a, b) = (history.recorder(0), history.recorder(1));
    let stall = lease * 2;
    let b_task = |resource: Arc<Resource>| {
        let (b, direct, name) = (b.clone(), direct.clone(), name.to_owned());
        async move {
            if let Some(guard) = acquire(&b, 0, &direct, &name, lease * 10).await? {
                critical_section(&b, 0, guard, &resource, lease / 4).await;
            }
            anyhow::Ok(())
        }
    };
    if scenario == Scenario::ExecutorStarved {
        // The holder lives on its own thread with a current-thread runtime.
        let (url, name_a, resource_a, a2) = (
            env.server.url(),
            name.to_owned(),
            Arc::clone(resource),
            a.clone(),
        );
        let (checked_tx, checked_rx) = tokio::sync::oneshot::channel();
        let holder = std::thread::spawn(move || -> anyhow::Result<()> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                let client = connect(&url, lease).await?;
                let Some(guard) = acquire(&a2, 0, &client, &name_a, lease * 10).await? else {
                    let _ = checked_tx.send(());
                    return Ok(());
                };
                resource_a.enter(&a2, 0, guard.fencing_token().get());
                rec_belief(&a2, &guard);
                let _ = checked_tx.send(());
                // The whole executor stops: no watchdog, no timers, nothing.
                std::thread::sleep(stall);
                rec_belief(&a2, &guard);
                resource_a.write(&a2, 0, guard.fencing_token().get());
                resource_a.exit(&a2, 0);
                release(&a2, 0, guard).await;
                anyhow::Ok(())
            })
        });
        let _ = checked_rx.await;
        b_task(Arc::clone(resource)).await?;
        tokio::task::spawn_blocking(move || holder.join())
            .await?
            .map_err(|_| anyhow::anyhow!("holder thread panicked"))??;
        return Ok(());
    }

    let url = if scenario == Scenario::HolderBlackholed {
        env.proxy_a.url()
    } else {
        env.server.url()
    };
    let ca = connect_impatient(&url, lease).await?;
    let Some(guard) = acquire(&a, 0, &ca, name, lease * 10).await? else {
        return Ok(());
    };
    resource.enter(&a, 0, guard.fencing_token().get());
    rec_belief(&a, &guard);
    match scenario {
        Scenario::HolderBlackholed => env.proxy_a.control().set_blackhole(true),
        Scenario::RedisClientPaused => {
            // Paused clients include any new connection, so an UNPAUSE could not get
            // through: the pause ends by itself after the stall.
            let millis = stall.as_millis().to_string();
            env.server.command(&["CLIENT", "PAUSE", &millis, "ALL"])?;
        }
        _ => env.server.pause()?,
    }
    let b_run = tokio::spawn(b_task(Arc::clone(resource)));
    watch(&a, 0, &guard, stall).await;
    match scenario {
        Scenario::HolderBlackholed => env.proxy_a.control().set_blackhole(false),
        Scenario::RedisClientPaused => {}
        _ => env.server.resume()?,
    }
    b_run.await??;
    // The holder acts on its stale check.
    resource.write(&a, 0, guard.fencing_token().get());
    resource.exit(&a, 0);
    release(&a, 0, guard).await;
    Ok(())
}

/// Master M, replica R replicating through a proxy. A warm-up grant replicates; then
/// replication is blackholed, A takes the lock on M, M is killed and R promoted, and B
/// takes the lock on R while A still believes it holds it.
async fn lagging_replica(
    config: &Config,
    history: &History,
    name: &str,
    resource: &Arc<Resource>,
) -> anyhow::Result<()> {
    let lease = config.lease * 3;
    let (a, b) = (history.recorder(0), history.recorder(1));
    // No delay before the full sync, so the replica is attached at once.
    let mut master = RedisServer::start_with_args(&["--repl-diskless-sync-delay", "0"])?;
    let link = FaultProxy::start(master.port()).await?;
    let replica =
        RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &link.port().to_string()])?;
    let ca = connect(&master.url(), lease).await?;
    // Warm-up: one grant, replicated, so the replica has the fencing counter.
    let warm = ca.lock(name)?.lock().await?;
    warm.unlock().await?;
    let acked = master.command(&["WAIT", "1", "10000"])?;
    if acked.trim().trim_start_matches(':') != "1" {
        bail!("the replica did not catch up: WAIT answered {acked:?}");
    }
    link.control().set_blackhole(true);
    let Some(guard) = acquire(&a, 0, &ca, name, lease * 10).await? else {
        bail!("A could not take the lock on the master");
    };
    master.kill()?;
    replica.command(&["REPLICAOF", "NO", "ONE"])?;
    let cb = connect(&replica.url(), lease).await?;
    rec_belief(&a, &guard);
    if let Some(g) = acquire(&b, 0, &cb, name, lease * 10).await? {
        rec_belief(&a, &guard);
        // A acts on its belief; B writes as the new holder.
        if guard.is_held() {
            resource.write(&a, 0, guard.fencing_token().get());
        }
        critical_section(&b, 0, g, resource, lease / 10).await;
    }
    drop(guard);
    keys_left(&b, &cb, name, lease).await
}

/// A plain-text table of reports, one row per scenario.
///
/// ```
/// let text = ferrisson_chaos::table(&[]);
/// assert!(text.starts_with("| scenario"));
/// ```
pub fn table(reports: &[ScenarioReport]) -> String {
    let mut out = String::from(
        "| scenario | fault | iter | ok | failed | lost | overlap | double grants | stale acc. (fenced) | stale ref. (fenced) | fresh ref. | token regr. | foreign rel./ren. | renew after loss | held past deadline | keys left | extra | verdict |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in reports {
        let c = &r.counters;
        let extra: Vec<String> = c
            .measures
            .iter()
            .map(|(k, v)| format!("{k} max {v} ms"))
            .collect();
        let verdict = match (r.passed, r.documented_unsafe) {
            (true, true) => "unsafe, as documented",
            (true, false) => "pass",
            (false, _) => "FAIL",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}/{} | {} | {} | {} | {} | {} |",
            r.scenario.name(),
            r.fault,
            r.iterations,
            c.acquires_ok,
            c.acquires_failed,
            c.lost_signals,
            c.overlapping_sections,
            c.double_grants,
            c.stale_writes_accepted_fenced,
            c.stale_writes_refused_fenced,
            c.fresh_writes_refused,
            c.token_regressions,
            c.foreign_releases,
            c.foreign_renewals,
            c.renewals_after_loss,
            c.held_after_deadline,
            c.keys_left,
            extra.join(", "),
            verdict,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::Scenario;

    #[test]
    fn every_scenario_is_named_the_same_on_the_command_line_and_in_json() {
        for scenario in Scenario::ALL {
            let json = serde_json::to_string(&scenario).expect("serializes");
            assert_eq!(json, format!("\"{}\"", scenario.name()));
            assert_eq!(Scenario::from_name(scenario.name()), Some(scenario));
        }
    }
}

//! The oversell lab (S3): `POST /lab/stock` puts a stock in Redis, `POST
//! /lab/deduct/{variant}` runs one deduction the way one of the seed's fixes does, flaw
//! included.
//!
//! Every variant's step is the seed's `deductStock`: read the stock, and if it is
//! positive write back one less — plus an `INCR` of a sold counter in the same step, so
//! the runner counts units handed out from Redis, not from HTTP replies.
//!
//! The seed's handlers answer `err` at once when `SETNX` fails. Here a request retries a
//! held lock for a bounded wait (`--lab-lock-wait`) before giving up, so a correct lock
//! sells the whole stock under the seed's load, and a shortfall means a deadlock rather
//! than contention.
//!
//! Faults the seed describes but a load test cannot cause by itself are injected into the
//! `--lab-fault-at`-th holder of the lock in a run (counted across every instance in
//! Redis, so the fault hits while stock is left) and
//! recorded in `lab:faults`: a crash while holding a `SETNX` lock, a holder outliving its
//! lease, a pause between compare and delete.

use std::fmt;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use ferrisson::{Client, Lock, Redlock, SimpleLock};
use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::app::{ApiJson, ApiPath, AppState};
use crate::db::Db;
use crate::error::ApiError;

/// Redis keys of the lab (one lab per Redis server).
pub mod keys {
    /// The stock counter.
    pub const STOCK: &str = "lab:stock";
    /// Units sold, incremented in the same step as each stock write.
    pub const SOLD: &str = "lab:sold";
    /// Requests of the current run, across every instance.
    pub const SEQ: &str = "lab:seq";
    /// Acquisitions of the hand-made lock in the current run (the fault's counter).
    pub const HOLDERS: &str = "lab:holders";
    /// Set by the holder that carries the run's one fault; deleted again when the fault
    /// could not be shown (nobody's lock to delete), so the next holder carries it.
    pub const FAULT_CLAIM: &str = "lab:fault_claim";
    /// The hand-made lock of the `setnx` .. `token-check` variants.
    pub const LOCK: &str = "lab:lock";
    /// Deletes that removed another holder's lock.
    pub const FOREIGN_DELETES: &str = "lab:foreign_deletes";
    /// Requests that gave up waiting for a held lock.
    pub const GAVE_UP: &str = "lab:gave_up";
    /// What the injected faults did (a list of sentences).
    pub const FAULTS: &str = "lab:faults";
    /// TTLs (ms) of the watchdog lock sampled during each stall (a list of JSON arrays).
    pub const TTL_SAMPLES: &str = "lab:ttl_samples";
    /// Stalls during which the watchdog lock's TTL was seen going back up.
    pub const TTL_REFRESHED: &str = "lab:ttl_refreshed";
}

/// Name of the ferrisson locks the library-backed variants take.
const WATCHDOG_LOCK: &str = "lab:watchdog";
const TOKEN_LUA_LOCK: &str = "lab:token-lua";
const REDLOCK_LOCK: &str = "lab:redlock";
/// `token-lua`'s lease: the seed's `EX 10`. Longer than any step takes, even on a
/// starved machine, which is the condition under which this variant is correct.
const TOKEN_LUA_LEASE: Duration = Duration::from_secs(10);
/// The seed's `tryLock(10, 30, SECONDS)` for Redlock: wait 10 s.
const REDLOCK_WAIT: Duration = Duration::from_secs(10);

/// The lab's knobs (`seckill serve --lab-*`).
#[derive(Debug, Clone)]
pub struct LabConfig {
    /// Lease of the expiring hand-made locks (`setnx-expire`, `set-nx-ex`,
    /// `token-check`; the seed: 10 s). `token-lua` keeps the seed's 10 s.
    pub lease: Duration,
    /// How long a request retries a held lock before answering `sold: false`.
    pub lock_wait: Duration,
    /// The holder (the n-th request to get the lock, across instances) that gets the
    /// variant's one fault, or the next holder when it could not show it (`set-nx-ex`,
    /// `token-check`: nobody held the lock when it deleted, or the lease ran out before
    /// the compare); 0: never.
    pub fault_at: u64,
    /// `watchdog`: how long the holder stalls on every `stall_every`-th unit (seed: 10 s).
    pub stall: Duration,
    /// `watchdog`: stall when the stock read is a multiple of this (seed: 100).
    pub stall_every: i64,
    /// `redlock`: the lock's TTL on each node (seed: 30 s).
    pub redlock_ttl: Duration,
}

impl Default for LabConfig {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(10),
            lock_wait: Duration::from_secs(2),
            fault_at: 0,
            stall: Duration::from_secs(10),
            stall_every: 100,
            redlock_ttl: Duration::from_secs(30),
        }
    }
}

/// One deduction strategy of the lab.
///
/// ```
/// use seckill::{Variant, Verdict};
///
/// let v = Variant::parse("set-nx-ex").expect("a lab variant");
/// assert_eq!(v, Variant::SetNxEx);
/// assert_eq!(v.expected(), Verdict::WrongLockDeleted);
/// assert_eq!(Variant::ALL.iter().filter(|v| v.expected() == Verdict::Correct).count(), 5);
/// assert!(Variant::parse("spinlock").is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// GET, check, SET: two clients read the same stock and both sell it.
    Naive,
    /// A `tokio::sync::Mutex` around the naive step: one process only.
    LocalMutex,
    /// `SETNX lock`, no expiry, no finally: an exception leaves the lock forever.
    Setnx,
    /// `SETNX` with a finally that deletes: a killed process still leaves the lock.
    SetnxFinally,
    /// `SETNX` then `EXPIRE`: a crash between the two leaves a lock without TTL.
    SetnxExpire,
    /// `SET lock v NX EX`: a holder outliving its lease deletes the next holder's lock.
    SetNxEx,
    /// A token per holder, `GET` compare then `DEL`: a pause in between deletes another's.
    TokenCheck,
    /// Compare-and-delete in one Lua script (ferrisson's `SimpleLock`).
    TokenLua,
    /// The reentrant `Lock` with watchdog renewal; stalls on every 100th sale.
    Watchdog,
    /// Redlock over three independent Redis servers.
    Redlock,
    /// One Lua script checks and decrements; no lock at all.
    LuaAtomic,
    /// `UPDATE ... SET stock = stock - 1 WHERE ... AND stock > 0` on the database.
    DbOptimistic,
}

/// How a run of one variant ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Exactly the stock was sold, the stock is 0, every write accounted for.
    Correct,
    /// More units sold than the stock, or stock writes lost.
    Oversold,
    /// A lock nobody will release stopped the sales below the stock.
    Deadlocked,
    /// A holder deleted a lock that another holder had taken.
    WrongLockDeleted,
    /// Fewer units sold than the stock, without a deadlock (e.g. requests gave up).
    Undersold,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Correct => "correct",
            Self::Oversold => "oversold",
            Self::Deadlocked => "deadlocked",
            Self::WrongLockDeleted => "wrong lock deleted",
            Self::Undersold => "undersold",
        })
    }
}

impl Variant {
    /// Every variant, in the seed's order.
    pub const ALL: [Self; 12] = [
        Self::Naive,
        Self::LocalMutex,
        Self::Setnx,
        Self::SetnxFinally,
        Self::SetnxExpire,
        Self::SetNxEx,
        Self::TokenCheck,
        Self::TokenLua,
        Self::Watchdog,
        Self::Redlock,
        Self::LuaAtomic,
        Self::DbOptimistic,
    ];

    /// The name used in URLs and reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Naive => "naive",
            Self::LocalMutex => "local-mutex",
            Self::Setnx => "setnx",
            Self::SetnxFinally => "setnx-finally",
            Self::SetnxExpire => "setnx-expire",
            Self::SetNxEx => "set-nx-ex",
            Self::TokenCheck => "token-check",
            Self::TokenLua => "token-lua",
            Self::Watchdog => "watchdog",
            Self::Redlock => "redlock",
            Self::LuaAtomic => "lua-atomic",
            Self::DbOptimistic => "db-optimistic",
        }
    }

    /// The variant called `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.name() == name)
    }

    /// What the seed says this variant does under the load, with the lab's faults
    /// injected and two or more instances.
    pub fn expected(self) -> Verdict {
        self.expected_in(2, true)
    }

    /// What the seed says this variant does on `instances` processes, with or without
    /// the lab's injected faults: the process-local mutex is correct on one instance,
    /// and the lock variants whose flaw needs a crash or a pause are correct without it.
    pub fn expected_in(self, instances: usize, faults: bool) -> Verdict {
        match self {
            Self::LocalMutex if instances < 2 => Verdict::Correct,
            _ if self.has_fault() && !faults => Verdict::Correct,
            Self::Naive | Self::LocalMutex => Verdict::Oversold,
            Self::Setnx | Self::SetnxFinally | Self::SetnxExpire => Verdict::Deadlocked,
            Self::SetNxEx | Self::TokenCheck => Verdict::WrongLockDeleted,
            Self::TokenLua
            | Self::Watchdog
            | Self::Redlock
            | Self::LuaAtomic
            | Self::DbOptimistic => Verdict::Correct,
        }
    }

    /// Whether the lab injects a fault into this variant's `fault_at`-th lock holder.
    pub fn has_fault(self) -> bool {
        matches!(
            self,
            Self::Setnx | Self::SetnxFinally | Self::SetnxExpire | Self::SetNxEx | Self::TokenCheck
        )
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The per-process part of the lab: the local mutex and the library locks.
pub struct Lab {
    config: LabConfig,
    local_mutex: tokio::sync::Mutex<()>,
    watchdog: Lock,
    token_lua: SimpleLock,
    redlock: Option<Redlock>,
    script: redis::Script,
}

impl fmt::Debug for Lab {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lab")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// `POST /lab/stock` body.
#[derive(Debug, Deserialize)]
pub struct SetStock {
    /// The stock to sell (0 to 1,000,000,000).
    pub stock: i64,
}

/// `POST /lab/deduct/{variant}` reply.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeductReply {
    /// Whether this request sold a unit.
    pub sold: bool,
    /// Whether the request got the variant's lock (true for lock-free variants).
    pub got_lock: bool,
    /// What the injected fault did, on the request that got it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
}

/// The lock key of the hand-made variants, at the end of a run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LockKeyState {
    /// Whether `lab:lock` exists.
    pub present: bool,
    /// Its TTL in ms; `None` when absent or without expiry.
    pub ttl_ms: Option<i64>,
}

/// Everything the lab records, read from Redis and the database (`GET /lab/stock`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LabState {
    /// The Redis stock; `None` before `POST /lab/stock`.
    pub stock: Option<i64>,
    /// Units sold according to the Redis counter.
    pub sold: i64,
    /// Deduction requests of this run.
    pub requests: i64,
    /// Requests that gave up waiting for a held lock.
    pub gave_up: i64,
    /// Deletes that removed another holder's lock.
    pub foreign_deletes: i64,
    /// What the injected faults did.
    pub faults: Vec<String>,
    /// `lab:lock` now.
    pub lock: LockKeyState,
    /// The database stock (`db-optimistic`).
    pub db_stock: Option<i64>,
    /// Units the database row counted as sold.
    pub db_sold: Option<i64>,
    /// The watchdog lock's TTL (ms) sampled during each stall.
    pub ttl_samples: Vec<Vec<i64>>,
    /// Stalls during which the TTL went back up (renewed by the watchdog).
    pub ttl_refreshed: i64,
}

impl LabState {
    /// Reads the lab's state.
    ///
    /// # Errors
    ///
    /// When Redis or the database cannot be reached.
    pub async fn read(conn: &mut ConnectionManager, db: &Db) -> Result<Self, ApiError> {
        #[allow(clippy::type_complexity)]
        let (stock, sold, requests, gave_up, foreign, faults, present, pttl, samples, refreshed): (
            Option<i64>,
            Option<i64>,
            Option<i64>,
            Option<i64>,
            Option<i64>,
            Vec<String>,
            bool,
            i64,
            Vec<String>,
            Option<i64>,
        ) = redis::pipe()
            .get(keys::STOCK)
            .get(keys::SOLD)
            .get(keys::SEQ)
            .get(keys::GAVE_UP)
            .get(keys::FOREIGN_DELETES)
            .lrange(keys::FAULTS, 0, -1)
            .exists(keys::LOCK)
            .pttl(keys::LOCK)
            .lrange(keys::TTL_SAMPLES, 0, -1)
            .get(keys::TTL_REFRESHED)
            .query_async(conn)
            .await?;
        let db_state = db.lab_state().await?;
        Ok(Self {
            stock,
            sold: sold.unwrap_or(0),
            requests: requests.unwrap_or(0),
            gave_up: gave_up.unwrap_or(0),
            foreign_deletes: foreign.unwrap_or(0),
            faults,
            lock: LockKeyState {
                present,
                ttl_ms: (pttl >= 0).then_some(pttl),
            },
            db_stock: db_state.map(|s| s.0),
            db_sold: db_state.map(|s| s.1),
            ttl_samples: samples
                .iter()
                .filter_map(|s| serde_json::from_str(s).ok())
                .collect(),
            ttl_refreshed: refreshed.unwrap_or(0),
        })
    }
}

/// `POST /lab/stock` `{"stock": 200}`: sets the stock in Redis and the database and
/// clears the counters of the previous run.
pub async fn set_stock(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<SetStock>,
) -> Result<Json<LabState>, ApiError> {
    if !(0..=1_000_000_000).contains(&req.stock) {
        return Err(ApiError::InvalidInput(
            "stock must be between 0 and 1000000000".into(),
        ));
    }
    let mut conn = state.inner.redis.clone();
    let () = redis::pipe()
        .atomic()
        .set(keys::STOCK, req.stock)
        .ignore()
        .set(keys::SOLD, 0)
        .ignore()
        .set(keys::SEQ, 0)
        .ignore()
        .set(keys::HOLDERS, 0)
        .ignore()
        .del(&[
            keys::LOCK,
            keys::FAULT_CLAIM,
            keys::FOREIGN_DELETES,
            keys::GAVE_UP,
            keys::FAULTS,
            keys::TTL_SAMPLES,
            keys::TTL_REFRESHED,
        ])
        .ignore()
        .query_async(&mut conn)
        .await?;
    state.inner.db.lab_reset(req.stock).await?;
    Ok(Json(LabState::read(&mut conn, &state.inner.db).await?))
}

/// `GET /lab/stock`: the lab's state.
pub async fn stock(State(state): State<AppState>) -> Result<Json<LabState>, ApiError> {
    let mut conn = state.inner.redis.clone();
    Ok(Json(LabState::read(&mut conn, &state.inner.db).await?))
}

/// `POST /lab/deduct/{variant}`: one deduction; 200 with `{"sold": ...}` whether or not
/// a unit was sold.
pub async fn deduct(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<DeductReply>, ApiError> {
    let variant = Variant::parse(&name).ok_or(ApiError::UnknownVariant(name))?;
    let mut conn = state.inner.redis.clone();
    let seq: u64 = conn.incr(keys::SEQ, 1).await?;
    let run = Run {
        lab: &state.inner.lab,
        conn,
        db: &state.inner.db,
        seq,
        fault: false,
    };
    Ok(Json(run.deduct(variant).await?))
}

impl Lab {
    /// The lab of one process.
    ///
    /// # Errors
    ///
    /// When a lease is out of range, or the redlock clients are invalid.
    pub fn new(config: &LabConfig, locks: &Client, redlock: &[Client]) -> anyhow::Result<Self> {
        let redlock = if redlock.is_empty() {
            None
        } else {
            Some(
                Redlock::new(redlock, REDLOCK_LOCK)?
                    .with_ttl(config.redlock_ttl)?
                    // 200 contenders: retry sooner than the default 50-100 ms.
                    .with_retry(Duration::from_millis(5), Duration::from_millis(15))?,
            )
        };
        Ok(Self {
            config: config.clone(),
            local_mutex: tokio::sync::Mutex::new(()),
            watchdog: locks.lock(WATCHDOG_LOCK)?,
            token_lua: locks
                .simple_lock(TOKEN_LUA_LOCK)?
                .with_lease(TOKEN_LUA_LEASE)?,
            redlock,
            script: redis::Script::new(include_str!("../lua/lab_deduct.lua")),
        })
    }
}

/// One deduction request.
struct Run<'a> {
    lab: &'a Lab,
    conn: ConnectionManager,
    db: &'a Db,
    seq: u64,
    fault: bool,
}

/// The answer of a variant that did not get its lock in time.
const GAVE_UP: DeductReply = DeductReply {
    sold: false,
    got_lock: false,
    fault: None,
};

fn sold(sold: bool) -> DeductReply {
    DeductReply {
        sold,
        got_lock: true,
        fault: None,
    }
}

impl Run<'_> {
    async fn deduct(mut self, variant: Variant) -> Result<DeductReply, ApiError> {
        match variant {
            Variant::Naive => Ok(sold(self.step(None).await?)),
            Variant::LocalMutex => {
                let _held = self.lab.local_mutex.lock().await;
                Ok(sold(self.step(None).await?))
            }
            Variant::Setnx => self.setnx().await,
            Variant::SetnxFinally => self.setnx_finally().await,
            Variant::SetnxExpire => self.setnx_expire().await,
            Variant::SetNxEx => self.set_nx_ex().await,
            Variant::TokenCheck => self.token_check().await,
            Variant::TokenLua => self.token_lua().await,
            Variant::Watchdog => self.watchdog().await,
            Variant::Redlock => self.redlock().await,
            Variant::LuaAtomic => {
                let code: i64 = self
                    .lab
                    .script
                    .key(keys::STOCK)
                    .key(keys::SOLD)
                    .invoke_async(&mut self.conn)
                    .await?;
                match code {
                    -1 => Err(ApiError::StockNotSet),
                    code => Ok(sold(code == 1)),
                }
            }
            Variant::DbOptimistic => Ok(sold(self.db.lab_deduct().await?)),
        }
    }

    /// The seed's `deductStock` body: GET, check, SET stock - 1 (and count the sale).
    /// With `outlive`, the holder stalls between the read and the write until its
    /// lease has run out and another request has taken the lock and sold a unit, so
    /// its write is stale.
    async fn step(&mut self, outlive: Option<&str>) -> Result<bool, ApiError> {
        let stock: Option<i64> = self.conn.get(keys::STOCK).await?;
        let stock = stock.ok_or(ApiError::StockNotSet)?;
        if stock <= 0 {
            return Ok(false);
        }
        if outlive.is_some() {
            // Slow past the lease: another holder takes the lock and sells meanwhile.
            tokio::time::sleep(self.lab.config.lease).await;
            self.await_stock_change(stock).await?;
        }
        let () = self.conn.set(keys::STOCK, stock - 1).await?;
        let _: i64 = self.conn.incr(keys::SOLD, 1).await?;
        Ok(true)
    }

    /// The injected stall of a slow holder: sleeps through its lease, then until
    /// another request holds the lock (bounded by the lab's lock wait), so that what the
    /// holder does next happens while someone else believes they hold the lock.
    /// Returns how long it stalled.
    async fn outlive_lease(&mut self, own: &str) -> Result<Duration, ApiError> {
        let began = Instant::now();
        tokio::time::sleep(self.lab.config.lease).await;
        self.await_other_holder(own).await?;
        Ok(began.elapsed())
    }

    /// Claims the run's one fault for this holder; false when another holder has it.
    async fn claim_fault(&mut self) -> Result<bool, ApiError> {
        let claimed: Option<String> = redis::cmd("SET")
            .arg(keys::FAULT_CLAIM)
            .arg(self.seq)
            .arg("NX")
            .query_async(&mut self.conn)
            .await?;
        Ok(claimed.is_some())
    }

    /// Gives up this holder's claim on the fault, which it could not show: the next
    /// holder claims it.
    async fn pass_fault_on(&mut self) -> Result<(), ApiError> {
        let _: i64 = self.conn.del(keys::FAULT_CLAIM).await?;
        self.fault = false;
        Ok(())
    }

    /// Waits (bounded by the lab's lock wait) until the stock differs from `read`.
    async fn await_stock_change(&mut self, read: i64) -> Result<(), ApiError> {
        let deadline = Instant::now() + self.lab.config.lock_wait;
        loop {
            let stock: Option<i64> = self.conn.get(keys::STOCK).await?;
            if stock != Some(read) || Instant::now() >= deadline {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Waits (bounded by the lab's lock wait) until the lock holds a value other than
    /// `own`: under the seed's load someone always waits, so this takes a few ms.
    async fn await_other_holder(&mut self, own: &str) -> Result<(), ApiError> {
        let deadline = Instant::now() + self.lab.config.lock_wait;
        loop {
            let holder: Option<String> = self.conn.get(keys::LOCK).await?;
            if holder.is_some_and(|h| h != own) || Instant::now() >= deadline {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Retries `acquire` with a short random pause until it succeeds or the lab's lock
    /// wait runs out (then counts the request in `lab:gave_up`).
    async fn spin(&mut self, cmd: &redis::Cmd) -> Result<bool, ApiError> {
        let deadline = Instant::now() + self.lab.config.lock_wait;
        loop {
            let reply: redis::Value = cmd.query_async(&mut self.conn).await?;
            let acquired = match reply {
                redis::Value::Int(n) => n == 1,
                redis::Value::Okay => true,
                redis::Value::SimpleString(s) => s == "OK",
                _ => false,
            };
            if acquired {
                let holder: u64 = self.conn.incr(keys::HOLDERS, 1).await?;
                let fault_at = self.lab.config.fault_at;
                self.fault = fault_at != 0 && holder >= fault_at && self.claim_fault().await?;
                return Ok(true);
            }
            if Instant::now() >= deadline {
                let _: i64 = self.conn.incr(keys::GAVE_UP, 1).await?;
                return Ok(false);
            }
            let pause = rand::random_range(2..=8);
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }

    async fn record_fault(&mut self, what: String) -> Result<DeductReply, ApiError> {
        tracing::warn!(seq = self.seq, fault = %what, "lab fault injected");
        let _: i64 = self.conn.rpush(keys::FAULTS, &what).await?;
        Ok(DeductReply {
            sold: false,
            got_lock: true,
            fault: Some(what),
        })
    }

    fn setnx_cmd(value: &str) -> redis::Cmd {
        let mut cmd = redis::cmd("SETNX");
        cmd.arg(keys::LOCK).arg(value);
        cmd
    }

    fn set_nx_px_cmd(&self, value: &str) -> redis::Cmd {
        let mut cmd = redis::cmd("SET");
        cmd.arg(keys::LOCK)
            .arg(value)
            .arg("NX")
            .arg("PX")
            .arg(self.lab.config.lease.as_millis() as u64);
        cmd
    }

    /// `deductStock3`: SETNX, work, DEL — no finally.
    async fn setnx(&mut self) -> Result<DeductReply, ApiError> {
        if !self.spin(&Self::setnx_cmd("this is lock")).await? {
            return Ok(GAVE_UP);
        }
        if self.fault {
            // The business code throws; with no finally the DEL below never runs.
            return self
                .record_fault(format!(
                    "request #{} threw while holding {}: no finally, the lock is never deleted",
                    self.seq,
                    keys::LOCK
                ))
                .await;
        }
        let sold = self.step(None).await?;
        let _: i64 = self.conn.del(keys::LOCK).await?;
        Ok(self::sold(sold))
    }

    /// `deductStock4`: SETNX, try { work } finally { DEL }.
    async fn setnx_finally(&mut self) -> Result<DeductReply, ApiError> {
        if !self.spin(&Self::setnx_cmd("this is lock")).await? {
            return Ok(GAVE_UP);
        }
        if self.fault {
            // An exception would reach the finally; a killed process does not.
            return self
                .record_fault(format!(
                    "request #{}'s process was killed while holding {}: the finally never ran",
                    self.seq,
                    keys::LOCK
                ))
                .await;
        }
        let result = self.step(None).await;
        let _: i64 = self.conn.del(keys::LOCK).await?;
        Ok(sold(result?))
    }

    /// `deductStock5`: SETNX, then EXPIRE as a second command, try/finally.
    async fn setnx_expire(&mut self) -> Result<DeductReply, ApiError> {
        if !self.spin(&Self::setnx_cmd("this is lock")).await? {
            return Ok(GAVE_UP);
        }
        if self.fault {
            return self
                .record_fault(format!(
                    "request #{}'s process died between SETNX and EXPIRE: {} has no TTL",
                    self.seq,
                    keys::LOCK
                ))
                .await;
        }
        let _: bool = self
            .conn
            .pexpire(keys::LOCK, self.lab.config.lease.as_millis() as i64)
            .await?;
        let result = self.step(None).await;
        let _: i64 = self.conn.del(keys::LOCK).await?;
        Ok(sold(result?))
    }

    /// `deductStock6`: `SET lock v NX EX` in one command, try/finally DEL. The fault: the
    /// holder stalls past its lease between reading and writing the stock.
    async fn set_nx_ex(&mut self) -> Result<DeductReply, ApiError> {
        // Every holder writes the seed's value; the suffix only lets the audit below
        // tell holders apart — the variant itself never looks at it.
        let value = format!("this is lock#{}", self.seq);
        if !self.spin(&self.set_nx_px_cmd(&value)).await? {
            return Ok(GAVE_UP);
        }
        let began = Instant::now();
        let result = self.step(self.fault.then_some(value.as_str())).await;
        if self.fault {
            // Still slow: the finally runs while the request that took over holds the lock.
            self.await_other_holder(&value).await?;
        }
        let held_for = began.elapsed();
        let foreign = self.audit_delete(&value).await?;
        let _: i64 = self.conn.del(keys::LOCK).await?;
        let sold = result?;
        if !self.fault {
            return Ok(self::sold(sold));
        }
        let what = match foreign {
            Some(owner) => format!(
                "request #{} held a {} ms lease for {} ms, wrote a stale stock, then its finally deleted the lock of {owner}",
                self.seq,
                self.lab.config.lease.as_millis(),
                held_for.as_millis()
            ),
            None => {
                // The request that took over had already finished: the stale write
                // happened, the wrong delete did not. The next holder carries the fault.
                self.pass_fault_on().await?;
                format!(
                    "request #{} held a {} ms lease for {} ms; nobody held the lock when it deleted it",
                    self.seq,
                    self.lab.config.lease.as_millis(),
                    held_for.as_millis()
                )
            }
        };
        self.record_fault(what)
            .await
            .map(|r| DeductReply { sold, ..r })
    }

    /// `deductStock7`: a token per holder, `GET` compare then `DEL` as two commands. The
    /// fault: a pause (the seed's GC pause) between the compare and the delete.
    async fn token_check(&mut self) -> Result<DeductReply, ApiError> {
        let token = format!("{:032x}", rand::random::<u128>());
        if !self.spin(&self.set_nx_px_cmd(&token)).await? {
            return Ok(GAVE_UP);
        }
        let result = self.step(None).await;
        let current: Option<String> = self.conn.get(keys::LOCK).await?;
        let mut fault = None;
        if self.fault && current.as_deref() != Some(token.as_str()) {
            // This holder's lease ran out before its compare (a slow step): it deletes
            // nothing, correctly, and the pause cannot show the race. The next holder
            // carries the fault.
            self.pass_fault_on().await?;
        }
        if current.as_deref() == Some(token.as_str()) {
            let paused = if self.fault {
                self.outlive_lease(&token).await?
            } else {
                Duration::ZERO
            };
            if let Some(owner) = self.audit_delete(&token).await? {
                fault = Some(format!(
                    "request #{} paused {} ms between its GET-compare and DEL; its lock expired and it deleted the lock of {owner}",
                    self.seq,
                    paused.as_millis()
                ));
            } else if self.fault {
                // Nobody took over within the lock wait: nothing to show yet.
                self.pass_fault_on().await?;
            }
            let _: i64 = self.conn.del(keys::LOCK).await?;
        }
        let sold = result?;
        match fault {
            Some(what) => self
                .record_fault(what)
                .await
                .map(|r| DeductReply { sold, ..r }),
            None => Ok(self::sold(sold)),
        }
    }

    /// Instrumentation, not part of any variant: just before a variant's DEL, reads who
    /// holds the lock. If it is not `own`, the DEL is about to remove another holder's
    /// lock: counted in `lab:foreign_deletes`. (Not atomic with the DEL, so it can only
    /// under-count.)
    async fn audit_delete(&mut self, own: &str) -> Result<Option<String>, ApiError> {
        let current: Option<String> = self.conn.get(keys::LOCK).await?;
        match current {
            Some(other) if other != own => {
                let _: i64 = self.conn.incr(keys::FOREIGN_DELETES, 1).await?;
                let holder = other.strip_prefix("this is lock#").map_or_else(
                    || format!("token {}", &other[..other.len().min(8)]),
                    |n| format!("request #{n}"),
                );
                Ok(Some(holder))
            }
            _ => Ok(None),
        }
    }

    /// Compare-and-delete in Lua: ferrisson's `SimpleLock` (`SET NX PX` + script).
    async fn token_lua(&mut self) -> Result<DeductReply, ApiError> {
        let Some(guard) = self
            .lab
            .token_lua
            .lock_timeout(self.lab.config.lock_wait)
            .await?
        else {
            let _: i64 = self.conn.incr(keys::GAVE_UP, 1).await?;
            return Ok(GAVE_UP);
        };
        let result = self.step(None).await;
        guard.unlock().await?;
        Ok(sold(result?))
    }

    /// `redissonLockStock`: `lock.lock()` (watchdog lease), and a stall on every 100th
    /// unit during which the lock's TTL is sampled to show the watchdog renewing it.
    async fn watchdog(&mut self) -> Result<DeductReply, ApiError> {
        let guard = self.lab.watchdog.lock().await?;
        let result = self.watchdog_step().await;
        guard.unlock().await?;
        Ok(sold(result?))
    }

    async fn watchdog_step(&mut self) -> Result<bool, ApiError> {
        let stock: Option<i64> = self.conn.get(keys::STOCK).await?;
        let stock = stock.ok_or(ApiError::StockNotSet)?;
        let config = &self.lab.config;
        if stock > 0 && !config.stall.is_zero() && stock % config.stall_every.max(1) == 0 {
            self.stall_and_sample().await?;
        }
        if stock <= 0 {
            return Ok(false);
        }
        let () = self.conn.set(keys::STOCK, stock - 1).await?;
        let _: i64 = self.conn.incr(keys::SOLD, 1).await?;
        Ok(true)
    }

    /// Sleeps the configured stall while sampling the lock's TTL (the seed's `ttl lock`
    /// every second, 20 times faster); records the samples and whether the TTL went up.
    async fn stall_and_sample(&mut self) -> Result<(), ApiError> {
        let stall = self.lab.config.stall;
        let every = (stall / 20).max(Duration::from_millis(20));
        let end = Instant::now() + stall;
        let mut samples = Vec::new();
        loop {
            if let Some(ttl) = self.lab.watchdog.remaining_ttl().await? {
                samples.push(ttl.as_millis() as i64);
            }
            let now = Instant::now();
            if now >= end {
                break;
            }
            tokio::time::sleep(every.min(end - now)).await;
        }
        let refreshed = samples.windows(2).any(|w| w[1] > w[0]);
        tracing::info!(seq = self.seq, ?samples, refreshed, "watchdog stall");
        let json = serde_json::to_string(&samples).map_err(|e| ApiError::Internal(e.into()))?;
        let _: i64 = self.conn.rpush(keys::TTL_SAMPLES, json).await?;
        if refreshed {
            let _: i64 = self.conn.incr(keys::TTL_REFRESHED, 1).await?;
        }
        Ok(())
    }

    /// `redLockStock`: Redlock over the three `--redlock-redis` servers.
    async fn redlock(&mut self) -> Result<DeductReply, ApiError> {
        let Some(redlock) = &self.lab.redlock else {
            return Err(ApiError::InvalidInput(
                "the redlock variant needs --redlock-redis (three servers)".into(),
            ));
        };
        let Some(guard) = redlock.lock_timeout(REDLOCK_WAIT).await? else {
            let _: i64 = self.conn.incr(keys::GAVE_UP, 1).await?;
            return Ok(GAVE_UP);
        };
        let result = self.step(None).await;
        guard.unlock().await?;
        Ok(sold(result?))
    }
}

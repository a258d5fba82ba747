//! The oversell lab's deductions: `POST /lab/stock` puts a stock in Redis, `POST
//! /lab/deduct/{variant}` runs one deduction the way one of the usual fixes for
//! overselling does, flaw included.
//!
//! Every variant's step is the same stock deduction: read the stock, and if it is
//! positive write back one less — plus an `INCR` of a sold counter in the same step, so
//! the lab counts units handed out from Redis, not from HTTP replies.
//!
//! A request that finds the variant's lock held retries for a bounded wait
//! (`--lab-lock-wait`) before giving up, so a correct lock sells the whole stock under
//! the lab's load, and a shortfall means a deadlock rather than contention.
//!
//! Faults that a load test cannot cause by itself are injected into the
//! `--lab-fault-at`-th holder of the lock in a run (counted across every instance in
//! Redis, so the fault hits while stock is left) and recorded in `{lab}:faults`: an
//! exception or a crash while holding a `SETNX` lock, a holder outliving its lease, a
//! pause between compare and delete.

use std::fmt;
use std::time::Duration;

mod run;

use ferrisson::redis::Commands;
use ferrisson::redis::{Client, FencingToken, Lock, Redlock, SimpleLock};
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};

use crate::db::Db;
use crate::error::ApiError;
use run::Run;

/// Redis keys of the lab (one lab per Redis server or cluster). They share the hash tag
/// `{lab}`: the lab's scripts and pipelines touch several of them at once, which a Redis
/// Cluster runs only on keys of one hash slot.
pub mod keys {
    /// The stock counter.
    pub const STOCK: &str = "{lab}:stock";
    /// Units sold, incremented in the same step as each stock write.
    pub const SOLD: &str = "{lab}:sold";
    /// Requests of the current run, across every instance.
    pub const SEQ: &str = "{lab}:seq";
    /// Acquisitions of the hand-made lock in the current run (the fault's counter).
    pub const HOLDERS: &str = "{lab}:holders";
    /// Set by the holder that carries the run's one fault; deleted again when the fault
    /// could not be shown (nobody's lock to delete), so the next holder carries it.
    pub const FAULT_CLAIM: &str = "{lab}:fault_claim";
    /// The hand-made lock of the `setnx` .. `token-check` variants.
    pub const LOCK: &str = "{lab}:lock";
    /// Deletes that removed another holder's lock.
    pub const FOREIGN_DELETES: &str = "{lab}:foreign_deletes";
    /// Requests that gave up waiting for a held lock.
    pub const GAVE_UP: &str = "{lab}:gave_up";
    /// What the injected faults did (a list of sentences).
    pub const FAULTS: &str = "{lab}:faults";
    /// TTLs (ms) of the watchdog lock sampled during each stall (a list of JSON arrays).
    pub const TTL_SAMPLES: &str = "{lab}:ttl_samples";
    /// Stalls during which the watchdog lock's TTL was seen going back up.
    pub const TTL_REFRESHED: &str = "{lab}:ttl_refreshed";
    /// The stock as the library-lock variants (`token-lua`, `watchdog`, `redlock`) write
    /// it: a resource of ferrisson's fenced writes (`Client::fenced_set`: a hash of the
    /// value and the highest fencing token that wrote it), under the client's
    /// namespace. Each accepted write is copied to [`STOCK`].
    pub const FENCED_STOCK: &str = "{lab}:fenced_stock";
    /// Stock writes the fence refused: a holder whose lock had expired, writing after
    /// a newer holder had written.
    pub const LATE_WRITES_REFUSED: &str = "{lab}:late_writes_refused";
}

/// Name of the ferrisson locks the library-backed variants take.
const WATCHDOG_LOCK: &str = "lab:watchdog";
const TOKEN_LUA_LOCK: &str = "lab:token-lua";
const REDLOCK_LOCK: &str = "lab:redlock";
/// `token-lua`'s lease (`EX 10`): longer than any step takes, even on a starved
/// machine, which is the condition under which this variant is correct.
const TOKEN_LUA_LEASE: Duration = Duration::from_secs(10);
/// How long a `redlock` request waits for the lock (`tryLock(10, 30, SECONDS)`).
const REDLOCK_WAIT: Duration = Duration::from_secs(10);

/// The lab's settings: the same flags and defaults in `seckill serve` (whose
/// `/lab/*` routes use them) and in `seckill-lab` (which passes them to the instances
/// it starts).
///
/// The defaults are the lab's: short leases and stalls, so that a whole run takes
/// about a minute, and a fault in the 50th holder of each flawed variant's lock.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
#[command(next_help_heading = "Oversell lab (the /lab routes)")]
pub struct LabConfig {
    /// Lease of the lab's hand-made expiring locks (setnx-expire, set-nx-ex,
    /// token-check); token-lua keeps 10s.
    #[arg(long = "lab-lease", value_name = "DURATION", default_value = "1s", value_parser = humantime::parse_duration)]
    pub lease: Duration,
    /// How long a lab request retries a held lock before it answers sold: false.
    #[arg(long = "lab-lock-wait", value_name = "DURATION", default_value = "2s", value_parser = humantime::parse_duration)]
    pub lock_wait: Duration,
    /// The n-th holder of a flawed variant's lock in a run (counted across instances)
    /// gets the variant's fault — an exception, a killed process, a stall past its lease
    /// or a pause — or the next holder when it could not show it; 0: never.
    #[arg(long = "lab-fault-at", value_name = "N", default_value_t = 50)]
    pub fault_at: u64,
    /// watchdog variant: how long the holder stalls on every --lab-stall-every-th unit
    /// (long enough to see the watchdog renew the lease).
    #[arg(long = "lab-stall", value_name = "DURATION", default_value = "1500ms", value_parser = humantime::parse_duration)]
    pub stall: Duration,
    /// watchdog variant: stall when the stock read is a multiple of this.
    #[arg(long = "lab-stall-every", value_name = "UNITS", default_value_t = 100)]
    pub stall_every: i64,
    /// redlock variant: the lock's TTL on each server.
    #[arg(long = "lab-redlock-ttl", value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub redlock_ttl: Duration,
}

impl Default for LabConfig {
    /// The flags' defaults (a test checks that they agree).
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(1),
            lock_wait: Duration::from_secs(2),
            fault_at: 50,
            stall: Duration::from_millis(1500),
            stall_every: 100,
            redlock_ttl: Duration::from_secs(30),
        }
    }
}

/// One deduction strategy of the lab.
///
/// ```
/// use seckill::oversell::Variant;
///
/// let v = Variant::parse("set-nx-ex").expect("a lab variant");
/// assert_eq!(v, Variant::SetNxEx);
/// assert_eq!(v.to_string(), "set-nx-ex");
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

impl Variant {
    /// Every variant, from the most naive to the correct ones.
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
    /// The client of the library-lock variants' fenced stock writes.
    locks: Client,
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

impl crate::http::extract::JsonBody for SetStock {
    const FIELDS: &'static [(&'static str, &'static str)] =
        &[("stock", "an integer from 0 to 1000000000")];
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
    /// Whether `{lab}:lock` exists.
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
    /// `{lab}:lock` now.
    pub lock: LockKeyState,
    /// The database stock (`db-optimistic`).
    pub db_stock: Option<i64>,
    /// Units the database row counted as sold.
    pub db_sold: Option<i64>,
    /// The watchdog lock's TTL (ms) sampled during each stall.
    pub ttl_samples: Vec<Vec<i64>>,
    /// Stalls during which the TTL went back up (renewed by the watchdog).
    pub ttl_refreshed: i64,
    /// Stock writes of the library-lock variants that the fence refused: the writer's
    /// lock had expired and a newer holder had written (without the fence: an oversold
    /// unit or a lost update).
    #[serde(default)]
    pub late_writes_refused: i64,
}

impl LabState {
    /// Reads the lab's state.
    ///
    /// # Errors
    ///
    /// When Redis or the database cannot be reached.
    pub async fn read(conn: &mut Commands, db: &Db) -> Result<Self, ApiError> {
        #[allow(clippy::type_complexity)]
        let (
            stock,
            sold,
            requests,
            gave_up,
            foreign,
            faults,
            present,
            pttl,
            samples,
            refreshed,
            late,
        ): (
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
            .get(keys::LATE_WRITES_REFUSED)
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
            late_writes_refused: late.unwrap_or(0),
        })
    }
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
                    .with_lease(ferrisson::redis::Lease::Fixed(config.redlock_ttl))?
                    // 200 contenders: retry sooner than the default 50-100 ms.
                    .with_retry(Duration::from_millis(5), Duration::from_millis(15))?,
            )
        };
        Ok(Self {
            config: config.clone(),
            locks: locks.clone(),
            local_mutex: tokio::sync::Mutex::new(()),
            watchdog: locks.lock(WATCHDOG_LOCK)?,
            token_lua: locks
                .simple_lock(TOKEN_LUA_LOCK)?
                .with_lease(ferrisson::redis::Lease::Fixed(TOKEN_LUA_LEASE))?,
            redlock,
            script: redis::Script::new(include_str!("../../lua/lab_deduct.lua")),
        })
    }
}

impl Lab {
    /// The Redis key of [`keys::FENCED_STOCK`] (the client's namespace, then the
    /// resource).
    fn fenced_stock_key(&self) -> String {
        format!("{}{}", self.locks.namespace(), keys::FENCED_STOCK)
    }
}

/// Largest stock `POST /lab/stock` accepts.
pub const MAX_STOCK: i64 = 1_000_000_000;

/// Sets the stock in Redis and the database and clears the counters of the previous
/// run; returns the lab's state afterwards.
///
/// # Errors
///
/// `INVALID_INPUT` for a stock out of range; `UNAVAILABLE` when a store cannot be reached.
pub async fn reset(
    lab: &Lab,
    conn: &mut Commands,
    db: &Db,
    stock: i64,
) -> Result<LabState, ApiError> {
    if !(0..=MAX_STOCK).contains(&stock) {
        return Err(ApiError::InvalidInput(format!(
            "stock must be between 0 and {MAX_STOCK}"
        )));
    }
    let () = redis::pipe()
        .atomic()
        .set(keys::STOCK, stock)
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
            keys::LATE_WRITES_REFUSED,
            &lab.fenced_stock_key(),
        ])
        .ignore()
        .query_async(conn)
        .await?;
    // The fenced copy starts from the new stock with no fence (its key was deleted just
    // above, so token 0 is accepted): the run's first holder's token is above it.
    let _accepted = lab
        .locks
        .fenced_set(
            keys::FENCED_STOCK,
            stock.to_string().as_bytes(),
            FencingToken::new(0),
        )
        .await?;
    db.lab_reset(stock).await?;
    LabState::read(conn, db).await
}

/// One deduction the way `variant` does it, flaw included.
///
/// # Errors
///
/// `STOCK_NOT_SET` before [`reset`]; `UNAVAILABLE` when a store cannot be reached.
pub async fn deduct(
    lab: &Lab,
    mut conn: Commands,
    db: &Db,
    variant: Variant,
) -> Result<DeductReply, ApiError> {
    let seq: u64 = conn.incr(keys::SEQ, 1).await?;
    Run::new(lab, conn, db, seq).deduct(variant).await
}

#[cfg(test)]
mod tests {
    use clap::{Args as _, FromArgMatches as _};

    use super::LabConfig;

    #[test]
    fn default_is_what_the_flags_default_to() {
        let matches = LabConfig::augment_args(clap::Command::new("lab"))
            .try_get_matches_from(["lab"])
            .expect("no flags parse");
        let parsed = LabConfig::from_arg_matches(&matches).expect("defaults");
        assert_eq!(parsed, LabConfig::default());
        assert_eq!(parsed.validate(), Ok(()));
    }
}

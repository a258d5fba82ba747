//! One deduction request of the lab, variant by variant.

use std::time::Duration;

use ferrisson::redis::Commands;
use redis::AsyncCommands;
use tokio::time::Instant;

use ferrisson::redis::FencingToken;

use super::{DeductReply, Lab, REDLOCK_WAIT, Variant, keys};
use crate::db::Db;
use crate::error::ApiError;

/// One deduction request.
pub(super) struct Run<'a> {
    lab: &'a Lab,
    conn: Commands,
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

impl<'a> Run<'a> {
    pub(super) fn new(lab: &'a Lab, conn: Commands, db: &'a Db, seq: u64) -> Self {
        Self {
            lab,
            conn,
            db,
            seq,
            fault: false,
        }
    }

    pub(super) async fn deduct(mut self, variant: Variant) -> Result<DeductReply, ApiError> {
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

    /// The stock deduction itself: GET, check, SET stock - 1 (and count the sale).
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
    /// `own`: under the lab's load someone always waits, so this takes a few ms.
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
    /// wait runs out (then counts the request in `{lab}:gave_up`).
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

    /// `setnx`: SETNX, work, DEL — no finally.
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

    /// `setnx-finally`: SETNX, try { work } finally { DEL }.
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

    /// `setnx-expire`: SETNX, then EXPIRE as a second command, try/finally.
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

    /// `set-nx-ex`: `SET lock v NX EX` in one command, try/finally DEL. The fault: the
    /// holder stalls past its lease between reading and writing the stock.
    async fn set_nx_ex(&mut self) -> Result<DeductReply, ApiError> {
        // Every holder writes the same value; the suffix only lets the audit below
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

    /// `token-check`: a token per holder, `GET` compare then `DEL` as two commands. The
    /// fault: a pause (a GC pause, say) between the compare and the delete.
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
    /// lock: counted in `{lab}:foreign_deletes`. (Not atomic with the DEL, so it can only
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

    /// Compare-and-delete in Lua: ferrisson's `SimpleLock` (`SET NX PX` + script); the
    /// stock written through the fence with the guard's token.
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
        let result = self.fenced_step(guard.fencing_token(), false).await;
        released(guard.unlock().await)?;
        Ok(sold(result?))
    }

    /// `watchdog`: `lock.lock()` (watchdog lease), and a stall on every 100th
    /// unit during which the lock's TTL is sampled to show the watchdog renewing it; the
    /// stock written through the fence with the guard's token, so a holder that lost
    /// its lock during the stall (a paused or starved process) cannot write late.
    async fn watchdog(&mut self) -> Result<DeductReply, ApiError> {
        let guard = self.lab.watchdog.lock().await?;
        let result = self.fenced_step(guard.fencing_token(), true).await;
        released(guard.unlock().await)?;
        Ok(sold(result?))
    }

    /// The stock deduction of the library-lock variants, written through ferrisson's
    /// fencing: read the fenced stock; if positive (after the watchdog variant's stall,
    /// with `stall`), write one less with the holder's `token`. The fence refuses the
    /// write if a holder with a newer token has written since: this holder's lock
    /// expired while it worked, and its write would sell a unit twice. Such a refusal
    /// is counted in `{lab}:late_writes_refused` and sells nothing.
    async fn fenced_step(&mut self, token: FencingToken, stall: bool) -> Result<bool, ApiError> {
        let read = self.lab.locks.fenced_get(keys::FENCED_STOCK).await?;
        let stock = read
            .and_then(|(value, _)| std::str::from_utf8(&value).ok()?.parse::<i64>().ok())
            .ok_or(ApiError::StockNotSet)?;
        let config = &self.lab.config;
        if stall && stock > 0 && !config.stall.is_zero() && stock % config.stall_every.max(1) == 0 {
            self.stall_and_sample().await?;
        }
        if stock <= 0 {
            return Ok(false);
        }
        let write = self
            .lab
            .locks
            .fenced_set(
                keys::FENCED_STOCK,
                (stock - 1).to_string().as_bytes(),
                token,
            )
            .await?;
        if !write.is_accepted() {
            tracing::warn!(
                seq = self.seq,
                token = token.get(),
                ?write,
                "lab: a late stock write was refused by the fence"
            );
            let _: i64 = self.conn.incr(keys::LATE_WRITES_REFUSED, 1).await?;
            return Ok(false);
        }
        // The copy every variant's stock is read from, and the sale.
        let () = redis::pipe()
            .atomic()
            .set(keys::STOCK, stock - 1)
            .ignore()
            .incr(keys::SOLD, 1)
            .ignore()
            .query_async(&mut self.conn)
            .await?;
        Ok(true)
    }

    /// Sleeps the configured stall while sampling the lock's TTL (`ttl lock`
    /// every second, 20 times faster); records the samples and whether the TTL went up.
    async fn stall_and_sample(&mut self) -> Result<(), ApiError> {
        let stall = self.lab.config.stall;
        let every = (stall / 20).max(Duration::from_millis(20));
        let end = Instant::now() + stall;
        let mut samples = Vec::new();
        loop {
            if let Some(ttl) = self.lab.watchdog.ttl().await? {
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

    /// `redlock`: Redlock over the three `--redlock-redis` servers; the stock written
    /// through the fence with the guard's token.
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
        let result = self.fenced_step(guard.fencing_token(), false).await;
        released(guard.unlock().await)?;
        Ok(sold(result?))
    }
}

/// The result of a library lock's `unlock()`, where a hold that had already ended (its
/// lease expired, a newer holder has it) is not a failure of the request: the fence
/// has already refused what that holder would have written late.
fn released(unlocked: Result<(), ferrisson::redis::Error>) -> Result<(), ApiError> {
    match unlocked {
        Ok(())
        | Err(
            ferrisson::redis::Error::LeaseExpired { .. } | ferrisson::redis::Error::NotOwner { .. },
        ) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

//! One instance of a variant the lab runs itself: its own connections (its own pool, its
//! own ferrisson client and session, its own clock), and the deduction of one request.

use std::sync::Arc;
use std::time::Duration;

use ferrisson::{DistributedLock, Guard as _};
use redis::aio::MultiplexedConnection;
use sqlx::AnyPool;

use super::getset_timestamp::GetsetLock;
use super::lock_table_naive::NaiveLockTable;
use super::observed::Observed;
use super::redis_stock::RedisStock;
use super::sql_stock::SqlStock;

/// How one request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// It sold a unit.
    Sold,
    /// It found no stock.
    SoldOut,
    /// It gave up waiting for the lock.
    GaveUp,
    /// `db-version-cas`: its compare failed while stock was left.
    Conflict,
    /// Its holder crashed, as the lab made it.
    Crashed,
}

/// The settings a request needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// How long a request waits for the lock before it gives up.
    pub lock_wait: Duration,
    /// The acquisition that crashes (0: none).
    pub fault_at: u64,
}

/// The stock in the database, through this instance's pool.
pub(crate) struct SqlAt {
    pub stock: SqlStock,
    pub pool: AnyPool,
}

/// The stock in Redis, through this instance's connection.
pub(crate) struct RedisAt {
    pub stock: RedisStock,
    pub conn: MultiplexedConnection,
}

/// One instance: its number (from 1), its lock and its stock.
pub(crate) struct Instance {
    pub number: usize,
    pub kind: Kind,
}

/// The lock of an instance, and where its stock is.
pub(crate) enum Kind {
    NaiveTable(NaiveLockTable, SqlAt),
    TableLock(ferrisson::sql::TableLock, SqlAt),
    SessionLock(ferrisson::sql::SessionLock, SqlAt),
    ForUpdate(SqlAt),
    VersionCas(SqlAt),
    Getset(GetsetLock, RedisAt),
    /// ferrisson's lock on ZooKeeper or etcd; the client is kept so its session lives.
    Coordinator {
        lock: ferrisson::AnyLock,
        _client: ferrisson::Client,
        at: RedisAt,
    },
}

impl Instance {
    /// Request `seq`'s deduction.
    pub(crate) async fn deduct(
        &self,
        seq: usize,
        observed: &Observed,
        settings: Settings,
    ) -> anyhow::Result<Outcome> {
        match &self.kind {
            Kind::NaiveTable(table, at) => {
                self.naive_table(table, at, seq, observed, settings).await
            }
            Kind::TableLock(lock, at) => {
                under_lock(lock, observed, settings, at.stock.step(&at.pool)).await
            }
            Kind::SessionLock(lock, at) => {
                under_lock(lock, observed, settings, at.stock.step(&at.pool)).await
            }
            Kind::Coordinator { lock, at, .. } => {
                let mut conn = at.conn.clone();
                under_lock(lock, observed, settings, at.stock.step(&mut conn)).await
            }
            Kind::ForUpdate(at) => Ok(sold(at.stock.step_for_update(&at.pool).await?)),
            Kind::VersionCas(at) => Ok(match at.stock.step_version_cas(&at.pool).await? {
                None => Outcome::SoldOut,
                Some(true) => Outcome::Sold,
                Some(false) => {
                    observed
                        .cas_conflicts
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    Outcome::Conflict
                }
            }),
            Kind::Getset(lock, at) => self.getset(lock, at, seq, observed, settings).await,
        }
    }

    async fn naive_table(
        &self,
        table: &NaiveLockTable,
        at: &SqlAt,
        seq: usize,
        observed: &Observed,
        settings: Settings,
    ) -> anyhow::Result<Outcome> {
        let owner = format!("instance-{}-request-{seq}", self.number);
        if !table.acquire(&at.pool, &owner, settings.lock_wait).await? {
            observed
                .gave_up
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            return Ok(Outcome::GaveUp);
        }
        let (held, crash) = observed.acquired(settings.fault_at);
        if crash {
            drop(held);
            observed.event(format!(
                "request #{seq} on instance {} inserted its row into {} and its process died before the DELETE: the row has no expiry, and every later insert is refused",
                self.number,
                table.table()
            ));
            return Ok(Outcome::Crashed);
        }
        let result = at.stock.step(&at.pool).await;
        drop(held);
        table.release(&at.pool, &owner).await?;
        Ok(sold(result?))
    }

    async fn getset(
        &self,
        lock: &GetsetLock,
        at: &RedisAt,
        seq: usize,
        observed: &Observed,
        settings: Settings,
    ) -> anyhow::Result<Outcome> {
        let mut conn = at.conn.clone();
        let Some(taken) = lock.acquire(&mut conn, settings.lock_wait).await? else {
            observed
                .gave_up
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            return Ok(Outcome::GaveUp);
        };
        let doubles_before = Observed::count(&observed.double_holds);
        let (held, crash) = observed.acquired(settings.fault_at);
        if let Some(old) = taken.took_over {
            let behind = lock.now_ms() - old;
            if Observed::count(&observed.double_holds) > doubles_before {
                observed.event(format!(
                    "request #{seq} on instance {} read the lock's expiry as {behind} ms past by its clock and took it over with GETSET while another request still held it: two holders at once",
                    self.number
                ));
            } else {
                observed.event(format!(
                    "request #{seq} on instance {} found the lock's expiry {behind} ms past and took it over with GETSET",
                    self.number
                ));
            }
        }
        if crash {
            drop(held);
            observed.event(format!(
                "request #{seq} on instance {} took the lock and its process died before the DEL: the lock stays until its timestamp passes",
                self.number
            ));
            return Ok(Outcome::Crashed);
        }
        let result = at.stock.step(&mut conn).await;
        drop(held);
        lock.release(&mut conn, taken).await?;
        Ok(sold(result?))
    }
}

fn sold(sold: bool) -> Outcome {
    if sold {
        Outcome::Sold
    } else {
        Outcome::SoldOut
    }
}

/// A library lock's deduction: `lock_timeout(lock_wait)`, the naive step, `unlock()`.
async fn under_lock<L: DistributedLock>(
    lock: &L,
    observed: &Observed,
    settings: Settings,
    step: impl Future<Output = anyhow::Result<bool>>,
) -> anyhow::Result<Outcome> {
    let Some(guard) = lock.lock_timeout(settings.lock_wait).await? else {
        observed
            .gave_up
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        return Ok(Outcome::GaveUp);
    };
    let (held, _) = observed.acquired(0);
    let result = step.await;
    drop(held);
    guard.unlock().await?;
    Ok(sold(result?))
}

/// Every instance of a run, shared by the load's tasks.
pub(crate) type Instances = Arc<Vec<Instance>>;

//! The stock of the variants whose lock is not in a database (the timestamp lock, the
//! ZooKeeper and etcd locks): two keys on a Redis server the lab started for them, under
//! a random prefix of the run's own.

use anyhow::Context as _;
use redis::AsyncCommands as _;
use redis::aio::MultiplexedConnection;

/// The run's keys on the lab's Redis server.
#[derive(Debug, Clone)]
pub(crate) struct RedisStock {
    /// `seckill-lab:<random>:`: every key of the run starts with it.
    prefix: String,
}

/// A connection of one instance to the Redis server at `url`.
///
/// # Errors
///
/// When the server cannot be reached.
pub(crate) async fn connect(url: &str) -> anyhow::Result<MultiplexedConnection> {
    redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await
        .context("cannot connect to the lab's Redis server")
}

impl RedisStock {
    /// The keys of a new run.
    pub(crate) fn new() -> Self {
        Self {
            prefix: format!("seckill-lab:{:012x}:", rand::random::<u64>() >> 16),
        }
    }

    /// The run's key called `what`.
    pub(crate) fn key(&self, what: &str) -> String {
        format!("{}{what}", self.prefix)
    }

    /// Puts `stock` in the stock key, 0 in the sold counter.
    pub(crate) async fn create(
        &self,
        conn: &mut MultiplexedConnection,
        stock: i64,
    ) -> anyhow::Result<()> {
        let () = redis::pipe()
            .set(self.key("stock"), stock)
            .ignore()
            .set(self.key("sold"), 0)
            .ignore()
            .query_async(conn)
            .await?;
        Ok(())
    }

    /// Deletes the run's keys called `whats`.
    pub(crate) async fn delete(
        &self,
        conn: &mut MultiplexedConnection,
        whats: &[&str],
    ) -> anyhow::Result<()> {
        let keys: Vec<String> = whats.iter().map(|w| self.key(w)).collect();
        let _: i64 = conn.del(keys).await?;
        Ok(())
    }

    /// The stock and the units sold.
    pub(crate) async fn state(
        &self,
        conn: &mut MultiplexedConnection,
    ) -> anyhow::Result<(i64, i64)> {
        let (stock, sold): (Option<i64>, Option<i64>) = redis::pipe()
            .get(self.key("stock"))
            .get(self.key("sold"))
            .query_async(conn)
            .await?;
        Ok((
            stock.context("the run's stock key is gone")?,
            sold.unwrap_or(0),
        ))
    }

    /// The naive step a lock guards: `GET` the stock, and if it is positive `SET` it one
    /// less and `INCR` the sold counter (only the lock orders them).
    pub(crate) async fn step(&self, conn: &mut MultiplexedConnection) -> anyhow::Result<bool> {
        let stock: Option<i64> = conn.get(self.key("stock")).await?;
        let stock = stock.context("the run's stock key is gone")?;
        if stock <= 0 {
            return Ok(false);
        }
        let () = redis::pipe()
            .set(self.key("stock"), stock - 1)
            .ignore()
            .incr(self.key("sold"), 1)
            .ignore()
            .query_async(conn)
            .await?;
        Ok(true)
    }
}

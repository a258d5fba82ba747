//! A count-down latch on etcd: one key holding the count, counted down by
//! compare-and-swap on its mod revision, waited on with a watch.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, EventType, Txn, TxnOp, WatchOptions};
use ferrisson_core::observe::{Decided, Kind, Probe, observe_decision};
use ferrisson_core::{DistributedLatch, Error, Result};

use crate::client::Client;
use crate::error::store;

/// A count-down latch on etcd: the key `NAME` (after the client's namespace) holds the
/// count in decimal, set to the handle's count by the first call that finds it absent.
/// It has no lease: it stays until deleted (`etcdctl del NAME`). Waiters are let
/// through once the count reaches zero; a watch on the key tells them.
///
/// The key must not be under a lock's prefix (`LOCKNAME/`): it would queue as a
/// contender for that lock.
///
/// ```no_run
/// use ferrisson_core::DistributedLatch;
///
/// # async fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
/// let ready = client.count_down_latch("workers-ready", 2)?;
/// ready.count_down().await?;
/// ready.count_down().await?;
/// ready.wait().await?; // open
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Latch {
    client: Client,
    probe: Probe,
    key: Arc<str>,
    initial: u32,
}

impl fmt::Debug for Latch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Latch")
            .field("name", &self.probe.name)
            .field("initial", &self.initial)
            .finish_non_exhaustive()
    }
}

/// The count and the key's mod revision, read or set.
struct Counted {
    count: u64,
    mod_revision: i64,
    /// The revision of the read.
    at: i64,
}

impl Latch {
    pub(crate) fn new(client: Client, name: &str, initial: u32) -> Result<Self> {
        let prefix = client.prefix_of(name)?;
        // The key is the name itself, not a prefix: `prefix_of` validated it.
        let key: Arc<str> = Arc::from(prefix.trim_end_matches('/'));
        let probe = client.classes().probe(Kind::Latch, &Arc::from(name));
        Ok(Self {
            client,
            probe,
            key,
            initial,
        })
    }

    /// The latch's name.
    ///
    /// ```no_run
    /// # fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
    /// assert_eq!(client.count_down_latch("a", 1)?.name(), "a");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.probe.name
    }

    /// The count now, setting it to the initial count if the key is absent.
    async fn read(&self) -> Result<Counted> {
        let key: &str = &self.key;
        let initial = self.initial.to_string();
        // Create-if-absent and read, in one transaction.
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, initial, None), TxnOp::get(key, None)])
            .or_else([TxnOp::get(key, None)]);
        let answer = self
            .client
            .etcd()
            .kv_client()
            .txn(txn)
            .await
            .map_err(store)?;
        let at = answer
            .header()
            .map_or(0, etcd_client::ResponseHeader::revision);
        let kv = answer
            .op_responses()
            .into_iter()
            .find_map(|r| match r {
                etcd_client::TxnOpResponse::Get(got) => got.kvs().first().cloned(),
                _ => None,
            })
            .ok_or_else(|| Error::Protocol(format!("latch {:?} vanished", self.name())))?;
        let count = std::str::from_utf8(kv.value())
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                Error::Protocol(format!(
                    "latch {:?} holds something that is not a count",
                    self.name()
                ))
            })?;
        Ok(Counted {
            count,
            mod_revision: kv.mod_revision(),
            at,
        })
    }
}

impl DistributedLatch for Latch {
    fn name(&self) -> &str {
        Latch::name(self)
    }

    async fn count_down(&self) -> Result<u64> {
        loop {
            let now = self.read().await?;
            if now.count == 0 {
                return Ok(0);
            }
            let left = now.count - 1;
            let key: &str = &self.key;
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key,
                    CompareOp::Equal,
                    now.mod_revision,
                )])
                .and_then([TxnOp::put(key, left.to_string(), None)]);
            let answer = self
                .client
                .etcd()
                .kv_client()
                .txn(txn)
                .await
                .map_err(store)?;
            if answer.succeeded() {
                return Ok(left);
            }
            // Another count-down came first: read again.
        }
    }

    async fn count(&self) -> Result<u64> {
        Ok(self.read().await?.count)
    }

    async fn wait(&self) -> Result<()> {
        self.wait_timeout(Duration::MAX).await.map(drop)
    }

    async fn wait_timeout(&self, wait: Duration) -> Result<Option<()>> {
        let bound = (wait != Duration::MAX).then_some(wait);
        let waiting = async {
            loop {
                let now = self.read().await?;
                if now.count == 0 {
                    return Ok::<(), Error>(());
                }
                let mut stream = self
                    .client
                    .etcd()
                    .watch_client()
                    .watch(
                        &*self.key,
                        Some(WatchOptions::new().with_start_revision(now.at + 1)),
                    )
                    .await
                    .map_err(store)?;
                // Any change (a count-down, a delete) is read again.
                while let Some(answer) = stream.message().await.map_err(store)? {
                    if answer.canceled()
                        || answer
                            .events()
                            .iter()
                            .any(|e| matches!(e.event_type(), EventType::Put | EventType::Delete))
                    {
                        break;
                    }
                }
            }
        };
        let waiting = async {
            match bound {
                // A zero bound still reads once.
                Some(Duration::ZERO) => Ok((self.read().await?.count == 0).then_some(())),
                Some(bound) => match tokio::time::timeout(bound, waiting).await {
                    Ok(opened) => opened.map(Some),
                    Err(_) => Ok(None),
                },
                None => waiting.await.map(Some),
            }
        };
        observe_decision(&self.probe, bound, waiting, |opened| match opened {
            Some(()) => Decided::Granted(None),
            None => Decided::Refused,
        })
        .await
    }
}

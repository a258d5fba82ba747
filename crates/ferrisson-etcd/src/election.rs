//! Leader election on etcd, compatible with etcd's `concurrency.Election` (and
//! `etcdctl elect NAME`): the same queue as the lock, each candidate's key holding the
//! value it proclaims; the leader is the first key by create revision.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, WatchOptions,
};
use ferrisson_core::observe::{Grant, Kind, Probe, observe_acquire};
use ferrisson_core::{
    Capabilities, DistributedElection, Error, Fenced, FencingToken, Guard, Lease, Result,
};

use crate::client::Client;
use crate::contender::{Contender, ride_out};
use crate::error::store;
use crate::held::Held;
use crate::queue::Admission;

/// A leader election on etcd. A candidate campaigns (waits for its turn in the queue),
/// leads until it resigns (`unlock`) or loses its lease or key, and has a fencing token
/// per term (its key's create revision). Anyone can read or observe the leader.
///
/// ```no_run
/// use ferrisson_core::{DistributedElection, Fenced, Guard};
///
/// # async fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
/// let election = client.election("scheduler")?.with_value("host-a");
/// let leadership = election.campaign().await?;
/// println!("leading, term {}", leadership.fencing_token());
/// leadership.unlock().await?; // resign
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Election {
    client: Client,
    probe: Probe,
    prefix: Arc<str>,
    value: Arc<[u8]>,
    lease: Lease,
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.probe.name)
            .finish_non_exhaustive()
    }
}

/// The leader of an election, as etcd has it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The leader's key (`NAME/<lease id in hex>`).
    pub key: String,
    /// The value it proclaimed.
    pub value: Vec<u8>,
    /// Its term's token: the key's create revision.
    pub token: FencingToken,
    /// The revision of the last proclamation (the key's mod revision).
    pub revision: i64,
}

fn token_of(revision: i64) -> FencingToken {
    FencingToken::new(u64::try_from(revision).unwrap_or(0))
}

impl Election {
    pub(crate) fn new(client: Client, name: &str) -> Result<Self> {
        let prefix = client.prefix_of(name)?;
        let probe = client.classes().probe(Kind::Election, &Arc::from(name));
        Ok(Self {
            client,
            probe,
            prefix,
            value: Arc::from(&b""[..]),
            lease: Lease::Watchdog,
        })
    }

    /// The election's name.
    ///
    /// ```no_run
    /// # fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
    /// assert_eq!(client.election("a")?.name(), "a");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.probe.name
    }

    /// The same election, campaigning with `value` (what [`Election::leader`] shows of
    /// this candidate once it leads; empty by default).
    ///
    /// ```no_run
    /// # fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
    /// let election = client.election("a")?.with_value("10.0.0.7:8080");
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn with_value(mut self, value: impl AsRef<[u8]>) -> Self {
        self.value = Arc::from(value.as_ref());
        self
    }

    /// The same election with another lease: [`Lease::Watchdog`] (the default) leads on
    /// the client's session lease, kept alive; [`Lease::Fixed`] on a lease of its own,
    /// not renewed (the term ends with it).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a fixed lease under 1 ms or over a year.
    ///
    /// ```no_run
    /// # fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
    /// use std::time::Duration;
    /// let election = client.election("a")?.with_lease(ferrisson_core::Lease::Fixed(Duration::from_secs(5)))?;
    /// # Ok(()) }
    /// ```
    pub fn with_lease(mut self, lease: Lease) -> Result<Self> {
        self.lease = lease.validate()?;
        Ok(self)
    }

    /// The leader now, if any.
    ///
    /// # Errors
    ///
    /// A store error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// ```no_run
    /// # async fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
    /// if let Some(leader) = client.election("a")?.leader().await? {
    ///     println!("{} leads", String::from_utf8_lossy(&leader.value));
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn leader(&self) -> Result<Option<Leader>> {
        Ok(self.leader_at().await?.0)
    }

    async fn leader_at(&self) -> Result<(Option<Leader>, i64)> {
        let options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1);
        let got = self
            .client
            .etcd()
            .kv_client()
            .get(&*self.prefix, Some(options))
            .await
            .map_err(store)?;
        let revision = got
            .header()
            .map_or(0, etcd_client::ResponseHeader::revision);
        let leader = got.kvs().first().map(|kv| Leader {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            value: kv.value().to_vec(),
            token: token_of(kv.create_revision()),
            revision: kv.mod_revision(),
        });
        Ok((leader, revision))
    }

    /// Waits until the leader differs from `seen` (another leader, a new proclamation,
    /// or none), and returns the new one: etcd's `Observe`, one change at a time.
    ///
    /// # Errors
    ///
    /// A store error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads and watches.
    ///
    /// ```no_run
    /// # async fn run(client: ferrisson_etcd::Client) -> ferrisson_core::Result<()> {
    /// let election = client.election("a")?;
    /// let mut leader = election.leader().await?;
    /// loop {
    ///     leader = election.observe(leader.as_ref()).await?;
    ///     println!("now {leader:?}");
    /// }
    /// # }
    /// ```
    pub async fn observe(&self, seen: Option<&Leader>) -> Result<Option<Leader>> {
        loop {
            let (leader, revision) = self.leader_at().await?;
            if leader.as_ref() != seen {
                return Ok(leader);
            }
            let mut stream = self
                .client
                .etcd()
                .watch_client()
                .watch(
                    &*self.prefix,
                    Some(
                        WatchOptions::new()
                            .with_prefix()
                            .with_start_revision(revision + 1),
                    ),
                )
                .await
                .map_err(store)?;
            // Any change under the prefix may change the leader: read it again.
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
    }

    async fn campaign_within(&self, wait: Option<Duration>) -> Result<Option<Leadership>> {
        let started = tokio::time::Instant::now();
        observe_acquire(
            &self.probe,
            wait,
            ride_out(&self.client, wait, started, move || {
                self.contend(wait, started)
            }),
        )
        .await
    }

    /// One candidate: enqueued, then waiting for its turn until `started + wait`.
    async fn contend(
        &self,
        wait: Option<Duration>,
        started: tokio::time::Instant,
    ) -> Result<Option<Leadership>> {
        let admission = Admission::NoneOlder(Arc::clone(&self.prefix));
        // Boxed: see `Lock::contend`.
        let contender = Box::pin(Contender::enqueue(
            &self.client,
            &self.prefix,
            &admission,
            self.lease,
            &self.value,
        ))
        .await?;
        let Some(contender) =
            Box::pin(contender.take_turn(&self.probe, wait, started, &admission)).await?
        else {
            return Ok(None);
        };
        Ok(Some(Leadership {
            election: self.clone(),
            held: Held::start(contender, self.probe.clone()),
            released: false,
        }))
    }
}

impl DistributedElection for Election {
    type Leadership = Leadership;

    fn name(&self) -> &str {
        Election::name(self)
    }

    fn capabilities(&self) -> Capabilities {
        crate::CAPABILITIES[1]
    }

    async fn campaign(&self) -> Result<Leadership> {
        self.campaign_within(None)
            .await?
            .ok_or_else(|| Error::wait_ended(self.name()))
    }

    async fn try_campaign(&self) -> Result<Option<Leadership>> {
        self.campaign_within(Some(Duration::ZERO)).await
    }

    async fn campaign_timeout(&self, wait: Duration) -> Result<Option<Leadership>> {
        self.campaign_within(Some(wait)).await
    }
}

/// Proof of leading an [`Election`]: one term. `unlock` resigns; dropping it resigns
/// in a background task.
#[must_use = "dropping the leadership resigns"]
pub struct Leadership {
    election: Election,
    held: Arc<Held>,
    released: bool,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("name", &self.election.name())
            .field("key", &self.held.key)
            .field("fencing_token", &self.held.revision)
            .field("held", &self.held.state.is_held())
            .finish_non_exhaustive()
    }
}

impl Grant for Leadership {
    fn fencing_token(&self) -> Option<FencingToken> {
        Some(self.held.token())
    }
}

impl Leadership {
    /// Proclaims a new value while leading (etcd's `Proclaim`): written only if this
    /// term is still the leader's.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseExpired`] when the term had ended; a store error.
    ///
    /// # Cancel safety
    ///
    /// Dropped, the value may or may not have been written.
    ///
    /// ```no_run
    /// # async fn run(leadership: ferrisson_etcd::Leadership) -> ferrisson_core::Result<()> {
    /// leadership.proclaim("10.0.0.8:8080").await?;
    /// # Ok(()) }
    /// ```
    pub async fn proclaim(&self, value: impl Into<Vec<u8>>) -> Result<()> {
        let fence = etcd_client::Compare::create_revision(
            self.held.key.as_str(),
            etcd_client::CompareOp::Equal,
            self.held.revision,
        );
        let put = TxnOp::put(
            self.held.key.as_str(),
            value,
            Some(PutOptions::new().with_lease(self.held.lease_id())),
        );
        let answer = self
            .held
            .client
            .etcd()
            .kv_client()
            .txn(Txn::new().when([fence]).and_then([put]))
            .await
            .map_err(store)?;
        if answer.succeeded() {
            Ok(())
        } else {
            self.held.state.mark_lost();
            Err(Error::LeaseExpired {
                name: self.election.name().into(),
            })
        }
    }
}

impl Guard for Leadership {
    fn name(&self) -> &str {
        self.election.name()
    }

    fn is_held(&self) -> bool {
        self.held.state.is_held()
    }

    fn remaining(&self) -> Duration {
        self.held.state.remaining()
    }

    async fn lost(&self) {
        self.held.state.lost().await;
    }

    async fn unlock(mut self) -> Result<()> {
        self.released = true;
        self.held.leave();
        let name = self.election.name().to_owned();
        self.held
            .state
            .meter()
            .release(
                Some(self.held.token()),
                true,
                self.held.finish(&name),
                |()| false,
            )
            .await
    }
}

impl Fenced for Leadership {
    fn fencing_token(&self) -> FencingToken {
        self.held.token()
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.held.leave();
        let held = Arc::clone(&self.held);
        let name = self.election.name().to_owned();
        self.election.client.runtime().spawn(async move {
            let _ = held.finish(&name).await;
            held.state.meter().end(false);
        });
    }
}

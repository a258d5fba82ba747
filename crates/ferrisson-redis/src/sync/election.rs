//! Leader election: one leader at a time among any number of candidates, with a fencing
//! token per term, in the shape of etcd's `concurrency.Election` and Curator's
//! `LeaderLatch`.
//!
//! The election key holds the leader's owner id and expires with its lease (renewed by
//! the watchdog by default); each election also appends the term to a record of the
//! last 64 terms, which observers read, and publishes on the observers' channel.
//! Stepping down publishes on the candidates' channel, so the next candidate is elected
//! at once; a leader that dies without stepping down is replaced one lease later at most.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::api::error::{Error, Result};
use crate::api::fencing::FencingToken;
use crate::api::lease::Lease;
use crate::backend::client::Client;
use crate::backend::ids::{OwnerId, ReleaseId};
use crate::backend::keys::Keys;
use crate::backend::pubsub::Subscription;
use crate::backend::scripts::Released;
use crate::backend::scripts::election::{
    Campaign, Campaigned, Observe, Observed, Resign, TermRecord,
};
use crate::backend::scripts::simple::Compared;
use crate::observe::metrics::Kind;
use crate::observe::probe::Probe;
use crate::primitive::guard::{HoldGuard, SendRelease, hold_guard_methods};
use crate::primitive::single::{self, SingleAnswer, SingleSpec};
use crate::primitive::wait::{Attempt, acquire_with_wait, try_once};
use ferrisson_core::DistributedLock;

/// Longest accepted candidate id, in bytes.
pub const MAX_CANDIDATE_ID_LEN: usize = 256;

/// How long an observer with no leader to time waits before reading again on its own:
/// messages wake it at once, this only bounds a wait across a lost message.
const VACANT_RECHECK: Duration = Duration::from_secs(5);

impl Client {
    /// A handle to the election called `name` (no Redis traffic until used).
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// let election = client.election("report-scheduler")?.with_candidate_id("host-a")?;
    /// let leadership = election.campaign().await?;
    /// println!("leading, term {}", leadership.fencing_token());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `name` is empty, longer than 1 KiB or holds `{` or
    /// `}` (see [`MAX_NAME_LEN`](crate::MAX_NAME_LEN)).
    pub fn election(&self, name: &str) -> Result<Election> {
        let keys = self.keys(name)?;
        let name = Arc::from(name);
        Ok(Election {
            client: self.clone(),
            probe: self.probe(Kind::Election, &name),
            name,
            terms: Arc::from(keys.with_suffix("terms")),
            leaders: Arc::from(keys.with_suffix("leaders")),
            keys,
            lease: Lease::Watchdog,
            candidate: None,
        })
    }
}

/// A leader election: at most one leader at a time, every term with a larger
/// [`FencingToken`] than the last.
///
/// [`Election::campaign`] waits until this candidate is elected and returns a
/// [`Leadership`], a guard like a lock's: it is renewed by the client's watchdog (or
/// expires after a fixed lease), tells when leadership is lost, and steps down on
/// [`Leadership::resign`] or when dropped, which elects the next waiting candidate at
/// once. A leader that dies without stepping down is replaced when its lease runs out.
/// [`Election::leader`] says who leads now; [`Election::observe`] follows every change.
///
/// Waiting is event-driven, as for locks: candidates wake on a resignation or when the
/// leader's lease runs out, and send nothing meanwhile.
///
/// An election is a lock on leadership, so it implements [`DistributedLock`] as well
/// (`lock` is `campaign`).
///
/// ```no_run
/// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
/// let election = client.election("nightly-report")?;
/// let leadership = election.campaign().await?;
/// tokio::select! {
///     () = leadership.lost() => eprintln!("no longer leader: stop"),
///     () = run_reports(leadership.fencing_token()) => {}
/// }
/// leadership.resign().await?;
/// # Ok(()) }
/// # async fn run_reports(_: ferrisson_redis::FencingToken) {}
/// ```
#[derive(Clone)]
pub struct Election {
    client: Client,
    name: Arc<str>,
    probe: Probe,
    keys: Keys,
    /// The record of terms (a stream), beside the election key.
    terms: Arc<str>,
    /// The channel observers listen on; candidates wait on the keys' release channel.
    leaders: Arc<str>,
    lease: Lease,
    /// The id this candidate is elected under; `None`: its owner id.
    candidate: Option<Arc<str>>,
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .field("lease", &self.lease)
            .field("candidate", &self.candidate)
            .finish_non_exhaustive()
    }
}

/// Who leads an election, from [`Election::leader`], [`Election::observe`] and
/// [`Leadership::info`].
///
/// ```no_run
/// # async fn demo(election: ferrisson_redis::Election) -> ferrisson_redis::Result<()> {
/// if let Some(info) = election.leader().await? {
///     println!("{} leads {} since {:?} (term {})", info.candidate, info.name, info.since, info.term);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderInfo {
    /// The election's name.
    pub name: String,
    /// The owner id the leader holds the election under.
    pub owner: OwnerId,
    /// The id the leader campaigned with ([`Election::with_candidate_id`]), or its owner
    /// id's text when it set none.
    pub candidate: String,
    /// The term's fencing token: greater than every earlier term's.
    pub term: FencingToken,
    /// When the term began, by the Redis server's clock.
    pub since: SystemTime,
}

impl LeaderInfo {
    fn from_record(name: &str, record: &TermRecord) -> Self {
        Self {
            name: name.to_owned(),
            owner: record.owner,
            candidate: record.candidate.clone(),
            term: record.term,
            since: SystemTime::UNIX_EPOCH + Duration::from_millis(record.since_ms),
        }
    }
}

/// An election's state, from [`Election::inspect`].
///
/// ```no_run
/// # async fn demo(election: ferrisson_redis::Election) -> ferrisson_redis::Result<()> {
/// let info = election.inspect().await?;
/// match info.leader {
///     Some(leader) => println!("{} leads, lease left {:?}", leader.candidate, info.ttl),
///     None => println!("{}: nobody leads", info.name),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ElectionInfo {
    /// The election's name.
    pub name: String,
    /// The leader, when one leads.
    pub leader: Option<LeaderInfo>,
    /// The leader's remaining lease in Redis (renewed while its leadership lives);
    /// `None` when nobody leads.
    pub ttl: Option<Duration>,
}

/// One change seen by a [`LeaderObserver`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaderChange {
    /// A term began: this candidate was elected.
    Elected(LeaderInfo),
    /// Nobody leads: the last term ended (a resignation, or a lease that ran out).
    Vacant,
}

impl Election {
    /// The election's name.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// assert_eq!(client.election("scheduler")?.name(), "scheduler");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same election with another lease for future terms: [`Lease::Watchdog`] (the
    /// default) renews leadership while the [`Leadership`] lives; a fixed lease ends the
    /// term after that long.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// use ferrisson_redis::Lease;
    /// let election = client.election("scheduler")?.with_lease(Lease::Fixed(Duration::from_secs(60)))?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a fixed lease under 1 ms or over a year.
    pub fn with_lease(mut self, lease: Lease) -> Result<Self> {
        self.lease = lease.validate()?;
        Ok(self)
    }

    /// The same election, campaigning under `id`: what [`Election::leader`] and observers
    /// report as [`LeaderInfo::candidate`] (a host name, a pod name). Without one, the
    /// candidate is known by its owner id.
    ///
    /// ```no_run
    /// # fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// let election = client.election("scheduler")?.with_candidate_id("worker-3")?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `id` is empty, longer than
    /// [`MAX_CANDIDATE_ID_LEN`] bytes or holds a control character.
    pub fn with_candidate_id(mut self, id: impl Into<String>) -> Result<Self> {
        let id = id.into();
        if id.is_empty() {
            return Err(Error::invalid("candidate id must not be empty"));
        }
        if id.len() > MAX_CANDIDATE_ID_LEN {
            return Err(Error::invalid(format!(
                "candidate id is {} bytes long, the limit is {MAX_CANDIDATE_ID_LEN}",
                id.len()
            )));
        }
        if id.chars().any(char::is_control) {
            return Err(Error::invalid(format!(
                "candidate id {id:?} holds a control character"
            )));
        }
        self.candidate = Some(Arc::from(id));
        Ok(self)
    }

    /// Campaigns until elected.
    ///
    /// ```no_run
    /// # async fn demo(election: ferrisson_redis::Election) -> ferrisson_redis::Result<()> {
    /// let leadership = election.campaign().await?;
    /// leadership.resign().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves this candidate not elected (an
    /// election already sent is undone when its reply arrives) and no subscription.
    pub async fn campaign(&self) -> Result<Leadership> {
        acquire_with_wait(&self.client, &self.probe, self.keys.channel(), None, || {
            self.attempt()
        })
        .await?
        .ok_or_else(|| Error::wait_ended(&self.name))
    }

    /// Campaigns once: `Ok(None)` when another candidate leads. One round trip.
    ///
    /// ```no_run
    /// # async fn demo(election: ferrisson_redis::Election) -> ferrisson_redis::Result<()> {
    /// match election.try_campaign().await? {
    ///     Some(leadership) => leadership.resign().await?,
    ///     None => eprintln!("someone else leads"),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Election::campaign`].
    pub async fn try_campaign(&self) -> Result<Option<Leadership>> {
        try_once(&self.probe, self.attempt()).await
    }

    /// Campaigns for at most `wait`: `Ok(None)` when another candidate still leads then.
    ///
    /// ```no_run
    /// # async fn demo(election: ferrisson_redis::Election) -> ferrisson_redis::Result<()> {
    /// use std::time::Duration;
    /// if let Some(leadership) = election.campaign_timeout(Duration::from_secs(5)).await? {
    ///     leadership.resign().await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Election::campaign`].
    pub async fn campaign_timeout(&self, wait: Duration) -> Result<Option<Leadership>> {
        acquire_with_wait(
            &self.client,
            &self.probe,
            self.keys.channel(),
            Some(wait),
            || self.attempt(),
        )
        .await
    }

    /// Who leads now; `None` when nobody does. One round trip, read-only.
    ///
    /// ```no_run
    /// # async fn demo(election: ferrisson_redis::Election) -> ferrisson_redis::Result<()> {
    /// match election.leader().await? {
    ///     Some(info) => println!("{} leads, term {}", info.candidate, info.term),
    ///     None => println!("nobody leads"),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached, [`Error::Protocol`] when the
    /// election's keys hold something ferrisson did not write.
    pub async fn leader(&self) -> Result<Option<LeaderInfo>> {
        let observed = self.read_after("").await?;
        current_leader(&self.name, &observed)
    }

    /// Who leads now and for how much longer unless the term is renewed: the election's
    /// snapshot, as every primitive's `inspect()` gives one. One round trip, read-only.
    ///
    /// ```no_run
    /// # async fn demo(election: ferrisson_redis::Election) -> ferrisson_redis::Result<()> {
    /// let info = election.inspect().await?;
    /// if let (Some(leader), Some(ttl)) = (&info.leader, info.ttl) {
    ///     println!("{} leads {} (term {}), lease left {ttl:?}", leader.candidate, info.name, leader.term);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Election::leader`].
    pub async fn inspect(&self) -> Result<ElectionInfo> {
        let observed = self.read_after("").await?;
        Ok(ElectionInfo {
            name: self.name.to_string(),
            leader: current_leader(&self.name, &observed)?,
            ttl: u64::try_from(observed.pttl).ok().map(Duration::from_millis),
        })
    }

    /// Ends the current term whoever leads, as if the leader had resigned: candidates and
    /// observers are woken and the next candidate is elected at once. The removed leader
    /// learns it at its next renewal ([`Leadership::lost`] fires then). Returns the
    /// leader removed, `None` when nobody led.
    ///
    /// Only the leader read just before is removed: a term that began in between is left
    /// alone and reported as the one that leads, so two calls never end two terms by
    /// mistake; the call then tries again with the new leader, a few times.
    ///
    /// ```no_run
    /// # async fn demo(election: ferrisson_redis::Election) -> ferrisson_redis::Result<()> {
    /// if let Some(leader) = election.force_resign().await? {
    ///     eprintln!("removed {} (term {})", leader.candidate, leader.term);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached, [`Error::Protocol`] when the
    /// election's keys hold something ferrisson did not write, [`Error::NotOwner`] when a
    /// new leader was elected before each of the attempts could remove the one it read.
    pub async fn force_resign(&self) -> Result<Option<LeaderInfo>> {
        const ATTEMPTS: usize = 3;
        for _ in 0..ATTEMPTS {
            let Some(leader) = self.leader().await? else {
                return Ok(None);
            };
            let compared = self
                .client
                .connection()
                .run(&Resign {
                    key: self.keys.main(),
                    channel: self.keys.channel(),
                    leaders: &self.leaders,
                    owner: leader.owner,
                })
                .await?;
            match compared {
                Compared::Done => return Ok(Some(leader)),
                Compared::Gone => return Ok(None),
                Compared::Other => {}
            }
        }
        Err(Error::NotOwner {
            name: self.name.to_string(),
        })
    }

    /// Follows the election: the current state first, then every change, in order.
    ///
    /// Every term is reported, each once, even one that began and ended between two
    /// reads (the last 64 terms are recorded); [`LeaderChange::Vacant`] is reported when
    /// a read finds nobody leading. Changes arrive by message; a leader that died is seen
    /// gone when its lease runs out, as candidates see it.
    ///
    /// ```no_run
    /// # async fn demo(election: ferrisson_redis::Election) -> ferrisson_redis::Result<()> {
    /// use ferrisson_redis::LeaderChange;
    /// let mut observer = election.observe().await?;
    /// loop {
    ///     match observer.changed().await? {
    ///         LeaderChange::Elected(info) => println!("{} leads (term {})", info.candidate, info.term),
    ///         LeaderChange::Vacant => println!("nobody leads"),
    ///         _ => {}
    ///     }
    /// }
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached (subscribing).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future leaves no subscription behind.
    pub async fn observe(&self) -> Result<LeaderObserver> {
        let subscription = self.client.inner.subscriptions.join(&self.leaders).await?;
        Ok(LeaderObserver {
            election: self.clone(),
            subscription,
            seen: Seen::default(),
        })
    }

    async fn read_after(&self, after: &str) -> Result<Observed> {
        self.client
            .connection()
            .run(&Observe {
                key: self.keys.main(),
                terms: &self.terms,
                after,
            })
            .await
    }

    fn resign_with(&self) -> ResignElection {
        ResignElection {
            keys: self.keys.clone(),
            leaders: Arc::clone(&self.leaders),
        }
    }

    async fn attempt(&self) -> Result<Attempt<Leadership>> {
        let spec = SingleSpec {
            client: &self.client,
            probe: &self.probe,
            keys: &self.keys,
            lease: self.lease,
            release: self.resign_with(),
        };
        let attempt = single::attempt(spec, |owner, lease| async move {
            let candidate = match &self.candidate {
                Some(id) => id.to_string(),
                None => owner.to_string(),
            };
            let reply = self
                .client
                .connection()
                .run(&Campaign {
                    key: self.keys.main(),
                    fence: self.keys.fence(),
                    terms: &self.terms,
                    leaders: &self.leaders,
                    owner,
                    lease,
                    candidate: &candidate,
                })
                .await?;
            Ok(match reply {
                Campaigned::Elected { term, since_ms } => {
                    SingleAnswer::Granted(term, (candidate, since_ms))
                }
                Campaigned::Led { pttl } => SingleAnswer::Held { pttl },
            })
        })
        .await?;
        Ok(attempt.map(|(inner, (candidate, since_ms))| {
            let hold = inner.hold();
            let info = LeaderInfo {
                name: self.name.to_string(),
                owner: hold.owner,
                candidate,
                term: hold.token,
                since: SystemTime::UNIX_EPOCH + Duration::from_millis(since_ms),
            };
            Leadership { inner, info }
        }))
    }
}

/// The leader in `observed` (a read of the latest term), if its term is still on.
fn current_leader(name: &str, observed: &Observed) -> Result<Option<LeaderInfo>> {
    let Some(owner) = observed.leader else {
        return Ok(None);
    };
    match observed.terms.last() {
        Some(record) if record.owner == owner => Ok(Some(LeaderInfo::from_record(name, record))),
        _ => Err(Error::Protocol(format!(
            "election {name:?} is held by {owner} without a recorded term"
        ))),
    }
}

impl DistributedLock for Election {
    type Guard = Leadership;

    fn capabilities(&self) -> ferrisson_core::Capabilities {
        crate::capabilities::ELECTION
    }

    fn name(&self) -> &str {
        Election::name(self)
    }

    async fn lock(&self) -> Result<Leadership> {
        self.campaign().await
    }

    async fn try_lock(&self) -> Result<Option<Leadership>> {
        self.try_campaign().await
    }

    async fn lock_timeout(&self, wait: Duration) -> Result<Option<Leadership>> {
        self.campaign_timeout(wait).await
    }
}

/// How a [`Leadership`] steps down: compare-and-delete on the owner id, waking the next
/// candidate and every observer.
#[derive(Clone)]
struct ResignElection {
    keys: Keys,
    leaders: Arc<str>,
}

impl SendRelease for ResignElection {
    const DROPPED: &'static str = "resigning a dropped leadership";

    async fn send(
        &self,
        client: &Client,
        owner: OwnerId,
        _release_id: ReleaseId,
    ) -> Result<Released> {
        // One term per owner id: resigning twice finds it gone, which the release retry
        // already reads as the first try having worked.
        let compared = client
            .connection()
            .run(&Resign {
                key: self.keys.main(),
                channel: self.keys.channel(),
                leaders: &self.leaders,
                owner,
            })
            .await?;
        Ok(compared.into())
    }
}

/// Proof of leading an [`Election`] for one term; steps down on
/// [`resign`](Leadership::resign) or, best effort, on drop.
///
/// ```no_run
/// # async fn demo(election: ferrisson_redis::Election) -> ferrisson_redis::Result<()> {
/// let leadership = election.campaign().await?;
/// println!("term {} since {:?}", leadership.fencing_token(), leadership.info().since);
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the leadership steps down at once"]
pub struct Leadership {
    inner: HoldGuard<ResignElection>,
    info: LeaderInfo,
}

hold_guard_methods!(Leadership, "the next candidate is elected at once", token);

impl Leadership {
    /// This term as observers see it: the election, the candidate id, the term's token
    /// and when it began (server time).
    ///
    /// ```no_run
    /// # fn demo(leadership: ferrisson_redis::Leadership) {
    /// println!("{} leads {}", leadership.info().candidate, leadership.info().name);
    /// # }
    /// ```
    pub fn info(&self) -> &LeaderInfo {
        &self.info
    }

    /// Steps down: the term ends and the next waiting candidate is elected at once.
    /// The same as [`Leadership::unlock`].
    ///
    /// ```no_run
    /// # async fn demo(leadership: ferrisson_redis::Leadership) -> ferrisson_redis::Result<()> {
    /// leadership.resign().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::LeaseExpired`] when the term had already ended by its lease,
    /// [`Error::NotOwner`] when another candidate leads now, [`Error::Store`] when Redis
    /// could not be reached (the term then ends after its lease).
    ///
    /// # Cancel safety
    ///
    /// As [`Leadership::unlock`].
    pub async fn resign(self) -> Result<()> {
        self.inner.unlock().await
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("name", &self.info.name)
            .field("candidate", &self.info.candidate)
            .field("term", &self.info.term)
            .field("held", &self.is_held())
            .finish_non_exhaustive()
    }
}

/// Follows an [`Election`]'s leaders, from [`Election::observe`].
///
/// Keeps the election's observer channel subscribed on the client's one subscription
/// while it lives.
pub struct LeaderObserver {
    election: Election,
    subscription: Subscription,
    seen: Seen,
}

/// The last change a [`LeaderObserver`] reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Reported {
    /// Nothing yet: the first read reports the current state.
    #[default]
    Nothing,
    Term(FencingToken),
    Vacant,
}

/// What a [`LeaderObserver`] has read so far.
#[derive(Default)]
struct Seen {
    /// The record id of the last term read ('' before the first read, which reads only
    /// the latest term).
    last_record: String,
    /// The latest term read.
    latest: Option<TermRecord>,
    /// The last change reported (or queued).
    reported: Reported,
    /// Changes read but not yet returned.
    pending: VecDeque<LeaderChange>,
}

impl fmt::Debug for LeaderObserver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderObserver")
            .field("election", &self.election.name)
            .field("reported", &self.seen.reported)
            .finish_non_exhaustive()
    }
}

impl LeaderObserver {
    /// The next change: at the first call, the current state.
    ///
    /// ```no_run
    /// # async fn demo(mut observer: ferrisson_redis::LeaderObserver) -> ferrisson_redis::Result<()> {
    /// if let ferrisson_redis::LeaderChange::Elected(info) = observer.changed().await? {
    ///     println!("{} leads", info.candidate);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when Redis cannot be reached, [`Error::Protocol`] when the
    /// election's keys hold something ferrisson did not write.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a change read is kept until a call returns it.
    pub async fn changed(&mut self) -> Result<LeaderChange> {
        loop {
            if let Some(change) = self.seen.pending.pop_front() {
                return Ok(change);
            }
            // Listen before reading: a change published while the read is in flight
            // wakes this wait instead of being missed.
            let woken = self.subscription.listen();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let observed = self.election.read_after(&self.seen.last_record).await?;
            let recheck = self.seen.take(&self.election.name, observed)?;
            if self.seen.pending.is_empty() {
                let _ = tokio::time::timeout(recheck, woken).await;
            }
        }
    }
}

impl Seen {
    /// Queues the changes one read shows; returns how long until the state can change
    /// without a message (the leader's lease running out).
    fn take(&mut self, name: &str, observed: Observed) -> Result<Duration> {
        if self.last_record.is_empty() {
            // Read once: from now on every term after the last one seen, or after the
            // record's start when there was none.
            "0-0".clone_into(&mut self.last_record);
        }
        for record in observed.terms {
            self.last_record.clone_from(&record.id);
            if self.reported != Reported::Term(record.term) {
                self.pending
                    .push_back(LeaderChange::Elected(LeaderInfo::from_record(
                        name, &record,
                    )));
                self.reported = Reported::Term(record.term);
            }
            self.latest = Some(record);
        }
        let leading = match (observed.leader, &self.latest) {
            (None, _) => false,
            (Some(owner), Some(latest)) if latest.owner == owner => true,
            (Some(owner), _) => {
                return Err(Error::Protocol(format!(
                    "election {name:?} is held by {owner} without a recorded term"
                )));
            }
        };
        if !leading && self.reported != Reported::Vacant {
            self.pending.push_back(LeaderChange::Vacant);
            self.reported = Reported::Vacant;
        }
        Ok(match u64::try_from(observed.pttl) {
            // Read again just after the lease runs out, if no message came first.
            Ok(ms) if leading => Duration::from_millis(ms + 1),
            _ => VACANT_RECHECK,
        })
    }
}

impl ferrisson_core::DistributedElection for Election {
    type Leadership = Leadership;

    fn name(&self) -> &str {
        Election::name(self)
    }

    fn capabilities(&self) -> ferrisson_core::Capabilities {
        crate::capabilities::ELECTION
    }

    async fn campaign(&self) -> Result<Leadership> {
        Election::campaign(self).await
    }

    async fn try_campaign(&self) -> Result<Option<Leadership>> {
        Election::try_campaign(self).await
    }

    async fn campaign_timeout(&self, wait: Duration) -> Result<Option<Leadership>> {
        Election::campaign_timeout(self, wait).await
    }
}

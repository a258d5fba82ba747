//! What exists in a namespace: every lock, semaphore, latch, election, rate limiter and id
//! counter, with the snapshot its own `inspect()` gives. For operators and admin tools.
//!
//! [`Client::scan`] lists every primitive whose name matches a glob pattern;
//! [`Client::inspect`] looks up one name. Both read only; neither sends `KEYS`. On a
//! cluster every master is scanned; with Sentinel, the master.
//!
//! ```no_run
//! # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
//! for entry in client.scan("orders:*").await? {
//!     println!(
//!         "{} {} held by {:?}, ttl {:?}, waiting clients {:?}",
//!         entry.name,
//!         entry.kind,
//!         entry.snapshot.holders(),
//!         entry.snapshot.ttl(),
//!         entry.waiting_clients,
//!     );
//! }
//! # Ok(()) }
//! ```
//!
//! # How a primitive is found and its kind told
//!
//! Every key of a primitive called `name` is `{name}` or `{name}:<suffix>` behind the
//! client's namespace; an id counter is `icr:<prefix>:<yyyy>:<MM>:<dd>`. A scan sends
//! `SCAN <cursor> MATCH <namespace>{<pattern>}* COUNT 1000` (and `MATCH
//! <namespace>icr:<pattern>:*` for the id counters) to every master, takes each name out
//! of the keys it returns, keeps those that match the pattern, and reads each name once:
//! its main key `{name}` (type, time to live, a string's value or a hash's field names)
//! and whether its companions `{name}:queue`, `{name}:deadlines`, `{name}:permits` and
//! `{name}:terms` exist, in one script. The kind follows from that:
//!
//! | main key `{name}` | companions | kind |
//! |---|---|---|
//! | hash with `mode`, `writer` or `w:`/`d:`/`i:`/`x:` fields | | read-write lock |
//! | hash of owner ids, `fence` and `r:` fields | `:queue` or `:deadlines` | fair lock |
//! | hash of owner ids, `fence` and `r:` fields | neither | lock |
//! | none | `:queue` or `:deadlines` | fair lock (free, with waiters) |
//! | string holding an owner id (32 hex digits) | `:terms` | election |
//! | string holding an owner id | no `:terms` | simple lock |
//! | none | `:terms` | election (nobody leads) |
//! | integer string with a time to live | | rate limiter |
//! | integer string without one | `:permits` | expirable semaphore |
//! | integer string without one, 0 or less | | semaphore |
//! | integer string without one, 1 or more | | semaphore *and* latch ([`Entry::ambiguous`]) |
//!
//! Anything else is not a primitive's and is left out: the fencing floors
//! (`ferrisson:fence:{tag}`), a lock's own fencing counter, resources written with
//! [`Client::fenced_set`], an application's keys. A name's other companions are not read:
//! the waiting clients of a lock or simple lock (`{name}:waiters`) are counted in
//! [`Entry::waiting_clients`] of the lock they wait for, and left over once it is free
//! (a client that vanished while registered) they name nothing. Limits of the rule, each because two
//! layouts are the same until something happens:
//!
//! - a semaphore and a latch both store a plain count: a positive one is listed once as
//!   each, both entries marked [`ambiguous`](Entry::ambiguous);
//! - a fair lock nobody waits for is a lock's hash alone, and is listed as a lock; an
//!   expirable semaphore with no permit held is a count alone, and is listed as a
//!   semaphore (or latch);
//! - a [`Redlock`](crate::Redlock)'s key on one of its servers is a string holding an
//!   owner id, and is listed as a simple lock; a [`MultiLock`](crate::MultiLock) is its
//!   member locks.
//!
//! A scan is not a snapshot of the whole namespace: each name is read when the scan
//! reaches it, and a primitive created or removed during the scan may or may not be
//! listed (a key that exists from start to end always is). On a cluster whose slots move
//! during the scan, a name may be missed or read twice (then listed once).

mod glob;
mod layout;

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::NaiveDate;
use futures_util::{StreamExt as _, TryStreamExt as _, stream};

use crate::api::error::{Error, Result};
use crate::api::fencing::FencingToken;
use crate::backend::client::Client;
use crate::backend::keys::{WAITERS_SUFFIX, validate_name};
use crate::backend::scripts::inspect::InspectLayout;
use crate::locks::fair::FairLockInfo;
use crate::locks::lock::LockInfo;
use crate::locks::rwlock::RwLockInfo;
use crate::locks::simple::SimpleLockInfo;
use crate::sync::election::ElectionInfo;
use crate::sync::expirable_semaphore::ExpirableSemaphoreInfo;
use crate::sync::latch::CountDownLatchInfo;
use crate::sync::semaphore::SemaphoreInfo;

use layout::KeyName;

/// How many keys one `SCAN` call asks a server to look at.
const SCAN_COUNT: u32 = 1000;

/// How many names are read at once after a scan (each read is a round trip or two).
const READS_IN_FLIGHT: usize = 16;

/// The kinds of primitive the inspector tells apart, spelled as the metrics' `primitive`
/// label spells them.
///
/// ```
/// use ferrisson_redis::inspect::PrimitiveKind;
///
/// let kind: PrimitiveKind = "fair_lock".parse()?;
/// assert_eq!(kind, PrimitiveKind::FairLock);
/// assert_eq!(kind.to_string(), "fair_lock");
/// assert!(kind.is_lock());
/// assert!(!PrimitiveKind::Semaphore.is_lock());
/// # Ok::<(), ferrisson_redis::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum PrimitiveKind {
    /// [`Lock`](crate::Lock): `lock`.
    Lock,
    /// [`FairLock`](crate::FairLock): `fair_lock`.
    FairLock,
    /// [`RwLock`](crate::RwLock): `rwlock`.
    RwLock,
    /// [`SimpleLock`](crate::SimpleLock): `simple_lock`.
    SimpleLock,
    /// [`Semaphore`](crate::Semaphore): `semaphore`.
    Semaphore,
    /// [`ExpirableSemaphore`](crate::ExpirableSemaphore): `expirable_semaphore`.
    ExpirableSemaphore,
    /// [`CountDownLatch`](crate::CountDownLatch): `latch`.
    CountDownLatch,
    /// [`Election`](crate::Election): `election`.
    Election,
    /// [`RateLimiter`](crate::RateLimiter): `rate_limiter`.
    RateLimiter,
    /// One day's counter of an [`IdGenerator`](crate::IdGenerator) prefix: `id_counter`.
    IdCounter,
}

impl PrimitiveKind {
    /// Every kind, in the order listings sort them.
    pub const ALL: [PrimitiveKind; 10] = [
        PrimitiveKind::Lock,
        PrimitiveKind::FairLock,
        PrimitiveKind::RwLock,
        PrimitiveKind::SimpleLock,
        PrimitiveKind::Semaphore,
        PrimitiveKind::ExpirableSemaphore,
        PrimitiveKind::CountDownLatch,
        PrimitiveKind::Election,
        PrimitiveKind::RateLimiter,
        PrimitiveKind::IdCounter,
    ];

    /// The kind's name: `lock`, `fair_lock`, `rwlock`, `simple_lock`, `semaphore`,
    /// `expirable_semaphore`, `latch`, `election`, `rate_limiter` or `id_counter`.
    ///
    /// ```
    /// assert_eq!(ferrisson_redis::inspect::PrimitiveKind::RwLock.as_str(), "rwlock");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            PrimitiveKind::Lock => "lock",
            PrimitiveKind::FairLock => "fair_lock",
            PrimitiveKind::RwLock => "rwlock",
            PrimitiveKind::SimpleLock => "simple_lock",
            PrimitiveKind::Semaphore => "semaphore",
            PrimitiveKind::ExpirableSemaphore => "expirable_semaphore",
            PrimitiveKind::CountDownLatch => "latch",
            PrimitiveKind::Election => "election",
            PrimitiveKind::RateLimiter => "rate_limiter",
            PrimitiveKind::IdCounter => "id_counter",
        }
    }

    /// True for the kinds that have holders a forced unlock removes: the four locks and
    /// the election (whose leader is its holder).
    ///
    /// ```
    /// assert!(ferrisson_redis::inspect::PrimitiveKind::Election.is_lock());
    /// ```
    pub const fn is_lock(self) -> bool {
        matches!(
            self,
            PrimitiveKind::Lock
                | PrimitiveKind::FairLock
                | PrimitiveKind::RwLock
                | PrimitiveKind::SimpleLock
                | PrimitiveKind::Election
        )
    }
}

impl fmt::Display for PrimitiveKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PrimitiveKind {
    type Err = Error;

    /// Reads a kind's name as [`PrimitiveKind::as_str`] spells it (`-` may stand for `_`).
    fn from_str(s: &str) -> Result<Self> {
        let wanted = s.replace('-', "_");
        PrimitiveKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == wanted)
            .ok_or_else(|| {
                let names: Vec<&str> = PrimitiveKind::ALL.iter().map(|k| k.as_str()).collect();
                Error::invalid(format!(
                    "unknown kind {s:?}; the kinds are {}",
                    names.join(", ")
                ))
            })
    }
}

/// A rate limiter's state, from the inspector (which does not know the limiter's rate,
/// so it tells only when the bucket is full again).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RateLimiterInfo {
    /// The limiter's name.
    pub name: String,
    /// How long until the bucket is full again if nothing more is taken; `None` when it
    /// is full.
    pub until_full: Option<Duration>,
}

/// One day's id counter of an [`IdGenerator`](crate::IdGenerator) prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IdCounterInfo {
    /// The id prefix.
    pub prefix: String,
    /// The UTC day the counter counts.
    pub date: NaiveDate,
    /// Sequence numbers used that day (see
    /// [`IdGenerator::count_for_day`](crate::IdGenerator::count_for_day)).
    pub count: u64,
}

/// What one primitive's `inspect()` says, by kind.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Snapshot {
    /// From [`Lock::inspect`](crate::Lock::inspect).
    Lock(LockInfo),
    /// From [`FairLock::inspect`](crate::FairLock::inspect).
    FairLock(FairLockInfo),
    /// From [`RwLock::inspect`](crate::RwLock::inspect).
    RwLock(RwLockInfo),
    /// From [`SimpleLock::inspect`](crate::SimpleLock::inspect).
    SimpleLock(SimpleLockInfo),
    /// From [`Semaphore::inspect`](crate::Semaphore::inspect).
    Semaphore(SemaphoreInfo),
    /// From [`ExpirableSemaphore::inspect`](crate::ExpirableSemaphore::inspect).
    ExpirableSemaphore(ExpirableSemaphoreInfo),
    /// From [`CountDownLatch::inspect`](crate::CountDownLatch::inspect).
    CountDownLatch(CountDownLatchInfo),
    /// From [`Election::inspect`](crate::Election::inspect).
    Election(ElectionInfo),
    /// The bucket's time to refill.
    RateLimiter(RateLimiterInfo),
    /// One day's count.
    IdCounter(IdCounterInfo),
}

impl Snapshot {
    /// The kind of primitive this snapshot is of.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// for entry in client.scan("*").await? {
    ///     assert_eq!(entry.snapshot.kind(), entry.kind);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn kind(&self) -> PrimitiveKind {
        match self {
            Snapshot::Lock(_) => PrimitiveKind::Lock,
            Snapshot::FairLock(_) => PrimitiveKind::FairLock,
            Snapshot::RwLock(_) => PrimitiveKind::RwLock,
            Snapshot::SimpleLock(_) => PrimitiveKind::SimpleLock,
            Snapshot::Semaphore(_) => PrimitiveKind::Semaphore,
            Snapshot::ExpirableSemaphore(_) => PrimitiveKind::ExpirableSemaphore,
            Snapshot::CountDownLatch(_) => PrimitiveKind::CountDownLatch,
            Snapshot::Election(_) => PrimitiveKind::Election,
            Snapshot::RateLimiter(_) => PrimitiveKind::RateLimiter,
            Snapshot::IdCounter(_) => PrimitiveKind::IdCounter,
        }
    }

    /// Who holds it: a lock's owner ids (a read-write lock's writer first, then its other
    /// readers), an expirable semaphore's held permit ids, an election leader's candidate
    /// id. Empty when nobody does, or when the primitive keeps no holders (a semaphore
    /// counts its permits only).
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// let info = client.lock("orders")?.inspect().await?;
    /// let holders = ferrisson_redis::inspect::Snapshot::Lock(info).holders();
    /// assert!(holders.len() <= 1);
    /// # Ok(()) }
    /// ```
    pub fn holders(&self) -> Vec<String> {
        match self {
            Snapshot::Lock(info) => info.holder.iter().map(ToString::to_string).collect(),
            Snapshot::FairLock(info) => info.holder.iter().map(ToString::to_string).collect(),
            Snapshot::SimpleLock(info) => info.holder.iter().map(ToString::to_string).collect(),
            Snapshot::RwLock(info) => {
                let writer = info.writer.map(|w| w.owner);
                writer
                    .into_iter()
                    .chain(
                        info.readers
                            .iter()
                            .map(|r| r.owner)
                            .filter(|owner| Some(*owner) != writer),
                    )
                    .map(|owner| owner.to_string())
                    .collect()
            }
            Snapshot::ExpirableSemaphore(info) => {
                info.held.iter().map(|p| p.id.to_string()).collect()
            }
            Snapshot::Election(info) => info.leader.iter().map(|l| l.candidate.clone()).collect(),
            Snapshot::Semaphore(_)
            | Snapshot::CountDownLatch(_)
            | Snapshot::RateLimiter(_)
            | Snapshot::IdCounter(_) => Vec::new(),
        }
    }

    /// How many holds there are: a lock's hold count (re-entries count; a read-write
    /// lock's over every holder and side), an expirable semaphore's held permits, 1 for
    /// an election with a leader; 0 for the kinds that keep no holders.
    pub fn hold_count(&self) -> u64 {
        match self {
            Snapshot::Lock(info) => u64::from(info.hold_count),
            Snapshot::FairLock(info) => u64::from(info.hold_count),
            Snapshot::SimpleLock(info) => u64::from(info.holder.is_some()),
            Snapshot::RwLock(info) => {
                info.writer.map_or(0, |w| u64::from(w.holds))
                    + info.readers.iter().map(|r| u64::from(r.holds)).sum::<u64>()
            }
            Snapshot::ExpirableSemaphore(info) => info.held_count,
            Snapshot::Election(info) => u64::from(info.leader.is_some()),
            Snapshot::Semaphore(_)
            | Snapshot::CountDownLatch(_)
            | Snapshot::RateLimiter(_)
            | Snapshot::IdCounter(_) => 0,
        }
    }

    /// How long until it frees itself unless renewed: a lock's or an election's time to
    /// live, the earliest expiry among an expirable semaphore's held permits, a rate
    /// limiter's time until its bucket is full. `None` for a free lock and for the kinds
    /// that never expire.
    pub fn ttl(&self) -> Option<Duration> {
        match self {
            Snapshot::Lock(info) => info.ttl,
            Snapshot::FairLock(info) => info.ttl,
            Snapshot::RwLock(info) => info.ttl,
            Snapshot::SimpleLock(info) => info.ttl,
            Snapshot::ExpirableSemaphore(info) => info.held.first().map(|p| p.ttl),
            Snapshot::Election(info) => info.ttl,
            Snapshot::RateLimiter(info) => info.until_full,
            Snapshot::Semaphore(_) | Snapshot::CountDownLatch(_) | Snapshot::IdCounter(_) => None,
        }
    }

    /// The holder's fencing token (a read-write lock's writer's, an election's term).
    pub fn fencing_token(&self) -> Option<FencingToken> {
        match self {
            Snapshot::Lock(info) => info.fencing_token,
            Snapshot::FairLock(info) => info.fencing_token,
            Snapshot::RwLock(info) => info.fencing_token,
            Snapshot::Election(info) => info.leader.as_ref().map(|l| l.term),
            _ => None,
        }
    }

    /// Waiters the primitive records in Redis: a fair lock's queue, a read-write lock's
    /// waiting writers. `None` for the kinds whose waiters are known only to their own
    /// clients (see [`Entry::waiting_clients`]).
    pub fn waiters(&self) -> Option<usize> {
        match self {
            Snapshot::FairLock(info) => Some(info.waiters.len()),
            Snapshot::RwLock(info) => Some(info.waiting_writers.len()),
            _ => None,
        }
    }
}

/// One primitive found by [`Client::scan`] or [`Client::inspect`].
///
/// ```no_run
/// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
/// use ferrisson_redis::inspect::{PrimitiveKind, Snapshot};
///
/// for entry in client.inspect("orders").await? {
///     if let Snapshot::Lock(info) = &entry.snapshot {
///         println!("lock held by {:?} with token {:?}", info.holder, info.fencing_token);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Entry {
    /// The primitive's name (an id counter's: its prefix).
    pub name: String,
    /// Its kind, as told from its keys (see the [module docs](self)).
    pub kind: PrimitiveKind,
    /// True when what Redis holds fits more than one kind: the name is listed once per
    /// kind, each entry marked (a positive count without expiry is a semaphore's or a
    /// latch's).
    pub ambiguous: bool,
    /// What the primitive's own `inspect()` says.
    pub snapshot: Snapshot,
    /// Clients subscribed to the primitive's wake-up channels now: each client with at
    /// least one task waiting for it counts once, however many tasks wait (a read-write
    /// lock's read and write channels count apart). A client keeps a channel for half a
    /// second after its last waiter left it, so one whose waiter was just granted may
    /// still count. For a [`Lock`](crate::Lock) or a [`SimpleLock`](crate::SimpleLock),
    /// the clients registered as waiting for it (each listens on a channel of its own):
    /// one whose process died without withdrawing counts until a release skips it. `None`
    /// for the kinds whose waiters have no channel to count: a fair lock (its queue is in
    /// [`Snapshot::waiters`]), a rate limiter, an id counter.
    pub waiting_clients: Option<u64>,
}

impl Client {
    /// Every primitive in this client's namespace whose name matches `pattern`, a glob
    /// as Redis reads them (`*`, `?`, `[a-z]`, `\` escapes), sorted by name then kind.
    /// Read-only: scans every master with `SCAN ... MATCH ... COUNT 1000`, never `KEYS`,
    /// then reads each name found (see the [module docs](crate::inspect) for how kinds are
    /// told and the limits of a scan).
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// let busy = client
    ///     .scan("*")
    ///     .await?
    ///     .into_iter()
    ///     .filter(|entry| entry.kind.is_lock() && entry.snapshot.hold_count() > 0)
    ///     .count();
    /// println!("{busy} locks held");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty pattern or one holding `{` or `}`,
    /// [`Error::Store`] when Redis (any master of a cluster) cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn scan(&self, pattern: &str) -> Result<Vec<Entry>> {
        glob::validate_pattern(pattern)?;
        let namespace = glob::escape(self.namespace());
        let mut names = BTreeSet::new();
        let mut days = BTreeSet::new();
        let mut take = |key: &str| match key
            .strip_prefix(self.namespace())
            .and_then(layout::parse_key)
        {
            // A name's keys come one after another: allocate for the first only.
            Some(KeyName::Primitive(name))
                if glob::matches(pattern, name) && !names.contains(name) =>
            {
                names.insert(name.to_owned());
            }
            Some(KeyName::IdCounter { prefix, date }) if glob::matches(pattern, prefix) => {
                days.insert((prefix.to_owned(), date));
            }
            _ => {}
        };
        let connection = self.connection();
        connection
            .scan(&format!("{namespace}{{{pattern}}}*"), SCAN_COUNT, &mut take)
            .await?;
        connection
            .scan(
                &format!("{namespace}icr:{pattern}:*"),
                SCAN_COUNT,
                &mut take,
            )
            .await?;
        self.read_all(names, days).await
    }

    /// Every primitive called `name` in this client's namespace: usually one entry; two
    /// for an [ambiguous](Entry::ambiguous) count; none when nothing is there; one per day
    /// when `name` is also an id prefix with counters. Read-only.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// match client.inspect("orders").await?.as_slice() {
    ///     [] => println!("nothing called orders"),
    ///     [entry] => println!("a {} : {:?}", entry.kind, entry.snapshot),
    ///     entries => println!("{} entries", entries.len()),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a name no primitive may have (see
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN)), [`Error::Store`] when Redis cannot be
    /// reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn inspect(&self, name: &str) -> Result<Vec<Entry>> {
        validate_name(name)?;
        let mut days = BTreeSet::new();
        // Only id counters need a scan: the primitive's own keys are read directly.
        let pattern = format!(
            "{}icr:{}:*",
            glob::escape(self.namespace()),
            glob::escape(name)
        );
        self.connection()
            .scan(&pattern, SCAN_COUNT, &mut |key: &str| {
                if let Some(KeyName::IdCounter { prefix, date }) = key
                    .strip_prefix(self.namespace())
                    .and_then(layout::parse_key)
                    && prefix == name
                {
                    days.insert((prefix.to_owned(), date));
                }
            })
            .await?;
        self.read_all(BTreeSet::from([name.to_owned()]), days).await
    }

    /// Reads every name and id counter day found, a few at a time.
    async fn read_all(
        &self,
        names: BTreeSet<String>,
        days: BTreeSet<(String, NaiveDate)>,
    ) -> Result<Vec<Entry>> {
        let primitives = stream::iter(names)
            .map(|name| async move { self.read_name(&name).await })
            .buffered(READS_IN_FLIGHT)
            .try_collect::<Vec<Vec<Entry>>>()
            .await?;
        let counters = stream::iter(days)
            .map(|(prefix, date)| async move { self.read_id_counter(prefix, date).await })
            .buffered(READS_IN_FLIGHT)
            .try_collect::<Vec<Entry>>()
            .await?;
        let mut entries: Vec<Entry> = primitives.into_iter().flatten().chain(counters).collect();
        entries.sort_by(|a, b| (&a.name, a.kind).cmp(&(&b.name, b.kind)));
        Ok(entries)
    }

    /// The entries of the primitive called `name`: its layout read, then each kind's own
    /// `inspect()`. A kind whose snapshot no longer parses (the key changed between the
    /// two reads) is left out.
    async fn read_name(&self, name: &str) -> Result<Vec<Entry>> {
        let keys = self.keys(name)?;
        let companions = layout::COMPANIONS.map(|suffix| keys.with_suffix(suffix));
        let found = self
            .connection()
            .run(&InspectLayout {
                key: keys.main(),
                companions: &companions,
            })
            .await?;
        let kinds = layout::kinds(&found);
        let mut entries = Vec::with_capacity(kinds.len());
        for &kind in kinds {
            let snapshot = match self.snapshot(name, kind).await {
                Ok(snapshot) => snapshot,
                Err(Error::Protocol(reason)) => {
                    tracing::debug!(name, kind = %kind, reason, "left out: changed while read");
                    continue;
                }
                Err(e) => return Err(e),
            };
            entries.push(Entry {
                name: name.to_owned(),
                kind,
                ambiguous: kinds.len() > 1,
                snapshot,
                waiting_clients: self.waiting_clients(name, kind).await?,
            });
        }
        Ok(entries)
    }

    /// The snapshot of `name` read as a `kind` (not an id counter).
    async fn snapshot(&self, name: &str, kind: PrimitiveKind) -> Result<Snapshot> {
        Ok(match kind {
            PrimitiveKind::Lock => Snapshot::Lock(self.lock(name)?.inspect().await?),
            PrimitiveKind::FairLock => Snapshot::FairLock(self.fair_lock(name)?.inspect().await?),
            PrimitiveKind::RwLock => Snapshot::RwLock(self.rwlock(name)?.inspect().await?),
            PrimitiveKind::SimpleLock => {
                Snapshot::SimpleLock(self.simple_lock(name)?.inspect().await?)
            }
            PrimitiveKind::Semaphore => Snapshot::Semaphore(self.semaphore(name)?.inspect().await?),
            PrimitiveKind::ExpirableSemaphore => {
                Snapshot::ExpirableSemaphore(self.expirable_semaphore(name)?.inspect().await?)
            }
            PrimitiveKind::CountDownLatch => {
                Snapshot::CountDownLatch(self.count_down_latch(name)?.inspect().await?)
            }
            PrimitiveKind::Election => Snapshot::Election(self.election(name)?.inspect().await?),
            PrimitiveKind::RateLimiter => {
                let pttl: i64 = self
                    .connection()
                    .query_resendable(redis::cmd("PTTL").arg(self.keys(name)?.main()))
                    .await?;
                Snapshot::RateLimiter(RateLimiterInfo {
                    name: name.to_owned(),
                    until_full: u64::try_from(pttl).ok().map(Duration::from_millis),
                })
            }
            // Id counters are read by day (`read_id_counter`); a name's keys never say one.
            PrimitiveKind::IdCounter => {
                return Err(Error::Protocol(format!(
                    "{name:?} is read as an id counter by its days, not by its name"
                )));
            }
        })
    }

    /// How many clients are subscribed to the channels `kind`'s waiters wait on.
    async fn waiting_clients(&self, name: &str, kind: PrimitiveKind) -> Result<Option<u64>> {
        let keys = self.keys(name)?;
        let channels = match kind {
            // The waiting clients of a lock that wakes one client register by id, each
            // listening on its own channel.
            PrimitiveKind::Lock | PrimitiveKind::SimpleLock => {
                let waiters = keys.with_suffix(WAITERS_SUFFIX);
                let count: u64 = self
                    .connection()
                    .query_resendable(redis::cmd("ZCARD").arg(&waiters))
                    .await?;
                return Ok(Some(count));
            }
            PrimitiveKind::Semaphore
            | PrimitiveKind::ExpirableSemaphore
            | PrimitiveKind::CountDownLatch
            | PrimitiveKind::Election => vec![keys.channel().to_owned()],
            PrimitiveKind::RwLock => vec![
                keys.with_suffix("released:read"),
                keys.with_suffix("released:write"),
            ],
            PrimitiveKind::FairLock | PrimitiveKind::RateLimiter | PrimitiveKind::IdCounter => {
                return Ok(None);
            }
        };
        let mut cmd = redis::cmd("PUBSUB");
        cmd.arg("SHARDNUMSUB").arg(&channels);
        // Every channel of a name has its hash tag, so they share the slot of its keys.
        let reply: redis::Value = self.connection().query_routed(&cmd, keys.main()).await?;
        Ok(Some(subscriber_total(&reply)))
    }

    async fn read_id_counter(&self, prefix: String, date: NaiveDate) -> Result<Entry> {
        let count = self.id_generator().count_for_day(&prefix, date).await?;
        Ok(Entry {
            name: prefix.clone(),
            kind: PrimitiveKind::IdCounter,
            ambiguous: false,
            snapshot: Snapshot::IdCounter(IdCounterInfo {
                prefix,
                date,
                count,
            }),
            waiting_clients: None,
        })
    }
}

/// The subscriber counts of a `PUBSUB SHARDNUMSUB` reply added up: RESP2 gives
/// `[channel, count, ...]`, RESP3 a map of channel to count.
fn subscriber_total(reply: &redis::Value) -> u64 {
    use redis::Value;
    let count = |value: &Value| match value {
        Value::Int(n) => u64::try_from(*n).unwrap_or(0),
        _ => 0,
    };
    match reply {
        Value::Array(items) => items.iter().map(count).sum(),
        Value::Map(pairs) => pairs.iter().map(|(_, v)| count(v)).sum(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_read_back_from_their_names() {
        for kind in PrimitiveKind::ALL {
            assert_eq!(kind.as_str().parse::<PrimitiveKind>().ok(), Some(kind));
        }
        assert_eq!(
            "fair-lock".parse::<PrimitiveKind>().ok(),
            Some(PrimitiveKind::FairLock)
        );
        assert!(matches!(
            "mutex".parse::<PrimitiveKind>(),
            Err(Error::InvalidArgument(m)) if m.contains("rate_limiter")
        ));
    }

    #[test]
    fn subscriber_counts_add_up_in_either_protocol() {
        use redis::Value;
        let name = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let resp2 = Value::Array(vec![name("a"), Value::Int(2), name("b"), Value::Int(1)]);
        assert_eq!(subscriber_total(&resp2), 3);
        let resp3 = Value::Map(vec![(name("a"), Value::Int(4)), (name("b"), Value::Int(0))]);
        assert_eq!(subscriber_total(&resp3), 4);
        assert_eq!(subscriber_total(&Value::Nil), 0);
    }
}

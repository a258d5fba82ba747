//! The inspector (`Client::scan`, `Client::inspect`) against real redis-server processes:
//! every kind it tells apart, held and waited for by other clients, named with the
//! snapshot its own `inspect()` gives; keys that are not primitives' left out; namespaces
//! and patterns respected.

use std::collections::BTreeSet;
use std::time::Duration;

use ferrisson_redis::inspect::{Entry, PrimitiveKind, Snapshot};
use ferrisson_redis::{
    Client, Error, ExpirablePermit, FairLockGuard, FencingToken, Leadership, Lease, LockGuard,
    Rate, RwLockReadGuard, SemaphorePermit, SimpleLockGuard,
};
use ferrisson_testkit::RedisServer;

mod common;
use common::{client_with_lease, eventually};

/// How long a test waits for a waiter in another client to show (a bound, not a pause).
const SHOWS_WITHIN: Duration = Duration::from_secs(10);

async fn connect(url: &str, namespace: &str) -> anyhow::Result<Client> {
    Ok(Client::builder(url).namespace(namespace).connect().await?)
}

fn kinds(entries: &[Entry]) -> BTreeSet<(String, PrimitiveKind, bool)> {
    entries
        .iter()
        .map(|e| (e.name.clone(), e.kind, e.ambiguous))
        .collect()
}

fn one(entries: &[Entry], name: &str, kind: PrimitiveKind) -> anyhow::Result<Entry> {
    entries
        .iter()
        .find(|e| e.name == name && e.kind == kind)
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("no {kind} {name:?} in {:?}", kinds(entries)))
}

/// Waits until `client.inspect(name)` shows `kind` in the state `ready` says.
async fn shows(
    client: &Client,
    name: &str,
    kind: PrimitiveKind,
    ready: impl Fn(&Entry) -> bool,
) -> anyhow::Result<()> {
    let found = eventually(SHOWS_WITHIN, || async {
        client
            .inspect(name)
            .await
            .is_ok_and(|entries| entries.iter().any(|e| e.kind == kind && ready(e)))
    })
    .await;
    anyhow::ensure!(found, "{kind} {name:?} never showed the awaited state");
    Ok(())
}

/// Tasks waiting in another client, and the client that sees them wait.
struct Waiters {
    client: Client,
    tasks: Vec<tokio::task::JoinHandle<ferrisson_redis::Result<()>>>,
}

impl Waiters {
    /// Runs `wait` on a task of its own; returns once the client sees `name` (a `kind`) in
    /// the state `ready` says: the task is then waiting.
    async fn add(
        &mut self,
        name: &str,
        kind: PrimitiveKind,
        ready: fn(&Entry) -> bool,
        wait: impl Future<Output = ferrisson_redis::Result<()>> + Send + 'static,
    ) -> anyhow::Result<()> {
        self.tasks.push(tokio::spawn(wait));
        shows(&self.client, name, kind, ready).await
    }
}

fn one_waiting_client(entry: &Entry) -> bool {
    entry.waiting_clients == Some(1)
}

fn one_waiter(entry: &Entry) -> bool {
    entry.snapshot.waiters() == Some(1)
}

/// What [`hold_every_kind`] holds, and the tasks that wait: dropped at the end of a case.
struct Held {
    client: Client,
    lock: LockGuard,
    fair: FairLockGuard,
    readers: [RwLockReadGuard; 2],
    simple: SimpleLockGuard,
    permit: SemaphorePermit,
    expirable: ExpirablePermit,
    leadership: Leadership,
    id: i64,
    /// A lock of the same name in another namespace.
    elsewhere: LockGuard,
    waiters: Vec<tokio::task::JoinHandle<ferrisson_redis::Result<()>>>,
}

impl Held {
    /// Releases everything and checks each waiter then got what it waited for.
    async fn release(self) -> anyhow::Result<()> {
        let Held {
            lock,
            fair,
            readers,
            simple,
            permit,
            expirable,
            leadership,
            elsewhere,
            waiters,
            ..
        } = self;
        drop((
            lock, fair, readers, simple, permit, expirable, leadership, elsewhere,
        ));
        for waiter in waiters {
            tokio::time::timeout(SHOWS_WITHIN, waiter).await???;
        }
        Ok(())
    }
}

/// Every kind under `orders:*` in the namespace `inspected:`, held by one client and
/// waited for by another, plus keys that are not primitives (or not in the namespace).
async fn hold_every_kind(url: &str) -> anyhow::Result<Held> {
    let ns = "inspected:";
    let client = connect(url, ns).await?;
    let other = connect(url, ns).await?;
    let mut waiters = Waiters {
        client: client.clone(),
        tasks: Vec::new(),
    };

    let lock = client
        .lock("orders:lock")?
        .with_lease(Lease::Fixed(Duration::from_secs(60)))?;
    let lock = lock.lock().await?;
    let waiting = other.lock("orders:lock")?;
    let task = async move { waiting.lock().await?.unlock().await };
    waiters
        .add("orders:lock", PrimitiveKind::Lock, one_waiting_client, task)
        .await?;

    let fair = client.fair_lock("orders:fair")?.lock().await?;
    let waiting = other.fair_lock("orders:fair")?;
    let task = async move { waiting.lock().await?.unlock().await };
    waiters
        .add("orders:fair", PrimitiveKind::FairLock, one_waiter, task)
        .await?;

    let readers = [
        client.rwlock("orders:rw")?.read().await?,
        other.rwlock("orders:rw")?.read().await?,
    ];
    let waiting = other.rwlock("orders:rw")?;
    let task = async move { waiting.write().await?.unlock().await };
    waiters
        .add("orders:rw", PrimitiveKind::RwLock, one_waiter, task)
        .await?;

    let simple = client.simple_lock("orders:simple")?.lock().await?;
    let waiting = other.simple_lock("orders:simple")?;
    let task = async move { waiting.lock().await?.unlock().await };
    waiters
        .add(
            "orders:simple",
            PrimitiveKind::SimpleLock,
            one_waiting_client,
            task,
        )
        .await?;

    let empty = client.semaphore("orders:sem-empty")?;
    anyhow::ensure!(empty.try_set_permits(1).await?);
    let permit = empty.acquire().await?;
    let waiting = other.semaphore("orders:sem-empty")?;
    let task = async move { waiting.acquire().await?.release().await };
    waiters
        .add(
            "orders:sem-empty",
            PrimitiveKind::Semaphore,
            one_waiting_client,
            task,
        )
        .await?;

    anyhow::ensure!(client.semaphore("orders:sem")?.try_set_permits(3).await?);
    anyhow::ensure!(
        client
            .count_down_latch("orders:latch")?
            .try_set_count(2)
            .await?
    );
    let xsem = client
        .expirable_semaphore("orders:xsem")?
        .with_lease(Lease::Fixed(Duration::from_secs(60)))?;
    anyhow::ensure!(xsem.try_set_permits(2).await?);
    let expirable = xsem.acquire().await?;

    let leadership = client
        .election("orders:leader")?
        .with_candidate_id("host-a:1")?
        .campaign()
        .await?;
    let vacant = client.election("orders:vacant")?.campaign().await?;
    vacant.resign().await?;
    let limiter = client.rate_limiter("orders:rate", Rate::per_minute(1)?)?;
    anyhow::ensure!(limiter.try_acquire(1).await?.is_allowed());
    let id = client.id_generator().next_id("orders:ids").await?;

    // Not primitives, or not in this namespace: left out.
    let write = client.fenced_set("orders:resource", b"1", lock.fencing_token());
    anyhow::ensure!(write.await?.is_accepted());
    let elsewhere = connect(url, "elsewhere:").await?.lock("orders:lock")?;
    let elsewhere = elsewhere.lock().await?;
    Ok(Held {
        client,
        lock,
        fair,
        readers,
        simple,
        permit,
        expirable,
        leadership,
        id,
        elsewhere,
        waiters: waiters.tasks,
    })
}

/// The kinds `hold_every_kind` makes, as a scan of `orders:*` names them.
fn every_kind() -> BTreeSet<(String, PrimitiveKind, bool)> {
    [
        ("orders:fair", PrimitiveKind::FairLock, false),
        ("orders:ids", PrimitiveKind::IdCounter, false),
        ("orders:latch", PrimitiveKind::Semaphore, true),
        ("orders:latch", PrimitiveKind::CountDownLatch, true),
        ("orders:leader", PrimitiveKind::Election, false),
        ("orders:lock", PrimitiveKind::Lock, false),
        ("orders:rate", PrimitiveKind::RateLimiter, false),
        ("orders:rw", PrimitiveKind::RwLock, false),
        ("orders:simple", PrimitiveKind::SimpleLock, false),
        ("orders:sem", PrimitiveKind::Semaphore, true),
        ("orders:sem", PrimitiveKind::CountDownLatch, true),
        ("orders:sem-empty", PrimitiveKind::Semaphore, false),
        ("orders:vacant", PrimitiveKind::Election, false),
        ("orders:xsem", PrimitiveKind::ExpirableSemaphore, false),
    ]
    .into_iter()
    .map(|(name, kind, ambiguous)| (name.to_owned(), kind, ambiguous))
    .collect()
}

/// Every kind, held and waited for from a second client, listed by one scan with the
/// holders, tokens, times to live and waiters its snapshot gives; run on each topology
/// by its test.
async fn every_kind_is_named(url: &str) -> anyhow::Result<()> {
    let held = hold_every_kind(url).await?;
    let entries = held.client.scan("orders:*").await?;
    assert_eq!(kinds(&entries), every_kind());
    for entry in &entries {
        assert_eq!(entry.snapshot.kind(), entry.kind);
    }
    check_locks(&entries, &held)?;
    check_synchronizers(&entries, &held)?;

    // A narrower pattern, and names looked up one at a time.
    let narrow = held.client.scan("orders:l[a-o]*").await?;
    let names: BTreeSet<&str> = narrow.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        BTreeSet::from(["orders:latch", "orders:leader", "orders:lock"])
    );
    let sem: BTreeSet<_> = every_kind()
        .into_iter()
        .filter(|(name, _, _)| name == "orders:sem")
        .collect();
    assert_eq!(kinds(&held.client.inspect("orders:sem").await?), sem);
    assert!(held.client.inspect("orders:nothing").await?.is_empty());
    held.release().await
}

fn check_locks(entries: &[Entry], held: &Held) -> anyhow::Result<()> {
    let entry = one(entries, "orders:lock", PrimitiveKind::Lock)?;
    assert_eq!(
        entry.snapshot.holders(),
        vec![held.lock.owner().to_string()]
    );
    assert_eq!(entry.snapshot.hold_count(), 1);
    assert_eq!(
        entry.snapshot.fencing_token(),
        Some(held.lock.fencing_token())
    );
    assert!(
        entry
            .snapshot
            .ttl()
            .is_some_and(|t| t > Duration::from_secs(50))
    );
    assert_eq!(entry.waiting_clients, Some(1));
    assert_eq!(entry.snapshot.waiters(), None);

    let entry = one(entries, "orders:fair", PrimitiveKind::FairLock)?;
    assert_eq!(
        entry.snapshot.holders(),
        vec![held.fair.owner().to_string()]
    );
    assert_eq!(
        entry.snapshot.fencing_token(),
        Some(held.fair.fencing_token())
    );
    assert_eq!(entry.snapshot.waiters(), Some(1));

    let entry = one(entries, "orders:rw", PrimitiveKind::RwLock)?;
    let mut readers = entry.snapshot.holders();
    readers.sort();
    let mut expected: Vec<String> = held.readers.iter().map(|r| r.owner().to_string()).collect();
    expected.sort();
    assert_eq!(readers, expected);
    assert_eq!(entry.snapshot.hold_count(), 2);
    assert_eq!(entry.snapshot.waiters(), Some(1));

    let entry = one(entries, "orders:simple", PrimitiveKind::SimpleLock)?;
    assert_eq!(
        entry.snapshot.holders(),
        vec![held.simple.owner().to_string()]
    );
    assert_eq!(entry.snapshot.hold_count(), 1);
    assert!(entry.snapshot.ttl().is_some());
    assert_eq!(entry.waiting_clients, Some(1));

    let entry = one(entries, "orders:leader", PrimitiveKind::Election)?;
    assert_eq!(entry.snapshot.holders(), vec!["host-a:1".to_owned()]);
    assert_eq!(
        entry.snapshot.fencing_token(),
        Some(held.leadership.fencing_token())
    );
    assert!(entry.snapshot.ttl().is_some());
    let entry = one(entries, "orders:vacant", PrimitiveKind::Election)?;
    assert!(entry.snapshot.holders().is_empty());
    assert_eq!(entry.snapshot.ttl(), None);
    Ok(())
}

fn check_synchronizers(entries: &[Entry], held: &Held) -> anyhow::Result<()> {
    let entry = one(entries, "orders:sem-empty", PrimitiveKind::Semaphore)?;
    assert!(
        matches!(&entry.snapshot, Snapshot::Semaphore(info) if info.available_permits == Some(0))
    );
    assert_eq!(entry.waiting_clients, Some(1));
    assert_eq!(held.permit.permits(), 1);
    let entry = one(entries, "orders:sem", PrimitiveKind::CountDownLatch)?;
    assert!(matches!(&entry.snapshot, Snapshot::CountDownLatch(info) if info.count == 3));

    let entry = one(entries, "orders:xsem", PrimitiveKind::ExpirableSemaphore)?;
    assert_eq!(
        entry.snapshot.holders(),
        vec![held.expirable.id().to_string()]
    );
    assert_eq!(entry.snapshot.hold_count(), 1);

    let entry = one(entries, "orders:rate", PrimitiveKind::RateLimiter)?;
    assert!(
        entry
            .snapshot
            .ttl()
            .is_some_and(|t| t > Duration::from_secs(30))
    );

    let entry = one(entries, "orders:ids", PrimitiveKind::IdCounter)?;
    let Snapshot::IdCounter(counter) = &entry.snapshot else {
        anyhow::bail!("not an id counter: {entry:?}");
    };
    assert_eq!(counter.count, 1);
    assert_eq!(
        counter.date,
        ferrisson_redis::IdGenerator::decode(held.id)?.date()
    );
    Ok(())
}

#[tokio::test]
async fn every_kind_is_named_on_one_server() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    every_kind_is_named(&server.url()).await
}

#[tokio::test]
async fn keys_that_are_not_primitives_are_left_out() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    for (key, value) in [
        ("{a-string}", "hello"),
        ("{a-number-with-ttl-elsewhere}:stock", "3"),
        ("plain", "1"),
        ("ferrisson:fence:{abc}", "17"),
    ] {
        server.command(&["SET", key, value])?;
    }
    server.command(&["HSET", "{a-hash}", "colour", "blue"])?;
    server.command(&["RPUSH", "{a-list}", "x"])?;
    server.command(&["SET", "{a-long-string}", &"9".repeat(100)])?;
    assert!(
        client
            .fenced_set("{resource}", b"v", FencingToken::new(1))
            .await?
            .is_accepted()
    );
    // A lock taken and released leaves only its slot's fencing floor behind.
    client.lock("gone")?.lock().await?.unlock().await?;
    client
        .simple_lock("gone-too")?
        .lock()
        .await?
        .unlock()
        .await?;
    // Waiting clients registered for a lock that is free now (their process died before
    // they withdrew) are not a lock of their own.
    for key in ["{gone}:waiters", "{gone-too}:waiters"] {
        server.command(&["ZADD", key, "1", "0123456789abcdef"])?;
    }
    assert!(client.scan("*").await?.is_empty());
    assert!(client.inspect("gone-too").await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn names_with_glob_characters_are_looked_up_exactly() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let _star = client.lock("a*b")?.lock().await?;
    let _other = client.lock("axb")?.lock().await?;
    let found = client.inspect("a*b").await?;
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].name, "a*b");
    assert_eq!(client.scan("a\\*b").await?.len(), 1);
    assert_eq!(client.scan("a*b").await?.len(), 2);
    Ok(())
}

#[tokio::test]
async fn bad_patterns_and_names_are_refused() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    for pattern in ["", "{x}", "a}"] {
        assert!(
            matches!(client.scan(pattern).await, Err(Error::InvalidArgument(_))),
            "{pattern:?}"
        );
    }
    assert!(matches!(
        client.inspect("").await,
        Err(Error::InvalidArgument(_))
    ));
    Ok(())
}

#[tokio::test]
async fn force_resign_ends_the_term_and_elects_the_next() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    // A short lease: the removed leader learns it at its next renewal, a third of it.
    let client = client_with_lease(&server, Duration::from_millis(900)).await?;
    let election = client.election("scheduler")?.with_candidate_id("stuck")?;
    let stuck = election.campaign().await?;
    let next = Client::connect(&server.url())
        .await?
        .election("scheduler")?
        .with_candidate_id("next")?;
    let campaign = tokio::spawn(async move { next.campaign().await });
    let removed = client.election("scheduler")?.force_resign().await?;
    assert_eq!(removed.map(|l| l.candidate).as_deref(), Some("stuck"));
    let elected = tokio::time::timeout(SHOWS_WITHIN, campaign).await???;
    assert_eq!(elected.info().candidate, "next");
    assert!(elected.fencing_token() > stuck.fencing_token());
    tokio::time::timeout(SHOWS_WITHIN, stuck.lost()).await?;
    elected.resign().await?;
    assert!(
        client
            .election("scheduler")?
            .force_resign()
            .await?
            .is_none()
    );
    Ok(())
}

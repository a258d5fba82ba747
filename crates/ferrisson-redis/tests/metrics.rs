//! The documented metrics move as locks are taken, waited for, renewed, lost and
//! released; the spans carry their fields and never a password.
//!
//! One recorder for the whole binary (metrics recorders are process-wide); each test uses
//! lock names of its own and clients that label every series with the full name, so the
//! tests running side by side never read each other's series.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use ferrisson_redis::metrics::{
    ACQUIRE_BUSY, ACQUIRE_ERRORS, ACQUIRE_TIMEOUTS, ACQUIRE_WAIT_SECONDS, ACQUISITIONS,
    HOLD_SECONDS, HOLDS, LOCKS_LOST, RENEWAL_FAILURES, RENEWALS, SUBSCRIBED_CHANNELS, WAITERS,
};
use ferrisson_redis::{Client, Error, Lease, Rate};
use ferrisson_testkit::RedisServer;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_util::registry::{AtomicStorage, Registry};
use metrics_util::storage::AtomicBucket;
use tracing::span;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

use common::eventually;

/// A recorder that keeps every value (unlike a snapshotting one, reading changes
/// nothing), with the help texts it was given.
struct TestRecorder {
    registry: Registry<Key, AtomicStorage>,
    described: Mutex<HashMap<String, (Option<Unit>, String)>>,
}

static RECORDER: LazyLock<&'static TestRecorder> = LazyLock::new(|| {
    let recorder: &'static TestRecorder = Box::leak(Box::new(TestRecorder {
        registry: Registry::atomic(),
        described: Mutex::default(),
    }));
    metrics::set_global_recorder(recorder).expect("the only recorder of this binary");
    recorder
});

impl Recorder for &'static TestRecorder {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, help: SharedString) {
        self.describe(&key, unit, &help);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, help: SharedString) {
        self.describe(&key, unit, &help);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, help: SharedString) {
        self.describe(&key, unit, &help);
    }

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.registry
            .get_or_create_counter(key, |c| Counter::from_arc(Arc::clone(c)))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.registry
            .get_or_create_gauge(key, |g| Gauge::from_arc(Arc::clone(g)))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.registry
            .get_or_create_histogram(key, |h| Histogram::from_arc(Arc::clone(h)))
    }
}

impl TestRecorder {
    fn describe(&self, key: &KeyName, unit: Option<Unit>, help: &str) {
        self.described
            .lock()
            .expect("describe lock")
            .insert(key.as_str().to_owned(), (unit, help.to_owned()));
    }
}

/// The series of `name` whose labels are exactly the Redis store's label and `labels`.
fn key(name: &'static str, labels: &[(&'static str, &str)]) -> Key {
    let labels: Vec<metrics::Label> = [("store", "redis")]
        .iter()
        .chain(labels)
        .map(|(k, v)| metrics::Label::new(*k, (*v).to_owned()))
        .collect();
    Key::from_parts(name, labels)
}

fn counter(name: &'static str, primitive: &'static str, class: &str) -> u64 {
    let key = key(name, &[("primitive", primitive), ("class", class)]);
    RECORDER
        .registry
        .get_counter(&key)
        .map_or(0, |c: Arc<AtomicU64>| c.load(Ordering::SeqCst))
}

/// A gauge's value; every ferrisson gauge counts whole things.
fn gauge(name: &'static str, primitive: &'static str, class: &str) -> i64 {
    let key = key(name, &[("primitive", primitive), ("class", class)]);
    gauge_of(&key)
}

fn gauge_of(key: &Key) -> i64 {
    RECORDER
        .registry
        .get_gauge(key)
        .map_or(0, |g: Arc<AtomicU64>| {
            f64::from_bits(g.load(Ordering::SeqCst)).round() as i64
        })
}

fn samples(key: &Key) -> Vec<f64> {
    RECORDER
        .registry
        .get_histogram(key)
        .map_or_else(Vec::new, |h: Arc<AtomicBucket<f64>>| h.data())
}

fn waits(primitive: &'static str, class: &str, outcome: &str) -> Vec<f64> {
    samples(&key(
        ACQUIRE_WAIT_SECONDS,
        &[
            ("primitive", primitive),
            ("class", class),
            ("outcome", outcome),
        ],
    ))
}

fn holds_ended(primitive: &'static str, class: &str) -> Vec<f64> {
    samples(&key(
        HOLD_SECONDS,
        &[("primitive", primitive), ("class", class)],
    ))
}

/// A client whose metrics carry each primitive's full name as its class.
async fn client(server: &RedisServer, lease: Duration) -> anyhow::Result<Client> {
    LazyLock::force(&RECORDER);
    Ok(Client::builder(&server.url())
        .watchdog_lease(lease)
        .response_timeout(Duration::from_millis(300))
        .metrics_class(str::to_owned)
        .connect()
        .await?)
}

const SETTLE: Duration = Duration::from_secs(10);

#[tokio::test]
async fn metrics_follow_a_lock_through_its_life() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let a = client(&server, Duration::from_millis(900)).await?;
    let b = client(&server, Duration::from_millis(900)).await?;
    let name = "metrics:life";

    // Taken at once.
    let first = a.lock(name)?.lock().await?;
    // The hold began at the grant, before this instant: a lower bound for its length.
    let taken_at = Instant::now();
    assert_eq!(counter(ACQUISITIONS, "lock", name), 1);
    assert_eq!(gauge(HOLDS, "lock", name), 1);
    assert_eq!(waits("lock", name, "acquired").len(), 1);

    // Refused without a wait, then a bounded wait that runs out.
    assert!(b.lock(name)?.try_lock().await?.is_none());
    assert_eq!(counter(ACQUIRE_BUSY, "lock", name), 1);
    let wait = Duration::from_millis(50);
    assert!(b.lock(name)?.lock_timeout(wait).await?.is_none());
    assert_eq!(counter(ACQUIRE_TIMEOUTS, "lock", name), 1);
    let timed_out = waits("lock", name, "timeout");
    assert_eq!(timed_out.len(), 1);
    assert!(timed_out[0] >= wait.as_secs_f64(), "{timed_out:?}");
    assert_eq!(counter(ACQUISITIONS, "lock", name), 1);

    // A second task waits; while it does, it is counted and its channel is subscribed.
    let waiter = tokio::spawn({
        let lock = b.lock(name)?;
        async move { lock.lock().await }
    });
    assert!(eventually(SETTLE, || async { gauge(WAITERS, "lock", name) == 1 }).await);
    assert!(gauge_of(&Key::from_name(SUBSCRIBED_CHANNELS)) >= 1);

    // The watchdog renews the first hold (a third of the 900 ms lease).
    assert!(eventually(SETTLE, || async { counter(RENEWALS, "lock", name) >= 1 }).await);
    assert_eq!(counter(RENEWAL_FAILURES, "lock", name), 0);

    // Released: the waiter takes over.
    let held_at_least = taken_at.elapsed();
    first.unlock().await?;
    let second = waiter.await??;
    assert_eq!(counter(ACQUISITIONS, "lock", name), 2);
    assert_eq!(gauge(WAITERS, "lock", name), 0);
    assert_eq!(gauge(HOLDS, "lock", name), 1);
    let held = holds_ended("lock", name);
    assert_eq!(held.len(), 1, "{held:?}");
    // The renewal is scheduled from the acquire's send, the hold measured from its reply,
    // so "a third of the lease" is not a lower bound; what the test itself saw pass is.
    assert!(
        held[0] >= held_at_least.as_secs_f64(),
        "held across a renewal, at least {held_at_least:?}: {held:?}"
    );
    let granted = waits("lock", name, "acquired");
    assert_eq!(granted.len(), 2);
    assert!(granted[1] > granted[0], "the waiter waited: {granted:?}");

    // Lost: deleted behind the holder's back, found gone by the watchdog.
    assert!(a.lock(name)?.force_unlock().await?);
    tokio::time::timeout(SETTLE, second.lost()).await?;
    assert_eq!(counter(LOCKS_LOST, "lock", name), 1);
    assert_eq!(gauge(HOLDS, "lock", name), 0);
    assert_eq!(holds_ended("lock", name).len(), 2);

    // Releasing what was lost reports it, and counts nothing twice.
    assert!(matches!(
        second.unlock().await,
        Err(Error::LeaseExpired { .. })
    ));
    assert_eq!(counter(LOCKS_LOST, "lock", name), 1);
    assert_eq!(holds_ended("lock", name).len(), 2);
    assert_eq!(counter(ACQUIRE_ERRORS, "lock", name), 0);
    Ok(())
}

#[tokio::test]
async fn every_primitive_counts_under_its_own_kind() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = client(&server, Duration::from_secs(30)).await?;

    let rw = client.rwlock("metrics:rw")?;
    let read = rw.read().await?;
    // Another task: this one would be refused an upgrade instead.
    let writer = tokio::spawn({
        let rw = rw.clone();
        async move { rw.try_write().await }
    });
    assert!(writer.await??.is_none());
    read.unlock().await?;
    assert_eq!(counter(ACQUISITIONS, "rwlock_read", "metrics:rw"), 1);
    assert_eq!(counter(ACQUIRE_BUSY, "rwlock_write", "metrics:rw"), 1);
    assert_eq!(gauge(HOLDS, "rwlock_read", "metrics:rw"), 0);
    assert_eq!(holds_ended("rwlock_read", "metrics:rw").len(), 1);

    let fair = client.fair_lock("metrics:fair")?.lock().await?;
    drop(fair); // released on a spawned task
    assert!(
        eventually(SETTLE, || async {
            holds_ended("fair_lock", "metrics:fair").len() == 1
        })
        .await
    );
    assert_eq!(gauge(HOLDS, "fair_lock", "metrics:fair"), 0);

    let simple = client.simple_lock("metrics:simple")?.lock().await?;
    assert_eq!(gauge(HOLDS, "simple_lock", "metrics:simple"), 1);
    simple.unlock().await?;
    assert_eq!(gauge(HOLDS, "simple_lock", "metrics:simple"), 0);

    // A semaphore that does not exist: the acquire fails.
    let missing = client.semaphore("metrics:missing")?;
    assert!(matches!(
        missing.try_acquire().await,
        Err(Error::NotInitialized { .. })
    ));
    assert_eq!(counter(ACQUIRE_ERRORS, "semaphore", "metrics:missing"), 1);
    assert_eq!(waits("semaphore", "metrics:missing", "error").len(), 1);

    let semaphore = client.semaphore("metrics:sem")?;
    assert!(semaphore.try_set_permits(1).await?);
    let permit = semaphore.acquire().await?;
    assert_eq!(gauge(HOLDS, "semaphore", "metrics:sem"), 1);
    permit.release().await?;
    assert_eq!(gauge(HOLDS, "semaphore", "metrics:sem"), 0);

    // An expirable permit released after its lease ran out was lost.
    let expirable = client
        .expirable_semaphore("metrics:xsem")?
        .with_lease(Lease::Fixed(Duration::from_millis(20)))?;
    assert!(expirable.try_set_permits(1).await?);
    let permit = expirable.acquire().await?;
    tokio::time::sleep(Duration::from_millis(60)).await; // the lease must run out
    assert!(matches!(
        permit.release().await,
        Err(Error::LeaseExpired { .. })
    ));
    assert_eq!(
        counter(LOCKS_LOST, "expirable_semaphore", "metrics:xsem"),
        1
    );

    let leadership = client.election("metrics:election")?.campaign().await?;
    assert_eq!(counter(ACQUISITIONS, "election", "metrics:election"), 1);
    assert_eq!(gauge(HOLDS, "election", "metrics:election"), 1);
    leadership.resign().await?;
    assert_eq!(gauge(HOLDS, "election", "metrics:election"), 0);

    let limiter = client.rate_limiter("metrics:rate", Rate::per_second(1)?)?;
    assert!(limiter.try_acquire(1).await?.is_allowed());
    assert!(!limiter.try_acquire(1).await?.is_allowed());
    let wait = Duration::from_millis(10);
    assert!(!limiter.acquire_timeout(1, wait).await?.is_allowed());
    assert_eq!(counter(ACQUISITIONS, "rate_limiter", "metrics:rate"), 1);
    assert_eq!(counter(ACQUIRE_BUSY, "rate_limiter", "metrics:rate"), 1);
    assert_eq!(counter(ACQUIRE_TIMEOUTS, "rate_limiter", "metrics:rate"), 1);

    let latch = client.count_down_latch("metrics:latch")?;
    assert!(latch.try_set_count(1).await?);
    assert!(
        latch
            .wait_timeout(Duration::from_millis(20))
            .await?
            .is_none()
    );
    assert_eq!(counter(ACQUIRE_TIMEOUTS, "latch", "metrics:latch"), 1);
    latch.count_down().await?;
    latch.wait().await?;
    assert_eq!(counter(ACQUISITIONS, "latch", "metrics:latch"), 1);

    // Every metric this test moved was described when the client connected.
    let described = RECORDER.described.lock().expect("describe lock").clone();
    for name in [
        ACQUISITIONS,
        ACQUIRE_ERRORS,
        HOLD_SECONDS,
        HOLDS,
        LOCKS_LOST,
    ] {
        let (_, help) = described.get(name).expect("described");
        assert!(!help.is_empty());
    }
    assert_eq!(described[HOLD_SECONDS].0, Some(Unit::Seconds));
    Ok(())
}

#[tokio::test]
async fn renewals_that_get_no_answer_count_as_failures() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    // Renewed every second; a renewal waits 300 ms for its reply.
    let client = client(&server, Duration::from_secs(3)).await?;
    let name = "metrics:renewal-failures";
    let guard = client.lock(name)?.lock().await?;

    server.pause()?;
    let failed = eventually(SETTLE, || async {
        counter(RENEWAL_FAILURES, "lock", name) >= 1
    })
    .await;
    server.resume()?;
    assert!(failed, "a renewal against a stopped server failed");

    // Answered again, the next renewal succeeds and the lock was never lost.
    let renewed_before = counter(RENEWALS, "lock", name);
    assert!(
        eventually(SETTLE, || async {
            counter(RENEWALS, "lock", name) > renewed_before
        })
        .await
    );
    assert!(guard.is_held());
    assert_eq!(counter(LOCKS_LOST, "lock", name), 0);
    guard.unlock().await?;
    Ok(())
}

/// A span's fields, as text.
type FieldMap = HashMap<String, String>;

/// Every closed span's name and fields.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<(String, FieldMap)>>>);

/// A span's fields while it is open.
struct Fields(FieldMap);

struct FieldVisitor<'a>(&'a mut FieldMap);

impl tracing::field::Visit for FieldVisitor<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S> tracing_subscriber::Layer<S> for Spans
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        let mut fields = HashMap::new();
        attrs.record(&mut FieldVisitor(&mut fields));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Fields(fields));
        }
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(fields) = span.extensions_mut().get_mut::<Fields>()
        {
            values.record(&mut FieldVisitor(&mut fields.0));
        }
    }

    fn on_close(&self, id: span::Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id)
            && let Some(fields) = span.extensions_mut().remove::<Fields>()
        {
            let mut spans = self.0.lock().expect("spans lock");
            spans.push((span.name().to_owned(), fields.0));
        }
    }
}

impl Spans {
    /// The fields of the closed spans called `name`.
    fn named(&self, name: &str) -> Vec<FieldMap> {
        let spans = self.0.lock().expect("spans lock");
        spans
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, fields)| fields.clone())
            .collect()
    }
}

// A current-thread runtime: the subscriber set for this thread sees every task of the
// test, the client's watchdog included.
#[tokio::test]
async fn spans_carry_the_lock_the_outcome_and_the_token() -> anyhow::Result<()> {
    let spans = Spans::default();
    let _subscriber =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
    let password = "s3cret-pass";
    let server = RedisServer::start()?;
    server.command(&["CONFIG", "SET", "requirepass", password])?;
    let url = format!("redis://:{password}@127.0.0.1:{}", server.port());
    let holder = Client::builder(&url)
        .watchdog_lease(Duration::from_millis(300))
        .connect()
        .await?;
    let waiter = Client::connect(&url).await?;
    let name = "spans:orders";

    let guard = holder.lock(name)?.lock().await?;
    let token = guard.fencing_token().get().to_string();
    let waiting = tokio::spawn({
        let lock = waiter.lock(name)?;
        async move { lock.lock().await }
    });
    assert!(
        eventually(SETTLE, || async {
            !spans.named("ferrisson.renew").is_empty()
        })
        .await
    );
    guard.unlock().await?;
    let second = waiting.await??;
    let second_token = second.fencing_token().get().to_string();
    second.unlock().await?;

    let acquires = spans.named("ferrisson.acquire");
    assert_eq!(acquires.len(), 2, "{acquires:?}");
    for (fields, token) in acquires.iter().zip([&token, &second_token]) {
        assert_eq!(fields["name"], name);
        assert_eq!(fields["kind"], "lock");
        assert_eq!(fields["outcome"], "acquired");
        assert_eq!(&fields["fencing_token"], token);
    }
    let waits = spans.named("ferrisson.wait");
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert_eq!(waits[0]["name"], name);
    assert_eq!(waits[0]["outcome"], "acquired");
    let renewal = &spans.named("ferrisson.renew")[0];
    assert_eq!(renewal["holds"], "1");
    assert_eq!(renewal["name"], name);
    assert_eq!(renewal["kind"], "lock");
    assert_eq!(renewal["outcome"], "renewed");
    let releases = spans.named("ferrisson.release");
    assert_eq!(releases.len(), 2, "{releases:?}");
    for (fields, token) in releases.iter().zip([&token, &second_token]) {
        assert_eq!(fields["name"], name);
        assert_eq!(&fields["fencing_token"], token);
        assert_eq!(fields["outcome"], "released");
    }

    let spans = spans.0.lock().expect("spans lock");
    for (span, fields) in spans.iter() {
        for value in fields.values() {
            assert!(
                !value.contains(password) && !value.contains("redis://"),
                "{span} carries {value:?}"
            );
        }
    }
    Ok(())
}

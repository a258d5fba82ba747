//! The etcd store records the shared metrics under the store label `etcd`: acquisitions,
//! busy tries, holds, and a hold lost behind its holder's back.

use std::sync::LazyLock;
use std::time::Duration;

use ferrisson_core::observe::metrics::{
    ACQUIRE_BUSY, ACQUISITIONS, HOLDS, LOCKS_LOST, STORE_LABEL,
};
use ferrisson_etcd::{Client, DistributedLock, Guard};
use ferrisson_testkit::EtcdCluster;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_util::registry::{AtomicStorage, Registry};

/// A recorder keeping every counter and gauge.
struct TestRecorder(Registry<Key, AtomicStorage>);

static RECORDER: LazyLock<&'static TestRecorder> = LazyLock::new(|| {
    let recorder: &'static TestRecorder = Box::leak(Box::new(TestRecorder(Registry::atomic())));
    metrics::set_global_recorder(recorder).expect("the only recorder of this binary");
    recorder
});

impl Recorder for &'static TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.0
            .get_or_create_counter(key, |c| Counter::from_arc(c.clone()))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.0
            .get_or_create_gauge(key, |g| Gauge::from_arc(g.clone()))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.0
            .get_or_create_histogram(key, |h| Histogram::from_arc(h.clone()))
    }
}

fn etcd_series(key: &Key, name: &str) -> bool {
    key.name() == name
        && key
            .labels()
            .any(|l| l.key() == STORE_LABEL && l.value() == "etcd")
}

fn counter(name: &str) -> u64 {
    let mut total = 0;
    RECORDER.0.visit_counters(|key, value| {
        if etcd_series(key, name) {
            total += value.load(std::sync::atomic::Ordering::SeqCst);
        }
    });
    total
}

fn gauge(name: &str) -> f64 {
    let mut total = 0.0;
    RECORDER.0.visit_gauges(|key, value| {
        if etcd_series(key, name) {
            total += f64::from_bits(value.load(std::sync::atomic::Ordering::SeqCst));
        }
    });
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_label_is_etcd() -> anyhow::Result<()> {
    LazyLock::force(&RECORDER);
    let member = tokio::task::spawn_blocking(EtcdCluster::single).await??;
    let client = Client::connect(&member.url()).await?;
    let other = Client::connect(&member.url()).await?;
    let lock = client.lock("metered")?;

    let guard = lock.lock().await?;
    assert_eq!(counter(ACQUISITIONS), 1);
    assert!((gauge(HOLDS) - 1.0).abs() < f64::EPSILON);
    let busy = tokio::spawn({
        let lock = other.lock("metered")?;
        async move { lock.try_lock().await.map(|g| g.is_some()) }
    });
    assert!(!busy.await??);
    assert_eq!(counter(ACQUIRE_BUSY), 1);
    guard.unlock().await?;
    assert!(gauge(HOLDS).abs() < f64::EPSILON);

    let lost = lock.lock().await?;
    client.etcd().kv_client().delete(lost.key(), None).await?;
    tokio::time::timeout(Duration::from_secs(20), lost.lost()).await?;
    // lost() wakes as the loss is marked, the counter moves right after.
    tokio::time::timeout(Duration::from_secs(20), async {
        while counter(LOCKS_LOST) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await?;
    assert_eq!(counter(LOCKS_LOST), 1);
    let _ = lost.unlock().await;
    assert!(gauge(HOLDS).abs() < f64::EPSILON);
    Ok(())
}

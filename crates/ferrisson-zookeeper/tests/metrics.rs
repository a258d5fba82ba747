//! The ZooKeeper store records the shared metrics under `store="zookeeper"`: grants,
//! refusals, holds and losses.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use ferrisson_core::observe::metrics::{ACQUIRE_BUSY, ACQUISITIONS, HOLDS, LOCKS_LOST};
use ferrisson_testkit::ZooKeeper;
use ferrisson_zookeeper::{Client, DistributedLock, Guard};
use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

/// Every counter and gauge registered, by key; histograms are dropped.
#[derive(Default)]
struct TestRecorder {
    series: Mutex<Vec<(Key, Arc<AtomicU64>)>>,
}

struct NoHistogram;

impl HistogramFn for NoHistogram {
    fn record(&self, _: f64) {}
}

impl TestRecorder {
    fn series(&self, key: &Key) -> Arc<AtomicU64> {
        let mut series = self
            .series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, value)) = series.iter().find(|(k, _)| k == key) {
            return Arc::clone(value);
        }
        let value = Arc::new(AtomicU64::new(0));
        series.push((key.clone(), Arc::clone(&value)));
        value
    }

    /// The value of `name` with the labels `store="zookeeper"` and `class=class`, summed
    /// over its other labels; gauges (stored as f64) are rounded.
    fn read(&self, name: &str, class: &str, gauge: bool) -> i64 {
        let series = self
            .series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        series
            .iter()
            .filter(|(key, _)| {
                key.name() == name
                    && key
                        .labels()
                        .any(|l| l.key() == "store" && l.value() == "zookeeper")
                    && key
                        .labels()
                        .any(|l| l.key() == "class" && l.value() == class)
            })
            .map(|(_, value)| {
                let raw = value.load(Ordering::SeqCst);
                if gauge {
                    f64::from_bits(raw).round() as i64
                } else {
                    raw as i64
                }
            })
            .sum()
    }
}

impl Recorder for &'static TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.series(key))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.series(key))
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(Arc::new(NoHistogram))
    }
}

static RECORDER: LazyLock<&'static TestRecorder> = LazyLock::new(|| {
    let recorder: &'static TestRecorder = Box::leak(Box::default());
    metrics::set_global_recorder(recorder).expect("the only recorder of this binary");
    recorder
});

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_refusals_holds_and_losses_are_counted_under_the_store() -> anyhow::Result<()> {
    let recorder = *RECORDER;
    let zk = tokio::task::spawn_blocking(ZooKeeper::standalone).await??;
    let client = Client::builder(&zk.url())
        .metrics_class(str::to_owned)
        .connect()
        .await?;
    let lock = client.lock("metered")?;
    let guard = lock.lock().await?;
    assert_eq!(recorder.read(HOLDS, "metered", true), 1);
    let busy = tokio::spawn({
        let lock = lock.clone();
        async move { lock.try_lock().await.map(|g| g.is_some()) }
    });
    assert!(!busy.await??);
    guard.unlock().await?;
    assert_eq!(recorder.read(HOLDS, "metered", true), 0);
    let guard = lock.lock().await?;
    // Taken away behind the holder's back: a loss.
    let raw = client.zookeeper();
    for child in raw.list_children(lock.path()).await? {
        raw.delete(&format!("{}/{child}", lock.path()), None)
            .await?;
    }
    guard.lost().await;
    assert_eq!(recorder.read(ACQUISITIONS, "metered", false), 2);
    assert_eq!(recorder.read(ACQUIRE_BUSY, "metered", false), 1);
    assert_eq!(recorder.read(LOCKS_LOST, "metered", false), 1);
    assert_eq!(recorder.read(HOLDS, "metered", true), 0);
    drop(guard);
    Ok(())
}

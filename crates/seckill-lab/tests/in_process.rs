//! The variants the lab runs itself, at small scale, checked against what each is
//! expected to show: on the machine's PostgreSQL and MariaDB (in tables of the run's
//! own, dropped at the end), and on a Redis server, a ZooKeeper server and an etcd
//! member the test kit starts.

use std::time::Duration;

use ferrisson_testkit::{EtcdCluster, RedisServer, ZooKeeper};
use seckill_lab::{DirectLoad, DirectVariant, Place, Store, VariantRow, Verdict, run_direct};

/// The machine's databases, or the ones the lab's variables name.
fn database(store: Store) -> String {
    let (variable, default) = match store {
        Store::Postgres => (
            "SECKILL_LAB_POSTGRES_URL",
            "postgres://postgres@127.0.0.1:5432/test",
        ),
        _ => ("SECKILL_LAB_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"),
    };
    std::env::var(variable)
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| default.to_owned())
}

/// A small load with a short lock wait (the deadlocked requests each wait it out).
fn load() -> DirectLoad {
    DirectLoad {
        lock_wait: Duration::from_millis(500),
        ..DirectLoad::small()
    }
}

async fn on_database(variant: DirectVariant, store: Store, load: &DirectLoad) -> VariantRow {
    let place = Place {
        url: database(store),
        redis: String::new(),
        words: store.id().into(),
    };
    run_direct(variant, store, &place, load)
        .await
        .unwrap_or_else(|e| panic!("{variant} on {}: {e:#}", store.id()))
}

fn assert_correct(row: &VariantRow) {
    assert_eq!(row.verdict, Verdict::Correct, "{row:#?}");
    assert_eq!(row.verdict, row.expected, "{row:#?}");
    assert_eq!((row.sold, row.final_stock), (20, 0), "{row:#?}");
    assert_eq!(row.errors, 0, "{row:#?}");
    assert_eq!(row.double_holds, 0, "{row:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_naive_lock_table_deadlocks_on_a_dead_holders_row() {
    for store in [Store::Postgres, Store::MariaDb] {
        let row = on_database(DirectVariant::DbLockTableNaive, store, &load()).await;
        assert_eq!(row.variant, format!("db-lock-table-naive/{}", store.id()));
        assert_eq!(row.verdict, Verdict::Deadlocked, "{row:#?}");
        assert_eq!(row.verdict, row.expected);
        // The crash came at the 5th holder: at most 4 units sold, the rest left unsold,
        // and the requests after it refused.
        assert!(row.sold <= 4, "{row:#?}");
        assert_eq!(row.final_stock, 20 - row.sold, "{row:#?}");
        assert!(row.gave_up > 0, "{row:#?}");
        assert!(
            row.left_behind
                .as_deref()
                .is_some_and(|l| l.contains("no expiry")),
            "{row:#?}"
        );
        assert!(
            row.faults.iter().any(|f| f.contains("process died")),
            "{row:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_naive_lock_table_is_correct_when_nobody_dies() {
    let no_crash = DirectLoad {
        fault_at: 0,
        ..load()
    };
    let row = on_database(DirectVariant::DbLockTableNaive, Store::Postgres, &no_crash).await;
    assert_correct(&row);
    assert_eq!(row.left_behind, None);
}

/// As many buyers as units, all at once: a buyer that loses the compare leaves its unit
/// unsold, so every unit left is a buyer turned away while stock was there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_version_check_leaves_stock_with_buyers_turned_away() {
    let one_each = DirectLoad {
        clients: 40,
        requests: 40,
        stock: 40,
        ..load()
    };
    for store in [Store::Postgres, Store::MariaDb] {
        let row = on_database(DirectVariant::DbVersionCas, store, &one_each).await;
        assert_eq!(row.verdict, Verdict::Undersold, "{row:#?}");
        assert_eq!(row.verdict, row.expected);
        assert_eq!((row.oversold, row.lost_updates, row.errors), (0, 0, 0));
        assert!(row.cas_conflicts > 0, "{row:#?}");
        assert_eq!(row.sold + row.cas_conflicts, 40, "{row:#?}");
        assert_eq!(row.final_stock, row.cas_conflicts, "{row:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_locks_that_hold_sell_exactly_the_stock() {
    let runs = [
        (DirectVariant::DbLockTable, Store::Postgres),
        (DirectVariant::DbLockTable, Store::MariaDb),
        (DirectVariant::DbForUpdate, Store::Postgres),
        (DirectVariant::DbForUpdate, Store::MariaDb),
        (DirectVariant::PgAdvisory, Store::Postgres),
        (DirectVariant::MysqlGetLock, Store::MariaDb),
    ];
    for (variant, store) in runs {
        let row = on_database(variant, store, &load()).await;
        assert_correct(&row);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timestamp_lock_survives_a_crash_but_not_a_clock_ahead() {
    let redis = RedisServer::start().expect("redis-server starts");
    let place = Place {
        url: redis.url(),
        redis: redis.url(),
        words: "a test Redis server".into(),
    };
    // Clocks that agree: the dead holder's lock is taken over once its time passes.
    let row = run_direct(
        DirectVariant::GetsetTimestamp,
        Store::Redis,
        &place,
        &load(),
    )
    .await
    .expect("the run");
    assert_correct(&row);
    assert!(
        row.faults.iter().any(|f| f.contains("process died")),
        "{row:#?}"
    );
    assert!(
        row.faults
            .iter()
            .any(|f| f.contains("took it over with GETSET")),
        "{row:#?}"
    );

    // One instance's clock 3 s ahead (the lease is 500 ms): it takes over live locks.
    let busy = DirectLoad {
        requests: 200,
        stock: 100,
        ..load()
    };
    let row = run_direct(
        DirectVariant::GetsetTimestampSkewed,
        Store::Redis,
        &place,
        &busy,
    )
    .await
    .expect("the run");
    assert!(row.double_holds > 0, "{row:#?}");
    assert_eq!(row.clock_skew_ms, Some(3000));
    assert_eq!(row.verdict, Verdict::Oversold, "{row:#?}");
    assert_eq!(row.verdict, row.expected);
    assert!(row.lost_updates > 0, "{row:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_zookeeper_and_etcd_locks_sell_exactly_the_stock() {
    let redis = RedisServer::start().expect("redis-server starts");
    let zookeeper = ZooKeeper::standalone().expect("ZooKeeper starts");
    let etcd = EtcdCluster::single().expect("etcd starts");
    for (variant, store, url) in [
        (
            DirectVariant::Zookeeper,
            Store::ZooKeeper,
            format!("{}/seckill-lab-test", zookeeper.url()),
        ),
        (DirectVariant::Etcd, Store::Etcd, etcd.url()),
    ] {
        let place = Place {
            url,
            redis: redis.url(),
            words: store.id().into(),
        };
        let row = run_direct(variant, store, &place, &load())
            .await
            .unwrap_or_else(|e| panic!("{variant}: {e:#}"));
        assert_correct(&row);
    }
}

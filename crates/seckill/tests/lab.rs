//! The oversell lab, run small against two `seckill serve` processes: every variant
//! shows the verdict expected of it. (It lives with the service's tests because it
//! needs the `seckill` binary, which cargo builds for this crate's tests.)

mod common;

use std::time::Duration;

use seckill::OrderFlow;
use seckill::db::{Db, VoucherRow};
use seckill::oversell::{LabConfig, Variant};
use seckill_lab::{LabOptions, Verdict};

fn small(out: &std::path::Path) -> LabOptions {
    LabOptions {
        // The service's variants; the lab's own are tested in crates/seckill-lab.
        variants: Variant::ALL.into_iter().map(Into::into).collect(),
        clients: 20,
        loops: 2,
        stock: 20,
        instances: 2,
        lab: LabConfig {
            fault_at: 5,
            lease: Duration::from_millis(300),
            // Generous, so that a starved CI machine does not make a correct lock give up.
            lock_wait: Duration::from_millis(1500),
            stall: Duration::from_millis(700),
            stall_every: 10,
            ..LabConfig::default()
        },
        progress: false,
        watchdog_lease: Duration::from_millis(600),
        users: 40,
        attempts: 3,
        out: out.to_path_buf(),
        ..LabOptions::new(env!("CARGO_BIN_EXE_seckill").into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_variant_shows_its_verdict() {
    let out = tempfile::tempdir().expect("tempdir");
    let report = seckill_lab::run(&small(out.path()))
        .await
        .expect("lab runs");
    println!("{}", report.table());
    assert_eq!(report.variants.len(), Variant::ALL.len());
    for row in &report.variants {
        assert_eq!(row.verdict, row.expected, "{}: {row:?}", row.variant);
        assert_eq!(row.requests, 40);
        match row.verdict {
            Verdict::Correct => {
                assert_eq!(
                    (row.sold, row.final_stock, row.errors),
                    (20, 0, 0),
                    "{row:?}"
                );
            }
            Verdict::Oversold => assert!(row.oversold > 0 || row.lost_updates > 0, "{row:?}"),
            Verdict::Deadlocked => {
                assert!(row.sold < 20 && row.gave_up > 0, "{row:?}");
                assert_eq!(row.lock_left, Some(None), "an orphaned lock without TTL");
                assert_eq!(row.faults.len(), 1, "{row:?}");
            }
            Verdict::WrongLockDeleted => {
                assert!(row.foreign_deletes > 0 && !row.faults.is_empty(), "{row:?}");
            }
            Verdict::Undersold => unreachable!("no variant is expected to undersell"),
        }
    }
    let watchdog = report
        .variants
        .iter()
        .find(|r| r.variant == Variant::Watchdog.name())
        .expect("watchdog row");
    assert_eq!(watchdog.ttl_samples.len(), 2, "stalls at stock 20 and 10");
    assert!(
        watchdog.ttl_refreshed >= 1,
        "the watchdog renewed during a stall: {watchdog:?}"
    );

    // The voucher scenario: the lock and Lua flows never give one user two orders (the
    // unique index is off); no flow oversells.
    let flows: Vec<OrderFlow> = report.vouchers.iter().map(|v| v.order_flow).collect();
    assert_eq!(flows, [OrderFlow::Lock, OrderFlow::NoLock, OrderFlow::Lua]);
    for v in &report.vouchers {
        assert_eq!(v.orders + v.stock_left, v.stock, "{v:?}");
        assert_eq!(v.orders, 20, "every unit sold: {v:?}");
        assert!(v.replies.keys().all(|k| !k.starts_with("HTTP 5")), "{v:?}");
        if v.order_flow != OrderFlow::NoLock {
            assert_eq!(v.users_with_two_orders, 0, "{v:?}");
        }
    }
    assert!(report.problems().is_empty(), "{:?}", report.problems());

    for file in ["report.json", "table.txt", "chart.svg"] {
        let text = std::fs::read_to_string(out.path().join(file)).expect(file);
        assert!(text.contains("token-lua"), "{file} lists the variants");
    }
}

/// On one instance the process-local mutex is enough; it is the second process that
/// breaks it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_mutex_is_correct_on_one_instance() {
    let out = tempfile::tempdir().expect("tempdir");
    let options = LabOptions {
        instances: 1,
        variants: vec![Variant::Naive.into(), Variant::LocalMutex.into()],
        vouchers: false,
        ..small(out.path())
    };
    let report = seckill_lab::run(&options).await.expect("lab runs");
    println!("{}", report.table());
    assert_eq!(report.variants[0].verdict, Verdict::Oversold);
    assert_eq!(report.variants[1].verdict, Verdict::Correct);
    assert_eq!(report.variants[1].expected, Verdict::Correct);
    assert!(report.problems().is_empty(), "{:?}", report.problems());
}

/// The database-backed parts of the lab (`db-optimistic`, the voucher scenario) on
/// PostgreSQL and MariaDB when they are configured (SQLite runs above). Given a
/// database that holds the service's tables, the lab runs in a schema or database of its
/// own beside it and leaves the given one as it was: unique order index included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_parts_on_other_backends() {
    for db in common::databases("database_parts_on_other_backends").await {
        if db.backend == "sqlite" {
            continue;
        }
        let timeout = Duration::from_secs(10);
        // The user's database: the service's schema, one voucher.
        let users = Db::connect(&db.url, 1, timeout)
            .await
            .expect("user's database");
        let voucher = VoucherRow {
            id: 7,
            title: "the user's voucher".into(),
            stock: 3,
            begin_ms: 0,
            end_ms: 1,
        };
        users.insert_voucher(&voucher, 0).await.expect("a voucher");
        users.close().await;

        let before = lab_databases(&db).await;
        let out = tempfile::tempdir().expect("tempdir");
        let options = LabOptions {
            variants: vec![Variant::DbOptimistic.into(), Variant::LuaAtomic.into()],
            users: 30,
            database: Some(db.url.clone()),
            ..small(out.path())
        };
        let report = seckill_lab::run(&options).await.expect("lab runs");
        println!("{}: {}", db.backend, report.table());
        assert_eq!(report.database, db.backend);
        assert!(
            report.problems().is_empty(),
            "{}: {:?}",
            db.backend,
            report.problems()
        );
        assert!(
            report
                .variants
                .iter()
                .all(|r| r.verdict == Verdict::Correct)
        );
        assert_eq!(report.vouchers.len(), 3, "the voucher scenario ran");

        // The user's database as it was: the schema check (unique index included)
        // passes, the lab wrote nothing there.
        let users = Db::connect(&db.url, 1, timeout)
            .await
            .expect("the user's database still passes the schema check");
        assert_eq!(users.voucher(7).await.expect("read"), Some(voucher));
        assert_eq!(users.lab_state().await.expect("read"), None);
        assert_eq!(users.orders(7).await.expect("read"), []);
        users.close().await;
        // And the lab's own schema or database is gone.
        assert_eq!(lab_databases(&db).await, before, "{}", db.backend);
        db.cleanup().await;
    }
}

/// The schemas (PostgreSQL) or databases (MySQL) the lab makes, by their name.
async fn lab_databases(db: &common::TestDb) -> Vec<String> {
    use sqlx::{Connection as _, Row as _};

    let sql = match db.backend {
        "postgres" => {
            "SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'seckill\\_lab\\_%' ORDER BY 1"
        }
        _ => {
            "SELECT schema_name FROM information_schema.schemata \
             WHERE schema_name LIKE 'seckill\\_lab\\_%' ORDER BY 1"
        }
    };
    let mut conn = sqlx::AnyConnection::connect(&db.url)
        .await
        .expect("connect");
    let names = sqlx::query(sql)
        .fetch_all(&mut conn)
        .await
        .expect("catalog")
        .iter()
        .map(|row| row.try_get(0).expect("a name"))
        .collect();
    let _ = conn.close().await;
    names
}

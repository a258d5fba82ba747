//! Every oversell-lab variant shows the verdict the seeds describe, under a small
//! version of the seed's load, against two `seckill serve` processes.

mod common;

use std::time::Duration;

use seckill::oversell::Variant;
use seckill::runner::{self, LabOptions};
use seckill::{OrderFlow, Verdict};

fn small(out: &std::path::Path) -> LabOptions {
    LabOptions {
        clients: 20,
        loops: 2,
        stock: 20,
        instances: 2,
        fault_at: 5,
        lease: Duration::from_millis(300),
        // Generous, so that a starved CI machine does not make a correct lock give up.
        lock_wait: Duration::from_millis(1500),
        stall: Duration::from_millis(700),
        stall_every: 10,
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
    let report = runner::run(&small(out.path())).await.expect("lab runs");
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
        .find(|r| r.variant == Variant::Watchdog)
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
        variants: vec![Variant::Naive, Variant::LocalMutex],
        vouchers: false,
        ..small(out.path())
    };
    let report = runner::run(&options).await.expect("lab runs");
    println!("{}", report.table());
    assert_eq!(report.variants[0].verdict, Verdict::Oversold);
    assert_eq!(report.variants[1].verdict, Verdict::Correct);
    assert_eq!(report.variants[1].expected, Verdict::Correct);
    assert!(report.problems().is_empty(), "{:?}", report.problems());
}

/// The database-backed parts of the lab (`db-optimistic`, the voucher scenario) on
/// PostgreSQL and MariaDB when they are configured (SQLite runs above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_parts_on_other_backends() {
    for db in common::databases("database_parts_on_other_backends").await {
        if db.backend == "sqlite" {
            continue;
        }
        let out = tempfile::tempdir().expect("tempdir");
        let options = LabOptions {
            variants: vec![Variant::DbOptimistic, Variant::LuaAtomic],
            users: 30,
            database: Some(db.url.clone()),
            ..small(out.path())
        };
        let report = runner::run(&options).await.expect("lab runs");
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
        db.cleanup().await;
    }
}

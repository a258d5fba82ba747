//! The oversell lab on a Redis Sentinel group and on a Redis Cluster that it starts
//! itself (`--topology sentinel|cluster`): the service's own Redis use (the lab's stock,
//! its scripts and pipelines, login tokens, the Lua order flow, the rate limiter) and the
//! hand-made locks run there, and every variant shows the verdict it shows on one server
//! (`lab.rs` checks one server against the same expectations).

use std::time::Duration;

use seckill::OrderFlow;
use seckill::oversell::{LabConfig, Variant};
use seckill_lab::{LabOptions, Report, Topology, Verdict};

/// A small lab: every variant, few clients, a short voucher scenario.
fn small(out: &std::path::Path, topology: Topology) -> LabOptions {
    LabOptions {
        topology,
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
        users: 20,
        attempts: 2,
        out: out.to_path_buf(),
        ..LabOptions::new(env!("CARGO_BIN_EXE_seckill").into())
    }
}

fn check(report: &Report, topology: Topology) {
    println!("{}", report.table());
    assert_eq!(report.topology, topology);
    assert!(
        report.table().contains(topology.started()),
        "the table says what Redis it ran on"
    );
    let verdicts: Vec<(Variant, Verdict)> = report
        .variants
        .iter()
        .map(|r| (r.variant, r.verdict))
        .collect();
    let expected: Vec<(Variant, Verdict)> = Variant::ALL
        .iter()
        .map(|&v| (v, seckill_lab::expected(v, 2, true)))
        .collect();
    assert_eq!(verdicts, expected, "{topology}: the verdicts of one server");
    for row in &report.variants {
        if row.verdict == Verdict::Correct {
            assert_eq!(
                (row.sold, row.final_stock, row.errors),
                (20, 0, 0),
                "{topology}: {row:?}"
            );
        }
    }
    let flows: Vec<OrderFlow> = report.vouchers.iter().map(|v| v.order_flow).collect();
    assert_eq!(flows, [OrderFlow::Lock, OrderFlow::NoLock, OrderFlow::Lua]);
    for v in &report.vouchers {
        assert_eq!((v.orders, v.stock_left), (20, 0), "{topology}: {v:?}");
        assert!(
            v.replies.keys().all(|k| !k.starts_with("HTTP 5")),
            "{topology}: {v:?}"
        );
        if v.order_flow != OrderFlow::NoLock {
            assert_eq!(v.users_with_two_orders, 0, "{topology}: {v:?}");
        }
    }
    assert!(
        report.problems().is_empty(),
        "{topology}: {:?}",
        report.problems()
    );
}

/// One after the other: each lab loads the machine, and two at once would starve both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verdicts_on_sentinel_and_cluster_are_those_of_one_server() {
    for topology in [Topology::Sentinel, Topology::Cluster] {
        let out = tempfile::tempdir().expect("tempdir");
        let report = seckill_lab::run(&small(out.path(), topology))
            .await
            .unwrap_or_else(|e| panic!("the lab runs on {topology}: {e:#}"));
        check(&report, topology);
        let json = std::fs::read_to_string(out.path().join("report.json")).expect("report");
        assert!(
            json.contains(&format!("\"topology\": \"{topology}\"")),
            "report.json names the topology"
        );
    }
}

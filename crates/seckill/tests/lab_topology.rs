//! The oversell lab on a Redis Sentinel group and on a Redis Cluster that it starts
//! itself (`--topology sentinel|cluster`): the service's own Redis use (the lab's stock,
//! its scripts and pipelines, login tokens, the Lua order flow, the rate limiter) and the
//! hand-made locks run there, and every variant shows the verdict it shows on one server
//! (`lab.rs` checks one server against the same expectations). And the service's own
//! connection follows a Sentinel failover.

mod common;

use std::time::Duration;

use ferrisson_testkit::SentinelGroup;
use seckill::OrderFlow;
use seckill::oversell::{LabConfig, Variant};
use seckill_lab::{Cluster, InstanceArgs, LabOptions, Report, Topology, Verdict};

use common::{TestDb, call, http};

/// A small lab: every variant, few clients, a short voucher scenario.
fn small(out: &std::path::Path, topology: Topology) -> LabOptions {
    LabOptions {
        topology,
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
    let verdicts: Vec<(&str, Verdict)> = report
        .variants
        .iter()
        .map(|r| (r.variant.as_str(), r.verdict))
        .collect();
    let expected: Vec<(&str, Verdict)> = Variant::ALL
        .iter()
        .map(|&v| (v.name(), seckill_lab::expected(v, 2, true)))
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

/// The lab's stock and sold counter, read through the service.
async fn lab_stock(http: &reqwest::Client, base: &str) -> (i64, i64) {
    let (status, state) = call(http.get(format!("{base}/lab/stock"))).await;
    assert_eq!(status, 200, "{state}");
    (
        state["stock"].as_i64().expect("stock"),
        state["sold"].as_i64().expect("sold"),
    )
}

async fn deduct(http: &reqwest::Client, base: &str) {
    let (status, reply) = call(http.post(format!("{base}/lab/deduct/lua-atomic"))).await;
    assert_eq!(
        (status, &reply["sold"]),
        (200, &serde_json::json!(true)),
        "{reply}"
    );
}

/// A `SENTINEL FAILOVER` while an instance runs: the instance's connection to the old
/// master is closed and that server now refuses writes (`READONLY`); the next requests
/// find the new master through the sentinels, and the stock written before is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_follows_a_sentinel_failover() {
    let group =
        tokio::task::spawn_blocking(|| SentinelGroup::builder().master_name("shop").start())
            .await
            .expect("join")
            .expect("a sentinel group");
    let db = TestDb::sqlite();
    let args = InstanceArgs {
        redis: group.url(),
        ..common::instance_args(&group.servers()[0], &db.url, OrderFlow::Lock)
    };
    let instance = Cluster::start(1, &args)
        .await
        .expect("an instance on the group");
    let base = instance.urls()[0].clone();
    let http = http();

    let (status, body) = call(
        http.post(format!("{base}/lab/stock"))
            .json(&serde_json::json!({ "stock": 10 })),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    deduct(&http, &base).await;
    assert_eq!(lab_stock(&http, &base).await, (9, 1));

    let (group, promoted) = tokio::task::spawn_blocking(move || {
        // Replication is asynchronous: without this, the promoted replica may not have
        // the stock yet (the test failed once in CI reading no stock after the failover).
        group.wait_for_replication().expect("replicas caught up");
        let promoted = group.failover();
        (group, promoted)
    })
    .await
    .expect("join");
    assert_ne!(promoted.expect("failover"), 0, "a replica took over");

    // A read first (sent again by itself when it finds the connection closed), then
    // writes, each answered by the new master.
    assert_eq!(lab_stock(&http, &base).await, (9, 1));
    for _ in 0..3 {
        deduct(&http, &base).await;
    }
    assert_eq!(lab_stock(&http, &base).await, (6, 4));
    let stock = tokio::task::block_in_place(|| {
        group.servers()[group.master().expect("master")].command(&["GET", "{lab}:stock"])
    })
    .expect("GET on the new master");
    assert_eq!(stock, "6");
    instance.stop().await.expect("clean stop");
}

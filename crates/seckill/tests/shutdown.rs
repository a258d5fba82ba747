//! Graceful shutdown: SIGTERM lets a request in flight finish before the process exits 0.

mod common;

use std::time::Duration;

use common::{call, cluster, http, instance_args};
use ferrisson_testkit::RedisServer;
use seckill::OrderFlow;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_requests_in_flight() {
    let db = common::TestDb::sqlite();
    let redis = RedisServer::start().expect("redis-server");
    let mut args = instance_args(&redis, &db.url, OrderFlow::Lock);
    // The watchdog variant stalls 800 ms on every unit: a request that is surely in flight.
    args.lab.stall = Duration::from_millis(800);
    args.lab.stall_every = 1;
    let cluster = cluster(1, &args).await;
    let base = cluster.urls()[0].clone();
    let http = http();
    let (status, _) = call(
        http.post(format!("{base}/lab/stock"))
            .json(&serde_json::json!({"stock": 3})),
    )
    .await;
    assert_eq!(status, 200);

    let in_flight = tokio::spawn({
        let (http, base) = (http.clone(), base.clone());
        async move { call(http.post(format!("{base}/lab/deduct/watchdog"))).await }
    });
    // Wait until the request has reached the handler (it counts itself in {lab}:seq).
    loop {
        let (_, state) = call(http.get(format!("{base}/lab/stock"))).await;
        if state["requests"].as_i64() == Some(1) {
            break;
        }
        tokio::task::yield_now().await;
    }
    cluster.stop().await.expect("exit 0 after SIGTERM");
    let (status, body) = in_flight.await.expect("request task");
    assert_eq!(
        (status, body["sold"].as_bool()),
        (200, Some(true)),
        "{body}"
    );
    let stock = redis.command(&["GET", "{lab}:stock"]).expect("redis");
    assert_eq!(stock, "2", "the sale in flight was completed");
}

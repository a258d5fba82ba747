//! Redis refused, hung or cut off: every route that needs Redis answers 503
//! `UNAVAILABLE` within the service's own Redis timeout, however many requests wait at
//! once; and once Redis is back, the first request of every route succeeds.

mod common;

use std::time::Duration;

use common::{call, cluster, create_voucher, http, instance_args, login};
use ferrisson_testkit::{FaultProxy, RedisServer};
use futures_util::future::join_all;
use seckill::OrderFlow;
use seckill_lab::Cluster;
use tokio::time::Instant;

/// The service's Redis timeout in these tests.
const REDIS_TIMEOUT: Duration = Duration::from_millis(300);
/// The bound a 503 must come within: the timeout plus room for a busy machine, and well
/// under the library's own 5 s default that the service must not wait for.
const ANSWER_WITHIN: Duration = Duration::from_millis(2500);
/// Requests sent at once to each route.
const PARALLEL: usize = 10;

/// A service on `redis_url` with a short Redis timeout, a voucher, and a logged-in user.
struct Shop {
    cluster: Cluster,
    base: String,
    http: reqwest::Client,
    /// Users who have not ordered: one for each round of recovered requests.
    buyers: Vec<String>,
    voucher: i64,
    _db: common::TestDb,
}

async fn shop(redis: &RedisServer, redis_url: &str) -> Shop {
    let db = common::TestDb::sqlite();
    let mut args = instance_args(redis, &db.url, OrderFlow::Lock);
    args.redis = redis_url.to_owned();
    args.extra_args = vec![
        "--redis-timeout".into(),
        format!("{}ms", REDIS_TIMEOUT.as_millis()),
    ];
    let cluster = cluster(1, &args).await;
    let base = cluster.urls()[0].clone();
    let http = http();
    let mut buyers = Vec::new();
    for i in 0..3 {
        buyers.push(login(&http, &base, &format!("1370000000{i}")).await);
    }
    let voucher = create_voucher(&http, &base, 1000, -60, 3600).await;
    let (status, _) = call(
        http.post(format!("{base}/lab/stock"))
            .json(&serde_json::json!({"stock": 1000})),
    )
    .await;
    assert_eq!(status, 200);
    Shop {
        cluster,
        base,
        http,
        buyers,
        voucher,
        _db: db,
    }
}

/// One request of every route that needs Redis; `n` picks the phone of a new user and
/// the buyer. The first two reach Redis first through the ferrisson client (an id),
/// the others through the service's own connection.
fn redis_routes(shop: &Shop, n: usize) -> Vec<(String, reqwest::RequestBuilder)> {
    let (http, base, voucher) = (&shop.http, &shop.base, shop.voucher);
    vec![
        (
            "POST /vouchers".into(),
            http.post(format!("{base}/vouchers"))
                .json(&serde_json::json!({
                    "title": "t", "stock": 1,
                    "begin_time": "2020-01-01T00:00:00Z", "end_time": "2100-01-01T00:00:00Z",
                })),
        ),
        ("GET /health".into(), http.get(format!("{base}/health"))),
        (
            "POST /users/login (existing user)".into(),
            http.post(format!("{base}/users/login"))
                .json(&serde_json::json!({"phone": "13700000000"})),
        ),
        (
            "POST /users/login (new user)".into(),
            http.post(format!("{base}/users/login"))
                .json(&serde_json::json!({"phone": format!("1360000{n:04}")})),
        ),
        (
            "POST /vouchers/{id}/seckill".into(),
            http.post(format!("{base}/vouchers/{voucher}/seckill"))
                .bearer_auth(&shop.buyers[n % shop.buyers.len()]),
        ),
        (
            "GET /lab/stock".into(),
            http.get(format!("{base}/lab/stock")),
        ),
        (
            "POST /lab/stock".into(),
            http.post(format!("{base}/lab/stock"))
                .json(&serde_json::json!({"stock": 1000})),
        ),
        (
            "POST /lab/deduct/naive".into(),
            http.post(format!("{base}/lab/deduct/naive")),
        ),
        (
            "POST /lab/deduct/lua-atomic".into(),
            http.post(format!("{base}/lab/deduct/lua-atomic")),
        ),
        (
            "POST /lab/deduct/watchdog".into(),
            http.post(format!("{base}/lab/deduct/watchdog")),
        ),
        (
            "POST /lab/deduct/token-lua".into(),
            http.post(format!("{base}/lab/deduct/token-lua")),
        ),
        (
            "POST /lab/deduct/set-nx-ex".into(),
            http.post(format!("{base}/lab/deduct/set-nx-ex")),
        ),
    ]
}

/// Every Redis route, `PARALLEL` times at once: each answers 503 `UNAVAILABLE` within
/// [`ANSWER_WITHIN`].
async fn all_unavailable_in_time(shop: &Shop, what: &str) {
    let requests = (0..PARALLEL).flat_map(|n| redis_routes(shop, n));
    let replies = join_all(requests.map(|(route, request)| async move {
        let sent = Instant::now();
        let (status, body) = call(request).await;
        (route, status, body, sent.elapsed())
    }))
    .await;
    for (route, status, body, took) in replies {
        assert_eq!(
            (status, body["code"].as_str()),
            (503, Some("UNAVAILABLE")),
            "{what}: {route}: {body}"
        );
        assert!(
            took < ANSWER_WITHIN,
            "{what}: {route} answered after {took:?}: {body}"
        );
    }
}

/// Once Redis is back, the first request of every route succeeds; `round` picks a buyer
/// who has not ordered yet.
async fn all_succeed(shop: &Shop, round: usize, what: &str) {
    for (route, request) in redis_routes(shop, 1000 + round) {
        let (status, body) = call(request).await;
        assert_eq!(status, 200, "{what}: first {route} after recovery: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_redis() {
    let redis = RedisServer::start().expect("redis-server");
    let shop = shop(&redis, &redis.url()).await;
    redis.pause().expect("SIGSTOP");
    all_unavailable_in_time(&shop, "redis paused").await;
    redis.resume().expect("SIGCONT");
    all_succeed(&shop, 0, "redis resumed").await;
    shop.cluster.stop().await.expect("graceful shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_redis() {
    // Kept on disk, so that the restarted server still has the tokens and id counters.
    let mut redis =
        RedisServer::start_with_args(&["--appendonly", "yes", "--appendfsync", "always"])
            .expect("redis-server");
    let shop = shop(&redis, &redis.url()).await;
    redis.kill().expect("kill");
    all_unavailable_in_time(&shop, "redis down").await;
    // Down for a while: every reconnection attempt made meanwhile has failed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    redis.restart().expect("restart");
    all_succeed(&shop, 0, "redis restarted").await;
    shop.cluster.stop().await.expect("graceful shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_off_redis() {
    let redis = RedisServer::start().expect("redis-server");
    let proxy = FaultProxy::start(redis.port()).await.expect("proxy");
    let shop = shop(&redis, &proxy.url()).await;
    let control = proxy.control();
    // A partition: nothing gets through, connections stay open.
    control.set_blackhole(true);
    all_unavailable_in_time(&shop, "partitioned").await;
    control.set_blackhole(false);
    all_succeed(&shop, 0, "partition healed").await;
    // A partition that outlasted TCP: every connection is reset.
    control.set_blackhole(true);
    control.reset_all();
    all_unavailable_in_time(&shop, "partitioned, connections reset").await;
    control.set_blackhole(false);
    all_succeed(&shop, 1, "partition healed after the resets").await;
    shop.cluster.stop().await.expect("graceful shutdown");
}

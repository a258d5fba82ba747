//! The voucher rules against two `seckill serve` processes sharing one Redis and
//! one database: the sale window, sold out, one order per user with concurrent buyers,
//! stock never below zero. Runs on SQLite, and on PostgreSQL / MariaDB when configured.

mod common;

use std::collections::HashMap;

use common::{call, cluster, create_voucher, databases, http, instance_args, login};
use ferrisson_testkit::RedisServer;
use futures_util::future::join_all;
use seckill::OrderFlow;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn voucher_rules_on_every_backend() {
    for db in databases("voucher_rules_on_every_backend").await {
        eprintln!("voucher rules on {} (lock flow)", db.backend);
        voucher_rules(&db.url, OrderFlow::Lock, &[]).await;
        db.cleanup().await;
    }
}

/// The same rules through the Lua flow (stock and buyers in Redis, then the database).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn voucher_rules_lua_flow() {
    let db = common::TestDb::sqlite();
    voucher_rules(&db.url, OrderFlow::Lua, &[]).await;
}

/// The same rules through the lock flow with `--coalesce-calls`: the lock calls that
/// concurrent buyers make at once go to Redis in batches, and every rule still holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn voucher_rules_with_coalesced_lock_calls() {
    let db = common::TestDb::sqlite();
    voucher_rules(&db.url, OrderFlow::Lock, &["--coalesce-calls"]).await;
}

#[allow(clippy::too_many_lines)] // one scenario, step by step
async fn voucher_rules(database: &str, flow: OrderFlow, extra_args: &[&str]) {
    let redis = RedisServer::start().expect("redis-server");
    let mut args = instance_args(&redis, database, flow);
    args.extra_args = extra_args.iter().map(|&arg| arg.to_owned()).collect();
    let cluster = cluster(2, &args).await;
    let (a, b) = (&cluster.urls()[0], &cluster.urls()[1]);
    let http = http();

    // A token issued by one instance is valid on the other (tokens live in Redis).
    let token = login(&http, a, "13800000001").await;

    // Window: not started, ended.
    let future = create_voucher(&http, a, 10, 3600, 7200).await;
    let (status, body) = call(
        http.post(format!("{b}/vouchers/{future}/seckill"))
            .bearer_auth(&token),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("NOT_STARTED")),
        "{body}"
    );
    let past = create_voucher(&http, a, 10, -7200, -3600).await;
    let (status, body) = call(
        http.post(format!("{b}/vouchers/{past}/seckill"))
            .bearer_auth(&token),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("ENDED")),
        "{body}"
    );

    // No stock at all.
    let empty = create_voucher(&http, a, 0, -60, 3600).await;
    let (status, body) = call(
        http.post(format!("{a}/vouchers/{empty}/seckill"))
            .bearer_auth(&token),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("SOLD_OUT")),
        "{body}"
    );

    // One order per user, sequentially.
    let open = create_voucher(&http, a, 10, -60, 3600).await;
    let (status, body) = call(
        http.post(format!("{a}/vouchers/{open}/seckill"))
            .bearer_auth(&token),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let first_order = common::id(&body["order_id"]);
    let (status, body) = call(
        http.post(format!("{b}/vouchers/{open}/seckill"))
            .bearer_auth(&token),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("ALREADY_ORDERED")),
        "{body}"
    );
    let (_, orders) = call(http.get(format!("{b}/vouchers/{open}/orders"))).await;
    let orders = orders["orders"].as_array().expect("orders");
    assert_eq!(orders.len(), 1);
    assert_eq!(common::id(&orders[0]["id"]), first_order);
    assert_eq!(common::id(&orders[0]["voucher_id"]), open);

    // Concurrent buyers across both instances: 30 users x 3 attempts at once, stock 8.
    let stock = 8;
    let hot = create_voucher(&http, b, stock, -60, 3600).await;
    let tokens: Vec<String> = join_all((0..30).map(|i| {
        let http = http.clone();
        let base = if i % 2 == 0 { a.clone() } else { b.clone() };
        async move { login(&http, &base, &format!("139{i:08}")).await }
    }))
    .await;
    let attempts = tokens.iter().enumerate().flat_map(|(u, token)| {
        (0..3).map(move |k| {
            let base = if (u + k) % 2 == 0 {
                a.clone()
            } else {
                b.clone()
            };
            (base, token.clone())
        })
    });
    let replies = join_all(attempts.map(|(base, token)| {
        let http = http.clone();
        async move {
            call(
                http.post(format!("{base}/vouchers/{hot}/seckill"))
                    .bearer_auth(&token),
            )
            .await
        }
    }))
    .await;
    let mut codes: HashMap<String, usize> = HashMap::new();
    for (status, body) in &replies {
        assert!(*status < 500, "no 5xx: {status} {body}");
        let code = if *status == 200 {
            "created".to_owned()
        } else {
            body["code"].as_str().unwrap_or("?").to_owned()
        };
        *codes.entry(code).or_default() += 1;
    }
    assert_eq!(
        codes.get("created"),
        Some(&(stock as usize)),
        "replies: {codes:?}"
    );
    let (_, voucher) = call(http.get(format!("{a}/vouchers/{hot}"))).await;
    assert_eq!(voucher["stock"].as_i64(), Some(0), "{voucher}");
    let (_, orders) = call(http.get(format!("{b}/vouchers/{hot}/orders"))).await;
    let orders = orders["orders"].as_array().expect("orders");
    assert_eq!(orders.len(), stock as usize);
    let mut per_user: HashMap<i64, usize> = HashMap::new();
    for o in orders {
        *per_user.entry(common::id(&o["user_id"])).or_default() += 1;
    }
    assert!(
        per_user.values().all(|&n| n == 1),
        "one order per user: {per_user:?}"
    );
    let ids: std::collections::HashSet<i64> = orders.iter().map(|o| common::id(&o["id"])).collect();
    assert_eq!(ids.len(), orders.len(), "order ids are unique");

    cluster
        .stop()
        .await
        .expect("graceful shutdown: exit 0 after SIGTERM");
}

/// With the order lock off, the unique (user, voucher) index alone still refuses a
/// second order: defence in depth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_index_backs_up_the_lock() {
    let db = common::TestDb::sqlite();
    let redis = RedisServer::start().expect("redis-server");
    let cluster = cluster(2, &instance_args(&redis, &db.url, OrderFlow::NoLock)).await;
    let (a, b) = (&cluster.urls()[0], &cluster.urls()[1]);
    let http = http();
    let voucher = create_voucher(&http, a, 100, -60, 3600).await;
    let tokens: Vec<String> = join_all((0..10).map(|i| {
        let http = http.clone();
        let a = a.clone();
        async move { login(&http, &a, &format!("137{i:08}")).await }
    }))
    .await;
    let replies = join_all(
        tokens
            .iter()
            .flat_map(|t| [(a, t), (b, t), (a, t), (b, t)])
            .map(|(base, token)| {
                let http = http.clone();
                async move {
                    call(
                        http.post(format!("{base}/vouchers/{voucher}/seckill"))
                            .bearer_auth(token),
                    )
                    .await
                }
            }),
    )
    .await;
    assert!(replies.iter().all(|(s, _)| *s < 500), "no 5xx: {replies:?}");
    let (_, orders) = call(http.get(format!("{a}/vouchers/{voucher}/orders"))).await;
    let orders = orders["orders"].as_array().expect("orders");
    assert_eq!(orders.len(), 10, "exactly one order per user: {orders:?}");
    let (_, v) = call(http.get(format!("{b}/vouchers/{voucher}"))).await;
    assert_eq!(
        v["stock"].as_i64(),
        Some(90),
        "a refused duplicate gives its unit back"
    );
    cluster
        .stop()
        .await
        .expect("graceful shutdown: exit 0 after SIGTERM");
}

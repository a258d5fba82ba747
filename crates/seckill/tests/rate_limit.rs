//! One user's buy attempts are limited per second across two `seckill serve` instances
//! sharing one Redis: over the limit, 429 `RATE_LIMITED` with `Retry-After`.

mod common;

use std::time::{Duration, Instant};

use common::{cluster, create_voucher, http, instance_args, login};
use ferrisson_testkit::RedisServer;
use futures_util::future::join_all;
use seckill::OrderFlow;

/// Status, `Retry-After` (seconds) and JSON body of one buy attempt.
async fn attempt(
    http: &reqwest::Client,
    base: &str,
    voucher: i64,
    token: &str,
) -> (u16, Option<u64>, serde_json::Value) {
    let reply = http
        .post(format!("{base}/vouchers/{voucher}/seckill"))
        .bearer_auth(token)
        .send()
        .await
        .expect("request sent");
    let status = reply.status().as_u16();
    let retry_after = reply
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let body = reply.json().await.unwrap_or(serde_json::Value::Null);
    (status, retry_after, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_buy_limit_holds_across_two_instances() {
    let db = common::TestDb::sqlite();
    let redis = RedisServer::start().expect("redis-server");
    let mut args = instance_args(&redis, &db.url, OrderFlow::Lock);
    args.extra_args = vec!["--buy-rate".into(), "2".into()];
    let cluster = cluster(2, &args).await;
    let (a, b) = (&cluster.urls()[0], &cluster.urls()[1]);
    let http = http();
    let voucher = create_voucher(&http, a, 100, -60, 3600).await;
    let token = login(&http, a, "13600000001").await;

    // Twelve attempts at once, alternating between the instances.
    let started = Instant::now();
    let replies = join_all((0..12).map(|i| {
        let base = if i % 2 == 0 { a } else { b };
        attempt(&http, base, voucher, &token)
    }))
    .await;
    let elapsed = started.elapsed().as_secs_f64();
    assert!(
        replies.iter().all(|(s, _, _)| *s < 500),
        "no 5xx: {replies:?}"
    );
    let limited: Vec<_> = replies.iter().filter(|(s, _, _)| *s == 429).collect();
    let passed = replies.len() - limited.len();
    // A bucket of 2, refilled at 2 a second, whichever instance counts.
    assert!(passed >= 2, "the burst passes: {replies:?}");
    assert!(
        passed as f64 <= 2.0 + 2.0 * elapsed,
        "{passed} attempts passed in {elapsed:.2} s at 2 a second: {replies:?}"
    );
    for (status, retry_after, body) in &limited {
        assert_eq!(*status, 429);
        assert_eq!(body["code"], "RATE_LIMITED", "{body}");
        assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
        assert!(
            *retry_after == Some(1),
            "Retry-After in whole seconds, rounded up from at most one refill (0.5 s): {retry_after:?}"
        );
    }
    let orders = replies.iter().filter(|(s, _, _)| *s == 200).count();
    assert_eq!(orders, 1, "one order per user: {replies:?}");

    // Another user is not limited by this one.
    let other = login(&http, b, "13600000002").await;
    let (status, _, body) = attempt(&http, b, voucher, &other).await;
    assert_eq!(status, 200, "{body}");

    // After the wait it was told, the user is let through again (to a 409: one order).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (status, _, body) = attempt(&http, a, voucher, &token).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["code"], "ALREADY_ORDERED");

    cluster
        .stop()
        .await
        .expect("graceful shutdown: exit 0 after SIGTERM");
}

//! `GET /metrics` on a running `seckill serve`: after a buy, the Prometheus text shows the
//! order lock's metrics and the request that took it.

mod common;

use common::{TestDb, call, cluster, create_voucher, http, instance_args, login};
use ferrisson_testkit::RedisServer;
use seckill::OrderFlow;

/// The value of the sample `series` (name and labels exactly as the exporter prints
/// them), if the text has it.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|value| value.trim().parse().expect("a number"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_the_order_lock_after_a_buy() {
    let redis = RedisServer::start().expect("redis-server");
    let db = TestDb::sqlite();
    let cluster = cluster(1, &instance_args(&redis, &db.url, OrderFlow::Lock)).await;
    let base = &cluster.urls()[0];
    let http = http();

    let token = login(&http, base, "13800000042").await;
    let voucher = create_voucher(&http, base, 5, -60, 3600).await;
    let (status, body) = call(
        http.post(format!("{base}/vouchers/{voucher}/seckill"))
            .bearer_auth(&token),
    )
    .await;
    assert_eq!(status, 200, "{body}");

    let reply = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("GET /metrics");
    assert_eq!(reply.status().as_u16(), 200);
    let content_type = reply.headers()["content-type"].to_str().expect("ascii");
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let text = reply.text().await.expect("the metrics text");

    // The buy took the user's order lock once, at once, and released it.
    let lock = r#"{store="redis",primitive="lock"}"#;
    assert_eq!(
        sample(&text, &format!("ferrisson_acquisitions_total{lock}")),
        Some(1.0),
        "{text}"
    );
    assert_eq!(sample(&text, &format!("ferrisson_holds{lock}")), Some(0.0));
    assert_eq!(
        sample(&text, &format!("ferrisson_hold_seconds_count{lock}")),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"ferrisson_acquire_wait_seconds_count{primitive="lock",outcome="acquired"}"#
        ),
        Some(1.0)
    );
    assert!(text.contains("# TYPE ferrisson_hold_seconds histogram"));
    assert!(text.contains("# HELP ferrisson_acquisitions_total "));

    // The service's own request metrics, by route pattern rather than voucher id.
    let buy = r#"{method="POST",route="/vouchers/{id}/seckill",status="200"}"#;
    assert_eq!(
        sample(&text, &format!("seckill_http_requests_total{buy}")),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            &format!("seckill_http_request_duration_seconds_count{buy}")
        ),
        Some(1.0)
    );
    assert!(text.contains("# TYPE seckill_http_request_duration_seconds histogram"));
}

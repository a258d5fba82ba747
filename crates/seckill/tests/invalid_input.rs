//! Bad input gets a 4xx with a stable code, never a 5xx.

mod common;

use common::{call, cluster, create_voucher, http, instance_args, login};
use ferrisson_testkit::RedisServer;
use seckill::OrderFlow;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)] // one table of cases
async fn bad_input_is_a_coded_4xx() {
    let db = common::TestDb::sqlite();
    let redis = RedisServer::start().expect("redis-server");
    let cluster = cluster(1, &instance_args(&redis, &db.url, OrderFlow::Lock)).await;
    let base = &cluster.urls()[0];
    let http = http();
    let token = login(&http, base, "13512345678").await;
    let voucher = create_voucher(&http, base, 5, -60, 3600).await;
    let json = |path: &str, body: serde_json::Value| http.post(format!("{base}{path}")).json(&body);
    let raw = |path: &str, body: &'static str| {
        http.post(format!("{base}{path}"))
            .header("content-type", "application/json")
            .body(body)
    };
    let now = chrono::Utc::now();
    let window = |b: i64, e: i64| {
        (
            (now + chrono::Duration::seconds(b)).to_rfc3339(),
            (now + chrono::Duration::seconds(e)).to_rfc3339(),
        )
    };
    let (b0, e0) = window(0, 60);
    let (b1, e1) = window(60, 0);

    let cases: Vec<(&str, reqwest::RequestBuilder, u16, &str)> = vec![
        (
            "bad phone",
            json("/users/login", serde_json::json!({"phone": "12345"})),
            400,
            "INVALID_PHONE",
        ),
        (
            "phone with letters",
            json("/users/login", serde_json::json!({"phone": "1380013800a"})),
            400,
            "INVALID_PHONE",
        ),
        (
            "phone missing",
            json("/users/login", serde_json::json!({})),
            400,
            "MALFORMED_JSON",
        ),
        (
            "malformed json",
            raw("/users/login", "{\"phone\": "),
            400,
            "MALFORMED_JSON",
        ),
        (
            "no content type",
            http.post(format!("{base}/users/login")).body("{}"),
            415,
            "UNSUPPORTED_MEDIA_TYPE",
        ),
        (
            "text content type",
            http.post(format!("{base}/users/login"))
                .header("content-type", "text/plain")
                .body(r#"{"phone": "13800138000"}"#),
            415,
            "UNSUPPORTED_MEDIA_TYPE",
        ),
        (
            "GET on a POST route",
            http.get(format!("{base}/users/login")),
            405,
            "METHOD_NOT_ALLOWED",
        ),
        (
            "DELETE on a voucher",
            http.delete(format!("{base}/vouchers/{voucher}")),
            405,
            "METHOD_NOT_ALLOWED",
        ),
        (
            "an id beyond 64 bits",
            http.get(format!("{base}/vouchers/99999999999999999999")),
            400,
            "INVALID_PATH",
        ),
        (
            "negative stock",
            json(
                "/vouchers",
                serde_json::json!({"title": "t", "stock": -1, "begin_time": b0, "end_time": e0}),
            ),
            400,
            "INVALID_INPUT",
        ),
        (
            "end before begin",
            json(
                "/vouchers",
                serde_json::json!({"title": "t", "stock": 1, "begin_time": b1, "end_time": e1}),
            ),
            400,
            "INVALID_INPUT",
        ),
        (
            "empty title",
            json(
                "/vouchers",
                serde_json::json!({"title": "  ", "stock": 1, "begin_time": b0, "end_time": e0}),
            ),
            400,
            "INVALID_INPUT",
        ),
        (
            "time not RFC 3339",
            json(
                "/vouchers",
                serde_json::json!({"title": "t", "stock": 1, "begin_time": "yesterday", "end_time": e0}),
            ),
            400,
            "MALFORMED_JSON",
        ),
        (
            "stock not a number",
            json(
                "/vouchers",
                serde_json::json!({"title": "t", "stock": "ten", "begin_time": b0, "end_time": e0}),
            ),
            400,
            "MALFORMED_JSON",
        ),
        (
            "unknown voucher",
            http.get(format!("{base}/vouchers/42")),
            404,
            "VOUCHER_NOT_FOUND",
        ),
        (
            "unknown voucher orders",
            http.get(format!("{base}/vouchers/42/orders")),
            404,
            "VOUCHER_NOT_FOUND",
        ),
        (
            "seckill unknown voucher",
            http.post(format!("{base}/vouchers/42/seckill"))
                .bearer_auth(&token),
            404,
            "VOUCHER_NOT_FOUND",
        ),
        (
            "non-numeric id",
            http.get(format!("{base}/vouchers/abc")),
            400,
            "INVALID_PATH",
        ),
        (
            "seckill without token",
            http.post(format!("{base}/vouchers/{voucher}/seckill")),
            401,
            "UNAUTHORIZED",
        ),
        (
            "seckill with unknown token",
            http.post(format!("{base}/vouchers/{voucher}/seckill"))
                .bearer_auth("nope"),
            401,
            "UNAUTHORIZED",
        ),
        (
            "seckill with basic auth",
            http.post(format!("{base}/vouchers/{voucher}/seckill"))
                .basic_auth("u", Some("p")),
            401,
            "UNAUTHORIZED",
        ),
        (
            "unknown lab variant",
            http.post(format!("{base}/lab/deduct/spinlock")),
            404,
            "UNKNOWN_VARIANT",
        ),
        (
            "deduct before stock set",
            http.post(format!("{base}/lab/deduct/naive")),
            409,
            "STOCK_NOT_SET",
        ),
        (
            "negative lab stock",
            json("/lab/stock", serde_json::json!({"stock": -5})),
            400,
            "INVALID_INPUT",
        ),
        (
            "unknown route",
            http.get(format!("{base}/nothing/here")),
            404,
            "NOT_FOUND",
        ),
    ];
    for (what, request, status, code) in cases {
        let (got, body) = call(request).await;
        assert_eq!(
            (got, body["code"].as_str()),
            (status, Some(code)),
            "{what}: {body}"
        );
        assert!(
            body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}: a message"
        );
    }
    // Oversized bodies: 413 as soon as the declared length is over the limit, and
    // after the limit when the body comes in chunks without a length. Sent over a bare
    // socket: an HTTP client still writing the rest of a 10 MB body when the service
    // answers and closes would report the broken pipe instead of the reply.
    let addr = base.trim_start_matches("http://");
    let head = "POST /users/login HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n";
    let ten_mb = format!("{head}content-length: {}\r\n\r\n", 10 * 1024 * 1024);
    let chunked = format!("{head}transfer-encoding: chunked\r\n\r\n");
    let chunk = format!("4000\r\n{}\r\n", " ".repeat(0x4000));
    for (what, request) in [
        (
            "a 10 MB body",
            format!("{ten_mb}{}", " ".repeat(100 * 1024)),
        ),
        (
            "a chunked body over the limit",
            format!("{chunked}{}", chunk.repeat(8)),
        ),
    ] {
        let (status, body) = common::raw_request(addr, request.as_bytes()).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (413, Some("PAYLOAD_TOO_LARGE")),
            "{what}: {body}"
        );
    }

    // 405 says which methods the route has.
    let reply = http
        .delete(format!("{base}/vouchers/{voucher}"))
        .send()
        .await
        .expect("request sent");
    assert_eq!(
        reply.headers().get("allow").and_then(|v| v.to_str().ok()),
        Some("GET,HEAD")
    );

    // The auth scheme is case-insensitive.
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let other = create_voucher(&http, base, 1, -60, 3600).await;
        let (status, body) = call(
            http.post(format!("{base}/vouchers/{other}/seckill"))
                .header("authorization", format!("{scheme} {token}")),
        )
        .await;
        assert_eq!(status, 200, "{scheme}: {body}");
    }

    // The voucher is untouched by all of that.
    let (status, v) = call(http.get(format!("{base}/vouchers/{voucher}"))).await;
    assert_eq!((status, v["stock"].as_i64()), (200, Some(5)));
    cluster
        .stop()
        .await
        .expect("graceful shutdown: exit 0 after SIGTERM");
}

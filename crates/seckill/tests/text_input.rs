//! Free text is checked before it reaches the database, the same way on every
//! database: NUL and the other refused characters are a 400 on SQLite, PostgreSQL and
//! MariaDB alike, and any script (CJK, emoji) is stored as given. The 400 texts speak
//! of the body's fields, never of the parser's types.

mod common;

use common::{call, cluster, http, instance_args};
use ferrisson_testkit::RedisServer;
use seckill::OrderFlow;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_text_is_a_400_on_every_database() {
    let redis = RedisServer::start().expect("redis-server");
    for db in common::databases("refused_text_is_a_400_on_every_database").await {
        let cluster = cluster(1, &instance_args(&redis, &db.url, OrderFlow::Lock)).await;
        let base = &cluster.urls()[0];
        let http = http();
        let now = chrono::Utc::now();
        let voucher = |title: &str| {
            http.post(format!("{base}/vouchers"))
                .json(&serde_json::json!({
                    "title": title,
                    "stock": 1,
                    "begin_time": now.to_rfc3339(),
                    "end_time": (now + chrono::Duration::hours(1)).to_rfc3339(),
                }))
        };
        for bad in [
            "nul\0inside",
            "line\nbreak",
            "\u{1b}[2Jclear",
            "rtl\u{202e}txt",
            "\u{fffe}",
        ] {
            let (status, body) = call(voucher(bad)).await;
            assert_eq!(
                (status, body["code"].as_str()),
                (400, Some("INVALID_INPUT")),
                "{}: {bad:?}: {body}",
                db.backend
            );
        }
        for good in ["秒杀 代金券", "🎟️ 50% off", "Ünïcødé café"] {
            let (status, body) = call(voucher(good)).await;
            assert_eq!(status, 200, "{}: {good:?}: {body}", db.backend);
            let id = common::id(&body["id"]);
            let (_, shown) = call(http.get(format!("{base}/vouchers/{id}"))).await;
            assert_eq!(shown["title"], good, "{}: stored as given", db.backend);
        }
        cluster.stop().await.expect("exit 0 after SIGTERM");
        db.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_are_explained_in_the_apis_words() {
    let db = common::TestDb::sqlite();
    let redis = RedisServer::start().expect("redis-server");
    let cluster = cluster(1, &instance_args(&redis, &db.url, OrderFlow::Lock)).await;
    let base = &cluster.urls()[0];
    let http = http();
    let raw = |path: &str, body: &'static str| {
        http.post(format!("{base}{path}"))
            .header("content-type", "application/json")
            .body(body)
    };
    let cases = [
        (
            "/vouchers",
            "[]",
            "a JSON object with `title`, `stock`, `begin_time` and `end_time`",
        ),
        ("/vouchers", "\"text\"", "a JSON object with"),
        ("/vouchers", "", "empty"),
        ("/vouchers", "{\"title\": ", "ends early"),
        (
            "/vouchers",
            "{\"title\" 1}",
            "not valid JSON (line 1, column 10)",
        ),
        (
            "/vouchers",
            "{\"title\": \"t\", \"stock\": 1}",
            "`begin_time` is missing",
        ),
        (
            "/vouchers",
            "{\"title\": \"t\", \"stock\": \"ten\", \"begin_time\": \"2026-01-01T00:00:00Z\", \"end_time\": \"2026-01-02T00:00:00Z\"}",
            "`stock` must be an integer",
        ),
        (
            "/vouchers",
            "{\"title\": \"t\", \"stock\": 1, \"begin_time\": \"yesterday\", \"end_time\": \"2026-01-02T00:00:00Z\"}",
            "`begin_time` must be a time in RFC 3339",
        ),
        (
            "/users/login",
            "{\"phone\": 13800138000}",
            "`phone` must be an 11-digit mobile number as a string",
        ),
        (
            "/lab/stock",
            "{\"stock\": 1.5}",
            "`stock` must be an integer",
        ),
        ("/lab/stock", "{}", "`stock` is missing"),
    ];
    // The parser's own words, which the API must not show.
    let internals = [
        "struct",
        "invalid length",
        "invalid type",
        "expected",
        "i64",
        "at line",
        "EOF",
        "Failed to",
    ];
    for (path, body, expected) in cases {
        let (status, reply) = call(raw(path, body)).await;
        let message = reply["message"].as_str().unwrap_or_default();
        assert_eq!(
            (status, reply["code"].as_str()),
            (400, Some("MALFORMED_JSON")),
            "{path} {body:?}: {reply}"
        );
        assert!(message.contains(expected), "{path} {body:?}: {message:?}");
        for word in internals {
            assert!(
                !message.contains(word),
                "{path} {body:?}: {message:?} shows {word:?}"
            );
        }
    }
    let (status, reply) = call(http.get(format!("{base}/vouchers/abc"))).await;
    assert_eq!(
        (status, reply["code"].as_str()),
        (400, Some("INVALID_PATH"))
    );
    assert_eq!(
        reply["message"],
        "invalid path: the path parameter must be an id: a decimal integer of at most 64 bits"
    );
    cluster.stop().await.expect("exit 0 after SIGTERM");
}

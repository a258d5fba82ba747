//! The routes the shop page stands on, over HTTP: `GET /vouchers` (the newest vouchers
//! with live stock and window, on every database backend configured), the purchase
//! counter by outcome in `GET /metrics`, and the page's three files with their headers.

mod common;

use common::{TestDb, call, cluster, create_voucher, databases, http, instance_args, login};
use ferrisson_testkit::RedisServer;
use seckill::OrderFlow;
use seckill::http::voucher_list::MAX_LISTED;

/// The value of the sample `series` (name and labels exactly as the exporter prints
/// them), if the text has it.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|value| value.trim().parse().expect("a number"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listing_shows_the_newest_vouchers_with_live_stock() {
    for db in databases("the_listing_shows_the_newest_vouchers_with_live_stock").await {
        eprintln!("the listing on {}", db.backend);
        listing(&db.url).await;
        db.cleanup().await;
    }
}

async fn listing(database: &str) {
    let redis = RedisServer::start().expect("redis-server");
    let cluster = cluster(1, &instance_args(&redis, database, OrderFlow::Lock)).await;
    let base = &cluster.urls()[0];
    let http = http();

    let (status, body) = call(http.get(format!("{base}/vouchers"))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["vouchers"], serde_json::json!([]));
    let server_time = body["server_time"].as_str().expect("server_time");
    let server_time = chrono::DateTime::parse_from_rfc3339(server_time).expect("RFC 3339");
    let skew = (chrono::Utc::now() - server_time.to_utc())
        .num_seconds()
        .abs();
    assert!(skew < 60, "the service's clock is this machine's: {skew} s");

    let first = create_voucher(&http, base, 2, -60, 3600).await;
    let second = create_voucher(&http, base, 5, 3600, 7200).await;
    let (_, shown) = call(http.get(format!("{base}/vouchers/{first}"))).await;
    let (status, body) = call(http.get(format!("{base}/vouchers"))).await;
    assert_eq!(status, 200, "{body}");
    let listed = body["vouchers"].as_array().expect("vouchers");
    let ids: Vec<i64> = listed.iter().map(|v| common::id(&v["id"])).collect();
    assert_eq!(ids, [second, first], "newest first");
    assert_eq!(listed[1], shown, "as GET /vouchers/{{id}} shows it");
    assert_eq!(listed[0]["stock"], 5);

    // The stock is the database's, now.
    let token = login(&http, base, "13800000007").await;
    let (status, body) = call(
        http.post(format!("{base}/vouchers/{first}/seckill"))
            .bearer_auth(&token),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (_, body) = call(http.get(format!("{base}/vouchers"))).await;
    assert_eq!(body["vouchers"][1]["stock"], 1);

    // At most MAX_LISTED, the newest.
    let mut newest = 0;
    for _ in 0..MAX_LISTED {
        newest = create_voucher(&http, base, 1, -60, 3600).await;
    }
    let (_, body) = call(http.get(format!("{base}/vouchers"))).await;
    let listed = body["vouchers"].as_array().expect("vouchers");
    assert_eq!(listed.len() as i64, MAX_LISTED);
    assert_eq!(common::id(&listed[0]["id"]), newest);
    assert!(
        listed
            .iter()
            .all(|v| ![first, second].contains(&common::id(&v["id"]))),
        "the oldest two are left out"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purchases_are_counted_by_outcome() {
    let redis = RedisServer::start().expect("redis-server");
    let db = TestDb::sqlite();
    let cluster = cluster(1, &instance_args(&redis, &db.url, OrderFlow::Lock)).await;
    let base = &cluster.urls()[0];
    let http = http();

    // Stock 2: the stock is checked before the buyer's earlier order.
    let voucher = create_voucher(&http, base, 2, -60, 3600).await;
    let buy = |token: Option<String>| {
        let request = http.post(format!("{base}/vouchers/{voucher}/seckill"));
        call(match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        })
    };
    let first = login(&http, base, "13800000011").await;
    let second = login(&http, base, "13800000012").await;
    let third = login(&http, base, "13800000013").await;
    let replies = [
        buy(Some(first.clone())).await,
        buy(Some(first)).await,
        buy(Some(second)).await,
        buy(Some(third)).await,
        buy(None).await,
    ];
    let codes: Vec<(u16, Option<&str>)> = replies
        .iter()
        .map(|(status, body)| (*status, body["code"].as_str()))
        .collect();
    assert_eq!(
        codes,
        [
            (200, None),
            (409, Some("ALREADY_ORDERED")),
            (200, None),
            (409, Some("SOLD_OUT")),
            (401, Some("UNAUTHORIZED")),
        ]
    );
    // Other routes are not purchases.
    let (status, _) = call(http.get(format!("{base}/vouchers/{voucher}"))).await;
    assert_eq!(status, 200);

    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("the metrics text");
    for (outcome, n) in [
        ("ORDERED", 2.0),
        ("ALREADY_ORDERED", 1.0),
        ("SOLD_OUT", 1.0),
        ("UNAUTHORIZED", 1.0),
    ] {
        let series = format!(r#"seckill_purchases_total{{outcome="{outcome}"}}"#);
        assert_eq!(sample(&text, &series), Some(n), "{series}\n{text}");
    }
    let series = text
        .lines()
        .filter(|l| l.starts_with("seckill_purchases_total{"))
        .count();
    assert_eq!(series, 4, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_its_files_are_served_from_the_binary() {
    let redis = RedisServer::start().expect("redis-server");
    let db = TestDb::sqlite();
    let cluster = cluster(1, &instance_args(&redis, &db.url, OrderFlow::Lock)).await;
    let base = &cluster.urls()[0];
    let http = http();

    for (path, content_type, holds) in [
        ("/", "text/html; charset=utf-8", r#"<script src="/shop.js""#),
        ("/shop.css", "text/css; charset=utf-8", ".voucher"),
        ("/shop.js", "text/javascript; charset=utf-8", "/vouchers"),
    ] {
        let reply = http.get(format!("{base}{path}")).send().await.expect("GET");
        assert_eq!(reply.status().as_u16(), 200, "{path}");
        let header = |name: &str| {
            reply
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(header("content-type"), content_type, "{path}");
        assert_eq!(header("x-content-type-options"), "nosniff", "{path}");
        let policy = header("content-security-policy");
        assert!(
            policy.contains("default-src 'none'") && policy.contains("connect-src 'self'"),
            "{path}: {policy}"
        );
        let body = reply.text().await.expect("body");
        assert!(body.contains(holds), "{path}");
        // Nothing from elsewhere: no absolute URL to load.
        assert!(
            !body.contains("https://") && !body.contains("http://"),
            "{path} refers to another origin"
        );
    }
}

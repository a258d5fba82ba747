//! Admin routes: creating vouchers, every buyer's orders and the lab require the admin
//! token; without one configured they are off; a buyer sees only their own orders; the
//! admin's listing comes in pages.

mod common;

use common::{
    ADMIN_TOKEN, anonymous_http, call, cluster, create_voucher, http, instance_args, login,
};
use ferrisson_testkit::RedisServer;
use seckill::OrderFlow;

fn new_voucher() -> serde_json::Value {
    let now = chrono::Utc::now();
    serde_json::json!({
        "title": "admin only",
        "stock": 3,
        "begin_time": (now - chrono::Duration::minutes(1)).to_rfc3339(),
        "end_time": (now + chrono::Duration::hours(1)).to_rfc3339(),
    })
}

/// Every admin route, as requests of `client` (with whatever token it sends).
fn admin_requests(
    client: &reqwest::Client,
    base: &str,
    voucher: &str,
) -> Vec<(String, reqwest::RequestBuilder)> {
    vec![
        (
            "POST /vouchers".into(),
            client.post(format!("{base}/vouchers")).json(&new_voucher()),
        ),
        (
            "POST /lab/stock".into(),
            client
                .post(format!("{base}/lab/stock"))
                .json(&serde_json::json!({"stock": 7})),
        ),
        (
            "GET /lab/stock".into(),
            client.get(format!("{base}/lab/stock")),
        ),
        (
            "POST /lab/deduct/naive".into(),
            client.post(format!("{base}/lab/deduct/naive")),
        ),
        (
            format!("GET /vouchers/{voucher}/orders"),
            client.get(format!("{base}/vouchers/{voucher}/orders")),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_configured_token_the_admin_routes_are_off() {
    let db = common::TestDb::sqlite();
    let redis = RedisServer::start().expect("redis-server");
    let mut args = instance_args(&redis, &db.url, OrderFlow::Lock);
    args.admin_token = None;
    let cluster = cluster(1, &args).await;
    let base = &cluster.urls()[0];
    // Even the token the other tests use opens nothing here.
    for (what, request) in admin_requests(&http(), base, "1").into_iter().take(4) {
        let (status, body) = call(request).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (403, Some("ADMIN_DISABLED")),
            "{what}: {body}"
        );
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.contains("SECKILL_ADMIN_TOKEN")),
            "{what}: says how to turn them on: {body}"
        );
    }
    assert_eq!(
        redis.command(&["EXISTS", "{lab}:stock"]).expect("redis"),
        ":0"
    );
    // The buyer's routes still work.
    login(&http(), base, "13700000001").await;
    cluster.stop().await.expect("exit 0 after SIGTERM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_routes_refuse_a_missing_or_wrong_token() {
    let db = common::TestDb::sqlite();
    let redis = RedisServer::start().expect("redis-server");
    let cluster = cluster(1, &instance_args(&redis, &db.url, OrderFlow::Lock)).await;
    let base = &cluster.urls()[0];
    let admin = http();
    let voucher = create_voucher(&admin, base, 2, -60, 3600).await;
    let buyer_token = login(&admin, base, "13700000002").await;
    let wrong = ADMIN_TOKEN.replace('0', "1");
    for (who, headers) in [
        ("no token", None),
        ("a wrong token", Some(format!("Bearer {wrong}"))),
        (
            "the token one character short",
            Some(format!("Bearer {}", &ADMIN_TOKEN[1..])),
        ),
        (
            "the token as Basic auth",
            Some(format!("Basic {ADMIN_TOKEN}")),
        ),
    ] {
        let client = anonymous_http();
        for (what, mut request) in admin_requests(&client, base, &voucher.to_string())
            .into_iter()
            .take(4)
        {
            if let Some(value) = &headers {
                request = request.header("authorization", value);
            }
            let (status, body) = call(request).await;
            assert_eq!(
                (status, body["code"].as_str()),
                (401, Some("ADMIN_TOKEN_REQUIRED")),
                "{what} with {who}: {body}"
            );
        }
    }
    // A buyer's login token is not the admin token.
    let (status, body) = call(
        anonymous_http()
            .post(format!("{base}/lab/stock"))
            .bearer_auth(&buyer_token)
            .json(&serde_json::json!({"stock": 7})),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (401, Some("ADMIN_TOKEN_REQUIRED")),
        "{body}"
    );
    assert_eq!(
        redis.command(&["EXISTS", "{lab}:stock"]).expect("redis"),
        ":0",
        "nothing was reset"
    );

    // With the token, every admin route answers.
    for (what, request) in admin_requests(&admin, base, &voucher.to_string()) {
        let (status, body) = call(request).await;
        assert_eq!(status, 200, "{what}: {body}");
    }
    cluster.stop().await.expect("exit 0 after SIGTERM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buyers_see_their_own_orders_and_the_admin_pages_through_all() {
    let db = common::TestDb::sqlite();
    let redis = RedisServer::start().expect("redis-server");
    let mut args = instance_args(&redis, &db.url, OrderFlow::Lock);
    args.extra_args = vec!["--buy-rate".into(), "0".into()];
    let cluster = cluster(1, &args).await;
    let base = &cluster.urls()[0];
    let admin = http();
    let voucher = create_voucher(&admin, base, 10, -60, 3600).await;
    let orders_url = format!("{base}/vouchers/{voucher}/orders");
    let mut buyers = Vec::new();
    for n in 0..5 {
        let token = login(&admin, base, &format!("1370000010{n}")).await;
        let (status, body) = call(
            admin
                .post(format!("{base}/vouchers/{voucher}/seckill"))
                .bearer_auth(&token),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        buyers.push((token, common::id(&body["order_id"])));
    }

    // A buyer: their own order, nobody else's.
    for (token, order) in &buyers {
        let (status, body) = call(anonymous_http().get(&orders_url).bearer_auth(token)).await;
        assert_eq!(status, 200, "{body}");
        let orders = body["orders"].as_array().expect("orders");
        assert_eq!(orders.len(), 1, "{body}");
        assert_eq!(common::id(&orders[0]["id"]), *order);
        assert_eq!(body["next"], serde_json::Value::Null);
    }
    let (status, body) = call(anonymous_http().get(&orders_url)).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (401, Some("UNAUTHORIZED")),
        "{body}"
    );

    // The admin: pages of 2, every order once, in id order, then `next: null`.
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let url = match &after {
            Some(a) => format!("{orders_url}?limit=2&after={a}"),
            None => format!("{orders_url}?limit=2"),
        };
        let (status, body) = call(admin.get(url)).await;
        assert_eq!(status, 200, "{body}");
        pages += 1;
        let orders = body["orders"].as_array().expect("orders");
        assert!(orders.len() <= 2, "{body}");
        seen.extend(orders.iter().map(|o| common::id(&o["id"])));
        match body["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => break,
        }
    }
    let mut expected: Vec<i64> = buyers.iter().map(|(_, order)| *order).collect();
    expected.sort_unstable();
    assert_eq!(seen, expected);
    assert_eq!(pages, 3);

    for bad in ["limit=0", "limit=1001", "limit=ten", "after=abc"] {
        let (status, body) = call(admin.get(format!("{orders_url}?{bad}"))).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some("INVALID_INPUT")),
            "{bad}: {body}"
        );
    }
    cluster.stop().await.expect("exit 0 after SIGTERM");
}

/// The admin token, right or wrong, never reaches the log, even at the most verbose
/// level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_token_is_never_logged() {
    use std::process::Stdio;
    use tokio::io::{AsyncBufReadExt as _, BufReader};

    let db = common::TestDb::sqlite();
    let redis = RedisServer::start().expect("redis-server");
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("serve.log");
    let mut child = tokio::process::Command::new(common::binary())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--url",
            &redis.url(),
            "--database",
            &db.url,
        ])
        .env("SECKILL_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("RUST_LOG", "trace")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .kill_on_drop(true)
        .spawn()
        .expect("seckill starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let addr = loop {
        let line = lines
            .next_line()
            .await
            .expect("stdout")
            .expect("a listening line");
        if let Some(addr) = line.strip_prefix(seckill::http::LISTENING_PREFIX) {
            break addr.trim().to_owned();
        }
    };
    let base = format!("http://{addr}");
    let wrong = "wrong-token-but-long-enough-0123";
    let (status, body) = call(http().post(format!("{base}/vouchers")).json(&new_voucher())).await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = call(
        anonymous_http()
            .post(format!("{base}/lab/stock"))
            .bearer_auth(wrong)
            .json(&serde_json::json!({"stock": 1})),
    )
    .await;
    assert_eq!(status, 401);
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id().expect("pid")).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    assert!(child.wait().await.expect("exit").success());
    let text = std::fs::read_to_string(&log).expect("the log");
    assert!(text.contains("POST"), "the log has the requests: {text}");
    assert!(!text.contains(ADMIN_TOKEN), "the admin token is in the log");
    assert!(!text.contains(wrong), "a wrong token is in the log");
}

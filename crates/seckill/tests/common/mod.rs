//! Shared set-up of the seckill integration tests: real redis-server processes from the
//! test kit, a SQLite file in a temporary directory, PostgreSQL and MariaDB databases
//! when `SECKILL_TEST_POSTGRES_URL` / `SECKILL_TEST_MYSQL_URL` are set, and `seckill
//! serve` processes started from the binary cargo built for the tests.

#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use ferrisson_testkit::RedisServer;
use seckill::OrderFlow;
use seckill::oversell::LabConfig;
use seckill_lab::{Cluster, InstanceArgs};
use sqlx::{Connection, Executor};

/// The `seckill` binary under test.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_seckill"))
}

/// A database for one test: created for it, dropped by `cleanup`.
pub struct TestDb {
    pub backend: &'static str,
    pub url: String,
    admin_url: Option<String>,
    drop_sql: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    pub fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("seckill.db").display()
        );
        Self {
            backend: "sqlite",
            url,
            admin_url: None,
            drop_sql: None,
            _dir: Some(dir),
        }
    }

    /// Drops the schema or database this test created (never anything else).
    pub async fn cleanup(self) {
        if let (Some(admin), Some(sql)) = (&self.admin_url, &self.drop_sql) {
            let mut conn = sqlx::AnyConnection::connect(admin)
                .await
                .expect("admin connection");
            conn.execute(sql.as_str()).await.expect("drop test schema");
        }
    }
}

fn unique_name() -> String {
    format!("seckill_t_{:016x}", rand::random::<u64>())
}

/// SQLite always; PostgreSQL and MariaDB/MySQL when their env vars are set. Prints which
/// ran and which were skipped.
pub async fn databases(test: &str) -> Vec<TestDb> {
    sqlx::any::install_default_drivers();
    let mut dbs = vec![TestDb::sqlite()];
    match std::env::var("SECKILL_TEST_POSTGRES_URL") {
        Ok(admin) => {
            let schema = unique_name();
            let mut conn = sqlx::AnyConnection::connect(&admin)
                .await
                .expect("postgres reachable");
            conn.execute(format!("CREATE SCHEMA {schema}").as_str())
                .await
                .expect("create schema");
            let sep = if admin.contains('?') { '&' } else { '?' };
            dbs.push(TestDb {
                backend: "postgres",
                url: format!("{admin}{sep}options=-c%20search_path%3D{schema}"),
                admin_url: Some(admin.clone()),
                drop_sql: Some(format!("DROP SCHEMA {schema} CASCADE")),
                _dir: None,
            });
        }
        Err(_) => eprintln!("{test}: postgres SKIPPED (set SECKILL_TEST_POSTGRES_URL to run it)"),
    }
    match std::env::var("SECKILL_TEST_MYSQL_URL") {
        Ok(admin) => {
            let database = unique_name();
            let mut conn = sqlx::AnyConnection::connect(&admin)
                .await
                .expect("mysql reachable");
            conn.execute(format!("CREATE DATABASE {database}").as_str())
                .await
                .expect("create database");
            let (base, query) = admin
                .split_once('?')
                .map_or((admin.as_str(), None), |(b, q)| (b, Some(q)));
            let server = base.rsplit_once('/').map_or(base, |(s, _)| s);
            let url = match query {
                Some(q) => format!("{server}/{database}?{q}"),
                None => format!("{server}/{database}"),
            };
            dbs.push(TestDb {
                backend: "mysql",
                url,
                admin_url: Some(admin.clone()),
                drop_sql: Some(format!("DROP DATABASE {database}")),
                _dir: None,
            });
        }
        Err(_) => eprintln!("{test}: mysql/mariadb SKIPPED (set SECKILL_TEST_MYSQL_URL to run it)"),
    }
    let names: Vec<&str> = dbs.iter().map(|d| d.backend).collect();
    eprintln!("{test}: database backends: {}", names.join(", "));
    dbs
}

/// The admin token of the tests' instances; [`http`] sends it.
pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789abcdef";

/// Instance arguments for tests: short leases and waits, the admin token.
pub fn instance_args(redis: &RedisServer, database: &str, order_flow: OrderFlow) -> InstanceArgs {
    InstanceArgs {
        binary: binary(),
        redis: redis.url(),
        database: database.to_owned(),
        redlock: Vec::new(),
        order_flow,
        watchdog_lease: Duration::from_secs(5),
        lab: LabConfig {
            lease: Duration::from_millis(500),
            lock_wait: Duration::from_millis(500),
            ..LabConfig::default()
        },
        log_dir: None,
        extra_args: Vec::new(),
        admin_token: Some(ADMIN_TOKEN.to_owned()),
    }
}

/// Starts `n` instances.
pub async fn cluster(n: usize, args: &InstanceArgs) -> Cluster {
    Cluster::start(n, args)
        .await
        .expect("seckill instances start")
}

/// A client that sends [`ADMIN_TOKEN`] on every request without a token of its own
/// (a buyer's `bearer_auth` replaces it).
pub fn http() -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {ADMIN_TOKEN}")
            .parse()
            .expect("a header value"),
    );
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .default_headers(headers)
        .build()
        .expect("http client")
}

/// A client without the admin token.
pub fn anonymous_http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("http client")
}

/// Status and JSON body of a reply.
pub async fn call(req: reqwest::RequestBuilder) -> (u16, serde_json::Value) {
    let reply = req.send().await.expect("request sent");
    let status = reply.status().as_u16();
    let body = reply.json().await.unwrap_or(serde_json::Value::Null);
    (status, body)
}

/// Logs `phone` in and returns the token.
pub async fn login(http: &reqwest::Client, base: &str, phone: &str) -> String {
    let (status, body) = call(
        http.post(format!("{base}/users/login"))
            .json(&serde_json::json!({ "phone": phone })),
    )
    .await;
    assert_eq!(status, 200, "login {phone}: {body}");
    body["token"].as_str().expect("token").to_owned()
}

/// Creates a voucher with the window `[now + begin_s, now + end_s]` seconds.
pub async fn create_voucher(
    http: &reqwest::Client,
    base: &str,
    stock: i64,
    begin_s: i64,
    end_s: i64,
) -> i64 {
    let now = chrono::Utc::now();
    let (status, body) = call(
        http.post(format!("{base}/vouchers"))
            .json(&serde_json::json!({
                "title": "test voucher",
                "stock": stock,
                "begin_time": (now + chrono::Duration::seconds(begin_s)).to_rfc3339(),
                "end_time": (now + chrono::Duration::seconds(end_s)).to_rfc3339(),
            })),
    )
    .await;
    assert_eq!(status, 200, "create voucher: {body}");
    id(&body["id"])
}

/// An id from a JSON reply: a string of decimal digits (never a number, which
/// JavaScript would round).
pub fn id(value: &serde_json::Value) -> i64 {
    value
        .as_str()
        .unwrap_or_else(|| panic!("an id as a JSON string, got {value}"))
        .parse()
        .unwrap_or_else(|e| panic!("a decimal id, got {value}: {e}"))
}

/// Sends `request` (a whole HTTP/1.1 request, or its start) over a new connection and
/// reads the reply until the service closes it: status and JSON body.
pub async fn raw_request(addr: &str, request: &[u8]) -> (u16, serde_json::Value) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    // The service may answer and close before it has read all of it.
    let _ = stream.write_all(request).await;
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply).await;
    let text = String::from_utf8_lossy(&reply);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("an HTTP reply: {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .and_then(|(_, body)| serde_json::from_str(body).ok())
        .unwrap_or(serde_json::Value::Null);
    (status, body)
}

//! `seckill serve` checks its database at start: a database whose unique `(user_id,
//! voucher_id)` index is gone is refused with the SQL that repairs it. On SQLite, and on
//! PostgreSQL and MariaDB when configured.

mod common;

use std::time::Duration;

use common::databases;
use ferrisson_testkit::RedisServer;
use seckill::db::Db;
use sqlx::{AnyConnection, Connection as _, Executor as _};

const TIMEOUT: Duration = Duration::from_secs(10);

async fn execute(url: &str, sql: &str) {
    let mut conn = AnyConnection::connect(url).await.expect("connect");
    conn.execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let _ = conn.close().await;
}

fn drop_index(backend: &str, name: &str) -> String {
    match backend {
        "mysql" => format!("DROP INDEX {name} ON voucher_order"),
        _ => format!("DROP INDEX {name}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_without_the_unique_order_index_is_refused() {
    for db in databases("a_database_without_the_unique_order_index_is_refused").await {
        let backend = db.backend;
        Db::connect(&db.url, 1, TIMEOUT)
            .await
            .expect("a fresh database")
            .close()
            .await;
        execute(&db.url, &drop_index(backend, "voucher_order_user_voucher")).await;

        let error = Db::connect(&db.url, 1, TIMEOUT)
            .await
            .expect_err("refused without the index")
            .to_string();
        assert!(
            error.contains("no unique index on (user_id, voucher_id)"),
            "{backend}: {error}"
        );
        // The message's repair works.
        let start = error.find("CREATE UNIQUE INDEX").expect("the repair SQL");
        let repair = &error[start..start + error[start..].find(';').expect("SQL ends")];
        execute(&db.url, repair).await;
        Db::connect(&db.url, 1, TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("{backend}: repaired: {e}"))
            .close()
            .await;

        // Another name and the other column order enforce the same rule; a plain index
        // does not.
        execute(&db.url, &drop_index(backend, "voucher_order_user_voucher")).await;
        execute(
            &db.url,
            "CREATE UNIQUE INDEX one_order_each ON voucher_order (voucher_id, user_id)",
        )
        .await;
        Db::connect(&db.url, 1, TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("{backend}: any unique index on the pair: {e}"))
            .close()
            .await;
        execute(&db.url, &drop_index(backend, "one_order_each")).await;
        execute(
            &db.url,
            "CREATE INDEX not_unique ON voucher_order (user_id, voucher_id)",
        )
        .await;
        assert!(
            Db::connect(&db.url, 1, TIMEOUT).await.is_err(),
            "{backend}: a non-unique index is not enough"
        );
        db.cleanup().await;
    }
}

/// A table the service uses, without a column it needs, is named at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_without_the_service_columns_is_refused() {
    let db = common::TestDb::sqlite();
    Db::connect(&db.url, 1, TIMEOUT)
        .await
        .expect("fresh")
        .close()
        .await;
    execute(
        &db.url,
        "ALTER TABLE lab_stock RENAME COLUMN sold TO sold_units",
    )
    .await;
    let error = Db::connect(&db.url, 1, TIMEOUT)
        .await
        .expect_err("refused")
        .to_string();
    assert!(error.contains("table lab_stock"), "{error}");
}

/// The command itself: exit status 1, the repair in the message, once, no colour codes
/// in a redirected stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seckill_serve_says_how_to_repair() {
    let db = common::TestDb::sqlite();
    let redis = RedisServer::start().expect("redis-server");
    Db::connect(&db.url, 1, TIMEOUT)
        .await
        .expect("fresh")
        .close()
        .await;
    execute(&db.url, "DROP INDEX voucher_order_user_voucher").await;
    let out = tokio::process::Command::new(common::binary())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(["--url", &redis.url(), "--database", &db.url])
        .env_remove("NO_COLOR")
        .output()
        .await
        .expect("seckill runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.matches("CREATE UNIQUE INDEX").count(), 1, "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "no ANSI codes: {stderr:?}");
    assert!(out.stdout.is_empty(), "never listened");
}

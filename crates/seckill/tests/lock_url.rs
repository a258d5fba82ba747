//! The order lock on another store than the service's Redis (`--lock-url`): two
//! instances whose per-user locks live in the machine's PostgreSQL lock table keep one
//! order per user under concurrent buys, and the lock's fencing token reaches the write.

mod common;

use common::{call, cluster, create_voucher, http, instance_args, login};
use ferrisson_testkit::RedisServer;
use futures_util::future::join_all;
use seckill::OrderFlow;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_order_lock_runs_on_a_postgres_lock_table() -> anyhow::Result<()> {
    let base = std::env::var("FERRISSON_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let table = format!("seckill_order_locks_{:08x}", std::process::id());
    let lock_url = format!("{base}?table={table}");

    let redis = RedisServer::start()?;
    let db = common::TestDb::sqlite();
    let mut args = instance_args(&redis, &db.url, OrderFlow::Lock);
    // No buy limit: the concurrent buys are the point.
    args.extra_args = vec![
        "--lock-url".into(),
        lock_url.clone(),
        "--buy-rate".into(),
        "0".into(),
    ];
    let cluster = cluster(2, &args).await;
    let (a, b) = (&cluster.urls()[0], &cluster.urls()[1]);
    let http = http();

    let voucher = create_voucher(&http, a, 5, -60, 3600).await;
    let token = login(&http, a, "13800000077").await;
    // Eight concurrent buys of one user across both instances: exactly one order.
    let buys = (0..8).map(|i| {
        let base = if i % 2 == 0 { a.clone() } else { b.clone() };
        let request = http
            .post(format!("{base}/vouchers/{voucher}/seckill"))
            .bearer_auth(&token);
        async move { call(request).await }
    });
    let replies = join_all(buys).await;
    let ordered = replies.iter().filter(|(status, _)| *status == 200).count();
    assert_eq!(ordered, 1, "{replies:?}");
    for (status, body) in &replies {
        assert!(
            *status == 200 || body["code"] == "ALREADY_ORDERED",
            "{status} {body}"
        );
    }

    // The service created the table and drew its tokens from its fence sequence.
    let pool = sqlx::PgPool::connect(&base).await?;
    let (drawn,): (bool,) = sqlx::query_as(&format!("SELECT is_called FROM {table}_fence"))
        .fetch_one(&pool)
        .await?;
    assert!(drawn, "no fencing token was drawn from {table}_fence");
    pool.close().await;

    drop(cluster);
    drop_table(&base, &table).await
}

async fn drop_table(base: &str, table: &str) -> anyhow::Result<()> {
    use sqlx::Executor as _;
    let pool = sqlx::PgPool::connect(base).await?;
    pool.execute(format!("DROP TABLE IF EXISTS {table}").as_str())
        .await?;
    pool.execute(format!("DROP SEQUENCE IF EXISTS {table}_fence").as_str())
        .await?;
    Ok(())
}

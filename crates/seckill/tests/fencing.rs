//! The locked order flow fences its database write with the order lock's token: a
//! holder whose lease ran out while a newer holder wrote cannot write after it.

mod common;

use std::time::Duration;

use common::{call, cluster, create_voucher, databases, http, instance_args, login};
use ferrisson::redis::{Client, Lease};
use ferrisson_testkit::RedisServer;
use seckill::OrderFlow;
use seckill::db::{Db, OrderOutcome, OrderRow, VoucherRow};
use seckill::orders::order_lock_name;
use sqlx::{AnyConnection, Connection as _, Executor as _};

fn voucher(id: i64) -> VoucherRow {
    VoucherRow {
        id,
        title: format!("voucher {id}"),
        stock: 5,
        begin_ms: 0,
        end_ms: i64::MAX,
    }
}

fn order(id: i64, voucher_id: i64) -> OrderRow {
    OrderRow {
        id,
        user_id: 1,
        voucher_id,
        created_ms: 0,
    }
}

/// A holder paused past its lease (the lock expired, another holder took it and
/// wrote) is refused when it finally writes, on every backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_token_cannot_write() {
    let redis = RedisServer::start().expect("redis-server");
    let paused = Client::connect(&redis.url()).await.expect("client");
    let next = Client::connect(&redis.url()).await.expect("client");
    for db in databases("a_stale_token_cannot_write").await {
        let store = Db::connect(&db.url, 2, Duration::from_secs(10))
            .await
            .expect("database");
        store.insert_user(1, "13800000001", 0).await.expect("user");
        for id in [10, 11] {
            store
                .insert_voucher(&voucher(id), 0)
                .await
                .expect("voucher");
        }
        let name = order_lock_name(1);
        let old = paused
            .lock(&name)
            .and_then(|l| l.with_lease(Lease::Fixed(Duration::from_millis(200))))
            .expect("lock")
            .lock()
            .await
            .expect("first holder");
        old.lost().await;
        let new = next
            .lock(&name)
            .expect("lock")
            .lock()
            .await
            .expect("second holder");
        assert!(new.fencing_token() > old.fencing_token());

        let written = store
            .create_order(&order(100, 10), Some(new.fencing_token()))
            .await
            .expect("write");
        assert_eq!(written, OrderOutcome::Created, "{}", db.backend);
        let late = store
            .create_order(&order(101, 11), Some(old.fencing_token()))
            .await
            .expect("write");
        assert_eq!(late, OrderOutcome::Stale, "{}", db.backend);
        assert_eq!(
            store.voucher(11).await.expect("read").map(|v| v.stock),
            Some(5)
        );
        assert!(store.orders(11).await.expect("read").is_empty());
        // The current holder writing again is not stale.
        let again = store
            .create_order(&order(102, 11), Some(new.fencing_token()))
            .await
            .expect("write");
        assert_eq!(again, OrderOutcome::Created, "{}", db.backend);
        let fence = store.order_fence(1).await.expect("read");
        assert_eq!(fence, Some(new.fencing_token().get() as i64));

        new.unlock().await.expect("unlock");
        drop(old);
        store.close().await;
        db.cleanup().await;
    }
}

/// Through the service: when a newer holder of the user's order lock has written (its
/// token stands in the user's row), the order is refused with 409 `LOCK_LOST` and
/// nothing is sold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_refuses_a_stale_order() {
    let db = common::TestDb::sqlite();
    let redis = RedisServer::start().expect("redis-server");
    let cluster = cluster(1, &instance_args(&redis, &db.url, OrderFlow::Lock)).await;
    let base = &cluster.urls()[0];
    let http = http();
    let token = login(&http, base, "13800000002").await;
    let voucher = create_voucher(&http, base, 3, -60, 3600).await;

    let mut conn = AnyConnection::connect(&db.url).await.expect("connect");
    conn.execute("UPDATE users SET order_fence = 9000000000000000000")
        .await
        .expect("a newer holder's token");
    let (status, body) = call(
        http.post(format!("{base}/vouchers/{voucher}/seckill"))
            .bearer_auth(&token),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("LOCK_LOST")),
        "{body}"
    );
    let (_, v) = call(http.get(format!("{base}/vouchers/{voucher}"))).await;
    assert_eq!(v["stock"].as_i64(), Some(3), "nothing sold: {v}");

    conn.execute("UPDATE users SET order_fence = 0")
        .await
        .expect("reset");
    let (status, body) = call(
        http.post(format!("{base}/vouchers/{voucher}/seckill"))
            .bearer_auth(&token),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let _ = conn.close().await;
    cluster.stop().await.expect("graceful shutdown");
}

//! The lab's library-lock variants write the stock through the fence: a holder whose
//! lock expired while its process was paused cannot sell a unit twice when it resumes.
//! Its write is refused and counted as a late write, not as a sale.

mod common;

use std::time::Duration;

use common::{call, cluster, http, instance_args};
use ferrisson_testkit::RedisServer;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use seckill::OrderFlow;

/// Polls `redis` until the watchdog variant's lock key exists (`true`) or is gone
/// (`false`).
async fn await_lock(redis: &RedisServer, present: bool) {
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            // The lock's key: its name in braces (the client has no namespace).
            let exists = redis.command(&["EXISTS", "{lab:watchdog}"]).expect("redis");
            if (exists == ":1") == present {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the lock never became {}: keys {:?}",
            if present { "present" } else { "absent" },
            redis.query(&["KEYS", "*"])
        )
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_late_write_is_refused_not_sold() {
    let db = common::TestDb::sqlite();
    let redis = RedisServer::start().expect("redis-server");
    let mut args = instance_args(&redis, &db.url, OrderFlow::Lock);
    // A short watchdog lease, so the paused holder's lock expires soon; a stall on the
    // first unit (stock 4), so the holder is surely inside its critical section.
    args.watchdog_lease = Duration::from_secs(1);
    args.lab.stall = Duration::from_secs(2);
    args.lab.stall_every = 4;
    let cluster = cluster(2, &args).await;
    let (a, b) = (cluster.urls()[0].clone(), cluster.urls()[1].clone());
    let pid_a = cluster.pids()[0].expect("instance A runs");
    let pid_a = Pid::from_raw(i32::try_from(pid_a).expect("a pid"));
    let http = http();
    let (status, body) = call(
        http.post(format!("{a}/lab/stock"))
            .json(&serde_json::json!({"stock": 4})),
    )
    .await;
    assert_eq!(status, 200, "{body}");

    // A takes the lock and stalls inside it; then its process is paused until its
    // lease has run out (no watchdog renews it while the process is stopped).
    let first = tokio::spawn({
        let (http, a) = (http.clone(), a.clone());
        async move { call(http.post(format!("{a}/lab/deduct/watchdog"))).await }
    });
    await_lock(&redis, true).await;
    kill(pid_a, Signal::SIGSTOP).expect("pause instance A");
    await_lock(&redis, false).await;

    // B takes the lock with a newer token and sells a unit.
    let (status, body) = call(http.post(format!("{b}/lab/deduct/watchdog"))).await;
    kill(pid_a, Signal::SIGCONT).expect("resume instance A");
    assert_eq!(
        (status, body["sold"].as_bool()),
        (200, Some(true)),
        "B: {body}"
    );

    // A resumes believing it holds the lock: its write comes after B's, and is refused.
    let (status, body) = first.await.expect("A's request");
    assert_eq!(
        (status, body["sold"].as_bool()),
        (200, Some(false)),
        "A: {body}"
    );

    let (status, state) = call(http.get(format!("{b}/lab/stock"))).await;
    assert_eq!(status, 200, "{state}");
    assert_eq!(state["late_writes_refused"], 1, "{state}");
    assert_eq!(
        (state["stock"].as_i64(), state["sold"].as_i64()),
        (Some(3), Some(1)),
        "one unit sold once: {state}"
    );
    cluster.stop().await.expect("exit 0 after SIGTERM");
}

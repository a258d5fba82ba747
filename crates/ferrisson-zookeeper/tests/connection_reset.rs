//! A waiter's request in flight when the server dies with it unread: the kernel resets
//! the connection, and the client library fails the request with the socket's I/O error
//! ("Connection reset by peer"), not `ConnectionLoss`. The wait must carry on once the
//! server is back rather than end in that error. (The fault suite's `zk-leader-killed`
//! scenario found it: a waiter queued just before the leader's death lost its wait.)

use std::time::Duration;

use ferrisson_testkit::ZooKeeper;
use ferrisson_zookeeper::{Client, DistributedLock, Guard};

const SESSION: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_survives_a_reset_with_its_request_in_flight() -> anyhow::Result<()> {
    let mut zk = tokio::task::spawn_blocking(ZooKeeper::standalone).await??;
    let url = format!("{}?session_timeout_ms={}", zk.url(), SESSION.as_millis());
    let holder = Client::connect(&url).await?;
    let guard = holder.lock("orders")?.lock().await?;
    let waiter = Client::connect(&url).await?;
    // The server stops reading: the waiter's create stays unread in its socket.
    zk.pause(0)?;
    let lock = waiter.lock("orders")?;
    let wait = tokio::spawn(async move { lock.lock_timeout(SESSION * 2).await });
    // (No event says that the request was written: give the task time to send it. If it
    // was not sent yet, it is sent after the restart and the test passes either way.)
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Killed with that request unread: the kernel answers the waiter with a reset.
    let pid = zk.pid(0).expect("the server runs").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status()?;
    assert!(killed.success());
    tokio::task::block_in_place(|| zk.restart(0))?;
    // The sessions outlive the restart (the server keeps them in its log). The holder's
    // guard ended at the disconnection (it could not tell), and its release deletes the
    // node all the same (reporting the hold as ended).
    assert!(!guard.is_held());
    let _ended = guard.unlock().await;
    let granted = wait
        .await?
        .map_err(|e| anyhow::anyhow!("the wait ended in the reset's error: {e}"))?
        .expect("granted once the holder released");
    granted.unlock().await?;
    Ok(())
}

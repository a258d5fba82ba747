//! A member of three cut off by the peer relays: it keeps running but loses its quorum
//! (its `/health` turns false) while the two others keep one; healed, all are healthy.

use std::time::{Duration, Instant};

use ferrisson_testkit::{EtcdCluster, etcdctl_binary};

/// Long enough for an election (500 ms timeout) and a health probe on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(20);

fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_cut_off_member_loses_its_quorum_and_gets_it_back_when_healed() -> std::io::Result<()> {
    let (cluster, partition) = EtcdCluster::start_partitionable(3)?;
    assert!((0..3).all(|i| cluster.is_healthy(i)));
    partition.cut_off(&cluster, 2);
    assert_eq!(partition.cut(), Some(2));
    until("member 2 unhealthy, 0 and 1 healthy", || {
        !cluster.is_healthy(2) && cluster.is_healthy(0) && cluster.is_healthy(1)
    });
    // Still running: cut off, not stopped.
    assert!(cluster.pid(2).is_some());
    let put = std::process::Command::new(etcdctl_binary())
        .env("ETCDCTL_API", "3")
        .arg("--endpoints")
        .arg(format!("http://127.0.0.1:{}", cluster.client_port(0)))
        .args(["put", "kit", "majority"])
        .output()?;
    assert!(
        put.status.success(),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );
    partition.heal();
    until("every member healthy again", || {
        (0..3).all(|i| cluster.is_healthy(i))
    });
    Ok(())
}

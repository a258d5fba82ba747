//! The kit's etcd members: they start healthy, answer etcdctl, and a killed member
//! leaves a cluster that still has a quorum: healthy again once it has a leader, and
//! serving.

use ferrisson_testkit::EtcdCluster;

#[test]
fn one_member_answers_etcdctl() -> std::io::Result<()> {
    let member = EtcdCluster::single()?;
    assert!(member.url().starts_with("etcd://127.0.0.1:"));
    let put = member.etcdctl().args(["put", "kit", "ok"]).output()?;
    assert!(
        put.status.success(),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );
    let get = member
        .etcdctl()
        .args(["get", "kit", "--print-value-only"])
        .output()?;
    assert_eq!(String::from_utf8_lossy(&get.stdout).trim(), "ok");
    Ok(())
}

#[test]
fn a_cluster_keeps_serving_without_one_member() -> std::io::Result<()> {
    let mut cluster = EtcdCluster::start(3)?;
    assert_eq!(cluster.len(), 3);
    assert!((0..3).all(|i| cluster.is_healthy(i)));
    cluster.kill(0)?;
    assert!(!cluster.is_healthy(0));
    // Member 0 may have led: the two others elect a leader first (a put forwarded to the
    // dead leader meanwhile would be dropped, and answered "request timed out").
    cluster.wait_healthy()?;
    assert!(!cluster.is_healthy(0));
    let put = cluster.etcdctl().args(["put", "kit", "two"]).output()?;
    assert!(
        put.status.success(),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );
    cluster.restart(0)?;
    assert!((0..3).all(|i| cluster.is_healthy(i)));
    Ok(())
}

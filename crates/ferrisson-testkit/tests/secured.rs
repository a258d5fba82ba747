//! Clusters and Sentinel groups protected by TLS and ACL users: they form, the kit's
//! waiting helpers see them, and a plain or anonymous client is refused.

use ferrisson_testkit::{ClientAuth, RedisCluster, SentinelGroup};

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

#[test]
fn a_tls_cluster_with_an_acl_user_forms_and_fails_over() -> Result {
    let cluster = RedisCluster::builder()
        .tls(ClientAuth::Required)
        .acl_user("locker", "secret")
        .start()?;
    assert!(
        cluster
            .url()
            .starts_with("rediss+cluster://locker:secret@127.0.0.1:")
    );
    let replica = cluster.replicas_of(0)?[0];
    cluster.failover(replica)?;
    assert!(cluster.masters()?.contains(&replica));
    // The kit's own access is authenticated: the default user is off.
    let who = cluster.nodes()[0].command(&["ACL", "WHOAMI"])?;
    assert_eq!(who, "locker");
    Ok(())
}

#[test]
fn a_tls_sentinel_group_with_acl_users_forms_and_fails_over() -> Result {
    let group = SentinelGroup::builder()
        .tls(ClientAuth::Required)
        .acl_user("locker", "secret")
        .sentinel_acl_user("watcher", "watchpw")
        .start()?;
    assert!(
        group
            .url()
            .starts_with("rediss+sentinel://locker:secret@127.0.0.1:")
    );
    let promoted = group.failover()?;
    assert_ne!(promoted, 0);
    assert_eq!(group.sentinels()[0].command(&["ACL", "WHOAMI"])?, "watcher");
    Ok(())
}

//! Clusters and Sentinel groups protected by TLS and ACL users: they form, the kit's
//! waiting helpers see them, and a plain or anonymous client is refused.

use ferrisson_testkit::{ClientAuth, RedisCluster, SentinelGroup, key_slot};

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
    // A slot moves with its keys (MIGRATE logs in to the target over TLS).
    let source = cluster.master_of_key("k")?;
    let target = cluster
        .masters()?
        .into_iter()
        .find(|&m| m != source)
        .ok_or("no other master")?;
    assert_eq!(cluster.nodes()[source].command(&["SET", "k", "v"])?, "+OK");
    cluster.migrate_slot(key_slot("k"), target)?;
    assert_eq!(cluster.master_of_key("k")?, target);
    assert_eq!(cluster.nodes()[target].command(&["GET", "k"])?, "v");
    Ok(())
}

#[test]
fn protected_servers_refuse_anonymous_and_plain_clients() -> Result {
    let cluster = RedisCluster::builder()
        .tls(ClientAuth::None)
        .acl_user("locker", "secret")
        .start()?;
    let port = cluster.nodes()[0].port();
    // No plain port: a plain client is dropped by the TLS port.
    let plain = redis::Client::open(format!("redis://locker:secret@127.0.0.1:{port}"))?;
    assert!(plain.get_connection().is_err());
    // Over TLS (trusting the test CA) without credentials: the default user is off.
    let certificates = cluster.certificates().ok_or("a TLS cluster")?;
    let tls = |url: String| {
        redis::Client::build_with_tls(
            url,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(certificates.ca_pem().as_bytes().to_vec()),
            },
        )
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let anonymous = tls(format!("rediss://127.0.0.1:{port}"))?;
    let refused = redis::cmd("PING").query::<String>(&mut anonymous.get_connection()?);
    assert!(refused.is_err(), "{refused:?}");
    let logged_in = tls(format!("rediss://locker:secret@127.0.0.1:{port}"))?;
    let pong: String = redis::cmd("PING").query(&mut logged_in.get_connection()?)?;
    assert_eq!(pong, "PONG");
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
    // A killed master is replaced, and comes back (TLS only, same user) as a replica.
    let mut group = group;
    group.servers_mut()[promoted].kill()?;
    let next = group.wait_for_new_master(promoted)?;
    assert_ne!(next, promoted);
    group.restart_server(promoted)?;
    assert_eq!(group.master()?, next);
    Ok(())
}

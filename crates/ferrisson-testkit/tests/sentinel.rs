//! `SentinelGroup` starts a real master, replicas and sentinels and reports what the
//! sentinels report; checked here through redis-rs, a client the kit does not use itself.

use std::time::Duration;

use ferrisson_testkit::{RedisServer, SentinelGroup};
use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{Commands, Connection, Value};

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

fn connect(server: &RedisServer) -> Result<Connection> {
    Ok(redis::Client::open(server.url())?.get_connection()?)
}

fn replication(server: &RedisServer) -> Result<String> {
    Ok(redis::cmd("INFO")
        .arg("replication")
        .query(&mut connect(server)?)?)
}

/// The master's port as every sentinel names it, through redis-rs.
fn masters_named(group: &SentinelGroup) -> Result<Vec<u16>> {
    let mut ports = Vec::new();
    for sentinel in group.sentinels() {
        let (_host, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(group.master_name())
            .query(&mut connect(sentinel)?)?;
        ports.push(port);
    }
    Ok(ports)
}

/// A connection to the master through redis-rs's own sentinel client.
fn master_through_sentinels(group: &SentinelGroup) -> Result<Connection> {
    let mut client = SentinelClient::build(
        group.sentinel_urls(),
        group.master_name(),
        None,
        SentinelServerType::Master,
    )?;
    Ok(client.get_connection()?)
}

fn port_of(connection: &mut Connection) -> Result<u16> {
    let port: String = redis::cmd("CONFIG")
        .arg("GET")
        .arg("port")
        .query::<Vec<String>>(connection)?
        .pop()
        .ok_or("no port")?;
    Ok(port.parse()?)
}

#[test]
fn a_new_group_has_a_master_two_attached_replicas_and_three_agreeing_sentinels() -> Result {
    let group = SentinelGroup::start()?;
    assert_eq!((group.servers().len(), group.sentinels().len()), (3, 3));
    assert_eq!(group.master()?, 0);
    let master_port = group.servers()[0].port();
    assert_eq!(masters_named(&group)?, vec![master_port; 3]);

    let info = replication(&group.servers()[0])?;
    assert!(
        info.contains("role:master") && info.contains("connected_slaves:2"),
        "{info}"
    );
    for replica in &group.servers()[1..] {
        let info = replication(replica)?;
        assert!(info.contains("role:slave"), "{info}");
        assert!(
            info.contains(&format!("master_port:{master_port}")),
            "{info}"
        );
        assert!(info.contains("master_link_status:up"), "{info}");
    }
    for sentinel in group.sentinels() {
        let mut connection = connect(sentinel)?;
        let replicas: Vec<Value> = redis::cmd("SENTINEL")
            .arg("REPLICAS")
            .arg(group.master_name())
            .query(&mut connection)?;
        let sentinels: Vec<Value> = redis::cmd("SENTINEL")
            .arg("SENTINELS")
            .arg(group.master_name())
            .query(&mut connection)?;
        assert_eq!(
            (replicas.len(), sentinels.len()),
            (2, 2),
            "port {}",
            sentinel.port()
        );
    }

    assert_eq!(
        group.url(),
        format!(
            "redis+sentinel://{}/ferrisson",
            group.sentinel_addrs().join(",")
        )
    );
    let mut master = master_through_sentinels(&group)?;
    assert_eq!(port_of(&mut master)?, master_port);
    let () = master.set("k", "v")?;
    let acked: u32 = redis::cmd("WAIT").arg(2).arg(5000).query(&mut master)?;
    assert_eq!(acked, 2, "both replicas acknowledge a write");
    Ok(())
}

#[test]
fn killing_the_master_is_followed_by_a_promotion_the_kit_reports() -> Result {
    let mut group = SentinelGroup::builder()
        .down_after(Duration::from_secs(1))
        .start()?;
    let mut master = master_through_sentinels(&group)?;
    let () = master.set("k", "before")?;
    let acked: u32 = redis::cmd("WAIT").arg(2).arg(5000).query(&mut master)?;
    assert_eq!(acked, 2);

    group.servers_mut()[0].kill()?;
    let promoted = group.wait_for_new_master(0)?;
    assert!(promoted == 1 || promoted == 2, "server {promoted}");
    let promoted_port = group.servers()[promoted].port();
    assert_eq!(masters_named(&group)?, vec![promoted_port; 3]);
    assert_eq!(group.master()?, promoted);

    let mut master = master_through_sentinels(&group)?;
    assert_eq!(port_of(&mut master)?, promoted_port);
    let value: String = master.get("k")?;
    assert_eq!(value, "before");
    let () = master.set("k", "after")?;
    let other = 3 - promoted;
    let info = replication(&group.servers()[other])?;
    assert!(
        info.contains(&format!("master_port:{promoted_port}")),
        "{info}"
    );

    // The old master comes back empty and the sentinels make it a replica.
    group.restart_server(0)?;
    let info = replication(&group.servers()[0])?;
    assert!(info.contains("role:slave"), "{info}");
    assert!(
        info.contains(&format!("master_port:{promoted_port}")),
        "{info}"
    );
    assert!(info.contains("master_link_status:up"), "{info}");
    let value: String = connect(&group.servers()[0])?.get("k")?;
    assert_eq!(value, "after", "resynchronised from the new master");
    Ok(())
}

#[test]
fn a_sentinel_failover_swaps_master_and_replica() -> Result {
    let group = SentinelGroup::start()?;
    let () = master_through_sentinels(&group)?.set("k", "v")?;
    // Replication is asynchronous: a failover before the replicas have the write would
    // promote one without it (seen once in CI: the read below found nothing).
    group.wait_for_replication()?;

    let promoted = group.failover()?;
    assert_ne!(promoted, 0);
    let promoted_port = group.servers()[promoted].port();
    assert_eq!(masters_named(&group)?, vec![promoted_port; 3]);
    let info = replication(&group.servers()[promoted])?;
    assert!(info.contains("role:master"), "{info}");
    let info = replication(&group.servers()[0])?;
    assert!(info.contains("role:slave"), "{info}");
    assert!(
        info.contains(&format!("master_port:{promoted_port}")),
        "{info}"
    );

    let mut master = master_through_sentinels(&group)?;
    assert_eq!(port_of(&mut master)?, promoted_port);
    let value: String = master.get("k")?;
    assert_eq!(value, "v");
    Ok(())
}

#[test]
fn a_paused_sentinel_is_left_out_and_the_others_still_fail_over() -> Result {
    let mut group = SentinelGroup::builder()
        .down_after(Duration::from_secs(1))
        .start()?;
    group.sentinels()[0].pause()?;
    group.servers()[0].pause()?;
    let promoted = group.wait_for_new_master(0)?;
    assert_ne!(promoted, 0);

    group.sentinels()[0].resume()?;
    group.servers()[0].resume()?;
    group.wait_until_ok()?;
    let promoted_port = group.servers()[promoted].port();
    assert_eq!(masters_named(&group)?, vec![promoted_port; 3]);
    let info = replication(&group.servers()[0])?;
    assert!(
        info.contains(&format!("master_port:{promoted_port}")),
        "{info}"
    );

    // A restarted sentinel starts from the configuration it rewrote after the switch.
    group.restart_sentinel(1)?;
    assert_eq!(masters_named(&group)?, vec![promoted_port; 3]);
    Ok(())
}

#[test]
fn bad_settings_are_refused_before_anything_starts() {
    for builder in [
        SentinelGroup::builder().master_name("two words"),
        SentinelGroup::builder().master_name(""),
        SentinelGroup::builder().sentinels(0),
        SentinelGroup::builder().quorum(4),
    ] {
        let error = builder.start().expect_err("refused");
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
    }
}

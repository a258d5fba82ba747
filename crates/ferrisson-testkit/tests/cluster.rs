//! `RedisCluster` starts a real cluster and reports what its nodes report; checked here
//! through redis-rs, a client the kit does not use itself.

use std::time::Duration;

use ferrisson_testkit::{CLUSTER_SLOTS, FailoverMode, RedisCluster, RedisServer, key_slot};
use redis::{Commands, Connection, RedisError, Value};

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

fn connect(node: &RedisServer) -> Result<Connection> {
    Ok(redis::Client::open(node.url())?.get_connection()?)
}

/// The server's redirection for `GET key` on `node`: `(code, slot, address)`.
fn redirection(node: &RedisServer, key: &[u8]) -> Result<(String, u16, String)> {
    let error: RedisError = connect(node)?
        .get::<_, Option<String>>(key)
        .expect_err("a redirection");
    let (address, slot) = error
        .redirect_node()
        .ok_or_else(|| format!("not a redirection: {error}"))?;
    let code = error.code().unwrap_or_default().to_owned();
    Ok((code, slot, address.to_owned()))
}

fn address(node: &RedisServer) -> String {
    format!("127.0.0.1:{}", node.port())
}

fn cluster_info(node: &RedisServer) -> Result<String> {
    Ok(redis::cmd("CLUSTER")
        .arg("INFO")
        .query(&mut connect(node)?)?)
}

fn role(node: &RedisServer) -> Result<String> {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut connect(node)?)?;
    let role = info
        .lines()
        .find_map(|line| line.strip_prefix("role:"))
        .ok_or("no role in INFO")?;
    Ok(role.trim().to_owned())
}

/// Runs an async block on a fresh runtime: the kit's calls block, redis-rs's cluster
/// client is async.
fn block_on<T>(future: impl Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(future)
}

#[test]
fn a_new_cluster_serves_every_slot_from_three_masters_with_a_replica_each() -> Result {
    let cluster = RedisCluster::start()?;
    assert_eq!(cluster.nodes().len(), 6);
    let masters = cluster.masters()?;
    assert_eq!(masters.len(), 3);
    for &master in &masters {
        let replicas = cluster.replicas_of(master)?;
        assert_eq!(replicas.len(), 1, "master {master}: {replicas:?}");
        assert_eq!(role(&cluster.nodes()[replicas[0]])?, "slave");
        assert_eq!(role(&cluster.nodes()[master])?, "master");
    }
    for node in cluster.nodes() {
        let info = cluster_info(node)?;
        for expected in [
            "cluster_state:ok",
            "cluster_slots_assigned:16384",
            "cluster_known_nodes:6",
            "cluster_size:3",
        ] {
            assert!(info.contains(expected), "port {}: {info}", node.port());
        }
    }

    // CLUSTER SLOTS: [[start, end, [ip, port, id, ...], replicas...], ...]
    let slots: Vec<Vec<Value>> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(&mut connect(&cluster.nodes()[5])?)?;
    let mut ranges: Vec<(u16, u16, u16)> = Vec::new();
    for range in &slots {
        let [Value::Int(start), Value::Int(end), Value::Array(master), ..] = &range[..] else {
            return Err(format!("CLUSTER SLOTS entry {range:?}").into());
        };
        let Some(Value::Int(port)) = master.get(1) else {
            return Err(format!("CLUSTER SLOTS master {master:?}").into());
        };
        ranges.push((
            u16::try_from(*start)?,
            u16::try_from(*end)?,
            u16::try_from(*port)?,
        ));
    }
    ranges.sort_unstable();
    let mut next = 0;
    for &(start, end, port) in &ranges {
        assert_eq!(start, next, "slots are covered without gap or overlap");
        next = end + 1;
        for slot in [start, end] {
            let master = cluster.master_of_slot(slot)?;
            assert_eq!(cluster.nodes()[master].port(), port, "slot {slot}");
        }
    }
    assert_eq!(next, CLUSTER_SLOTS);

    let seeds = cluster.seeds();
    assert_eq!(
        cluster.url(),
        format!("redis+cluster://{}", seeds.join(","))
    );
    let urls = cluster.node_urls();
    assert_eq!(urls[2], format!("redis://{}", seeds[2]));
    block_on(async {
        let client = redis::cluster::ClusterClient::new(urls)?;
        let mut connection = client.get_async_connection().await?;
        for key in ["a", "b", "c", "{order:42}"] {
            redis::cmd("SET")
                .arg(key)
                .arg(key)
                .exec_async(&mut connection)
                .await?;
        }
        let value: String = redis::cmd("GET")
            .arg("{order:42}")
            .query_async(&mut connection)
            .await?;
        assert_eq!(value, "{order:42}");
        Ok(())
    })
}

#[test]
fn the_kit_finds_each_keys_slot_and_master_as_the_servers_do() -> Result {
    let cluster = RedisCluster::start()?;
    let mut keys: Vec<Vec<u8>> = [
        "foo",
        "",
        "{user1000}.following",
        "{user1000}.followers",
        "foo{}{bar}",
        "foo{{bar}}zap",
        "foo{bar}{zap}",
        "{",
        "}{",
        "{}",
        "lock:order:{7}",
        "é{ü}",
    ]
    .iter()
    .map(|key| key.as_bytes().to_vec())
    .collect();
    keys.push(vec![0xff, 0x00, b'{', 0x80, b'}', 0x0d, 0x0a]);
    keys.extend((0..300).map(|i| format!("key:{i}").into_bytes()));

    let mut connections = cluster
        .nodes()
        .iter()
        .map(connect)
        .collect::<Result<Vec<_>>>()?;
    let masters = cluster.masters()?;
    for key in &keys {
        let slot = key_slot(key);
        let server_slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut connections[0])?;
        assert_eq!(slot, server_slot, "key {key:?}");

        let owner = cluster.master_of_key(key)?;
        assert_eq!(owner, cluster.master_of_slot(slot)?);
        let () = connections[owner].set(key, "v")?;
        for &other in masters.iter().filter(|&&m| m != owner) {
            let (code, moved_slot, to) = redirection(&cluster.nodes()[other], key)?;
            assert_eq!(
                (code.as_str(), moved_slot, to),
                ("MOVED", slot, address(&cluster.nodes()[owner])),
                "key {key:?} on node {other}"
            );
        }
    }
    Ok(())
}

#[test]
fn a_failover_swaps_master_and_replica_and_a_killed_master_is_replaced() -> Result {
    let mut cluster = RedisCluster::builder()
        .node_timeout(Duration::from_secs(1))
        .start()?;
    let key = "{failover}:k";
    let slot = key_slot(key);
    let master = cluster.master_of_key(key)?;
    let replica = cluster.replicas_of(master)?[0];
    let () = connect(&cluster.nodes()[master])?.set(key, "before")?;

    // Manual failover: no write is lost, and the roles swap.
    cluster.failover(replica)?;
    assert_eq!(cluster.master_of_key(key)?, replica);
    assert_eq!(cluster.replicas_of(replica)?, vec![master]);
    assert_eq!(role(&cluster.nodes()[replica])?, "master");
    assert_eq!(role(&cluster.nodes()[master])?, "slave");
    let value: String = connect(&cluster.nodes()[replica])?.get(key)?;
    assert_eq!(value, "before");
    assert_eq!(
        redirection(&cluster.nodes()[master], key.as_bytes())?,
        ("MOVED".to_owned(), slot, address(&cluster.nodes()[replica]))
    );

    // Killed: the cluster fails it after the node timeout and promotes its replica.
    let () = connect(&cluster.nodes()[replica])?.set(key, "after")?;
    redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .exec(&mut connect(&cluster.nodes()[replica])?)?;
    cluster.nodes_mut()[replica].kill()?;
    assert_eq!(cluster.wait_for_new_master(slot, replica)?, master);
    let value: String = connect(&cluster.nodes()[master])?.get(key)?;
    assert_eq!(value, "after");
    for node in cluster.nodes().iter().filter(|node| node.is_running()) {
        assert!(cluster_info(node)?.contains("cluster_state:ok"));
    }

    // Restarted: it keeps its identity and comes back as the replica of its successor.
    cluster.restart_node(replica)?;
    assert_eq!(cluster.replicas_of(master)?, vec![replica]);
    assert_eq!(role(&cluster.nodes()[replica])?, "slave");
    Ok(())
}

#[test]
fn a_paused_master_is_replaced_and_rejoins_as_a_replica_when_resumed() -> Result {
    let cluster = RedisCluster::builder()
        .node_timeout(Duration::from_secs(1))
        .start()?;
    let slot = key_slot("{paused}");
    let master = cluster.master_of_slot(slot)?;
    let replica = cluster.replicas_of(master)?[0];
    cluster.nodes()[master].pause()?;
    assert!(cluster.nodes()[master].is_paused());
    assert_eq!(cluster.wait_for_new_master(slot, master)?, replica);

    cluster.nodes()[master].resume()?;
    cluster.wait_until_ok()?;
    assert_eq!(cluster.replicas_of(replica)?, vec![master]);
    assert_eq!(role(&cluster.nodes()[master])?, "slave");

    // Forced while the master is frozen: no hand-shake needed.
    cluster.nodes()[replica].pause()?;
    cluster.failover_with(master, FailoverMode::Takeover)?;
    assert_eq!(cluster.master_of_slot(slot)?, master);
    cluster.nodes()[replica].resume()?;
    cluster.wait_until_ok()?;
    assert_eq!(cluster.replicas_of(master)?, vec![replica]);
    Ok(())
}

#[test]
fn a_migrated_slot_is_asked_for_half_way_and_moved_when_done() -> Result {
    let cluster = RedisCluster::start()?;
    let key = "{migrated}:k";
    let slot = key_slot(key);
    let source = cluster.master_of_key(key)?;
    let target = cluster
        .masters()?
        .into_iter()
        .find(|&m| m != source)
        .ok_or("a second master")?;
    let (source_node, target_node) = (&cluster.nodes()[source], &cluster.nodes()[target]);
    let () = connect(source_node)?.set(key, "v")?;
    let () = connect(source_node)?.set("{migrated}:stays", "w")?;

    let refused = cluster
        .begin_slot_migration(CLUSTER_SLOTS, target)
        .expect_err("no such slot");
    assert_eq!(refused.kind(), std::io::ErrorKind::InvalidInput);
    let refused = cluster
        .begin_slot_migration(slot, source)
        .expect_err("the slot is there already");
    assert_eq!(refused.kind(), std::io::ErrorKind::InvalidInput);

    let migration = cluster.begin_slot_migration(slot, target)?;
    assert_eq!(
        (migration.slot(), migration.source(), migration.target()),
        (slot, source, target)
    );
    // Keys not moved yet are still served by the source.
    let value: String = connect(source_node)?.get(key)?;
    assert_eq!(value, "v");

    migration.move_keys(&[key])?;
    assert_eq!(
        redirection(source_node, key.as_bytes())?,
        ("ASK".to_owned(), slot, address(target_node))
    );
    let value: String = connect(source_node)?.get("{migrated}:stays")?;
    assert_eq!(
        value, "w",
        "a key not moved yet is still served by the source"
    );
    assert_eq!(
        redirection(target_node, key.as_bytes())?,
        ("MOVED".to_owned(), slot, address(source_node)),
        "without ASKING the target still sends clients to the source"
    );
    let (value,): (String,) = redis::pipe()
        .cmd("ASKING")
        .ignore()
        .cmd("GET")
        .arg(key)
        .query(&mut connect(target_node)?)?;
    assert_eq!(value, "v");

    assert_eq!(migration.move_all_keys()?, 1, "the key left behind");
    migration.finish()?;
    assert_eq!(cluster.master_of_key(key)?, target);
    for node in cluster.nodes() {
        let view: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut connect(node)?)?;
        assert!(!view.contains("->-") && !view.contains("-<-"), "{view}");
    }
    assert_eq!(
        redirection(source_node, key.as_bytes())?,
        ("MOVED".to_owned(), slot, address(target_node))
    );
    let value: String = connect(target_node)?.get("{migrated}:stays")?;
    assert_eq!(value, "w");

    // A whole slot of many keys in one call; a cluster client follows it.
    let tag = "{bulk}";
    let mut connection = connect(&cluster.nodes()[cluster.master_of_key(tag)?])?;
    for i in 0..250 {
        let () = connection.set(format!("{tag}:{i}"), i)?;
    }
    let next = cluster
        .masters()?
        .into_iter()
        .find(|&m| m != cluster.master_of_key(tag).unwrap_or(m))
        .ok_or("another master")?;
    cluster.migrate_slot(key_slot(tag), next)?;
    assert_eq!(cluster.master_of_key(tag)?, next);
    let count: u64 = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(key_slot(tag))
        .query(&mut connect(&cluster.nodes()[next])?)?;
    assert_eq!(count, 250);
    block_on(async {
        let client = redis::cluster::ClusterClient::new(cluster.node_urls())?;
        let mut connection = client.get_async_connection().await?;
        let value: u32 = redis::cmd("GET")
            .arg(format!("{tag}:249"))
            .query_async(&mut connection)
            .await?;
        assert_eq!(value, 249);
        Ok(())
    })
}

#[test]
fn a_cluster_of_fewer_than_three_masters_is_refused_before_anything_starts() {
    let error = RedisCluster::builder()
        .masters(2)
        .start()
        .expect_err("too few masters");
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
}

//! Append-only file acknowledgements (`ClientBuilder::aof_acks`, `WAITAOF`) behind
//! Sentinel and on a Cluster of Valkey 8 servers (`.ci/require-valkey`): the `WAITAOF` goes
//! to the server that ran the grant (Sentinel's master, the master of the key's slot), and
//! a paused replica there fails the grant with `Error::NotPersisted`, given back.

use std::time::Duration;

use ferrisson_redis::{AofAcks, Client, Error, RedisStoreError};
use ferrisson_testkit::{RedisCluster, Reply, SentinelGroup};

/// How long a grant may wait for the files (the servers sync at every write here).
const AOF_TIMEOUT: Duration = Duration::from_secs(2);

async fn client(url: &str) -> ferrisson_redis::Result<Client> {
    Client::builder(url)
        .response_timeout(Duration::from_secs(3))
        .aof_acks(AofAcks::local().and_replicas(1), AOF_TIMEOUT)
        .connect()
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn behind_sentinel_the_master_acknowledges_and_a_paused_replica_refuses() -> anyhow::Result<()>
{
    let group = SentinelGroup::builder()
        .valkey()
        .args(&["--appendonly", "yes", "--appendfsync", "always"])
        .replicas(1)
        .sentinels(1)
        .start()?;
    let client = client(&group.url()).await?;
    let held = client.lock("orders:6")?;
    let guard = tokio::time::timeout(Duration::from_secs(20), held.lock()).await??;
    let replica = &group.servers()[1];
    assert_eq!(replica.query(&["EXISTS", "{orders:6}"])?.integer(), Some(1));
    replica.pause()?;
    let refused = client.lock("orders:7")?;
    let outcome = refused.try_lock().await;
    assert!(
        matches!(
            outcome
                .as_ref()
                .err()
                .and_then(Error::store_error::<RedisStoreError>),
            Some(RedisStoreError::NotPersisted {
                local: Some(_),
                acked: 0,
                wanted: 1
            })
        ),
        "{outcome:?}"
    );
    assert!(!refused.is_locked().await?);
    replica.resume()?;
    guard.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_cluster_the_master_of_the_keys_slot_acknowledges() -> anyhow::Result<()> {
    let cluster = RedisCluster::builder()
        .valkey()
        .args(&["--appendonly", "yes", "--appendfsync", "always"])
        .start()?;
    let client = client(&cluster.url()).await?;
    // Two locks on different masters: each grant is acknowledged where it was written.
    let names = ["orders:8", "orders:9", "orders:10", "orders:11"];
    let mut masters = Vec::new();
    for name in names {
        let master = cluster.master_of_key(format!("{{{name}}}"))?;
        if !masters.contains(&master) {
            masters.push(master);
            let lock = client.lock(name)?;
            let guard = tokio::time::timeout(Duration::from_secs(20), lock.lock()).await??;
            let replica = cluster.replicas_of(master)?[0];
            // A cluster replica redirects key commands; SCAN walks its own keys.
            let key = format!("{{{name}}}");
            let scan =
                cluster.nodes()[replica].query(&["SCAN", "0", "MATCH", &key, "COUNT", "10000"])?;
            let found = scan
                .elements()
                .and_then(|reply| reply.get(1))
                .and_then(Reply::elements)
                .is_some_and(|keys| keys.iter().any(|k| k.text() == Some(key.as_str())));
            assert!(found, "{name} is not on the replica: {scan:?}");
            guard.unlock().await?;
        }
    }
    assert!(masters.len() >= 2, "{masters:?}");
    // The replica of one slot's master paused: grants there fail, given back.
    let name = names[0];
    let replica = cluster.replicas_of(masters[0])?[0];
    cluster.nodes()[replica].pause()?;
    let lock = client.lock(name)?;
    let outcome = lock.try_lock().await;
    assert!(
        matches!(
            outcome
                .as_ref()
                .err()
                .and_then(Error::store_error::<RedisStoreError>),
            Some(RedisStoreError::NotPersisted {
                local: Some(_),
                acked: 0,
                wanted: 1
            })
        ),
        "{outcome:?}"
    );
    assert!(!lock.is_locked().await?);
    cluster.nodes()[replica].resume()?;
    Ok(())
}

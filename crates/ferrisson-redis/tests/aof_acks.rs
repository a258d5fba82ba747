//! Append-only file acknowledgements (`ClientBuilder::aof_acks`, `WAITAOF`) on real
//! servers: Valkey 8 masters and replicas writing append-only files (the machine's Redis
//! may predate `WAITAOF`; `.ci/require-valkey` installs Valkey). A grant counts once the
//! files required have it on disk, and then survives a restart of the master; a grant
//! that misses one is refused with `Error::NotPersisted` and given back; a server that
//! cannot acknowledge is refused at connect. Sentinel and Cluster: `aof_acks_topologies.rs`.

use std::time::Duration;

use ferrisson_redis::{AofAcks, Client, Error, RedisStoreError};
use ferrisson_testkit::{RedisServer, Reply};

/// How long a grant may wait for the files. Above a second: a replica with `appendfsync
/// everysec` (the default) syncs its file about once a second.
const AOF_TIMEOUT: Duration = Duration::from_secs(2);
/// The wait of the tests where an acknowledgement cannot come: the grant fails after it.
const SHORT_TIMEOUT: Duration = Duration::from_millis(200);

/// A Valkey master writing an append-only file and one replica of it writing its own;
/// `replica_args` go to the replica.
fn master_and_replica(replica_args: &[&str]) -> anyhow::Result<(RedisServer, RedisServer)> {
    let master = RedisServer::builder().valkey().appendonly().start()?;
    let replica = RedisServer::builder()
        .valkey()
        .appendonly()
        .args(replica_args)
        .replica_of(&master)
        .start()?;
    Ok((master, replica))
}

async fn client(url: &str, acks: AofAcks, timeout: Duration) -> ferrisson_redis::Result<Client> {
    Client::builder(url)
        .response_timeout(Duration::from_secs(3))
        .aof_acks(acks, timeout)
        .connect()
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_on_the_masters_and_a_replicas_disk_survives_a_restart_of_the_master()
-> anyhow::Result<()> {
    let (mut master, replica) = master_and_replica(&[])?;
    let client = client(&master.url(), AofAcks::local().and_replicas(1), AOF_TIMEOUT).await?;
    let lock = client.lock("orders:1")?;
    // A waiting acquire: one whose files were slower than the timeout is given back and
    // tried again.
    let guard = tokio::time::timeout(Duration::from_secs(20), lock.lock()).await??;
    assert!(guard.is_held());
    // Counted: the replica has it too (it was on the replica's disk before the grant was
    // reported).
    let on_replica = replica.query(&["EXISTS", "{orders:1}"])?;
    assert_eq!(on_replica.integer(), Some(1));
    // The master dies at once (SIGKILL: nothing more is written) and starts again from
    // its append-only file: the lock is still held, by the same owner.
    master.restart()?;
    let after = Client::connect(&master.url()).await?;
    assert!(after.lock("orders:1")?.is_locked().await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_a_paused_replica_cannot_acknowledge_is_refused_and_given_back()
-> anyhow::Result<()> {
    let (master, replica) = master_and_replica(&["--appendfsync", "always"])?;
    let client = client(
        &master.url(),
        AofAcks::local().and_replicas(1),
        SHORT_TIMEOUT,
    )
    .await?;
    let lock = client.lock("orders:2")?;
    replica.pause()?;
    let refused = lock.try_lock().await;
    // The master's own file may or may not have been synced in time; the paused replica
    // cannot have acknowledged.
    assert!(
        matches!(
            refused
                .as_ref()
                .err()
                .and_then(Error::store_error::<RedisStoreError>),
            Some(RedisStoreError::NotPersisted {
                local: Some(_),
                acked: 0,
                wanted: 1
            })
        ),
        "{refused:?}"
    );
    // Given back before the error was reported.
    assert!(!lock.is_locked().await?);
    // Once the replica is back, the same client is granted: a waiting acquire tries
    // again after a shortfall, as after any transient error.
    replica.resume()?;
    let guard = tokio::time::timeout(Duration::from_secs(20), lock.lock()).await??;
    guard.unlock().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_needing_more_replicas_than_there_are_is_refused_and_given_back()
-> anyhow::Result<()> {
    let (master, _replica) = master_and_replica(&["--appendfsync", "always"])?;
    let client = client(&master.url(), AofAcks::replicas(2), SHORT_TIMEOUT).await?;
    let lock = client.simple_lock("orders:3")?;
    let refused = lock.try_lock().await;
    assert!(
        matches!(
            refused
                .as_ref()
                .err()
                .and_then(Error::store_error::<RedisStoreError>),
            Some(RedisStoreError::NotPersisted {
                local: None,
                acked: 0 | 1,
                wanted: 2
            })
        ),
        "{refused:?}"
    );
    assert_eq!(lock.inspect().await?.holder, None);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_a_paused_replica_cannot_acknowledge_loses_the_lock() -> anyhow::Result<()> {
    let (master, replica) = master_and_replica(&["--appendfsync", "always"])?;
    // Renewed every 300 ms, each renewal waiting at most 150 ms for the files.
    let client = Client::builder(&master.url())
        .watchdog_lease(Duration::from_millis(900))
        .response_timeout(Duration::from_millis(500))
        .aof_acks(AofAcks::local().and_replicas(1), Duration::from_millis(150))
        .connect()
        .await?;
    // The grant needs the files within 150 ms too; on a loaded machine a grant may miss
    // that and be given back (NotPersisted). What this test is about starts once the
    // lock is held, so the grant is simply asked for again until it counts.
    let lock = client.lock("orders:4")?;
    let guard = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match lock.lock().await {
                Ok(guard) => return Ok(guard),
                Err(e)
                    if e.store_error::<RedisStoreError>()
                        .is_some_and(|e| matches!(e, RedisStoreError::NotPersisted { .. })) => {}
                Err(e) => return Err(e),
            }
        }
    })
    .await??;
    replica.pause()?;
    // No renewal counts: the holder is told its lease ran out.
    tokio::time::timeout(Duration::from_secs(10), guard.lost()).await?;
    assert!(!guard.is_held());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_masters_own_file_is_refused_at_connect_when_it_writes_or_syncs_none()
-> anyhow::Result<()> {
    let master = RedisServer::builder().valkey().start()?;
    let refused = client(&master.url(), AofAcks::local(), SHORT_TIMEOUT).await;
    let Some(RedisStoreError::AofAcksUnavailable { reason }) = refused
        .as_ref()
        .err()
        .and_then(Error::store_error::<RedisStoreError>)
    else {
        anyhow::bail!("connected without an append-only file: {refused:?}");
    };
    assert!(reason.contains("appendonly off"), "{reason}");
    // Replicas' files only: nothing asked of the master's.
    client(&master.url(), AofAcks::replicas(1), SHORT_TIMEOUT).await?;
    // A file the server never syncs by itself: its WAITAOF 1 would always time out.
    let unsynced = RedisServer::builder()
        .valkey()
        .appendonly()
        .args(&["--appendfsync", "no"])
        .start()?;
    let refused = client(&unsynced.url(), AofAcks::local(), SHORT_TIMEOUT).await;
    let Some(RedisStoreError::AofAcksUnavailable { reason }) = refused
        .as_ref()
        .err()
        .and_then(Error::store_error::<RedisStoreError>)
    else {
        anyhow::bail!("connected to a server that never syncs: {refused:?}");
    };
    assert!(reason.contains("appendfsync no"), "{reason}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_master_that_stops_writing_its_file_refuses_the_grant_and_gets_it_back()
-> anyhow::Result<()> {
    let master = RedisServer::builder().valkey().appendonly().start()?;
    let client = client(&master.url(), AofAcks::local(), SHORT_TIMEOUT).await?;
    let lock = client.lock("orders:5")?;
    let guard = lock.try_lock().await?.expect("the lock is free");
    guard.unlock().await?;
    master
        .query(&["CONFIG", "SET", "appendonly", "no"])?
        .ok_or_error("CONFIG SET")?;
    let refused = lock.try_lock().await;
    let Some(RedisStoreError::AofAcksUnavailable { reason }) = refused
        .as_ref()
        .err()
        .and_then(Error::store_error::<RedisStoreError>)
    else {
        anyhow::bail!("granted without an append-only file: {refused:?}");
    };
    assert!(reason.contains("WAITAOF was refused"), "{reason}");
    assert!(!lock.is_locked().await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_without_waitaof_is_refused_at_connect() -> anyhow::Result<()> {
    // The machine's redis-server, which has WAITAOF from Redis 7.2 on.
    let server = RedisServer::start()?;
    let known = server.query(&["COMMAND", "INFO", "WAITAOF"])?;
    let has_waitaof = known
        .elements()
        .and_then(<[Reply]>::first)
        .is_some_and(|entry| *entry != Reply::Nil);
    let connected = client(&server.url(), AofAcks::replicas(1), SHORT_TIMEOUT).await;
    if has_waitaof {
        connected?;
        return Ok(());
    }
    let Some(error @ RedisStoreError::AofAcksUnavailable { .. }) = connected
        .as_ref()
        .err()
        .and_then(Error::store_error::<RedisStoreError>)
    else {
        anyhow::bail!("connected to a server without WAITAOF: {connected:?}");
    };
    let message = error.to_string();
    assert!(
        message.contains("they need WAITAOF (Redis 7.2 or newer)"),
        "{message}"
    );
    Ok(())
}

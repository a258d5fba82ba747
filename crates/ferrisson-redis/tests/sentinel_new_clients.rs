//! Clients that connect while a Sentinel failover is under way reach the new master, never
//! the old one; a client listens to every sentinel's announcements while it lives, and
//! no longer once dropped.
//!
//! During a failover the sentinel leading it already names the promoted replica in
//! `SENTINEL GET-MASTER-ADDR-BY-NAME`, while its `SENTINEL MASTER(S)` keeps the old
//! address until the failover ends (up to `failover-timeout` later); the other sentinels
//! name the new master once they hear of its newer configuration epoch. The old master
//! goes on answering `ROLE` as a master (and granting locks) until a sentinel demotes it,
//! seconds later. A client sent there during that window grants a lock that clients of
//! the new master grant too.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use ferrisson_redis::Client;
use ferrisson_testkit::{RedisServer, Reply, SentinelGroup};

/// Clients connected at once when the first sentinel names the new master.
const NEW_CLIENTS: usize = 8;
/// How long the failover may take to start and to promote a replica.
const PROMOTION_BOUND: Duration = Duration::from_secs(30);

/// Blocking test-kit calls from the test's runtime.
fn blocking<T>(f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    tokio::task::block_in_place(f)
}

/// Sends `SENTINEL FAILOVER` to `sentinel`, again while it has no replica it may promote
/// yet (`NOGOODSLAVE` right after the group settled).
fn start_failover(sentinel: &RedisServer, name: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + PROMOTION_BOUND;
    loop {
        match sentinel.query(&["SENTINEL", "FAILOVER", name])? {
            Reply::Error(e) if e.starts_with("NOGOODSLAVE") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            reply => {
                return reply
                    .ok_or_error("SENTINEL FAILOVER")
                    .map(drop)
                    .map_err(Into::into);
            }
        }
    }
}

/// The port of the master `sentinel` names (`SENTINEL GET-MASTER-ADDR-BY-NAME`).
fn named_port(sentinel: &RedisServer, name: &str) -> anyhow::Result<u16> {
    let reply = sentinel.query(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", name])?;
    reply
        .elements()
        .and_then(|address| address.get(1))
        .and_then(Reply::text)
        .and_then(|port| port.parse().ok())
        .with_context(|| format!("sentinel {} names {reply:?}", sentinel.port()))
}

/// Asks every sentinel, over and over, until one names a master other than `old_port`;
/// returns its port.
fn first_new_master_named(group: &SentinelGroup, old_port: u16) -> anyhow::Result<u16> {
    let deadline = Instant::now() + PROMOTION_BOUND;
    while Instant::now() < deadline {
        for sentinel in group.sentinels() {
            let port = named_port(sentinel, group.master_name())?;
            if port != old_port {
                return Ok(port);
            }
        }
    }
    anyhow::bail!("no sentinel named a new master within {PROMOTION_BOUND:?}")
}

/// The port of the server a client's commands reach (`INFO server`'s `tcp_port`).
async fn served_port(client: &Client) -> anyhow::Result<u16> {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut client.commands())
        .await?;
    info.lines()
        .find_map(|line| line.strip_prefix("tcp_port:"))
        .and_then(|port| port.trim().parse().ok())
        .with_context(|| format!("no tcp_port in {info}"))
}

/// Whether `server` still answers `ROLE` as a master.
fn claims_master(server: &RedisServer) -> bool {
    server.query(&["ROLE"]).ok().is_some_and(|reply| {
        reply
            .elements()
            .and_then(|role| role.first())
            .and_then(Reply::text)
            == Some("master")
    })
}

/// A manual failover, started at the sentinel listed first in the URL (the one that leads
/// it); as soon as any sentinel names the new master, new clients connect: every one of
/// them must be on the new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clients_that_connect_during_a_failover_reach_the_new_master() -> anyhow::Result<()> {
    let group = blocking(|| {
        Ok(SentinelGroup::builder()
            .replicas(2)
            .sentinels(3)
            .down_after(Duration::from_secs(1))
            .failover_timeout(Duration::from_secs(5))
            .start()?)
    })?;
    let old = blocking(|| Ok(group.master()?))?;
    let old_port = group.servers()[old].port();
    let name = group.master_name().to_owned();

    blocking(|| start_failover(&group.sentinels()[0], &name))?;
    let new_port = blocking(|| first_new_master_named(&group, old_port))?;

    let url = group.url();
    let connects = (0..NEW_CLIENTS).map(|_| async {
        let client = Client::builder(&url).connect().await?;
        let port = served_port(&client).await?;
        anyhow::Ok((client, port))
    });
    let connected = futures_util::future::join_all(connects).await;
    let old_still_master = blocking(|| Ok(claims_master(&group.servers()[old])))?;
    for (number, outcome) in connected.into_iter().enumerate() {
        let (_client, port) = outcome.with_context(|| format!("client {number}"))?;
        anyhow::ensure!(
            port == new_port,
            "client {number} reached the server on port {port}, not the new master on \
             {new_port} (the old master is on {old_port}; it still claims the role: \
             {old_still_master})"
        );
    }
    Ok(())
}

/// How long a connected client may take to reach the new master, at most (the test
/// fails on its order of events, not on this bound).
const FOLLOW_BOUND: Duration = Duration::from_secs(30);

/// A client connected before a manual failover moves to the new master on the sentinels'
/// announcement, while the old master still claims the role: not only once its calls fail
/// there (a read, as here, never fails on a demoted master).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_connected_client_follows_the_announced_master() -> anyhow::Result<()> {
    let group = blocking(|| {
        Ok(SentinelGroup::builder()
            .down_after(Duration::from_secs(1))
            .failover_timeout(Duration::from_secs(5))
            .start()?)
    })?;
    let old = blocking(|| Ok(group.master()?))?;
    let old_port = group.servers()[old].port();
    let client = Client::builder(&group.url()).connect().await?;
    anyhow::ensure!(served_port(&client).await? == old_port, "not on the master");

    blocking(|| start_failover(&group.sentinels()[0], group.master_name()))?;
    let new_port = blocking(|| first_new_master_named(&group, old_port))?;
    let deadline = Instant::now() + FOLLOW_BOUND;
    while served_port(&client).await? != new_port {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the client stayed off the new master {new_port} for {FOLLOW_BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    anyhow::ensure!(
        blocking(|| Ok(claims_master(&group.servers()[old])))?,
        "the client reached the new master only after the old one was demoted"
    );
    Ok(())
}

/// How long a dropped client's connections may take to close.
const CLOSE_BOUND: Duration = Duration::from_secs(10);

/// The connections each sentinel counts (`INFO clients`), the kit's own query included.
fn sentinel_connections(group: &SentinelGroup) -> anyhow::Result<Vec<u64>> {
    group
        .sentinels()
        .iter()
        .map(|sentinel| {
            let info = sentinel.query(&["INFO", "clients"])?;
            let text = info.text().context("INFO is no text")?;
            text.lines()
                .find_map(|line| line.strip_prefix("connected_clients:"))
                .and_then(|count| count.trim().parse().ok())
                .with_context(|| format!("no connected_clients in {text}"))
        })
        .collect()
}

/// Polls the sentinels' connection counts until `done` holds for them, for at most
/// [`CLOSE_BOUND`]; returns the last counts.
fn wait_for_connections(
    group: &SentinelGroup,
    done: impl Fn(&[u64]) -> bool,
) -> anyhow::Result<Vec<u64>> {
    let deadline = Instant::now() + CLOSE_BOUND;
    loop {
        let counts = sentinel_connections(group)?;
        if done(&counts) || Instant::now() >= deadline {
            return Ok(counts);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A client subscribes to every sentinel's announcements (one connection each), and a
/// dropped client leaves none behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_listens_to_every_sentinel_until_dropped() -> anyhow::Result<()> {
    let group = blocking(|| Ok(SentinelGroup::start()?))?;
    let before = blocking(|| sentinel_connections(&group))?;
    let client = Client::builder(&group.url()).connect().await?;
    let lock = client.lock("listening")?;
    lock.lock().await?.unlock().await?;
    let listening = blocking(|| {
        wait_for_connections(&group, |counts| {
            counts.iter().zip(&before).all(|(now, was)| now > was)
        })
    })?;
    anyhow::ensure!(
        listening.iter().zip(&before).all(|(now, was)| now > was),
        "not every sentinel has a connection of the client: {before:?} before, {listening:?} now"
    );
    drop(lock);
    drop(client);
    let after = blocking(|| wait_for_connections(&group, |counts| counts == before.as_slice()))?;
    anyhow::ensure!(
        after == before,
        "the dropped client left connections to the sentinels: {before:?} before, {after:?} \
         {CLOSE_BOUND:?} after the drop"
    );
    Ok(())
}

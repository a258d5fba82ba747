//! ZooKeeper (a private standalone server from the test kit): `Lock` against a raw
//! create + delete of an ephemeral sequential node with the same client crate
//! (`zookeeper-client`).

use std::sync::Arc;
use std::time::Instant;

use ferrisson_testkit::{ZooKeeper, four_letter_word};
use zookeeper_client::{Acls, CreateMode, Error as ZkE};

use super::measure::{
    self, Config, Contestant, Held, Hold, Pair, contend, handoff_header, handoff_row, lock_hold,
    lock_pair, round_trip_p50,
};

/// Where the raw floors put their nodes (the library's are under `/ferrisson/locks`).
const FLOOR_ROOT: &str = "/ferrisson-bench";

/// Creates `path` and its missing ancestors as persistent nodes.
async fn create_all(zk: &zookeeper_client::Client, path: &str) -> anyhow::Result<()> {
    let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let mut end = 0;
    while end < path.len() {
        end = path[end + 1..]
            .find('/')
            .map_or(path.len(), |i| end + 1 + i);
        match zk.create(&path[..end], &[], &options).await {
            Ok(_) | Err(ZkE::NodeExists) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The floor: create an ephemeral sequential node under the name's (persistent) node,
/// delete it. Two writes.
async fn floor_pair(zk: zookeeper_client::Client, name: String) -> anyhow::Result<Pair> {
    let dir = format!("{FLOOR_ROOT}/floor/{name}");
    create_all(&zk, &dir).await?;
    let prefix: Arc<str> = Arc::from(format!("{dir}/lock-"));
    Ok(Box::new(move || {
        let (zk, prefix) = (zk.clone(), Arc::clone(&prefix));
        Box::pin(async move {
            let options = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
            let (_, sequence) = zk.create(&prefix, b"", &options).await?;
            zk.delete(&format!("{prefix}{sequence}"), None).await?;
            Ok(())
        })
    }))
}

/// The hand-off floor: the queue recipe with nothing else (ZooKeeper's own lock
/// recipe): create an ephemeral sequential node, list the queue, hold when first, else
/// watch the node just ahead and look again when it changes; release by deleting.
/// No guid, no container parents, no watch on the own node, no re-entry.
fn queue_floor_hold(zk: zookeeper_client::Client, dir: String) -> Hold {
    let dir: Arc<str> = Arc::from(dir);
    Box::new(move |hold| {
        let (zk, dir) = (zk.clone(), Arc::clone(&dir));
        Box::pin(async move {
            let options = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
            let (_, sequence) = zk.create(&format!("{dir}/lock-"), b"", &options).await?;
            let own = format!("lock-{sequence}");
            loop {
                let mut queue = zk.list_children(&dir).await?;
                queue.sort_unstable();
                let at = queue
                    .iter()
                    .position(|c| *c == own)
                    .ok_or_else(|| anyhow::anyhow!("the own node is gone"))?;
                if at == 0 {
                    break;
                }
                let ahead = format!("{dir}/{}", queue[at - 1]);
                if let (Some(_), watcher) = zk.check_and_watch_stat(&ahead).await? {
                    watcher.changed().await;
                }
            }
            let granted = Instant::now();
            tokio::time::sleep(hold).await;
            let released = Instant::now();
            zk.delete(&format!("{dir}/{own}"), None).await?;
            Ok(Held { granted, released })
        })
    })
}

/// The server's `zk_packets_received` (`mntr`): every request of every session,
/// heartbeats included.
fn packets_received(port: u16) -> anyhow::Result<u64> {
    let mntr = four_letter_word(port, "mntr")?;
    mntr.lines()
        .find_map(|line| line.strip_prefix("zk_packets_received"))
        .and_then(|value| value.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("mntr reported no zk_packets_received"))
}

/// Every table of ZooKeeper.
pub async fn run(config: &Config) -> anyhow::Result<()> {
    println!(
        "\n## ZooKeeper (load before: {})\n",
        measure::load_average()
    );
    let server = ZooKeeper::standalone()?;
    let raw = zookeeper_client::Client::connect(&server.connect_string()).await?;
    let library = ferrisson::zookeeper::Client::connect(&server.url()).await?;
    let rows = || {
        let (raw, client) = (raw.clone(), library.clone());
        vec![
            Contestant::new(
                "floor: create + delete of an ephemeral sequential node",
                move |name| floor_pair(raw.clone(), name),
            ),
            Contestant::new("`Lock`", move |name| {
                let lock = client.lock(&name);
                async move { Ok(lock_pair(lock?)) }
            }),
        ]
    };
    let round_trip = {
        let raw = raw.clone();
        Contestant::new("one round trip (`exists /`)", move |_| {
            let raw = raw.clone();
            async move {
                let pair: Pair = Box::new(move || {
                    let raw = raw.clone();
                    Box::pin(async move {
                        raw.check_stat("/").await?;
                        Ok(())
                    })
                });
                Ok(pair)
            }
        })
    };
    let port = server.client_port(0);
    let requests: Box<measure::RequestCount> = Box::new(move || {
        Box::pin(async move { tokio::task::spawn_blocking(move || packets_received(port)).await? })
    });
    measure::uncontended(&rows(), &round_trip, Some(&*requests), config).await?;
    measure::throughput(&rows(), config).await?;

    handoff_header(config);
    let mut rtt_pair = round_trip.pair("round-trip".to_owned()).await?;
    for contenders in [2, 8, 32] {
        let rtt = round_trip_p50(&mut rtt_pair, 200).await?;
        let dir = format!("{FLOOR_ROOT}/queue/handoff-{contenders}");
        create_all(&raw, &dir).await?;
        let mut sessions = Vec::with_capacity(contenders);
        let mut holds = Vec::with_capacity(contenders);
        for _ in 0..contenders {
            let zk = zookeeper_client::Client::connect(&server.connect_string()).await?;
            holds.push(queue_floor_hold(zk.clone(), dir.clone()));
            sessions.push(zk);
        }
        let floor = contend(holds, config.grants, config.pace).await?;
        handoff_row(
            contenders,
            "floor: the bare queue recipe (create, list, watch the node ahead)",
            &floor,
            rtt,
            None,
        );
        drop(sessions);

        let rtt = round_trip_p50(&mut rtt_pair, 200).await?;
        let name = format!("handoff-lock-{contenders}");
        let mut clients = Vec::with_capacity(contenders);
        let mut holds = Vec::with_capacity(contenders);
        for _ in 0..contenders {
            let c = ferrisson::zookeeper::Client::connect(&server.url()).await?;
            holds.push(lock_hold(c.lock(&name)?));
            clients.push(c);
        }
        let run = contend(holds, config.grants, config.pace).await?;
        handoff_row(contenders, "`Lock`", &run, rtt, Some(floor.p50()));
        drop(clients);
    }
    println!("\n(load after: {})", measure::load_average());
    Ok(())
}

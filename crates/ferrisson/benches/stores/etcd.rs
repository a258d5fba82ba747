//! etcd (a private one-member cluster from the test kit): `Lock` against a raw
//! put-if-absent transaction + delete with `etcd-client`.

use std::io::{Read as _, Write as _};
use std::sync::Arc;
use std::time::Instant;

use etcd_client::{Compare, CompareOp, LockOptions, PutOptions, Txn, TxnOp};
use ferrisson_testkit::EtcdCluster;

use super::measure::{
    self, Config, Contestant, Held, Hold, Pair, contend, handoff_header, handoff_row, lock_hold,
    lock_pair, round_trip_p50,
};

/// The time to live of the floors' leases, longer than any run (nothing renews them).
const FLOOR_LEASE_TTL_S: i64 = 3600;

async fn raw_client(cluster: &EtcdCluster) -> anyhow::Result<etcd_client::Client> {
    let endpoints: Vec<String> = cluster.endpoints().split(',').map(str::to_owned).collect();
    Ok(etcd_client::Client::connect(endpoints, None).await?)
}

/// The floor: a transaction putting the name's key under a lease if it has no key yet
/// (as the lock's enqueue does, without its read of the queue), then a delete. Two
/// writes.
fn floor_pair(etcd: etcd_client::Client, lease: i64, name: &str) -> Pair {
    let key: Arc<str> = Arc::from(format!("ferrisson-bench/floor/{name}"));
    Box::new(move || {
        let (mut etcd, key) = (etcd.clone(), Arc::clone(&key));
        Box::pin(async move {
            let txn = Txn::new()
                .when([Compare::create_revision(&*key, CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    &*key,
                    "held",
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            anyhow::ensure!(etcd.txn(txn).await?.succeeded(), "the floor's key exists");
            etcd.delete(&*key, None).await?;
            Ok(())
        })
    })
}

/// The hand-off floor: etcd's own lock service (`Lock` RPC, the same queue run inside
/// the server, one request to acquire and one to release) with a lease of its own.
fn server_lock_hold(etcd: etcd_client::Client, lease: i64, name: &str) -> Hold {
    let name: Arc<str> = Arc::from(name);
    Box::new(move |hold| {
        let (mut etcd, name) = (etcd.clone(), Arc::clone(&name));
        Box::pin(async move {
            let held = etcd
                .lock(&*name, Some(LockOptions::new().with_lease(lease)))
                .await?;
            let granted = Instant::now();
            tokio::time::sleep(hold).await;
            let released = Instant::now();
            etcd.unlock(held.key()).await?;
            Ok(Held { granted, released })
        })
    })
}

/// The server's count of gRPC messages received (`grpc_server_msg_received_total`
/// over every method, from `/metrics` on the client port): unary requests and stream
/// messages (watch creations, lease keep-alives) of every client.
fn grpc_messages_received(port: u16) -> anyhow::Result<u64> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut body = String::new();
    stream.read_to_string(&mut body)?;
    let total: f64 = body
        .lines()
        .filter(|line| line.starts_with("grpc_server_msg_received_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    anyhow::ensure!(
        total > 0.0,
        "etcd's /metrics had no grpc_server_msg_received_total"
    );
    Ok(total as u64)
}

/// Every table of etcd.
pub async fn run(config: &Config) -> anyhow::Result<()> {
    println!("\n## etcd (load before: {})\n", measure::load_average());
    let cluster = EtcdCluster::single()?;
    let mut raw = raw_client(&cluster).await?;
    let lease = raw.lease_grant(FLOOR_LEASE_TTL_S, None).await?.id();
    let library = ferrisson::etcd::Client::connect(&cluster.url()).await?;
    let rows = || {
        let (raw, client) = (raw.clone(), library.clone());
        vec![
            Contestant::new("floor: put-if-absent transaction + delete", move |name| {
                let pair = floor_pair(raw.clone(), lease, &name);
                async move { Ok(pair) }
            }),
            Contestant::new("`Lock`", move |name| {
                let lock = client.lock(&name);
                async move { Ok(lock_pair(lock?)) }
            }),
        ]
    };
    let round_trip = {
        let raw = raw.clone();
        Contestant::new("one round trip (linearizable `get`)", move |_| {
            let raw = raw.clone();
            async move {
                let pair: Pair = Box::new(move || {
                    let mut raw = raw.clone();
                    Box::pin(async move {
                        raw.get("ferrisson-bench/round-trip", None).await?;
                        Ok(())
                    })
                });
                Ok(pair)
            }
        })
    };
    let port = cluster.client_port(0);
    let requests: Box<measure::RequestCount> = Box::new(move || {
        Box::pin(
            async move { tokio::task::spawn_blocking(move || grpc_messages_received(port)).await? },
        )
    });
    measure::uncontended(&rows(), &round_trip, Some(&*requests), config).await?;
    measure::throughput(&rows(), config).await?;

    handoff_header(config);
    let mut rtt_pair = round_trip.pair("round-trip".to_owned()).await?;
    for contenders in [2, 8, 32] {
        let rtt = round_trip_p50(&mut rtt_pair, 200).await?;
        let name = format!("ferrisson-bench/server-lock/handoff-{contenders}");
        let mut holds = Vec::with_capacity(contenders);
        for _ in 0..contenders {
            let mut etcd = raw_client(&cluster).await?;
            let lease = etcd.lease_grant(FLOOR_LEASE_TTL_S, None).await?.id();
            holds.push(server_lock_hold(etcd, lease, &name));
        }
        let floor = contend(holds, config.grants, config.pace).await?;
        handoff_row(
            contenders,
            "floor: etcd's lock service (`Lock` + `Unlock` RPCs)",
            &floor,
            rtt,
            None,
        );

        let rtt = round_trip_p50(&mut rtt_pair, 200).await?;
        let name = format!("handoff-lock-{contenders}");
        let mut clients = Vec::with_capacity(contenders);
        let mut holds = Vec::with_capacity(contenders);
        for _ in 0..contenders {
            let c = ferrisson::etcd::Client::connect(&cluster.url()).await?;
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

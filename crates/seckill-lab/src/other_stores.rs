//! The stores the lab measures besides Redis: the machine's PostgreSQL and MariaDB when
//! they answer (their lock table, in a table of the lab's own), and a ZooKeeper and an
//! etcd server the lab starts itself when they are installed. What it cannot reach is
//! left out of the store table with the reason.

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use ferrisson_testkit::{EtcdCluster, ZooKeeper};

use crate::stores::OtherStore;

/// The lab's lock table in the machine's databases (created when missing; the lab's own
/// lock names only, `lab:store:*`).
const LAB_TABLE: &str = "seckill_lab_locks";

/// The default database URLs, as the machine's services run them; each can be replaced
/// by the environment variable beside it.
const DATABASES: [(&str, &str, &str, &str, u16); 2] = [
    (
        "postgres",
        "SECKILL_LAB_POSTGRES_URL",
        "postgres://postgres@127.0.0.1:5432/test",
        "Lock table (expiry in database time, token from a sequence)",
        5432,
    ),
    (
        "mariadb",
        "SECKILL_LAB_MYSQL_URL",
        "mysql://root@127.0.0.1:3306/test",
        "Lock table (expiry in database time, token from a counter row)",
        3306,
    ),
];

/// The other stores a run measures, the servers it started for them (stopped on drop),
/// and why each store it could not measure was left out.
pub struct OtherStores {
    /// The stores to measure.
    pub stores: Vec<OtherStore>,
    /// Why a known store is not among them.
    pub left_out: Vec<(&'static str, String)>,
    /// The ZooKeeper server's URL, when the lab started one.
    pub zookeeper_url: Option<String>,
    /// The etcd member's URL, when the lab started one.
    pub etcd_url: Option<String>,
    _zookeeper: Option<ZooKeeper>,
    _etcd: Option<EtcdCluster>,
}

impl OtherStores {
    /// Finds the machine's databases and starts a ZooKeeper and an etcd server.
    pub async fn reach() -> Self {
        let mut stores = Vec::new();
        let mut left_out = Vec::new();
        for database in machine_databases() {
            match database.url {
                Ok(url) => stores.push(OtherStore {
                    id: database.id,
                    lock: database.lock,
                    words: format!("{} at {}", database.id, redact(&url)),
                    url: with_table(&url),
                }),
                Err(why) => left_out.push((database.id, why)),
            }
        }
        let zookeeper = match tokio::task::spawn_blocking(ZooKeeper::standalone).await {
            Ok(Ok(server)) => {
                stores.push(OtherStore {
                    id: "zookeeper",
                    lock: "Lock (Curator's InterProcessMutex: ephemeral sequential nodes)",
                    words: "a ZooKeeper server started by the lab".into(),
                    url: format!("{}/seckill-lab", server.url()),
                });
                Some(server)
            }
            Ok(Err(e)) => {
                left_out.push(("zookeeper", format!("could not start ZooKeeper: {e}")));
                None
            }
            Err(e) => {
                left_out.push(("zookeeper", format!("could not start ZooKeeper: {e}")));
                None
            }
        };
        let etcd = match tokio::task::spawn_blocking(EtcdCluster::single).await {
            Ok(Ok(server)) => {
                stores.push(OtherStore {
                    id: "etcd",
                    lock: "Lock (etcd's concurrency.Mutex: a key per contender, a lease)",
                    words: "an etcd member started by the lab".into(),
                    url: server.url(),
                });
                Some(server)
            }
            Ok(Err(e)) => {
                left_out.push(("etcd", format!("could not start etcd: {e}")));
                None
            }
            Err(e) => {
                left_out.push(("etcd", format!("could not start etcd: {e}")));
                None
            }
        };
        Self {
            stores,
            left_out,
            zookeeper_url: zookeeper.as_ref().map(ZooKeeper::url),
            etcd_url: etcd.as_ref().map(EtcdCluster::url),
            _zookeeper: zookeeper,
            _etcd: etcd,
        }
    }
}

/// One of the machine's databases: its id (`postgres`, `mariadb`), its lock table in
/// words, and its URL, or why the lab cannot use it.
pub(crate) struct MachineDatabase {
    /// `postgres` or `mariadb`.
    pub id: &'static str,
    /// The store table's words for its lock.
    pub lock: &'static str,
    /// Its URL (the environment variable's, else the default when the port answers),
    /// or why there is none.
    pub url: Result<String, String>,
}

/// The machine's PostgreSQL and MariaDB: the URL given in the environment variable, else
/// the default one when its port answers.
pub(crate) fn machine_databases() -> Vec<MachineDatabase> {
    DATABASES
        .iter()
        .map(|&(id, variable, default, lock, port)| {
            let given = std::env::var(variable).ok().filter(|url| !url.is_empty());
            let url = match given {
                Some(url) => Ok(url),
                None if answers(port) => Ok(default.to_owned()),
                None => Err(format!(
                    "no server answered on 127.0.0.1:{port} (set {variable} to use one)"
                )),
            };
            MachineDatabase { id, lock, url }
        })
        .collect()
}

/// True when something accepts connections on the loopback `port` within a second.
fn answers(port: u16) -> bool {
    TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(1),
    )
    .is_ok()
}

/// `url` with the lab's lock table (`?table=` or `&table=`).
fn with_table(url: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}table={LAB_TABLE}")
}

/// `url` without its password, for the page.
pub(crate) fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        Ok(parsed) => parsed.to_string(),
        Err(_) => "a URL that does not parse".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lab_table_joins_the_query() {
        assert_eq!(
            with_table("mysql://h/db"),
            "mysql://h/db?table=seckill_lab_locks"
        );
        assert_eq!(
            with_table("postgres://h/db?sslmode=disable"),
            "postgres://h/db?sslmode=disable&table=seckill_lab_locks"
        );
    }

    #[test]
    fn a_password_never_reaches_the_page() {
        let shown = redact("postgres://lab:secret@db:5432/test");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("***"), "{shown}");
    }
}

//! What the service's Redis URL points at: one server, the master a Sentinel group
//! names, or a Redis Cluster. The same forms as ferrisson's, so that the service's locks
//! and its own commands (tokens, the `lua` order flow, the lab's stock) share one URL:
//!
//! ```text
//! redis://[user[:password]@]host[:port][/db]            one server (rediss:// for TLS)
//! redis+sentinel://[user[:password]@]host[:port][,host[:port]...]/master[/db]
//!                                                       the sentinels' addresses (default
//!                                                       port 26379) and the master's name
//! redis+cluster://[user[:password]@]host[:port][,host[:port]...]
//!                                                       seed nodes (default port 6379)
//! ```
//!
//! `rediss+sentinel://` and `rediss+cluster://` use TLS to every server. The credentials
//! are the data servers'; the sentinels are asked without any.

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

use crate::db::redact;

const SENTINEL_PORT: u16 = 26379;
const REDIS_PORT: u16 = 6379;

/// A parsed Redis URL.
#[derive(Debug, Clone)]
pub(crate) enum Topology {
    /// One server.
    Single(ConnectionInfo),
    /// The master the sentinels name.
    Sentinel {
        /// Each sentinel's address.
        sentinels: Vec<ConnectionAddr>,
        /// The master's name as the sentinels know it.
        master: String,
        /// Credentials, database and TLS mode of the master (its address is the first
        /// sentinel's, a placeholder).
        data: ConnectionInfo,
    },
    /// A Redis Cluster through its seed nodes (credentials and TLS mode in each).
    Cluster(Vec<ConnectionInfo>),
}

impl Topology {
    /// Parses `url`; the error names what is wrong, with any password hidden.
    pub(crate) fn parse(url: &str) -> Result<Self, String> {
        let bad = |what: &str| format!("redis url {}: {what}", redact(url));
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(bad("not a url (no scheme://)"));
        };
        let (node_scheme, sentinel) = match scheme {
            "redis+sentinel" => ("redis", true),
            "rediss+sentinel" => ("rediss", true),
            "redis+cluster" => ("redis", false),
            "rediss+cluster" => ("rediss", false),
            _ => {
                return url
                    .into_connection_info()
                    .map(Self::Single)
                    .map_err(|e| bad(&e.to_string()));
            }
        };
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(authority_end);
        if path.contains(['?', '#']) {
            return Err(bad("query parameters are not supported here"));
        }
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (format!("{userinfo}@"), hosts),
            None => (String::new(), authority),
        };
        let default_port = if sentinel { SENTINEL_PORT } else { REDIS_PORT };
        let addresses = split_hosts(hosts, default_port).map_err(|e| bad(&e))?;
        let node = |address: &str, userinfo: &str| {
            format!("{node_scheme}://{userinfo}{address}")
                .into_connection_info()
                .map_err(|e| bad(&e.to_string()))
        };
        if !sentinel {
            if !path.trim_matches('/').is_empty() {
                return Err(bad(
                    "a cluster url takes no path (a cluster has one database)",
                ));
            }
            let seeds = addresses
                .iter()
                .map(|address| node(address, &userinfo))
                .collect::<Result<_, _>>()?;
            return Ok(Self::Cluster(seeds));
        }
        let mut segments = path.trim_start_matches('/').split('/');
        let master = segments.next().unwrap_or_default();
        if master.is_empty() {
            return Err(bad(
                "a sentinel url needs the master's name: redis+sentinel://host:port/NAME",
            ));
        }
        let db = match segments.next() {
            None | Some("") => String::new(),
            Some(db) if db.parse::<i64>().is_ok() => format!("/{db}"),
            Some(db) => return Err(bad(&format!("invalid database number {db:?}"))),
        };
        if segments.next().is_some() {
            return Err(bad("a sentinel url's path is /NAME[/DB]"));
        }
        let sentinels = addresses
            .iter()
            .map(|address| node(address, "").map(|info| info.addr().clone()))
            .collect::<Result<_, _>>()?;
        let data = node(&format!("{}{db}", addresses[0]), &userinfo)?;
        Ok(Self::Sentinel {
            sentinels,
            master: master.to_owned(),
            data,
        })
    }
}

/// `host[:port],host[:port]...` as `host:port` strings (IPv6 hosts in brackets).
fn split_hosts(hosts: &str, default_port: u16) -> Result<Vec<String>, String> {
    let mut addresses = Vec::new();
    for host in hosts.split(',') {
        if host.is_empty() {
            return Err("an empty host in the list".into());
        }
        let has_port = match host.rfind(']') {
            Some(close) => host[close..].contains(':'),
            None => host.contains(':'),
        };
        addresses.push(if has_port {
            host.to_owned()
        } else {
            format!("{host}:{default_port}")
        });
    }
    Ok(addresses)
}

#[cfg(test)]
mod tests {
    use redis::ConnectionAddr;

    use super::Topology;

    fn tcp(host: &str, port: u16) -> ConnectionAddr {
        ConnectionAddr::Tcp(host.to_owned(), port)
    }

    #[test]
    fn each_form_parses() {
        let Ok(Topology::Single(info)) = Topology::parse("redis://127.0.0.1:7000/2") else {
            panic!("one server");
        };
        assert_eq!(info.addr(), &tcp("127.0.0.1", 7000));
        assert_eq!(info.redis_settings().db(), 2);

        let Ok(Topology::Cluster(seeds)) =
            Topology::parse("redis+cluster://:pw@127.0.0.1:7000,127.0.0.1")
        else {
            panic!("a cluster");
        };
        let addrs: Vec<_> = seeds.iter().map(|s| s.addr().clone()).collect();
        assert_eq!(addrs, [tcp("127.0.0.1", 7000), tcp("127.0.0.1", 6379)]);
        assert!(
            seeds
                .iter()
                .all(|s| s.redis_settings().password() == Some("pw"))
        );

        let Ok(Topology::Sentinel {
            sentinels,
            master,
            data,
        }) = Topology::parse("redis+sentinel://u:pw@h1,h2:26380/shop/3")
        else {
            panic!("a sentinel group");
        };
        assert_eq!(sentinels, [tcp("h1", 26379), tcp("h2", 26380)]);
        assert_eq!(master, "shop");
        assert_eq!(data.redis_settings().db(), 3);
        assert_eq!(data.redis_settings().username(), Some("u"));
        let Ok(Topology::Cluster(seeds)) = Topology::parse("rediss+cluster://h1") else {
            panic!("a cluster over TLS");
        };
        assert!(matches!(seeds[0].addr(), ConnectionAddr::TcpTls { .. }));
    }

    #[test]
    fn bad_urls_are_refused_without_their_password() {
        for url in [
            "redis+sentinel://h1,h2",
            "redis+sentinel://h1,,h2/m",
            "redis+sentinel://h1/m/x",
            "redis+sentinel://h1/m/1/2",
            "redis+cluster://:secret@h1/0",
            "localhost:6379",
        ] {
            let Err(e) = Topology::parse(url) else {
                panic!("{url} parsed");
            };
            assert!(!e.contains("secret"), "{e}");
        }
    }
}

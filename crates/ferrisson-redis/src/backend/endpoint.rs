//! What a client's URL points at: one server, a Sentinel-watched master, or a Cluster.
//!
//! ```text
//! redis://[user[:password]@]host[:port][/db]            one server (rediss:// for TLS)
//! unix:///path/to/redis.sock                            one server on a Unix socket
//! redis+sentinel://[user[:password]@]host[:port][,host[:port]...]/master[/db]
//!                                                       the sentinels' addresses (default
//!                                                       port 26379) and the master's name
//! redis+cluster://[user[:password]@]host[:port][,host[:port]...]
//!                                                       seed nodes (default port 6379)
//! ```
//!
//! `rediss+sentinel://` and `rediss+cluster://` use TLS to every server (sentinels,
//! masters, discovered cluster nodes), with the settings of
//! [`ClientBuilder::tls`](crate::ClientBuilder::tls). The credentials (percent-encoded
//! where a URL needs it) are those of the data servers (the master and its replicas, the
//! cluster's nodes); sentinels are asked without credentials unless
//! [`ClientBuilder::sentinel_credentials`](crate::ClientBuilder::sentinel_credentials)
//! gives some.

use redis::{ConnectionInfo, IntoConnectionInfo};

use crate::api::error::{Error, Result, redis_reason};

const SENTINEL_PORT: u16 = 26379;
const REDIS_PORT: u16 = 6379;

/// A parsed client URL.
#[derive(Debug, Clone)]
pub(crate) enum Endpoint {
    Single(ConnectionInfo),
    Sentinel {
        /// Each sentinel's address (no credentials).
        sentinels: Vec<ConnectionInfo>,
        /// The master's name as the sentinels know it.
        master: String,
        /// Credentials, database and TLS for the master (its address is a placeholder).
        data: ConnectionInfo,
    },
    Cluster {
        /// Seed nodes, each with the credentials and TLS mode.
        seeds: Vec<ConnectionInfo>,
    },
}

impl Endpoint {
    /// Parses `url`, naming what is wrong (password redacted) when it does not parse.
    pub(crate) fn parse(url: &str) -> Result<Self> {
        if url.is_empty() {
            return Err(Error::invalid("redis url is empty"));
        }
        let bad = |what: String| Error::invalid(format!("redis url {}: {what}", redact_url(url)));
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(bad("not a url (no scheme://)".into()));
        };
        let (node_scheme, topology) = match scheme {
            "redis+sentinel" => ("redis", Topology::Sentinel),
            "rediss+sentinel" => ("rediss", Topology::Sentinel),
            "redis+cluster" => ("redis", Topology::Cluster),
            "rediss+cluster" => ("rediss", Topology::Cluster),
            _ => return Ok(Self::Single(parse_single(url)?)),
        };
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(authority_end);
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let default_port = match topology {
            Topology::Sentinel => SENTINEL_PORT,
            Topology::Cluster => REDIS_PORT,
        };
        let addresses = split_hosts(hosts, default_port).map_err(bad)?;
        if path.contains(['?', '#']) {
            return Err(bad(
                "query parameters and fragments are not supported here".into()
            ));
        }
        let node = |address: &str, credentials: bool| {
            let userinfo = match (credentials, userinfo) {
                (true, Some(userinfo)) => format!("{userinfo}@"),
                _ => String::new(),
            };
            parse_single(&format!("{node_scheme}://{userinfo}{address}"))
        };
        match topology {
            Topology::Cluster => {
                if !path.trim_matches('/').is_empty() {
                    return Err(bad(
                        "a cluster url takes no path (a cluster has one database)".into(),
                    ));
                }
                let seeds = addresses
                    .iter()
                    .map(|address| node(address, true))
                    .collect::<Result<Vec<_>>>()?;
                Ok(Self::Cluster { seeds })
            }
            Topology::Sentinel => {
                let mut segments = path.trim_start_matches('/').split('/');
                let master = segments.next().unwrap_or_default();
                if master.is_empty() {
                    return Err(bad(
                        "a sentinel url needs the master's name: redis+sentinel://host:port/NAME"
                            .into(),
                    ));
                }
                let db = match segments.next() {
                    None | Some("") => None,
                    Some(db) => Some(
                        db.parse::<i64>()
                            .map_err(|_| bad(format!("invalid database number {db:?}")))?,
                    ),
                };
                if segments.next().is_some() {
                    return Err(bad("a sentinel url's path is /NAME[/DB]".into()));
                }
                let sentinels = addresses
                    .iter()
                    .map(|address| node(address, false))
                    .collect::<Result<Vec<_>>>()?;
                let db_path = db.map(|db| format!("/{db}")).unwrap_or_default();
                let data = node(&format!("{}{db_path}", addresses[0]), true)?;
                Ok(Self::Sentinel {
                    sentinels,
                    master: master.to_owned(),
                    data,
                })
            }
        }
    }
}

impl Endpoint {
    /// Whether the URL asks for TLS.
    pub(crate) fn is_tls(&self) -> bool {
        let info = match self {
            Self::Single(info) | Self::Sentinel { data: info, .. } => Some(info),
            Self::Cluster { seeds } => seeds.first(),
        };
        info.is_some_and(|info| matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }))
    }
}

#[derive(Clone, Copy)]
enum Topology {
    Sentinel,
    Cluster,
}

/// `host[:port],host[:port]...` as `host:port` strings (IPv6 hosts in brackets).
fn split_hosts(hosts: &str, default_port: u16) -> std::result::Result<Vec<String>, String> {
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
    if addresses.is_empty() {
        return Err("no host".into());
    }
    Ok(addresses)
}

/// Parses a one-server URL, naming what is wrong when it does not parse.
pub(crate) fn parse_single(url: &str) -> Result<ConnectionInfo> {
    let parsed = match url::Url::parse(url) {
        Ok(parsed) => parsed,
        Err(e) => {
            return Err(Error::invalid(format!(
                "cannot parse redis url {}: {e}",
                redact_url(url)
            )));
        }
    };
    let bad = |what: String| Error::invalid(format!("redis url {}: {what}", redact_url(url)));
    match parsed.scheme() {
        "redis" | "rediss" | "valkey" | "valkeys" | "unix" | "redis+unix" | "valkey+unix" => {}
        other => {
            return Err(bad(format!(
                "unsupported scheme {other:?}; use redis://, rediss:// (TLS), unix://, \
                 redis+sentinel:// or redis+cluster://"
            )));
        }
    }
    parsed
        .into_connection_info()
        .map_err(|e| bad(redis_reason(&e)))
}

/// The URL with its password replaced by `***`.
///
/// Everything between the scheme and the last `@` counts as user and password, even where
/// a URL parser would read part of it as a path (`redis://user:/pw@host` parses as host
/// `user` and path `/pw@host`): a password with a `/`, `?` or `#` that was not
/// percent-encoded stays hidden. Only a user name free of those characters is kept.
pub(crate) fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return if url.contains('@') {
            "***".to_owned()
        } else {
            url.to_owned()
        };
    };
    let rest = &url[scheme_end + 3..];
    let Some(at) = rest.rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &rest[..at];
    let redacted_userinfo = match userinfo.split_once(':') {
        Some((user, _)) if !user.contains(['/', '?', '#']) => format!("{user}:***"),
        // `redis://secret@host` puts the password where the user would be.
        _ => "***".to_owned(),
    };
    format!(
        "{}{redacted_userinfo}{}",
        &url[..scheme_end + 3],
        &rest[at..]
    )
}

#[cfg(test)]
mod tests {
    use redis::ConnectionAddr;

    use super::*;

    fn host_port(info: &ConnectionInfo) -> (String, u16) {
        match info.addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                (host.clone(), *port)
            }
            other => panic!("not tcp: {other:?}"),
        }
    }

    #[test]
    fn one_server_urls_stay_as_they_are() {
        assert!(matches!(
            Endpoint::parse("redis://127.0.0.1:6380/2"),
            Ok(Endpoint::Single(info)) if info.redis_settings().db() == 2
        ));
        assert!(Endpoint::parse("http://x").is_err());
        assert!(Endpoint::parse("").is_err());
    }

    #[test]
    fn sentinel_urls_name_the_sentinels_and_the_master() {
        let Ok(Endpoint::Sentinel {
            sentinels,
            master,
            data,
        }) = Endpoint::parse("redis+sentinel://u:pw@10.0.0.1,10.0.0.2:26380,[::1]:1/shop/3")
        else {
            panic!("not a sentinel endpoint");
        };
        assert_eq!(master, "shop");
        let addrs: Vec<_> = sentinels.iter().map(host_port).collect();
        assert_eq!(
            addrs,
            [
                ("10.0.0.1".to_owned(), 26379),
                ("10.0.0.2".to_owned(), 26380),
                ("::1".to_owned(), 1)
            ]
        );
        assert!(
            sentinels
                .iter()
                .all(|s| s.redis_settings().password().is_none())
        );
        assert_eq!(data.redis_settings().password(), Some("pw"));
        assert_eq!(data.redis_settings().username(), Some("u"));
        assert_eq!(data.redis_settings().db(), 3);
        for bad in [
            "redis+sentinel://h1,h2",
            "redis+sentinel://h1,,h2/m",
            "redis+sentinel://h1/m/x",
            "redis+sentinel://h1/m/1/2",
            "redis+sentinel:///m",
        ] {
            assert!(
                matches!(Endpoint::parse(bad), Err(Error::InvalidArgument(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn cluster_urls_list_seed_nodes() {
        let Ok(Endpoint::Cluster { seeds }) =
            Endpoint::parse("rediss+cluster://:secret@a:7000,b:7001,c")
        else {
            panic!("not a cluster endpoint");
        };
        let addrs: Vec<_> = seeds.iter().map(host_port).collect();
        assert_eq!(
            addrs,
            [
                ("a".to_owned(), 7000),
                ("b".to_owned(), 7001),
                ("c".to_owned(), 6379)
            ]
        );
        assert!(
            seeds
                .iter()
                .all(|s| matches!(s.addr(), ConnectionAddr::TcpTls { .. }))
        );
        assert!(
            seeds
                .iter()
                .all(|s| s.redis_settings().password() == Some("secret"))
        );
        assert!(Endpoint::parse("redis+cluster://a:1/0").is_err());
        // The password never shows in the error.
        let Err(e) = Endpoint::parse("redis+cluster://u:topsecret@a:1/0") else {
            panic!("accepted");
        };
        assert!(!e.to_string().contains("topsecret"), "{e}");
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact_url("redis://:pw@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact_url("rediss://u:pw@h"), "rediss://u:***@h");
        assert_eq!(redact_url("redis://pw@h"), "redis://***@h");
        assert_eq!(redact_url("redis://h:6379"), "redis://h:6379");
        assert_eq!(redact_url("redis://u:p@ss@h/1"), "redis://u:***@h/1");
        // An @ in the query hides more than the password, never less.
        assert_eq!(redact_url("redis://u:p@h/1?x=@"), "redis://u:***@");
        assert_eq!(redact_url("not a url"), "not a url");
        assert_eq!(redact_url("pw@host"), "***");
        // Unencoded /, ? or # in a password: a parser reads a path, the password hides.
        assert_eq!(redact_url("redis://u:pa/ss@h:1"), "redis://u:***@h:1");
        assert_eq!(
            redact_url("redis://default:/pw@h:1"),
            "redis://default:***@h:1"
        );
        assert_eq!(redact_url("redis://pa/ss:x@h"), "redis://***@h");
    }
}

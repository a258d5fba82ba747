//! `zk://` URLs: the servers, the chroot and the credentials, parsed once and printed
//! without the password.

use std::fmt;
use std::time::Duration;

use ferrisson_core::{Error, Result};

/// The port ZooKeeper clients use when a URL names none.
const DEFAULT_PORT: u16 = 2181;

/// Where a [`Client`](crate::Client) connects: parsed from
/// `zk://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/CHROOT][?session_timeout_ms=N]`
/// (`zookeeper://` too). A port defaults to 2181; the chroot is created if missing;
/// credentials are sent as ZooKeeper `digest` authentication. `Display` and `Debug`
/// never show the password.
///
/// ```
/// use ferrisson_zookeeper::Endpoint;
///
/// let endpoint = Endpoint::parse("zk://app:s3cret@zk1:2181,zk2/shop")?;
/// assert_eq!(endpoint.connect_string(), "zk1:2181,zk2:2181");
/// assert_eq!(endpoint.chroot(), Some("/shop"));
/// assert_eq!(endpoint.to_string(), "zk://app:***@zk1:2181,zk2:2181/shop");
/// # Ok::<(), ferrisson_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    hosts: Vec<(String, u16)>,
    chroot: Option<String>,
    credentials: Option<(String, String)>,
    session_timeout: Option<Duration>,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Endpoint").field(&self.to_string()).finish()
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("zk://")?;
        if let Some((user, _)) = &self.credentials {
            write!(f, "{}:***@", user.escape_debug())?;
        }
        f.write_str(&self.connect_string())?;
        if let Some(chroot) = &self.chroot {
            write!(f, "{}", chroot.escape_debug())?;
        }
        if let Some(timeout) = self.session_timeout {
            write!(f, "?session_timeout_ms={}", timeout.as_millis())?;
        }
        Ok(())
    }
}

impl Endpoint {
    /// Parses a `zk://` URL (see the type's docs).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] naming what is wrong: another scheme, no host, a bad
    /// port, a chroot that is not a valid ZooKeeper path, an unknown query parameter.
    /// The message never contains the password.
    ///
    /// ```
    /// use ferrisson_zookeeper::Endpoint;
    /// assert!(Endpoint::parse("redis://x").is_err());
    /// assert!(Endpoint::parse("zk://h:notaport").is_err());
    /// assert!(Endpoint::parse("zk://").is_err());
    /// ```
    pub fn parse(url: &str) -> Result<Self> {
        let rest = ["zk://", "zookeeper://"]
            .iter()
            .find_map(|scheme| {
                url.get(..scheme.len())
                    .filter(|s| s.eq_ignore_ascii_case(scheme))
                    .map(|_| &url[scheme.len()..])
            })
            .ok_or_else(|| Error::invalid("a ZooKeeper url starts with zk:// or zookeeper://"))?;
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query)),
            None => (rest, None),
        };
        let (authority, chroot) = match rest.find('/') {
            Some(i) => (&rest[..i], Some(&rest[i..])),
            None => (rest, None),
        };
        let (credentials, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => {
                let (user, password) = userinfo.split_once(':').ok_or_else(|| {
                    Error::invalid(
                        "ZooKeeper credentials are USER:PASSWORD@ (digest authentication)",
                    )
                })?;
                if user.is_empty() {
                    return Err(Error::invalid("a ZooKeeper url's user must not be empty"));
                }
                (Some((user.to_owned(), password.to_owned())), hosts)
            }
            None => (None, authority),
        };
        let hosts = hosts
            .split(',')
            .map(parse_host)
            .collect::<Result<Vec<_>>>()?;
        let chroot = match chroot {
            None | Some("/") => None,
            Some(path) => {
                let path = path.trim_end_matches('/');
                crate::path::validate_path(path).map_err(|e| {
                    Error::invalid(format!("the url's chroot: {}", strip_invalid(&e)))
                })?;
                Some(path.to_owned())
            }
        };
        let mut session_timeout = None;
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("session_timeout_ms", value)) => {
                    let ms: u64 = value.parse().map_err(|_| {
                        Error::invalid(format!(
                            "session_timeout_ms must be a number of milliseconds, got {:?}",
                            value.escape_debug().to_string()
                        ))
                    })?;
                    if ms == 0 {
                        return Err(Error::invalid("session_timeout_ms must be above zero"));
                    }
                    session_timeout = Some(Duration::from_millis(ms));
                }
                _ => {
                    return Err(Error::invalid(format!(
                        "unknown ZooKeeper url parameter {:?}: the one known is session_timeout_ms",
                        pair.split('=')
                            .next()
                            .unwrap_or(pair)
                            .escape_debug()
                            .to_string()
                    )));
                }
            }
        }
        Ok(Self {
            hosts,
            chroot,
            credentials,
            session_timeout,
        })
    }

    /// `HOST:PORT[,HOST:PORT...]`, as the client library takes it.
    pub fn connect_string(&self) -> String {
        self.hosts
            .iter()
            .map(|(host, port)| format!("{host}:{port}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The chroot every path is under, if the URL names one.
    pub fn chroot(&self) -> Option<&str> {
        self.chroot.as_deref()
    }

    /// The session timeout the URL asks for, if any.
    pub fn session_timeout(&self) -> Option<Duration> {
        self.session_timeout
    }

    /// `USER:PASSWORD` for digest authentication, if the URL has credentials.
    pub(crate) fn digest(&self) -> Option<Vec<u8>> {
        self.credentials
            .as_ref()
            .map(|(user, password)| format!("{user}:{password}").into_bytes())
    }
}

fn parse_host(host: &str) -> Result<(String, u16)> {
    if host.is_empty() {
        return Err(Error::invalid(
            "a ZooKeeper url names at least one HOST[:PORT], comma-separated without empty entries",
        ));
    }
    let (name, port) = match host.rsplit_once(':') {
        // An IPv6 literal in brackets keeps its colons.
        Some((name, port)) if !port.contains(']') => {
            let port: u16 = port.parse().ok().filter(|p| *p != 0).ok_or_else(|| {
                Error::invalid(format!(
                    "bad port in ZooKeeper host {:?}",
                    host.escape_debug().to_string()
                ))
            })?;
            (name, port)
        }
        _ => (host, DEFAULT_PORT),
    };
    if name.is_empty() || name.contains(['/', '@', ' ']) {
        return Err(Error::invalid(format!(
            "bad ZooKeeper host {:?}",
            host.escape_debug().to_string()
        )));
    }
    Ok((name.to_owned(), port))
}

fn strip_invalid(error: &Error) -> String {
    match error {
        Error::InvalidArgument(message) => message.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_chroot_and_timeout_are_parsed() {
        let e = Endpoint::parse("ZK://a,b:2182/x/y/?session_timeout_ms=1500").expect("valid");
        assert_eq!(e.connect_string(), "a:2181,b:2182");
        assert_eq!(e.chroot(), Some("/x/y"));
        assert_eq!(e.session_timeout(), Some(Duration::from_millis(1500)));
        assert_eq!(e.digest(), None);
    }

    #[test]
    fn the_password_never_shows() {
        let e = Endpoint::parse("zookeeper://u:hunter2@h").expect("valid");
        assert!(!e.to_string().contains("hunter2"));
        assert!(!format!("{e:?}").contains("hunter2"));
        assert_eq!(e.digest().as_deref(), Some(&b"u:hunter2"[..]));
        let error = Endpoint::parse("zk://u:hunter2@h:99999").expect_err("bad port");
        assert!(!error.to_string().contains("hunter2"), "{error}");
    }

    #[test]
    fn bad_urls_are_invalid_arguments() {
        for url in [
            "zk://",
            "zk://a,,b",
            "zk://a:0",
            "zk://a/b//c",
            "zk://a/zookeeper",
            "zk://a?x=1",
            "zk://a?session_timeout_ms=soon",
            "zk://:pw@a",
            "etcd://a",
        ] {
            assert!(
                matches!(Endpoint::parse(url), Err(Error::InvalidArgument(_))),
                "{url}"
            );
        }
    }
}

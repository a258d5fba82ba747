//! `etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]`: the members a client connects to.

use ferrisson_core::{Error, Result};

/// The port etcd serves clients on when a URL names none.
const DEFAULT_PORT: u16 = 2379;

/// What an `etcd://` URL says.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct EtcdUrl {
    /// `http://HOST:PORT`, one per member named.
    pub(crate) endpoints: Vec<String>,
    /// The user and password to authenticate as.
    pub(crate) credentials: Option<(String, String)>,
}

impl std::fmt::Debug for EtcdUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl EtcdUrl {
    /// Parses `url`; see the module docs.
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(Error::invalid(
                "an etcd url is etcd://HOST:PORT[,HOST:PORT...]",
            ));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "etcd" => {}
            "etcds" => {
                return Err(Error::invalid(
                    "etcds:// (TLS) is not supported yet: use etcd:// on a trusted network",
                ));
            }
            _ => {
                return Err(Error::invalid(
                    "an etcd url starts with etcd:// (etcd://HOST:PORT[,HOST:PORT...])",
                ));
            }
        }
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#']) {
            return Err(Error::invalid(
                "an etcd url has no path or query: etcd://HOST:PORT[,HOST:PORT...]",
            ));
        }
        let (credentials, hosts) = match rest.rsplit_once('@') {
            Some((userinfo, hosts)) => {
                let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
                if user.is_empty() {
                    return Err(Error::invalid("an etcd url's user name must not be empty"));
                }
                (Some((user.to_owned(), password.to_owned())), hosts)
            }
            None => (None, rest),
        };
        let mut endpoints = Vec::new();
        for host in hosts.split(',') {
            endpoints.push(endpoint(host)?);
        }
        Ok(Self {
            endpoints,
            credentials,
        })
    }

    /// The URL with the password replaced by `***`, for messages.
    pub(crate) fn redacted(&self) -> String {
        let hosts: Vec<&str> = self
            .endpoints
            .iter()
            .map(|e| e.trim_start_matches("http://"))
            .collect();
        let user = match &self.credentials {
            Some((user, _)) => format!("{user}:***@"),
            None => String::new(),
        };
        format!("etcd://{user}{}", hosts.join(","))
    }
}

/// `http://HOST:PORT` for one `HOST[:PORT]` of the URL.
fn endpoint(host: &str) -> Result<String> {
    if host.is_empty() {
        return Err(Error::invalid(
            "an etcd url names at least one HOST:PORT, separated by commas",
        ));
    }
    // An IPv6 address is bracketed: [::1]:2379.
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) if !port.contains(']') => {
            let port: u16 = port.parse().map_err(|_| {
                Error::invalid(format!(
                    "bad port in etcd url: {:?}",
                    port.escape_debug().to_string()
                ))
            })?;
            (name, port)
        }
        _ => (host, DEFAULT_PORT),
    };
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(Error::invalid(format!(
            "bad host in etcd url: {:?}",
            name.escape_debug().to_string()
        )));
    }
    Ok(format!("http://{name}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::EtcdUrl;

    #[test]
    fn members_credentials_and_default_port() {
        let url = EtcdUrl::parse("etcd://me:secret@a:1,b,[::1]:3/").expect("valid");
        assert_eq!(
            url.endpoints,
            ["http://a:1", "http://b:2379", "http://[::1]:3"]
        );
        assert_eq!(url.credentials, Some(("me".into(), "secret".into())));
        assert_eq!(url.redacted(), "etcd://me:***@a:1,b:2379,[::1]:3");
        assert!(!format!("{url:?}").contains("secret"));
    }

    #[test]
    fn bad_urls_are_refused() {
        for bad in [
            "etcd://",
            "etcd://a:x",
            "etcd://a,,b",
            "etcd://a/path",
            "etcds://a",
            "redis://a",
            "a:1",
        ] {
            assert!(EtcdUrl::parse(bad).is_err(), "{bad}");
        }
    }
}

#[cfg(test)]
mod tls_tests {
    use ferrisson_core::Error;

    use super::EtcdUrl;

    /// TLS is not supported: an `etcds://` URL is refused up front, with a message that
    /// says so and names the scheme that is, rather than connecting in plain text to a
    /// member that expects TLS (or failing at the handshake with a transport error).
    #[test]
    fn a_tls_url_is_refused_naming_what_is_supported() {
        for url in ["etcds://127.0.0.1:2379", "ETCDS://a:1,b:2"] {
            let error = EtcdUrl::parse(url).expect_err("TLS is not supported");
            assert!(matches!(error, Error::InvalidArgument(_)), "{error:?}");
            let message = error.to_string();
            for named in ["etcds://", "TLS", "not supported", "etcd://"] {
                assert!(message.contains(named), "{named:?} not in {message:?}");
            }
        }
    }

    #[tokio::test]
    async fn connecting_with_a_tls_url_fails_before_any_connection() {
        let error = crate::Client::connect("etcds://127.0.0.1:1")
            .await
            .expect_err("TLS is not supported");
        assert!(matches!(error, Error::InvalidArgument(_)), "{error:?}");
        assert!(error.to_string().contains("etcd://"), "{error}");
    }
}

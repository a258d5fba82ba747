//! How the subcommands are told where the store is (one `--url` flag, then the
//! environment) and, for Redis, how to check its TLS certificate.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use ferrisson::StoreKind;
use ferrisson::redis::{Client, ClientBuilder, TlsConfig};

use crate::arguments::Refused;

/// Where Redis is when neither the flag nor the environment says.
const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// The environment variables read for the URL when `--url` is not given, first one set
/// (and not empty) wins. `FERRISSON_REDIS_URL` is the older name of `FERRISSON_URL`.
const URL_VARIABLES: [&str; 3] = ["FERRISSON_URL", "FERRISSON_REDIS_URL", "REDIS_URL"];

/// The Redis URL schemes (the library's), and whether each asks for TLS.
const REDIS_SCHEMES: [(&str, bool); 11] = [
    ("redis", false),
    ("rediss", true),
    ("valkey", false),
    ("valkeys", true),
    ("unix", false),
    ("redis+unix", false),
    ("valkey+unix", false),
    ("redis+sentinel", false),
    ("rediss+sentinel", true),
    ("redis+cluster", false),
    ("rediss+cluster", true),
];

/// The connection flags of every subcommand that connects. The TLS flags (Redis only)
/// carry redis-cli's names.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectionArgs {
    /// The store's URL: redis://[USER:PASSWORD@]HOST:PORT[/DB] (rediss:// for TLS, redis+sentinel://, redis+cluster://), or another store's URL for lock and elect (zk://HOST:PORT[,HOST:PORT...][/CHROOT]) [default: $FERRISSON_URL, else $REDIS_URL, else redis://127.0.0.1:6379]
    #[arg(long, visible_alias = "redis", value_name = "URL")]
    url: Option<String>,

    /// TLS: trust the CA certificates in this PEM file instead of the system's
    #[arg(long, value_name = "FILE")]
    cacert: Option<PathBuf>,

    /// TLS: present this client certificate (PEM, with any intermediates), for servers with tls-auth-clients
    #[arg(long, value_name = "FILE", requires = "key")]
    cert: Option<PathBuf>,

    /// TLS: the private key of --cert (PEM)
    #[arg(long, value_name = "FILE", requires = "cert")]
    key: Option<PathBuf>,

    /// TLS: accept any server certificate, for any host name (encrypted but not authenticated: for tests only)
    #[arg(long)]
    insecure: bool,
}

impl ConnectionArgs {
    /// Refuses a URL no store could be reached at (empty, no `scheme://`, a scheme no
    /// store uses, a store this build does not have), TLS flags with a URL that asks for
    /// no TLS or is not Redis's, and TLS files that cannot be read. What only the store's
    /// own parser sees (a port out of range, a certificate that does not parse) it
    /// refuses before connecting too.
    pub fn check(&self) -> Result<(), Refused> {
        let (url, source) = self.url();
        if url.is_empty() {
            return Err(Refused::new(
                &source,
                "the URL is empty; give one like redis://HOST:PORT",
            ));
        }
        // Only the scheme is shown: the rest may hold a password.
        let Some((scheme, _)) = url.split_once("://") else {
            return Err(Refused::new(
                &source,
                "not a URL (no scheme://); give one like redis://HOST:PORT",
            ));
        };
        let kind = StoreKind::of_url(&url).map_err(|_| {
            Refused::new(
                &source,
                format!(
                    "unknown scheme {}; use redis:// (rediss:// for TLS), unix://, \
                     redis+sentinel://, redis+cluster://, postgres://, mysql://, zk://, \
                     etcd:// or memory://",
                    crate::terminal::quoted(scheme),
                ),
            )
        })?;
        if !kind.is_compiled() {
            let why = match kind.feature() {
                Some(feature) if kind.is_available() => format!(
                    "{scheme}:// URLs need a ferrisson built with the {feature} feature \
                     (cargo install ferrisson-cli --features {feature})"
                ),
                _ => format!("this version of ferrisson has no {} store yet", kind.name()),
            };
            return Err(Refused::new(&source, why));
        }
        let tls = REDIS_SCHEMES
            .iter()
            .find(|(known, _)| *known == scheme)
            .is_some_and(|&(_, tls)| tls);
        if !tls && let Some(flag) = self.tls_flag() {
            return Err(Refused::because(format!(
                "{flag} needs a Redis TLS URL (rediss://, rediss+sentinel:// or \
                 rediss+cluster://), and the URL ({source}) is {scheme}://"
            )));
        }
        for (flag, path) in [
            ("--cacert", &self.cacert),
            ("--cert", &self.cert),
            ("--key", &self.key),
        ] {
            if let Some(path) = path
                && let Err(e) = std::fs::read(path)
            {
                return Err(Refused::value(
                    flag,
                    &path.to_string_lossy(),
                    format!("cannot read the file: {}", lowercase_first(&e.to_string())),
                ));
            }
        }
        Ok(())
    }

    /// Refuses, for a subcommand that only Redis serves (`what` says what it does), a URL
    /// of another store.
    pub fn check_redis_only(&self, what: &str) -> Result<(), Refused> {
        self.check()?;
        let (url, source) = self.url();
        match StoreKind::of_url(&url) {
            Ok(StoreKind::Redis) | Err(_) => Ok(()),
            Ok(other) => Err(Refused::new(
                &source,
                format!(
                    "{} cannot {what}: only Redis keeps a listing of what is held \
                     (lock and elect work on every store)",
                    other.name()
                ),
            )),
        }
    }

    /// The URL the flag or the environment names, and where it came from.
    fn url(&self) -> (String, String) {
        resolve_url(self.url.clone(), |name| std::env::var(name).ok())
    }

    /// The first TLS flag given, if any.
    fn tls_flag(&self) -> Option<&'static str> {
        [
            ("--cacert", self.cacert.is_some()),
            ("--cert", self.cert.is_some()),
            ("--key", self.key.is_some()),
            ("--insecure", self.insecure),
        ]
        .into_iter()
        .find_map(|(flag, given)| given.then_some(flag))
    }

    /// A Redis client builder for the URL these flags (or the environment) name, with
    /// the TLS settings they give (for the subcommands only Redis serves).
    pub fn builder(&self) -> anyhow::Result<ClientBuilder> {
        let (url, _) = self.url();
        let builder = Client::builder(&url);
        Ok(match self.tls()? {
            Some(tls) => builder.tls(tls),
            None => builder,
        })
    }

    /// A builder of a client of whichever store the URL names, with the TLS settings the
    /// flags give when it is Redis.
    pub fn any_builder(&self) -> anyhow::Result<ferrisson::ClientBuilder> {
        let (url, _) = self.url();
        let builder = ferrisson::Client::builder(&url);
        Ok(match self.tls()? {
            Some(tls) => builder.redis(move |redis| redis.tls(tls)),
            None => builder,
        })
    }

    /// The TLS settings, when any flag gives one; the files are read here.
    fn tls(&self) -> anyhow::Result<Option<TlsConfig>> {
        if self.cacert.is_none() && self.cert.is_none() && !self.insecure {
            return Ok(None);
        }
        let mut tls = TlsConfig::new().danger_accept_invalid_certificates(self.insecure);
        if let Some(path) = &self.cacert {
            tls = tls.ca_certificates(read("--cacert", path)?);
        }
        if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
            tls = tls.client_certificate(read("--cert", cert)?, read("--key", key)?);
        }
        Ok(Some(tls))
    }
}

/// The contents of the file a flag names.
fn read(flag: &str, path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {flag} {}", path.display()))
}

/// `"No such file or directory"` as `"no such file or directory"`.
fn lowercase_first(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|first| first.to_lowercase().chain(chars).collect())
        .unwrap_or_default()
}

/// `--url`, else the first of [`URL_VARIABLES`] that is set and not empty, else
/// [`DEFAULT_URL`], with where it came from (`--url`, `$FERRISSON_URL`, ...); `env`
/// reads a variable.
fn resolve_url(flag: Option<String>, env: impl Fn(&str) -> Option<String>) -> (String, String) {
    if let Some(url) = flag {
        return (url, "--url".to_owned());
    }
    URL_VARIABLES
        .iter()
        .find_map(|name| {
            env(name)
                .filter(|value| !value.is_empty())
                .map(|url| (url, format!("${name}")))
        })
        .unwrap_or_else(|| (DEFAULT_URL.to_owned(), "--url".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(flag: Option<&str>, set: &[(&str, &str)]) -> String {
        resolve_url(flag.map(str::to_owned), |name| {
            set.iter()
                .find(|(set_name, _)| *set_name == name)
                .map(|(_, value)| (*value).to_owned())
        })
        .0
    }

    #[test]
    fn the_flag_then_each_variable_in_order_then_local() {
        let all = [
            ("FERRISSON_URL", "redis://new"),
            ("FERRISSON_REDIS_URL", "redis://older"),
            ("REDIS_URL", "redis://generic"),
        ];
        assert_eq!(resolved(Some("redis://flag"), &all), "redis://flag");
        assert_eq!(resolved(None, &all), "redis://new");
        assert_eq!(resolved(None, &all[1..]), "redis://older");
        assert_eq!(resolved(None, &all[2..]), "redis://generic");
        assert_eq!(resolved(None, &[]), DEFAULT_URL);
    }

    fn with_url(url: &str) -> ConnectionArgs {
        ConnectionArgs {
            url: Some(url.to_owned()),
            cacert: None,
            cert: None,
            key: None,
            insecure: false,
        }
    }

    /// Every scheme the check lets through, the library takes too (it fails to connect to
    /// a closed port instead of refusing the URL), and one it refuses, the library
    /// refuses.
    #[tokio::test]
    async fn the_schemes_are_the_librarys() {
        for (scheme, _) in REDIS_SCHEMES {
            let url = match scheme {
                "unix" | "redis+unix" | "valkey+unix" => format!("{scheme}:///nonexistent.sock"),
                "redis+sentinel" | "rediss+sentinel" => format!("{scheme}://127.0.0.1:1/master"),
                _ => format!("{scheme}://127.0.0.1:1"),
            };
            assert!(with_url(&url).check().is_ok(), "{url}");
            let connected = Client::builder(&url).connect().await;
            assert!(
                !matches!(connected, Err(ferrisson::Error::InvalidArgument(_))),
                "{url}: {connected:?}"
            );
        }
        let unknown = "memcache://127.0.0.1:1";
        assert!(with_url(unknown).check().is_err());
        assert!(matches!(
            Client::builder(unknown).connect().await,
            Err(ferrisson::Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn an_empty_variable_counts_as_unset() {
        assert_eq!(
            resolved(
                None,
                &[("FERRISSON_URL", ""), ("REDIS_URL", "redis://generic")]
            ),
            "redis://generic"
        );
    }
}

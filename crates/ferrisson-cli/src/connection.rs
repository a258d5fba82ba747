//! How the subcommands that talk to Redis are told where it is (one `--url` flag, then
//! the environment) and how to check its TLS certificate.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use ferrisson::redis::{Client, ClientBuilder, TlsConfig};

/// Where Redis is when neither the flag nor the environment says.
const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// The environment variables read for the URL when `--url` is not given, first one set
/// (and not empty) wins. `FERRISSON_REDIS_URL` is the older name of `FERRISSON_URL`.
const URL_VARIABLES: [&str; 3] = ["FERRISSON_URL", "FERRISSON_REDIS_URL", "REDIS_URL"];

/// The connection flags of `lock`, `id next` and `id count`. The TLS flags carry
/// redis-cli's names.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectionArgs {
    /// Redis URL, e.g. redis://[USER:PASSWORD@]HOST:PORT[/DB], or rediss:// for TLS [default: $FERRISSON_URL, else $REDIS_URL, else redis://127.0.0.1:6379]
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
    /// A client builder for the URL these flags (or the environment) name, with the TLS
    /// settings they give.
    pub fn builder(&self) -> anyhow::Result<ClientBuilder> {
        let url = resolve_url(self.url.clone(), |name| std::env::var(name).ok());
        let builder = Client::builder(&url);
        Ok(match self.tls()? {
            Some(tls) => builder.tls(tls),
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

/// `--url`, else the first of [`URL_VARIABLES`] that is set and not empty, else
/// [`DEFAULT_URL`]; `env` reads a variable.
fn resolve_url(flag: Option<String>, env: impl Fn(&str) -> Option<String>) -> String {
    flag.or_else(|| {
        URL_VARIABLES
            .iter()
            .find_map(|name| env(name).filter(|value| !value.is_empty()))
    })
    .unwrap_or_else(|| DEFAULT_URL.to_owned())
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

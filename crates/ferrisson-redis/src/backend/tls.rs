//! TLS settings beyond the `rediss://` URL, and the one crypto provider TLS runs on.

use std::fmt;
use std::sync::Once;

use redis::{ClientTlsConfig, ConnectionAddr, ConnectionInfo, TlsCertificates};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::api::error::{Error, Result};

/// How a client checks a TLS server and proves itself to it.
///
/// Used with a `rediss://`, `rediss+sentinel://` or `rediss+cluster://` URL through
/// [`ClientBuilder::tls`](crate::ClientBuilder::tls): the same settings serve every
/// server of the topology (the sentinels and the master they name; every cluster node,
/// discovered ones included). Without it, a TLS client trusts the system's root
/// certificates and presents no certificate of its own. PEM data is taken as bytes, so it can come from a file,
/// an environment variable or a secret store; it is checked when the client connects.
///
/// Debug output names which settings are present, never their contents.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use ferrisson_redis::{Client, TlsConfig};
///
/// let tls = TlsConfig::new()
///     .ca_certificates(std::fs::read("/etc/redis/ca.pem")?)
///     .client_certificate(
///         std::fs::read("/etc/redis/client.pem")?,
///         std::fs::read("/etc/redis/client.key")?,
///     );
/// let client = Client::builder("rediss://redis.internal:6380").tls(tls).connect().await?;
/// # let _ = client; Ok(()) }
/// ```
///
/// # Crypto provider
///
/// TLS runs on rustls with the `ring` provider. When the application has not installed a
/// process-wide rustls provider before the first `rediss://` connect, ferrisson installs
/// `ring` as that default; one the application installed first is used as it is.
#[must_use]
#[derive(Clone, Default)]
pub struct TlsConfig {
    ca_certificates: Option<Vec<u8>>,
    client_certificate: Option<ClientCertificate>,
    accept_invalid_certificates: bool,
}

#[derive(Clone)]
struct ClientCertificate {
    chain: Vec<u8>,
    key: Vec<u8>,
}

impl TlsConfig {
    /// No settings: verify the server against the system's root certificates, present no
    /// client certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Verifies the server against these CA certificates (PEM, one or more) instead of the
    /// system's root certificates, e.g. the CA behind a server's `tls-cert-file`.
    pub fn ca_certificates(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_certificates = Some(pem.into());
        self
    }

    /// Presents this certificate (PEM: the certificate, then any intermediates) and its
    /// private key (PEM: PKCS#8, PKCS#1 or SEC1) to the server, as servers running with
    /// `tls-auth-clients yes` require.
    pub fn client_certificate(
        mut self,
        certificate_chain_pem: impl Into<Vec<u8>>,
        private_key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.client_certificate = Some(ClientCertificate {
            chain: certificate_chain_pem.into(),
            key: private_key_pem.into(),
        });
        self
    }

    /// With `true`, accepts any server certificate, for any host name: the connection is
    /// encrypted but anyone between the client and the server can read and change it.
    /// Meant for tests and first trials against a self-signed server, never for
    /// production. The URL fragment `rediss://host:port/#insecure` does the same.
    ///
    /// Behind Sentinel, redis-rs's sentinel client then presents no client certificate to
    /// the master (it does to the sentinels): a master with `tls-auth-clients yes`
    /// refuses the connection. Give the CA with [`TlsConfig::ca_certificates`] instead.
    pub fn danger_accept_invalid_certificates(mut self, accept: bool) -> Self {
        self.accept_invalid_certificates = accept;
        self
    }

    /// The redis-rs client for `info` (a `rediss://` address) with these settings.
    pub(crate) fn apply(&self, info: ConnectionInfo) -> Result<redis::Client> {
        let ConnectionAddr::TcpTls {
            host,
            port,
            insecure,
            ..
        } = info.addr().clone()
        else {
            return Err(Error::invalid(
                "tls settings need a rediss:// url (the url asks for a plain connection)",
            ));
        };
        let info = info.set_addr(ConnectionAddr::TcpTls {
            host,
            port,
            insecure: insecure || self.accept_invalid_certificates,
            tls_params: None,
        });
        redis::Client::build_with_tls(info, self.certificates()?).map_err(|e| {
            Error::invalid(format!(
                "tls settings: {}",
                crate::api::error::redis_reason(&e)
            ))
        })
    }

    /// Whether any server certificate is accepted.
    pub(crate) fn accepts_invalid_certificates(&self) -> bool {
        self.accept_invalid_certificates
    }

    /// The CA and client certificate in redis-rs's form, checked to parse.
    pub(crate) fn certificates(&self) -> Result<TlsCertificates> {
        if let Some(pem) = &self.ca_certificates {
            check_certificates(pem, "tls ca certificates")?;
        }
        if let Some(client) = &self.client_certificate {
            check_certificates(&client.chain, "tls client certificate")?;
            if let Err(e) = PrivateKeyDer::from_pem_slice(&client.key) {
                return Err(Error::invalid(format!(
                    "tls client key: no readable private key in the PEM ({e})"
                )));
            }
        }
        Ok(TlsCertificates {
            client_tls: self
                .client_certificate
                .as_ref()
                .map(|client| ClientTlsConfig {
                    client_cert: client.chain.clone(),
                    client_key: client.key.clone(),
                }),
            root_cert: self.ca_certificates.clone(),
        })
    }
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field(
                "ca_certificates",
                &self.ca_certificates.as_ref().map(|_| "<set>"),
            )
            .field(
                "client_certificate",
                &self.client_certificate.as_ref().map(|_| "<set>"),
            )
            .field(
                "accept_invalid_certificates",
                &self.accept_invalid_certificates,
            )
            .finish()
    }
}

/// Refuses PEM data that holds no certificate or a certificate that does not parse: the
/// handshake would otherwise fail later with a less telling error.
fn check_certificates(pem: &[u8], what: &str) -> Result<()> {
    let mut count = 0_usize;
    for certificate in CertificateDer::pem_slice_iter(pem) {
        if let Err(e) = certificate {
            return Err(Error::invalid(format!(
                "{what}: the PEM does not parse ({e})"
            )));
        }
        count += 1;
    }
    if count == 0 {
        return Err(Error::invalid(format!(
            "{what}: the PEM holds no CERTIFICATE block"
        )));
    }
    Ok(())
}

/// Makes `ring` the process's rustls provider unless the application chose one first.
///
/// redis-rs builds its rustls configurations with the process default, and rustls cannot
/// pick one by itself when no provider or several are compiled in: it panics instead.
pub(crate) fn install_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // An Err means the application installed its own first: that one stays.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_no_key_material() {
        let config = TlsConfig::new()
            .ca_certificates("CA-PEM-CONTENT")
            .client_certificate("CERT-PEM-CONTENT", "KEY-PEM-CONTENT");
        let debug = format!("{config:?}");
        assert!(!debug.contains("PEM-CONTENT"), "{debug}");
        assert!(debug.contains("<set>"), "{debug}");
    }

    #[test]
    fn certificates_must_parse() {
        assert!(matches!(
            check_certificates(b"not a pem", "ca"),
            Err(Error::InvalidArgument(m)) if m.contains("no CERTIFICATE block")
        ));
        assert!(matches!(
            check_certificates(b"-----BEGIN CERTIFICATE-----\n@@@\n", "ca"),
            Err(Error::InvalidArgument(m)) if m.contains("does not parse")
        ));
    }
}

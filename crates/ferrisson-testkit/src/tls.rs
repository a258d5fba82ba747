//! A `redis-server` that speaks TLS, with certificates made for the test.

use std::io;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tempfile::TempDir;

use crate::RedisServer;

/// How many TLS ports to try when another process takes ours between probe and bind.
const TLS_PORT_ATTEMPTS: usize = 5;

/// A certificate authority made for one test, and the certificates it signed: one for the
/// server (valid for `127.0.0.1`, `::1` and `localhost`) and one for a client (for servers
/// started with [`ClientAuth::Required`]).
///
/// Every PEM is also written to a private directory, for programs that take file paths
/// (`redis-server` itself, command-line tools under test). The directory is removed on drop.
pub struct TestCertificates {
    dir: TempDir,
    ca_pem: String,
    server_pem: String,
    server_key_pem: String,
    client_pem: String,
    client_key_pem: String,
}

impl std::fmt::Debug for TestCertificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCertificates")
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl TestCertificates {
    /// Makes a fresh CA (ECDSA P-256) and signs a server and a client certificate with it.
    ///
    /// # Errors
    ///
    /// When a key or certificate cannot be made or the files cannot be written.
    pub fn generate() -> io::Result<Self> {
        let ca = make_ca("ferrisson test CA")?;

        let (server_cert, server_key) = sign_leaf(
            &ca,
            &["localhost", "127.0.0.1", "::1"],
            "ferrisson test server",
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        let (client_cert, client_key) = sign_leaf(
            &ca,
            &[],
            "ferrisson test client",
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;

        let certificates = Self {
            dir: tempfile::Builder::new()
                .prefix("ferrisson-tls-")
                .tempdir()?,
            ca_pem: ca.pem(),
            server_pem: server_cert.pem(),
            server_key_pem: server_key.serialize_pem(),
            client_pem: client_cert.pem(),
            client_key_pem: client_key.serialize_pem(),
        };
        for (file, pem) in [
            ("ca.pem", &certificates.ca_pem),
            ("server.pem", &certificates.server_pem),
            ("server.key", &certificates.server_key_pem),
            ("client.pem", &certificates.client_pem),
            ("client.key", &certificates.client_key_pem),
        ] {
            std::fs::write(certificates.dir.path().join(file), pem)?;
        }
        Ok(certificates)
    }

    /// The CA certificate (PEM) that signed the server and client certificates.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The client certificate (PEM), signed by the CA.
    pub fn client_pem(&self) -> &str {
        &self.client_pem
    }

    /// The client certificate's private key (PKCS#8 PEM).
    pub fn client_key_pem(&self) -> &str {
        &self.client_key_pem
    }

    /// The file holding [`TestCertificates::ca_pem`].
    pub fn ca_path(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The file holding [`TestCertificates::client_pem`].
    pub fn client_path(&self) -> PathBuf {
        self.dir.path().join("client.pem")
    }

    /// The file holding [`TestCertificates::client_key_pem`].
    pub fn client_key_path(&self) -> PathBuf {
        self.dir.path().join("client.key")
    }

    pub(crate) fn server_path(&self) -> PathBuf {
        self.dir.path().join("server.pem")
    }

    pub(crate) fn server_key_path(&self) -> PathBuf {
        self.dir.path().join("server.key")
    }
}

/// A self-signed CA certificate that is not the one any [`TestCertificates`] used: a
/// client trusting it must refuse the test servers.
///
/// # Errors
///
/// When the key or the certificate cannot be made.
pub fn unrelated_ca_pem() -> io::Result<String> {
    Ok(make_ca("unrelated test CA")?.pem())
}

/// A certificate for `names` (host names or IP addresses) and `usage`, signed by `ca`.
fn sign_leaf(
    ca: &CertifiedIssuer<'static, KeyPair>,
    names: &[&str],
    common_name: &str,
    usage: ExtendedKeyUsagePurpose,
) -> io::Result<(rcgen::Certificate, KeyPair)> {
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let mut params = CertificateParams::new(names).map_err(io::Error::other)?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate().map_err(io::Error::other)?;
    let certificate = params.signed_by(&key, ca).map_err(io::Error::other)?;
    Ok((certificate, key))
}

fn make_ca(name: &str) -> io::Result<CertifiedIssuer<'static, KeyPair>> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(io::Error::other)?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let key = KeyPair::generate().map_err(io::Error::other)?;
    CertifiedIssuer::self_signed(params, key).map_err(io::Error::other)
}

/// Whether a [`TlsRedisServer`] asks its clients for a certificate (`tls-auth-clients`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// Clients connect without a certificate (`tls-auth-clients no`).
    None,
    /// Clients must present a certificate signed by the test CA (`tls-auth-clients yes`).
    Required,
}

/// A `redis-server` with a TLS port, its certificates made by the test.
///
/// The server keeps a plain port on 127.0.0.1 as well: the kit checks readiness and runs
/// [`RedisServer::command`] over it, so [`TlsRedisServer::server`] works as for any other
/// server. Clients under test connect with [`TlsRedisServer::url`].
///
/// ```no_run
/// use ferrisson_testkit::{ClientAuth, TlsRedisServer};
///
/// let server = TlsRedisServer::start(ClientAuth::None).expect("tls redis-server");
/// println!("{} trusts {}", server.url(), server.certificates().ca_path().display());
/// ```
#[derive(Debug)]
pub struct TlsRedisServer {
    // Dropped first: the server goes before the files it reads.
    server: RedisServer,
    tls_port: u16,
    certificates: TestCertificates,
}

impl TlsRedisServer {
    /// Makes fresh [`TestCertificates`] and starts a server with a TLS port that presents
    /// the server certificate and, with [`ClientAuth::Required`], accepts only clients with
    /// a certificate signed by the test CA.
    ///
    /// # Errors
    ///
    /// As [`RedisServer::start`]; also when the certificates cannot be made, or when this
    /// `redis-server` was built without TLS.
    pub fn start(client_auth: ClientAuth) -> io::Result<Self> {
        Self::start_with_args(client_auth, &[])
    }

    /// As [`TlsRedisServer::start`], with extra `redis-server` arguments.
    ///
    /// # Errors
    ///
    /// As [`TlsRedisServer::start`].
    pub fn start_with_args(client_auth: ClientAuth, args: &[&str]) -> io::Result<Self> {
        let certificates = TestCertificates::generate()?;
        let mut last_error = None;
        for _ in 0..TLS_PORT_ATTEMPTS {
            let tls_port = crate::server::free_port()?;
            let mut all_args = vec![
                "--tls-port".to_owned(),
                tls_port.to_string(),
                "--tls-cert-file".to_owned(),
                path_arg(&certificates.server_path())?,
                "--tls-key-file".to_owned(),
                path_arg(&certificates.server_key_path())?,
                "--tls-ca-cert-file".to_owned(),
                path_arg(&certificates.ca_path())?,
                "--tls-auth-clients".to_owned(),
                match client_auth {
                    ClientAuth::None => "no",
                    ClientAuth::Required => "yes",
                }
                .to_owned(),
            ];
            all_args.extend(args.iter().map(|a| (*a).to_owned()));
            let all_args: Vec<&str> = all_args.iter().map(String::as_str).collect();
            match RedisServer::start_with_args(&all_args) {
                Ok(server) => {
                    return Ok(Self {
                        server,
                        tls_port,
                        certificates,
                    });
                }
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("no free TLS port")))
    }

    /// `rediss://127.0.0.1:TLS_PORT`: verified against [`TestCertificates::ca_pem`].
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port)
    }

    /// The TLS port on 127.0.0.1.
    pub fn tls_port(&self) -> u16 {
        self.tls_port
    }

    /// The CA, server and client certificates of this server.
    pub fn certificates(&self) -> &TestCertificates {
        &self.certificates
    }

    /// The server process, for its plain port, [`RedisServer::command`], pause and kill.
    pub fn server(&self) -> &RedisServer {
        &self.server
    }

    /// As [`TlsRedisServer::server`], for [`RedisServer::kill`] and [`RedisServer::restart`].
    pub fn server_mut(&mut self) -> &mut RedisServer {
        &mut self.server
    }
}

pub(crate) fn path_arg(path: &Path) -> io::Result<String> {
    path.to_str()
        .map(str::to_owned)
        .ok_or_else(|| io::Error::other(format!("{} is not UTF-8", path.display())))
}

//! The TLS server of the kit: its TLS port presents a certificate the test CA signed, for
//! 127.0.0.1, and asks for a client certificate only when told to.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use ferrisson_testkit::{ClientAuth, TestCertificates, TlsRedisServer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// Sends `PING` over TLS to the server's TLS port and returns what came back.
fn ping_over_tls(
    server: &TlsRedisServer,
    client_certificate: Option<&TestCertificates>,
) -> std::io::Result<String> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(server.certificates().ca_pem().as_bytes()) {
        roots
            .add(ca.map_err(std::io::Error::other)?)
            .map_err(std::io::Error::other)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .with_root_certificates(roots);
    let config = match client_certificate {
        Some(certificates) => {
            let chain = CertificateDer::pem_slice_iter(certificates.client_pem().as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .map_err(std::io::Error::other)?;
            let key = PrivateKeyDer::from_pem_slice(certificates.client_key_pem().as_bytes())
                .map_err(std::io::Error::other)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(std::io::Error::other)?
        }
        None => builder.with_no_client_auth(),
    };
    let name = ServerName::try_from("127.0.0.1").map_err(std::io::Error::other)?;
    let connection =
        rustls::ClientConnection::new(Arc::new(config), name).map_err(std::io::Error::other)?;
    let socket = TcpStream::connect(("127.0.0.1", server.tls_port()))?;
    let mut stream = rustls::StreamOwned::new(connection, socket);
    stream.write_all(b"*1\r\n$4\r\nPING\r\n")?;
    let mut reply = [0_u8; 7];
    stream.read_exact(&mut reply)?;
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

#[test]
fn the_tls_port_answers_with_a_certificate_the_test_ca_signed() -> std::io::Result<()> {
    let server = TlsRedisServer::start(ClientAuth::None)?;
    assert_eq!(ping_over_tls(&server, None)?, "+PONG\r\n");
    // The plain port of the same process stays open for the kit's own commands.
    assert_eq!(server.server().command(&["PING"])?, "+PONG");
    for path in [
        server.certificates().ca_path(),
        server.certificates().client_path(),
        server.certificates().client_key_path(),
    ] {
        assert!(
            std::fs::read_to_string(&path)?.contains("-----BEGIN"),
            "{}",
            path.display()
        );
    }
    Ok(())
}

#[test]
fn client_certificates_are_required_when_asked() -> std::io::Result<()> {
    let server = TlsRedisServer::start(ClientAuth::Required)?;
    assert!(
        ping_over_tls(&server, None).is_err(),
        "no client certificate"
    );
    assert_eq!(
        ping_over_tls(&server, Some(server.certificates()))?,
        "+PONG\r\n"
    );
    Ok(())
}

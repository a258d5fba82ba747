//! TLS against a real `redis-server` with a TLS port and certificates made by the test:
//! verified with the caller's CA, the insecure mode, a wrong CA refused, client
//! certificates required and given.

use std::error::Error as _;

use ferrisson_redis::{Client, Error, TlsConfig};
use ferrisson_testkit::{ClientAuth, TlsRedisServer, unrelated_ca_pem};

/// Takes and releases a lock, and checks its key went through the server.
async fn lock_round_trip(client: &Client, server: &TlsRedisServer) -> anyhow::Result<()> {
    let guard = client.lock("over-tls")?.lock().await?;
    assert!(guard.is_held());
    assert_eq!(server.server().command(&["EXISTS", "{over-tls}"])?, ":1");
    guard.unlock().await?;
    assert_eq!(server.server().command(&["EXISTS", "{over-tls}"])?, ":0");
    Ok(())
}

#[tokio::test]
async fn verified_with_the_callers_ca() -> anyhow::Result<()> {
    let server = TlsRedisServer::start(ClientAuth::None)?;
    let tls = TlsConfig::new().ca_certificates(server.certificates().ca_pem());
    let client = Client::builder(&server.url()).tls(tls).connect().await?;
    lock_round_trip(&client, &server).await?;
    // The same server is reached by its host name: the certificate names localhost too.
    let by_name = format!("rediss://localhost:{}", server.tls_port());
    let tls = TlsConfig::new().ca_certificates(server.certificates().ca_pem());
    let client = Client::builder(&by_name).tls(tls).connect().await?;
    lock_round_trip(&client, &server).await
}

#[tokio::test]
async fn insecure_mode_accepts_an_unknown_ca() -> anyhow::Result<()> {
    let server = TlsRedisServer::start(ClientAuth::None)?;
    let tls = TlsConfig::new().danger_accept_invalid_certificates(true);
    let client = Client::builder(&server.url()).tls(tls).connect().await?;
    lock_round_trip(&client, &server).await?;
    // The URL fragment does the same.
    let client = Client::connect(&format!("{}/#insecure", server.url())).await?;
    lock_round_trip(&client, &server).await
}

#[tokio::test]
async fn a_wrong_ca_is_refused_with_the_reason() -> anyhow::Result<()> {
    let server = TlsRedisServer::start(ClientAuth::None)?;
    let tls = TlsConfig::new().ca_certificates(unrelated_ca_pem()?);
    let error = Client::builder(&server.url())
        .tls(tls)
        .connect()
        .await
        .expect_err("a server signed by another CA");
    assert!(matches!(error, Error::Connect { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains(&server.url()) && message.contains("certificate"),
        "{message}"
    );
    assert!(
        error.source().is_none(),
        "the reason is in the message only"
    );

    // Without a CA the system's roots are used, which do not know the test CA either.
    let error = Client::connect(&server.url())
        .await
        .expect_err("a server signed by an unknown CA");
    assert!(matches!(error, Error::Connect { .. }), "{error:?}");
    Ok(())
}

#[tokio::test]
async fn a_server_requiring_client_certificates() -> anyhow::Result<()> {
    let server = TlsRedisServer::start(ClientAuth::Required)?;
    let certificates = server.certificates();

    let without = TlsConfig::new().ca_certificates(certificates.ca_pem());
    let error = Client::builder(&server.url())
        .tls(without)
        .connect()
        .await
        .expect_err("no client certificate");
    assert!(matches!(error, Error::Connect { .. }), "{error:?}");

    let with = TlsConfig::new()
        .ca_certificates(certificates.ca_pem())
        .client_certificate(certificates.client_pem(), certificates.client_key_pem());
    let client = Client::builder(&server.url()).tls(with).connect().await?;
    lock_round_trip(&client, &server).await
}

#[tokio::test]
async fn unusable_tls_settings_are_invalid_arguments() -> anyhow::Result<()> {
    let server = TlsRedisServer::start(ClientAuth::None)?;
    let ca = server.certificates().ca_pem();

    let cases = [
        (
            server.url(),
            TlsConfig::new().ca_certificates("no pem here"),
            "no CERTIFICATE block",
        ),
        (
            server.url(),
            TlsConfig::new()
                .ca_certificates(ca)
                .client_certificate(server.certificates().client_pem(), "not a key"),
            "tls client key",
        ),
        (
            format!("redis://127.0.0.1:{}", server.server().port()),
            TlsConfig::new().ca_certificates(ca),
            "rediss://",
        ),
    ];
    for (url, tls, expected) in cases {
        let error = Client::builder(&url)
            .tls(tls)
            .connect()
            .await
            .expect_err("unusable settings");
        assert!(
            matches!(&error, Error::InvalidArgument(m) if m.contains(expected)),
            "{url}: {error}"
        );
    }
    Ok(())
}

#[test]
fn debug_output_shows_no_certificate_or_key() {
    let key = "-----BEGIN PRIVATE KEY-----\nSECRETKEYMATERIAL\n-----END PRIVATE KEY-----\n";
    let tls = TlsConfig::new()
        .ca_certificates("CA-MATERIAL")
        .client_certificate("CERT-MATERIAL", key);
    let builder = Client::builder("rediss://:hunter2@127.0.0.1:1").tls(tls);
    let shown = format!("{builder:?}");
    for secret in [
        "SECRETKEYMATERIAL",
        "CERT-MATERIAL",
        "CA-MATERIAL",
        "hunter2",
    ] {
        assert!(!shown.contains(secret), "{shown}");
    }
}

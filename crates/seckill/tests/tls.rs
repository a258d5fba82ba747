//! `seckill serve --url rediss://...` against a TLS redis-server whose certificates the
//! test made: verified with the caller's CA, with a client certificate when the server
//! asks for one, or unverified with --insecure; a wrong CA is refused at start.

mod common;

use std::process::Stdio;

use common::{call, cluster, create_voucher, http, instance_args, login};
use ferrisson_testkit::{ClientAuth, TlsRedisServer, unrelated_ca_pem};
use seckill::OrderFlow;

fn path(p: &std::path::Path) -> String {
    p.display().to_string()
}

/// Two instances on `server` with `flags`: a login, a voucher and an order under the
/// lock all go through TLS, and the token is on that server.
async fn shop_works(server: &TlsRedisServer, flags: Vec<String>) {
    let db = common::TestDb::sqlite();
    // The plain port is only for the test's own checks.
    let mut args = instance_args(server.server(), &db.url, OrderFlow::Lock);
    args.redis = server.url();
    args.extra_args = flags;
    let cluster = cluster(2, &args).await;
    let (a, b) = (&cluster.urls()[0], &cluster.urls()[1]);
    let http = http();
    let token = login(&http, a, "13500000001").await;
    let voucher = create_voucher(&http, b, 2, -60, 3600).await;
    let (status, body) = call(
        http.post(format!("{b}/vouchers/{voucher}/seckill"))
            .bearer_auth(&token),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let user = server
        .server()
        .command(&["GET", &format!("login:token:{token}")])
        .expect("redis");
    assert!(!user.is_empty(), "the token is on the TLS server");
    cluster.stop().await.expect("graceful shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verified_with_the_callers_ca() {
    let server = TlsRedisServer::start(ClientAuth::None).expect("tls redis-server");
    let ca = path(&server.certificates().ca_path());
    shop_works(&server, vec!["--cacert".into(), ca]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_client_certificate() {
    let server = TlsRedisServer::start(ClientAuth::Required).expect("tls redis-server");
    let certs = server.certificates();
    shop_works(
        &server,
        vec![
            "--cacert".into(),
            path(&certs.ca_path()),
            "--cert".into(),
            path(&certs.client_path()),
            "--key".into(),
            path(&certs.client_key_path()),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_skips_verification() {
    let server = TlsRedisServer::start(ClientAuth::None).expect("tls redis-server");
    shop_works(&server, vec!["--insecure".into()]).await;
}

/// Refused at start: exit status 1 and a message that says what is wrong.
async fn refused(server: &TlsRedisServer, flags: &[String], reason: &str) {
    let db = common::TestDb::sqlite();
    let out = tokio::process::Command::new(common::binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--database", &db.url])
        .args(["--url", &server.url()])
        .args(flags)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("seckill runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.to_lowercase().contains(reason),
        "names the cause ({reason}): {stderr}"
    );
    assert!(out.stdout.is_empty(), "never listened");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_is_refused() {
    let server = TlsRedisServer::start(ClientAuth::None).expect("tls redis-server");
    let dir = tempfile::tempdir().expect("tempdir");
    let wrong = dir.path().join("wrong-ca.pem");
    std::fs::write(&wrong, unrelated_ca_pem().expect("a CA")).expect("write");
    refused(&server, &["--cacert".into(), path(&wrong)], "unknownissuer").await;
    // The system's roots do not know the test CA either.
    refused(&server, &[], "unknownissuer").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_client_certificate_is_refused() {
    let server = TlsRedisServer::start(ClientAuth::Required).expect("tls redis-server");
    let ca = path(&server.certificates().ca_path());
    refused(&server, &["--cacert".into(), ca], "cannot connect").await;
}

//! Clients that send slowly, too much or not HTTP at all: cut off within
//! `--read-timeout`, refused before the body is read, answered in the error shape by the
//! protocol layer too, and unable to hold `seckill serve` open after SIGTERM.

mod common;

use std::fmt::Write as _;
use std::time::Duration;

use common::{cluster, instance_args, raw_request};
use ferrisson_testkit::RedisServer;
use seckill::OrderFlow;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// How long the tests wait for something the service must do within a second or two
/// of timeouts: only there so that a broken service fails the test instead of hanging it.
const GUARD: Duration = Duration::from_secs(30);

/// Writes `start` and reads until the service closes the connection; what it sent.
async fn sent_until_closed(stream: &mut TcpStream, start: &[u8]) -> String {
    stream.write_all(start).await.expect("write");
    let mut reply = Vec::new();
    tokio::time::timeout(GUARD, stream.read_to_end(&mut reply))
        .await
        .expect("the service closed the connection")
        .expect("read");
    String::from_utf8_lossy(&reply).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_oversized_requests_are_cut_off_with_coded_replies() {
    let db = common::TestDb::sqlite();
    let redis = RedisServer::start().expect("redis-server");
    let mut args = instance_args(&redis, &db.url, OrderFlow::Lock);
    args.extra_args = vec!["--read-timeout".into(), "1s".into()];
    let cluster = cluster(1, &args).await;
    let addr = cluster.urls()[0].trim_start_matches("http://").to_owned();
    let connect = || TcpStream::connect(addr.as_str());

    // Partial headers: closed without a reply once the read timeout has passed.
    let mut partial = connect().await.expect("connect");
    let reply = sent_until_closed(&mut partial, b"GET /health HTTP/1.1\r\nhost: x\r\n").await;
    assert_eq!(reply, "", "no reply to a head that never ended");

    // An idle keep-alive connection is closed the same way, after its first reply.
    let mut idle = connect().await.expect("connect");
    let reply = sent_until_closed(&mut idle, b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert!(reply.starts_with("HTTP/1.1 200 "), "{reply}");

    // A body shorter than declared: 408 in the error shape, connection closed.
    let (status, body) = raw_request(
        &addr,
        b"POST /users/login HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"pho",
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (408, Some("REQUEST_TIMEOUT")),
        "{body}"
    );

    // A declared length over the limit: 413 before any of the body is sent.
    let (status, body) = raw_request(
        &addr,
        b"POST /users/login HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 99999999\r\n\r\n",
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (413, Some("PAYLOAD_TOO_LARGE")),
        "{body}"
    );

    // The protocol layer's own refusals, in the documented shape.
    let long_uri = format!(
        "GET /vouchers/{} HTTP/1.1\r\nhost: x\r\n\r\n",
        "1".repeat(9000)
    );
    let big_header = format!(
        "GET /health HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    let mut many_headers = String::from("GET /health HTTP/1.1\r\nhost: x\r\n");
    for i in 0..100 {
        let _ = write!(many_headers, "x-h{i}: v\r\n");
    }
    many_headers.push_str("\r\n");
    for (what, request, status, code) in [
        (
            "not HTTP",
            "GARBAGE\r\n\r\n".to_owned(),
            400,
            "MALFORMED_REQUEST",
        ),
        (
            "a bad header line",
            "GET / HTTP/1.1\r\nno colon here\r\n\r\n".to_owned(),
            400,
            "MALFORMED_REQUEST",
        ),
        ("a 9 KB path", long_uri, 414, "URI_TOO_LONG"),
        ("a 20 KB header", big_header, 431, "HEADERS_TOO_LARGE"),
        ("100 headers", many_headers, 431, "HEADERS_TOO_LARGE"),
    ] {
        let (got, body) = raw_request(&addr, request.as_bytes()).await;
        assert_eq!(
            (got, body["code"].as_str()),
            (status, Some(code)),
            "{what}: {body}"
        );
        assert!(
            body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}: a message"
        );
    }

    // The service still serves.
    let (status, _) = raw_request(
        &addr,
        b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200);
    cluster.stop().await.expect("exit 0 after SIGTERM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_slow_and_idle_connections_within_the_bound() {
    let db = common::TestDb::sqlite();
    let redis = RedisServer::start().expect("redis-server");
    let mut args = instance_args(&redis, &db.url, OrderFlow::Lock);
    // A read timeout far past the shutdown bound: only the bound can end the slow client.
    args.extra_args = ["--read-timeout", "10m", "--shutdown-timeout", "1s"]
        .map(String::from)
        .to_vec();
    let cluster = cluster(1, &args).await;
    let addr = cluster.urls()[0].trim_start_matches("http://").to_owned();

    let mut slow = TcpStream::connect(addr.as_str()).await.expect("connect");
    slow.write_all(b"POST /users/login HTTP/1.1\r\nhost: x\r\n")
        .await
        .expect("write");
    let mut idle = TcpStream::connect(addr.as_str()).await.expect("connect");
    idle.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("write");
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).await.expect("a reply");
    assert_eq!(&first, b"HTTP/1.1 200");
    let mut short_body = TcpStream::connect(addr.as_str()).await.expect("connect");
    short_body
        .write_all(b"POST /users/login HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 50\r\n\r\n{")
        .await
        .expect("write");

    // Cluster::stop fails unless the process exits 0 within 20 s of SIGTERM: the
    // connections above would hold it for 10 minutes without the bound.
    cluster
        .stop()
        .await
        .expect("exit 0 after SIGTERM, slow clients connected");
    for (what, stream) in [
        ("slow", &mut slow),
        ("idle", &mut idle),
        ("short body", &mut short_body),
    ] {
        let mut rest = Vec::new();
        let read = tokio::time::timeout(GUARD, stream.read_to_end(&mut rest)).await;
        assert!(read.is_ok(), "{what}: the connection was closed");
    }
}

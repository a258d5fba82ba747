//! Connecting fails fast, once, with the reason: a refused port, an unknown host, a server
//! that never answers (bounded by the connect timeout); and errors carry their cause once.

mod common;

use std::error::Error as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ferrisson_redis::{Client, Error, RedisStoreError};
use tokio::net::TcpListener;

/// Far above every connect timeout used here: only a hang reaches it.
const HANG: Duration = Duration::from_secs(60);

/// A port nothing listens on (bound, then closed).
fn closed_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

#[tokio::test]
async fn a_refused_port_fails_at_once_with_the_os_reason() -> anyhow::Result<()> {
    let url = format!("redis://:hunter2@127.0.0.1:{}", closed_port()?);
    let error = tokio::time::timeout(
        HANG,
        Client::builder(&url)
            .connect_timeout(Duration::from_secs(10))
            .connect(),
    )
    .await?
    .expect_err("nothing listens");
    assert!(matches!(error, Error::Connect { .. }), "{error:?}");
    assert!(error.is_connection_error());
    let message = error.to_string();
    assert!(message.contains("connection refused"), "{message}");
    assert!(
        message.contains("redis://:***@127.0.0.1") && !message.contains("hunter2"),
        "{message}"
    );
    Ok(())
}

#[tokio::test]
async fn an_unknown_host_fails_with_the_resolvers_reason() -> anyhow::Result<()> {
    // `.invalid` never resolves (RFC 2606).
    let url = "redis://no-such-host.invalid:6379";
    let error = tokio::time::timeout(
        HANG,
        Client::builder(url)
            .connect_timeout(Duration::from_secs(10))
            .connect(),
    )
    .await?
    .expect_err("unresolvable");
    assert!(matches!(error, Error::Connect { .. }), "{error:?}");
    let message = error.to_string();
    let reason = message
        .strip_prefix(&format!("cannot connect to {url}: "))
        .unwrap_or_default();
    assert!(
        !reason.is_empty(),
        "the resolver's reason follows: {message}"
    );
    Ok(())
}

#[tokio::test]
async fn a_server_that_never_answers_fails_after_one_connect_timeout() -> anyhow::Result<()> {
    // Accepts connections, reads nothing, answers nothing: a hung or blackholed server.
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&accepted);
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            held.push(socket);
        }
    });

    let timeout = Duration::from_millis(300);
    let error = tokio::time::timeout(
        HANG,
        Client::builder(&format!("redis://127.0.0.1:{port}"))
            .connect_timeout(timeout)
            .connect(),
    )
    .await?
    .expect_err("no answer");
    assert!(matches!(error, Error::Connect { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("no answer within the connect timeout (300ms)"),
        "{message}"
    );
    // One attempt: a retry would have opened a second connection.
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    silent.abort();
    Ok(())
}

#[tokio::test]
async fn a_failed_command_shows_its_reason_once() -> anyhow::Result<()> {
    let (mut server, client) = common::server_and_client().await?;
    let lock = client.lock("gone")?;
    server.kill()?;
    let error = tokio::time::timeout(HANG, lock.try_lock())
        .await?
        .expect_err("the server is gone");
    assert!(
        matches!(
            error.store_error::<RedisStoreError>(),
            Some(RedisStoreError::Command(_))
        ),
        "{error:?}"
    );
    let message = error.to_string();
    let reason = message
        .strip_prefix("redis command failed: ")
        .unwrap_or_default();
    assert!(!reason.is_empty(), "{message}");
    // Printed as a chain, the reason shows once.
    let mut chain = message.clone();
    let mut source = error.source();
    while let Some(cause) = source {
        chain.push_str(": ");
        chain.push_str(&cause.to_string());
        source = cause.source();
    }
    assert_eq!(chain.matches(reason).count(), 1, "{chain}");
    Ok(())
}

#[tokio::test]
async fn a_server_error_is_shown_with_its_text() -> anyhow::Result<()> {
    let (server, client) = common::server_and_client().await?;
    // A semaphore's key of the wrong type makes the server answer an error.
    server.command(&["SET", "{permits}", "not-a-number"])?;
    let error = client
        .semaphore("permits")?
        .try_acquire()
        .await
        .expect_err("the key holds a string");
    // As the server wrote it, the way redis-cli shows it: its reason, and where in the
    // script it arose.
    let message = error.to_string();
    assert!(
        message.starts_with("redis command failed: ERR value is not an integer"),
        "{message}"
    );
    assert!(message.contains("user_script:"), "{message}");
    Ok(())
}

#[tokio::test]
async fn a_command_without_a_reply_says_the_response_timeout_ran_out() -> anyhow::Result<()> {
    let server = ferrisson_testkit::RedisServer::start()?;
    let client = Client::builder(&server.url())
        .response_timeout(Duration::from_millis(200))
        .connect()
        .await?;
    let lock = client.lock("frozen")?;
    server.pause()?;
    let result = tokio::time::timeout(HANG, lock.try_lock()).await?;
    server.resume()?;
    let error = result.expect_err("the server is paused");
    assert!(error.is_connection_error(), "{error:?}");
    assert_eq!(
        error.to_string(),
        "redis command failed: no reply within the response timeout"
    );
    Ok(())
}

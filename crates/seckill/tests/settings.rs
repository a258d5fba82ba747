//! `seckill serve`'s settings: where the Redis URL comes from, and settings that cannot
//! work refused at start with the flag named.

mod common;

use std::process::Stdio;
use std::time::Duration;

use ferrisson_testkit::RedisServer;
use seckill::http::LISTENING_PREFIX;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

/// `seckill serve` on `database` and a free port, with `args` and `env`.
fn serve(database: &str, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(common::binary());
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--database", database])
        .args(args)
        .env_remove("FERRISSON_URL")
        .env_remove("REDIS_URL")
        .env_remove("SECKILL_ADMIN_TOKEN")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// Starts it and waits for its address.
async fn listening(mut cmd: Command) -> (Child, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("seckill starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let addr = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.expect("read stdout") {
            if let Some(addr) = line.strip_prefix(LISTENING_PREFIX) {
                return addr.trim().to_owned();
            }
        }
        panic!("seckill exited before listening");
    })
    .await
    .expect("listening within 30 s");
    (child, format!("http://{addr}"))
}

/// The instance logs a user in, and the token lands on `redis`: it is the Redis the
/// service uses.
async fn tokens_land_on(base: &str, redis: &RedisServer) {
    let token = common::login(&common::http(), base, "13900000009").await;
    let user = redis
        .command(&["GET", &format!("login:token:{token}")])
        .expect("redis");
    assert!(!user.is_empty(), "the token is on this server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_url_comes_from_the_flag_then_ferrisson_url_then_redis_url() {
    let db = common::TestDb::sqlite();
    let redis = RedisServer::start().expect("redis-server");
    let url = redis.url();
    // Nothing listens on port 1: a service that took that URL would not start.
    let refused = "redis://127.0.0.1:1";
    for (args, env) in [
        (
            vec!["--url", url.as_str()],
            vec![("FERRISSON_URL", refused), ("REDIS_URL", refused)],
        ),
        (vec!["--redis", url.as_str()], vec![("REDIS_URL", refused)]),
        (
            vec![],
            vec![("FERRISSON_URL", url.as_str()), ("REDIS_URL", refused)],
        ),
        (
            vec![],
            vec![("FERRISSON_URL", ""), ("REDIS_URL", url.as_str())],
        ),
    ] {
        let (mut child, base) = listening(serve(&db.url, &args, &env)).await;
        tokens_land_on(&base, &redis).await;
        child.kill().await.expect("stop");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_that_cannot_work_are_refused() {
    let db = common::TestDb::sqlite();
    for (args, flag) in [
        (vec!["--token-ttl", "0s"], "--token-ttl"),
        (vec!["--db-connections", "0"], "--db-connections"),
        (vec!["--redis-timeout", "0s"], "--redis-timeout"),
        (
            vec!["--redlock-redis", "redis://127.0.0.1:1"],
            "--redlock-redis",
        ),
        (
            vec![
                "--redlock-redis",
                "redis://127.0.0.1:1",
                "--redlock-redis",
                "redis://127.0.0.1:2",
            ],
            "--redlock-redis",
        ),
        (vec!["--lab-stall-every", "0"], "--lab-stall-every"),
        (vec!["--cert", "x.pem"], "--key"),
        (vec!["--url", "redis://h", "--insecure"], "--url"),
        (vec!["--watchdog-lease", "100y"], "--watchdog-lease"),
        (vec!["--lab-lease", "100y"], "--lab-lease"),
        (vec!["--lab-redlock-ttl", "100y"], "--lab-redlock-ttl"),
        (vec!["--read-timeout", "0s"], "--read-timeout"),
        (vec!["--shutdown-timeout", "2days"], "--shutdown-timeout"),
        (vec!["--coalesce-calls=yes"], "--coalesce-calls"),
        (vec!["--admin-token", "short-secret"], "--admin-token"),
        (
            vec!["--admin-token", "a secret with spaces in it"],
            "--admin-token",
        ),
    ] {
        // Nothing listens on port 1: a setting checked only after connecting would
        // exit 1 with "Connection refused" instead.
        let args = if args.contains(&"--url") {
            args
        } else {
            [["--url", "redis://127.0.0.1:1"].as_slice(), &args].concat()
        };
        let out = serve(&db.url, &args, &[])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .await
            .expect("seckill runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(flag), "{args:?} names {flag}: {stderr}");
        assert!(
            !stderr.contains("secret"),
            "{args:?}: the token is not shown: {stderr}"
        );
    }
    // The same from the environment.
    let out = serve(
        &db.url,
        &["--url", "redis://127.0.0.1:1"],
        &[("SECKILL_ADMIN_TOKEN", "tiny-secret")],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .output()
    .await
    .expect("seckill runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("SECKILL_ADMIN_TOKEN") && !stderr.contains("tiny-secret"),
        "{stderr}"
    );
}

/// An unreachable database fails at once with the operating system's reason, not after
/// the pool's timeout with "pool timed out".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_fails_fast_with_its_reason() {
    let redis = RedisServer::start().expect("redis-server");
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        listener.local_addr().expect("addr").port()
    };
    for url in [
        format!("postgres://postgres@127.0.0.1:{port}/test"),
        format!("mysql://root@127.0.0.1:{port}/test"),
    ] {
        let out = serve(&url, &["--url", &redis.url()], &[])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .await
            .expect("seckill runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("Connection refused"), "{url}: {stderr}");
        assert!(!stderr.contains("timed out"), "{url}: {stderr}");
    }
}

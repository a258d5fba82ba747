//! The exit-status table of the README, row by row, with the real binary: a refused
//! argument exits 2 before anything connects (every subcommand, every rule), nothing by
//! that name 1, a store that cannot be reached 125, a --wait that runs out 75 (a paused
//! server included) with the lock's name in the message. The command's own status, 74
//! and 126/127 are in lock_cli.rs.

use std::io::ErrorKind;
use std::net::TcpListener;
use std::process::{Child, Stdio};
use std::time::Instant;

use ferrisson::redis::Client;
use ferrisson_testkit::RedisServer;

mod support;
use support::{ferrisson, outcome};

/// A port that takes connections and never answers: the kernel completes the handshake
/// (the listener's backlog), nothing reads. A command that connected there would hang
/// until its connect timeout, and leave a connection waiting to be accepted.
struct Silent(TcpListener);

impl Silent {
    fn new() -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        Ok(Self(listener))
    }

    fn port(&self) -> anyhow::Result<u16> {
        Ok(self.0.local_addr()?.port())
    }

    /// Whether anything connected since the last look.
    fn connected(&self) -> anyhow::Result<bool> {
        match self.0.accept() {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

/// One refused argument: the subcommand's arguments (`URL` stands for a URL of the silent
/// port, `TLS_URL` for a rediss:// one), the environment, and what stderr must say.
struct Case {
    args: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
    says: &'static str,
}

const fn case(args: &'static [&'static str], says: &'static str) -> Case {
    Case {
        args,
        env: &[],
        says,
    }
}

/// Every argument every subcommand refuses, once per rule.
const REFUSED: &[Case] = &[
    // lock: the name, the lease, the namespace, the connection, clap's own checks.
    case(
        &["lock", "--url", "URL", "", "--", "true"],
        "a name must not be empty",
    ),
    case(
        &["lock", "--url", "URL", "a{b}", "--", "true"],
        "cannot hold { or }",
    ),
    case(
        &["lock", "--url", "URL", "LONG", "--", "true"],
        "bytes long",
    ),
    case(
        &["lock", "--url", "URL", "--lease", "1ms", "x", "--", "true"],
        "the lease must be at least 100ms",
    ),
    case(
        &["lock", "--url", "URL", "--lease", "0s", "x", "--", "true"],
        "at least 100ms",
    ),
    case(
        &[
            "lock", "--url", "URL", "--lease", "400days", "x", "--", "true",
        ],
        "at most a year",
    ),
    case(
        &[
            "lock",
            "--url",
            "URL",
            "--namespace",
            "n{",
            "x",
            "--",
            "true",
        ],
        "'--namespace'",
    ),
    case(
        &[
            "lock",
            "--url",
            "URL",
            "--namespace",
            "LONG",
            "x",
            "--",
            "true",
        ],
        "'--namespace'",
    ),
    case(
        &["lock", "--url", "foo://h:1", "x", "--", "true"],
        "unknown scheme \"foo\"",
    ),
    case(
        &["lock", "--url", "", "x", "--", "true"],
        "the URL is empty",
    ),
    // A store that keeps no listing: ls and friends say so.
    case(&["ls", "--url", "memory://x"], "memory cannot list"),
    case(
        &["id", "next", "--url", "memory://x", "order"],
        "memory cannot make ids",
    ),
    case(
        &["lock", "--url", "localhost", "x", "--", "true"],
        "no scheme://",
    ),
    case(
        &[
            "lock",
            "--url",
            "redis://127.0.0.1:99999",
            "x",
            "--",
            "true",
        ],
        "invalid port",
    ),
    case(
        &["lock", "--url", "URL", "--insecure", "x", "--", "true"],
        "--insecure needs a Redis TLS URL",
    ),
    case(
        &[
            "lock",
            "--url",
            "TLS_URL",
            "--cacert",
            "/no/such/ca.pem",
            "x",
            "--",
            "true",
        ],
        "cannot read the file",
    ),
    case(
        &[
            "lock",
            "--url",
            "TLS_URL",
            "--cacert",
            "/dev/null",
            "x",
            "--",
            "true",
        ],
        "no CERTIFICATE",
    ),
    case(
        &[
            "lock",
            "--url",
            "TLS_URL",
            "--cert",
            "/dev/null",
            "x",
            "--",
            "true",
        ],
        "--key <FILE>",
    ),
    case(
        &[
            "lock",
            "--url",
            "URL",
            "--lost-exit-code",
            "256",
            "x",
            "--",
            "true",
        ],
        "256",
    ),
    case(
        &["lock", "--url", "URL", "--wait", "soon", "x", "--", "true"],
        "soon",
    ),
    case(&["lock", "--url", "URL", "x"], "<COMMAND>"),
    Case {
        args: &["lock", "x", "--", "true"],
        env: &[("FERRISSON_URL", "nowhere")],
        says: "'$FERRISSON_URL'",
    },
    // elect: the same name and lease rules, and the candidate id.
    case(
        &["elect", "--url", "URL", "", "--", "true"],
        "a name must not be empty",
    ),
    case(
        &[
            "elect", "--url", "URL", "--lease", "50ms", "e", "--", "true",
        ],
        "at least 100ms",
    ),
    case(
        &["elect", "--url", "URL", "--id", "", "e", "--", "true"],
        "'--id'",
    ),
    case(
        &["elect", "--url", "URL", "--id", "a\nb", "e", "--", "true"],
        "control characters",
    ),
    case(
        &["elect", "--url", "URL", "--id", "LONG", "e", "--", "true"],
        "bytes long",
    ),
    // id: the prefix, the count, the date, the id to decode.
    case(
        &["id", "next", "--url", "URL", ""],
        "the prefix must not be empty",
    ),
    case(&["id", "next", "--url", "URL", "a b"], "whitespace"),
    case(&["id", "next", "--url", "URL", "order*"], "{}[]*?\\"),
    case(&["id", "next", "--url", "URL", "LONG"], "bytes long"),
    case(
        &["id", "next", "--url", "URL", "--count", "0", "order"],
        "'--count <COUNT>'",
    ),
    case(
        &["id", "next", "--url", "URL", "--namespace", "{", "order"],
        "'--namespace'",
    ),
    case(&["id", "count", "--url", "URL", "order{"], "'<PREFIX>'"),
    case(
        &[
            "id",
            "count",
            "--url",
            "URL",
            "--date",
            "2026-13-01",
            "order",
        ],
        "2026-13-01",
    ),
    case(&["id", "decode", "--", "-1"], "'<ID>'"),
    case(&["id", "decode", "abc"], "'<ID>'"),
    // ls and top: the pattern, the kind, the interval.
    case(&["ls", "--url", "URL", ""], "the pattern must not be empty"),
    case(&["ls", "--url", "URL", "a{b}"], "would match nothing"),
    case(&["ls", "--url", "URL", "--kind", "mutex"], "mutex"),
    case(&["ls", "--url", "URL", "--namespace", "}"], "'--namespace'"),
    case(&["ls", "--url", "bogus"], "no scheme://"),
    case(
        &["top", "--url", "URL", "--once", ""],
        "the pattern must not be empty",
    ),
    case(
        &["top", "--url", "URL", "--interval", "10ms"],
        "at least 100ms",
    ),
    // inspect and unlock: the name; unlock's --force, and a way to confirm.
    case(&["inspect", "--url", "URL", ""], "a name must not be empty"),
    case(&["inspect", "--url", "URL", "x}"], "cannot hold { or }"),
    case(&["unlock", "--url", "URL", "--yes", "x"], "--force"),
    case(&["unlock", "--url", "URL", "--force", "x"], "without --yes"),
    case(
        &["unlock", "--url", "URL", "--force", "--yes", ""],
        "a name must not be empty",
    ),
];

/// Every refused argument exits 2 with a message naming the rule, and nothing connects:
/// the silent port would otherwise hold a connection (and the command would hang on it).
#[test]
fn every_refused_argument_exits_2_before_connecting() -> anyhow::Result<()> {
    let silent = Silent::new()?;
    let port = silent.port()?;
    let url = format!("redis://127.0.0.1:{port}");
    let tls_url = format!("rediss://127.0.0.1:{port}");
    let long = "x".repeat(2000);
    for Case { args, env, says } in REFUSED {
        let args: Vec<&str> = args
            .iter()
            .map(|&arg| match arg {
                "URL" => url.as_str(),
                "TLS_URL" => tls_url.as_str(),
                "LONG" => long.as_str(),
                other => other,
            })
            .collect();
        let (code, stdout, stderr) = outcome(ferrisson(&args).envs(env.iter().copied()))?;
        let shown = format!("{args:?} {env:?}").replace(&long, "LONG");
        assert_eq!(code, Some(2), "{shown}: {stderr}");
        assert!(stdout.is_empty(), "{shown}: {stdout}");
        assert!(stderr.starts_with("error: "), "{shown}: {stderr}");
        assert!(stderr.contains(says), "{shown}: {says:?} not in {stderr}");
        assert!(!stderr.contains(&long), "{shown}: the long value shown");
        assert!(!silent.connected()?, "{shown}: connected before refusing");
    }
    Ok(())
}

/// A store this build was compiled without: refused with 2 before connecting, with one
/// error line naming the Cargo feature that adds it. CI also runs this test on a build
/// without any optional store (`--no-default-features`), where every row applies.
#[test]
fn a_store_left_out_of_the_build_is_refused_naming_its_feature() -> anyhow::Result<()> {
    let left_out = [
        (
            cfg!(feature = "zookeeper"),
            "zk://127.0.0.1:2181",
            "zookeeper",
        ),
        (cfg!(feature = "etcd"), "etcd://127.0.0.1:2379", "etcd"),
        (
            cfg!(feature = "postgres"),
            "postgres://127.0.0.1:1/db",
            "postgres",
        ),
        (cfg!(feature = "mysql"), "mysql://127.0.0.1:1/db", "mysql"),
    ];
    for (_, url, feature) in left_out.iter().filter(|(compiled, ..)| !compiled) {
        for subcommand in ["lock", "elect"] {
            let (code, stdout, stderr) = outcome(&mut ferrisson(&[
                subcommand, "--url", url, "x", "--", "true",
            ]))?;
            assert_eq!(code, Some(2), "{subcommand} {url}: {stderr}");
            assert!(stdout.is_empty(), "{subcommand} {url}: {stdout}");
            // One error line naming the feature (then clap's usage lines, as for every
            // refused argument).
            let first = stderr.lines().next().unwrap_or_default();
            assert!(first.starts_with("error: "), "{subcommand} {url}: {stderr}");
            assert!(
                first.contains(&format!("--features {feature}")),
                "{subcommand} {url}: {stderr}"
            );
        }
    }
    Ok(())
}

/// A refused value from Redis's side of the terminal (a name with escape codes) is shown
/// escaped in the refusal too.
#[test]
fn a_refusal_shows_the_value_escaped() -> anyhow::Result<()> {
    let (code, _, stderr) = outcome(&mut ferrisson(&[
        "lock",
        "--url",
        "redis://127.0.0.1:1",
        "a{\u{1b}[2J\nb",
        "--",
        "true",
    ]))?;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
    assert!(stderr.contains(r#""a{\u{1b}[2J\nb""#), "{stderr}");
    Ok(())
}

/// `inspect` and `unlock` exit 1 when there is nothing by that name and 125 when the
/// store cannot be reached; every subcommand that connects exits 125 then, with one line.
#[test]
fn nothing_by_that_name_is_1_and_an_unreachable_store_125() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let url = server.url();
    for args in [
        &["inspect", "--url", &url, "nothing-here"][..],
        &["unlock", "--url", &url, "--force", "--yes", "nothing-here"],
    ] {
        let (code, _, stderr) = outcome(&mut ferrisson(args))?;
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("called \"nothing-here\""), "{stderr}");
    }

    // A port nothing listens on: refused at once.
    let mut gone = RedisServer::start()?;
    let port = gone.port();
    gone.kill()?;
    let dead = format!("redis://:hunter2@127.0.0.1:{port}");
    for args in [
        &["inspect", "--url", &dead, "x"][..],
        &["unlock", "--url", &dead, "--force", "--yes", "x"],
        &["ls", "--url", &dead],
        &["top", "--url", &dead, "--once"],
        &["id", "next", "--url", &dead, "order"],
        &["id", "count", "--url", &dead, "order"],
        &["lock", "--url", &dead, "x", "--", "true"],
        &["elect", "--url", &dead, "x", "--", "true"],
    ] {
        let (code, _, stderr) = outcome(&mut ferrisson(args))?;
        assert_eq!(code, Some(125), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("ferrisson: ") && stderr.contains("cannot connect"),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("hunter2"), "{args:?}: {stderr}");
    }
    Ok(())
}

/// Runs `ferrisson lock --wait WAIT NAME -- touch FILE` to its end: exit code, stderr,
/// whether the command ran, how long it took.
fn contend(url: &str, wait: &str, name: &str) -> anyhow::Result<(Option<i32>, String, bool, f64)> {
    let dir = tempfile::tempdir()?;
    let ran = dir.path().join("ran");
    let started = Instant::now();
    let (code, _, stderr) = outcome(&mut ferrisson(&[
        "lock",
        "--url",
        url,
        "--wait",
        wait,
        name,
        "--",
        "touch",
        &ran.display().to_string(),
    ]))?;
    Ok((code, stderr, ran.exists(), started.elapsed().as_secs_f64()))
}

/// `--wait` bounds connecting too: against a server stopped with SIGSTOP (the kernel still
/// completes the TCP handshake; nothing answers), the wait runs out, exit 75, and the
/// message names the lock and says the server did not answer. (It returns at most
/// 500 ms after the wait; the test asserts the outcome, not the time.)
#[test]
fn wait_runs_out_against_a_paused_server_with_75_naming_the_lock() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    server.pause()?;
    let outcome = contend(&server.url(), "2s", "paused-lock");
    server.resume()?;
    let (code, stderr, ran, seconds) = outcome?;
    assert_eq!(code, Some(75), "{stderr} after {seconds:.2}s");
    assert!(!ran, "nothing ran");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(
            "ferrisson: timed out after 2s waiting for lock \"paused-lock\": the server did \
             not answer while connecting"
        ),
        "{stderr} after {seconds:.2}s"
    );

    // --wait 0s tries once, like flock -n: a free lock is taken.
    let (code, stderr, ran, _) = contend(&server.url(), "0s", "free-lock")?;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(ran);
    Ok(())
}

/// The server stops answering while `ferrisson lock --wait` waits for a holder: the wait
/// still ends (exit 75, the lock named), whatever round trip was in flight.
#[tokio::test(flavor = "multi_thread")]
async fn wait_runs_out_when_the_server_stops_answering_mid_wait() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let url = server.url();
    let client = Client::connect(&url).await?;
    let held = client.lock("mid-wait")?.lock().await?;
    let mut contender = Waiting::spawn(&url, "3s", "mid-wait")?;
    // Once the contender's client waits on the lock's channel, its acquire is under way.
    let deadline = Instant::now() + support::EVENT_LIMIT;
    loop {
        let entries = client.inspect("mid-wait").await?;
        if entries.iter().any(|e| e.waiting_clients == Some(1)) {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "the contender never waited");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    server.pause()?;
    let exited = contender.wait();
    server.resume()?;
    let (code, stderr) = exited?;
    assert_eq!(code, Some(75), "{stderr}");
    assert!(
        stderr.starts_with("ferrisson: timed out after 3s waiting for lock \"mid-wait\""),
        "{stderr}"
    );
    drop(held);
    Ok(())
}

/// A `ferrisson lock --wait` running in the background, killed if the test ends first.
struct Waiting(Option<Child>);

impl Waiting {
    fn spawn(url: &str, wait: &str, name: &str) -> anyhow::Result<Self> {
        let child = ferrisson(&["lock", "--url", url, "--wait", wait, name, "--", "true"])
            .stderr(Stdio::piped())
            .spawn()?;
        Ok(Self(Some(child)))
    }

    /// Its exit code and stderr, once it ends (within the tests' event limit).
    fn wait(&mut self) -> anyhow::Result<(Option<i32>, String)> {
        let child = self
            .0
            .take()
            .ok_or_else(|| anyhow::anyhow!("already waited for"))?;
        let output = support::within(move || child.wait_with_output())?;
        Ok((output.status.code(), String::from_utf8(output.stderr)?))
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

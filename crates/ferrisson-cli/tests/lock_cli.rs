//! `ferrisson lock` as a user runs it: separate processes against a real redis-server.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use ferrisson_testkit::{ClockShift, RedisServer};

const FERRISSON: &str = env!("CARGO_BIN_EXE_ferrisson");

fn ferrisson(server: &RedisServer, args: &[&str]) -> Command {
    let mut command = Command::new(FERRISSON);
    command
        .arg("lock")
        .arg("--redis")
        .arg(server.url())
        .args(args)
        .env_remove("FERRISSON_REDIS_URL")
        .env_remove("REDIS_URL");
    command
}

fn run(mut command: Command) -> std::io::Result<Output> {
    command.stdin(Stdio::null()).output()
}

#[test]
fn sixteen_processes_exclude_each_other() -> anyhow::Result<()> {
    const PROCESSES: usize = 16;
    const ROUNDS: usize = 5;
    let server = RedisServer::start()?;
    let dir = tempfile::tempdir()?;
    let counter = dir.path().join("counter");
    std::fs::write(&counter, "0")?;
    // A non-atomic read-modify-write of a file: only mutual exclusion keeps the count.
    let script = format!(
        "for i in $(seq {ROUNDS}); do {FERRISSON} lock --redis {} counter -- sh -c 'n=$(cat {}); sleep 0.01; echo $((n+1)) > {}' || exit 1; done",
        server.url(),
        counter.display(),
        counter.display()
    );
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| Command::new("sh").arg("-c").arg(&script).spawn())
        .collect::<Result<_, _>>()?;
    for mut child in children {
        assert!(child.wait()?.success());
    }
    let total: usize = std::fs::read_to_string(&counter)?.trim().parse()?;
    assert_eq!(total, PROCESSES * ROUNDS);
    Ok(())
}

#[test]
fn passes_name_token_and_exit_status() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let output = run(ferrisson(
        &server,
        &[
            "job",
            "--",
            "sh",
            "-c",
            "echo $FERRISSON_LOCK_NAME $FERRISSON_FENCING_TOKEN; exit 3",
        ],
    ))?;
    assert_eq!(output.status.code(), Some(3));
    assert_eq!(String::from_utf8(output.stdout)?.trim(), "job 1");
    let output = run(ferrisson(
        &server,
        &["job", "--", "sh", "-c", "echo $FERRISSON_FENCING_TOKEN"],
    ))?;
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8(output.stdout)?.trim(),
        "2",
        "a new holder, a greater token"
    );
    // Released on exit.
    assert_eq!(server.command(&["EXISTS", "{job}"])?, ":0");
    Ok(())
}

#[test]
fn wait_timeout_exits_75_without_running() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let dir = tempfile::tempdir()?;
    let ready = dir.path().join("ready");
    let mut holder = ferrisson(
        &server,
        &[
            "busy",
            "--",
            "sh",
            "-c",
            &format!("touch {}; sleep 30", ready.display()),
        ],
    )
    .stdin(Stdio::null())
    .spawn()?;
    wait_for_file(&ready)?;
    let ran = dir.path().join("ran");
    let output = run(ferrisson(
        &server,
        &[
            "--wait",
            "200ms",
            "busy",
            "--",
            "touch",
            &ran.display().to_string(),
        ],
    ))?;
    holder.kill()?;
    holder.wait()?;
    assert_eq!(output.status.code(), Some(75));
    assert!(String::from_utf8(output.stderr)?.contains("timed out"));
    assert!(!ran.exists());
    Ok(())
}

#[test]
fn lost_lock_terminates_the_command_and_exits_74() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let dir = tempfile::tempdir()?;
    let ready = dir.path().join("ready");
    let terminated = dir.path().join("terminated");
    let script = format!(
        "trap 'touch {}; exit 0' TERM; touch {}; sleep 30 & wait",
        terminated.display(),
        ready.display()
    );
    let child = ferrisson(
        &server,
        &[
            "--lease", "600ms", "--grace", "5s", "lost", "--", "sh", "-c", &script,
        ],
    )
    .stdin(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()?;
    wait_for_file(&ready)?;
    assert_eq!(server.command(&["DEL", "{lost}"])?, ":1");
    let output = child.wait_with_output()?;
    assert_eq!(output.status.code(), Some(74));
    assert!(String::from_utf8(output.stderr)?.contains("was lost"));
    assert!(terminated.exists(), "the command got SIGTERM");
    Ok(())
}

#[test]
fn dead_redis_gives_one_line_without_the_password() -> anyhow::Result<()> {
    let mut server = RedisServer::start()?;
    let port = server.port();
    server.kill()?;
    let output = Command::new(FERRISSON)
        .args([
            "lock",
            "--redis",
            &format!("redis://:hunter2@127.0.0.1:{port}"),
            "x",
            "--",
            "true",
        ])
        .stdin(Stdio::null())
        .output()?;
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr)?;
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("cannot connect") && !stderr.contains("hunter2"),
        "{stderr}"
    );
    Ok(())
}

#[test]
fn redis_url_falls_back_to_the_environment() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let output = Command::new(FERRISSON)
        .args(["lock", "env", "--", "true"])
        .env_remove("FERRISSON_REDIS_URL")
        .env("REDIS_URL", server.url())
        .stdin(Stdio::null())
        .output()?;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let output = Command::new(FERRISSON)
        .args(["lock", "env", "--", "true"])
        .env("FERRISSON_REDIS_URL", server.url())
        .env("REDIS_URL", "redis://127.0.0.1:1")
        .stdin(Stdio::null())
        .output()?;
    assert!(
        output.status.success(),
        "FERRISSON_REDIS_URL wins over REDIS_URL"
    );
    Ok(())
}

/// Waits for a file the command creates once it runs (no event crosses the process).
fn wait_for_file(path: &Path) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// The client's wall clock jumps +1 h and then -2 h while it holds a lock: nothing may
/// change, since every client-side deadline is monotonic and every expiry is set by Redis.
/// The holder runs on a [`ClockShift`] (its wall clock moved, its monotonic clock left
/// alone), stepped by the test while it runs.
#[test]
fn wall_clock_jumps_do_not_touch_a_held_lock() -> anyhow::Result<()> {
    let clock = ClockShift::new()?;
    let server = RedisServer::start()?;
    let dir = tempfile::tempdir()?;
    let file = |name: &str| dir.path().join(name).display().to_string();
    // Written to a temporary name and moved, so the test never reads a half-written file.
    let script = format!(
        "date +%s > {start}.tmp && mv {start}.tmp {start}; while [ ! -e {go} ]; do sleep 0.02; done; \
         date +%s > {jumped}.tmp && mv {jumped}.tmp {jumped}; while [ ! -e {done} ]; do sleep 0.02; done",
        start = file("start"),
        go = file("go"),
        jumped = file("jumped"),
        done = file("done"),
    );
    let holder = ferrisson(
        &server,
        &["--lease", "600ms", "jump", "--", "sh", "-c", &script],
    )
    .envs(clock.env())
    .stdin(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()?;
    wait_for_file(&dir.path().join("start"))?;
    clock.set_ahead(Duration::from_secs(3600))?;
    std::fs::write(dir.path().join("go"), "")?;
    wait_for_file(&dir.path().join("jumped"))?;
    let read = |name: &str| -> anyhow::Result<i64> {
        Ok(std::fs::read_to_string(dir.path().join(name))?
            .trim()
            .parse()?)
    };
    assert!(
        read("jumped")? - read("start")? >= 3500,
        "the holder's wall clock jumped"
    );
    // Time passing is the point: several renewals (every 200 ms) under each offset.
    std::thread::sleep(Duration::from_millis(1200));
    clock.set_behind(Duration::from_secs(3600))?;
    std::thread::sleep(Duration::from_millis(1200));
    let contender = run(ferrisson(
        &server,
        &["--wait", "100ms", "jump", "--", "true"],
    ))?;
    assert_eq!(contender.status.code(), Some(75), "the lock is still held");
    std::fs::write(dir.path().join("done"), "")?;
    let output = holder.wait_with_output()?;
    let stderr = String::from_utf8(output.stderr)?;
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("was lost"), "{stderr}");
    Ok(())
}

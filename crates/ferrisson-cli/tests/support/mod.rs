//! What the command-line tests share: running the built `ferrisson` with nothing about
//! Redis, logging or colour inherited from the test's own environment.

// Each test binary uses the part it needs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The binary under test.
pub const FERRISSON: &str = env!("CARGO_BIN_EXE_ferrisson");

/// `ferrisson ARGS...`, with no standard input and none of the variables it reads
/// (the Redis URL, `FERRISSON_LOG`, `NO_COLOR`) inherited.
pub fn ferrisson(args: &[&str]) -> Command {
    let mut command = Command::new(FERRISSON);
    command
        .args(args)
        .env_remove("FERRISSON_URL")
        .env_remove("FERRISSON_REDIS_URL")
        .env_remove("REDIS_URL")
        .env_remove("FERRISSON_LOG")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null());
    command
}

/// Runs `command` to its end: its exit code, stdout and stderr.
pub fn outcome(command: &mut Command) -> anyhow::Result<(Option<i32>, String, String)> {
    let Output {
        status,
        stdout,
        stderr,
    } = command.output()?;
    Ok((
        status.code(),
        String::from_utf8(stdout)?,
        String::from_utf8(stderr)?,
    ))
}

/// How long a test waits for an event before it fails (a bound, not a synchronization).
pub const EVENT_LIMIT: Duration = Duration::from_secs(30);

/// A named pipe: a command writes to it when it reaches a point, and the test's read
/// returns then; or the command reads it, and waits until the test writes.
pub struct Fifo(PathBuf);

impl Fifo {
    pub fn new(dir: &Path, name: &str) -> anyhow::Result<Self> {
        let path = dir.join(name);
        let status = Command::new("mkfifo").arg(&path).status()?;
        anyhow::ensure!(status.success(), "mkfifo {} failed", path.display());
        Ok(Self(path))
    }

    /// The path, for a shell script.
    pub fn path(&self) -> String {
        self.0.display().to_string()
    }

    /// Everything written until the last writer closes the pipe.
    pub fn read(&self) -> anyhow::Result<String> {
        let path = self.0.clone();
        within(move || std::fs::read_to_string(path))
    }

    /// Writes `text` once a reader has opened the pipe.
    pub fn write(&self, text: &str) -> anyhow::Result<()> {
        let (path, text) = (self.0.clone(), text.to_owned());
        within(move || std::fs::write(path, text))
    }
}

/// Runs a blocking step on its own thread and fails if it takes longer than
/// [`EVENT_LIMIT`] (the event never came), instead of hanging the test.
pub fn within<T: Send + 'static>(
    step: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || sender.send(step()));
    Ok(receiver.recv_timeout(EVENT_LIMIT)??)
}

/// `ferrisson SUBCOMMAND --url URL ARGS...`, for the subcommands that run a command while
/// they hold something (`lock`, `elect`).
pub fn holding(subcommand: &str, url: &str, args: &[&str]) -> Command {
    let mut command = ferrisson(&[subcommand, "--url", url]);
    command.args(args);
    command
}

/// While one `ferrisson SUBCOMMAND` holds `busy`, another with `--wait 200ms` exits 75
/// without running its command and says `why` on stderr.
pub fn wait_runs_out_with_75(subcommand: &str, why: &str) -> anyhow::Result<()> {
    let server = ferrisson_testkit::RedisServer::start()?;
    wait_runs_out_with_75_at(&server.url(), subcommand, why)
}

/// [`wait_runs_out_with_75`] against the store at `url`.
pub fn wait_runs_out_with_75_at(url: &str, subcommand: &str, why: &str) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ready = Fifo::new(dir.path(), "ready")?;
    let script = format!("echo ready > {}; exec sleep 600", ready.path());
    let mut holder = holding(subcommand, url, &["busy", "--", "sh", "-c", &script]).spawn()?;
    assert_eq!(ready.read()?, "ready\n");
    let ran = dir.path().join("ran");
    let output = holding(
        subcommand,
        url,
        &[
            "--wait",
            "200ms",
            "busy",
            "--",
            "touch",
            &ran.display().to_string(),
        ],
    )
    .output()?;
    holder.kill()?;
    holder.wait()?;
    assert_eq!(output.status.code(), Some(75));
    assert!(String::from_utf8(output.stderr)?.contains(why));
    assert!(!ran.exists());
    Ok(())
}

//! One `redis-server` process owned by a test.

use std::ffi::OsString;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tempfile::TempDir;

use crate::ClockShift;
use crate::resp::{self, Reply};

/// How long a fresh server may take to answer its first `PING`.
const STARTUP_DEADLINE: Duration = Duration::from_secs(10);
/// How many free ports to try when another process grabs ours between probe and bind.
const PORT_ATTEMPTS: usize = 20;

/// The `redis-server` binary the kit runs: `$FERRISSON_REDIS_SERVER` or `redis-server`.
pub fn redis_server_binary() -> PathBuf {
    std::env::var_os("FERRISSON_REDIS_SERVER")
        .map_or_else(|| PathBuf::from("redis-server"), PathBuf::from)
}

/// A `redis-server` process on a free loopback port with a private data directory.
///
/// Killed (SIGKILL) and reaped on drop; its directory is removed with it.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: TempDir,
    extra_args: Vec<String>,
    env: Vec<(OsString, OsString)>,
    /// A configuration file in `dir`, given first on the command line (sentinels need one
    /// they can rewrite).
    config_file: Option<PathBuf>,
    child: Option<Child>,
    paused: AtomicBool,
}

impl RedisServer {
    /// Starts a server with no persistence and waits until it answers `PING`.
    ///
    /// # Errors
    ///
    /// When the binary is missing, no port could be bound, or the server did not answer
    /// within 10 seconds.
    pub fn start() -> io::Result<Self> {
        Self::start_with_args(&[])
    }

    /// Starts a server with extra `redis-server` arguments (e.g. `["--maxmemory", "1mb"]`).
    ///
    /// # Errors
    ///
    /// As [`RedisServer::start`].
    pub fn start_with_args(args: &[&str]) -> io::Result<Self> {
        Self::start_with_env(args, Vec::new())
    }

    /// Starts a server whose wall clock (the clock of `TIME` and of key expiry) is
    /// `clock`: the test can step it while the server runs. It stays on that clock
    /// across [`RedisServer::restart`].
    ///
    /// # Errors
    ///
    /// As [`RedisServer::start`].
    pub fn start_with_clock(clock: &ClockShift, args: &[&str]) -> io::Result<Self> {
        Self::start_with_env(args, clock.env())
    }

    /// Starts a server from a configuration file with `config` as its first content,
    /// then `args` (a sentinel: `config` monitors a master, `args` is `["--sentinel"]`).
    pub(crate) fn start_with_config(config: &str, args: &[&str]) -> io::Result<Self> {
        Self::start_from(Some(config), args, Vec::new())
    }

    fn start_with_env(args: &[&str], env: Vec<(OsString, OsString)>) -> io::Result<Self> {
        Self::start_from(None, args, env)
    }

    fn start_from(
        config: Option<&str>,
        args: &[&str],
        env: Vec<(OsString, OsString)>,
    ) -> io::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("ferrisson-redis-")
            .tempdir()?;
        let config_file = match config {
            Some(config) => {
                let path = dir.path().join("redis.conf");
                std::fs::write(&path, config)?;
                Some(path)
            }
            None => None,
        };
        let extra_args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port()?;
            match spawn_and_wait(port, dir.path(), config_file.as_deref(), &extra_args, &env) {
                Ok(child) => {
                    return Ok(Self {
                        port,
                        dir,
                        extra_args,
                        env,
                        config_file,
                        child: Some(child),
                        paused: AtomicBool::new(false),
                    });
                }
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("no free port")))
    }

    /// The server's TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's private data directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process id, while the server runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process runs (started and not killed; it may be paused).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Whether the server is frozen by [`RedisServer::pause`] and not resumed yet.
    pub fn is_paused(&self) -> bool {
        self.is_running() && self.paused.load(Ordering::Relaxed)
    }

    /// Freezes the server with SIGSTOP: connections stay open, nothing is answered.
    ///
    /// # Errors
    ///
    /// When the server is not running or the signal could not be sent.
    pub fn pause(&self) -> io::Result<()> {
        self.signal(Signal::SIGSTOP)?;
        self.paused.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Resumes a server frozen by [`RedisServer::pause`] (SIGCONT).
    ///
    /// # Errors
    ///
    /// When the server is not running or the signal could not be sent.
    pub fn resume(&self) -> io::Result<()> {
        self.signal(Signal::SIGCONT)?;
        self.paused.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// Kills the server with SIGKILL and reaps it; it loses everything in memory.
    ///
    /// # Errors
    ///
    /// When the kill or the reap fails.
    pub fn kill(&mut self) -> io::Result<()> {
        if let Some(mut child) = self.child.take() {
            // A stopped process still dies on SIGKILL.
            child.kill()?;
            child.wait()?;
        }
        self.paused.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// Kills the server (if running) and starts a fresh one on the same port and directory.
    ///
    /// # Errors
    ///
    /// As [`RedisServer::start`]; also when the port was taken meanwhile.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill()?;
        let deadline = Instant::now() + STARTUP_DEADLINE;
        loop {
            let config_file = self.config_file.as_deref();
            match spawn_and_wait(
                self.port,
                self.dir(),
                config_file,
                &self.extra_args,
                &self.env,
            ) {
                Ok(child) => {
                    self.child = Some(child);
                    return Ok(());
                }
                // The old socket may linger for a moment after the kill.
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Sends one command over a fresh connection and returns the raw RESP reply line.
    ///
    /// Meant for set-up and checks in tests (`CONFIG SET`, `DEBUG SLEEP`, `DBSIZE`, ...).
    ///
    /// # Errors
    ///
    /// When the server cannot be reached.
    pub fn command(&self, args: &[&str]) -> io::Result<String> {
        self.query(args)?.into_line()
    }

    /// Sends one command over a fresh connection and returns the whole reply.
    ///
    /// # Errors
    ///
    /// When the server cannot be reached or does not reply within 5 seconds.
    pub fn query<A: AsRef<[u8]>>(&self, args: &[A]) -> io::Result<Reply> {
        resp::query(self.port, args)
    }

    /// `used_memory` from `INFO memory`, in bytes.
    ///
    /// # Errors
    ///
    /// When the server cannot be reached or its reply has no readable `used_memory`.
    pub fn used_memory(&self) -> io::Result<u64> {
        let info = self.command(&["INFO", "memory"])?;
        info.lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| io::Error::other(format!("no used_memory in INFO memory: {info:?}")))
    }

    fn signal(&self, signal: Signal) -> io::Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| io::Error::other("redis-server is not running"))?;
        let pid = i32::try_from(pid).map_err(io::Error::other)?;
        kill(Pid::from_raw(pid), signal).map_err(io::Error::other)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

pub(crate) fn free_port() -> io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

fn spawn_and_wait(
    port: u16,
    dir: &Path,
    config_file: Option<&Path>,
    extra_args: &[String],
    env: &[(OsString, OsString)],
) -> io::Result<Child> {
    let binary = redis_server_binary();
    let mut child = Command::new(&binary)
        .args(config_file)
        .arg("--port")
        .arg(port.to_string())
        .args(["--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .args(["--logfile", "redis.log", "--daemonize", "no"])
        .args(extra_args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot run {} ({e}); install redis-server or set FERRISSON_REDIS_SERVER",
                    binary.display()
                ),
            )
        })?;
    let deadline = Instant::now() + STARTUP_DEADLINE;
    loop {
        if let Some(status) = child.try_wait()? {
            let log = std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
            let tail: String = log.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
            return Err(io::Error::other(format!(
                "redis-server on port {port} exited with {status}: {tail}"
            )));
        }
        if resp::query(port, &["PING"]).is_ok_and(|reply| reply.text() == Some("PONG")) {
            return Ok(child);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("redis-server on port {port} did not answer PING"),
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

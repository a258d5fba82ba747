//! One `redis-server` (or Valkey) process owned by a test.

use std::ffi::OsString;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tempfile::TempDir;

use crate::ClockShift;
use crate::resp::{self, Access, Address, Reply, info_field, text_of};
use crate::wait::poll_until;

/// How long a fresh server may take to answer its first `PING`.
const STARTUP_DEADLINE: Duration = Duration::from_secs(10);
/// How many free ports to try when another process grabs ours between probe and bind.
const PORT_ATTEMPTS: usize = 20;
/// How long a new replica may take to link to its master and be ready to acknowledge.
const REPLICA_DEADLINE: Duration = Duration::from_secs(30);

/// The `redis-server` binary the kit runs: `$FERRISSON_REDIS_SERVER` or `redis-server`.
pub fn redis_server_binary() -> PathBuf {
    std::env::var_os("FERRISSON_REDIS_SERVER")
        .map_or_else(|| PathBuf::from("redis-server"), PathBuf::from)
}

/// The Valkey server binary the kit runs for [`ServerBuilder::valkey`]:
/// `$FERRISSON_VALKEY_SERVER`, else `valkey-server` or `valkey-check-rdb` from `PATH`.
///
/// Debian ships the server in the `valkey-tools` package as `valkey-check-rdb` (one
/// binary that acts by the name it is started under); the kit starts it as
/// `valkey-server`, so either name works.
///
/// # Errors
///
/// [`io::ErrorKind::NotFound`] when none is found; the message says how to install it
/// (`.ci/require-valkey`).
pub fn valkey_server_binary() -> io::Result<PathBuf> {
    if let Some(path) = std::env::var_os("FERRISSON_VALKEY_SERVER") {
        return Ok(PathBuf::from(path));
    }
    ["valkey-server", "valkey-check-rdb"]
        .into_iter()
        .find_map(on_path)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "no Valkey server: neither valkey-server nor valkey-check-rdb is on PATH and \
                 FERRISSON_VALKEY_SERVER is not set; run .ci/require-valkey (as root it \
                 installs Debian's valkey-tools from bookworm-backports)",
            )
        })
}

/// `name` in one of `PATH`'s directories, if it is there.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Which server program a [`RedisServer`] runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Program {
    /// [`redis_server_binary`].
    #[default]
    Redis,
    /// [`valkey_server_binary`], started under the name `valkey-server`.
    Valkey,
}

impl Program {
    /// The binary to run and the name to start it under.
    pub(crate) fn binary(self) -> io::Result<(PathBuf, &'static str)> {
        match self {
            Self::Redis => Ok((redis_server_binary(), "redis-server")),
            Self::Valkey => Ok((valkey_server_binary()?, "valkey-server")),
        }
    }
}

/// Settings of a [`RedisServer`] before it starts: the server program, append-only
/// persistence, extra arguments, a master to replicate.
///
/// Every server it starts syncs a new replica at once (`repl-diskless-sync-delay 0`).
///
/// ```no_run
/// use ferrisson_testkit::RedisServer;
///
/// // A Valkey master and a replica, both writing an append-only file: `WAITAOF` works.
/// let master = RedisServer::builder().valkey().appendonly().start()?;
/// let replica = RedisServer::builder()
///     .valkey()
///     .appendonly()
///     .replica_of(&master)
///     .start()?;
/// replica.pause()?; // SIGSTOP: acknowledges nothing until resumed
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
#[must_use = "a builder does nothing until start()"]
pub struct ServerBuilder {
    program: Program,
    appendonly: bool,
    replica_of: Option<u16>,
    args: Vec<String>,
}

impl ServerBuilder {
    /// Runs Valkey ([`valkey_server_binary`]) instead of `redis-server`: Valkey 8 has
    /// what Redis has only from 7.2 on (`WAITAOF`), where the machine's Redis may be
    /// older.
    pub fn valkey(mut self) -> Self {
        self.program = Program::Valkey;
        self
    }

    /// Writes an append-only file (`appendonly yes`, `appendfsync everysec` unless the
    /// arguments say otherwise) in the server's directory; without it the server
    /// persists nothing.
    pub fn appendonly(mut self) -> Self {
        self.appendonly = true;
        self
    }

    /// Starts the server as a replica of `master` (`--replicaof`); [`ServerBuilder::start`]
    /// then returns once the replica is linked, in sync and, with
    /// [`ServerBuilder::appendonly`], writing its append-only file.
    pub fn replica_of(mut self, master: &RedisServer) -> Self {
        self.replica_of = Some(master.port());
        self
    }

    /// Extra server arguments, after the builder's own (e.g. `["--appendfsync", "always"]`).
    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|arg| (*arg).to_owned()));
        self
    }

    /// Starts the server and waits until it answers `PING`; a replica also until it is
    /// linked to its master and ready (see [`ServerBuilder::replica_of`]).
    ///
    /// # Errors
    ///
    /// As [`RedisServer::start`]; [`io::ErrorKind::NotFound`] naming `.ci/require-valkey`
    /// when Valkey is asked for and not installed; a timeout when a replica is not ready
    /// within 30 seconds (the error says what was still missing).
    pub fn start(self) -> io::Result<RedisServer> {
        // Fails here, with its own message, rather than as a failed spawn per port.
        self.program.binary()?;
        let master_port = self.replica_of.map(|port| port.to_string());
        let mut args = vec!["--repl-diskless-sync-delay", "0"];
        if self.appendonly {
            args.extend(["--appendonly", "yes"]);
        }
        if let Some(port) = &master_port {
            args.extend(["--replicaof", "127.0.0.1", port]);
        }
        args.extend(self.args.iter().map(String::as_str));
        let server = RedisServer::start_from(
            self.program,
            None,
            &args,
            Vec::new(),
            &Protection::default(),
        )?;
        if self.replica_of.is_some() {
            server.wait_until_replica_ready()?;
        }
        Ok(server)
    }
}

/// A `redis-server` process on a free loopback port with a private data directory (or a
/// Valkey one: [`RedisServer::builder`]).
///
/// Killed (SIGKILL) and reaped on drop; its directory is removed with it.
#[derive(Debug)]
pub struct RedisServer {
    program: Program,
    port: u16,
    dir: TempDir,
    extra_args: Vec<String>,
    env: Vec<(OsString, OsString)>,
    /// A configuration file in `dir`, given first on the command line (sentinels need one
    /// they can rewrite).
    config_file: Option<PathBuf>,
    child: Option<Child>,
    paused: AtomicBool,
    protection: Protection,
}

/// How a server of a protected group is reached: TLS only on its TCP port (the kit then
/// talks to it on a Unix socket in its directory), and an ACL user the kit logs in as.
#[derive(Clone, Default)]
pub(crate) struct Protection {
    /// The TCP port speaks TLS only (`port 0`, `tls-port PORT`); the TLS files and
    /// settings come with the server's arguments.
    pub(crate) tls: bool,
    /// The user and password the kit authenticates as.
    pub(crate) auth: Option<(String, String)>,
}

impl RedisServer {
    /// Settings for a server of another program, with persistence, or a replica.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

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
    pub(crate) fn start_with_config(
        program: Program,
        config: &str,
        args: &[&str],
        protection: &Protection,
    ) -> io::Result<Self> {
        Self::start_from(program, Some(config), args, Vec::new(), protection)
    }

    /// Starts a server of a protected group (see [`Protection`]).
    pub(crate) fn start_protected(
        program: Program,
        args: &[&str],
        protection: &Protection,
    ) -> io::Result<Self> {
        Self::start_from(program, None, args, Vec::new(), protection)
    }

    fn start_with_env(args: &[&str], env: Vec<(OsString, OsString)>) -> io::Result<Self> {
        Self::start_from(Program::Redis, None, args, env, &Protection::default())
    }

    fn start_from(
        program: Program,
        config: Option<&str>,
        args: &[&str],
        env: Vec<(OsString, OsString)>,
        protection: &Protection,
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
            let spawn = Spawn {
                program,
                port,
                dir: dir.path(),
                config_file: config_file.as_deref(),
                extra_args: &extra_args,
                env: &env,
                protection,
            };
            match spawn.run() {
                Ok(child) => {
                    return Ok(Self {
                        program,
                        port,
                        dir,
                        extra_args,
                        env,
                        config_file,
                        child: Some(child),
                        paused: AtomicBool::new(false),
                        protection: protection.clone(),
                    });
                }
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("no free port")))
    }

    /// The server's TCP port on 127.0.0.1 (its TLS port when it speaks TLS only).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`; for a server of a protected group, `rediss://` when its
    /// port speaks TLS only and `user:password@` when it has an ACL user.
    pub fn url(&self) -> String {
        let scheme = if self.protection.tls {
            "rediss"
        } else {
            "redis"
        };
        let credentials = match &self.protection.auth {
            Some((user, password)) => format!("{user}:{password}@"),
            None => String::new(),
        };
        format!("{scheme}://{credentials}127.0.0.1:{}", self.port)
    }

    /// Whether the server's TCP port speaks TLS only (a server of a TLS group).
    pub fn is_tls(&self) -> bool {
        self.protection.tls
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
            let spawn = Spawn {
                program: self.program,
                port: self.port,
                dir: self.dir.path(),
                config_file: self.config_file.as_deref(),
                extra_args: &self.extra_args,
                env: &self.env,
                protection: &self.protection,
            };
            match spawn.run() {
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
    /// A server of a protected group is asked on its Unix socket when its TCP port speaks
    /// TLS only, and as the group's ACL user.
    ///
    /// # Errors
    ///
    /// When the server cannot be reached, refuses the kit's credentials, or does not
    /// reply within 5 seconds.
    pub fn query<A: AsRef<[u8]>>(&self, args: &[A]) -> io::Result<Reply> {
        resp::query_at(&access(self.dir.path(), self.port, &self.protection), args)
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

    /// Waits until this replica is linked to its master, has the master's data and, when
    /// it writes an append-only file, has finished rewriting it after the sync (until
    /// then it acknowledges no `WAITAOF`), and until the master lists it online.
    fn wait_until_replica_ready(&self) -> io::Result<()> {
        poll_until("the replica to be ready", REPLICA_DEADLINE, || {
            let replication = text_of(self, &["INFO", "replication"])?;
            if info_field(&replication, "master_link_status") != Some("up")
                || info_field(&replication, "master_sync_in_progress") != Some("0")
            {
                return Err(format!("not in sync with its master: {replication}"));
            }
            let persistence = text_of(self, &["INFO", "persistence"])?;
            for field in ["aof_rewrite_in_progress", "aof_rewrite_scheduled"] {
                if info_field(&persistence, field) != Some("0") {
                    return Err(format!("{field} is not 0 yet"));
                }
            }
            let master_port = info_field(&replication, "master_port")
                .ok_or_else(|| format!("no master_port in {replication}"))?;
            let master_port: u16 = master_port
                .parse()
                .map_err(|e| format!("master_port {master_port:?}: {e}"))?;
            let master = Access {
                address: Address::Tcp(master_port),
                auth: None,
            };
            let listed = resp::query_at(&master, &["INFO", "replication"])
                .map_err(|e| format!("master {master_port}: {e}"))?;
            let online = format!("port={},state=online", self.port);
            if listed.text().is_some_and(|info| info.contains(&online)) {
                Ok(())
            } else {
                Err(format!("master {master_port} does not list it online yet"))
            }
        })
    }

    fn signal(&self, signal: Signal) -> io::Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| io::Error::other("the server is not running"))?;
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

impl std::fmt::Debug for Protection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Protection")
            .field("tls", &self.tls)
            .field("user", &self.auth.as_ref().map(|(user, _)| user))
            .finish()
    }
}

/// Where the kit reaches a server started with `protection`.
fn access(dir: &Path, port: u16, protection: &Protection) -> Access {
    Access {
        address: if protection.tls {
            Address::Unix(socket_path(dir))
        } else {
            Address::Tcp(port)
        },
        auth: protection.auth.clone(),
    }
}

fn socket_path(dir: &Path) -> PathBuf {
    dir.join("redis.sock")
}

/// One start of a server process.
struct Spawn<'a> {
    program: Program,
    port: u16,
    dir: &'a Path,
    config_file: Option<&'a Path>,
    extra_args: &'a [String],
    env: &'a [(OsString, OsString)],
    protection: &'a Protection,
}

impl Spawn<'_> {
    fn run(&self) -> io::Result<Child> {
        let Self {
            program,
            port,
            dir,
            config_file,
            extra_args,
            env,
            protection,
        } = *self;
        let ports: Vec<OsString> = if protection.tls {
            vec![
                "--port".into(),
                "0".into(),
                "--tls-port".into(),
                port.to_string().into(),
                "--unixsocket".into(),
                socket_path(dir).into(),
                "--unixsocketperm".into(),
                "700".into(),
            ]
        } else {
            vec!["--port".into(), port.to_string().into()]
        };
        let access = access(dir, port, protection);
        let (binary, name) = program.binary()?;
        let mut child = Command::new(&binary)
            .arg0(name)
            .args(config_file)
            .args(&ports)
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
                    match program {
                        Program::Redis => format!(
                            "cannot run {} ({e}); install redis-server or set FERRISSON_REDIS_SERVER",
                            binary.display()
                        ),
                        Program::Valkey => format!(
                            "cannot run {} ({e}); run .ci/require-valkey or set FERRISSON_VALKEY_SERVER",
                            binary.display()
                        ),
                    },
                )
            })?;
        let deadline = Instant::now() + STARTUP_DEADLINE;
        loop {
            if let Some(status) = child.try_wait()? {
                let log = std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
                let tail: String = log.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
                return Err(io::Error::other(format!(
                    "{name} on port {port} exited with {status}: {tail}"
                )));
            }
            if resp::query_at(&access, &["PING"]).is_ok_and(|reply| reply.text() == Some("PONG")) {
                return Ok(child);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{name} on port {port} did not answer PING"),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

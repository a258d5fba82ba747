//! A private PostgreSQL server owned by a test: `postgres` on a free loopback port with
//! its data directory in a temporary directory, which can be stopped, killed, frozen and
//! started again on the same port and data.
//!
//! The kit never touches the machine's own PostgreSQL: it runs the binaries of
//! `$FERRISSON_POSTGRES_BIN` (default Debian's `/usr/lib/postgresql/15/bin`) on a data
//! directory copied from a template that `initdb` made once (trust authentication, user
//! `postgres`). PostgreSQL refuses to run as root: when the tests run as root, the server
//! runs as the `postgres` user, which then owns the data directory.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::User;
use tempfile::TempDir;

use crate::database_dir::{
    as_group_leader, copy_template, end_group, hand_over, log_tail, run_client, signal_group,
    template, unprivileged,
};
use crate::server::free_port;
use crate::wait::poll_until;

/// How long a start may take until the server accepts connections (crash recovery on a
/// busy machine included).
const STARTUP_DEADLINE: Duration = Duration::from_secs(60);
/// How long a clean stop may take before the server is killed.
const STOP_PATIENCE: Duration = Duration::from_secs(30);
/// How many times a start is tried on a fresh port when another process took it.
const PORT_ATTEMPTS: usize = 5;

/// The directory of PostgreSQL's server binaries: `$FERRISSON_POSTGRES_BIN`, else
/// Debian's `/usr/lib/postgresql/15/bin`.
pub fn postgres_bin_dir() -> PathBuf {
    std::env::var_os("FERRISSON_POSTGRES_BIN").map_or_else(
        || PathBuf::from("/usr/lib/postgresql/15/bin"),
        PathBuf::from,
    )
}

/// A private PostgreSQL server on `127.0.0.1`, user `postgres` with trust
/// authentication, database `postgres`, with durability off (`fsync=off`: a test's data
/// need not survive a power cut, only a server restart).
///
/// The server and its backends are one process group, killed (SIGKILL) on drop; the
/// directory is removed after.
///
/// ```no_run
/// let mut pg = ferrisson_testkit::PostgresServer::start()?;
/// println!("connect to {}", pg.url()); // postgres://postgres@127.0.0.1:PORT/postgres
/// pg.execute("CREATE TABLE t (x int)")?;
/// pg.stop()?; // clean shutdown; the data stays
/// pg.relaunch()?; // same port, same data
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct PostgresServer {
    port: u16,
    bin: PathBuf,
    user: Option<User>,
    child: Option<Child>,
    paused: bool,
    /// Holds `data/` and `server.log`; removed on drop, after the server is killed.
    dir: TempDir,
}

impl PostgresServer {
    /// Starts a server on a free port and waits until it accepts connections.
    ///
    /// # Errors
    ///
    /// When the binaries are missing, `initdb` fails, no port could be bound, or the
    /// server did not accept connections within 60 seconds (the error has the end of its
    /// log).
    pub fn start() -> io::Result<Self> {
        let bin = postgres_bin_dir();
        if !bin.join("postgres").is_file() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "no postgres in {}: install Debian's postgresql-15 or set FERRISSON_POSTGRES_BIN",
                    bin.display()
                ),
            ));
        }
        let user = unprivileged("postgres")?;
        let template = template_dir(&bin, user.as_ref())?;
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let dir = tempfile::Builder::new()
                .prefix("ferrisson-postgres-")
                .tempdir()?;
            if let Some(user) = &user {
                hand_over(dir.path(), user)?;
            }
            copy_template(&template, &dir.path().join("data"))?;
            let mut server = Self {
                port: free_port()?,
                bin: bin.clone(),
                user: user.clone(),
                child: None,
                paused: false,
                dir,
            };
            match server.relaunch() {
                Ok(()) => return Ok(server),
                // Dropping it kills what started; try again on another port.
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("no free port")))
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The URL of the same server for another role (create it first, e.g. with
    /// `CREATE ROLE name LOGIN SUPERUSER`): its sessions can be told apart in
    /// `pg_stat_activity.usename`.
    pub fn url_as(&self, role: &str) -> String {
        format!("postgres://{role}@127.0.0.1:{}/postgres", self.port)
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The private directory (`data/`, `server.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The postmaster's process id, while the server runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the server runs (it may be paused).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Runs `sql` with `psql` as `postgres` and returns its output, unaligned and without
    /// headers (one row a line, columns separated by `|`).
    ///
    /// # Errors
    ///
    /// When `psql` cannot connect or the statement fails.
    pub fn execute(&self, sql: &str) -> io::Result<String> {
        run_client(
            Command::new(self.bin.join("psql"))
                .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
                .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "postgres"])
                .arg("-p")
                .arg(self.port.to_string())
                .arg("-c")
                .arg(sql)
                .stdin(Stdio::null()),
        )
    }

    /// Stops the server cleanly (a fast shutdown: sessions are ended, the data written)
    /// and reaps it; the data stays for [`PostgresServer::relaunch`].
    ///
    /// # Errors
    ///
    /// When the signal could not be sent.
    pub fn stop(&mut self) -> io::Result<()> {
        self.paused = false;
        match self.child.take() {
            Some(child) => end_group(child, Signal::SIGINT, STOP_PATIENCE),
            None => Ok(()),
        }
    }

    /// Kills the server and every backend (SIGKILL to its process group) and reaps it;
    /// the next start recovers from the write-ahead log.
    ///
    /// # Errors
    ///
    /// When the reap fails.
    pub fn kill(&mut self) -> io::Result<()> {
        self.paused = false;
        match self.child.take() {
            Some(child) => end_group(child, Signal::SIGKILL, Duration::ZERO),
            None => Ok(()),
        }
    }

    /// Freezes the server and every backend (SIGSTOP to its process group): connections
    /// stay open, nothing is answered.
    ///
    /// # Errors
    ///
    /// When the server is not running or the signal could not be sent.
    pub fn pause(&mut self) -> io::Result<()> {
        signal_group(self.running()?, Signal::SIGSTOP)?;
        self.paused = true;
        Ok(())
    }

    /// Resumes a server frozen by [`PostgresServer::pause`] (SIGCONT).
    ///
    /// # Errors
    ///
    /// When the server is not running or the signal could not be sent.
    pub fn resume(&mut self) -> io::Result<()> {
        signal_group(self.running()?, Signal::SIGCONT)?;
        self.paused = false;
        Ok(())
    }

    /// Stops the server cleanly and starts it again on the same port and data.
    ///
    /// # Errors
    ///
    /// As [`PostgresServer::relaunch`].
    pub fn restart(&mut self) -> io::Result<()> {
        self.stop()?;
        self.relaunch()
    }

    /// Starts the server (after [`PostgresServer::stop`] or [`PostgresServer::kill`])
    /// on its port and data, and waits until it accepts connections. A running server
    /// is stopped first.
    ///
    /// # Errors
    ///
    /// When it does not accept connections within 60 seconds, or exits.
    pub fn relaunch(&mut self) -> io::Result<()> {
        self.stop()?;
        let log_path = self.dir.path().join("server.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?;
        if let Some(user) = &self.user {
            hand_over(&log_path, user)?;
        }
        let mut command = Command::new(self.bin.join("postgres"));
        command
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .arg("-p")
            .arg(self.port.to_string())
            .args(["-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!(
                "unix_socket_directories={}",
                self.dir.path().display()
            ))
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "shared_buffers=16MB"])
            .args(["-c", "max_connections=100"])
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        as_group_leader(&mut command, self.user.as_ref());
        self.child = Some(command.spawn()?);
        let ready = poll_until("PostgreSQL start", STARTUP_DEADLINE, || {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(format!(
                    "postgres exited ({status}): {}",
                    log_tail(&log_path, 5)
                ));
            }
            self.execute("SELECT 1")
                .map(drop)
                .map_err(|e| e.to_string())
        });
        if let Err(e) = ready {
            let _ = self.kill();
            return Err(e);
        }
        Ok(())
    }

    fn running(&self) -> io::Result<&Child> {
        self.child
            .as_ref()
            .ok_or_else(|| io::Error::other("the PostgreSQL server is not running"))
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// The data directory `initdb` made once for the binaries in `bin`.
fn template_dir(bin: &Path, user: Option<&User>) -> io::Result<PathBuf> {
    let version = run_client(Command::new(bin.join("postgres")).arg("--version"))?;
    let major = version
        .split_whitespace()
        .last()
        .and_then(|v| v.split('.').next())
        .unwrap_or("unknown")
        .to_owned();
    template(&format!("postgres-{major}"), user, |into| {
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(into)
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .args(["--locale=C"])
            .stdin(Stdio::null());
        if let Some(user) = user {
            use std::os::unix::process::CommandExt as _;
            initdb.uid(user.uid.as_raw()).gid(user.gid.as_raw());
        }
        run_client(&mut initdb).map(drop)
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed step fails the test
mod tests {
    use super::*;

    #[test]
    fn starts_stops_restarts_and_keeps_its_data() {
        let mut pg = PostgresServer::start().unwrap();
        assert!(pg.url().ends_with(&format!(":{}/postgres", pg.port())));
        pg.execute("CREATE TABLE kept (x int); INSERT INTO kept VALUES (7)")
            .unwrap();
        let port = pg.port();
        pg.restart().unwrap();
        assert_eq!(pg.port(), port);
        assert_eq!(pg.execute("SELECT x FROM kept").unwrap().trim(), "7");
        pg.kill().unwrap();
        assert!(!pg.is_running());
        assert!(
            pg.execute("SELECT 1").is_err(),
            "nothing answers once killed"
        );
        pg.relaunch().unwrap();
        assert_eq!(pg.execute("SELECT x FROM kept").unwrap().trim(), "7");
    }

    #[test]
    fn a_paused_server_answers_nothing_until_resumed() {
        use std::io::{Read as _, Write as _};
        let mut pg = PostgresServer::start().unwrap();
        pg.pause().unwrap();
        let probe = std::net::TcpStream::connect(("127.0.0.1", pg.port())).unwrap();
        probe
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        // A startup packet for user postgres: a running server answers at once.
        let mut packet = Vec::new();
        let body = b"\x00\x03\x00\x00user\x00postgres\x00\x00";
        packet.extend_from_slice(&u32::try_from(body.len() + 4).unwrap().to_be_bytes());
        packet.extend_from_slice(body);
        (&probe).write_all(&packet).unwrap();
        let mut buf = [0u8; 1];
        assert!((&probe).read(&mut buf).is_err(), "a frozen server answers");
        pg.resume().unwrap();
        probe
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        assert!(
            matches!((&probe).read(&mut buf), Ok(1)),
            "answers once resumed"
        );
        assert_eq!(pg.execute("SELECT 1").unwrap().trim(), "1");
    }

    #[test]
    fn two_servers_are_apart_and_dropping_one_kills_its_processes() {
        let a = PostgresServer::start().unwrap();
        let b = PostgresServer::start().unwrap();
        assert_ne!(a.port(), b.port());
        a.execute("CREATE TABLE only_in_a (x int)").unwrap();
        assert!(b.execute("SELECT * FROM only_in_a").is_err());
        let pid = a.pid().unwrap();
        drop(a);
        let alive = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
            None,
        );
        assert!(alive.is_err(), "the postmaster is gone");
    }
}

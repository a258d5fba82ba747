//! A private MariaDB server owned by a test: `mariadbd` on a free loopback port with its
//! data directory in a temporary directory, which can be stopped, killed, frozen and
//! started again on the same port and data.
//!
//! The kit never touches the machine's own MariaDB: it runs `mariadbd --no-defaults`
//! (`$FERRISSON_MARIADBD`, default `mariadbd` from `PATH` or `/usr/sbin`) on a data
//! directory copied from a template that `mariadb-install-db` made once (user `root`
//! without a password, a database `test`). As root, the server is told to run as root
//! (`--user=root`), which it otherwise refuses.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Uid;
use tempfile::TempDir;

use crate::database_dir::{
    as_group_leader, copy_template, end_group, log_tail, run_client, signal_group, template,
};
use crate::server::free_port;
use crate::wait::poll_until;

/// How long a start may take until the server accepts connections.
const STARTUP_DEADLINE: Duration = Duration::from_secs(60);
/// How long a clean stop may take before the server is killed.
const STOP_PATIENCE: Duration = Duration::from_secs(30);
/// How many times a start is tried on a fresh port when another process took it.
const PORT_ATTEMPTS: usize = 5;
/// Small logs and buffers: a test's server starts in well under a second.
const SIZES: [&str; 2] = ["--innodb-log-file-size=4M", "--innodb-buffer-pool-size=16M"];

/// The MariaDB server binary: `$FERRISSON_MARIADBD`, else `mariadbd` from `PATH`, else
/// Debian's `/usr/sbin/mariadbd`.
pub fn mariadbd_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("FERRISSON_MARIADBD") {
        return PathBuf::from(path);
    }
    let in_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("mariadbd"))
            .find(|candidate| candidate.is_file())
    });
    in_path.unwrap_or_else(|| PathBuf::from("/usr/sbin/mariadbd"))
}

/// A private MariaDB server on `127.0.0.1`, user `root` without a password, database
/// `test`, with durability relaxed (`innodb_flush_log_at_trx_commit=0`).
///
/// The server is killed (SIGKILL) on drop, and its directory removed.
///
/// ```no_run
/// let mut db = ferrisson_testkit::MariaDbServer::start()?;
/// println!("connect to {}", db.url()); // mysql://root@127.0.0.1:PORT/test
/// db.execute("CREATE TABLE t (x int)")?;
/// db.restart()?; // same port, same data
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct MariaDbServer {
    port: u16,
    binary: PathBuf,
    child: Option<Child>,
    paused: bool,
    /// Holds `data/`, the socket and `error.log`; removed on drop.
    dir: TempDir,
}

impl MariaDbServer {
    /// Starts a server on a free port and waits until it accepts connections.
    ///
    /// # Errors
    ///
    /// When the binaries are missing, `mariadb-install-db` fails, no port could be bound,
    /// or the server did not accept connections within 60 seconds (the error has the end
    /// of its log).
    pub fn start() -> io::Result<Self> {
        let binary = mariadbd_binary();
        if !binary.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "no MariaDB server at {}: install Debian's mariadb-server or set FERRISSON_MARIADBD",
                    binary.display()
                ),
            ));
        }
        let template = template_dir(&binary)?;
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let dir = tempfile::Builder::new()
                .prefix("ferrisson-mariadb-")
                .tempdir()?;
            copy_template(&template, &dir.path().join("data"))?;
            let mut server = Self {
                port: free_port()?,
                binary: binary.clone(),
                child: None,
                paused: false,
                dir,
            };
            match server.relaunch() {
                Ok(()) => return Ok(server),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("no free port")))
    }

    /// `mysql://root@127.0.0.1:PORT/test`.
    pub fn url(&self) -> String {
        self.url_as("root")
    }

    /// The URL of the same server for another user without a password (create it
    /// first, e.g. `CREATE USER name; GRANT ALL ON *.* TO name`): its sessions can be
    /// told apart in `information_schema.processlist.user`.
    pub fn url_as(&self, user: &str) -> String {
        format!("mysql://{user}@127.0.0.1:{}/test", self.port)
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The private directory (`data/`, `error.log`, the socket).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the server runs (it may be paused).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Runs `sql` with the `mariadb` client as root in the database `test` and returns
    /// its output (one row a line, columns separated by tabs, no headers).
    ///
    /// # Errors
    ///
    /// When the client cannot connect or a statement fails.
    pub fn execute(&self, sql: &str) -> io::Result<String> {
        run_client(
            Command::new(client_binary())
                .args(["--no-defaults", "-N", "-B", "-h", "127.0.0.1", "-u", "root"])
                .arg("-P")
                .arg(self.port.to_string())
                .args(["--connect-timeout=5", "-e"])
                .arg(sql)
                .arg("test")
                .stdin(Stdio::null()),
        )
    }

    /// Stops the server cleanly (SIGTERM: sessions are ended, the data written) and reaps
    /// it; the data stays for [`MariaDbServer::relaunch`].
    ///
    /// # Errors
    ///
    /// When the signal could not be sent.
    pub fn stop(&mut self) -> io::Result<()> {
        self.paused = false;
        match self.child.take() {
            Some(child) => end_group(child, Signal::SIGTERM, STOP_PATIENCE),
            None => Ok(()),
        }
    }

    /// Kills the server (SIGKILL) and reaps it; the next start recovers from its logs.
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

    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered.
    ///
    /// # Errors
    ///
    /// When the server is not running or the signal could not be sent.
    pub fn pause(&mut self) -> io::Result<()> {
        signal_group(self.running()?, Signal::SIGSTOP)?;
        self.paused = true;
        Ok(())
    }

    /// Resumes a server frozen by [`MariaDbServer::pause`] (SIGCONT).
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
    /// As [`MariaDbServer::relaunch`].
    pub fn restart(&mut self) -> io::Result<()> {
        self.stop()?;
        self.relaunch()
    }

    /// Starts the server (after [`MariaDbServer::stop`] or [`MariaDbServer::kill`]) on
    /// its port and data, and waits until it accepts connections. A running server is
    /// stopped first.
    ///
    /// # Errors
    ///
    /// When it does not accept connections within 60 seconds, or exits.
    pub fn relaunch(&mut self) -> io::Result<()> {
        self.stop()?;
        let dir = self.dir.path();
        let log_path = dir.join("error.log");
        let mut command = Command::new(&self.binary);
        command
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg(format!("--socket={}", dir.join("mysqld.sock").display()))
            .arg(format!("--pid-file={}", dir.join("mysqld.pid").display()))
            .arg(format!("--log-error={}", log_path.display()))
            .arg(format!("--port={}", self.port))
            .args(["--bind-address=127.0.0.1", "--skip-log-bin"])
            .args([
                "--innodb-flush-log-at-trx-commit=0",
                "--max-connections=200",
            ])
            .args(SIZES)
            .args(as_root())
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        as_group_leader(&mut command, None);
        self.child = Some(command.spawn()?);
        let ready = poll_until("MariaDB start", STARTUP_DEADLINE, || {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(format!(
                    "mariadbd exited ({status}): {}",
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
            .ok_or_else(|| io::Error::other("the MariaDB server is not running"))
    }
}

impl Drop for MariaDbServer {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// `--user=root` when this process is root (the server refuses root otherwise).
fn as_root() -> Option<&'static str> {
    Uid::effective().is_root().then_some("--user=root")
}

/// The `mariadb` client, next to the server's binaries' usual place.
fn client_binary() -> PathBuf {
    std::env::var_os("FERRISSON_MARIADB_CLIENT")
        .map_or_else(|| PathBuf::from("mariadb"), PathBuf::from)
}

/// The data directory `mariadb-install-db` made once for `binary`'s version.
fn template_dir(binary: &Path) -> io::Result<PathBuf> {
    let version = run_client(Command::new(binary).arg("--version"))?;
    let version = version
        .split_whitespace()
        .nth(2)
        .unwrap_or("unknown")
        .to_owned();
    let install = std::env::var_os("FERRISSON_MARIADB_INSTALL_DB")
        .map_or_else(|| PathBuf::from("mariadb-install-db"), PathBuf::from);
    template(&format!("mariadb-{version}"), None, |into| {
        run_client(
            Command::new(install)
                .arg("--no-defaults")
                .arg(format!("--datadir={}", into.display()))
                .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
                .args(SIZES)
                .args(as_root())
                .stdin(Stdio::null()),
        )?;
        // A database is a directory to MariaDB.
        std::fs::create_dir(into.join("test"))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed step fails the test
mod tests {
    use super::*;

    #[test]
    fn starts_stops_restarts_and_keeps_its_data() {
        let mut db = MariaDbServer::start().unwrap();
        assert!(db.url().ends_with(&format!(":{}/test", db.port())));
        db.execute("CREATE TABLE kept (x int) ENGINE=InnoDB; INSERT INTO kept VALUES (7)")
            .unwrap();
        let port = db.port();
        db.restart().unwrap();
        assert_eq!(db.port(), port);
        assert_eq!(db.execute("SELECT x FROM kept").unwrap().trim(), "7");
        db.kill().unwrap();
        assert!(!db.is_running());
        assert!(
            db.execute("SELECT 1").is_err(),
            "nothing answers once killed"
        );
        db.relaunch().unwrap();
        assert_eq!(db.execute("SELECT x FROM kept").unwrap().trim(), "7");
    }

    #[test]
    fn a_paused_server_answers_nothing_until_resumed() {
        use std::io::Read as _;
        let mut db = MariaDbServer::start().unwrap();
        db.pause().unwrap();
        // The server speaks first: a running one sends its greeting at once.
        let probe = std::net::TcpStream::connect(("127.0.0.1", db.port())).unwrap();
        probe
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut buf = [0u8; 1];
        assert!((&probe).read(&mut buf).is_err(), "a frozen server greets");
        db.resume().unwrap();
        probe
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        assert!(
            matches!((&probe).read(&mut buf), Ok(1)),
            "greets once resumed"
        );
        assert_eq!(db.execute("SELECT 1").unwrap().trim(), "1");
    }

    #[test]
    fn dropping_the_server_kills_it() {
        let db = MariaDbServer::start().unwrap();
        let (pid, port) = (db.pid().unwrap(), db.port());
        drop(db);
        let alive = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
            None,
        );
        assert!(alive.is_err(), "the server is gone");
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    }
}

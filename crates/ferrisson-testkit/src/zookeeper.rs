//! ZooKeeper servers owned by a test: one standalone server or an ensemble of three, each
//! member a `QuorumPeerMain` JVM with its own configuration in a private directory,
//! on free loopback ports, killed on drop.
//!
//! The kit never touches a system ZooKeeper service: it runs the jar with a configuration
//! of its own (short ticks, the admin server off, the four-letter words `srvr`, `ruok`
//! and `mntr` on). The JVM is `java` from `PATH` (or `$FERRISSON_JAVA`); the jar is
//! Debian's `/usr/share/java/zookeeper.jar` (or `$FERRISSON_ZOOKEEPER_JAR`), whose
//! manifest names the jars it needs. `.ci/require-zookeeper` installs both.

use std::fmt::Write as _;
use std::io::{self, Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tempfile::TempDir;

use crate::server::free_port;
use crate::wait::poll_until;

/// How long members may take from start to serving (a JVM on a busy machine).
const STARTUP_DEADLINE: Duration = Duration::from_secs(60);
/// How many times a start is tried on fresh ports when another process took one.
const PORT_ATTEMPTS: usize = 5;
/// The server's tick: sessions may last 2 to 300 ticks (0.4 s to 60 s).
const TICK: Duration = Duration::from_millis(200);

/// The JVM the kit runs: `$FERRISSON_JAVA`, else `java` from `PATH`.
pub fn java_binary() -> PathBuf {
    std::env::var_os("FERRISSON_JAVA").map_or_else(|| PathBuf::from("java"), PathBuf::from)
}

/// The ZooKeeper server jar: `$FERRISSON_ZOOKEEPER_JAR`, else Debian's
/// `/usr/share/java/zookeeper.jar`.
///
/// # Errors
///
/// [`io::ErrorKind::NotFound`] naming `.ci/require-zookeeper` when the jar is missing.
pub fn zookeeper_jar() -> io::Result<PathBuf> {
    let jar = std::env::var_os("FERRISSON_ZOOKEEPER_JAR").map_or_else(
        || PathBuf::from("/usr/share/java/zookeeper.jar"),
        PathBuf::from,
    );
    if jar.is_file() {
        Ok(jar)
    } else {
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "no ZooKeeper jar at {}: run .ci/require-zookeeper (as root it installs \
                 Debian's zookeeper package) or set FERRISSON_ZOOKEEPER_JAR",
                jar.display()
            ),
        ))
    }
}

/// The ports of one member on 127.0.0.1.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ports {
    pub(crate) client: u16,
    pub(crate) quorum: u16,
    pub(crate) election: u16,
}

impl Ports {
    /// Three free loopback ports.
    pub(crate) fn free() -> io::Result<Self> {
        Ok(Self {
            client: free_port()?,
            quorum: free_port()?,
            election: free_port()?,
        })
    }
}

/// How many ticks a follower may take to connect and sync (`initLimit`) and to answer
/// the leader (`syncLimit`): the time a cut-off member takes to notice.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) init: u32,
    pub(crate) sync: u32,
}

/// The kit's usual limits: patient with JVMs starting on a busy machine.
const DEFAULT_LIMITS: Limits = Limits { init: 50, sync: 15 };

/// Where member `from` (1-based id) reaches member `to`'s quorum and election ports:
/// `None` for the member's own ports (every member's default).
pub(crate) type Route<'a> = &'a dyn Fn(usize, usize) -> Option<(u16, u16)>;

/// One `QuorumPeerMain` process of a [`ZooKeeper`].
#[derive(Debug)]
struct Member {
    id: usize,
    ports: Ports,
    dir: PathBuf,
    child: Option<Child>,
    paused: bool,
}

impl Member {
    fn spawn(&mut self, jar: &Path) -> io::Result<()> {
        let log = std::fs::File::create(self.dir.join("server.log"))?;
        let child = Command::new(java_binary())
            .args([
                "-Xmx128m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-Dzookeeper.admin.enableServer=false",
                "-Dzookeeper.jmx.log4j.disable=true",
            ])
            .arg(format!("-Dzookeeper.log.dir={}", self.dir.display()))
            .arg("-cp")
            .arg(jar)
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(self.dir.join("zoo.cfg"))
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.child = Some(child);
        self.paused = false;
        Ok(())
    }

    fn signal(&self, signal: Signal) -> io::Result<()> {
        let child = self
            .child
            .as_ref()
            .ok_or_else(|| io::Error::other(format!("member {} is not running", self.id)))?;
        let pid = Pid::from_raw(i32::try_from(child.id()).map_err(io::Error::other)?);
        kill(pid, signal).map_err(io::Error::from)
    }

    /// Ends the process with `signal` (and SIGKILL if it has not ended 10 s later).
    fn end(&mut self, signal: Signal) -> io::Result<()> {
        if self.child.is_none() {
            return Ok(());
        }
        if self.paused {
            // A stopped JVM handles SIGTERM only once resumed.
            self.signal(Signal::SIGCONT)?;
            self.paused = false;
        }
        self.signal(signal)?;
        if let Some(mut child) = self.child.take() {
            let ended = poll_until("member exit", Duration::from_secs(10), || {
                child
                    .try_wait()
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| "still running".to_owned())
            });
            if ended.is_err() {
                child.kill()?;
                child.wait()?;
            }
        }
        Ok(())
    }

    /// What `srvr` says the member is: `standalone`, `leader` or `follower`.
    fn mode(&self) -> Result<String, String> {
        let reply = four_letter_word(self.ports.client, "srvr").map_err(|e| e.to_string())?;
        reply
            .lines()
            .find_map(|line| line.strip_prefix("Mode: "))
            .map(|mode| mode.trim().to_owned())
            .ok_or_else(|| format!("member {} not serving: {}", self.id, reply.trim()))
    }

    /// `Err` with the reason when the process has exited.
    fn check_alive(&mut self) -> Result<(), String> {
        let Some(child) = self.child.as_mut() else {
            return Err(format!("member {} is not running", self.id));
        };
        match child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => {
                let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                Err(format!(
                    "member {} exited ({status}): {}",
                    self.id,
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                ))
            }
            Err(e) => Err(e.to_string()),
        }
    }
}

/// Sends a four-letter word to `127.0.0.1:port` and returns the whole answer.
///
/// # Errors
///
/// When the port does not accept a connection or answer within two seconds.
pub fn four_letter_word(port: u16, word: &str) -> io::Result<String> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(word.as_bytes())?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    Ok(reply)
}

/// A private ZooKeeper: one standalone server ([`ZooKeeper::standalone`]) or a
/// three-member ensemble ([`ZooKeeper::ensemble`]) on free loopback ports, with
/// `tickTime` 200 ms (sessions of 0.4 s to 60 s) and the admin server off.
///
/// Every member is killed (SIGKILL) and reaped on drop, and the directories removed.
/// One member can be stopped, killed, paused and restarted for fault tests.
///
/// ```no_run
/// use ferrisson_testkit::ZooKeeper;
///
/// let zk = ZooKeeper::ensemble()?;
/// println!("connect to {}", zk.url()); // zk://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
/// let leader = zk.leader().expect("an elected leader");
/// let mut zk = zk;
/// zk.kill(leader)?; // the other two elect a new leader
/// zk.restart(leader)?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct ZooKeeper {
    members: Vec<Member>,
    jar: PathBuf,
    /// Removed on drop, after the members are killed.
    dir: TempDir,
}

impl ZooKeeper {
    /// Starts one standalone server and waits until it serves (`srvr` reports
    /// `Mode: standalone`).
    ///
    /// # Errors
    ///
    /// When Java or the jar is missing, no ports could be bound, or the server did not
    /// serve within 60 seconds (the error has the end of its log).
    pub fn standalone() -> io::Result<Self> {
        Self::start(1)
    }

    /// Starts three members on one host and waits until every one serves as leader or
    /// follower.
    ///
    /// # Errors
    ///
    /// As [`ZooKeeper::standalone`].
    pub fn ensemble() -> io::Result<Self> {
        Self::start(3)
    }

    fn start(size: usize) -> io::Result<Self> {
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let ports = (0..size)
                .map(|_| Ports::free())
                .collect::<io::Result<_>>()?;
            match Self::start_routed(ports, DEFAULT_LIMITS, &|_, _| None) {
                Ok(zk) => return Ok(zk),
                // Dropping it killed what started; try again on other ports.
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("no free ports")))
    }

    /// Starts one member on each of `ports` (one try), member `from` reaching member
    /// `to` where `route(from, to)` says (ids from 1), and waits until every one serves.
    pub(crate) fn start_routed(
        ports: Vec<Ports>,
        limits: Limits,
        route: Route<'_>,
    ) -> io::Result<Self> {
        let jar = zookeeper_jar()?;
        let mut zk = Self::configure(ports, jar, limits, route)?;
        for member in &mut zk.members {
            member.spawn(&zk.jar)?;
        }
        zk.wait_all_serving()?;
        Ok(zk)
    }

    /// Writes every member's configuration.
    fn configure(
        ports: Vec<Ports>,
        jar: PathBuf,
        limits: Limits,
        route: Route<'_>,
    ) -> io::Result<Self> {
        let size = ports.len();
        let dir = tempfile::Builder::new()
            .prefix("ferrisson-zookeeper-")
            .tempdir()?;
        let mut members = Vec::with_capacity(size);
        for (id, ports) in (1..=size).zip(ports) {
            let member_dir = dir.path().join(format!("member-{id}"));
            std::fs::create_dir_all(member_dir.join("data"))?;
            members.push(Member {
                id,
                ports,
                dir: member_dir,
                child: None,
                paused: false,
            });
        }
        for member in &members {
            // Each member's own list of the ensemble: its own ports, and its way to each
            // other member (straight, or through a proxy of the route).
            let mut servers = String::new();
            if size > 1 {
                for m in &members {
                    let (quorum, election) = route(member.id, m.id)
                        .filter(|_| m.id != member.id)
                        .unwrap_or((m.ports.quorum, m.ports.election));
                    let _ = writeln!(servers, "server.{}=127.0.0.1:{quorum}:{election}", m.id);
                }
            }
            let config = format!(
                "tickTime={tick}\n\
                 initLimit={init}\n\
                 syncLimit={sync}\n\
                 minSessionTimeout={min}\n\
                 maxSessionTimeout=60000\n\
                 dataDir={data}\n\
                 clientPort={client}\n\
                 clientPortAddress=127.0.0.1\n\
                 admin.enableServer=false\n\
                 4lw.commands.whitelist=srvr,ruok,mntr\n\
                 maxClientCnxns=0\n\
                 {servers}",
                tick = TICK.as_millis(),
                init = limits.init,
                sync = limits.sync,
                min = (TICK * 2).as_millis(),
                data = member.dir.join("data").display(),
                client = member.ports.client,
            );
            std::fs::write(member.dir.join("zoo.cfg"), config)?;
            std::fs::write(member.dir.join("data").join("myid"), member.id.to_string())?;
        }
        Ok(Self { members, jar, dir })
    }

    fn wait_all_serving(&mut self) -> io::Result<()> {
        let expected: &[&str] = if self.members.len() == 1 {
            &["standalone"]
        } else {
            &["leader", "follower"]
        };
        let members = &mut self.members;
        poll_until("ZooKeeper start", STARTUP_DEADLINE, || {
            for member in members.iter_mut() {
                member.check_alive()?;
                let mode = member.mode()?;
                if !expected.contains(&mode.as_str()) {
                    return Err(format!("member {} is {mode}", member.id));
                }
            }
            Ok(())
        })
    }

    /// Waits until every member serves again (as leader or follower in an ensemble),
    /// e.g. after a fault healed.
    ///
    /// # Errors
    ///
    /// When a member exited or some member did not serve within 60 seconds.
    pub fn wait_serving(&mut self) -> io::Result<()> {
        self.wait_all_serving()
    }

    /// `zk://127.0.0.1:PORT[,127.0.0.1:PORT...]`: every member's client port.
    pub fn url(&self) -> String {
        format!("zk://{}", self.connect_string())
    }

    /// `127.0.0.1:PORT[,127.0.0.1:PORT...]`, as ZooKeeper clients take it.
    pub fn connect_string(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.ports.client))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// How many members there are (1 or 3).
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// The client port of member `index` (0-based).
    ///
    /// # Panics
    ///
    /// When `index` is not a member's.
    pub fn client_port(&self, index: usize) -> u16 {
        self.members[index].ports.client
    }

    /// The index of the member that is leader now, by `srvr` (`None` for a standalone
    /// server or while no member says it leads).
    pub fn leader(&self) -> Option<usize> {
        self.members
            .iter()
            .position(|m| m.child.is_some() && !m.paused && m.mode().as_deref() == Ok("leader"))
    }

    /// What member `index` reports as its mode (`standalone`, `leader`, `follower`).
    ///
    /// # Errors
    ///
    /// When it does not answer or does not serve.
    pub fn mode(&self, index: usize) -> io::Result<String> {
        self.member(index)?.mode().map_err(io::Error::other)
    }

    fn member(&self, index: usize) -> io::Result<&Member> {
        self.members
            .get(index)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no such member"))
    }

    fn member_mut(&mut self, index: usize) -> io::Result<&mut Member> {
        self.members
            .get_mut(index)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no such member"))
    }

    /// The process id of member `index`, while it runs.
    pub fn pid(&self, index: usize) -> Option<u32> {
        self.members.get(index)?.child.as_ref().map(Child::id)
    }

    /// Stops member `index` cleanly (SIGTERM) and reaps it; its data stays.
    ///
    /// # Errors
    ///
    /// When the signal could not be sent.
    pub fn stop(&mut self, index: usize) -> io::Result<()> {
        self.member_mut(index)?.end(Signal::SIGTERM)
    }

    /// Kills member `index` (SIGKILL) and reaps it; its data stays.
    ///
    /// # Errors
    ///
    /// When the signal could not be sent.
    pub fn kill(&mut self, index: usize) -> io::Result<()> {
        self.member_mut(index)?.end(Signal::SIGKILL)
    }

    /// Freezes member `index` with SIGSTOP: its connections stay open, nothing is
    /// answered.
    ///
    /// # Errors
    ///
    /// When it is not running or the signal could not be sent.
    pub fn pause(&mut self, index: usize) -> io::Result<()> {
        let member = self.member_mut(index)?;
        member.signal(Signal::SIGSTOP)?;
        member.paused = true;
        Ok(())
    }

    /// Resumes member `index` after [`ZooKeeper::pause`] (SIGCONT).
    ///
    /// # Errors
    ///
    /// When it is not running or the signal could not be sent.
    pub fn resume(&mut self, index: usize) -> io::Result<()> {
        let member = self.member_mut(index)?;
        member.signal(Signal::SIGCONT)?;
        member.paused = false;
        Ok(())
    }

    /// Starts member `index` again (killing it first if it runs) on its ports and data,
    /// and waits until it serves again.
    ///
    /// # Errors
    ///
    /// When it does not serve within 60 seconds.
    pub fn restart(&mut self, index: usize) -> io::Result<()> {
        let jar = self.jar.clone();
        let standalone = self.members.len() == 1;
        let member = self.member_mut(index)?;
        member.end(Signal::SIGKILL)?;
        member.spawn(&jar)?;
        poll_until("ZooKeeper member restart", STARTUP_DEADLINE, || {
            member.check_alive()?;
            let mode = member.mode()?;
            let serving = if standalone {
                mode == "standalone"
            } else {
                mode == "leader" || mode == "follower"
            };
            if serving { Ok(()) } else { Err(mode) }
        })
    }

    /// The private directory of the whole server or ensemble (`member-N/` per member,
    /// each with its `zoo.cfg`, `data/` and `server.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for ZooKeeper {
    fn drop(&mut self) {
        for member in &mut self.members {
            if let Some(mut child) = member.child.take() {
                // A stopped process still dies on SIGKILL.
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

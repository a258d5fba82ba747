//! etcd members owned by a test: one member, or a cluster of several, on free loopback
//! ports in a private directory, killed on drop.

use std::io::{self, Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tempfile::TempDir;

use crate::server::free_port;
use crate::wait::poll_until;

/// How long fresh members may take to elect a leader and report healthy.
const STARTUP_DEADLINE: Duration = Duration::from_secs(20);
/// How many sets of free ports to try when another process grabs one between probe and
/// bind (the member then exits at once).
const PORT_ATTEMPTS: usize = 10;
/// Raft heartbeat of test members: short, so that a failover takes well under a second.
const HEARTBEAT_MS: u32 = 50;
/// Raft election timeout of test members; etcd's shortest lease is then
/// `ceil(1.5 * 500 ms)` = 1 s.
const ELECTION_MS: u32 = 500;
/// How long one health probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// The `etcd` binary the kit runs: `$FERRISSON_ETCD` or `etcd` from `PATH`.
pub fn etcd_binary() -> PathBuf {
    std::env::var_os("FERRISSON_ETCD").map_or_else(|| PathBuf::from("etcd"), PathBuf::from)
}

/// The `etcdctl` binary tests run: `$FERRISSON_ETCDCTL` or `etcdctl` from `PATH`.
pub fn etcdctl_binary() -> PathBuf {
    std::env::var_os("FERRISSON_ETCDCTL").map_or_else(|| PathBuf::from("etcdctl"), PathBuf::from)
}

/// One member process of an [`EtcdCluster`].
#[derive(Debug)]
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    /// The peer port the other members dial: `peer_port`, or a relay's in front of it
    /// (`EtcdCluster::start_partitionable`).
    advertised_peer_port: u16,
    child: Option<Child>,
    paused: AtomicBool,
}

/// One etcd member, or a cluster of several, each on free loopback ports (a client and a
/// peer port) with its data in a private temporary directory. Members run with a 50 ms
/// heartbeat and a 500 ms election timeout, so a leader is elected within a second and
/// the shortest lease is 1 s.
///
/// Every member is killed (SIGKILL) and reaped on drop; the directory goes with them.
///
/// ```no_run
/// let cluster = ferrisson_testkit::EtcdCluster::start(3)?;
/// println!("test against {}", cluster.url()); // etcd://127.0.0.1:P1,127.0.0.1:P2,...
/// cluster.pause(0)?; // SIGSTOP: member 0 stops answering
/// cluster.resume(0)?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct EtcdCluster {
    dir: TempDir,
    members: Vec<Member>,
}

impl EtcdCluster {
    /// Starts one member and returns once it reports healthy.
    ///
    /// # Errors
    ///
    /// As [`EtcdCluster::start`].
    pub fn single() -> io::Result<Self> {
        Self::start(1)
    }

    /// Starts a cluster of `members` members and returns once every member reports
    /// healthy (`/health`: a leader is elected and the member serves reads).
    ///
    /// # Errors
    ///
    /// When the binary is missing, no set of ports could be bound, or the members were
    /// not healthy within 20 seconds (the error says what the last probe saw).
    pub fn start(members: usize) -> io::Result<Self> {
        Self::start_with(members, None)
    }

    /// As [`EtcdCluster::start`], each member's peer traffic through `relays` when given
    /// (the members advertise the relay's port as their peer URL).
    pub(crate) fn start_with(
        members: usize,
        relays: Option<&crate::etcd_partition::PeerPartition>,
    ) -> io::Result<Self> {
        if members == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a cluster needs at least one member",
            ));
        }
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let dir = tempfile::Builder::new()
                .prefix("ferrisson-etcd-")
                .tempdir()?;
            let mut cluster = Self {
                dir,
                members: Vec::with_capacity(members),
            };
            for i in 0..members {
                let peer_port = free_port()?;
                let advertised_peer_port = match relays {
                    Some(relays) => relays.relay(i, peer_port)?,
                    None => peer_port,
                };
                cluster.members.push(Member {
                    name: format!("n{}", i + 1),
                    client_port: free_port()?,
                    peer_port,
                    advertised_peer_port,
                    child: None,
                    paused: AtomicBool::new(false),
                });
            }
            for i in 0..members {
                cluster.spawn(i)?;
            }
            match cluster.wait_healthy() {
                Ok(()) => return Ok(cluster),
                // A member that exited lost a port race: try new ports.
                Err(e) if cluster.any_exited() => last_error = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("no free ports")))
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.advertised_peer_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn spawn(&mut self, i: usize) -> io::Result<()> {
        let initial = self.initial_cluster();
        let data = self.dir.path().join(&self.members[i].name);
        let log = std::fs::File::create(
            self.dir
                .path()
                .join(format!("{}.log", self.members[i].name)),
        )?;
        let member = &mut self.members[i];
        let client = format!("http://127.0.0.1:{}", member.client_port);
        let peer = format!("http://127.0.0.1:{}", member.peer_port);
        let advertised_peer = format!("http://127.0.0.1:{}", member.advertised_peer_port);
        let child = Command::new(etcd_binary())
            .arg("--name")
            .arg(&member.name)
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &advertised_peer])
            .args(["--initial-cluster", &initial])
            .args(["--initial-cluster-token", "ferrisson-test"])
            .args(["--initial-cluster-state", "new"])
            .args(["--heartbeat-interval", &HEARTBEAT_MS.to_string()])
            .args(["--election-timeout", &ELECTION_MS.to_string()])
            .args(["--logger", "zap", "--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "cannot start {}: {e} (run .ci/require-etcd, or set FERRISSON_ETCD)",
                        etcd_binary().display()
                    ),
                )
            })?;
        member.child = Some(child);
        member.paused.store(false, Ordering::Relaxed);
        Ok(())
    }

    fn any_exited(&mut self) -> bool {
        self.members.iter_mut().any(|m| {
            m.child
                .as_mut()
                .is_some_and(|c| c.try_wait().ok().flatten().is_some())
        })
    }

    /// Waits until every running member answers `/health` with `true`: a leader is
    /// elected and known to each, and a quorum read went through it (etcd's health check
    /// is a read through raft).
    ///
    /// After [`EtcdCluster::kill`] of the leader, a request sent before the others notice
    /// may be forwarded to the dead leader and dropped with it: etcd does not resend it
    /// and answers "request timed out" after its request timeout (5 s plus two election
    /// timeouts). A test that means the cluster without the member, not the failover,
    /// waits for this first.
    ///
    /// # Errors
    ///
    /// When a member exited, or the running members were not healthy within 20 seconds.
    pub fn wait_healthy(&mut self) -> io::Result<()> {
        let ports: Vec<u16> = self
            .members
            .iter()
            .filter(|m| m.child.is_some())
            .map(|m| m.client_port)
            .collect();
        let members = &mut self.members;
        poll_until("etcd members healthy", STARTUP_DEADLINE, || {
            for m in members.iter_mut() {
                let exited = m
                    .child
                    .as_mut()
                    .is_some_and(|c| c.try_wait().ok().flatten().is_some());
                if exited {
                    // Not "not yet": it will never be.
                    return Ok(Err(format!("member {} exited", m.name)));
                }
            }
            for &port in &ports {
                health(port).map_err(|e| format!("127.0.0.1:{port}: {e}"))?;
            }
            Ok(Ok(()))
        })?
        .map_err(io::Error::other)
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Never true: a cluster has at least one member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// `etcd://127.0.0.1:P1,127.0.0.1:P2,...`: every member's client address, the URL
    /// ferrisson connects to.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect();
        format!("etcd://{}", hosts.join(","))
    }

    /// Every member's client URL (`http://127.0.0.1:P`), comma-separated, as `etcdctl
    /// --endpoints` takes them.
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("http://127.0.0.1:{}", m.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Member `i`'s client port on 127.0.0.1.
    ///
    /// # Panics
    ///
    /// When there is no member `i`.
    pub fn client_port(&self, i: usize) -> u16 {
        self.members[i].client_port
    }

    /// Member `i`'s process id while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members.get(i)?.child.as_ref().map(Child::id)
    }

    /// An `etcdctl` command aimed at every member (`--endpoints`), with the v3 API.
    pub fn etcdctl(&self) -> Command {
        let mut command = Command::new(etcdctl_binary());
        command
            .env("ETCDCTL_API", "3")
            .arg("--endpoints")
            .arg(self.endpoints());
        command
    }

    fn member(&self, i: usize) -> io::Result<&Member> {
        self.members
            .get(i)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("no member {i}")))
    }

    fn signal(&self, i: usize, signal: Signal) -> io::Result<()> {
        let member = self.member(i)?;
        let child = member.child.as_ref().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotConnected,
                format!("member {i} is not running"),
            )
        })?;
        let pid = Pid::from_raw(i32::try_from(child.id()).map_err(io::Error::other)?);
        kill(pid, signal).map_err(io::Error::from)
    }

    /// Freezes member `i` with SIGSTOP: its connections stay open, nothing is answered.
    ///
    /// # Errors
    ///
    /// When there is no such running member or the signal could not be sent.
    pub fn pause(&self, i: usize) -> io::Result<()> {
        self.signal(i, Signal::SIGSTOP)?;
        self.members[i].paused.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Resumes member `i` after [`EtcdCluster::pause`] (SIGCONT).
    ///
    /// # Errors
    ///
    /// As [`EtcdCluster::pause`].
    pub fn resume(&self, i: usize) -> io::Result<()> {
        self.signal(i, Signal::SIGCONT)?;
        self.members[i].paused.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// Kills member `i` with SIGKILL and reaps it (its data directory stays, for
    /// [`EtcdCluster::restart`]).
    ///
    /// # Errors
    ///
    /// When there is no member `i`, or the kill or the reap fails.
    pub fn kill(&mut self, i: usize) -> io::Result<()> {
        self.member(i)?;
        if let Some(mut child) = self.members[i].child.take() {
            child.kill()?;
            child.wait()?;
        }
        self.members[i].paused.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// Starts member `i` again on its ports and data directory (after
    /// [`EtcdCluster::kill`]) and waits until every running member is healthy.
    ///
    /// # Errors
    ///
    /// When it could not be started or the members were not healthy within 20 seconds.
    pub fn restart(&mut self, i: usize) -> io::Result<()> {
        self.kill(i)?;
        self.spawn(i)?;
        self.wait_healthy()
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for member in &mut self.members {
            if let Some(mut child) = member.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// One `GET /health` on a member's client port: `Ok` when it answers `"health":"true"`.
fn health(port: u16) -> Result<(), String> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream =
        TcpStream::connect_timeout(&address, PROBE_TIMEOUT).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(PROBE_TIMEOUT))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut reply = String::new();
    stream
        .read_to_string(&mut reply)
        .map_err(|e| e.to_string())?;
    if reply.contains("\"health\":\"true\"") {
        Ok(())
    } else {
        Err(format!(
            "not healthy yet: {}",
            reply.lines().last().unwrap_or_default()
        ))
    }
}

impl EtcdCluster {
    /// Whether member `i` answers `/health` with `true` now.
    pub fn is_healthy(&self, i: usize) -> bool {
        self.members
            .get(i)
            .is_some_and(|m| m.child.is_some() && health(m.client_port).is_ok())
    }
}

//! etcd members whose peer (raft) traffic passes through relays that can cut one member
//! off from the others, both ways, while it keeps running: a real partition of a
//! minority, not a frozen process.
//!
//! Each member advertises a relay's port as its peer URL, so every connection between
//! two members goes through the relay of the member dialed. A relay knows its member;
//! it learns the other end (the member that dialed) from the kernel: the connection's
//! source port gives the dialer's socket in `/proc/net/tcp`, whose inode is among the
//! open files of exactly one member (`/proc/PID/fd`). Cutting member `k` off holds every
//! byte on every link with `k` at one end, as a partition does under TCP, until healed;
//! then they are delivered in order. Clients reach the members' client ports directly:
//! a client of the cut-off member still talks to it.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::etcd::EtcdCluster;

/// The relays in front of every member's peer port, and the cut in force.
///
/// ```no_run
/// let (cluster, partition) = ferrisson_testkit::EtcdCluster::start_partitionable(3)?;
/// partition.cut_off(&cluster, 2); // member 2 hears nothing, and is not heard
/// partition.heal();
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct PeerPartition {
    shared: Arc<Shared>,
    /// The relays' own runtime (the cluster's API is synchronous).
    runtime: Option<tokio::runtime::Runtime>,
}

#[derive(Debug)]
struct Shared {
    /// The member cut off from the others, if any.
    cut: watch::Sender<Option<usize>>,
    /// Every member's process id, by index, as of the last cut.
    pids: Mutex<Vec<Option<u32>>>,
}

impl EtcdCluster {
    /// As [`EtcdCluster::start`], with every member's peer traffic through a relay of
    /// the returned [`PeerPartition`], which can cut a member off.
    ///
    /// # Errors
    ///
    /// As [`EtcdCluster::start`], and when the relays cannot start.
    pub fn start_partitionable(members: usize) -> io::Result<(Self, PeerPartition)> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("etcd-peer-relay")
            .enable_all()
            .build()?;
        let partition = PeerPartition {
            shared: Arc::new(Shared {
                cut: watch::Sender::new(None),
                pids: Mutex::default(),
            }),
            runtime: Some(runtime),
        };
        let cluster = Self::start_with(members, Some(&partition))?;
        Ok((cluster, partition))
    }
}

impl PeerPartition {
    /// Starts a relay for member `target` that forwards to its peer port `upstream`;
    /// returns the relay's port on 127.0.0.1.
    pub(crate) fn relay(&self, target: usize, upstream: u16) -> io::Result<u16> {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let runtime = self
            .runtime
            .as_ref()
            .ok_or_else(|| io::Error::other("the relays are stopped"))?;
        let shared = Arc::clone(&self.shared);
        runtime.spawn(async move {
            let Ok(listener) = TcpListener::from_std(listener) else {
                return;
            };
            let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, upstream));
            while let Ok((dialer, from)) = listener.accept().await {
                let link = Arc::new(Link {
                    target,
                    source_port: from.port(),
                    relay_port: port,
                    dialer: OnceLock::new(),
                });
                tokio::spawn(relay_connection(
                    dialer,
                    upstream,
                    link,
                    Arc::clone(&shared),
                ));
            }
        });
        Ok(port)
    }

    /// Cuts member `member` off from every other member of `cluster`, both ways, until
    /// [`PeerPartition::heal`] (a later cut replaces this one). Its clients still reach
    /// it, and it keeps running.
    pub fn cut_off(&self, cluster: &EtcdCluster, member: usize) {
        let pids = (0..cluster.len()).map(|i| cluster.pid(i)).collect();
        *self
            .shared
            .pids
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = pids;
        self.shared.cut.send_replace(Some(member));
    }

    /// Ends the cut: what was held is delivered in order, and traffic flows again.
    pub fn heal(&self) {
        self.shared.cut.send_replace(None);
    }

    /// The member cut off now, if any.
    pub fn cut(&self) -> Option<usize> {
        *self.shared.cut.borrow()
    }
}

impl Drop for PeerPartition {
    fn drop(&mut self) {
        // Not a blocking shutdown: the partition may be dropped inside a runtime.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// One connection between two members, through the relay of `target`.
#[derive(Debug)]
struct Link {
    target: usize,
    source_port: u16,
    relay_port: u16,
    /// The member that dialed, once known.
    dialer: OnceLock<usize>,
}

impl Link {
    /// Whether the link has `member` at one end.
    fn touches(&self, member: usize, shared: &Shared) -> bool {
        self.target == member || self.dialer(shared) == Some(member)
    }

    fn dialer(&self, shared: &Shared) -> Option<usize> {
        if let Some(&dialer) = self.dialer.get() {
            return Some(dialer);
        }
        let pids = shared
            .pids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let dialer = socket_inode(self.source_port, self.relay_port)
            .and_then(|inode| owner_of(inode, &pids))?;
        Some(*self.dialer.get_or_init(|| dialer))
    }
}

/// Relays one connection from a member to `upstream` (the target's peer port), both
/// ways, each way held while the link is cut.
async fn relay_connection(
    dialer: TcpStream,
    upstream: SocketAddr,
    link: Arc<Link>,
    shared: Arc<Shared>,
) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = dialer.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (from_dialer, to_dialer) = dialer.into_split();
    let (from_server, to_server) = server.into_split();
    tokio::join!(
        pump(from_dialer, to_server, &link, &shared),
        pump(from_server, to_dialer, &link, &shared),
    );
}

/// Copies one way until the end of the stream or an error, holding the bytes (neither
/// reading nor writing) while the link is cut.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    link: &Link,
    shared: &Shared,
) {
    let mut cut = shared.cut.subscribe();
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        if !open(&mut cut, link, shared).await {
            return;
        }
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(read) => read,
        };
        // A cut that began during the read holds what was read.
        if !open(&mut cut, link, shared).await || to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}

/// Waits until the link is not cut; false when the partition is gone.
async fn open(cut: &mut watch::Receiver<Option<usize>>, link: &Link, shared: &Shared) -> bool {
    loop {
        let blocked = cut
            .borrow_and_update()
            .is_some_and(|member| link.touches(member, shared));
        if !blocked {
            return true;
        }
        if cut.changed().await.is_err() {
            return false;
        }
    }
}

/// The inode of the IPv4 socket from 127.0.0.1:`local_port` to `remote_port`
/// (`/proc/net/tcp`: `sl local rem st queues tr retrnsmt uid timeout inode ...`).
fn socket_inode(local_port: u16, remote_port: u16) -> Option<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let port = |address: &str| {
        address
            .rsplit_once(':')
            .and_then(|(_, port)| u16::from_str_radix(port, 16).ok())
    };
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (local, remote, inode) = (fields.get(1)?, fields.get(2)?, fields.get(9)?);
        (port(local) == Some(local_port) && port(remote) == Some(remote_port))
            .then(|| inode.parse().ok())
            .flatten()
    })
}

/// The index of the process among `pids` that has the socket `inode` open.
fn owner_of(inode: u64, pids: &[Option<u32>]) -> Option<usize> {
    let wanted = format!("socket:[{inode}]");
    pids.iter().enumerate().find_map(|(i, pid)| {
        let fds = std::fs::read_dir(format!("/proc/{}/fd", (*pid)?)).ok()?;
        fds.flatten()
            .any(|fd| {
                std::fs::read_link(fd.path()).is_ok_and(|link| link.as_os_str() == wanted.as_str())
            })
            .then_some(i)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's tables tell who dialed: our own connection to a listener of ours is
    /// found in `/proc/net/tcp` and among this process's open files.
    #[test]
    fn the_dialer_of_a_loopback_connection_is_found() -> io::Result<()> {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let port = listener.local_addr()?.port();
        let dialed = std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
        let (_accepted, from) = listener.accept()?;
        assert_eq!(from.port(), dialed.local_addr()?.port());
        let inode = socket_inode(from.port(), port).expect("the dialer's socket is listed");
        let me = Some(std::process::id());
        assert_eq!(owner_of(inode, &[None, me]), Some(1));
        assert_eq!(owner_of(inode, &[None]), None);
        Ok(())
    }
}

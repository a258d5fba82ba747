//! A three-member ZooKeeper ensemble whose members reach each other only through fault
//! proxies, so that a test can cut members off the others for real.
//!
//! Each member's configuration lists its own quorum and election ports, and for every
//! other member the ports of a [`FaultProxy`] of its own (one per ordered pair of
//! members and port): member 1 reaches member 2 through the proxies `1→2`, member 2
//! reaches member 1 through `2→1`. Cutting a member off blackholes every proxy to and
//! from it: bytes are held (as a partition holds them under TCP) until healed.
//!
//! One path stays outside the proxies: when a member with the lower id dials one with
//! a higher id, ZooKeeper's election drops that connection and dials back the address
//! the lower member announced, its own election port. Such a dial-back needs the first
//! connection's bytes to arrive, so none is made across a cut; one made before the cut
//! lives on through it, and members on either side may still exchange votes over it.
//! The data path (a follower's connection to its leader, on the quorum port), which
//! decides whether a member serves, always goes through a proxy.

use std::collections::HashMap;
use std::io;

use crate::proxy::FaultProxy;
use crate::zookeeper::{Limits, Ports, ZooKeeper};

/// The members' patience with each other, in ticks of 200 ms: a cut-off follower stops
/// serving, and a leader without a quorum steps down, after `syncLimit` (1 s).
const LIMITS: Limits = Limits { init: 10, sync: 5 };
/// How many times a start is tried on fresh ports when another process took one.
const ATTEMPTS: usize = 5;

/// The proxies from one member to another.
#[derive(Debug)]
struct Link {
    /// Member indexes (0-based).
    from: usize,
    to: usize,
    quorum: FaultProxy,
    election: FaultProxy,
}

/// A three-member [`ZooKeeper`] ensemble whose members talk to each other through
/// [`FaultProxy`] links (see the module docs), for cutting members off.
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// use ferrisson_testkit::PartitionableEnsemble;
///
/// let mut ensemble = PartitionableEnsemble::start().await?;
/// let follower = (0..3).find(|&i| Some(i) != ensemble.zookeeper().leader()).unwrap();
/// ensemble.cut_off(follower); // the two others still form a quorum
/// ensemble.heal_all();
/// tokio::task::block_in_place(|| ensemble.zookeeper_mut().wait_serving())?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct PartitionableEnsemble {
    links: Vec<Link>,
    zk: ZooKeeper,
}

impl PartitionableEnsemble {
    /// Starts the proxies and three members (`syncLimit` 5 ticks, `initLimit` 10), and
    /// waits until every member serves. Must be called inside a multi-threaded tokio
    /// runtime, which runs the proxies (the wait blocks one of its threads).
    ///
    /// # Errors
    ///
    /// As [`ZooKeeper::ensemble`].
    pub async fn start() -> io::Result<Self> {
        let mut last_error = None;
        for _ in 0..ATTEMPTS {
            let ports: Vec<Ports> = (0..3).map(|_| Ports::free()).collect::<io::Result<_>>()?;
            let mut links = Vec::new();
            for from in 0..3 {
                for to in (0..3).filter(|&to| to != from) {
                    links.push(Link {
                        from,
                        to,
                        quorum: FaultProxy::start(ports[to].quorum).await?,
                        election: FaultProxy::start(ports[to].election).await?,
                    });
                }
            }
            let routes: HashMap<(usize, usize), (u16, u16)> = links
                .iter()
                .map(|l| ((l.from + 1, l.to + 1), (l.quorum.port(), l.election.port())))
                .collect();
            let started = tokio::task::block_in_place(|| {
                ZooKeeper::start_routed(ports, LIMITS, &|from, to| routes.get(&(from, to)).copied())
            });
            match started {
                Ok(zk) => return Ok(Self { links, zk }),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("no free ports")))
    }

    /// The ensemble: its URL, leader, members.
    pub fn zookeeper(&self) -> &ZooKeeper {
        &self.zk
    }

    /// The ensemble, to kill, pause or restart a member.
    pub fn zookeeper_mut(&mut self) -> &mut ZooKeeper {
        &mut self.zk
    }

    /// Cuts member `index` (0-based) off the others: every link to and from it holds
    /// its bytes until healed. Its clients still reach it.
    pub fn cut_off(&self, index: usize) {
        self.set_cut(index, true);
    }

    /// Heals every link to and from member `index` (a link to another member that is
    /// cut off too included): held bytes are delivered, in order.
    pub fn heal(&self, index: usize) {
        self.set_cut(index, false);
    }

    /// Heals every cut.
    pub fn heal_all(&self) {
        for link in &self.links {
            link.quorum.control().set_blackhole(false);
            link.election.control().set_blackhole(false);
        }
    }

    /// Whether a link to or from member `index` is cut now.
    pub fn is_cut_off(&self, index: usize) -> bool {
        self.links
            .iter()
            .filter(|l| l.from == index || l.to == index)
            .any(|l| l.quorum.control().faults().blackhole)
    }

    fn set_cut(&self, index: usize, on: bool) {
        for link in self
            .links
            .iter()
            .filter(|l| l.from == index || l.to == index)
        {
            link.quorum.control().set_blackhole(on);
            link.election.control().set_blackhole(on);
        }
    }
}

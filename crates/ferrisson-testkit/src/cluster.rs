//! A Redis Cluster owned by a test: masters and replicas on free ports, joined by
//! `redis-cli --cluster create`, killed and removed on drop.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::cluster_view::ClusterView;
use crate::resp::{info_field, text_of};
use crate::secured::{AclUser, Secured};
use crate::server::{Program, Protection, free_port};
use crate::wait::poll_until;
use crate::{CLUSTER_SLOTS, ClientAuth, RedisServer, TestCertificates, key_slot};

/// How long `redis-cli --cluster create` and the cluster's first agreement may take.
const FORMATION_DEADLINE: Duration = Duration::from_secs(60);
/// How long a failover, a restart or a slot move may take to be agreed on by every node.
const SETTLE_DEADLINE: Duration = Duration::from_secs(30);
/// How many cluster bus ports to try when another process takes ours before the node binds.
const BUS_PORT_ATTEMPTS: usize = 5;

/// The `redis-cli` binary the kit runs: `$FERRISSON_REDIS_CLI`, else the `redis-cli` next
/// to `$FERRISSON_REDIS_SERVER` when there is one, else `redis-cli` from `PATH`.
pub fn redis_cli_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("FERRISSON_REDIS_CLI") {
        return PathBuf::from(path);
    }
    std::env::var_os("FERRISSON_REDIS_SERVER")
        .map(|server| Path::new(&server).with_file_name("redis-cli"))
        .filter(|sibling| sibling.is_file())
        .unwrap_or_else(|| PathBuf::from("redis-cli"))
}

/// How a replica takes over from its master in [`RedisCluster::failover_with`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FailoverMode {
    /// `CLUSTER FAILOVER`: the master stops taking writes until the replica has caught up,
    /// then the replica is elected; no acknowledged write is lost. The master must answer.
    #[default]
    Coordinated,
    /// `CLUSTER FAILOVER FORCE`: no hand-shake with the master (it may be down or
    /// paused); the other masters still elect the replica.
    Force,
    /// `CLUSTER FAILOVER TAKEOVER`: no hand-shake and no election; the replica takes a
    /// new epoch on its own.
    Takeover,
}

/// Settings of a [`RedisCluster`] before it starts.
///
/// ```no_run
/// use std::time::Duration;
/// use ferrisson_testkit::RedisCluster;
///
/// let cluster = RedisCluster::builder()
///     .masters(3)
///     .replicas_per_master(2)
///     .node_timeout(Duration::from_secs(1))
///     .start()?;
/// assert_eq!(cluster.nodes().len(), 9);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until start()"]
pub struct ClusterBuilder {
    masters: usize,
    replicas_per_master: usize,
    node_timeout: Duration,
    args: Vec<String>,
    secured: Secured,
    program: Program,
}

impl Default for ClusterBuilder {
    fn default() -> Self {
        Self {
            masters: 3,
            replicas_per_master: 1,
            node_timeout: Duration::from_secs(2),
            args: Vec::new(),
            secured: Secured::default(),
            program: Program::Redis,
        }
    }
}

impl ClusterBuilder {
    /// Runs every node on Valkey ([`valkey_server_binary`](crate::valkey_server_binary))
    /// instead of `redis-server` (with `.args(&["--appendonly", "yes"])`: a cluster whose
    /// nodes acknowledge `WAITAOF`). The cluster is still created with `redis-cli`.
    pub fn valkey(mut self) -> Self {
        self.program = Program::Valkey;
        self
    }

    /// How many masters share the 16384 slots (default 3, the least `redis-cli` accepts).
    pub fn masters(mut self, masters: usize) -> Self {
        self.masters = masters;
        self
    }

    /// How many replicas each master gets (default 1).
    pub fn replicas_per_master(mut self, replicas: usize) -> Self {
        self.replicas_per_master = replicas;
        self
    }

    /// `cluster-node-timeout` (default 2 s): how long a node may be silent before the
    /// others fail it and one of its replicas takes over.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Extra `redis-server` arguments for every node (e.g. `["--maxmemory", "10mb"]`).
    pub fn args(mut self, args: &[&str]) -> Self {
        self.args = args.iter().map(|arg| (*arg).to_owned()).collect();
        self
    }

    /// Protects every node with an ACL user `name` (every key, channel and command) and
    /// switches the default user off; replicas log in to their masters as that user, and
    /// so does the kit. [`RedisCluster::url`] then carries `name:password@`.
    pub fn acl_user(mut self, name: &str, password: &str) -> Self {
        self.secured.user = Some(AclUser::new(name, password));
        self
    }

    /// Makes fresh [`TestCertificates`] and runs every node with TLS only: its TCP port is
    /// a TLS port (`port 0`, `tls-port`), replication and the cluster bus use TLS, and
    /// with [`ClientAuth::Required`] clients must present a certificate signed by the test
    /// CA. [`RedisCluster::url`] is then a `rediss+cluster://` URL; the kit itself reaches
    /// each node on a Unix socket in its directory.
    pub fn tls(mut self, client_auth: ClientAuth) -> Self {
        self.secured.tls = Some(client_auth);
        self
    }

    /// Starts the nodes, joins them with `redis-cli --cluster create` and waits until
    /// every node says `cluster_state:ok`, agrees on the slot map and every replica's
    /// link to its master is up.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for fewer than 3 masters; otherwise when a node
    /// does not start, `redis-cli` fails (or is missing), or the cluster does not settle
    /// within 60 seconds.
    pub fn start(self) -> io::Result<RedisCluster> {
        // Fails here, with its own message, rather than as a failed spawn per port.
        self.program.binary()?;
        if self.masters < 3 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a cluster needs at least 3 masters, not {}", self.masters),
            ));
        }
        let millis = self.node_timeout.as_millis().max(1).to_string();
        let mut args: Vec<&str> = vec![
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            &millis,
            // A replica that lost its master for long still takes over: tests pause and
            // kill nodes for longer than production's data-age limit allows.
            "--cluster-replica-validity-factor",
            "0",
            // A master waits this long for more replicas before a diskless full sync;
            // 5 s by default, which would delay every replica's first link.
            "--repl-diskless-sync-delay",
            "0",
        ];
        let certificates = self.secured.certificates()?;
        let protection_args = [
            self.secured.tls_args(certificates.as_ref(), true)?,
            self.secured.acl_args(),
        ]
        .concat();
        args.extend(protection_args.iter().map(String::as_str));
        args.extend(self.args.iter().map(String::as_str));
        let protection = self.secured.protection(self.secured.user.as_ref());
        let count = self.masters * (1 + self.replicas_per_master);
        let nodes = (0..count)
            .map(|_| start_node(self.program, &args, &protection))
            .collect::<io::Result<Vec<_>>>()?;
        let ids = nodes
            .iter()
            .map(|node| {
                let reply = node.query(&["CLUSTER", "MYID"])?;
                reply
                    .text()
                    .map(str::to_owned)
                    .ok_or_else(|| io::Error::other(format!("CLUSTER MYID answered {reply:?}")))
            })
            .collect::<io::Result<Vec<_>>>()?;
        let cli_args = self.secured.redis_cli_args(certificates.as_ref())?;
        let cluster = RedisCluster {
            nodes,
            ids,
            user: self.secured.user,
            certificates,
        };
        let replicas = self.replicas_per_master.to_string();
        let mut create: Vec<&str> = cli_args.iter().map(String::as_str).collect();
        create.extend(["--cluster", "create"]);
        let seeds = cluster.seeds();
        create.extend(seeds.iter().map(String::as_str));
        create.extend(["--cluster-replicas", &replicas, "--cluster-yes"]);
        let log = cluster.nodes[0].dir().join("cluster-create.log");
        run_to_end(&redis_cli_binary(), &create, &log, FORMATION_DEADLINE)?;
        poll_until("the new cluster to settle", FORMATION_DEADLINE, || {
            cluster.check_ok()
        })?;
        Ok(cluster)
    }
}

/// A Redis Cluster of real `redis-server` processes on 127.0.0.1, each in its own
/// directory; all killed and removed on drop.
///
/// Nodes are numbered by start order; the numbers stay with the processes across
/// failovers and restarts (a restarted node keeps its cluster identity). Every waiting
/// method polls the nodes' own state (`CLUSTER INFO`, `CLUSTER NODES`, `INFO
/// replication`) until it holds or a deadline passes. Running and unpaused nodes are
/// asked; killed and paused ones are left out.
///
/// The methods block: in an async test call them from `spawn_blocking`, or from a
/// multi-threaded runtime through `block_in_place`.
///
/// ```no_run
/// use ferrisson_testkit::{RedisCluster, key_slot};
///
/// let mut cluster = RedisCluster::start()?;
/// let seeds = cluster.node_urls(); // for redis::cluster::ClusterClient::new
/// let master = cluster.master_of_key("{order:42}")?;
/// let replica = cluster.replicas_of(master)?[0];
/// cluster.failover(replica)?; // returns once every node agrees
/// assert_eq!(cluster.master_of_key("{order:42}")?, replica);
///
/// cluster.nodes_mut()[replica].kill()?;
/// let next = cluster.wait_for_new_master(key_slot("{order:42}"), replica)?;
/// assert_eq!(next, master);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    // Dropped first: the nodes go before the certificate files they read.
    nodes: Vec<RedisServer>,
    /// Each node's cluster id, by node number.
    ids: Vec<String>,
    /// The nodes' ACL user, when the cluster has one.
    user: Option<AclUser>,
    /// The certificates of a TLS cluster.
    certificates: Option<TestCertificates>,
}

impl RedisCluster {
    /// Starts 3 masters with one replica each (see [`ClusterBuilder::start`]).
    ///
    /// # Errors
    ///
    /// As [`ClusterBuilder::start`].
    pub fn start() -> io::Result<Self> {
        Self::builder().start()
    }

    /// Settings for a cluster of another shape or timing.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }

    /// The nodes, by number.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The nodes, to kill, restart, pause or resume one (`nodes_mut()[3].kill()`).
    /// [`RedisCluster::restart_node`] restarts and waits until the node has rejoined.
    pub fn nodes_mut(&mut self) -> &mut [RedisServer] {
        &mut self.nodes
    }

    /// Every node's address as `127.0.0.1:PORT`.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port()))
            .collect()
    }

    /// Every node's `redis://127.0.0.1:PORT` (see [`RedisServer::url`] for a protected
    /// cluster's).
    pub fn node_urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// `redis+cluster://127.0.0.1:PORT,127.0.0.1:PORT,...` with every node; for a TLS
    /// cluster `rediss+cluster://`, and with the ACL user's `name:password@` when the
    /// cluster has one.
    pub fn url(&self) -> String {
        let scheme = if self.certificates.is_some() {
            "rediss+cluster"
        } else {
            "redis+cluster"
        };
        let userinfo = self
            .user
            .as_ref()
            .map(AclUser::userinfo)
            .unwrap_or_default();
        format!("{scheme}://{userinfo}{}", self.seeds().join(","))
    }

    /// The nodes' ACL user, when the cluster has one.
    pub(crate) fn acl_user(&self) -> Option<&AclUser> {
        self.user.as_ref()
    }

    /// The certificates of a cluster started with [`ClusterBuilder::tls`].
    pub fn certificates(&self) -> Option<&TestCertificates> {
        self.certificates.as_ref()
    }

    /// The node's cluster id (`CLUSTER MYID`).
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] when there is no node `node`.
    pub fn node_id(&self, node: usize) -> io::Result<&str> {
        self.ids
            .get(node)
            .map(String::as_str)
            .ok_or_else(|| no_such_node(node))
    }

    /// The number of the master serving `slot`, as the first running node sees it.
    ///
    /// # Errors
    ///
    /// When no node answers or the slot is unassigned in that view.
    pub fn master_of_slot(&self, slot: u16) -> io::Result<usize> {
        let view = self.any_view()?;
        let owner = view
            .owner(slot)
            .ok_or_else(|| io::Error::other(format!("slot {slot} has no master")))?;
        self.number_of(owner)
    }

    /// The number of the master serving `key`'s slot ([`key_slot`]).
    ///
    /// # Errors
    ///
    /// As [`RedisCluster::master_of_slot`].
    pub fn master_of_key(&self, key: impl AsRef<[u8]>) -> io::Result<usize> {
        self.master_of_slot(key_slot(key))
    }

    /// The masters serving at least one slot, as the first running node sees it.
    ///
    /// # Errors
    ///
    /// When no node answers.
    pub fn masters(&self) -> io::Result<Vec<usize>> {
        let view = self.any_view()?;
        let mut masters = Vec::new();
        for node in &view.nodes {
            if node.master && !node.slots.is_empty() {
                masters.push(self.number_of(&node.id)?);
            }
        }
        masters.sort_unstable();
        Ok(masters)
    }

    /// The replicas of `master` not marked failing, as the first running node sees it.
    ///
    /// # Errors
    ///
    /// When no node answers; [`io::ErrorKind::InvalidInput`] when there is no node `master`.
    pub fn replicas_of(&self, master: usize) -> io::Result<Vec<usize>> {
        let master_id = self.node_id(master)?;
        let view = self.any_view()?;
        let mut replicas = Vec::new();
        for node in &view.nodes {
            if node.replica_of.as_deref() == Some(master_id) && !node.failing {
                replicas.push(self.number_of(&node.id)?);
            }
        }
        replicas.sort_unstable();
        Ok(replicas)
    }

    /// Waits until the cluster is whole again: every running node says
    /// `cluster_state:ok` with all slots assigned, all agree on the slot map and the
    /// roles of the running nodes, none sees a running node as failing, every slot's
    /// master runs and every running replica's link to its master is up.
    ///
    /// # Errors
    ///
    /// When that does not happen within 30 seconds; the error says what was still wrong.
    pub fn wait_until_ok(&self) -> io::Result<()> {
        self.settle("the cluster to be ok", |_| Ok(()))
    }

    /// Fails `replica`'s master over to it with `CLUSTER FAILOVER` and returns when every
    /// running node agrees that `replica` serves the slots its master served.
    ///
    /// # Errors
    ///
    /// When `replica` is not a replica, the command is refused, or the cluster does not
    /// agree on the new master within 30 seconds.
    pub fn failover(&self, replica: usize) -> io::Result<()> {
        self.failover_with(replica, FailoverMode::Coordinated)
    }

    /// [`RedisCluster::failover`] in another [`FailoverMode`] (e.g. `Force` while the
    /// master is paused).
    ///
    /// # Errors
    ///
    /// As [`RedisCluster::failover`].
    pub fn failover_with(&self, replica: usize, mode: FailoverMode) -> io::Result<()> {
        let node = self.running(replica)?;
        let view = view_of(node).map_err(io::Error::other)?;
        let master = view
            .myself()
            .and_then(|me| me.replica_of.as_deref())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("node {replica} is not a replica"),
                )
            })?;
        let slots = view
            .node(master)
            .map(|entry| entry.slots.clone())
            .unwrap_or_default();
        let Some(slot) = slots.first().map(|range| *range.start()) else {
            return Err(io::Error::other(format!(
                "the master of node {replica} serves no slot"
            )));
        };
        let mut command = vec!["CLUSTER", "FAILOVER"];
        match mode {
            FailoverMode::Coordinated => {}
            FailoverMode::Force => command.push("FORCE"),
            FailoverMode::Takeover => command.push("TAKEOVER"),
        }
        node.query(&command)?.ok_or_error("CLUSTER FAILOVER")?;
        let replica_id = &self.ids[replica];
        self.settle(&format!("node {replica} to take over"), |view| {
            match view.owner(slot) {
                Some(owner) if owner == replica_id => Ok(()),
                owner => Err(format!("slot {slot} is still served by {owner:?}")),
            }
        })
    }

    /// Waits until the cluster is ok ([`RedisCluster::wait_until_ok`]) with `slot`
    /// served by a master other than `old` (after `old` was killed or paused), and
    /// returns that master's number.
    ///
    /// # Errors
    ///
    /// When that does not happen within 30 seconds.
    pub fn wait_for_new_master(&self, slot: u16, old: usize) -> io::Result<usize> {
        let old_id = self.node_id(old)?;
        self.settle(
            &format!("slot {slot} to leave node {old}"),
            |view| match view.owner(slot) {
                Some(owner) if owner != old_id => self.number_of(owner).map_err(|e| e.to_string()),
                owner => Err(format!("slot {slot} is served by {owner:?}")),
            },
        )
    }

    /// Restarts node `node` (killing it first if it runs) and waits until it has rejoined
    /// and the cluster is ok ([`RedisCluster::wait_until_ok`]). It keeps its identity;
    /// its data is gone (no persistence), and a master that was replaced comes back as a
    /// replica of its successor.
    ///
    /// # Errors
    ///
    /// When the node does not start or the cluster does not settle within 30 seconds.
    pub fn restart_node(&mut self, node: usize) -> io::Result<()> {
        self.nodes
            .get_mut(node)
            .ok_or_else(|| no_such_node(node))?
            .restart()?;
        self.wait_until_ok()
    }

    /// Waits until the cluster is ok and `condition` holds on the agreed view.
    pub(crate) fn settle<T>(
        &self,
        what: &str,
        mut condition: impl FnMut(&ClusterView) -> Result<T, String>,
    ) -> io::Result<T> {
        poll_until(what, SETTLE_DEADLINE, || condition(&self.check_ok()?))
    }

    /// The agreed view when the cluster is ok, or what is still wrong.
    fn check_ok(&self) -> Result<ClusterView, String> {
        let reachable: Vec<usize> = self.reachable().collect();
        let mut agreed: Option<(usize, ClusterView)> = None;
        for &number in &reachable {
            let node = &self.nodes[number];
            let info = text_of(node, &["CLUSTER", "INFO"])?;
            let state = info_field(&info, "cluster_state").unwrap_or("?");
            let assigned = info_field(&info, "cluster_slots_assigned").unwrap_or("?");
            if state != "ok" || assigned != CLUSTER_SLOTS.to_string() {
                return Err(format!(
                    "node {number} says cluster_state:{state}, {assigned} slots assigned"
                ));
            }
            let view = view_of(node)?;
            if view.nodes.len() != self.nodes.len() || view.nodes.iter().any(|n| n.joining) {
                return Err(format!("node {number} does not know every node yet"));
            }
            for &other in &reachable {
                if view
                    .node(&self.ids[other])
                    .is_none_or(|entry| entry.failing)
                {
                    return Err(format!("node {number} sees node {other} as failing"));
                }
            }
            if view.myself().is_some_and(|me| !me.master) {
                let replication = text_of(node, &["INFO", "replication"])?;
                if info_field(&replication, "master_link_status") != Some("up") {
                    return Err(format!("replica {number} has no link to its master"));
                }
            }
            match &agreed {
                None => agreed = Some((number, view)),
                Some((first, first_view)) => {
                    if first_view.slot_map() != view.slot_map() {
                        return Err(format!("nodes {first} and {number} see other slot maps"));
                    }
                    if self.roles(first_view, &reachable) != self.roles(&view, &reachable) {
                        return Err(format!("nodes {first} and {number} see other roles"));
                    }
                }
            }
        }
        let (_, view) = agreed.ok_or("no node is running")?;
        for (start, end, owner) in view.slot_map() {
            let owner = self.number_of(owner).map_err(|e| e.to_string())?;
            if !reachable.contains(&owner) {
                return Err(format!(
                    "slots {start}-{end} are on node {owner}, which is down"
                ));
            }
        }
        Ok(view)
    }

    /// Each running node's role in `view`: master, or the master it replicates.
    fn roles<'v>(&self, view: &'v ClusterView, reachable: &[usize]) -> Vec<Option<&'v str>> {
        reachable
            .iter()
            .map(|&number| {
                view.node(&self.ids[number])
                    .and_then(|entry| entry.replica_of.as_deref())
            })
            .collect()
    }

    /// The view of the first running node that answers.
    pub(crate) fn any_view(&self) -> io::Result<ClusterView> {
        let mut last = String::from("no node is running");
        for number in self.reachable() {
            match view_of(&self.nodes[number]) {
                Ok(view) => return Ok(view),
                Err(reason) => last = reason,
            }
        }
        Err(io::Error::other(last))
    }

    /// The nodes that run and are not paused.
    pub(crate) fn reachable(&self) -> impl Iterator<Item = usize> + '_ {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, node)| node.is_running() && !node.is_paused())
            .map(|(number, _)| number)
    }

    /// Node `node`, when it runs and is not paused.
    pub(crate) fn running(&self, node: usize) -> io::Result<&RedisServer> {
        let server = self.nodes.get(node).ok_or_else(|| no_such_node(node))?;
        if server.is_running() && !server.is_paused() {
            Ok(server)
        } else {
            Err(io::Error::other(format!("node {node} is down or paused")))
        }
    }

    /// The number of the node with cluster id `id`.
    pub(crate) fn number_of(&self, id: &str) -> io::Result<usize> {
        self.ids
            .iter()
            .position(|known| known == id)
            .ok_or_else(|| io::Error::other(format!("node id {id} is not one of this cluster")))
    }
}

fn no_such_node(node: usize) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("no node {node}"))
}

/// Starts one cluster node, choosing its bus port (`cluster-port`) afresh when another
/// process took the last one: the default (port + 10000) may lie past 65535.
fn start_node(program: Program, args: &[&str], protection: &Protection) -> io::Result<RedisServer> {
    let mut last_error = None;
    for _ in 0..BUS_PORT_ATTEMPTS {
        let bus_port = free_port()?.to_string();
        let mut node_args = vec!["--cluster-port", &bus_port];
        node_args.extend_from_slice(args);
        match RedisServer::start_protected(program, &node_args, protection) {
            Ok(node) => return Ok(node),
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.unwrap_or_else(|| io::Error::other("no free cluster bus port")))
}

fn view_of(node: &RedisServer) -> Result<ClusterView, String> {
    ClusterView::parse(&text_of(node, &["CLUSTER", "NODES"])?)
}

/// Runs `program` with its output in `log` and waits for it, killing it after `limit`.
fn run_to_end(program: &Path, args: &[&str], log: &Path, limit: Duration) -> io::Result<()> {
    let output = File::create(log)?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(output.try_clone()?)
        .stderr(output)
        .spawn()
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot run {} ({e}); install redis-tools or set FERRISSON_REDIS_CLI",
                    program.display()
                ),
            )
        })?;
    let finished = poll_until(&program.display().to_string(), limit, || {
        match child.try_wait() {
            Ok(Some(status)) => Ok(Ok(status)),
            Ok(None) => Err("still running".to_owned()),
            Err(e) => Ok(Err(e)),
        }
    });
    let status = match finished {
        Ok(status) => status?,
        Err(timeout) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(timeout);
        }
    };
    if status.success() {
        return Ok(());
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(5).collect();
    // The password after `--pass` stays out of the message.
    let shown: Vec<&str> = args
        .iter()
        .enumerate()
        .map(|(i, arg)| {
            if i > 0 && args[i - 1] == "--pass" {
                "***"
            } else {
                arg
            }
        })
        .collect();
    Err(io::Error::other(format!(
        "{} {} exited with {status}: {}",
        program.display(),
        shown.join(" "),
        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
    )))
}

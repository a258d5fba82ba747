//! A Redis Sentinel group owned by a test: a master, its replicas and the sentinels
//! watching them, on free ports, killed and removed on drop.

use std::fmt::Write as _;
use std::io;
use std::time::Duration;

use crate::resp::{info_field, text_of};
use crate::secured::{AclUser, Secured};
use crate::server::Program;
use crate::wait::poll_until;
use crate::{ClientAuth, RedisServer, Reply, TestCertificates};

/// How long the group may take to agree, at start and after a failover or a restart.
const SETTLE_DEADLINE: Duration = Duration::from_secs(30);

/// Settings of a [`SentinelGroup`] before it starts.
///
/// ```no_run
/// use std::time::Duration;
/// use ferrisson_testkit::SentinelGroup;
///
/// let group = SentinelGroup::builder()
///     .master_name("orders")
///     .replicas(1)
///     .down_after(Duration::from_millis(500))
///     .start()?;
/// assert_eq!(group.url(), format!("redis+sentinel://{}/orders", group.sentinel_addrs().join(",")));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until start()"]
pub struct SentinelBuilder {
    master_name: String,
    replicas: usize,
    sentinels: usize,
    quorum: Option<usize>,
    down_after: Duration,
    failover_timeout: Duration,
    args: Vec<String>,
    secured: Secured,
    sentinel_user: Option<AclUser>,
    program: Program,
}

impl Default for SentinelBuilder {
    fn default() -> Self {
        Self {
            master_name: "ferrisson".to_owned(),
            replicas: 2,
            sentinels: 3,
            quorum: None,
            down_after: Duration::from_secs(2),
            failover_timeout: Duration::from_secs(5),
            args: Vec::new(),
            secured: Secured::default(),
            sentinel_user: None,
            program: Program::Redis,
        }
    }
}

impl SentinelBuilder {
    /// The name the sentinels monitor the master under (default `ferrisson`): letters,
    /// digits, `-`, `_` and `.`.
    pub fn master_name(mut self, name: &str) -> Self {
        name.clone_into(&mut self.master_name);
        self
    }

    /// How many replicas the master gets (default 2).
    pub fn replicas(mut self, replicas: usize) -> Self {
        self.replicas = replicas;
        self
    }

    /// How many sentinels watch (default 3).
    pub fn sentinels(mut self, sentinels: usize) -> Self {
        self.sentinels = sentinels;
        self
    }

    /// How many sentinels must agree the master is down (default: a majority).
    pub fn quorum(mut self, quorum: usize) -> Self {
        self.quorum = Some(quorum);
        self
    }

    /// `down-after-milliseconds` (default 2 s): how long the master may be silent before
    /// a sentinel calls it down.
    pub fn down_after(mut self, after: Duration) -> Self {
        self.down_after = after;
        self
    }

    /// `failover-timeout` (default 5 s): a failover that stalls is retried after twice this.
    pub fn failover_timeout(mut self, timeout: Duration) -> Self {
        self.failover_timeout = timeout;
        self
    }

    /// Runs every server and sentinel on Valkey
    /// ([`valkey_server_binary`](crate::valkey_server_binary)) instead of `redis-server`
    /// (with `.args(&["--appendonly", "yes"])`: a group whose servers acknowledge
    /// `WAITAOF`).
    pub fn valkey(mut self) -> Self {
        self.program = Program::Valkey;
        self
    }

    /// Extra `redis-server` arguments for the master and the replicas (not the sentinels).
    pub fn args(mut self, args: &[&str]) -> Self {
        self.args = args.iter().map(|arg| (*arg).to_owned()).collect();
        self
    }

    /// Protects the master and the replicas with an ACL user `name` (every key, channel
    /// and command) and switches their default user off; replicas log in to the master as
    /// that user, and so do the sentinels and the kit. [`SentinelGroup::url`] then carries
    /// `name:password@`.
    pub fn acl_user(mut self, name: &str, password: &str) -> Self {
        self.secured.user = Some(AclUser::new(name, password));
        self
    }

    /// Protects the sentinels themselves with an ACL user `name` and switches their
    /// default user off; sentinels log in to each other as that user, and so does the kit.
    /// A client then needs these credentials to ask a sentinel for the master.
    pub fn sentinel_acl_user(mut self, name: &str, password: &str) -> Self {
        self.sentinel_user = Some(AclUser::new(name, password));
        self
    }

    /// Makes fresh [`TestCertificates`] and runs every server and sentinel with TLS only:
    /// its TCP port is a TLS port (`port 0`, `tls-port`), replication and the sentinels'
    /// links use TLS, and with [`ClientAuth::Required`] clients must present a certificate
    /// signed by the test CA. [`SentinelGroup::url`] is then a `rediss+sentinel://` URL;
    /// the kit itself reaches each process on a Unix socket in its directory.
    pub fn tls(mut self, client_auth: ClientAuth) -> Self {
        self.secured.tls = Some(client_auth);
        self
    }

    /// Starts the master, the replicas (`--replicaof` the master) and the sentinels
    /// (`redis-server CONFIG --sentinel`), then waits until the group is settled (see
    /// [`SentinelGroup::wait_until_ok`]).
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for a bad master name, no sentinel, or a quorum of
    /// 0 or above the number of sentinels; otherwise when a process does not start or
    /// the group does not settle within 30 seconds.
    pub fn start(self) -> io::Result<SentinelGroup> {
        let quorum = self.quorum.unwrap_or(self.sentinels / 2 + 1);
        let name_ok = !self.master_name.is_empty()
            && self
                .master_name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !name_ok || self.sentinels == 0 || quorum == 0 || quorum > self.sentinels {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "master name {:?}, {} sentinels, quorum {quorum}: need a name of \
                     letters, digits, '-', '_' or '.', a sentinel, 1 <= quorum <= sentinels",
                    self.master_name, self.sentinels
                ),
            ));
        }
        // A master waits for more replicas before a diskless full sync: 5 s by default,
        // which would delay every replica's first link.
        let certificates = self.secured.certificates()?;
        let tls_args = self.secured.tls_args(certificates.as_ref(), false)?;
        let protection_args = [tls_args.clone(), self.secured.acl_args()].concat();
        let mut args = vec!["--repl-diskless-sync-delay", "0"];
        args.extend(protection_args.iter().map(String::as_str));
        args.extend(self.args.iter().map(String::as_str));
        let protection = self.secured.protection(self.secured.user.as_ref());
        // Fails here, with its own message, rather than as a failed spawn per port.
        self.program.binary()?;
        let master = RedisServer::start_protected(self.program, &args, &protection)?;
        let master_port = master.port().to_string();
        let mut replica_args = vec!["--replicaof", "127.0.0.1", &master_port];
        replica_args.extend_from_slice(&args);
        let mut servers = vec![master];
        for _ in 0..self.replicas {
            servers.push(RedisServer::start_protected(
                self.program,
                &replica_args,
                &protection,
            )?);
        }
        let name = &self.master_name;
        let mut config = format!(
            "sentinel monitor {name} 127.0.0.1 {master_port} {quorum}\n\
             sentinel down-after-milliseconds {name} {}\n\
             sentinel failover-timeout {name} {}\n",
            self.down_after.as_millis().max(1),
            self.failover_timeout.as_millis().max(1),
        );
        if let Some(user) = &self.secured.user {
            let _ = write!(
                config,
                "sentinel auth-user {name} {}\nsentinel auth-pass {name} {}\n",
                user.name, user.password
            );
        }
        if let Some(user) = &self.sentinel_user {
            config.push_str(&Secured::sentinel_user_config(user));
            let _ = write!(
                config,
                "sentinel sentinel-user {}\nsentinel sentinel-pass {}\n",
                user.name, user.password
            );
        }
        let mut sentinel_args = vec!["--sentinel"];
        sentinel_args.extend(tls_args.iter().map(String::as_str));
        let sentinel_protection = self.secured.protection(self.sentinel_user.as_ref());
        let sentinels = (0..self.sentinels)
            .map(|_| {
                let sentinel = RedisServer::start_with_config(
                    self.program,
                    &config,
                    &sentinel_args,
                    &sentinel_protection,
                )?;
                speed_up(&sentinel)?;
                Ok(sentinel)
            })
            .collect::<io::Result<_>>()?;
        let group = SentinelGroup {
            name: self.master_name,
            servers,
            sentinels,
            user: self.secured.user,
            certificates,
        };
        group.wait_until_ok()?;
        Ok(group)
    }
}

/// A master, its replicas and the sentinels monitoring them, all real `redis-server`
/// processes on 127.0.0.1 in their own directories; killed and removed on drop.
///
/// Servers (the master and replicas) and sentinels are numbered by start order: server
/// 0 is the first master. The numbers stay with the processes across failovers and
/// restarts. Every waiting method polls the processes' own state (`SENTINEL ...`,
/// `INFO replication`) until it holds or a deadline passes; killed and paused processes
/// are left out.
///
/// The methods block: in an async test call them from `spawn_blocking`, or from a
/// multi-threaded runtime through `block_in_place`.
///
/// ```no_run
/// use ferrisson_testkit::SentinelGroup;
///
/// let mut group = SentinelGroup::start()?;
/// let sentinels = group.sentinel_urls(); // for redis::sentinel::SentinelClient::build
/// assert_eq!(group.master()?, 0);
/// let promoted = group.failover()?; // SENTINEL FAILOVER; returns once all agree
///
/// group.servers_mut()[promoted].kill()?;
/// let next = group.wait_for_new_master(promoted)?;
/// assert_ne!(next, promoted);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct SentinelGroup {
    name: String,
    // Dropped before the certificates: the processes go before the files they read.
    servers: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
    /// The data servers' ACL user, when the group has one.
    user: Option<AclUser>,
    /// The certificates of a TLS group.
    certificates: Option<TestCertificates>,
}

impl SentinelGroup {
    /// Starts a master with 2 replicas and 3 sentinels (see [`SentinelBuilder::start`]).
    ///
    /// # Errors
    ///
    /// As [`SentinelBuilder::start`].
    pub fn start() -> io::Result<Self> {
        Self::builder().start()
    }

    /// Settings for a group of another shape or timing.
    pub fn builder() -> SentinelBuilder {
        SentinelBuilder::default()
    }

    /// The name the sentinels know the master by.
    pub fn master_name(&self) -> &str {
        &self.name
    }

    /// The master and the replicas, by number (server 0 was the first master).
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// The servers, to kill, restart, pause or resume one. [`SentinelGroup::restart_server`]
    /// restarts and waits until the group has taken the server back.
    pub fn servers_mut(&mut self) -> &mut [RedisServer] {
        &mut self.servers
    }

    /// The sentinels, by number.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// The sentinels, to kill, pause or resume one. [`SentinelGroup::restart_sentinel`]
    /// restarts one with the group's timing and waits until the group has taken it back.
    pub fn sentinels_mut(&mut self) -> &mut [RedisServer] {
        &mut self.sentinels
    }

    /// Every sentinel's address as `127.0.0.1:PORT`.
    pub fn sentinel_addrs(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|sentinel| format!("127.0.0.1:{}", sentinel.port()))
            .collect()
    }

    /// Every sentinel's `redis://127.0.0.1:PORT` (see [`RedisServer::url`] for a
    /// protected group's).
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// `redis+sentinel://127.0.0.1:PORT,127.0.0.1:PORT,.../MASTER_NAME`; for a TLS group
    /// `rediss+sentinel://`, and with the data servers' `name:password@` when they have
    /// an ACL user (the sentinels' own user is not in the URL).
    pub fn url(&self) -> String {
        let scheme = if self.certificates.is_some() {
            "rediss+sentinel"
        } else {
            "redis+sentinel"
        };
        let userinfo = self
            .user
            .as_ref()
            .map(AclUser::userinfo)
            .unwrap_or_default();
        format!(
            "{scheme}://{userinfo}{}/{}",
            self.sentinel_addrs().join(","),
            self.name
        )
    }

    /// The certificates of a group started with [`SentinelBuilder::tls`].
    pub fn certificates(&self) -> Option<&TestCertificates> {
        self.certificates.as_ref()
    }

    /// The number of the server the first running sentinel names as master.
    ///
    /// # Errors
    ///
    /// When no sentinel answers or the one asked names no server of the group.
    pub fn master(&self) -> io::Result<usize> {
        let mut last = String::from("no sentinel is running");
        for sentinel in self.sentinels.iter().filter(|s| answers(s)) {
            match self.master_by(sentinel) {
                Ok(master) => return Ok(master),
                Err(reason) => last = reason,
            }
        }
        Err(io::Error::other(last))
    }

    /// Waits until the group is settled: every running sentinel names the same master
    /// and sees it as up with no failover in progress, sees every running replica and
    /// every other running sentinel as up; the master says `role:master` and every
    /// running replica replicates it with its link up.
    ///
    /// # Errors
    ///
    /// When that does not happen within 30 seconds; the error says what was still wrong.
    pub fn wait_until_ok(&self) -> io::Result<()> {
        self.settle("the sentinel group to settle", |_| Ok(()))
    }

    /// Waits until every running replica has received all the master has written (its
    /// acknowledged replication offset reaches the master's). Replication is asynchronous:
    /// a failover started before this may lose the last writes; one started after it
    /// loses nothing written before the call.
    ///
    /// # Errors
    ///
    /// When no sentinel names a master, or the replicas do not catch up within 30 seconds;
    /// the error says which offsets were still behind.
    pub fn wait_for_replication(&self) -> io::Result<()> {
        let master = self.master()?;
        let server = &self.servers[master];
        let running_replicas = self
            .servers
            .iter()
            .enumerate()
            .filter(|&(i, s)| i != master && answers(s))
            .count();
        poll_until("the replicas to catch up", SETTLE_DEADLINE, || {
            let info = text_of(server, &["INFO", "replication"])?;
            let target: u64 = info_field(&info, "master_repl_offset")
                .and_then(|o| o.parse().ok())
                .ok_or_else(|| format!("no master_repl_offset in {info}"))?;
            // `slave0:ip=...,port=...,state=online,offset=123,lag=0`
            let offsets: Vec<u64> = info
                .lines()
                .filter(|line| line.starts_with("slave") && line.contains(":ip="))
                .filter_map(|line| {
                    line.split(',')
                        .find_map(|kv| kv.strip_prefix("offset="))
                        .and_then(|o| o.parse().ok())
                })
                .collect();
            if offsets.len() >= running_replicas && offsets.iter().all(|&o| o >= target) {
                Ok(())
            } else {
                Err(format!(
                    "master offset {target}, {running_replicas} replicas expected, offsets {offsets:?}"
                ))
            }
        })
    }

    /// Sends `SENTINEL FAILOVER` to a running sentinel (repeating it while the sentinel
    /// has no replica it may promote yet) and returns the number of the new master once
    /// the group is settled around it.
    ///
    /// # Errors
    ///
    /// When the group is not settled before or after within 30 seconds each, or the
    /// sentinel refuses for another reason.
    pub fn failover(&self) -> io::Result<usize> {
        let old = self.settle("the sentinel group to settle", Ok)?;
        let sentinel = self
            .sentinels
            .iter()
            .find(|s| answers(s))
            .ok_or_else(|| io::Error::other("no sentinel is running"))?;
        poll_until("SENTINEL FAILOVER", SETTLE_DEADLINE, || {
            match sentinel.query(&["SENTINEL", "FAILOVER", &self.name]) {
                Ok(Reply::Error(e)) if e.starts_with("NOGOODSLAVE") => Err(e),
                Ok(reply) => Ok(reply.ok_or_error("SENTINEL FAILOVER").map(drop)),
                Err(e) => Ok(Err(e)),
            }
        })??;
        self.wait_for_new_master(old)
    }

    /// Waits until the group is settled around a master other than server `old` (after
    /// `old` was killed or paused, or a failover was started) and returns its number.
    ///
    /// # Errors
    ///
    /// When that does not happen within 30 seconds.
    pub fn wait_for_new_master(&self, old: usize) -> io::Result<usize> {
        self.settle(&format!("a master other than server {old}"), |master| {
            if master == old {
                Err(format!("server {old} is still the master"))
            } else {
                Ok(master)
            }
        })
    }

    /// Restarts server `server` (killing it first if it runs) and waits until the group
    /// has settled with it ([`SentinelGroup::wait_until_ok`]): a former master comes back
    /// empty and is turned into a replica by the sentinels.
    ///
    /// # Errors
    ///
    /// When there is no such server, it does not start, or the group does not settle
    /// within 30 seconds.
    pub fn restart_server(&mut self, server: usize) -> io::Result<()> {
        self.servers
            .get_mut(server)
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("no server {server}"))
            })?
            .restart()?;
        self.wait_until_ok()
    }

    /// Restarts sentinel `sentinel` (killing it first if it runs) from the configuration
    /// it rewrote (it keeps its identity and what it learned) and waits until the group
    /// has settled with it ([`SentinelGroup::wait_until_ok`]).
    ///
    /// # Errors
    ///
    /// When there is no such sentinel, it does not start, or the group does not settle
    /// within 30 seconds.
    pub fn restart_sentinel(&mut self, sentinel: usize) -> io::Result<()> {
        let restarted = self.sentinels.get_mut(sentinel).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("no sentinel {sentinel}"),
            )
        })?;
        restarted.restart()?;
        speed_up(restarted)?;
        self.wait_until_ok()
    }

    /// Waits until the group is settled and `condition` holds for its master's number.
    fn settle<T>(
        &self,
        what: &str,
        mut condition: impl FnMut(usize) -> Result<T, String>,
    ) -> io::Result<T> {
        poll_until(what, SETTLE_DEADLINE, || condition(self.check_settled()?))
    }

    /// The master's number when the group is settled, or what is still wrong.
    fn check_settled(&self) -> Result<usize, String> {
        let sentinels: Vec<&RedisServer> = self.sentinels.iter().filter(|s| answers(s)).collect();
        let mut agreed = None;
        for sentinel in &sentinels {
            let master = self.master_by(sentinel)?;
            if agreed.is_some_and(|agreed| agreed != master) {
                return Err(format!(
                    "sentinels name servers {agreed:?} and {master} as master"
                ));
            }
            agreed = Some(master);
        }
        let master = agreed.ok_or("no sentinel is running")?;
        let master_server = &self.servers[master];
        if !answers(master_server) {
            return Err(format!("the sentinels' master, server {master}, is down"));
        }
        let replication = text_of(master_server, &["INFO", "replication"])?;
        if info_field(&replication, "role") != Some("master") {
            return Err(format!("server {master} is not a master yet"));
        }
        let master_port = master_server.port().to_string();
        let replicas: Vec<(usize, &RedisServer)> = self
            .servers
            .iter()
            .enumerate()
            .filter(|&(number, server)| number != master && answers(server))
            .collect();
        for &(number, replica) in &replicas {
            let replication = text_of(replica, &["INFO", "replication"])?;
            if info_field(&replication, "role") != Some("slave")
                || info_field(&replication, "master_port") != Some(master_port.as_str())
                || info_field(&replication, "master_link_status") != Some("up")
            {
                return Err(format!(
                    "server {number} does not replicate server {master} yet"
                ));
            }
        }
        for sentinel in &sentinels {
            let port = sentinel.port();
            let master_entry = self.sentinel_query(sentinel, "MASTER")?;
            let flags = field(entry_fields(&master_entry)?, "flags");
            if flags != Some("master") {
                return Err(format!("sentinel {port} flags the master {flags:?}"));
            }
            let known = self.sentinel_query(sentinel, "REPLICAS")?;
            for &(number, replica) in &replicas {
                up_in(&known, replica.port(), "slave")
                    .map_err(|e| format!("sentinel {port}, server {number}: {e}"))?;
            }
            let known = self.sentinel_query(sentinel, "SENTINELS")?;
            for other in sentinels.iter().filter(|other| other.port() != port) {
                up_in(&known, other.port(), "sentinel")
                    .map_err(|e| format!("sentinel {port}, sentinel {}: {e}", other.port()))?;
            }
        }
        Ok(master)
    }

    /// The number of the server `sentinel` names as master.
    fn master_by(&self, sentinel: &RedisServer) -> Result<usize, String> {
        let reply = sentinel
            .query(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", &self.name])
            .map_err(|e| format!("sentinel {}: {e}", sentinel.port()))?;
        let port = reply
            .elements()
            .and_then(|address| address.get(1))
            .and_then(Reply::text)
            .and_then(|port| port.parse::<u16>().ok())
            .ok_or_else(|| format!("sentinel {} names master {reply:?}", sentinel.port()))?;
        self.servers
            .iter()
            .position(|server| server.port() == port)
            .ok_or_else(|| format!("the master's port {port} is no server of the group"))
    }

    /// `SENTINEL <subcommand> <name>` on `sentinel`, as a reply that is no error.
    fn sentinel_query(&self, sentinel: &RedisServer, subcommand: &str) -> Result<Reply, String> {
        let port = sentinel.port();
        match sentinel.query(&["SENTINEL", subcommand, &self.name]) {
            Ok(Reply::Error(e)) => Err(format!("sentinel {port}: SENTINEL {subcommand}: {e}")),
            Ok(reply) => Ok(reply),
            Err(e) => Err(format!("sentinel {port}: SENTINEL {subcommand}: {e}")),
        }
    }
}

/// Shortens a sentinel's fixed periods (`SENTINEL DEBUG`, kept until it restarts) so a
/// group settles in about a second instead of tens of seconds: it reads each instance's
/// `INFO` (and so notices a returned old master or a replica to re-point) every second
/// instead of every 10, announces itself to the other sentinels every half second
/// instead of every 2, reconnects a silent link after 2 s instead of 15, and leaves TILT
/// mode (entered when its timer stalled, e.g. after a pause) after 5 s instead of 30.
fn speed_up(sentinel: &RedisServer) -> io::Result<()> {
    sentinel
        .query(&[
            "SENTINEL",
            "DEBUG",
            "info-period",
            "1000",
            "publish-period",
            "500",
            "min-link-reconnect-period",
            "2000",
            "tilt-period",
            "5000",
        ])?
        .ok_or_error("SENTINEL DEBUG")
        .map(drop)
}

/// Whether `server` runs and is not paused, so it can be asked without waiting.
fn answers(server: &RedisServer) -> bool {
    server.is_running() && !server.is_paused()
}

/// The flat `name, value, name, value, ...` array of one entry of a `SENTINEL` reply.
fn entry_fields(entry: &Reply) -> Result<&[Reply], String> {
    entry
        .elements()
        .ok_or_else(|| format!("a SENTINEL entry is {entry:?}"))
}

/// The value of `name` in an entry's fields.
fn field<'a>(fields: &'a [Reply], name: &str) -> Option<&'a str> {
    fields
        .chunks_exact(2)
        .find(|pair| pair[0].text() == Some(name))
        .and_then(|pair| pair[1].text())
}

/// Whether the list of entries `known` has the instance on `port` in `role`, neither
/// down (`s_down`, `o_down`) nor `disconnected`. (A sentinel's entry for another sentinel
/// may keep `master_down`, its last vote on the old master, for a while: not a fault.)
fn up_in(known: &Reply, port: u16, role: &str) -> Result<(), String> {
    let port = port.to_string();
    let entries = entry_fields(known)?;
    for entry in entries {
        let fields = entry_fields(entry)?;
        if field(fields, "port") == Some(port.as_str()) {
            let flags: Vec<&str> = field(fields, "flags").unwrap_or("").split(',').collect();
            let down = ["s_down", "o_down", "disconnected"];
            return if flags.contains(&role) && !flags.iter().any(|flag| down.contains(flag)) {
                Ok(())
            } else {
                Err(format!("flagged {}", flags.join(",")))
            };
        }
    }
    Err("not known yet".to_owned())
}

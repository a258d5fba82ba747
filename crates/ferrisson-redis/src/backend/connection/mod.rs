//! The one way the crate reaches Redis: scripts, commands and subscriptions.
//!
//! Every primitive, the watchdog and the shared subscription talk to Redis through a
//! [`Connection`] and nothing else, so the topology is chosen here and only here:
//!
//! - **one server**: a self-reconnecting multiplexed RESP3 connection;
//! - **Sentinel** ([`sentinel`]): the same, to the master the sentinels name, replaced by
//!   one to the new master when a failover demotes or kills the old one;
//! - **Cluster** ([`cluster`]): redis-rs's cluster client for commands (routed by key),
//!   and one subscription connection per shard master for the shard channels.
//!
//! Three rules live here as well, once for every caller:
//!
//! - **Resend what was not executed.** A redirection (`MOVED`, `ASK`), a cluster or master
//!   in transition (`TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `LOADING`) or a write to a
//!   demoted master (`READONLY`) means the server did not run the call: it is sent again,
//!   where the topology says it belongs now, a few times with short pauses.
//! - **Resend what is safe to resend.** A call cut off by a dropped connection may or may
//!   not have run. It is sent once more when running it twice is the same as running it
//!   once (reads, renewals, acquires under an owner id made for that one attempt);
//!   anything else reports the error. Timeouts are never resent: the server may be alive
//!   but stalled, and the caller's deadline is the one that counts.
//! - **Say what went wrong.** A reply a script never gives is [`Error::Protocol`], naming
//!   the script; everything else is the Redis error with its cause.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike as _, ConnectionManager};
use redis::{
    Cmd, ErrorKind, FromRedisValue, Pipeline, RedisError, RedisResult, ServerErrorKind, Value,
};

use crate::api::error::{Error, Result, redis_reason};
use crate::api::error::{RedisResultExt as _, RedisStoreError, failed_command};
use crate::backend::acks::{Acknowledgements, AofWait, ReplicaAcks};
use crate::backend::keys::Floors;
use crate::backend::scripts::{Invocation, LuaScript, ScriptCall};

pub(crate) mod cluster;
pub(crate) mod coalesce;
pub(crate) mod push;
pub(crate) mod sentinel;

use cluster::{ClusterNodes, SlotOwners};
use coalesce::Coalescer;
use sentinel::SentinelMaster;

/// How often a call the server did not execute (a redirection, a failover in progress)
/// is sent again before its error is reported.
const NOT_EXECUTED_ATTEMPTS: u32 = 8;

/// Commands, scripts and subscriptions of one client, whatever the topology.
#[derive(Clone)]
pub(crate) struct Connection {
    topology: Arc<Topology>,
    acks: Acknowledgements,
    /// Where calls of batchable scripts queue while one is in flight ([`coalesce`]);
    /// none when coalescing is off.
    coalescer: Option<Arc<Coalescer>>,
}

/// Where the client's commands go.
enum Topology {
    /// One server, through a multiplexed connection that reconnects by itself.
    Single(ConnectionManager),
    /// The master the sentinels name.
    Sentinel(Box<SentinelMaster>),
    /// A Redis Cluster.
    Cluster(Box<ClusterNodes>),
}

impl Connection {
    /// One server, through `manager`.
    pub(crate) fn single(manager: ConnectionManager) -> Self {
        Self::new(Topology::Single(manager))
    }

    pub(crate) fn sentinel(master: SentinelMaster) -> Self {
        Self::new(Topology::Sentinel(Box::new(master)))
    }

    pub(crate) fn cluster(nodes: ClusterNodes) -> Self {
        Self::new(Topology::Cluster(Box::new(nodes)))
    }

    fn new(topology: Topology) -> Self {
        Self {
            topology: Arc::new(topology),
            acks: Acknowledgements::default(),
            coalescer: None,
        }
    }

    /// The same connection, coalescing the calls of batchable scripts or not (see
    /// [`coalesce`]; off by default).
    pub(crate) fn with_coalescing(mut self, on: bool) -> Self {
        self.coalescer = on.then(Arc::default);
        self
    }

    /// The same connection, requiring `acks` for every grant and renewal.
    pub(crate) fn with_acknowledgements(mut self, acks: Acknowledgements) -> Self {
        self.acks = acks;
        self
    }

    /// Runs one script call.
    ///
    /// A call of a batchable script ([`ScriptCall::batchable`]) goes through the
    /// coalescer when it is on: alone and at once when no call of its script is in
    /// flight, else together with the other calls that queued meanwhile, as one call of
    /// the script's batch form (see [`coalesce`]). Either way the reply, the error and
    /// the acknowledgements are this call's own.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the call applied with its reply lost; callers that
    /// must undo it arm an undo first (see `primitive::undo`). A call dropped while it
    /// waits for a batch is never sent.
    pub(crate) async fn run<C: ScriptCall>(&self, call: &C) -> Result<C::Reply> {
        let evalsha = Invocation::evalsha(call);
        let script = call.script();
        let (value, evalsha) = match &self.coalescer {
            Some(coalescer) if call.batchable() && script.batch().is_some() => {
                self.run_coalesced(coalescer, script, evalsha, call.idempotent())
                    .await
            }
            _ => {
                let value = self
                    .send_with_rules(
                        evalsha.cmd(),
                        evalsha.first_key(),
                        call.idempotent(),
                        Some(script),
                    )
                    .await
                    .or_command_error();
                (value, Some(evalsha))
            }
        };
        let reply =
            C::Reply::from_redis_value(value?).map_err(|e| Error::Protocol(e.to_string()))?;
        if !self.acks.is_none() && call.wrote_a_hold(&reply) {
            let key = evalsha.as_ref().and_then(|e| e.first_key());
            // Boxed: only clients that require acknowledgements get here.
            Box::pin(self.acknowledge(WrittenOn::KeyOwner(key))).await?;
        }
        if let Some(evalsha) = evalsha {
            evalsha.recycle();
        }
        Ok(reply)
    }

    /// Which master serves which hash slot, for the watchdog to send one renewal call per
    /// node: none on one server or Sentinel (every key is on the one master), or when the
    /// cluster's map cannot be read now (the watchdog then renews per slot).
    pub(crate) async fn renewal_routes(&self) -> Option<Arc<SlotOwners>> {
        match &*self.topology {
            Topology::Cluster(nodes) => match nodes.renewal_routes().await {
                Ok(routes) => Some(routes),
                Err(e) => {
                    tracing::debug!(error = %e, "cluster slot map unreadable; renewing per slot");
                    None
                }
            },
            Topology::Single(_) | Topology::Sentinel(_) => None,
        }
    }

    /// Drops the map [`Connection::renewal_routes`] gave: a renewal found it out of date.
    pub(crate) fn forget_renewal_routes(&self) {
        if let Topology::Cluster(nodes) = &*self.topology {
            nodes.forget_renewal_routes();
        }
    }

    /// Runs script calls of one script, without KEYS, on the cluster node at `address`
    /// (`host:port`) in one request (a pipeline), each answered on its own; the script
    /// checks each key as it touches it (`renew_on_node.lua`). Elsewhere (one master) each
    /// runs as [`Connection::run`].
    ///
    /// # Errors
    ///
    /// The request's error when the node could not be reached or did not answer; a
    /// call's own error (the node's error answer, a reply the script never gives) in its
    /// place in the list.
    ///
    /// # Cancel safety
    ///
    /// As [`Connection::run`].
    pub(crate) async fn run_all_on_node<C: ScriptCall>(
        &self,
        calls: &[C],
        address: &str,
    ) -> Result<Vec<Result<C::Reply>>> {
        let (Topology::Cluster(nodes), Some(first)) = (&*self.topology, calls.first()) else {
            return Ok(futures_util::future::join_all(calls.iter().map(|c| self.run(c))).await);
        };
        let mut pipeline = redis::pipe();
        for call in calls {
            let evalsha = Invocation::evalsha(call);
            pipeline.add_command(evalsha.cmd().clone());
        }
        let idempotent = calls.iter().all(ScriptCall::idempotent);
        let mut loaded = false;
        let values = loop {
            let values = self
                .resend_by_the_rules(idempotent, None, None, || {
                    nodes.send_pipeline_to_node(&pipeline, address)
                })
                .await
                .or_command_error()?;
            // A node that does not know the script yet (a new master) answers every call
            // NOSCRIPT, having run none: load it, send them again.
            let unknown = values.iter().any(|v| {
                matches!(v, Value::ServerError(e) if is_no_script(&RedisError::from(e.clone())))
            });
            if unknown && !loaded {
                self.load(first.script(), None).await.or_command_error()?;
                loaded = true;
                continue;
            }
            break values;
        };
        if values.len() != calls.len() {
            return Err(Error::Protocol(format!(
                "{} replies to a pipeline of {} script calls",
                values.len(),
                calls.len()
            )));
        }
        let replies: Vec<Result<C::Reply>> = values
            .into_iter()
            .map(|value| match value {
                Value::ServerError(e) => Err(crate::api::error::command_error(e.into())),
                value => {
                    C::Reply::from_redis_value(value).map_err(|e| Error::Protocol(e.to_string()))
                }
            })
            .collect();
        let wrote = calls
            .iter()
            .zip(&replies)
            .any(|(call, reply)| reply.as_ref().is_ok_and(|r| call.wrote_a_hold(r)));
        if !self.acks.is_none() && wrote {
            self.acknowledge(WrittenOn::Node(address)).await?;
        }
        Ok(replies)
    }

    /// Waits for the acknowledgements a grant or a renewal needs (`WAIT`, then
    /// `WAITAOF`), on the server that ran the write for `key`.
    ///
    /// # Errors
    ///
    /// [`RedisStoreError::NotReplicated`] or [`RedisStoreError::NotPersisted`] when
    /// fewer acknowledged in time; [`RedisStoreError::AofAcksUnavailable`] when the server refuses `WAITAOF` (it has no
    /// such command, or no append-only file of its own).
    async fn acknowledge(&self, written: WrittenOn<'_>) -> Result<()> {
        if let Some(wait) = self.acks.wait() {
            let acked = self.wait_for_replicas(wait, written).await?;
            if acked < wait.replicas {
                return Err(RedisStoreError::NotReplicated {
                    acked,
                    wanted: wait.replicas,
                }
                .into());
            }
        }
        if let Some(aof) = self.acks.aof {
            let (local, acked) = self.wait_for_aof(aof, written).await?;
            let wanted = aof.acks.replicas_required();
            let local = aof.acks.local_required().then_some(local);
            if local == Some(false) || acked < wanted {
                return Err(RedisStoreError::NotPersisted {
                    local,
                    acked,
                    wanted,
                }
                .into());
            }
        }
        Ok(())
    }

    /// `WAIT` on the server that ran the last write for `key`: how many replicas have
    /// every write this connection sent so far.
    async fn wait_for_replicas(&self, acks: ReplicaAcks, written: WrittenOn<'_>) -> Result<u32> {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(acks.replicas)
            .arg(crate::api::lease::millis(acks.timeout));
        let acked: i64 = self.query_where_written(cmd, written).await?;
        Ok(u32::try_from(acked).unwrap_or(0))
    }

    /// `WAITAOF` on the server that ran the last write for `key`: whether its own
    /// append-only file has every write this connection sent so far on disk, and how many
    /// replicas' files have them.
    async fn wait_for_aof(&self, aof: AofWait, written: WrittenOn<'_>) -> Result<(bool, u32)> {
        let mut cmd = redis::cmd("WAITAOF");
        cmd.arg(u8::from(aof.acks.local_required()))
            .arg(aof.acks.replicas_required())
            .arg(crate::api::lease::millis(aof.timeout));
        let (local, replicas): (i64, i64) = match self.query_where_written(cmd, written).await {
            Ok(counts) => counts,
            Err(e) if failed_command(&e).is_some_and(refuses_waitaof) => {
                let reason = failed_command(&e).map(redis_reason).unwrap_or_default();
                return Err(RedisStoreError::AofAcksUnavailable {
                    reason: format!("WAITAOF was refused: {reason}"),
                }
                .into());
            }
            Err(e) => return Err(e),
        };
        Ok((local > 0, u32::try_from(replicas).unwrap_or(0)))
    }

    /// Sends `cmd` to the server that ran the last write, on the connection that carried
    /// it (`WAIT` and `WAITAOF` count that connection's writes): on a cluster, the master
    /// of the key's slot, or the node a call was sent to.
    async fn query_where_written<T: FromRedisValue>(
        &self,
        cmd: Cmd,
        written: WrittenOn<'_>,
    ) -> Result<T> {
        let value: Value = match &*self.topology {
            Topology::Single(manager) => cmd
                .query_async(&mut manager.clone())
                .await
                .or_command_error()?,
            Topology::Sentinel(master) => cmd
                .query_async(&mut master.manager())
                .await
                .or_command_error()?,
            Topology::Cluster(nodes) => match written {
                WrittenOn::KeyOwner(key) => Box::pin(nodes.send_to_master_of(cmd, key))
                    .await
                    .or_command_error()?,
                WrittenOn::Node(address) => Box::pin(nodes.send_to_node(&cmd, address))
                    .await
                    .or_command_error()?,
            },
        };
        T::from_redis_value(value).map_err(|e| Error::Protocol(e.to_string()))
    }

    /// Runs a command that may run twice without harm (a read; an id counter's `INCRBY`,
    /// where a repeat only skips ids), sending it once more if a dropped connection cut
    /// it off.
    pub(crate) async fn query_resendable<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T> {
        let value = self
            .send_with_rules(cmd, key_of(cmd), true, None)
            .await
            .or_command_error()?;
        T::from_redis_value(value).map_err(|e| Error::Protocol(e.to_string()))
    }

    /// Runs a command whose repetition could change its answer (`SET NX`): resent only
    /// when the server did not execute it.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T> {
        let value = self
            .send_with_rules(cmd, key_of(cmd), false, None)
            .await
            .or_command_error()?;
        T::from_redis_value(value).map_err(|e| Error::Protocol(e.to_string()))
    }

    /// Calls `on_key` with every key matching `pattern` on every master (`SCAN` with
    /// `MATCH` and `COUNT`, never `KEYS`): on one server or Sentinel's master, that server;
    /// on a cluster, each master in turn. A key may be passed more than once; keys that are
    /// not UTF-8 are skipped.
    pub(crate) async fn scan(
        &self,
        pattern: &str,
        count: u32,
        on_key: &mut (dyn FnMut(&str) + Send),
    ) -> Result<()> {
        let masters = match &*self.topology {
            Topology::Cluster(nodes) => nodes
                .masters()
                .await
                .or_command_error()?
                .into_iter()
                .map(Some)
                .collect(),
            Topology::Single(_) | Topology::Sentinel(_) => vec![None],
        };
        for master in masters {
            let mut cursor = 0_u64;
            loop {
                let mut cmd = redis::cmd("SCAN");
                cmd.arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(count);
                let (next, keys): (u64, Vec<Vec<u8>>) = match (&*self.topology, &master) {
                    (Topology::Cluster(nodes), Some(address)) => {
                        let value = nodes.send_to_node(&cmd, address).await.or_command_error()?;
                        FromRedisValue::from_redis_value(value)
                            .map_err(|e| Error::Protocol(e.to_string()))?
                    }
                    _ => self.query_resendable(&cmd).await?,
                };
                for key in &keys {
                    if let Ok(key) = std::str::from_utf8(key) {
                        on_key(key);
                    }
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(())
    }

    /// Runs a read whose first argument is not the key it is about (`PUBSUB
    /// SHARDNUMSUB`) where `key` lives: on a cluster, the master of its slot.
    pub(crate) async fn query_routed<T: FromRedisValue>(&self, cmd: &Cmd, key: &str) -> Result<T> {
        match &*self.topology {
            Topology::Cluster(nodes) => {
                let value = nodes
                    .send_to_master_of(cmd.clone(), Some(key.as_bytes()))
                    .await
                    .or_command_error()?;
                T::from_redis_value(value).map_err(|e| Error::Protocol(e.to_string()))
            }
            Topology::Single(_) | Topology::Sentinel(_) => self.query_resendable(cmd).await,
        }
    }

    /// Subscribes the client's shared subscription to the shard channel `channel`;
    /// messages arrive through the push handler installed on the connections.
    pub(crate) async fn subscribe(&self, channel: &str) -> redis::RedisResult<()> {
        match &*self.topology {
            Topology::Single(manager) => shard_subscribe(manager.clone(), channel).await,
            Topology::Sentinel(master) => shard_subscribe(master.manager(), channel).await,
            Topology::Cluster(nodes) => nodes.subscribe(channel).await,
        }
    }

    /// Leaves the shard channel `channel`.
    pub(crate) async fn unsubscribe(&self, channel: &str) -> redis::RedisResult<()> {
        match &*self.topology {
            Topology::Single(manager) => shard_unsubscribe(manager.clone(), channel).await,
            Topology::Sentinel(master) => shard_unsubscribe(master.manager(), channel).await,
            Topology::Cluster(nodes) => nodes.unsubscribe(channel).await,
        }
    }

    /// Which keys one script call may touch together: the watchdog renews the holds of
    /// one group per call. On one server every key is in the same group; a cluster
    /// refuses a script over keys of several hash slots, so there it is the slot.
    pub(crate) fn call_group(&self, key: &str) -> u16 {
        self.call_group_of_bytes(key.as_bytes())
    }

    fn call_group_of_bytes(&self, key: &[u8]) -> u16 {
        match &*self.topology {
            Topology::Single(_) | Topology::Sentinel(_) => 0,
            Topology::Cluster(_) => crate::backend::slot::key_slot(key),
        }
    }

    /// Which names share a fencing floor: on a cluster those of one slot (a script may
    /// not touch keys of two), elsewhere every name (see [`Floors`]).
    pub(crate) fn floors(&self) -> Floors {
        match &*self.topology {
            Topology::Single(_) | Topology::Sentinel(_) => Floors::PerNamespace,
            Topology::Cluster(_) => Floors::PerSlot,
        }
    }

    /// Sends `cmd` (routed by `key` on a cluster), resending per the rules in the module
    /// docs.
    ///
    /// Boxed (one allocation per request sent): the deepest future of every call, whose
    /// half kilobyte of state was otherwise copied at every level of every acquire and
    /// release (ARCHITECTURE.md, future sizes).
    pub(crate) fn send_with_rules<'a>(
        &'a self,
        cmd: &'a Cmd,
        key: Option<&'a [u8]>,
        idempotent: bool,
        script: Option<&'a LuaScript>,
    ) -> Pin<Box<impl Future<Output = RedisResult<Value>> + 'a>> {
        Box::pin(
            self.resend_by_the_rules(idempotent, script, key, move || self.send_once(cmd, key)),
        )
    }

    /// Sends commands `offset..offset + count` of `pipeline` (routed by its first key on
    /// a cluster, so every key must share a hash slot), resending per the rules in the
    /// module docs.
    pub(crate) async fn send_pipeline_with_rules(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
        idempotent: bool,
    ) -> RedisResult<Vec<Value>> {
        self.resend_by_the_rules(idempotent, None, None, || async {
            match &*self.topology {
                Topology::Single(manager) => {
                    manager
                        .clone()
                        .req_packed_commands(pipeline, offset, count)
                        .await
                }
                Topology::Sentinel(master) => {
                    master
                        .manager()
                        .req_packed_commands(pipeline, offset, count)
                        .await
                }
                Topology::Cluster(nodes) => {
                    nodes
                        .commands()
                        .req_packed_commands(pipeline, offset, count)
                        .await
                }
            }
        })
        .await
    }

    /// Runs `send` until it answers, sending again when the server did not execute it,
    /// when a script's cache missed it (`script` is then loaded where `key` goes), or
    /// once after a cut connection when `idempotent`.
    async fn resend_by_the_rules<T, F, Fut>(
        &self,
        idempotent: bool,
        script: Option<&LuaScript>,
        key: Option<&[u8]>,
        mut send: F,
    ) -> RedisResult<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let mut not_executed = 0;
        let mut resent_after_cut = false;
        loop {
            let error = match send().await {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            if is_no_script(&error) {
                if let Some(script) = script {
                    // A flushed cache, a restarted server, a node that does not know the
                    // script yet (a new master after a failover): load it, send again.
                    self.load(script, key).await?;
                    not_executed += 1;
                    if not_executed < NOT_EXECUTED_ATTEMPTS {
                        continue;
                    }
                }
                return Err(error);
            }
            if was_not_executed(&error) && not_executed < NOT_EXECUTED_ATTEMPTS {
                not_executed += 1;
                self.recover(&error).await;
                tokio::time::sleep(pause(not_executed)).await;
                continue;
            }
            if cut_off(&error) {
                self.recover(&error).await;
                if idempotent && !resent_after_cut {
                    resent_after_cut = true;
                    tracing::debug!(error = %error, "call cut off by a dropped connection; sending it again");
                    continue;
                }
            }
            return Err(error);
        }
    }

    /// One send on the topology's connection, following an `ASK` redirection once.
    async fn send_once(&self, cmd: &Cmd, key: Option<&[u8]>) -> redis::RedisResult<Value> {
        match &*self.topology {
            Topology::Single(manager) => cmd.query_async(&mut manager.clone()).await,
            Topology::Sentinel(master) => cmd.query_async(&mut master.manager()).await,
            Topology::Cluster(nodes) => nodes.send(cmd, key).await,
        }
    }

    /// What the topology does about an error before a call is sent again: a Sentinel
    /// client asks the sentinels for the master when its server went away or was demoted.
    async fn recover(&self, error: &RedisError) {
        if let Topology::Sentinel(master) = &*self.topology
            && (cut_off(error) || error.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly))
        {
            // Boxed: asking the sentinels is a deep future (redis-rs's lookup), and this
            // cold path would otherwise make every call's future that much deeper.
            Box::pin(master.follow_failover()).await;
        }
    }

    /// `SCRIPT LOAD` of `script` where a call routed by `key` goes (every node of a
    /// cluster).
    async fn load(&self, script: &LuaScript, key: Option<&[u8]>) -> RedisResult<()> {
        let cmd = script.load_cmd();
        let _: Value = match &*self.topology {
            Topology::Single(manager) => cmd.query_async(&mut manager.clone()).await?,
            Topology::Sentinel(master) => cmd.query_async(&mut master.manager()).await?,
            Topology::Cluster(nodes) => nodes.load(&cmd, key).await?,
        };
        Ok(())
    }
}

/// Where a write that needs acknowledgements ran.
#[derive(Clone, Copy)]
enum WrittenOn<'a> {
    /// The master of this key's slot (a call routed by its first key).
    KeyOwner(Option<&'a [u8]>),
    /// The cluster node at this address (a call sent to one node).
    Node(&'a str),
}

/// The key a command is routed by: its first argument after the name, for the commands
/// the crate sends outside scripts (`GET`, `EXISTS`, `PTTL`, `HGET`, `INCR`, `SET`, ...).
pub(crate) fn key_of(cmd: &Cmd) -> Option<&[u8]> {
    cmd.args_iter().nth(1).and_then(|arg| match arg {
        redis::Arg::Simple(bytes) => Some(bytes),
        _ => None,
    })
}

/// `SSUBSCRIBE` on a connection whose subscription tracker records the confirmation, so
/// that its reconnects subscribe again by themselves.
async fn shard_subscribe(mut manager: ConnectionManager, channel: &str) -> redis::RedisResult<()> {
    let _: Value = redis::cmd("SSUBSCRIBE")
        .arg(channel)
        .query_async(&mut manager)
        .await?;
    Ok(())
}

async fn shard_unsubscribe(
    mut manager: ConnectionManager,
    channel: &str,
) -> redis::RedisResult<()> {
    let _: Value = redis::cmd("SUNSUBSCRIBE")
        .arg(channel)
        .query_async(&mut manager)
        .await?;
    Ok(())
}

/// The server did not run the call: it answered that the key lives elsewhere, or that it
/// cannot serve it right now.
fn was_not_executed(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Server(
            ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::BusyLoading
                | ServerErrorKind::ReadOnly
        )
    )
}

/// The server answered `WAITAOF` with a refusal that no retry changes: an unknown
/// command (a server before Redis 7.2), an append-only file it does not write
/// (`appendonly no` with the master's own file required), a command the ACL forbids.
fn refuses_waitaof(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Server(ServerErrorKind::ResponseError | ServerErrorKind::NoPerm)
    )
}

fn is_no_script(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

/// True when the connection went away under the call (never a timeout: see the module
/// docs).
fn cut_off(e: &RedisError) -> bool {
    !e.is_timeout() && (e.is_connection_dropped() || e.is_connection_refusal() || e.is_io_error())
}

/// The pause before the `attempt`-th resend of a call the server did not execute: short
/// first (a redirection is followed at once), longer while a failover settles.
fn pause(attempt: u32) -> Duration {
    Duration::from_millis(match attempt {
        0 | 1 => 0,
        n => (10u64 << (n - 2).min(6)).min(500),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_routed_by_their_first_argument() {
        let mut cmd = redis::cmd("HGET");
        cmd.arg("{orders}").arg("field");
        assert_eq!(key_of(&cmd), Some(&b"{orders}"[..]));
        assert_eq!(key_of(&redis::cmd("PING")), None);
    }

    #[test]
    fn pauses_grow_and_stay_bounded() {
        assert_eq!(pause(1), Duration::ZERO);
        assert_eq!(pause(2), Duration::from_millis(10));
        assert_eq!(pause(3), Duration::from_millis(20));
        assert_eq!(pause(20), Duration::from_millis(500));
    }
}

//! A Redis Cluster: commands through redis-rs's cluster client, shard channels through
//! one subscription connection per node.
//!
//! **Commands.** The cluster client routes every call by its first key and follows
//! `MOVED` by refreshing its slot map. Its own resending is turned off (`retries(0)`): it
//! would resend any call cut off by a dropped connection, including those that must not
//! run twice (a re-entry, a count-down, a permit's release). The seam resends instead,
//! by its rules (`super`), and follows `ASK` here with `ASKING` on the importing node.
//!
//! **Subscriptions.** A release is `SPUBLISH`ed to the lock's shard only, so a waiter's
//! shard channel is subscribed on the master that serves the channel's slot, on a
//! connection of its own per node: redis-rs's cluster client can carry shard
//! subscriptions, but a slot that moves makes the old owner push an unsolicited
//! `sunsubscribe` that its multiplexed connection may take as the reply to an unrelated
//! command. Here that push reaches only the subscription connection, and the shared
//! subscription subscribes the channel again where its slot went. A subscription
//! connection that drops (a node failed over) wakes every waiter and moves all channels
//! to the masters the cluster names now.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{
    Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, Pipeline, PushInfo, PushKind, RedisError,
    RedisResult, ServerErrorKind, TlsCertificates, Value,
};

use crate::api::error::RedisResultExt as _;
use crate::api::error::{Error, Result};
use crate::backend::connection::push::PushHandler;
use crate::backend::slot::key_slot;
use crate::backend::tls::TlsConfig;

/// How many redirections one subscription follows before giving up.
const SUBSCRIBE_ATTEMPTS: usize = 5;

/// A cluster's command connection and its subscription connections.
pub(crate) struct ClusterNodes {
    commands: ClusterConnection,
    subscriptions: ShardSubscriptions,
    /// Which master serves which slot, as the watchdog last read it (`CLUSTER SLOTS`), to
    /// send one renewal call per node; none until read, or after a renewal found it stale.
    renewal_routes: Mutex<Option<Arc<SlotOwners>>>,
}

impl ClusterNodes {
    /// Connects to the cluster through `seeds`.
    pub(crate) async fn connect(
        seeds: &[ConnectionInfo],
        tls: Option<&TlsConfig>,
        connect_timeout: std::time::Duration,
        response_timeout: std::time::Duration,
        config: ConnectionManagerConfig,
        push: PushHandler,
    ) -> Result<Self> {
        let Some(template) = seeds.first().cloned() else {
            return Err(Error::invalid("a cluster url needs at least one node"));
        };
        let resp3 = template
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        let template = template.set_redis_settings(resp3);
        let settings = template.redis_settings();
        let mut builder = ClusterClientBuilder::new(seeds.to_vec())
            .use_protocol(redis::ProtocolVersion::RESP3)
            .retries(0)
            .connection_timeout(connect_timeout)
            .response_timeout(response_timeout);
        if let Some(username) = settings.username() {
            builder = builder.username(username);
        }
        if let Some(password) = settings.password() {
            builder = builder.password(password);
        }
        let (template, certificates) = match (template.addr().clone(), tls) {
            (
                ConnectionAddr::TcpTls {
                    host,
                    port,
                    insecure,
                    tls_params,
                },
                tls,
            ) => {
                crate::backend::tls::install_crypto_provider();
                let insecure = insecure || tls.is_some_and(TlsConfig::accepts_invalid_certificates);
                // The subscription connections are made from the template: they must
                // accept what the command connections accept.
                let template = template.set_addr(ConnectionAddr::TcpTls {
                    host,
                    port,
                    insecure,
                    tls_params,
                });
                builder = builder.tls(if insecure {
                    redis::TlsMode::Insecure
                } else {
                    redis::TlsMode::Secure
                });
                let certificates = match tls {
                    Some(tls) => {
                        let certificates = tls.certificates()?;
                        builder = builder.certs(certificates.clone());
                        Some(certificates)
                    }
                    None => None,
                };
                (template, certificates)
            }
            (_, Some(_)) => {
                return Err(Error::invalid(
                    "tls settings need a rediss+cluster:// url (the url asks for plain connections)",
                ));
            }
            (_, None) => (template, None),
        };
        let client = builder
            .build()
            .map_err(|e| Error::invalid(format!("cluster settings: {e}")))?;
        let commands = client.get_async_connection().await.or_command_error()?;
        Ok(Self {
            subscriptions: ShardSubscriptions {
                template,
                certificates,
                config,
                push,
                nodes: tokio::sync::Mutex::new(HashMap::new()),
                owners: Mutex::new(SlotOwners::default()),
                channels: Mutex::new(HashMap::new()),
                stale: Arc::new(AtomicBool::new(true)),
            },
            commands,
            renewal_routes: Mutex::new(None),
        })
    }

    /// Sends `cmd`, routed by its key; follows an `ASK` once on the node it names.
    pub(crate) async fn send(&self, cmd: &Cmd, _key: Option<&[u8]>) -> RedisResult<Value> {
        let mut commands = self.commands.clone();
        match cmd.query_async(&mut commands).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::Ask) => {
                let Some((host, port)) = redirect_address(&e) else {
                    return Err(e);
                };
                let mut pipe = redis::pipe();
                pipe.cmd("ASKING").add_command(cmd.clone());
                // Boxed: a redirection is rare, and redis-rs's routed pipeline is a large
                // future every call would otherwise carry.
                let mut replies = Box::pin(commands.route_pipeline(
                    pipe,
                    1,
                    1,
                    SingleNodeRoutingInfo::ByAddress { host, port },
                ))
                .await?;
                // The importing node's error answer (a script it has not loaded yet) is
                // an error, as for a routed command, not a value.
                match replies.pop() {
                    Some(Value::ServerError(error)) => Err(error.into()),
                    Some(value) => Ok(value),
                    None => Err(e),
                }
            }
            outcome => outcome,
        }
    }

    /// Sends `cmd` to the master of `key`'s slot, on the connection that carried the
    /// calls for that key (`WAIT` counts that connection's writes).
    pub(crate) async fn send_to_master_of(
        &self,
        cmd: Cmd,
        key: Option<&[u8]>,
    ) -> RedisResult<Value> {
        let slot = key.map_or(0, key_slot);
        self.commands
            .clone()
            .route_command(
                cmd,
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
                    slot,
                    SlotAddr::Master,
                ))),
            )
            .await
    }

    /// Sends `cmd` to the node at `address` (`host:port`), for commands that walk one
    /// node's keys (`SCAN`: its cursor means nothing on another node) and the watchdog's
    /// renewals per node. The node's error answer is an error, as for routed commands (a
    /// routed-by-address reply carries it as a value).
    pub(crate) async fn send_to_node(&self, cmd: &Cmd, address: &str) -> RedisResult<Value> {
        let (host, port) = split_address(address).ok_or_else(|| {
            RedisError::from((ErrorKind::Parse, "bad node address", address.to_owned()))
        })?;
        match self
            .commands
            .clone()
            .route_command(
                cmd.clone(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port }),
            )
            .await?
        {
            Value::ServerError(error) => Err(error.into()),
            value => Ok(value),
        }
    }

    /// Sends every command of `pipeline` to the node at `address` in one request (the
    /// watchdog's renewals of one node); each reply in order, the node's error answer to
    /// one command as a [`Value::ServerError`] in its place.
    pub(crate) async fn send_pipeline_to_node(
        &self,
        pipeline: &Pipeline,
        address: &str,
    ) -> RedisResult<Vec<Value>> {
        let (host, port) = split_address(address).ok_or_else(|| {
            RedisError::from((ErrorKind::Parse, "bad node address", address.to_owned()))
        })?;
        self.commands
            .clone()
            .route_pipeline(
                pipeline.clone(),
                0,
                pipeline.len(),
                SingleNodeRoutingInfo::ByAddress { host, port },
            )
            .await
    }

    /// Which master serves which slot, for the watchdog's grouping of renewals per node:
    /// the map read last, or read now (`CLUSTER SLOTS`) when there is none.
    pub(crate) async fn renewal_routes(&self) -> RedisResult<Arc<SlotOwners>> {
        if let Some(routes) = self.lock_renewal_routes().clone() {
            return Ok(routes);
        }
        let routes = Arc::new(cluster_slots(&self.commands).await?);
        *self.lock_renewal_routes() = Some(Arc::clone(&routes));
        Ok(routes)
    }

    /// Forgets the renewal map: a renewal found a key its node no longer serves, or a node
    /// failed; the next round reads the map again.
    pub(crate) fn forget_renewal_routes(&self) {
        *self.lock_renewal_routes() = None;
    }

    fn lock_renewal_routes(&self) -> std::sync::MutexGuard<'_, Option<Arc<SlotOwners>>> {
        self.renewal_routes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The masters' addresses (`host:port`), each once, from `CLUSTER SLOTS`.
    pub(crate) async fn masters(&self) -> RedisResult<Vec<String>> {
        let owners = cluster_slots(&self.commands).await?;
        let mut masters: Vec<String> = owners
            .ranges
            .into_iter()
            .map(|(_, _, address)| address)
            .collect();
        masters.sort();
        masters.dedup();
        Ok(masters)
    }

    /// `SCRIPT LOAD` on every node (redis-rs sends it to all of them).
    pub(crate) async fn load(&self, cmd: &Cmd, _key: Option<&[u8]>) -> RedisResult<Value> {
        cmd.query_async(&mut self.commands.clone()).await
    }

    /// A connection for the client's start-up checks (version, eviction policy): one node
    /// speaks for all.
    pub(crate) fn commands(&self) -> ClusterConnection {
        self.commands.clone()
    }

    pub(crate) async fn subscribe(&self, channel: &str) -> RedisResult<()> {
        self.subscriptions.subscribe(&self.commands, channel).await
    }

    pub(crate) async fn unsubscribe(&self, channel: &str) -> RedisResult<()> {
        self.subscriptions.unsubscribe(channel).await
    }
}

/// One subscription connection per node, and which node each channel is subscribed on.
struct ShardSubscriptions {
    /// Credentials and TLS for every node (its address is a seed's).
    template: ConnectionInfo,
    certificates: Option<TlsCertificates>,
    config: ConnectionManagerConfig,
    push: PushHandler,
    nodes: tokio::sync::Mutex<HashMap<String, ConnectionManager>>,
    owners: Mutex<SlotOwners>,
    channels: Mutex<HashMap<String, String>>,
    /// Set when a subscription connection dropped: the slot owners must be asked again.
    stale: Arc<AtomicBool>,
}

impl ShardSubscriptions {
    async fn subscribe(&self, commands: &ClusterConnection, channel: &str) -> RedisResult<()> {
        let slot = key_slot(channel.as_bytes());
        let mut last_error = None;
        for _ in 0..SUBSCRIBE_ATTEMPTS {
            if self.stale.swap(false, Ordering::SeqCst) || self.owner(slot).is_none() {
                self.refresh_owners(commands).await?;
            }
            let Some(address) = self.owner(slot) else {
                return Err(RedisError::from((
                    ErrorKind::ClusterConnectionNotFound,
                    "no node serves the channel's slot",
                )));
            };
            let mut node = self.node(&address).await?;
            let reply: RedisResult<Value> = redis::cmd("SSUBSCRIBE")
                .arg(channel)
                .query_async(&mut node)
                .await;
            match reply {
                Ok(_) => {
                    self.lock_channels().insert(channel.to_owned(), address);
                    return Ok(());
                }
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::Moved) => {
                    if let Some((host, port)) = redirect_address(&e) {
                        self.lock_owners().set(slot, format!("{host}:{port}"));
                    }
                    last_error = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or_else(|| {
            RedisError::from((
                ErrorKind::ClusterConnectionNotFound,
                "too many redirections",
            ))
        }))
    }

    async fn unsubscribe(&self, channel: &str) -> RedisResult<()> {
        let Some(address) = self.lock_channels().remove(channel) else {
            return Ok(());
        };
        let Some(mut node) = self.nodes.lock().await.get(&address).cloned() else {
            return Ok(());
        };
        let _: Value = redis::cmd("SUNSUBSCRIBE")
            .arg(channel)
            .query_async(&mut node)
            .await?;
        Ok(())
    }

    fn owner(&self, slot: u16) -> Option<String> {
        self.lock_owners().get(slot)
    }

    /// Reads which master serves which slots again.
    async fn refresh_owners(&self, commands: &ClusterConnection) -> RedisResult<()> {
        *self.lock_owners() = cluster_slots(commands).await?;
        Ok(())
    }

    /// The subscription connection to `address`, made on first use.
    async fn node(&self, address: &str) -> RedisResult<ConnectionManager> {
        let mut nodes = self.nodes.lock().await;
        if let Some(node) = nodes.get(address) {
            return Ok(node.clone());
        }
        let (host, port) = split_address(address).ok_or_else(|| {
            RedisError::from((ErrorKind::Parse, "bad node address", address.to_owned()))
        })?;
        let addr = match self.template.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        let info = self.template.clone().set_addr(addr);
        let client = match &self.certificates {
            Some(certificates) => redis::Client::build_with_tls(info, certificates.clone())?,
            None => redis::Client::open(info)?,
        };
        let push = NodePush {
            handler: self.push.clone(),
            stale: Arc::clone(&self.stale),
        };
        let node =
            ConnectionManager::new_with_config(client, self.config.clone().set_push_sender(push))
                .await?;
        nodes.insert(address.to_owned(), node.clone());
        Ok(node)
    }

    fn lock_owners(&self) -> std::sync::MutexGuard<'_, SlotOwners> {
        self.owners.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_channels(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Forwards a subscription connection's pushes to the client's handler; a dropped
/// connection (its node failed or was killed) moves every subscription.
struct NodePush {
    handler: PushHandler,
    stale: Arc<AtomicBool>,
}

impl redis::aio::AsyncPushSender for NodePush {
    fn send(&self, push: PushInfo) -> std::result::Result<(), redis::aio::SendError> {
        if push.kind == PushKind::Disconnection {
            self.stale.store(true, Ordering::SeqCst);
            self.handler.connection_replaced();
            return Ok(());
        }
        redis::aio::AsyncPushSender::send(&self.handler, push)
    }
}

/// Which master serves each slot, as ranges.
#[derive(Default)]
pub(crate) struct SlotOwners {
    /// `(first slot, last slot, "host:port")`, sorted by first slot.
    ranges: Vec<(u16, u16, String)>,
}

impl SlotOwners {
    fn get(&self, slot: u16) -> Option<String> {
        self.address_of(slot).map(str::to_owned)
    }

    /// The address (`host:port`) of the master serving `slot`, if one does.
    pub(crate) fn address_of(&self, slot: u16) -> Option<&str> {
        let index = self.ranges.partition_point(|(first, _, _)| *first <= slot);
        let (first, last, address) = self.ranges.get(index.checked_sub(1)?)?;
        (*first..=*last).contains(&slot).then_some(address.as_str())
    }

    /// Records that `slot` moved to `address` (a `MOVED` reply).
    fn set(&mut self, slot: u16, address: String) {
        self.ranges
            .retain(|(first, last, _)| !(*first..=*last).contains(&slot));
        self.ranges.push((slot, slot, address));
        self.ranges.sort_by_key(|(first, _, _)| *first);
    }

    /// Reads a `CLUSTER SLOTS` reply: `[[first, last, [host, port, id, ...], replicas...], ...]`.
    fn parse(reply: &Value) -> Option<Self> {
        let Value::Array(entries) = reply else {
            return None;
        };
        let mut ranges = Vec::with_capacity(entries.len());
        for entry in entries {
            let Value::Array(fields) = entry else {
                return None;
            };
            let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(master))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                return None;
            };
            let host = match master.first()? {
                Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok()?,
                Value::SimpleString(text) => text.clone(),
                _ => return None,
            };
            let Some(Value::Int(port)) = master.get(1) else {
                return None;
            };
            ranges.push((
                u16::try_from(*first).ok()?,
                u16::try_from(*last).ok()?,
                format!("{host}:{port}"),
            ));
        }
        ranges.sort_by_key(|(first, _, _)| *first);
        Some(Self { ranges })
    }
}

/// Which master serves which slots, by `CLUSTER SLOTS` on any node.
async fn cluster_slots(commands: &ClusterConnection) -> RedisResult<SlotOwners> {
    let reply = commands
        .clone()
        .route_command(
            redis::cmd("CLUSTER").arg("SLOTS").clone(),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
        )
        .await?;
    SlotOwners::parse(&reply)
        .ok_or_else(|| RedisError::from((ErrorKind::Parse, "unexpected CLUSTER SLOTS reply")))
}

/// The node a `MOVED` or `ASK` names.
fn redirect_address(e: &RedisError) -> Option<(String, u16)> {
    let (address, _slot) = e.redirect_node()?;
    split_address(address)
}

/// `host:port` (IPv6 hosts possibly in brackets) as its parts.
fn split_address(address: &str) -> Option<(String, u16)> {
    let (host, port) = address.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_owned(), port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn slot_owners_come_from_cluster_slots() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(10922),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(7001), bulk("id2")]),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(7004), bulk("id5")]),
            ]),
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                Value::Array(vec![bulk("127.0.0.1"), Value::Int(7000), bulk("id1")]),
            ]),
        ]);
        let mut owners = SlotOwners::parse(&reply).expect("parses");
        assert_eq!(owners.get(0).as_deref(), Some("127.0.0.1:7000"));
        assert_eq!(owners.get(5461).as_deref(), Some("127.0.0.1:7001"));
        assert_eq!(owners.get(10923), None);
        owners.set(100, "127.0.0.1:7002".into());
        assert_eq!(owners.get(100).as_deref(), Some("127.0.0.1:7002"));
        assert_eq!(
            owners.get(99).as_deref(),
            None,
            "the range it was cut from is dropped"
        );
        assert!(SlotOwners::parse(&Value::Int(1)).is_none());
    }

    #[test]
    fn node_addresses_split() {
        assert_eq!(
            split_address("10.0.0.1:7000"),
            Some(("10.0.0.1".into(), 7000))
        );
        assert_eq!(split_address("[::1]:7000"), Some(("::1".into(), 7000)));
        assert_eq!(split_address("nope"), None);
    }
}

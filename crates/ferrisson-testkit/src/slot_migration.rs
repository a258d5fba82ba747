//! Moving one hash slot from its master to another, step by step, as `redis-cli
//! --cluster reshard` does.

use std::io;

use crate::{CLUSTER_SLOTS, RedisCluster, Reply};

/// Keys moved per `MIGRATE`.
const KEYS_PER_BATCH: usize = 100;
/// `MIGRATE`'s own timeout, in milliseconds.
const MIGRATE_TIMEOUT_MS: &str = "5000";

/// A slot half-way between two masters: the source is `MIGRATING`, the target
/// `IMPORTING`. Meanwhile the source answers `-ASK` for keys of the slot it no longer
/// has, and the target serves them only after `ASKING`.
///
/// [`SlotMigration::finish`] assigns the slot to the target; a migration dropped
/// unfinished leaves the slot in that state.
///
/// ```no_run
/// use ferrisson_testkit::{RedisCluster, key_slot};
///
/// let cluster = RedisCluster::start()?;
/// let source = cluster.master_of_key("k")?;
/// let target = cluster.masters()?.into_iter().find(|&m| m != source).expect("3 masters");
/// cluster.nodes()[source].command(&["SET", "k", "v"])?;
///
/// let migration = cluster.begin_slot_migration(key_slot("k"), target)?;
/// migration.move_keys(&["k"])?;
/// assert!(cluster.nodes()[source].command(&["GET", "k"])?.starts_with("-ASK"));
/// migration.finish()?;
/// assert!(cluster.nodes()[source].command(&["GET", "k"])?.starts_with("-MOVED"));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
#[must_use = "an unfinished migration leaves the slot MIGRATING on one node, IMPORTING on another"]
pub struct SlotMigration<'a> {
    cluster: &'a RedisCluster,
    slot: u16,
    source: usize,
    target: usize,
}

impl RedisCluster {
    /// Moves `slot` with all its keys to master `target` and returns when every running
    /// node agrees that `target` serves it.
    ///
    /// # Errors
    ///
    /// As [`RedisCluster::begin_slot_migration`], [`SlotMigration::move_all_keys`] and
    /// [`SlotMigration::finish`].
    pub fn migrate_slot(&self, slot: u16, target: usize) -> io::Result<()> {
        let migration = self.begin_slot_migration(slot, target)?;
        migration.move_all_keys()?;
        migration.finish()
    }

    /// Starts moving `slot` to master `target`: `CLUSTER SETSLOT slot IMPORTING` on the
    /// target, then `MIGRATING` on the slot's master. No key moves yet.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] when `slot` is not below 16384 or `target` is not a
    /// master other than the slot's; otherwise when the cluster is not ok within 30
    /// seconds or a node refuses.
    pub fn begin_slot_migration(&self, slot: u16, target: usize) -> io::Result<SlotMigration<'_>> {
        if slot >= CLUSTER_SLOTS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("slot {slot} is not below {CLUSTER_SLOTS}"),
            ));
        }
        let target_id = self.node_id(target)?;
        let (source, target_is_master) = self.settle("the cluster to be ok", |view| {
            let owner = view
                .owner(slot)
                .ok_or(format!("slot {slot} has no master"))?;
            let target_is_master = view.node(target_id).is_some_and(|node| node.master);
            Ok((owner.to_owned(), target_is_master))
        })?;
        let source = self.number_of(&source)?;
        if source == target || !target_is_master {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("node {target} is not a master other than slot {slot}'s (node {source})"),
            ));
        }
        let slot_arg = slot.to_string();
        let source_id = self.node_id(source)?;
        self.running(target)?
            .query(&["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", source_id])?
            .ok_or_error("CLUSTER SETSLOT IMPORTING")?;
        self.running(source)?
            .query(&["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", target_id])?
            .ok_or_error("CLUSTER SETSLOT MIGRATING")?;
        Ok(SlotMigration {
            cluster: self,
            slot,
            source,
            target,
        })
    }
}

impl SlotMigration<'_> {
    /// The slot being moved.
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// The node the slot leaves.
    pub fn source(&self) -> usize {
        self.source
    }

    /// The node the slot goes to.
    pub fn target(&self) -> usize {
        self.target
    }

    /// Moves these keys (all of the slot; absent ones are skipped) to the target with
    /// `MIGRATE ... KEYS`.
    ///
    /// # Errors
    ///
    /// When a node is down or `MIGRATE` fails (e.g. a key of another slot).
    pub fn move_keys<K: AsRef<[u8]>>(&self, keys: &[K]) -> io::Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        let target_port = self.cluster.running(self.target)?.port().to_string();
        let mut command: Vec<&[u8]> = vec![
            b"MIGRATE",
            b"127.0.0.1",
            target_port.as_bytes(),
            b"",
            b"0",
            MIGRATE_TIMEOUT_MS.as_bytes(),
        ];
        // The source logs in to the target as the cluster's user (TLS it uses by itself,
        // as for the cluster bus).
        if let Some(user) = self.cluster.acl_user() {
            command.extend([
                b"AUTH2".as_slice(),
                user.name.as_bytes(),
                user.password.as_bytes(),
            ]);
        }
        command.push(b"KEYS");
        command.extend(keys.iter().map(AsRef::as_ref));
        match self.cluster.running(self.source)?.query(&command)? {
            Reply::Status(status) if status == "OK" || status == "NOKEY" => Ok(()),
            other => Err(io::Error::other(format!("MIGRATE answered {other:?}"))),
        }
    }

    /// Moves every key the source still has in the slot; returns how many it moved.
    ///
    /// # Errors
    ///
    /// As [`SlotMigration::move_keys`].
    pub fn move_all_keys(&self) -> io::Result<usize> {
        let source = self.cluster.running(self.source)?;
        let slot = self.slot.to_string();
        let batch = KEYS_PER_BATCH.to_string();
        let mut moved = 0;
        loop {
            let reply = source.query(&["CLUSTER", "GETKEYSINSLOT", &slot, &batch])?;
            let keys: Vec<&[u8]> = reply
                .elements()
                .ok_or_else(|| io::Error::other(format!("GETKEYSINSLOT answered {reply:?}")))?
                .iter()
                .map(|key| match key {
                    Reply::Bulk(key) => Ok(key.as_slice()),
                    other => Err(io::Error::other(format!("GETKEYSINSLOT listed {other:?}"))),
                })
                .collect::<io::Result<_>>()?;
            if keys.is_empty() {
                return Ok(moved);
            }
            self.move_keys(&keys)?;
            moved += keys.len();
        }
    }

    /// Assigns the slot to the target (`CLUSTER SETSLOT slot NODE` on the target, the
    /// source, then every other master) and returns when every running node agrees.
    /// Keys still on the source are not moved: they become unreachable, as with Redis's
    /// own tools.
    ///
    /// # Errors
    ///
    /// When a node refuses or the cluster does not agree within 30 seconds.
    pub fn finish(self) -> io::Result<()> {
        let slot = self.slot.to_string();
        let target_id = self.cluster.node_id(self.target)?;
        let masters = self.cluster.masters()?;
        let others = masters
            .into_iter()
            .filter(|&master| master != self.target && master != self.source);
        for node in [self.target, self.source].into_iter().chain(others) {
            self.cluster
                .running(node)?
                .query(&["CLUSTER", "SETSLOT", &slot, "NODE", target_id])?
                .ok_or_error("CLUSTER SETSLOT NODE")?;
        }
        let what = format!("slot {slot} to be on node {}", self.target);
        self.cluster
            .settle(&what, |view| match view.owner(self.slot) {
                Some(owner) if owner == target_id => Ok(()),
                owner => Err(format!("slot {slot} is served by {owner:?}")),
            })
    }
}

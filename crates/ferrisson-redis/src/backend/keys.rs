//! Key and channel names of every primitive.
//!
//! All keys of one primitive share one hash tag (`{name}`), so one script may touch them
//! all and the same layout runs on Redis Cluster. The one key a primitive shares with
//! others is its fencing floor, `ferrisson:fence:{tag}` (plus the namespace). On a
//! cluster there is one per hash slot, whose tag puts it in the slot of every name that
//! hashes there (see [`slot`](crate::backend::slot)), so at most 16384 of them per
//! namespace however many lock names come and go. On one server (alone or behind
//! Sentinel), where a script may touch keys of any slot, every name shares one, the
//! floor of slot 0: a batch of acquires of many names then writes one floor once (see
//! `lua/fencing_token.lua`).
//!
//! Redis Cluster hashes the text between a key's first `{` and the first `}` after it.
//! A name holding a brace would move that tag (`{a}b}` hashes `a`, `{a}b}:released` too,
//! but `{}}` hashes the whole key, so a lock and its companions would land on different
//! slots), and a brace in the namespace would put a tag before the name's. Both are
//! refused rather than escaped: a name maps to its keys one to one, readable in
//! `redis-cli`.

use std::sync::Arc;

use crate::api::error::{Error, Result};
use crate::backend::scripts::wake::WakeKeys;
use crate::backend::slot::{key_slot, tag_for_slot};

/// Longest accepted primitive name, in bytes (1 KiB). Names may hold any character but
/// `{` and `}`, which would break the keys' hash tag.
pub const MAX_NAME_LEN: usize = 1024;

/// Longest accepted client namespace, in bytes; the namespace may hold any character but
/// `{` and `}`, which would put a hash tag in front of the primitive's.
pub const MAX_NAMESPACE_LEN: usize = 256;

/// The Redis names that belong to one primitive called `name` in one namespace; cheap to
/// clone (holds and guards share them with their handle).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Keys(Arc<Names>);

#[derive(Debug, PartialEq, Eq)]
struct Names {
    base: String,
    fence: String,
    channel: String,
}

/// Which names share a fencing floor (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Floors {
    /// One floor per hash slot: a cluster refuses a script over keys of several slots.
    PerSlot,
    /// One floor for every name of the namespace: one server, alone or behind Sentinel.
    PerNamespace,
}

impl Keys {
    /// Checks `name` and builds the `{namespace}{name}` base and the companions every
    /// call needs (built once per handle, not once per call).
    pub(crate) fn new(namespace: &str, name: &str, floors: Floors) -> Result<Self> {
        validate_name(name)?;
        let base = format!("{namespace}{{{name}}}");
        let tag = tag_for_slot(match floors {
            Floors::PerSlot => key_slot(base.as_bytes()),
            Floors::PerNamespace => 0,
        });
        Ok(Self(Arc::new(Names {
            fence: format!("{namespace}ferrisson:fence:{{{tag}}}"),
            channel: format!("{base}:released"),
            base,
        })))
    }

    /// The primitive's main key (the lock hash, the semaphore counter, ...).
    pub(crate) fn main(&self) -> &str {
        &self.0.base
    }

    /// A companion key in the same hash slot: `{name}:suffix`.
    pub(crate) fn with_suffix(&self, suffix: &str) -> String {
        format!("{}:{suffix}", self.0.base)
    }

    /// A companion key `{name}:suffix` as the main key of its own, with this primitive's
    /// floor and channel (for holds recorded under a companion, as held permits are).
    pub(crate) fn companion(&self, suffix: &str) -> Self {
        Self(Arc::new(Names {
            base: self.with_suffix(suffix),
            fence: self.0.fence.clone(),
            channel: self.0.channel.clone(),
        }))
    }

    /// The primitive's fencing floor: the highest token handed out by the names that
    /// share it, those of its hash slot or of the namespace (see the module docs and
    /// `lua/fencing_token.lua`); never expires.
    pub(crate) fn fence(&self) -> &str {
        &self.0.fence
    }

    /// The channel on which releases are published.
    pub(crate) fn channel(&self) -> &str {
        &self.0.channel
    }
}

/// `{name}:waiters`: the clients waiting for a lock that wakes one waiting client (`Lock`,
/// `SimpleLock`), a sorted set by registration time (see `lua/wake.lua`).
pub(crate) const WAITERS_SUFFIX: &str = "waiters";
/// `{name}:c:`: a client id completes a client's own wake-up channel of such a lock.
const CLIENT_CHANNELS_SUFFIX: &str = "c:";

/// The names by which a release wakes one waiting client of a lock (`Lock`, `SimpleLock`;
/// `lua/wake.lua`), built once per handle: the set of waiting clients, the prefix of their
/// wake-up channels, and this client's own channel.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct WakeNames {
    /// `{name}:waiters`: the waiting clients, in the order they registered.
    waiters: String,
    /// `{name}:c:`: a client id completes a client's wake-up channel.
    channels: String,
    /// This client's wake-up channel for this lock, `{name}:c:<client id>`.
    own: String,
}

impl WakeNames {
    /// The names of the lock whose keys are `keys`, for the client `client_id`.
    pub(crate) fn new(keys: &Keys, client_id: &str) -> Self {
        let channels = keys.with_suffix(CLIENT_CHANNELS_SUFFIX);
        Self {
            waiters: keys.with_suffix(WAITERS_SUFFIX),
            own: format!("{channels}{client_id}"),
            channels,
        }
    }

    /// How the client `client_id`'s own wake-up channels end: `:c:<client id>`.
    pub(crate) fn own_suffix(client_id: &str) -> String {
        format!(":{CLIENT_CHANNELS_SUFFIX}{client_id}")
    }

    /// The lock's key and names whose wake-up channel of the client `client_id` is
    /// `channel`; `None` when `channel` is not one.
    pub(crate) fn of_own_channel(channel: &str, client_id: &str) -> Option<(String, Self)> {
        let base = channel
            .strip_suffix(client_id)?
            .strip_suffix(CLIENT_CHANNELS_SUFFIX)?
            .strip_suffix(':')?;
        let names = Self {
            waiters: format!("{base}:{WAITERS_SUFFIX}"),
            channels: format!("{base}:{CLIENT_CHANNELS_SUFFIX}"),
            own: channel.to_owned(),
        };
        Some((base.to_owned(), names))
    }

    /// The set of waiting clients.
    pub(crate) fn waiters(&self) -> &str {
        &self.waiters
    }

    /// This client's own wake-up channel.
    pub(crate) fn own(&self) -> &str {
        &self.own
    }

    /// The keys the wake-up scripts take.
    pub(crate) fn keys(&self) -> WakeKeys<'_> {
        WakeKeys {
            waiters: &self.waiters,
            channels: &self.channels,
        }
    }
}

/// Rejects names that are empty, longer than [`MAX_NAME_LEN`] bytes, or hold a brace.
pub(crate) fn validate_name(name: &str) -> Result<()> {
    validate_length("name", name)?;
    if name.contains(['{', '}']) {
        return Err(Error::invalid(format!(
            "name {name:?} holds a brace; {{ and }} are not allowed (they would split the keys' hash tag)"
        )));
    }
    Ok(())
}

/// Rejects a fenced resource (one key of its own) that is empty or longer than
/// [`MAX_NAME_LEN`] bytes. Braces are allowed: they only choose the key's slot, which lets
/// a caller put the resource beside its lock on Redis Cluster.
pub(crate) fn validate_resource(resource: &str) -> Result<()> {
    validate_length("resource", resource)
}

fn validate_length(what: &str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(format!("{what} must not be empty")));
    }
    if value.len() > MAX_NAME_LEN {
        return Err(Error::invalid(format!(
            "{what} is {} bytes long, the limit is {MAX_NAME_LEN}",
            value.len()
        )));
    }
    Ok(())
}

/// Rejects namespaces longer than [`MAX_NAMESPACE_LEN`] bytes or holding a brace; the
/// empty namespace is allowed.
pub(crate) fn validate_namespace(namespace: &str) -> Result<()> {
    if namespace.len() > MAX_NAMESPACE_LEN {
        return Err(Error::invalid(format!(
            "namespace is {} bytes long, the limit is {MAX_NAMESPACE_LEN}",
            namespace.len()
        )));
    }
    if namespace.contains(['{', '}']) {
        return Err(Error::invalid(format!(
            "namespace {namespace:?} holds a brace; {{ and }} are not allowed (they would change the keys' hash tag)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let keys = Keys::new("app:", "orders:42", Floors::PerSlot).expect("valid");
        assert_eq!(keys.main(), "app:{orders:42}");
        assert_eq!(keys.channel(), "app:{orders:42}:released");
    }

    #[test]
    fn wake_names_share_the_hash_tag_and_read_back_from_a_channel() {
        let keys = Keys::new("app:", "orders:42", Floors::PerSlot).expect("valid");
        let names = WakeNames::new(&keys, "00ab");
        assert_eq!(names.waiters(), "app:{orders:42}:waiters");
        assert_eq!(names.keys().channels, "app:{orders:42}:c:");
        assert_eq!(names.own(), "app:{orders:42}:c:00ab");
        assert!(names.own().ends_with(&WakeNames::own_suffix("00ab")));
        let (key, read) = WakeNames::of_own_channel(names.own(), "00ab").expect("own channel");
        assert_eq!(key, keys.main());
        assert_eq!(read, names);
        assert_eq!(WakeNames::of_own_channel(names.own(), "00ac"), None);
        assert_eq!(
            WakeNames::of_own_channel("app:{orders:42}:released", "00ab"),
            None
        );
    }

    #[test]
    fn the_fencing_floor_is_one_key_per_slot_in_the_lock_slot() {
        let keys = Keys::new("app:", "orders:42", Floors::PerSlot).expect("valid");
        let slot = key_slot(keys.main().as_bytes());
        assert_eq!(key_slot(keys.fence().as_bytes()), slot);
        assert_eq!(
            keys.fence(),
            format!("app:ferrisson:fence:{{{}}}", tag_for_slot(slot))
        );
        // Names of one slot share their floor; the namespace keeps namespaces apart.
        let twin = (0..1_000_000)
            .map(|i| format!("other:{i}"))
            .find(|name| key_slot(name.as_bytes()) == slot)
            .expect("some name hashes to the slot");
        assert_eq!(
            Keys::new("app:", &twin, Floors::PerSlot)
                .expect("valid")
                .fence(),
            keys.fence()
        );
        assert_ne!(
            Keys::new("", "orders:42", Floors::PerSlot)
                .expect("valid")
                .fence(),
            keys.fence()
        );
    }

    #[test]
    fn on_one_server_every_name_of_a_namespace_shares_one_floor() {
        let floor = |namespace: &str, name: &str| {
            Keys::new(namespace, name, Floors::PerNamespace)
                .expect("valid")
                .fence()
                .to_owned()
        };
        assert_eq!(floor("app:", "orders:42"), floor("app:", "users:7"));
        assert_eq!(
            floor("app:", "orders:42"),
            format!("app:ferrisson:fence:{{{}}}", tag_for_slot(0))
        );
        assert_ne!(floor("", "orders:42"), floor("app:", "orders:42"));
    }

    #[test]
    fn bad_names_are_rejected() {
        assert!(matches!(
            Keys::new("", "", Floors::PerSlot),
            Err(Error::InvalidArgument(_))
        ));
        let long = "x".repeat(MAX_NAME_LEN + 1);
        assert!(matches!(
            Keys::new("", &long, Floors::PerSlot),
            Err(Error::InvalidArgument(_))
        ));
        assert!(Keys::new("", &"x".repeat(MAX_NAME_LEN), Floors::PerSlot).is_ok());
        for name in ["}", "{", "a}b", "{a}", "x{"] {
            assert!(
                matches!(Keys::new("", name, Floors::PerSlot), Err(Error::InvalidArgument(m)) if m.contains("brace")),
                "{name:?}"
            );
        }
    }

    #[test]
    fn bad_namespaces_are_rejected() {
        assert!(validate_namespace("").is_ok());
        assert!(validate_namespace("shop:").is_ok());
        assert!(validate_namespace(&"n".repeat(MAX_NAMESPACE_LEN)).is_ok());
        assert!(matches!(
            validate_namespace(&"n".repeat(MAX_NAMESPACE_LEN + 1)),
            Err(Error::InvalidArgument(m)) if m.contains("limit")
        ));
        for namespace in ["{}", "a{", "}b"] {
            assert!(
                matches!(validate_namespace(namespace), Err(Error::InvalidArgument(m)) if m.contains("brace")),
                "{namespace:?}"
            );
        }
    }
}

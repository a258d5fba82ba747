//! The Redis backend's machinery: the client and its connection, the scripts, the shared
//! subscription, the watchdog and the record of held locks.

pub(crate) mod access;
pub(crate) mod acks;
pub(crate) mod client;
pub(crate) mod commands;
pub(crate) mod connection;
pub(crate) mod endpoint;
pub(crate) mod fenced;
pub(crate) mod holds;
pub(crate) mod ids;
pub(crate) mod keys;
pub(crate) mod pubsub;
pub(crate) mod scripts;
pub(crate) mod slot;
pub(crate) mod tls;
pub(crate) mod watchdog;

//! The Redis store's own errors, as the store-neutral [`Error`] carries them.

pub use ferrisson_core::{Error, Result, StoreError};

/// The store's name in URLs, metrics and the capability table.
pub const STORE: &str = "redis";

/// What only the Redis store can report, carried by [`Error::Store`] (or, for a failed
/// connect, as the cause of [`Error::Connect`]).
///
/// Match on it with [`Error::store_error`]:
///
/// ```
/// use ferrisson_redis::{Error, RedisStoreError};
///
/// fn replicas_were_slow(e: &Error) -> bool {
///     matches!(e.store_error::<RedisStoreError>(), Some(RedisStoreError::NotReplicated { .. }))
/// }
/// let e: Error = RedisStoreError::NotReplicated { acked: 0, wanted: 1 }.into();
/// assert!(replicas_were_slow(&e));
/// assert!(e.is_transient());
/// ```
///
/// Each message says what happened, cause included, and only once: where a variant wraps
/// a redis-rs error, its reason (the server's answer or the socket's error) is part of the
/// message and [`source()`] is `None`. The redis-rs error itself stays in the variant for
/// callers that match on it.
///
/// [`source()`]: std::error::Error::source
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisStoreError {
    /// A Redis command failed: connection lost, no reply within the response timeout, or
    /// an error answered by the server.
    #[error("redis command failed: {}", command_failure(.0))]
    Command(redis::RedisError),

    /// Why a connect failed (the cause of an [`Error::Connect`]).
    #[error("{}", redis_reason(.0))]
    Connect(redis::RedisError),

    /// Fewer than a majority of a Redlock's servers answered and none reported why.
    #[error("redlock {name:?}: {answered} of its servers answered, {quorum} are needed")]
    NoQuorum {
        /// The Redlock's name.
        name: String,
        /// Servers that answered.
        answered: usize,
        /// The majority needed.
        quorum: usize,
    },

    /// A day's id counter passed 2³² − 1: no more ids for that prefix until the next UTC day.
    #[error("id sequence {key:?} passed 32 bits for its day")]
    SequenceExhausted {
        /// The counter's key, with the day in it.
        key: String,
    },

    /// The clock reads a time ids cannot hold: before 2022-01-01 or after 2090-01-19.
    #[error("clock reads {unix_seconds} s since 1970, outside the id range 2022-01-01..2090-01-19")]
    ClockOutOfRange {
        /// What the clock read, in seconds since 1970-01-01T00:00:00Z.
        unix_seconds: i64,
    },

    /// The server is older than Redis 7.0. Ferrisson's scripts declare script flags (so
    /// that renewals and releases run when the server's memory is full), which older
    /// servers cannot load.
    #[error("ferrisson needs Redis 7.0 or later, the server is {version}")]
    UnsupportedServer {
        /// The version the server reported.
        version: String,
    },

    /// A grant or renewal was written on the master but fewer replicas than required
    /// acknowledged it in time ([`ClientBuilder::replica_acks`](crate::ClientBuilder::replica_acks)):
    /// a failover could lose it, so it is not reported as done. A grant is undone.
    #[error("only {acked} of the {wanted} replicas required acknowledged the write in time")]
    NotReplicated {
        /// Replicas that acknowledged.
        acked: u32,
        /// Replicas required.
        wanted: u32,
    },

    /// A grant or renewal was written on the master but not every append-only file
    /// required had it on disk in time ([`ClientBuilder::aof_acks`](crate::ClientBuilder::aof_acks)):
    /// a restart could lose it, so it is not reported as done. A grant is undone.
    #[error("the write was not on disk in every append-only file required in time ({})", aof_shortfall(*local, *acked, *wanted))]
    NotPersisted {
        /// The master's own file: `None` when it was not required, else whether it had
        /// the write on disk.
        local: Option<bool>,
        /// Replicas whose files had it on disk.
        acked: u32,
        /// Replicas required.
        wanted: u32,
    },

    /// Append-only file acknowledgements were asked for
    /// ([`ClientBuilder::aof_acks`](crate::ClientBuilder::aof_acks)) and the server cannot
    /// give them: it has no `WAITAOF` (Redis before 7.2), or the master's own file is
    /// required and it writes none (`appendonly no`) or never syncs it (`appendfsync
    /// no`). Reported at connect when the server lets the client check (`COMMAND INFO`,
    /// `CONFIG GET`), else by the first grant, which is then undone.
    #[error("append-only file acknowledgements are not available: {reason}")]
    AofAcksUnavailable {
        /// What the server lacks.
        reason: String,
    },
}

impl StoreError for RedisStoreError {
    fn store(&self) -> &'static str {
        STORE
    }

    /// Redis could not be reached, or could not serve the call right now (a master
    /// failing over, a slot moving, replicas not yet back to acknowledge a grant).
    fn is_transient(&self) -> bool {
        match self {
            Self::Command(e) | Self::Connect(e) => {
                is_connection_failure(e)
                    || matches!(
                        e.kind(),
                        redis::ErrorKind::Server(
                            redis::ServerErrorKind::ReadOnly
                                | redis::ServerErrorKind::MasterDown
                                | redis::ServerErrorKind::ClusterDown
                                | redis::ServerErrorKind::TryAgain
                                | redis::ServerErrorKind::BusyLoading
                                | redis::ServerErrorKind::Moved
                                | redis::ServerErrorKind::Ask
                        ) | redis::ErrorKind::ClusterConnectionNotFound
                    )
            }
            Self::NotReplicated { .. } | Self::NotPersisted { .. } => true,
            _ => false,
        }
    }

    /// A command whose reply was lost (connection dropped, timeout) may have run; a
    /// write that replicas or disks did not acknowledge did run on the master.
    fn maybe_executed(&self) -> bool {
        match self {
            Self::Command(e) => e.is_timeout() || e.is_connection_dropped() || e.is_io_error(),
            Self::NotReplicated { .. } | Self::NotPersisted { .. } => true,
            _ => false,
        }
    }

    fn is_connection(&self) -> bool {
        match self {
            Self::Command(e) | Self::Connect(e) => is_connection_failure(e),
            _ => false,
        }
    }
}

impl From<RedisStoreError> for Error {
    fn from(e: RedisStoreError) -> Self {
        Error::store(e)
    }
}

fn is_connection_failure(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal()
}

/// A failed Redis command as the store-neutral error.
pub(crate) fn command_error(e: redis::RedisError) -> Error {
    Error::store(RedisStoreError::Command(e))
}

/// `?` for redis-rs results inside the crate: the failure as the store-neutral error.
pub(crate) trait RedisResultExt<T> {
    /// The result with a failure as [`RedisStoreError::Command`].
    fn or_command_error(self) -> Result<T>;
}

impl<T> RedisResultExt<T> for redis::RedisResult<T> {
    fn or_command_error(self) -> Result<T> {
        self.map_err(command_error)
    }
}

/// The redis-rs error a failed command carries, if this is one.
pub(crate) fn failed_command(e: &Error) -> Option<&redis::RedisError> {
    match e.store_error::<RedisStoreError>()? {
        RedisStoreError::Command(e) | RedisStoreError::Connect(e) => Some(e),
        _ => None,
    }
}

/// True when a grant or renewal was written on the master but does not count: too few
/// acknowledged it, or the server could not acknowledge it at all. An acquire that gets
/// it gives the grant back.
pub(crate) fn is_unacknowledged(e: &Error) -> bool {
    matches!(
        e.store_error::<RedisStoreError>(),
        Some(
            RedisStoreError::NotReplicated { .. }
                | RedisStoreError::NotPersisted { .. }
                | RedisStoreError::AofAcksUnavailable { .. }
        )
    )
}

/// The reason in a redis-rs error as a person reads it: a server's error as the server
/// wrote it (`"ERR user_script:13: ..."`, `"OOM command not allowed ..."`), but a refused
/// login or permission as a sentence naming the fix (`NOAUTH`, `WRONGPASS`, `NOPERM`),
/// anything else without redis-rs's kind name (`"Invalid database number -
/// InvalidClientConfig"` reads `"invalid database number"`).
pub(crate) fn redis_reason(e: &redis::RedisError) -> String {
    if let (Some(code), Some(detail)) = (e.code(), e.detail()) {
        return crate::backend::access::explain(code, detail)
            .unwrap_or_else(|| format!("{code} {detail}"));
    }
    let text = e.to_string();
    let kind = format!("{:?}", e.kind());
    let text = match text.split_once(" - ") {
        Some((description, rest)) if rest == kind => description.to_owned(),
        Some((description, rest)) => {
            match rest.strip_prefix(&kind).and_then(|r| r.strip_prefix(": ")) {
                Some(detail) => format!("{description}: {detail}"),
                None => text,
            }
        }
        None => text,
    };
    lowercase_sentence(&text)
}

/// Why a command failed; a timeout says which one (redis-rs only says "timed out").
fn command_failure(e: &redis::RedisError) -> String {
    if e.is_timeout() {
        "no reply within the response timeout".to_owned()
    } else {
        redis_reason(e)
    }
}

/// `"Connection refused"` reads `"connection refused"`; a first word that is a name or a
/// code (`"ResponseError:"`, `"NOSCRIPT"`) stays as it is.
fn lowercase_sentence(text: &str) -> String {
    let first_word = text.split(' ').next().unwrap_or_default();
    let mut chars = first_word.chars();
    let is_sentence = text.len() > first_word.len()
        && chars.next().is_some_and(char::is_uppercase)
        && chars.all(char::is_lowercase);
    if !is_sentence {
        return text.to_owned();
    }
    let mut lowered = String::with_capacity(text.len());
    let mut chars = text.chars();
    lowered.extend(chars.next().into_iter().flat_map(char::to_lowercase));
    lowered.extend(chars);
    lowered
}

/// What [`RedisStoreError::NotPersisted`] says had the write: `master: no, replicas: 0 of 1`.
fn aof_shortfall(local: Option<bool>, acked: u32, wanted: u32) -> String {
    let master = local.map(|on_disk| format!("master: {}", if on_disk { "yes" } else { "no" }));
    let replicas = (wanted > 0).then(|| format!("replicas: {acked} of {wanted}"));
    [master, replicas]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    fn every_variant() -> Vec<Error> {
        let io =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        vec![
            Error::Connect {
                target: "redis://127.0.0.1:1".into(),
                cause: Box::new(RedisStoreError::Connect(io.clone())),
            },
            RedisStoreError::Command(io).into(),
            RedisStoreError::NoQuorum {
                name: "a".into(),
                answered: 1,
                quorum: 2,
            }
            .into(),
            RedisStoreError::SequenceExhausted { key: "k".into() }.into(),
            RedisStoreError::ClockOutOfRange { unix_seconds: 0 }.into(),
            RedisStoreError::UnsupportedServer {
                version: "6.2.0".into(),
            }
            .into(),
            RedisStoreError::NotReplicated {
                acked: 0,
                wanted: 1,
            }
            .into(),
            RedisStoreError::NotPersisted {
                local: Some(false),
                acked: 0,
                wanted: 1,
            }
            .into(),
            RedisStoreError::AofAcksUnavailable {
                reason: "the server has no WAITAOF".into(),
            }
            .into(),
        ]
    }

    #[test]
    fn messages_are_lowercase_without_a_period_and_name_their_cause_once() {
        for error in every_variant() {
            let message = error.to_string();
            assert!(
                message.chars().next().is_some_and(|c| !c.is_uppercase()),
                "{message}"
            );
            assert!(!message.ends_with('.'), "{message}");
            assert!(error.source().is_none(), "{message}");
            assert_eq!(error.store_name(), Some("redis"), "{message}");
        }
        let timeout = command_error(std::io::Error::from(std::io::ErrorKind::TimedOut).into());
        assert_eq!(
            timeout.to_string(),
            "redis command failed: no reply within the response timeout"
        );
        assert!(
            timeout.is_transient() && timeout.maybe_executed() && timeout.is_connection_error()
        );
        let refused = every_variant().swap_remove(0).to_string();
        assert_eq!(
            refused,
            "cannot connect to redis://127.0.0.1:1: connection refused"
        );
    }

    #[test]
    fn unacknowledged_writes_are_transient_and_may_have_run() {
        let e: Error = RedisStoreError::NotPersisted {
            local: Some(true),
            acked: 0,
            wanted: 1,
        }
        .into();
        assert!(is_unacknowledged(&e) && e.is_transient() && e.maybe_executed());
        let refused = command_error(redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "no",
        )));
        assert!(!refused.is_transient() && !refused.maybe_executed());
        assert!(failed_command(&refused).is_some());
    }

    #[test]
    fn an_aof_shortfall_says_which_files_had_the_write() {
        let message = |local, acked, wanted| {
            Error::from(RedisStoreError::NotPersisted {
                local,
                acked,
                wanted,
            })
            .to_string()
        };
        assert_eq!(
            message(Some(true), 0, 1),
            "the write was not on disk in every append-only file required in time \
             (master: yes, replicas: 0 of 1)"
        );
        assert!(message(Some(false), 0, 0).ends_with("(master: no)"));
        assert!(message(None, 1, 2).ends_with("(replicas: 1 of 2)"));
    }

    #[test]
    fn redis_reasons_read_as_written() {
        let general = redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "Invalid database number",
        ));
        assert_eq!(redis_reason(&general), "invalid database number");
        let detailed = redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "Invalid protocol version",
            "9".to_owned(),
        ));
        assert_eq!(redis_reason(&detailed), "invalid protocol version: 9");
        assert_eq!(lowercase_sentence("ResponseError: x"), "ResponseError: x");
        assert_eq!(lowercase_sentence("NOSCRIPT x"), "NOSCRIPT x");
        assert_eq!(lowercase_sentence("Broken pipe"), "broken pipe");
        assert_eq!(lowercase_sentence("Word"), "Word");
    }
}

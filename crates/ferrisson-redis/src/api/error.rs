//! The crate's one error type.

/// What can go wrong talking to Redis or using a primitive.
///
/// Contention is not an error: `try_*` methods return `Ok(None)` when the primitive is
/// taken elsewhere. Messages never contain a Redis password.
///
/// Each message says what happened, cause included, and only once: where a variant wraps
/// a redis-rs error ([`Error::Connect`], [`Error::Redis`]), its reason (the server's
/// answer or the socket's error) is part of the message and [`source()`] is `None`, so a
/// caller printing the whole chain sees the reason once. The redis-rs error itself stays
/// in the variant for callers that match on it.
///
/// [`source()`]: std::error::Error::source
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A name, duration, count, URL or TLS setting the caller passed is not acceptable;
    /// the message names the rule.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The client could not connect to Redis: refused, unresolvable host, no answer within
    /// the connect timeout, TLS handshake or credentials refused. Fails at the first
    /// attempt; `url` has its password redacted.
    #[error("cannot connect to {url}: {}", redis_reason(cause))]
    Connect {
        /// The Redis URL with its password replaced by `***`.
        url: String,
        /// What redis-rs reported (its reason is in the message).
        cause: redis::RedisError,
    },

    /// A Redis command failed: connection lost, no reply within the response timeout, or
    /// an error answered by the server.
    #[error("redis command failed: {}", command_failure(.0))]
    Redis(redis::RedisError),

    /// The lock was released by its lease running out before the holder released it.
    #[error("lock {name:?} is no longer held: its lease expired")]
    LeaseExpired {
        /// The lock's name.
        name: String,
    },

    /// The lock is held, but by another owner.
    #[error("lock {name:?} is held by another owner")]
    NotOwner {
        /// The lock's name.
        name: String,
    },

    /// Redis answered something a ferrisson script never returns.
    #[error("unexpected reply from redis: {0}")]
    Protocol(String),

    /// The task that ran an acquire (or an id reservation) in the background ended before
    /// it answered: the tokio runtime is shutting down, or the task panicked. Nothing is
    /// held on the caller's behalf; a hold the task may have taken ends with its lease.
    #[error("the operation on {name:?} was cancelled before it answered: its task ended")]
    Cancelled {
        /// The primitive's name (an id generator's prefix).
        name: String,
    },

    /// The client's background tasks have stopped: the runtime is shutting down.
    #[error("the client is shutting down")]
    ShuttingDown,

    /// A wait without a time limit returned without the lock or permits. It should never
    /// happen; seen, it is a ferrisson bug.
    #[error("the wait for {name:?} ended without acquiring it")]
    WaitEnded {
        /// The primitive's name.
        name: String,
    },

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

    /// A semaphore was used before anyone set its permits (`try_set_permits` or
    /// `add_permits`), or after it was deleted: waiting would never succeed.
    #[error("semaphore {name:?} is not initialized: set its permits first")]
    NotInitialized {
        /// The semaphore's name.
        name: String,
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
    /// no`). Reported at connect when the
    /// server lets the client check (`COMMAND INFO`, `CONFIG GET`), else by the first
    /// grant, which is then undone.
    #[error("append-only file acknowledgements are not available: {reason}")]
    AofAcksUnavailable {
        /// What the server lacks.
        reason: String,
    },

    /// A holder of a read-write lock's read side asked for its write side. Waiting would
    /// deadlock against any other reader doing the same, so it is refused at once:
    /// release the read guards first, or take the write side first and read inside it.
    #[error(
        "read-write lock {name:?}: a reader cannot take the write lock; release the read lock first"
    )]
    UpgradeRefused {
        /// The lock's name.
        name: String,
    },
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        Self::Redis(e)
    }
}

/// The reason in a redis-rs error as a person reads it: a server's error as the server
/// wrote it (`"ERR user_script:13: ..."`, `"OOM command not allowed ..."`), but a refused
/// login or permission as a sentence naming the fix (`NOAUTH`, `WRONGPASS`, `NOPERM`),
/// anything else without redis-rs's kind name (`"Invalid database number -
/// InvalidClientConfig"` reads `"invalid database number"`).
pub(crate) fn redis_reason(e: &redis::RedisError) -> String {
    if let (Some(code), Some(detail)) = (e.code(), e.detail()) {
        return crate::redis::access::explain(code, detail)
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

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What [`Error::NotPersisted`] says had the write: `master: no, replicas: 0 of 1`.
fn aof_shortfall(local: Option<bool>, acked: u32, wanted: u32) -> String {
    let master = local.map(|on_disk| format!("master: {}", if on_disk { "yes" } else { "no" }));
    let replicas = (wanted > 0).then(|| format!("replicas: {acked} of {wanted}"));
    [master, replicas]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ")
}

impl Error {
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidArgument(message.into())
    }

    pub(crate) fn cancelled(name: &str) -> Self {
        Self::Cancelled {
            name: name.to_owned(),
        }
    }

    pub(crate) fn wait_ended(name: &str) -> Self {
        Self::WaitEnded {
            name: name.to_owned(),
        }
    }

    /// True when Redis could not be reached, or could not serve the call right now (a
    /// master failing over, a slot moving, replicas not yet back to acknowledge a
    /// grant): another try later may succeed.
    pub(crate) fn is_transient(&self) -> bool {
        if self.is_connection_error()
            || matches!(self, Self::NotReplicated { .. } | Self::NotPersisted { .. })
        {
            return true;
        }
        matches!(
            self,
            Self::Redis(redis) if matches!(
                redis.kind(),
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
        )
    }

    /// True when a grant or renewal was written on the master but does not count: too
    /// few acknowledged it, or the server could not acknowledge it at all. An acquire
    /// that gets it gives the grant back.
    pub(crate) fn is_unacknowledged(&self) -> bool {
        matches!(
            self,
            Self::NotReplicated { .. }
                | Self::NotPersisted { .. }
                | Self::AofAcksUnavailable { .. }
        )
    }

    /// True when the error came from the connection (I/O, timeout, refused) rather than
    /// from what the server answered; the operation may or may not have been applied.
    pub fn is_connection_error(&self) -> bool {
        match self {
            Self::Connect { .. } => true,
            Self::Redis(e) => {
                e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    fn every_variant() -> Vec<Error> {
        let io =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        vec![
            Error::invalid("name must not be empty"),
            Error::Connect {
                url: "redis://127.0.0.1:1".into(),
                cause: io.clone(),
            },
            Error::Redis(io),
            Error::LeaseExpired { name: "a".into() },
            Error::NotOwner { name: "a".into() },
            Error::Protocol("lock acquire returned [7]".into()),
            Error::cancelled("a"),
            Error::ShuttingDown,
            Error::wait_ended("a"),
            Error::NoQuorum {
                name: "a".into(),
                answered: 1,
                quorum: 2,
            },
            Error::NotInitialized { name: "a".into() },
            Error::SequenceExhausted { key: "k".into() },
            Error::ClockOutOfRange { unix_seconds: 0 },
            Error::UnsupportedServer {
                version: "6.2.0".into(),
            },
            Error::UpgradeRefused { name: "a".into() },
            Error::NotReplicated {
                acked: 0,
                wanted: 1,
            },
            Error::NotPersisted {
                local: Some(false),
                acked: 0,
                wanted: 1,
            },
            Error::AofAcksUnavailable {
                reason: "the server has no WAITAOF".into(),
            },
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
        }
        let timeout = Error::Redis(std::io::Error::from(std::io::ErrorKind::TimedOut).into());
        assert_eq!(
            timeout.to_string(),
            "redis command failed: no reply within the response timeout"
        );
        let refused = every_variant().swap_remove(1).to_string();
        assert_eq!(
            refused,
            "cannot connect to redis://127.0.0.1:1: connection refused"
        );
    }

    #[test]
    fn an_aof_shortfall_says_which_files_had_the_write() {
        let message = |local, acked, wanted| {
            Error::NotPersisted {
                local,
                acked,
                wanted,
            }
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

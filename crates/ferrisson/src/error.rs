//! The crate's one error type.

/// What can go wrong talking to Redis or using a primitive.
///
/// Contention is not an error: `try_*` methods return `Ok(None)` when the primitive is
/// taken elsewhere. Messages never contain a Redis password.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A name, duration, count or URL the caller passed is not acceptable.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The client could not connect to Redis (`url` has its password redacted).
    #[error("cannot connect to {url}")]
    Connect {
        /// The Redis URL with its password replaced by `***`.
        url: String,
        /// What redis-rs reported.
        #[source]
        source: redis::RedisError,
    },

    /// A Redis command failed (connection lost, timeout, server error).
    #[error("redis command failed")]
    Redis(#[from] redis::RedisError),

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

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidArgument(message.into())
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

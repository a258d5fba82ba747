//! The one error type of every store, and the trait a store's own error implements.

use std::error::Error as StdError;
use std::time::Duration;

/// What a store's own error says about itself, so that a caller can act on it without
/// knowing which store answered.
///
/// A store crate wraps its client library's errors (redis-rs, sqlx, ...) and the failures
/// only it can have (a Redis replica that did not acknowledge a write, a ZooKeeper session
/// that expired) in one type implementing this trait; [`Error::Store`] carries it boxed.
///
/// ```
/// use ferrisson_core::{Error, StoreError};
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("the disk is full")]
/// struct DiskFull;
///
/// impl StoreError for DiskFull {
///     fn store(&self) -> &'static str {
///         "files"
///     }
/// }
///
/// let error = Error::store(DiskFull);
/// assert!(!error.is_transient());
/// assert!(error.store_error::<DiskFull>().is_some());
/// assert_eq!(error.to_string(), "the disk is full");
/// ```
pub trait StoreError: StdError + Send + Sync + 'static {
    /// The store's name, as URLs and the capability table spell it (`redis`, `postgres`,
    /// `mysql`, `zookeeper`, `etcd`, `memory`).
    fn store(&self) -> &'static str;

    /// True when another try later may succeed: the connection dropped, the server is
    /// failing over, a replica has not caught up. False by default.
    fn is_transient(&self) -> bool {
        false
    }

    /// True when the request may have been applied although no answer came back (a
    /// reply lost with the connection, a timeout): an acquire that ends with such an
    /// error may have taken the lock, a release may have released it. False by default.
    fn maybe_executed(&self) -> bool {
        false
    }

    /// True when the failure is the connection's (I/O, timeout, refused), not an answer
    /// of the store. False by default.
    fn is_connection(&self) -> bool {
        false
    }
}

/// What can go wrong acquiring, holding or releasing a primitive, on any store.
///
/// Contention is not an error: `try_*` methods return `Ok(None)` when the primitive is
/// taken elsewhere, `*_timeout` methods when the wait ran out. Messages never contain a
/// password; each says what happened once, cause included (so [`source()`] is `None`
/// for the variants that carry their cause in the message).
///
/// The variants are the same on every store; what only one store can report comes as
/// [`Error::Store`], whose [`StoreError`] says whether it is transient and whether the
/// request may have been applied, and which [`Error::store_error`] downcasts.
///
/// [`source()`]: std::error::Error::source
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A name, duration, count, URL or setting the caller passed is not acceptable; the
    /// message names the rule.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The client could not connect: refused, unresolvable host, no answer within the
    /// connect timeout, TLS handshake or credentials refused. `target` never shows a
    /// password.
    #[error("cannot connect to {target}: {cause}")]
    Connect {
        /// Where the client tried to connect (a URL with its password replaced by `***`).
        target: String,
        /// The store's own error (its reason is in the message).
        cause: Box<dyn StoreError>,
    },

    /// A bounded call got no answer in time: `name` is the primitive, `after` the bound.
    #[error("no answer about {name:?} within {after:?}")]
    TimedOut {
        /// The primitive's name.
        name: String,
        /// The bound that ran out.
        after: Duration,
    },

    /// The hold had already ended (its lease ran out, its session or connection ended)
    /// before the holder released it.
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

    /// The store answered something ferrisson never asks it to answer.
    #[error("unexpected reply from the store: {0}")]
    Protocol(String),

    /// The task that ran an operation in the background ended before it answered: the
    /// tokio runtime is shutting down, or the task panicked. Nothing is held on the
    /// caller's behalf; a hold the task may have taken ends with its lease or session.
    #[error("the operation on {name:?} was cancelled before it answered: its task ended")]
    Cancelled {
        /// The primitive's name.
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

    /// A semaphore was used before anyone set its permits, or after it was deleted:
    /// waiting would never succeed.
    #[error("semaphore {name:?} is not initialized: set its permits first")]
    NotInitialized {
        /// The semaphore's name.
        name: String,
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

    /// The store cannot do what was asked (list its locks, take a fair lock, ...).
    #[error("{store} cannot {what}")]
    Unsupported {
        /// The store's name.
        store: &'static str,
        /// What it cannot do, as a verb phrase ("list the locks it holds").
        what: String,
    },

    /// A URL names a store this build was compiled without.
    #[error("{scheme}:// URLs need ferrisson's `{feature}` feature: enable it in Cargo.toml")]
    StoreNotCompiled {
        /// The URL's scheme.
        scheme: String,
        /// The Cargo feature that adds the store.
        feature: &'static str,
    },

    /// A failure only one store can have; see [`StoreError`].
    #[error("{0}")]
    Store(Box<dyn StoreError>),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An [`Error::InvalidArgument`] with `message` naming the rule.
    ///
    /// ```
    /// let e = ferrisson_core::Error::invalid("name must not be empty");
    /// assert_eq!(e.to_string(), "invalid argument: name must not be empty");
    /// ```
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidArgument(message.into())
    }

    /// An [`Error::Store`] carrying `error`.
    ///
    /// ```
    /// # #[derive(Debug, thiserror::Error)] #[error("x")] struct E;
    /// # impl ferrisson_core::StoreError for E { fn store(&self) -> &'static str { "s" } }
    /// let e = ferrisson_core::Error::store(E);
    /// assert_eq!(e.store_name(), Some("s"));
    /// ```
    pub fn store(error: impl StoreError) -> Self {
        Self::Store(Box::new(error))
    }

    /// An [`Error::Cancelled`] for the primitive `name`.
    ///
    /// ```
    /// assert!(ferrisson_core::Error::cancelled("a").to_string().contains("cancelled"));
    /// ```
    pub fn cancelled(name: &str) -> Self {
        Self::Cancelled {
            name: name.to_owned(),
        }
    }

    /// An [`Error::WaitEnded`] for the primitive `name`.
    ///
    /// ```
    /// assert!(ferrisson_core::Error::wait_ended("a").to_string().contains("\"a\""));
    /// ```
    pub fn wait_ended(name: &str) -> Self {
        Self::WaitEnded {
            name: name.to_owned(),
        }
    }

    /// The store's own error, when this is one of type `E` ([`Error::Store`], or the
    /// cause of an [`Error::Connect`]).
    ///
    /// ```
    /// # #[derive(Debug, thiserror::Error)] #[error("x")] struct E;
    /// # impl ferrisson_core::StoreError for E { fn store(&self) -> &'static str { "s" } }
    /// let e = ferrisson_core::Error::store(E);
    /// assert!(e.store_error::<E>().is_some());
    /// assert!(ferrisson_core::Error::ShuttingDown.store_error::<E>().is_none());
    /// ```
    pub fn store_error<E: StoreError>(&self) -> Option<&E> {
        let error: &(dyn StdError + 'static) = match self {
            Self::Store(e) | Self::Connect { cause: e, .. } => &**e,
            _ => return None,
        };
        error.downcast_ref::<E>()
    }

    /// The name of the store whose own error this is, if it is one.
    ///
    /// ```
    /// assert_eq!(ferrisson_core::Error::ShuttingDown.store_name(), None);
    /// ```
    pub fn store_name(&self) -> Option<&'static str> {
        match self {
            Self::Store(e) | Self::Connect { cause: e, .. } => Some(e.store()),
            _ => None,
        }
    }

    /// True when another try later may succeed: the store could not be reached or could
    /// not serve the call right now (a connection lost, a master failing over, a call
    /// that timed out).
    ///
    /// ```
    /// use std::time::Duration;
    /// use ferrisson_core::Error;
    ///
    /// let timeout = Error::TimedOut { name: "a".into(), after: Duration::from_secs(1) };
    /// assert!(timeout.is_transient());
    /// assert!(!Error::invalid("no").is_transient());
    /// ```
    pub fn is_transient(&self) -> bool {
        match self {
            Self::TimedOut { .. } => true,
            Self::Store(e) | Self::Connect { cause: e, .. } => e.is_transient(),
            _ => false,
        }
    }

    /// True when the request may have been applied although no answer came back: an
    /// acquire that fails this way may have taken the lock (ferrisson undoes it where the
    /// store lets it), a release may have released it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ferrisson_core::Error;
    ///
    /// assert!(Error::TimedOut { name: "a".into(), after: Duration::from_secs(1) }.maybe_executed());
    /// assert!(!Error::ShuttingDown.maybe_executed());
    /// ```
    pub fn maybe_executed(&self) -> bool {
        match self {
            Self::TimedOut { .. } => true,
            Self::Store(e) => e.maybe_executed(),
            _ => false,
        }
    }

    /// True when the error came from the connection (I/O, timeout, refused) rather than
    /// from what the store answered; the operation may or may not have been applied.
    ///
    /// ```
    /// assert!(!ferrisson_core::Error::invalid("x").is_connection_error());
    /// ```
    pub fn is_connection_error(&self) -> bool {
        match self {
            Self::Connect { .. } | Self::TimedOut { .. } => true,
            Self::Store(e) => e.is_connection(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("connection refused")]
    struct Refused;

    impl StoreError for Refused {
        fn store(&self) -> &'static str {
            "test"
        }

        fn is_transient(&self) -> bool {
            true
        }

        fn is_connection(&self) -> bool {
            true
        }
    }

    fn every_variant() -> Vec<Error> {
        vec![
            Error::invalid("name must not be empty"),
            Error::Connect {
                target: "test://127.0.0.1:1".into(),
                cause: Box::new(Refused),
            },
            Error::TimedOut {
                name: "a".into(),
                after: Duration::from_millis(250),
            },
            Error::LeaseExpired { name: "a".into() },
            Error::NotOwner { name: "a".into() },
            Error::Protocol("lock acquire returned [7]".into()),
            Error::cancelled("a"),
            Error::ShuttingDown,
            Error::wait_ended("a"),
            Error::NotInitialized { name: "a".into() },
            Error::UpgradeRefused { name: "a".into() },
            Error::Unsupported {
                store: "test",
                what: "list the locks it holds".into(),
            },
            Error::StoreNotCompiled {
                scheme: "zk".into(),
                feature: "zookeeper",
            },
            Error::store(Refused),
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
        assert_eq!(
            every_variant().swap_remove(1).to_string(),
            "cannot connect to test://127.0.0.1:1: connection refused"
        );
        assert_eq!(
            every_variant().swap_remove(12).to_string(),
            "zk:// URLs need ferrisson's `zookeeper` feature: enable it in Cargo.toml"
        );
    }

    #[test]
    fn a_store_error_answers_through_the_error() {
        let error = Error::store(Refused);
        assert!(error.is_transient());
        assert!(error.is_connection_error());
        assert!(!error.maybe_executed());
        assert_eq!(error.store_name(), Some("test"));
        assert!(error.store_error::<Refused>().is_some());
        assert!(format!("{error:?}").contains("Refused"), "{error:?}");
    }
}

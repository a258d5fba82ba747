//! The ZooKeeper store's own errors, carried as `ferrisson_core::Error::Store`.

use ferrisson_core::StoreError;

use crate::STORE;

/// A failure only the ZooKeeper store has: what the client library or the server said,
/// with the operation and node it concerned.
///
/// ```
/// use ferrisson_zookeeper::ZkError;
///
/// let error = ZkError::new("create", "/locks/a", zookeeper_client::Error::ConnectionLoss);
/// assert!(ferrisson_core::StoreError::is_transient(&error));
/// assert_eq!(error.to_string(), "zookeeper create \"/locks/a\": connection to server has lost");
/// ```
#[derive(Debug, thiserror::Error)]
#[error("zookeeper {op} {path:?}: {source}")]
pub struct ZkError {
    op: &'static str,
    /// The node, escaped when printed (`{:?}`).
    path: String,
    source: zookeeper_client::Error,
}

impl ZkError {
    /// The failure of `op` on `path`.
    pub fn new(op: &'static str, path: &str, source: zookeeper_client::Error) -> Self {
        Self {
            op,
            path: path.to_owned(),
            source,
        }
    }

    /// What the client library said.
    ///
    /// ```
    /// use ferrisson_zookeeper::ZkError;
    /// let error = ZkError::new("delete", "/a", zookeeper_client::Error::NoNode);
    /// assert_eq!(error.cause(), &zookeeper_client::Error::NoNode);
    /// ```
    pub fn cause(&self) -> &zookeeper_client::Error {
        &self.source
    }

    /// The operation that failed (`create`, `delete`, `list`, ...).
    ///
    /// ```
    /// use ferrisson_zookeeper::ZkError;
    /// assert_eq!(ZkError::new("list", "/a", zookeeper_client::Error::NoNode).op(), "list");
    /// ```
    pub fn op(&self) -> &'static str {
        self.op
    }
}

impl StoreError for ZkError {
    fn store(&self) -> &'static str {
        STORE
    }

    fn is_transient(&self) -> bool {
        use zookeeper_client::Error as E;
        matches!(
            self.source,
            E::ConnectionLoss
                | E::Custom(_)
                | E::Timeout
                | E::Throttled
                | E::NoHosts
                | E::SessionMoved
                // The client opens a new session: the next call uses it.
                | E::SessionExpired
        )
    }

    fn maybe_executed(&self) -> bool {
        use zookeeper_client::Error as E;
        matches!(self.source, E::ConnectionLoss | E::Custom(_) | E::Timeout)
    }

    fn is_connection(&self) -> bool {
        use zookeeper_client::Error as E;
        matches!(
            self.source,
            E::ConnectionLoss
                | E::Custom(_)
                | E::Timeout
                | E::NoHosts
                | E::SessionExpired
                | E::ClientClosed
                | E::AuthFailed
        )
    }
}

/// True when a request failed because its connection broke while it was in flight, so
/// that it may or may not have been run: `ConnectionLoss`, or the client library's
/// `Custom` error, which is what it hands the requests in flight when their socket fails
/// ("Connection reset by peer", as when the ensemble's leader dies) or stops answering.
pub(crate) fn connection_broke(error: &zookeeper_client::Error) -> bool {
    matches!(
        error,
        zookeeper_client::Error::ConnectionLoss | zookeeper_client::Error::Custom(_)
    )
}

/// `ferrisson_core::Error::Store` for `op` on `path`.
pub(crate) fn zk(
    op: &'static str,
    path: &str,
    source: zookeeper_client::Error,
) -> ferrisson_core::Error {
    ferrisson_core::Error::store(ZkError::new(op, path, source))
}

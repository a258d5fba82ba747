//! The etcd store's own error: what the etcd client library reported, and whether a
//! caller may try again.

use ferrisson_core::{Error, StoreError};
use tonic::Code;

/// A failure of a call to etcd, as the `etcd-client` library reported it.
///
/// ```
/// use ferrisson_core::StoreError;
/// use ferrisson_etcd::EtcdError;
///
/// let error = EtcdError::from(etcd_client::Error::InvalidArgs("no endpoints".into()));
/// assert_eq!(error.store(), "etcd");
/// assert!(!error.is_transient());
/// ```
#[derive(Debug, thiserror::Error)]
#[error("etcd: {0}")]
pub struct EtcdError(#[from] pub etcd_client::Error);

impl EtcdError {
    fn code(&self) -> Option<Code> {
        match &self.0 {
            etcd_client::Error::GRpcStatus(status) => Some(status.code()),
            _ => None,
        }
    }

    /// A call cut short because its connection closed under it (the member died):
    /// `Cancelled`, or `Unknown` when the request was written to a connection already
    /// broken ("broken pipe"), caused by a transport error.
    fn is_cancelled_by_the_connection(&self) -> bool {
        match &self.0 {
            etcd_client::Error::GRpcStatus(status) => {
                matches!(status.code(), Code::Cancelled | Code::Unknown)
                    && std::error::Error::source(status).is_some_and(|source| {
                        source.downcast_ref::<tonic::transport::Error>().is_some()
                    })
            }
            _ => false,
        }
    }
}

impl StoreError for EtcdError {
    fn store(&self) -> &'static str {
        crate::STORE
    }

    fn is_transient(&self) -> bool {
        self.is_connection()
            || matches!(
                self.code(),
                Some(Code::DeadlineExceeded | Code::ResourceExhausted | Code::Aborted)
            )
    }

    fn maybe_executed(&self) -> bool {
        matches!(&self.0, etcd_client::Error::IoError(_))
            || matches!(
                self.code(),
                Some(Code::Unavailable | Code::DeadlineExceeded | Code::Unknown | Code::Cancelled)
            )
    }

    fn is_connection(&self) -> bool {
        matches!(
            &self.0,
            etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_)
        ) || matches!(self.code(), Some(Code::Unavailable))
            || self.is_cancelled_by_the_connection()
    }
}

/// The store-neutral error for a failed etcd call.
pub(crate) fn store(error: etcd_client::Error) -> Error {
    Error::store(EtcdError(error))
}

/// True for a failure a wait should ride out by asking again: the connection's, or a
/// stream broken under the call.
pub(crate) fn is_retryable(error: &etcd_client::Error) -> bool {
    matches!(
        error,
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_)
    ) || matches!(
        error,
        etcd_client::Error::GRpcStatus(status) if matches!(
            status.code(),
            Code::Unavailable | Code::DeadlineExceeded | Code::Unknown | Code::Cancelled
        )
    )
}

//! The storage-side check that makes fencing tokens useful, for a value kept in Redis.

use crate::api::error::Result;
use crate::api::fencing::{FencedWrite, FencingToken};
use crate::backend::client::Client;
use crate::backend::keys::validate_resource;
use crate::backend::scripts::fenced::FencedSet;

impl Client {
    /// Stores `value` under `resource` unless a writer with a newer fencing token has
    /// stored before (equal tokens are accepted: the same holder writing again).
    ///
    /// The resource is a hash `{value, fence}` under the namespaced key `resource`.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// let guard = client.lock("ledger")?.lock().await?;
    /// let write = client.fenced_set("ledger:balance", b"100", guard.fencing_token()).await?;
    /// assert!(write.is_accepted());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid resource
    /// name, [`Error::Store`](crate::Error::Store) when Redis cannot be reached.
    pub async fn fenced_set(
        &self,
        resource: &str,
        value: &[u8],
        token: FencingToken,
    ) -> Result<FencedWrite> {
        validate_resource(resource)?;
        self.connection()
            .run(&FencedSet {
                key: &self.namespaced(resource),
                value,
                token,
            })
            .await
            .map(|reply| reply.0)
    }

    /// Reads a value stored by [`Client::fenced_set`](crate::Client::fenced_set) and the
    /// token that wrote it; `None` if nothing was stored.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid resource
    /// name, [`Error::Store`](crate::Error::Store) when Redis cannot be reached.
    pub async fn fenced_get(&self, resource: &str) -> Result<Option<(Vec<u8>, FencingToken)>> {
        validate_resource(resource)?;
        let (value, fence): (Option<Vec<u8>>, Option<u64>) = self
            .connection()
            .query_resendable(
                redis::cmd("HMGET")
                    .arg(self.namespaced(resource))
                    .arg("value")
                    .arg("fence"),
            )
            .await?;
        Ok(value.zip(fence.map(FencingToken::new)))
    }
}

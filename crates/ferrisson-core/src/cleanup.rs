//! Work a `Drop` needs but cannot await: it runs on a spawned task, so dropping a guard
//! never blocks (C-DTOR-BLOCK; see sqlx's `PoolConnection`).

use std::future::Future;

use crate::error::Result;

/// Spawns `work` on the current tokio runtime.
///
/// `name` is the primitive's name, `what` says what the work does and `otherwise` what
/// becomes of the state when it fails or cannot run (outside a runtime): both end up in
/// the log line, which is a warning since something is then left to expire or leak.
pub fn spawn_cleanup<T, F>(name: &str, what: &'static str, otherwise: &'static str, work: F)
where
    F: Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            let name = name.to_owned();
            runtime.spawn(async move {
                if let Err(e) = work.await {
                    tracing::warn!(name = %name, error = %e, "{what} failed; {otherwise}");
                }
            });
        }
        Err(_) => {
            tracing::warn!(name = %name, "{what} skipped outside a tokio runtime; {otherwise}");
        }
    }
}

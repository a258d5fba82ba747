//! Waiting for a state the server announces to nobody.

use std::time::Duration;

use anyhow::bail;

/// How long a state may take to show up before the scenario gives up.
const PATIENCE: Duration = Duration::from_secs(5);

/// Polls `reached` every millisecond until it answers `true`, for a state the server
/// publishes no event for (an acquire that ran, a queue entry). `what` names the state
/// for the error.
///
/// # Errors
///
/// When `reached` fails, or still answers `false` after five seconds.
pub(crate) async fn poll_until<F, Fut>(what: &str, mut reached: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !reached().await? {
        if tokio::time::Instant::now() >= deadline {
            bail!("{what} never showed within {PATIENCE:?}");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

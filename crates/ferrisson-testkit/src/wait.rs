//! Waiting for a server's own state to reach a condition, with a deadline.

use std::io;
use std::time::{Duration, Instant};

/// How often a condition on the servers' state is checked again.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Checks `condition` until it returns `Ok` or `limit` has passed since the first check.
///
/// `Err(reason)` from `condition` means "not yet"; the last reason is in the timeout
/// error, so a test that fails says what the servers still disagreed on.
pub(crate) fn poll_until<T>(
    what: &str,
    limit: Duration,
    mut condition: impl FnMut() -> Result<T, String>,
) -> io::Result<T> {
    let deadline = Instant::now() + limit;
    loop {
        match condition() {
            Ok(value) => return Ok(value),
            Err(reason) if Instant::now() >= deadline => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{what}: not done after {limit:?}: {reason}"),
                ));
            }
            Err(_) => std::thread::sleep(POLL_INTERVAL),
        }
    }
}

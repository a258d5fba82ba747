//! Undoing what a request left in Redis when the future that sent it is dropped: the
//! cancellation safety of every acquire.
//!
//! An acquire can reach Redis after its caller stopped waiting for it (a `select!` that
//! took another branch, a timeout, an aborted task). Two ways to keep that from leaving
//! a hold, a queue entry or a writer's intent behind:
//!
//! - [`UndoOnDrop`]: armed before sending, disarmed once the reply is in. Dropped armed,
//!   it runs an undo that is correct whether or not the request landed (remove this
//!   attempt's own owner id, which nobody else shares). No task on the common path.
//! - [`send_or_undo`]: the request runs on a spawned task; if nobody takes its reply, the
//!   task undoes exactly what the reply says was done. For requests whose undo depends on
//!   the reply (a re-entry added one hold to a hold that other guards share).

use std::future::Future;

use tokio::sync::oneshot;

use crate::api::error::{Error, Result};
use crate::primitive::cleanup::spawn_cleanup;

/// Runs `undo` on a spawned task if dropped while armed; see the module docs.
pub(crate) struct UndoOnDrop<'a, F, Fut>
where
    F: Fn() -> Fut,
    Fut: Future + Send + 'static,
{
    name: &'a str,
    what: &'static str,
    otherwise: &'static str,
    undo: Option<F>,
}

impl<'a, F, Fut, T> UndoOnDrop<'a, F, Fut>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    /// Arms `undo` for the primitive `name`: `what` it does and what happens `otherwise`
    /// (when it fails) go to the warning a failure logs.
    pub(crate) fn arm(name: &'a str, what: &'static str, otherwise: &'static str, undo: F) -> Self {
        Self {
            name,
            what,
            otherwise,
            undo: Some(undo),
        }
    }

    /// The request settled: nothing to undo.
    pub(crate) fn disarm(mut self) {
        self.undo = None;
    }

    /// Runs the undo now and waits for it; if this future is dropped first, the undo runs
    /// on a spawned task instead.
    pub(crate) async fn run_now(mut self) -> Result<T> {
        // Still armed while it runs: dropped mid-way, the same undo is spawned again
        // (undoes are safe to repeat).
        let outcome = match &self.undo {
            Some(undo) => undo().await,
            None => return Err(Error::cancelled(self.name)),
        };
        self.undo = None;
        outcome
    }
}

impl<F, Fut> Drop for UndoOnDrop<'_, F, Fut>
where
    F: Fn() -> Fut,
    Fut: Future + Send + 'static,
{
    fn drop(&mut self) {
        if let Some(undo) = self.undo.take() {
            let work = undo();
            spawn_cleanup(self.name, self.what, self.otherwise, async move {
                work.await;
                Ok(())
            });
        }
    }
}

/// Runs `request` on a spawned task and returns its reply; if the caller's future was
/// dropped before the reply arrived, `undo(reply)` runs on that task instead.
///
/// Spawns at once and returns a future that only waits for the reply: an `async fn`
/// would carry `request` in its own state as well.
///
/// # Cancel safety
///
/// This is what makes the caller cancel safe: dropping the returned future leaves the
/// request to finish and be undone.
pub(crate) fn send_or_undo<T, Req, Undo, UndoFut>(
    name: &str,
    request: Req,
    undo: Undo,
) -> impl Future<Output = Result<T>> + use<T, Req, Undo, UndoFut>
where
    T: Send + 'static,
    Req: Future<Output = Result<T>> + Send + 'static,
    Undo: FnOnce(T) -> UndoFut + Send + 'static,
    UndoFut: Future<Output = Result<()>> + Send,
{
    let (tx, rx) = oneshot::channel();
    let task_name = name.to_owned();
    tokio::spawn(async move {
        if let Err(Ok(reply)) = tx.send(request.await)
            && let Err(e) = undo(reply).await
        {
            tracing::warn!(name = %task_name, error = %e, "undoing an abandoned acquire failed; what it took expires with its lease");
        }
    });
    let name = name.to_owned();
    async move { rx.await.map_err(|_| Error::cancelled(&name))? }
}

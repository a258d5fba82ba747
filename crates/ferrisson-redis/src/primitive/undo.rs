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
//! - [`send_or_undo`]: if the caller goes away with the request in flight, the request is
//!   moved onto a spawned task, which waits for its reply and undoes exactly what the
//!   reply says was done. For requests whose undo depends on the reply (a re-entry added
//!   one hold to a hold that other guards share, permits taken from a semaphore). No
//!   task on the common path either.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

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
            // Boxed: rare (a write not acknowledged as required), and unboxed its
            // request would be in every acquire's future (ARCHITECTURE.md, future sizes).
            Some(undo) => Box::pin(undo()).await,
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

/// Sends `request` and returns its reply; if the caller's future is dropped before the
/// reply arrived, the request is handed to a spawned task that waits for the reply and
/// runs `undo(reply)` on it.
///
/// Nothing is spawned while the caller waits for its reply: the request is boxed, so
/// that a drop can move it, still in flight, onto a task of its own (one allocation per
/// call, where spawning every request cost a task, a channel and a wake-up across
/// threads). A request never polled has sent nothing and is dropped as it is.
///
/// # Cancel safety
///
/// This is what makes the caller cancel safe: dropping the returned future leaves the
/// request to finish and be undone.
pub(crate) fn send_or_undo<T, Req, Undo, UndoFut>(
    name: &str,
    request: Req,
    undo: Undo,
) -> SendOrUndo<'_, T, Req, Undo, UndoFut>
where
    T: Send + 'static,
    Req: Future<Output = Result<T>> + Send + 'static,
    Undo: FnOnce(T) -> UndoFut + Send + 'static,
    UndoFut: Future<Output = Result<()>> + Send,
{
    SendOrUndo {
        name,
        request: Some(Box::pin(request)),
        undo: Some(undo),
        polled: false,
        _undo: PhantomData,
    }
}

/// The future of [`send_or_undo`].
pub(crate) struct SendOrUndo<'a, T, Req, Undo, UndoFut>
where
    T: Send + 'static,
    Req: Future<Output = Result<T>> + Send + 'static,
    Undo: FnOnce(T) -> UndoFut + Send + 'static,
    UndoFut: Future<Output = Result<()>> + Send,
{
    name: &'a str,
    request: Option<Pin<Box<Req>>>,
    undo: Option<Undo>,
    /// Whether the request was polled, so may have been sent.
    polled: bool,
    _undo: PhantomData<fn() -> UndoFut>,
}

// Nothing in it is pinned: the request is boxed, and `undo` is only moved, never polled.
impl<T, Req, Undo, UndoFut> Unpin for SendOrUndo<'_, T, Req, Undo, UndoFut>
where
    T: Send + 'static,
    Req: Future<Output = Result<T>> + Send + 'static,
    Undo: FnOnce(T) -> UndoFut + Send + 'static,
    UndoFut: Future<Output = Result<()>> + Send,
{
}

impl<T, Req, Undo, UndoFut> Future for SendOrUndo<'_, T, Req, Undo, UndoFut>
where
    T: Send + 'static,
    Req: Future<Output = Result<T>> + Send + 'static,
    Undo: FnOnce(T) -> UndoFut + Send + 'static,
    UndoFut: Future<Output = Result<()>> + Send,
{
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let this = &mut *self;
        let Some(request) = this.request.as_mut() else {
            return Poll::Ready(Err(Error::cancelled(this.name)));
        };
        this.polled = true;
        let reply = ready!(request.as_mut().poll(cx));
        this.request = None;
        this.undo = None;
        Poll::Ready(reply)
    }
}

impl<T, Req, Undo, UndoFut> Drop for SendOrUndo<'_, T, Req, Undo, UndoFut>
where
    T: Send + 'static,
    Req: Future<Output = Result<T>> + Send + 'static,
    Undo: FnOnce(T) -> UndoFut + Send + 'static,
    UndoFut: Future<Output = Result<()>> + Send,
{
    fn drop(&mut self) {
        let (Some(request), Some(undo)) = (self.request.take(), self.undo.take()) else {
            return;
        };
        if !self.polled {
            return;
        }
        spawn_cleanup(
            self.name,
            "undoing an abandoned acquire",
            "what it took expires with its lease",
            async move {
                if let Ok(reply) = request.await {
                    undo(reply).await?;
                }
                Ok(())
            },
        );
    }
}

//! The one subscription per client that wakes every local waiter.
//!
//! Waiters join a channel; the first joiner makes the client `SUBSCRIBE` (on the shared
//! RESP3 connection, so the connection count never grows with waiters), and half a second
//! after the last one left it sends `UNSUBSCRIBE`. One actor task issues both, in order, so a late `UNSUBSCRIBE`
//! can never undo a newer `SUBSCRIBE`, and a waiter dropped mid-subscribe leaks nothing.
//! A message wakes one waiter of its channel (a release frees one lock), or as many as its
//! payload says: a number (permits released) or `all` (a latch reached zero); a lost
//! connection wakes them all, since messages may have been missed while it was down.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::{Notify, mpsc, oneshot};

use crate::error::{Error, Result};

#[derive(Default)]
struct Channels {
    by_name: HashMap<String, ChannelWaiters>,
}

struct ChannelWaiters {
    notify: Arc<Notify>,
    members: usize,
}

enum Op {
    Subscribe(String, oneshot::Sender<redis::RedisResult<()>>),
    Unsubscribe(String),
}

type Shared = Arc<Mutex<Channels>>;

fn lock(shared: &Shared) -> MutexGuard<'_, Channels> {
    // A panic while holding this lock cannot leave the map inconsistent (every update is
    // a single insert/remove/counter change), so a poisoned lock is still usable.
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The client's channel registry and the sender side of its actor.
pub(crate) struct Subscriptions {
    shared: Shared,
    ops: mpsc::UnboundedSender<Op>,
    ops_rx: Mutex<Option<mpsc::UnboundedReceiver<Op>>>,
}

impl Subscriptions {
    /// The registry and the push handler to install on the connection.
    pub(crate) fn new() -> (
        Self,
        impl Fn(PushInfo) -> std::result::Result<(), redis::aio::SendError> + Send + Sync + 'static,
    ) {
        let shared: Shared = Arc::default();
        let (ops, ops_rx) = mpsc::unbounded_channel();
        let for_pushes = Arc::clone(&shared);
        let on_push = move |push: PushInfo| {
            dispatch(&for_pushes, &push);
            Ok(())
        };
        let subscriptions = Self {
            shared,
            ops,
            ops_rx: Mutex::new(Some(ops_rx)),
        };
        (subscriptions, on_push)
    }

    /// Starts the actor that issues `SUBSCRIBE`/`UNSUBSCRIBE`; it ends with the client.
    pub(crate) fn start(&self, conn: ConnectionManager) {
        let rx = self
            .ops_rx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(rx) = rx {
            tokio::spawn(run_actor(conn, rx, Arc::clone(&self.shared)));
        }
    }

    /// Joins `channel` and returns once the server confirmed the subscription.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the channel as if `join` had not been called: the
    /// actor finishes any `SUBSCRIBE` it started and unsubscribes when nobody is left.
    pub(crate) async fn join(&self, channel: &str) -> Result<Subscription> {
        let notify = {
            let mut channels = lock(&self.shared);
            let entry = channels
                .by_name
                .entry(channel.to_owned())
                .or_insert_with(|| ChannelWaiters {
                    notify: Arc::new(Notify::new()),
                    members: 0,
                });
            entry.members += 1;
            Arc::clone(&entry.notify)
        };
        // From here on, dropping `subscription` undoes the membership.
        let subscription = Subscription {
            channel: channel.to_owned(),
            notify,
            shared: Arc::clone(&self.shared),
            ops: self.ops.clone(),
        };
        let (tx, rx) = oneshot::channel();
        self.ops
            .send(Op::Subscribe(channel.to_owned(), tx))
            .map_err(|_| Error::Protocol("client is shutting down".into()))?;
        match rx.await {
            Ok(Ok(())) => Ok(subscription),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(Error::Protocol("client is shutting down".into())),
        }
    }

    /// Number of channels with local waiters (for tests and inspection).
    pub(crate) fn channel_count(&self) -> usize {
        lock(&self.shared).by_name.len()
    }
}

/// Membership of one waiter in one channel; leaving is dropping it.
pub(crate) struct Subscription {
    channel: String,
    notify: Arc<Notify>,
    shared: Shared,
    ops: mpsc::UnboundedSender<Op>,
}

impl Subscription {
    /// A wake-up of this channel to await, registered as a waiter once enabled
    /// (`Notified::enable`), so a message that arrives before it is awaited still counts.
    pub(crate) fn listen(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }

    /// Waits until a message on the channel wakes this waiter or `timeout` passes.
    /// Returns true when woken by a message.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a wake-up this waiter took but did not use passes to another waiter.
    pub(crate) async fn wait(&self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.notify.notified())
            .await
            .is_ok()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let last = {
            let mut channels = lock(&self.shared);
            match channels.by_name.get_mut(&self.channel) {
                Some(entry) if entry.members > 1 => {
                    entry.members -= 1;
                    false
                }
                Some(_) => {
                    channels.by_name.remove(&self.channel);
                    true
                }
                None => false,
            }
        };
        if last {
            // The actor re-checks membership before it unsubscribes: a waiter may join
            // again before this message is handled.
            let _ = self
                .ops
                .send(Op::Unsubscribe(std::mem::take(&mut self.channel)));
        }
    }
}

fn dispatch(shared: &Shared, push: &PushInfo) {
    match push.kind {
        PushKind::Message => {
            let Some(Value::BulkString(channel)) = push.data.first() else {
                return;
            };
            let Ok(channel) = std::str::from_utf8(channel) else {
                return;
            };
            if let Some(waiters) = lock(shared).by_name.get(channel) {
                match wakeups(push.data.get(1)) {
                    Wakeups::All => {
                        waiters.notify.notify_waiters();
                        // ...and one stored wake-up for a waiter that is between two waits.
                        waiters.notify.notify_one();
                    }
                    // More wake-ups than members would only pile up as one stored permit.
                    Wakeups::Some(n) => {
                        for _ in 0..n.min(waiters.members) {
                            waiters.notify.notify_one();
                        }
                    }
                }
            }
        }
        PushKind::Disconnection => {
            for waiters in lock(shared).by_name.values() {
                waiters.notify.notify_waiters();
                // ...and one stored wake-up for a waiter that is between two waits.
                waiters.notify.notify_one();
            }
        }
        _ => {}
    }
}

/// How many local waiters one message wakes.
#[derive(Debug, PartialEq, Eq)]
enum Wakeups {
    Some(usize),
    All,
}

/// Reads a message payload: a decimal count (a semaphore release of that many permits),
/// `all` (a latch reaching zero, a deleted primitive), anything else one (a lock release).
fn wakeups(payload: Option<&Value>) -> Wakeups {
    let text = match payload {
        Some(Value::BulkString(bytes)) => std::str::from_utf8(bytes).ok(),
        _ => None,
    };
    match text {
        Some("all") => Wakeups::All,
        Some(text) => text.parse().map_or(Wakeups::Some(1), Wakeups::Some),
        None => Wakeups::Some(1),
    }
}

/// How long a channel stays subscribed after its last local waiter left. A contended
/// lock's waiters come and go with every hand-off; lingering saves a SUBSCRIBE and an
/// UNSUBSCRIBE round trip each time, and a waiter that re-joins is ready at once.
const LINGER: Duration = Duration::from_millis(500);

async fn run_actor(
    mut conn: ConnectionManager,
    mut ops: mpsc::UnboundedReceiver<Op>,
    shared: Shared,
) {
    let mut subscribed: HashSet<String> = HashSet::new();
    // Channels nobody waits on any more, in the order they were left, with when they go.
    let mut leaving: VecDeque<(tokio::time::Instant, String)> = VecDeque::new();
    loop {
        let next_leave = leaving.front().map(|(at, _)| *at);
        let op = tokio::select! {
            op = ops.recv() => match op {
                Some(op) => op,
                None => return,
            },
            () = async {
                match next_leave {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {
                if let Some((_, channel)) = leaving.pop_front() {
                    let still_wanted = lock(&shared).by_name.contains_key(&channel);
                    let queued_again = leaving.iter().any(|(_, c)| *c == channel);
                    if !still_wanted && !queued_again && subscribed.remove(&channel)
                        && let Err(e) = conn.unsubscribe(&channel).await
                    {
                        tracing::debug!(error = %e, "unsubscribe failed; the server drops it with the connection");
                    }
                }
                continue;
            }
        };
        match op {
            Op::Subscribe(channel, reply) => {
                let result = if subscribed.contains(&channel) {
                    Ok(())
                } else {
                    let result = conn.subscribe(&channel).await;
                    if result.is_ok() {
                        subscribed.insert(channel);
                    }
                    result
                };
                let _ = reply.send(result);
            }
            Op::Unsubscribe(channel) => {
                if subscribed.contains(&channel) {
                    leaving.push_back((tokio::time::Instant::now() + LINGER, channel));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Value, Wakeups, wakeups};

    fn text(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn payload_says_how_many_to_wake() {
        assert_eq!(wakeups(Some(&text("released"))), Wakeups::Some(1));
        assert_eq!(wakeups(Some(&text("3"))), Wakeups::Some(3));
        assert_eq!(wakeups(Some(&text("0"))), Wakeups::Some(0));
        assert_eq!(wakeups(Some(&text("-2"))), Wakeups::Some(1));
        assert_eq!(wakeups(Some(&text("all"))), Wakeups::All);
        assert_eq!(wakeups(None), Wakeups::Some(1));
    }
}

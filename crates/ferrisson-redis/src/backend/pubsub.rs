//! The one subscription per client that wakes every local waiter.
//!
//! Waiters join a channel; the first joiner makes the client `SSUBSCRIBE` (a shard
//! channel: the scripts `SPUBLISH`, so on a cluster a release reaches only the lock's
//! shard), and half a second after the last one left it sends `SUNSUBSCRIBE`. Where the
//! subscription lives is the connection seam's business (on one server, the shared RESP3
//! connection, so the connection count never grows with waiters). One actor task issues both, in order, so a late `UNSUBSCRIBE`
//! can never undo a newer `SUBSCRIBE`, and a waiter dropped mid-subscribe leaks nothing.
//! A message wakes one waiter of its channel (a release frees one lock), or as many as its
//! payload says: a number (permits released) or `all` (a latch reached zero); a lost
//! connection wakes them all, since messages may have been missed while it was down.
//! A `Lock` or `SimpleLock` wakes one waiting client on a channel of that client's own;
//! such a message arriving once no local task waits there (the channel lingers) is passed
//! on to the next waiting client (`wake_withdraw.lua`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use redis::{PushInfo, PushKind, Value};
use tokio::sync::{Notify, mpsc, oneshot};

use crate::api::error::{Error, Result, command_error};
use crate::backend::connection::Connection;
use crate::backend::connection::push::{PushHandler, PushTarget};
use crate::backend::keys::WakeNames;
use crate::backend::scripts::wake::WakeWithdraw;
use crate::observe::metrics;

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
    /// The server dropped this subscription (its slot moved to another node): subscribe
    /// again, where the channel lives now, if anyone still waits on it.
    Resubscribe(String),
    /// The subscription connection was replaced (a failover): subscribe every channel
    /// again on the new one.
    ResubscribeAll,
    /// A release woke this client on its own channel of a `Lock` or `SimpleLock`
    /// (`{name}:c:<client id>`) while none of its tasks waits there any more (the
    /// subscription lingers):
    /// pass the wake-up on, so that another client's waiter does not sleep through it.
    PassOn(String),
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
    /// The client's id among the waiting clients of a lock that wakes one client.
    wake_id: Arc<str>,
}

/// What the connections hand push messages to: releases wake local waiters, a
/// disconnection wakes them all.
struct Dispatch {
    shared: Shared,
    /// Weak: the connections hold this handler, and the actor holds the connection; a
    /// strong sender here would keep the actor (and every connection) alive after the
    /// client is gone.
    ops: mpsc::WeakUnboundedSender<Op>,
    /// `:c:<client id>`: how the client's own wake-up channels of a lock that wakes one
    /// client end.
    wake_suffix: String,
}

impl Dispatch {
    /// Hands `op` to the actor, unless the client is gone (then nobody needs it).
    fn send(&self, op: Op) {
        if let Some(ops) = self.ops.upgrade() {
            let _ = ops.send(op);
        }
    }
}

impl PushTarget for Dispatch {
    fn push(&self, push: PushInfo) {
        if let Some(op) = dispatch(&self.shared, &self.wake_suffix, &push) {
            self.send(op);
        }
    }

    fn connection_replaced(&self) {
        wake_all(&self.shared);
        self.send(Op::ResubscribeAll);
    }
}

impl Subscriptions {
    /// The registry and the push handler to install on the connection.
    ///
    /// `wake_id` is the client's id among the waiting clients of a lock that wakes one
    /// client (`Lock`, `SimpleLock`).
    pub(crate) fn new(wake_id: &str) -> (Self, PushHandler) {
        let shared: Shared = Arc::default();
        let (ops, ops_rx) = mpsc::unbounded_channel();
        let handler = PushHandler::new(Dispatch {
            shared: Arc::clone(&shared),
            ops: ops.downgrade(),
            wake_suffix: WakeNames::own_suffix(wake_id),
        });
        let subscriptions = Self {
            shared,
            ops,
            wake_id: Arc::from(wake_id),
            ops_rx: Mutex::new(Some(ops_rx)),
        };
        (subscriptions, handler)
    }

    /// Starts the actor that issues `SUBSCRIBE`/`UNSUBSCRIBE`; it ends with the client.
    pub(crate) fn start(&self, connection: Connection) {
        let rx = self
            .ops_rx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(rx) = rx {
            tokio::spawn(run_actor(
                connection,
                rx,
                Arc::clone(&self.shared),
                Arc::clone(&self.wake_id),
            ));
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
        let mut subscription = Subscription {
            channel: channel.to_owned(),
            notify,
            shared: Arc::clone(&self.shared),
            ops: self.ops.clone(),
            confirmed: false,
        };
        match subscription.confirm().await {
            // Redis unreachable or in transition: the waiter stays a member, rechecks
            // often, and subscribes again later (`Subscription::confirm`).
            Err(e) if e.is_transient() => Ok(subscription),
            outcome => outcome.map(|()| subscription),
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
    /// Whether the server confirmed the channel's subscription for this waiter.
    confirmed: bool,
}

impl Subscription {
    /// Whether the server confirmed the subscription: until then, a release message may
    /// not reach this waiter, which must recheck on its own.
    pub(crate) fn is_confirmed(&self) -> bool {
        self.confirmed
    }

    /// Asks for the channel's subscription (again) and waits for the server's answer.
    ///
    /// # Errors
    ///
    /// The subscription's error; [`Error::ShuttingDown`] when the client's tasks ended.
    pub(crate) async fn confirm(&mut self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.ops
            .send(Op::Subscribe(self.channel.clone(), tx))
            .map_err(|_| Error::ShuttingDown)?;
        match rx.await {
            Ok(Ok(())) => {
                self.confirmed = true;
                Ok(())
            }
            Ok(Err(e)) => Err(command_error(e)),
            Err(_) => Err(Error::ShuttingDown),
        }
    }

    /// How many other local waiters share this waiter's channel now.
    pub(crate) fn others(&self) -> usize {
        lock(&self.shared)
            .by_name
            .get(&self.channel)
            .map_or(0, |entry| entry.members.saturating_sub(1))
    }

    /// Passes one wake-up to another local waiter of the channel (or stores it for the
    /// next one to listen): a waiter leaving may have taken the one a release sent.
    pub(crate) fn pass_on(&self) {
        self.notify.notify_one();
    }

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

/// Wakes the waiters a push message concerns. Returns what the actor must do about it:
/// subscribe again to a channel the server unsubscribed this client from on its own while
/// waiters still wait on it (a cluster slot that moved), or pass on a wake-up that came
/// on one of the client's own wake-up channels of a lock (those ending in `wake_suffix`)
/// with no local waiter left to take it.
fn dispatch(shared: &Shared, wake_suffix: &str, push: &PushInfo) -> Option<Op> {
    match push.kind {
        // Releases are published to shard channels (`SPUBLISH`), which reach the lock's
        // shard only on a cluster and are plain channels on one server.
        PushKind::SMessage | PushKind::Message => {
            let Some(Value::BulkString(channel)) = push.data.first() else {
                return None;
            };
            let Ok(channel) = std::str::from_utf8(channel) else {
                return None;
            };
            let channels = lock(shared);
            let Some(waiters) = channels.by_name.get(channel) else {
                return channel
                    .ends_with(wake_suffix)
                    .then(|| Op::PassOn(channel.to_owned()));
            };
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
        PushKind::Disconnection => wake_all(shared),
        // Also the confirmation of our own SUNSUBSCRIBE, sent only once nobody waited on
        // the channel: with waiters still there, the server dropped the subscription.
        PushKind::SUnsubscribe => {
            let Some(Value::BulkString(channel)) = push.data.first() else {
                return None;
            };
            let channel = std::str::from_utf8(channel).ok()?;
            let channels = lock(shared);
            let waiters = channels.by_name.get(channel)?;
            waiters.notify.notify_waiters();
            waiters.notify.notify_one();
            return Some(Op::Resubscribe(channel.to_owned()));
        }
        _ => {}
    }
    None
}

/// Wakes every local waiter: messages may have been missed.
fn wake_all(shared: &Shared) {
    for waiters in lock(shared).by_name.values() {
        waiters.notify.notify_waiters();
        // ...and one stored wake-up for a waiter that is between two waits.
        waiters.notify.notify_one();
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
    connection: Connection,
    mut ops: mpsc::UnboundedReceiver<Op>,
    shared: Shared,
    wake_id: Arc<str>,
) {
    let mut subscribed = Subscribed::default();
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
                        && let Err(e) = connection.unsubscribe(&channel).await
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
                    let result = connection.subscribe(&channel).await;
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
            Op::Resubscribe(channel) => {
                subscribed.remove(&channel);
                resubscribe(&connection, &shared, &mut subscribed, [channel]).await;
            }
            Op::ResubscribeAll => {
                let channels = subscribed.drain();
                resubscribe(&connection, &shared, &mut subscribed, channels).await;
            }
            Op::PassOn(channel) => pass_on(&connection, &channel, &wake_id),
        }
    }
}

/// Runs `wake_withdraw.lua` for the lock (`Lock` or `SimpleLock`) whose wake-up channel
/// of this client is `channel`: the client is taken off the waiting clients and, if the
/// lock is free, the next one is woken. On a task of its own, so that the actor's
/// subscriptions do not wait for it.
fn pass_on(connection: &Connection, channel: &str, wake_id: &Arc<str>) {
    let Some((key, names)) = WakeNames::of_own_channel(channel, wake_id) else {
        return;
    };
    let connection = connection.clone();
    let wake_id = Arc::clone(wake_id);
    tokio::spawn(async move {
        let withdrawn = connection
            .run(&WakeWithdraw {
                key: &key,
                wake: names.keys(),
                client: &wake_id,
            })
            .await;
        if let Err(e) = withdrawn {
            tracing::debug!(error = %e, "passing on a wake-up nobody here waits for failed; the other waiters try again when the holder's lease runs out");
        }
    });
}

/// Subscribes `channels` again where they live now, those that still have waiters. A
/// failure leaves the waiters on their fallback wait (the holder's TTL or the recheck
/// interval); the next waiter that joins tries again.
async fn resubscribe(
    connection: &Connection,
    shared: &Shared,
    subscribed: &mut Subscribed,
    channels: impl IntoIterator<Item = String>,
) {
    for channel in channels {
        if !lock(shared).by_name.contains_key(&channel) {
            continue;
        }
        match connection.subscribe(&channel).await {
            Ok(()) => {
                subscribed.insert(channel);
            }
            Err(e) => {
                tracing::warn!(channel = %channel, error = %e, "subscribing again failed; waiters fall back to their timed recheck");
            }
        }
    }
}

/// The channels the server has subscribed this client to, counted in the
/// `ferrisson_subscribed_channels` gauge while the actor runs.
#[derive(Default)]
struct Subscribed(HashSet<String>);

impl Subscribed {
    fn contains(&self, channel: &str) -> bool {
        self.0.contains(channel)
    }

    fn insert(&mut self, channel: String) {
        if self.0.insert(channel) {
            metrics::subscribed_channels_add(1.0);
        }
    }

    fn remove(&mut self, channel: &str) -> bool {
        let removed = self.0.remove(channel);
        if removed {
            metrics::subscribed_channels_add(-1.0);
        }
        removed
    }

    /// Forgets every channel (the connection carrying them was replaced).
    fn drain(&mut self) -> Vec<String> {
        metrics::subscribed_channels_add(-(self.0.len() as f64));
        self.0.drain().collect()
    }
}

impl Drop for Subscribed {
    fn drop(&mut self) {
        // The client is gone, and its subscription with its connection.
        metrics::subscribed_channels_add(-(self.0.len() as f64));
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

//! Coalesced script calls: calls of one script that several tasks make while one is in
//! flight go to Redis together, as one call of the script's batch form.
//!
//! A script call costs Redis a fixed part (parsing the request, looking the script up,
//! setting up and tearing down the Lua call, the reply) on top of its work. When many
//! tasks of one client acquire and release at once, that fixed part is paid once per
//! batch instead of once per call. The rules, per *lane* (one script, and on a cluster
//! one hash slot, since a script's keys must share a slot there):
//!
//! - A call that finds no call of its lane in flight goes out at once, unchanged: the
//!   single script, the same `EVALSHA` as without coalescing. A lone call never waits
//!   for company.
//! - A call that finds a call of its lane in flight waits in the lane's queue, for the
//!   tasks that are ready to run to run (the calls they make join it), not for a reply:
//!   then a task takes what waits (at most [`MAX_BATCH`]) and sends it as one call of the
//!   batch form ([`LuaScript::batch`]), while the calls ahead are still in flight. When
//!   [`MAX_IN_FLIGHT`] calls of the lane are in flight, what waits goes when one of them
//!   answers, and the next batch after it while more waits.
//! - Each call keeps what it had alone: its own keys and arguments (owner, token,
//!   lease), its own reply or error (the batch form runs each call in a protected call,
//!   so one call's error is that call's answer), and the caller's span, metrics and undo,
//!   which stay in the caller's future.
//! - A caller that stops waiting while its call is queued takes the call out: it is
//!   never sent. One that stops while its batch is in flight is in the case of a single
//!   call in flight: the call may be applied with its reply lost, which the primitive's
//!   undo handles.
//! - The batch is resent as a whole when Redis did not run it (a redirection, a failover
//!   in progress, `NOSCRIPT`). When a dropped connection cuts it off, it may or may not
//!   have run: each call that is safe to resend ([`ScriptCall::idempotent`]) is sent once
//!   more alone; the others report the error, as they would alone.
//!
//! [`ScriptCall::idempotent`]: crate::backend::scripts::ScriptCall::idempotent

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use redis::Value;
use tokio::sync::oneshot;

use super::{Connection, cut_off};
use crate::api::error::{Error, RedisResultExt as _, Result, command_error};
use crate::backend::scripts::{EvalSha, LuaScript};

/// Most calls in one batch: a batch runs as one script, during which Redis serves
/// nothing else, so its length is bounded (128 acquires run in about a millisecond).
pub(crate) const MAX_BATCH: usize = 128;

/// Calls (single or batches) of one lane in flight at once before further calls wait for
/// a reply. A batch does not wait for the reply of the call ahead of it, only for the
/// tasks ready to run to have run, so several are in flight when replies take long. With
/// one, every call behind another waited a whole round trip: behind a slow link 64 tasks
/// ran 0.60–0.64 of the raw floor's pairs per second, against 0.92–0.98 with eight; on one
/// machine eight ran 0.78, 0.81 of it against one's 0.70, 0.72, and 16 or 32 no more than
/// eight (see the benchmarks notebook, "Batches that do not wait for a reply").
pub(crate) const MAX_IN_FLIGHT: usize = 8;

/// Which calls may go together: one script, one group of keys
/// ([`Connection::call_group`]: the hash slot on a cluster).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Lane {
    /// The script's address: every script is a field of the one static `SCRIPTS`.
    script: usize,
    group: u16,
}

impl Lane {
    pub(super) fn new(script: &'static LuaScript, group: u16) -> Self {
        Self {
            script: std::ptr::from_ref(script).addr(),
            group,
        }
    }
}

/// What a queued call gets back: its reply or error, and its command (for the
/// acknowledgements, which need its key, and for reuse).
type Answer = (Result<Value>, EvalSha);

/// A queued call.
struct Member {
    call: EvalSha,
    idempotent: bool,
    answer: oneshot::Sender<Answer>,
}

#[derive(Default)]
struct Queue {
    in_flight: usize,
    /// A task is about to send what waits (see [`Entered::QueuedFirst`]).
    flush_scheduled: bool,
    waiting: VecDeque<Member>,
}

/// The lanes of one client's connection.
#[derive(Default)]
pub(crate) struct Coalescer {
    lanes: Mutex<HashMap<Lane, Queue>>,
}

/// What [`Coalescer::enter`] decided for a call.
pub(super) enum Entered {
    /// Send it now; the caller holds one of the lane's places in flight and must
    /// [`Connection::hand_off`] it when its call is over (see [`InFlight`]).
    Alone(EvalSha),
    /// Queued: its answer comes through this receiver.
    Queued(oneshot::Receiver<Answer>),
    /// Queued first behind calls in flight while the lane has a place free: the caller
    /// starts the task that sends what queued (holding that place) once the tasks that are
    /// ready to run have run ([`Connection::flush`]).
    QueuedFirst(oneshot::Receiver<Answer>),
}

impl Coalescer {
    fn lanes(&self) -> MutexGuard<'_, HashMap<Lane, Queue>> {
        // A panic while the map was held leaves it consistent (each change is one
        // statement), so a poisoned lock is used as it is.
        self.lanes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes a place in flight for `call`, or queues it when the lane has none free.
    pub(super) fn enter(&self, lane: Lane, call: EvalSha, idempotent: bool) -> Entered {
        let mut lanes = self.lanes();
        let queue = lanes.entry(lane).or_default();
        if queue.in_flight == 0 {
            queue.in_flight += 1;
            return Entered::Alone(call);
        }
        let (answer, receiver) = oneshot::channel();
        queue.waiting.push_back(Member {
            call,
            idempotent,
            answer,
        });
        if !queue.flush_scheduled && queue.in_flight < MAX_IN_FLIGHT {
            queue.flush_scheduled = true;
            queue.in_flight += 1;
            return Entered::QueuedFirst(receiver);
        }
        Entered::Queued(receiver)
    }

    /// The scheduled sender of `lane` starts: calls that come from now on schedule another.
    fn flush_started(&self, lane: Lane) {
        if let Some(queue) = self.lanes().get_mut(&lane) {
            queue.flush_scheduled = false;
        }
    }

    /// The next batch of `lane`, its calls whose callers still wait; none when nothing
    /// waits, and then the place in flight its sender held is given back.
    fn next_batch(&self, lane: Lane) -> Vec<Member> {
        let mut lanes = self.lanes();
        let Some(queue) = lanes.get_mut(&lane) else {
            return Vec::new();
        };
        let mut batch = Vec::new();
        while batch.len() < MAX_BATCH {
            let Some(member) = queue.waiting.pop_front() else {
                break;
            };
            // Its caller stopped waiting while it was queued: it is never sent.
            if !member.answer.is_closed() {
                batch.push(member);
            }
        }
        if batch.is_empty() {
            queue.in_flight = queue.in_flight.saturating_sub(1);
            if queue.in_flight == 0 {
                // No lane lingers per hash slot once idle.
                lanes.remove(&lane);
            }
        }
        batch
    }

    /// Whether calls wait in `lane`; when none do, the place in flight of the call that
    /// just ended is given back.
    fn release_or_keep(&self, lane: Lane) -> bool {
        let mut lanes = self.lanes();
        let Some(queue) = lanes.get_mut(&lane) else {
            return false;
        };
        if queue.waiting.is_empty() {
            queue.in_flight = queue.in_flight.saturating_sub(1);
            if queue.in_flight == 0 {
                lanes.remove(&lane);
            }
            return false;
        }
        true
    }
}

/// A lone call's place in flight: given back (or handed to the calls that queued behind
/// it) when the call ends, its reply in or its caller gone.
pub(super) struct InFlight<'a> {
    pub(super) connection: &'a Connection,
    pub(super) coalescer: &'a Coalescer,
    pub(super) lane: Lane,
    pub(super) script: &'static LuaScript,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.coalescer.release_or_keep(self.lane) {
            return;
        }
        // Calls queued behind this one: a task sends them, keeping the place in flight,
        // so that they go whether or not any one of their callers keeps waiting.
        let drain = self.connection.clone().drain(self.lane, self.script);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(drain);
            }
            // No runtime (it is shutting down): the queued calls are dropped unsent,
            // and their callers, which cannot be running either, learn nothing.
            Err(_) => drop(self.coalescer.lanes().remove(&self.lane)),
        }
    }
}

impl Connection {
    /// Sends what waits in `lane` once the tasks ready to run have run (so that the
    /// calls they make join), then the batches after it until nothing waits.
    async fn flush(self, lane: Lane, script: &'static LuaScript) {
        tokio::task::yield_now().await;
        if let Some(coalescer) = &self.coalescer {
            coalescer.flush_started(lane);
        }
        self.drain(lane, script).await;
    }

    /// Sends the batches of `lane` until nothing waits there.
    async fn drain(self, lane: Lane, script: &'static LuaScript) {
        let Some(coalescer) = self.coalescer.clone() else {
            return;
        };
        loop {
            let batch = coalescer.next_batch(lane);
            if batch.is_empty() {
                return;
            }
            self.send_batch(script, batch).await;
        }
    }

    /// Sends `members` (calls of `script`) as one call of its batch form, or alone when
    /// only one waits, and answers each.
    async fn send_batch(&self, script: &'static LuaScript, mut members: Vec<Member>) {
        let batch = match script.batch() {
            Some(batch) if members.len() > 1 => batch,
            _ => {
                for member in members {
                    let value = self
                        .send_with_rules(
                            member.call.cmd(),
                            member.call.first_key(),
                            member.idempotent,
                            Some(script),
                        )
                        .await
                        .or_command_error();
                    let _ = member.answer.send((value, member.call));
                }
                return;
            }
        };
        tracing::trace!(calls = members.len(), "sending a batch of script calls");
        let cmd = batch_command(batch, &members);
        let first_key = members.first().and_then(|m| m.call.first_key());
        let outcome = self
            .resend_by_the_rules(false, Some(batch), first_key, || {
                self.send_once(&cmd, first_key)
            })
            .await;
        match outcome {
            Ok(Value::Array(replies)) if replies.len() == members.len() => {
                for (member, reply) in members.into_iter().zip(replies) {
                    let answer = match reply {
                        Value::ServerError(e) => Err(command_error(e.into())),
                        value => Ok(value),
                    };
                    let _ = member.answer.send((answer, member.call));
                }
            }
            Ok(other) => {
                let calls = members.len();
                for member in members {
                    let error = Error::Protocol(format!(
                        "the batch form of a script answered {calls} calls with {other:?}"
                    ));
                    let _ = member.answer.send((Err(error), member.call));
                }
            }
            Err(error) if cut_off(&error) => {
                // The batch may or may not have run: what is safe to send again goes once
                // more, alone (and without a second resend after a cut, as alone); the
                // rest reports the error as it would alone.
                let (resend, report): (Vec<_>, Vec<_>) =
                    members.drain(..).partition(|m| m.idempotent);
                for member in report {
                    let _ = member
                        .answer
                        .send((Err(error.clone()).or_command_error(), member.call));
                }
                let sends = resend.iter().map(|member| {
                    self.send_with_rules(
                        member.call.cmd(),
                        member.call.first_key(),
                        false,
                        Some(script),
                    )
                });
                let values = futures_util::future::join_all(sends).await;
                for (member, value) in resend.into_iter().zip(values) {
                    let _ = member.answer.send((value.or_command_error(), member.call));
                }
            }
            Err(error) => {
                for member in members {
                    let _ = member
                        .answer
                        .send((Err(error.clone()).or_command_error(), member.call));
                }
            }
        }
    }

    /// Sends `call` through the coalescer: alone when its lane has a place in flight,
    /// else queued for the next batch.
    pub(super) async fn run_coalesced(
        &self,
        coalescer: &Coalescer,
        script: &'static LuaScript,
        call: EvalSha,
        idempotent: bool,
    ) -> (Result<Value>, Option<EvalSha>) {
        let group = call
            .first_key()
            .map_or(0, |key| self.call_group_of_bytes(key));
        let lane = Lane::new(script, group);
        match coalescer.enter(lane, call, idempotent) {
            Entered::Alone(call) => {
                let in_flight = InFlight {
                    connection: self,
                    coalescer,
                    lane,
                    script,
                };
                let value = self
                    .send_with_rules(call.cmd(), call.first_key(), idempotent, Some(script))
                    .await
                    .or_command_error();
                drop(in_flight);
                (value, Some(call))
            }
            Entered::QueuedFirst(answer) => {
                let flush = self.clone().flush(lane, script);
                match tokio::runtime::Handle::try_current() {
                    Ok(runtime) => {
                        runtime.spawn(flush);
                    }
                    // No runtime to run it beside the caller: the caller sends its batch.
                    // Boxed: rare, and unboxed its state (1.4 KB) would be in every
                    // call's future (see ARCHITECTURE.md on future sizes).
                    Err(_) => Box::pin(flush).await,
                }
                Self::answered(answer).await
            }
            Entered::Queued(answer) => Self::answered(answer).await,
        }
    }

    /// What the task that sent a queued call answered for it.
    async fn answered(answer: oneshot::Receiver<Answer>) -> (Result<Value>, Option<EvalSha>) {
        match answer.await {
            Ok((value, call)) => (value, Some(call)),
            // The task sending it went away without an answer (the runtime is
            // shutting down): whether it ran is unknown.
            Err(_) => (
                Err(command_error(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    "the batch carrying this script call was dropped",
                )))),
                None,
            ),
        }
    }
}

/// `EVALSHA` of `batch` over `members`: every member's keys, then the member count, the
/// key and argument counts every member shares (or two empty strings and each member's
/// own counts, when they differ), and every member's arguments (see the batch loop in
/// `scripts`).
fn batch_command(batch: &LuaScript, members: &[Member]) -> redis::Cmd {
    // Each member's (keys, arguments), counted once: `parts` walks the member's command.
    let shapes: Vec<(usize, usize)> = members
        .iter()
        .map(|member| {
            let keys = member.call.keys_and_args().0;
            (keys, member.call.parts() - keys)
        })
        .collect();
    let keys: usize = shapes.iter().map(|&(keys, _)| keys).sum();
    let mut cmd = batch.evalsha_cmd(keys);
    for member in members {
        let (keys, parts) = member.call.keys_and_args();
        for key in parts.take(keys) {
            cmd.arg(key);
        }
    }
    cmd.arg(members.len());
    match shapes.first() {
        Some(&(keys, args)) if shapes.iter().all(|&shape| shape == (keys, args)) => {
            cmd.arg(keys).arg(args);
        }
        _ => {
            cmd.arg("").arg("");
            for &(keys, args) in &shapes {
                cmd.arg(keys).arg(args);
            }
        }
    }
    for member in members {
        let (keys, parts) = member.call.keys_and_args();
        for arg in parts.skip(keys) {
            cmd.arg(arg);
        }
    }
    cmd
}

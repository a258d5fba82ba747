//! Typed calls of the fair lock's scripts (`lua/fair_*.lua`).

use std::time::Duration;

use redis::{ParsingError, Value};

use super::lock::granted;
use super::{Ints, Invocation, LuaScript, SCRIPTS, ScriptCall, unexpected};
use crate::api::fencing::FencingToken;
use crate::api::lease::millis;
use crate::backend::ids::OwnerId;
use crate::backend::ids::ReleaseId;
use crate::backend::scripts::Released;

/// The keys every fair lock script takes, in this order.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FairKeys<'a> {
    /// The lock hash (a reentrant lock's layout).
    pub(crate) lock: &'a str,
    /// The wait queue: a sorted set {owner: arrival number}.
    pub(crate) queue: &'a str,
    /// The waiters' keep-alive deadlines: a sorted set {owner: server time in ms}.
    pub(crate) deadlines: &'a str,
    /// The prefix of the per-waiter wake-up channels.
    pub(crate) channel_prefix: &'a str,
}

/// How an acquire treats the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FairMode {
    /// Queue when the lock cannot be granted now.
    Queue,
    /// Never queue (`try_lock`).
    Try,
    /// Only add a hold to one this owner already has.
    Reenter,
}

impl FairMode {
    fn as_arg(self) -> &'static str {
        match self {
            Self::Queue => "acquire",
            Self::Try => "try",
            Self::Reenter => "reenter",
        }
    }
}

/// What a fair acquire found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FairAcquired {
    Granted {
        token: FencingToken,
        count: u32,
    },
    /// Not granted: the holder's PTTL (-1 no expiry, -2 free), the waiter's position
    /// (0 = head, -1 not queued) and whether this call created its queue entry.
    Waiting {
        pttl: i64,
        position: i64,
        created: bool,
    },
    NotReentered,
}

impl redis::FromRedisValue for FairAcquired {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        const SCRIPT: &str = "fair_acquire";
        match *Ints::parse(&value, SCRIPT)?.as_slice() {
            [1, token, count] => {
                let (token, count) = granted(SCRIPT, token, count)?;
                Ok(Self::Granted { token, count })
            }
            [0, pttl, position, created] => Ok(Self::Waiting {
                pttl,
                position,
                created: created == 1,
            }),
            [2] => Ok(Self::NotReentered),
            _ => Err(unexpected(SCRIPT, &value)),
        }
    }
}

/// `fair_acquire.lua`: acquires, re-enters or queues for a fair lock.
pub(crate) struct FairAcquire<'a> {
    pub(crate) keys: FairKeys<'a>,
    pub(crate) fence: &'a str,
    pub(crate) owner: OwnerId,
    pub(crate) lease: Duration,
    pub(crate) mode: FairMode,
    pub(crate) keepalive: Duration,
}

impl ScriptCall for FairAcquire<'_> {
    type Reply = FairAcquired;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.fair_acquire
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.keys.lock)
            .key(self.fence)
            .key(self.keys.queue)
            .key(self.keys.deadlines)
            .key(self.keys.channel_prefix)
            .arg(self.owner)
            .arg(millis(self.lease))
            .arg(self.mode.as_arg())
            .arg(millis(self.keepalive));
    }

    /// Queueing and trying use the waiter's own id, so a repeat finds its own entry or
    /// hold and reports it (see the script).
    fn idempotent(&self) -> bool {
        self.mode != FairMode::Reenter
    }

    fn wrote_a_hold(&self, reply: &FairAcquired) -> bool {
        self.mode != FairMode::Reenter && matches!(reply, FairAcquired::Granted { .. })
    }
}

/// `fair_release.lua`: releases one hold; the last wakes the head of the queue.
pub(crate) struct FairRelease<'a> {
    pub(crate) keys: FairKeys<'a>,
    pub(crate) owner: OwnerId,
    pub(crate) lease: Duration,
    pub(crate) release_id: ReleaseId,
}

impl ScriptCall for FairRelease<'_> {
    type Reply = Released;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.fair_release
    }

    fn fill(&self, call: &mut Invocation) {
        self.keys.fill(call);
        call.arg(self.owner)
            .arg(millis(self.lease))
            .arg(self.release_id);
    }
}

/// `fair_cancel.lua`: removes a waiter's queue entry. Replies whether there was one.
pub(crate) struct FairCancel<'a> {
    pub(crate) keys: FairKeys<'a>,
    pub(crate) owner: OwnerId,
}

impl ScriptCall for FairCancel<'_> {
    type Reply = bool;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.fair_cancel
    }

    fn fill(&self, call: &mut Invocation) {
        self.keys.fill(call);
        call.arg(self.owner);
    }

    fn idempotent(&self) -> bool {
        true
    }
}

/// `fair_force_release.lua`: deletes the lock whoever holds it, wakes the head. Replies
/// whether there was a lock.
pub(crate) struct FairForceRelease<'a> {
    pub(crate) keys: FairKeys<'a>,
}

impl ScriptCall for FairForceRelease<'_> {
    type Reply = bool;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.fair_force_release
    }

    fn fill(&self, call: &mut Invocation) {
        self.keys.fill(call);
    }

    fn idempotent(&self) -> bool {
        true
    }
}

/// `fair_inspect.lua`: the lock hash, its PTTL, the queue in order, the waiters'
/// deadlines and the server's time, in one read.
pub(crate) struct FairInspect<'a> {
    pub(crate) keys: FairKeys<'a>,
}

/// What [`FairInspect`] reads.
pub(crate) type FairSnapshot = (
    Vec<(String, String)>,
    i64,
    Vec<String>,
    Vec<(String, f64)>,
    (u64, u64),
);

impl ScriptCall for FairInspect<'_> {
    type Reply = FairSnapshot;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.fair_inspect
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.keys.lock)
            .key(self.keys.queue)
            .key(self.keys.deadlines);
    }

    fn idempotent(&self) -> bool {
        true
    }
}

impl FairKeys<'_> {
    /// The four keys in the order the release, cancel and force-release scripts take.
    fn fill(&self, call: &mut Invocation) {
        call.key(self.lock)
            .key(self.queue)
            .key(self.deadlines)
            .key(self.channel_prefix);
    }
}

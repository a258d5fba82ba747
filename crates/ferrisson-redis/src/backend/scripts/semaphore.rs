//! Typed calls of the semaphore's scripts (`lua/semaphore_*.lua`); `add`, `drain` and
//! `delete` also serve the expirable semaphore, whose counter has the same layout.

use redis::{ParsingError, Value};

use super::{Ints, Invocation, LuaScript, SCRIPTS, ScriptCall, unexpected, unsigned};

/// What a semaphore acquire found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PermitsTaken {
    Taken,
    NotEnough,
    /// The semaphore does not exist (never initialised, or deleted).
    Missing,
}

impl redis::FromRedisValue for PermitsTaken {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        match value {
            Value::Int(1) => Ok(Self::Taken),
            Value::Int(0) => Ok(Self::NotEnough),
            Value::Int(-1) => Ok(Self::Missing),
            other => Err(unexpected("semaphore_acquire", &other)),
        }
    }
}

/// `semaphore_acquire.lua`: takes `permits` if that many are available.
pub(crate) struct SemaphoreAcquire<'a> {
    pub(crate) key: &'a str,
    pub(crate) permits: u32,
}

impl ScriptCall for SemaphoreAcquire<'_> {
    type Reply = PermitsTaken;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.semaphore_acquire
    }

    /// Several tasks' calls go to Redis together (see `Connection::run`).
    fn batchable(&self) -> bool {
        true
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key).arg(self.permits);
    }
}

/// `semaphore_release.lua`: gives `permits` back and wakes as many waiters. Replies false
/// when the semaphore no longer exists (nothing is recreated).
pub(crate) struct SemaphoreRelease<'a> {
    pub(crate) key: &'a str,
    pub(crate) channel: &'a str,
    pub(crate) permits: u32,
}

impl ScriptCall for SemaphoreRelease<'_> {
    type Reply = bool;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.semaphore_release
    }

    /// Several tasks' calls go to Redis together (see `Connection::run`).
    fn batchable(&self) -> bool {
        true
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key).key(self.channel).arg(self.permits);
    }
}

/// `semaphore_add.lua`: adds `delta` (may be negative) to the counter, creating it if
/// needed. Replies the counter after the change.
pub(crate) struct SemaphoreAdd<'a> {
    pub(crate) key: &'a str,
    pub(crate) channel: &'a str,
    pub(crate) delta: i64,
}

impl ScriptCall for SemaphoreAdd<'_> {
    type Reply = i64;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.semaphore_add
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key).key(self.channel).arg(self.delta);
    }
}

/// `semaphore_drain.lua`: takes every available permit (an expirable semaphore's expired
/// ones too, given its held-permit set). Replies how many, or `None` when the semaphore
/// does not exist.
pub(crate) struct SemaphoreDrain<'a> {
    pub(crate) key: &'a str,
    pub(crate) held: Option<&'a str>,
}

/// The permits [`SemaphoreDrain`] took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Drained(pub(crate) Option<u64>);

impl redis::FromRedisValue for Drained {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        const SCRIPT: &str = "semaphore_drain";
        match *Ints::parse(&value, SCRIPT)?.as_slice() {
            [1, taken] => Ok(Self(Some(unsigned(SCRIPT, taken)?))),
            [0] => Ok(Self(None)),
            _ => Err(unexpected(SCRIPT, &value)),
        }
    }
}

impl ScriptCall for SemaphoreDrain<'_> {
    type Reply = Drained;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.semaphore_drain
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key);
        if let Some(held) = self.held {
            call.key(held);
        }
    }
}

/// `semaphore_set.lua`: sets the available permits to `permits` whatever they were (an
/// expirable semaphore's expired permits returned first, given its held-permit set),
/// waking waiters for what became available. Replies the count before, or `None` when
/// the semaphore did not exist.
pub(crate) struct SemaphoreSet<'a> {
    pub(crate) key: &'a str,
    pub(crate) channel: &'a str,
    pub(crate) held: Option<&'a str>,
    pub(crate) permits: u32,
}

impl ScriptCall for SemaphoreSet<'_> {
    type Reply = Option<i64>;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.semaphore_set
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key).key(self.channel);
        if let Some(held) = self.held {
            call.key(held);
        }
        call.arg(self.permits);
    }
}

/// `semaphore_delete.lua`: deletes the keys and wakes every waiter (who then learn the
/// semaphore is gone). Replies how many keys were deleted.
pub(crate) struct SemaphoreDelete<'a> {
    pub(crate) keys: &'a [&'a str],
    pub(crate) channel: &'a str,
}

impl ScriptCall for SemaphoreDelete<'_> {
    type Reply = u64;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.semaphore_delete
    }

    fn fill(&self, call: &mut Invocation) {
        for key in self.keys {
            call.key(*key);
        }
        call.key(self.channel);
    }

    fn idempotent(&self) -> bool {
        true
    }
}

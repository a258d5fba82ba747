//! Typed calls of the reentrant lock's scripts (`lua/lock_*.lua`): their KEYS, ARGV and
//! replies as the scripts' headers give them. Its wake-up of one waiting client is shared
//! with `SimpleLock` ([`wake`](super::wake)).

use std::time::Duration;

use redis::{ParsingError, Value};

use super::wake::{Register, WakeKeys};
use super::{Ints, Invocation, LuaScript, SCRIPTS, ScriptCall, lone_token, unexpected, unsigned};
use crate::api::fencing::FencingToken;
use crate::api::lease::millis;
use crate::backend::ids::OwnerId;
use crate::backend::ids::ReleaseId;
use crate::backend::scripts::Released;

/// How an acquire treats an owner id that already holds the lock (`lock_acquire.lua`,
/// `fair_acquire.lua` and `rwlock_acquire.lua` share the words).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireMode {
    /// An owner id made for this one attempt: finding it holding the lock means this
    /// very call ran before (its reply was lost), so the hold is reported, not doubled.
    /// That makes the call safe to send again.
    Fresh,
    /// An owner id given by the caller (shared on purpose): holding already is a re-entry.
    Acquire,
    /// Only add a hold to one this owner has (the caller believes it holds the lock); a
    /// lost hold is never started again under the same id.
    Reenter,
}

impl AcquireMode {
    pub(crate) fn as_arg(self) -> &'static str {
        match self {
            Self::Fresh => "fresh",
            Self::Acquire => "acquire",
            Self::Reenter => "reenter",
        }
    }
}

/// What an acquire of a reentrant lock found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockAcquired {
    /// Granted or re-entered: the hold's token and this owner's hold count.
    Granted { token: FencingToken, count: u32 },
    /// Held by another owner, for `pttl` ms more (-1: no expiry).
    Held { pttl: i64 },
    /// `Reenter` found this owner holding nothing any more.
    NotReentered,
}

/// Reads the `token, count` of a `{1, token, count}` grant.
pub(crate) fn granted(
    script: &str,
    token: i64,
    count: i64,
) -> Result<(FencingToken, u32), ParsingError> {
    let count = u32::try_from(unsigned(script, count)?)
        .map_err(|_| ParsingError::from(format!("{script} returned hold count {count}")))?;
    Ok((FencingToken::new(unsigned(script, token)?), count))
}

impl redis::FromRedisValue for LockAcquired {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        const SCRIPT: &str = "lock_acquire";
        match value {
            Value::Int(pttl) => Ok(Self::Held { pttl }),
            Value::BulkString(_) => Ok(Self::Granted {
                token: lone_token(SCRIPT, &value)?,
                count: 1,
            }),
            _ => match *Ints::parse(&value, SCRIPT)?.as_slice() {
                [1, token, count] => {
                    let (token, count) = granted(SCRIPT, token, count)?;
                    Ok(Self::Granted { token, count })
                }
                [2] => Ok(Self::NotReentered),
                _ => Err(unexpected(SCRIPT, &value)),
            },
        }
    }
}

/// `lock_acquire.lua`: acquires or re-enters a reentrant lock.
pub(crate) struct LockAcquire<'a> {
    pub(crate) key: &'a str,
    pub(crate) fence: &'a str,
    pub(crate) waiters: &'a str,
    pub(crate) owner: OwnerId,
    pub(crate) lease: Duration,
    pub(crate) mode: AcquireMode,
    pub(crate) register: Register<'a>,
}

impl ScriptCall for LockAcquire<'_> {
    type Reply = LockAcquired;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.lock_acquire
    }

    /// Several tasks' calls go to Redis together (see `Connection::run`).
    fn batchable(&self) -> bool {
        true
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key)
            .key(self.fence)
            .key(self.waiters)
            .arg(self.owner)
            .arg(millis(self.lease))
            .arg(self.mode.as_arg());
        self.register.fill(call);
    }

    fn idempotent(&self) -> bool {
        self.mode == AcquireMode::Fresh
    }

    fn wrote_a_hold(&self, reply: &LockAcquired) -> bool {
        self.mode != AcquireMode::Reenter && matches!(reply, LockAcquired::Granted { .. })
    }
}

/// `lock_release.lua`: releases one hold of a reentrant lock.
pub(crate) struct LockRelease<'a> {
    pub(crate) key: &'a str,
    pub(crate) wake: WakeKeys<'a>,
    pub(crate) owner: OwnerId,
    pub(crate) lease: Duration,
    pub(crate) release_id: ReleaseId,
}

impl ScriptCall for LockRelease<'_> {
    type Reply = Released;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.lock_release
    }

    /// Several tasks' calls go to Redis together (see `Connection::run`).
    fn batchable(&self) -> bool {
        true
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key);
        self.wake.fill(call);
        call.arg(self.owner)
            .arg(millis(self.lease))
            .arg(self.release_id);
    }
}

/// `lock_abandon.lua`: removes a fresh owner's hold outright (an acquire whose caller
/// went away). Replies whether the owner held it.
pub(crate) struct LockAbandon<'a> {
    pub(crate) key: &'a str,
    pub(crate) wake: WakeKeys<'a>,
    pub(crate) owner: OwnerId,
}

impl ScriptCall for LockAbandon<'_> {
    type Reply = bool;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.lock_abandon
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key);
        self.wake.fill(call);
        call.arg(self.owner);
    }

    fn idempotent(&self) -> bool {
        true
    }
}

/// `lock_inspect.lua`: the lock hash's fields and its PTTL, in one read.
pub(crate) struct LockInspect<'a> {
    pub(crate) key: &'a str,
}

impl ScriptCall for LockInspect<'_> {
    type Reply = (Vec<(String, String)>, i64);

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.lock_inspect
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key);
    }

    fn idempotent(&self) -> bool {
        true
    }
}

/// `lock_renew.lua` / `rwlock_renew.lua`: renews many holds of one layout in one call.
/// Replies one flag per hold: renewed, or gone / taken.
pub(crate) struct Renew<'a> {
    pub(crate) script: &'static LuaScript,
    pub(crate) lease: Duration,
    /// Each hold's key and owner.
    pub(crate) holds: &'a [(&'a str, OwnerId)],
}

impl ScriptCall for Renew<'_> {
    type Reply = Vec<bool>;

    fn wrote_a_hold(&self, reply: &Vec<bool>) -> bool {
        reply.iter().any(|renewed| *renewed)
    }

    fn script(&self) -> &'static LuaScript {
        self.script
    }

    fn fill(&self, call: &mut Invocation) {
        call.arg(millis(self.lease));
        for &(key, owner) in self.holds {
            call.key(key).arg(owner);
        }
    }

    fn idempotent(&self) -> bool {
        true
    }
}

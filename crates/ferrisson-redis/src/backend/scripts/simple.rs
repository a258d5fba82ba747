//! Typed calls of the simple lock's scripts (`lua/simple_*.lua`; its wake-up of one
//! waiting client is shared with `Lock`, see [`wake`](super::wake)) and of the scripts a
//! Redlock runs on each of its servers (`lua/redlock_*.lua`, and `simple_inspect.lua`).

use std::time::Duration;

use redis::{ParsingError, Value};

use super::wake::{Register, WakeKeys};
use super::{Invocation, LuaScript, SCRIPTS, ScriptCall, lone_token, unexpected};
use crate::api::fencing::FencingToken;
use crate::api::lease::millis;
use crate::backend::ids::OwnerId;

/// What a `SET NX` acquire with a fencing token found (`simple_acquire.lua`, and
/// `redlock_acquire.lua` on each of a Redlock's servers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyAcquired {
    Granted {
        token: FencingToken,
    },
    /// Held by another owner, for `pttl` ms more (-1: no expiry).
    Held {
        pttl: i64,
    },
}

impl redis::FromRedisValue for KeyAcquired {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        const SCRIPT: &str = "simple_acquire or redlock_acquire";
        match value {
            Value::Int(pttl) => Ok(Self::Held { pttl }),
            token => Ok(Self::Granted {
                token: lone_token(SCRIPT, &token)?,
            }),
        }
    }
}

/// `simple_acquire.lua`: `SET key owner NX PX lease`, and a fencing token; a refused
/// waiter's client registers in `waiters` (see [`Register`]).
pub(crate) struct SimpleAcquire<'a> {
    pub(crate) key: &'a str,
    pub(crate) fence: &'a str,
    pub(crate) waiters: &'a str,
    pub(crate) owner: OwnerId,
    pub(crate) lease: Duration,
    pub(crate) register: Register<'a>,
}

impl ScriptCall for SimpleAcquire<'_> {
    type Reply = KeyAcquired;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.simple_acquire
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
            .arg(millis(self.lease));
        self.register.fill(call);
    }

    /// The owner id is the attempt's own: a repeat finds it holding and reports it.
    fn idempotent(&self) -> bool {
        true
    }

    fn wrote_a_hold(&self, reply: &KeyAcquired) -> bool {
        matches!(reply, KeyAcquired::Granted { .. })
    }
}

/// `redlock_acquire.lua`: `SET key owner NX PX ttl` on one of a Redlock's servers, and
/// that server's fencing token.
pub(crate) struct RedlockAcquire<'a> {
    pub(crate) key: &'a str,
    pub(crate) fence: &'a str,
    pub(crate) owner: OwnerId,
    pub(crate) ttl: Duration,
}

impl ScriptCall for RedlockAcquire<'_> {
    type Reply = KeyAcquired;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.redlock_acquire
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key)
            .key(self.fence)
            .arg(self.owner)
            .arg(millis(self.ttl));
    }

    /// The owner id is the attempt's own: a repeat finds it holding and reports it.
    fn idempotent(&self) -> bool {
        true
    }
}

/// `redlock_raise_floor.lua`: raises one server's fencing floor to the token chosen from
/// the granting majority, while the key still holds `owner`. Replies whether it did.
pub(crate) struct RedlockRaiseFloor<'a> {
    pub(crate) key: &'a str,
    pub(crate) fence: &'a str,
    pub(crate) owner: OwnerId,
    pub(crate) token: FencingToken,
}

impl ScriptCall for RedlockRaiseFloor<'_> {
    type Reply = bool;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.redlock_raise_floor
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key)
            .key(self.fence)
            .arg(self.owner)
            .arg(self.token.get());
    }

    /// Raising a floor to a value it already reached changes nothing.
    fn idempotent(&self) -> bool {
        true
    }
}

/// What a compare-and-delete (or compare-and-extend) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compared {
    /// The key held this token: done.
    Done,
    /// No such key: its lease ran out.
    Gone,
    /// The key holds another token.
    Other,
}

impl redis::FromRedisValue for Compared {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        match value {
            Value::Int(1) => Ok(Self::Done),
            Value::Int(0) => Ok(Self::Gone),
            Value::Int(-1) => Ok(Self::Other),
            other => Err(unexpected("a compare-and-delete script", &other)),
        }
    }
}

/// `simple_release.lua`: deletes the key if it holds `owner`, and wakes one waiting
/// client.
pub(crate) struct SimpleRelease<'a> {
    pub(crate) key: &'a str,
    pub(crate) wake: WakeKeys<'a>,
    pub(crate) owner: OwnerId,
}

impl ScriptCall for SimpleRelease<'_> {
    type Reply = Compared;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.simple_release
    }

    /// Several tasks' calls go to Redis together (see `Connection::run`).
    fn batchable(&self) -> bool {
        true
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key);
        self.wake.fill(call);
        call.arg(self.owner);
    }
}

/// `redlock_release.lua`: deletes one Redlock server's key if it holds `owner`, and
/// publishes the release.
pub(crate) struct RedlockRelease<'a> {
    pub(crate) key: &'a str,
    pub(crate) channel: &'a str,
    pub(crate) owner: OwnerId,
}

impl ScriptCall for RedlockRelease<'_> {
    type Reply = Compared;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.redlock_release
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key).key(self.channel).arg(self.owner);
    }
}

/// `redlock_force_release.lua`: deletes one Redlock server's key whoever holds it and
/// publishes the release. Replies whether there was one.
pub(crate) struct RedlockForceRelease<'a> {
    pub(crate) key: &'a str,
    pub(crate) channel: &'a str,
}

impl ScriptCall for RedlockForceRelease<'_> {
    type Reply = bool;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.redlock_force_release
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key).key(self.channel);
    }

    fn idempotent(&self) -> bool {
        true
    }
}

/// `redlock_extend.lua`: sets a new TTL on the key if it holds `owner`.
pub(crate) struct RedlockExtend<'a> {
    pub(crate) key: &'a str,
    pub(crate) owner: OwnerId,
    pub(crate) ttl: Duration,
}

impl ScriptCall for RedlockExtend<'_> {
    type Reply = Compared;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.redlock_extend
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key).arg(self.owner).arg(millis(self.ttl));
    }

    fn idempotent(&self) -> bool {
        true
    }
}

/// `simple_inspect.lua`: the key's holder (if any) and its PTTL, in one read (a simple
/// lock's key, or one Redlock server's).
pub(crate) struct SimpleInspect<'a> {
    pub(crate) key: &'a str,
}

impl ScriptCall for SimpleInspect<'_> {
    type Reply = (Option<String>, i64);

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.simple_inspect
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key);
    }

    fn idempotent(&self) -> bool {
        true
    }
}

impl From<Compared> for super::Released {
    fn from(compared: Compared) -> Self {
        match compared {
            Compared::Done => Self::Freed,
            Compared::Gone => Self::Expired,
            Compared::Other => Self::OtherOwner,
        }
    }
}

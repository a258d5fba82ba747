//! Typed calls of the read-write lock's scripts (`lua/rwlock_*.lua`).

use std::time::Duration;

use redis::{ParsingError, Value};

use super::lock::granted;
use super::{Ints, Invocation, LuaScript, SCRIPTS, ScriptCall, unexpected};
use crate::api::fencing::FencingToken;
use crate::api::lease::millis;
use crate::backend::ids::OwnerId;
use crate::backend::ids::ReleaseId;
use crate::backend::scripts::Released;

/// The two sides of the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Read,
    Write,
}

impl Side {
    fn as_arg(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

/// How an acquire is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RwMode {
    /// A waiting acquire: a blocked writer records its intent.
    Acquire,
    /// `try_read` / `try_write`: a blocked writer leaves no trace.
    Try,
    /// Only add a hold to one this owner already has.
    Reenter,
}

impl RwMode {
    fn as_arg(self) -> &'static str {
        match self {
            Self::Acquire => "acquire",
            Self::Try => "try",
            Self::Reenter => "reenter",
        }
    }
}

/// What a read-write acquire found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RwAcquired {
    /// Granted: the writer's token (zero for a read) and this owner's holds of the side.
    Granted {
        token: FencingToken,
        count: u32,
    },
    /// Blocked: ms until the earliest conflicting lease or intent runs out (-1: none).
    Blocked {
        wait: i64,
    },
    NotReentered,
    /// A reader asked for the write side.
    UpgradeRefused,
}

impl redis::FromRedisValue for RwAcquired {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        const SCRIPT: &str = "rwlock_acquire";
        match *Ints::parse(&value, SCRIPT)?.as_slice() {
            [1, token, count] => {
                let (token, count) = granted(SCRIPT, token, count)?;
                Ok(Self::Granted { token, count })
            }
            [0, wait] => Ok(Self::Blocked { wait }),
            [2] => Ok(Self::NotReentered),
            [3] => Ok(Self::UpgradeRefused),
            _ => Err(unexpected(SCRIPT, &value)),
        }
    }
}

/// `rwlock_acquire.lua`: acquires or re-enters one side.
pub(crate) struct RwAcquire<'a> {
    pub(crate) key: &'a str,
    pub(crate) fence: &'a str,
    pub(crate) owner: OwnerId,
    pub(crate) lease: Duration,
    pub(crate) side: Side,
    pub(crate) mode: RwMode,
    /// How long a blocked writer's intent lives unless renewed.
    pub(crate) intent: Duration,
}

impl ScriptCall for RwAcquire<'_> {
    type Reply = RwAcquired;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.rwlock_acquire
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key)
            .key(self.fence)
            .arg(self.owner)
            .arg(millis(self.lease))
            .arg(self.side.as_arg())
            .arg(self.mode.as_arg())
            .arg(millis(self.intent));
    }

    /// Outside re-entry the owner id is the attempt's own: a repeat reports its hold.
    fn idempotent(&self) -> bool {
        self.mode != RwMode::Reenter
    }

    fn wrote_a_hold(&self, reply: &RwAcquired) -> bool {
        self.mode != RwMode::Reenter && matches!(reply, RwAcquired::Granted { .. })
    }
}

/// The lock hash and the channels its waiters listen on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RwKeys<'a> {
    pub(crate) lock: &'a str,
    pub(crate) read_channel: &'a str,
    pub(crate) write_channel: &'a str,
}

/// `rwlock_release.lua`: releases one hold of one side.
pub(crate) struct RwRelease<'a> {
    pub(crate) keys: RwKeys<'a>,
    pub(crate) owner: OwnerId,
    pub(crate) side: Side,
    pub(crate) release_id: ReleaseId,
    /// How long the hash remembers the release id.
    pub(crate) remember: Duration,
}

impl ScriptCall for RwRelease<'_> {
    type Reply = Released;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.rwlock_release
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.keys.lock)
            .key(self.keys.read_channel)
            .key(self.keys.write_channel)
            .arg(self.owner)
            .arg(self.side.as_arg())
            .arg(self.release_id)
            .arg(millis(self.remember));
    }
}

/// `rwlock_withdraw.lua`: a blocked writer stops waiting. Replies whether it had an
/// intent.
pub(crate) struct RwWithdraw<'a> {
    pub(crate) key: &'a str,
    pub(crate) read_channel: &'a str,
    pub(crate) owner: OwnerId,
}

impl ScriptCall for RwWithdraw<'_> {
    type Reply = bool;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.rwlock_withdraw
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key).key(self.read_channel).arg(self.owner);
    }

    fn idempotent(&self) -> bool {
        true
    }
}

/// `rwlock_force_release.lua`: deletes the lock whoever holds it. Replies whether there
/// was one.
pub(crate) struct RwForceRelease<'a> {
    pub(crate) keys: RwKeys<'a>,
}

impl ScriptCall for RwForceRelease<'_> {
    type Reply = bool;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.rwlock_force_release
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.keys.lock)
            .key(self.keys.read_channel)
            .key(self.keys.write_channel);
    }

    fn idempotent(&self) -> bool {
        true
    }
}

/// `rwlock_inspect.lua`: the hash, its PTTL and the server's time, in one read.
pub(crate) struct RwInspect<'a> {
    pub(crate) key: &'a str,
}

impl ScriptCall for RwInspect<'_> {
    type Reply = (Vec<(String, String)>, i64, (u64, u64));

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.rwlock_inspect
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key);
    }

    fn idempotent(&self) -> bool {
        true
    }
}

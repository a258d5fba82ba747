//! Typed calls of the expirable semaphore's scripts (`lua/xsem_*.lua`).

use std::time::Duration;

use redis::{ParsingError, Value};

use super::{Ints, Invocation, LuaScript, SCRIPTS, ScriptCall, unexpected};
use crate::api::lease::millis;
use crate::backend::ids::PermitId;

/// The keys every expirable semaphore script takes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct XsemKeys<'a> {
    /// The free-permit counter.
    pub(crate) free: &'a str,
    /// The held permits: a sorted set {permit id: expiry in server ms}.
    pub(crate) held: &'a str,
    pub(crate) channel: &'a str,
}

/// What an expirable acquire found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PermitTaken {
    Taken,
    /// None free: ms until the earliest held permit expires (-1: none is held).
    NoneFree {
        earliest_expiry: i64,
    },
    /// The semaphore does not exist (never initialised, or deleted).
    Missing,
}

impl redis::FromRedisValue for PermitTaken {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        const SCRIPT: &str = "xsem_acquire";
        match *Ints::parse(&value, SCRIPT)?.as_slice() {
            [1] => Ok(Self::Taken),
            [0, earliest_expiry] => Ok(Self::NoneFree { earliest_expiry }),
            [-1] => Ok(Self::Missing),
            _ => Err(unexpected(SCRIPT, &value)),
        }
    }
}

/// `xsem_acquire.lua`: takes one permit under each of `ids` for `lease`, all or none,
/// reclaiming expired ones.
pub(crate) struct XsemAcquire<'a> {
    pub(crate) keys: XsemKeys<'a>,
    pub(crate) ids: &'a [PermitId],
    pub(crate) lease: Duration,
}

impl ScriptCall for XsemAcquire<'_> {
    type Reply = PermitTaken;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.xsem_acquire
    }

    /// Several tasks' calls go to Redis together (see `Connection::run`).
    fn batchable(&self) -> bool {
        true
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.keys.free)
            .key(self.keys.held)
            .key(self.keys.channel)
            .arg(millis(self.lease));
        for id in self.ids {
            call.arg(*id);
        }
    }

    /// The permit ids are the attempt's own: a repeat finds them held and reports it.
    fn idempotent(&self) -> bool {
        true
    }
}

/// What returning a permit found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PermitReturned {
    Returned,
    /// Returned, but its lease had already run out.
    ReturnedLate,
    /// No such permit (already released or reclaimed).
    Unknown,
}

impl redis::FromRedisValue for PermitReturned {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        match value {
            Value::Int(1) => Ok(Self::Returned),
            Value::Int(2) => Ok(Self::ReturnedLate),
            Value::Int(0) => Ok(Self::Unknown),
            other => Err(unexpected("xsem_release", &other)),
        }
    }
}

/// `xsem_release.lua`: returns the permit `id` and wakes one waiter.
pub(crate) struct XsemRelease<'a> {
    pub(crate) keys: XsemKeys<'a>,
    pub(crate) id: PermitId,
}

impl ScriptCall for XsemRelease<'_> {
    type Reply = PermitReturned;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.xsem_release
    }

    /// Several tasks' calls go to Redis together (see `Connection::run`).
    fn batchable(&self) -> bool {
        true
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.keys.free)
            .key(self.keys.held)
            .key(self.keys.channel)
            .arg(self.id);
    }
}

/// `xsem_update_lease.lua`: gives a live permit a new lease. Replies false for an unknown
/// or already expired permit (never revived).
pub(crate) struct XsemUpdateLease<'a> {
    pub(crate) held: &'a str,
    pub(crate) id: PermitId,
    pub(crate) lease: Duration,
}

impl ScriptCall for XsemUpdateLease<'_> {
    type Reply = bool;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.xsem_update_lease
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.held).arg(self.id).arg(millis(self.lease));
    }
}

/// `xsem_inspect.lua`: free permits, live held permits and up to `limit` of them with the
/// time they have left, in one read (`[0]` when the semaphore does not exist).
pub(crate) struct XsemInspect<'a> {
    pub(crate) keys: XsemKeys<'a>,
    pub(crate) limit: usize,
}

/// What `xsem_inspect.lua` read: nothing (the semaphore does not exist), or the free
/// permits, the number of live holds and up to `limit` of them with their time left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum XsemSnapshot {
    Missing,
    Present {
        free: i64,
        live: u64,
        held: Vec<(PermitId, Duration)>,
    },
}

impl redis::FromRedisValue for XsemSnapshot {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        const SCRIPT: &str = "xsem_inspect";
        let bad = || unexpected(SCRIPT, &value);
        let int = |v: &Value| match v {
            Value::Int(n) => Ok(*n),
            _ => Err(bad()),
        };
        let Value::Array(items) = &value else {
            return Err(bad());
        };
        match items.as_slice() {
            [Value::Int(0)] => Ok(Self::Missing),
            [Value::Int(1), free, live, pairs @ ..] if pairs.len() % 2 == 0 => {
                let mut held = Vec::with_capacity(pairs.len() / 2);
                for pair in pairs.chunks_exact(2) {
                    let Value::BulkString(bytes) = &pair[0] else {
                        return Err(bad());
                    };
                    let id = std::str::from_utf8(bytes)
                        .ok()
                        .and_then(|text| text.parse().ok())
                        .ok_or_else(bad)?;
                    held.push((id, Duration::from_millis(int(&pair[1])?.unsigned_abs())));
                }
                Ok(Self::Present {
                    free: int(free)?,
                    live: int(live)?.unsigned_abs(),
                    held,
                })
            }
            _ => Err(bad()),
        }
    }
}

impl ScriptCall for XsemInspect<'_> {
    type Reply = XsemSnapshot;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.xsem_inspect
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.keys.free).key(self.keys.held).arg(self.limit);
    }

    fn idempotent(&self) -> bool {
        true
    }
}

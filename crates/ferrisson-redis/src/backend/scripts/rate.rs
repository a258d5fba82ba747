//! Typed call of the rate limiter's script (`lua/rate_acquire.lua`).

use std::time::Duration;

use redis::{ParsingError, Value};

use super::{Ints, Invocation, LuaScript, SCRIPTS, ScriptCall, unexpected, unsigned};

/// What a rate limiter's bucket gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RateAcquired {
    /// Taken; this many more could be taken at once.
    Allowed { remaining: u32 },
    /// Nothing taken; the permits asked for are due after this long.
    Denied { retry_after: Duration },
}

impl redis::FromRedisValue for RateAcquired {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        const SCRIPT: &str = "rate_acquire";
        match *Ints::parse(&value, SCRIPT)?.as_slice() {
            [1, remaining] => Ok(Self::Allowed {
                remaining: u32::try_from(unsigned(SCRIPT, remaining)?).unwrap_or(u32::MAX),
            }),
            [0, micros] => Ok(Self::Denied {
                retry_after: Duration::from_micros(unsigned(SCRIPT, micros)?),
            }),
            _ => Err(unexpected(SCRIPT, &value)),
        }
    }
}

/// `rate_acquire.lua`: takes `permits` from the bucket at `key`. Not resent after a
/// dropped connection: a repeat would take the permits twice.
pub(crate) struct RateAcquire<'a> {
    pub(crate) key: &'a str,
    pub(crate) interval_micros: u64,
    pub(crate) burst: u32,
    pub(crate) permits: u32,
}

impl ScriptCall for RateAcquire<'_> {
    type Reply = RateAcquired;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.rate_acquire
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key)
            .arg(self.interval_micros)
            .arg(self.burst)
            .arg(self.permits);
    }
}

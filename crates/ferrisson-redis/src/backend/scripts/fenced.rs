//! The typed call of the fenced write (`lua/fenced_set.lua`).

use redis::{ParsingError, Value};

use super::{Ints, Invocation, LuaScript, SCRIPTS, ScriptCall, unexpected, unsigned};
use crate::api::fencing::{FencedWrite, FencingToken};

/// What `fenced_set.lua` answered.
pub(crate) struct FencedReply(pub(crate) FencedWrite);

impl redis::FromRedisValue for FencedReply {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        const SCRIPT: &str = "fenced_set";
        match *Ints::parse(&value, SCRIPT)?.as_slice() {
            [1, _] => Ok(Self(FencedWrite::Accepted)),
            [0, highest] => Ok(Self(FencedWrite::Refused {
                highest: FencingToken::new(unsigned(SCRIPT, highest)?),
            })),
            _ => Err(unexpected(SCRIPT, &value)),
        }
    }
}

/// `fenced_set.lua`: stores `value` unless a newer token has written.
pub(crate) struct FencedSet<'a> {
    pub(crate) key: &'a str,
    pub(crate) value: &'a [u8],
    pub(crate) token: FencingToken,
}

impl ScriptCall for FencedSet<'_> {
    type Reply = FencedReply;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.fenced_set
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key).arg(self.value).arg(self.token.get());
    }

    /// A repeat by the same token writes the same value again.
    fn idempotent(&self) -> bool {
        true
    }
}

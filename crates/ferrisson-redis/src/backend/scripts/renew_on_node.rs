//! The typed call of `lua/renew_on_node.lua`: the watchdog's renewals of one cluster node,
//! whatever their layouts and hash slots, in one call.

use std::time::Duration;

use redis::{ParsingError, Value};

use super::{Invocation, LuaScript, SCRIPTS, ScriptCall, unexpected};
use crate::api::lease::millis;
use crate::backend::holds::Renewal;
use crate::backend::ids::OwnerId;

/// What the node did with one hold of a [`RenewOnNode`] call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeRenewal {
    /// `1`: renewed.
    Renewed,
    /// `0`: gone, or held by another owner (a permit: gone or already expired).
    Lost,
    /// `-1`: the node does not serve the key's slot now; nothing of it was touched.
    Elsewhere,
}

impl redis::FromRedisValue for NodeRenewal {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        match value {
            Value::Int(1) => Ok(Self::Renewed),
            Value::Int(0) => Ok(Self::Lost),
            Value::Int(-1) => Ok(Self::Elsewhere),
            other => Err(unexpected("renew_on_node", &other)),
        }
    }
}

/// Renews holds of any layout whose keys the node at hand serves, each checked by the
/// server as the script touches it (no KEYS: a cluster refuses declared keys of several
/// slots in one call).
pub(crate) struct RenewOnNode<'a> {
    pub(crate) lease: Duration,
    /// Each hold's layout, key and owner.
    pub(crate) holds: &'a [(Renewal, &'a str, OwnerId)],
}

impl ScriptCall for RenewOnNode<'_> {
    type Reply = Vec<NodeRenewal>;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.renew_on_node
    }

    fn fill(&self, call: &mut Invocation) {
        call.arg(millis(self.lease));
        for &(renewal, key, owner) in self.holds {
            call.arg(renewal.layout()).arg(key).arg(owner);
        }
    }

    fn idempotent(&self) -> bool {
        true
    }

    fn wrote_a_hold(&self, reply: &Vec<NodeRenewal>) -> bool {
        reply.contains(&NodeRenewal::Renewed)
    }
}

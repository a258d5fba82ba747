//! Typed calls of the election's scripts (`lua/election_*.lua`).

use std::time::Duration;

use redis::{ParsingError, Value};

use super::simple::Compared;
use super::{Ints, Invocation, LuaScript, SCRIPTS, ScriptCall, unexpected, unsigned};
use crate::api::fencing::FencingToken;
use crate::api::lease::millis;
use crate::backend::ids::OwnerId;

/// What a campaign found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Campaigned {
    /// Elected: the term's token and when it began (server time, ms since 1970).
    Elected { term: FencingToken, since_ms: u64 },
    /// Another candidate leads, for `pttl` ms more (-1: no expiry).
    Led { pttl: i64 },
}

impl redis::FromRedisValue for Campaigned {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        const SCRIPT: &str = "election_campaign";
        match *Ints::parse(&value, SCRIPT)?.as_slice() {
            [1, term, since] => Ok(Self::Elected {
                term: FencingToken::new(unsigned(SCRIPT, term)?),
                since_ms: unsigned(SCRIPT, since)?,
            }),
            [0, pttl] => Ok(Self::Led { pttl }),
            _ => Err(unexpected(SCRIPT, &value)),
        }
    }
}

/// `election_campaign.lua`: elects `owner` if nobody leads.
pub(crate) struct Campaign<'a> {
    pub(crate) key: &'a str,
    pub(crate) fence: &'a str,
    pub(crate) terms: &'a str,
    pub(crate) leaders: &'a str,
    pub(crate) owner: OwnerId,
    pub(crate) lease: Duration,
    pub(crate) candidate: &'a str,
}

impl ScriptCall for Campaign<'_> {
    type Reply = Campaigned;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.election_campaign
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key)
            .key(self.fence)
            .key(self.terms)
            .key(self.leaders)
            .arg(self.owner)
            .arg(millis(self.lease))
            .arg(self.candidate);
    }

    /// The owner id is the attempt's own: a repeat finds it leading and reports its term.
    fn idempotent(&self) -> bool {
        true
    }
}

/// `election_resign.lua`: ends `owner`'s term if it still leads.
pub(crate) struct Resign<'a> {
    pub(crate) key: &'a str,
    pub(crate) channel: &'a str,
    pub(crate) leaders: &'a str,
    pub(crate) owner: OwnerId,
}

impl ScriptCall for Resign<'_> {
    type Reply = Compared;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.election_resign
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key)
            .key(self.channel)
            .key(self.leaders)
            .arg(self.owner);
    }
}

/// One recorded term: who was elected, under which id, with which token, when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TermRecord {
    /// The record's stream id, to read the terms after it.
    pub(crate) id: String,
    pub(crate) owner: OwnerId,
    pub(crate) candidate: String,
    pub(crate) term: FencingToken,
    pub(crate) since_ms: u64,
}

impl redis::FromRedisValue for TermRecord {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        const SCRIPT: &str = "election_observe";
        let bad = || unexpected(SCRIPT, &value);
        let Value::Array(parts) = &value else {
            return Err(bad());
        };
        let [Value::BulkString(id), Value::Array(fields)] = parts.as_slice() else {
            return Err(bad());
        };
        let (mut owner, mut candidate, mut term, mut since_ms) = (None, None, None, None);
        for pair in fields.chunks(2) {
            let [Value::BulkString(field), Value::BulkString(text)] = pair else {
                return Err(bad());
            };
            let text = String::from_utf8_lossy(text);
            match field.as_slice() {
                b"owner" => owner = text.parse::<OwnerId>().ok(),
                b"id" => candidate = Some(text.into_owned()),
                b"term" => term = text.parse::<u64>().ok().map(FencingToken::new),
                b"since" => since_ms = text.parse::<u64>().ok(),
                _ => {}
            }
        }
        match (owner, candidate, term, since_ms) {
            (Some(owner), Some(candidate), Some(term), Some(since_ms)) => Ok(Self {
                id: String::from_utf8_lossy(id).into_owned(),
                owner,
                candidate,
                term,
                since_ms,
            }),
            _ => Err(bad()),
        }
    }
}

/// What an observation read: who leads now, for how long, and the terms recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Observed {
    /// The owner id in the election key; `None` when nobody leads.
    pub(crate) leader: Option<OwnerId>,
    /// The election key's remaining ttl in ms (-2: nobody leads, -1: no expiry).
    pub(crate) pttl: i64,
    /// Terms recorded after the one asked about, oldest first.
    pub(crate) terms: Vec<TermRecord>,
}

impl redis::FromRedisValue for Observed {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        const SCRIPT: &str = "election_observe";
        let Value::Array(parts) = value else {
            return Err(unexpected(SCRIPT, &value));
        };
        let mut parts = parts.into_iter();
        let (Some(leader), Some(Value::Int(pttl)), Some(terms), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(ParsingError::from(format!(
                "{SCRIPT} returned a malformed reply"
            )));
        };
        let leader = match leader {
            Value::Nil => None,
            Value::BulkString(text) => Some(
                String::from_utf8_lossy(&text)
                    .parse::<OwnerId>()
                    .map_err(|e| ParsingError::from(format!("{SCRIPT}: leader {e}")))?,
            ),
            other => return Err(unexpected(SCRIPT, &other)),
        };
        Ok(Self {
            leader,
            pttl,
            terms: redis::FromRedisValue::from_redis_value(terms)?,
        })
    }
}

/// `election_observe.lua`: who leads, and the terms recorded after `after` (an empty
/// `after`: the latest term only).
pub(crate) struct Observe<'a> {
    pub(crate) key: &'a str,
    pub(crate) terms: &'a str,
    pub(crate) after: &'a str,
}

impl ScriptCall for Observe<'_> {
    type Reply = Observed;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.election_observe
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key).key(self.terms).arg(self.after);
    }

    fn idempotent(&self) -> bool {
        true
    }
}

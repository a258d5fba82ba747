//! The typed call of the inspector's read (`lua/inspect_layout.lua`).

use redis::{ParsingError, Value};

use super::{Invocation, LuaScript, SCRIPTS, ScriptCall, unexpected};

/// What a name's main key holds, and which of its companions exist: what the inspector
/// tells the primitive's kind from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyLayout {
    /// The key's type as `TYPE` names it (`none` when it does not exist).
    pub(crate) key_type: String,
    /// Its remaining time to live in ms (-1: no expiry, -2: no key).
    pub(crate) pttl: i64,
    /// A string's value, or a hash's field names.
    pub(crate) contents: Vec<Vec<u8>>,
    /// True when `contents` was cut short (see the script's header).
    pub(crate) cut: bool,
    /// Whether each companion key asked about exists, in the order asked.
    pub(crate) companions: Vec<bool>,
}

impl redis::FromRedisValue for KeyLayout {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        const SCRIPT: &str = "inspect_layout";
        let reply = value.clone();
        let (key_type, pttl, contents, cut, companions): (
            String,
            i64,
            Vec<Vec<u8>>,
            i64,
            Vec<i64>,
        ) = redis::from_redis_value(value).map_err(|_| unexpected(SCRIPT, &reply))?;
        Ok(Self {
            key_type,
            pttl,
            contents,
            cut: cut != 0,
            companions: companions.into_iter().map(|exists| exists != 0).collect(),
        })
    }
}

/// `inspect_layout.lua`: reads `key` and whether each of `companions` exists.
pub(crate) struct InspectLayout<'a> {
    pub(crate) key: &'a str,
    pub(crate) companions: &'a [String],
}

impl ScriptCall for InspectLayout<'_> {
    type Reply = KeyLayout;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.inspect_layout
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key);
        for companion in self.companions {
            call.key(companion.as_str());
        }
    }

    fn idempotent(&self) -> bool {
        true
    }
}

//! Typed calls of the countdown latch's scripts (`lua/latch_*.lua`).

use super::{Invocation, LuaScript, SCRIPTS, ScriptCall};

/// `latch_count_down.lua`: counts down once; at zero deletes the latch and wakes every
/// waiter. Replies the count left.
pub(crate) struct LatchCountDown<'a> {
    pub(crate) key: &'a str,
    pub(crate) channel: &'a str,
}

impl ScriptCall for LatchCountDown<'_> {
    type Reply = u64;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.latch_count_down
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key).key(self.channel);
    }
}

/// `latch_delete.lua`: deletes the latch and wakes every waiter. Replies whether there
/// was one.
pub(crate) struct LatchDelete<'a> {
    pub(crate) key: &'a str,
    pub(crate) channel: &'a str,
}

impl ScriptCall for LatchDelete<'_> {
    type Reply = bool;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.latch_delete
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key).key(self.channel);
    }

    fn idempotent(&self) -> bool {
        true
    }
}

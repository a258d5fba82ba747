//! Typed calls of the scripts by which a lock wakes one waiting client rather than every
//! client with a waiter (`lua/wake*.lua`), shared by `Lock` and `SimpleLock`: the keys
//! their scripts take for it, what an acquire tells about its client's wait, the
//! withdrawal of a client that waits no more, and the forced release.

use super::{Invocation, LuaScript, SCRIPTS, ScriptCall};

/// The keys by which a release wakes one waiting client (`wake.lua`): the set of waiting
/// clients and the prefix of their channels (see
/// [`WakeNames`](crate::backend::keys::WakeNames)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct WakeKeys<'a> {
    pub(crate) waiters: &'a str,
    pub(crate) channels: &'a str,
}

impl WakeKeys<'_> {
    /// Adds the two keys, in the order every script of the family takes them (after the
    /// lock's own key).
    pub(crate) fn fill(self, call: &mut Invocation) {
        call.key(self.waiters).key(self.channels);
    }
}

/// Whether an acquire registers its client as waiting (the last two ARGV of
/// `lock_acquire.lua` and `simple_acquire.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Register<'a> {
    /// Registers nothing (a first attempt, `try_lock`).
    No,
    /// Registers `client` if refused; keeps it registered if granted while `others`.
    Waiting { client: &'a str, others: bool },
}

impl Register<'_> {
    /// Adds the client id (`''` for none) and the others flag (`'1'` or `'0'`).
    pub(crate) fn fill(self, call: &mut Invocation) {
        let (client, others) = match self {
            Register::No => ("", false),
            Register::Waiting { client, others } => (client, others),
        };
        call.arg(client).arg(if others { "1" } else { "0" });
    }
}

/// `wake_withdraw.lua`: the client's last local waiter left without the lock (or a
/// wake-up reached the client with none left); wakes the next waiting client if the lock
/// is free. Replies whether one was woken.
pub(crate) struct WakeWithdraw<'a> {
    /// The lock's key (only whether it exists counts).
    pub(crate) key: &'a str,
    pub(crate) wake: WakeKeys<'a>,
    pub(crate) client: &'a str,
}

impl ScriptCall for WakeWithdraw<'_> {
    type Reply = bool;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.wake_withdraw
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key);
        self.wake.fill(call);
        call.arg(self.client);
    }

    fn idempotent(&self) -> bool {
        true
    }
}

/// `wake_force_release.lua`: deletes a lock whoever holds it and wakes one waiting
/// client. Replies whether there was one.
pub(crate) struct WakeForceRelease<'a> {
    pub(crate) key: &'a str,
    pub(crate) wake: WakeKeys<'a>,
}

impl ScriptCall for WakeForceRelease<'_> {
    type Reply = bool;

    fn script(&self) -> &'static LuaScript {
        &SCRIPTS.wake_force_release
    }

    fn fill(&self, call: &mut Invocation) {
        call.key(self.key);
        self.wake.fill(call);
    }

    fn idempotent(&self) -> bool {
        true
    }
}

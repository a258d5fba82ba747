//! Every Lua script of the crate, one file each under `lua/`, loaded at connect.
//!
//! Calls go through `EVALSHA`; a `NOSCRIPT` reply (after `SCRIPT FLUSH`, a server restart
//! or a new cluster node) makes the connection seam load the script and send the call
//! again, so a flushed cache costs one extra round trip, never an error.
//!
//! Under `maxmemory-policy noeviction` with memory full, Redis refuses a script without
//! a shebang at its first `denyoom` command (`HSET`, `HINCRBY`, `INCR`, `ZADD`, ...),
//! unless another write ran before it in the same call: whether a script ran then
//! depended on the order of its commands. So every script declares it with a Redis 7
//! shebang on its first line:
//!
//! - `#!lua flags=allow-oom`: renewals, releases, count-downs, cancels, deletes. What is
//!   held stays renewable and releasable while memory is full; these never create a key.
//! - `#!lua` (no flags): acquires and anything that can create keys. Refused before they
//!   run while memory is full, whatever their first command.
//! - `#!lua flags=no-writes`: reads.
//!
//! A script that hands out fencing tokens is `fencing_token.lua` (the shebang and the
//! token function) followed by the script's own file, joined at compile time.
//!
//! The shebang is why ferrisson needs Redis 7.0 (`Client::connect` checks the version).

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{Cmd, ParsingError, ToRedisArgs, Value};

use crate::api::error::Result;

pub(crate) mod election;
pub(crate) mod fair;
pub(crate) mod fenced;
pub(crate) mod inspect;
pub(crate) mod latch;
pub(crate) mod lock;
pub(crate) mod rate;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
pub(crate) mod simple;
pub(crate) mod wake;
pub(crate) mod xsem;

/// One call of one script: its KEYS and ARGV in the order the script's header lists them,
/// and its reply as a type.
///
/// Primitives build a call and hand it to [`Connection::run`](crate::redis::connection::Connection::run);
/// none of them sees `EVALSHA`, a key slice or an untyped reply.
pub(crate) trait ScriptCall {
    /// The script's reply, parsed; a reply the script never gives is a parse error.
    type Reply: redis::FromRedisValue;

    /// The script, from [`SCRIPTS`].
    fn script(&self) -> &'static LuaScript;

    /// Adds KEYS and ARGV to `invocation`.
    fn fill(&self, invocation: &mut Invocation);

    /// True when running the call twice leaves Redis as running it once and gives the same
    /// reply: then a call cut off by a dropped connection may be sent again.
    fn idempotent(&self) -> bool {
        false
    }

    /// True when `reply` says the call granted or extended a hold: with replica
    /// acknowledgements required, such a write counts only once enough replicas have it.
    fn wrote_a_hold(&self, _reply: &Self::Reply) -> bool {
        false
    }
}

/// What a lock's release script did; the scripts share these reply codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// `1`: the last hold went; the lock is free.
    Freed,
    /// `2`: one hold went, others of the same owner remain.
    StillHeld,
    /// `3`: this release id was applied before (a retry).
    AlreadyApplied,
    /// `0`: no such lock: its lease ran out.
    Expired,
    /// `-1`: the lock is held, but not by this owner.
    OtherOwner,
}

impl redis::FromRedisValue for Released {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        match value {
            Value::Int(1) => Ok(Self::Freed),
            Value::Int(2) => Ok(Self::StillHeld),
            Value::Int(3) => Ok(Self::AlreadyApplied),
            Value::Int(0) => Ok(Self::Expired),
            Value::Int(-1) => Ok(Self::OtherOwner),
            other => Err(crate::redis::scripts::unexpected(
                "a release script",
                &other,
            )),
        }
    }
}

/// The integers of a script's array reply (scripts reply with at most four), parsed without
/// allocating, for matching against the replies the script's header lists.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ints {
    values: [i64; 4],
    len: usize,
}

impl Ints {
    /// Reads an array of integers, or a lone integer as an array of one.
    pub(crate) fn parse(value: &Value, script: &str) -> Result<Self, ParsingError> {
        let mut ints = Self {
            values: [0; 4],
            len: 0,
        };
        let items = match value {
            Value::Array(items) => items.as_slice(),
            single @ Value::Int(_) => std::slice::from_ref(single),
            other => return Err(unexpected(script, other)),
        };
        if items.len() > ints.values.len() {
            return Err(unexpected(script, value));
        }
        for (slot, item) in ints.values.iter_mut().zip(items) {
            let Value::Int(n) = item else {
                return Err(unexpected(script, value));
            };
            *slot = *n;
        }
        ints.len = items.len();
        Ok(ints)
    }

    pub(crate) fn as_slice(&self) -> &[i64] {
        &self.values[..self.len]
    }
}

/// The error for a reply a script never gives.
pub(crate) fn unexpected(script: &str, reply: &Value) -> ParsingError {
    ParsingError::from(format!("{script} returned {reply:?}"))
}

/// A script's integer reply as a non-negative count or token.
pub(crate) fn unsigned(script: &str, n: i64) -> Result<u64, ParsingError> {
    u64::try_from(n).map_err(|_| ParsingError::from(format!("{script} returned {n}")))
}

/// One Lua script: its source, for `SCRIPT LOAD`, and its SHA1, for `EVALSHA`.
pub(crate) struct LuaScript {
    source: &'static str,
    hash: String,
}

impl LuaScript {
    fn new(source: &'static str) -> Self {
        Self {
            source,
            hash: redis::Script::new(source).get_hash().to_owned(),
        }
    }

    /// `SCRIPT LOAD` of this script.
    pub(crate) fn load_cmd(&self) -> Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(self.source);
        cmd
    }
}

/// The KEYS and ARGV of one script call, gathered in two buffers (no allocation per
/// argument) and sent as one `EVALSHA`.
pub(crate) struct Invocation {
    keys: Cmd,
    key_count: usize,
    args: Cmd,
}

impl Invocation {
    pub(crate) fn new() -> Self {
        Self {
            keys: Cmd::new(),
            key_count: 0,
            args: Cmd::new(),
        }
    }

    /// Adds a key (KEYS[n]).
    pub(crate) fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        self.keys.arg(key);
        self.key_count += 1;
        self
    }

    /// Adds an argument (ARGV[n]).
    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        self.args.arg(arg);
        self
    }

    /// The first key, by which a cluster routes the call.
    pub(crate) fn first_key(&self) -> Option<&[u8]> {
        self.keys.args_iter().find_map(|arg| match arg {
            redis::Arg::Simple(bytes) => Some(bytes),
            _ => None,
        })
    }

    /// `EVALSHA` of `script` with these KEYS and ARGV.
    pub(crate) fn evalsha(&self, script: &LuaScript) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&script.hash).arg(self.key_count);
        for part in self.keys.args_iter().chain(self.args.args_iter()) {
            if let redis::Arg::Simple(bytes) = part {
                cmd.arg(bytes);
            }
        }
        cmd
    }
}

macro_rules! source {
    ($($file:literal),+) => {
        concat!($(include_str!(concat!("../../../lua/", $file))),+)
    };
}

/// Declares the scripts: a name and its files, joined in order. A script that hands out
/// fencing tokens starts with `fencing_token.lua`, which carries the shebang and the token
/// function, so that the token is computed by one piece of Lua everywhere; the fair lock's
/// scripts share their queue functions through `fair_queue.lua`, and the scripts of the
/// locks that wake one waiting client (`Lock`, `SimpleLock`) theirs through `wake.lua`,
/// each after a shebang file (`fencing_token.lua` or `allow_oom.lua`).
macro_rules! scripts {
    ($($name:ident => [$($file:literal),+],)+) => {
        /// The crate's scripts, hashed once per process.
        pub(crate) struct Scripts {
            $(pub(crate) $name: LuaScript,)+
        }

        pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
            $($name: LuaScript::new(source!($($file),+)),)+
        });

        /// The source of every script, for `SCRIPT LOAD`.
        const SOURCES: &[&str] = &[$(source!($($file),+),)+];
    };
}

scripts! {
    wake_withdraw => ["allow_oom.lua", "wake.lua", "wake_withdraw.lua"],
    wake_force_release => ["allow_oom.lua", "wake.lua", "wake_force_release.lua"],
    lock_acquire => ["fencing_token.lua", "wake.lua", "lock_acquire.lua"],
    lock_release => ["allow_oom.lua", "wake.lua", "lock_release.lua"],
    lock_abandon => ["allow_oom.lua", "wake.lua", "lock_abandon.lua"],
    lock_renew => ["lock_renew.lua"],
    lock_inspect => ["lock_inspect.lua"],
    simple_acquire => ["fencing_token.lua", "wake.lua", "simple_acquire.lua"],
    simple_release => ["allow_oom.lua", "wake.lua", "simple_release.lua"],
    simple_renew => ["simple_renew.lua"],
    simple_inspect => ["simple_inspect.lua"],
    fenced_set => ["fenced_set.lua"],
    fair_acquire => ["fencing_token.lua", "fair_queue.lua", "fair_acquire.lua"],
    fair_release => ["allow_oom.lua", "fair_queue.lua", "fair_release.lua"],
    fair_cancel => ["allow_oom.lua", "fair_queue.lua", "fair_cancel.lua"],
    fair_force_release => ["allow_oom.lua", "fair_queue.lua", "fair_force_release.lua"],
    fair_inspect => ["fair_inspect.lua"],
    rwlock_acquire => ["fencing_token.lua", "rwlock_acquire.lua"],
    rwlock_release => ["rwlock_release.lua"],
    rwlock_renew => ["rwlock_renew.lua"],
    rwlock_force_release => ["rwlock_force_release.lua"],
    rwlock_withdraw => ["rwlock_withdraw.lua"],
    rwlock_inspect => ["rwlock_inspect.lua"],
    redlock_acquire => ["fencing_token.lua", "redlock_acquire.lua"],
    redlock_raise_floor => ["redlock_raise_floor.lua"],
    redlock_extend => ["redlock_extend.lua"],
    redlock_release => ["redlock_release.lua"],
    redlock_force_release => ["redlock_force_release.lua"],
    semaphore_acquire => ["semaphore_acquire.lua"],
    semaphore_release => ["semaphore_release.lua"],
    semaphore_add => ["semaphore_add.lua"],
    semaphore_drain => ["semaphore_drain.lua"],
    semaphore_set => ["semaphore_set.lua"],
    semaphore_delete => ["semaphore_delete.lua"],
    xsem_acquire => ["xsem_acquire.lua"],
    xsem_release => ["xsem_release.lua"],
    xsem_update_lease => ["xsem_update_lease.lua"],
    xsem_inspect => ["xsem_inspect.lua"],
    xsem_renew => ["xsem_renew.lua"],
    latch_count_down => ["latch_count_down.lua"],
    latch_delete => ["latch_delete.lua"],
    election_campaign => ["fencing_token.lua", "election_campaign.lua"],
    election_resign => ["election_resign.lua"],
    election_observe => ["election_observe.lua"],
    rate_acquire => ["rate_acquire.lua"],
    inspect_layout => ["inspect_layout.lua"],
}

/// Loads every script into the server's script cache (one pipeline).
pub(crate) async fn preload(conn: &mut impl ConnectionLike) -> Result<()> {
    let mut pipe = redis::pipe();
    for source in SOURCES {
        pipe.cmd("SCRIPT").arg("LOAD").arg(*source);
    }
    let _: Vec<String> = pipe.query_async(conn).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::SOURCES;

    #[test]
    fn every_script_declares_how_it_runs_with_memory_full() {
        for source in SOURCES {
            let first = source.lines().next().unwrap_or_default();
            assert!(
                ["#!lua", "#!lua flags=allow-oom", "#!lua flags=no-writes"].contains(&first),
                "a script starts with {first:?}, not a shebang:\n{source}"
            );
        }
    }
}

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
//! - `#!lua flags=allow-oom,allow-cross-slot-keys`: the watchdog's renewals of one cluster
//!   node, whose keys lie in many hash slots and come as arguments (see
//!   `renew_on_node.lua`).
//!
//! A script that hands out fencing tokens is `fencing_token.lua` (the shebang and the
//! token function) followed by the script's own file, joined at compile time.
//!
//! The shebang is why ferrisson needs Redis 7.0 (`Client::connect` checks the version).

use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{Cmd, ParsingError, RedisWrite as _, ToRedisArgs, Value};

use crate::api::error::Result;
use crate::api::error::{RedisResultExt as _, command_error};
use crate::api::fencing::FencingToken;

pub(crate) mod election;
pub(crate) mod fair;
pub(crate) mod fenced;
pub(crate) mod inspect;
pub(crate) mod latch;
pub(crate) mod lock;
pub(crate) mod rate;
pub(crate) mod renew_on_node;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
pub(crate) mod simple;
pub(crate) mod wake;
pub(crate) mod xsem;

/// One call of one script: its KEYS and ARGV in the order the script's header lists them,
/// and its reply as a type.
///
/// Primitives build a call and hand it to [`Connection::run`](crate::backend::connection::Connection::run);
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

    /// True when calls of this script from several tasks may go to Redis together, as
    /// one call of the script's batch form (see [`LuaScript::batch`]), when one is
    /// already in flight. Only for scripts declared with a batch form in [`SCRIPTS`].
    fn batchable(&self) -> bool {
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
            other => Err(crate::backend::scripts::unexpected(
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
    /// Reads an array of integers (each an integer reply, or a decimal number as text),
    /// or a lone integer as an array of one.
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
            *slot = match item {
                Value::Int(n) => *n,
                // A fencing token comes as the text the script stored (`fencing_token.lua`).
                Value::BulkString(text) => {
                    decimal(text).ok_or_else(|| unexpected(script, value))?
                }
                _ => return Err(unexpected(script, value)),
            };
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

/// A decimal integer sent as text.
fn decimal(text: &[u8]) -> Option<i64> {
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// The fencing token an acquire replies alone, as the text `fencing_token.lua` stored
/// (how the lock acquires answer a grant of a new hold: a single value costs Redis less
/// than an array).
pub(crate) fn lone_token(script: &str, reply: &Value) -> Result<FencingToken, ParsingError> {
    match reply {
        Value::BulkString(text) => match decimal(text) {
            Some(token) => Ok(FencingToken::new(unsigned(script, token)?)),
            None => Err(unexpected(script, reply)),
        },
        other => Err(unexpected(script, other)),
    }
}

/// A script's integer reply as a non-negative count or token.
pub(crate) fn unsigned(script: &str, n: i64) -> Result<u64, ParsingError> {
    u64::try_from(n).map_err(|_| ParsingError::from(format!("{script} returned {n}")))
}

/// One Lua script: its source, for `SCRIPT LOAD`, and its SHA1, for `EVALSHA`; and for
/// the scripts whose calls may be coalesced, its batch form.
pub(crate) struct LuaScript {
    source: Cow<'static, str>,
    hash: String,
    batch: Option<Box<LuaScript>>,
}

/// The loop of a batch form, after the script's own text made into `one(key_base,
/// arg_base, key_count, arg_count)` (see [`LuaScript::add_batch_form`]).
///
/// ARGV[1] is the number of calls n. When every call has as many keys and arguments as
/// the others (the usual case: one script's calls differ in their values, not their
/// shape), ARGV[2] and ARGV[3] are those two counts; otherwise both are empty and
/// ARGV[2 + 2i] and ARGV[3 + 2i] are the i-th call's. Then come every call's arguments in
/// order, as KEYS holds every call's keys in order. (Reading two counts per call cost
/// 0.3–0.7 µs of Redis CPU per acquire and release, measured on the server alone in
/// batches of 64: `tonumber` parses its text twice.) Each call
/// runs as it would alone, on its own slice of KEYS and ARGV (read in place, at its
/// offsets: copying each call's keys and arguments into tables of its own cost Redis
/// about a fifth of a batch's CPU), and answers in its place: a call that raised an error
/// answers that error (its writes before the error stay, as they would alone), a call
/// that returned nothing answers nil (`false`: a nil would end the reply array there).
/// The generated text then writes the batch's fencing floors, if its calls made tokens,
/// and returns `replies` (see [`LuaScript::add_batch_form`]).
const BATCH_LOOP: &str = "\
local calls = tonumber(ARGV[1])
local each_k, each_a = tonumber(ARGV[2]), tonumber(ARGV[3])
local replies = {}
local k, a = 0, 3
if not each_k then
  a = 3 + 2 * calls
end
for i = 1, calls do
  local nk, na = each_k, each_a
  if not nk then
    nk, na = tonumber(ARGV[2 + 2 * i]), tonumber(ARGV[3 + 2 * i])
  end
  local ok, reply = pcall(one, k, a, nk, na)
  k, a = k + nk, a + na
  if not ok then
    if type(reply) == 'table' and reply.err then
      reply = {err = reply.err}
    else
      reply = {err = 'ERR ' .. tostring(reply)}
    end
  elseif reply == nil then
    reply = false
  end
  replies[i] = reply
end
";

/// A script's own text as the body of `one` in its batch form: its full-line comments
/// dropped, and its reads of KEYS and ARGV moved to its call's offsets (`KEYS[1]` is
/// `KEYS[key_base + 1]`, `#ARGV` is `arg_count`). A script's own text reads KEYS and
/// ARGV only by index or length (a test holds every batched script to that).
fn batch_body(body: &str) -> String {
    body.lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .map(|line| {
            line.replace("KEYS[", "KEYS[key_base + ")
                .replace("ARGV[", "ARGV[arg_base + ")
                .replace("#KEYS", "key_count")
                .replace("#ARGV", "arg_count")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

impl LuaScript {
    fn new(source: impl Into<Cow<'static, str>>) -> Self {
        let source = source.into();
        Self {
            hash: redis::Script::new(&source).get_hash().to_owned(),
            source,
            batch: None,
        }
    }

    /// The same script with a batch form: the script's text (`source`) up to its own
    /// file `body` (the shebang and the shared functions, or the shebang line alone for a
    /// script of one file) stays as it is; `body` becomes `local function
    /// one(key_base, arg_base, key_count, arg_count)` ([`batch_body`]), which
    /// [`BATCH_LOOP`] calls once per call of the batch. Generated from the single
    /// script's text, so the two never drift; the shared functions (the fencing token,
    /// the wake-up) use only their parameters, never KEYS or ARGV.
    fn add_batch_form(&mut self, body: &'static str) {
        let (head, body) = match self.source.strip_suffix(body) {
            Some(head) if !head.is_empty() => (head.to_owned(), body),
            // A script of one file carries its shebang on its first line.
            _ => match body.split_once('\n') {
                Some((shebang, rest)) => (format!("{shebang}\n"), rest),
                None => (String::new(), body),
            },
        };
        // A script that reads the server's clock reads it once per batch (see
        // `fencing_token.lua`, `server_clock.lua`); one that hands out fencing tokens
        // reads and writes each floor once per batch (`fencing_token.lua`).
        let clock = if head.contains("\nlocal batch_clock\n") {
            "batch_clock = read_clock()\n"
        } else {
            ""
        };
        let (floors, write_floors) = if head.contains("\nlocal batch_floors\n") {
            ("batch_floors = {}\n", "write_batch_floors()\n")
        } else {
            ("", "")
        };
        let body = batch_body(body);
        let batch = format!(
            "{head}local function one(key_base, arg_base, key_count, arg_count)\n{body}\nend\n{clock}{floors}{BATCH_LOOP}{write_floors}return replies\n"
        );
        self.batch = Some(Box::new(Self::new(batch)));
    }

    /// The batch form, for the scripts that have one.
    pub(crate) fn batch(&self) -> Option<&LuaScript> {
        self.batch.as_deref()
    }

    /// `EVALSHA` of this script, with `keys` keys to follow.
    pub(crate) fn evalsha_cmd(&self, keys: usize) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.hash.as_str()).arg(keys);
        cmd
    }

    /// `SCRIPT LOAD` of this script.
    pub(crate) fn load_cmd(&self) -> Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(self.source.as_ref());
        cmd
    }
}

/// The KEYS and ARGV of one script call, written by [`ScriptCall::fill`] straight into
/// the `EVALSHA` command, sized exactly before the first byte is written.
///
/// `EVALSHA` wants the number of keys before the keys and every key before the first
/// argument, while a call's `fill` may add them in any order (a renewal alternates them).
/// So `fill` runs three times over the same `Invocation`: once to count the keys and
/// measure every part, once writing only the keys, once only the arguments. Filling is a
/// handful of stack writes per call; the command's two buffers (its bytes and its
/// argument offsets) are reserved once, at their final size, where gathering keys and
/// arguments in buffers of their own and copying them over cost seven allocations and as
/// many reallocations per call. The buffers themselves come from a call that finished on
/// the same thread when there is one (see [`EvalSha::recycle`]).
pub(crate) struct Invocation {
    pass: Pass,
    sizes: Sizes,
    cmd: Cmd,
}

/// What one run of `fill` over an [`Invocation`] does.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Counts keys and arguments, and their bytes.
    Measure,
    /// Writes the keys into the command, skips the arguments.
    Keys,
    /// Writes the arguments, skips the keys.
    Args,
}

/// The parts a call's `fill` adds: how many keys and arguments (as Redis arguments: one
/// value may write several), and their bytes.
#[derive(Default)]
struct Sizes {
    keys: usize,
    args: usize,
    bytes: usize,
    /// Set while a key is measured, so that its parts count as keys.
    in_key: bool,
}

impl redis::RedisWrite for Sizes {
    fn write_arg(&mut self, arg: &[u8]) {
        if self.in_key {
            self.keys += 1;
        } else {
            self.args += 1;
        }
        self.bytes += arg.len();
    }

    fn writer_for_next_arg(&mut self) -> impl std::io::Write + '_ {
        self.write_arg(&[]);
        CountBytes(&mut self.bytes)
    }
}

/// Counts what is written to a measured argument.
struct CountBytes<'a>(&'a mut usize);

impl std::io::Write for CountBytes<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        *self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Invocation {
    /// `EVALSHA` of `call`'s script with its KEYS and ARGV, and the number of keys.
    pub(crate) fn evalsha<C: ScriptCall + ?Sized>(call: &C) -> EvalSha {
        let mut invocation = Self {
            pass: Pass::Measure,
            sizes: Sizes::default(),
            cmd: Cmd::new(),
        };
        call.fill(&mut invocation);
        let Sizes {
            keys, args, bytes, ..
        } = invocation.sizes;
        let script = call.script();
        let count_digits = keys.checked_ilog10().map_or(1, |d| d as usize + 1);
        // EVALSHA, the hash, the key count, then every part.
        let size = "EVALSHA".len() + script.hash.len() + count_digits + bytes;
        invocation.cmd = spare_cmd();
        invocation.cmd.reserve_space_for_args(
            std::iter::once(size).chain(std::iter::repeat_n(0, 2 + keys + args)),
        );
        invocation
            .cmd
            .arg("EVALSHA")
            .arg(script.hash.as_str())
            .arg(keys);
        invocation.pass = Pass::Keys;
        call.fill(&mut invocation);
        invocation.pass = Pass::Args;
        call.fill(&mut invocation);
        EvalSha {
            cmd: invocation.cmd,
            keys,
            size,
        }
    }

    /// Adds a key (KEYS[n]).
    pub(crate) fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        match self.pass {
            Pass::Measure => {
                self.sizes.in_key = true;
                key.write_redis_args(&mut self.sizes);
                self.sizes.in_key = false;
            }
            Pass::Keys => {
                self.cmd.arg(key);
            }
            Pass::Args => {}
        }
        self
    }

    /// Adds an argument (ARGV[n]).
    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        match self.pass {
            Pass::Measure => arg.write_redis_args(&mut self.sizes),
            Pass::Args => {
                self.cmd.arg(arg);
            }
            Pass::Keys => {}
        }
        self
    }
}

/// Most commands one thread keeps for reuse.
const SPARE_CMDS: usize = 4;
/// Largest command kept for reuse, in bytes: a call of a batch (a renewal of a hundred
/// holds) does not pin its large buffers to a thread.
const SPARE_CMD_BYTES: usize = 1024;

thread_local! {
    /// Commands of finished calls, cleared, whose buffers the next calls on this thread
    /// fill: a script call then allocates nothing of its own.
    static SPARE: RefCell<Vec<Cmd>> = const { RefCell::new(Vec::new()) };
}

/// An empty command, with the buffers of a finished call when this thread has one.
fn spare_cmd() -> Cmd {
    SPARE
        .try_with(|spare| spare.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// One script call as the command sent: `EVALSHA hash numkeys key... arg...`.
pub(crate) struct EvalSha {
    cmd: Cmd,
    keys: usize,
    /// The command's bytes.
    size: usize,
}

impl EvalSha {
    /// Hands the command's buffers to the next call on this thread (the call is over: its
    /// reply is in). A command dropped instead (a call cancelled or failed) frees them.
    pub(crate) fn recycle(mut self) {
        if self.size > SPARE_CMD_BYTES {
            return;
        }
        self.cmd.clear();
        let _ = SPARE.try_with(|spare| {
            let mut spare = spare.borrow_mut();
            if spare.len() < SPARE_CMDS {
                spare.push(self.cmd);
            }
        });
    }

    pub(crate) fn cmd(&self) -> &Cmd {
        &self.cmd
    }

    /// The call's keys, then its arguments, as sent.
    pub(crate) fn keys_and_args(&self) -> (usize, impl Iterator<Item = &[u8]>) {
        let parts = self.cmd.args_iter().skip(3).filter_map(|arg| match arg {
            redis::Arg::Simple(bytes) => Some(bytes),
            _ => None,
        });
        (self.keys, parts)
    }

    /// How many parts (keys and arguments) the call has.
    pub(crate) fn parts(&self) -> usize {
        self.cmd.args_iter().count().saturating_sub(3)
    }

    /// The first key, by which a cluster routes the call.
    pub(crate) fn first_key(&self) -> Option<&[u8]> {
        if self.keys == 0 {
            return None;
        }
        match self.cmd.args_iter().nth(3)? {
            redis::Arg::Simple(bytes) => Some(bytes),
            _ => None,
        }
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
/// each after a shebang file (`fencing_token.lua` or `allow_oom.lua`); the expirable
/// semaphore's scripts read the server's clock through `server_clock.lua`, after
/// `creates_keys.lua` or `allow_oom.lua`.
macro_rules! scripts {
    ($($name:ident => [$($file:literal),+],)+) => {
        /// The crate's scripts, hashed once per process.
        pub(crate) struct Scripts {
            $(pub(crate) $name: LuaScript,)+
        }

        pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| {
            let mut scripts = Scripts {
                $($name: LuaScript::new(source!($($file),+)),)+
            };
            scripts.add_batch_forms();
            scripts
        });

        impl Scripts {
            /// Every script, each followed by its batch form if it has one: what
            /// [`preload`] loads.
            pub(crate) fn all(&self) -> impl Iterator<Item = &LuaScript> {
                [$(&self.$name,)+]
                    .into_iter()
                    .flat_map(|script| std::iter::once(script).chain(script.batch()))
            }
        }
    };
}

/// Declares which scripts have a batch form (see [`LuaScript::add_batch_form`]): a name
/// from [`SCRIPTS`] and the script's own file, the last of its files.
macro_rules! batch_forms {
    ($($name:ident => $file:literal,)+) => {
        impl Scripts {
            fn add_batch_forms(&mut self) {
                $(self.$name.add_batch_form(source!($file));)+
            }
        }
    };
}

batch_forms! {
    lock_acquire => "lock_acquire.lua",
    lock_release => "lock_release.lua",
    simple_acquire => "simple_acquire.lua",
    simple_release => "simple_release.lua",
    semaphore_acquire => "semaphore_acquire.lua",
    semaphore_release => "semaphore_release.lua",
    xsem_acquire => "xsem_acquire.lua",
    xsem_release => "xsem_release.lua",
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
    xsem_acquire => ["creates_keys.lua", "server_clock.lua", "xsem_acquire.lua"],
    xsem_release => ["allow_oom.lua", "server_clock.lua", "xsem_release.lua"],
    xsem_update_lease => ["xsem_update_lease.lua"],
    xsem_inspect => ["xsem_inspect.lua"],
    xsem_renew => ["xsem_renew.lua"],
    renew_on_node => ["renew_on_node.lua"],
    latch_count_down => ["latch_count_down.lua"],
    latch_delete => ["latch_delete.lua"],
    election_campaign => ["fencing_token.lua", "election_campaign.lua"],
    election_resign => ["election_resign.lua"],
    election_observe => ["election_observe.lua"],
    rate_acquire => ["rate_acquire.lua"],
    inspect_layout => ["inspect_layout.lua"],
}

/// Loads every script into the server's script cache (one pipeline).
///
/// A server that refuses one load refuses them all for the same reason (an ACL without
/// `SCRIPT LOAD`, an old server): the first refusal is the error, reported once rather
/// than once per script.
pub(crate) async fn preload(conn: &mut impl ConnectionLike) -> Result<()> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for script in SCRIPTS.all() {
        pipe.add_command(script.load_cmd());
    }
    let loaded: Vec<redis::RedisResult<String>> =
        pipe.query_async(conn).await.or_command_error()?;
    match loaded.into_iter().find_map(Result::err) {
        Some(refused) => Err(command_error(refused)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use redis::{FromRedisValue, ParsingError, Value};

    use super::lock::{LockAcquired, LockInspect, Renew};
    use super::simple::KeyAcquired;
    use super::{Invocation, SCRIPTS};
    use crate::api::fencing::FencingToken;
    use crate::backend::ids::OwnerId;

    fn text(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn a_lone_token_is_a_new_hold_and_a_lone_integer_the_holders_ttl() -> Result<(), ParsingError> {
        let token = FencingToken::new(1_795_821_822_806_843);
        assert_eq!(
            KeyAcquired::from_redis_value(text("1795821822806843"))?,
            KeyAcquired::Granted { token }
        );
        assert_eq!(
            KeyAcquired::from_redis_value(Value::Int(-1))?,
            KeyAcquired::Held { pttl: -1 }
        );
        assert_eq!(
            LockAcquired::from_redis_value(text("1795821822806843"))?,
            LockAcquired::Granted { token, count: 1 }
        );
        assert_eq!(
            LockAcquired::from_redis_value(Value::Int(2_500))?,
            LockAcquired::Held { pttl: 2_500 }
        );
        // A re-entry still replies a table; {2} is a re-entry that found no hold.
        let reentered = Value::Array(vec![Value::Int(1), text("42"), Value::Int(3)]);
        assert_eq!(
            LockAcquired::from_redis_value(reentered)?,
            LockAcquired::Granted {
                token: FencingToken::new(42),
                count: 3
            }
        );
        assert_eq!(
            LockAcquired::from_redis_value(Value::Array(vec![Value::Int(2)]))?,
            LockAcquired::NotReentered
        );
        Ok(())
    }

    #[test]
    fn a_token_that_is_not_a_decimal_count_is_refused() {
        for bad in ["", "-3", "12a", "99999999999999999999"] {
            assert!(KeyAcquired::from_redis_value(text(bad)).is_err(), "{bad:?}");
            assert!(
                LockAcquired::from_redis_value(text(bad)).is_err(),
                "{bad:?}"
            );
        }
        assert!(KeyAcquired::from_redis_value(Value::Nil).is_err());
        assert!(LockAcquired::from_redis_value(Value::Array(vec![Value::Int(7)])).is_err());
    }

    /// The command's parts as text.
    fn parts(cmd: &redis::Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "<cursor>".to_owned(),
            })
            .collect()
    }

    #[test]
    fn keys_go_before_arguments_whatever_order_fill_adds_them_in() {
        let (a, b) = (OwnerId::random(), OwnerId::random());
        let holds = [("{x}", a), ("{y}", b)];
        let call = Renew {
            script: &SCRIPTS.lock_renew,
            lease: Duration::from_secs(30),
            holds: &holds,
        };
        let evalsha = Invocation::evalsha(&call);
        assert_eq!(
            parts(evalsha.cmd()),
            [
                "EVALSHA".to_owned(),
                SCRIPTS.lock_renew.hash.clone(),
                "2".to_owned(),
                "{x}".to_owned(),
                "{y}".to_owned(),
                "30000".to_owned(),
                a.to_string(),
                b.to_string(),
            ]
        );
        assert_eq!(evalsha.first_key(), Some(&b"{x}"[..]));
        // The same bytes on the wire as the command built one part at a time.
        let packed = evalsha.cmd().get_packed_command();
        let mut expected = redis::cmd("EVALSHA");
        expected
            .arg(&SCRIPTS.lock_renew.hash)
            .arg(2)
            .arg("{x}")
            .arg("{y}")
            .arg(30_000)
            .arg(a)
            .arg(b);
        assert_eq!(packed, expected.get_packed_command());
    }

    #[test]
    fn a_call_without_keys_has_no_first_key() {
        let call = Renew {
            script: &SCRIPTS.lock_renew,
            lease: Duration::from_secs(1),
            holds: &[],
        };
        let evalsha = Invocation::evalsha(&call);
        assert_eq!(parts(evalsha.cmd())[2..], ["0", "1000"]);
        assert_eq!(evalsha.first_key(), None);
        let one = Invocation::evalsha(&LockInspect { key: "{k}" });
        assert_eq!(parts(one.cmd())[2..], ["1", "{k}"]);
        assert_eq!(one.first_key(), Some(&b"{k}"[..]));
    }

    #[test]
    fn a_batch_form_keeps_its_scripts_shebang_and_shared_functions() {
        let batched = [
            &SCRIPTS.lock_acquire,
            &SCRIPTS.lock_release,
            &SCRIPTS.simple_acquire,
            &SCRIPTS.simple_release,
            &SCRIPTS.semaphore_acquire,
            &SCRIPTS.semaphore_release,
            &SCRIPTS.xsem_acquire,
            &SCRIPTS.xsem_release,
        ];
        for script in batched {
            let batch = script.batch().expect("declared with a batch form");
            let shebang = script.source.lines().next().unwrap_or_default();
            assert_eq!(batch.source.lines().next(), Some(shebang));
            // The shared functions stay outside `one`, defined once per batch.
            let one = batch
                .source
                .find("local function one(key_base, arg_base, key_count, arg_count)")
                .expect("the script's own text is wrapped");
            if let Some(shared) = script.source.find("local function ") {
                assert!(shared < one, "{}", batch.source);
            }
            // The call's own text (`one`, before the batch loop) reads KEYS and ARGV only
            // at its offsets.
            let own = &batch.source[one..];
            let body = &own[..own.find("local calls = ").unwrap_or(own.len())];
            for (name, offset) in [("KEYS", "KEYS[key_base + "), ("ARGV", "ARGV[arg_base + ")] {
                assert_eq!(
                    body.matches(name).count(),
                    body.matches(offset).count(),
                    "{name} read other than by index or length:\n{body}"
                );
            }
            assert_ne!(batch.hash, script.hash);
        }
        assert!(SCRIPTS.lock_renew.batch().is_none());
    }

    #[test]
    fn every_script_declares_how_it_runs_with_memory_full() {
        for script in SCRIPTS.all() {
            let source = &script.source;
            let first = source.lines().next().unwrap_or_default();
            assert!(
                [
                    "#!lua",
                    "#!lua flags=allow-oom",
                    "#!lua flags=no-writes",
                    "#!lua flags=allow-oom,allow-cross-slot-keys",
                ]
                .contains(&first),
                "a script starts with {first:?}, not a shebang:\n{source}"
            );
        }
    }
}

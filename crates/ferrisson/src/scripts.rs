//! Every Lua script of the crate, one file each under `lua/`, loaded at connect.
//!
//! Calls go through `EVALSHA`; a `NOSCRIPT` reply (after `SCRIPT FLUSH` or a server
//! restart) makes redis-rs load the script and retry, so a flushed cache costs one extra
//! round trip, never an error.
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
//! The shebang is why ferrisson needs Redis 7.0 (`Client::connect` checks the version).

use std::sync::LazyLock;

use redis::Script;
use redis::aio::ConnectionManager;

use crate::error::Result;

macro_rules! scripts {
    ($($name:ident => $file:literal,)+) => {
        /// The crate's scripts, compiled once per process.
        pub(crate) struct Scripts {
            $(pub(crate) $name: Script,)+
        }

        pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
            $($name: Script::new(include_str!(concat!("../lua/", $file))),)+
        });

        /// The source of every script, for `SCRIPT LOAD`.
        const SOURCES: &[&str] = &[$(include_str!(concat!("../lua/", $file)),)+];
    };
}

scripts! {
    lock_acquire => "lock_acquire.lua",
    lock_release => "lock_release.lua",
    lock_abandon => "lock_abandon.lua",
    lock_renew => "lock_renew.lua",
    lock_inspect => "lock_inspect.lua",
    force_release => "force_release.lua",
    simple_acquire => "simple_acquire.lua",
    simple_release => "simple_release.lua",
    fenced_set => "fenced_set.lua",
    fair_acquire => "fair_acquire.lua",
    fair_release => "fair_release.lua",
    fair_cancel => "fair_cancel.lua",
    fair_force_release => "fair_force_release.lua",
    fair_inspect => "fair_inspect.lua",
    rwlock_acquire => "rwlock_acquire.lua",
    rwlock_release => "rwlock_release.lua",
    rwlock_renew => "rwlock_renew.lua",
    rwlock_force_release => "rwlock_force_release.lua",
    rwlock_withdraw => "rwlock_withdraw.lua",
    rwlock_inspect => "rwlock_inspect.lua",
    redlock_extend => "redlock_extend.lua",
    redlock_inspect => "redlock_inspect.lua",
    semaphore_acquire => "semaphore_acquire.lua",
    semaphore_release => "semaphore_release.lua",
    semaphore_add => "semaphore_add.lua",
    semaphore_drain => "semaphore_drain.lua",
    semaphore_delete => "semaphore_delete.lua",
    xsem_acquire => "xsem_acquire.lua",
    xsem_release => "xsem_release.lua",
    xsem_update_lease => "xsem_update_lease.lua",
    xsem_inspect => "xsem_inspect.lua",
    latch_count_down => "latch_count_down.lua",
    latch_delete => "latch_delete.lua",
}

/// Loads every script into the server's script cache (one pipeline).
pub(crate) async fn preload(conn: &mut ConnectionManager) -> Result<()> {
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

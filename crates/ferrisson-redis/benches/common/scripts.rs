//! The library's own Lua scripts, for the rows that call them raw (through redis-rs,
//! without ferrisson's client): what any client must spend to get the same guarantees.
//!
//! The texts are the files under `crates/ferrisson-redis/lua/`, joined in the order
//! `src/redis/scripts/mod.rs` joins them (its `scripts!` table, through its `source!`
//! macro: the files concatenated as they are). The library keeps that table
//! `pub(crate)`; [`check_loaded_by_library`] makes sure the copy here cannot drift: every
//! text's SHA1 must be in the server's script cache after a ferrisson `Client` connected
//! (it loads all its scripts then) and before any raw row ran.

use redis::aio::MultiplexedConnection;

/// One script assembled from files of `crates/ferrisson-redis/lua/`, joined in order: mirrors
/// `source!` in `src/redis/scripts/mod.rs`.
macro_rules! lua {
    ($($file:literal),+) => {
        concat!($(include_str!(concat!("../../lua/", $file))),+)
    };
}

/// `lock_acquire` of the library's `scripts!` table.
pub const LOCK_ACQUIRE: &str = lua!("fencing_token.lua", "wake.lua", "lock_acquire.lua");
/// `lock_release` of the library's `scripts!` table.
pub const LOCK_RELEASE: &str = lua!("allow_oom.lua", "wake.lua", "lock_release.lua");
/// `simple_acquire` of the library's `scripts!` table.
pub const SIMPLE_ACQUIRE: &str = lua!("fencing_token.lua", "wake.lua", "simple_acquire.lua");
/// `simple_release` of the library's `scripts!` table.
pub const SIMPLE_RELEASE: &str = lua!("allow_oom.lua", "wake.lua", "simple_release.lua");
/// `semaphore_acquire` of the library's `scripts!` table.
pub const SEMAPHORE_ACQUIRE: &str = lua!("semaphore_acquire.lua");
/// `semaphore_release` of the library's `scripts!` table.
pub const SEMAPHORE_RELEASE: &str = lua!("semaphore_release.lua");
/// `xsem_acquire` of the library's `scripts!` table.
pub const XSEM_ACQUIRE: &str = lua!("creates_keys.lua", "server_clock.lua", "xsem_acquire.lua");
/// `xsem_release` of the library's `scripts!` table.
pub const XSEM_RELEASE: &str = lua!("allow_oom.lua", "server_clock.lua", "xsem_release.lua");

/// The library's fencing-token function (with the `#!lua` shebang it carries) followed
/// by `body`: how the library builds every acquire that hands out a token.
pub fn with_fencing_token(body: &str) -> String {
    format!("{}{body}", lua!("fencing_token.lua"))
}

/// Fails unless every script of `scripts` (named for the message) is in the script cache
/// of at least one of `nodes`. Run it after a ferrisson `Client` connected to them and
/// before anything else loaded these texts: then a hit means the library loaded the very
/// same text (same SHA1), and a miss means the copy here drifted from the library's.
pub async fn check_loaded_by_library(
    nodes: &mut [MultiplexedConnection],
    scripts: &[(&str, &redis::Script)],
) -> anyhow::Result<()> {
    let mut found = vec![false; scripts.len()];
    for conn in nodes {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("EXISTS");
        for (_, script) in scripts {
            cmd.arg(script.get_hash());
        }
        let exists: Vec<bool> = cmd.query_async(conn).await?;
        for (found, exists) in found.iter_mut().zip(exists) {
            *found |= exists;
        }
    }
    let missing: Vec<&str> = scripts
        .iter()
        .zip(&found)
        .filter(|(_, found)| !**found)
        .map(|((name, _), _)| *name)
        .collect();
    anyhow::ensure!(
        missing.is_empty(),
        "the raw rows' copies of {missing:?} differ from the scripts the library loaded: \
         update benches/common/scripts.rs to join the files as src/redis/scripts/mod.rs does"
    );
    Ok(())
}

/// A script reply `{1, ...}` (granted), `1`, or a fencing token alone (the text a lock's
/// acquire replies for a new hold).
pub fn granted(reply: &redis::Value) -> bool {
    match reply {
        redis::Value::Array(items) => matches!(items.first(), Some(redis::Value::Int(1))),
        redis::Value::Int(1) | redis::Value::BulkString(_) => true,
        _ => false,
    }
}

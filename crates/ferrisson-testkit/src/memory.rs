//! A server whose memory is full: `maxmemory` reached under the server's policy.

use std::io;

use crate::RedisServer;

/// Junk keys written to fill a server: 2 MiB in all.
const JUNK_KEYS: usize = 32;
const JUNK_VALUE_BYTES: usize = 64 * 1024;
const JUNK_PREFIX: &str = "ferrisson-testkit-junk:";

/// A server's memory held full by junk keys written from outside the code under test.
///
/// [`FullMemory::fill`] writes 2 MiB of junk, then sets `maxmemory` halfway between
/// the memory used before and after. A limit just under the used memory would be
/// crossed back by a connection closing (client buffers count as used memory); halfway
/// keeps the server full by about a megabyte, and below the limit by as much once
/// [`FullMemory::free`] deletes the junk. Under `noeviction` every write command that
/// may grow memory is then refused with `OOM`. Connect every client a test needs before
/// filling: a new connection's buffers are memory too.
///
/// ```no_run
/// use ferrisson_testkit::{FullMemory, RedisServer};
///
/// let server = RedisServer::start_with_args(&["--maxmemory-policy", "noeviction"])?;
/// let memory = FullMemory::fill(&server)?;
/// assert!(server.command(&["SET", "k", "v"])?.starts_with("-OOM"));
/// memory.free()?;
/// assert_eq!(server.command(&["SET", "k", "v"])?, "+OK");
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct FullMemory<'a> {
    server: &'a RedisServer,
}

impl<'a> FullMemory<'a> {
    /// Fills `server` and checks that a probe `SET` is refused with `OOM`.
    ///
    /// # Errors
    ///
    /// When the server cannot be reached, refuses the junk before the limit is set, or
    /// still accepts the probe (e.g. under an evicting policy).
    pub fn fill(server: &'a RedisServer) -> io::Result<Self> {
        let empty = server.used_memory()?;
        let value = "x".repeat(JUNK_VALUE_BYTES);
        for i in 0..JUNK_KEYS {
            let reply = server.command(&["SET", &format!("{JUNK_PREFIX}{i}"), &value])?;
            if reply != "+OK" {
                return Err(io::Error::other(format!(
                    "a junk write was refused before maxmemory was set: {reply}"
                )));
            }
        }
        let full = server.used_memory()?;
        let limit = u64::midpoint(empty, full);
        server.command(&["CONFIG", "SET", "maxmemory", &limit.to_string()])?;
        let probe = server.command(&["SET", "ferrisson-testkit-probe", "1"])?;
        if !probe.starts_with("-OOM") {
            return Err(io::Error::other(format!(
                "memory is not full: a SET answered {probe:?} (used {full}, maxmemory {limit})"
            )));
        }
        Ok(Self { server })
    }

    /// Deletes the junk (and nothing else) and checks that the server accepts writes.
    ///
    /// # Errors
    ///
    /// When the server cannot be reached or still refuses a probe `SET`.
    pub fn free(self) -> io::Result<()> {
        let keys: Vec<String> = (0..JUNK_KEYS)
            .map(|i| format!("{JUNK_PREFIX}{i}"))
            .collect();
        let mut args = vec!["DEL"];
        args.extend(keys.iter().map(String::as_str));
        let deleted = self.server.command(&args)?;
        if deleted != format!(":{JUNK_KEYS}") {
            return Err(io::Error::other(format!(
                "deleting the junk answered {deleted:?}"
            )));
        }
        let probe = self
            .server
            .command(&["SET", "ferrisson-testkit-probe", "1"])?;
        if probe != "+OK" {
            return Err(io::Error::other(format!(
                "memory is still full after the junk went: a SET answered {probe:?}"
            )));
        }
        self.server.command(&["DEL", "ferrisson-testkit-probe"])?;
        Ok(())
    }
}

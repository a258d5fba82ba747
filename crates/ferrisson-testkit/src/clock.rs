//! A wall clock that a test moves at run time for the processes it starts.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::Duration;

use tempfile::TempDir;

/// The `LD_PRELOAD` library built from `clockshift/shim.rs` by the build script.
static SHIM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libferrisson_clockshift.so"));

/// The variable that names the offset file inside a shifted process.
const OFFSET_FILE_ENV: &str = "FERRISSON_CLOCKSHIFT_FILE";

/// Moves the wall clock of the processes started with it, while they run.
///
/// A process started with [`ClockShift::env`] (or with
/// [`RedisServer::start_with_clock`](crate::RedisServer::start_with_clock)) sees
/// `clock_gettime(CLOCK_REALTIME)`, `gettimeofday` and `time` shifted by the offset
/// set here; its monotonic clock is untouched. The offset is read on every call, so a
/// step takes effect at once, in every process sharing this `ClockShift`, including
/// their children. It works by `LD_PRELOAD` of a small library the kit builds and
/// writes to a temporary directory (which must not be mounted `noexec`).
///
/// ```no_run
/// use std::time::Duration;
/// use ferrisson_testkit::{ClockShift, RedisServer};
///
/// let clock = ClockShift::new().expect("clock");
/// let server = RedisServer::start_with_clock(&clock, &[]).expect("redis-server");
/// server.command(&["SET", "k", "v", "PX", "60000"]).expect("SET");
/// clock.set_ahead(Duration::from_secs(3600)).expect("step"); // the server's clock jumps
/// assert_eq!(server.command(&["EXISTS", "k"]).expect("EXISTS"), ":0");
/// ```
#[derive(Debug)]
pub struct ClockShift {
    dir: TempDir,
    offset: File,
}

impl ClockShift {
    /// A clock with a zero offset.
    ///
    /// # Errors
    ///
    /// When the temporary directory or its files cannot be written.
    pub fn new() -> io::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("ferrisson-clock-")
            .tempdir()?;
        std::fs::write(dir.path().join("libferrisson_clockshift.so"), SHIM)?;
        let offset = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.path().join("offset"))?;
        let clock = Self { dir, offset };
        clock.set_offset_nanos(0)?;
        Ok(clock)
    }

    /// Sets the wall clock `by` ahead of the real one.
    ///
    /// # Errors
    ///
    /// When `by` does not fit in 292 years of nanoseconds, or the write fails.
    pub fn set_ahead(&self, by: Duration) -> io::Result<()> {
        self.set_offset_nanos(nanos(by)?)
    }

    /// Sets the wall clock `by` behind the real one.
    ///
    /// # Errors
    ///
    /// As [`ClockShift::set_ahead`].
    pub fn set_behind(&self, by: Duration) -> io::Result<()> {
        self.set_offset_nanos(-nanos(by)?)
    }

    /// Puts the wall clock back to the real time.
    ///
    /// # Errors
    ///
    /// When the write fails.
    pub fn reset(&self) -> io::Result<()> {
        self.set_offset_nanos(0)
    }

    /// The environment a process needs to run on this clock: `LD_PRELOAD` (after any
    /// library already preloaded in this process's environment) and the offset file.
    pub fn env(&self) -> Vec<(OsString, OsString)> {
        let mut preload = OsString::new();
        if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
            preload.push(existing);
            preload.push(":");
        }
        preload.push(self.library());
        vec![
            ("LD_PRELOAD".into(), preload),
            (
                OFFSET_FILE_ENV.into(),
                self.dir.path().join("offset").into(),
            ),
        ]
    }

    fn library(&self) -> PathBuf {
        self.dir.path().join("libferrisson_clockshift.so")
    }

    fn set_offset_nanos(&self, offset: i64) -> io::Result<()> {
        // One aligned 8-byte write at the start of the file: the shifted processes read
        // it from a shared mapping and never see half of it.
        self.offset.write_all_at(&offset.to_ne_bytes(), 0)
    }
}

fn nanos(by: Duration) -> io::Result<i64> {
    i64::try_from(by.as_nanos()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a clock offset of {by:?} is too large"),
        )
    })
}

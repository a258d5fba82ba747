//! Mutual exclusion across processes: the test binary starts copies of itself as
//! contenders, each connecting to the store by URL.
//!
//! The test that runs [`excludes_across_processes`] must first call
//! [`serve_child_if_asked`]: in a child it connects, takes its turns and returns `true`
//! (the test then ends), in the parent it returns `false`.

use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use ferrisson_core::{DistributedLock, Error, Guard, Lease, Result};

use crate::{Store, fresh_name};

/// The environment variable that makes a test binary a contender: the store's URL.
pub const CHILD_ENV: &str = "FERRISSON_CONFORMANCE_CHILD";
const LOCK_ENV: &str = "FERRISSON_CONFORMANCE_LOCK";
const DIR_ENV: &str = "FERRISSON_CONFORMANCE_DIR";

/// Contenders started.
const CHILDREN: usize = 3;
/// Critical sections each contender runs.
const TURNS: usize = 10;

/// In a contender started by [`excludes_across_processes`], connects with `connect`,
/// takes its turns and returns `Ok(true)`; elsewhere returns `Ok(false)` at once.
///
/// # Errors
///
/// A store error met by the contender (its process then fails, which the parent reports).
pub async fn serve_child_if_asked<S, F, Fut>(connect: F) -> Result<bool>
where
    S: Store,
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = Result<S>>,
{
    let (Ok(url), Ok(name), Ok(dir)) = (
        std::env::var(CHILD_ENV),
        std::env::var(LOCK_ENV),
        std::env::var(DIR_ENV),
    ) else {
        return Ok(false);
    };
    let store = connect(url).await?;
    let lock = store.lock(&name, Lease::Watchdog)?;
    let dir = PathBuf::from(dir);
    for _ in 0..TURNS {
        let guard = lock.lock().await?;
        // Creating the marker fails if another contender is inside: an overlap.
        let inside = dir.join("inside");
        let entered = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&inside);
        append(&dir, if entered.is_ok() { "turn" } else { "overlap" })?;
        tokio::time::sleep(Duration::from_millis(3)).await;
        if entered.is_ok() {
            fs::remove_file(&inside).map_err(io_error)?;
        }
        guard.unlock().await?;
    }
    Ok(true)
}

fn append(dir: &Path, line: &str) -> Result<()> {
    let mut log = OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.join("log"))
        .map_err(io_error)?;
    writeln!(log, "{line}").map_err(io_error)
}

#[allow(clippy::needless_pass_by_value)] // used as `map_err(io_error)`
fn io_error(e: std::io::Error) -> Error {
    Error::Protocol(format!("conformance scratch file: {e}"))
}

/// Starts [`CHILDREN`] copies of this test binary, each running `test_name` as a
/// contender for one lock through `store`'s URL, and checks that no two were ever inside
/// at once and that every turn ran. An in-process store (no URL) has no other process
/// to exclude: the body returns at once.
///
/// # Errors
///
/// When the scratch directory cannot be made or a contender cannot be started.
pub async fn excludes_across_processes<S: Store>(store: &S, test_name: &str) -> Result<()> {
    let Some(url) = store.url() else {
        return Ok(());
    };
    let dir = std::env::temp_dir().join(format!(
        "{}-{}",
        fresh_name("processes").replace(':', "-"),
        std::process::id()
    ));
    fs::create_dir_all(&dir).map_err(io_error)?;
    let name = fresh_name("processes");
    let exe = std::env::current_exe().map_err(io_error)?;
    let mut children = Vec::new();
    for _ in 0..CHILDREN {
        let child = tokio::process::Command::new(&exe)
            .args([test_name, "--exact", "--nocapture", "--test-threads", "1"])
            .env(CHILD_ENV, &url)
            .env(LOCK_ENV, &name)
            .env(DIR_ENV, &dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(io_error)?;
        children.push(child);
    }
    for child in children {
        let out = child.wait_with_output().await.map_err(io_error)?;
        assert!(
            out.status.success(),
            "a contender failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let log = fs::read_to_string(dir.join("log")).map_err(io_error)?;
    let _ = fs::remove_dir_all(&dir);
    assert!(
        !log.lines().any(|line| line == "overlap"),
        "two processes held {name:?} at once"
    );
    assert_eq!(
        log.lines().count(),
        CHILDREN * TURNS,
        "turns missing: {log}"
    );
    Ok(())
}

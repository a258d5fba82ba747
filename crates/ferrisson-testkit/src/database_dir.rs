//! What the private database servers share: a data directory initialized once per
//! machine and copied for each server (initializing takes seconds, a copy a few
//! milliseconds), the unprivileged user a server runs as when the tests run as root, and
//! the process group a server's processes live in.

use std::io;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Mutex;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::{Pid, Uid, User};

use crate::wait::poll_until;

/// One initialization at a time within this process (other processes are kept apart by
/// the directory's atomic rename).
static INITIALIZING: Mutex<()> = Mutex::new(());

/// The data directory `name` (e.g. `postgres-15`), initialized by `init` into an empty
/// directory the first time any test process asks for it on this machine, and kept in
/// the system's temporary directory for the next ones.
///
/// `init` fills a fresh directory; the result is renamed into place only when it
/// succeeded, so a half-made template is never used.
pub(crate) fn template(
    name: &str,
    owner: Option<&User>,
    init: impl FnOnce(&Path) -> io::Result<()>,
) -> io::Result<PathBuf> {
    let _one = INITIALIZING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let base =
        std::env::temp_dir().join(format!("ferrisson-testkit-templates-{}", Uid::effective()));
    let ready = base.join(name);
    if ready.is_dir() {
        return Ok(ready);
    }
    std::fs::create_dir_all(&base)?;
    let building = base.join(format!(
        "{name}.building-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir(&building)?;
    if let Some(user) = owner {
        hand_over(&building, user)?;
    }
    let built = init(&building);
    if let Err(e) = built {
        let _ = std::fs::remove_dir_all(&building);
        return Err(e);
    }
    if std::fs::rename(&building, &ready).is_err() {
        // Another process won the race: its template is as good.
        let _ = std::fs::remove_dir_all(&building);
    }
    if ready.is_dir() {
        Ok(ready)
    } else {
        Err(io::Error::other(format!(
            "the template {} could not be put in place",
            ready.display()
        )))
    }
}

/// Copies `template` to `to` (which must not exist), keeping modes and owners.
pub(crate) fn copy_template(template: &Path, to: &Path) -> io::Result<()> {
    let status = Command::new("cp")
        .arg("-a")
        .arg(template)
        .arg(to)
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "copying {} failed: {status}",
            template.display()
        )))
    }
}

/// The user a server runs as: `None` (this process's user) unless this process is root,
/// which database servers refuse to run as; then `user` (`postgres`, `mysql`).
///
/// # Errors
///
/// When running as root and `user` does not exist.
pub(crate) fn unprivileged(user: &str) -> io::Result<Option<User>> {
    if !Uid::effective().is_root() {
        return Ok(None);
    }
    User::from_name(user)
        .map_err(io::Error::from)?
        .map(Some)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("running as root, and there is no user {user} to run the server as"),
            )
        })
}

/// Makes `user` the owner of `path` (not recursive).
pub(crate) fn hand_over(path: &Path, user: &User) -> io::Result<()> {
    std::os::unix::fs::chown(path, Some(user.uid.as_raw()), Some(user.gid.as_raw()))
}

/// `command` set to run as `user` (if any) in a process group of its own, so that the
/// server's every process can be signalled at once and nothing else.
pub(crate) fn as_group_leader(command: &mut Command, user: Option<&User>) {
    command.process_group(0);
    if let Some(user) = user {
        command.uid(user.uid.as_raw()).gid(user.gid.as_raw());
    }
}

/// Sends `signal` to the process group that `child` leads (the server and the processes
/// it started).
pub(crate) fn signal_group(child: &Child, signal: Signal) -> io::Result<()> {
    let pid = Pid::from_raw(i32::try_from(child.id()).map_err(io::Error::other)?);
    killpg(pid, signal).map_err(io::Error::from)
}

/// Ends the group `child` leads: `signal` to the leader (after SIGCONT to the group, a
/// stopped process handles nothing), SIGKILL to the group if the leader is still there
/// after `patience`, then SIGKILL to whatever is left of the group; reaps the leader.
pub(crate) fn end_group(mut child: Child, signal: Signal, patience: Duration) -> io::Result<()> {
    let _ = signal_group(&child, Signal::SIGCONT);
    if signal != Signal::SIGKILL {
        let pid = Pid::from_raw(i32::try_from(child.id()).map_err(io::Error::other)?);
        nix::sys::signal::kill(pid, signal).map_err(io::Error::from)?;
        let ended = poll_until("server exit", patience, || {
            child
                .try_wait()
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "still running".to_owned())
        });
        if ended.is_ok() {
            // Children the leader left behind (none, after a clean stop).
            let _ = signal_group(&child, Signal::SIGKILL);
            return Ok(());
        }
    }
    let _ = signal_group(&child, Signal::SIGKILL);
    child.wait()?;
    Ok(())
}

/// The last `lines` lines of the log at `path`, joined with ` | `, for an error message.
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(lines).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

/// Runs a client program (`psql`, `mariadb`) and returns its standard output.
pub(crate) fn run_client(command: &mut Command) -> io::Result<String> {
    let output = command.output()?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(io::Error::other(format!(
            "{} failed ({}): {}",
            command.get_program().to_string_lossy(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

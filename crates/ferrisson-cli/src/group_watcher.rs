//! The command's process group dies with ferrisson, however ferrisson dies.
//!
//! A killed `ferrisson lock` or `ferrisson elect` (SIGKILL, the OOM killer) stops
//! renewing its lock or leadership, which ends one lease later; a command still running
//! after that would run beside the next holder or leader. Two mechanisms end it first:
//!
//! - **The group watcher.** Before COMMAND starts, ferrisson starts a copy of itself in a
//!   hidden mode, as the leader of a new process group, and COMMAND is started inside that
//!   group; whatever COMMAND starts stays in it (unless it leaves on purpose: `setsid`,
//!   daemons). The watcher holds the read end of a pipe whose only write end is ferrisson's
//!   (close-on-exec, so COMMAND does not inherit it). The kernel closes that end when
//!   ferrisson dies, however it dies; the watcher reads end of file and sends SIGKILL to
//!   the whole group, itself included. When ferrisson ends normally it first writes one
//!   byte that disarms the watcher. The group exists, with its watcher armed, before
//!   COMMAND does, so there is no moment in which COMMAND or a child of it runs unwatched.
//!   The watcher works on every Unix.
//! - **The parent-death signal (Linux).** COMMAND itself is started with
//!   `PR_SET_PDEATHSIG` = SIGKILL, so the kernel kills it when ferrisson dies even if the
//!   watcher was killed too. It covers COMMAND only, not its children, and is cleared
//!   when COMMAND executes a set-user-id program (such as `sudo`).

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Context as _, ensure};
use nix::sys::signal::{SigSet, Signal, killpg};
use nix::unistd::{Pid, getpgrp, getpid};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, ChildStdin, Command};

/// The watcher's first byte on its stdout: its signals are blocked, it is armed.
const READY: u8 = b'R';
/// The byte ferrisson writes when it ends normally: leave the group alone.
const DISARM: u8 = b'D';

/// The name of the hidden subcommand that runs [`watch`].
pub const SUBCOMMAND: &str = "internal-group-watcher";

/// The signals ferrisson passes on to COMMAND's group: the watcher, a member of that
/// group, must survive them (it blocks them, so they stay pending and harmless).
const PASSED_ON: [Signal; 4] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

/// A running, armed group watcher: the leader of the process group COMMAND joins.
#[derive(Debug)]
pub struct GroupWatcher {
    process: Child,
    /// The write end of the watcher's stdin; dropping it (or ferrisson dying) kills the
    /// group.
    pipe: ChildStdin,
    group: Pid,
}

impl GroupWatcher {
    /// Starts the watcher and waits until it is armed.
    pub async fn start() -> anyhow::Result<Self> {
        let mut process = Command::new(own_executable()?)
            .arg0("ferrisson")
            .arg(SUBCOMMAND)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start the process that stops COMMAND if ferrisson dies")?;
        let group = process
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw)
            .context("the process that stops COMMAND if ferrisson dies exited at once")?;
        let (Some(pipe), Some(mut stdout)) = (process.stdin.take(), process.stdout.take()) else {
            anyhow::bail!("the process that stops COMMAND if ferrisson dies has no pipes");
        };
        let mut ready = [0_u8];
        let armed = stdout.read_exact(&mut ready).await.is_ok() && ready[0] == READY;
        ensure!(
            armed,
            "the process that stops COMMAND if ferrisson dies exited before it was ready"
        );
        Ok(Self {
            process,
            pipe,
            group,
        })
    }

    /// The process group COMMAND must join (the watcher's own).
    pub fn group(&self) -> Pid {
        self.group
    }

    /// Ends the watcher without touching the group (ferrisson ends normally).
    pub async fn disarm(mut self) {
        // If the write fails the watcher is gone already, and so is the group's guard.
        let _ = self.pipe.write_all(&[DISARM]).await;
        drop(self.pipe);
        let _ = self.process.wait().await;
    }

    /// Kills everything left in the group, the watcher included, and waits for the
    /// watcher to be gone.
    pub async fn kill_group(mut self) {
        drop(self.pipe);
        let _ = self.process.wait().await;
    }
}

/// The running program, to start it again as the watcher. On Linux `/proc/self/exe`,
/// which still opens when the file was replaced on disk (a reinstall while a lock is held).
fn own_executable() -> anyhow::Result<PathBuf> {
    if cfg!(target_os = "linux") {
        return Ok(PathBuf::from("/proc/self/exe"));
    }
    std::env::current_exe().context("cannot find the ferrisson executable to start its watcher")
}

/// The hidden subcommand: the watcher's whole life. Returns when disarmed; when the pipe
/// reads end of file (ferrisson died), kills its own process group, itself included.
pub fn watch() -> anyhow::Result<()> {
    let me = getpid();
    ensure!(
        getpgrp() == me,
        "{SUBCOMMAND} is started by `ferrisson lock` and `ferrisson elect` as a process group leader, not by hand"
    );
    let mut blocked = SigSet::empty();
    for signal in PASSED_ON {
        blocked.add(signal);
    }
    blocked.thread_block()?;
    // Written after the signals are blocked: ferrisson starts COMMAND (and may then pass
    // signals on to the group) only once it has read this byte. If ferrisson is gone
    // already the write fails (SIGPIPE is ignored in Rust programs) and the read below
    // sees end of file.
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(&[READY]).and_then(|()| stdout.flush());
    let mut stdin = std::io::stdin().lock();
    let mut byte = [0_u8];
    loop {
        match stdin.read(&mut byte) {
            Ok(1) if byte[0] == DISARM => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Ok(1) => {}
            // End of file or a broken pipe: ferrisson is gone.
            _ => break,
        }
    }
    killpg(me, Signal::SIGKILL).context("cannot kill the command's process group")?;
    Ok(())
}

/// Makes the kernel send SIGKILL to the process `command` starts when ferrisson dies
/// (Linux; elsewhere the group watcher alone stops it).
///
/// The signal fires when the *thread* that started the process ends, not only the
/// process: call this for a command spawned from the main thread (the one that runs
/// `block_on`), which lives as long as ferrisson.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub fn die_with_parent(command: &mut Command) {
    let parent = getpid();
    // SAFETY: `pre_exec` runs the closure in the forked child before `exec`, where only
    // async-signal-safe work is allowed. The closure makes two system calls, prctl(2)
    // and getppid(2), through nix's thin wrappers (which read errno and allocate
    // nothing), builds an `io::Error` from a raw OS error code (no allocation) and
    // touches no lock and no memory shared with the parent; it captures one `Pid` by value.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
                .map_err(|errno| std::io::Error::from_raw_os_error(errno as i32))?;
            // ferrisson died between the fork and the prctl: the signal was armed too
            // late to fire, so do not start the command at all.
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(
                    nix::errno::Errno::ESRCH as i32,
                ));
            }
            Ok(())
        });
    }
}

/// No parent-death signal outside Linux: the group watcher alone stops the command.
#[cfg(not(target_os = "linux"))]
pub fn die_with_parent(_command: &mut Command) {}

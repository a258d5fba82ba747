//! `ferrisson lock` as a user runs it: separate processes against a real redis-server.
//!
//! The tests learn that a command reached a point from a named pipe it writes to (the
//! test blocks reading it), and tell it to go on through one it reads: events, not polls.

use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use ferrisson_testkit::{ClockShift, RedisServer};

mod support;
use support::{EVENT_LIMIT, FERRISSON, Fifo};

/// `ferrisson lock --url URL ARGS...`.
fn ferrisson(server: &RedisServer, args: &[&str]) -> Command {
    support::holding("lock", &server.url(), args)
}

fn run(mut command: Command) -> std::io::Result<Output> {
    command.stdin(Stdio::null()).output()
}

#[test]
fn sixteen_processes_exclude_each_other() -> anyhow::Result<()> {
    const PROCESSES: usize = 16;
    const ROUNDS: usize = 5;
    let server = RedisServer::start()?;
    let dir = tempfile::tempdir()?;
    let counter = dir.path().join("counter");
    std::fs::write(&counter, "0")?;
    // A non-atomic read-modify-write of a file: only mutual exclusion keeps the count.
    let script = format!(
        "for i in $(seq {ROUNDS}); do {FERRISSON} lock --url {} counter -- sh -c 'n=$(cat {}); sleep 0.01; echo $((n+1)) > {}' || exit 1; done",
        server.url(),
        counter.display(),
        counter.display()
    );
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| Command::new("sh").arg("-c").arg(&script).spawn())
        .collect::<Result<_, _>>()?;
    for mut child in children {
        assert!(child.wait()?.success());
    }
    let total: usize = std::fs::read_to_string(&counter)?.trim().parse()?;
    assert_eq!(total, PROCESSES * ROUNDS);
    Ok(())
}

#[test]
fn passes_name_token_and_exit_status() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let output = run(ferrisson(
        &server,
        &[
            "job",
            "--",
            "sh",
            "-c",
            "echo $FERRISSON_LOCK_NAME $FERRISSON_FENCING_TOKEN; exit 3",
        ],
    ))?;
    assert_eq!(output.status.code(), Some(3));
    let printed = String::from_utf8(output.stdout)?;
    let first: u64 = match printed.split_whitespace().collect::<Vec<_>>()[..] {
        ["job", token] => token.parse()?,
        _ => anyhow::bail!("{printed:?}"),
    };
    let output = run(ferrisson(
        &server,
        &["job", "--", "sh", "-c", "echo $FERRISSON_FENCING_TOKEN"],
    ))?;
    assert!(output.status.success());
    let second: u64 = String::from_utf8(output.stdout)?.trim().parse()?;
    assert!(second > first, "a new holder, a greater token");
    // Released on exit.
    assert_eq!(server.command(&["EXISTS", "{job}"])?, ":0");
    Ok(())
}

/// Holds lock `name` with a command that says on `ready` when it runs and then waits to
/// be killed.
fn hold(server: &RedisServer, name: &str, ready: &Fifo) -> anyhow::Result<std::process::Child> {
    let holder = ferrisson(
        server,
        &[
            name,
            "--",
            "sh",
            "-c",
            &format!("echo ready > {}; exec sleep 600", ready.path()),
        ],
    )
    .stdin(Stdio::null())
    .spawn()?;
    assert_eq!(ready.read()?, "ready\n");
    Ok(holder)
}

#[test]
fn wait_timeout_exits_75_without_running() -> anyhow::Result<()> {
    support::wait_runs_out_with_75("lock", "timed out after 200ms waiting for lock \"busy\"")
}

#[test]
fn lost_lock_terminates_the_command_with_the_chosen_status() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let dir = tempfile::tempdir()?;
    let ready = Fifo::new(dir.path(), "ready")?;
    let terminated = dir.path().join("terminated");
    let script = format!(
        "trap 'touch {}; exit 0' TERM; echo ready > {}; sleep 30 & wait",
        terminated.display(),
        ready.path()
    );
    let child = ferrisson(
        &server,
        &[
            "--lease",
            "600ms",
            "--grace",
            "5s",
            "--lost-exit-code",
            "201",
            "lost",
            "--",
            "sh",
            "-c",
            &script,
        ],
    )
    .stdin(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()?;
    ready.read()?;
    assert_eq!(server.command(&["DEL", "{lost}"])?, ":1");
    let output = child.wait_with_output()?;
    assert_eq!(output.status.code(), Some(201));
    assert!(String::from_utf8(output.stderr)?.contains("was lost"));
    assert!(terminated.exists(), "the command got SIGTERM");
    Ok(())
}

/// The command's own 74 and 75 pass through unchanged; ferrisson's "wait ran out" takes
/// the status chosen with -E; a command it could not start 126 or 127, as with `env` and
/// `timeout`; a refused argument 2 (its own failures, 125: tests/exit_statuses.rs).
#[test]
fn exit_statuses_tell_ferrisson_from_the_command() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let dir = tempfile::tempdir()?;
    for own in ["74", "75"] {
        let output = run(ferrisson(
            &server,
            &[
                "-E",
                "200",
                "--lost-exit-code",
                "201",
                "codes",
                "--",
                "sh",
                "-c",
                &format!("exit {own}"),
            ],
        ))?;
        assert_eq!(output.status.code(), Some(own.parse()?));
        assert!(
            output.stderr.is_empty(),
            "the command's own status, silently"
        );
    }

    let mut holder = hold(&server, "held", &Fifo::new(dir.path(), "ready")?)?;
    let conflict = run(ferrisson(
        &server,
        &["--wait", "100ms", "-E", "200", "held", "--", "true"],
    ))?;
    let conflict_long = run(ferrisson(
        &server,
        &[
            "--wait",
            "0s",
            "--conflict-exit-code",
            "0",
            "held",
            "--",
            "false",
        ],
    ))?;
    holder.kill()?;
    holder.wait()?;
    assert_eq!(conflict.status.code(), Some(200));
    assert_eq!(conflict_long.status.code(), Some(0), "as flock -E 0 allows");

    let not_found = run(ferrisson(&server, &["codes", "--", "no-such-command-here"]))?;
    assert_eq!(not_found.status.code(), Some(127));
    let stderr = String::from_utf8(not_found.stderr)?;
    assert!(
        stderr.starts_with("ferrisson: cannot run no-such-command-here:"),
        "{stderr}"
    );
    let not_executable = dir.path().join("not-executable");
    std::fs::write(&not_executable, "#!/bin/sh\n")?;
    let cannot_run = run(ferrisson(
        &server,
        &["codes", "--", &not_executable.display().to_string()],
    ))?;
    assert_eq!(cannot_run.status.code(), Some(126));
    // Neither start held on to the lock.
    assert_eq!(server.command(&["EXISTS", "{codes}"])?, ":0");

    let refused = run(ferrisson(
        &server,
        &["--lease", "0s", "codes", "--", "true"],
    ))?;
    assert_eq!(refused.status.code(), Some(2), "a refused argument");
    let usage = run(ferrisson(
        &server,
        &["--lost-exit-code", "256", "codes", "--", "true"],
    ))?;
    assert_eq!(usage.status.code(), Some(2), "a refused argument");
    Ok(())
}

/// `ferrisson lock` is SIGKILLed while its command (a shell script) and a child that the
/// script started both run. Both must be gone before the next holder of the lock starts:
/// the next holder's command checks it first thing.
///
/// Both processes hold an exclusive flock(1) on one file through the descriptor they
/// share, which stays locked while either of them is alive (a zombie holds no
/// descriptor), so `flock -n` on that file tells whether any of them still runs.
#[test]
fn a_killed_ferrisson_takes_its_command_and_the_commands_children_along() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let dir = tempfile::tempdir()?;
    let ready = Fifo::new(dir.path(), "ready")?;
    let alive = dir.path().join("alive").display().to_string();
    let log = dir.path().join("log").display().to_string();
    let script = format!(
        "exec 9>{alive}; flock 9; echo command >> {log}; \
         sh -c 'echo child >> {log}; echo ready > {ready}; exec sleep 600' & \
         wait",
        ready = ready.path()
    );
    let mut first = ferrisson(
        &server,
        &["--lease", "2s", "killed", "--", "sh", "-c", &script],
    )
    .stdin(Stdio::null())
    .spawn()?;
    ready.read()?;
    assert_eq!(std::fs::read_to_string(&log)?, "command\nchild\n");
    let check = format!(
        "if flock -n {alive} true; then echo gone; else echo running; fi; \
         echo $FERRISSON_FENCING_TOKEN"
    );
    let probe = Command::new("sh").arg("-c").arg(&check).output()?;
    assert_eq!(
        String::from_utf8(probe.stdout)?,
        "running\n\n",
        "the check sees the running command"
    );

    first.kill()?;
    let killed = first.wait()?;
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&killed),
        Some(9)
    );
    // Granted once the first holder's lease ran out (it renews no more).
    let next = run(ferrisson(
        &server,
        &["--wait", "20s", "killed", "--", "sh", "-c", &check],
    ))?;
    assert!(
        next.status.success(),
        "{}",
        String::from_utf8_lossy(&next.stderr)
    );
    let printed = String::from_utf8(next.stdout)?;
    let mut lines = printed.lines();
    assert_eq!(
        lines.next(),
        Some("gone"),
        "the killed holder's command and its child were gone before the next holder"
    );
    assert!(
        lines
            .next()
            .is_some_and(|token| token.parse::<u64>().is_ok()),
        "the next holder ran with its token: {printed:?}"
    );
    Ok(())
}

/// On Linux the command also gets SIGKILL from the kernel when ferrisson dies (its
/// parent-death signal), even when the process that watches its group is gone too.
#[cfg(target_os = "linux")]
#[test]
fn the_command_dies_with_ferrisson_even_without_its_watcher() -> anyhow::Result<()> {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let server = RedisServer::start()?;
    let dir = tempfile::tempdir()?;
    let pipe = Fifo::new(dir.path(), "pipe")?;
    // The command keeps the pipe open for writing until it dies: the test's read ends
    // (end of file) exactly then.
    let script = format!("exec 8>{}; echo $$ >&8; exec sleep 600", pipe.path());
    let mut holder = ferrisson(&server, &["orphan", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .spawn()?;
    let (sender, lines) = mpsc::channel();
    let path = pipe.path();
    std::thread::spawn(move || -> std::io::Result<()> {
        use std::io::BufRead as _;
        let mut reader = std::io::BufReader::new(std::fs::File::open(path)?);
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let _ = sender.send(line);
        // Blocks until the last writer is gone.
        std::io::copy(&mut reader, &mut std::io::sink())?;
        let _ = sender.send(String::from("end of file"));
        Ok(())
    });
    let command: i32 = lines.recv_timeout(EVENT_LIMIT)?.trim().parse()?;
    // The command's process group is led by the watcher.
    let stat = std::fs::read_to_string(format!("/proc/{command}/stat"))?;
    let after_name = &stat[stat.rfind(')').ok_or_else(|| anyhow::anyhow!("{stat}"))? + 2..];
    let watcher: i32 = after_name
        .split(' ')
        .nth(2)
        .ok_or_else(|| anyhow::anyhow!("{stat}"))?
        .parse()?;
    assert_ne!(watcher, command);
    // Once kill() returns, a SIGKILLed process runs no more user code: the watcher can no
    // longer act when ferrisson dies below.
    kill(Pid::from_raw(watcher), Signal::SIGKILL)?;
    holder.kill()?;
    holder.wait()?;
    assert_eq!(lines.recv_timeout(EVENT_LIMIT)?, "end of file");
    Ok(())
}

#[test]
fn dead_redis_gives_one_line_without_the_password() -> anyhow::Result<()> {
    let mut server = RedisServer::start()?;
    let port = server.port();
    server.kill()?;
    let output = support::ferrisson(&[
        "lock",
        "--url",
        &format!("redis://:hunter2@127.0.0.1:{port}"),
        "x",
        "--",
        "true",
    ])
    .output()?;
    assert_eq!(output.status.code(), Some(125));
    let stderr = String::from_utf8(output.stderr)?;
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("cannot connect")
            && stderr.contains("refused")
            && !stderr.contains("hunter2"),
        "{stderr}"
    );
    Ok(())
}

/// The client's wall clock jumps +1 h and then -2 h while it holds a lock: nothing may
/// change, since every client-side deadline is monotonic and every expiry is set by Redis.
/// The holder runs on a [`ClockShift`] (its wall clock moved, its monotonic clock left
/// alone), stepped by the test while it runs.
#[test]
fn wall_clock_jumps_do_not_touch_a_held_lock() -> anyhow::Result<()> {
    let clock = ClockShift::new()?;
    let server = RedisServer::start()?;
    let dir = tempfile::tempdir()?;
    let start = Fifo::new(dir.path(), "start")?;
    let go = Fifo::new(dir.path(), "go")?;
    let jumped = Fifo::new(dir.path(), "jumped")?;
    let done = Fifo::new(dir.path(), "done")?;
    let script = format!(
        "date +%s > {start}; read x < {go}; date +%s > {jumped}; read x < {done}",
        start = start.path(),
        go = go.path(),
        jumped = jumped.path(),
        done = done.path(),
    );
    let holder = ferrisson(
        &server,
        &["--lease", "600ms", "jump", "--", "sh", "-c", &script],
    )
    .envs(clock.env())
    .stdin(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()?;
    let started: i64 = start.read()?.trim().parse()?;
    clock.set_ahead(Duration::from_secs(3600))?;
    go.write("go\n")?;
    let after_jump: i64 = jumped.read()?.trim().parse()?;
    assert!(
        after_jump - started >= 3500,
        "the holder's wall clock jumped"
    );
    // Time passing is the point: several renewals (every 200 ms) under each offset.
    std::thread::sleep(Duration::from_millis(1200));
    clock.set_behind(Duration::from_secs(3600))?;
    std::thread::sleep(Duration::from_millis(1200));
    let contender = run(ferrisson(
        &server,
        &["--wait", "100ms", "jump", "--", "true"],
    ))?;
    assert_eq!(contender.status.code(), Some(75), "the lock is still held");
    done.write("done\n")?;
    let output = holder.wait_with_output()?;
    let stderr = String::from_utf8(output.stderr)?;
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("was lost"), "{stderr}");
    Ok(())
}

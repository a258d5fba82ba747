//! `ferrisson lock` and `ferrisson elect` on ZooKeeper (`--url zk://...`), as a user runs
//! them: separate processes against a private ZooKeeper server.

#![cfg(feature = "zookeeper")]

use std::process::{Command, Stdio};

use ferrisson_testkit::ZooKeeper;

mod support;
use support::FERRISSON;

#[test]
fn sixteen_processes_exclude_each_other_with_distinct_tokens() -> anyhow::Result<()> {
    const PROCESSES: usize = 16;
    const ROUNDS: usize = 5;
    let zk = ZooKeeper::standalone()?;
    let dir = tempfile::tempdir()?;
    let counter = dir.path().join("counter");
    let tokens = dir.path().join("tokens");
    std::fs::write(&counter, "0")?;
    // A non-atomic read-modify-write of a file: only mutual exclusion keeps the count.
    let script = format!(
        "for i in $(seq {ROUNDS}); do {FERRISSON} lock --url {url} counter -- sh -c \
         'n=$(cat {counter}); sleep 0.01; echo $((n+1)) > {counter}; echo $FERRISSON_FENCING_TOKEN >> {tokens}' \
         || exit 1; done",
        url = zk.url(),
        counter = counter.display(),
        tokens = tokens.display(),
    );
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new("sh")
                .arg("-c")
                .arg(&script)
                .env_remove("FERRISSON_URL")
                .stdin(Stdio::null())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    for mut child in children {
        assert!(child.wait()?.success());
    }
    let total: usize = std::fs::read_to_string(&counter)?.trim().parse()?;
    assert_eq!(total, PROCESSES * ROUNDS);
    let mut seen: Vec<u64> = std::fs::read_to_string(&tokens)?
        .lines()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    assert_eq!(seen.len(), PROCESSES * ROUNDS);
    // Written under the lock, in the order of the holds: strictly increasing.
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    seen.dedup();
    assert_eq!(
        seen.len(),
        PROCESSES * ROUNDS,
        "a token was handed out twice"
    );
    Ok(())
}

#[test]
fn wait_timeout_exits_75_without_running() -> anyhow::Result<()> {
    let zk = ZooKeeper::standalone()?;
    support::wait_runs_out_with_75_at(
        &zk.url(),
        "lock",
        "timed out after 200ms waiting for lock \"busy\"",
    )
}

#[test]
fn elect_runs_the_command_as_leader_with_a_token() -> anyhow::Result<()> {
    let zk = ZooKeeper::standalone()?;
    let report = "echo $FERRISSON_FENCING_TOKEN";
    let mut tokens = Vec::new();
    for _ in 0..2 {
        let output =
            support::holding("elect", &zk.url(), &["cron", "--", "sh", "-c", report]).output()?;
        assert!(output.status.success(), "{output:?}");
        tokens.push(String::from_utf8(output.stdout)?.trim().parse::<u64>()?);
    }
    assert!(tokens[1] > tokens[0], "{tokens:?}");
    Ok(())
}

#[test]
fn a_lock_deleted_behind_the_holder_stops_the_command_with_74() -> anyhow::Result<()> {
    let zk = ZooKeeper::standalone()?;
    let dir = tempfile::tempdir()?;
    let ready = support::Fifo::new(dir.path(), "ready")?;
    let terminated = dir.path().join("terminated");
    let script = format!(
        "trap 'touch {}; exit 0' TERM; echo ready > {}; sleep 30 & wait",
        terminated.display(),
        ready.path()
    );
    let child = support::holding(
        "lock",
        &zk.url(),
        &["--grace", "5s", "lost", "--", "sh", "-c", &script],
    )
    .stderr(Stdio::piped())
    .spawn()?;
    ready.read()?;
    // An operator deletes the holder's node, as `zkCli.sh deleteall` would.
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let raw =
            ferrisson::zookeeper::zookeeper_client::Client::connect(&zk.connect_string()).await?;
        let path = "/ferrisson/locks/lost";
        let children = raw.list_children(path).await?;
        assert_eq!(children.len(), 1, "{children:?}");
        raw.delete(&format!("{path}/{}", children[0]), None).await?;
        Ok::<_, anyhow::Error>(())
    })?;
    let output = child.wait_with_output()?;
    assert_eq!(output.status.code(), Some(74));
    assert!(String::from_utf8(output.stderr)?.contains("was lost"));
    assert!(terminated.exists(), "the command got SIGTERM");
    Ok(())
}

/// The leader's `ferrisson elect` is SIGKILLed; a second candidate, queued behind it, is
/// elected once the server ends the dead leader's session (one session timeout, the
/// --lease), with a greater token, after the first leader's command is gone.
#[test]
fn a_killed_leader_hands_over_within_one_session_timeout() -> anyhow::Result<()> {
    let lease = std::time::Duration::from_secs(2);
    let zk = ZooKeeper::standalone()?;
    let dir = tempfile::tempdir()?;
    let ready = support::Fifo::new(dir.path(), "ready")?;
    let elected = support::Fifo::new(dir.path(), "elected")?;
    let alive = dir.path().join("alive").display().to_string();
    let leader = format!(
        "exec 9>{alive}; flock 9; \
         sh -c 'echo $FERRISSON_FENCING_TOKEN > {ready}; exec sleep 600' & wait",
        ready = ready.path()
    );
    let mut first = support::holding(
        "elect",
        &zk.url(),
        &["--lease", "2s", "jobs", "--", "sh", "-c", &leader],
    )
    .spawn()?;
    let first_term: u64 = ready.read()?.trim().parse()?;
    let check = format!(
        "if flock -n {alive} true; then state=gone; else state=running; fi; \
         echo $state $FERRISSON_FENCING_TOKEN > {elected}",
        elected = elected.path()
    );
    let mut second = support::holding(
        "elect",
        &zk.url(),
        &["--lease", "2s", "jobs", "--", "sh", "-c", &check],
    )
    .spawn()?;
    // The second candidate queued: its node shows under the election (by child watches).
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let raw =
            ferrisson::zookeeper::zookeeper_client::Client::connect(&zk.connect_string()).await?;
        loop {
            let (children, _, watcher) = raw
                .get_and_watch_children("/ferrisson/elections/jobs")
                .await?;
            if children.len() == 2 {
                return Ok::<_, anyhow::Error>(());
            }
            tokio::time::timeout(support::EVENT_LIMIT, watcher.changed()).await?;
        }
    })?;
    first.kill()?;
    let killed_at = std::time::Instant::now();
    first.wait()?;
    let report = elected.read()?;
    let took = killed_at.elapsed();
    let words: Vec<&str> = report.split_whitespace().collect();
    assert_eq!(
        words[0], "gone",
        "the first leader's command outlived it: {report:?}"
    );
    assert!(words[1].parse::<u64>()? > first_term, "{report:?}");
    assert!(
        took <= lease + std::time::Duration::from_secs(3),
        "elected {took:?} after the leader died; the session timeout is {lease:?}"
    );
    eprintln!("a killed leader was replaced {took:?} after its death (session timeout {lease:?})");
    assert!(second.wait()?.success());
    Ok(())
}

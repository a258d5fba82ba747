//! `ferrisson elect` as a user runs it: separate processes against a real redis-server,
//! told apart by events on named pipes, not polls.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use ferrisson_testkit::RedisServer;

mod support;
use support::Fifo;

/// `ferrisson elect --url URL ARGS...`.
fn elect(server: &RedisServer, args: &[&str]) -> Command {
    support::holding("elect", &server.url(), args)
}

fn run(mut command: Command) -> std::io::Result<Output> {
    command.stdin(Stdio::null()).output()
}

#[test]
fn passes_name_id_and_token_and_steps_down_when_the_command_ends() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let report =
        "echo $FERRISSON_ELECTION_NAME $FERRISSON_LEADER_ID $FERRISSON_FENCING_TOKEN; exit 3";
    let first = run(elect(
        &server,
        &["--id", "host-a", "cron", "--", "sh", "-c", report],
    ))?;
    assert_eq!(first.status.code(), Some(3), "the command's own status");
    let first = String::from_utf8(first.stdout)?;
    let first_term: u64 = match first.split_whitespace().collect::<Vec<_>>()[..] {
        ["cron", "host-a", term] => term.parse()?,
        _ => anyhow::bail!("{first:?}"),
    };
    assert_eq!(server.command(&["EXISTS", "{cron}"])?, ":0", "stepped down");

    // Without --id, the host name and the process id.
    let second = run(elect(&server, &["cron", "--", "sh", "-c", report]))?;
    let out = String::from_utf8(second.stdout)?;
    let id = out.split_whitespace().nth(1).unwrap_or_default();
    let pid = id.rsplit(':').next().unwrap_or_default();
    assert!(
        pid.parse::<u32>().is_ok() && id.len() > pid.len() + 1,
        "{out:?}"
    );
    let second_term: u64 = out.split_whitespace().nth(2).unwrap_or_default().parse()?;
    assert!(
        second_term > first_term,
        "a new term, a greater token: {out:?}"
    );
    Ok(())
}

/// The test of the election's promise: the leader's `ferrisson elect` is SIGKILLed while
/// its command (a shell script) and a child of it run; a second candidate, campaigning
/// meanwhile, is elected within one lease, and its command finds neither of the first
/// leader's processes alive.
///
/// Both first processes hold an exclusive flock(1) on one file through the descriptor
/// they share, which stays locked while either of them is alive, so `flock -n` on that
/// file tells whether any of them still runs.
#[test]
fn a_killed_leader_hands_over_within_one_lease_and_its_command_is_gone() -> anyhow::Result<()> {
    let lease = Duration::from_secs(2);
    let server = RedisServer::start()?;
    let dir = tempfile::tempdir()?;
    let ready = Fifo::new(dir.path(), "ready")?;
    let elected = Fifo::new(dir.path(), "elected")?;
    let alive = dir.path().join("alive").display().to_string();
    let leader = format!(
        "exec 9>{alive}; flock 9; \
         sh -c 'echo $FERRISSON_LEADER_ID $FERRISSON_FENCING_TOKEN > {ready}; exec sleep 600' & \
         wait",
        ready = ready.path()
    );
    let mut first = elect(
        &server,
        &[
            "--lease", "2s", "--id", "first", "jobs", "--", "sh", "-c", &leader,
        ],
    )
    .stdin(Stdio::null())
    .spawn()?;
    let ready = ready.read()?;
    let first_term: u64 = match ready.split_whitespace().collect::<Vec<_>>()[..] {
        ["first", term] => term.parse()?,
        _ => anyhow::bail!("{ready:?}"),
    };

    let check = format!(
        "if flock -n {alive} true; then state=gone; else state=running; fi; \
         echo $state $FERRISSON_LEADER_ID $FERRISSON_FENCING_TOKEN > {elected}",
        elected = elected.path()
    );
    let mut second = elect(
        &server,
        &[
            "--lease", "2s", "--id", "second", "jobs", "--", "sh", "-c", &check,
        ],
    )
    .stdin(Stdio::null())
    .spawn()?;
    // The second candidate has found the election taken and waits: it subscribed (no
    // event tells it from outside, so the test asks the server until it shows).
    let deadline = Instant::now() + support::EVENT_LIMIT;
    while waiting_candidates(&server, "jobs")? == 0 {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the second candidate never waited"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    first.kill()?;
    let killed_at = Instant::now();
    let killed = first.wait()?;
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&killed),
        Some(9)
    );
    let report = elected.read()?;
    let took = killed_at.elapsed();
    let words: Vec<&str> = report.split_whitespace().collect();
    assert_eq!(
        words[..2],
        ["gone", "second"],
        "the first leader's command and its child were gone before the second was elected"
    );
    assert!(words[2].parse::<u64>()? > first_term, "{report:?}");
    assert!(
        took <= lease + Duration::from_millis(1500),
        "elected {took:?} after the leader died; the lease is {lease:?}"
    );
    assert!(second.wait()?.success());
    Ok(())
}

#[test]
fn lost_leadership_stops_the_command_then_exits_74_or_campaigns_again() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let dir = tempfile::tempdir()?;
    for recampaign in [false, true] {
        let ready = Fifo::new(dir.path(), &format!("ready-{recampaign}"))?;
        let log = dir.path().join(format!("log-{recampaign}"));
        let name = format!("lost-{recampaign}");
        // The first term waits to be stopped; a later one ends at once.
        let script = format!(
            "if [ ! -e {log} ]; then \
               echo first >> {log}; \
               trap 'echo stopped >> {log}; exit 0' TERM; echo ready > {ready}; sleep 30 & wait; \
             else echo again >> {log}; fi",
            log = log.display(),
            ready = ready.path()
        );
        let mut args = vec!["--lease", "600ms", "--grace", "5s"];
        if recampaign {
            args.push("--recampaign");
        }
        args.extend([name.as_str(), "--", "sh", "-c", &script]);
        let child = elect(&server, &args)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        ready.read()?;
        assert_eq!(server.command(&["DEL", &format!("{{{name}}}")])?, ":1");
        let output = child.wait_with_output()?;
        let stderr = String::from_utf8(output.stderr)?;
        assert!(stderr.contains("was lost"), "{stderr}");
        if recampaign {
            assert_eq!(output.status.code(), Some(0), "{stderr}");
            assert_eq!(std::fs::read_to_string(&log)?, "first\nstopped\nagain\n");
        } else {
            assert_eq!(output.status.code(), Some(74), "{stderr}");
            assert_eq!(std::fs::read_to_string(&log)?, "first\nstopped\n");
        }
    }
    Ok(())
}

#[test]
fn wait_runs_out_with_75_and_nothing_run() -> anyhow::Result<()> {
    support::wait_runs_out_with_75(
        "elect",
        "timed out after 200ms waiting to be elected leader of \"busy\"",
    )
}

/// How many clients wait on the election's candidates channel.
fn waiting_candidates(server: &RedisServer, name: &str) -> anyhow::Result<i64> {
    let reply = server.query(&["PUBSUB", "SHARDNUMSUB", &format!("{{{name}}}:released")])?;
    Ok(reply
        .elements()
        .and_then(|e| e.get(1))
        .and_then(ferrisson_testkit::Reply::integer)
        .unwrap_or(0))
}

//! `ferrisson lock` and `ferrisson elect` on etcd: the command runs with the hold's
//! fencing token (the key's create revision), `etcdctl lock` on the same name makes
//! `--wait` run out with 75, and an unreachable etcd is 125.

use std::process::Stdio;

use ferrisson_testkit::EtcdCluster;

mod support;
use support::{ferrisson, outcome, within};

/// How many keys there are under `prefix` (by `etcdctl get --keys-only`).
fn keys_under(cluster: &EtcdCluster, prefix: &str) -> anyhow::Result<usize> {
    let out = cluster
        .etcdctl()
        .args(["get", prefix, "--prefix", "--keys-only"])
        .output()?;
    anyhow::ensure!(out.status.success(), "etcdctl get failed");
    Ok(String::from_utf8(out.stdout)?
        .lines()
        .filter(|line| line.starts_with(prefix))
        .count())
}

#[test]
fn lock_runs_the_command_with_growing_tokens() -> anyhow::Result<()> {
    let member = EtcdCluster::single()?;
    let url = member.url();
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let (code, stdout, stderr) = outcome(&mut ferrisson(&[
            "lock",
            "--url",
            &url,
            "cli-report",
            "--",
            "sh",
            "-c",
            "echo $FERRISSON_FENCING_TOKEN",
        ]))?;
        assert_eq!(code, Some(0), "{stderr}");
        tokens.push(stdout.trim().parse::<u64>()?);
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert_eq!(
        keys_under(&member, "cli-report/")?,
        0,
        "a key was left behind"
    );
    Ok(())
}

#[test]
fn wait_runs_out_with_75_while_etcdctl_holds_the_lock() -> anyhow::Result<()> {
    let member = EtcdCluster::single()?;
    let mut etcdctl = member
        .etcdctl()
        .args(["lock", "cli-nightly"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = etcdctl
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    // etcdctl prints the key it holds once it holds it.
    let held = within(move || {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)?;
        Ok(line)
    })?;
    assert!(held.starts_with("cli-nightly/"), "{held:?}");
    let (code, _, stderr) = outcome(&mut ferrisson(&[
        "lock",
        "--url",
        &member.url(),
        "--wait",
        "300ms",
        "cli-nightly",
        "--",
        "true",
    ]))?;
    etcdctl.kill()?;
    etcdctl.wait()?;
    assert_eq!(code, Some(75), "{stderr}");
    assert!(stderr.contains("cli-nightly"), "{stderr}");
    Ok(())
}

#[test]
fn elect_runs_the_command_as_leader() -> anyhow::Result<()> {
    let member = EtcdCluster::single()?;
    let (code, stdout, stderr) = outcome(&mut ferrisson(&[
        "elect",
        "--url",
        &member.url(),
        "cli-scheduler",
        "--",
        "sh",
        "-c",
        "echo $FERRISSON_FENCING_TOKEN",
    ]))?;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.trim().parse::<u64>()? > 0, "{stdout}");
    Ok(())
}

#[test]
fn an_unreachable_etcd_is_125() -> anyhow::Result<()> {
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let url = format!("etcd://127.0.0.1:{port}");
    let (code, _, stderr) = outcome(&mut ferrisson(&["lock", "--url", &url, "x", "--", "true"]))?;
    assert_eq!(code, Some(125), "{stderr}");
    assert!(stderr.contains("etcd://127.0.0.1"), "{stderr}");
    Ok(())
}

//! `ferrisson-chaos` as a user runs it: the binary starts its own servers and, for the
//! process scenarios, re-executes itself as the holder.

fn chaos(args: &[&str]) -> std::io::Result<std::process::Output> {
    std::process::Command::new(env!("CARGO_BIN_EXE_ferrisson-chaos"))
        .args(args)
        .env("FERRISSON_LOG", "error")
        .stdin(std::process::Stdio::null())
        .output()
}

#[test]
fn holder_killed_runs_with_the_binary_as_holder_and_writes_json() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let json = dir.path().join("report.json");
    let output = chaos(&[
        "holder-killed",
        "--iterations",
        "2",
        "--json",
        json.to_str().expect("utf-8 path"),
    ])?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("| holder-killed |"), "{stdout}");
    assert!(
        stdout.ends_with("1 scenario, 2 iterations: 1 pass, 0 unsafe as documented, 0 FAIL\n"),
        "{stdout}"
    );
    let reports: serde_json::Value = serde_json::from_slice(&std::fs::read(&json)?)?;
    let report = &reports[0];
    assert_eq!(report["scenario"], "holder-killed");
    assert_eq!(report["iterations"], 2);
    assert_eq!(report["passed"], true);
    assert!(report["counters"]["measures"]["reacquire_after_sigkill"].is_u64());
    Ok(())
}

#[test]
fn an_unknown_scenario_is_refused() -> anyhow::Result<()> {
    let output = chaos(&["no-such-fault", "--iterations", "1"])?;
    assert_eq!(output.status.code(), Some(2), "a usage error");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("invalid value 'no-such-fault'"), "{stderr}");
    // The error lists what is valid, the topology scenarios included.
    for name in [
        "server-clock-jumped",
        "sentinel-failover",
        "sentinel-failover-acked",
        "cluster-master-failover",
        "slot-migrated-while-held",
        "cluster-node-partitioned",
    ] {
        assert!(stderr.contains(name), "{name}: {stderr}");
    }
    Ok(())
}

#[test]
fn a_url_is_refused_as_the_suite_starts_its_own_servers() -> anyhow::Result<()> {
    let output = chaos(&["--url", "redis://127.0.0.1:1"])?;
    assert_eq!(output.status.code(), Some(2), "a usage error");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unexpected argument '--url'"), "{stderr}");
    Ok(())
}

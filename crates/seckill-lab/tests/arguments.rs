//! Refused arguments of `seckill-lab` and `seckill-bench` exit 2 with the flag named,
//! before any server starts (no `seckill` binary, Redis or database is needed to tell).

use std::process::Command;

fn refused(binary: &str, args: &[&str], flag: &str) {
    let out = Command::new(binary)
        .args(args)
        // Nothing listens on port 1: had anything connected first, it would fail
        // with "Connection refused" and exit 1.
        .args(["--url", "redis://127.0.0.1:1"])
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(flag), "{args:?} names {flag}: {stderr}");
    assert!(!stderr.contains("Connection refused"), "{args:?}: {stderr}");
}

#[test]
fn the_lab_refuses_bad_arguments_with_exit_2() {
    let lab = env!("CARGO_BIN_EXE_seckill-lab");
    refused(lab, &["--clients", "0"], "--clients");
    refused(lab, &["--stock", "0"], "--stock");
    refused(lab, &["--lab-lease", "100y"], "--lab-lease");
    refused(lab, &["--watchdog-lease", "nonsense"], "--watchdog-lease");
    refused(lab, &["--watchdog-lease", "100y"], "--watchdog-lease");
    refused(lab, &["--database", "sqlite://x.db"], "--database");
}

#[test]
fn the_bench_refuses_bad_arguments_with_exit_2() {
    let bench = env!("CARGO_BIN_EXE_seckill-bench");
    refused(bench, &["--rounds", "0"], "--rounds");
    refused(bench, &["--buyers", "0"], "--buyers");
    refused(bench, &["--instances", "x"], "--instances");
    refused(bench, &["--database", "sqlite://x.db"], "--database");
    refused(bench, &["--flows", "lock,no-lock"], "--flows");
    refused(bench, &["--flows", "no-lock,lock,lock"], "--flows");
    refused(bench, &["--flows", "no-lock,lock-fast"], "--flows");
}

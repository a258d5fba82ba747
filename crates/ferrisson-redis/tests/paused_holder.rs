//! A holder process frozen (SIGSTOP) past its lease: another client takes the lock, and
//! the stale holder, once resumed, can neither release the new holder's lock nor write
//! over its data.
//!
//! The holder is this test binary run again with `FERRISSON_HOLDER_URL` set: the test
//! `holder_process` is its entry point and does nothing in a normal run.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use ferrisson_redis::{Client, Error, FencedWrite};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const HOLDER_URL: &str = "FERRISSON_HOLDER_URL";

#[test]
fn holder_process() -> anyhow::Result<()> {
    let Ok(url) = std::env::var(HOLDER_URL) else {
        return Ok(()); // only the child run of `paused_holder_is_fenced_off` acts
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = Client::builder(&url)
            .watchdog_lease(Duration::from_millis(500))
            .connect()
            .await?;
        let guard = client.lock("paused")?.lock().await?;
        let token = guard.fencing_token();
        println!("token {token}");
        std::io::stdout().flush()?;
        let mut line = String::new();
        // Frozen here by the parent, then told to go on.
        tokio::task::spawn_blocking(move || std::io::stdin().read_line(&mut line)).await??;
        let write = match client.fenced_set("resource", b"stale", token).await? {
            FencedWrite::Accepted => "accepted",
            FencedWrite::Refused { .. } => "refused",
        };
        println!("write {write}");
        let unlock = match guard.unlock().await {
            Ok(()) => "ok".to_owned(),
            Err(Error::NotOwner { .. }) => "not-owner".to_owned(),
            Err(Error::LeaseExpired { .. }) => "lease-expired".to_owned(),
            Err(e) => format!("error {e}"),
        };
        println!("unlock {unlock}");
        anyhow::Ok(())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_holder_is_fenced_off() -> anyhow::Result<()> {
    let (server, client) = common::server_and_client().await?;
    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "--exact",
            "holder_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HOLDER_URL, server.url())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let mut next_line = move || -> anyhow::Result<String> {
        for line in lines.by_ref() {
            let line = line?;
            // libtest prints its own text around the holder's, even on the same line.
            for marker in ["token ", "write ", "unlock "] {
                if let Some(at) = line.find(marker) {
                    return Ok(line[at..].to_owned());
                }
            }
        }
        anyhow::bail!("the holder process ended early")
    };
    let stale_token: u64 = next_line()?.trim_start_matches("token ").parse()?;
    let pid = Pid::from_raw(i32::try_from(child.id())?);
    kill(pid, Signal::SIGSTOP)?;

    // The frozen holder cannot renew: its 500 ms lease runs out and we get the lock.
    let lock = client.lock("paused")?;
    let guard = lock
        .lock_timeout(Duration::from_secs(10))
        .await?
        .expect("the frozen holder's lease expires");
    assert!(guard.fencing_token().get() > stale_token);
    assert!(
        client
            .fenced_set("resource", b"fresh", guard.fencing_token())
            .await?
            .is_accepted()
    );

    kill(pid, Signal::SIGCONT)?;
    child.stdin.take().expect("piped").write_all(b"go\n")?;
    let write = tokio::task::spawn_blocking(move || {
        let write = next_line()?;
        let unlock = next_line()?;
        // Read to the end, so the child's last lines do not hit a closed pipe.
        while next_line().is_ok() {}
        anyhow::Ok((write, unlock))
    })
    .await??;
    assert!(child.wait()?.success());
    assert_eq!(write.0, "write refused");
    assert_eq!(write.1, "unlock not-owner");

    assert!(guard.is_held());
    assert_eq!(
        lock.hold_count().await?,
        1,
        "the new holder's lock is untouched"
    );
    assert_eq!(
        client.fenced_get("resource").await?,
        Some((b"fresh".to_vec(), guard.fencing_token()))
    );
    guard.unlock().await?;
    Ok(())
}

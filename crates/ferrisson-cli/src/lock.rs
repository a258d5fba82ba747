//! `ferrisson lock`: run a command while holding a distributed lock.

use std::process::ExitCode;

/// Run a command while holding a distributed lock.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub async fn run(_args: Args, _url: &str) -> anyhow::Result<ExitCode> {
    anyhow::bail!("ferrisson lock is not built yet")
}

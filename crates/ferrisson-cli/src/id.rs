//! `ferrisson id`: make and decode global ids.

use std::process::ExitCode;

/// Make or decode global unique ids.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub async fn run(_args: Args, _url: &str) -> anyhow::Result<ExitCode> {
    anyhow::bail!("ferrisson id is not built yet")
}

//! `seckill-lab`: the oversell lab (`./lab` at the repository root runs it).

use std::process::ExitCode;

use clap::{CommandFactory as _, Parser};
use seckill::error::one_line;
use seckill_lab::LabOptions;

/// Runs the oversell lab: starts Redis servers and `seckill serve` processes, fires the
/// load at every variant of the stock deduction and at the voucher order flows, and
/// prints a table of what each one did (with report.json, chart.svg and the page,
/// report.html, under --out).
/// Exits 1 when a variant did not show what is expected of it.
#[derive(Debug, Parser)]
#[command(name = "seckill-lab", version)]
struct Cli {
    #[command(flatten)]
    options: LabOptions,
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut options = Cli::parse().options;
    // A refused argument exits 2 under the usage line, as clap's own refusals do,
    // before any server starts.
    if let Err(e) = options.validate() {
        Cli::command()
            .error(
                clap::error::ErrorKind::ValueValidation,
                one_line(e.as_ref()),
            )
            .exit();
    }
    seckill::logging::init("warn");
    match lab(&mut options).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("seckill-lab: {}", one_line(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

async fn lab(options: &mut LabOptions) -> anyhow::Result<ExitCode> {
    options.binary = seckill_lab::seckill_binary()?;
    let report = seckill_lab::run(options).await?;
    println!("{}", report.table());
    println!("report: {}", options.out.join("report.json").display());
    println!("chart:  {}", options.out.join("chart.svg").display());
    println!("page:   {}", options.out.join("report.html").display());
    Ok(if report.problems().is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

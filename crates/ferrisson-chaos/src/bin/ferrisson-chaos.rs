//! `ferrisson-chaos`: the fault scenarios at size, against servers it starts itself
//! (docs/SAFETY.md). A program of its own, so that installing the `ferrisson` command
//! builds neither the suite nor the test kit it runs on.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use ferrisson_chaos::{Config, HolderCommand, Scenario, ScenarioReport};

/// The shortest watchdog lease a run may use: renewed every third of it, each renewal's
/// round trip must fit in the two thirds left (the `ferrisson` command's own floor).
const MIN_LEASE: Duration = Duration::from_millis(100);

/// Run the fault scenarios against servers of its own and check the safety counters
/// (see docs/SAFETY.md).
#[derive(Debug, Parser)]
#[command(name = "ferrisson-chaos", version)]
struct Args {
    /// Scenario name, or `all` (the default).
    #[arg(value_name = "SCENARIO", value_parser = scenario_names())]
    scenario: Option<String>,

    /// Iterations per scenario.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    iterations: u32,

    /// The watchdog lease of every client (at least 100ms).
    #[arg(long, default_value = "300ms", value_parser = lease)]
    lease: Duration,

    /// Write the reports as JSON to this file.
    #[arg(long, value_name = "PATH")]
    json: Option<std::path::PathBuf>,
}

fn scenario_names() -> clap::builder::PossibleValuesParser {
    let names = std::iter::once("all").chain(Scenario::ALL.iter().map(|s| s.name()));
    clap::builder::PossibleValuesParser::new(names)
}

fn lease(text: &str) -> Result<Duration, String> {
    let lease = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if lease < MIN_LEASE {
        return Err(format!(
            "the lease must be at least {}: it is renewed every third of it, and each \
             renewal's round trip must fit in the two thirds left",
            humantime::format_duration(MIN_LEASE)
        ));
    }
    Ok(lease)
}

fn main() -> ExitCode {
    // Parsed first: a refused argument exits 2 before any server starts.
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("ferrisson-chaos: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("ferrisson-chaos: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the scenarios; exit code 1 when an expected result did not hold.
async fn run(args: Args) -> anyhow::Result<ExitCode> {
    // The holder-killed scenario runs this same binary as its holder process.
    if ferrisson_chaos::run_killable_holder().await? {
        return Ok(ExitCode::SUCCESS);
    }
    let scenarios: Vec<Scenario> = match args.scenario.as_deref() {
        None | Some("all") => Scenario::ALL.to_vec(),
        // Checked by clap against the same list.
        Some(name) => Scenario::from_name(name).into_iter().collect(),
    };
    let config = Config {
        iterations: args.iterations,
        lease: args.lease,
        holder: Some(HolderCommand {
            program: std::env::current_exe()?,
            args: Vec::new(),
        }),
    };
    let mut reports: Vec<ScenarioReport> = Vec::new();
    for scenario in scenarios {
        eprintln!("ferrisson-chaos: {} x {}", scenario.name(), args.iterations);
        let report = ferrisson_chaos::run(scenario, &config).await?;
        for failure in &report.failures {
            eprintln!("  {}: {failure}", scenario.name());
        }
        reports.push(report);
    }
    print!("{}", ferrisson_chaos::table(&reports));
    println!("{}", ferrisson_chaos::summary(&reports));
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&reports)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(if reports.iter().all(|r| r.passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

//! `ferrisson chaos` (the `chaos` feature): the fault scenarios at size, against
//! redis-server processes it starts itself.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use ferrisson_chaos::{Config, HolderCommand, Scenario, ScenarioReport};

/// Run the fault scenarios against redis-server processes of its own and check the safety
/// counters (see docs/SAFETY.md).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenario name, or `all` (the default).
    #[arg(value_name = "SCENARIO", value_parser = scenario_names())]
    scenario: Option<String>,

    /// Iterations per scenario.
    #[arg(long, default_value_t = 100)]
    iterations: u32,

    /// The watchdog lease of every client (at least 100ms, as `ferrisson lock --lease`).
    #[arg(long, default_value = "300ms", value_parser = humantime::parse_duration)]
    lease: Duration,

    /// Write the reports as JSON to this file.
    #[arg(long, value_name = "PATH")]
    json: Option<std::path::PathBuf>,
}

fn scenario_names() -> clap::builder::PossibleValuesParser {
    let names = std::iter::once("all").chain(Scenario::ALL.iter().map(|s| s.name()));
    clap::builder::PossibleValuesParser::new(names)
}

impl Args {
    /// Refuses what no run could use, before any server starts.
    pub fn check(&self) -> Result<(), crate::arguments::Refused> {
        crate::arguments::check_lease(self.lease)
    }
}

/// Runs the scenarios; exit code 1 when an expected result did not hold.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    // The holder-killed scenario runs this same binary as its holder process.
    if ferrisson_chaos::run_killable_holder().await? {
        return Ok(ExitCode::SUCCESS);
    }
    let scenarios: Vec<Scenario> = match args.scenario.as_deref() {
        None | Some("all") => Scenario::ALL.to_vec(),
        Some(name) => match Scenario::from_name(name) {
            Some(s) => vec![s],
            None => bail!("unknown scenario {name:?}"),
        },
    };
    let config = Config {
        iterations: args.iterations,
        lease: args.lease,
        holder: Some(HolderCommand {
            program: std::env::current_exe()?,
            args: vec!["chaos".into()],
        }),
    };
    let mut reports: Vec<ScenarioReport> = Vec::new();
    for scenario in scenarios {
        eprintln!("ferrisson chaos: {} x {}", scenario.name(), args.iterations);
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

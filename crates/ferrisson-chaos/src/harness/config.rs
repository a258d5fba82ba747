//! The size and timing of a run, and how to start a holder process.

use std::path::PathBuf;
use std::time::Duration;

/// The size and timing of a run.
///
/// ```
/// let config = ferrisson_chaos::Config::new(3);
/// assert_eq!(config.lease, std::time::Duration::from_millis(300));
/// ```
#[derive(Debug, Clone)]
pub struct Config {
    /// Iterations of the scenario.
    pub iterations: u32,
    /// The watchdog lease of every client (renewed every third of it).
    pub lease: Duration,
    /// The holder process of the scenarios that kill, freeze or re-clock their holder
    /// (they fail without it).
    pub holder: Option<HolderCommand>,
}

impl Config {
    /// `iterations` with a 300 ms lease and no holder command.
    pub fn new(iterations: u32) -> Self {
        Self {
            iterations,
            lease: Duration::from_millis(300),
            holder: None,
        }
    }
}

/// How to start a holder process: a program that calls
/// [`run_killable_holder`](crate::run_killable_holder) when
/// [`HOLDER_ENV`](crate::HOLDER_ENV) is set.
#[derive(Debug, Clone)]
pub struct HolderCommand {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
}

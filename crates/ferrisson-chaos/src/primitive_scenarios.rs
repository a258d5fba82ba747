//! TODO(primitive): being written.

use crate::checker::Counters;
use crate::history::History;
use crate::scenarios::{Config, Env, Scenario};

#[allow(clippy::unused_async)] // a stub until the scenarios land
pub(crate) async fn run_once(
    scenario: Scenario,
    _config: &Config,
    _env: &Env,
    _history: &History,
    _name: &str,
) -> anyhow::Result<()> {
    anyhow::bail!("{} is not written yet", scenario.name())
}

/// Scenario-specific expected results, added to `failures`.
pub(crate) fn expectations(_scenario: Scenario, _c: &Counters, _failures: &mut Vec<String>) {}

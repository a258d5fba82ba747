//! Fault scenarios for ferrisson, with their evidence.
//!
//! - [`History`] and [`Recorder`]: what every client did and believed (acquire, belief
//!   samples of each guard's own validity, lost signals, releases, writes), on one
//!   monotonic clock.
//! - [`check`]: counts overlapping critical sections, double grants by belief, stale
//!   writes accepted and refused by fencing, token regressions, releases and renewals
//!   touching another owner's lock, renewals after loss, guards held past their
//!   deadline and keys left behind.
//! - [`Scenario`] and [`run`]: each fault injected against real `redis-server`
//!   processes through a [`ferrisson_testkit::FaultProxy`], with its expected result
//!   checked.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use ferrisson_chaos::{Config, Scenario};
//!
//! let report = ferrisson_chaos::run(Scenario::HolderBlackholed, &Config::new(5)).await?;
//! assert!(report.passed, "{:?}", report.failures);
//! # Ok(()) }
//! ```

mod checker;
mod clock_scenarios;
mod guard;
mod history;
mod holder_process;
mod memory_scenarios;
mod primitive_scenarios;
mod redlock_scenarios;
mod resource;
mod scenarios;

pub use checker::{Counters, check};
pub use history::{Event, EventKind, History, Recorder, ReleaseOutcome};
pub use holder_process::{HOLDER_ENV, HolderCommand, run_killable_holder};
pub use resource::Resource;
pub use scenarios::{Config, Scenario, ScenarioReport, run, table};

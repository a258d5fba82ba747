//! What a scenario module provides, and the loop that runs it.
//!
//! A scenario module defines a type (usually an enum of the scenarios that share one
//! set-up) implementing [`FaultScenario`]; the registry (`crate::scenarios`) lists each
//! scenario once and runs it through [`run_iterations`].

use anyhow::Context;

use crate::checker::{Counters, check};
use crate::harness::config::Config;
use crate::harness::expectations::{Documented, Expectations};
use crate::history::{Event, History, Recorder};

/// Scenarios that share a set-up: one module's worth. Their names and faults are in the
/// registry, next to their documentation.
pub(crate) trait FaultScenario: Copy + Send {
    /// What is started once per run and handed to every iteration (servers, proxies, a
    /// cluster or a sentinel group); `()` when each iteration starts its own.
    type Setup: Setup;

    /// Whether the scenario is a documented unsafe case: double grants are expected of
    /// it (and must show, unless [`FaultScenario::double_grants_are_rare`]).
    fn is_documented_unsafe(self) -> bool {
        false
    }

    /// A documented unsafe case whose double grants need a race to go one way, so that
    /// a run of a few iterations may show none: they are allowed, not required (the
    /// scenario's own `expect` says what must hold instead).
    fn double_grants_are_rare(self) -> bool {
        false
    }

    /// One iteration: injects the fault, recording every client's steps in `it`.
    /// (Implemented as an `async fn`; declared `Send` so that a run can be spawned.)
    fn run_once(
        self,
        config: &Config,
        setup: &mut Self::Setup,
        it: &Iteration,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// Whether two masters take writes for a while, so that a holder's renewal on one can
    /// overlap a waiter's grant on the other: the documented failure, not a renewal of
    /// another owner's lock (see [`Documented`]).
    fn renewals_may_reach_a_deposed_master(self) -> bool {
        false
    }

    /// The scenario's own expected results, on top of
    /// [`Expectations::for_every_scenario`].
    fn expect(self, _config: &Config, _counters: &Counters, _expect: &mut Expectations) {}
}

/// What a scenario module starts once per run: an iteration gets it as `&mut`, to kill,
/// pause or restart what is in it, and leaves it whole for the next iteration.
pub(crate) trait Setup: Send + Sized {
    /// Starts it. (Implemented as an `async fn`.)
    fn start(config: &Config) -> impl Future<Output = anyhow::Result<Self>> + Send;
}

/// One iteration: a lock name of its own and the history its two clients record into.
pub(crate) struct Iteration {
    /// The iteration's number, from 0.
    pub(crate) number: u32,
    /// The lock's name, fresh per iteration: `chaos-SCENARIO-NUMBER`.
    pub(crate) name: String,
    /// Every event of the iteration.
    pub(crate) history: History,
    /// Client A (client 0 of the history): the holder the fault hits.
    pub(crate) a: Recorder,
    /// Client B (client 1): the contender.
    pub(crate) b: Recorder,
}

impl Iteration {
    fn new(scenario: &str, number: u32) -> Self {
        let history = History::new();
        Self {
            number,
            name: format!("chaos-{scenario}-{number}"),
            a: history.recorder(0),
            b: history.recorder(1),
            history,
        }
    }
}

/// Runs `scenario`, called `name`, for `config.iterations` iterations: the summed
/// counters, and the
/// expected results that did not hold (none when it passed).
///
/// # Errors
///
/// When the set-up or an iteration could not be carried out (a server, proxy or holder
/// process failed), as opposed to a scenario that ran and failed its expectations.
pub(crate) async fn run_iterations<S: FaultScenario>(
    scenario: S,
    name: &str,
    config: &Config,
) -> anyhow::Result<(Counters, Vec<String>)> {
    let mut setup = S::Setup::start(config).await?;
    let mut counters = Counters::default();
    for number in 0..config.iterations {
        let it = Iteration::new(name, number);
        scenario
            .run_once(config, &mut setup, &it)
            .await
            .with_context(|| format!("{name} iteration {number}"))?;
        let events = it.history.events();
        if std::env::var_os("FERRISSON_CHAOS_TRACE").is_some() {
            trace(number, &events);
        }
        counters.merge(&check(&events));
    }
    let documented = Documented {
        unsafe_case: scenario.is_documented_unsafe(),
        must_show: !scenario.double_grants_are_rare(),
        renewals_on_a_deposed_master: scenario.renewals_may_reach_a_deposed_master(),
    };
    let mut expect = Expectations::for_every_scenario(documented, &counters);
    scenario.expect(config, &counters, &mut expect);
    Ok((counters, expect.into_failures()))
}

/// Every event of an iteration on stderr, one a line (`FERRISSON_CHAOS_TRACE` set).
fn trace(iteration: u32, events: &[Event]) {
    for e in events {
        eprintln!(
            "{iteration} {:>6.1}ms c{} g{} {:?}",
            e.at.as_secs_f64() * 1e3,
            e.client,
            e.grant,
            e.kind
        );
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::history::{EventKind, ReleaseOutcome};

    /// A hand-off written straight into the history, no server: A holds for 100 ms and
    /// releases at 50 ms, B is granted after that (or, `overlapping`, at 40 ms while A
    /// holds on).
    #[derive(Clone, Copy)]
    struct HandOff {
        overlapping: bool,
    }

    impl FaultScenario for HandOff {
        /// The iterations the one set-up has served.
        type Setup = Served;

        async fn run_once(
            self,
            _config: &Config,
            served: &mut Served,
            it: &Iteration,
        ) -> anyhow::Result<()> {
            anyhow::ensure!(served.0 == it.number, "one set-up for every iteration");
            anyhow::ensure!(it.name == format!("chaos-hand-off-{}", it.number));
            served.0 += 1;
            let ms = Duration::from_millis;
            let grant = |rec: &Recorder, at: u64| {
                rec.record_at(
                    ms(at),
                    0,
                    EventKind::AcquireOk {
                        token: Some(at),
                        deadline: ms(at + 100),
                    },
                );
            };
            grant(&it.a, 1);
            if self.overlapping {
                grant(&it.b, 40);
            } else {
                it.a.record_at(ms(50), 0, EventKind::ReleaseInvoked);
                it.a.record_at(
                    ms(51),
                    0,
                    EventKind::Released {
                        outcome: ReleaseOutcome::Ok,
                    },
                );
                grant(&it.b, 60);
            }
            Ok(())
        }

        fn expect(self, config: &Config, c: &Counters, expect: &mut Expectations) {
            if c.acquires_ok != 2 * u64::from(config.iterations) {
                expect.fail(format!("{} grants", c.acquires_ok));
            }
        }
    }

    struct Served(u32);

    impl Setup for Served {
        async fn start(_config: &Config) -> anyhow::Result<Self> {
            Ok(Self(0))
        }
    }

    #[tokio::test]
    async fn every_iteration_is_checked_and_the_counters_summed() -> anyhow::Result<()> {
        let config = Config::new(3);
        let (counters, failures) =
            run_iterations(HandOff { overlapping: false }, "hand-off", &config).await?;
        assert_eq!(counters.acquires_ok, 6);
        assert!(failures.is_empty(), "{failures:?}");
        let (counters, failures) =
            run_iterations(HandOff { overlapping: true }, "hand-off", &config).await?;
        assert_eq!(counters.double_grants, 3);
        assert_eq!(failures, ["double grants = 3, expected 0"]);
        Ok(())
    }
}

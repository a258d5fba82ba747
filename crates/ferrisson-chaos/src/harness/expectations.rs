//! The expected results of a scenario, stated before it runs and checked against the
//! counters summed over its iterations.

use crate::checker::Counters;

/// What a scenario documents about itself (docs/SAFETY.md, "Expected results"), which
/// decides what [`Expectations::for_every_scenario`] requires of it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Documented {
    /// A documented unsafe case: double grants are expected of it.
    pub(crate) unsafe_case: bool,
    /// Its double grants must show in every run (false: they need a race, and are
    /// allowed, not required).
    pub(crate) must_show: bool,
    /// For a while two masters take writes (a Sentinel failover without replica
    /// acknowledgements, until the old master is demoted): a holder's renewal on one can
    /// overlap a waiter's grant on the other, which is how the double grant comes about.
    pub(crate) renewals_on_a_deposed_master: bool,
}

/// The expected results that did not hold, one line each.
#[derive(Debug, Default)]
pub(crate) struct Expectations {
    failures: Vec<String>,
}

impl Expectations {
    /// What must hold in every scenario (docs/SAFETY.md, "Expected results"): nothing
    /// touched another owner's lock, no renewal after a loss, no guard held past its
    /// deadline, no key left; outside the documented unsafe cases no double grant, no
    /// stale write accepted, no token regression, no fresh write refused; in them, the
    /// double grants that show the failure (unless the scenario documents them as rare).
    pub(crate) fn for_every_scenario(documented: Documented, c: &Counters) -> Self {
        let mut expect = Self::default();
        expect.zero("foreign releases", c.foreign_releases);
        // A renewal is seen by its client's belief, not by the server it reached: where
        // the holder's renewals may land on a deposed master, one that does while a waiter
        // holds the lock on the new master looks foreign, and is the documented failure.
        if !documented.renewals_on_a_deposed_master {
            expect.zero("foreign renewals", c.foreign_renewals);
        }
        expect.zero("renewals after loss", c.renewals_after_loss);
        expect.zero("held after deadline", c.held_after_deadline);
        expect.zero("keys left after healing", c.keys_left);
        if documented.unsafe_case {
            if documented.must_show && c.double_grants == 0 {
                expect.fail("double grants = 0, expected the documented violation");
            }
        } else {
            expect.zero("double grants", c.double_grants);
            expect.zero(
                "stale writes accepted with fencing",
                c.stale_writes_accepted_fenced,
            );
            expect.zero("token regressions", c.token_regressions);
            expect.zero("fresh writes refused", c.fresh_writes_refused);
        }
        if c.acquires_ok == 0 {
            expect.fail("no acquire succeeded: the scenario did not run");
        }
        expect
    }

    /// `value` of the counter `what` must be zero.
    pub(crate) fn zero(&mut self, what: &str, value: u64) {
        if value != 0 {
            self.fail(format!("{what} = {value}, expected 0"));
        }
    }

    /// An expected result that did not hold.
    pub(crate) fn fail(&mut self, failure: impl Into<String>) {
        self.failures.push(failure.into());
    }

    /// Every expected result that did not hold; empty when the scenario passed.
    pub(crate) fn into_failures(self) -> Vec<String> {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scenario that documents no failure: everything must hold.
    const SAFE: Documented = Documented {
        unsafe_case: false,
        must_show: true,
        renewals_on_a_deposed_master: false,
    };
    /// A documented unsafe case whose double grants must show.
    const UNSAFE: Documented = Documented {
        unsafe_case: true,
        ..SAFE
    };

    #[test]
    fn a_documented_unsafe_case_must_show_its_double_grants() {
        let ran = Counters {
            acquires_ok: 2,
            ..Counters::default()
        };
        assert!(
            Expectations::for_every_scenario(SAFE, &ran)
                .into_failures()
                .is_empty()
        );
        let failures = Expectations::for_every_scenario(UNSAFE, &ran).into_failures();
        assert_eq!(
            failures,
            ["double grants = 0, expected the documented violation"]
        );
        let shown = Counters {
            double_grants: 1,
            token_regressions: 1,
            ..ran.clone()
        };
        assert!(
            Expectations::for_every_scenario(UNSAFE, &shown)
                .into_failures()
                .is_empty()
        );
        // A rare documented violation may show or not.
        let rare = Documented {
            must_show: false,
            ..UNSAFE
        };
        for counters in [&ran, &shown] {
            assert!(
                Expectations::for_every_scenario(rare, counters)
                    .into_failures()
                    .is_empty()
            );
        }
        assert_eq!(
            Expectations::for_every_scenario(SAFE, &shown).into_failures(),
            [
                "double grants = 1, expected 0",
                "token regressions = 1, expected 0"
            ]
        );
    }

    #[test]
    fn renewals_that_look_foreign_fail_a_run_unless_they_may_reach_a_deposed_master() {
        let renewed = Counters {
            acquires_ok: 2,
            double_grants: 1,
            foreign_renewals: 1,
            ..Counters::default()
        };
        assert_eq!(
            Expectations::for_every_scenario(UNSAFE, &renewed).into_failures(),
            ["foreign renewals = 1, expected 0"]
        );
        let deposed = Documented {
            renewals_on_a_deposed_master: true,
            ..UNSAFE
        };
        assert!(
            Expectations::for_every_scenario(deposed, &renewed)
                .into_failures()
                .is_empty()
        );
        // Foreign releases stay forbidden there.
        let released = Counters {
            foreign_releases: 1,
            ..renewed
        };
        assert_eq!(
            Expectations::for_every_scenario(deposed, &released).into_failures(),
            ["foreign releases = 1, expected 0"]
        );
    }

    #[test]
    fn a_scenario_without_a_grant_did_not_run() {
        let failures = Expectations::for_every_scenario(SAFE, &Counters::default());
        assert_eq!(
            failures.into_failures(),
            ["no acquire succeeded: the scenario did not run"]
        );
    }
}

//! One hold, from its grant to its release or loss, as the metrics see it: the `holds`
//! gauge, the hold time, the lost-lock counter; and the span of one release.
//!
//! A hold ends once, whichever comes first: the watchdog finds it gone, its lease runs
//! out, a release finds it expired or taken (lost), or its last release is sent
//! (released). Dropping a started hold that never ended ends it as released, so the
//! gauge never drifts when a release could not even be attempted.

use std::future::Future;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use futures_util::FutureExt as _;
use tracing::Instrument;
use tracing::field::Empty;

use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::observe::probe::Probe;

/// The metric side of one hold; see the module docs.
#[derive(Debug)]
pub struct HoldMeter {
    probe: Probe,
    /// Set when the grant is counted.
    since: OnceLock<Instant>,
    ended: AtomicBool,
}

impl HoldMeter {
    /// A hold not counted yet (see [`HoldMeter::start`]).
    pub fn new(probe: Probe) -> Self {
        Self {
            probe,
            since: OnceLock::new(),
            ended: AtomicBool::new(false),
        }
    }

    /// A hold counted from now.
    pub fn started(probe: Probe) -> Self {
        let held = Self::new(probe);
        held.start();
        held
    }

    /// The name and metric keys of the primitive held.
    pub fn probe(&self) -> &Probe {
        &self.probe
    }

    /// Moves the hold's metrics out (for a `Drop` that hands the release to a task),
    /// leaving an uncounted one behind.
    #[must_use]
    pub fn take(&mut self) -> Self {
        std::mem::replace(self, Self::new(self.probe.clone()))
    }

    /// The name of the primitive whose hold this counts.
    pub(crate) fn name(&self) -> &str {
        &self.probe.name
    }

    /// Counts the hold from now; only the first call counts.
    pub fn start(&self) {
        if self.since.set(Instant::now()).is_ok() {
            self.probe.instruments.hold_started();
        }
    }

    /// Ends a counted hold (lost or released); only the first call counts.
    pub fn end(&self, lost: bool) {
        let Some(since) = self.since.get() else {
            return;
        };
        if !self.ended.swap(true, Ordering::AcqRel) {
            self.probe
                .instruments
                .hold_ended(since.elapsed().as_secs_f64(), lost);
        }
    }

    /// Sends one release of this hold in a `ferrisson.release` span and ends the hold by
    /// its outcome: lost when the release found the hold expired or taken (an error, or a
    /// reply `expired` says so); released when `last` (no other guard shares the hold)
    /// and the release went out. A combinator rather than an `async fn`, so that `release`
    /// is not stored twice in the state (see `observe::acquire`).
    pub fn release<'a, T: 'a>(
        &'a self,
        token: Option<FencingToken>,
        last: bool,
        release: impl Future<Output = Result<T>> + 'a,
        expired: impl FnOnce(&T) -> bool + 'a,
    ) -> impl Future<Output = Result<T>> + 'a {
        let span = tracing::debug_span!(
            "ferrisson.release",
            name = %self.probe.name,
            kind = self.probe.kind().label(),
            fencing_token = Empty,
            outcome = Empty,
        );
        if let Some(token) = token {
            span.record("fencing_token", token.get());
        }
        release.instrument(span.clone()).map(move |outcome| {
            let (label, found_lost) = match &outcome {
                Ok(reply) if expired(reply) => ("expired", true),
                Ok(_) => ("released", false),
                Err(Error::LeaseExpired { .. }) => ("expired", true),
                Err(Error::NotOwner { .. }) => ("not_owner", true),
                Err(_) => ("error", false),
            };
            span.record("outcome", label);
            if found_lost {
                self.end(true);
            } else if last {
                self.end(false);
            }
            outcome
        })
    }
}

impl Drop for HoldMeter {
    fn drop(&mut self) {
        self.end(false);
    }
}

//! One acquire as the metrics and spans see it: the `ferrisson.acquire` span from the
//! first attempt to the outcome, the outcome counters and the wait histogram; and, for
//! the part spent waiting after a first refusal, the `ferrisson.wait` span and the
//! waiters gauge.

use std::future::Future;
use std::time::{Duration, Instant};

use futures_util::FutureExt as _;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::error::Result;
use crate::fencing::FencingToken;
use crate::observe::metrics::Outcome;
use crate::observe::probe::Probe;

/// What an acquire hands out, as far as its span needs to know.
pub trait Grant {
    /// The grant's fencing token, when the primitive has one.
    fn fencing_token(&self) -> Option<FencingToken> {
        None
    }
}

/// A latch wait hands out nothing.
impl Grant for () {}

/// What an acquire's answer says, as the metrics read it.
#[derive(Debug, Clone, Copy)]
pub enum Decided {
    /// Granted, with the grant's fencing token when it has one.
    Granted(Option<FencingToken>),
    /// Refused: taken, or the wait ran out.
    Refused,
}

/// Runs `acquire` in a `ferrisson.acquire` span and records its outcome.
///
/// `wait` is the caller's bound: `Some(Duration::ZERO)` for a try (a refusal is `busy`),
/// another bound (running out is a `timeout`), or `None` for no bound. An acquire
/// dropped before it ended is `cancelled`.
///
/// Returns a combinator rather than being an `async fn`: a future handed to an `async fn`
/// is stored twice in its state (as the argument and as the pinned local), and the
/// acquire futures this wraps are the crate's largest.
///
/// # Cancel safety
///
/// As cancel safe as `acquire`.
pub fn observe_acquire<'a, G: Grant + 'a>(
    probe: &'a Probe,
    wait: Option<Duration>,
    acquire: impl Future<Output = Result<Option<G>>> + 'a,
) -> impl Future<Output = Result<Option<G>>> + 'a {
    observe_decision(probe, wait, acquire, |granted| match granted {
        Some(granted) => Decided::Granted(granted.fencing_token()),
        None => Decided::Refused,
    })
}

/// [`observe_acquire`] for an acquire whose answer is not an `Option`: `decided` reads
/// it.
///
/// # Cancel safety
///
/// As cancel safe as `acquire`.
pub fn observe_decision<'a, T: 'a>(
    probe: &'a Probe,
    wait: Option<Duration>,
    acquire: impl Future<Output = Result<T>> + 'a,
    decided: impl FnOnce(&T) -> Decided + 'a,
) -> impl Future<Output = Result<T>> + 'a {
    let acquiring = Acquiring::start(probe);
    let span = acquiring.span.clone();
    acquire.instrument(span).map(move |result| {
        acquiring.end(wait, result.as_ref().ok().map(decided));
        result
    })
}

/// One acquire under way: its span, and when it started.
struct Acquiring<'a> {
    probe: &'a Probe,
    started: Instant,
    span: Span,
    ended: bool,
}

impl<'a> Acquiring<'a> {
    fn start(probe: &'a Probe) -> Self {
        Self {
            probe,
            started: Instant::now(),
            span: tracing::debug_span!(
                "ferrisson.acquire",
                name = %probe.name,
                kind = probe.kind().label(),
                outcome = Empty,
                fencing_token = Empty,
            ),
            ended: false,
        }
    }

    /// The acquire bounded by `wait` (see [`observe_acquire`]) ended as `decided` says,
    /// or with an error (`None`).
    fn end(mut self, wait: Option<Duration>, decided: Option<Decided>) {
        let outcome = match decided {
            Some(Decided::Granted(token)) => {
                if let Some(token) = token {
                    self.span.record("fencing_token", token.get());
                }
                Outcome::Acquired
            }
            Some(Decided::Refused) if wait == Some(Duration::ZERO) => Outcome::Busy,
            Some(Decided::Refused) => Outcome::Timeout,
            None => Outcome::Error,
        };
        self.record(outcome);
    }

    fn record(&mut self, outcome: Outcome) {
        self.ended = true;
        self.span.record("outcome", outcome.label());
        self.probe
            .instruments
            .acquire_ended(outcome, self.started.elapsed().as_secs_f64());
    }
}

impl Drop for Acquiring<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.record(Outcome::Cancelled);
        }
    }
}

/// Runs `wait`, the waiting part of an acquire after a first refusal, as one waiter:
/// counted in the waiters gauge and traced as a `ferrisson.wait` span whose outcome is
/// `acquired`, `timeout`, `error` or `cancelled`.
///
/// A combinator, not an `async fn`, for the reason given at [`observe_acquire`].
///
/// # Cancel safety
///
/// As cancel safe as `wait`; the waiter is uncounted when the future is dropped.
pub fn observe_wait<'a, G>(
    probe: &'a Probe,
    wait: impl Future<Output = Result<Option<G>>> + 'a,
) -> impl Future<Output = Result<Option<G>>> + 'a {
    let mut waiting = Waiting {
        probe,
        span: tracing::debug_span!(
            "ferrisson.wait",
            name = %probe.name,
            kind = probe.kind().label(),
            outcome = Empty,
        ),
        ended: false,
    };
    probe.instruments.waiters_add(1.0);
    let span = waiting.span.clone();
    wait.instrument(span).map(move |result| {
        waiting.end(match &result {
            Ok(Some(_)) => Outcome::Acquired,
            Ok(None) => Outcome::Timeout,
            Err(_) => Outcome::Error,
        });
        result
    })
}

struct Waiting<'a> {
    probe: &'a Probe,
    span: Span,
    ended: bool,
}

impl Waiting<'_> {
    fn end(&mut self, outcome: Outcome) {
        self.ended = true;
        self.span.record("outcome", outcome.label());
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.end(Outcome::Cancelled);
        }
        self.probe.instruments.waiters_add(-1.0);
    }
}

//! What the lab observes during one run of a variant it runs itself: the holders of the
//! variant's lock (the crash goes to the `--lab-fault-at`-th), two holders at once, the
//! requests that gave up or lost a compare, and the events that prove a verdict.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// Events kept per run; the others are counted.
const MAX_EVENTS: usize = 4;

/// Shared by every instance of one run (they are in one process, so the counters see
/// every instance's requests as they happen).
#[derive(Debug, Default)]
pub(crate) struct Observed {
    /// Acquisitions of the variant's lock so far.
    acquisitions: AtomicU64,
    /// Holders right now.
    holding: AtomicI64,
    /// Acquisitions that found another holder still holding.
    pub(crate) double_holds: AtomicU64,
    /// Requests that gave up waiting for the lock.
    pub(crate) gave_up: AtomicU64,
    /// `db-version-cas`: buyers whose compare failed while stock was left.
    pub(crate) cas_conflicts: AtomicU64,
    /// The events that prove the verdict (a crash, a take-over), in words.
    events: Mutex<Vec<String>>,
    /// Events not kept (past [`MAX_EVENTS`]).
    more_events: AtomicU64,
    /// The first error a request returned, in words.
    first_error: Mutex<Option<String>>,
    /// Whether this run's crash has happened.
    crashed: AtomicU64,
}

/// One holder's hold on the lock, as the lab counts it (dropped at the release).
pub(crate) struct Holding<'a> {
    observed: &'a Observed,
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.observed.holding.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Observed {
    /// A holder got the lock: counted, and a double hold when another holder is still in
    /// (it has not released yet). Returns the hold and whether this holder is the one
    /// to crash (the `fault_at`-th acquisition of the run; 0: none).
    pub(crate) fn acquired(&self, fault_at: u64) -> (Holding<'_>, bool) {
        let before = self.holding.fetch_add(1, Ordering::SeqCst);
        if before > 0 {
            self.double_holds.fetch_add(1, Ordering::SeqCst);
        }
        let n = self.acquisitions.fetch_add(1, Ordering::SeqCst) + 1;
        let crash = fault_at != 0
            && n >= fault_at
            && self
                .crashed
                .compare_exchange(0, n, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok();
        (Holding { observed: self }, crash)
    }

    /// Records an event that proves the verdict (the first few; the others counted).
    pub(crate) fn event(&self, what: String) {
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        if events.len() < MAX_EVENTS {
            events.push(what);
        } else {
            self.more_events.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The events, in order, and how many more there were.
    pub(crate) fn events(&self) -> Vec<String> {
        let mut events = self
            .events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        match self.more_events.load(Ordering::SeqCst) {
            0 => {}
            n => events.push(format!("... and {n} more such events")),
        }
        events
    }

    /// Keeps the first error a request returned.
    pub(crate) fn error(&self, e: &anyhow::Error) {
        let mut first = self
            .first_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if first.is_none() {
            *first = Some(format!("{e:#}"));
        }
    }

    /// The first error a request returned.
    pub(crate) fn first_error(&self) -> Option<String> {
        self.first_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn count(counter: &AtomicU64) -> i64 {
        i64::try_from(counter.load(Ordering::SeqCst)).unwrap_or(i64::MAX)
    }
}

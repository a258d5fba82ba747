//! What every client did and believed, on one monotonic clock.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;

/// One client's view of one event. Times are offsets from the history's start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventKind {
    /// An acquire call started.
    AcquireInvoked,
    /// An acquire returned a guard with this fencing token and this validity deadline.
    AcquireOk {
        /// The grant's fencing token; `None` for a hold that has none (the read side of
        /// an `RwLock`, an `ExpirablePermit`, a `Redlock` guard).
        token: Option<u64>,
        /// The guard's own deadline when it was handed out.
        deadline: Duration,
    },
    /// An acquire failed or found the lock taken.
    AcquireFailed {
        /// Why, for the record.
        reason: String,
    },
    /// The guard's belief, sampled: `is_held()` and the deadline its `remaining()` gives.
    /// A deadline later than the previous sample's is a renewal.
    Belief {
        /// `is_held()`.
        held: bool,
        /// Now plus `remaining()`, read right after `is_held()`.
        deadline: Duration,
    },
    /// The guard's lost-lock signal fired.
    Lost,
    /// A release call started.
    ReleaseInvoked,
    /// A release returned.
    Released {
        /// `Ok`, `NotOwner`, `LeaseExpired` or an error's text.
        outcome: ReleaseOutcome,
    },
    /// The protected resource saw this client enter its critical section, with its
    /// token (every access carries the token, so fencing sees it from the start).
    Enter {
        /// The holder's fencing token; `None` for a hold that has none (a reader), which
        /// the resource cannot fence by.
        token: Option<u64>,
    },
    /// The protected resource saw this client leave.
    Exit,
    /// A write reached the protected resource with this token.
    Write {
        /// The writer's fencing token.
        token: u64,
        /// Whether the fencing resource accepted it (token not below the highest it saw).
        accepted: bool,
    },
    /// After healing and one lease: how many of the scenario's lock keys still exist.
    KeysLeft {
        /// Lock keys found.
        count: u64,
    },
    /// A scenario-specific count, summed over the run (e.g. a waiter never granted, a
    /// holder that found its lock gone at release while it still believed it held it).
    Count {
        /// What was counted.
        name: String,
        /// How many, in this event.
        count: u64,
    },
    /// A scenario-specific measurement in milliseconds (e.g. time to the next acquire).
    Measure {
        /// What was measured.
        name: String,
        /// Milliseconds.
        millis: u64,
    },
}

/// How a release ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseOutcome {
    /// The release removed this owner's lock.
    Ok,
    /// Another owner held the lock; nothing was touched.
    NotOwner,
    /// The lock had expired; nothing was touched.
    Expired,
    /// Redis could not be reached or answered an error.
    Error(String),
}

/// One recorded event: when, which client, which grant of that client, what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    /// Offset from the history's start (one monotonic clock for every client).
    pub at: Duration,
    /// The client (or process) that acted.
    pub client: usize,
    /// The client's grant number this event belongs to (grants are numbered per client).
    pub grant: usize,
    /// What happened.
    pub kind: EventKind,
}

/// A shared, append-only list of events with one time base.
///
/// ```
/// use ferrisson_chaos::{EventKind, History};
///
/// let history = History::new();
/// let a = history.recorder(0);
/// a.record(0, EventKind::AcquireInvoked);
/// assert_eq!(history.events().len(), 1);
/// ```
#[derive(Debug, Clone)]
pub struct History {
    start: Instant,
    events: Arc<Mutex<Vec<Event>>>,
}

impl Default for History {
    fn default() -> Self {
        Self::new()
    }
}

impl History {
    /// An empty history whose clock starts now.
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            events: Arc::default(),
        }
    }

    /// The offset of `instant` from the start (zero before it).
    pub fn offset(&self, instant: Instant) -> Duration {
        instant.saturating_duration_since(self.start)
    }

    /// Now, as an offset from the start.
    pub fn now(&self) -> Duration {
        self.offset(Instant::now())
    }

    /// A recorder for one client.
    pub fn recorder(&self, client: usize) -> Recorder {
        Recorder {
            history: self.clone(),
            client,
        }
    }

    /// Appends an event as given (for synthetic histories and merged child processes).
    pub fn push(&self, event: Event) {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(event);
    }

    /// Every event so far, ordered by time.
    pub fn events(&self) -> Vec<Event> {
        let mut events = self
            .events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        events.sort_by_key(|e| e.at);
        events
    }
}

/// Records events of one client into a [`History`].
#[derive(Debug, Clone)]
pub struct Recorder {
    history: History,
    client: usize,
}

impl Recorder {
    /// The client number.
    pub fn client(&self) -> usize {
        self.client
    }

    /// The history's clock, now.
    pub fn now(&self) -> Duration {
        self.history.now()
    }

    /// Records `kind` for `grant` at the current time.
    pub fn record(&self, grant: usize, kind: EventKind) {
        self.record_at(self.history.now(), grant, kind);
    }

    /// Records `kind` for `grant` at a given offset.
    pub fn record_at(&self, at: Duration, grant: usize, kind: EventKind) {
        self.history.push(Event {
            at,
            client: self.client,
            grant,
            kind,
        });
    }

    /// Records a belief sample: the sample time is taken before `is_held`, the deadline
    /// after `remaining` (an overestimate by nanoseconds), so an honest guard never looks
    /// late.
    pub fn belief(
        &self,
        grant: usize,
        is_held: impl Fn() -> bool,
        remaining: impl Fn() -> Duration,
    ) {
        let at = self.history.now();
        let held = is_held();
        let remaining = remaining();
        let deadline = self.history.now() + remaining;
        self.record_at(at, grant, EventKind::Belief { held, deadline });
    }
}

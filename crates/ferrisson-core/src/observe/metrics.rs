#![doc = include_str!("../../docs/METRICS.md")]
//!
//! The names are constants below; [`Instruments`] holds the keys of one store, kind and
//! class.

use metrics::{Key, Label, Level, Metadata, SharedString, Unit};

/// Counter: acquires granted, re-entries included.
pub const ACQUISITIONS: &str = "ferrisson_acquisitions_total";
/// Counter: acquires that ended with an error.
pub const ACQUIRE_ERRORS: &str = "ferrisson_acquire_errors_total";
/// Counter: bounded waits that ran out.
pub const ACQUIRE_TIMEOUTS: &str = "ferrisson_acquire_timeouts_total";
/// Counter: tries without a wait that found the primitive taken.
pub const ACQUIRE_BUSY: &str = "ferrisson_acquire_busy_total";
/// Histogram (seconds): from an acquire's first attempt to its outcome.
pub const ACQUIRE_WAIT_SECONDS: &str = "ferrisson_acquire_wait_seconds";
/// Histogram (seconds): from a grant to its release or loss.
pub const HOLD_SECONDS: &str = "ferrisson_hold_seconds";
/// Gauge: holds this process has now.
pub const HOLDS: &str = "ferrisson_holds";
/// Gauge: tasks waiting now.
pub const WAITERS: &str = "ferrisson_waiters";
/// Counter: watchdog renewals that extended a hold.
pub const RENEWALS: &str = "ferrisson_renewals_total";
/// Counter: renewals of a hold that got no usable answer.
pub const RENEWAL_FAILURES: &str = "ferrisson_renewal_failures_total";
/// Counter: holds lost.
pub const LOCKS_LOST: &str = "ferrisson_locks_lost_total";
/// Gauge: channels the clients' shared subscriptions listen on now.
pub const SUBSCRIBED_CHANNELS: &str = "ferrisson_subscribed_channels";

/// Label: the store (`redis`, `postgres`, `memory`, ...).
pub const STORE_LABEL: &str = "store";
/// Label: the primitive kind (`lock`, `semaphore`, ...).
pub const PRIMITIVE_LABEL: &str = "primitive";
/// Label: the class of the primitive's name, only when the client computes one.
pub const CLASS_LABEL: &str = "class";
/// Label of [`ACQUIRE_WAIT_SECONDS`]: how the acquire ended.
pub const OUTCOME_LABEL: &str = "outcome";

/// Every metric with its kind and description, in the order of the table above.
const DESCRIPTIONS: [(&str, Type, &str); 12] = [
    (
        ACQUISITIONS,
        Type::Counter,
        "Acquires granted, re-entries included (for a latch: waits that saw it open).",
    ),
    (
        ACQUIRE_ERRORS,
        Type::Counter,
        "Acquires that ended with an error.",
    ),
    (
        ACQUIRE_TIMEOUTS,
        Type::Counter,
        "Bounded waits that ran out.",
    ),
    (
        ACQUIRE_BUSY,
        Type::Counter,
        "Tries without a wait that found the primitive taken.",
    ),
    (
        ACQUIRE_WAIT_SECONDS,
        Type::Histogram,
        "Time from an acquire's first attempt to its outcome.",
    ),
    (
        HOLD_SECONDS,
        Type::Histogram,
        "Time from a grant to its release or loss.",
    ),
    (
        HOLDS,
        Type::Gauge,
        "Holds (locks, permits) this process has now.",
    ),
    (
        WAITERS,
        Type::Gauge,
        "Tasks waiting now, after a first refused attempt.",
    ),
    (
        RENEWALS,
        Type::Counter,
        "Watchdog renewals that extended a hold.",
    ),
    (
        RENEWAL_FAILURES,
        Type::Counter,
        "Renewals of a hold that got no usable answer; retried until the lease runs out.",
    ),
    (
        LOCKS_LOST,
        Type::Counter,
        "Holds lost: found gone or taken, lease ran out unrenewed, or released after expiry.",
    ),
    (
        SUBSCRIBED_CHANNELS,
        Type::Gauge,
        "Channels the clients' shared subscriptions listen on now.",
    ),
];

#[derive(Clone, Copy)]
enum Type {
    Counter,
    Gauge,
    Histogram,
}

/// Describes every ferrisson metric (type, unit, help text) to the installed recorder.
///
/// Every store's client does this when it connects;
/// call it yourself only when the recorder is installed after the clients connect.
///
/// ```no_run
/// // ... install a recorder, then:
/// ferrisson_core::observe::metrics::describe();
/// ```
pub fn describe() {
    metrics::with_recorder(|recorder| {
        for (name, kind, help) in DESCRIPTIONS {
            let help = SharedString::const_str(help);
            let key = metrics::KeyName::from_const_str(name);
            match kind {
                Type::Counter => recorder.describe_counter(key, Some(Unit::Count), help),
                Type::Gauge => recorder.describe_gauge(key, Some(Unit::Count), help),
                Type::Histogram => recorder.describe_histogram(key, Some(Unit::Seconds), help),
            }
        }
    });
}

/// The kinds of primitive, as the `primitive` label spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A reentrant lock.
    Lock,
    /// A fair (first come, first served) lock.
    FairLock,
    /// The read side of a read-write lock.
    RwLockRead,
    /// The write side of a read-write lock.
    RwLockWrite,
    /// A lock without re-entry or renewal.
    SimpleLock,
    /// A lock over a majority of independent servers.
    Redlock,
    /// A counting semaphore.
    Semaphore,
    /// A semaphore whose permits have leases.
    ExpirableSemaphore,
    /// A count-down latch (a wait that sees it open is an acquisition).
    Latch,
    /// A leader election (a campaign is an acquire, a term a hold).
    Election,
    /// A rate limiter (an allowed decision is an acquisition).
    RateLimiter,
}

impl Kind {
    /// Every kind, in the order of their discriminants.
    pub const ALL: [Kind; 11] = [
        Kind::Lock,
        Kind::FairLock,
        Kind::RwLockRead,
        Kind::RwLockWrite,
        Kind::SimpleLock,
        Kind::Redlock,
        Kind::Semaphore,
        Kind::ExpirableSemaphore,
        Kind::Latch,
        Kind::Election,
        Kind::RateLimiter,
    ];

    /// The `primitive` label's value.
    pub const fn label(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::FairLock => "fair_lock",
            Kind::RwLockRead => "rwlock_read",
            Kind::RwLockWrite => "rwlock_write",
            Kind::SimpleLock => "simple_lock",
            Kind::Redlock => "redlock",
            Kind::Semaphore => "semaphore",
            Kind::ExpirableSemaphore => "expirable_semaphore",
            Kind::Latch => "latch",
            Kind::Election => "election",
            Kind::RateLimiter => "rate_limiter",
        }
    }
}

/// How an acquire ended, as the `outcome` label spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Granted.
    Acquired,
    /// A try found it taken.
    Busy,
    /// A bounded wait ran out.
    Timeout,
    /// Ended with an error.
    Error,
    /// The caller dropped the acquire.
    Cancelled,
}

impl Outcome {
    const ALL: [Outcome; 5] = [
        Outcome::Acquired,
        Outcome::Busy,
        Outcome::Timeout,
        Outcome::Error,
        Outcome::Cancelled,
    ];

    /// The `outcome` label's value.
    pub const fn label(self) -> &'static str {
        match self {
            Outcome::Acquired => "acquired",
            Outcome::Busy => "busy",
            Outcome::Timeout => "timeout",
            Outcome::Error => "error",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// The keys of every per-primitive metric for one kind and class, built once (per kind,
/// or per class the first time a client sees it) so that an event allocates nothing.
#[derive(Debug)]
pub struct Instruments {
    /// The kind of primitive these keys count.
    pub kind: Kind,
    acquisitions: Key,
    acquire_errors: Key,
    acquire_timeouts: Key,
    acquire_busy: Key,
    /// By [`Outcome`], in the order of `Outcome::ALL`.
    acquire_wait: [Key; 5],
    hold_seconds: Key,
    holds: Key,
    waiters: Key,
    renewals: Key,
    renewal_failures: Key,
    locks_lost: Key,
}

/// The metadata every ferrisson metric registers with.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

impl Instruments {
    /// The keys of a `kind` primitive of `store`, with a `class` label when given.
    pub fn new(store: &'static str, kind: Kind, class: Option<&str>) -> Self {
        let mut labels = vec![
            Label::from_static_parts(STORE_LABEL, store),
            Label::from_static_parts(PRIMITIVE_LABEL, kind.label()),
        ];
        if let Some(class) = class {
            labels.push(Label::new(CLASS_LABEL, class.to_owned()));
        }
        let key = |name: &'static str| Key::from_parts(name, labels.clone());
        let wait = |outcome: Outcome| {
            let mut labels = labels.clone();
            labels.push(Label::from_static_parts(OUTCOME_LABEL, outcome.label()));
            Key::from_parts(ACQUIRE_WAIT_SECONDS, labels)
        };
        Self {
            kind,
            acquisitions: key(ACQUISITIONS),
            acquire_errors: key(ACQUIRE_ERRORS),
            acquire_timeouts: key(ACQUIRE_TIMEOUTS),
            acquire_busy: key(ACQUIRE_BUSY),
            acquire_wait: Outcome::ALL.map(wait),
            hold_seconds: key(HOLD_SECONDS),
            holds: key(HOLDS),
            waiters: key(WAITERS),
            renewals: key(RENEWALS),
            renewal_failures: key(RENEWAL_FAILURES),
            locks_lost: key(LOCKS_LOST),
        }
    }

    /// One acquire ended with `outcome` after `waited` seconds.
    pub fn acquire_ended(&self, outcome: Outcome, waited: f64) {
        let counter = match outcome {
            Outcome::Acquired => Some(&self.acquisitions),
            Outcome::Busy => Some(&self.acquire_busy),
            Outcome::Timeout => Some(&self.acquire_timeouts),
            Outcome::Error => Some(&self.acquire_errors),
            Outcome::Cancelled => None,
        };
        metrics::with_recorder(|recorder| {
            if let Some(key) = counter {
                recorder.register_counter(key, &METADATA).increment(1);
            }
            recorder
                .register_histogram(&self.acquire_wait[outcome as usize], &METADATA)
                .record(waited);
        });
    }

    /// One more waiter (`1.0`) or one fewer (`-1.0`).
    pub fn waiters_add(&self, delta: f64) {
        metrics::with_recorder(|r| r.register_gauge(&self.waiters, &METADATA).increment(delta));
    }

    /// One more hold.
    pub fn hold_started(&self) {
        metrics::with_recorder(|r| r.register_gauge(&self.holds, &METADATA).increment(1.0));
    }

    /// A hold ended after `held` seconds, lost or not.
    pub fn hold_ended(&self, held: f64, lost: bool) {
        metrics::with_recorder(|recorder| {
            recorder
                .register_gauge(&self.holds, &METADATA)
                .decrement(1.0);
            recorder
                .register_histogram(&self.hold_seconds, &METADATA)
                .record(held);
            if lost {
                recorder
                    .register_counter(&self.locks_lost, &METADATA)
                    .increment(1);
            }
        });
    }

    /// `holds` holds were renewed.
    pub fn renewed(&self, holds: u64) {
        metrics::with_recorder(|r| {
            r.register_counter(&self.renewals, &METADATA)
                .increment(holds);
        });
    }

    /// Renewing `holds` holds got no usable answer.
    pub fn renewal_failed(&self, holds: u64) {
        metrics::with_recorder(|r| {
            r.register_counter(&self.renewal_failures, &METADATA)
                .increment(holds);
        });
    }
}

static SUBSCRIBED: Key = Key::from_static_name(SUBSCRIBED_CHANNELS);

/// The client's shared subscription joined (`+1`) or left (`-1`) channels.
pub fn subscribed_channels_add(delta: f64) {
    metrics::with_recorder(|r| r.register_gauge(&SUBSCRIBED, &METADATA).increment(delta));
}

#[cfg(test)]
mod tests {
    use super::{DESCRIPTIONS, Kind};

    const DOC: &str = include_str!("../../docs/METRICS.md");

    #[test]
    fn the_table_lists_every_metric_and_no_other() {
        let rows: Vec<&str> = DOC
            .lines()
            .filter_map(|line| line.strip_prefix("| `ferrisson_"))
            .filter_map(|rest| rest.split('`').next())
            .collect();
        assert_eq!(rows.len(), DESCRIPTIONS.len(), "{rows:?}");
        for (name, _, _) in DESCRIPTIONS {
            let short = name.strip_prefix("ferrisson_").expect("prefixed");
            assert!(rows.contains(&short), "{name} is not in docs/METRICS.md");
        }
    }

    #[test]
    fn names_follow_the_prometheus_conventions() {
        for (name, kind, _) in DESCRIPTIONS {
            assert!(name.starts_with("ferrisson_"), "{name}");
            match kind {
                super::Type::Counter => assert!(name.ends_with("_total"), "{name}"),
                super::Type::Histogram => assert!(name.ends_with("_seconds"), "{name}"),
                super::Type::Gauge => assert!(!name.ends_with("_total"), "{name}"),
            }
        }
    }

    #[test]
    fn kinds_index_their_own_keys() {
        for (i, kind) in Kind::ALL.iter().enumerate() {
            assert_eq!(*kind as usize, i);
            assert!(DOC.contains(&format!("`{}`", kind.label())), "{kind:?}");
        }
    }
}

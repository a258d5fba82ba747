//! What each Redis primitive gives, declared once: the README's capability table is
//! rendered from [`CAPABILITIES`] and each primitive's `capabilities()` returns its row.

use ferrisson_core::capabilities::{CancelSafety, Capabilities, Fencing, Reentry, Validity, Wait};

use crate::api::error::STORE;

const WATCHDOG: Validity = Validity::Lease(
    "a key with a TTL; the client's watchdog renews it every lease/3 (30 s lease by default), or a fixed lease",
);
const SERVER_CLOCK_TOKEN: Fencing = Fencing::Token(
    "the server's clock (µs) with a high-water mark (one per server; per hash slot on a cluster); can go back after a failover to a replica that missed it, or a restart without data, if the new clock is behind",
);
const LOST_ON_RENEWAL: &str =
    "at once when a renewal finds the key gone or taken; at the lease's end when renewals fail";
const WAKE_ONE: Wait = Wait::EventDriven(
    "the release wakes one waiting client through its subscription; a lost message costs at most the holder's TTL",
);
const UNDO_SENT: CancelSafety = CancelSafety::SafeAtCost(
    "an acquire that may have reached Redis is undone by one more script call",
);

/// [`Lock`](crate::Lock): reentrant per task, watchdog, fencing token.
pub const LOCK: Capabilities = Capabilities::new(
    STORE,
    "Lock",
    Reentry::PerTask,
    false,
    WATCHDOG,
    SERVER_CLOCK_TOKEN,
    LOST_ON_RENEWAL,
    WAKE_ONE,
    UNDO_SENT,
);

/// [`FairLock`](crate::FairLock): first come, first served.
pub const FAIR_LOCK: Capabilities = Capabilities::new(
    STORE,
    "FairLock",
    Reentry::PerTask,
    true,
    WATCHDOG,
    SERVER_CLOCK_TOKEN,
    LOST_ON_RENEWAL,
    Wait::EventDriven(
        "the release wakes the next in the queue; queued waiters keep their place alive and dead ones are evicted by server time",
    ),
    CancelSafety::SafeAtCost("a cancelled waiter's queue entry is removed by one more script call"),
);

/// [`SimpleLock`](crate::SimpleLock): `SET NX PX` and compare-and-delete.
pub const SIMPLE_LOCK: Capabilities = Capabilities::new(
    STORE,
    "SimpleLock",
    Reentry::None,
    false,
    Validity::Lease("a key with a TTL: a fixed 30 s lease by default, or renewed by the watchdog"),
    SERVER_CLOCK_TOKEN,
    LOST_ON_RENEWAL,
    WAKE_ONE,
    UNDO_SENT,
);

/// [`RwLock`](crate::RwLock): many readers or one writer.
pub const RW_LOCK: Capabilities = Capabilities::new(
    STORE,
    "RwLock",
    Reentry::PerTask,
    false,
    WATCHDOG,
    Fencing::Token("write side: as Lock; read side: none"),
    LOST_ON_RENEWAL,
    WAKE_ONE,
    UNDO_SENT,
);

/// [`Redlock`](crate::Redlock): a majority of independent servers.
pub const REDLOCK: Capabilities = Capabilities::new(
    STORE,
    "Redlock",
    Reentry::None,
    false,
    Validity::Lease(
        "a key with a TTL on each server; valid for TTL − elapsed − drift; a fixed 10 s lease by default, or extended on a majority every lease/3",
    ),
    Fencing::Token(
        "the largest of the majority's server clocks, written back to them; not safe across clock jumps or servers restarted without data",
    ),
    "when an extension does not reach a majority in time; at the end of the validity",
    Wait::Polled("a retry after a random pause when the votes split or a server holds it"),
    CancelSafety::SafeAtCost("a failed or cancelled attempt deletes its key on every server"),
);

/// [`Semaphore`](crate::Semaphore): permits without expiry.
pub const SEMAPHORE: Capabilities = Capabilities::new(
    STORE,
    "Semaphore",
    Reentry::None,
    false,
    Validity::UntilReleased,
    Fencing::None,
    "never: a permit lasts until released (a dead holder's permit is lost to the pool)",
    Wait::EventDriven(
        "a release wakes as many waiting clients as permits came free; a periodic recheck (1 s) covers a lost message",
    ),
    CancelSafety::SafeAtCost(
        "a permit taken after the caller gave up is given back by one more call",
    ),
);

/// [`ExpirableSemaphore`](crate::ExpirableSemaphore): permits with leases.
pub const EXPIRABLE_SEMAPHORE: Capabilities = Capabilities::new(
    STORE,
    "ExpirableSemaphore",
    Reentry::None,
    false,
    Validity::Lease("each permit's lease on the server's clock, renewed by the watchdog or fixed"),
    Fencing::None,
    "per permit: when a renewal finds it reclaimed; at its lease's end when renewals fail",
    Wait::EventDriven(
        "a release or an expiry wakes waiting clients; a periodic recheck (1 s) covers a lost message",
    ),
    UNDO_SENT,
);

/// [`Election`](crate::Election): one leader, a token per term.
pub const ELECTION: Capabilities = Capabilities::new(
    STORE,
    "Election",
    Reentry::None,
    false,
    WATCHDOG,
    Fencing::Token("one per term, as Lock's; the term record keeps the history"),
    LOST_ON_RENEWAL,
    WAKE_ONE,
    UNDO_SENT,
);

/// Every Redis primitive's declaration, in the order of the capability table.
pub const CAPABILITIES: &[Capabilities] = &[
    LOCK,
    FAIR_LOCK,
    SIMPLE_LOCK,
    RW_LOCK,
    REDLOCK,
    SEMAPHORE,
    EXPIRABLE_SEMAPHORE,
    ELECTION,
];

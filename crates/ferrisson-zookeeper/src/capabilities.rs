//! What each ZooKeeper primitive gives, declared once: the capability table is rendered
//! from [`CAPABILITIES`] and each primitive's `capabilities()` returns its row.

use ferrisson_core::capabilities::{CancelSafety, Capabilities, Fencing, Reentry, Validity, Wait};

use crate::STORE;

const SESSION: Validity = Validity::Session(
    "an ephemeral node of the client's ZooKeeper session; the client confirms the session every third of its timeout (or a fixed lease, ended by the client)",
);
const LOST: &str = "at once when the node is deleted, the session expires or the connection drops; at the latest one session timeout after the last request the server answered, before the server can expire the session";
const PREDECESSOR: Wait = Wait::EventDriven(
    "a getData watch on the node just ahead in the queue: one waiter woken per release, no herd",
);
const NODE_DELETED: CancelSafety = CancelSafety::SafeAtCost(
    "a cancelled wait deletes its node with one more request (found by its guid if the create's reply was lost)",
);

/// [`Lock`](crate::Lock): Curator's `InterProcessMutex`.
pub const LOCK: Capabilities = Capabilities::new(
    STORE,
    "Lock",
    Reentry::PerTask,
    true,
    SESSION,
    Fencing::Token(
        "the lock node's czxid (the transaction that created it); keeps growing when the lock's parent is removed and created again; never goes back while the ensemble keeps its data",
    ),
    LOST,
    PREDECESSOR,
    NODE_DELETED,
);

/// [`Election`](crate::Election): Curator's `LeaderLatch`.
pub const ELECTION: Capabilities = Capabilities::new(
    STORE,
    "Election",
    Reentry::None,
    true,
    SESSION,
    Fencing::Token("the leader's node's czxid: one token per term, growing with every term"),
    LOST,
    PREDECESSOR,
    NODE_DELETED,
);

/// [`RwLock`](crate::RwLock): Curator's `InterProcessReadWriteLock`.
pub const RW_LOCK: Capabilities = Capabilities::new(
    STORE,
    "RwLock",
    Reentry::PerTask,
    true,
    SESSION,
    Fencing::Token(
        "write side: the writer's node's czxid, growing with every writer; read side: the reader's node's czxid",
    ),
    LOST,
    Wait::EventDriven(
        "a writer watches the node just ahead; a reader watches the first writer's node ahead of it",
    ),
    NODE_DELETED,
);

/// [`Semaphore`](crate::Semaphore): Curator's `InterProcessSemaphoreV2`.
pub const SEMAPHORE: Capabilities = Capabilities::new(
    STORE,
    "Semaphore",
    Reentry::None,
    true,
    Validity::Session(
        "a lease node of the client's ZooKeeper session; the server deletes it when the session ends",
    ),
    Fencing::None,
    "never: a permit's guard has no lost signal; its lease ends with the session",
    Wait::EventDriven(
        "waiters queue on the semaphore's lock (each watching the one ahead); only its holder watches the leases",
    ),
    NODE_DELETED,
);

/// Every ZooKeeper primitive's declaration, in the order of the capability table.
pub const CAPABILITIES: &[Capabilities] = &[LOCK, RW_LOCK, SEMAPHORE, ELECTION];

//! What each primitive of each store gives, declared in code: the capability table in the
//! README is rendered from these declarations ([`markdown_table`]) and checked by a test.

use std::fmt::{self, Write as _};

/// What one primitive of one store gives.
///
/// Every lock, read-write lock, semaphore and election returns its declaration from
/// `capabilities()`; each store crate also lists all of its declarations (a constant
/// named `CAPABILITIES`). Never a promise the implementation does not keep: the
/// conformance suite reads these declarations to decide what to test.
///
/// ```
/// use ferrisson_core::{DistributedLock, capabilities::Reentry};
///
/// let store = ferrisson_core::memory::MemoryStore::new();
/// let caps = store.lock("a")?.capabilities();
/// assert_eq!(caps.store, "memory");
/// assert_eq!(caps.reentry, Reentry::PerTask);
/// # Ok::<(), ferrisson_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// The store, as URLs spell it (`redis`, `memory`, ...).
    pub store: &'static str,
    /// The primitive's type name in its store's crate (`Lock`, `FairLock`, ...).
    pub primitive: &'static str,
    /// Whether, and for whom, taking it again while held succeeds at once.
    pub reentry: Reentry,
    /// Whether waiters are granted in the order they asked.
    pub fair: bool,
    /// What keeps a hold valid, and what ends it when the holder dies.
    pub validity: Validity,
    /// The fencing token, if any, and where it comes from.
    pub fencing: Fencing,
    /// When `lost()` fires after the hold ends behind the holder's back.
    pub lost_signal: &'static str,
    /// How a waiter learns that it may try again.
    pub wait: Wait,
    /// What dropping an acquire (or a guard) costs.
    pub cancel: CancelSafety,
}

impl Capabilities {
    /// A declaration with every field given: the constructor store crates use for their
    /// constants (the struct is `#[non_exhaustive]`, so that fields can be added).
    ///
    /// ```
    /// use ferrisson_core::capabilities::*;
    ///
    /// const MINE: Capabilities = Capabilities::new(
    ///     "files", "Lock", Reentry::None, false,
    ///     Validity::Session("the process holding the file lock"),
    ///     Fencing::None, "never", Wait::Polled("every 50 ms"), CancelSafety::Safe,
    /// );
    /// assert_eq!(MINE.store, "files");
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub const fn new(
        store: &'static str,
        primitive: &'static str,
        reentry: Reentry,
        fair: bool,
        validity: Validity,
        fencing: Fencing,
        lost_signal: &'static str,
        wait: Wait,
        cancel: CancelSafety,
    ) -> Self {
        Self {
            store,
            primitive,
            reentry,
            fair,
            validity,
            fencing,
            lost_signal,
            wait,
            cancel,
        }
    }
}

/// Whether, and for whom, a held primitive can be taken again at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reentry {
    /// Not reentrant: a second acquire by the holder waits like anyone else (and, with no
    /// bound, until the first hold ends).
    None,
    /// Reentrant inside the tokio task that holds it (and for whoever presents the
    /// holder's explicit owner id); other tasks wait. Each hold needs its own release.
    PerTask,
    /// Reentrant for the whole session or connection that holds it, whichever task asks
    /// (a database session lock stacks per session).
    PerSession,
}

impl fmt::Display for Reentry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::None => "no",
            Self::PerTask => "per task",
            Self::PerSession => "per session",
        })
    }
}

/// What keeps a hold valid, and what ends it when its holder dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Validity {
    /// A lease in the store, renewed by the client while held (or fixed, by choice);
    /// the text says how it is renewed.
    Lease(&'static str),
    /// A session or connection: the hold lasts while it lives; the text says what keeps
    /// it alive and how its end is noticed.
    Session(&'static str),
    /// Nothing expires it: it lasts until released (in-process, or a permit without a
    /// lease).
    UntilReleased,
}

impl fmt::Display for Validity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Lease(how) => write!(f, "lease: {how}"),
            Self::Session(how) => write!(f, "session: {how}"),
            Self::UntilReleased => f.write_str("until released"),
        }
    }
}

/// The fencing token of a hold, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fencing {
    /// No token: a paused holder's late write cannot be told apart.
    None,
    /// A token strictly increasing per lock; the text says where it comes from and what
    /// can make it go back.
    Token(&'static str),
}

impl fmt::Display for Fencing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("none"),
            Self::Token(source) => f.write_str(source),
        }
    }
}

/// How a waiter learns that it may try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wait {
    /// Woken by the release itself; the text says through what.
    EventDriven(&'static str),
    /// Asks again on a schedule; the text says which.
    Polled(&'static str),
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EventDriven(how) => write!(f, "event-driven ({how})"),
            Self::Polled(how) => write!(f, "polled ({how})"),
        }
    }
}

/// What dropping an acquire future costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelSafety {
    /// Nothing is left behind, at no cost beyond a message the client sends anyway.
    Safe,
    /// Nothing is left behind, at the cost the text names (an undo sent to the store, a
    /// connection closed).
    SafeAtCost(&'static str),
}

impl fmt::Display for CancelSafety {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Safe => f.write_str("safe"),
            Self::SafeAtCost(cost) => write!(f, "safe; {cost}"),
        }
    }
}

/// The capability table of the given declarations, as Markdown: one table per store, a
/// row per primitive, in the order given.
///
/// ```
/// let table = ferrisson_core::capabilities::markdown_table(ferrisson_core::memory::CAPABILITIES);
/// assert!(table.starts_with("**memory**"));
/// assert!(table.contains("| `MemoryLock` |"));
/// ```
pub fn markdown_table(declarations: &[Capabilities]) -> String {
    let mut out = String::new();
    let mut store = None;
    for caps in declarations {
        if store != Some(caps.store) {
            if store.is_some() {
                out.push('\n');
            }
            store = Some(caps.store);
            let _ = write!(out, "**{}**\n\n", caps.store);
            out.push_str(
                "| primitive | reentrant | fair | validity | fencing token | lost() fires | waiting | cancel |\n\
                 |---|---|---|---|---|---|---|---|\n",
            );
        }
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} | {} | {} | {} |",
            caps.primitive,
            caps.reentry,
            if caps.fair { "yes" } else { "no" },
            caps.validity,
            caps.fencing,
            caps.lost_signal,
            caps.wait,
            caps.cancel,
        );
    }
    out
}

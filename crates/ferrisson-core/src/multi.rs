//! MultiLock: several locks, on one or several independent servers (or stores), taken as
//! one.

use std::fmt;
use std::time::Duration;

use futures_util::future::{join_all, select_all};
use tokio::time::Instant;

use crate::contract::lock::{DistributedLock, Fenced, Guard};
use crate::error::{Error, Result};
use crate::fencing::FencingToken;

/// The wait budget each member adds to a [`MultiLock`]'s default (Redisson's 1500 ms).
///
/// ```
/// assert_eq!(ferrisson_core::MULTI_LOCK_BUDGET_PER_LOCK.as_millis(), 1500);
/// ```
pub const MULTI_LOCK_BUDGET_PER_LOCK: Duration = Duration::from_millis(1500);

/// All-or-nothing over several locks of any kind and store (Redisson's
/// `RedissonMultiLock`, over anything that implements [`DistributedLock`]).
///
/// The members may live on one server or on several independent ones; the guard exists
/// only while every member is held, and one guard releases them all. Members keep their
/// own lease (a watchdog-renewed member is renewed while the guard lives), and each
/// member's guard stays reachable, its fencing token included.
///
/// Acquiring never waits for one member while holding another: all members are tried
/// at once (one round trip when they live on different servers); when one is taken,
/// everything already held is released, the caller waits for that member alone (as its
/// own `lock` waits), and then tries the rest again. Two multi-locks over the same
/// members in different orders therefore cannot deadlock. [`MultiLock::lock`] waits in
/// rounds of [`MultiLock::wait_budget`] (by default 1.5 s per member): a round that runs
/// out releases what it took and the next round starts from the first member.
///
/// ```
/// use ferrisson_core::MultiLock;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let (a, b) = (ferrisson_core::memory::MemoryStore::new(), ferrisson_core::memory::MemoryStore::new());
/// let both = MultiLock::new(vec![a.lock("stock:1")?, b.lock("stock:1")?])?;
/// assert_eq!(both.wait_budget(), std::time::Duration::from_secs(3));
/// let guard = both.lock().await?;
/// let tokens = guard.fencing_tokens(); // one per member, in order
/// assert_eq!(tokens.len(), 2);
/// guard.unlock().await?;
/// # Ok::<(), ferrisson_core::Error>(()) }).unwrap();
/// ```
#[derive(Clone)]
pub struct MultiLock<L> {
    locks: Vec<L>,
    budget: Duration,
}

impl<L: fmt::Debug> fmt::Debug for MultiLock<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLock")
            .field("locks", &self.locks)
            .field("wait_budget", &self.budget)
            .finish()
    }
}

impl<L: DistributedLock> MultiLock<L> {
    /// A multi-lock over `locks`; their order is the order of the guard's members.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `locks` is empty.
    ///
    /// ```no_run
    /// # fn demo(store: ferrisson_core::memory::MemoryStore) -> ferrisson_core::Result<()> {
    /// use ferrisson_core::{MultiLock, memory::MemoryLock};
    ///
    /// let pair = MultiLock::new(vec![store.lock("a")?, store.lock("b")?])?;
    /// assert_eq!(pair.len(), 2);
    /// assert!(MultiLock::<MemoryLock>::new(Vec::new()).is_err());
    /// # Ok(()) }
    /// ```
    pub fn new(locks: Vec<L>) -> Result<Self> {
        if locks.is_empty() {
            return Err(Error::invalid("a multi-lock needs at least one lock"));
        }
        let budget = MULTI_LOCK_BUDGET_PER_LOCK
            .saturating_mul(u32::try_from(locks.len()).unwrap_or(u32::MAX));
        Ok(Self { locks, budget })
    }

    /// The same multi-lock with another round length for [`MultiLock::lock`] (default:
    /// 1.5 s per member).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a zero budget.
    ///
    /// ```no_run
    /// # fn demo(multi: ferrisson_core::MultiLock<ferrisson_core::memory::MemoryLock>) -> ferrisson_core::Result<()> {
    /// use std::time::Duration;
    /// let multi = multi.with_wait_budget(Duration::from_secs(10))?;
    /// assert_eq!(multi.wait_budget(), Duration::from_secs(10));
    /// # Ok(()) }
    /// ```
    pub fn with_wait_budget(mut self, budget: Duration) -> Result<Self> {
        if budget.is_zero() {
            return Err(Error::invalid("multi-lock wait budget must be above zero"));
        }
        self.budget = budget;
        Ok(self)
    }

    /// The length of one round of [`MultiLock::lock`].
    ///
    /// ```no_run
    /// # fn demo(multi: ferrisson_core::MultiLock<ferrisson_core::memory::MemoryLock>) {
    /// assert_eq!(multi.wait_budget(), ferrisson_core::MULTI_LOCK_BUDGET_PER_LOCK * multi.len() as u32);
    /// # }
    /// ```
    pub fn wait_budget(&self) -> Duration {
        self.budget
    }

    /// The members, in the order given to [`MultiLock::new`].
    ///
    /// ```no_run
    /// # fn demo(multi: ferrisson_core::MultiLock<ferrisson_core::memory::MemoryLock>) {
    /// let names: Vec<&str> = multi.locks().iter().map(|lock| lock.name()).collect();
    /// assert_eq!(names.len(), multi.len());
    /// # }
    /// ```
    pub fn locks(&self) -> &[L] {
        &self.locks
    }

    /// How many members there are.
    ///
    /// ```no_run
    /// # fn demo(multi: ferrisson_core::MultiLock<ferrisson_core::memory::MemoryLock>) {
    /// assert!(multi.len() >= 1);
    /// # }
    /// ```
    pub fn len(&self) -> usize {
        self.locks.len()
    }

    /// Always false: a multi-lock has at least one member.
    ///
    /// ```no_run
    /// # fn demo(multi: ferrisson_core::MultiLock<ferrisson_core::memory::MemoryLock>) {
    /// assert!(!multi.is_empty());
    /// # }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.locks.is_empty()
    }

    /// Takes every member if each is free now (or re-enterable by this task);
    /// `Ok(None)` otherwise, with whatever was taken released again.
    ///
    /// # Errors
    ///
    /// a store error when a member's server cannot be reached (members taken before
    /// it are released).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the members taken so far are released when the future is dropped,
    /// and each member's acquire is itself cancel safe.
    ///
    /// ```no_run
    /// # async fn demo(multi: ferrisson_core::MultiLock<ferrisson_core::memory::MemoryLock>) -> ferrisson_core::Result<()> {
    /// if let Some(guard) = multi.try_lock().await? {
    ///     assert!(guard.is_held());
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self) -> Result<Option<MultiLockGuard<L::Guard>>> {
        match self.pass(Vec::new()).await? {
            Pass::Acquired(guard) => Ok(Some(guard)),
            Pass::Blocked(_) => Ok(None),
        }
    }

    /// Takes every member, waiting at most `wait` in total; `Ok(None)` when it ran out
    /// (nothing is held then).
    ///
    /// # Errors
    ///
    /// a store error when a member's server cannot be reached (nothing is held then).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`MultiLock::try_lock`].
    ///
    /// ```no_run
    /// # async fn demo(multi: ferrisson_core::MultiLock<ferrisson_core::memory::MemoryLock>) -> ferrisson_core::Result<()> {
    /// let wait = multi.wait_budget(); // 1.5 s per member
    /// if let Some(guard) = multi.lock_timeout(wait).await? {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lock_timeout(&self, wait: Duration) -> Result<Option<MultiLockGuard<L::Guard>>> {
        match Instant::now().checked_add(wait) {
            Some(deadline) => self.acquire(Some(deadline)).await,
            None => self.acquire(None).await,
        }
    }

    /// Takes every member, waiting as long as it takes, in rounds of
    /// [`MultiLock::wait_budget`].
    ///
    /// # Errors
    ///
    /// a store error when a member's server cannot be reached (nothing is held then).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`MultiLock::try_lock`].
    ///
    /// ```no_run
    /// # async fn demo(multi: ferrisson_core::MultiLock<ferrisson_core::memory::MemoryLock>) -> ferrisson_core::Result<()> {
    /// let guard = multi.lock().await?;
    /// assert_eq!(guard.fencing_tokens().len(), multi.len());
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<MultiLockGuard<L::Guard>> {
        loop {
            let round_end = Instant::now().checked_add(self.budget);
            if let Some(guard) = self.acquire(round_end).await? {
                return Ok(guard);
            }
            tracing::debug!(locks = self.locks.len(), budget = ?self.budget, "multi-lock round ran out; retrying");
        }
    }

    /// Waits until every member is held at once or `deadline` passes.
    async fn acquire(&self, deadline: Option<Instant>) -> Result<Option<MultiLockGuard<L::Guard>>> {
        let mut held = Vec::new();
        loop {
            let blocked = match self.pass(held).await? {
                Pass::Acquired(guard) => return Ok(Some(guard)),
                Pass::Blocked(index) => index,
            };
            // Nothing is held here: waiting for one member cannot block anyone else.
            let lock = &self.locks[blocked];
            let guard = match deadline {
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Ok(None);
                    }
                    match lock.lock_timeout(deadline - now).await? {
                        Some(guard) => guard,
                        None => return Ok(None),
                    }
                }
                None => lock.lock().await?,
            };
            held = vec![(blocked, guard)];
        }
    }

    /// Tries every member not in `held` once, all at once (they may live on different
    /// servers). If one is taken, releases everything held and reports its index.
    async fn pass(&self, held: Vec<(usize, L::Guard)>) -> Result<Pass<L::Guard>> {
        let mut guards: Vec<Option<L::Guard>> = self.locks.iter().map(|_| None).collect();
        for (index, guard) in held {
            guards[index] = Some(guard);
        }
        let pending: Vec<usize> = (0..self.locks.len())
            .filter(|&i| guards[i].is_none())
            .collect();
        let replies = join_all(pending.iter().map(|&i| self.locks[i].try_lock())).await;
        let mut taken = Vec::new();
        let mut first_error = None;
        for (&index, reply) in pending.iter().zip(replies) {
            match reply {
                Ok(Some(guard)) => guards[index] = Some(guard),
                Ok(None) => taken.push(index),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        let mut blocked = None;
        if first_error.is_none() {
            for index in taken {
                // The same lock named twice races its twin within one pass; now that the
                // twin's hold exists, a second try re-enters it.
                let name = self.locks[index].name();
                let twin_held = guards
                    .iter()
                    .zip(&self.locks)
                    .any(|(guard, lock)| guard.is_some() && lock.name() == name);
                let retry = if twin_held {
                    self.locks[index].try_lock().await
                } else {
                    Ok(None)
                };
                match retry {
                    Ok(Some(guard)) => guards[index] = Some(guard),
                    Ok(None) => {
                        blocked = Some(index);
                        break;
                    }
                    Err(e) => {
                        first_error = Some(e);
                        break;
                    }
                }
            }
        }
        if let Some(e) = first_error {
            release_all(guards.into_iter().flatten()).await;
            return Err(e);
        }
        if let Some(index) = blocked {
            release_all(guards.into_iter().flatten()).await;
            return Ok(Pass::Blocked(index));
        }
        Ok(Pass::Acquired(MultiLockGuard {
            guards: guards.into_iter().flatten().collect(),
        }))
    }
}

/// What one pass over the members found.
enum Pass<G> {
    Acquired(MultiLockGuard<G>),
    /// This member was taken; nothing is held any more.
    Blocked(usize),
}

/// Releases members taken during a failed pass. Errors only mean a member expires by
/// itself (a fresh hold cannot be someone else's), so they are logged, not returned.
async fn release_all<G: Guard>(guards: impl IntoIterator<Item = G>) {
    for result in join_all(guards.into_iter().map(G::unlock)).await {
        if let Err(e) = result {
            tracing::debug!(error = %e, "releasing a multi-lock member failed");
        }
    }
}

/// Proof of holding every member of a [`MultiLock`]; one `unlock()` (or drop) releases
/// them all.
///
/// It offers the validity trio of every guard (`is_held`, `remaining`, `lost`, over all
/// members) but does not implement [`Guard`](crate::Guard): the members guard different
/// resources, each with its own name and its own fencing token, and no single token can
/// stand for them (tokens of different locks, often on different servers, are not
/// comparable). Pass each resource its member's token from
/// [`fencing_tokens`](MultiLockGuard::fencing_tokens).
///
/// ```no_run
/// # async fn demo(multi: ferrisson_core::MultiLock<ferrisson_core::memory::MemoryLock>) -> ferrisson_core::Result<()> {
/// let guard = multi.lock().await?;
/// tokio::select! {
///     () = guard.lost() => eprintln!("a member was lost, stop writing"),
///     () = do_work(guard.fencing_tokens()) => {}
/// }
/// guard.unlock().await?;
/// # Ok(()) }
/// # async fn do_work(_: Vec<ferrisson_core::FencingToken>) {}
/// ```
#[must_use = "dropping the guard releases every member at once"]
pub struct MultiLockGuard<G> {
    /// One guard per member, in member order. Dropping them releases each one.
    guards: Vec<G>,
}

impl<G: fmt::Debug> fmt::Debug for MultiLockGuard<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLockGuard")
            .field("members", &self.guards)
            .finish()
    }
}

impl<G: Guard + Fenced> MultiLockGuard<G> {
    /// Each member's fencing token, in member order.
    ///
    /// ```no_run
    /// # async fn demo(multi: ferrisson_core::MultiLock<ferrisson_core::memory::MemoryLock>) -> ferrisson_core::Result<()> {
    /// let guard = multi.lock().await?;
    /// for (lock, token) in multi.locks().iter().zip(guard.fencing_tokens()) {
    ///     println!("write to {} with token {token}", lock.name());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn fencing_tokens(&self) -> Vec<FencingToken> {
        self.guards.iter().map(G::fencing_token).collect()
    }
}

impl<G: Guard> MultiLockGuard<G> {
    /// The members' guards, in member order (names, owners, remaining leases).
    ///
    /// ```no_run
    /// # async fn demo(multi: ferrisson_core::MultiLock<ferrisson_core::memory::MemoryLock>) -> ferrisson_core::Result<()> {
    /// let guard = multi.lock().await?;
    /// let shortest = guard.guards().iter().map(ferrisson_core::Guard::remaining).min();
    /// println!("held for at least {shortest:?} more");
    /// # Ok(()) }
    /// ```
    pub fn guards(&self) -> &[G] {
        &self.guards
    }

    /// True while every member is held.
    ///
    /// ```no_run
    /// # async fn demo(multi: ferrisson_core::MultiLock<ferrisson_core::memory::MemoryLock>) -> ferrisson_core::Result<()> {
    /// let guard = multi.lock().await?;
    /// assert!(guard.is_held());
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(G::is_held)
    }

    /// How long every member stays held without another renewal: the shortest of the
    /// members' [`Guard::remaining`]; zero once any member is lost.
    ///
    /// ```no_run
    /// # async fn demo(multi: ferrisson_core::MultiLock<ferrisson_core::memory::MemoryLock>) -> ferrisson_core::Result<()> {
    /// let guard = multi.lock().await?;
    /// if guard.remaining() < std::time::Duration::from_secs(1) {
    ///     eprintln!("a member's renewal is late");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn remaining(&self) -> Duration {
        self.guards
            .iter()
            .map(G::remaining)
            .min()
            .unwrap_or(Duration::ZERO)
    }

    /// Resolves when any member is no longer held (see [`Guard::lost`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    ///
    /// ```no_run
    /// # async fn demo(multi: ferrisson_core::MultiLock<ferrisson_core::memory::MemoryLock>) -> ferrisson_core::Result<()> {
    /// let guard = multi.lock().await?;
    /// tokio::select! {
    ///     () = guard.lost() => eprintln!("a member was lost"),
    ///     () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        if self.guards.is_empty() {
            return;
        }
        select_all(self.guards.iter().map(|g| Box::pin(g.lost()))).await;
    }

    /// Releases every member (all of them are tried).
    ///
    /// # Errors
    ///
    /// The first member's error, as [`Guard::unlock`]: [`Error::LeaseExpired`],
    /// [`Error::NotOwner`] or a store error; the other members are released anyway.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe in the sense that some releases may not have reached their store;
    /// every member's renewal has stopped, so those expire after their lease.
    ///
    /// ```no_run
    /// # async fn demo(multi: ferrisson_core::MultiLock<ferrisson_core::memory::MemoryLock>) -> ferrisson_core::Result<()> {
    /// let guard = multi.lock().await?;
    /// guard.unlock().await?;
    /// assert!(multi.try_lock().await?.is_some());
    /// # Ok(()) }
    /// ```
    pub async fn unlock(self) -> Result<()> {
        let mut first_error = None;
        for result in join_all(self.guards.into_iter().map(G::unlock)).await {
            if let Err(e) = result {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

//! The unit of transparent re-entry: the tokio task (or, outside one, the thread) that
//! asks.

/// The tokio task that asks, or the current thread when running outside a task (inside
/// `block_on`). A store that re-enters locks per task records the holder's key and
/// compares it with the asker's.
///
/// ```
/// use ferrisson_core::TaskKey;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let here = TaskKey::current();
/// assert_eq!(here, TaskKey::current());
/// let there = tokio::spawn(async { TaskKey::current() }).await.unwrap();
/// assert_ne!(here, there);
/// # });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskKey {
    /// A tokio task.
    Task(tokio::task::Id),
    /// A thread outside any tokio task.
    Thread(std::thread::ThreadId),
}

impl TaskKey {
    /// The task (or thread) running now.
    pub fn current() -> Self {
        tokio::task::try_id().map_or_else(|| Self::Thread(std::thread::current().id()), Self::Task)
    }
}

//! One hold of a key at the head of a queue: its validity (the lease's, and a watch on
//! the key), the guards sharing it, and its release.

use std::sync::{Arc, Mutex};

use ferrisson_core::hold::HoldState;
use ferrisson_core::observe::Probe;
use ferrisson_core::{Error, FencingToken, Result, TaskKey};

use crate::client::{Client, locked};
use crate::contender::{Contender, delete_while_alive};
use crate::lease::LeaseHandle;
use crate::queue;

/// A key that holds; shared by its guards (re-entries).
pub(crate) struct Held {
    pub(crate) client: Client,
    pub(crate) prefix: Arc<str>,
    pub(crate) key: String,
    pub(crate) revision: i64,
    lease: Arc<LeaseHandle>,
    shared: bool,
    pub(crate) task: TaskKey,
    /// Guards alive for this hold.
    count: Mutex<u32>,
    pub(crate) state: Arc<HoldState>,
    watch: tokio::task::AbortHandle,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("key", &self.key)
            .field("revision", &self.revision)
            .field("held", &self.state.is_held())
            .finish_non_exhaustive()
    }
}

impl Held {
    /// Turns a contender at the head of its queue into a hold counted under `probe`,
    /// valid while its lease lives and its key is there.
    pub(crate) fn start(mut contender: Contender, probe: Probe) -> Arc<Self> {
        contender.disarm();
        let state = Arc::new(HoldState::new(probe, contender.lease.deadline()));
        state.start();
        contender.lease.attach(&state);
        let revision = contender.revision();
        let watch = contender
            .client
            .runtime()
            .spawn(queue::watch_own_key(
                contender.client.etcd().clone(),
                contender.key.clone(),
                revision,
                Arc::clone(&state),
            ))
            .abort_handle();
        Arc::new(Self {
            client: contender.client.clone(),
            prefix: Arc::clone(&contender.prefix),
            key: std::mem::take(&mut contender.key),
            revision,
            lease: Arc::clone(&contender.lease),
            shared: contender.shared,
            task: TaskKey::current(),
            count: Mutex::new(1),
            state,
            watch,
        })
    }

    /// The hold's fencing token: its key's create revision.
    pub(crate) fn token(&self) -> FencingToken {
        FencingToken::new(u64::try_from(self.revision).unwrap_or(0))
    }

    /// The id of the lease the key lives under.
    pub(crate) fn lease_id(&self) -> i64 {
        self.lease.id
    }

    /// One more guard for the hold, if it is still held.
    pub(crate) fn enter(&self) -> bool {
        let mut count = locked(&self.count);
        if *count == 0 || !self.state.is_held() {
            return false;
        }
        *count += 1;
        true
    }

    /// One guard fewer; true when it was the last (the client forgets the hold then).
    pub(crate) fn leave(self: &Arc<Self>) -> bool {
        let last = {
            let mut count = locked(&self.count);
            *count = count.saturating_sub(1);
            *count == 0
        };
        if last {
            self.client.remove_hold(self);
        }
        last
    }

    /// The last release: deletes the key if it is still this hold's (compared on its
    /// create revision, never a newer key), gives the lease back. A delete that failed
    /// for a transient reason is tried again in the background while the session lease
    /// lives (the key would otherwise hold the lock as long as the client's session).
    ///
    /// # Errors
    ///
    /// [`Error::LeaseExpired`] when the hold had ended already; a store error (the first
    /// try's, when it is tried again).
    pub(crate) async fn finish(self: &Arc<Self>, name: &str) -> Result<()> {
        let was_held = self.state.is_held();
        self.watch.abort();
        let removed = queue::remove(self.client.etcd(), &self.key, self.revision).await;
        self.lease.detach(&self.state);
        match removed {
            Err(e) if e.is_transient() && self.shared => {
                let held = Arc::clone(self);
                self.client.runtime().spawn(async move {
                    delete_while_alive(&held.client, &held.key, Some(held.revision), &held.lease)
                        .await;
                    held.client
                        .free_lease(&held.prefix, &held.lease, held.shared)
                        .await;
                });
                Err(e)
            }
            removed => {
                self.client
                    .free_lease(&self.prefix, &self.lease, self.shared)
                    .await;
                match removed {
                    Ok(true) if was_held => Ok(()),
                    Ok(_) => Err(Error::LeaseExpired { name: name.into() }),
                    Err(e) => Err(e),
                }
            }
        }
    }
}

//! One contender in a queue: its lease, its key, its place; withdrawn (key deleted,
//! lease given back) when it gives up or is dropped before it holds.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ferrisson_core::observe::{Probe, observe_wait};
use ferrisson_core::{Error, Lease, Result};
use tokio::time::Instant;

use crate::client::Client;
use crate::lease::LeaseHandle;
use crate::queue::{self, Admission, Place};

/// How long an acquire waits before trying again after a transient failure.
const RETRY_DELAY: Duration = Duration::from_millis(200);

/// Runs `attempt` (one contender: enqueued, then waiting for its turn, bounded by the
/// acquire's own wait) until it is not a transient failure. A transient failure (the
/// member a call went to is down, or a leader election is under way: etcd answers
/// "request timed out" for a proposal the old leader dropped) is ridden out with a new
/// contender: for one watchdog lease after the first failure of a run of them, and never
/// past the wait's deadline (`started + wait`; a try, with a zero wait, does not retry).
/// A contender that failed has withdrawn its key. Shared by every primitive that
/// queues.
pub(crate) async fn ride_out<T, F, Fut>(
    client: &Client,
    wait: Option<Duration>,
    started: Instant,
    mut attempt: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = wait.and_then(|w| started.checked_add(w));
    let mut failing_since = None;
    loop {
        match attempt().await {
            Err(e) if e.is_transient() => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                let retry_at = Instant::now() + RETRY_DELAY;
                let ridden_out = retry_at <= since + client.watchdog_lease()
                    && deadline.is_none_or(|d| retry_at < d);
                if !ridden_out {
                    return Err(e);
                }
                tokio::time::sleep_until(retry_at).await;
            }
            outcome => return outcome,
        }
    }
}

/// A key in the queue under `prefix` that has not become a hold yet. Dropping it
/// withdraws it in a background task (a cancelled wait leaves no key behind).
pub(crate) struct Contender {
    pub(crate) client: Client,
    pub(crate) prefix: Arc<str>,
    pub(crate) key: String,
    pub(crate) lease: Arc<LeaseHandle>,
    /// The lease is the client's session lease (given back, not revoked).
    pub(crate) shared: bool,
    /// Known once the enqueue transaction answered.
    pub(crate) place: Option<Place>,
    armed: bool,
}

impl Contender {
    /// Takes a lease and puts the contender's key (`prefix` + lease id) in the queue
    /// with `value`; its place is read against `admission`'s queue.
    ///
    /// # Cancel safety
    ///
    /// Dropped after the lease was taken, the contender withdraws in the background.
    pub(crate) async fn enqueue(
        client: &Client,
        prefix: &Arc<str>,
        admission: &Admission,
        lease: Lease,
        value: &[u8],
    ) -> Result<Self> {
        let (lease, shared) = client.lease_for(prefix, lease).await?;
        let mut contender = Self {
            client: client.clone(),
            prefix: Arc::clone(prefix),
            key: format!("{prefix}{}", lease.hex()),
            lease,
            shared,
            place: None,
            armed: true,
        };
        match queue::enqueue(
            client.etcd(),
            admission.queue(),
            &contender.key,
            contender.lease.id,
            value,
        )
        .await
        {
            Ok(place) => {
                contender.place = Some(place);
                Ok(contender)
            }
            Err(e) => {
                contender.withdraw().await;
                Err(e)
            }
        }
    }

    /// The key's create revision (zero before the enqueue answered).
    pub(crate) fn revision(&self) -> i64 {
        self.place.map_or(0, |p| p.revision)
    }

    /// Waits until the contender is at the head of its queue (`Some`), at most `wait`
    /// counted from `started` (when the acquire began; `None` when it ran out, and the
    /// contender is withdrawn then). A zero `wait` never waits.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseExpired`] when the lease ended while it waited (etcd's
    /// `ErrSessionExpired`); a store error. The contender is withdrawn.
    ///
    /// # Cancel safety
    ///
    /// Dropped, the contender withdraws in the background.
    pub(crate) async fn take_turn(
        self,
        probe: &Probe,
        wait: Option<Duration>,
        started: Instant,
        admission: &Admission,
    ) -> Result<Option<Self>> {
        if self.place.is_some_and(|p| p.first) {
            return Ok(Some(self));
        }
        if wait == Some(Duration::ZERO) {
            // First in the queue was the whole rule for a lock; a semaphore admits more.
            let admitted = match admission {
                Admission::NoneOlder(_) => Ok(false),
                Admission::FewerOlder(..) => {
                    queue::admitted_now(self.client.etcd(), admission, self.revision()).await
                }
            };
            return match admitted {
                Ok(true) => Ok(Some(self)),
                Ok(false) => {
                    self.withdraw().await;
                    Ok(None)
                }
                Err(e) => {
                    self.withdraw().await;
                    Err(e)
                }
            };
        }
        let deadline = wait.and_then(|w| started.checked_add(w));
        let etcd = self.client.etcd();
        let revision = self.revision();
        let name: &str = &probe.name;
        let turn = async {
            tokio::select! {
                waited = queue::wait_for_admission(etcd, admission, revision) => waited,
                () = self.lease.ended() => Err(Error::LeaseExpired { name: name.into() }),
            }
        };
        let waited = observe_wait(probe, async {
            match deadline {
                Some(deadline) => match tokio::time::timeout_at(deadline, turn).await {
                    Ok(turn) => turn.map(Some),
                    Err(_) => Ok(None),
                },
                None => turn.await.map(Some),
            }
        })
        .await;
        let outcome = match waited {
            // The key may have gone with its lease while it waited (etcd's
            // ErrSessionExpired): then the turn is not this contender's.
            Ok(Some(())) => match queue::still_there(etcd, &self.key, revision).await {
                Ok(true) => return Ok(Some(self)),
                Ok(false) => Err(Error::LeaseExpired { name: name.into() }),
                Err(e) => Err(e),
            },
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        };
        self.withdraw().await;
        outcome
    }

    /// Deletes the key (only this contender's: compared on its create revision when
    /// known) and gives the lease back.
    pub(crate) async fn withdraw(mut self) {
        self.armed = false;
        withdraw(
            self.client.clone(),
            Arc::clone(&self.prefix),
            std::mem::take(&mut self.key),
            Arc::clone(&self.lease),
            self.shared,
            self.place.map(|p| p.revision),
        )
        .await;
    }

    /// The contender became a hold: the hold now owns its key and lease.
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

async fn withdraw(
    client: Client,
    prefix: Arc<str>,
    key: String,
    lease: Arc<LeaseHandle>,
    shared: bool,
    revision: Option<i64>,
) {
    // A key on a lease of its own goes with the lease (revoked when given back, or
    // expiring once no longer kept alive): one try at deleting it is enough.
    if delete_own_key(&client, &key, revision).await || !shared {
        client.free_lease(&prefix, &lease, shared).await;
        return;
    }
    // A key on the session lease would stay as long as the client's session, and every
    // later contender would queue behind it: tried again (in the background) until it is
    // deleted or the lease ends, a failure that outlasts a TTL ending the lease. The key
    // stays reserved to this contender until then: no newer contender of this client
    // takes it meanwhile, so a delete without a known revision never hits a newer key.
    let runtime = client.runtime().clone();
    runtime.spawn(async move {
        delete_while_alive(&client, &key, revision, &lease).await;
        client.free_lease(&prefix, &lease, shared).await;
    });
}

/// One try at deleting a contender's or a hold's `key` (only with create revision
/// `revision` when known): true when done (deleted, gone, or a failure that another
/// try would not mend), false after a transient failure.
pub(crate) async fn delete_own_key(client: &Client, key: &str, revision: Option<i64>) -> bool {
    let deleted = match revision {
        Some(revision) => queue::remove(client.etcd(), key, revision).await.map(drop),
        // Without a revision the transaction may or may not have created the key; it is
        // this contender's key either way (its lease is reserved to it until given back).
        None => client
            .etcd()
            .kv_client()
            .delete(key, None)
            .await
            .map(drop)
            .map_err(crate::error::store),
    };
    !matches!(deleted, Err(e) if e.is_transient())
}

/// Tries to delete `key` again every [`RETRY_DELAY`] until done or `lease` ends (the key
/// goes with it then).
pub(crate) async fn delete_while_alive(
    client: &Client,
    key: &str,
    revision: Option<i64>,
    lease: &LeaseHandle,
) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(RETRY_DELAY) => {}
            () = lease.ended() => return,
        }
        if delete_own_key(client, key, revision).await {
            return;
        }
    }
}

impl Drop for Contender {
    fn drop(&mut self) {
        if self.armed {
            let task = withdraw(
                self.client.clone(),
                Arc::clone(&self.prefix),
                std::mem::take(&mut self.key),
                Arc::clone(&self.lease),
                self.shared,
                self.place.map(|p| p.revision),
            );
            self.client.runtime().spawn(task);
        }
    }
}

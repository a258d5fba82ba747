//! Waiting for a lock whose release wakes one waiting client, not every client with a
//! waiter, written once for `Lock` and `SimpleLock`.
//!
//! A waiter listens on its client's own wake-up channel of the lock (`{name}:c:<client
//! id>`). Its attempts after it subscribed tell the lock's acquire script to register the
//! client in `{name}:waiters` when refused (in the same script, so no release slips in
//! between) and, when granted, to keep the client registered only while other local
//! waiters still wait. A release wakes the client that registered first and is still
//! subscribed (`lua/wake.lua`), which wakes one of its local waiters. A client whose last
//! waiter leaves without the lock withdraws (`lua/wake_withdraw.lua`) and, if the lock is
//! free, wakes the next client; a wake-up that reaches a client with no waiter left is
//! passed on the same way by the client's subscription (`redis::pubsub`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::api::error::Result;
use crate::backend::client::Client;
use crate::backend::keys::{Keys, WakeNames};
use crate::backend::scripts::wake::{Register, WakeForceRelease, WakeKeys, WakeWithdraw};
use crate::observe::acquire::Grant;
use crate::observe::probe::Probe;
use crate::primitive::cleanup::spawn_cleanup;
use crate::primitive::wait::{Attempt, Registration, acquire_with_registration};

/// How one lock's release wakes one of its waiting clients: the names, built once per
/// handle and shared by its guards (cheap to clone).
#[derive(Debug, Clone)]
pub(crate) struct WakeOne(Arc<WakeNames>);

impl WakeOne {
    /// The wake-up names of the lock whose keys are `keys`, for `client`.
    pub(crate) fn new(client: &Client, keys: &Keys) -> Self {
        Self(Arc::new(WakeNames::new(keys, &client.inner.wake_id)))
    }

    /// The keys the release, abandon, withdraw and forced release scripts take.
    pub(crate) fn keys(&self) -> WakeKeys<'_> {
        self.0.keys()
    }

    /// The set of waiting clients, which the acquire script registers in.
    pub(crate) fn waiters(&self) -> &str {
        self.0.waiters()
    }

    /// Acquires, waiting at most `wait` (`None`: as long as it takes), listening on this
    /// client's own wake-up channel: `attempt` is told whether the waiter is subscribed
    /// (pass it on to the acquire script with [`Waiting`]). A client whose last waiter
    /// leaves without the lock withdraws.
    ///
    /// # Cancel safety
    ///
    /// As cancel safe as `attempt`: the subscription is left when the future is dropped,
    /// and the withdrawal runs on a spawned task.
    pub(crate) async fn acquire<G, F, Fut>(
        &self,
        client: &Client,
        probe: &Probe,
        keys: &Keys,
        wait: Option<Duration>,
        attempt: F,
    ) -> Result<Option<G>>
    where
        G: Grant,
        F: FnMut(Registration) -> Fut,
        Fut: Future<Output = Result<Attempt<G>>>,
    {
        acquire_with_registration(
            client,
            probe,
            self.0.own().into(),
            wait,
            attempt,
            Some(|others| self.withdraw(client, &probe.name, keys, others)),
        )
        .await
    }

    /// A waiter left without the lock, `others` local waiters still waiting: the last
    /// one takes the client off the waiting clients, and wakes the next if the lock is
    /// free.
    fn withdraw(&self, client: &Client, name: &str, keys: &Keys, others: usize) {
        if others > 0 {
            return;
        }
        let client = client.clone();
        let keys = keys.clone();
        let names = Arc::clone(&self.0);
        spawn_cleanup(
            name,
            "withdrawing a waiting client",
            "a release may wake it for nothing; the other waiters then try again when the holder's lease runs out",
            async move {
                client
                    .connection()
                    .run(&WakeWithdraw {
                        key: keys.main(),
                        wake: names.keys(),
                        client: &client.inner.wake_id,
                    })
                    .await
            },
        );
    }

    /// Deletes the lock whose main key is `key` whoever holds it, and wakes one waiting
    /// client. Returns whether there was a lock.
    ///
    /// # Errors
    ///
    /// [`Error::Store`](crate::Error::Store) when Redis cannot be reached.
    pub(crate) async fn force_release(&self, client: &Client, key: &str) -> Result<bool> {
        client
            .connection()
            .run(&WakeForceRelease {
                key,
                wake: self.keys(),
            })
            .await
    }
}

/// What one attempt tells the lock's acquire script about its client's wait; `Copy` and
/// borrowing nothing, so an attempt that moves onto a task takes it along.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Waiting(Option<bool>);

impl Waiting {
    /// An attempt that registers nothing (`try_lock`).
    pub(crate) const NOT: Self = Self(None);

    /// What an attempt of a waiter in `registration` tells: nothing before it subscribed;
    /// once subscribed, register if refused, and whether other local waiters still wait
    /// (then a grant keeps the client registered).
    pub(crate) fn of(registration: Registration) -> Self {
        match registration {
            Registration::Unsubscribed => Self::NOT,
            Registration::Subscribed { others } => Self(Some(others > 0)),
        }
    }

    /// The script's arguments for `client`.
    pub(crate) fn register(self, client: &Client) -> Register<'_> {
        match self.0 {
            None => Register::No,
            Some(others) => Register::Waiting {
                client: &client.inner.wake_id,
                others,
            },
        }
    }
}

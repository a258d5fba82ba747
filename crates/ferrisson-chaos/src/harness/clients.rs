//! The scenarios' clients: the same lease everywhere, and how patient each one is.

use std::time::Duration;

use ferrisson::redis::Client;

/// A client with the run's watchdog lease that waits ten leases for a reply or a
/// connection: patient enough to ride out every fault a scenario injects.
pub(crate) async fn connect(url: &str, lease: Duration) -> anyhow::Result<Client> {
    Ok(Client::builder(url)
        .watchdog_lease(lease)
        .response_timeout(lease * 10)
        .connect_timeout(lease * 10)
        .connect()
        .await?)
}

/// A client that gives up on a call after one lease (for holders cut off by a fault).
pub(crate) async fn connect_impatient(url: &str, lease: Duration) -> anyhow::Result<Client> {
    Ok(Client::builder(url)
        .watchdog_lease(lease)
        .response_timeout(lease)
        .connect_timeout(lease)
        .reconnect_retries(1)
        .connect()
        .await?)
}

/// As [`connect`], with every grant and renewal counted only once `replicas` replicas
/// acknowledged it (`ClientBuilder::replica_acks`), waiting a third of the lease for them
/// (the longest the library allows).
pub(crate) async fn connect_acked(
    url: &str,
    lease: Duration,
    replicas: u32,
) -> anyhow::Result<Client> {
    Ok(Client::builder(url)
        .watchdog_lease(lease)
        .response_timeout(lease * 10)
        .connect_timeout(lease * 10)
        .replica_acks(replicas, lease / 3)
        .connect()
        .await?)
}

/// As [`connect`], for any store the facade connects to (the URL picks it): the run's
/// watchdog lease everywhere, and Redis's patience of [`connect`].
pub(crate) async fn connect_any(url: &str, lease: Duration) -> anyhow::Result<ferrisson::Client> {
    Ok(ferrisson::Client::builder(url)
        .watchdog_lease(lease)
        .redis(move |redis| {
            redis
                .response_timeout(lease * 10)
                .connect_timeout(lease * 10)
        })
        .connect()
        .await?)
}

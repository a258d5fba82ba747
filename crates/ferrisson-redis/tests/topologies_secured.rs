//! TLS and ACL users on a Cluster and behind Sentinel, with real servers.
//!
//! The groups run TLS only (`port 0`, `tls-port`; replication, the cluster bus and the
//! sentinels' links over TLS too), ask every client for a certificate signed by the test
//! CA, and switch the default user off: the data servers know only `locker`, the
//! sentinels only `watcher`. The client passes the CA and its certificate with
//! [`TlsConfig`], the data servers' user in the URL and the sentinels' with
//! `sentinel_credentials`. Every primitive's case (`topology_cases`) runs on both; a held
//! lock follows a failover on each; wrong credentials and a URL that asks for the wrong
//! transport fail at once with a typed error that never shows a password.

mod topology_cases;

use std::time::Duration;

use anyhow::Context as _;
use ferrisson_redis::{Client, ClientBuilder, Error, TlsConfig};
use ferrisson_testkit::{
    ClientAuth, RedisCluster, RedisServer, SentinelGroup, TestCertificates, TlsRedisServer,
};
use topology_cases::every_case;

const USER: &str = "locker";
/// With the characters a URL must percent-encode: the URL carries it encoded.
const PASSWORD: &str = "s3cret:data@pw/1";
const PASSWORD_IN_URL: &str = "s3cret%3Adata%40pw%2F1";
const SENTINEL_USER: &str = "watcher";
const SENTINEL_PASSWORD: &str = "s3cret-sentinel-pw";
/// A password no server knows; it must not show in any error either.
const WRONG_PASSWORD: &str = "wr0ng-pw-never-shown";

/// The watchdog lease of the cluster failover test: renewals every second, so a
/// coordinated failover (the master stops writes until its replica caught up, then
/// hands over) is ridden out.
const CLUSTER_LEASE: Duration = Duration::from_secs(3);
/// The lease of the Sentinel failover test: a renewal counts only once both replicas
/// have it, and until the sentinels have pointed the second replica at the new master
/// none can; renewals every 2.7 s leave room for that.
const SENTINEL_LEASE: Duration = Duration::from_secs(8);
/// How long a waiter may take to be granted once the holder released.
const GRANT_BOUND: Duration = Duration::from_secs(30);
/// A bound on a connect that must fail: the failure must come, not a hang.
const REFUSAL_BOUND: Duration = Duration::from_secs(20);

/// The client's TLS settings for servers of `certificates`: the test CA, and the client
/// certificate the servers ask for.
fn tls(certificates: &TestCertificates) -> TlsConfig {
    TlsConfig::new()
        .ca_certificates(certificates.ca_pem())
        .client_certificate(certificates.client_pem(), certificates.client_key_pem())
}

async fn tls_cluster() -> anyhow::Result<RedisCluster> {
    Ok(tokio::task::spawn_blocking(|| {
        RedisCluster::builder()
            .tls(ClientAuth::Required)
            .acl_user(USER, PASSWORD)
            .start()
    })
    .await??)
}

/// `rediss+cluster://locker:...@node` with the cluster's CA and client certificate: one
/// seed only, so that every other node is one the client discovers, and must reach with
/// the same TLS settings and credentials.
fn cluster_target(cluster: &RedisCluster) -> anyhow::Result<ClientBuilder> {
    let certificates = cluster.certificates().context("a TLS cluster")?;
    let url = cluster.url();
    let one_seed = url.split(',').next().context("a cluster url")?;
    Ok(Client::builder(one_seed).tls(tls(certificates)))
}

async fn tls_sentinels() -> anyhow::Result<SentinelGroup> {
    Ok(tokio::task::spawn_blocking(|| {
        SentinelGroup::builder()
            .tls(ClientAuth::Required)
            .acl_user(USER, PASSWORD)
            .sentinel_acl_user(SENTINEL_USER, SENTINEL_PASSWORD)
            .start()
    })
    .await??)
}

/// `rediss+sentinel://locker:...@sentinel,.../name` with the group's CA, client
/// certificate and the sentinels' own user.
fn sentinel_target(group: &SentinelGroup) -> anyhow::Result<ClientBuilder> {
    let certificates = group.certificates().context("a TLS group")?;
    Ok(Client::builder(&group.url())
        .tls(tls(certificates))
        .sentinel_credentials(Some(SENTINEL_USER), SENTINEL_PASSWORD))
}

/// Blocking test-kit calls from the test's runtime.
fn blocking<T>(f: impl FnOnce() -> std::io::Result<T>) -> anyhow::Result<T> {
    Ok(tokio::task::block_in_place(f)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_on_a_tls_cluster_with_an_acl_user() -> anyhow::Result<()> {
    let cluster = tls_cluster().await?;
    anyhow::ensure!(cluster.url().starts_with("rediss+cluster://locker:"));
    every_case(&cluster_target(&cluster)?).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_behind_tls_sentinels_with_acl_users() -> anyhow::Result<()> {
    let group = tls_sentinels().await?;
    anyhow::ensure!(group.url().starts_with("rediss+sentinel://locker:"));
    every_case(&sentinel_target(&group)?).await
}

/// Waits until one of `servers` has a shard channel subscribed whose name starts with
/// `prefix`. A shard's replicas get what its master publishes (replication carries
/// `SPUBLISH`), so a subscription on any server of the shard hears the release.
async fn ensure_subscribed(servers: &[&RedisServer], prefix: &str) -> anyhow::Result<()> {
    let pattern = format!("{prefix}*");
    let subscribed = async {
        loop {
            for server in servers {
                let channels =
                    blocking(|| server.query(&["PUBSUB", "SHARDCHANNELS", pattern.as_str()]))?;
                if channels.elements().is_some_and(|c| !c.is_empty()) {
                    return anyhow::Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), subscribed)
        .await
        .with_context(|| format!("no channel {pattern} was subscribed in the shard"))?
}

/// A lock held through `failover` (run on the blocking pool; it returns the servers of
/// the lock's shard) stays held past a lease, so renewed on the new master, which has
/// it; the waiter in another client is subscribed in the shard and is granted once the
/// lock is released.
async fn held_lock_follows<'a>(
    target: ClientBuilder,
    lease: Duration,
    failover: impl FnOnce() -> anyhow::Result<Vec<&'a RedisServer>>,
) -> anyhow::Result<()> {
    let target = target
        .watchdog_lease(lease)
        .response_timeout(Duration::from_millis(800));
    let holder_client = target.clone().connect().await?;
    let lock = holder_client.lock("secured:failover")?;
    let guard = lock.lock().await?;
    let token = guard.fencing_token();
    let waiter_lock = target.clone().connect().await?.lock("secured:failover")?;
    let waiter = tokio::spawn(async move {
        let guard = waiter_lock.lock().await?;
        let token = guard.fencing_token();
        guard.unlock().await?;
        anyhow::Ok(token)
    });
    let shard = failover()?;
    ensure_subscribed(&shard, "{secured:failover}").await?;
    // A lease and a bit: held now only if renewals reached the new master.
    tokio::time::sleep(lease + lease / 4).await;
    anyhow::ensure!(guard.is_held(), "the holder lost its lock in the failover");
    anyhow::ensure!(
        lock.is_locked().await?,
        "the new master does not have the lock"
    );
    anyhow::ensure!(!waiter.is_finished(), "the waiter got in beside the holder");
    guard.unlock().await.context("the holder's release")?;
    let granted = tokio::time::timeout(GRANT_BOUND, waiter)
        .await
        .context("the waiter was never granted")???;
    anyhow::ensure!(granted > token, "token {granted} is not above {token}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_held_lock_follows_a_tls_cluster_failover() -> anyhow::Result<()> {
    let cluster = tls_cluster().await?;
    let master = blocking(|| cluster.master_of_key("{secured:failover}"))?;
    let replica = blocking(|| cluster.replicas_of(master))?
        .first()
        .copied()
        .context("the lock's master has no replica")?;
    held_lock_follows(cluster_target(&cluster)?, CLUSTER_LEASE, || {
        blocking(|| cluster.failover(replica))?;
        let mut shard = vec![replica];
        shard.extend(blocking(|| cluster.replicas_of(replica))?);
        Ok(shard.into_iter().map(|n| &cluster.nodes()[n]).collect())
    })
    .await
}

/// A Sentinel failover does not stop writes on the old master first: the client counts
/// a grant or renewal only once both replicas have it (`WAIT`, through the same TLS and
/// ACL connection), so whichever is promoted has the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_held_lock_follows_a_tls_sentinel_failover() -> anyhow::Result<()> {
    let group = tls_sentinels().await?;
    let old = blocking(|| group.master())?;
    let target = sentinel_target(&group)?.replica_acks(2, Duration::from_millis(500));
    held_lock_follows(target, SENTINEL_LEASE, || {
        let new = blocking(|| group.failover())?;
        anyhow::ensure!(new != old, "server {old} is still the master");
        Ok(group.servers().iter().collect())
    })
    .await
}

/// Connects with `builder`, which must fail: returns the error after checking that no
/// password shows in its message or its `Debug` form.
async fn refused(builder: ClientBuilder) -> anyhow::Result<Error> {
    let outcome = tokio::time::timeout(REFUSAL_BOUND, builder.connect())
        .await
        .context("the connect hung instead of failing")?;
    let Err(error) = outcome else {
        anyhow::bail!("the connect succeeded");
    };
    let shown = format!("{error} / {error:?}");
    for password in [PASSWORD, PASSWORD_IN_URL, SENTINEL_PASSWORD, WRONG_PASSWORD] {
        anyhow::ensure!(!shown.contains(password), "a password shows in {shown}");
    }
    Ok(error)
}

/// A connect error whose message has one of `words` (case-insensitive).
fn ensure_connect_error(error: &Error, words: &[&str]) -> anyhow::Result<()> {
    anyhow::ensure!(
        matches!(error, Error::Connect { .. }),
        "not a connect error: {error:?}"
    );
    let message = error.to_string().to_lowercase();
    anyhow::ensure!(
        words.iter().any(|word| message.contains(word)),
        "the message does not say why ({words:?}): {error}"
    );
    Ok(())
}

/// The error's message says `phrase` (which side refused, behind Sentinel).
fn ensure_says(error: &Error, phrase: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        error.to_string().contains(phrase),
        "the message does not say {phrase:?}: {error}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_refuses_wrong_credentials_clearly() -> anyhow::Result<()> {
    let cluster = tls_cluster().await?;
    let certificates = cluster.certificates().context("a TLS cluster")?;
    let url = cluster.url();

    let wrong = url.replacen(PASSWORD_IN_URL, WRONG_PASSWORD, 1);
    let error = refused(Client::builder(&wrong).tls(tls(certificates))).await?;
    ensure_connect_error(
        &error,
        &[
            "wrongpass",
            "invalid username-password",
            "authentication failed",
        ],
    )?;

    let anonymous = url.replacen(&format!("{USER}:{PASSWORD_IN_URL}@"), "", 1);
    let error = refused(Client::builder(&anonymous).tls(tls(certificates))).await?;
    ensure_connect_error(
        &error,
        &[
            "noauth",
            "authentication required",
            "wrongpass",
            "authentication failed",
        ],
    )?;

    // No client certificate: the servers ask for one.
    let error =
        refused(Client::builder(&url).tls(TlsConfig::new().ca_certificates(certificates.ca_pem())))
            .await?;
    anyhow::ensure!(matches!(error, Error::Connect { .. }), "{error:?}");

    // The servers' CA not trusted: the system roots do not know it.
    let error = refused(Client::builder(&url)).await?;
    ensure_connect_error(&error, &["certificate", "unknownissuer", "unknown issuer"])?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_sentinels_refuse_wrong_credentials_clearly() -> anyhow::Result<()> {
    let group = tls_sentinels().await?;
    let certificates = group.certificates().context("a TLS group")?;
    let url = group.url();

    // The master refuses the data credentials.
    let wrong = url.replacen(PASSWORD_IN_URL, WRONG_PASSWORD, 1);
    let error = refused(
        Client::builder(&wrong)
            .tls(tls(certificates))
            .sentinel_credentials(Some(SENTINEL_USER), SENTINEL_PASSWORD),
    )
    .await?;
    ensure_connect_error(
        &error,
        &[
            "wrongpass",
            "invalid username-password",
            "authentication failed",
        ],
    )?;
    ensure_says(&error, "the master refused the login")?;

    // The sentinels refuse theirs.
    let error = refused(
        Client::builder(&url)
            .tls(tls(certificates))
            .sentinel_credentials(Some(SENTINEL_USER), WRONG_PASSWORD),
    )
    .await?;
    ensure_connect_error(
        &error,
        &[
            "wrongpass",
            "invalid username-password",
            "authentication failed",
        ],
    )?;
    ensure_says(&error, "the sentinels refused the login")?;

    // No sentinel credentials at all.
    let error = refused(Client::builder(&url).tls(tls(certificates))).await?;
    ensure_connect_error(
        &error,
        &["noauth", "authentication required", "authentication failed"],
    )?;
    ensure_says(&error, "the sentinels refused the login")?;
    Ok(())
}

/// A TLS URL against a plain port, and a plain URL against a TLS port, fail at once
/// with a connect error (a TLS client meets no TLS server; a TLS server drops a client
/// that does not start TLS).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_plain_mismatches_fail_clearly() -> anyhow::Result<()> {
    let server = TlsRedisServer::start(ClientAuth::None)?;
    let certificates = server.certificates();
    let plain = server.server().port();
    let tls_port = server.tls_port();
    let plain_only = RedisServer::start()?;
    let cases = [
        (
            format!("rediss+cluster://127.0.0.1:{plain}"),
            Some(tls(certificates)),
        ),
        (
            format!("rediss+sentinel://127.0.0.1:{plain}/master"),
            Some(tls(certificates)),
        ),
        (
            format!("rediss+cluster://127.0.0.1:{}", plain_only.port()),
            Some(tls(certificates)),
        ),
        (format!("redis+cluster://127.0.0.1:{tls_port}"), None),
        (
            format!("redis+sentinel://127.0.0.1:{tls_port}/master"),
            None,
        ),
    ];
    for (url, tls) in cases {
        let mut builder = Client::builder(&url).connect_timeout(Duration::from_secs(1));
        if let Some(tls) = tls {
            builder = builder.tls(tls);
        }
        let error = refused(builder).await.context(url.clone())?;
        ensure_connect_error(&error, &["tls"]).context(url)?;
    }
    Ok(())
}

/// `danger_accept_invalid_certificates` reaches every connection of a cluster client,
/// the subscription connections included: a release wakes a waiter in another client
/// (a fixed lease of a minute: only the release message can wake it in time).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn insecure_tls_settings_reach_every_cluster_connection() -> anyhow::Result<()> {
    let cluster = tls_cluster().await?;
    let certificates = cluster.certificates().context("a TLS cluster")?;
    let insecure = TlsConfig::new()
        .danger_accept_invalid_certificates(true)
        .client_certificate(certificates.client_pem(), certificates.client_key_pem());
    let target = Client::builder(&cluster.url()).tls(insecure);
    let long = ferrisson_redis::Lease::Fixed(Duration::from_secs(60));
    let holder = target
        .clone()
        .connect()
        .await?
        .lock("insecure")?
        .with_lease(long)?;
    let guard = holder.lock().await?;
    let waiter_lock = target.connect().await?.lock("insecure")?.with_lease(long)?;
    let waiter = tokio::spawn(async move { waiter_lock.lock().await?.unlock().await });
    // The waiter's wake-up channel is subscribed on the master of the lock's slot (a
    // subscription that fails leaves the waiter polling instead).
    let master = blocking(|| cluster.master_of_key("{insecure}"))?;
    ensure_subscribed(&[&cluster.nodes()[master]], "{insecure}").await?;
    anyhow::ensure!(!waiter.is_finished(), "the waiter got in beside the holder");
    guard.unlock().await?;
    tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .context("the release message did not wake the waiter")???;
    Ok(())
}

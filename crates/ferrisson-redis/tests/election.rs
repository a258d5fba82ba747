//! `Election` against real redis-server processes: one leader at a time among many
//! candidates in several clients, a cut-off leader replaced within one lease with a
//! larger token, resignation handing over at once, observers seeing every change.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use common::{client_with_lease, server_and_client};
use ferrisson_redis::{
    Client, DistributedLock, Election, Error, Fenced, FencingToken, Guard, LeaderChange, Lease,
};
use ferrisson_testkit::{FaultProxy, RedisServer};
use tokio::sync::Mutex;
use tokio::time::Instant;

mod common;

#[tokio::test]
async fn one_leader_at_a_time_among_candidates_in_three_clients() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let leading = Arc::new(AtomicUsize::new(0));
    let terms = Arc::new(AtomicUsize::new(0));
    let last_token = Arc::new(Mutex::new(FencingToken::new(0)));
    let mut candidates = Vec::new();
    for c in 0..3 {
        let client = Client::connect(&server.url()).await?;
        for k in 0..4 {
            let election = client
                .election("scheduler")?
                .with_candidate_id(format!("client-{c}-candidate-{k}"))?;
            let (leading, terms, last_token) = (
                Arc::clone(&leading),
                Arc::clone(&terms),
                Arc::clone(&last_token),
            );
            candidates.push(tokio::spawn(async move {
                for _ in 0..3 {
                    let leadership = election.campaign().await?;
                    let others = leading.fetch_add(1, Ordering::SeqCst);
                    terms.fetch_add(1, Ordering::SeqCst);
                    {
                        let mut last = last_token.lock().await;
                        anyhow::ensure!(
                            leadership.fencing_token() > *last,
                            "term {} after term {}",
                            leadership.fencing_token(),
                            *last
                        );
                        *last = leadership.fencing_token();
                    }
                    // Stay leader a moment, so that the others are waiting meanwhile.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    leading.fetch_sub(1, Ordering::SeqCst);
                    anyhow::ensure!(others == 0, "{others} other leaders at once");
                    leadership.resign().await?;
                }
                Ok(())
            }));
        }
    }
    for candidate in candidates {
        candidate.await??;
    }
    // Every term's token was larger than the one before (checked above).
    assert_eq!(
        terms.load(Ordering::SeqCst),
        36,
        "12 candidates, 3 terms each"
    );
    Ok(())
}

#[tokio::test]
async fn a_cut_off_leader_is_replaced_within_one_lease_with_a_larger_token() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let lease = Duration::from_secs(1);
    let proxy = FaultProxy::start(server.port()).await?;
    let doomed = client_with_lease_at(&proxy.url(), lease).await?;
    let successor = client_with_lease(&server, lease).await?;

    let leadership = doomed.election("job")?.campaign().await?;
    let next = successor.election("job")?.with_candidate_id("successor")?;
    assert!(next.try_campaign().await?.is_none(), "the job has a leader");
    let waiting = tokio::spawn(async move { next.campaign().await });

    // The leader's process stops answering: nothing renews its term any more.
    proxy.control().set_blackhole(true);
    let cut_off = Instant::now();
    let elected = waiting.await??;
    let took = cut_off.elapsed();
    assert!(
        took <= lease + Duration::from_millis(500),
        "the next leader came {took:?} after the cut, the lease is {lease:?}"
    );
    assert!(elected.fencing_token() > leadership.fencing_token());
    assert_eq!(elected.info().candidate, "successor");
    // The old leader learns it too, from its own clock.
    tokio::time::timeout(lease, leadership.lost()).await?;
    assert!(!leadership.is_held());
    elected.resign().await?;
    drop(leadership);
    Ok(())
}

async fn client_with_lease_at(url: &str, lease: Duration) -> anyhow::Result<Client> {
    Ok(Client::builder(url)
        .watchdog_lease(lease)
        .response_timeout(Duration::from_millis(300))
        .reconnect_retries(0)
        .connect()
        .await?)
}

#[tokio::test]
async fn resigning_hands_over_at_once() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    // The default 30 s watchdog lease: a hand-off by expiry would take 30 s.
    let first = Client::connect(&server.url()).await?;
    let second = Client::connect(&server.url()).await?;
    let leadership = first.election("primary")?.campaign().await?;
    let next = second.election("primary")?;
    let waiting = tokio::spawn(async move { next.campaign().await });
    // The second candidate is waiting once it found the election taken and subscribed.
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            second.stats().waiting_channels == 1
        })
        .await
    );
    let token = leadership.fencing_token();
    let resigned = Instant::now();
    leadership.resign().await?;
    let elected = tokio::time::timeout(Duration::from_secs(5), waiting).await???;
    assert!(
        resigned.elapsed() < Duration::from_secs(5),
        "woken by the resignation"
    );
    assert!(elected.fencing_token() > token);
    assert!(elected.remaining() > Duration::from_secs(20));
    Ok(())
}

#[tokio::test]
async fn leader_reports_who_leads_since_when() -> anyhow::Result<()> {
    let (_server, client) = server_and_client().await?;
    let election = client.election("reporter")?.with_candidate_id("host-a")?;
    assert_eq!(election.leader().await?, None);
    let before = SystemTime::now() - Duration::from_secs(5);
    let leadership = election.campaign().await?;
    let info = election.leader().await?.expect("a leader");
    assert_eq!(&info, leadership.info());
    assert_eq!(info.name, "reporter");
    assert_eq!(info.candidate, "host-a");
    assert_eq!(info.owner, leadership.owner());
    assert_eq!(info.term, leadership.fencing_token());
    assert!(info.since > before && info.since < SystemTime::now() + Duration::from_secs(5));

    // Without a candidate id, the owner id stands for the candidate.
    leadership.resign().await?;
    let anonymous = client.election("reporter")?.campaign().await?;
    assert_eq!(
        election.leader().await?.map(|i| i.candidate),
        Some(anonymous.owner().to_string())
    );
    anonymous.resign().await?;
    assert_eq!(election.leader().await?, None);
    Ok(())
}

#[tokio::test]
async fn an_observer_sees_every_term_in_order() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let watcher = Client::connect(&server.url()).await?;
    let candidates = Client::connect(&server.url()).await?;
    let mut observer = watcher.election("rota")?.observe().await?;
    assert_eq!(observer.changed().await?, LeaderChange::Vacant);

    // Three terms back to back, faster than the observer reads.
    let mut terms = Vec::new();
    for name in ["a", "b", "c"] {
        let leadership = candidates
            .election("rota")?
            .with_candidate_id(name)?
            .campaign()
            .await?;
        terms.push((name, leadership.fencing_token()));
        leadership.resign().await?;
    }
    let mut seen = Vec::new();
    loop {
        match observer.changed().await? {
            LeaderChange::Elected(info) => seen.push((info.candidate, info.term)),
            LeaderChange::Vacant if seen.len() == 3 => break,
            LeaderChange::Vacant => {}
            other => anyhow::bail!("unexpected {other:?}"),
        }
    }
    let expected: Vec<_> = terms.iter().map(|(n, t)| ((*n).to_owned(), *t)).collect();
    assert_eq!(seen, expected);
    Ok(())
}

#[tokio::test]
async fn an_observer_sees_a_term_end_by_its_lease() -> anyhow::Result<()> {
    let (_server, client) = server_and_client().await?;
    let election = client
        .election("short")?
        .with_lease(Lease::Fixed(Duration::from_millis(300)))?;
    let leadership = election.campaign().await?;
    let mut observer = election.observe().await?;
    match observer.changed().await? {
        LeaderChange::Elected(info) => assert_eq!(info.term, leadership.fencing_token()),
        other => anyhow::bail!("expected the current leader, got {other:?}"),
    }
    let started = Instant::now();
    assert_eq!(observer.changed().await?, LeaderChange::Vacant);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "seen when the lease ran out"
    );
    assert!(matches!(
        leadership.resign().await,
        Err(Error::LeaseExpired { .. })
    ));
    Ok(())
}

/// The election through the backend-neutral contract.
async fn lead_once<L: DistributedLock<Guard: Fenced>>(lock: &L) -> anyhow::Result<FencingToken> {
    let guard = lock.lock().await?;
    let token = guard.fencing_token();
    assert!(lock.try_lock().await?.is_none());
    guard.unlock().await?;
    Ok(token)
}

#[tokio::test]
async fn an_election_is_a_distributed_lock() -> anyhow::Result<()> {
    let (_server, client) = server_and_client().await?;
    let election: Election = client.election("contract")?;
    let first = lead_once(&election).await?;
    let second = lead_once(&election).await?;
    assert!(second > first);
    assert!(
        election
            .lock_timeout(Duration::from_millis(10))
            .await?
            .is_some()
    );
    Ok(())
}

#[tokio::test]
async fn cancelled_campaigns_leave_no_leader() -> anyhow::Result<()> {
    let (_server, client) = server_and_client().await?;
    let election = client.election("cancelled")?;
    for _ in 0..50 {
        // Dropped at every point from before sending to after the reply.
        let _ = tokio::time::timeout(Duration::from_micros(50), election.campaign()).await;
    }
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            election.leader().await.ok() == Some(None)
        })
        .await,
        "a cancelled campaign left a leader"
    );
    Ok(())
}

#[tokio::test]
async fn bad_input_is_refused() -> anyhow::Result<()> {
    let (_server, client) = server_and_client().await?;
    assert!(matches!(
        client.election("a{b}"),
        Err(Error::InvalidArgument(_))
    ));
    let election = client.election("named")?;
    for id in [String::new(), "x".repeat(257), "line\nbreak".to_owned()] {
        assert!(
            matches!(
                election.clone().with_candidate_id(id.clone()),
                Err(Error::InvalidArgument(_))
            ),
            "{id:?}"
        );
    }
    assert!(election.clone().with_candidate_id("x".repeat(256)).is_ok());
    assert!(matches!(
        election.with_lease(Lease::Fixed(Duration::ZERO)),
        Err(Error::InvalidArgument(_))
    ));
    Ok(())
}

#[tokio::test]
async fn a_waiting_observer_is_woken_by_the_change() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let watcher = Client::connect(&server.url()).await?;
    let candidates = Client::connect(&server.url()).await?;
    let election = candidates.election("woken")?;
    // A 30 s lease: without a message the observer would read again only 30 s later.
    let leadership = election.campaign().await?;
    let mut observer = watcher.election("woken")?.observe().await?;
    assert!(matches!(
        observer.changed().await?,
        LeaderChange::Elected(_)
    ));
    let next = tokio::spawn(async move {
        let change = observer.changed().await;
        (observer, change)
    });
    leadership.resign().await?;
    let (mut observer, change) = tokio::time::timeout(Duration::from_secs(10), next).await??;
    assert_eq!(change?, LeaderChange::Vacant);

    let next = tokio::spawn(async move { observer.changed().await });
    let elected = election.campaign().await?;
    match tokio::time::timeout(Duration::from_secs(10), next).await??? {
        LeaderChange::Elected(info) => assert_eq!(info.term, elected.fencing_token()),
        other => anyhow::bail!("expected the new leader, got {other:?}"),
    }
    Ok(())
}

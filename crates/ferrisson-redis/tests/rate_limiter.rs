//! `RateLimiter` against real redis-server processes: the configured rate across two
//! clients, bursts, retry-after as the server computes it, waiting without polling, and
//! refused settings.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{raw, server_and_client};
use ferrisson_redis::{Client, Error, Rate, RateDecision};
use ferrisson_testkit::RedisServer;
use tokio::time::Instant;

mod common;

#[tokio::test]
async fn a_full_bucket_gives_its_burst_then_says_when_to_retry() -> anyhow::Result<()> {
    let (_server, client) = server_and_client().await?;
    let limiter = client
        .rate_limiter("bursty", Rate::per_second(2)?)?
        .with_burst(5)?;
    let interval = Duration::from_millis(500);
    let started = Instant::now();
    for remaining in (0..5).rev() {
        assert_eq!(
            limiter.try_acquire(1).await?,
            RateDecision::Allowed { remaining }
        );
    }
    let denied = limiter.try_acquire(1).await?;
    let elapsed = started.elapsed();
    let retry_after = denied.retry_after().expect("the bucket is empty");
    // The first permit taken comes back one interval after it was taken, by the server's
    // clock; the sixth call came at most `elapsed` after the first.
    assert!(retry_after <= interval, "{retry_after:?}");
    assert!(
        retry_after + elapsed >= interval,
        "{retry_after:?} after {elapsed:?}"
    );

    // Asking for more than has come back is refused with its own wait, and takes nothing.
    let two = limiter.try_acquire(2).await?.retry_after().expect("empty");
    assert!(
        two > retry_after && two <= retry_after + interval,
        "{two:?}"
    );

    // Due after the wait it was told.
    tokio::time::sleep(retry_after).await;
    assert!(limiter.try_acquire(1).await?.is_allowed());
    assert!(!limiter.try_acquire(1).await?.is_allowed());
    Ok(())
}

#[tokio::test]
async fn the_rate_holds_across_two_clients() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let rate = Rate::per_second(50)?;
    let burst = 5;
    let granted = Arc::new(AtomicU32::new(0));
    let run_for = Duration::from_millis(1500);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let client = Client::connect(&server.url()).await?;
        let limiter = client.rate_limiter("shared", rate)?.with_burst(burst)?;
        for _ in 0..3 {
            let (limiter, granted) = (limiter.clone(), Arc::clone(&granted));
            tasks.push(tokio::spawn(async move {
                while started.elapsed() < run_for {
                    limiter.acquire(1).await?;
                    granted.fetch_add(1, Ordering::SeqCst);
                }
                anyhow::Ok(())
            }));
        }
    }
    for task in tasks {
        task.await??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let granted = f64::from(granted.load(Ordering::SeqCst));
    // Every grant happened within `elapsed` of the first call by the server's clock.
    let most = f64::from(burst) + 50.0 * elapsed;
    assert!(
        granted <= most,
        "{granted} grants in {elapsed:.2} s, at most {most:.0} allowed"
    );
    // Six waiting tasks keep the limiter busy: well over half the rate.
    assert!(
        granted >= 25.0 * elapsed,
        "{granted} grants in {elapsed:.2} s"
    );
    Ok(())
}

#[tokio::test]
async fn acquire_sleeps_until_the_permit_is_due() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let limiter = client
        .rate_limiter("paced", Rate::per_second(20)?)?
        .with_burst(1)?;
    let mut conn = raw(&server).await?;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await?;
    let started = Instant::now();
    for _ in 0..10 {
        limiter.acquire(1).await?;
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(9 * 50),
        "ten permits at 20/s took {took:?}"
    );
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await?;
    let calls: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    // One refused try and one granted try per permit at most: no polling.
    assert!(calls <= 20, "{calls} script calls for 10 permits");
    Ok(())
}

#[tokio::test]
async fn acquire_timeout_gives_up_without_waiting_when_the_permit_is_due_later()
-> anyhow::Result<()> {
    let (_server, client) = server_and_client().await?;
    let limiter = client.rate_limiter("slow", Rate::per_minute(1)?)?;
    assert!(
        limiter
            .acquire_timeout(1, Duration::from_secs(1))
            .await?
            .is_allowed()
    );
    let started = Instant::now();
    let decision = limiter.acquire_timeout(1, Duration::from_secs(10)).await?;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "returned at once"
    );
    let retry_after = decision.retry_after().expect("denied");
    assert!(retry_after > Duration::from_secs(50) && retry_after <= Duration::from_secs(60));
    Ok(())
}

#[tokio::test]
async fn bad_settings_and_requests_are_refused() -> anyhow::Result<()> {
    let (_server, client) = server_and_client().await?;
    let invalid = |r: ferrisson_redis::Result<Rate>| matches!(r, Err(Error::InvalidArgument(_)));
    assert!(invalid(Rate::per_second(0)));
    assert!(invalid(Rate::new(1, Duration::ZERO)));
    assert!(invalid(Rate::new(1, Duration::from_secs(400 * 24 * 3600))));
    assert!(invalid(Rate::per_second(1_000_001)));
    assert!(Rate::per_second(1_000_000).is_ok());

    let rate = Rate::per_second(10)?;
    assert!(matches!(
        client.rate_limiter("", rate),
        Err(Error::InvalidArgument(_))
    ));
    let limiter = client.rate_limiter("checked", rate)?;
    assert!(matches!(
        limiter.clone().with_burst(0),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        limiter.clone().with_burst(u32::MAX),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        limiter.try_acquire(0).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        limiter.try_acquire(11).await,
        Err(Error::InvalidArgument(m)) if m.contains("burst")
    ));
    assert!(matches!(
        limiter.acquire(11).await,
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(
        limiter.try_acquire(10).await?,
        RateDecision::Allowed { remaining: 0 }
    );
    Ok(())
}

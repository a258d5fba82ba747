//! `ExpirableSemaphore` against real redis-server processes: permits by id with leases,
//! release and lease updates by id, expired permits reclaimed, and a holder process
//! killed with SIGKILL giving its permit back after its lease.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ferrisson_redis::{Client, Error, ExpirablePermit, ExpirableSemaphore, Lease, PermitId};
use ferrisson_testkit::RedisServer;
use sync_support::{HANG, NO_RECHECK, calls, raw, until_calls, within};

mod sync_support;

const LONG: Duration = Duration::from_secs(30);

/// The semaphore `name` with a fixed lease for its permits.
fn leased(client: &Client, name: &str, lease: Duration) -> anyhow::Result<ExpirableSemaphore> {
    Ok(client
        .expirable_semaphore(name)?
        .with_lease(Lease::Fixed(lease))?)
}

/// True when `result` is the error of a permit whose lease had run out.
fn expired<T>(result: &Result<T, Error>) -> bool {
    matches!(result, Err(Error::LeaseExpired { .. }))
}

#[tokio::test]
async fn bad_arguments_are_rejected() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    assert!(matches!(
        client.expirable_semaphore(""),
        Err(Error::InvalidArgument(_))
    ));
    let semaphore = leased(&client, "bad-args", LONG)?;
    semaphore.try_set_permits(1).await?;
    for lease in [Duration::ZERO, Duration::from_secs(400 * 24 * 3600)] {
        assert!(matches!(
            semaphore.clone().with_lease(Lease::Fixed(lease)),
            Err(Error::InvalidArgument(_))
        ));
    }
    for permits in [0, ferrisson_redis::MAX_EXPIRABLE_PERMITS_PER_CALL + 1] {
        assert!(matches!(
            semaphore.acquire_many(permits).await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            semaphore.try_acquire_many(permits).await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            semaphore.acquire_many_timeout(permits, LONG).await,
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        semaphore.add_permits(0).await,
        Err(Error::InvalidArgument(_))
    ));
    let permit = semaphore.acquire().await?;
    assert!(matches!(
        semaphore.update_lease(permit.id(), Duration::ZERO).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!("0123".parse::<PermitId>().is_err());
    assert!("g".repeat(32).parse::<PermitId>().is_err());
    permit.release().await?;
    Ok(())
}

#[tokio::test]
async fn never_initialised_semaphore_fails_at_once() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let semaphore = client.expirable_semaphore("never-set")?;
    let waited =
        tokio::time::timeout(HANG, semaphore.acquire_timeout(Duration::from_secs(3600))).await?;
    assert!(
        matches!(waited, Err(Error::NotInitialized { .. })),
        "{waited:?}"
    );
    assert!(matches!(
        semaphore.try_acquire().await,
        Err(Error::NotInitialized { .. })
    ));
    assert!(matches!(
        semaphore.drain().await,
        Err(Error::NotInitialized { .. })
    ));
    assert!(matches!(
        semaphore.available_permits().await,
        Err(Error::NotInitialized { .. })
    ));
    let info = semaphore.inspect().await?;
    assert_eq!(info.available_permits, None);
    assert!(info.held.is_empty());
    let mut conn = raw(&server).await?;
    let keys: i64 = redis::cmd("DBSIZE").query_async(&mut conn).await?;
    assert_eq!(keys, 0, "failed acquires create nothing");
    Ok(())
}

#[tokio::test]
async fn permits_have_ids_and_leases() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let semaphore = leased(&client, "leased", Duration::from_secs(20))?;
    assert!(semaphore.try_set_permits(2).await?);
    assert!(!semaphore.try_set_permits(5).await?);

    let first = semaphore.acquire().await?;
    let second = leased(&client, "leased", Duration::from_secs(40))?
        .try_acquire()
        .await?
        .expect("1 of 2 free");
    assert_ne!(first.id(), second.id());
    assert!(semaphore.try_acquire().await?.is_none());
    assert!(first.remaining() <= Duration::from_secs(20));
    assert!(first.is_held());

    let info = semaphore.inspect().await?;
    assert_eq!(info.available_permits, Some(0));
    assert_eq!(info.held_count, 2);
    let ids: Vec<PermitId> = info.held.iter().map(|p| p.id).collect();
    assert_eq!(ids, vec![first.id(), second.id()], "earliest expiry first");
    assert!(info.held[0].ttl <= Duration::from_secs(20));
    assert!(info.held[0].ttl > Duration::from_secs(10));
    assert!(info.held[1].ttl > Duration::from_secs(20));

    // A longer lease moves the first permit behind the second.
    assert!(first.update_lease(Duration::from_secs(60)).await?);
    assert!(first.remaining() > Duration::from_secs(40));
    let info = semaphore.inspect().await?;
    assert_eq!(info.held[1].id, first.id());
    assert!(info.held[1].ttl > Duration::from_secs(40));

    // Release by id from the handle: once, then unknown.
    let second_id = second.forget();
    semaphore.release(second_id).await?;
    assert!(
        expired(&semaphore.release(second_id).await),
        "a second release is a no-op"
    );
    assert!(!semaphore.update_lease(second_id, LONG).await?);
    assert_eq!(semaphore.available_permits().await?, 1);

    first.release().await?;
    assert_eq!(semaphore.available_permits().await?, 2);
    semaphore.add_permits(-1).await?;
    assert_eq!(semaphore.available_permits().await?, 1);
    assert!(semaphore.delete().await?);
    assert!(matches!(
        semaphore.try_acquire().await,
        Err(Error::NotInitialized { .. })
    ));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_permit_is_reclaimed_and_wakes_a_waiter() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let semaphore = client
        .expirable_semaphore("expiring")?
        .with_recheck_interval(NO_RECHECK)?;
    semaphore.try_set_permits(1).await?;
    let lease = Duration::from_millis(300);
    let abandoned = semaphore
        .clone()
        .with_lease(Lease::Fixed(lease))?
        .acquire()
        .await?
        .forget();
    let started = tokio::time::Instant::now();
    // No release will come: the waiter wakes when the abandoned permit's lease runs out.
    let permit = within(semaphore.acquire()).await?;
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "not before the lease ran out"
    );
    let info = semaphore.inspect().await?;
    assert_eq!(
        info.held.iter().map(|p| p.id).collect::<Vec<_>>(),
        vec![permit.id()]
    );
    assert!(
        expired(&semaphore.release(abandoned).await),
        "the abandoned permit is gone"
    );
    assert!(
        !semaphore.update_lease(abandoned, LONG).await?,
        "and not revived"
    );
    assert_eq!(semaphore.available_permits().await?, 0);
    permit.release().await?;
    assert_eq!(semaphore.available_permits().await?, 1);
    Ok(())
}

#[tokio::test]
async fn release_after_the_lease_reports_it() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let semaphore = leased(&client, "overrun", Duration::from_millis(20))?;
    semaphore.try_set_permits(1).await?;
    let permit = semaphore.acquire().await?;
    // Let the lease run out with nobody reclaiming it.
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(
        semaphore.available_permits().await?,
        1,
        "an expired permit counts as free"
    );
    assert_eq!(semaphore.inspect().await?.held_count, 0);
    assert!(!permit.is_held());
    assert!(expired(&permit.release().await), "the lease had run out");
    assert_eq!(
        semaphore.available_permits().await?,
        1,
        "returned once, not twice"
    );
    Ok(())
}

// current_thread: the waiter runs before the test resumes after a reply on the same
// connection, so it is waiting when the permit is dropped.
#[tokio::test(flavor = "current_thread")]
async fn dropped_permit_wakes_a_waiter() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let semaphore =
        leased(&client, "drop", Duration::from_secs(3600))?.with_recheck_interval(NO_RECHECK)?;
    semaphore.try_set_permits(1).await?;
    let held = semaphore.acquire().await?;
    let waiter = tokio::spawn({
        let semaphore = semaphore.clone();
        async move { within(semaphore.acquire()).await }
    });
    let mut conn = raw(&server).await?;
    until_calls(&mut conn, "evalsha", 3).await?;
    assert_eq!(semaphore.available_permits().await?, 0);
    drop(held);
    let permit = waiter.await??; // woken by the release on drop
    assert_eq!(semaphore.inspect().await?.held_count, 1);
    permit.release().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquire_gives_its_permit_back() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let semaphore = leased(&client, "cancelled", Duration::from_secs(3600))?;
    semaphore.try_set_permits(1).await?;
    let mut conn = raw(&server).await?;
    let before = calls(&mut conn, "evalsha").await?;
    server.pause()?;
    let gave_up = tokio::time::timeout(Duration::from_millis(100), semaphore.acquire()).await;
    assert!(
        gave_up.is_err(),
        "the acquire cannot finish while the server is frozen"
    );
    server.resume()?;
    until_calls(&mut conn, "evalsha", before + 2).await?;
    let info = semaphore.inspect().await?;
    assert_eq!(
        info.available_permits,
        Some(1),
        "the orphaned permit came back at once"
    );
    assert!(info.held.is_empty());
    Ok(())
}

/// Set in the child process that holds a permit until it is killed.
const HOLDER_URL: &str = "FERRISSON_TEST_PERMIT_HOLDER_URL";
const HOLDER_LEASE: Duration = Duration::from_secs(4);
const KILLED_TEST: &str = "killed_holder_gives_its_permit_back_after_its_lease";

/// Kills the holder process if the test fails before it does.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_gives_its_permit_back_after_its_lease() -> anyhow::Result<()> {
    if let Ok(url) = std::env::var(HOLDER_URL) {
        return hold_a_permit_until_killed(&url).await;
    }
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let semaphore = leased(&client, "killed", LONG)?.with_recheck_interval(NO_RECHECK)?;
    semaphore.try_set_permits(1).await?;

    // This same test binary, running only this test, in holder mode.
    let mut holder = KillOnDrop(
        Command::new(std::env::current_exe()?)
            .args([KILLED_TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(HOLDER_URL, server.url())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let stdout = holder.0.stdout.take().expect("piped stdout");
    let line = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            // libtest may have printed the test's name on the same line.
            .find_map(|line| {
                line.split_once("PERMIT ")
                    .map(|(_, id)| id.trim().to_owned())
            })
    });
    let held_id: PermitId = tokio::time::timeout(HANG, line)
        .await??
        .expect("the holder reports its permit")
        .parse()?;
    let reported = tokio::time::Instant::now();
    let info = semaphore.inspect().await?;
    assert_eq!(
        info.held.iter().map(|p| p.id).collect::<Vec<_>>(),
        vec![held_id]
    );
    assert!(
        semaphore.try_acquire().await?.is_none(),
        "the holder has the only permit"
    );

    // SIGKILL: no destructor, no release message.
    holder.0.kill()?;
    holder.0.wait()?;
    let after_kill = semaphore.inspect().await?;
    // Unless this machine took half the lease to get here, the lease is still running.
    if reported.elapsed() < HOLDER_LEASE / 2 {
        assert!(
            after_kill.held.iter().any(|p| p.id == held_id),
            "the dead holder's permit is held until its lease runs out: {after_kill:?}"
        );
        assert_eq!(after_kill.available_permits, Some(0));
    }

    // Woken by the lease's end (rechecks are an hour apart): the permit came back.
    let permit: ExpirablePermit = within(semaphore.acquire()).await?;
    assert!(
        reported.elapsed() >= HOLDER_LEASE / 2,
        "not before the lease ran out"
    );
    let info = semaphore.inspect().await?;
    assert_eq!(
        info.held.iter().map(|p| p.id).collect::<Vec<_>>(),
        vec![permit.id()]
    );
    assert!(
        expired(&semaphore.release(held_id).await),
        "the dead holder's permit was reclaimed"
    );
    permit.release().await?;
    assert_eq!(semaphore.available_permits().await?, 1);
    Ok(())
}

/// The child's side: take a permit, say which, and hold it until killed (or until the
/// parent goes away and closes our stdin).
async fn hold_a_permit_until_killed(url: &str) -> anyhow::Result<()> {
    let client = Client::connect(url).await?;
    let semaphore: ExpirableSemaphore = leased(&client, "killed", HOLDER_LEASE)?;
    let permit = semaphore.acquire().await?;
    let mut out = std::io::stdout();
    writeln!(out, "PERMIT {}", permit.id())?;
    out.flush()?;
    tokio::task::spawn_blocking(|| std::io::stdin().read_to_end(&mut Vec::new())).await??;
    // The parent is gone without killing us: leave without releasing, like a crash.
    std::process::exit(1);
}

/// Releases `permit` over `proxy` with the first reply held back past the client's
/// response timeout: the server runs the release, the client gives up on it and retries,
/// and the retry finds the permit gone either way.
async fn release_with_first_reply_lost(
    permit: ExpirablePermit,
    server: &RedisServer,
    proxy: &ferrisson_testkit::FaultProxy,
) -> anyhow::Result<Result<(), Error>> {
    let control = proxy.control();
    let mut raw = raw(server).await?;
    let before = calls(&mut raw, "evalsha").await?;
    control.set_hold_replies(true);
    let release = tokio::spawn(async move { permit.release().await });
    // The server ran the release twice: the first try timed out, and was retried.
    until_calls(&mut raw, "evalsha", before + 2).await?;
    control.set_hold_replies(false);
    Ok(release.await?)
}

/// A client whose calls give up after 200 ms, through `proxy`.
async fn impatient(proxy: &ferrisson_testkit::FaultProxy) -> anyhow::Result<Client> {
    Ok(Client::builder(&proxy.url())
        .response_timeout(Duration::from_millis(200))
        .connect()
        .await?)
}

/// A permit reclaimed by another client, released with its first reply lost: the first
/// try finds nothing, the retry finds nothing again. The permit had run out and another
/// client held it: `release()` must not answer that it was still running (it did, until
/// the retry learnt to tell a lost reply from a reclaim).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_retried_after_a_lost_reply_does_not_claim_a_reclaimed_permit() -> anyhow::Result<()>
{
    let server = RedisServer::start()?;
    let proxy = ferrisson_testkit::FaultProxy::start(server.port()).await?;
    let a = impatient(&proxy).await?;
    let direct = Client::connect(&server.url()).await?;
    let semaphore = direct.expirable_semaphore("reclaimed")?;
    semaphore.try_set_permits(1).await?;
    let permit = leased(&a, "reclaimed", Duration::from_millis(100))?
        .acquire()
        .await?;
    // B waits for the permit; it gets it once A's lease ran out, reclaiming A's id.
    let b = within(semaphore.acquire_timeout(HANG))
        .await?
        .ok_or_else(|| anyhow::anyhow!("B never got the permit"))?;
    assert!(permit.remaining().is_zero());
    assert!(
        expired(&release_with_first_reply_lost(permit, &server, &proxy).await?),
        "A's permit had run out and B held it, yet release() reported it still running"
    );
    b.release().await?;
    assert_eq!(semaphore.available_permits().await?, 1);
    Ok(())
}

/// The same lost reply for a permit whose lease is still running: the first try released
/// it, and the answer stays `Ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_retried_after_a_lost_reply_of_a_running_permit_is_ok() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let proxy = ferrisson_testkit::FaultProxy::start(server.port()).await?;
    let a = impatient(&proxy).await?;
    let semaphore = leased(&a, "running", LONG)?;
    semaphore.try_set_permits(1).await?;
    let permit = semaphore.acquire().await?;
    release_with_first_reply_lost(permit, &server, &proxy).await??;
    let direct = Client::connect(&server.url()).await?;
    assert_eq!(
        direct
            .expirable_semaphore("running")?
            .available_permits()
            .await?,
        1,
        "released once, not twice"
    );
    Ok(())
}

/// Takes `wanted` permits over `proxy`, cutting the connection once the server has run
/// the acquire and before its reply reaches the client: the client sends the call again
/// on a new connection, and the second run must find the first one's permits instead of
/// taking more.
async fn acquire_with_first_reply_lost(
    semaphore: ExpirableSemaphore,
    wanted: u32,
    server: &RedisServer,
    proxy: &ferrisson_testkit::FaultProxy,
) -> anyhow::Result<Vec<ExpirablePermit>> {
    let control = proxy.control();
    let mut raw = raw(server).await?;
    // A call on the client's connection first: a reconnect after an earlier reset
    // happens at the next call, and its handshake must not be held back below.
    semaphore.available_permits().await?;
    let before = calls(&mut raw, "evalsha").await?;
    control.set_hold_replies(true);
    let acquire = tokio::spawn(async move { semaphore.try_acquire_many(wanted).await });
    // The server ran it; its reply is held.
    until_calls(&mut raw, "evalsha", before + 1).await?;
    let connections = control.accepted_connections();
    control.reset_all();
    // Replies stay held until the client has connected again (so the reset has closed
    // the connection that held the first reply, which cannot slip through), then flow.
    // The proxy has no event for a new connection: poll its counter.
    within(async {
        while control.accepted_connections() == connections {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        anyhow::Ok(())
    })
    .await?;
    control.set_hold_replies(false);
    let permits = acquire
        .await??
        .ok_or_else(|| anyhow::anyhow!("the resent acquire reported no permits"))?;
    assert_eq!(calls(&mut raw, "evalsha").await?, before + 2);
    Ok(permits)
}

/// An acquire whose reply was lost is sent again; the second run finds the permits the
/// first took, whether enough are still free for a second grant (it must not take them)
/// or not (it must not refuse).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_retried_after_a_lost_reply_takes_its_permits_once() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let proxy = ferrisson_testkit::FaultProxy::start(server.port()).await?;
    let a = Client::connect(&proxy.url()).await?;
    let semaphore = leased(&a, "retried", LONG)?;
    semaphore.try_set_permits(4).await?;
    let direct = Client::connect(&server.url()).await?;
    let observer = direct.expirable_semaphore("retried")?;
    // Both scripts loaded, so each run below is one EVALSHA.
    semaphore
        .try_acquire()
        .await?
        .ok_or_else(|| anyhow::anyhow!("4 free"))?
        .release()
        .await?;

    // 4 free, 1 wanted: after the first run 3 are free, enough for the resent call to take
    // one more.
    let one = acquire_with_first_reply_lost(semaphore.clone(), 1, &server, &proxy).await?;
    assert_eq!(one.len(), 1);
    assert_eq!(
        observer.available_permits().await?,
        3,
        "taken once, not twice"
    );
    // 3 free, 2 wanted: after the first run 1 is free, too few for the resent call.
    let two = acquire_with_first_reply_lost(semaphore.clone(), 2, &server, &proxy).await?;
    assert_eq!(two.len(), 2);
    assert_eq!(
        observer.available_permits().await?,
        1,
        "taken once, not refused"
    );
    let info = observer.inspect().await?;
    assert_eq!(info.held_count, 3);
    for permit in one.into_iter().chain(two) {
        assert!(permit.is_held());
        permit.release().await?;
    }
    assert_eq!(observer.available_permits().await?, 4);
    Ok(())
}

/// An acquire that timed out with its reply held back had run on the server: the client
/// gives its permits back before it reports the error, so they are free again at once,
/// not only when their lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_acquire_gives_its_permits_back() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let proxy = ferrisson_testkit::FaultProxy::start(server.port()).await?;
    let a = impatient(&proxy).await?;
    let semaphore = leased(&a, "timed-out", LONG)?;
    semaphore.try_set_permits(3).await?;
    let direct = Client::connect(&server.url()).await?;
    let observer = direct.expirable_semaphore("timed-out")?;
    let mut raw = raw(&server).await?;
    let before = calls(&mut raw, "evalsha").await?;

    proxy.control().set_hold_replies(true);
    let result = semaphore.try_acquire_many(2).await;
    proxy.control().set_hold_replies(false);
    assert!(result.is_err(), "no reply came, yet: {result:?}");
    assert!(
        calls(&mut raw, "evalsha").await? > before,
        "the acquire never reached the server"
    );
    assert_eq!(observer.inspect().await?.held_count, 0);
    assert_eq!(observer.available_permits().await?, 3);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_permits_are_taken_all_or_none() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let semaphore = leased(&client, "batch", LONG)?.with_recheck_interval(NO_RECHECK)?;
    semaphore.try_set_permits(3).await?;

    let two = semaphore.try_acquire_many(2).await?.expect("3 free");
    assert_eq!(two.len(), 2);
    assert_ne!(two[0].id(), two[1].id());
    assert!(two.iter().all(ExpirablePermit::is_held));
    // One is free, two are wanted: nothing is taken.
    assert!(semaphore.try_acquire_many(2).await?.is_none());
    let info = semaphore.inspect().await?;
    assert_eq!(info.available_permits, Some(1));
    assert_eq!(info.held_count, 2);
    let mut held: Vec<PermitId> = info.held.iter().map(|p| p.id).collect();
    let mut mine: Vec<PermitId> = two.iter().map(ExpirablePermit::id).collect();
    held.sort_by_key(ToString::to_string);
    mine.sort_by_key(ToString::to_string);
    assert_eq!(held, mine);

    // A waiter for three is woken once enough came back, and takes all three.
    let mut conn = raw(&server).await?;
    let before = calls(&mut conn, "evalsha").await?;
    let waiter = tokio::spawn({
        let semaphore = semaphore.clone();
        async move { within(semaphore.acquire_many(3)).await }
    });
    // Its first attempt, and the one after joining the channel.
    until_calls(&mut conn, "evalsha", before + 2).await?;
    let mut two = two.into_iter();
    for permit in two.by_ref() {
        permit.release().await?;
    }
    let three = waiter.await??;
    assert_eq!(three.len(), 3);
    assert_eq!(semaphore.available_permits().await?, 0);
    assert!(
        semaphore
            .acquire_many_timeout(1, Duration::from_millis(20))
            .await?
            .is_none()
    );
    // Each is released on its own.
    for permit in three {
        permit.release().await?;
    }
    assert_eq!(semaphore.available_permits().await?, 3);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_permits_are_renewed_and_lost_when_taken_away() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let lease = Duration::from_millis(300);
    let client = Client::builder(&server.url())
        .watchdog_lease(lease)
        .connect()
        .await?;
    let semaphore = client.expirable_semaphore("renewed")?;
    assert_eq!(semaphore.lease(), Lease::Watchdog);
    semaphore.try_set_permits(2).await?;
    let permits = semaphore.acquire_many(2).await?;
    assert!(permits.iter().all(|p| p.remaining() <= lease));
    assert_eq!(client.stats().renewing, 2);

    // Outliving the lease several times over is the point: the watchdog renews both.
    tokio::time::sleep(lease * 4).await;
    assert!(permits.iter().all(ExpirablePermit::is_held));
    let info = semaphore.inspect().await?;
    assert_eq!(info.held_count, 2, "both still held in Redis: {info:?}");
    assert_eq!(info.available_permits, Some(0));

    // Released behind the holder's back: the next renewal finds it gone.
    let mut permits = permits.into_iter();
    let taken = permits.next().expect("two permits");
    let kept = permits.next().expect("two permits");
    semaphore.release(taken.id()).await?;
    tokio::time::timeout(lease, taken.lost())
        .await
        .expect("lost within a lease");
    assert!(!taken.is_held());
    assert_eq!(taken.remaining(), Duration::ZERO);
    assert!(expired(&taken.release().await));
    assert!(kept.is_held(), "the other permit is untouched");

    // Released, a permit is no longer renewed.
    kept.release().await?;
    assert_eq!(client.stats().renewing, 0);
    assert_eq!(semaphore.available_permits().await?, 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_permits_and_drain_count_expired_permits() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let semaphore =
        leased(&client, "gate", Duration::from_millis(30))?.with_recheck_interval(NO_RECHECK)?;
    // Creates it when missing.
    semaphore.set_permits(2).await?;
    assert_eq!(semaphore.available_permits().await?, 2);
    let expiring = semaphore.acquire().await?.forget();
    let held = leased(&client, "gate", LONG)?.acquire().await?;
    // Let the first lease run out with nobody reclaiming it.
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(semaphore.available_permits().await?, 1);

    // Forced: the expired permit is returned first, so 3 is what is available.
    semaphore.set_permits(3).await?;
    assert_eq!(semaphore.available_permits().await?, 3);
    assert!(expired(&semaphore.release(expiring).await));
    assert_eq!(semaphore.drain().await?, 3);
    assert_eq!(semaphore.drain().await?, 0);
    assert_eq!(semaphore.available_permits().await?, 0);

    // Growing the count wakes a waiter; the held permit still comes back on top.
    let mut conn = raw(&server).await?;
    let before = calls(&mut conn, "evalsha").await?;
    let waiter = tokio::spawn({
        let semaphore = semaphore.clone();
        async move { within(semaphore.acquire()).await }
    });
    until_calls(&mut conn, "evalsha", before + 2).await?;
    semaphore.set_permits(1).await?;
    let woken = waiter.await??;
    held.release().await?;
    assert_eq!(semaphore.available_permits().await?, 1);
    woken.release().await?;
    assert_eq!(semaphore.available_permits().await?, 2);
    Ok(())
}

//! Coalesced script calls against a real redis-server: calls of one script that meet a
//! call in flight go as one batch, each keeping its own owner, lease, token, reply,
//! cancellation and resend rule.
//!
//! Most tests make a batch without any timing: they build the calls' futures, poll them
//! all once (the first call goes out alone, every other one finds it in flight and
//! queues), then let them finish. They run on a one-thread runtime, where the task that
//! sends what queued runs only once the test's task waits, so every call polled before
//! that is in the batch. Redis's `INFO commandstats` counts what went on the wire.

mod sync_support;

use std::collections::{HashMap, HashSet};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use ferrisson_redis::{
    Client, DistributedLock, Fenced, FencingToken, Guard, Lease, Lock, LockGuard, OwnerId,
    SimpleLock,
};
use ferrisson_testkit::{FaultProxy, ProxyControl, RedisServer};
use futures_util::future::{JoinAll, join_all};
use redis::AsyncCommands;
use sync_support::{HANG, calls, raw, until_calls, within};

/// Script calls the server has run so far.
async fn evalsha(conn: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<u64> {
    calls(conn, "evalsha").await
}

/// Scripts in the server's script cache.
async fn cached_scripts(conn: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<u64> {
    let info: String = redis::cmd("INFO").arg("memory").query_async(conn).await?;
    info.lines()
        .find_map(|l| l.strip_prefix("number_of_cached_scripts:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no number_of_cached_scripts in INFO"))
}

/// Polls `call` once, so that it has been sent or queued, and checks that it could not
/// finish without a reply.
async fn poll_once<F: Future + Unpin>(call: &mut F)
where
    F::Output: std::fmt::Debug,
{
    if let std::task::Poll::Ready(out) = futures_util::poll!(call) {
        panic!("a call finished before any reply came: {out:?}");
    }
}

/// Polls each of `calls` once, in order, with the server's replies held back (the
/// first call is sent, and cannot come back before the others have queued behind it),
/// then lets the replies through and returns the calls to be awaited together.
/// (`join_all` alone would not do: with many futures it polls a few dozen, yields, and
/// polls the rest later; and without the replies held, a first call whose thread the
/// machine preempts may have its reply before the next call is polled.)
async fn started<F: Future>(
    proxy: &FaultProxy,
    calls: impl IntoIterator<Item = F>,
) -> JoinAll<Pin<Box<F>>>
where
    F::Output: std::fmt::Debug,
{
    let control = proxy.control();
    control.set_hold_replies(true);
    let mut all = Vec::new();
    for call in calls {
        let mut call = Box::pin(call);
        poll_once(&mut call).await;
        all.push(call);
    }
    control.set_hold_replies(false);
    join_all(all)
}

/// A client through a proxy that can hold the server's replies back (see [`started`]).
async fn client(server: &RedisServer, coalesce: bool) -> anyhow::Result<(FaultProxy, Client)> {
    let proxy = FaultProxy::start(server.port()).await?;
    let client = Client::builder(&proxy.url())
        .coalesce_calls(coalesce)
        .connect()
        .await?;
    Ok((proxy, client))
}

/// Acquires, then releases, 64 locks of kind `L` at once; returns the script calls the
/// acquires and the releases cost.
async fn pairs_at_once<L, F>(coalesce: bool, make: F) -> anyhow::Result<(u64, u64)>
where
    L: DistributedLock,
    L::Guard: Fenced + std::fmt::Debug,
    F: Fn(&Client, &str) -> ferrisson_redis::Result<L>,
{
    let server = RedisServer::start()?;
    let (proxy, client) = client(&server, coalesce).await?;
    let mut conn = raw(&server).await?;
    let locks = (0..64)
        .map(|i| make(&client, &format!("pairs-{i}")))
        .collect::<ferrisson_redis::Result<Vec<_>>>()?;
    let start = evalsha(&mut conn).await?;
    let acquires = started(&proxy, locks.iter().map(DistributedLock::try_lock)).await;
    let guards = acquires
        .await
        .into_iter()
        .collect::<ferrisson_redis::Result<Vec<_>>>()?;
    let after_acquires = evalsha(&mut conn).await?;
    let mut tokens = Vec::new();
    let mut held = Vec::new();
    for guard in guards {
        let guard = guard.ok_or_else(|| anyhow::anyhow!("a free lock was refused"))?;
        tokens.push(guard.fencing_token());
        held.push(guard);
    }
    // A batch reads the clock once, and on one server every lock shares one floor:
    // each token is a clock reading or counted up from one, and no two are equal.
    assert!(tokens.iter().all(|t| t.get() > 1_700_000_000_000_000));
    let distinct: HashSet<_> = tokens.iter().collect();
    assert_eq!(distinct.len(), tokens.len(), "a token handed out twice");
    let releases = started(&proxy, held.into_iter().map(Guard::unlock)).await;
    for released in releases.await {
        released?;
    }
    let after_releases = evalsha(&mut conn).await?;
    for (lock, before) in locks.iter().zip(tokens) {
        let again = lock
            .try_lock()
            .await?
            .ok_or_else(|| anyhow::anyhow!("{} was left held", lock.name()))?;
        assert!(
            again.fencing_token() > before,
            "{}'s token went back",
            lock.name()
        );
    }
    Ok((after_acquires - start, after_releases - after_acquires))
}

#[tokio::test]
async fn calls_that_meet_one_in_flight_go_as_one_batch() -> anyhow::Result<()> {
    // One call alone, then the other 63 together: two script calls each way.
    assert_eq!(pairs_at_once(true, Client::lock).await?, (2, 2));
    assert_eq!(pairs_at_once(true, Client::simple_lock).await?, (2, 2));
    // Coalescing off: one script call per lock each way.
    assert_eq!(pairs_at_once(false, Client::lock).await?, (64, 64));
    assert_eq!(pairs_at_once(false, Client::simple_lock).await?, (64, 64));
    Ok(())
}

/// A call that finds none in flight is the single script, as without coalescing; a batch
/// is the batch form, loaded (like any script) when the server's cache lost it.
#[tokio::test]
async fn a_lone_call_is_the_single_script_and_a_batch_survives_a_flushed_cache()
-> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let (proxy, client) = client(&server, true).await?;
    let mut conn = raw(&server).await?;
    let lock = client.lock("alone")?;
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await?;
    for _ in 0..5 {
        let guard = lock
            .try_lock()
            .await?
            .ok_or_else(|| anyhow::anyhow!("refused"))?;
        guard.unlock().await?;
    }
    // Only what the calls needed was loaded again: the single acquire and release.
    assert_eq!(cached_scripts(&mut conn).await?, 2);

    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await?;
    let locks = (0..8)
        .map(|i| client.lock(&format!("flushed-{i}")))
        .collect::<ferrisson_redis::Result<Vec<_>>>()?;
    let acquires = started(&proxy, locks.iter().map(Lock::try_lock)).await;
    let mut guards = Vec::new();
    for guard in acquires.await {
        guards.push(guard?.ok_or_else(|| anyhow::anyhow!("refused"))?);
    }
    // The lone call's single script, and the batch form for the other seven.
    assert_eq!(cached_scripts(&mut conn).await?, 2);
    for guard in guards {
        guard.unlock().await?;
    }
    Ok(())
}

/// One batch of calls of different locks, leases and owners: a re-entry of one owner, a
/// fresh owner, another owner refused. Each answer and each key's TTL is its own.
#[tokio::test]
async fn one_batch_mixes_owners_and_leases() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let (proxy, client) = client(&server, true).await?;
    let mut conn = raw(&server).await?;
    let (x, y) = (OwnerId::random(), OwnerId::random());
    let fixed = |name: &str, secs: u64| -> ferrisson_redis::Result<Lock> {
        client
            .lock(name)?
            .with_lease(Lease::Fixed(Duration::from_secs(secs)))
    };
    let locks = [
        fixed("lead", 5)?,
        fixed("a", 10)?.with_owner(x),
        fixed("a", 10)?.with_owner(x),
        fixed("a", 10)?.with_owner(y),
        fixed("b", 20)?,
        fixed("c", 40)?,
    ];
    let start = evalsha(&mut conn).await?;
    let acquires = started(&proxy, locks.iter().map(Lock::try_lock)).await;
    let mut results = acquires.await.into_iter();
    let mut next = || results.next().ok_or_else(|| anyhow::anyhow!("missing"));
    let lead = next()??.ok_or_else(|| anyhow::anyhow!("lead refused"))?;
    let a1 = next()??.ok_or_else(|| anyhow::anyhow!("x refused"))?;
    let a2 = next()??.ok_or_else(|| anyhow::anyhow!("x's re-entry refused"))?;
    assert!(next()??.is_none(), "y was granted a lock x holds");
    let b = next()??.ok_or_else(|| anyhow::anyhow!("b refused"))?;
    let c = next()??.ok_or_else(|| anyhow::anyhow!("c refused"))?;
    assert_eq!(
        evalsha(&mut conn).await? - start,
        2,
        "one lone call, one batch"
    );

    assert_eq!(
        a1.fencing_token(),
        a2.fencing_token(),
        "a re-entry keeps the token"
    );
    assert_eq!(locks[1].hold_count().await?, 2, "x holds a twice");
    for guard in [&lead, &a1, &b, &c] {
        assert!(guard.fencing_token().get() > 1_700_000_000_000_000);
    }
    for (key, secs) in [("{lead}", 5), ("{a}", 10), ("{b}", 20), ("{c}", 40)] {
        let pttl: i64 = conn.pttl(key).await?;
        assert!(
            pttl > (secs - 2) * 1000 && pttl <= secs * 1000,
            "{key} has {pttl} ms left, its lease is {secs} s"
        );
    }
    for guard in [lead, a1, a2, b, c] {
        guard.unlock().await?;
    }
    Ok(())
}

/// The acquires of a batch share the server's one fencing floor, read and written once
/// per batch: with the floor ahead of the clock, every token of the lone calls and the
/// batches counts up from it by one, none twice, and the floor ends at the highest.
#[tokio::test]
async fn batched_tokens_count_up_from_the_one_floor() -> anyhow::Result<()> {
    const EACH: u64 = 8;
    let server = RedisServer::start()?;
    let (proxy, client) = client(&server, true).await?;
    let mut conn = raw(&server).await?;
    client.lock("seed")?.lock().await?.unlock().await?;
    let floors: Vec<String> = conn.keys("ferrisson:fence:*").await?;
    assert_eq!(floors.len(), 1, "one floor for every name: {floors:?}");
    // As if a server whose clock ran an hour fast had handed out the last token.
    let ahead = conn.get::<_, u64>(&floors[0]).await? + 3_600_000_000;
    let () = conn.set(&floors[0], ahead).await?;
    let locks = (0..EACH)
        .map(|i| client.lock(&format!("lock-{i}")))
        .collect::<ferrisson_redis::Result<Vec<_>>>()?;
    let simple = (0..EACH)
        .map(|i| client.simple_lock(&format!("simple-{i}")))
        .collect::<ferrisson_redis::Result<Vec<_>>>()?;
    let start = evalsha(&mut conn).await?;
    let lock_acquires = started(&proxy, locks.iter().map(Lock::try_lock)).await;
    let simple_acquires = started(&proxy, simple.iter().map(SimpleLock::try_lock)).await;
    let mut tokens = Vec::new();
    for guard in lock_acquires.await {
        let guard = guard?.ok_or_else(|| anyhow::anyhow!("a free lock was refused"))?;
        tokens.push(guard.fencing_token().get());
    }
    for guard in simple_acquires.await {
        let guard = guard?.ok_or_else(|| anyhow::anyhow!("a free lock was refused"))?;
        tokens.push(guard.fencing_token().get());
    }
    assert_eq!(
        evalsha(&mut conn).await? - start,
        4,
        "per kind one lone call and one batch"
    );
    tokens.sort_unstable();
    let expected: Vec<u64> = (1..=2 * EACH).map(|i| ahead + i).collect();
    assert_eq!(tokens, expected);
    assert_eq!(conn.get::<_, u64>(&floors[0]).await?, ahead + 2 * EACH);
    Ok(())
}

/// Semaphores' acquires and releases batch the same way; a batch grants no more permits
/// than there are.
#[tokio::test]
async fn semaphore_calls_batch_and_grant_no_more_than_there_are() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let (proxy, client) = client(&server, true).await?;
    let mut conn = raw(&server).await?;
    let semaphore = client.semaphore("permits")?;
    semaphore.try_set_permits(10).await?;
    let start = evalsha(&mut conn).await?;
    let acquires = started(&proxy, (0..16).map(|_| semaphore.try_acquire())).await;
    let mut permits = Vec::new();
    for permit in acquires.await {
        permits.extend(permit?);
    }
    assert_eq!(permits.len(), 10);
    let after_acquires = evalsha(&mut conn).await?;
    assert_eq!(after_acquires - start, 2);
    let releases = started(
        &proxy,
        permits
            .into_iter()
            .map(ferrisson_redis::SemaphorePermit::release),
    )
    .await;
    for released in releases.await {
        released?;
    }
    assert_eq!(evalsha(&mut conn).await? - after_acquires, 2);
    assert_eq!(semaphore.available_permits().await?, 10);

    let expirable = client.expirable_semaphore("leased")?;
    expirable.try_set_permits(10).await?;
    let start = evalsha(&mut conn).await?;
    let acquires = started(&proxy, (0..16).map(|_| expirable.try_acquire())).await;
    let mut permits = Vec::new();
    for permit in acquires.await {
        permits.extend(permit?);
    }
    assert_eq!(permits.len(), 10);
    let after_acquires = evalsha(&mut conn).await?;
    assert_eq!(after_acquires - start, 2);
    let releases = started(
        &proxy,
        permits
            .into_iter()
            .map(ferrisson_redis::ExpirablePermit::release),
    )
    .await;
    for released in releases.await {
        released?;
    }
    assert_eq!(evalsha(&mut conn).await? - after_acquires, 2);
    assert_eq!(expirable.available_permits().await?, 10);
    Ok(())
}

/// Calls of one script with different numbers of arguments share a batch, each read at
/// its own offsets: an expirable semaphore's acquire carries one argument per permit.
#[tokio::test]
async fn calls_of_different_shapes_share_a_batch() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let (proxy, client) = client(&server, true).await?;
    let mut conn = raw(&server).await?;
    let expirable = client.expirable_semaphore("mixed")?;
    expirable.try_set_permits(10).await?;
    let start = evalsha(&mut conn).await?;
    // The first goes alone; the other four, wanting 2, 3, 4 and 1 permits, as one batch,
    // in which the last finds none left.
    let wanted = [1, 2, 3, 4, 1];
    let acquires = started(&proxy, wanted.map(|n| expirable.try_acquire_many(n))).await;
    // The permits are held until the end: a dropped permit is released.
    let granted = acquires.await.into_iter().collect::<Result<Vec<_>, _>>()?;
    let counts: Vec<_> = granted.iter().map(|p| p.as_ref().map(Vec::len)).collect();
    assert_eq!(counts, [Some(1), Some(2), Some(3), Some(4), None]);
    assert_eq!(evalsha(&mut conn).await? - start, 2);
    assert_eq!(expirable.available_permits().await?, 0);
    Ok(())
}

/// A call whose caller stops waiting while it is queued is never sent: its lock's keys
/// (the hold, and the fencing floor a grant raises) never appear.
#[tokio::test]
async fn a_call_dropped_while_queued_is_never_sent() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let (proxy, client) = client(&server, true).await?;
    let mut conn = raw(&server).await?;
    let lead = client.lock("lead")?;
    let cancelled = client.lock("cancelled")?;
    let mut first = Box::pin(lead.try_lock());
    let mut queued = Box::pin(cancelled.try_lock());
    // Replies held, so that the first call is still in flight when the second comes.
    proxy.control().set_hold_replies(true);
    poll_once(&mut first).await;
    poll_once(&mut queued).await;
    drop(queued);
    proxy.control().set_hold_replies(false);
    let guard = first
        .await?
        .ok_or_else(|| anyhow::anyhow!("lead refused"))?;
    // A later call of the same script is sent after any batch the dropped call could
    // have been in, and has answered once this one has.
    let after = client
        .lock("after")?
        .try_lock()
        .await?
        .ok_or_else(|| anyhow::anyhow!("after refused"))?;
    assert!(
        !conn.exists::<_, bool>("{cancelled}").await?,
        "the hold was written"
    );
    // The one fencing floor of the server holds the last token handed out: none went
    // to the dropped call.
    let floors: Vec<String> = conn.keys("ferrisson:fence:*").await?;
    assert_eq!(floors.len(), 1, "{floors:?}");
    let floor: u64 = conn.get(&floors[0]).await?;
    assert_eq!(floor, after.fencing_token().get());
    assert!(after.fencing_token() > guard.fencing_token());
    after.unlock().await?;
    guard.unlock().await?;
    Ok(())
}

/// A client through `proxy` whose calls give up after `timeout`.
async fn through(proxy: &FaultProxy, timeout: Duration) -> anyhow::Result<Client> {
    Ok(Client::builder(&proxy.url())
        .coalesce_calls(true)
        .response_timeout(timeout)
        .connect()
        .await?)
}

/// Long enough that the test's own steps fit in it on a loaded machine, short enough
/// for the tests that wait for it to run out.
const TIMEOUT: Duration = Duration::from_secs(2);

/// Holds replies back, sends `lead` alone and queues `members` behind it: the members go
/// as one batch while the lead is still in flight, and the reply of each is held. Returns
/// once the server has run that batch, dropping the lead (its undo goes out when its
/// reply comes, if ever).
async fn batch_in_flight_with_reply_held<Fut: Future<Output: std::fmt::Debug> + Unpin>(
    lead: impl Future<Output = ferrisson_redis::Result<Option<LockGuard>>>,
    members: &mut [&mut Fut],
    control: &ProxyControl,
    conn: &mut redis::aio::MultiplexedConnection,
) -> anyhow::Result<()> {
    let start = evalsha(conn).await?;
    control.set_hold_replies(true);
    let mut lead = pin!(lead);
    poll_once(&mut lead).await;
    for member in members {
        poll_once(member).await;
    }
    // The lead and the batch, the lead's reply still held.
    until_calls(conn, "evalsha", start + 2).await?;
    Ok(())
}

/// Calls that queue behind a call in flight go without waiting for its reply, up to 8
/// calls in flight; past that, what queues goes when a reply comes.
#[tokio::test]
async fn queued_calls_go_without_waiting_for_the_reply_ahead() -> anyhow::Result<()> {
    const IN_FLIGHT: u64 = 8;
    let server = RedisServer::start()?;
    let (proxy, client) = client(&server, true).await?;
    let control = proxy.control();
    let mut conn = raw(&server).await?;
    let locks = (0..IN_FLIGHT + 2)
        .map(|i| client.simple_lock(&format!("wave-{i}")))
        .collect::<ferrisson_redis::Result<Vec<_>>>()?;
    let start = evalsha(&mut conn).await?;
    control.set_hold_replies(true);
    let mut calls = Vec::new();
    for (sent, lock) in (1..).zip(&locks) {
        let mut call = Box::pin(lock.try_lock());
        poll_once(&mut call).await;
        calls.push(call);
        if sent <= IN_FLIGHT {
            // Alone (the first) or as a batch of one, every reply so far held.
            until_calls(&mut conn, "evalsha", start + sent).await?;
        }
    }
    control.set_hold_replies(false);
    let mut guards = Vec::new();
    for call in join_all(calls).await {
        guards.push(call?.ok_or_else(|| anyhow::anyhow!("a free lock was refused"))?);
    }
    // The last two queued while 8 were in flight: one batch, after the first reply.
    assert_eq!(evalsha(&mut conn).await? - start, IN_FLIGHT + 1);
    for guard in guards {
        guard.unlock().await?;
    }
    Ok(())
}

/// A member dropped while its batch is in flight is the case of a single call dropped in
/// flight: the call ran, its reply is lost, and the primitive's undo removes its hold.
/// The other member gets its grant.
#[tokio::test]
async fn a_call_dropped_while_its_batch_is_in_flight_is_undone() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let proxy = FaultProxy::start(server.port()).await?;
    let control = proxy.control();
    let client = through(&proxy, TIMEOUT).await?;
    let mut conn = raw(&server).await?;
    let lead = client.lock("lead")?;
    let dropped = client.lock("dropped")?;
    let kept = client.lock("kept")?;
    let mut dropped_call = Box::pin(dropped.try_lock());
    let mut kept_call = Box::pin(kept.try_lock());
    batch_in_flight_with_reply_held(
        lead.try_lock(),
        &mut [&mut dropped_call, &mut kept_call],
        &control,
        &mut conn,
    )
    .await?;
    drop(dropped_call);
    control.set_hold_replies(false);
    let guard = within(kept_call)
        .await?
        .ok_or_else(|| anyhow::anyhow!("kept refused"))?;
    // The batch ran: "dropped" was granted, and its undo takes it back.
    for lock in [&lead, &dropped] {
        assert!(
            within(async {
                while lock.is_locked().await? {
                    tokio::task::yield_now().await;
                }
                anyhow::Ok(())
            })
            .await
            .is_ok(),
            "{} was left held",
            lock.name()
        );
    }
    guard.unlock().await?;
    Ok(())
}

/// A batch whose reply never comes in time: every member reports the error (a timeout is
/// never resent) and each one's undo leaves no hold behind.
#[tokio::test]
async fn a_batch_whose_reply_is_lost_fails_each_member_and_leaves_no_hold() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let proxy = FaultProxy::start(server.port()).await?;
    let control = proxy.control();
    let client = through(&proxy, TIMEOUT).await?;
    let mut conn = raw(&server).await?;
    let lead = client.lock("lead")?;
    let locks = (0..4)
        .map(|i| client.simple_lock(&format!("lost-{i}")))
        .collect::<ferrisson_redis::Result<Vec<SimpleLock>>>()?;
    let mut members = pin!(join_all(locks.iter().map(SimpleLock::try_lock)));
    batch_in_flight_with_reply_held(lead.try_lock(), &mut [&mut members], &control, &mut conn)
        .await?;
    let outcomes = within(async { anyhow::Ok(members.await) }).await?;
    control.set_hold_replies(false);
    for outcome in outcomes {
        assert!(
            outcome.is_err(),
            "a member whose reply was lost answered {outcome:?}"
        );
    }
    for lock in &locks {
        let key = format!("{{{}}}", lock.name());
        assert!(
            within(async {
                while conn.clone().exists::<_, bool>(&key).await? {
                    tokio::task::yield_now().await;
                }
                anyhow::Ok(())
            })
            .await
            .is_ok(),
            "{key} was left held"
        );
    }
    Ok(())
}

/// A batch cut off by a dropped connection: the fresh acquires (safe to resend) are sent
/// once more alone and granted exactly once; the acquire under a caller-chosen owner (a
/// resend could count a second hold) reports the error, and holds at most one hold.
#[tokio::test]
async fn a_batch_cut_off_resends_only_what_is_safe_to_resend() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let proxy = FaultProxy::start(server.port()).await?;
    let control = proxy.control();
    let client = through(&proxy, TIMEOUT).await?;
    let mut conn = raw(&server).await?;
    let lead = client.lock("lead")?;
    let owner = OwnerId::random();
    let locks = [
        client.lock("fresh-1")?,
        client.lock("fresh-2")?,
        client.lock("chosen")?.with_owner(owner),
    ];
    let mut members = pin!(join_all(locks.iter().map(Lock::try_lock)));
    batch_in_flight_with_reply_held(lead.try_lock(), &mut [&mut members], &control, &mut conn)
        .await?;
    let connections = control.accepted_connections();
    control.reset_all();
    // Replies stay held until the client has connected again, so the reply of the cut
    // batch cannot slip through; the proxy has no event for a new connection.
    within(async {
        while control.accepted_connections() == connections {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        anyhow::Ok(())
    })
    .await?;
    control.set_hold_replies(false);
    let mut outcomes = within(async { anyhow::Ok(members.await) })
        .await?
        .into_iter();
    let mut next = || outcomes.next().ok_or_else(|| anyhow::anyhow!("missing"));
    for name in ["fresh-1", "fresh-2"] {
        let guard = next()??.ok_or_else(|| anyhow::anyhow!("{name} refused"))?;
        let hash: HashMap<String, String> = conn.hgetall(format!("{{{name}}}")).await?;
        assert_eq!(
            hash.get(&guard.owner().to_string()).map(String::as_str),
            Some("1"),
            "{name}: one hold, granted once: {hash:?}"
        );
        assert_eq!(
            hash.len(),
            2,
            "{name}: its owner and its token only: {hash:?}"
        );
        guard.unlock().await?;
    }
    let chosen = next()?;
    assert!(
        chosen.is_err(),
        "the chosen owner's acquire answered {chosen:?}"
    );
    let hash: HashMap<String, String> = conn.hgetall("{chosen}").await?;
    assert!(
        hash.get(&owner.to_string())
            .is_none_or(|count| count == "1"),
        "the cut acquire was applied twice: {hash:?}"
    );
    Ok(())
}

/// Many tasks of one client, each acquiring and releasing a lock of its own: the calls
/// went in batches (fewer script calls than acquires), and every token grows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_share_batches() -> anyhow::Result<()> {
    const TASKS: u64 = 32;
    const ROUNDS: u64 = 25;
    let server = RedisServer::start()?;
    let (_proxy, client) = client(&server, true).await?;
    let mut conn = raw(&server).await?;
    let start = evalsha(&mut conn).await?;
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let own = client.lock(&format!("own-{task}"))?;
        tasks.push(tokio::spawn(async move {
            let mut last = FencingToken::new(0);
            for _ in 0..ROUNDS {
                let guard = own.lock().await?;
                assert!(
                    guard.fencing_token() > last,
                    "{}'s token went back",
                    own.name()
                );
                last = guard.fencing_token();
                guard.unlock().await?;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        within(task).await??;
    }
    let acquires = TASKS * ROUNDS;
    let calls = evalsha(&mut conn).await? - start;
    assert!(
        calls < acquires,
        "{calls} script calls for {acquires} acquires and as many releases"
    );
    Ok(())
}

/// Tasks taking turns on `lock` (each with its own clone): every grant is exclusive and
/// every token is above the previous holder's.
fn take_turns<L>(
    lock: &L,
    tasks: usize,
    rounds: usize,
) -> Vec<tokio::task::JoinHandle<anyhow::Result<()>>>
where
    L: DistributedLock + Clone + 'static,
    L::Guard: Fenced + 'static,
{
    let inside = Arc::new(AtomicBool::new(false));
    let last = Arc::new(AtomicU64::new(0));
    (0..tasks)
        .map(|_| {
            let lock = lock.clone();
            let inside = Arc::clone(&inside);
            let last = Arc::clone(&last);
            tokio::spawn(async move {
                for _ in 0..rounds {
                    let guard = lock.lock().await?;
                    anyhow::ensure!(!inside.swap(true, Ordering::SeqCst), "two holders");
                    let token = guard.fencing_token().get();
                    let before = last.swap(token, Ordering::SeqCst);
                    anyhow::ensure!(before < token, "token {token} after {before}");
                    tokio::task::yield_now().await;
                    inside.store(false, Ordering::SeqCst);
                    guard.unlock().await?;
                }
                Ok(())
            })
        })
        .collect()
}

/// Many tasks of one client waiting for one lock, their attempts and releases going in
/// batches: every grant is exclusive, and tokens grow.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn grants_in_batches_stay_exclusive() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let (_proxy, client) = client(&server, true).await?;
    let mut tasks = take_turns(&client.simple_lock("shared")?, 16, 10);
    tasks.extend(take_turns(&client.lock("shared-reentrant")?, 16, 10));
    for task in tasks {
        within(task).await??;
    }
    Ok(())
}

/// Runs a blocking test-kit call (starting servers, a failover) where the runtime allows
/// it.
fn blocking<T>(f: impl FnOnce() -> std::io::Result<T>) -> anyhow::Result<T> {
    Ok(tokio::task::block_in_place(f)?)
}

/// Who holds one lock inside the critical section: a holder may enter only when the one
/// inside has been told it lost the lock.
#[derive(Default)]
struct Inside(std::sync::Mutex<Option<Arc<LockGuard>>>);

impl Inside {
    fn enter(&self, guard: &Arc<LockGuard>) -> anyhow::Result<()> {
        let mut inside = self.0.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        if let Some(other) = inside.as_ref() {
            anyhow::ensure!(
                !other.is_held(),
                "token {} granted while token {} is held",
                guard.fencing_token(),
                other.fencing_token()
            );
        }
        *inside = Some(Arc::clone(guard));
        Ok(())
    }

    fn leave(&self) -> anyhow::Result<Option<Arc<LockGuard>>> {
        Ok(self
            .0
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .take())
    }
}

/// Batches spanning a Sentinel failover: tasks of one client (grants acknowledged by both
/// replicas, so the promoted one has them) keep taking four shared locks while the
/// sentinels fail the master over. Every acquire ends granted or with an error, work goes
/// on after the failover, and no lock has two holders that both believe they hold it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batches_spanning_a_failover_never_double_grant() -> anyhow::Result<()> {
    const TASKS: usize = 16;
    let group = blocking(ferrisson_testkit::SentinelGroup::start)?;
    let client = Client::builder(&group.url())
        .coalesce_calls(true)
        .watchdog_lease(Duration::from_secs(3))
        .response_timeout(Duration::from_millis(800))
        .replica_acks(2, Duration::from_millis(500))
        .connect()
        .await?;
    let sections: Arc<Vec<Inside>> = Arc::new((0..4).map(|_| Inside::default()).collect());
    let grants = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let lock = client.lock(&format!("failover-{}", task % 4))?;
        let (sections, grants, stop) = (
            Arc::clone(&sections),
            Arc::clone(&grants),
            Arc::clone(&stop),
        );
        tasks.push(tokio::spawn(async move {
            let inside = &sections[task % 4];
            let mut errors = 0_u64;
            while !stop.load(Ordering::SeqCst) {
                match lock.lock_timeout(Duration::from_secs(5)).await {
                    Ok(Some(guard)) => {
                        let guard = Arc::new(guard);
                        inside.enter(&guard)?;
                        grants.fetch_add(1, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        if let Some(guard) = inside.leave()? {
                            drop(guard);
                        }
                        if let Ok(guard) = Arc::try_unwrap(guard) {
                            // A release cut by the failover is the lease's to end.
                            let _ = guard.unlock().await;
                        }
                    }
                    Ok(None) => {}
                    Err(_) => {
                        errors += 1;
                        // Pacing while the master is away, not synchronisation.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
            anyhow::Ok(errors)
        }));
    }
    let grants_reach = |n: u64| {
        let grants = Arc::clone(&grants);
        within(async move {
            while grants.load(Ordering::SeqCst) < n {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            anyhow::Ok(())
        })
    };
    grants_reach(100).await?;
    let old = blocking(|| group.master())?;
    let new = blocking(|| group.failover())?;
    assert_ne!(new, old);
    let before = grants.load(Ordering::SeqCst);
    grants_reach(before + 100).await?;
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        tokio::time::timeout(HANG * 2, task).await???;
    }
    Ok(())
}

#[test]
fn hang_bound_is_generous() {
    assert!(HANG >= TIMEOUT * 4);
}

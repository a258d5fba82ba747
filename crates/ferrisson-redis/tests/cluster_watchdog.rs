//! The watchdog on a Redis Cluster renews per node, not per hash slot: holds of every
//! layout spread over the masters' slots are renewed with one script call per 100 holds
//! of a master and round (sent together, one request per master),
//! each hold keeps its own result (one found gone is lost, the others are not), and holds
//! whose slot moves (half-way, answered with `ASK`; then for good, with `MOVED`) stay
//! renewed where the slot went.

use std::time::Duration;

use anyhow::Context as _;
use ferrisson_redis::{Client, Lease, LockGuard};
use ferrisson_testkit::{RedisCluster, key_slot};

/// The clients' watchdog lease: renewals every 300 ms, several rounds per test.
const LEASE: Duration = Duration::from_millis(900);
/// Locks held at once: about 40 per master, in as many slots (names rarely share one).
const LOCKS: usize = 120;

async fn client(cluster: &RedisCluster) -> anyhow::Result<Client> {
    Ok(Client::builder(&cluster.url())
        .watchdog_lease(LEASE)
        .connect()
        .await?)
}

fn blocking<T>(f: impl FnOnce() -> std::io::Result<T>) -> anyhow::Result<T> {
    Ok(tokio::task::block_in_place(f)?)
}

/// `EVALSHA` calls the masters ran since their counters were reset.
fn script_calls(cluster: &RedisCluster) -> anyhow::Result<u64> {
    let mut calls = 0;
    for master in blocking(|| cluster.masters())? {
        let reply = blocking(|| cluster.nodes()[master].query(&["INFO", "commandstats"]))?;
        let info = reply.text().context("INFO commandstats gave no text")?;
        calls += info
            .lines()
            .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(Ok(0), str::parse::<u64>)?;
    }
    Ok(calls)
}

fn reset_stats(cluster: &RedisCluster) -> anyhow::Result<()> {
    for master in blocking(|| cluster.masters())? {
        blocking(|| cluster.nodes()[master].command(&["CONFIG", "RESETSTAT"]))?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_go_one_call_per_hundred_holds_of_a_master_and_round() -> anyhow::Result<()> {
    let cluster = blocking(RedisCluster::start)?;
    let client = client(&cluster).await?;
    // Over 100 per master: each master's holds take two calls, in one request.
    let locks = 360;
    let mut guards = Vec::new();
    for i in 0..locks {
        guards.push(client.lock(&format!("node-renewal:{i}"))?.lock().await?);
    }
    // The other layouts in the same calls: a reader, a simple lock, an expirable permit.
    let reader = client.rwlock("node-renewal:rw")?.read().await?;
    let simple = client
        .simple_lock("node-renewal:simple")?
        .with_lease(Lease::Watchdog)?
        .lock()
        .await?;
    let semaphore = client.expirable_semaphore("node-renewal:xsem")?;
    semaphore.try_set_permits(1).await?;
    let permit = semaphore.acquire().await?;
    let keys: Vec<String> = (0..locks)
        .map(|i| format!("{{node-renewal:{i}}}"))
        .chain(
            ["rw", "simple", "xsem"]
                .iter()
                .map(|name| format!("{{node-renewal:{name}}}")),
        )
        .collect();
    let slots: std::collections::BTreeSet<u16> = keys.iter().map(key_slot).collect();
    anyhow::ensure!(slots.len() > 300, "the names share too few slots");
    // Script calls per round: one per 100 holds of each master.
    let mut per_master = std::collections::BTreeMap::<usize, u64>::new();
    for key in &keys {
        *per_master
            .entry(blocking(|| cluster.master_of_key(key))?)
            .or_default() += 1;
    }
    let calls_per_round: u64 = per_master.values().map(|n| n.div_ceil(100)).sum();

    reset_stats(&cluster)?;
    let window = LEASE * 3;
    tokio::time::sleep(window).await;
    let calls = script_calls(&cluster)?;

    anyhow::ensure!(guards.iter().all(LockGuard::is_held), "a lock was lost");
    anyhow::ensure!(
        reader.is_held() && simple.is_held() && permit.is_held(),
        "a hold of another layout was lost"
    );
    // Holds falling due within lease/6 of each other renew together: at most one round
    // per lease/6, plus one at each end of the window. One call per 100 holds of a master
    // per round; renewing per slot would take over 300 per round.
    let most_rounds = (window.as_millis() / (LEASE / 6).as_millis()) as u64 + 2;
    anyhow::ensure!(
        calls <= most_rounds * calls_per_round,
        "{calls} script calls in {window:?}: more than {calls_per_round} per round"
    );
    anyhow::ensure!(
        calls >= calls_per_round,
        "no renewal ran ({calls} script calls)"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_found_gone_is_lost_and_the_others_of_its_call_are_not() -> anyhow::Result<()> {
    let cluster = blocking(RedisCluster::start)?;
    let client = client(&cluster).await?;
    let mut guards = Vec::new();
    for i in 0..LOCKS {
        guards.push(client.lock(&format!("node-loss:{i}"))?.lock().await?);
    }
    // Taken from under its holder: the next renewal finds it gone.
    let victim = guards.swap_remove(7);
    let key = "{node-loss:7}";
    let master = blocking(|| cluster.master_of_key(key))?;
    blocking(|| cluster.nodes()[master].command(&["DEL", key]))?;
    tokio::time::timeout(LEASE * 4, victim.lost())
        .await
        .context("the lock whose key was deleted was not reported lost")?;
    tokio::time::sleep(LEASE * 2).await;
    anyhow::ensure!(
        guards.iter().all(LockGuard::is_held),
        "a lock renewed in the same call as the lost one was lost too"
    );
    for guard in guards {
        guard.unlock().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_stay_renewed_while_their_slot_moves() -> anyhow::Result<()> {
    let cluster = blocking(RedisCluster::start)?;
    let client = client(&cluster).await?;
    let mut guards = Vec::new();
    for i in 0..LOCKS {
        guards.push(client.lock(&format!("node-move:{i}"))?.lock().await?);
    }
    // Two locks of one slot: one moves to the new master now, the other only when the
    // migration finishes.
    let slot = key_slot("{node-move:early}");
    // Names hash evenly over the 16,384 slots: a million tries find one many times over.
    let late = (0..1_000_000)
        .map(|i| format!("node-move:late:{i}"))
        .find(|name| key_slot(format!("{{{name}}}")) == slot)
        .context("no name in the slot")?;
    let moved_early = client.lock("node-move:early")?.lock().await?;
    let moved_late = client.lock(&late)?.lock().await?;
    tokio::time::sleep(LEASE).await;

    let source = blocking(|| cluster.master_of_slot(slot))?;
    let target = blocking(|| cluster.masters())?
        .into_iter()
        .find(|&m| m != source)
        .context("no other master")?;
    let migration = blocking(|| cluster.begin_slot_migration(slot, target))?;
    // Half-way: the source answers ASK for the moved key, serves the other.
    blocking(|| migration.move_keys(&["{node-move:early}"]))?;
    tokio::time::sleep(LEASE * 2).await;
    anyhow::ensure!(
        moved_early.is_held() && moved_late.is_held(),
        "a hold was lost while its slot was half-way to another master"
    );
    blocking(|| migration.move_all_keys().map(drop))?;
    blocking(|| migration.finish())?;
    tokio::time::sleep(LEASE * 2).await;
    anyhow::ensure!(
        moved_early.is_held() && moved_late.is_held(),
        "a hold was lost after its slot moved"
    );
    anyhow::ensure!(guards.iter().all(LockGuard::is_held), "a lock was lost");
    // Renewed on the new master: the lease there is fresh.
    let late_key = format!("{{{late}}}");
    let pttl = blocking(|| cluster.nodes()[target].query(&["PTTL", &late_key]))?
        .integer()
        .context("PTTL gave no integer")?;
    anyhow::ensure!(
        pttl > 0,
        "the moved lock has no lease on its new master ({pttl})"
    );
    moved_early.unlock().await?;
    moved_late.unlock().await?;
    Ok(())
}

//! A Sentinel failover's steps, polled from the sentinels (no event tells the scenarios):
//! every sentinel having read each server's role, a failover started at one sentinel and
//! the first sentinel that names the new master.

use std::time::{Duration, Instant};

use ferrisson_testkit::{RedisServer, Reply, SentinelGroup};

/// How long the sentinels may take to read every server's role after a failover.
const ROLES_PATIENCE: Duration = Duration::from_secs(30);

/// Waits until every running sentinel has read, from each server's own `INFO`, the role
/// it has now (`role-reported` in `SENTINEL MASTER` and `SENTINEL REPLICAS`).
///
/// The test kit's `failover()` starts as soon as the sentinels agree on the master; a
/// sentinel that has not yet read the previous master's `INFO` since it was demoted still
/// has it reporting `master`, for longer than its patience, and "corrects" the next
/// promoted replica back into a replica 70 ms after its promotion: the failover then
/// aborts after `failover-timeout` (`-failover-abort-slave-timeout` in the sentinel's
/// log): 15 failovers of a 100-iteration run without this wait had to be asked again,
/// none of one with it.
pub(crate) fn wait_until_roles_reported(group: &SentinelGroup) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + ROLES_PATIENCE;
    loop {
        match roles_reported(group) {
            Ok(()) => return Ok(()),
            Err(reason) if std::time::Instant::now() >= deadline => {
                anyhow::bail!(
                    "the sentinels did not read every role within {ROLES_PATIENCE:?}: {reason}"
                )
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Whether every running sentinel sees the master reporting `master` and every replica
/// reporting `slave`; otherwise what is not so yet.
fn roles_reported(group: &SentinelGroup) -> Result<(), String> {
    let name = group.master_name();
    for sentinel in group
        .sentinels()
        .iter()
        .filter(|s| s.is_running() && !s.is_paused())
    {
        let port = sentinel.port();
        for (subcommand, role) in [("MASTER", "master"), ("REPLICAS", "slave")] {
            let reply = sentinel
                .query(&["SENTINEL", subcommand, name])
                .map_err(|e| format!("sentinel {port}: {e}"))?;
            let entries: Vec<&Reply> = if subcommand == "MASTER" {
                vec![&reply]
            } else {
                reply.elements().unwrap_or_default().iter().collect()
            };
            for entry in entries {
                let fields = entry.elements().unwrap_or_default();
                let reported = fields
                    .chunks_exact(2)
                    .find(|pair| pair[0].text() == Some("role-reported"))
                    .and_then(|pair| pair[1].text());
                if reported != Some(role) {
                    return Err(format!(
                        "sentinel {port}: a {role} in its configuration reports {reported:?}"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// How long a started failover may take until a sentinel names the promoted replica.
const PROMOTION_PATIENCE: Duration = Duration::from_secs(15);

/// Sends `SENTINEL FAILOVER` to `sentinel` (again while it has no replica it may promote
/// yet: `NOGOODSLAVE` right after the group settled), then asks every running sentinel
/// until one names a master other than the server on `old_port`; returns that master's
/// port. That sentinel is the one leading the failover: it names the promoted replica
/// (`GET-MASTER-ADDR-BY-NAME`) as soon as the replica took the role, long before the
/// failover ends.
///
/// # Errors
///
/// When the sentinel refuses, or no sentinel names a new master within 15 seconds (a
/// failover the sentinels let lapse: the caller may ask again).
pub(crate) fn start_failover(
    group: &SentinelGroup,
    sentinel: &RedisServer,
    old_port: u16,
) -> std::io::Result<u16> {
    let name = group.master_name();
    let deadline = Instant::now() + PROMOTION_PATIENCE;
    loop {
        match sentinel.query(&["SENTINEL", "FAILOVER", name])? {
            Reply::Error(e) if e.starts_with("NOGOODSLAVE") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            reply => {
                reply.ok_or_error("SENTINEL FAILOVER")?;
                break;
            }
        }
    }
    while Instant::now() < deadline {
        for sentinel in group
            .sentinels()
            .iter()
            .filter(|s| s.is_running() && !s.is_paused())
        {
            let reply = sentinel.query(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", name])?;
            let port = reply
                .elements()
                .and_then(|address| address.get(1))
                .and_then(Reply::text)
                .and_then(|port| port.parse::<u16>().ok());
            if let Some(port) = port.filter(|&port| port != old_port) {
                return Ok(port);
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Err(std::io::Error::other(format!(
        "no sentinel named a new master within {PROMOTION_PATIENCE:?} of SENTINEL FAILOVER"
    )))
}

//! What a stretch of bench work cost: this process's CPU time, the private Redis server's
//! CPU time, and the commands Redis executed, from two snapshots around it.
//!
//! - client CPU: user + system time of this process (`getrusage(RUSAGE_SELF)`); the
//!   redis-server is another process and is not in it;
//! - Redis CPU: `used_cpu_user` + `used_cpu_sys` of `INFO cpu`: executing commands plus
//!   reading requests and writing replies, plus the server's idle housekeeping (summed
//!   over the masters on a Sentinel group or cluster, see [`Nodes`]);
//! - commands: `INFO commandstats`, which counts the commands clients send *and* the
//!   commands scripts run inside Redis (Redis 7). The snapshots' own `INFO` is left out.
//!   (Its `usec` is not summed here: a script's time includes its inner commands', which
//!   Redis also books on their own, so a sum would count script work twice.)

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use nix::sys::resource::{UsageWho, getrusage};
use redis::aio::MultiplexedConnection;

/// Commands that only a client sends, never a script: script calls and pub/sub
/// (un)subscriptions. What ferrisson's primitives send is exactly these; the commands
/// their scripts run are counted apart.
const REQUEST_COMMANDS: [&str; 12] = [
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "fcall",
    "fcall_ro",
    "subscribe",
    "unsubscribe",
    "ssubscribe",
    "sunsubscribe",
    "psubscribe",
    "punsubscribe",
];

/// User + system CPU time this process has used so far.
pub fn client_cpu() -> anyhow::Result<Duration> {
    let usage = getrusage(UsageWho::RUSAGE_SELF)?;
    let time = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
    };
    Ok(time(usage.user_time()) + time(usage.system_time()))
}

/// `calls` and `usec` of one command in `INFO commandstats`.
#[derive(Clone, Copy, Default)]
pub struct CommandStat {
    pub calls: u64,
    pub usec: f64,
}

/// The Redis nodes whose counters a [`Snapshot`] reads and sums: one server, or every
/// master of a cluster.
pub trait Nodes {
    fn nodes(&mut self) -> &mut [MultiplexedConnection];
}

impl Nodes for MultiplexedConnection {
    fn nodes(&mut self) -> &mut [MultiplexedConnection] {
        std::slice::from_mut(self)
    }
}

/// The counters at one instant.
pub struct Snapshot {
    pub at: Instant,
    pub client_cpu: Duration,
    pub redis_cpu: Duration,
    /// By lower-case command name as Redis reports it (`evalsha`, `client|setinfo`).
    commands: BTreeMap<String, CommandStat>,
}

impl Snapshot {
    /// Reads Redis's counters on every node of `info` (one `INFO cpu commandstats` each,
    /// summed), then this process's CPU time.
    pub async fn take(info: &mut impl Nodes) -> anyhow::Result<Self> {
        let mut redis_cpu = Duration::ZERO;
        let mut commands: BTreeMap<String, CommandStat> = BTreeMap::new();
        for conn in info.nodes() {
            let info: String = redis::cmd("INFO")
                .arg("cpu")
                .arg("commandstats")
                .query_async(conn)
                .await?;
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            redis_cpu += Duration::from_secs_f64(field("used_cpu_user") + field("used_cpu_sys"));
            for line in info.lines() {
                let Some((name, rest)) = line
                    .strip_prefix("cmdstat_")
                    .and_then(|l| l.split_once(':'))
                else {
                    continue;
                };
                let value = |key: &str| {
                    rest.split(',')
                        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                };
                let (Some(calls), Some(usec)) = (
                    value("calls").and_then(|v| v.parse::<u64>().ok()),
                    value("usec").and_then(|v| v.parse::<f64>().ok()),
                ) else {
                    continue;
                };
                let stat = commands.entry(name.to_owned()).or_default();
                stat.calls += calls;
                stat.usec += usec;
            }
        }
        Ok(Self {
            at: Instant::now(),
            client_cpu: client_cpu()?,
            redis_cpu,
            commands,
        })
    }

    /// The counters of one command (zero when Redis has not run it yet).
    pub fn command(&self, name: &str) -> CommandStat {
        self.commands.get(name).copied().unwrap_or_default()
    }
}

/// The difference between two snapshots, or the sum of several such differences.
#[derive(Clone, Default)]
pub struct Cost {
    pub seconds: f64,
    pub client_cpu: Duration,
    pub redis_cpu: Duration,
    /// Calls per command, the snapshots' `INFO` left out.
    pub calls: BTreeMap<String, u64>,
}

impl Cost {
    pub fn between(before: &Snapshot, after: &Snapshot) -> Self {
        let calls = after
            .commands
            .iter()
            .filter(|(name, _)| *name != "info")
            .map(|(name, stat)| (name, stat.calls.saturating_sub(before.command(name).calls)))
            .filter(|&(_, delta)| delta > 0)
            .map(|(name, delta)| (name.clone(), delta))
            .collect();
        Self {
            seconds: (after.at - before.at).as_secs_f64(),
            client_cpu: after.client_cpu.saturating_sub(before.client_cpu),
            redis_cpu: after.redis_cpu.saturating_sub(before.redis_cpu),
            calls,
        }
    }

    /// Adds `other` to this one.
    pub fn add(&mut self, other: &Self) {
        self.seconds += other.seconds;
        self.client_cpu += other.client_cpu;
        self.redis_cpu += other.redis_cpu;
        for (name, calls) in &other.calls {
            *self.calls.entry(name.clone()).or_default() += calls;
        }
    }

    /// Script calls and pub/sub (un)subscriptions: the requests ferrisson's clients sent.
    pub fn requests(&self) -> u64 {
        REQUEST_COMMANDS
            .iter()
            .filter_map(|name| self.calls.get(*name))
            .sum()
    }

    pub fn client_us_per(&self, units: f64) -> f64 {
        self.client_cpu.as_secs_f64() * 1e6 / units
    }

    pub fn redis_us_per(&self, units: f64) -> f64 {
        self.redis_cpu.as_secs_f64() * 1e6 / units
    }

    /// Calls per unit by command, most first, as one table cell: `evalsha 2.00, hset 1.00`.
    /// Commands under 0.01 per unit are left out.
    pub fn calls_per(&self, units: f64) -> String {
        let mut by_count: Vec<(&String, f64)> = self
            .calls
            .iter()
            .map(|(name, &calls)| (name, calls as f64 / units))
            .filter(|&(_, per)| per >= 0.005)
            .collect();
        by_count.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let mut cell = String::new();
        for (name, per) in by_count {
            if !cell.is_empty() {
                cell.push_str(", ");
            }
            let _ = write!(cell, "{name} {per:.2}");
        }
        if cell.is_empty() {
            cell.push('-');
        }
        cell
    }
}

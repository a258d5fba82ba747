//! What the inspecting subcommands (`ls`, `inspect`, `unlock`, `top`) share: their flags,
//! an entry as JSON, and the table they print.

use std::time::{Duration, SystemTime};

use chrono::{DateTime, SecondsFormat, Utc};
use ferrisson::redis::inspect::{Entry, PrimitiveKind, Snapshot};
use ferrisson::redis::{Client, HeldPermit, LeaderInfo, RwHolder, RwLockMode};
use serde_json::{Value, json};

use crate::arguments::{Refused, check_namespace};
use crate::connection::ConnectionArgs;
use crate::terminal::{columns, escaped, padded};

/// The flags every inspecting subcommand takes.
#[derive(Debug, Clone, clap::Args)]
pub struct ScopeArgs {
    #[command(flatten)]
    connection: ConnectionArgs,

    /// Key prefix (the client namespace) whose primitives are looked at
    #[arg(long, default_value = "")]
    pub namespace: String,

    /// Print JSON instead of text (see the command's help for the shape)
    #[arg(long)]
    pub json: bool,

    /// Only this kind: lock, fair_lock, rwlock, simple_lock, semaphore, expirable_semaphore, latch, election, rate_limiter or id_counter (picks one reading of a name that fits two)
    #[arg(long, value_name = "KIND", value_parser = parse_kind)]
    pub kind: Option<PrimitiveKind>,
}

impl ScopeArgs {
    /// Refuses what no connect could use.
    pub fn check(&self) -> Result<(), Refused> {
        self.connection
            .check_redis_only("list, inspect or force-release what it holds")?;
        check_namespace(&self.namespace)
    }

    /// A client with these connection flags and namespace.
    pub async fn connect(&self) -> anyhow::Result<Client> {
        Ok(self
            .connection
            .builder()?
            .namespace(self.namespace.clone())
            .connect()
            .await?)
    }
}

/// Reads `--kind`.
fn parse_kind(text: &str) -> Result<PrimitiveKind, String> {
    text.parse()
        .map_err(|e: ferrisson::redis::Error| e.to_string())
}

/// The help text that says what an entry's JSON holds (`ls`, `inspect`, `top`).
pub const ENTRY_JSON_HELP: &str = "\
JSON: each entry is an object with
  name             the primitive's name (an id counter's: its prefix)
  kind             lock, fair_lock, rwlock, simple_lock, semaphore, expirable_semaphore,
                   latch, election, rate_limiter or id_counter
  ambiguous        true when the name's keys fit two kinds (a positive count without
                   expiry: semaphore or latch); it is then listed once as each
  holders          owner ids (an election: the leader's candidate id; an expirable
                   semaphore: held permit ids)
  holds            hold count (re-entries count; held permits; 1 for a leader)
  ttl_ms           milliseconds until it frees itself unless renewed, or null
  fencing_token    the holder's token (an election: the term), or null
  waiters          a fair lock's queue, a read-write lock's waiting writers, or null
  waiting_clients  clients waiting on its wake-up channel (each once), or null
  snapshot         everything the primitive's own inspect() reports, by kind";

/// One entry as the JSON documented in [`ENTRY_JSON_HELP`].
pub fn entry_json(entry: &Entry) -> Value {
    let snapshot = &entry.snapshot;
    json!({
        "name": entry.name,
        "kind": entry.kind.as_str(),
        "ambiguous": entry.ambiguous,
        "holders": snapshot.holders(),
        "holds": snapshot.hold_count(),
        "ttl_ms": snapshot.ttl().map(millis),
        "fencing_token": snapshot.fencing_token().map(ferrisson::redis::FencingToken::get),
        "waiters": snapshot.waiters(),
        "waiting_clients": entry.waiting_clients,
        "snapshot": snapshot_json(snapshot),
    })
}

/// What each kind's snapshot says, field by field.
fn snapshot_json(snapshot: &Snapshot) -> Value {
    let token =
        |t: Option<ferrisson::redis::FencingToken>| t.map(ferrisson::redis::FencingToken::get);
    let owner = |o: Option<ferrisson::redis::OwnerId>| o.map(|o| o.to_string());
    let ttl = |t: Option<Duration>| t.map(millis);
    match snapshot {
        Snapshot::Lock(info) => json!({
            "holder": owner(info.holder),
            "hold_count": info.hold_count,
            "fencing_token": token(info.fencing_token),
            "ttl_ms": ttl(info.ttl),
        }),
        Snapshot::FairLock(info) => json!({
            "holder": owner(info.holder),
            "hold_count": info.hold_count,
            "fencing_token": token(info.fencing_token),
            "ttl_ms": ttl(info.ttl),
            "queue": info.waiters.iter().map(|w| json!({
                "owner": w.owner.to_string(),
                "ttl_ms": millis(w.ttl),
            })).collect::<Vec<_>>(),
        }),
        Snapshot::RwLock(info) => json!({
            "mode": info.mode.map(|m| match m {
                RwLockMode::Read => "read",
                RwLockMode::Write => "write",
            }),
            "writer": info.writer.as_ref().map(rw_holder_json),
            "readers": info.readers.iter().map(rw_holder_json).collect::<Vec<_>>(),
            "fencing_token": token(info.fencing_token),
            "ttl_ms": ttl(info.ttl),
            "waiting_writers": info.waiting_writers.iter().map(ToString::to_string).collect::<Vec<_>>(),
        }),
        Snapshot::SimpleLock(info) => json!({
            "holder": owner(info.holder),
            "ttl_ms": ttl(info.ttl),
        }),
        Snapshot::Semaphore(info) => json!({
            "available_permits": info.available_permits,
        }),
        Snapshot::ExpirableSemaphore(info) => json!({
            "available_permits": info.available_permits,
            "held_count": info.held_count,
            "held": info.held.iter().map(permit_json).collect::<Vec<_>>(),
        }),
        Snapshot::CountDownLatch(info) => json!({ "count": info.count }),
        Snapshot::Election(info) => json!({
            "leader": info.leader.as_ref().map(leader_json),
            "ttl_ms": ttl(info.ttl),
        }),
        Snapshot::RateLimiter(info) => json!({ "until_full_ms": ttl(info.until_full) }),
        Snapshot::IdCounter(info) => json!({
            "prefix": info.prefix,
            "date": info.date.to_string(),
            "count": info.count,
        }),
        _ => json!({}),
    }
}

fn rw_holder_json(holder: &RwHolder) -> Value {
    json!({
        "owner": holder.owner.to_string(),
        "holds": holder.holds,
        "ttl_ms": millis(holder.ttl),
    })
}

fn permit_json(permit: &HeldPermit) -> Value {
    json!({ "id": permit.id.to_string(), "ttl_ms": millis(permit.ttl) })
}

fn leader_json(leader: &LeaderInfo) -> Value {
    json!({
        "owner": leader.owner.to_string(),
        "candidate": leader.candidate,
        "term": leader.term.get(),
        "since": rfc3339(leader.since),
    })
}

pub fn rfc3339(time: SystemTime) -> String {
    DateTime::<Utc>::from(time).to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A duration as an operator reads it at a glance: `850ms`, `29.8s`, `4m05s`, `2h03m`.
pub fn short_duration(d: Duration) -> String {
    let ms = d.as_millis();
    let s = d.as_secs();
    if ms < 1000 {
        format!("{ms}ms")
    } else if s < 60 {
        format!("{}.{}s", s, d.subsec_millis() / 100)
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s / 60) % 60)
    }
}

/// The table's columns, in order.
const HEADER: [&str; 8] = [
    "NAME", "KIND", "HOLDERS", "HOLDS", "TTL", "TOKEN", "WAITERS", "STATE",
];

/// The entries as a table, one line each under a header, columns padded to fit (by the
/// terminal columns their text takes). Names and holders come from Redis: they are
/// escaped, so a name cannot clear the screen or forge a row.
pub fn table(entries: &[Entry]) -> String {
    let rows: Vec<[String; 8]> = entries.iter().map(row).collect();
    let mut widths = HEADER.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(columns(cell));
        }
    }
    let mut out = String::new();
    for cells in std::iter::once(HEADER.map(str::to_owned)).chain(rows) {
        let mut line = String::new();
        for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                line.push_str(cell);
            } else {
                line.push_str(&padded(cell, width));
                line.push_str("  ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// One entry's cells, escaped.
fn row(entry: &Entry) -> [String; 8] {
    let snapshot = &entry.snapshot;
    let dash = || "-".to_owned();
    let holders = snapshot.holders();
    let holders = match holders.as_slice() {
        [] => dash(),
        [one] => escaped(one),
        [first, rest @ ..] => format!("{}(+{})", escaped(first), rest.len()),
    };
    let kind = if entry.ambiguous {
        format!("{}?", entry.kind)
    } else {
        entry.kind.to_string()
    };
    let holds = match snapshot.hold_count() {
        0 if !entry.kind.is_lock() && entry.kind != PrimitiveKind::ExpirableSemaphore => dash(),
        n => n.to_string(),
    };
    [
        escaped(&entry.name),
        kind,
        holders,
        holds,
        snapshot.ttl().map_or_else(dash, short_duration),
        snapshot
            .fencing_token()
            .map_or_else(dash, |t| t.to_string()),
        waiters(entry).map_or_else(dash, |n| n.to_string()),
        state(snapshot),
    ]
}

/// The WAITERS column: what the primitive records (a fair lock's queue, a read-write
/// lock's waiting writers), else the clients waiting on its channel.
pub fn waiters(entry: &Entry) -> Option<u64> {
    entry
        .snapshot
        .waiters()
        .map(|n| n as u64)
        .or(entry.waiting_clients)
}

/// The STATE column: what a kind has beyond holders (permits, counts, modes).
fn state(snapshot: &Snapshot) -> String {
    match snapshot {
        Snapshot::RwLock(info) => match info.mode {
            Some(RwLockMode::Read) => format!("read by {}", info.readers.len()),
            Some(RwLockMode::Write) => "written".to_owned(),
            None => "free".to_owned(),
        },
        Snapshot::Semaphore(info) => match info.available_permits {
            Some(n) => format!("{n} permits free"),
            None => "deleted".to_owned(),
        },
        Snapshot::ExpirableSemaphore(info) => match info.available_permits {
            Some(n) => format!("{n} permits free"),
            None => "deleted".to_owned(),
        },
        Snapshot::CountDownLatch(info) => format!("{} count-downs left", info.count),
        Snapshot::Election(info) => match &info.leader {
            Some(leader) => format!("since {}", rfc3339(leader.since)),
            None => "nobody leads".to_owned(),
        },
        Snapshot::RateLimiter(info) => match info.until_full {
            Some(_) => "refilling".to_owned(),
            None => "full".to_owned(),
        },
        Snapshot::IdCounter(info) => format!("{} ids on {}", info.count, info.date),
        _ if snapshot.hold_count() > 0 => "held".to_owned(),
        _ => "free".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_at_a_glance() {
        for (ms, text) in [
            (0, "0ms"),
            (850, "850ms"),
            (29_876, "29.8s"),
            (245_000, "4m05s"),
            (7_380_000, "2h03m"),
        ] {
            assert_eq!(short_duration(Duration::from_millis(ms)), text);
        }
    }
}

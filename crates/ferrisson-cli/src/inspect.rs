//! `ferrisson inspect`: everything one primitive's snapshot says.

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;

use ferrisson::redis::inspect::{Entry, PrimitiveKind, Snapshot};
use ferrisson::redis::{Client, RwHolder, RwLockInfo, RwLockMode};

use crate::arguments::{Refused, check_name};
use crate::listing::{ScopeArgs, entry_json, rfc3339, short_duration};
use crate::terminal::{escaped, quoted};

/// Show everything one primitive's snapshot says.
///
/// For the primitive NAME: holders with their holds and leases, fencing token, TTL, queue
/// or waiting writers, permits, counts, the leader and its term. Read-only.
///
/// A name usually holds one primitive. A positive count without expiry may be a
/// semaphore's or a latch's (the two store the same): both readings are shown, and
/// --kind picks one. A name that is also an id prefix shows its day counters too.
///
/// Exits 1 when nothing (of --kind) is called NAME, 125 when Redis cannot be reached (or
/// ferrisson fails otherwise), 2 when an argument is refused (before connecting).
///
/// With --json, one JSON document: an array of the entries found (see below).
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment, after_long_help = crate::listing::ENTRY_JSON_HELP)]
pub struct Args {
    #[command(flatten)]
    scope: ScopeArgs,

    /// The primitive's name
    name: String,
}

impl Args {
    /// Refuses what no run could use, before anything connects.
    pub fn check(&self) -> Result<(), Refused> {
        check_name("<NAME>", &self.name)?;
        self.scope.check()
    }
}

/// Nothing is called the name asked for (exit status 1, not the 125 of a failure).
#[derive(Debug)]
pub struct NotFound(pub String);

impl std::fmt::Display for NotFound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotFound {}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let client = args.scope.connect().await?;
    let entries = find(&client, &args.name, args.scope.kind, "nothing", |_| true).await?;
    let mut out = std::io::stdout().lock();
    if args.scope.json {
        let array: Vec<_> = entries.iter().map(entry_json).collect();
        writeln!(out, "{}", serde_json::Value::Array(array))?;
    } else {
        for (i, entry) in entries.iter().enumerate() {
            if i > 0 {
                writeln!(out)?;
            }
            out.write_all(details(entry).as_bytes())?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The entries called `name` (of `kind`, when given) that `keep` accepts; [`NotFound`]
/// saying there is no `what` called `name` when there is none.
pub async fn find(
    client: &Client,
    name: &str,
    kind: Option<PrimitiveKind>,
    what: &str,
    keep: impl Fn(&Entry) -> bool,
) -> anyhow::Result<Vec<Entry>> {
    let entries: Vec<Entry> = client
        .inspect(name)
        .await?
        .into_iter()
        .filter(|e| kind.is_none_or(|k| e.kind == k) && keep(e))
        .collect();
    if entries.is_empty() {
        let what = kind.map_or_else(|| what.to_owned(), |k| format!("no {k}"));
        let place = match client.namespace() {
            "" => String::new(),
            namespace => format!(" in namespace {}", quoted(namespace)),
        };
        return Err(NotFound(format!("{what} called {}{place}", quoted(name))).into());
    }
    Ok(entries)
}

/// One entry, field by field, as a person reads it.
pub fn details(entry: &Entry) -> String {
    let mut lines = Lines(format!("{} {}\n", entry.kind, quoted(&entry.name)));
    if entry.ambiguous {
        lines.add(
            "note",
            "a count without expiry: a semaphore's or a latch's (--kind picks one)",
        );
    }
    match &entry.snapshot {
        Snapshot::Lock(info) => {
            lines.add("holder", or_none(info.holder));
            lines.add("holds", info.hold_count);
            lines.add("fencing token", or_none(info.fencing_token));
            lines.add("ttl", ttl(info.ttl));
        }
        Snapshot::FairLock(info) => {
            lines.add("holder", or_none(info.holder));
            lines.add("holds", info.hold_count);
            lines.add("fencing token", or_none(info.fencing_token));
            lines.add("ttl", ttl(info.ttl));
            lines.add("queue", info.waiters.len());
            for (i, waiter) in info.waiters.iter().enumerate() {
                let entry_ttl = short_duration(waiter.ttl);
                lines.add(
                    &format!("  {}.", i + 1),
                    format!("{} (entry lives {entry_ttl})", waiter.owner),
                );
            }
        }
        Snapshot::RwLock(info) => rw_lines(&mut lines, info),
        Snapshot::SimpleLock(info) => {
            lines.add("holder", or_none(info.holder));
            lines.add("ttl", ttl(info.ttl));
        }
        Snapshot::Election(info) => match &info.leader {
            Some(leader) => {
                lines.add("leader", escaped(&leader.candidate));
                lines.add("owner", leader.owner);
                lines.add("term", leader.term);
                lines.add("since", rfc3339(leader.since));
                lines.add("ttl", ttl(info.ttl));
            }
            None => lines.add("leader", "none"),
        },
        other => synchronizer_lines(&mut lines, other),
    }
    if let Some(clients) = entry.waiting_clients {
        lines.add("waiting clients", clients);
    }
    lines.0
}

fn rw_lines(lines: &mut Lines, info: &RwLockInfo) {
    let mode = match info.mode {
        Some(RwLockMode::Read) => "read",
        Some(RwLockMode::Write) => "write",
        None => "free",
    };
    lines.add("mode", mode);
    let holder = |h: &RwHolder| {
        format!(
            "{} ({} holds, lease {})",
            h.owner,
            h.holds,
            short_duration(h.ttl)
        )
    };
    if let Some(writer) = &info.writer {
        lines.add("writer", holder(writer));
    }
    lines.add("readers", info.readers.len());
    for reader in &info.readers {
        lines.add("", holder(reader));
    }
    lines.add("fencing token", or_none(info.fencing_token));
    lines.add("ttl", ttl(info.ttl));
    lines.add("waiting writers", info.waiting_writers.len());
    for writer in &info.waiting_writers {
        lines.add("", writer);
    }
}

fn synchronizer_lines(lines: &mut Lines, snapshot: &Snapshot) {
    let permits =
        |n: Option<i64>| n.map_or_else(|| "deleted".to_owned(), |n| format!("{n} permits"));
    match snapshot {
        Snapshot::Semaphore(info) => lines.add("available", permits(info.available_permits)),
        Snapshot::ExpirableSemaphore(info) => {
            lines.add("available", permits(info.available_permits));
            lines.add("held", info.held_count);
            for permit in &info.held {
                let lease = short_duration(permit.ttl);
                lines.add("", format!("{} (lease {lease})", permit.id));
            }
        }
        Snapshot::CountDownLatch(info) => lines.add("count", info.count),
        Snapshot::RateLimiter(info) => lines.add(
            "bucket",
            info.until_full.map_or_else(
                || "full".to_owned(),
                |t| format!("full again in {}", short_duration(t)),
            ),
        ),
        Snapshot::IdCounter(info) => {
            lines.add("date", info.date);
            lines.add("ids", info.count);
        }
        _ => {}
    }
}

/// The text of [`details`], a labelled line at a time.
struct Lines(String);

impl Lines {
    fn add(&mut self, label: &str, value: impl std::fmt::Display) {
        let _ = writeln!(self.0, "  {label:<17}{value}");
    }
}

fn or_none(value: Option<impl std::fmt::Display>) -> String {
    value.map_or_else(|| "none".to_owned(), |v| v.to_string())
}

fn ttl(ttl: Option<std::time::Duration>) -> String {
    ttl.map_or_else(|| "-".to_owned(), short_duration)
}

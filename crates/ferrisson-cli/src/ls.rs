//! `ferrisson ls`: list the primitives of a namespace.

use std::io::Write as _;
use std::process::ExitCode;

use crate::arguments::{Refused, check_pattern};
use crate::listing::{ScopeArgs, entry_json, table};
use crate::terminal::quoted;

/// List what a namespace holds: locks, semaphores, latches, elections, rate limiters, ids.
///
/// Every primitive whose name matches PATTERN, one line each: name, kind, holders, hold
/// count, TTL, fencing token, waiters and state.
///
/// PATTERN is a glob on the names (*, ?, [a-z], \ escapes; default *). Redis is scanned
/// with SCAN ... MATCH (never KEYS), on a cluster every master; each name found is read
/// once. Read-only.
///
/// Columns:
///   HOLDERS  owner ids (an election: the leader's candidate id; an expirable semaphore:
///            held permit ids); (+N) when there are more
///   HOLDS    hold count (re-entries count)
///   TTL      time until it frees itself unless renewed
///   TOKEN    the holder's fencing token (an election: the term)
///   WAITERS  a fair lock's queue, a read-write lock's waiting writers; for the other
///            kinds, the clients waiting on it (each client once, however many of its
///            tasks wait)
/// A kind ending in ? is ambiguous: a positive count without expiry is what a semaphore
/// and a latch both store, so such a name is listed once as each.
///
/// With --json, one JSON document: an array of entries (see below), sorted by name.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment, after_long_help = crate::listing::ENTRY_JSON_HELP)]
pub struct Args {
    #[command(flatten)]
    scope: ScopeArgs,

    /// A glob on the names
    #[arg(default_value = "*")]
    pattern: String,
}

impl Args {
    /// Refuses what no run could use, before anything connects.
    pub fn check(&self) -> Result<(), Refused> {
        check_pattern("[PATTERN]", &self.pattern)?;
        self.scope.check()
    }
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let client = args.scope.connect().await?;
    let mut entries = client.scan(&args.pattern).await?;
    if let Some(kind) = args.scope.kind {
        entries.retain(|e| e.kind == kind);
    }
    let mut out = std::io::stdout().lock();
    if args.scope.json {
        let array: Vec<_> = entries.iter().map(entry_json).collect();
        writeln!(out, "{}", serde_json::Value::Array(array))?;
    } else if entries.is_empty() {
        let place = match args.scope.namespace.as_str() {
            "" => String::new(),
            namespace => format!(" in namespace {}", quoted(namespace)),
        };
        eprintln!(
            "ferrisson: nothing{place} matches {}",
            quoted(&args.pattern)
        );
    } else {
        out.write_all(table(&entries).as_bytes())?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

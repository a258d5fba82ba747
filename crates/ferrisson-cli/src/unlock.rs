//! `ferrisson unlock --force`: remove a lock (or a leader) whoever holds it.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::process::ExitCode;

use ferrisson::redis::Client;
use ferrisson::redis::inspect::{Entry, PrimitiveKind};
use serde_json::json;

use crate::arguments::{Refused, check_name};
use crate::inspect::{NotFound, details, find};
use crate::listing::{ScopeArgs, entry_json};
use crate::terminal::quoted;

/// Remove the lock NAME whoever holds it, and wake its waiters.
///
/// For a stuck lock whose holder is gone or wedged: the lock (lock, fair_lock, rwlock with
/// every reader and the writer, simple_lock) is deleted and the next waiter gets it at
/// once; for an election, the leader's term ends and the next candidate is elected. The
/// removed holder learns it at its next renewal (a lock's guard reports the lock lost;
/// `ferrisson lock` and `ferrisson elect` stop their command and exit 74), or not at all
/// if it holds a fixed lease and never looks: it may still believe it holds the lock
/// until then, which is what fencing tokens are for.
///
/// Shows what it is about to remove and asks for confirmation on the terminal; --yes
/// skips the question. Without --yes and without a terminal on standard input it refuses
/// to start (exit 2).
/// Then says what it removed (with --json, one JSON document:
/// {"removed": true|false, "entry": <the entry as `ferrisson ls --json` prints it>}).
///
/// Exits 1 when there is no lock called NAME, or it was not removed; 125 when Redis
/// cannot be reached (or ferrisson fails otherwise); 2 when an argument is refused
/// (before connecting).
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    #[command(flatten)]
    scope: ScopeArgs,

    /// Required: this removes a lock its holder believes it holds
    #[arg(long, required = true)]
    force: bool,

    /// Do not ask for confirmation
    #[arg(long, short = 'y')]
    yes: bool,

    /// The lock's name
    name: String,
}

impl Args {
    /// Refuses what no run could use, before anything connects: there must be a way to
    /// confirm, --yes or a terminal to ask on.
    pub fn check(&self) -> Result<(), Refused> {
        check_name("<NAME>", &self.name)?;
        if !self.yes && !std::io::stdin().is_terminal() {
            return Err(Refused::because(
                "refusing to remove a lock without --yes: standard input is not a terminal \
                 to confirm on",
            ));
        }
        self.scope.check()
    }
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let _ = args.force;
    let client = args.scope.connect().await?;
    let entries = find(
        &client,
        &args.name,
        args.scope.kind,
        "no lock, fair_lock, rwlock, simple_lock or election",
        |e| e.kind.is_lock(),
    )
    .await?;
    // One name has one main key, so at most one lock kind is ever found.
    let Some(entry) = entries.into_iter().next() else {
        return Err(NotFound(format!("no lock called {}", quoted(&args.name))).into());
    };
    if !args.yes && !confirmed(&entry)? {
        eprintln!("ferrisson: not removed");
        return Ok(ExitCode::from(crate::EXIT_NOT_FOUND));
    }
    let removed = force(&client, &entry).await?;
    if args.scope.json {
        println!(
            "{}",
            json!({ "removed": removed, "entry": entry_json(&entry) })
        );
    } else if removed {
        println!(
            "removed {} {}{}",
            entry.kind,
            quoted(&entry.name),
            what_was_held(&entry)
        );
    } else {
        println!(
            "{} {} was released before it could be removed; nothing removed",
            entry.kind,
            quoted(&entry.name)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Asks on the terminal (standard input is one: [`Args::check`] refused to start
/// otherwise).
fn confirmed(entry: &Entry) -> anyhow::Result<bool> {
    let stdin = std::io::stdin();
    let mut stderr = std::io::stderr().lock();
    write!(stderr, "{}Remove it? [y/N] ", details(entry))?;
    stderr.flush()?;
    let mut answer = String::new();
    stdin.lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes"))
}

/// Removes the lock as its kind does; false when it was already free.
async fn force(client: &Client, entry: &Entry) -> anyhow::Result<bool> {
    let name = entry.name.as_str();
    Ok(match entry.kind {
        PrimitiveKind::Lock => client.lock(name)?.force_unlock().await?,
        PrimitiveKind::FairLock => client.fair_lock(name)?.force_unlock().await?,
        PrimitiveKind::RwLock => client.rwlock(name)?.force_unlock().await?,
        PrimitiveKind::SimpleLock => client.simple_lock(name)?.force_unlock().await?,
        PrimitiveKind::Election => client.election(name)?.force_resign().await?.is_some(),
        other => anyhow::bail!(
            "{} is a {other}, which has no holder to remove",
            quoted(name)
        ),
    })
}

/// `: held by X (2 holds, token 17, 29.8s left); its waiters were woken` from the
/// snapshot read before the removal.
fn what_was_held(entry: &Entry) -> String {
    let snapshot = &entry.snapshot;
    let holders = snapshot.holders();
    if holders.is_empty() {
        return String::new();
    }
    let holds = snapshot.hold_count();
    let mut facts = vec![format!("{holds} hold{}", if holds == 1 { "" } else { "s" })];
    if let Some(token) = snapshot.fencing_token() {
        facts.push(format!("token {token}"));
    }
    if let Some(ttl) = snapshot.ttl() {
        facts.push(format!("{} left", crate::listing::short_duration(ttl)));
    }
    let holders: Vec<String> = holders
        .iter()
        .map(|h| crate::terminal::escaped(h))
        .collect();
    format!(
        ", held by {} ({}); its waiters were woken",
        holders.join(", "),
        facts.join(", ")
    )
}

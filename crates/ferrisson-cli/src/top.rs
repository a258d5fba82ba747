//! `ferrisson top`: a live view of the busiest locks.

use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use ferrisson::redis::Client;
use ferrisson::redis::inspect::{Entry, PrimitiveKind};
use serde_json::json;

use crate::arguments::{Refused, check_pattern};
use crate::listing::{ScopeArgs, entry_json, rfc3339, table, waiters};
use crate::terminal::{quoted, sanitized};

/// Clears a terminal and moves the cursor to its top left.
const CLEAR: &str = "\x1b[H\x1b[2J";

/// A live view of the busiest locks, refreshed.
///
/// The locks and synchronizers of a namespace, refreshed every --interval: the ones with
/// the most waiters first, then the longest time to live.
///
/// Each refresh scans the names matching PATTERN (default *) as `ferrisson ls` does
/// (id counters are left out) and shows the first --limit of them in `ferrisson ls`'s
/// columns under a line of totals. On a terminal each refresh redraws the screen;
/// otherwise the frames follow one another, separated by a blank line. Ends on Ctrl-C,
/// or after one frame with --once. A refresh that fails (Redis unreachable) shows the
/// error and the next one tries again; with --once the error ends it (exit 125).
///
/// With --json, one JSON document per refresh, on one line:
/// {"time": RFC 3339, "namespace": ..., "pattern": ..., "total": primitives found,
///  "held": how many have holds, "waiting": how many have waiters,
///  "entries": [the first --limit entries, as `ferrisson ls --json` prints them]}.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    #[command(flatten)]
    scope: ScopeArgs,

    /// Time between refreshes (e.g. 500ms, 2s)
    #[arg(long, value_name = "DUR", default_value = "2s", value_parser = interval)]
    interval: Duration,

    /// Show at most this many primitives
    #[arg(long, value_name = "N", default_value_t = 20)]
    limit: usize,

    /// Print one frame and exit
    #[arg(long)]
    once: bool,

    /// A glob on the names
    #[arg(default_value = "*")]
    pattern: String,
}

fn interval(text: &str) -> Result<Duration, String> {
    let interval = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if interval < Duration::from_millis(100) {
        return Err("the interval must be at least 100ms".to_owned());
    }
    Ok(interval)
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
    let redraw = !args.scope.json && std::io::stdout().is_terminal();
    let mut first = true;
    loop {
        let frame = match frame(&client, &args).await {
            Ok(frame) => frame,
            Err(e) if args.once => return Err(e),
            Err(e) => format!("ferrisson top: {}\n", sanitized(&format!("{e:#}"))),
        };
        let mut out = std::io::stdout().lock();
        if redraw {
            out.write_all(CLEAR.as_bytes())?;
        } else if !first && !args.scope.json {
            out.write_all(b"\n")?;
        }
        out.write_all(frame.as_bytes())?;
        out.flush()?;
        drop(out);
        first = false;
        if args.once {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::select! {
            () = tokio::time::sleep(args.interval) => {}
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
        }
    }
}

/// One refresh: the busiest entries, as a table under a line of totals or as one JSON line.
async fn frame(client: &Client, args: &Args) -> anyhow::Result<String> {
    let mut entries: Vec<Entry> = client
        .scan(&args.pattern)
        .await?
        .into_iter()
        .filter(|e| {
            e.kind != PrimitiveKind::IdCounter && args.scope.kind.is_none_or(|k| e.kind == k)
        })
        .collect();
    busiest_first(&mut entries);
    let total = entries.len();
    let held = entries
        .iter()
        .filter(|e| e.snapshot.hold_count() > 0)
        .count();
    let waiting = entries
        .iter()
        .filter(|e| waiters(e).is_some_and(|n| n > 0))
        .count();
    entries.truncate(args.limit);
    let now = rfc3339(SystemTime::now());
    if args.scope.json {
        let document = json!({
            "time": now,
            "namespace": args.scope.namespace,
            "pattern": args.pattern,
            "total": total,
            "held": held,
            "waiting": waiting,
            "entries": entries.iter().map(entry_json).collect::<Vec<_>>(),
        });
        return Ok(format!("{document}\n"));
    }
    let mut text = format!(
        "ferrisson top  {now}  every {}  namespace {}  pattern {}\n{total} primitives, {held} held, {waiting} with waiters",
        humantime::format_duration(args.interval),
        quoted(&args.scope.namespace),
        quoted(&args.pattern),
    );
    if total > entries.len() {
        let _ = write!(text, ", {} more not shown", total - entries.len());
    }
    text.push_str("\n\n");
    if !entries.is_empty() {
        text.push_str(&table(&entries));
    }
    Ok(text)
}

/// Most waiters first, then the longest time to live, then by name.
fn busiest_first(entries: &mut [Entry]) {
    entries.sort_by(|a, b| {
        let key = |e: &Entry| {
            (
                waiters(e).unwrap_or(0),
                e.snapshot.ttl().unwrap_or_default(),
            )
        };
        key(b).cmp(&key(a)).then_with(|| a.name.cmp(&b.name))
    });
}

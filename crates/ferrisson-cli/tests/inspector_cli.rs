//! `ferrisson ls`, `inspect`, `unlock --force` and `top` as an operator runs them, against
//! a real redis-server where other `ferrisson` processes and other clients of the test
//! hold and wait for locks of several kinds.
//!
//! A test learns that a process holds a lock from a named pipe its command writes to, and
//! that a process waits from the server (its client subscribed to the lock's channel),
//! read until it shows with a bound: no sleeps.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ferrisson::redis::inspect::PrimitiveKind;
use ferrisson::redis::{Client, FairLockGuard, LockGuard, RwLockReadGuard};
use ferrisson_testkit::RedisServer;
use serde_json::Value;

mod support;
use support::{EVENT_LIMIT, Fifo, ferrisson, outcome};

/// A child process killed when the test ends, however it ends.
struct Running(Option<Child>);

impl Running {
    fn new(child: Child) -> Self {
        Self(Some(child))
    }

    /// Its exit status, once it ends by itself (within [`EVENT_LIMIT`]).
    fn exit_code(mut self) -> anyhow::Result<Option<i32>> {
        let mut child = self
            .0
            .take()
            .ok_or_else(|| anyhow::anyhow!("already waited for"))?;
        Ok(support::within(move || child.wait())?.code())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `ferrisson SUBCOMMAND --url URL ARGS...`.
fn inspector(subcommand: &str, url: &str, args: &[&str]) -> Command {
    let mut command = ferrisson(&[subcommand, "--url", url]);
    command.args(args);
    command
}

/// Runs `ferrisson SUBCOMMAND`, expecting exit 0: its stdout.
fn stdout_of(subcommand: &str, url: &str, args: &[&str]) -> anyhow::Result<String> {
    let (code, stdout, stderr) = outcome(&mut inspector(subcommand, url, args))?;
    anyhow::ensure!(
        code == Some(0),
        "{subcommand} {args:?} exited {code:?}: {stderr}"
    );
    Ok(stdout)
}

/// `ferrisson lock NAME` holding the lock with a command that says so on a pipe, then
/// sleeps until killed.
fn hold(url: &str, dir: &std::path::Path, name: &str, extra: &[&str]) -> anyhow::Result<Running> {
    let ready = Fifo::new(dir, &format!("{name}-held"))?;
    let script = format!("echo held > {}; exec sleep 600", ready.path());
    let mut args = vec!["lock", "--url", url];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[name, "--", "sh", "-c", &script]);
    let holder = Running::new(ferrisson(&args).stderr(Stdio::null()).spawn()?);
    assert_eq!(ready.read()?, "held\n");
    Ok(holder)
}

/// `ferrisson lock NAME` waiting for the lock, whose command says on `got` when it runs;
/// returns once the waiter's client is subscribed to the lock's channel.
fn wait_for(client: &Client, url: &str, name: &str, got: &Fifo) -> anyhow::Result<Running> {
    let script = format!("echo got > {}", got.path());
    let waiter = Running::new(
        ferrisson(&["lock", "--url", url, name, "--", "sh", "-c", &script])
            .stderr(Stdio::null())
            .spawn()?,
    );
    let name = name.to_owned();
    shows(client, &name, move |entry| entry.waiting_clients == Some(1))?;
    Ok(waiter)
}

/// Reads `name` with the library until `ready` holds for one of its entries, for at most
/// [`EVENT_LIMIT`].
fn shows(
    client: &Client,
    name: &str,
    ready: impl Fn(&ferrisson::redis::inspect::Entry) -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + EVENT_LIMIT;
    let runtime = tokio::runtime::Handle::current();
    loop {
        let entries = tokio::task::block_in_place(|| runtime.block_on(client.inspect(name)))?;
        if entries.iter().any(&ready) {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{name:?} never showed: {entries:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The table row of `name` (with `kind`), split into its columns.
fn row<'a>(table: &'a str, name: &str, kind: &str) -> anyhow::Result<Vec<&'a str>> {
    table
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&name) && cells.get(1) == Some(&kind))
        .ok_or_else(|| anyhow::anyhow!("no {kind} {name:?} in\n{table}"))
}

fn field<'a>(entry: &'a Value, key: &str) -> anyhow::Result<&'a Value> {
    entry
        .get(key)
        .ok_or_else(|| anyhow::anyhow!("no {key:?} in {entry}"))
}

/// What other processes and clients hold and wait for while the `ls` and `inspect` test
/// runs; dropping it ends them.
struct Scene {
    _processes: [Running; 3],
    fair: FairLockGuard,
    fair_waiter: tokio::task::JoinHandle<ferrisson::redis::Result<()>>,
    reads: [RwLockReadGuard; 2],
    _elsewhere: LockGuard,
}

/// Other processes: a lock with a waiter, a leader. Other clients of the test: a fair lock
/// with a queued waiter, a read-write lock read twice, a count (a semaphore's or a
/// latch's), an id counter; and keys that are no primitive's, or in another namespace.
async fn scene(
    server: &RedisServer,
    dir: &std::path::Path,
    client: &Client,
) -> anyhow::Result<Scene> {
    let url = server.url();
    let holder = hold(&url, dir, "orders:busy", &[])?;
    let got = Fifo::new(dir, "got")?;
    let waiter = wait_for(client, &url, "orders:busy", &got)?;
    let elected = Fifo::new(dir, "elected")?;
    let script = format!("echo elected > {}; exec sleep 600", elected.path());
    let leader = Running::new(
        ferrisson(&[
            "elect",
            "--url",
            &url,
            "--id",
            "host-a",
            "orders:cron",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stderr(Stdio::null())
        .spawn()?,
    );
    assert_eq!(elected.read()?, "elected\n");
    let fair = client.fair_lock("orders:fair")?.lock().await?;
    let queued = Client::connect(&url).await?.fair_lock("orders:fair")?;
    let fair_waiter = tokio::spawn(async move { queued.lock().await?.unlock().await });
    shows(client, "orders:fair", |e| e.snapshot.waiters() == Some(1))?;
    let second = Client::connect(&url).await?;
    let reads = [
        client.rwlock("orders:rw")?.read().await?,
        second.rwlock("orders:rw")?.read().await?,
    ];
    anyhow::ensure!(client.semaphore("orders:gate")?.try_set_permits(3).await?);
    client.id_generator().next_id("orders:ids").await?;
    server.command(&["SET", "orders:plain", "1"])?;
    let other = Client::builder(&url).namespace("other:").connect().await?;
    let elsewhere = other.lock("orders:busy")?.lock().await?;
    Ok(Scene {
        _processes: [holder, waiter, leader],
        fair,
        fair_waiter,
        reads,
        _elsewhere: elsewhere,
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn ls_and_inspect_name_what_others_hold_and_wait_for() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let url = server.url();
    let dir = tempfile::tempdir()?;
    let client = Client::connect(&url).await?;
    let scene = scene(&server, dir.path(), &client).await?;
    ls_table_names_every_kind(&url)?;
    let holder = ls_json_carries_the_documented_fields(&url)?;
    inspect_shows_the_snapshot(&url, &holder)?;
    let Scene {
        fair,
        fair_waiter,
        reads,
        ..
    } = scene;
    drop((fair, reads));
    tokio::time::timeout(EVENT_LIMIT, fair_waiter).await???;
    Ok(())
}

fn ls_table_names_every_kind(url: &str) -> anyhow::Result<()> {
    let table = stdout_of("ls", url, &[])?;
    assert_eq!(
        table
            .lines()
            .next()
            .map(|h| h.split_whitespace().collect::<Vec<_>>()),
        Some(vec![
            "NAME", "KIND", "HOLDERS", "HOLDS", "TTL", "TOKEN", "WAITERS", "STATE"
        ])
    );
    let busy = row(&table, "orders:busy", "lock")?;
    assert_eq!(busy[3], "1", "one hold: {busy:?}");
    assert_eq!(busy[6], "1", "one client waits: {busy:?}");
    assert!(busy[4].ends_with('s'), "a TTL: {busy:?}");
    let cron = row(&table, "orders:cron", "election")?;
    assert_eq!(cron[2], "host-a");
    assert_eq!(
        row(&table, "orders:fair", "fair_lock")?[6],
        "1",
        "one queued"
    );
    assert_eq!(row(&table, "orders:rw", "rwlock")?[3], "2", "two reads");
    row(&table, "orders:gate", "semaphore?")?;
    row(&table, "orders:gate", "latch?")?;
    row(&table, "orders:ids", "id_counter")?;
    assert_eq!(table.lines().count(), 1 + 7, "nothing else:\n{table}");
    Ok(())
}

/// Checks `ls --json`; returns the busy lock's holder.
fn ls_json_carries_the_documented_fields(url: &str) -> anyhow::Result<String> {
    let json: Value = serde_json::from_str(&stdout_of("ls", url, &["--json", "orders:*"])?)?;
    let entries = json
        .as_array()
        .ok_or_else(|| anyhow::anyhow!("not an array: {json}"))?;
    assert_eq!(entries.len(), 7);
    for entry in entries {
        for key in [
            "name",
            "kind",
            "ambiguous",
            "ttl_ms",
            "holders",
            "holds",
            "fencing_token",
            "waiters",
            "waiting_clients",
            "snapshot",
        ] {
            field(entry, key)?;
        }
        field(entry, "kind")?
            .as_str()
            .unwrap_or_default()
            .parse::<PrimitiveKind>()?;
    }
    let busy = entries
        .iter()
        .find(|e| e["name"] == "orders:busy")
        .ok_or_else(|| anyhow::anyhow!("no orders:busy in {json}"))?;
    assert_eq!(busy["kind"], "lock");
    assert!(
        busy["ttl_ms"]
            .as_u64()
            .is_some_and(|ms| ms > 0 && ms <= 30_000)
    );
    assert_eq!(busy["waiting_clients"], 1);
    assert_eq!(busy["holds"], 1);
    let holder = busy["holders"][0].as_str().unwrap_or_default().to_owned();
    assert_eq!(holder.len(), 32, "an owner id: {busy}");
    assert!(busy["fencing_token"].as_u64().is_some());
    let ids = entries
        .iter()
        .find(|e| e["kind"] == "id_counter")
        .ok_or_else(|| anyhow::anyhow!("no id counter in {json}"))?;
    assert_eq!(ids["ttl_ms"], Value::Null);
    assert_eq!(ids["snapshot"]["count"], 1);
    let only_locks: Value =
        serde_json::from_str(&stdout_of("ls", url, &["--json", "--kind", "lock"])?)?;
    assert_eq!(only_locks.as_array().map(Vec::len), Some(1));
    Ok(holder)
}

fn inspect_shows_the_snapshot(url: &str, holder: &str) -> anyhow::Result<()> {
    let text = stdout_of("inspect", url, &["orders:busy"])?;
    assert!(text.starts_with("lock \"orders:busy\"\n"), "{text}");
    assert!(
        text.contains(&format!("holder           {holder}")),
        "{text}"
    );
    assert!(text.contains("waiting clients  1"), "{text}");
    let text = stdout_of("inspect", url, &["orders:fair"])?;
    assert!(text.contains("queue            1"), "{text}");
    let both = stdout_of("inspect", url, &["orders:gate"])?;
    assert!(both.contains("semaphore \"orders:gate\"") && both.contains("latch \"orders:gate\""));
    let latch = stdout_of("inspect", url, &["--kind", "latch", "orders:gate"])?;
    assert!(
        latch.starts_with("latch \"orders:gate\"\n  note") && latch.contains("count            3"),
        "{latch}"
    );
    assert!(!latch.contains("semaphore \""));
    let json: Value =
        serde_json::from_str(&stdout_of("inspect", url, &["--json", "orders:cron"])?)?;
    assert_eq!(json[0]["kind"], "election");
    assert_eq!(json[0]["snapshot"]["leader"]["candidate"], "host-a");
    let (code, _, stderr) = outcome(&mut inspector("inspect", url, &["orders:none"]))?;
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("nothing called \"orders:none\""),
        "{stderr}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn unlock_force_yes_frees_a_held_lock_and_the_waiter_gets_it() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let url = server.url();
    let dir = tempfile::tempdir()?;
    let client = Client::connect(&url).await?;
    // A short lease, so the holder learns of the removal within a second.
    let holder = hold(&url, dir.path(), "stuck", &["--lease", "900ms"])?;
    let got = Fifo::new(dir.path(), "got")?;
    let waiter = wait_for(&client, &url, "stuck", &got)?;

    // Without --yes and without a terminal to ask on: refused, nothing removed.
    let (code, stdout, stderr) = outcome(&mut inspector("unlock", &url, &["--force", "stuck"]))?;
    assert_eq!(code, Some(2), "a refused argument");
    assert!(stdout.is_empty());
    assert!(stderr.contains("without --yes"), "{stderr}");
    assert!(client.lock("stuck")?.is_locked().await?);
    let (code, _, stderr) = outcome(&mut inspector("unlock", &url, &["--yes", "stuck"]))?;
    assert_eq!(code, Some(2), "--force is required");
    assert!(stderr.contains("--force"), "{stderr}");

    let holder_id = client.lock("stuck")?.inspect().await?.holder;
    let said = stdout_of("unlock", &url, &["--force", "--yes", "stuck"])?;
    let holder_id = holder_id.map(|h| h.to_string()).unwrap_or_default();
    assert!(
        said.starts_with(&format!(
            "removed lock \"stuck\", held by {holder_id} (1 hold, token "
        )),
        "{said}"
    );
    assert_eq!(got.read()?, "got\n", "the waiter got the lock");
    assert_eq!(waiter.exit_code()?, Some(0));
    assert_eq!(
        holder.exit_code()?,
        Some(74),
        "the holder saw its lock lost"
    );

    // Nothing left to remove.
    let (code, _, stderr) = outcome(&mut inspector(
        "unlock",
        &url,
        &["--force", "--yes", "stuck"],
    ))?;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("called \"stuck\""), "{stderr}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn unlock_force_removes_a_leader_and_a_read_write_lock() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let url = server.url();
    let client = Client::connect(&url).await?;
    let leadership = client
        .election("cron")?
        .with_candidate_id("wedged")?
        .campaign()
        .await?;
    let read = client.rwlock("table")?.read().await?;
    let json: Value = serde_json::from_str(&stdout_of(
        "unlock",
        &url,
        &["--force", "--yes", "--json", "cron"],
    )?)?;
    assert_eq!(json["removed"], true);
    assert_eq!(json["entry"]["kind"], "election");
    assert_eq!(json["entry"]["holders"][0], "wedged");
    assert!(client.election("cron")?.leader().await?.is_none());
    let said = stdout_of("unlock", &url, &["--force", "--yes", "table"])?;
    assert!(said.starts_with("removed rwlock \"table\""), "{said}");
    assert!(client.rwlock("table")?.inspect().await?.mode.is_none());
    drop((leadership, read));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn top_once_shows_the_busiest_first() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let url = server.url();
    let dir = tempfile::tempdir()?;
    let client = Client::connect(&url).await?;
    let _quiet = hold(&url, dir.path(), "a-quiet", &[])?;
    let _busy = hold(&url, dir.path(), "z-busy", &[])?;
    let got = Fifo::new(dir.path(), "got")?;
    let _waiter = wait_for(&client, &url, "z-busy", &got)?;

    let frame = stdout_of("top", &url, &["--once"])?;
    let mut lines = frame.lines();
    assert!(
        lines.next().is_some_and(|l| l.starts_with("ferrisson top")),
        "{frame}"
    );
    assert_eq!(
        lines.next(),
        Some("2 primitives, 2 held, 1 with waiters"),
        "{frame}"
    );
    let names: Vec<&str> = lines
        .skip(2)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names, ["z-busy", "a-quiet"], "most waiters first:\n{frame}");
    assert!(
        !frame.contains('\x1b'),
        "no terminal escapes when not on a terminal"
    );

    let json = stdout_of("top", &url, &["--once", "--json", "--limit", "1"])?;
    assert_eq!(
        json.lines().count(),
        1,
        "one document per refresh, on one line"
    );
    let frame: Value = serde_json::from_str(&json)?;
    assert_eq!(frame["total"], 2);
    assert_eq!(frame["waiting"], 1);
    assert_eq!(frame["entries"].as_array().map(Vec::len), Some(1));
    assert_eq!(frame["entries"][0]["name"], "z-busy");

    // Refreshing: two frames a tenth of a second apart, then stopped.
    let mut live = inspector("top", &url, &["--json", "--interval", "100ms"])
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = live
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let frames = support::within(move || {
        use std::io::BufRead as _;
        std::io::BufReader::new(stdout)
            .lines()
            .take(2)
            .collect::<Result<Vec<_>, _>>()
    })?;
    live.kill()?;
    live.wait()?;
    assert_eq!(frames.len(), 2);
    for frame in frames {
        let frame: Value = serde_json::from_str(&frame)?;
        assert_eq!(frame["total"], 2);
    }
    Ok(())
}

/// On a terminal, each frame of `top` starts by clearing the screen.
#[tokio::test(flavor = "multi_thread")]
async fn top_redraws_on_a_terminal() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let url = server.url();
    let client = Client::connect(&url).await?;
    let _held = client.lock("drawn")?.lock().await?;
    let terminal = nix::pty::openpty(None, None)?;
    let mut command = inspector("top", &url, &["--once"]);
    command.stdout(Stdio::from(terminal.slave));
    let child = command.spawn()?;
    drop(command);
    let mut screen = std::fs::File::from(terminal.master);
    // Read until the frame's last row (another test's child may hold the terminal's other
    // end too, so the end of input is no signal).
    let drawn = support::within(move || {
        let mut text = String::new();
        let mut chunk = [0_u8; 4096];
        while !(text.contains("\ndrawn") && text.ends_with('\n')) {
            let n = std::io::Read::read(&mut screen, &mut chunk)?;
            if n == 0 {
                break;
            }
            text.push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
        Ok(text)
    })?;
    let status = support::within(move || {
        let mut child = child;
        child.wait()
    })?;
    assert!(status.success());
    assert!(drawn.starts_with("\x1b[H\x1b[2Jferrisson top"), "{drawn:?}");
    assert!(drawn.contains("drawn"), "{drawn:?}");
    Ok(())
}

/// On a terminal, `unlock --force` shows what it would remove and asks: anything but yes
/// leaves the lock alone, yes removes it.
#[tokio::test(flavor = "multi_thread")]
async fn unlock_force_asks_on_a_terminal() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let url = server.url();
    let client = Client::connect(&url).await?;
    let guard = client.lock("asked")?.lock().await?;
    for (answer, removed) in [("n\n", false), ("\n", false), ("yes\n", true)] {
        let terminal = nix::pty::openpty(None, None)?;
        let child = inspector("unlock", &url, &["--force", "asked"])
            .stdin(Stdio::from(terminal.slave))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut keyboard = std::fs::File::from(terminal.master);
        std::io::Write::write_all(&mut keyboard, answer.as_bytes())?;
        let output = support::within(move || child.wait_with_output())?;
        drop(keyboard);
        let (stdout, stderr) = (
            String::from_utf8(output.stdout)?,
            String::from_utf8(output.stderr)?,
        );
        assert!(stderr.starts_with("lock \"asked\"\n  holder"), "{stderr}");
        assert!(stderr.contains("Remove it? [y/N]"), "{stderr}");
        assert_eq!(
            output.status.code(),
            Some(i32::from(!removed)),
            "{answer:?}: {stderr}"
        );
        assert_eq!(
            stdout.starts_with("removed lock \"asked\""),
            removed,
            "{stdout}"
        );
        assert_eq!(
            client.lock("asked")?.is_locked().await?,
            !removed,
            "{answer:?}"
        );
    }
    // The removed holder finds its lock gone when it releases.
    assert!(matches!(
        guard.unlock().await,
        Err(ferrisson::redis::Error::LeaseExpired { .. })
    ));
    Ok(())
}

/// A name is text anyone with access to Redis chose: `ls` and `top` show one with escape
/// codes and a line break escaped (as `inspect` does), so it can neither clear the screen
/// nor forge a row, and pad by the columns a name takes, so that rows with wide
/// characters line up.
#[tokio::test(flavor = "multi_thread")]
async fn ls_and_top_escape_names_and_line_up_wide_ones() -> anyhow::Result<()> {
    use unicode_width::UnicodeWidthStr as _;

    let server = RedisServer::start()?;
    let url = server.url();
    let client = Client::connect(&url).await?;
    let hostile = "evil\u{1b}[2J\nforged  lock  x  1  1s  1  0  held";
    let names = [hostile, "注文:42", "🔒vault", "orders:42"];
    let mut guards = Vec::new();
    for name in names {
        guards.push(client.lock(name)?.lock().await?);
    }
    let shown = r"evil\u{1b}[2J\nforged  lock  x  1  1s  1  0  held";

    let listing = stdout_of("ls", &url, &[])?;
    let frame = stdout_of("top", &url, &["--once"])?;
    for (what, table) in [("ls", listing.as_str()), ("top", frame.as_str())] {
        assert!(!table.contains('\u{1b}'), "{what}: {table:?}");
        let rows: Vec<&str> = table
            .lines()
            .skip_while(|line| !line.starts_with("NAME"))
            .collect();
        assert_eq!(
            rows.len(),
            1 + names.len(),
            "{what}: one row per name:\n{table}"
        );
        assert!(
            rows.iter().any(|row| row.starts_with(shown)),
            "{what}: the name escaped:\n{table}"
        );
        // Every row's KIND column starts where the header's does, counted in terminal
        // columns.
        let kind_column = |row: &str| -> anyhow::Result<usize> {
            let name = std::iter::once("NAME")
                .chain([shown, "注文:42", "🔒vault", "orders:42"])
                .find(|name| row.starts_with(name))
                .ok_or_else(|| anyhow::anyhow!("{what}: no known name starts {row:?}"))?;
            let rest = &row[name.len()..];
            let kind = name.len() + (rest.len() - rest.trim_start().len());
            anyhow::ensure!(
                ["KIND", "lock"].iter().any(|k| row[kind..].starts_with(k)),
                "{what}: no kind after the name in {row:?}"
            );
            Ok(row[..kind].width())
        };
        let header = kind_column(rows[0])?;
        for row in &rows[1..] {
            assert_eq!(kind_column(row)?, header, "{what}: {row:?} in\n{table}");
        }
    }
    drop(guards);
    Ok(())
}

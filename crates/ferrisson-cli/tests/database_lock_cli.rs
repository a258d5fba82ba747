//! `ferrisson lock` on the databases' lock table, as a user runs it: separate processes
//! against the machine's PostgreSQL and MariaDB (or those `FERRISSON_TEST_POSTGRES_URL`
//! and `FERRISSON_TEST_MYSQL_URL` name), each test on a table of its own.

#![cfg(all(feature = "postgres", feature = "mysql"))]

use std::collections::HashSet;
use std::process::Command;

use sqlx::Executor as _;

mod support;
use support::{FERRISSON, Fifo, outcome};

fn postgres() -> String {
    std::env::var("FERRISSON_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

fn mysql() -> String {
    std::env::var("FERRISSON_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
}

/// A table of the test's own on the database `base` names; dropped on drop.
struct Table {
    base: String,
    name: String,
}

impl Table {
    fn new(base: String) -> Self {
        let name = format!("ferrisson_cli_{:016x}", rand_u64());
        Self { base, name }
    }

    fn url(&self) -> String {
        format!("{}?table={}", self.base, self.name)
    }
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher as _, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

impl Drop for Table {
    fn drop(&mut self) {
        let (base, name) = (self.base.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                if base.starts_with("postgres") {
                    let pool = sqlx::PgPool::connect(&base).await?;
                    pool.execute(format!("DROP TABLE IF EXISTS {name}").as_str())
                        .await?;
                    pool.execute(format!("DROP SEQUENCE IF EXISTS {name}_fence").as_str())
                        .await?;
                } else {
                    let pool = sqlx::MySqlPool::connect(&base).await?;
                    pool.execute(format!("DROP TABLE IF EXISTS {name}").as_str())
                        .await?;
                    pool.execute(format!("DROP TABLE IF EXISTS {name}_fence").as_str())
                        .await?;
                }
                Ok::<(), anyhow::Error>(())
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop the test table {}", self.name);
        }
    }
}

/// The first run creates the missing table and says so; the command gets a token.
fn creates_the_table_and_passes_a_token(base: String) -> anyhow::Result<()> {
    let table = Table::new(base);
    let (code, stdout, stderr) = outcome(&mut support::ferrisson(&[
        "lock",
        "--url",
        &table.url(),
        "job",
        "--",
        "sh",
        "-c",
        "echo $FERRISSON_LOCK_NAME $FERRISSON_FENCING_TOKEN",
    ]))?;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("created the lock table"), "{stderr}");
    let (name, token) = stdout.trim().split_once(' ').unwrap_or_default();
    assert_eq!(name, "job");
    assert!(token.parse::<u64>().is_ok_and(|t| t > 0), "{stdout}");
    // The second run finds it.
    let (code, _, stderr) = outcome(&mut support::ferrisson(&[
        "lock",
        "--url",
        &table.url(),
        "job",
        "--",
        "true",
    ]))?;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("created"), "{stderr}");
    Ok(())
}

#[test]
fn postgres_creates_the_table_and_passes_a_token() -> anyhow::Result<()> {
    creates_the_table_and_passes_a_token(postgres())
}

#[test]
fn mysql_creates_the_table_and_passes_a_token() -> anyhow::Result<()> {
    creates_the_table_and_passes_a_token(mysql())
}

/// While a process holds the lock, another with --wait exits 75 without running.
fn a_wait_that_runs_out_exits_75(base: String) -> anyhow::Result<()> {
    let table = Table::new(base);
    let dir = tempfile::tempdir()?;
    let (inside, go) = (
        Fifo::new(dir.path(), "inside")?,
        Fifo::new(dir.path(), "go")?,
    );
    let script = format!("echo in > {}; cat {} > /dev/null", inside.path(), go.path());
    let mut holder = support::ferrisson(&[
        "lock",
        "--url",
        &table.url(),
        "held",
        "--",
        "sh",
        "-c",
        &script,
    ])
    .spawn()?;
    assert_eq!(inside.read()?.trim(), "in");
    let (code, stdout, stderr) = outcome(&mut support::ferrisson(&[
        "lock",
        "--url",
        &table.url(),
        "--wait",
        "300ms",
        "held",
        "--",
        "echo",
        "ran",
    ]))?;
    go.write("go")?;
    assert_eq!(code, Some(75), "{stderr}");
    assert!(stdout.is_empty(), "the command ran: {stdout}");
    assert!(stderr.contains("timed out"), "{stderr}");
    assert!(holder.wait()?.success());
    Ok(())
}

#[test]
fn postgres_a_wait_that_runs_out_exits_75() -> anyhow::Result<()> {
    a_wait_that_runs_out_exits_75(postgres())
}

#[test]
fn mysql_a_wait_that_runs_out_exits_75() -> anyhow::Result<()> {
    a_wait_that_runs_out_exits_75(mysql())
}

/// Processes take turns: a non-atomic read-modify-write of a file keeps its count, and
/// every turn has a token of its own, growing turn after turn.
fn processes_take_turns_with_growing_tokens(base: String) -> anyhow::Result<()> {
    const PROCESSES: usize = 4;
    const ROUNDS: usize = 5;
    let table = Table::new(base);
    // Created first, so that the turns below run under a table already there.
    let (code, _, stderr) = outcome(&mut support::ferrisson(&[
        "lock",
        "--url",
        &table.url(),
        "c",
        "--",
        "true",
    ]))?;
    assert_eq!(code, Some(0), "{stderr}");
    let dir = tempfile::tempdir()?;
    let counter = dir.path().join("counter");
    let tokens = dir.path().join("tokens");
    std::fs::write(&counter, "0")?;
    let script = format!(
        "for i in $(seq {ROUNDS}); do {FERRISSON} lock --url '{}' counter -- sh -c 'n=$(cat {c}); echo $FERRISSON_FENCING_TOKEN >> {t}; sleep 0.01; echo $((n+1)) > {c}' || exit 1; done",
        table.url(),
        c = counter.display(),
        t = tokens.display(),
    );
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| Command::new("sh").arg("-c").arg(&script).spawn())
        .collect::<Result<_, _>>()?;
    for mut child in children {
        assert!(child.wait()?.success());
    }
    let total: usize = std::fs::read_to_string(&counter)?.trim().parse()?;
    assert_eq!(total, PROCESSES * ROUNDS);
    let tokens: Vec<u64> = std::fs::read_to_string(&tokens)?
        .lines()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    assert_eq!(tokens.len(), PROCESSES * ROUNDS);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens must grow turn after turn: {tokens:?}"
    );
    assert_eq!(tokens.iter().collect::<HashSet<_>>().len(), tokens.len());
    Ok(())
}

#[test]
fn postgres_processes_take_turns_with_growing_tokens() -> anyhow::Result<()> {
    processes_take_turns_with_growing_tokens(postgres())
}

#[test]
fn mysql_processes_take_turns_with_growing_tokens() -> anyhow::Result<()> {
    processes_take_turns_with_growing_tokens(mysql())
}

/// `?lock=advisory`: processes take turns on the database's session lock, and the
/// command gets no token.
fn advisory_locks_take_turns(base: &str) -> anyhow::Result<()> {
    const PROCESSES: usize = 4;
    const ROUNDS: usize = 5;
    let url = format!("{base}?lock=advisory");
    let name = format!("cli-advisory-{:016x}", rand_u64());
    let dir = tempfile::tempdir()?;
    let counter = dir.path().join("counter");
    let tokens = dir.path().join("tokens");
    std::fs::write(&counter, "0")?;
    let script = format!(
        "for i in $(seq {ROUNDS}); do {FERRISSON} lock --url '{url}' {name} -- sh -c 'n=$(cat {c}); echo \"$FERRISSON_FENCING_TOKEN\" >> {t}; sleep 0.01; echo $((n+1)) > {c}' || exit 1; done",
        c = counter.display(),
        t = tokens.display(),
    );
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| Command::new("sh").arg("-c").arg(&script).spawn())
        .collect::<Result<_, _>>()?;
    for mut child in children {
        assert!(child.wait()?.success());
    }
    let total: usize = std::fs::read_to_string(&counter)?.trim().parse()?;
    assert_eq!(total, PROCESSES * ROUNDS);
    let tokens = std::fs::read_to_string(&tokens)?;
    assert!(
        tokens.lines().all(str::is_empty),
        "a session lock has no token: {tokens}"
    );
    Ok(())
}

#[test]
fn postgres_advisory_locks_take_turns() -> anyhow::Result<()> {
    advisory_locks_take_turns(&postgres())
}

#[test]
fn mysql_advisory_locks_take_turns() -> anyhow::Result<()> {
    advisory_locks_take_turns(&mysql())
}

/// `ferrisson elect` on a database: the election lives in the lock table (created when
/// missing) and the leader's command gets the term's token.
fn elect_runs_the_leader_with_a_token(base: String) -> anyhow::Result<()> {
    let table = Table::new(base);
    let (code, stdout, stderr) = outcome(&mut support::ferrisson(&[
        "elect",
        "--url",
        &table.url(),
        "nightly",
        "--",
        "sh",
        "-c",
        "echo $FERRISSON_FENCING_TOKEN",
    ]))?;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.trim().parse::<u64>().is_ok_and(|t| t > 0),
        "{stdout}"
    );
    Ok(())
}

#[test]
fn postgres_elect_runs_the_leader_with_a_token() -> anyhow::Result<()> {
    elect_runs_the_leader_with_a_token(postgres())
}

#[test]
fn mysql_elect_runs_the_leader_with_a_token() -> anyhow::Result<()> {
    elect_runs_the_leader_with_a_token(mysql())
}

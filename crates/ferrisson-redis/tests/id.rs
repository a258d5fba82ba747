//! The global id generator against real redis-server processes.

use std::collections::HashSet;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use chrono::NaiveDate;
use ferrisson_redis::{Client, Error, IdGenerator, MAX_ID_PREFIX_LEN, RedisStoreError};
use ferrisson_testkit::RedisServer;

/// 2026-11-22T23:59:58Z, two seconds before midnight.
const BEFORE_MIDNIGHT: i64 = 1_795_391_998;
const EPOCH: i64 = 1_640_995_200;
/// The last second an id can hold: 2090-01-19T03:14:07Z.
const LAST_SECOND: i64 = EPOCH + (1 << 31) - 1;

/// A wall clock the test moves by hand, in seconds since 1970 (negative: before 1970).
#[derive(Clone)]
struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    fn at(unix_seconds: i64) -> Self {
        Self(Arc::new(AtomicI64::new(unix_seconds)))
    }

    fn set(&self, unix_seconds: i64) {
        self.0.store(unix_seconds, Ordering::SeqCst);
    }

    fn reader(&self) -> impl Fn() -> SystemTime + Send + Sync + 'static {
        let seconds = Arc::clone(&self.0);
        move || {
            let s = seconds.load(Ordering::SeqCst);
            if s >= 0 {
                UNIX_EPOCH + Duration::from_secs(s as u64)
            } else {
                UNIX_EPOCH - Duration::from_secs(s.unsigned_abs())
            }
        }
    }
}

fn date(y: i32, m: u32, d: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(y, m, d).expect("valid date")
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64
}

fn unix_seconds(id: i64) -> i64 {
    IdGenerator::decode(id)
        .expect("decodable")
        .timestamp
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64
}

/// How many times the server ran `command` (from `INFO commandstats`).
fn calls(server: &RedisServer, command: &str) -> u64 {
    let info = server
        .command(&["INFO", "commandstats"])
        .expect("INFO commandstats");
    let marker = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&marker))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().expect("a count"))
}

/// `workers` concurrent tasks make `per_worker` ids each. Returns every
/// task's ids in the order it got them, and the time it all took.
async fn ids_from_tasks(
    ids: &IdGenerator,
    prefix: &str,
    workers: usize,
    per_worker: usize,
) -> anyhow::Result<(Vec<Vec<i64>>, Duration)> {
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(workers);
    for _ in 0..workers {
        let ids = ids.clone();
        let prefix = prefix.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::with_capacity(per_worker);
            for _ in 0..per_worker {
                got.push(ids.next_id(&prefix).await?);
            }
            anyhow::Ok(got)
        }));
    }
    let mut all = Vec::with_capacity(workers);
    for task in tasks {
        all.push(task.await??);
    }
    Ok((all, started.elapsed()))
}

/// Every id unique, stamped between `from` and `to` (seconds since 1970), and each
/// task's ids increasing.
fn check_ids(per_task: &[Vec<i64>], from: i64, to: i64) -> HashSet<i64> {
    let mut seen = HashSet::new();
    for ids in per_task {
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "one task's ids must increase"
        );
        for &id in ids {
            assert!(seen.insert(id), "duplicate id {id}");
            let at = unix_seconds(id);
            assert!(
                (from..=to).contains(&at),
                "id {id} is stamped {at}, outside {from}..={to}"
            );
        }
    }
    seen
}

/// The sum of the day counters of `prefix` over the days the ids were stamped on.
async fn counted(ids: &IdGenerator, prefix: &str, all: &HashSet<i64>) -> anyhow::Result<u64> {
    let days: HashSet<NaiveDate> = all
        .iter()
        .map(|&id| IdGenerator::decode(id).map(|d| d.date()))
        .collect::<Result<_, _>>()?;
    let mut total = 0;
    for day in days {
        total += ids.count_for_day(prefix, day).await?;
    }
    Ok(total)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_tasks_x_100_ids_per_id() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let ids = client.id_generator();
    let from = unix_now();
    let (per_task, took) = ids_from_tasks(&ids, "order", 300, 100).await?;
    let all = check_ids(&per_task, from, unix_now());
    assert_eq!(all.len(), 30_000);
    // One INCR per id: the day's counter is the day's number of ids.
    assert_eq!(calls(&server, "incr"), 30_000);
    assert_eq!(counted(&ids, "order", &all).await?, 30_000);
    println!("per id: 300 x 100 ids in {took:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_tasks_x_100_ids_batched() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let ids = IdGenerator::builder(&client).batched().build()?;
    let from = unix_now();
    let (per_task, took) = ids_from_tasks(&ids, "order", 300, 100).await?;
    let all = check_ids(&per_task, from, unix_now());
    assert_eq!(all.len(), 30_000);
    // Blocks, not ids, cost round trips: blocks of 16 doubling up to 65 536 need about a
    // dozen INCRBY for 30 000 ids (the bound leaves room for a slow machine, where
    // blocks grow later), against 30 000 INCR per id.
    let reservations = calls(&server, "incrby");
    assert!(
        (1..=300).contains(&reservations),
        "{reservations} INCRBY for 30 000 ids"
    );
    assert_eq!(calls(&server, "incr"), 0);
    // The counters hold every reserved number: at least every id handed out.
    assert!(counted(&ids, "order", &all).await? >= 30_000);
    println!("batched: 300 x 100 ids in {took:?} with {reservations} INCRBY");
    Ok(())
}

const WORKER_URL: &str = "FERRISSON_ID_TEST_WORKER_URL";
const WORKER_BATCHED: &str = "FERRISSON_ID_TEST_WORKER_BATCHED";
const ID_MARKER: &str = "worker-id=";

/// Four processes (this test binary run again as workers, two per id and two batched)
/// each run the 300 x 100 test on one prefix; all 120 000 ids are unique.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_make_unique_ids() -> anyhow::Result<()> {
    if let Ok(url) = std::env::var(WORKER_URL) {
        return run_worker(&url).await;
    }
    let server = RedisServer::start()?;
    let from = unix_now();
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for process in 0..4 {
        children.push(
            Command::new(&exe)
                .args([
                    "four_processes_make_unique_ids",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(WORKER_URL, server.url())
                .env(WORKER_BATCHED, if process % 2 == 0 { "0" } else { "1" })
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()?,
        );
    }
    let mut per_process = Vec::new();
    for child in children {
        let output = tokio::task::spawn_blocking(move || child.wait_with_output()).await??;
        assert!(
            output.status.success(),
            "worker failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stdout = String::from_utf8(output.stdout)?;
        let ids: Vec<i64> = stdout
            .lines()
            // libtest may print "test ... " on the same line as the first id.
            .filter_map(|line| line.split_once(ID_MARKER).map(|(_, id)| id))
            .map(str::parse)
            .collect::<Result<_, _>>()?;
        assert_eq!(ids.len(), 30_000, "one worker process made too few ids");
        per_process.push(ids);
    }
    let to = unix_now();
    let mut seen = HashSet::new();
    for ids in &per_process {
        for &id in ids {
            assert!(seen.insert(id), "duplicate id {id} across processes");
            assert!((from..=to).contains(&unix_seconds(id)));
        }
    }
    assert_eq!(seen.len(), 120_000);
    Ok(())
}

/// The worker half of [`four_processes_make_unique_ids`]: prints its ids, one a line.
async fn run_worker(url: &str) -> anyhow::Result<()> {
    let client = Client::connect(url).await?;
    let ids = if std::env::var(WORKER_BATCHED).as_deref() == Ok("1") {
        IdGenerator::builder(&client).batched().build()?
    } else {
        client.id_generator()
    };
    let (per_task, _) = ids_from_tasks(&ids, "order", 300, 100).await?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for id in per_task.iter().flatten() {
        writeln!(out, "{ID_MARKER}{id}")?;
    }
    out.flush()?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_id_and_batched_mixed_on_one_prefix_stay_unique() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let other = Client::connect(&server.url()).await?;
    let per_id = client.id_generator();
    let batched = IdGenerator::builder(&client).batched().build()?;
    let small_blocks = IdGenerator::builder(&other).block_size(1, 4).build()?;
    let from = unix_now();
    let (a, b, c) = tokio::join!(
        ids_from_tasks(&per_id, "order", 50, 100),
        ids_from_tasks(&batched, "order", 50, 100),
        ids_from_tasks(&small_blocks, "order", 50, 100),
    );
    let mut per_task = a?.0;
    per_task.extend(b?.0);
    per_task.extend(c?.0);
    assert_eq!(check_ids(&per_task, from, unix_now()).len(), 15_000);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_process_never_reuses_numbers() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let clock = ManualClock::at(BEFORE_MIDNIGHT - 3600);
    let mut seen = HashSet::new();
    let mut last = 0;
    for _ in 0..3 {
        // A new client and generator: what a restarted process has.
        let client = Client::connect(&server.url()).await?;
        let ids = IdGenerator::builder(&client)
            .block_size(1000, 1000)
            .clock(clock.reader())
            .build()?;
        for _ in 0..10 {
            let id = ids.next_id("order").await?;
            assert!(seen.insert(id), "duplicate id {id} after a restart");
            assert!(id > last);
            last = id;
        }
    }
    // Each "process" reserved a block and used 10 numbers of it; the clock stood still,
    // so the restarted ones continued above the blocks of those before them.
    let sequences: Vec<u32> = [0, 10, 20]
        .iter()
        .map(|&i| {
            let mut sorted: Vec<i64> = seen.iter().copied().collect();
            sorted.sort_unstable();
            IdGenerator::decode(sorted[i]).expect("decodable").sequence
        })
        .collect();
    assert_eq!(sequences, [1, 1001, 2001]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_is_icr_prefix_and_utc_day_behind_the_namespace() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::builder(&server.url())
        .namespace("shop:")
        .connect()
        .await?;
    let clock = ManualClock::at(BEFORE_MIDNIGHT);
    let ids = IdGenerator::builder(&client)
        .clock(clock.reader())
        .build()?;
    let id = ids.next_id("order").await?;
    assert_eq!(id, ((BEFORE_MIDNIGHT - EPOCH) << 32) | 1);
    assert_eq!(server.command(&["GET", "shop:icr:order:2026:11:22"])?, "1");
    let decoded = IdGenerator::decode(id)?;
    assert_eq!(decoded.date(), date(2026, 11, 22));
    assert_eq!(decoded.sequence, 1);
    assert_eq!(decoded.to_string(), "2026-11-22T23:59:58Z #1");
    assert_eq!(ids.count_for_day("order", date(2026, 11, 22)).await?, 1);
    assert_eq!(ids.count_for_day("order", date(2026, 11, 21)).await?, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn day_rollover_starts_a_new_counter() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let clock = ManualClock::at(BEFORE_MIDNIGHT);
    let per_id = IdGenerator::builder(&client)
        .clock(clock.reader())
        .build()?;
    let batched = IdGenerator::builder(&client)
        .block_size(100, 100)
        .clock(clock.reader())
        .build()?;

    let mut before = Vec::new();
    for _ in 0..3 {
        before.push(per_id.next_id("order").await?);
        before.push(batched.next_id("order").await?);
    }
    let sequences: Vec<u32> = before
        .iter()
        .map(|&id| IdGenerator::decode(id).map(|d| d.sequence))
        .collect::<Result<_, _>>()?;
    // Per id: 1, then 102 and 103 after the batched block 2..=101 was reserved.
    assert_eq!(sequences, [1, 2, 102, 3, 103, 4]);
    let counter_before = ids_count(&per_id, date(2026, 11, 22)).await?;

    // Midnight: both modes move to the new day's counter; the batched generator drops
    // the rest of yesterday's block.
    clock.set(BEFORE_MIDNIGHT + 2);
    let per_id_first = IdGenerator::decode(per_id.next_id("order").await?)?;
    let batched_first = IdGenerator::decode(batched.next_id("order").await?)?;
    assert_eq!(per_id_first.date(), date(2026, 11, 23));
    assert_eq!(per_id_first.sequence, 1);
    assert_eq!(batched_first.date(), date(2026, 11, 23));
    assert_eq!(batched_first.sequence, 2);
    assert_eq!(
        ids_count(&per_id, date(2026, 11, 22)).await?,
        counter_before,
        "yesterday's counter must not move after midnight"
    );
    assert_eq!(ids_count(&per_id, date(2026, 11, 23)).await?, 101);
    assert_eq!(
        server.command(&["GET", "icr:order:2026:11:23"])?,
        "101",
        "the new day's key"
    );
    Ok(())
}

async fn ids_count(ids: &IdGenerator, day: NaiveDate) -> anyhow::Result<u64> {
    Ok(ids.count_for_day("order", day).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_reserved_before_midnight_is_not_used_after_it() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let clock = ManualClock::at(BEFORE_MIDNIGHT + 1);
    let batched = IdGenerator::builder(&client)
        .block_size(1000, 1000)
        .clock(clock.reader())
        .build()?;
    let last_of_day = batched.next_id("order").await?;
    assert_eq!(IdGenerator::decode(last_of_day)?.sequence, 1);
    clock.set(BEFORE_MIDNIGHT + 2);
    let mut next_day = Vec::new();
    for _ in 0..5 {
        next_day.push(IdGenerator::decode(batched.next_id("order").await?)?);
    }
    // 2..=1000 of 2026-11-22 were reserved but stay unused: the new day starts at 1.
    assert!(next_day.iter().all(|d| d.date() == date(2026, 11, 23)));
    assert_eq!(
        next_day.iter().map(|d| d.sequence).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_stepping_back_never_makes_ids_smaller() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let clock = ManualClock::at(BEFORE_MIDNIGHT - 100);
    for ids in [
        IdGenerator::builder(&client)
            .clock(clock.reader())
            .build()?,
        IdGenerator::builder(&client)
            .batched()
            .clock(clock.reader())
            .build()?,
    ] {
        clock.set(BEFORE_MIDNIGHT - 100);
        let first = ids.next_id("back").await?;
        clock.set(BEFORE_MIDNIGHT - 3700);
        let second = ids.next_id("back").await?;
        assert!(second > first);
        // The timestamp stays at the last second used until the clock catches up.
        assert_eq!(unix_seconds(second), BEFORE_MIDNIGHT - 100);
        clock.set(BEFORE_MIDNIGHT - 50);
        let third = ids.next_id("back").await?;
        assert!(third > second);
        assert_eq!(unix_seconds(third), BEFORE_MIDNIGHT - 50);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_outside_2022_to_2090_is_an_error() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let clock = ManualClock::at(0);
    for batched in [false, true] {
        let builder = IdGenerator::builder(&client).clock(clock.reader());
        let ids = if batched { builder.batched() } else { builder }.build()?;
        for bad in [EPOCH - 1, -86_400, LAST_SECOND + 1, i64::from(u32::MAX) * 4] {
            clock.set(bad);
            match ids.next_id("order").await {
                Err(e) => match e.store_error::<RedisStoreError>() {
                    Some(RedisStoreError::ClockOutOfRange { unix_seconds }) => {
                        assert_eq!(*unix_seconds, bad);
                    }
                    _ => panic!("clock at {bad}: {e:?}"),
                },
                Ok(id) => panic!("clock at {bad}: {id}"),
            }
        }
        clock.set(EPOCH);
        assert_eq!(ids.next_id("edge").await? >> 32, 0);
        clock.set(LAST_SECOND);
        let last = ids.next_id("edge").await?;
        assert_eq!(last >> 32, (1 << 31) - 1);
        assert!(last > 0, "the sign bit stays clear");
    }
    // Nothing was counted for the rejected clocks.
    assert_eq!(calls(&server, "incr") + calls(&server, "incrby"), 4);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_past_32_bits_of_sequence_is_an_error() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let clock = ManualClock::at(BEFORE_MIDNIGHT);
    let key = "icr:order:2026:11:22";

    let per_id = IdGenerator::builder(&client)
        .clock(clock.reader())
        .build()?;
    server.command(&["SET", key, &(u32::MAX - 1).to_string()])?;
    let last = per_id.next_id("order").await?;
    assert_eq!(IdGenerator::decode(last)?.sequence, u32::MAX);
    match per_id.next_id("order").await {
        Err(e) => match e.store_error::<RedisStoreError>() {
            Some(RedisStoreError::SequenceExhausted { key: k }) => assert_eq!(k, key),
            _ => panic!("expected SequenceExhausted, got {e:?}"),
        },
        Ok(id) => panic!("expected SequenceExhausted, got {id}"),
    }

    // Batched: the numbers left below 2^32 are handed out, then the error; no id twice.
    let key = "icr:batch:2026:11:22";
    server.command(&["SET", key, &(u32::MAX - 5).to_string()])?;
    let batched = IdGenerator::builder(&client)
        .block_size(4, 4)
        .clock(clock.reader())
        .build()?;
    let mut seen = HashSet::new();
    let mut sequences = Vec::new();
    let error = loop {
        match batched.next_id("batch").await {
            Ok(id) => {
                assert!(seen.insert(id), "duplicate id {id}");
                sequences.push(IdGenerator::decode(id)?.sequence);
            }
            Err(e) => break e,
        }
        assert!(sequences.len() <= 5, "ids past 32 bits: {sequences:?}");
    };
    assert!(
        matches!(
            error.store_error::<RedisStoreError>(),
            Some(RedisStoreError::SequenceExhausted { .. })
        ),
        "{error:?}"
    );
    assert_eq!(sequences, (u32::MAX - 4..=u32::MAX).collect::<Vec<_>>());
    // It stays an error for the rest of the day, and the next day starts afresh.
    assert!(matches!(
        batched
            .next_id("batch")
            .await
            .as_ref()
            .err()
            .and_then(Error::store_error::<RedisStoreError>),
        Some(RedisStoreError::SequenceExhausted { .. })
    ));
    clock.set(BEFORE_MIDNIGHT + 2);
    assert_eq!(
        IdGenerator::decode(batched.next_id("batch").await?)?.sequence,
        1
    );
    assert_eq!(
        IdGenerator::decode(per_id.next_id("order").await?)?.sequence,
        1
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_prefixes_are_invalid_arguments() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let long = "x".repeat(MAX_ID_PREFIX_LEN + 1);
    let bad = [
        "",
        "two words",
        "tab\t",
        "line\n",
        "glob*",
        "que?",
        "[set]",
        "{tag}",
        "back\\slash",
        &long,
    ];
    // A clock that stands still, so both generators count on one day's keys.
    let clock = ManualClock::at(BEFORE_MIDNIGHT);
    for ids in [
        IdGenerator::builder(&client)
            .clock(clock.reader())
            .build()?,
        IdGenerator::builder(&client)
            .batched()
            .clock(clock.reader())
            .build()?,
    ] {
        for prefix in bad {
            assert!(
                matches!(ids.next_id(prefix).await, Err(Error::InvalidArgument(_))),
                "{prefix:?}"
            );
            assert!(matches!(
                ids.next_ids(prefix, 2).await,
                Err(Error::InvalidArgument(_))
            ));
            assert!(matches!(
                ids.count_for_day(prefix, date(2026, 1, 1)).await,
                Err(Error::InvalidArgument(_))
            ));
        }
        assert!(ids.next_id(&"x".repeat(MAX_ID_PREFIX_LEN)).await.is_ok());
        assert!(ids.next_id("shop:order/eu").await.is_ok());
        for count in [0, ferrisson_redis::MAX_IDS_PER_CALL + 1, u32::MAX] {
            assert!(matches!(
                ids.next_ids("order", count).await,
                Err(Error::InvalidArgument(_))
            ));
        }
    }
    for (min, max) in [(0, 1), (5, 4), (1, ferrisson_redis::MAX_BLOCK + 1)] {
        assert!(matches!(
            IdGenerator::builder(&client).block_size(min, max).build(),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        IdGenerator::decode(-5),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(DBSIZE_AFTER_TWO_GOOD_PREFIXES, server.command(&["DBSIZE"])?);
    Ok(())
}

const DBSIZE_AFTER_TWO_GOOD_PREFIXES: &str = ":2";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_redis_is_an_error_not_a_made_up_id() -> anyhow::Result<()> {
    let mut server = RedisServer::start()?;
    let client = Client::builder(&server.url())
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .reconnect_retries(0)
        .connect()
        .await?;
    let per_id = client.id_generator();
    let batched = IdGenerator::builder(&client).block_size(4, 4).build()?;
    let before = batched.next_id("order").await?;
    server.kill()?;
    let error = per_id.next_id("order").await.expect_err("redis is gone");
    assert!(error.is_connection_error(), "{error:?}");
    // The batched generator still hands out the rest of its block (those numbers are
    // reserved), then reports the error instead of inventing ids.
    let mut after = vec![before];
    let error = loop {
        match batched.next_id("order").await {
            Ok(id) => after.push(id),
            Err(e) => break e,
        }
        assert!(after.len() <= 4, "more ids than the block held");
    };
    assert!(error.is_connection_error(), "{error:?}");
    assert!(after.windows(2).all(|w| w[0] < w[1]));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_ids_reserves_a_run_with_one_round_trip() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let ids = client.id_generator();
    let first = ids.next_id("order").await?;
    let run = ids.next_ids("order", 1000).await?;
    assert_eq!(run.len(), 1000);
    assert!(run[0] > first);
    assert!(run.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(calls(&server, "incrby"), 1);
    let day = IdGenerator::decode(first)?.date();
    assert!(ids.count_for_day("order", day).await? >= 1001);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_callers_waits_on_a_handful_of_reservations() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let ids = IdGenerator::builder(&client)
        .block_size(16, 1 << 16)
        .build()?;
    // 300 callers arrive at once on an empty generator. Each queued caller makes sure
    // the reservations in flight cover it, so the burst sends a few INCRBY together
    // (16, then doubling while they come fast: 16 + 32 + 64 + 128 + 256 >= 300), not one
    // per caller. The bound leaves room for replies that come back mid-burst.
    let (per_task, _) = ids_from_tasks(&ids, "burst", 300, 1).await?;
    assert_eq!(check_ids(&per_task, 0, i64::MAX).len(), 300);
    let reservations = calls(&server, "incrby");
    assert!(
        (1..=30).contains(&reservations),
        "{reservations} INCRBY for a burst of 300"
    );
    Ok(())
}

#[test]
fn generators_are_send_sync_and_their_futures_send() {
    fn is_send_sync<T: Send + Sync + Clone + std::fmt::Debug>() {}
    is_send_sync::<IdGenerator>();
    is_send_sync::<ferrisson_redis::DecodedId>();
}

/// Compiles only if the futures are `Send` (never run).
fn _futures_are_send(ids: &IdGenerator) {
    fn is_send<T: Send>(_: T) {}
    is_send(ids.next_id("x"));
    is_send(ids.next_ids("x", 2));
    is_send(ids.count_for_day("x", date(2026, 1, 1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_gives_up_while_waiting_strands_nobody() -> anyhow::Result<()> {
    let server = RedisServer::start()?;
    let client = Client::connect(&server.url()).await?;
    let ids = IdGenerator::builder(&client).block_size(2, 2).build()?;
    // With the server frozen, the reservation stays in flight and the callers queue.
    server.pause()?;
    let gave_up = tokio::time::timeout(Duration::from_millis(100), ids.next_id("order")).await;
    assert!(gave_up.is_err(), "no id can be made while redis is frozen");
    let waiting: Vec<_> = (0..3)
        .map(|_| {
            let ids = ids.clone();
            tokio::spawn(async move { ids.next_id("order").await })
        })
        .collect();
    tokio::task::yield_now().await;
    server.resume()?;
    let mut got = Vec::new();
    for task in waiting {
        got.push(task.await??);
    }
    got.push(ids.next_id("order").await?);
    got.sort_unstable();
    got.dedup();
    assert_eq!(got.len(), 4, "every caller still queued got its own id");
    Ok(())
}

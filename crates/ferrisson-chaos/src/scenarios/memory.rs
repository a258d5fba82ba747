//! Memory pressure on the lock server: an evicting `maxmemory-policy` that drops the
//! held lock's key (a documented unsafe case), and `noeviction` with memory full (must
//! stay safe).
//!
//! Each iteration runs its own `redis-server`, since both scenarios leave the server's
//! memory settings and contents in a state no other scenario should inherit.

use std::time::Instant;

use anyhow::{Context, bail};
use ferrisson_testkit::{FullMemory, RedisServer};

use crate::checker::Counters;
use crate::harness::clients::connect;
use crate::harness::config::Config;
use crate::harness::expectations::Expectations;
use crate::harness::record::{
    acquire, belief, critical_section, enter_checked, keys_left, release, token, try_acquire,
    watch, write_with_token,
};
use crate::harness::scenario::{FaultScenario, Iteration};
use crate::history::EventKind;
use crate::resource::Resource;

/// One junk value. Large, so that a few of them fill the server and each eviction
/// frees enough room to stop the eviction loop: the small keys (the lock and its fencing
/// counter) then compete with only a handful of junk keys for each random pick.
const JUNK_VALUE_BYTES: usize = 64 * 1024;

/// `maxmemory` of `key-evicted`. An empty `redis-server` 7.0 uses about 0.9 MB, so this
/// leaves room for about a dozen junk values.
const EVICTING_MAXMEMORY: &str = "2mb";

/// Writes after which `key-evicted` gives up on seeing the lock key evicted. At about a
/// dozen resident keys per random pick this is never reached by chance.
const MAX_JUNK_KEYS: usize = 10_000;

const EVICTED_AFTER: &str = "fill_until_lock_evicted";
const ACQUIRE_AFTER_FREED: &str = "acquire_after_memory_freed";

/// The scenarios of this module: what the server does when memory runs out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemoryPressure {
    /// `allkeys-random` eviction drops the held lock's key.
    KeyEvicted,
    /// `noeviction`: writes refused, the lock kept.
    MemoryFull,
}

impl FaultScenario for MemoryPressure {
    /// A server per iteration (see the module's notes).
    type Setup = ();

    fn is_documented_unsafe(self) -> bool {
        self == Self::KeyEvicted
    }

    async fn run_once(
        self,
        config: &Config,
        _shared: &mut (),
        it: &Iteration,
    ) -> anyhow::Result<()> {
        match self {
            Self::KeyEvicted => key_evicted(config, it).await,
            Self::MemoryFull => memory_full(config, it).await,
        }
    }

    fn expect(self, _config: &Config, c: &Counters, expect: &mut Expectations) {
        match self {
            // Each iteration grants A and B once; A's renewal finds its key gone, so the
            // lost-lock signal must fire for A, and only for A, every time.
            Self::KeyEvicted if c.lost_signals * 2 != c.acquires_ok => {
                expect.fail(format!(
                    "lost signals = {}, expected one per iteration (half the {} grants): \
                     the holder whose key was evicted must be told",
                    c.lost_signals, c.acquires_ok
                ));
            }
            Self::KeyEvicted => {}
            Self::MemoryFull => {
                // The renewal and the release scripts are flagged `allow-oom` (and create
                // no key), so the holder must not lose its lock to a full memory.
                if c.lost_signals != 0 {
                    expect.fail(format!(
                        "lost signals = {}, expected 0: the holder must keep renewing while \
                         memory is full",
                        c.lost_signals
                    ));
                }
                // Per iteration: A granted, B refused while A holds, B refused while
                // memory is full (the acquire creates keys), B granted once the junk is
                // gone.
                if c.acquires_ok != c.acquires_failed {
                    expect.fail(format!(
                        "{} grants and {} refusals, expected as many of each (A; B after the \
                         memory was freed / B while A held; B while memory was full)",
                        c.acquires_ok, c.acquires_failed
                    ));
                }
            }
        }
    }
}

/// Junk keys written from a raw connection, so that the lock's client sees nothing but
/// their effect on the server's memory.
struct Junk<'a> {
    server: &'a RedisServer,
    value: String,
    keys: Vec<String>,
}

impl<'a> Junk<'a> {
    fn new(server: &'a RedisServer) -> Self {
        Self {
            server,
            value: "x".repeat(JUNK_VALUE_BYTES),
            keys: Vec::new(),
        }
    }

    /// Writes one more junk key; returns the server's reply line (`+OK` or an error).
    fn add(&mut self) -> anyhow::Result<String> {
        let key = format!("chaos-junk:{}", self.keys.len());
        let reply = self.server.command(&["SET", &key, &self.value])?;
        self.keys.push(key);
        Ok(reply)
    }

    /// Deletes every junk key written (some may be evicted already), and nothing else:
    /// the lock's keys must stay as the scenario left them.
    fn clear(&mut self) -> anyhow::Result<()> {
        for chunk in self.keys.chunks(500) {
            let mut args = vec!["DEL"];
            args.extend(chunk.iter().map(String::as_str));
            let reply = self.server.command(&args)?;
            if reply.starts_with('-') {
                bail!("deleting the junk failed: {reply}");
            }
        }
        self.keys.clear();
        Ok(())
    }
}

/// A holds the lock; junk is written until an `allkeys-random` eviction removes the lock
/// key; the pressure passes (junk deleted); B takes the lock while A still believes it
/// holds it. A, well-behaved, checks `is_held()` before writing, writes with its token,
/// and watches for a lease while B works.
async fn key_evicted(config: &Config, it: &Iteration) -> anyhow::Result<()> {
    let (a, b, lease) = (&it.a, &it.b, config.lease);
    let resource = Resource::default();
    // allkeys-random, not allkeys-lru: the watchdog touches the lock key every third of
    // a lease, so under LRU it goes only after keys idle for longer, and among keys
    // touched within the LRU clock's one-second resolution by sampling luck: whether
    // it goes would depend on what else the server holds. Under random eviction every
    // key is equally likely to go, which is what any evicting policy allows at worst.
    // (The volatile-* policies are worse still for locks: they evict only keys with a
    // TTL, and the lock is the key with a TTL.)
    let server = RedisServer::start_with_args(&[
        "--maxmemory",
        EVICTING_MAXMEMORY,
        "--maxmemory-policy",
        "allkeys-random",
    ])
    .context("redis-server")?;
    let lock_a = connect(&server.url(), lease).await?.lock(&it.name)?;
    let cb = connect(&server.url(), lease).await?;
    let lock = cb.lock(&it.name)?;
    let Some(guard) = acquire(a, 0, &lock_a, lease * 10).await else {
        bail!("A could not take the lock on an empty server");
    };
    enter_checked(a, 0, &guard, &resource);

    let mut junk = Junk::new(&server);
    let started = Instant::now();
    // Each command run above maxmemory first evicts random keys until memory fits, so
    // the EXISTS behind is_locked() sees what the previous SET pushed out.
    while lock.is_locked().await? {
        if junk.keys.len() >= MAX_JUNK_KEYS {
            bail!("the lock key survived {MAX_JUNK_KEYS} junk writes");
        }
        let reply = junk.add()?;
        if reply.starts_with('-') {
            bail!("a junk write was refused under allkeys-random: {reply}");
        }
    }
    a.record(
        0,
        EventKind::Measure {
            name: EVICTED_AFTER.into(),
            millis: started.elapsed().as_millis() as u64,
        },
    );
    tracing::debug!(junk_keys = junk.keys.len(), "lock key evicted");
    // The pressure passes before B comes, so that B's own keys are not evicted in turn:
    // the run shows one eviction, not a cascade.
    junk.clear()?;

    if let Some(gb) = acquire(b, 0, &lock, lease * 10).await {
        resource.enter(b, 0, token(&gb));
        // Nothing has told A yet: its next renewal is up to a third of a lease away.
        belief(a, 0, &guard);
        if guard.is_held() {
            write_with_token(a, 0, &guard, &resource);
        }
        let b_section = async {
            watch(b, 0, &gb, lease / 4).await;
            if gb.is_held() {
                write_with_token(b, 0, &gb, &resource);
            }
            resource.exit(b, 0);
            release(b, 0, gb).await;
        };
        // A's watchdog renewal finds the key gone or taken: the lost signal.
        tokio::join!(b_section, watch(a, 0, &guard, lease));
    }
    resource.exit(a, 0);
    release(a, 0, guard).await;
    keys_left(b, &cb, &it.name, lease).await
}

/// A holds the lock; the server under `noeviction` is filled past `maxmemory`; A must keep
/// renewing for two leases, B must be refused; A releases; B's acquire under full memory
/// is refused (OOM); the junk is deleted; B takes the lock.
async fn memory_full(config: &Config, it: &Iteration) -> anyhow::Result<()> {
    let (a, b, lease) = (&it.a, &it.b, config.lease);
    let resource = Resource::default();
    let server = RedisServer::start_with_args(&["--maxmemory-policy", "noeviction"])
        .context("redis-server")?;
    let lock_a = connect(&server.url(), lease).await?.lock(&it.name)?;
    let cb = connect(&server.url(), lease).await?;
    let lock_b = cb.lock(&it.name)?;
    let Some(guard) = acquire(a, 0, &lock_a, lease * 10).await else {
        bail!("A could not take the lock on an empty server");
    };
    resource.enter(a, 0, token(&guard));

    // Held full by a wide margin until the junk goes (see `FullMemory`).
    let memory = FullMemory::fill(&server)?;

    // Renewals every third of a lease, for two leases, all while memory is full.
    watch(a, 0, &guard, lease * 2).await;
    if let Some(g) = try_acquire(b, 0, &lock_b).await {
        // A double grant: the checker counts it.
        release(b, 0, g).await;
    }
    if guard.is_held() {
        write_with_token(a, 0, &guard, &resource);
    }
    resource.exit(a, 0);
    release(a, 0, guard).await;

    // The lock is free now, but a new hold needs new keys: the acquire script is not
    // flagged `allow-oom`, so Redis refuses it before it runs while memory is full.
    if let Some(g) = try_acquire(b, 1, &lock_b).await {
        critical_section(b, 1, g, &resource, lease / 4).await;
    }

    memory.free()?;
    let freed = Instant::now();
    if let Some(g) = acquire(b, 2, &lock_b, lease * 10).await {
        b.record(
            2,
            EventKind::Measure {
                name: ACQUIRE_AFTER_FREED.into(),
                millis: freed.elapsed().as_millis() as u64,
            },
        );
        critical_section(b, 2, g, &resource, lease / 4).await;
    }
    keys_left(a, &cb, &it.name, lease).await
}

//! The queue under one prefix, as etcd's `concurrency` package keeps it (its `Mutex` and
//! `Election`): each contender's key is `PREFIX` + its lease id in hex, created only if
//! absent; the key's create revision is its place in the queue; the first by create
//! revision holds; a waiter watches the deletion of the key just before its own.
//!
//! Clients of that package (`etcdctl lock`, Go services) and ferrisson queue together
//! under the same prefix, so they exclude each other.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, WatchOptions,
};
use ferrisson_core::hold::HoldState;
use ferrisson_core::{Error, Result};

use crate::error::store;

/// How long the own-key watch waits before opening a new watch after one failed.
const RETRY_DELAY: Duration = Duration::from_millis(200);

/// When a contender in a queue may go ahead.
#[derive(Debug, Clone)]
pub(crate) enum Admission {
    /// No key under this prefix is older (a lock, an election, a writer: the whole
    /// queue; a reader: the writers' keys).
    NoneOlder(Arc<str>),
    /// Fewer than this many keys under this prefix are older (a semaphore's permits).
    FewerOlder(Arc<str>, u32),
}

impl Admission {
    /// The prefix whose keys decide.
    pub(crate) fn queue(&self) -> &Arc<str> {
        match self {
            Self::NoneOlder(queue) | Self::FewerOlder(queue, _) => queue,
        }
    }
}

/// A contender's place in the queue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place {
    /// The create revision of the contender's key (its fencing token).
    pub(crate) revision: i64,
    /// True when no key under the queue's prefix is older: the contender may go ahead.
    pub(crate) first: bool,
}

fn first_created(prefix: &str) -> TxnOp {
    TxnOp::get(
        prefix,
        Some(
            GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend)
                .with_limit(1),
        ),
    )
}

fn header_revision(header: Option<&etcd_client::ResponseHeader>) -> Result<i64> {
    header
        .map(etcd_client::ResponseHeader::revision)
        .ok_or_else(|| Error::Protocol("etcd answered without a header".into()))
}

/// Creates `key` under `lease` with `value` if it is absent, in one transaction with a
/// read of the first key under `queue` (etcd's `Mutex.Lock` transaction).
///
/// A key that exists already can only be a leftover of this client (its lease is this
/// client's, and the client never has two contenders on one key): an earlier release
/// that did not reach etcd. It is deleted and the key created anew.
pub(crate) async fn enqueue(
    etcd: &etcd_client::Client,
    queue: &str,
    key: &str,
    lease: i64,
    value: &[u8],
) -> Result<Place> {
    let mut kv = etcd.kv_client();
    for _ in 0..3 {
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease))),
                first_created(queue),
            ])
            .or_else([TxnOp::get(key, None), first_created(queue)]);
        let answer = kv.txn(txn).await.map_err(store)?;
        let responses = answer.op_responses();
        if !answer.succeeded() {
            if let Some(TxnOpResponse::Get(existing)) = responses.first()
                && let Some(kv) = existing.kvs().first()
            {
                remove(etcd, key, kv.create_revision()).await?;
            }
            continue;
        }
        let revision = header_revision(answer.header())?;
        let first = match responses.get(1) {
            Some(TxnOpResponse::Get(first)) => first
                .kvs()
                .first()
                .is_none_or(|kv| kv.create_revision() == revision),
            _ => {
                return Err(Error::Protocol(
                    "etcd's lock transaction answered no range".into(),
                ));
            }
        };
        return Ok(Place { revision, first });
    }
    Err(Error::Protocol(format!(
        "key {key:?} kept reappearing: is another client using this client's lease?"
    )))
}

/// Waits until `admission` lets the contender with create revision `revision` go ahead.
///
/// # Cancel safety
///
/// Cancel safe: it only reads and watches.
pub(crate) async fn wait_for_admission(
    etcd: &etcd_client::Client,
    admission: &Admission,
    revision: i64,
) -> Result<()> {
    match admission {
        Admission::NoneOlder(queue) => wait_for_predecessors(etcd, queue, revision).await,
        Admission::FewerOlder(queue, permits) => loop {
            let (older, at) = match count_older(etcd, queue, revision).await {
                Ok(counted) => counted,
                Err(e) if e.is_transient() => {
                    tokio::time::sleep(RETRY_DELAY).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if older < i64::from(*permits) {
                return Ok(());
            }
            // Any deletion under the prefix may be an older key's: count again.
            wait_for_deletion(etcd, queue.as_bytes(), at + 1, true).await?;
        },
    }
}

/// Whether `admission` lets the contender with create revision `revision` go ahead now.
pub(crate) async fn admitted_now(
    etcd: &etcd_client::Client,
    admission: &Admission,
    revision: i64,
) -> Result<bool> {
    let (older, _) = count_older(etcd, admission.queue(), revision).await?;
    Ok(match admission {
        Admission::NoneOlder(_) => older == 0,
        Admission::FewerOlder(_, permits) => older < i64::from(*permits),
    })
}

/// How many keys under `prefix` are older than `revision`, and at which revision.
async fn count_older(
    etcd: &etcd_client::Client,
    prefix: &str,
    revision: i64,
) -> Result<(i64, i64)> {
    // Keys, not a count: etcd counts before it filters by create revision, so a
    // count-only range would count the younger keys too.
    let options = GetOptions::new()
        .with_prefix()
        .with_keys_only()
        .with_max_create_revision(revision - 1);
    let older = etcd
        .kv_client()
        .get(prefix, Some(options))
        .await
        .map_err(store)?;
    let count = i64::try_from(older.kvs().len()).unwrap_or(i64::MAX);
    Ok((count, header_revision(older.header())?))
}

/// Waits until no key under `prefix` is older than `revision` (etcd's `waitDeletes`):
/// watches the youngest older key's deletion, again until none is left.
///
/// # Cancel safety
///
/// Cancel safe: it only reads and watches.
pub(crate) async fn wait_for_predecessors(
    etcd: &etcd_client::Client,
    prefix: &str,
    revision: i64,
) -> Result<()> {
    let mut kv = etcd.kv_client();
    loop {
        let options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(1)
            .with_max_create_revision(revision - 1);
        let older = match kv.get(prefix, Some(options)).await {
            Ok(older) => older,
            // A member went away mid-wait: ask again (another member answers).
            Err(e) if crate::error::is_retryable(&e) => {
                tokio::time::sleep(RETRY_DELAY).await;
                continue;
            }
            Err(e) => return Err(store(e)),
        };
        let Some(predecessor) = older.kvs().first() else {
            return Ok(());
        };
        let at = header_revision(older.header())?;
        wait_for_deletion(etcd, predecessor.key(), at, false).await?;
    }
}

/// Waits for a deletion of `key` at or after revision `from`; returns early (for the
/// caller to look again) when the watch is cancelled by etcd or its stream breaks (a
/// member went away: the next look goes to another). The caller bounds the retries: its
/// lease ends when no member answers for a whole TTL.
async fn wait_for_deletion(
    etcd: &etcd_client::Client,
    key: &[u8],
    from: i64,
    prefix: bool,
) -> Result<()> {
    let mut options = WatchOptions::new().with_start_revision(from);
    if prefix {
        options = options.with_prefix();
    }
    let Ok(mut stream) = etcd.watch_client().watch(key, Some(options)).await else {
        tokio::time::sleep(RETRY_DELAY).await;
        return Ok(());
    };
    loop {
        match stream.message().await {
            Ok(Some(answer)) => {
                if answer.canceled()
                    || answer
                        .events()
                        .iter()
                        .any(|event| event.event_type() == EventType::Delete)
                {
                    return Ok(());
                }
            }
            Ok(None) => return Ok(()),
            Err(_) => {
                tokio::time::sleep(RETRY_DELAY).await;
                return Ok(());
            }
        }
    }
}

/// Whether `key` still exists with create revision `revision`.
pub(crate) async fn still_there(
    etcd: &etcd_client::Client,
    key: &str,
    revision: i64,
) -> Result<bool> {
    let found = etcd.kv_client().get(key, None).await.map_err(store)?;
    Ok(found
        .kvs()
        .first()
        .is_some_and(|kv| kv.create_revision() == revision))
}

/// Deletes `key` if it still has create revision `revision` (so never a newer key of the
/// same name); `Ok(false)` when it was gone or replaced.
pub(crate) async fn remove(etcd: &etcd_client::Client, key: &str, revision: i64) -> Result<bool> {
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, revision)])
        .and_then([TxnOp::delete(key, None)]);
    let answer = etcd.kv_client().txn(txn).await.map_err(store)?;
    Ok(answer.succeeded())
}

/// Watches `key` (created at `revision`) until it is deleted, then marks `hold` lost: the
/// lost signal of a key deleted behind its holder's back (by hand, by a revoked or
/// expired lease). Runs until aborted.
pub(crate) async fn watch_own_key(
    etcd: etcd_client::Client,
    key: String,
    revision: i64,
    hold: Arc<HoldState>,
) {
    let mut from = revision + 1;
    loop {
        match watch_once(&etcd, &key, from).await {
            Ok(Seen::Deleted) => {
                hold.mark_lost();
                return;
            }
            Ok(Seen::Interrupted(next)) => from = next.max(from),
            Err(_) => tokio::time::sleep(RETRY_DELAY).await,
        }
        // After an interruption, events may have been compacted away: read the key.
        match still_there(&etcd, &key, revision).await {
            Ok(true) => {}
            Ok(false) => {
                hold.mark_lost();
                return;
            }
            Err(_) => tokio::time::sleep(RETRY_DELAY).await,
        }
    }
}

enum Seen {
    Deleted,
    /// The watch ended without a deletion; watch again from this revision.
    Interrupted(i64),
}

async fn watch_once(etcd: &etcd_client::Client, key: &str, from: i64) -> Result<Seen> {
    let mut stream = etcd
        .watch_client()
        .watch(key, Some(WatchOptions::new().with_start_revision(from)))
        .await
        .map_err(store)?;
    let mut next = from;
    while let Some(answer) = stream.message().await.map_err(store)? {
        if answer
            .events()
            .iter()
            .any(|event| event.event_type() == EventType::Delete)
        {
            return Ok(Seen::Deleted);
        }
        if let Some(header) = answer.header() {
            next = next.max(header.revision() + 1);
        }
        if answer.canceled() {
            break;
        }
    }
    Ok(Seen::Interrupted(next))
}

//! An etcd lease the client holds keys under: granted, kept alive every TTL/3 by a
//! background task (the watchdog), and the holds that depend on it told when it renews
//! and when it ends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use ferrisson_core::Result;
use ferrisson_core::hold::HoldState;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::store;

/// How long the keeper waits before opening a new keep-alive stream after one failed.
const RETRY_DELAY: Duration = Duration::from_millis(200);

/// One lease: its id (the suffix of every key under it), until when it is known to live,
/// and the holds that end with it.
#[derive(Debug)]
pub(crate) struct LeaseHandle {
    pub(crate) id: i64,
    /// The TTL etcd granted (whole seconds).
    pub(crate) ttl: Duration,
    /// Local deadline: the last renewal's (or the grant's) send time plus the TTL.
    deadline: Mutex<Instant>,
    /// Set once the lease is known gone (revoked, expired, or not renewed in time) or
    /// given up.
    ended: AtomicBool,
    /// Woken when `ended` is set, and when the keeper should stop.
    changed: Notify,
    stop: AtomicBool,
    holds: Mutex<Vec<Weak<HoldState>>>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl LeaseHandle {
    /// Grants a lease of `ttl` (rounded up to whole seconds, at least one) on `etcd`;
    /// with `keep`, a background task keeps it alive until [`LeaseHandle::stop`].
    pub(crate) async fn grant(
        etcd: &etcd_client::Client,
        ttl: Duration,
        keep: bool,
    ) -> Result<Arc<Self>> {
        let seconds = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        let seconds = i64::try_from(seconds.max(1)).unwrap_or(i64::MAX);
        let sent = Instant::now();
        let granted = etcd
            .lease_client()
            .grant(seconds, None)
            .await
            .map_err(store)?;
        let granted_ttl = Duration::from_secs(u64::try_from(granted.ttl()).unwrap_or(0));
        let lease = Arc::new(Self {
            id: granted.id(),
            ttl: granted_ttl,
            deadline: Mutex::new(sent + granted_ttl),
            ended: AtomicBool::new(false),
            changed: Notify::new(),
            stop: AtomicBool::new(false),
            holds: Mutex::default(),
        });
        if keep {
            tokio::spawn(keep_alive(etcd.clone(), Arc::clone(&lease)));
        }
        Ok(lease)
    }

    /// The lease id in lowercase hexadecimal: the last part of its keys' names, as
    /// etcd's `concurrency` package spells it.
    pub(crate) fn hex(&self) -> String {
        format!("{:x}", self.id)
    }

    /// Until when the lease is known to live.
    pub(crate) fn deadline(&self) -> Instant {
        *locked(&self.deadline)
    }

    /// True once the lease is known gone or given up, or its deadline passed.
    pub(crate) fn is_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire) || Instant::now() >= self.deadline()
    }

    /// Makes `hold` follow the lease: its deadline moves with each renewal, and it is
    /// lost when the lease ends.
    pub(crate) fn attach(&self, hold: &Arc<HoldState>) {
        locked(&self.holds).push(Arc::downgrade(hold));
        if self.ended.load(Ordering::Acquire) {
            hold.mark_lost();
        }
    }

    /// Stops `hold` following the lease (it was released).
    pub(crate) fn detach(&self, hold: &Arc<HoldState>) {
        let target = Arc::downgrade(hold);
        locked(&self.holds).retain(|h| !h.ptr_eq(&target) && h.strong_count() > 0);
    }

    /// Resolves once the lease is known gone (or its deadline passes).
    pub(crate) async fn ended(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.is_ended() {
                return;
            }
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep_until(self.deadline()) => {}
            }
        }
    }

    /// Stops keeping the lease alive (it then expires after its TTL unless revoked).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.changed.notify_waiters();
    }

    /// Marks the lease gone: every hold on it is lost.
    pub(crate) fn end(&self) {
        self.ended.store(true, Ordering::Release);
        self.changed.notify_waiters();
        let holds = std::mem::take(&mut *locked(&self.holds));
        for hold in holds.iter().filter_map(Weak::upgrade) {
            hold.mark_lost();
        }
    }

    /// Records a renewal sent at `sent` that etcd answered with `ttl` seconds left.
    fn renewed(&self, sent: Instant, ttl: i64) {
        let Ok(ttl) = u64::try_from(ttl) else {
            return self.end();
        };
        if ttl == 0 {
            return self.end();
        }
        let deadline = sent + Duration::from_secs(ttl);
        *locked(&self.deadline) = deadline;
        let mut holds = locked(&self.holds);
        holds.retain(|hold| match hold.upgrade() {
            Some(hold) => {
                hold.extend(deadline);
                true
            }
            None => false,
        });
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
}

/// The watchdog of one lease: a keep-alive every TTL/3 on one stream; a new stream when
/// one fails, until the lease's deadline passes (then the lease is lost).
async fn keep_alive(etcd: etcd_client::Client, lease: Arc<LeaseHandle>) {
    let period = (lease.ttl / 3).max(Duration::from_millis(100));
    while !lease.stopping() && !lease.is_ended() {
        let mut leases = etcd.lease_client();
        let stream = tokio::select! {
            opened = leases.keep_alive(lease.id) => opened,
            () = lease.ended() => break,
        };
        match stream {
            Ok((mut keeper, mut answers)) => loop {
                if lease.stopping() {
                    return;
                }
                let sent = Instant::now();
                if keeper.keep_alive().await.is_err() {
                    break;
                }
                let answer = tokio::time::timeout_at(lease.deadline(), answers.message()).await;
                match answer {
                    Ok(Ok(Some(answer))) => lease.renewed(sent, answer.ttl()),
                    // The stream failed or ended, or the deadline passed: a new stream,
                    // unless the lease is over.
                    _ => break,
                }
                if lease.is_ended() {
                    lease.end();
                    return;
                }
                let changed = lease.changed.notified();
                tokio::select! {
                    () = tokio::time::sleep(period) => {}
                    () = changed => {}
                }
            },
            // Opening answers the first keep-alive: "lease not found" means it is gone.
            Err(etcd_client::Error::LeaseKeepAliveError(_)) => {
                lease.end();
                return;
            }
            Err(_) => {}
        }
        if lease.is_ended() {
            break;
        }
        tokio::time::sleep(RETRY_DELAY).await;
    }
    if !lease.stopping() {
        lease.end();
    }
}

//! An etcd lease the client holds keys under: granted, kept alive every TTL/6 by a
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

/// How often the keeper renews a lease of `ttl`: six times per TTL. A renewal can only
/// be counted from when it was sent, and a leader failover answers none (its followers
/// hold them until a new leader takes over): renewing every TTL/6 leaves at least 5/6 of
/// the TTL for a failover to end in, where etcd's Go client (every TTL/3) leaves 2/3 —
/// with a 2 s TTL, 1.67 s against 1.33 s, and elections of the test kit's members took
/// up to 1.36 s on a loaded machine.
pub(crate) fn renewal_period(ttl: Duration) -> Duration {
    (ttl / 6).max(MIN_PERIOD)
}

/// The shortest renewal period (and patience for an answer).
const MIN_PERIOD: Duration = Duration::from_millis(100);

/// The watchdog of one lease: a keep-alive every [`renewal_period`] on one stream, and a
/// new stream (on whichever member the connection picks) when the stream fails, or when
/// an answer (or the stream's opening, which is a renewal too) is later than one renewal
/// period: a stream can hang on a member that stopped answering (frozen, cut off, its
/// connection silently dead) or that has no leader, while the other members would
/// answer. The client asks etcd to require a leader (`hasleader`), so a member that
/// knows it has none refuses the stream at once. Until the lease's deadline passes
/// (then the lease is lost).
async fn keep_alive(etcd: etcd_client::Client, lease: Arc<LeaseHandle>) {
    let period = renewal_period(lease.ttl);
    // The TTL etcd answers every renewal with (etcd's `Renew` always answers the lease's
    // granted TTL).
    let ttl_seconds = i64::try_from(lease.ttl.as_secs()).unwrap_or(i64::MAX);
    while !lease.stopping() && !lease.is_ended() {
        let mut leases = etcd.lease_client();
        let sent = Instant::now();
        let patience = (sent + period).min(lease.deadline());
        let opened = tokio::select! {
            opened = tokio::time::timeout_at(patience, leases.keep_alive(lease.id)) => opened,
            () = lease.ended() => break,
        };
        match opened {
            // Opening sends a renewal and waits for its answer: a live lease.
            Ok(Ok((keeper, answers))) => {
                lease.renewed(sent, ttl_seconds);
                if keep_renewing(&lease, keeper, answers, period).await {
                    break;
                }
                // The stream failed or was late: a new one at once.
                continue;
            }
            // Opening answers the first keep-alive: "lease not found" means it is gone.
            Ok(Err(etcd_client::Error::LeaseKeepAliveError(_))) => {
                lease.end();
                return;
            }
            // Refused (a member down, or without a leader): again after a pause.
            Ok(Err(_)) => {}
            // No answer in a renewal period: another stream at once.
            Err(_) => continue,
        }
        if lease.is_ended() {
            break;
        }
        tokio::select! {
            () = tokio::time::sleep(RETRY_DELAY) => {}
            () = lease.ended() => break,
        }
    }
    if !lease.stopping() {
        lease.end();
        // Given up for lost here (no renewal answered before its deadline), it may still
        // live in etcd, for up to a TTL and a whole TTL more when a new leader resets it,
        // with the keys of withdrawn contenders and released holds whose deletes failed
        // still under it. Nothing relies on it any more (its holds are lost, its
        // contenders withdrawn): revoked as soon as a member answers.
        revoke(&etcd, &lease).await;
    }
}

/// Revokes `lease` (its keys go with it), trying again after transient failures for two
/// TTLs: a revoke sent while the members have no leader (a failover, or a healed cut
/// whose returning member forces an election) fails, and the next leader then resets
/// the lease to a whole TTL, keeping its keys that much longer.
pub(crate) async fn revoke(etcd: &etcd_client::Client, lease: &LeaseHandle) {
    let until = Instant::now() + lease.ttl * 2;
    while Instant::now() < until {
        match tokio::time::timeout_at(until, etcd.lease_client().revoke(lease.id)).await {
            Ok(Err(e)) if crate::error::is_retryable(&e) => {
                tokio::time::sleep(RETRY_DELAY).await;
            }
            // Revoked, gone already ("lease not found"), or out of time.
            _ => return,
        }
    }
}

/// Renews `lease` every `period` on one open stream. Returns true when the keeper is
/// done (stopped, or the lease ended: the caller ends it), false when the stream failed
/// or an answer was later than a period (the caller opens a new one).
async fn keep_renewing(
    lease: &LeaseHandle,
    mut keeper: etcd_client::LeaseKeeper,
    mut answers: etcd_client::LeaseKeepAliveStream,
    period: Duration,
) -> bool {
    loop {
        // Until the next renewal: stop when told, and notice a stream that breaks
        // meanwhile (its member killed) rather than at the next send.
        let next = Instant::now() + period;
        loop {
            let changed = lease.changed.notified();
            if lease.stopping() || lease.is_ended() {
                return true;
            }
            tokio::select! {
                () = tokio::time::sleep_until(next) => break,
                () = changed => {}
                idle = answers.message() => match idle {
                    // Nothing is expected between renewals: ignored.
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => return false,
                },
            }
        }
        let sent = Instant::now();
        if keeper.keep_alive().await.is_err() {
            return false;
        }
        let patience = (sent + period).min(lease.deadline());
        match tokio::time::timeout_at(patience, answers.message()).await {
            Ok(Ok(Some(answer))) => lease.renewed(sent, answer.ttl()),
            // The stream failed or ended, or the answer is late (or the deadline
            // passed): a new stream, unless the lease is over.
            _ => return false,
        }
    }
}

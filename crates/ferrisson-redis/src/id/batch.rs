//! Batched mode: blocks of sequence numbers reserved with one `INCRBY`, handed out
//! locally.
//!
//! Per prefix, one [`State`] (all of them under one std mutex) holds the reserved numbers
//! of the current day (`stock`), the callers waiting for a block (`waiters`) and the
//! reservations in flight. Every id is assigned under that mutex as `(seconds, sequence)` with
//! `seconds = max(clock, seconds of the last id)` and the sequence taken from the stock of
//! `seconds`' own day, skipping numbers that would not make the id larger than the last
//! one. So ids of one generator increase, and a block reserved yesterday, or one that
//! arrives after midnight, is never used for today.
//!
//! A caller that finds no stock queues and makes sure that the reservations in flight
//! cover every queued caller, starting one more if not; so it waits for at most one
//! round trip, never behind a queue of them. The reservation task assigns ids to the
//! queued callers itself (FIFO) when its reply arrives.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::{Inner, SEQUENCE_BITS, compose, day_of, validate_prefix};
use crate::api::error::{Error, RedisStoreError, Result, command_error, failed_command};

/// A block that lasted less than this was too small: the next one is twice as large.
const GROW_BELOW: Duration = Duration::from_millis(50);
/// A block that lasted more than this was too large: the next one is half as large.
const SHRINK_ABOVE: Duration = Duration::from_secs(10);

pub(super) struct Batcher {
    min_block: u64,
    max_block: u64,
    /// One mutex over every prefix's state: the hot path takes exactly one lock (a
    /// read-write lock over the map plus a mutex per prefix cost twice the atomic
    /// traffic, and the reader count was the most contended line).
    slots: Mutex<HashMap<Box<str>, State>>,
}

impl fmt::Debug for Batcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batched")
            .field("min_block", &self.min_block)
            .field("max_block", &self.max_block)
            .finish_non_exhaustive()
    }
}

/// What [`Batcher::take`] did for one caller.
enum Step {
    /// An id from stock.
    Ready(i64),
    /// An id from stock, and a reservation to start for the next block.
    Prefetch(i64, Reservation),
    /// The caller is queued; a reservation to start if the ones in flight do not cover it.
    Wait(oneshot::Receiver<Result<i64>>, Option<Reservation>),
    Failed(Error),
}

/// The batched state of one prefix.
struct State {
    /// The largest id handed out for this prefix (0: none yet).
    last: i64,
    /// The UTC day (days since 1970) of `stock`.
    day: i64,
    /// Reserved numbers of `day` not handed out yet, ascending.
    stock: VecDeque<Block>,
    /// How many numbers `stock` holds.
    available: u64,
    /// Callers waiting for a number, oldest first.
    waiters: VecDeque<oneshot::Sender<Result<i64>>>,
    in_flight: Vec<Reservation>,
    next_reservation: u64,
    /// Size of the next block.
    block: u64,
    /// When the last block was requested, to size the next one.
    last_request: Option<Instant>,
    /// A day whose counter passed 32 bits: no more numbers for it.
    exhausted_day: Option<i64>,
}

/// Numbers `next..=end` of one reservation.
#[derive(Debug, Clone, Copy)]
struct Block {
    next: u64,
    end: u64,
}

/// An `INCRBY` sent and not answered yet.
#[derive(Debug, Clone, Copy)]
struct Reservation {
    id: u64,
    day: i64,
    size: u64,
}

impl Batcher {
    pub(super) fn new(min_block: u32, max_block: u32) -> Self {
        Self {
            min_block: u64::from(min_block),
            max_block: u64::from(max_block),
            slots: Mutex::default(),
        }
    }

    pub(super) async fn next_id(&self, inner: &Arc<Inner>, prefix: &str) -> Result<i64> {
        let seconds = inner.seconds()?;
        let step = {
            let mut slots = self.lock();
            self.step(inner, &mut slots, prefix, seconds)?
        };
        match step {
            Step::Ready(id) => Ok(id),
            Step::Failed(e) => Err(e),
            Step::Prefetch(id, reservation) => {
                spawn_reservation(Arc::clone(inner), prefix, reservation);
                Ok(id)
            }
            Step::Wait(waiting, reservation) => {
                if let Some(reservation) = reservation {
                    spawn_reservation(Arc::clone(inner), prefix, reservation);
                }
                waiting.await.map_err(|_| Error::cancelled(prefix))?
            }
        }
    }

    /// The state of `prefix` (checked and created on first use), then [`Batcher::take`].
    fn step(
        &self,
        inner: &Inner,
        slots: &mut HashMap<Box<str>, State>,
        prefix: &str,
        seconds: i64,
    ) -> Result<Step> {
        if let Some(state) = slots.get_mut(prefix) {
            return Ok(self.take(inner, prefix, state, seconds));
        }
        validate_prefix(prefix)?;
        let state = slots
            .entry(prefix.into())
            .or_insert_with(|| State::new(self.min_block));
        Ok(self.take(inner, prefix, state, seconds))
    }

    /// Hands out a number from stock, or queues the caller.
    fn take(&self, inner: &Inner, prefix: &str, state: &mut State, seconds: i64) -> Step {
        let seconds = seconds.max(seconds_of(state.last));
        let day = day_of(seconds);
        state.roll_to(day);
        if state.waiters.is_empty()
            && let Some(sequence) = state.pop(seconds)
        {
            let id = compose(seconds, sequence);
            state.last = id;
            return match state.prefetch(self) {
                Some(reservation) => Step::Prefetch(id, reservation),
                None => Step::Ready(id),
            };
        }
        if state.exhausted_day == Some(day) {
            return Step::Failed(
                RedisStoreError::SequenceExhausted {
                    key: inner.day_key(prefix, day).to_string(),
                }
                .into(),
            );
        }
        let (tx, rx) = oneshot::channel();
        state.waiters.push_back(tx);
        Step::Wait(rx, state.cover_waiters(self))
    }

    /// Nothing under this mutex can panic, so a poisoned one still holds a sound state.
    fn lock(&self) -> MutexGuard<'_, HashMap<Box<str>, State>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn seconds_of(id: i64) -> i64 {
    id >> SEQUENCE_BITS
}

impl State {
    fn new(block: u64) -> Self {
        Self {
            last: 0,
            day: 0,
            stock: VecDeque::new(),
            available: 0,
            waiters: VecDeque::new(),
            in_flight: Vec::new(),
            next_reservation: 0,
            block,
            last_request: None,
            exhausted_day: None,
        }
    }

    /// Makes `day` the current day; the stock of another day is thrown away.
    fn roll_to(&mut self, day: i64) {
        if day != self.day {
            self.day = day;
            self.stock.clear();
            self.available = 0;
        }
    }

    /// The next number that makes an id at `seconds` larger than the last one.
    fn pop(&mut self, seconds: i64) -> Option<u32> {
        while let Some(block) = self.stock.front_mut() {
            let sequence = block.next;
            if block.next == block.end {
                self.stock.pop_front();
            } else {
                block.next += 1;
            }
            self.available -= 1;
            // Blocks are at most 32-bit wide: `complete` clips them.
            let sequence = sequence as u32;
            if compose(seconds, sequence) > self.last {
                return Some(sequence);
            }
            // A block that arrived after a later one: its numbers are behind the last
            // id of this second, so using them would break the order. They stay unused.
        }
        None
    }

    /// A reservation to start now, so the next block is there before this one runs out.
    fn prefetch(&mut self, batcher: &Batcher) -> Option<Reservation> {
        let today = self.day;
        let low = self.block / 2;
        if self.available > low || self.in_flight.iter().any(|r| r.day == today) {
            return None;
        }
        let size = self.next_block_size(batcher);
        Some(self.reserve(size))
    }

    /// A reservation to start so that the ones in flight cover every waiter.
    fn cover_waiters(&mut self, batcher: &Batcher) -> Option<Reservation> {
        self.waiters.retain(|w| !w.is_closed());
        let covered = self.covered();
        let waiting = self.waiters.len() as u64;
        if waiting <= covered || self.exhausted_day == Some(self.day) {
            return None;
        }
        let size = self.next_block_size(batcher).max(waiting - covered);
        Some(self.reserve(size))
    }

    fn next_block_size(&mut self, batcher: &Batcher) -> u64 {
        let now = Instant::now();
        if let Some(previous) = self.last_request.replace(now) {
            let lasted = now.duration_since(previous);
            if lasted < GROW_BELOW {
                self.block = (self.block * 2).min(batcher.max_block);
            } else if lasted > SHRINK_ABOVE {
                self.block = (self.block / 2).max(batcher.min_block);
            }
        }
        self.block
    }

    fn reserve(&mut self, size: u64) -> Reservation {
        self.next_reservation += 1;
        let reservation = Reservation {
            id: self.next_reservation,
            day: self.day,
            size,
        };
        self.in_flight.push(reservation);
        reservation
    }

    /// Takes in the answer to `reservation`, serves the waiters and says which
    /// reservation to make next, if any.
    fn complete(
        &mut self,
        batcher: &Batcher,
        reservation: Reservation,
        reply: Result<i64>,
        clock: std::result::Result<i64, i64>,
        key_of: &dyn Fn(i64) -> String,
    ) -> Option<Reservation> {
        self.in_flight.retain(|r| r.id != reservation.id);
        match reply {
            Ok(end) => {
                let first = end - reservation.size as i64 + 1;
                if end > i64::from(u32::MAX) {
                    self.exhausted_day = Some(reservation.day);
                }
                // A block of a past day is dropped: its numbers stay unused.
                if reservation.day == self.day {
                    let first = first.max(0) as u64;
                    let end = end.min(i64::from(u32::MAX));
                    if end >= 0 && first <= end as u64 {
                        self.insert(Block {
                            next: first,
                            end: end as u64,
                        });
                    }
                }
            }
            Err(e) => {
                // Fail the waiters that the reservations still in flight cannot serve.
                let covered = self.covered();
                while self.waiters.len() as u64 > covered {
                    if let Some(waiter) = self.waiters.pop_back() {
                        let _ = waiter.send(Err(shared_error(&e)));
                    }
                }
            }
        }
        self.serve(clock, key_of);
        self.cover_waiters(batcher)
    }

    /// Numbers in stock plus those of today's reservations in flight.
    fn covered(&self) -> u64 {
        let today = self.day;
        self.available
            + self
                .in_flight
                .iter()
                .filter(|r| r.day == today)
                .map(|r| r.size)
                .sum::<u64>()
    }

    /// Adds a block, keeping the stock in ascending order.
    fn insert(&mut self, block: Block) {
        let at = self
            .stock
            .iter()
            .position(|b| b.next > block.next)
            .unwrap_or(self.stock.len());
        self.stock.insert(at, block);
        self.available += block.end - block.next + 1;
    }

    /// Hands numbers to the waiters, oldest first, while there are any.
    fn serve(&mut self, clock: std::result::Result<i64, i64>, key_of: &dyn Fn(i64) -> String) {
        let now = match clock {
            Ok(now) => now,
            Err(unix_seconds) => {
                for waiter in self.waiters.drain(..) {
                    let _ =
                        waiter.send(Err(RedisStoreError::ClockOutOfRange { unix_seconds }.into()));
                }
                return;
            }
        };
        while let Some(waiter) = self.waiters.front() {
            if waiter.is_closed() {
                self.waiters.pop_front();
                continue;
            }
            let seconds = now.max(seconds_of(self.last));
            let day = day_of(seconds);
            self.roll_to(day);
            let Some(sequence) = self.pop(seconds) else {
                if self.exhausted_day == Some(day) {
                    let key = key_of(day);
                    for waiter in self.waiters.drain(..) {
                        let _ = waiter
                            .send(Err(
                                RedisStoreError::SequenceExhausted { key: key.clone() }.into()
                            ));
                    }
                }
                return;
            };
            let id = compose(seconds, sequence);
            self.last = id;
            if let Some(waiter) = self.waiters.pop_front()
                && let Err(Ok(_)) = waiter.send(Ok(id))
            {
                // The caller left between the check and the send; the id stays unused.
            }
        }
    }
}

/// Sends `reservation`'s `INCRBY` on a task of its own, so that a caller that goes away
/// cannot strand the callers queued behind it, then hands the block out.
fn spawn_reservation(inner: Arc<Inner>, prefix: &str, reservation: Reservation) {
    let prefix: Box<str> = prefix.into();
    tokio::spawn(async move {
        let Some(batcher) = inner.batcher.as_ref() else {
            return;
        };
        let mut reservation = reservation;
        loop {
            let key = inner.day_key(&prefix, reservation.day);
            // A repeat of INCRBY after a cut-off only skips numbers: resending is safe.
            let reply: Result<i64> = inner
                .client
                .connection()
                .query_resendable(redis::cmd("INCRBY").arg(&key).arg(reservation.size))
                .await;
            let clock = inner.clock_seconds();
            let key_of = |day| inner.day_key(&prefix, day).to_string();
            let next = batcher
                .lock()
                .get_mut(&*prefix)
                .and_then(|state| state.complete(batcher, reservation, reply, clock, &key_of));
            match next {
                Some(next) => reservation = next,
                None => return,
            }
        }
    });
}

/// One failed reservation's error for each of the callers it fails.
fn shared_error(e: &Error) -> Error {
    if let Some(failed) = failed_command(e) {
        return command_error(failed.clone());
    }
    match e {
        Error::Protocol(message) => Error::Protocol(message.clone()),
        other => Error::Protocol(other.to_string()),
    }
}

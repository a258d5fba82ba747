//! Global unique ids, a timestamp and a counter in one 64-bit integer: 31 bits of seconds
//! since 2022-01-01 and 32 bits of a per-prefix, per-day counter kept in Redis.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Datelike as _, NaiveDate, Utc};

use crate::api::error::{Error, RedisStoreError, Result};
use crate::backend::client::Client;

mod batch;

use batch::Batcher;

/// The id epoch, 2022-01-01T00:00:00Z, in seconds since 1970.
pub const ID_EPOCH_UNIX_SECONDS: i64 = 1_640_995_200;

/// The largest timestamp an id can hold: 2³¹ − 1 seconds after the epoch,
/// 2090-01-19T03:14:07Z.
pub const MAX_ID_SECONDS: i64 = (1 << 31) - 1;

/// Longest accepted id prefix, in bytes.
pub const MAX_ID_PREFIX_LEN: usize = 256;

/// Most ids one [`IdGenerator::next_ids`] call returns (they are collected in memory).
pub const MAX_IDS_PER_CALL: u32 = 1 << 20;

/// Default smallest block of sequence numbers a batched generator reserves at once.
pub const DEFAULT_MIN_BLOCK: u32 = 16;

/// Default largest block of sequence numbers a batched generator reserves at once.
pub const DEFAULT_MAX_BLOCK: u32 = 65_536;

/// Largest accepted block size: a restart throws away at most two blocks of a day's
/// 2³² numbers.
pub const MAX_BLOCK: u32 = 1 << 24;

const SEQUENCE_BITS: u32 = 32;
const SECONDS_PER_DAY: i64 = 86_400;

/// Where a generator reads the time of day.
type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

impl Client {
    /// A per-id generator on the system clock: one `INCR` per id.
    ///
    /// For a busy process, [`IdGenerator::builder`] with
    /// [`batched`](IdGeneratorBuilder::batched) makes one round trip per block of ids.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// let ids = client.id_generator();
    /// let order_id = ids.next_id("order").await?;
    /// assert!(order_id > 0);
    /// # Ok(()) }
    /// ```
    pub fn id_generator(&self) -> IdGenerator {
        IdGenerator {
            inner: Arc::new(Inner {
                client: self.clone(),
                clock: Arc::new(SystemTime::now),
                batcher: None,
                last_seconds: AtomicI64::new(0),
            }),
        }
    }
}

/// Makes 64-bit ids that are unique per prefix across processes and restarts: a
/// timestamp in the high bits, a per-day counter in the low bits (the layout of the
/// `RedisIdWorker` that Java flash-sale tutorials use, so ids from both can share a
/// table).
///
/// An id is `seconds << 32 | sequence`: the sign bit is 0, then 31 bits of seconds since
/// 2022-01-01T00:00:00Z (the time the id was handed out), then 32 bits of a counter in
/// Redis under `icr:{prefix}:{yyyy:MM:dd}` (one counter per prefix and UTC day, behind the
/// client's namespace). The day in the key is the day of the id's own timestamp, so two
/// ids with the same second always took their sequence from the same counter: ids stay
/// unique whatever the clocks of the processes say. Ids of different prefixes come from
/// different counters and may be equal; a prefix is a namespace of ids.
///
/// Two modes, mixable on one prefix:
///
/// - **per id** ([`Client::id_generator`]): one `INCR` per id; the counter is the
///   day's number of ids ([`IdGenerator::count_for_day`]).
/// - **batched** ([`IdGeneratorBuilder::batched`]): one `INCRBY` reserves a block of
///   sequence numbers that the process hands out locally, each id stamped with the second
///   it is handed out. The block grows while ids go fast (up to 65 536 by default) and
///   the next one is fetched before the current one runs out, so a busy process makes one
///   round trip per block and callers rarely wait at all.
///
/// A caller of a batched generator waits for at most one round trip: a caller that finds
/// no number left queues, and makes sure the reservations in flight cover every queued
/// caller, sending one more `INCRBY` if they do not (never one after another). Three
/// rare cases cost a caller another round trip: a reservation that fails (its uncovered
/// callers get the error at once), midnight (a block of yesterday is never used for
/// today), and replies handled out of order (numbers that would not keep ids increasing
/// are skipped).
///
/// Ids from one generator and its clones increase: with a batched generator, an id handed
/// out after another was returned is larger, even if the wall clock steps back (the
/// timestamp then stays at the last second used until the clock catches up); a per-id
/// generator gives the same to any one task calling it in turn. Separate generators do
/// not coordinate, so make one per process and clone it.
///
/// Limits of the layout: a prefix gets 2³² ids per UTC day (49 710 per second on
/// average, [`RedisStoreError::SequenceExhausted`](crate::RedisStoreError::SequenceExhausted) past that) and timestamps end in 2090
/// ([`RedisStoreError::ClockOutOfRange`](crate::RedisStoreError::ClockOutOfRange)). Uniqueness rests on the counters: a Redis that loses them
/// (restart without persistence, fail-over to a lagging replica) hands numbers out again.
///
/// ```no_run
/// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
/// use ferrisson_redis::IdGenerator;
///
/// let ids = IdGenerator::builder(&client).batched().build()?;
/// let a = ids.next_id("order").await?;
/// let b = ids.next_id("order").await?;
/// assert!(b > a);
/// let decoded = IdGenerator::decode(b)?;
/// println!("issued at {:?}, sequence {}", decoded.timestamp, decoded.sequence);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct IdGenerator {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    clock: Clock,
    /// `None` in per-id mode.
    batcher: Option<Batcher>,
    /// The latest id timestamp used in per-id mode, so a clock stepping back never
    /// makes a task's next id smaller.
    last_seconds: AtomicI64,
}

impl fmt::Debug for IdGenerator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("IdGenerator");
        s.field("namespace", &self.inner.client.namespace());
        match &self.inner.batcher {
            Some(batcher) => s.field("mode", batcher),
            None => s.field("mode", &"per id"),
        };
        s.finish_non_exhaustive()
    }
}

impl IdGenerator {
    /// A per-id generator on the system clock, as [`Client::id_generator`].
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// let ids = ferrisson_redis::IdGenerator::new(&client);
    /// assert!(!ids.is_batched());
    /// # Ok(()) }
    /// ```
    pub fn new(client: &Client) -> Self {
        client.id_generator()
    }

    /// Starts configuring a generator on `client`: per id and on the system clock unless
    /// told otherwise.
    ///
    /// ```no_run
    /// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
    /// let ids = ferrisson_redis::IdGenerator::builder(&client)
    ///     .block_size(64, 1 << 20)
    ///     .build()?;
    /// assert!(ids.is_batched());
    /// # Ok(()) }
    /// ```
    pub fn builder(client: &Client) -> IdGeneratorBuilder {
        IdGeneratorBuilder {
            client: client.clone(),
            clock: None,
            blocks: None,
        }
    }

    /// Whether this generator reserves blocks of sequence numbers (batched mode).
    pub fn is_batched(&self) -> bool {
        self.inner.batcher.is_some()
    }

    /// A new id for `prefix`.
    ///
    /// Per-id mode sends one `INCR`. Batched mode hands out a number of the current block
    /// without any Redis traffic, and waits for at most the one round trip that fetches
    /// the next block when none is left.
    ///
    /// ```no_run
    /// # async fn demo(ids: ferrisson_redis::IdGenerator) -> ferrisson_redis::Result<()> {
    /// let first = ids.next_id("order").await?;
    /// let second = ids.next_id("order").await?;
    /// assert_ne!(first, second);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidArgument`] for an empty prefix, one longer than
    ///   [`MAX_ID_PREFIX_LEN`], or one holding whitespace, control characters or any of
    ///   `{}[]*?\`.
    /// - [`RedisStoreError::ClockOutOfRange`](crate::RedisStoreError::ClockOutOfRange) when the clock is before 2022 or past 2090-01-19.
    /// - [`RedisStoreError::SequenceExhausted`](crate::RedisStoreError::SequenceExhausted) when the day's counter passed 2³² − 1.
    /// - [`Error::Store`] when Redis cannot be reached (no id is made up locally).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped call never hands its id to anyone else, at worst it leaves
    /// a gap in the day's sequence.
    pub async fn next_id(&self, prefix: &str) -> Result<i64> {
        match &self.inner.batcher {
            Some(batcher) => batcher.next_id(&self.inner, prefix).await,
            None => {
                validate_prefix(prefix)?;
                self.next_per_id(prefix).await
            }
        }
    }

    /// `count` new ids for `prefix`, in increasing order.
    ///
    /// Per-id mode reserves all of them with one `INCRBY` (they share one second);
    /// batched mode takes them from its blocks as `count` calls of
    /// [`next_id`](IdGenerator::next_id) would.
    ///
    /// ```no_run
    /// # async fn demo(ids: ferrisson_redis::IdGenerator) -> ferrisson_redis::Result<()> {
    /// let batch = ids.next_ids("order", 100).await?;
    /// assert_eq!(batch.len(), 100);
    /// assert!(batch.windows(2).all(|w| w[0] < w[1]));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`next_id`](IdGenerator::next_id); also [`Error::InvalidArgument`] for a
    /// `count` of 0 or over [`MAX_IDS_PER_CALL`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe as [`next_id`](IdGenerator::next_id): the ids of a dropped call are
    /// never handed out.
    pub async fn next_ids(&self, prefix: &str, count: u32) -> Result<Vec<i64>> {
        if count == 0 || count > MAX_IDS_PER_CALL {
            return Err(Error::invalid(format!(
                "id count must be between 1 and {MAX_IDS_PER_CALL}, got {count}"
            )));
        }
        match &self.inner.batcher {
            Some(batcher) => {
                let mut ids = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    ids.push(batcher.next_id(&self.inner, prefix).await?);
                }
                Ok(ids)
            }
            None => {
                validate_prefix(prefix)?;
                let seconds = self.inner.per_id_seconds()?;
                let key = self.inner.day_key(prefix, day_of(seconds));
                // A repeat after a cut-off only skips numbers: resending is safe.
                let end: i64 = self
                    .inner
                    .client
                    .connection()
                    .query_resendable(redis::cmd("INCRBY").arg(&key).arg(count))
                    .await?;
                let first = end - i64::from(count) + 1;
                (first..=end)
                    .map(|n| Ok(compose(seconds, sequence(n, &key)?)))
                    .collect()
            }
        }
    }

    /// How many sequence numbers `prefix` used on the UTC day `date`: the value of the
    /// day's counter, 0 when there is none.
    ///
    /// With per-id generators only, that is the number of ids made that day (with one
    /// prefix per kind of record, the day's count of that record: orders, say). Batched generators count every number they reserved, including
    /// what a restart or midnight left unused, so the figure is then an upper bound.
    ///
    /// ```no_run
    /// # async fn demo(ids: ferrisson_redis::IdGenerator) -> ferrisson_redis::Result<()> {
    /// let id = ids.next_id("order").await?;
    /// let day = ferrisson_redis::IdGenerator::decode(id)?.date();
    /// assert!(ids.count_for_day("order", day).await? >= 1);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad prefix (see [`next_id`](IdGenerator::next_id)),
    /// [`Error::Store`] when Redis cannot be reached, [`Error::Protocol`] when the key
    /// holds something other than a counter.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn count_for_day(&self, prefix: &str, date: NaiveDate) -> Result<u64> {
        validate_prefix(prefix)?;
        let key = self.inner.key_for_date(prefix, date);
        let value: Option<String> = self
            .inner
            .client
            .connection()
            .query_resendable(redis::cmd("GET").arg(&key))
            .await?;
        match value {
            None => Ok(0),
            Some(text) => text.parse().map_err(|_| {
                Error::Protocol(format!("id counter {:?} holds {text:?}", key.to_string()))
            }),
        }
    }

    /// Splits an id into the second it was made and its sequence number of that day.
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use ferrisson_redis::IdGenerator;
    ///
    /// // 2026-11-22T12:00:00Z, the 42nd id of that day.
    /// let id = ((1_795_348_800_i64 - 1_640_995_200) << 32) | 42;
    /// let decoded = IdGenerator::decode(id)?;
    /// assert_eq!(decoded.timestamp, UNIX_EPOCH + Duration::from_secs(1_795_348_800));
    /// assert_eq!(decoded.sequence, 42);
    /// assert_eq!(decoded.to_string(), "2026-11-22T12:00:00Z #42");
    /// assert!(IdGenerator::decode(-1).is_err());
    /// # Ok::<(), ferrisson_redis::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a negative id (the sign bit is always 0).
    pub fn decode(id: i64) -> Result<DecodedId> {
        if id < 0 {
            return Err(Error::invalid(format!(
                "id {id} is negative; ids have the sign bit clear"
            )));
        }
        Ok(DecodedId {
            timestamp: UNIX_EPOCH
                + Duration::from_secs((ID_EPOCH_UNIX_SECONDS + (id >> SEQUENCE_BITS)) as u64),
            sequence: id as u32,
        })
    }

    async fn next_per_id(&self, prefix: &str) -> Result<i64> {
        let seconds = self.inner.per_id_seconds()?;
        let key = self.inner.day_key(prefix, day_of(seconds));
        // A repeat after a cut-off only skips a number: resending is safe.
        let n: i64 = self
            .inner
            .client
            .connection()
            .query_resendable(redis::cmd("INCR").arg(&key))
            .await?;
        Ok(compose(seconds, sequence(n, &key)?))
    }
}

impl Inner {
    /// The clock as id seconds, checked against the 31-bit range.
    fn seconds(&self) -> Result<i64> {
        self.clock_seconds()
            .map_err(|unix_seconds| RedisStoreError::ClockOutOfRange { unix_seconds }.into())
    }

    /// The clock as id seconds, or as seconds since 1970 when out of the id range.
    fn clock_seconds(&self) -> std::result::Result<i64, i64> {
        let now = (self.clock)();
        let unix = match now.duration_since(UNIX_EPOCH) {
            Ok(after) => i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
            Err(before) => -i64::try_from(before.duration().as_secs()).unwrap_or(i64::MAX),
        };
        let seconds = unix.saturating_sub(ID_EPOCH_UNIX_SECONDS);
        if (0..=MAX_ID_SECONDS).contains(&seconds) {
            Ok(seconds)
        } else {
            Err(unix)
        }
    }

    /// The clock, never behind a second this generator already used.
    fn per_id_seconds(&self) -> Result<i64> {
        let now = self.seconds()?;
        // A plain load first: the shared value changes once a second, and a write on
        // every id would bounce its cache line between the cores.
        let last = self.last_seconds.load(Ordering::Relaxed);
        if now <= last {
            return Ok(last);
        }
        Ok(self.last_seconds.fetch_max(now, Ordering::Relaxed).max(now))
    }

    /// The counter of `prefix` on the UTC day `day` (days since 1970).
    fn day_key<'a>(&'a self, prefix: &'a str, day: i64) -> DayKey<'a> {
        let date = DateTime::<Utc>::from_timestamp(day * SECONDS_PER_DAY, 0)
            .map_or(NaiveDate::MIN, |t| t.date_naive());
        self.key_for_date(prefix, date)
    }

    fn key_for_date<'a>(&'a self, prefix: &'a str, date: NaiveDate) -> DayKey<'a> {
        DayKey {
            namespace: self.client.namespace(),
            prefix,
            date,
        }
    }
}

/// The key of one day's counter, `{namespace}icr:{prefix}:{yyyy:MM:dd}`.
///
/// Per-id mode needs one per id, so it is written straight into the command's buffer
/// (no `String`, no `format!` padding, which costs more than the rest of the id).
#[derive(Debug)]
struct DayKey<'a> {
    namespace: &'a str,
    prefix: &'a str,
    date: NaiveDate,
}

impl DayKey<'_> {
    /// `:yyyy:MM:dd`, or `None` for a year outside 0..=9999 (only `count_for_day` can ask
    /// for one).
    fn date_bytes(&self) -> Option<[u8; 11]> {
        let (month, day) = (self.date.month(), self.date.day());
        let year = u32::try_from(self.date.year())
            .ok()
            .filter(|y| *y <= 9999)?;
        let digit = |n: u32| b'0' + (n % 10) as u8;
        Some([
            b':',
            digit(year / 1000),
            digit(year / 100),
            digit(year / 10),
            digit(year),
            b':',
            digit(month / 10),
            digit(month),
            b':',
            digit(day / 10),
            digit(day),
        ])
    }

    fn write_to(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        out.write_all(self.namespace.as_bytes())?;
        out.write_all(b"icr:")?;
        out.write_all(self.prefix.as_bytes())?;
        match self.date_bytes() {
            Some(date) => out.write_all(&date),
            None => write!(
                out,
                ":{:04}:{:02}:{:02}",
                self.date.year(),
                self.date.month(),
                self.date.day()
            ),
        }
    }
}

impl fmt::Display for DayKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut bytes = Vec::with_capacity(self.namespace.len() + self.prefix.len() + 16);
        self.write_to(&mut bytes).map_err(|_| fmt::Error)?;
        f.write_str(&String::from_utf8_lossy(&bytes))
    }
}

impl redis::ToRedisArgs for DayKey<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        // Writing into a Vec cannot fail.
        let _ = self.write_to(&mut out.writer_for_next_arg());
    }
}

/// The UTC day (days since 1970) of an id timestamp.
fn day_of(seconds: i64) -> i64 {
    (ID_EPOCH_UNIX_SECONDS + seconds).div_euclid(SECONDS_PER_DAY)
}

fn compose(seconds: i64, sequence: u32) -> i64 {
    (seconds << SEQUENCE_BITS) | i64::from(sequence)
}

/// A counter value as a sequence number, refusing what does not fit in 32 bits.
fn sequence(n: i64, key: &impl fmt::Display) -> Result<u32> {
    u32::try_from(n).map_err(|_| {
        let key = key.to_string();
        if n > 0 {
            RedisStoreError::SequenceExhausted { key }.into()
        } else {
            Error::Protocol(format!("id counter {key:?} went to {n}"))
        }
    })
}

/// Rejects prefixes that would make a surprising key: whitespace and control characters
/// break inline commands and log lines, `*?[]\` turn a `SCAN MATCH icr:{prefix}:*` over
/// the day counters into a pattern matching other prefixes, and braces would make the
/// prefix a cluster hash tag.
pub(crate) fn validate_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() {
        return Err(Error::invalid("id prefix must not be empty"));
    }
    if prefix.len() > MAX_ID_PREFIX_LEN {
        return Err(Error::invalid(format!(
            "id prefix is {} bytes long, the limit is {MAX_ID_PREFIX_LEN}",
            prefix.len()
        )));
    }
    if let Some(c) = prefix
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || "{}[]*?\\".contains(*c))
    {
        return Err(Error::invalid(format!(
            "id prefix {prefix:?} contains {c:?}; whitespace, control characters and {{}}[]*?\\ are not allowed"
        )));
    }
    Ok(())
}

/// An id taken apart by [`IdGenerator::decode`].
///
/// ```
/// let decoded = ferrisson_redis::IdGenerator::decode(1 << 32 | 7)?;
/// assert_eq!(decoded.sequence, 7);
/// assert_eq!(decoded.seconds_since_epoch(), 1);
/// assert_eq!(decoded.date().to_string(), "2022-01-01");
/// assert_eq!(decoded.to_id(), 1 << 32 | 7);
/// # Ok::<(), ferrisson_redis::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct DecodedId {
    /// The second the id was handed out (whole seconds, UTC).
    pub timestamp: SystemTime,
    /// The id's number in its prefix's counter of that UTC day.
    pub sequence: u32,
}

impl DecodedId {
    /// Seconds since 2022-01-01T00:00:00Z, the high 31 bits of the id.
    pub fn seconds_since_epoch(&self) -> u32 {
        let unix = self
            .timestamp
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        (unix - ID_EPOCH_UNIX_SECONDS) as u32
    }

    /// The UTC day of the timestamp: the day whose counter the sequence came from.
    pub fn date(&self) -> NaiveDate {
        self.datetime().date_naive()
    }

    /// The id this was decoded from.
    pub fn to_id(&self) -> i64 {
        compose(i64::from(self.seconds_since_epoch()), self.sequence)
    }

    fn datetime(&self) -> DateTime<Utc> {
        DateTime::<Utc>::from(self.timestamp)
    }
}

/// `2026-11-22T12:00:00Z #42`: the timestamp in RFC 3339 and the sequence.
impl fmt::Display for DecodedId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} #{}",
            self.datetime()
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            self.sequence
        )
    }
}

/// Configures an [`IdGenerator`].
///
/// ```no_run
/// # async fn demo(client: ferrisson_redis::Client) -> ferrisson_redis::Result<()> {
/// use std::time::{Duration, SystemTime};
///
/// // Batched, with a clock an hour ahead (tests inject clocks the same way).
/// let ids = ferrisson_redis::IdGenerator::builder(&client)
///     .batched()
///     .clock(|| SystemTime::now() + Duration::from_secs(3600))
///     .build()?;
/// let id = ids.next_id("order").await?;
/// # Ok(()) }
/// ```
#[must_use]
pub struct IdGeneratorBuilder {
    client: Client,
    clock: Option<Clock>,
    /// `None`: per-id mode.
    blocks: Option<(u32, u32)>,
}

impl fmt::Debug for IdGeneratorBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdGeneratorBuilder")
            .field("custom_clock", &self.clock.is_some())
            .field("blocks", &self.blocks)
            .finish_non_exhaustive()
    }
}

impl IdGeneratorBuilder {
    /// Batched mode with the default block sizes: blocks start at
    /// [`DEFAULT_MIN_BLOCK`] numbers and double, up to [`DEFAULT_MAX_BLOCK`], while each
    /// lasts under 50 ms.
    pub fn batched(self) -> Self {
        self.block_size(DEFAULT_MIN_BLOCK, DEFAULT_MAX_BLOCK)
    }

    /// Batched mode with blocks of `min` to `max` sequence numbers (checked by
    /// [`build`](IdGeneratorBuilder::build): `1 <= min <= max <= MAX_BLOCK`). A block
    /// doubles when the last one lasted under 50 ms and halves when it lasted over 10 s.
    ///
    /// A restart or midnight leaves the rest of a block (at most two blocks) unused, and
    /// a batched generator keeps a small state per prefix it has served, for its life.
    pub fn block_size(mut self, min: u32, max: u32) -> Self {
        self.blocks = Some((min, max));
        self
    }

    /// The wall clock ids are stamped with (default: `SystemTime::now`). Tests use it to
    /// cross midnight or leave the 2022–2090 range without waiting.
    pub fn clock(mut self, clock: impl Fn() -> SystemTime + Send + Sync + 'static) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Makes the generator. No Redis traffic until the first id.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for block sizes outside `1 <= min <= max <= MAX_BLOCK`.
    pub fn build(self) -> Result<IdGenerator> {
        let batcher = match self.blocks {
            None => None,
            Some((min, max)) => {
                if min == 0 || min > max || max > MAX_BLOCK {
                    return Err(Error::invalid(format!(
                        "block sizes must satisfy 1 <= min <= max <= {MAX_BLOCK}, got {min} and {max}"
                    )));
                }
                Some(Batcher::new(min, max))
            }
        };
        Ok(IdGenerator {
            inner: Arc::new(Inner {
                client: self.client,
                clock: self.clock.unwrap_or_else(|| Arc::new(SystemTime::now)),
                batcher,
                last_seconds: AtomicI64::new(0),
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_timestamp_then_count() {
        // timestamp << 32 | count.
        let id = compose(123_456, 789);
        assert_eq!(id, (123_456_i64 << 32) + 789);
        let decoded = IdGenerator::decode(id).expect("valid");
        assert_eq!(decoded.seconds_since_epoch(), 123_456);
        assert_eq!(decoded.sequence, 789);
        assert_eq!(decoded.to_id(), id);
        let max = compose(MAX_ID_SECONDS, u32::MAX);
        assert_eq!(max, i64::MAX);
        assert_eq!(
            IdGenerator::decode(max).expect("valid").to_string(),
            "2090-01-19T03:14:07Z #4294967295"
        );
    }

    #[test]
    fn days_are_utc() {
        // 2026-11-22T23:59:59Z and one second later.
        let before = 1_795_391_999 - ID_EPOCH_UNIX_SECONDS;
        assert_eq!(day_of(before) + 1, day_of(before + 1));
        assert_eq!(day_of(0), ID_EPOCH_UNIX_SECONDS / SECONDS_PER_DAY);
    }

    #[test]
    fn dates_are_written_year_month_day() {
        for ((y, m, d), text) in [
            ((2026, 11, 22), "ns:icr:order:2026:11:22"),
            ((2022, 1, 1), "ns:icr:order:2022:01:01"),
            ((5, 1, 2), "ns:icr:order:0005:01:02"),
            ((12_345, 12, 31), "ns:icr:order:12345:12:31"),
            ((-5, 1, 2), "ns:icr:order:-005:01:02"),
        ] {
            let key = DayKey {
                namespace: "ns:",
                prefix: "order",
                date: NaiveDate::from_ymd_opt(y, m, d).expect("valid"),
            };
            assert_eq!(key.to_string(), text);
            let mut cmd = redis::cmd("INCR");
            cmd.arg(&key);
            assert_eq!(
                cmd.args_iter().nth(1),
                Some(redis::Arg::Simple(text.as_bytes()))
            );
        }
    }

    #[test]
    fn sequences_must_fit_32_bits() {
        assert_eq!(sequence(1, &"k").expect("fits"), 1);
        assert_eq!(sequence(i64::from(u32::MAX), &"k").expect("fits"), u32::MAX);
        assert!(matches!(
            sequence(i64::from(u32::MAX) + 1, &"k"),
            Err(e) if matches!(
                e.store_error::<RedisStoreError>(),
                Some(RedisStoreError::SequenceExhausted { key }) if key == "k"
            )
        ));
        assert!(matches!(sequence(-1, &"k"), Err(Error::Protocol(_))));
    }

    #[test]
    fn prefixes_are_checked() {
        for good in ["order", "shop:order", "订单", "a-b_c.d/e@f"] {
            assert!(validate_prefix(good).is_ok(), "{good}");
        }
        let long = "x".repeat(MAX_ID_PREFIX_LEN + 1);
        for bad in [
            "", "a b", "a\nb", "a*", "a?", "[a]", "{a}", "a\\b", "a\0", &long,
        ] {
            assert!(
                matches!(validate_prefix(bad), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
        }
    }
}

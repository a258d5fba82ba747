//! Which primitive a key belongs to: the names in a namespace's keys, and the rule that
//! tells a primitive's kind from what its keys hold (documented in the module above).

use chrono::NaiveDate;

use crate::backend::ids::OwnerId;
use crate::backend::scripts::inspect::KeyLayout;
use crate::inspect::PrimitiveKind;

/// The companion keys the rule looks at, `{name}:<suffix>`, in the order the layout read
/// reports them.
pub(crate) const COMPANIONS: [&str; 4] = [QUEUE, DEADLINES, PERMITS, TERMS];
/// A fair lock's wait queue.
const QUEUE: &str = "queue";
/// A fair lock's waiter deadlines.
const DEADLINES: &str = "deadlines";
/// An expirable semaphore's held permits.
const PERMITS: &str = "permits";
/// An election's record of terms.
const TERMS: &str = "terms";

/// What a key in the namespace is, by its name alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyName<'a> {
    /// `{name}` or `{name}:<suffix>`: a key of the primitive called `name`.
    Primitive(&'a str),
    /// `icr:<prefix>:<yyyy>:<MM>:<dd>`: one day's id counter.
    IdCounter { prefix: &'a str, date: NaiveDate },
}

/// Reads `key` (a key of the client's namespace, the namespace already taken off).
/// Anything else in the namespace, such as the fencing floors (`ferrisson:fence:{tag}`)
/// or an application's own keys, is `None`.
pub(crate) fn parse_key(key: &str) -> Option<KeyName<'_>> {
    if let Some(rest) = key.strip_prefix('{') {
        let (name, after) = rest.split_once('}')?;
        return (!name.is_empty() && (after.is_empty() || after.starts_with(':')))
            .then_some(KeyName::Primitive(name));
    }
    let rest = key.strip_prefix("icr:")?;
    let mut parts = rest.rsplitn(4, ':');
    let (day, month, year, prefix) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if prefix.is_empty() || day.len() != 2 || month.len() != 2 {
        return None;
    }
    let date = NaiveDate::from_ymd_opt(year.parse().ok()?, month.parse().ok()?, day.parse().ok()?)?;
    Some(KeyName::IdCounter { prefix, date })
}

const LOCK: &[PrimitiveKind] = &[PrimitiveKind::Lock];
const FAIR_LOCK: &[PrimitiveKind] = &[PrimitiveKind::FairLock];
const RWLOCK: &[PrimitiveKind] = &[PrimitiveKind::RwLock];
const SIMPLE_LOCK: &[PrimitiveKind] = &[PrimitiveKind::SimpleLock];
const SEMAPHORE: &[PrimitiveKind] = &[PrimitiveKind::Semaphore];
const SEMAPHORE_OR_LATCH: &[PrimitiveKind] =
    &[PrimitiveKind::Semaphore, PrimitiveKind::CountDownLatch];
const EXPIRABLE_SEMAPHORE: &[PrimitiveKind] = &[PrimitiveKind::ExpirableSemaphore];
const ELECTION: &[PrimitiveKind] = &[PrimitiveKind::Election];
const RATE_LIMITER: &[PrimitiveKind] = &[PrimitiveKind::RateLimiter];

/// The kinds whose layout `layout` fits: none (not a primitive's), one, or several when
/// their layouts cannot be told apart (a count without expiry: a semaphore or a latch).
pub(crate) fn kinds(layout: &KeyLayout) -> &'static [PrimitiveKind] {
    let companion = |suffix: &str| {
        COMPANIONS
            .iter()
            .position(|c| *c == suffix)
            .and_then(|i| layout.companions.get(i).copied())
            .unwrap_or(false)
    };
    let fair = companion(QUEUE) || companion(DEADLINES);
    match layout.key_type.as_str() {
        "hash" => hash_kinds(&layout.contents, layout.cut, fair),
        "string" if layout.cut => &[],
        "string" => {
            let Some(value) = layout
                .contents
                .first()
                .and_then(|v| std::str::from_utf8(v).ok())
            else {
                return &[];
            };
            if value.parse::<OwnerId>().is_ok() {
                if companion(TERMS) {
                    ELECTION
                } else {
                    SIMPLE_LOCK
                }
            } else if let Ok(count) = value.parse::<i64>() {
                if layout.pttl >= 0 {
                    RATE_LIMITER
                } else if companion(PERMITS) {
                    EXPIRABLE_SEMAPHORE
                } else if count <= 0 {
                    SEMAPHORE
                } else {
                    SEMAPHORE_OR_LATCH
                }
            } else {
                &[]
            }
        }
        "none" if fair => FAIR_LOCK,
        "none" if companion(PERMITS) => EXPIRABLE_SEMAPHORE,
        "none" if companion(TERMS) => ELECTION,
        _ => &[],
    }
}

/// A lock hash (`Lock`, `FairLock`: owner ids, `fence`, `r:<release id>`) or a read-write
/// lock hash (`mode`, `writer`, `fence`, `r:`/`w:`/`d:`/`i:`/`x:` fields).
fn hash_kinds(fields: &[Vec<u8>], cut: bool, fair: bool) -> &'static [PrimitiveKind] {
    let is_rw_only = |field: &[u8]| {
        field == b"mode"
            || field == b"writer"
            || [&b"w:"[..], b"d:", b"i:", b"x:"]
                .iter()
                .any(|prefix| field.starts_with(prefix))
    };
    let shared = |field: &[u8]| field == b"fence" || field.starts_with(b"r:");
    let is_owner =
        |field: &[u8]| std::str::from_utf8(field).is_ok_and(|f| f.parse::<OwnerId>().is_ok());
    if fields.iter().any(|f| is_rw_only(f)) {
        // A cut hash is one with many readers: its `mode` says so.
        return if cut || fields.iter().all(|f| is_rw_only(f) || shared(f)) {
            RWLOCK
        } else {
            &[]
        };
    }
    if cut || !fields.iter().all(|f| shared(f) || is_owner(f)) {
        return &[];
    }
    if fair { FAIR_LOCK } else { LOCK }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWNER: &str = "0123456789abcdef0123456789abcdef";

    fn layout(key_type: &str, pttl: i64, contents: &[&str], companions: [bool; 4]) -> KeyLayout {
        KeyLayout {
            key_type: key_type.to_owned(),
            pttl,
            contents: contents.iter().map(|c| c.as_bytes().to_vec()).collect(),
            cut: false,
            companions: companions.to_vec(),
        }
    }

    const NONE: [bool; 4] = [false; 4];

    #[test]
    fn key_names_give_the_primitive_name() {
        assert_eq!(
            parse_key("{orders:42}"),
            Some(KeyName::Primitive("orders:42"))
        );
        assert_eq!(
            parse_key("{orders:42}:queue"),
            Some(KeyName::Primitive("orders:42"))
        );
        assert_eq!(parse_key("{}"), None);
        assert_eq!(parse_key("{orders}x"), None);
        assert_eq!(parse_key("orders"), None);
        assert_eq!(parse_key("ferrisson:fence:{abc}"), None);
        assert_eq!(
            parse_key("icr:order:web:2026:11:24"),
            Some(KeyName::IdCounter {
                prefix: "order:web",
                date: NaiveDate::from_ymd_opt(2026, 11, 24).expect("a date"),
            })
        );
        assert_eq!(parse_key("icr:order:2026:13:24"), None);
        assert_eq!(parse_key("icr::2026:11:24"), None);
        assert_eq!(parse_key("icr:2026:11:24"), None);
    }

    #[test]
    fn lock_hashes() {
        let held = layout("hash", 29_000, &[OWNER, "fence", "r:abc"], NONE);
        assert_eq!(kinds(&held), LOCK);
        let queued = layout(
            "hash",
            29_000,
            &[OWNER, "fence"],
            [true, true, false, false],
        );
        assert_eq!(kinds(&queued), FAIR_LOCK);
        let free_with_waiters = layout("none", -2, &[], [true, false, false, false]);
        assert_eq!(kinds(&free_with_waiters), FAIR_LOCK);
        let resource = layout("hash", -1, &["value", "fence"], NONE);
        assert_eq!(kinds(&resource), &[] as &[PrimitiveKind]);
    }

    #[test]
    fn read_write_lock_hashes() {
        let read = format!("r:{OWNER}");
        let deadline = format!("d:{OWNER}");
        let held = layout("hash", 29_000, &["mode", &read, &deadline, "fence"], NONE);
        assert_eq!(kinds(&held), RWLOCK);
        let intents_only = layout("hash", 5_000, &[&format!("i:{OWNER}")], NONE);
        assert_eq!(kinds(&intents_only), RWLOCK);
        let mut many_readers = layout("hash", 29_000, &["mode"], NONE);
        many_readers.cut = true;
        assert_eq!(kinds(&many_readers), RWLOCK);
        let mut big_foreign = layout("hash", -1, &[], NONE);
        big_foreign.cut = true;
        assert_eq!(kinds(&big_foreign), &[] as &[PrimitiveKind]);
        let foreign = layout("hash", -1, &["mode", "colour"], NONE);
        assert_eq!(kinds(&foreign), &[] as &[PrimitiveKind]);
    }

    #[test]
    fn strings() {
        assert_eq!(kinds(&layout("string", 9_000, &[OWNER], NONE)), SIMPLE_LOCK);
        let leader = layout("string", 9_000, &[OWNER], [false, false, false, true]);
        assert_eq!(kinds(&leader), ELECTION);
        let vacant = layout("none", -2, &[], [false, false, false, true]);
        assert_eq!(kinds(&vacant), ELECTION);
        let bucket = layout("string", 400, &["1795348800000000"], NONE);
        assert_eq!(kinds(&bucket), RATE_LIMITER);
        assert_eq!(kinds(&layout("string", -1, &["0"], NONE)), SEMAPHORE);
        assert_eq!(kinds(&layout("string", -1, &["-2"], NONE)), SEMAPHORE);
        assert_eq!(
            kinds(&layout("string", -1, &["3"], NONE)),
            SEMAPHORE_OR_LATCH
        );
        let expirable = layout("string", -1, &["3"], [false, false, true, false]);
        assert_eq!(kinds(&expirable), EXPIRABLE_SEMAPHORE);
        assert_eq!(
            kinds(&layout("string", -1, &["hello"], NONE)),
            &[] as &[PrimitiveKind]
        );
        let mut long = layout("string", -1, &[], NONE);
        long.cut = true;
        assert_eq!(kinds(&long), &[] as &[PrimitiveKind]);
    }

    #[test]
    fn other_types_are_not_primitives() {
        assert_eq!(
            kinds(&layout("zset", -1, &[], NONE)),
            &[] as &[PrimitiveKind]
        );
        assert_eq!(
            kinds(&layout("none", -2, &[], NONE)),
            &[] as &[PrimitiveKind]
        );
    }
}

//! What each variant is expected to show, and the verdict the lab reads from the state a
//! run left in Redis and the database.

use std::fmt;

use seckill::oversell::{LabState, Variant};
use serde::{Deserialize, Serialize};

/// How a run of one variant ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Exactly the stock was sold, the stock is 0, every write accounted for.
    Correct,
    /// More units sold than the stock, or stock writes lost.
    Oversold,
    /// A lock nobody will release stopped the sales below the stock.
    Deadlocked,
    /// A holder deleted a lock that another holder had taken.
    WrongLockDeleted,
    /// Fewer units sold than the stock, without a deadlock (e.g. requests gave up, or
    /// lost a compare and did not retry).
    Undersold,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Correct => "correct",
            Self::Oversold => "oversold",
            Self::Deadlocked => "deadlocked",
            Self::WrongLockDeleted => "wrong lock deleted",
            Self::Undersold => "undersold",
        })
    }
}

/// What `variant` shows under the lab's load on `instances` processes, with or without
/// the lab's injected faults: the process-local mutex is correct on one instance, and
/// the lock variants whose flaw needs a crash or a pause are correct without it.
///
/// ```
/// use seckill::oversell::Variant;
/// use seckill_lab::{Verdict, expected};
///
/// assert_eq!(expected(Variant::SetNxEx, 2, true), Verdict::WrongLockDeleted);
/// assert_eq!(expected(Variant::LocalMutex, 1, true), Verdict::Correct);
/// let correct = Variant::ALL.iter().filter(|v| expected(**v, 2, true) == Verdict::Correct);
/// assert_eq!(correct.count(), 5);
/// ```
pub fn expected(variant: Variant, instances: usize, faults: bool) -> Verdict {
    match variant {
        Variant::LocalMutex if instances < 2 => Verdict::Correct,
        _ if variant.has_fault() && !faults => Verdict::Correct,
        Variant::Naive | Variant::LocalMutex => Verdict::Oversold,
        Variant::Setnx | Variant::SetnxFinally | Variant::SetnxExpire => Verdict::Deadlocked,
        Variant::SetNxEx | Variant::TokenCheck => Verdict::WrongLockDeleted,
        Variant::TokenLua
        | Variant::Watchdog
        | Variant::Redlock
        | Variant::LuaAtomic
        | Variant::DbOptimistic => Verdict::Correct,
    }
}

/// The verdict of one variant's run from the state it left in Redis and the database.
pub fn verdict(variant: Variant, initial: i64, state: &LabState) -> (Verdict, i64, i64, i64) {
    let (sold, final_stock) = match variant {
        Variant::DbOptimistic => (
            state.db_sold.unwrap_or(0),
            state.db_stock.unwrap_or(initial),
        ),
        _ => (state.sold, state.stock.unwrap_or(initial)),
    };
    let orphaned = state.lock.present && state.lock.ttl_ms.is_none();
    let (verdict, oversold, lost_updates) =
        verdict_of(initial, sold, final_stock, orphaned, state.foreign_deletes);
    (verdict, sold, oversold, lost_updates)
}

/// The verdict of a run that began with `initial` units, sold `sold` (counted apart from
/// the stock) and left `final_stock`, with `orphaned` when it left a lock that never
/// expires and `foreign_deletes` deletes of another holder's lock; with the units
/// oversold and the lost updates (sales whose stock write another overwrote).
///
/// ```
/// use seckill_lab::{Verdict, verdict_of};
///
/// assert_eq!(verdict_of(10, 10, 0, false, 0).0, Verdict::Correct);
/// assert_eq!(verdict_of(10, 12, 0, false, 0), (Verdict::Oversold, 2, 2));
/// assert_eq!(verdict_of(10, 4, 6, true, 0).0, Verdict::Deadlocked);
/// assert_eq!(verdict_of(10, 4, 6, false, 0).0, Verdict::Undersold);
/// ```
pub fn verdict_of(
    initial: i64,
    sold: i64,
    final_stock: i64,
    orphaned: bool,
    foreign_deletes: i64,
) -> (Verdict, i64, i64) {
    let oversold = (sold - initial).max(0);
    let lost_updates = (sold - (initial - final_stock)).max(0);
    let verdict = if orphaned && sold < initial {
        Verdict::Deadlocked
    } else if foreign_deletes > 0 {
        Verdict::WrongLockDeleted
    } else if oversold > 0 || lost_updates > 0 {
        Verdict::Oversold
    } else if sold == initial && final_stock == 0 {
        Verdict::Correct
    } else {
        Verdict::Undersold
    };
    (verdict, oversold, lost_updates)
}

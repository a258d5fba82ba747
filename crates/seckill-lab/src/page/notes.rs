//! What each variant does, in a sentence and the few lines that matter, and why it fails
//! or holds: the text of the page's explanations, keyed by the variant's name in the
//! run's JSON (a variant without a note still gets its numbers on the page).

/// The explanation of one variant.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Note {
    /// The variant's name in URLs and the report.
    pub name: &'static str,
    /// A few words for the results table.
    pub tag: &'static str,
    /// What it does, in one sentence.
    pub does: &'static str,
    /// The lines that matter.
    pub code: &'static str,
    /// Why it fails, or what makes it hold.
    pub outcome: &'static str,
    /// How the lab makes the flaw show, when it needs help.
    pub fault: Option<&'static str>,
    /// Where the real code is.
    pub source: &'static str,
}

/// The lab's own script of the `lua-atomic` variant, shown as it is.
pub(crate) const LAB_DEDUCT_LUA: &str = include_str!("../../../seckill/lua/lab_deduct.lua");

/// The `db-optimistic` variant's statement (a test checks it is the one the service runs).
pub(crate) const DB_DEDUCT_SQL: &str =
    "UPDATE lab_stock SET stock = stock - 1, sold = sold + 1 WHERE id = ? AND stock > 0";

/// Every variant's note, in the lab's order.
pub(crate) const NOTES: [Note; 12] = [
    Note {
        name: "naive",
        tag: "GET, check, SET",
        does: "Reads the stock, checks that it is positive, and writes it back one less, with no lock at all.",
        code: "stock = GET stock\nif stock > 0:\n    SET stock (stock - 1)   # another request read the same stock\n    INCR sold",
        outcome: "Nothing orders the read and the write of concurrent requests: two requests that read the same stock both sell the same unit, and one of the two writes is lost.",
        fault: None,
        source: "Run::step in crates/seckill/src/oversell/run.rs",
    },
    Note {
        name: "local-mutex",
        tag: "a mutex in each process",
        does: "Wraps the naive step in a tokio::sync::Mutex, so one request at a time runs it — in each process.",
        code: "let _held = lab.local_mutex.lock().await;\n// GET stock, check, SET stock - 1: the naive step\n",
        outcome: "Correct on one instance. With two seckill serve processes each has its own mutex, and requests on different processes interleave exactly as without it.",
        fault: None,
        source: "Run::deduct in crates/seckill/src/oversell/run.rs",
    },
    Note {
        name: "setnx",
        tag: "SETNX, no expiry, no finally",
        does: "Takes the lock with SETNX, deducts, and deletes the lock — with no expiry and no finally.",
        code: "while SETNX lock \"this is lock\" == 0: retry\ndeduct()        # throws: the DEL below never runs\nDEL lock",
        outcome: "An exception between SETNX and DEL leaves a lock that nobody deletes and that never expires: every later request waits until it gives up, and the stock stays unsold.",
        fault: Some("The lab makes one holder throw while it holds the lock."),
        source: "Run::setnx in crates/seckill/src/oversell/run.rs",
    },
    Note {
        name: "setnx-finally",
        tag: "SETNX + finally DEL",
        does: "Takes the lock with SETNX and deletes it in a finally block.",
        code: "while SETNX lock \"this is lock\" == 0: retry\ntry:\n    deduct()    # the process is killed here\nfinally:\n    DEL lock    # never runs",
        outcome: "A finally covers exceptions, not a process that dies (SIGKILL, the OOM killer, a deploy): the lock stays forever, as with plain SETNX.",
        fault: Some(
            "The lab ends one holder's request as a killed process would: without its finally.",
        ),
        source: "Run::setnx_finally in crates/seckill/src/oversell/run.rs",
    },
    Note {
        name: "setnx-expire",
        tag: "SETNX, then EXPIRE",
        does: "Takes the lock with SETNX and gives it a TTL with a second command, EXPIRE.",
        code: "while SETNX lock \"this is lock\" == 0: retry\n# the process dies here: a lock without TTL\nPEXPIRE lock lease\ntry: deduct()\nfinally: DEL lock",
        outcome: "Two commands are not one: a crash between SETNX and EXPIRE leaves a lock that never expires.",
        fault: Some("The lab makes one holder die between SETNX and EXPIRE."),
        source: "Run::setnx_expire in crates/seckill/src/oversell/run.rs",
    },
    Note {
        name: "set-nx-ex",
        tag: "SET NX PX, blind DEL",
        does: "Takes the lock and its TTL in one command, SET lock v NX PX, and deletes it in a finally — without checking whose it is.",
        code: "while SET lock \"this is lock\" NX PX lease != OK: retry\ntry:\n    deduct()    # slower than the lease\nfinally:\n    DEL lock    # deletes whoever holds it now",
        outcome: "The expiry frees the lock while a slow holder still works: the next request takes it, and the slow holder then writes a stale stock and deletes the new holder's lock, letting a third one in.",
        fault: Some(
            "The lab makes one holder stall past its lease between reading and writing the stock.",
        ),
        source: "Run::set_nx_ex in crates/seckill/src/oversell/run.rs",
    },
    Note {
        name: "token-check",
        tag: "token, GET-compare then DEL",
        does: "Gives every holder its own token, and deletes the lock only if GET still returns that token.",
        code: "token = random()\nwhile SET lock token NX PX lease != OK: retry\ntry: deduct()\nfinally:\n    if GET lock == token:   # compare ...\n        # ... a pause here outlives the lease\n        DEL lock            # ... then delete: two commands",
        outcome: "The compare and the delete are two round trips: between them the lease can run out and another request take the lock, which the DEL then removes.",
        fault: Some(
            "The lab pauses one holder between its GET-compare and its DEL (a GC pause, say) until its lease ran out.",
        ),
        source: "Run::token_check in crates/seckill/src/oversell/run.rs",
    },
    Note {
        name: "token-lua",
        tag: "compare-and-delete in Lua",
        does: "ferrisson's SimpleLock: SET NX PX with a token, and a release that compares and deletes in one Lua script.",
        code: "let guard = lab.token_lua.lock_timeout(lock_wait).await?;  // fixed 10 s lease\nlet sold = fenced_step(guard.fencing_token()).await;\n    // fenced_get stock, check, fenced_set stock - 1 with the token\nguard.unlock().await?;      // compare-and-delete, atomic in Redis",
        outcome: "Correct as long as every step is shorter than the 10 s lease: a fixed lease cannot tell a slow holder from a dead one. A holder past its lease cannot oversell, though: its stock write carries the lock's fencing token, and the fence refuses it once a newer holder has written (counted as a late write refused).",
        fault: None,
        source: "Run::token_lua in crates/seckill/src/oversell/run.rs",
    },
    Note {
        name: "watchdog",
        tag: "Lock with watchdog lease",
        does: "ferrisson's re-entrant Lock, whose watchdog renews the lease every third of it while the holder lives; every 100th unit the holder stalls longer than the lease.",
        code: "let guard = lab.watchdog.lock().await?;  // lease renewed while held\nlet stock = fenced_get(stock);\nif stock % stall_every == 0 {\n    stall_and_sample().await?;  // longer than the lease; TTL sampled\n}\nfenced_set(stock, stock - 1, guard.fencing_token()); INCR sold\nguard.unlock().await?;",
        outcome: "The lease follows the holder: a slow holder keeps its lock (the TTL goes back up while it stalls), a dead one loses it one lease later. A holder that stops entirely (a paused or starved process) loses it too, and its late write is refused by the fence (its token is older than the next holder's): a late write refused, not an oversold unit.",
        fault: None,
        source: "Run::watchdog in crates/seckill/src/oversell/run.rs",
    },
    Note {
        name: "redlock",
        tag: "quorum of 3 servers",
        does: "ferrisson's Redlock: the lock is taken on three independent Redis servers and held when a majority granted it in time.",
        code: "let guard = redlock.lock_timeout(REDLOCK_WAIT).await?;  // SET NX PX on each server, 2 of 3\nlet sold = fenced_step(guard.fencing_token()).await;  // the stock write carries the token\nguard.unlock().await?;  // compare-and-delete on every server",
        outcome: "Correct here; it survives a minority of servers down, not a server restarted empty while the lock is held (see docs/REDLOCK.md).",
        fault: None,
        source: "Run::redlock in crates/seckill/src/oversell/run.rs",
    },
    Note {
        name: "lua-atomic",
        tag: "one Lua script, no lock",
        does: "Checks and decrements the stock in one Lua script, which Redis runs atomically: no lock at all.",
        code: LAB_DEDUCT_LUA,
        outcome: "Correct: nothing can run between the check and the decrement. It only works while the whole deduction fits in one script on one server (or one hash slot).",
        fault: None,
        source: "crates/seckill/lua/lab_deduct.lua",
    },
    Note {
        name: "db-optimistic",
        tag: "conditional UPDATE in SQL",
        does: "Lets the database do it: one UPDATE that decrements only while the stock is positive.",
        code: DB_DEDUCT_SQL,
        outcome: "Correct: the row lock and the condition make the check and the write one step; the cost is a database round trip and a row lock per sale.",
        fault: None,
        source: "Db::lab_deduct in crates/seckill/src/db/mod.rs",
    },
];

/// The note of the variant called `name`.
pub(crate) fn note(name: &str) -> Option<&'static Note> {
    NOTES.iter().find(|n| n.name == name)
}

#[cfg(test)]
mod tests {
    use seckill::oversell::Variant;

    use super::{DB_DEDUCT_SQL, NOTES, note};

    const RUN: &str = include_str!("../../../seckill/src/oversell/run.rs");
    const DB: &str = include_str!("../../../seckill/src/db/mod.rs");

    #[test]
    fn every_variant_has_a_note_in_the_labs_order() {
        let names: Vec<&str> = NOTES.iter().map(|n| n.name).collect();
        let variants: Vec<&str> = Variant::ALL.iter().map(|v| v.name()).collect();
        assert_eq!(names, variants);
        assert!(note("spinlock").is_none());
    }

    /// The notes point at code that exists: the function each names, the statement
    /// the database variant runs.
    #[test]
    fn notes_point_at_real_code() {
        for n in NOTES {
            if let Some(f) = n
                .source
                .strip_prefix("Run::")
                .and_then(|s| s.split(' ').next())
            {
                assert!(
                    RUN.contains(&format!("fn {f}(")),
                    "{}: no fn {f} in run.rs",
                    n.name
                );
            }
            assert!(!n.does.is_empty() && !n.code.is_empty() && !n.outcome.is_empty());
        }
        assert!(
            DB.contains(DB_DEDUCT_SQL),
            "the page's SQL is the service's"
        );
    }
}

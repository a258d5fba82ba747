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
pub(crate) const NOTES: [Note; 22] = [
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
    Note {
        name: "db-lock-table-naive",
        tag: "lock table: insert wins, delete releases",
        does: "The classic lock table: a row per lock under a primary key, taken by inserting it and released by deleting it, with no expiry column.",
        code: "CREATE TABLE locks (name VARCHAR(64) PRIMARY KEY, owner VARCHAR(64) NOT NULL)\n\nwhile INSERT INTO locks VALUES ('stock', :me) inserted no row: retry\n-- the process dies here: the row stays\nSELECT stock ...; UPDATE ... SET stock = :read - 1\nDELETE FROM locks WHERE name = 'stock' AND owner = :me",
        outcome: "It is SETNX without an expiry, in SQL: a holder that dies (a killed process, a lost connection after the insert committed) leaves its row, and every later insert is refused for ever. The stock stays unsold and the buyers are turned away until someone deletes the row by hand.",
        fault: Some("The lab makes one holder's process die after its insert, before its DELETE."),
        source: "crates/seckill-lab/src/in_process/lock_table_naive.rs",
    },
    Note {
        name: "db-lock-table",
        tag: "ferrisson-sql TableLock",
        does: "ferrisson-sql's TableLock: the same table with the flaws fixed: an expiry in the database's clock renewed by a watchdog, an owner per acquisition, a fencing token from a sequence, waiters woken by NOTIFY (PostgreSQL) or polling with back-off (MariaDB).",
        code: "let client = ferrisson::sql::Client::builder(url).table(\"seckill_lab_…_lock\").connect().await?;\nlet guard = client.lock(\"seckill-lab:stock\")?.lock_timeout(lock_wait).await?;\n// SELECT stock ...; UPDATE ... SET stock = :read - 1\nguard.unlock().await?;  // DELETE ... WHERE name, owner, fence",
        outcome: "Correct: one holder at a time, and a holder that dies leaves a row that expires (one watchdog lease later) instead of a deadlock, judged by the database's clock, never a client's.",
        fault: None,
        source: "crates/ferrisson-sql/src/table_lock.rs",
    },
    Note {
        name: "db-for-update",
        tag: "SELECT ... FOR UPDATE",
        does: "No lock of its own: the deduction runs in a transaction that reads the stock row with SELECT ... FOR UPDATE, which locks the row until the commit.",
        code: "BEGIN;\nSELECT stock FROM stock WHERE id = 1 FOR UPDATE;  -- others wait here\nUPDATE stock SET stock = :read - 1, sold = sold + 1 WHERE id = 1;\nCOMMIT;",
        outcome: "Correct: the database orders the readers on the row lock, and frees it when the transaction ends, also when the client dies (the server rolls the transaction back). The cost is a transaction and a row lock held for a round trip per sale, on the one row everybody wants.",
        fault: None,
        source: "SqlStock::step_for_update in crates/seckill-lab/src/in_process/sql_stock.rs",
    },
    Note {
        name: "pg-advisory",
        tag: "PostgreSQL advisory lock",
        does: "PostgreSQL's pg_try_advisory_lock on a key derived from the lock's name, through ferrisson-sql's SessionLock: held by the client's session connection, which a heartbeat watches.",
        code: "let client = ferrisson::sql::Client::connect(url).await?;\nlet guard = client.session_lock(name)?.lock_timeout(lock_wait).await?;  // pg_try_advisory_lock(key), with back-off\n// SELECT stock ...; UPDATE ... SET stock = :read - 1\nguard.unlock().await?;  // pg_advisory_unlock(key)",
        outcome: "Correct while the connections live: the server frees the lock when the session ends, so a dead holder cannot deadlock it. No fencing token, and not behind a pooler in transaction mode (the next statement may reach another session).",
        fault: None,
        source: "crates/ferrisson-sql/src/session_lock.rs",
    },
    Note {
        name: "mysql-get-lock",
        tag: "MySQL/MariaDB GET_LOCK",
        does: "MySQL's and MariaDB's GET_LOCK(name, 0) through ferrisson-sql's SessionLock: a named lock held by the client's session connection.",
        code: "let client = ferrisson::sql::Client::connect(url).await?;\nlet guard = client.session_lock(name)?.lock_timeout(lock_wait).await?;  // GET_LOCK(name, 0), with back-off\n// SELECT stock ...; UPDATE ... SET stock = :read - 1\nguard.unlock().await?;  // RELEASE_LOCK(name)",
        outcome: "Correct while the connections live, as the advisory lock: freed by the server when the session ends, no fencing token.",
        fault: None,
        source: "crates/ferrisson-sql/src/session_lock.rs",
    },
    Note {
        name: "db-version-cas",
        tag: "UPDATE ... WHERE stock = <read>",
        does: "Optimistic locking: read the stock, then one UPDATE that only succeeds if the stock is still the value read; a buyer whose UPDATE matched no row fails (no retry).",
        code: "SELECT stock FROM stock WHERE id = 1;                -- :read\nUPDATE stock SET stock = stock - 1, sold = sold + 1\n WHERE id = 1 AND stock = :read;                     -- 0 rows: somebody else sold first",
        outcome: "It never oversells: a write based on a stale read matches no row. But under a flash sale every buyer that read the same value as the winner fails while stock is left, so most buyers are turned away and the stock is not sold out. That is why the condition became stock > 0 (db-optimistic): it does not care which value the buyer read, only that a unit is left.",
        fault: None,
        source: "SqlStock::step_version_cas in crates/seckill-lab/src/in_process/sql_stock.rs",
    },
    Note {
        name: "getset-timestamp",
        tag: "SETNX expiry, GET, GETSET",
        does: "The lock of the old SETNX page of the Redis docs: the value is the holder's expiry time; a waiter that finds that time past by its own clock takes the lock over with GETSET, and has it if the old value was still a past one.",
        code: "expires = now() + lease + 1\nif SETNX lock expires == 1: held\nelif GET lock < now():                   # expired, by MY clock\n    if GETSET lock expires < now(): held  # nobody took it over first\n...\nif now() < expires: DEL lock              # release",
        outcome: "What it gets right: no EXPIRE to forget, so a holder that dies does not deadlock it: the next waiter finds its timestamp past and takes the lock over, and GETSET lets only one of several waiters win the take-over.",
        fault: Some(
            "The lab makes one holder's process die before its DEL: the others take the lock over once its timestamp passes.",
        ),
        source: "crates/seckill-lab/src/in_process/getset_timestamp.rs",
    },
    Note {
        name: "getset-timestamp-skewed",
        tag: "the same, one clock ahead",
        does: "The same lock, with one instance's clock ahead of the others' (NTP off, a VM resumed, a wrong time zone setting).",
        code: "# instance 2: now() = real time + skew\nGET lock  ->  expiry written by instance 1 = real time + lease\nreal time + lease < real time + skew  =>  \"expired\"\nGETSET lock ...  -> held, while instance 1 still holds it",
        outcome: "Every client compares its clock with the timestamps of the others: an instance whose clock is ahead by more than the lease sees every live lock as expired, takes it over while its holder works, and two holders read the same stock and write it back: lost updates, units sold twice. The other instances, seeing its timestamps far in the future, would wait that long for a holder of it that died.",
        fault: Some("The lab runs the last instance with its clock ahead by --clock-skew."),
        source: "crates/seckill-lab/src/in_process/getset_timestamp.rs",
    },
    Note {
        name: "zookeeper",
        tag: "ferrisson on ZooKeeper",
        does: "ferrisson's lock on ZooKeeper (Curator's InterProcessMutex recipe): each contender creates an ephemeral sequential node, the lowest holds, each waiter watches the node before its own.",
        code: "let client = ferrisson::connect(\"zk://…/seckill-lab-variants\").await?;\nlet guard = client.lock(name)?.lock_timeout(lock_wait).await?;\n// GET stock, check, SET stock - 1 (in the lab's Redis)\nguard.unlock().await?;",
        outcome: "Correct: the node is ephemeral, so a holder whose session ends (a dead process) loses it after the session timeout instead of deadlocking it, and waiters are woken one by one rather than polling.",
        fault: None,
        source: "crates/ferrisson-zookeeper/src/lock.rs",
    },
    Note {
        name: "etcd",
        tag: "ferrisson on etcd",
        does: "ferrisson's lock on etcd (etcd's concurrency.Mutex): a key per contender under the lock's prefix, attached to the client's lease; the key with the lowest revision holds, each waiter watches the one before it.",
        code: "let client = ferrisson::connect(\"etcd://…\").await?;\nlet guard = client.lock(name)?.lock_timeout(lock_wait).await?;\n// GET stock, check, SET stock - 1 (in the lab's Redis)\nguard.unlock().await?;",
        outcome: "Correct: a holder that dies loses its key when its lease runs out, decided by the etcd cluster's consensus, not by a client's clock.",
        fault: None,
        source: "crates/ferrisson-etcd/src/lock.rs",
    },
];

/// The note of the variant called `name` (a row of a variant run on both databases,
/// `db-for-update/postgres`, has its variant's note).
pub(crate) fn note(name: &str) -> Option<&'static Note> {
    let variant = name.split_once('/').map_or(name, |(v, _)| v);
    NOTES.iter().find(|n| n.name == variant)
}

#[cfg(test)]
mod tests {
    use crate::in_process::LabVariant;

    use super::{DB_DEDUCT_SQL, NOTES, note};

    const RUN: &str = include_str!("../../../seckill/src/oversell/run.rs");
    const DB: &str = include_str!("../../../seckill/src/db/mod.rs");

    #[test]
    fn every_variant_has_a_note_in_the_labs_order() {
        let names: Vec<&str> = NOTES.iter().map(|n| n.name).collect();
        let variants: Vec<&str> = LabVariant::all().iter().map(|v| v.name()).collect();
        assert_eq!(names, variants);
        assert!(note("spinlock").is_none());
        assert_eq!(
            note("db-for-update/mariadb").map(|n| n.name),
            Some("db-for-update")
        );
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
            if let Some(path) = n
                .source
                .split(' ')
                .find(|w| w.starts_with("crates/") && !w.contains("/seckill/"))
            {
                let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../..")
                    .join(path);
                assert!(file.is_file(), "{}: no {path}", n.name);
            }
            assert!(!n.does.is_empty() && !n.code.is_empty() && !n.outcome.is_empty());
        }
        assert!(
            DB.contains(DB_DEDUCT_SQL),
            "the page's SQL is the service's"
        );
    }
}

//! The lab's results: the table, `report.json`, `chart.svg` and the page,
//! `report.html` (drawn from the JSON by [`crate::page`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;
use serde::Serialize;

use seckill::OrderFlow;
use seckill::db::Backend;
use seckill::oversell::{LabState, Variant};

use crate::expect::{Verdict, verdict};
use crate::load::LoadResult;
use crate::machine::Machine;
use crate::options::LabOptions;
use crate::stores::StoreRow;
use crate::topology::Topology;

/// One variant's line of the table.
#[derive(Debug, Clone, Serialize)]
pub struct VariantRow {
    /// The variant's name (a variant the lab runs itself on both databases: with the
    /// database after a slash, `db-for-update/postgres`).
    pub variant: String,
    /// What the variant is expected to show under the lab's load: its flaw, or correct.
    pub expected: Verdict,
    /// What it did.
    pub verdict: Verdict,
    /// Requests sent.
    pub requests: usize,
    /// Units sold, counted in Redis (the database for `db-optimistic`).
    pub sold: i64,
    /// Replies that said `sold: true`.
    pub sold_by_replies: usize,
    /// Stock left.
    pub final_stock: i64,
    /// Units sold beyond the stock.
    pub oversold: i64,
    /// Sales whose stock write was overwritten (sold − stock decrease).
    pub lost_updates: i64,
    /// Requests without a 2xx reply.
    pub errors: usize,
    /// Requests that gave up waiting for a held lock.
    pub gave_up: i64,
    /// Stock writes the fence refused (`token-lua`, `watchdog`, `redlock`): a holder
    /// whose lock had expired writing after a newer holder. Not oversold: the fence
    /// kept them from selling anything.
    pub late_writes_refused: i64,
    /// Deletes that removed another holder's lock.
    pub foreign_deletes: i64,
    /// Requests per second.
    pub throughput: f64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 90th percentile latency, ms.
    pub p90_ms: f64,
    /// 99th percentile latency, ms.
    pub p99_ms: f64,
    /// Slowest request, ms.
    pub max_ms: f64,
    /// What the injected faults did.
    pub faults: Vec<String>,
    /// `{lab}:lock` at the end: present, and its TTL (none: no expiry). In the JSON:
    /// `null` when absent, else `{"ttl_ms": ms or null}`.
    #[serde(serialize_with = "lock_left_json")]
    pub lock_left: Option<Option<i64>>,
    /// `watchdog`: the lock's TTL (ms) sampled during each stall.
    pub ttl_samples: Vec<Vec<i64>>,
    /// `watchdog`: stalls during which the TTL was seen renewed.
    pub ttl_refreshed: i64,
    /// A variant the lab runs itself: the store it ran on, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs_on: Option<String>,
    /// A variant the lab runs itself: its instances (each with connections of its own,
    /// in the lab's process).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_process_instances: Option<usize>,
    /// Lock acquisitions that found another holder still holding (two holders at once).
    #[serde(default)]
    pub double_holds: i64,
    /// `db-version-cas`: buyers whose compare failed while stock was left (no retry).
    #[serde(default)]
    pub cas_conflicts: i64,
    /// `getset-timestamp-skewed`: how far ahead one instance's clock ran, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_skew_ms: Option<i64>,
    /// A lock left behind at the end with no expiry, in words (`db-lock-table-naive`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub left_behind: Option<String>,
    /// The first error a request got, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

impl VariantRow {
    /// The row of `variant` from its load and the state it left.
    pub fn new(
        variant: Variant,
        expected: Verdict,
        stock: i64,
        load: &LoadResult,
        state: &LabState,
    ) -> Self {
        let (verdict, sold, oversold, lost_updates) = verdict(variant, stock, state);
        let final_stock = match variant {
            Variant::DbOptimistic => state.db_stock.unwrap_or(stock),
            _ => state.stock.unwrap_or(stock),
        };
        Self {
            variant: variant.name().to_owned(),
            expected,
            verdict,
            requests: load.samples.len(),
            sold,
            sold_by_replies: load
                .samples
                .iter()
                .filter(|s| s.body.get("sold").and_then(serde_json::Value::as_bool) == Some(true))
                .count(),
            final_stock,
            oversold,
            lost_updates,
            errors: load.errors(),
            gave_up: state.gave_up,
            late_writes_refused: state.late_writes_refused,
            foreign_deletes: state.foreign_deletes,
            throughput: load.throughput(),
            p50_ms: load.latency_ms(0.5),
            p90_ms: load.latency_ms(0.9),
            p99_ms: load.latency_ms(0.99),
            max_ms: load.latency_ms(1.0),
            faults: state.faults.clone(),
            lock_left: state.lock.present.then_some(state.lock.ttl_ms),
            ttl_samples: state.ttl_samples.clone(),
            ttl_refreshed: state.ttl_refreshed,
            runs_on: None,
            in_process_instances: None,
            double_holds: 0,
            cas_conflicts: 0,
            clock_skew_ms: None,
            left_behind: None,
            first_error: None,
        }
    }
}

/// `Some(None)` (a lock without expiry) and `None` (no lock) would both be `null`.
#[allow(clippy::ref_option, clippy::option_option)] // the field's type, as serde passes it
fn lock_left_json<S: serde::Serializer>(
    lock: &Option<Option<i64>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    lock.map(|ttl_ms| serde_json::json!({ "ttl_ms": ttl_ms }))
        .serialize(s)
}

/// One run of the voucher scenario.
#[derive(Debug, Clone, Serialize)]
pub struct VoucherRow {
    /// The order flow's lock.
    pub order_flow: OrderFlow,
    /// Buyers.
    pub users: usize,
    /// Attempts per buyer.
    pub attempts: usize,
    /// Seckill requests sent.
    pub requests: usize,
    /// The voucher's stock.
    pub stock: i64,
    /// Orders in the database.
    pub orders: i64,
    /// Users holding two or more orders (one per user is the rule).
    pub users_with_two_orders: i64,
    /// Stock left in the database.
    pub stock_left: i64,
    /// Replies by code (`created`, `SOLD_OUT`, `ALREADY_ORDERED`, ...).
    pub replies: BTreeMap<String, usize>,
    /// Requests per second.
    pub throughput: f64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile latency, ms.
    pub p99_ms: f64,
}

/// The whole lab's result.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// When the report was made (RFC 3339).
    pub finished_at: String,
    /// Database backend used.
    pub database: &'static str,
    /// What Redis the instances used: one server, a Sentinel group or a Redis Cluster.
    pub topology: Topology,
    /// That Redis in words: what the lab started, or the `--url` it was given.
    pub redis: String,
    /// Instances started.
    pub instances: usize,
    /// Concurrent clients.
    pub clients: usize,
    /// Requests per client.
    pub loops: usize,
    /// Stock per run.
    pub stock: i64,
    /// The request that got each fault.
    pub fault_at: u64,
    /// Lease of the hand-made expiring locks, ms.
    pub lease_ms: u128,
    /// The watchdog variant's stall, ms.
    pub stall_ms: u128,
    /// Watchdog lease, ms.
    pub watchdog_lease_ms: u128,
    /// How long a lab request waits for a held lock before it gives up, ms.
    pub lock_wait_ms: u128,
    /// The watchdog variant stalls when the stock read is a multiple of this.
    pub stall_every: i64,
    /// One row per variant.
    pub variants: Vec<VariantRow>,
    /// Variants this run did not run (a database it could not reach), and why.
    pub variants_left_out: Vec<LeftOutVariant>,
    /// How long the variants the lab runs itself took in all, s.
    pub in_process_s: f64,
    /// `getset-timestamp-skewed`: how far ahead one instance's clock ran, ms.
    pub clock_skew_ms: u128,
    /// The voucher scenario: the lock flow, the same without the lock, the Lua flow.
    pub vouchers: Vec<VoucherRow>,
    /// How long each phase of the store measurement ran per store, ms (0: skipped).
    pub store_phase_ms: u128,
    /// The stores measured, in the order the page lists them.
    pub stores: Vec<StoreRow>,
    /// The stores the lab knows of but this run did not measure, and why.
    pub stores_left_out: Vec<LeftOut>,
    /// The machine and build.
    pub machine: Machine,
}

/// A variant a run did not run.
#[derive(Debug, Clone, Serialize)]
pub struct LeftOutVariant {
    /// Its row's name.
    pub variant: String,
    /// Why it is not in the run.
    pub why: String,
    /// Whether its run was tried and failed (a problem), rather than skipped.
    pub failed: bool,
}

/// A store a run did not measure.
#[derive(Debug, Clone, Serialize)]
pub struct LeftOut {
    /// Its id (one of [`crate::stores::KNOWN_STORES`]).
    pub store: String,
    /// Why it is not in the run.
    pub why: String,
}

impl Report {
    /// Assembles the report.
    pub fn new(
        options: &LabOptions,
        backend: Backend,
        variants: Vec<VariantRow>,
        vouchers: Vec<VoucherRow>,
    ) -> Self {
        let topology = options.redis_topology();
        let redis = match &options.redis {
            Some(url) => format!("{topology}, given: {}", seckill::db::redact(url)),
            None => format!("{topology}: {}, started by the lab", topology.started()),
        };
        Self {
            finished_at: chrono::Utc::now().to_rfc3339(),
            database: backend.name(),
            topology,
            redis,
            instances: options.instances,
            clients: options.clients,
            loops: options.loops,
            stock: options.stock,
            fault_at: options.lab.fault_at,
            lease_ms: options.lab.lease.as_millis(),
            stall_ms: options.lab.stall.as_millis(),
            watchdog_lease_ms: options.watchdog_lease.as_millis(),
            lock_wait_ms: options.lab.lock_wait.as_millis(),
            stall_every: options.lab.stall_every,
            variants,
            variants_left_out: Vec::new(),
            in_process_s: 0.0,
            clock_skew_ms: options.clock_skew.as_millis(),
            vouchers,
            store_phase_ms: 0,
            stores: Vec::new(),
            stores_left_out: Vec::new(),
            machine: Machine::default(),
        }
    }

    /// The same report with the store measurement's rows; every known store without a
    /// row is listed as left out, with `why` saying why (`None`: the lab does not
    /// support that store yet).
    ///
    /// ```no_run
    /// # async fn demo(options: seckill_lab::LabOptions) -> anyhow::Result<()> {
    /// use std::time::Duration;
    /// let report = seckill_lab::run(&options).await?;
    /// let report = report.with_stores(Duration::ZERO, Vec::new(), |_| Some("skipped".into()));
    /// assert_eq!(report.stores_left_out.len(), seckill_lab::KNOWN_STORES.len());
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn with_stores(
        mut self,
        phase: std::time::Duration,
        stores: Vec<StoreRow>,
        why: impl Fn(&str) -> Option<String>,
    ) -> Self {
        self.store_phase_ms = phase.as_millis();
        self.stores_left_out = crate::stores::KNOWN_STORES
            .iter()
            .filter(|(id, _)| !stores.iter().any(|s| s.store == *id))
            .map(|(id, _)| LeftOut {
                store: (*id).to_owned(),
                why: why(id).unwrap_or_else(|| "not supported by the lab yet".into()),
            })
            .collect();
        self.stores = stores;
        self
    }

    /// Everything that differs from what is expected: a variant whose verdict is
    /// not the expected one, a correct variant with errors, a voucher run that oversold,
    /// or a duplicate order in a flow that must prevent it. Empty when the lab showed it
    /// all.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for row in &self.variants {
            if row.verdict != row.expected {
                problems.push(format!(
                    "{}: expected {}, got {}",
                    row.variant, row.expected, row.verdict
                ));
            } else if row.expected == Verdict::Correct && row.errors > 0 {
                problems.push(format!("{}: {} requests failed", row.variant, row.errors));
            }
        }
        for l in self.variants_left_out.iter().filter(|l| l.failed) {
            problems.push(format!("{}: {}", l.variant, l.why));
        }
        for s in &self.stores {
            if let Some(e) = &s.error {
                problems.push(format!("store measurement of {}: {e}", s.store));
            }
        }
        for v in &self.vouchers {
            if v.orders + v.stock_left != v.stock {
                problems.push(format!(
                    "vouchers ({} flow): {} orders + {} left != stock {}",
                    v.order_flow.name(),
                    v.orders,
                    v.stock_left,
                    v.stock
                ));
            }
            if v.order_flow == OrderFlow::Lock && v.users_with_two_orders > 0 {
                problems.push(format!(
                    "vouchers with the lock: {} users with two orders",
                    v.users_with_two_orders
                ));
            }
        }
        problems
    }

    /// The table printed at the end of the lab.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "Oversell lab: {} clients x {} loops = {} requests per variant, stock {}, {} instances, {} database",
            self.clients,
            self.loops,
            self.clients * self.loops,
            self.stock,
            self.instances,
            self.database
        );
        let _ = writeln!(t, "Redis: {}", self.redis);
        let _ = writeln!(
            t,
            "{:<28} {:>8} {:>6} {:>6} {:>9} {:>6} {:>18} {:>7} {:>6} {:>9} {:>8} {:>8}  {:<19} as expected",
            "variant",
            "requests",
            "sold",
            "stock",
            "oversold",
            "lost",
            "late write refused",
            "gave up",
            "errors",
            "req/s",
            "p50 ms",
            "p99 ms",
            "verdict",
        );
        for r in &self.variants {
            let _ = writeln!(
                t,
                "{:<28} {:>8} {:>6} {:>6} {:>9} {:>6} {:>18} {:>7} {:>6} {:>9.0} {:>8.1} {:>8.1}  {:<19} {}",
                r.variant,
                r.requests,
                r.sold,
                r.final_stock,
                r.oversold,
                r.lost_updates,
                r.late_writes_refused,
                r.gave_up,
                r.errors,
                r.throughput,
                r.p50_ms,
                r.p99_ms,
                r.verdict.to_string(),
                if r.verdict == r.expected { "yes" } else { "NO" }
            );
        }
        for l in &self.variants_left_out {
            let _ = writeln!(t, "{:<28} not run: {}", l.variant, l.why);
        }
        self.write_notes(&mut t);
        self.write_vouchers(&mut t);
        self.write_stores(&mut t);
        let problems = self.problems();
        if problems.is_empty() {
            let _ = writeln!(t, "\nAs expected: {}.", self.summary());
        } else {
            let _ = writeln!(t, "\nNot as expected:");
            for p in problems {
                let _ = writeln!(t, "  - {p}");
            }
        }
        t
    }

    /// What the variants did, grouped: "naive and local-mutex oversold; ...".
    fn summary(&self) -> String {
        let mut groups: Vec<(Verdict, Vec<&str>)> = Vec::new();
        for row in &self.variants {
            match groups.iter_mut().find(|(v, _)| *v == row.verdict) {
                Some((_, names)) => names.push(row.variant.as_str()),
                None => groups.push((row.verdict, vec![row.variant.as_str()])),
            }
        }
        let parts: Vec<String> = groups
            .iter()
            .map(|(verdict, names)| {
                let what = match verdict {
                    Verdict::Correct => "sold exactly the stock",
                    Verdict::Oversold => "oversold",
                    Verdict::Deadlocked => "deadlocked on a lock nobody releases",
                    Verdict::WrongLockDeleted => "deleted another holder's lock",
                    Verdict::Undersold => "sold less than the stock",
                };
                format!("{} {what}", and_list(names))
            })
            .collect();
        parts.join("; ")
    }

    fn write_notes(&self, t: &mut String) {
        let notes: Vec<String> = self
            .variants
            .iter()
            .flat_map(|r| {
                let mut notes: Vec<String> = r
                    .faults
                    .iter()
                    .map(|f| format!("{}: {f}", r.variant))
                    .collect();
                if r.gave_up > 0 && r.verdict == Verdict::Deadlocked {
                    notes.push(format!(
                        "{}: {} requests gave up waiting for the orphaned lock",
                        r.variant, r.gave_up
                    ));
                }
                if r.foreign_deletes > 0 {
                    notes.push(format!(
                        "{}: {} deletes removed another holder's lock",
                        r.variant, r.foreign_deletes
                    ));
                }
                if let Some(left) = &r.left_behind {
                    notes.push(format!("{}: left behind: {left}", r.variant));
                }
                if r.cas_conflicts > 0 {
                    notes.push(format!(
                        "{}: {} buyers lost the compare while stock was left, and did not retry",
                        r.variant, r.cas_conflicts
                    ));
                }
                if r.double_holds > 0 {
                    notes.push(format!(
                        "{}: {} times a request took the lock while another still held it{}",
                        r.variant,
                        r.double_holds,
                        r.clock_skew_ms.map_or_else(String::new, |ms| format!(
                            " (one instance's clock {ms} ms ahead)"
                        ))
                    ));
                }
                if let Some(e) = &r.first_error {
                    notes.push(format!("{}: first error: {e}", r.variant));
                }
                if r.variant == Variant::Watchdog.name() {
                    for samples in &r.ttl_samples {
                        notes.push(format!(
                            "watchdog: lock TTL during a {} ms stall (ms): {}{}",
                            self.stall_ms,
                            thin(samples),
                            if samples.windows(2).any(|w| w[1] > w[0]) {
                                " — renewed"
                            } else {
                                ""
                            }
                        ));
                    }
                }
                notes
            })
            .collect();
        if !notes.is_empty() {
            let _ = writeln!(t, "\nWhat happened:");
            for n in notes {
                let _ = writeln!(t, "  - {n}");
            }
        }
    }

    fn write_stores(&self, t: &mut String) {
        if self.stores.is_empty() {
            return;
        }
        let _ = writeln!(
            t,
            "\nStores ({} ms per measurement; the page has the fault suite's verdicts):",
            self.store_phase_ms
        );
        let _ = writeln!(
            t,
            "{:<11} {:>22} {:>22} {:>14}",
            "store", "uncontended p50/p99 us", "hand-off p50/p99 us", "pairs/s at 64"
        );
        let pair = |l: Option<crate::stores::Latency>| {
            l.map_or_else(
                || "-".to_owned(),
                |l| format!("{:.0} / {:.0}", l.p50_us, l.p99_us),
            )
        };
        for s in &self.stores {
            let _ = writeln!(
                t,
                "{:<11} {:>22} {:>22} {:>14}{}",
                s.store,
                pair(s.uncontended),
                pair(s.handoff),
                s.pairs_per_s_64
                    .map_or_else(|| "-".to_owned(), |p| format!("{p:.0}")),
                match (&s.error, s.failed_calls) {
                    (Some(e), _) => format!("  failed: {e}"),
                    (None, 0) => String::new(),
                    (None, n) => format!("  ({n} calls failed)"),
                }
            );
        }
        if !self.stores_left_out.is_empty() {
            let names: Vec<&str> = self
                .stores_left_out
                .iter()
                .map(|l| l.store.as_str())
                .collect();
            let _ = writeln!(t, "not in this run: {}", names.join(", "));
        }
    }

    fn write_vouchers(&self, t: &mut String) {
        if !self.vouchers.is_empty() {
            let _ = writeln!(t, "\nVoucher flash sale (unique index off):");
            let _ = writeln!(
                t,
                "{:<11} {:>6} {:>9} {:>8} {:>7} {:>16} {:>11} {:>8}  replies",
                "order flow",
                "users",
                "attempts",
                "requests",
                "orders",
                "users w/ 2 orders",
                "stock left",
                "req/s"
            );
            for v in &self.vouchers {
                let replies: Vec<String> =
                    v.replies.iter().map(|(k, n)| format!("{k} {n}")).collect();
                let _ = writeln!(
                    t,
                    "{:<11} {:>6} {:>9} {:>8} {:>7} {:>16} {:>11} {:>8.0}  {}",
                    v.order_flow.name(),
                    v.users,
                    v.attempts,
                    v.requests,
                    v.orders,
                    v.users_with_two_orders,
                    v.stock_left,
                    v.throughput,
                    replies.join(", ")
                );
            }
        }
    }

    /// Writes `report.json`, `table.txt`, `chart.svg` and `report.html` into `dir`.
    ///
    /// # Errors
    ///
    /// When a file cannot be written.
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)?;
        let json = serde_json::to_value(self)?;
        std::fs::write(
            dir.join("report.json"),
            serde_json::to_string_pretty(&json)?,
        )
        .context("writing report.json")?;
        std::fs::write(dir.join("report.html"), crate::page::render(&json))
            .context("writing report.html")?;
        std::fs::write(dir.join("table.txt"), self.table()).context("writing table.txt")?;
        std::fs::write(dir.join("chart.svg"), self.svg()).context("writing chart.svg")?;
        Ok(())
    }

    /// Two bar charts side by side: throughput and oversold units per variant.
    pub fn svg(&self) -> String {
        let rows = self.variants.len().max(1);
        let (label_w, panel_w, row_h, top) = (120.0, 300.0, 24.0, 50.0);
        let width = label_w + 2.0 * panel_w + 170.0;
        let height = top + rows as f64 * row_h + 30.0;
        let max_tp = self
            .variants
            .iter()
            .map(|r| r.throughput)
            .fold(1.0, f64::max);
        let max_over = self
            .variants
            .iter()
            .map(|r| r.oversold as f64)
            .fold(1.0, f64::max);
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="20" font-size="14" font-weight="bold">Oversell lab: {} requests per variant, stock {}, {} instances, {} Redis</text>"#,
            10,
            self.clients * self.loops,
            self.stock,
            self.instances,
            self.topology
        );
        let x1 = label_w;
        let x2 = label_w + panel_w + 30.0;
        let _ = writeln!(
            s,
            r#"<text x="{x1}" y="{}">throughput (req/s, max {max_tp:.0})</text>"#,
            top - 10.0
        );
        let _ = writeln!(
            s,
            r#"<text x="{x2}" y="{}">oversold units (max {max_over:.0})</text>"#,
            top - 10.0
        );
        for (i, r) in self.variants.iter().enumerate() {
            let y = top + i as f64 * row_h;
            let colour = match r.verdict {
                Verdict::Correct => "#2e7d32",
                Verdict::Oversold => "#c62828",
                Verdict::Deadlocked => "#6a1b9a",
                Verdict::WrongLockDeleted => "#ef6c00",
                Verdict::Undersold => "#757575",
            };
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
                label_w - 6.0,
                y + 15.0,
                r.variant
            );
            let w = (r.throughput / max_tp * (panel_w - 50.0)).max(1.0);
            let _ = writeln!(
                s,
                r#"<rect x="{x1}" y="{}" width="{w:.1}" height="{}" fill="{colour}"/><text x="{:.1}" y="{}">{:.0}</text>"#,
                y + 3.0,
                row_h - 8.0,
                x1 + w + 4.0,
                y + 15.0,
                r.throughput
            );
            let w = r.oversold as f64 / max_over * (panel_w - 50.0);
            let _ = writeln!(
                s,
                r#"<rect x="{x2}" y="{}" width="{w:.1}" height="{}" fill="{colour}"/><text x="{:.1}" y="{}">{} ({})</text>"#,
                y + 3.0,
                row_h - 8.0,
                x2 + w + 4.0,
                y + 15.0,
                r.oversold,
                r.verdict
            );
        }
        let _ = writeln!(s, "</svg>");
        s
    }
}

/// At most ~12 samples of a series, for the table.
fn thin(samples: &[i64]) -> String {
    let step = samples.len().div_ceil(12).max(1);
    let picked: Vec<String> = samples
        .iter()
        .step_by(step)
        .map(ToString::to_string)
        .collect();
    picked.join(" → ")
}

/// `a`, `a and b`, `a, b and c`.
pub(crate) fn and_list(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

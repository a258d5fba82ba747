//! The reports in words: a table with a row a scenario, and a summary line.

use std::fmt::Write as _;

use crate::scenarios::ScenarioReport;

/// A plain-text table of reports, one row per scenario.
///
/// ```
/// let text = ferrisson_chaos::table(&[]);
/// assert!(text.starts_with("| scenario"));
/// ```
pub fn table(reports: &[ScenarioReport]) -> String {
    let mut out = String::from(
        "| scenario | fault | iter | ok | failed | lost | overlap | double grants | stale acc. (fenced) | stale ref. (fenced) | fresh ref. | token regr. | foreign rel./ren. | renew after loss | held past deadline | keys left | extra | verdict |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in reports {
        let c = &r.counters;
        let extra: Vec<String> = c
            .counts
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .chain(c.measures.iter().map(|(k, v)| format!("{k} max {v} ms")))
            .collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}/{} | {} | {} | {} | {} | {} |",
            r.scenario.name(),
            r.fault,
            r.iterations,
            c.acquires_ok,
            c.acquires_failed,
            c.lost_signals,
            c.overlapping_sections,
            c.double_grants,
            c.stale_writes_accepted_fenced,
            c.stale_writes_refused_fenced,
            c.fresh_writes_refused,
            c.token_regressions,
            c.foreign_releases,
            c.foreign_renewals,
            c.renewals_after_loss,
            c.held_after_deadline,
            c.keys_left,
            extra.join(", "),
            verdict(r),
        );
    }
    out
}

/// One line for the whole run: how many scenarios passed, showed their documented
/// failure, or failed.
///
/// ```
/// assert_eq!(
///     ferrisson_chaos::summary(&[]),
///     "0 scenarios, 0 iterations: 0 pass, 0 unsafe as documented, 0 FAIL"
/// );
/// ```
pub fn summary(reports: &[ScenarioReport]) -> String {
    let count = |wanted: &str| reports.iter().filter(|r| verdict(r) == wanted).count();
    let iterations: u64 = reports.iter().map(|r| u64::from(r.iterations)).sum();
    format!(
        "{} scenario{}, {iterations} iterations: {} pass, {} unsafe as documented, {} FAIL",
        reports.len(),
        if reports.len() == 1 { "" } else { "s" },
        count(PASS),
        count(UNSAFE_AS_DOCUMENTED),
        count(FAIL),
    )
}

const PASS: &str = "pass";
const UNSAFE_AS_DOCUMENTED: &str = "unsafe, as documented";
const FAIL: &str = "FAIL";

/// A report's verdict, as the table's last column says it.
fn verdict(r: &ScenarioReport) -> &'static str {
    match (r.passed, r.documented_unsafe) {
        (true, true) => UNSAFE_AS_DOCUMENTED,
        (true, false) => PASS,
        (false, _) => FAIL,
    }
}

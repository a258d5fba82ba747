//! The lab's report as one self-contained HTML page (`report.html`): drawn from the run's
//! JSON, with its styles and charts inline (SVG), no script and nothing loaded from
//! anywhere, so it opens from disk as it is.
//!
//! It reads the JSON, not the report's types, so that a field a later lab adds shows up
//! without a change here: a variant's counters the page does not know are listed under
//! their own name (`late_writes_refused` as "late writes refused"), and a known one gets
//! its wording in [`COUNTERS`].

use std::fmt::Write as _;

use serde_json::Value;

mod charts;
mod notes;
mod safety;

use crate::report::and_list;
use charts::{Bar, Spread};
use safety::{QUESTIONS, RECORD_FILES, Record};

const STYLE: &str = include_str!("page/style.css");

/// A variant's counters, worded: the JSON field, and the sentence it goes in (`{n}`:
/// the count). Shown when not zero.
const COUNTERS: [(&str, &str); 11] = [
    ("oversold", "{n} units sold beyond the stock"),
    (
        "late_writes_refused",
        "{n} late writes refused: a holder whose lock had expired wrote after a newer holder, and the fence refused it (not oversold)",
    ),
    (
        "lost_updates",
        "{n} sales whose stock write was overwritten by another (lost updates)",
    ),
    (
        "gave_up",
        "{n} requests gave up waiting for the lock (each waits --lab-lock-wait)",
    ),
    (
        "foreign_deletes",
        "{n} deletes removed another holder's lock",
    ),
    ("errors", "{n} requests got no 2xx reply"),
    (
        "ttl_refreshed",
        "{n} stalls during which the watchdog renewed the lease",
    ),
    (
        "cas_conflicts",
        "{n} buyers lost the compare (the stock had changed since they read it) while stock was left, and were turned away",
    ),
    (
        "double_holds",
        "{n} times a request took the lock while another request still held it: two holders at once",
    ),
    (
        "clock_skew_ms",
        "one instance's clock ran {n} ms ahead of the others'",
    ),
    (
        "in_process_instances",
        "run by the lab itself, on {n} instances in its own process, each with connections of its own",
    ),
];

/// Fields of a variant's row that are not counters to list (shown elsewhere, or not
/// counts).
const NOT_COUNTERS: [&str; 15] = [
    "requests",
    "sold",
    "sold_by_replies",
    "final_stock",
    "throughput",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "max_ms",
    "faults",
    "lock_left",
    "ttl_samples",
    "variant",
    "expected",
    "verdict",
];

/// HTML-escapes `text` (for element content and quoted attributes).
pub(crate) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn float(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}

fn int(v: &Value, key: &str) -> i64 {
    v.get(key)
        .and_then(|x| x.as_i64().or_else(|| x.as_f64().map(|f| f as i64)))
        .unwrap_or(0)
}

fn list<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// A verdict's words and CSS class.
fn verdict_words(verdict: &str) -> (String, String) {
    let words = match verdict {
        "correct" => "correct",
        "oversold" => "oversold",
        "deadlocked" => "deadlocked",
        "wrong_lock_deleted" => "wrong lock deleted",
        "undersold" => "undersold",
        other => return (other.replace('_', " "), "other".into()),
    };
    (words.into(), verdict.replace('_', "-"))
}

fn badge(verdict: &str) -> String {
    let (words, class) = verdict_words(verdict);
    format!(
        r#"<span class="badge v-{}">{}</span>"#,
        esc(&class),
        esc(&words)
    )
}

/// An id for a variant's section.
fn anchor(name: &str) -> String {
    let id: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("variant-{id}")
}

/// The page for the run whose JSON (`report.json`) is `run`.
///
/// ```
/// let run = serde_json::json!({ "variants": [], "stores": [] });
/// let page = seckill_lab::render_page(&run);
/// assert!(page.starts_with("<!DOCTYPE html>"));
/// assert!(!page.contains("<script src"));
/// ```
pub fn render(run: &Value) -> String {
    let mut p = String::with_capacity(64 * 1024);
    let variants = list(run, "variants");
    let topology = text(run, "topology");
    let title = format!(
        "Oversell lab: {} variants, {} Redis",
        variants.len(),
        if topology.is_empty() {
            "single"
        } else {
            topology
        }
    );
    let _ = write!(
        p,
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>{}</title><style>{STYLE}</style></head><body><main>"#,
        esc(&title)
    );
    header(&mut p, run);
    results(&mut p, run);
    charts_section(&mut p, run);
    variant_sections(&mut p, run);
    stores(&mut p, run);
    vouchers(&mut p, run);
    settings(&mut p, run);
    // The run's data, kept with the page (not executed: a JSON data block).
    let json = serde_json::to_string(run)
        .unwrap_or_default()
        .replace("</", "<\\/");
    let _ = write!(
        p,
        r#"<footer><p>Drawn from the run's JSON (<code>report.json</code> beside this page; also kept in this page as a data block). No script, no network: everything is in this file.</p></footer></main><script type="application/json" id="run-json">{json}</script></body></html>"#
    );
    p
}

fn header(p: &mut String, run: &Value) {
    let variants = list(run, "variants");
    let requests = int(run, "clients") * int(run, "loops");
    let mismatched: Vec<&Value> = variants
        .iter()
        .filter(|v| text(v, "verdict") != text(v, "expected"))
        .collect();
    let _ = write!(
        p,
        r#"<header><p class="kicker">ferrisson · the oversell lab</p><h1>Which fix for overselling fails, and how</h1><p class="lede">{} ways of taking one unit of stock, each hit by {} concurrent clients with {} requests in all against {} units, on {} <code>seckill serve</code> processes. Redis: {}. Finished {}.</p>"#,
        variants.len(),
        int(run, "clients"),
        requests,
        int(run, "stock"),
        int(run, "instances"),
        esc(&redis_words(run, text(run, "redis"))),
        esc(&when(text(run, "finished_at"))),
    );
    if variants.iter().any(|v| int(v, "in_process_instances") > 0) {
        let _ = write!(
            p,
            r#"<p class="lede">The variants the lab runs itself take the same load on {} instances in its own process, each with connections (and a clock) of its own; their lock and stock are in the store, which is what is distributed. They took {} s in all.</p>"#,
            int(run, "instances"),
            fixed(float(run, "in_process_s"))
        );
    }
    if mismatched.is_empty() {
        let _ = write!(
            p,
            r#"<p class="status ok" id="status">Every variant showed what is expected of it: {}.</p>"#,
            esc(&verdict_counts(variants))
        );
    } else {
        let names: Vec<String> = mismatched
            .iter()
            .map(|v| {
                format!(
                    "{} (expected {}, got {})",
                    text(v, "variant"),
                    verdict_words(text(v, "expected")).0,
                    verdict_words(text(v, "verdict")).0
                )
            })
            .collect();
        let _ = write!(
            p,
            r#"<p class="status bad" id="status">Not as expected: {}.</p>"#,
            esc(&names.join("; "))
        );
    }
    let _ = write!(
        p,
        r##"<nav><a href="#results">Results</a><a href="#charts">Charts</a><a href="#variants">The variants</a><a href="#stores">Stores</a><a href="#vouchers">Vouchers</a><a href="#settings">Settings and machine</a></nav></header>"##
    );
}

/// The report's Redis in words without the topology's name in front
/// (`single: one Redis server, started by the lab` → `one Redis server, started by the
/// lab`).
fn redis_words(run: &Value, words: &str) -> String {
    let prefix = format!("{}: ", text(run, "topology"));
    words.strip_prefix(&prefix).unwrap_or(words).to_owned()
}

/// `2026-11-27T04:28:24.59+00:00` as `2026-11-27 04:28:24 UTC`.
fn when(rfc3339: &str) -> String {
    match (rfc3339.get(..19), rfc3339.ends_with("+00:00")) {
        (Some(seconds), true) => format!("{} UTC", seconds.replace('T', " ")),
        _ => rfc3339.to_owned(),
    }
}

/// "5 correct, 2 oversold, 3 deadlocked, 2 wrong lock deleted".
fn verdict_counts(variants: &[Value]) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for v in variants {
        let words = verdict_words(text(v, "verdict")).0;
        match counts.iter_mut().find(|(w, _)| *w == words) {
            Some((_, n)) => *n += 1,
            None => counts.push((words, 1)),
        }
    }
    counts
        .iter()
        .map(|(w, n)| format!("{n} {w}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn results(p: &mut String, run: &Value) {
    let stock = int(run, "stock");
    let _ = write!(
        p,
        r#"<section id="results"><h2>Results</h2><p class="note">One row per variant, in the lab's order from the most naive to the correct ones: first the variants of the <code>seckill serve</code> processes, then those the lab runs itself under the same load (the database's ways, run once on each database it reaches, the timestamp lock, ZooKeeper and etcd). A variant's name leads to what it does and the event that proves its verdict.</p><div class="scroll"><table class="results"><thead><tr><th scope="col">Variant</th><th scope="col">Approach</th><th scope="col" class="n">Sold / stock</th><th scope="col" class="n">Oversold</th><th scope="col" class="n">Lost updates</th><th scope="col" class="n">Late write refused</th><th scope="col" class="n">Errors</th><th scope="col" class="n">Req/s</th><th scope="col" class="n">p50 ms</th><th scope="col" class="n">p99 ms</th><th scope="col">Verdict</th></tr></thead><tbody>"#
    );
    for v in list(run, "variants") {
        let name = text(v, "variant");
        let tag = notes::note(name).map_or("", |n| n.tag);
        let unexpected = if text(v, "verdict") == text(v, "expected") {
            String::new()
        } else {
            format!(
                r#" <span class="unexpected">expected {}</span>"#,
                esc(&verdict_words(text(v, "expected")).0)
            )
        };
        let _ = write!(
            p,
            r##"<tr id="row-{0}" data-variant="{0}"><th scope="row"><a href="#{1}">{0}</a></th><td class="tag">{2}</td><td class="n">{3} / {4}</td><td class="n{5}">{6}</td><td class="n{7}">{8}</td><td class="n">{15}</td><td class="n">{9}</td><td class="n">{10}</td><td class="n">{11}</td><td class="n">{12}</td><td class="verdict">{13}{14}</td></tr>"##,
            esc(name),
            anchor(name),
            esc(tag),
            int(v, "sold"),
            stock,
            if int(v, "oversold") > 0 { " hot" } else { "" },
            int(v, "oversold"),
            if int(v, "lost_updates") > 0 {
                " hot"
            } else {
                ""
            },
            int(v, "lost_updates"),
            int(v, "errors"),
            charts::num(float(v, "throughput")),
            fixed(float(v, "p50_ms")),
            fixed(float(v, "p99_ms")),
            badge(text(v, "verdict")),
            unexpected,
            int(v, "late_writes_refused")
        );
    }
    let _ = write!(
        p,
        r#"</tbody></table></div><p class="legend-line">{} sold exactly the stock, stock 0, every write accounted for. {} more units sold than the stock, or stock writes lost. {} a lock nobody will release stopped the sales. {} a holder deleted a lock another holder had taken. A late write refused is a stock write of a holder whose lock had expired, refused by the fence (the library's fencing token) because a newer holder had written: counted apart, not oversold. A verdict other than the expected one says so beside it. Undersold: fewer units sold than the stock without a deadlock (buyers turned away while stock was left).</p>"#,
        badge("correct"),
        badge("oversold"),
        badge("deadlocked"),
        badge("wrong_lock_deleted")
    );
    let not_run = list(run, "variants_left_out");
    if !not_run.is_empty() {
        let items: Vec<String> = not_run
            .iter()
            .map(|l| format!("{}: {}", esc(text(l, "variant")), esc(text(l, "why"))))
            .collect();
        let _ = write!(
            p,
            r#"<p class="left-out" id="variants-left-out"><strong>Not in this run:</strong> {}.</p>"#,
            items.join("; ")
        );
    }
    p.push_str("</section>");
}

/// A latency with one decimal.
fn fixed(ms: f64) -> String {
    if ms >= 100.0 {
        charts::num(ms)
    } else {
        format!("{ms:.1}")
    }
}

fn charts_section(p: &mut String, run: &Value) {
    let variants = list(run, "variants");
    let class = |v: &Value| format!("v-{}", verdict_words(text(v, "verdict")).1);
    let throughput: Vec<Bar> = variants
        .iter()
        .map(|v| Bar {
            label: text(v, "variant").to_owned(),
            value: float(v, "throughput"),
            class: class(v),
            note: charts::num(float(v, "throughput")),
        })
        .collect();
    let oversold: Vec<Bar> = variants
        .iter()
        .map(|v| {
            let (over, lost) = (int(v, "oversold"), int(v, "lost_updates"));
            Bar {
                label: text(v, "variant").to_owned(),
                value: over as f64,
                class: class(v),
                note: if lost > over {
                    format!("{over} ({lost} lost updates)")
                } else {
                    over.to_string()
                },
            }
        })
        .collect();
    let spreads: Vec<Spread> = variants
        .iter()
        .map(|v| Spread {
            label: text(v, "variant").to_owned(),
            class: class(v),
            p50: float(v, "p50_ms"),
            p90: float(v, "p90_ms").max(float(v, "p50_ms")),
            p99: float(v, "p99_ms"),
            max: float(v, "max_ms").max(float(v, "p99_ms")),
        })
        .collect();
    let _ = write!(
        p,
        r#"<section id="charts"><h2>Charts</h2><p class="note">Bars take the colour of the variant's verdict. Throughput is requests answered per second over the whole run of the variant, all {} clients at once; a variant that waits for a lock it cannot get is slow for that reason.</p><figure>{}<figcaption>Requests per second, per variant.</figcaption></figure><figure>{}<figcaption>Units sold beyond the stock of {} (lost updates in brackets where there were more of them: a lost update is a sale whose stock write another request overwrote).</figcaption></figure><figure>{}<figcaption>Latency of one request: median, 90th and 99th percentile and the slowest, per variant (log scale).</figcaption></figure></section>"#,
        int(run, "clients"),
        charts::bars(
            "chart-throughput",
            "Throughput per variant",
            "requests per second",
            &throughput
        ),
        charts::bars(
            "chart-oversold",
            "Units oversold per variant",
            "units sold beyond the stock",
            &oversold
        ),
        int(run, "stock"),
        charts::spreads("chart-latency", "Latency percentiles per variant", &spreads),
    );
}

fn variant_sections(p: &mut String, run: &Value) {
    let _ = write!(
        p,
        r#"<section id="variants"><h2>The variants</h2><p class="note">Each variant runs the same deduction — read the stock, and if it is positive write it back one less and count the sale — guarded the way one of the usual fixes guards it. The lab's faults hit the {}th holder of a flawed variant's lock (or the next one, when that holder could not show the flaw).</p>"#,
        int(run, "fault_at")
    );
    for v in list(run, "variants") {
        variant(p, run, v);
    }
    p.push_str("</section>");
}

fn variant(p: &mut String, run: &Value, v: &Value) {
    let name = text(v, "variant");
    let note = notes::note(name);
    let verdict = text(v, "verdict");
    let expected = text(v, "expected");
    let _ = write!(
        p,
        r##"<article class="variant" id="{}"><header><h3>{}</h3>{}<a class="back" href="#row-{}">↑ results</a></header>"##,
        anchor(name),
        esc(name),
        badge(verdict),
        esc(name)
    );
    match note {
        Some(n) => {
            let _ = write!(
                p,
                r#"<p class="does">{}</p><pre><code>{}</code></pre><p class="source">Source: {}</p><p>{}</p>"#,
                esc(n.does),
                esc(n.code.trim_end()),
                esc(n.source),
                esc(n.outcome)
            );
            if let Some(fault) = n.fault {
                let _ = write!(p, r#"<p class="fault">{}</p>"#, esc(fault));
            }
        }
        None => p.push_str(r#"<p class="does">No description of this variant yet.</p>"#),
    }
    let _ = write!(p, "<h4>In this run</h4><ul class=\"happened\">");
    let _ = write!(
        p,
        "<li>{} requests; {} units sold of {} ({} replies said sold); {} left in stock</li>",
        int(v, "requests"),
        int(v, "sold"),
        int(run, "stock"),
        int(v, "sold_by_replies"),
        int(v, "final_stock")
    );
    for line in counter_lines(v) {
        let _ = write!(p, "<li>{}</li>", esc(&line));
    }
    if let Some(lock) = v.get("lock_left").filter(|l| !l.is_null()) {
        let line = match lock.get("ttl_ms").and_then(Value::as_i64) {
            None => "At the end the lock key {lab}:lock was still there, with no TTL: nobody will ever delete it.".to_owned(),
            Some(ms) => format!("At the end the lock key {{lab}}:lock was still there, expiring in {ms} ms."),
        };
        let _ = write!(p, "<li class=\"event\">{}</li>", esc(&line));
    }
    p.push_str("</ul>");
    let faults = list(v, "faults");
    if !faults.is_empty() {
        p.push_str("<h4>The event that proves it</h4>");
        for f in faults {
            let _ = write!(
                p,
                r#"<blockquote class="event">{}</blockquote>"#,
                esc(f.as_str().unwrap_or_default())
            );
        }
    }
    let stalls: Vec<Vec<i64>> = list(v, "ttl_samples")
        .iter()
        .map(list_i64)
        .filter(|s| !s.is_empty())
        .collect();
    if !stalls.is_empty() {
        let renewed = stalls
            .iter()
            .filter(|s| s.windows(2).any(|w| w[1] > w[0]))
            .count();
        let _ = write!(
            p,
            r"<h4>The event that proves it</h4><p>The lock's TTL, sampled while the holder stalled {} ms with a {} ms lease: it went back up (renewed by the watchdog) in {} of {} stalls, so the slow holder kept its lock.</p><figure>{}<figcaption>TTL of the watchdog lock during each stall (one line per stall); the dashed line is the lease.</figcaption></figure>",
            int(run, "stall_ms"),
            int(run, "watchdog_lease_ms"),
            renewed,
            stalls.len(),
            charts::ttl_trace(
                &format!("ttl-{}", anchor(name)),
                &stalls,
                float(run, "stall_ms"),
                float(run, "watchdog_lease_ms")
            )
        );
    }
    let _ = write!(
        p,
        r#"<p class="verdict-line">Verdict: {}{}</p></article>"#,
        badge(verdict),
        if verdict == expected {
            " — as expected.".to_owned()
        } else {
            format!(
                " — <strong>not as expected</strong> (expected {}).",
                esc(&verdict_words(expected).0)
            )
        }
    );
}

fn list_i64(v: &Value) -> Vec<i64> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_i64).collect())
        .unwrap_or_default()
}

/// The variant's non-zero counters in words: the known ones worded, any other numeric
/// field under its own name.
fn counter_lines(v: &Value) -> Vec<String> {
    let mut lines = Vec::new();
    for (key, words) in COUNTERS {
        let n = int(v, key);
        if n != 0 {
            lines.push(words.replace("{n}", &n.to_string()));
        }
    }
    if let Some(fields) = v.as_object() {
        for (key, value) in fields {
            let known =
                COUNTERS.iter().any(|(k, _)| k == key) || NOT_COUNTERS.contains(&key.as_str());
            if known {
                continue;
            }
            match value {
                Value::Number(n) if n.as_f64().is_some_and(|f| f != 0.0) => {
                    lines.push(format!("{}: {n}", key.replace('_', " ")));
                }
                Value::Bool(true) => lines.push(key.replace('_', " ")),
                Value::String(s) if !s.is_empty() => {
                    lines.push(format!("{}: {s}", key.replace('_', " ")));
                }
                _ => {}
            }
        }
    }
    lines
}

fn stores(p: &mut String, run: &Value) {
    let record = Record::built_in();
    let rows = list(run, "stores");
    let phase = int(run, "store_phase_ms");
    let _ = write!(
        p,
        r#"<section id="stores"><h2>Which store: the trade-off, measured</h2><p class="note">Each store the lab ran, measured on the servers this run started, after the variants (the same machine, the same load). The three speed columns come from this run; the fault columns from the last full run of the fault suite ({}), not from this run. Hover an answer for its scenario and counts.</p><div class="scroll"><table class="stores"><thead><tr><th scope="col">Store</th><th scope="col" class="n">Uncontended<br><span class="unit">p50 / p99 µs</span></th><th scope="col" class="n">Hand-off<br><span class="unit">p50 / p99 µs</span></th><th scope="col" class="n">64 locks<br><span class="unit">pairs/s</span></th>"#,
        esc(RECORD_FILES)
    );
    for (_, question) in QUESTIONS {
        let _ = write!(p, r#"<th scope="col">{}</th>"#, esc(question));
    }
    p.push_str("</tr></thead><tbody>");
    for row in rows {
        let id = text(row, "store");
        let name = crate::stores::KNOWN_STORES
            .iter()
            .find(|(k, _)| *k == id)
            .map_or(id, |(_, n)| n);
        let latency = |key: &str| match row.get(key).filter(|l| !l.is_null()) {
            Some(l) => format!(
                "{} / {}<span class=\"samples\">{} samples</span>",
                charts::num(float(l, "p50_us")),
                charts::num(float(l, "p99_us")),
                int(l, "samples")
            ),
            None => "–".into(),
        };
        let _ = write!(
            p,
            r#"<tr id="store-{0}" data-store="{0}"><th scope="row">{1}<span class="lock">{2}</span><span class="lock">on {3}</span>{7}</th><td class="n">{4}</td><td class="n">{5}</td><td class="n">{6}</td>"#,
            esc(id),
            esc(name),
            esc(text(row, "lock")),
            esc(&redis_words(run, text(row, "servers"))),
            latency("uncontended"),
            latency("handoff"),
            row.get("pairs_per_s_64")
                .and_then(Value::as_f64)
                .map_or("–".into(), charts::num),
            match int(row, "failed_calls") {
                0 => String::new(),
                n =>
                    format!(r#"<span class="failed">{n} calls failed (not in the samples)</span>"#),
            }
        );
        for (question, _) in QUESTIONS {
            let answers = record.answers(id, question);
            if answers.is_empty() {
                p.push_str(r#"<td class="fault-cell none">not in the fault suite</td>"#);
                continue;
            }
            p.push_str(r#"<td class="fault-cell"><ul>"#);
            for a in answers {
                let class = match a.ok {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "figure",
                };
                let _ = write!(
                    p,
                    r#"<li title="{}"><span class="answer {class}">{}</span><span>{}</span></li>"#,
                    esc(&a.detail),
                    esc(&a.short),
                    esc(&a.when)
                );
            }
            p.push_str("</ul></td>");
        }
        p.push_str("</tr>");
        if let Some(e) = row.get("error").and_then(Value::as_str) {
            let _ = write!(
                p,
                r#"<tr class="error"><td colspan="{}">The measurement of {} failed: {}</td></tr>"#,
                4 + QUESTIONS.len(),
                esc(name),
                esc(e)
            );
        }
    }
    if rows.is_empty() {
        let _ = write!(
            p,
            r#"<tr><td colspan="{}">This run measured no store.</td></tr>"#,
            4 + QUESTIONS.len()
        );
    }
    p.push_str("</tbody></table></div>");
    left_out(p, run);
    how_measured(p, phase);
}

/// The stores the run did not measure, grouped by why.
fn left_out(p: &mut String, run: &Value) {
    let left_out = list(run, "stores_left_out");
    if !left_out.is_empty() {
        p.push_str(
            r#"<p class="left-out" id="stores-left-out"><strong>Not in this run:</strong> "#,
        );
        // Stores left out for the same reason go together.
        let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
        for l in left_out {
            let id = text(l, "store");
            let name = crate::stores::KNOWN_STORES
                .iter()
                .find(|(k, _)| *k == id)
                .map_or(id, |(_, n)| n);
            match groups.iter_mut().find(|(why, _)| *why == text(l, "why")) {
                Some((_, names)) => names.push(name),
                None => groups.push((text(l, "why"), vec![name])),
            }
        }
        let items: Vec<String> = groups
            .iter()
            .map(|(why, names)| format!("{}: {}", esc(&and_list(names)), esc(why)))
            .collect();
        p.push_str(&items.join("; "));
        p.push_str(".</p>");
    }
}

/// How the store table's numbers were made, under it.
fn how_measured(p: &mut String, phase: i64) {
    let _ = write!(
        p,
        r"<details open><summary>How these were measured</summary><ul><li><strong>Uncontended</strong>: one client takes and releases a lock of its own, one pair at a time, for {phase} ms (at most 5,000 pairs); the time of each pair.</li><li><strong>Hand-off</strong>: two clients, each with its own connections, pass one lock back and forth for {phase} ms: the holder keeps it {} ms while the other asks for it and waits, then releases; a sample is the time from the start of the release to the waiter's grant. A waiter that polls (Redlock retries every 50–100 ms by default) hands off at its polling pace; one that is woken by the release (Lock, FairLock) hands off in about two round trips.</li><li><strong>64 locks at once</strong>: 64 tasks on one client, each taking and releasing its own lock in a loop for {phase} ms; all pairs over the elapsed time.</li><li>A call that returns an error (under load, a Redlock server can miss its per-node timeout of at most 100 ms) is counted under the store, not retried into a sample.</li><li><strong>The fault columns</strong> quote the fault suite's record (<code>ferrisson-chaos all</code>, 100 runs per scenario; docs/SAFETY.md explains every scenario): <em>held through a failover</em> is yes when no two clients believed they held the lock at once; <em>late write refused</em> is yes when every write of a holder that was paused or cut off, made after the next holder came in, was refused by the fencing token and none accepted; <em>next holder after a crash</em> is the longest time to the next grant.</li><li>Numbers from a loaded 2-core machine move from run to run; read them as orders of magnitude, and see BENCHMARKS.md for the careful measurements.</li></ul></details></section>",
        crate::stores::HANDOFF_HOLD.as_millis()
    );
}

fn vouchers(p: &mut String, run: &Value) {
    let rows = list(run, "vouchers");
    p.push_str(r#"<section id="vouchers"><h2>Voucher flash sale</h2>"#);
    if rows.is_empty() {
        p.push_str(r#"<p class="note">Not in this run (--no-vouchers).</p></section>"#);
        return;
    }
    p.push_str(r#"<p class="note">The shop's own order flow under the same load, with the database's unique order index turned off, so that only the flow's lock keeps one order per buyer: with the lock, without it, and with the Lua flow.</p><div class="scroll"><table><thead><tr><th scope="col">Order flow</th><th scope="col" class="n">Buyers</th><th scope="col" class="n">Requests</th><th scope="col" class="n">Orders / stock</th><th scope="col" class="n">Buyers with 2 orders</th><th scope="col" class="n">Stock left</th><th scope="col" class="n">Requests/s</th><th scope="col">Replies</th></tr></thead><tbody>"#);
    for v in rows {
        let replies: Vec<String> = v
            .get("replies")
            .and_then(Value::as_object)
            .map(|r| r.iter().map(|(k, n)| format!("{} {}", esc(k), n)).collect())
            .unwrap_or_default();
        let twice = int(v, "users_with_two_orders");
        let _ = write!(
            p,
            r#"<tr><th scope="row">{}</th><td class="n">{}</td><td class="n">{}</td><td class="n">{} / {}</td><td class="n{}">{}</td><td class="n">{}</td><td class="n">{}</td><td>{}</td></tr>"#,
            esc(text(v, "order_flow")),
            int(v, "users"),
            int(v, "requests"),
            int(v, "orders"),
            int(v, "stock"),
            if twice > 0 { " hot" } else { "" },
            twice,
            int(v, "stock_left"),
            charts::num(float(v, "throughput")),
            replies.join(", ")
        );
    }
    p.push_str("</tbody></table></div></section>");
}

fn settings(p: &mut String, run: &Value) {
    let machine = run.get("machine").cloned().unwrap_or(Value::Null);
    let load = |key: &str| {
        machine
            .get(key)
            .and_then(Value::as_array)
            .map_or("–".into(), |a| {
                a.iter()
                    .filter_map(Value::as_f64)
                    .map(|f| format!("{f:.2}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
    };
    let opt = |key: &str| {
        machine
            .get(key)
            .and_then(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .unwrap_or_else(|| "–".into())
    };
    let settings: Vec<(&str, String)> = vec![
        ("Redis", redis_words(run, text(run, "redis"))),
        ("Database", text(run, "database").to_owned()),
        ("seckill serve processes", int(run, "instances").to_string()),
        (
            "Clients × requests each",
            format!("{} × {}", int(run, "clients"), int(run, "loops")),
        ),
        ("Stock per variant", int(run, "stock").to_string()),
        (
            "Fault injected into holder",
            format!("#{} (0: none)", int(run, "fault_at")),
        ),
        (
            "Lease of the hand-made locks",
            format!("{} ms", int(run, "lease_ms")),
        ),
        (
            "Lock wait before giving up",
            format!("{} ms", int(run, "lock_wait_ms")),
        ),
        (
            "Watchdog lease / stall",
            format!(
                "{} ms / {} ms every {} units",
                int(run, "watchdog_lease_ms"),
                int(run, "stall_ms"),
                int(run, "stall_every")
            ),
        ),
        (
            "Store measurement",
            format!("{} ms per phase", int(run, "store_phase_ms")),
        ),
        ("Finished", when(text(run, "finished_at"))),
    ];
    let machine_rows: Vec<(&str, String)> = vec![
        ("System", opt("os")),
        ("Processor", opt("cpu")),
        ("Cores", opt("cores")),
        ("Memory, GiB", opt("memory_gib")),
        ("Load average before (1, 5, 15 min)", load("load_before")),
        ("Load average after", load("load_after")),
        ("redis-server", opt("redis_server")),
        ("Build", opt("build")),
        ("Lab version", opt("lab_version")),
        ("Commit", opt("commit")),
    ];
    p.push_str(r#"<section id="settings"><h2>Settings and machine</h2><div class="two">"#);
    for (caption, rows) in [
        ("This run's settings", &settings),
        ("The machine", &machine_rows),
    ] {
        let _ = write!(
            p,
            r#"<table class="kv"><caption>{caption}</caption><tbody>"#
        );
        for (k, v) in rows {
            let _ = write!(
                p,
                r#"<tr><th scope="row">{}</th><td>{}</td></tr>"#,
                esc(k),
                esc(v)
            );
        }
        p.push_str("</tbody></table>");
    }
    p.push_str("</div></section>");
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{counter_lines, esc, render};

    #[test]
    fn escapes_what_html_would_read() {
        assert_eq!(
            esc(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    /// A counter the page has no words for is still shown, under its own name.
    #[test]
    fn new_counters_show_under_their_own_name() {
        let row = json!({
            "variant": "fenced", "oversold": 0, "gave_up": 3,
            "stale_reads": 2, "late_writes_refused": 1, "requests": 40, "throughput": 5.5
        });
        let lines = counter_lines(&row);
        assert!(
            lines.iter().any(|l| l.starts_with("3 requests gave up")),
            "{lines:?}"
        );
        assert!(lines.contains(&"stale reads: 2".to_owned()), "{lines:?}");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("1 late writes refused") && l.contains("not oversold")),
            "a refused late write is worded apart from oversold: {lines:?}"
        );
        assert_eq!(lines.len(), 3, "{lines:?}");
    }

    #[test]
    fn the_page_is_one_file_without_scripts() {
        let run = json!({
            "topology": "single", "clients": 2, "loops": 1, "stock": 1,
            "variants": [{ "variant": "naive", "verdict": "oversold", "expected": "oversold",
                "faults": ["request #3 did <b>"], "ttl_samples": [], "lock_left": null }],
            "stores": [], "stores_left_out": [{ "store": "etcd", "why": "not yet" }],
            "vouchers": []
        });
        let page = render(&run);
        assert!(page.contains(r#"id="row-naive""#));
        assert!(
            page.contains("Late write refused"),
            "the results table's column"
        );
        assert!(page.contains("request #3 did &lt;b&gt;"), "escaped");
        assert!(page.contains("etcd: not yet"));
        for remote in ["http://", "https://", "<script src", "<link"] {
            assert!(!page.contains(remote), "{remote}");
        }
    }
}

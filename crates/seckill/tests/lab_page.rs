//! The lab's report page in a real browser: a small lab run (every variant, the store
//! measurement) writes `report.html`, and headless Chromium opens it from disk and
//! shows every variant's verdict, the charts and the store table, with no console error.
//! (It lives with the service's tests because the lab needs the `seckill` binary.)
//!
//! The page and a full-page screenshot are kept under `target/tmp/lab-page/`.

use std::path::PathBuf;
use std::time::Duration;

use browser_check::Chromium;
use seckill::oversell::{LabConfig, Variant};
use seckill_lab::LabOptions;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Shown {
    text: String,
    visible: bool,
}

/// What a selector's first match shows: its text and whether it takes up space on the
/// page (not hidden, not zero-sized).
fn shown(selector: &str) -> String {
    format!(
        "(() => {{ const e = document.querySelector({selector:?}); if (!e) return {{ text: '', visible: false }}; \
         const box = e.getBoundingClientRect(); const style = getComputedStyle(e); \
         return {{ text: e.textContent.trim(), visible: box.width > 0 && box.height > 0 && style.visibility !== 'hidden' && style.display !== 'none' }}; }})()"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_page_shows_every_verdict_and_the_store_table() {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lab-page");
    let _ = std::fs::remove_dir_all(&out);
    let options = LabOptions {
        // The service's variants; the lab's own are tested in crates/seckill-lab.
        variants: Variant::ALL.into_iter().map(Into::into).collect(),
        clients: 20,
        loops: 2,
        stock: 20,
        instances: 2,
        lab: LabConfig {
            fault_at: 5,
            lease: Duration::from_millis(300),
            lock_wait: Duration::from_millis(1500),
            stall: Duration::from_millis(700),
            stall_every: 10,
            ..LabConfig::default()
        },
        progress: false,
        watchdog_lease: Duration::from_millis(600),
        vouchers: false,
        store_time: Duration::from_millis(300),
        out: out.clone(),
        ..LabOptions::new(env!("CARGO_BIN_EXE_seckill").into())
    };
    let report = seckill_lab::run(&options).await.expect("lab runs");
    println!("{}", report.table());
    // Every store the lab knows, on a machine that has them all (as CI installs them):
    // the Redis lock, fair lock and Redlock, both databases' lock tables, ZooKeeper, etcd.
    let measured: Vec<&str> = report.stores.iter().map(|s| s.store.as_str()).collect();
    assert_eq!(
        measured.len(),
        seckill_lab::KNOWN_STORES.len(),
        "{measured:?}; left out: {:?}",
        report.stores_left_out
    );
    for store in &report.stores {
        assert!(store.error.is_none(), "{}: {:?}", store.store, store.error);
    }

    let browser = Chromium::launch().await.expect("chromium starts");
    let page = browser
        .open(&out.join("report.html"))
        .await
        .expect("the page opens");

    for row in &report.variants {
        let name = row.variant.as_str();
        for selector in [
            format!("#row-{name} td.verdict .badge"),
            format!("#variant-{name} .verdict-line .badge"),
        ] {
            let seen: Shown = page.eval(&shown(&selector)).await.expect("eval");
            assert_eq!(seen.text, row.verdict.to_string(), "{selector}");
            assert!(seen.visible, "{selector} is not visible");
        }
    }
    for store in &report.stores {
        let selector = format!("#store-{} td.n", store.store);
        let seen: Shown = page.eval(&shown(&selector)).await.expect("eval");
        assert!(
            seen.visible && seen.text.contains('/'),
            "{selector}: {seen:?}"
        );
    }
    // Nothing left out, so no such line.
    let left_out: bool = page
        .eval("document.querySelector('#stores-left-out') === null")
        .await
        .expect("eval");
    assert!(
        left_out,
        "a left-out line although every store was measured"
    );
    // The charts are drawn (three for the run, one for the watchdog's TTL), and the page
    // runs no script: the tables and charts need none.
    let charts: Vec<[f64; 2]> = page
        .eval("[...document.querySelectorAll('svg.chart')].map(s => { const b = s.getBoundingClientRect(); return [b.width, b.height]; })")
        .await
        .expect("eval");
    assert!(charts.len() >= 4, "{charts:?}");
    assert!(
        charts.iter().all(|[w, h]| *w > 300.0 && *h > 50.0),
        "{charts:?}"
    );
    let scripts: Vec<String> = page
        .eval("[...document.scripts].map(s => s.type)")
        .await
        .expect("eval");
    assert_eq!(scripts, ["application/json"], "only the run's data block");

    let shot = out.join("report.png");
    page.screenshot(&shot).await.expect("screenshot");
    // Parts at a readable size, to look at.
    for (selector, file) in [
        ("body > main > header", "report-header.png"),
        ("#results", "report-results.png"),
        ("#charts", "report-charts.png"),
        ("#variant-set-nx-ex", "report-set-nx-ex.png"),
        ("#variant-watchdog", "report-watchdog.png"),
        ("#stores", "report-stores.png"),
        ("#settings", "report-settings.png"),
    ] {
        page.screenshot_of(selector, &out.join(file))
            .await
            .expect(selector);
    }
    assert_eq!(page.problems(), Vec::<String>::new(), "console errors");
    browser.close().await;
    println!("screenshot: {}", shot.display());
}

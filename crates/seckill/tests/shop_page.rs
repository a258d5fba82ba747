//! The shop page in a real browser: `seckill serve` serves `/`, headless Chromium opens
//! it, and a shopper logs in by phone (after a number the service refuses), buys a
//! voucher, sees its stock go down and the order among their own, is refused a second
//! purchase with the service's message, and sees the voucher sold out once other buyers
//! (through the API) take the rest; the live view counts the orders and the refusal;
//! nothing is fetched from another origin and nothing goes to the console but the
//! browser's notes of the refused replies.
//!
//! Every wait reads the page until it shows what is expected, for at most [`WAIT`].
//! Screenshots go to `target/tmp/shop/`.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use browser_check::{Chromium, LoadedPage};
use common::{TestDb, call, cluster, create_voucher, http, instance_args, login};
use ferrisson_testkit::RedisServer;
use seckill::OrderFlow;

/// Longest wait for the page to show something (it refreshes every second).
const WAIT: Duration = Duration::from_secs(20);

/// A JavaScript string literal of `text`.
fn js(text: &str) -> String {
    serde_json::to_string(text).expect("a string")
}

/// The trimmed text of the first element `selector` matches, `null` when none does.
fn text_of(selector: &str) -> String {
    format!(
        "(document.querySelector({})?.textContent ?? null)?.trim()",
        js(selector)
    )
}

async fn text(page: &LoadedPage, selector: &str) -> Option<String> {
    page.eval(&text_of(selector)).await.expect("eval")
}

async fn wait(page: &LoadedPage, what: &str, condition: &str) {
    if let Err(e) = page.wait_until(condition, WAIT).await {
        let body: String = page
            .eval("document.body.innerText")
            .await
            .unwrap_or_default();
        panic!("{what}: {e}\nthe page shows:\n{body}");
    }
}

#[allow(clippy::too_many_lines)] // one shopper's story, step by step
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shopper_buys_once_is_refused_twice_and_sees_the_voucher_sell_out() {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("shop");
    let _ = std::fs::remove_dir_all(&out);
    let redis = RedisServer::start().expect("redis-server");
    let db = TestDb::sqlite();
    let cluster = cluster(1, &instance_args(&redis, &db.url, OrderFlow::Lock)).await;
    let base = &cluster.urls()[0];
    let http = http();

    let stock = 3;
    let voucher = create_voucher(&http, base, stock, -60, 3600).await;
    let upcoming = create_voucher(&http, base, 10, 3600, 7200).await;
    let card = format!("#voucher-{voucher}");
    let later = format!("#voucher-{upcoming}");

    let browser = Chromium::launch().await.expect("chromium starts");
    let page = browser
        .open_url(&format!("{base}/"))
        .await
        .expect("the page opens");

    // The vouchers, with their stock and window; nothing to buy before logging in.
    wait(
        &page,
        "the vouchers are listed",
        &format!(
            "{} === '{stock}' && {} === '10'",
            text_of(&format!("{card} .stock")),
            text_of(&format!("{later} .stock"))
        ),
    )
    .await;
    let state = text(&page, &format!("{card} .state")).await;
    assert!(
        state
            .as_deref()
            .is_some_and(|s| s.starts_with("On sale · ends in ")),
        "{state:?}"
    );
    let window = text(&page, &format!("{card} .window")).await;
    assert!(
        window.as_deref().is_some_and(|w| w.starts_with("Sale ")),
        "{window:?}"
    );
    let later_state = text(&page, &format!("{later} .state")).await;
    assert!(
        later_state
            .as_deref()
            .is_some_and(|s| s.starts_with("Starts in ")),
        "{later_state:?}"
    );
    let buttons: Vec<(String, bool)> = page
        .eval(&format!(
            "[{}, {}].map(s => document.querySelector(s)).map(b => [b.textContent, b.disabled])",
            js(&format!("{card} button.buy")),
            js(&format!("{later} button.buy"))
        ))
        .await
        .expect("eval");
    assert_eq!(
        buttons,
        [
            ("Log in to buy".to_owned(), true),
            ("Not started".to_owned(), true)
        ]
    );
    page.screenshot(&out.join("1-vouchers.png"))
        .await
        .expect("screenshot");

    // A number that is not a mobile number is refused with the service's message.
    page.type_into("#phone", "12345").await.expect("type");
    page.click("#login-button").await.expect("click");
    wait(
        &page,
        "the login refused",
        "document.getElementById('login-message').dataset.code === 'INVALID_PHONE'",
    )
    .await;
    assert_eq!(
        text(&page, "#login-message").await.as_deref(),
        Some("Not logged in: invalid phone number")
    );
    page.eval::<serde_json::Value>("document.getElementById('phone').value = ''")
        .await
        .expect("clear the field");

    // Log in by phone, as a person does: type, click.
    let phone = "13800000001";
    page.type_into("#phone", phone).await.expect("type");
    page.click("#login-button").await.expect("click");
    wait(
        &page,
        "logged in",
        &format!(
            "!document.getElementById('session').hidden && {} === {} && !document.querySelector({}).disabled",
            text_of("#session-phone"),
            js(phone),
            js(&format!("{card} button.buy"))
        ),
    )
    .await;
    let (user_id, token): (String, String) = page
        .eval("(s => [s.user_id, s.token])(JSON.parse(sessionStorage.getItem('seckill.session')))")
        .await
        .expect("the page's session");

    // Buy: the order is placed, the stock goes down, the order is among the buyer's.
    page.click(&format!("{card} button.buy"))
        .await
        .expect("click buy");
    wait(
        &page,
        "the purchase",
        &format!(
            "document.querySelector({})?.dataset.code === 'ORDERED' && {} === '{}' \
             && document.querySelectorAll('#my-orders tbody tr').length === 1 \
             && !document.querySelector({}).disabled",
            js(&format!("{card} .message")),
            text_of(&format!("{card} .stock")),
            stock - 1,
            js(&format!("{card} button.buy"))
        ),
    )
    .await;
    // The buyer's orders as the API gives them to the buyer.
    let (_, orders) = call(
        http.get(format!("{base}/vouchers/{voucher}/orders"))
            .bearer_auth(&token),
    )
    .await;
    let mine: Vec<String> = orders["orders"]
        .as_array()
        .expect("orders")
        .iter()
        .filter(|o| o["user_id"].as_str() == Some(user_id.as_str()))
        .map(|o| o["id"].as_str().expect("an order id").to_owned())
        .collect();
    assert_eq!(mine.len(), 1, "{orders}");
    let shown_order: String = page
        .eval("document.querySelector('#my-orders tbody tr').dataset.orderId")
        .await
        .expect("eval");
    assert_eq!(shown_order, mine[0]);
    let message = text(&page, &format!("{card} .message")).await;
    assert_eq!(
        message.as_deref(),
        Some(format!("Ordered. Order {}.", mine[0]).as_str())
    );
    assert_eq!(
        text(&page, &format!("{card} .owned")).await.as_deref(),
        Some("✓ In your orders")
    );
    page.screenshot(&out.join("2-bought.png"))
        .await
        .expect("screenshot");

    // A second purchase by the same buyer: refused, with the service's message.
    page.click(&format!("{card} button.buy"))
        .await
        .expect("click buy again");
    wait(
        &page,
        "the second purchase refused",
        &format!(
            "document.querySelector({})?.dataset.code === 'ALREADY_ORDERED'",
            js(&format!("{card} .message"))
        ),
    )
    .await;
    let refused = text(&page, &format!("{card} .message")).await;
    assert_eq!(
        refused.as_deref(),
        Some("Not bought (Already ordered): this user already ordered this voucher")
    );
    assert_eq!(
        text(&page, &format!("{card} .stock")).await,
        Some((stock - 1).to_string())
    );
    page.screenshot(&out.join("3-refused.png"))
        .await
        .expect("screenshot");

    // Other buyers take the rest through the API; the page follows the stock down to
    // nothing and shows the voucher sold out.
    for n in 2..=stock {
        let token = login(&http, base, &format!("1380000000{n}")).await;
        let (status, body) = call(
            http.post(format!("{base}/vouchers/{voucher}/seckill"))
                .bearer_auth(&token),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        wait(
            &page,
            "the stock follows another buyer's order",
            &format!("{} === '{}'", text_of(&format!("{card} .stock")), stock - n),
        )
        .await;
    }
    wait(
        &page,
        "sold out",
        &format!(
            "document.querySelector({card})?.dataset.phase === 'sold-out' \
             && {} === 'Sold out' && document.querySelector({button}).disabled \
             && document.querySelector({button}).textContent === 'Sold out'",
            text_of(&format!("{card} .state")),
            card = js(&card),
            button = js(&format!("{card} button.buy")),
        ),
    )
    .await;
    // The others' orders are not the buyer's: still one.
    let rows: u64 = page
        .eval("document.querySelectorAll('#my-orders tbody tr').length")
        .await
        .expect("eval");
    assert_eq!(rows, 1);

    // The live view: every order this instance placed, the refusal by its reason, and
    // what is left on sale.
    wait(
        &page,
        "the live view",
        &format!(
            "{} === '{stock}' && {} === '1' && {} === '0'",
            text_of("#live-ordered"),
            text_of("#live-refusals tr[data-code='ALREADY_ORDERED'] .count"),
            text_of("#live-stock"),
        ),
    )
    .await;
    let rate: Option<String> = text(&page, "#live-rate").await;
    assert!(
        rate.as_deref()
            .and_then(|r| r.parse::<f64>().ok())
            .is_some_and(|r| r >= 0.0),
        "{rate:?}"
    );
    page.screenshot(&out.join("4-sold-out.png"))
        .await
        .expect("screenshot");
    page.screenshot_of("#live", &out.join("live.png"))
        .await
        .expect("screenshot of the live view");

    // The page loaded and fetched from its own origin only.
    let resources: Vec<String> = page
        .eval("performance.getEntriesByType('resource').map(e => e.name)")
        .await
        .expect("eval");
    assert!(!resources.is_empty());
    let foreign: Vec<&String> = resources
        .iter()
        .filter(|r| !r.starts_with(&format!("{base}/")))
        .collect();
    assert!(foreign.is_empty(), "{foreign:?}");

    // Nothing on the console but the browser's notes of the two refusals' replies.
    let refusals = [
        format!("status of 400 (Bad Request) ({base}/users/login)"),
        format!("status of 409 (Conflict) ({base}/vouchers/{voucher}/seckill)"),
    ];
    let problems: Vec<String> = page.problems();
    println!("browser log: {problems:#?}");
    let (notes, problems): (Vec<String>, Vec<String>) = problems.into_iter().partition(|p| {
        p.starts_with("log (Network)") && refusals.iter().any(|r| p.ends_with(r.as_str()))
    });
    assert!(
        notes.len() <= 2,
        "one login, one purchase refused: {notes:#?}"
    );
    assert_eq!(problems, Vec::<String>::new(), "console errors");
    browser.close().await;
    println!("screenshots: {}", out.display());
}

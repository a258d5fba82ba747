//! The harness driving a served page as a person does: a page on a loopback port (a
//! one-page HTTP server in the test), typed into and clicked, waited on until it shows
//! the answer it computes later; a wait that never comes true ends in time with its
//! condition named; addresses and selectors that cannot work are refused.

use std::time::{Duration, Instant};

use browser_check::{Chromium, Error};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Echoes the typed name a little after the click, as a reply from a server would.
const PAGE: &str = "<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>form</title>\
    <link rel=icon href=\"data:,\"></head><body>\
    <input id=name><button id=go type=button>Go</button><p id=out></p>\
    <script>document.getElementById('go').addEventListener('click', () => \
    setTimeout(() => { document.getElementById('out').textContent = \
    'hello ' + document.getElementById('name').value; }, 200));</script></body></html>";

/// Serves `PAGE` to every connection on a free loopback port; returns its URL.
async fn serve() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request).await;
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{PAGE}",
                    PAGE.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    format!("http://{addr}/")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn types_clicks_and_waits_on_a_served_page() {
    let url = serve().await;
    let browser = Chromium::launch().await.expect("chromium starts");
    assert!(matches!(
        browser.open_url("file:///etc/hostname").await,
        Err(Error::BadUrl(_))
    ));
    let page = browser.open_url(&url).await.expect("opens");

    page.type_into("#name", "Ferris").await.expect("type");
    page.click("#go").await.expect("click");
    page.wait_until(
        "document.getElementById('out').textContent === 'hello Ferris'",
        Duration::from_secs(10),
    )
    .await
    .expect("the answer shows");

    let started = Instant::now();
    let never = page
        .wait_until("document.title === 'never'", Duration::from_millis(300))
        .await;
    assert!(
        matches!(&never, Err(Error::Timeout { expression, .. }) if expression == "document.title === 'never'"),
        "{never:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(300));

    assert!(matches!(
        page.click("#missing").await,
        Err(Error::NoMatch(s)) if s == "#missing"
    ));
    assert_eq!(page.problems(), Vec::<String>::new());
    browser.close().await;
}

//! The harness against a real headless Chromium: a clean page reports nothing; a page
//! that logs an error, throws, and links a file that is not there reports all three.

use browser_check::Chromium;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_console_errors_exceptions_and_failed_loads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clean = dir.path().join("clean.html");
    std::fs::write(
        &clean,
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>ok</title></head>\
         <body><p id=p>fine</p></body></html>",
    )
    .expect("write");
    let broken = dir.path().join("broken page.html");
    std::fs::write(
        &broken,
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>bad</title></head>\
         <body><img src=missing.png alt=x><script>console.error('seen by the check');\
         undefinedFunction();</script></body></html>",
    )
    .expect("write");

    let browser = Chromium::launch().await.expect("chromium starts");
    let page = browser.open(&clean).await.expect("opens");
    assert_eq!(page.problems(), Vec::<String>::new());
    let text: String = page
        .eval("document.getElementById('p').textContent")
        .await
        .expect("eval");
    assert_eq!(text, "fine");
    let shot = dir.path().join("shots/clean.png");
    page.screenshot(&shot).await.expect("screenshot");
    let png = std::fs::read(&shot).expect("read");
    assert_eq!(&png[1..4], b"PNG");
    let part = dir.path().join("shots/p.png");
    page.screenshot_of("#p", &part)
        .await
        .expect("screenshot of #p");
    assert_eq!(&std::fs::read(&part).expect("read")[1..4], b"PNG");
    assert!(
        page.screenshot_of("#none", &part).await.is_err(),
        "nothing matches"
    );

    let page = browser.open(&broken).await.expect("opens");
    let problems = page.problems();
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("console.error") && p.contains("seen by the check")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("uncaught exception") && p.contains("undefinedFunction")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("log") && p.contains("missing.png")),
        "{problems:?}"
    );
    browser.close().await;
}

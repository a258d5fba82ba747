//! # browser-check
//!
//! A test harness that looks at a page the way a reader does: it starts Debian's
//! `chromium` headless (with a fresh profile, no sandbox, and nothing that reaches the
//! network on its own), opens a file or a page a test serves on loopback, and tells what
//! went wrong while the page loaded and ran — console errors, uncaught exceptions,
//! resources that failed to load — then lets a test read the page with JavaScript, type
//! and click as a person does, wait until the page shows something, and keep a
//! screenshot.
//!
//! It talks to Chromium over the DevTools protocol with [`chromiumoxide`]: no driver
//! process, and the console, exception and log events the check needs are plain
//! protocol events (WebDriver has no standard way to read the console).
//!
//! ```no_run
//! # async fn demo() -> Result<(), browser_check::Error> {
//! let browser = browser_check::Chromium::launch().await?;
//! let page = browser.open(std::path::Path::new("target/lab/report.html")).await?;
//! assert_eq!(page.problems(), Vec::<String>::new());
//! let rows: u64 = page.eval("document.querySelectorAll('table.results tbody tr').length").await?;
//! page.screenshot(std::path::Path::new("target/report.png")).await?;
//! browser.close().await;
//! # Ok(()) }
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chromiumoxide::Page;
use chromiumoxide::browser::{Browser, BrowserConfig};
use chromiumoxide::cdp::browser_protocol::log::{EventEntryAdded, LogEntryLevel};
use chromiumoxide::cdp::browser_protocol::page::{CaptureScreenshotFormat, Viewport};
use chromiumoxide::cdp::js_protocol::runtime::{
    ConsoleApiCalledType, EventConsoleApiCalled, EventExceptionThrown,
};
use chromiumoxide::page::ScreenshotParams;
use futures_util::StreamExt as _;
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

/// The flags Chromium runs with here: headless, no sandbox (it runs as root in CI), no
/// GPU, and none of the background requests (component updates, sync, field trials)
/// that would try to reach Google from a machine without a network.
pub const FLAGS: [&str; 7] = [
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
];

/// Window size of the browser, in CSS pixels: a laptop screen.
pub const WINDOW: (u32, u32) = (1280, 900);

/// How often [`LoadedPage::wait_until`] reads the page.
pub const POLL: Duration = Duration::from_millis(50);

/// What can go wrong in the harness itself.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No Chromium found.
    #[error(
        "no chromium to run: install Debian's package (`apt-get install chromium`, or source .ci/require-chromium) or set CHROMIUM to its path"
    )]
    NoChromium,
    /// The profile directory could not be made.
    #[error("cannot create a profile directory for chromium: {0}")]
    Profile(#[source] std::io::Error),
    /// A file path that cannot be a `file://` URL.
    #[error("cannot open {0}: give an existing file")]
    BadPath(PathBuf),
    /// The DevTools protocol reported an error.
    #[error("chromium: {0}")]
    Browser(#[from] chromiumoxide::error::CdpError),
    /// No element matches a selector.
    #[error("nothing on the page matches {0:?}: check the selector")]
    NoMatch(String),
    /// An address that is not an `http://` or `https://` URL.
    #[error("cannot open {0:?}: give an http:// or https:// URL")]
    BadUrl(String),
    /// The page did not come to show what a test waited for in time.
    #[error("the page did not come to satisfy `{expression}` within {waited:?}")]
    Timeout {
        /// The JavaScript condition waited for.
        expression: String,
        /// How long it was waited for.
        waited: Duration,
    },
    /// A value from the page did not have the type asked for.
    #[error("the page's value does not fit the type asked for: {0}")]
    Value(#[source] serde_json::Error),
    /// A screenshot could not be written.
    #[error("cannot write the screenshot {path}: {source}")]
    Screenshot {
        /// Where it was to go.
        path: PathBuf,
        /// Why not.
        #[source]
        source: std::io::Error,
    },
}

/// The Chromium program: `$CHROMIUM`, else `chromium` (Debian's package) or
/// `chromium-browser` on the `PATH`.
///
/// ```no_run
/// let chromium = browser_check::chromium_binary().expect("apt-get install chromium");
/// assert!(chromium.is_file());
/// ```
pub fn chromium_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// A headless Chromium with a profile of its own, deleted when it closes.
pub struct Chromium {
    browser: Browser,
    handler: JoinHandle<()>,
    _profile: tempfile::TempDir,
}

impl std::fmt::Debug for Chromium {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chromium").finish_non_exhaustive()
    }
}

impl Chromium {
    /// Starts Chromium headless with [`FLAGS`], a new empty profile and a window of
    /// [`WINDOW`].
    ///
    /// # Errors
    ///
    /// [`Error::NoChromium`] when there is none to run; [`Error::Browser`] when it does
    /// not start or its DevTools connection fails.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a launch dropped half-way may leave the browser process running
    /// until this process exits.
    pub async fn launch() -> Result<Self, Error> {
        let binary = chromium_binary().ok_or(Error::NoChromium)?;
        let profile = tempfile::Builder::new()
            .prefix("browser-check-")
            .tempdir()
            .map_err(Error::Profile)?;
        let config = BrowserConfig::builder()
            .chrome_executable(binary)
            // Headless (the builder's default) with only the flags above.
            .disable_default_args()
            .no_sandbox()
            .user_data_dir(profile.path())
            .window_size(WINDOW.0, WINDOW.1)
            // The page's own size, not an emulated 800x600.
            .viewport(None)
            .launch_timeout(Duration::from_secs(60))
            .args(FLAGS)
            .build()
            .map_err(|_| Error::NoChromium)?;
        let (browser, mut handler) = Browser::launch(config).await?;
        let handler = tokio::spawn(async move {
            while let Some(event) = handler.next().await {
                if event.is_err() {
                    break;
                }
            }
        });
        Ok(Self {
            browser,
            handler,
            _profile: profile,
        })
    }

    /// Opens `file` in a new tab and waits until it has loaded, recording every console
    /// error, uncaught exception and error-level log entry (a resource that failed to
    /// load, say) from the start.
    ///
    /// # Errors
    ///
    /// [`Error::BadPath`] for a file that does not exist; [`Error::Browser`] when the
    /// browser fails to open it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped call leaves at most an open tab.
    pub async fn open(&self, file: &Path) -> Result<LoadedPage, Error> {
        let absolute = std::fs::canonicalize(file).map_err(|_| Error::BadPath(file.into()))?;
        let url = file_url(&absolute).ok_or_else(|| Error::BadPath(file.into()))?;
        self.load(url).await
    }

    /// Opens the page at `url` (a page a test serves, such as a service on a loopback
    /// port) in a new tab and waits until it has loaded, recording problems from the
    /// start as [`open`](Self::open) does.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), browser_check::Error> {
    /// let browser = browser_check::Chromium::launch().await?;
    /// let page = browser.open_url("http://127.0.0.1:8080/").await?;
    /// page.wait_until("document.querySelectorAll('li').length > 0", std::time::Duration::from_secs(5)).await?;
    /// browser.close().await;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::BadUrl`] for anything but an `http://` or `https://` URL;
    /// [`Error::Browser`] when the browser fails to open it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped call leaves at most an open tab.
    pub async fn open_url(&self, url: &str) -> Result<LoadedPage, Error> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(Error::BadUrl(url.to_owned()));
        }
        self.load(url.to_owned()).await
    }

    async fn load(&self, url: String) -> Result<LoadedPage, Error> {
        let page = self.browser.new_page("about:blank").await?;
        let problems = Arc::new(Mutex::new(Vec::new()));
        // Listen before enabling the domains and loading, so nothing is missed.
        let mut console = page.event_listener::<EventConsoleApiCalled>().await?;
        let mut exceptions = page.event_listener::<EventExceptionThrown>().await?;
        let mut log = page.event_listener::<EventEntryAdded>().await?;
        let listeners = {
            let problems = Arc::clone(&problems);
            tokio::spawn(async move {
                loop {
                    let problem = tokio::select! {
                        Some(e) = console.next() => console_problem(&e),
                        Some(e) = exceptions.next() => Some(format!(
                            "uncaught exception: {}",
                            e.exception_details.exception.as_ref()
                                .and_then(|x| x.description.clone())
                                .unwrap_or_else(|| e.exception_details.text.clone())
                        )),
                        Some(e) = log.next() => (e.entry.level == LogEntryLevel::Error)
                            .then(|| format!(
                                "log ({:?}): {}{}",
                                e.entry.source,
                                e.entry.text,
                                e.entry.url.as_deref().map(|u| format!(" ({u})")).unwrap_or_default()
                            )),
                        else => break,
                    };
                    if let Some(problem) = problem {
                        problems
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push(problem);
                    }
                }
            })
        };
        page.enable_runtime().await?;
        page.enable_log().await?;
        page.goto(url).await?;
        page.wait_for_navigation().await?;
        let loaded = LoadedPage {
            page,
            problems,
            listeners,
        };
        // A round trip after the load: the events the page caused while loading come
        // before its reply on the connection.
        loaded
            .eval::<serde_json::Value>("document.readyState")
            .await?;
        Ok(loaded)
    }

    /// Closes the browser and waits for its process to end.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped call may leave the browser running until this process
    /// exits.
    pub async fn close(mut self) {
        let _ = self.browser.close().await;
        let _ = self.browser.wait().await;
        self.handler.abort();
    }
}

fn console_problem(e: &EventConsoleApiCalled) -> Option<String> {
    let kind = match e.r#type {
        ConsoleApiCalledType::Error => "console.error",
        ConsoleApiCalledType::Assert => "console.assert",
        ConsoleApiCalledType::Warning => "console.warn",
        _ => return None,
    };
    let args: Vec<String> = e
        .args
        .iter()
        .map(|a| {
            a.value
                .as_ref()
                .map(ToString::to_string)
                .or_else(|| a.description.clone())
                .unwrap_or_default()
        })
        .collect();
    Some(format!("{kind}: {}", args.join(" ")))
}

/// `file:///…` for an absolute path, its bytes percent-encoded where a URL needs it.
fn file_url(path: &Path) -> Option<String> {
    let text = path.to_str()?;
    let mut url = String::from("file://");
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            url.push(char::from(b));
        } else {
            let _ = write!(url, "%{b:02X}");
        }
    }
    Some(url)
}

/// A page [`Chromium::open`] loaded.
pub struct LoadedPage {
    page: Page,
    problems: Arc<Mutex<Vec<String>>>,
    listeners: JoinHandle<()>,
}

impl std::fmt::Debug for LoadedPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPage")
            .field("problems", &self.problems())
            .finish_non_exhaustive()
    }
}

impl Drop for LoadedPage {
    fn drop(&mut self) {
        self.listeners.abort();
    }
}

impl LoadedPage {
    /// What went wrong so far: console errors and warnings, uncaught exceptions, and
    /// error-level log entries, in the order they came. Empty for a clean page.
    pub fn problems(&self) -> Vec<String> {
        self.problems
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Evaluates `expression` in the page and returns its value as `T`.
    ///
    /// # Errors
    ///
    /// [`Error::Browser`] when the expression throws; [`Error::Value`] when its value
    /// is not a `T`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn eval<T: DeserializeOwned>(&self, expression: &str) -> Result<T, Error> {
        let value = self
            .page
            .evaluate(expression)
            .await?
            .value()
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        serde_json::from_value(value).map_err(Error::Value)
    }

    /// Waits until the JavaScript `expression` is truthy on the page, reading it every
    /// [`POLL`] for at most `timeout`: for what a page shows after its own requests
    /// answer, which no load event marks.
    ///
    /// ```no_run
    /// # async fn demo(page: &browser_check::LoadedPage) -> Result<(), browser_check::Error> {
    /// page.wait_until("document.querySelector('#stock').textContent === '2'", std::time::Duration::from_secs(5)).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when it is still falsy after `timeout`; [`Error::Browser`]
    /// when the expression throws.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn wait_until(&self, expression: &str, timeout: Duration) -> Result<(), Error> {
        let started = tokio::time::Instant::now();
        let truthy = format!("Boolean({expression})");
        loop {
            if self.eval::<bool>(&truthy).await? {
                return Ok(());
            }
            if started.elapsed() >= timeout {
                return Err(Error::Timeout {
                    expression: expression.to_owned(),
                    waited: timeout,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Clicks the first element `selector` matches as a person does: scrolled into
    /// view, with the mouse, at its centre (so a disabled or covered button does not
    /// take the click).
    ///
    /// ```no_run
    /// # async fn demo(page: &browser_check::LoadedPage) -> Result<(), browser_check::Error> {
    /// page.click("#login-button").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NoMatch`] when nothing matches; [`Error::Browser`] when the browser
    /// cannot click it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe; a dropped call may or may not have clicked.
    pub async fn click(&self, selector: &str) -> Result<(), Error> {
        let element = self.element(selector).await?;
        element.click().await?;
        Ok(())
    }

    /// Clicks the first element `selector` matches and types `text` into it, key by
    /// key.
    ///
    /// ```no_run
    /// # async fn demo(page: &browser_check::LoadedPage) -> Result<(), browser_check::Error> {
    /// page.type_into("#phone", "13800138000").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NoMatch`] when nothing matches; [`Error::Browser`] when the browser
    /// cannot click or type.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe; a dropped call may have typed part of `text`.
    pub async fn type_into(&self, selector: &str, text: &str) -> Result<(), Error> {
        let element = self.element(selector).await?;
        element.click().await?;
        element.type_str(text).await?;
        Ok(())
    }

    /// The first element `selector` matches.
    async fn element(&self, selector: &str) -> Result<chromiumoxide::Element, Error> {
        let selector_json = serde_json::to_string(selector).map_err(Error::Value)?;
        let found: bool = self
            .eval(&format!("document.querySelector({selector_json}) !== null"))
            .await?;
        if !found {
            return Err(Error::NoMatch(selector.to_owned()));
        }
        Ok(self.page.find_element(selector).await?)
    }

    /// Saves a PNG of the whole page (not only the window) to `path`, making its
    /// directory.
    ///
    /// # Errors
    ///
    /// [`Error::Screenshot`] when the file cannot be written; [`Error::Browser`] when
    /// the browser cannot take it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe; a dropped call may leave a partly written file.
    pub async fn screenshot(&self, path: &Path) -> Result<(), Error> {
        let png = self
            .page
            .screenshot(
                ScreenshotParams::builder()
                    .format(CaptureScreenshotFormat::Png)
                    .full_page(true)
                    .build(),
            )
            .await?;
        write_png(path, &png)
    }

    /// Saves a PNG of the first element `selector` matches to `path`, making its
    /// directory: a part of a long page at a readable size.
    ///
    /// # Errors
    ///
    /// [`Error::NoMatch`] when nothing matches; [`Error::Browser`] when the browser
    /// cannot take it; [`Error::Screenshot`] when the file cannot be written.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe; a dropped call may leave a partly written file.
    pub async fn screenshot_of(&self, selector: &str, path: &Path) -> Result<(), Error> {
        // The element's box on the page (not the window), to clip a capture that reaches
        // beyond the window. (chromiumoxide's own element screenshot adds the scroll
        // offset twice.)
        let selector_json = serde_json::to_string(selector).map_err(Error::Value)?;
        let rect: Option<[f64; 4]> = self
            .eval(&format!(
                "(() => {{ const e = document.querySelector({selector_json}); if (!e) return null; \
                 const r = e.getBoundingClientRect(); \
                 return [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height]; }})()"
            ))
            .await?;
        let [x, y, width, height] = rect.ok_or_else(|| Error::NoMatch(selector.to_owned()))?;
        let png = self
            .page
            .screenshot(
                ScreenshotParams::builder()
                    .format(CaptureScreenshotFormat::Png)
                    .clip(Viewport {
                        x,
                        y,
                        width,
                        height,
                        scale: 1.0,
                    })
                    .capture_beyond_viewport(true)
                    .build(),
            )
            .await?;
        write_png(path, &png)
    }
}

fn write_png(path: &Path, png: &[u8]) -> Result<(), Error> {
    let write = || -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, png)
    };
    write().map_err(|source| Error::Screenshot {
        path: path.into(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::file_url;

    #[test]
    fn file_urls_are_encoded() {
        assert_eq!(
            file_url(Path::new("/tmp/a b/report.html")).as_deref(),
            Some("file:///tmp/a%20b/report.html")
        );
    }
}

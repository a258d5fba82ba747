//! The load generator: N clients started together (no ramp-up), each taking the next
//! request of a fixed list until none is left, round-robin across instances.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// One request's outcome.
#[derive(Debug, Clone)]
pub struct Sample {
    /// HTTP status; `None` when the request failed before a reply.
    pub status: Option<u16>,
    /// The reply body parsed as JSON (`Null` if it was not JSON).
    pub body: serde_json::Value,
    /// Time from send to the whole reply.
    pub latency: Duration,
}

/// What a load run measured.
#[derive(Debug, Clone)]
pub struct LoadResult {
    /// Outcomes, in request order.
    pub samples: Vec<Sample>,
    /// Wall time from the first request to the last reply.
    pub elapsed: Duration,
}

impl LoadResult {
    /// Requests per second.
    pub fn throughput(&self) -> f64 {
        self.samples.len() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The `q`-quantile of the latencies, in ms.
    pub fn latency_ms(&self, q: f64) -> f64 {
        let mut v: Vec<Duration> = self.samples.iter().map(|s| s.latency).collect();
        if v.is_empty() {
            return 0.0;
        }
        v.sort_unstable();
        let i = ((v.len() - 1) as f64 * q).round() as usize;
        v[i.min(v.len() - 1)].as_secs_f64() * 1e3
    }

    /// Requests without a 2xx reply.
    pub fn errors(&self) -> usize {
        self.samples
            .iter()
            .filter(|s| !s.status.is_some_and(|c| (200..300).contains(&c)))
            .count()
    }
}

/// Builds request `i`; the instance is picked by the caller (round-robin on `i`).
pub type MakeRequest =
    Arc<dyn Fn(&reqwest::Client, usize) -> reqwest::RequestBuilder + Send + Sync>;

/// Sends `total` requests with `clients` concurrent clients, all released at once.
/// `on_done` is called after every reply (progress).
pub async fn fire(
    http: &reqwest::Client,
    clients: usize,
    total: usize,
    make: MakeRequest,
    on_done: Arc<dyn Fn() + Send + Sync>,
) -> LoadResult {
    let next = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(tokio::sync::Barrier::new(clients.max(1) + 1));
    let mut tasks = Vec::with_capacity(clients);
    for _ in 0..clients.max(1) {
        let (http, next, start, make, on_done) = (
            http.clone(),
            Arc::clone(&next),
            Arc::clone(&start),
            Arc::clone(&make),
            Arc::clone(&on_done),
        );
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            start.wait().await;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return mine;
                }
                let sent = Instant::now();
                let (status, body) = match make(&http, i).send().await {
                    Ok(reply) => {
                        let status = reply.status().as_u16();
                        let body = reply.json::<serde_json::Value>().await.unwrap_or_default();
                        (Some(status), body)
                    }
                    Err(_) => (None, serde_json::Value::Null),
                };
                mine.push((
                    i,
                    Sample {
                        status,
                        body,
                        latency: sent.elapsed(),
                    },
                ));
                on_done();
            }
        }));
    }
    start.wait().await;
    let began = Instant::now();
    let mut all = Vec::with_capacity(total);
    for task in tasks {
        if let Ok(mine) = task.await {
            all.extend(mine);
        }
    }
    let elapsed = began.elapsed();
    all.sort_by_key(|(i, _)| *i);
    LoadResult {
        samples: all.into_iter().map(|(_, s)| s).collect(),
        elapsed,
    }
}

/// An HTTP client for `clients` concurrent clients (one kept-alive connection each)
/// that sends `admin_token` as `Authorization: Bearer` on every request that does not
/// carry a buyer's token of its own.
///
/// # Errors
///
/// When the TLS backend cannot be initialised, or the token cannot be a header value.
pub fn http_client(clients: usize, admin_token: Option<&str>) -> anyhow::Result<reqwest::Client> {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(token) = admin_token {
        let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| anyhow::anyhow!("the admin token cannot be sent in a header"))?;
        value.set_sensitive(true);
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(clients.max(1))
        .timeout(Duration::from_secs(120))
        .default_headers(headers)
        .build()?)
}

/// Round-robin over the instances by request index.
pub fn instance(urls: &[String], i: usize) -> &str {
    &urls[i % urls.len()]
}

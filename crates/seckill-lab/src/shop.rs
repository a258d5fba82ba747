//! The shop's own calls the lab and the benchmark share: open a voucher for sale, log
//! buyers in, buy.

use std::sync::Arc;

use anyhow::Context as _;

use crate::load::{LoadResult, MakeRequest, fire, instance};

/// Creates a voucher of `stock` on sale from a second ago for an hour, and returns its
/// id.
///
/// # Errors
///
/// When the request fails or the reply carries no id.
pub(crate) async fn open_voucher(
    http: &reqwest::Client,
    base: &str,
    title: &str,
    stock: i64,
) -> anyhow::Result<i64> {
    let now = chrono::Utc::now();
    let voucher: serde_json::Value = http
        .post(format!("{base}/vouchers"))
        .json(&serde_json::json!({
            "title": title,
            "stock": stock,
            "begin_time": (now - chrono::Duration::seconds(1)).to_rfc3339(),
            "end_time": (now + chrono::Duration::hours(1)).to_rfc3339(),
        }))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    voucher["id"]
        .as_str()
        .and_then(|id| id.parse().ok())
        .context("POST /vouchers returned no voucher id")
}

/// Logs in `users` buyers with the phones `first_phone`, `first_phone + 1`, ..., with
/// `clients` at once round-robin across `urls`; returns their tokens in phone order.
///
/// # Errors
///
/// When a login fails.
pub(crate) async fn log_in(
    http: &reqwest::Client,
    urls: &Arc<Vec<String>>,
    clients: usize,
    first_phone: u64,
    users: usize,
    on_done: Arc<dyn Fn() + Send + Sync>,
) -> anyhow::Result<Arc<Vec<String>>> {
    let make: MakeRequest = {
        let urls = Arc::clone(urls);
        Arc::new(move |http, i| {
            http.post(format!("{}/users/login", instance(&urls, i)))
                .json(&serde_json::json!({ "phone": (first_phone + i as u64).to_string() }))
        })
    };
    let logins = fire(http, clients, users, make, on_done).await;
    let tokens = logins
        .samples
        .iter()
        .map(|s| s.body["token"].as_str().map(str::to_owned))
        .collect::<Option<_>>()
        .context("a login failed")?;
    Ok(Arc::new(tokens))
}

/// `requests` orders of `voucher_id` with `clients` at once, round-robin across `urls`;
/// request `i` carries the token `tokens[i / per_buyer]`.
pub(crate) async fn buy(
    http: &reqwest::Client,
    urls: &Arc<Vec<String>>,
    clients: usize,
    voucher_id: i64,
    tokens: Arc<Vec<String>>,
    per_buyer: usize,
    on_done: Arc<dyn Fn() + Send + Sync>,
) -> LoadResult {
    let requests = tokens.len() * per_buyer;
    let make: MakeRequest = {
        let urls = Arc::clone(urls);
        Arc::new(move |http, i| {
            http.post(format!(
                "{}/vouchers/{voucher_id}/seckill",
                instance(&urls, i)
            ))
            .bearer_auth(&tokens[i / per_buyer])
        })
    };
    fire(http, clients, requests, make, on_done).await
}

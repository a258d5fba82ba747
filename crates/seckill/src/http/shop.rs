//! The shop page at `/`: the vouchers with their live stock and sale window, a phone
//! login, a buy button, the buyer's own orders, and a live view of a running sale.
//!
//! Three files built into the binary (`crates/seckill/shop/`): plain HTML, CSS and a
//! little JavaScript, no build step. The page only talks to the service that served it,
//! through the same routes as any client (`GET /vouchers`, `POST /users/login`, `POST
//! /vouchers/{id}/seckill`, `GET /vouchers/{id}/orders`, `GET /metrics`); its
//! Content-Security-Policy lets it load and fetch nothing from anywhere else.

use axum::Router;
use axum::http::HeaderValue;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::state::AppState;

/// The page.
const PAGE: &str = include_str!("../../shop/index.html");
/// Its style.
const STYLE: &str = include_str!("../../shop/shop.css");
/// Its script.
const SCRIPT: &str = include_str!("../../shop/shop.js");

/// Scripts, styles and requests from this origin only; no inline script, no frames,
/// no form posted anywhere (the page's one form is sent by its script).
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// The routes of the page and its two files, for [`router`](crate::http::router) to
/// merge.
///
/// ```
/// let shop: axum::Router<seckill::AppState> = seckill::http::shop::routes();
/// # drop(shop);
/// ```
pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", PAGE) }),
        )
        .route(
            "/shop.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
        .route(
            "/shop.js",
            get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
}

/// One of the page's files, revalidated on every load (`no-cache`: a new binary's page
/// shows at once).
fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY)),
            (X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
            (X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
            (REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
        ],
        body,
    )
        .into_response()
}

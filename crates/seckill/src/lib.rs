//! # seckill
//!
//! The flash-sale ("seckill") service on ferrisson locks, with the endpoints of the
//! oversell lab (which runs from the `seckill-lab` crate).
//!
//! - [`http`]: the axum routes. Users log in by phone number (tokens in Redis with a
//!   TTL); vouchers have stock and a sale window; `POST /vouchers/{id}/seckill` places
//!   an order ([`orders`]).
//! - [`orders`]: the order flows — window, stock, one order per user under the
//!   ferrisson [`Lock`](ferrisson::redis::Lock) `lock:order:{userId}` held until the commit,
//!   `UPDATE ... AND stock > 0`, an [`IdGenerator`](ferrisson::redis::IdGenerator) order id.
//! - [`db`]: SQLite by default (several processes may share one file), PostgreSQL or
//!   MySQL/MariaDB by URL.
//! - [`oversell`]: the lab's deductions, one [`oversell::Variant`] per fix.
//!
//! Errors are JSON `{"code": "...", "message": "..."}` with stable codes ([`error`]).

pub mod db;
pub mod error;
pub mod http;
pub mod logging;
pub mod orders;
pub mod oversell;
pub mod settings;
pub mod state;

pub use http::{router, serve};
pub use settings::{OrderFlow, ServeConfig};
pub use state::AppState;

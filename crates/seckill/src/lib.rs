//! # seckill
//!
//! The flash-sale ("seckill") service of the seeds, on ferrisson locks, and the oversell
//! lab that runs every fix the seeds try against the same load.
//!
//! - `seckill serve`: an axum service. Users log in by phone number (tokens in Redis with
//!   a TTL); vouchers have stock and a sale window; `POST /vouchers/{id}/seckill` runs
//!   the seed's order flow — window, stock, one order per user under the ferrisson
//!   [`Lock`](ferrisson::Lock) `lock:order:{userId}` held until the commit, `UPDATE ...
//!   AND stock > 0`, an [`IdGenerator`](ferrisson::IdGenerator) order id. SQLite by
//!   default (several processes may share one file), PostgreSQL or MySQL/MariaDB by URL.
//! - `/lab/*`: the oversell lab's endpoints, one [`oversell::Variant`] per fix.
//! - `seckill lab`: starts Redis servers and two or more `seckill serve` processes, fires
//!   the seed's load (200 clients, 4 loops) at every variant, checks the invariants in
//!   Redis and the database, and prints one table ([`runner`]).
//!
//! Errors are JSON `{"code": "...", "message": "..."}` with stable codes ([`error`]).

pub mod app;
pub mod auth;
pub mod db;
pub mod error;
pub mod oversell;
pub mod runner;
pub mod vouchers;

pub use app::{AppState, OrderFlow, ServeConfig, router, serve};
pub use oversell::{LabConfig, Variant, Verdict};

//! Metrics and spans, written once for every primitive: the metric names and labels
//! ([`metrics`]), what a primitive handle records under ([`probe`]), one acquire from
//! its first attempt to its outcome ([`acquire`]), and one hold from grant to release or
//! loss ([`hold`]).
//!
//! Metrics go through the `metrics` facade and spans through `tracing`: with no recorder
//! installed and no subscriber listening at debug level, both cost a few branches. The
//! names, labels and span fields are documented once, in docs/METRICS.md (the public
//! `ferrisson_redis::metrics` module shows it).

pub(crate) mod acquire;
pub(crate) mod hold;
pub mod metrics;
pub(crate) mod probe;

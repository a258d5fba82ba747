//! Metrics and spans, written once for every primitive: the metric names and labels
//! ([`metrics`]), what a primitive handle records under ([`probe`]), one acquire from
//! its first attempt to its outcome ([`acquire`]), and one hold from grant to release or
//! loss ([`hold`]).
//!
//! Metrics go through the `metrics` facade and spans through `tracing`: with no recorder
//! installed and no subscriber listening at debug level, both cost a few branches. The
//! names, labels and span fields are documented once, in the [`metrics`] module.
//!
//! A store records through these pieces and nothing else, so every store's metrics carry
//! the same names, with its name in the `store` label.

pub mod acquire;
pub mod hold;
pub mod metrics;
pub mod probe;

pub use acquire::{Decided, Grant, observe_acquire, observe_decision, observe_wait};
pub use hold::HoldMeter;
pub use metrics::{Instruments, Kind, Outcome};
pub use probe::{ClassFn, Classes, Probe};

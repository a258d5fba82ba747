//! What every scenario module shares, and nothing any one of them owns: the run's
//! [`config`], the [`scenario`] contract with its iteration loop, the
//! [`expectations`] every scenario starts from, the clients ([`clients`]), the
//! set-ups a scenario module can start once per run ([`setups`]), a held lock with
//! clients waiting for it across a topology fault ([`contest`]), the view of a hold
//! the recorder takes ([`hold`]), the recording steps ([`record`]) and the holder
//! that runs as a process of its own ([`holder_process`]), waiting for a state the
//! server announces to nobody ([`poll`]), and the steps of a Sentinel failover
//! ([`sentinel`]).
//!
//! Nothing here imports a scenario module; scenario modules import from here, and the
//! registry (`crate::scenarios`) imports them.

pub(crate) mod clients;
pub(crate) mod config;
pub(crate) mod contest;
pub(crate) mod etcd_members;
pub(crate) mod expectations;
pub(crate) mod hold;
pub(crate) mod holder_process;
pub(crate) mod poll;
pub(crate) mod record;
pub(crate) mod scenario;
pub(crate) mod sentinel;
pub(crate) mod setups;

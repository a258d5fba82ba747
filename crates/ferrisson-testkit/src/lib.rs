//! Test kit for ferrisson: starts real `redis-server` processes on free ports, each in a
//! private temporary directory, and kills them on drop.
//!
//! Every integration test of the project starts its own server(s) through this crate;
//! none touches the system Redis on port 6379.
//!
//! The binary is `redis-server` from `PATH`, or the path in the `FERRISSON_REDIS_SERVER`
//! environment variable.
//!
//! ```no_run
//! let server = ferrisson_testkit::RedisServer::start().expect("redis-server");
//! println!("test against {}", server.url());
//! server.pause().expect("SIGSTOP"); // the server stops answering
//! server.resume().expect("SIGCONT");
//! ```

mod clock;
mod memory;
mod proxy;
mod server;

pub use clock::ClockShift;
pub use memory::FullMemory;
pub use proxy::{Direction, FaultProxy, Faults, ProxyControl};
pub use server::{RedisServer, redis_server_binary};

//! Prometheus metrics of a running weir engine, served over HTTP: what
//! `weir --metrics ADDR:PORT` and weir's libpcap with `WEIR_METRICS=ADDR:PORT`
//! serve at `GET /metrics`.
//!
//! The contract:
//! - [`listen`] parses `ADDR:PORT` and binds it at once, so a bad address, a
//!   port in use or a refused privilege is an error before capture starts
//!   ([`ListenError::is_bad_input`] says which are the user's to fix).
//! - [`Listener::serve`] answers on threads of its own, at most
//!   [`MAX_CONNECTIONS`] connections at once, each closed after one request
//!   or [`IDLE_TIMEOUT`] without one. `:PORT` is loopback: the endpoint has no
//!   authentication, so every interface is served only when asked by address
//!   (`0.0.0.0:PORT`). Each scrape reads
//!   the engine through a [`Watch`](weir::engine::Watch) (or forward's
//!   [`LaneWatch`](weir::forward::LaneWatch)) at that moment: the counters its
//!   threads publish anyway, with no lock any of them takes and nothing the
//!   data path waits for. The one read that waits is the stream layers',
//!   which answer between runs of packets; the scrape waits for them, up to
//!   [`STREAMS_WAIT`].
//! - The body is the Prometheus text exposition format, version 0.0.4 (what
//!   Prometheus asks for by default and `promtool check metrics` checks),
//!   encoded by the `prometheus` crate: a `# HELP` and a `# TYPE` line per
//!   metric, counters named `..._total`, units in names (`_bytes`,
//!   `_seconds`), one time series per queue (`queue`, `source` labels).
//!   [`catalogue::ALL`] lists every metric weir can serve.
//! - The server keeps answering after the run has ended, until the process
//!   exits: a scrape then reads the final counts.

pub mod catalogue;
mod engine;
mod families;
mod listen;
mod process;
mod serve;

pub use engine::{EngineMetrics, ForwardMetrics};
pub use families::Families;
pub use listen::{listen, ListenError, Listener};
pub use serve::{render, IDLE_TIMEOUT, MAX_CONNECTIONS};

use std::time::Duration;

/// Longest a scrape waits for the stream layers to publish their counters.
pub const STREAMS_WAIT: Duration = Duration::from_millis(250);

/// Something whose metrics a scrape collects.
pub trait Scrape: Send + Sync + 'static {
    /// Add the metrics as they are now to `out`.
    fn collect(&self, out: &mut Families);
}

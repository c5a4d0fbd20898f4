//! Trace files: pcap and pcapng, read sequentially and split into queues.
//!
//! - [`format`]: the record parser, identical in what it accepts to libpcap.
//! - `trace`: the source and its capture unit.

pub mod format;
mod trace;

pub use trace::{open, TraceSource};

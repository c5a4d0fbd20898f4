//! Trace files: pcap and pcapng, read sequentially and split into queues.
//!
//! - [`format`]: the record parser, identical in what it accepts to libpcap.
//! - `input`: reading ahead into blocks on a thread of its own.
//! - `trace`: the source and its capture unit.

pub mod format;
mod input;
mod trace;

pub use input::ReadConfig;
pub use trace::{open, TraceSource};

//! Trace files: pcap and pcapng, read sequentially and split into queues.
//!
//! - [`crate::tracefile`] parses the records, accepting what libpcap accepts.
//! - `input`: reading ahead into blocks on a thread of its own.
//! - `trace`: the source and its capture unit.

mod input;
mod trace;

pub use input::ReadConfig;
pub(crate) use trace::open;

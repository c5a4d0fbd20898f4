//! Trace files: pcap and pcapng, read sequentially and split into queues.
//!
//! - [`crate::tracefile`] parses the records, accepting what libpcap accepts.
//! - `input`: the bytes of the trace, walked in place in a mapping of the file
//!   or read ahead into blocks on a thread of its own.
//! - `mapped`: mapping a regular file, and surviving its truncation.
//! - `prewalk`: a mapped file's records parsed ahead on a thread of their own.
//! - `trace`: the source and its capture unit.

mod input;
mod mapped;
mod prewalk;
mod trace;

pub use input::{ReadConfig, TraceAccess};
pub(crate) use trace::open;

//! The flow exporter: flow records (one direction of a connection over an
//! export interval, as the stream layer hands them out in flows mode) sent
//! as IPFIX (RFC 7011), NetFlow v9 (RFC 3954) or NetFlow v5 to collectors
//! over UDP, and written to IPFIX files (RFC 5655). `weir flows` runs it
//! alone; `weir sensor` beside other outputs.
//!
//! - [`encode`]: the records on the wire, one message at a time
//!   ([`Encoder`]).
//! - [`collector`]: one collector's connected socket and its pacing
//!   ([`Pacer`]), shared by every exporter thread sending to it.
//! - [`files`]: the IPFIX files, rotated as `weir record`'s ([`FlowFiles`]).
//! - [`export`]: the exporter thread, from a channel of records to the
//!   collectors and the files ([`Exporter`], [`Ready::run`]).
//! - [`layer`]: the stream layer that makes the records
//!   ([`FlowSettings::stream_config`]) and its streams made into records
//!   ([`FlowRecord::of`]).
//!
//! Contract: every record handed to an exporter is exported (a collector's
//! socket took its message or a file holds it), counted as one its format
//! cannot carry, or counted as lost: `records in = exported + not_carried +
//! lost` ([`ExportStats`]); and every one is shown once to the caller's
//! [`ExportHooks`] first. What it cannot export is never dropped silently.

pub mod collector;
pub mod encode;
pub mod export;
pub mod files;
pub mod layer;

pub use collector::{CollectorStats, Pacer, Pacing};
pub use encode::{Encoder, EncoderError, EndReason, FlowRecord, Format, ParseFormatError, Reverse};
pub use export::{ExportHooks, ExportStats, Exporter, OpenError, Ready};
pub use files::{FlowFiles, NextFile};
pub use layer::FlowSettings;

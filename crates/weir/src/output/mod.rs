//! Where records leave weir in the formats other tools read: today the
//! EVE-style JSON lines of [`eve`] (the event log Suricata writes, which
//! Elastic, Splunk and jq pipelines already parse).
//!
//! An output takes records the stream layer (or a command's own table) made
//! and writes them; it owns its buffering and counts what it wrote, so a
//! command reports records made = written + not written, by reason.

pub mod eve;

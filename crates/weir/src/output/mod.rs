//! Where records leave weir in the formats other tools read: the
//! EVE-style JSON lines of [`eve`] (the event log Suricata writes, which
//! Elastic, Splunk and jq pipelines already parse); the flow records of
//! [`flow`], exported as IPFIX, NetFlow v9 or v5 to collectors and written
//! to IPFIX files (what `weir flows` and the sensor's `[flows]` run); and
//! [`tee`], which hands one capture's packets to several consumers, each
//! behind its own filter (what `weir sensor` runs on every queue).
//!
//! An output takes records the stream layer (or a command's own table) made
//! and writes them; it owns its buffering and counts what it wrote, so a
//! command reports records made = written + not written, by reason.

pub mod eve;
pub mod flow;
pub mod tee;

//! The kinds of event weir makes, and how a flow record becomes a `flow`
//! event: what the events file ([`crate::events`]) and Kafka
//! ([`crate::kafka`]) both write, kept below both.

use weir::output::eve::FlowEvent;
use weir::output::flow::FlowRecord;

/// The kinds of event, in the order counts are kept.
pub const TYPES: [&str; 4] = ["flow", "stream", "alert", "stats"];

/// A flow record as an EVE `flow` event: the record's direction to the
/// server, with `--biflow` the reverse direction's counters to the client.
pub fn flow_event(r: &FlowRecord) -> FlowEvent {
    let rev = r.reverse.unwrap_or_default();
    FlowEvent {
        src: r.src,
        dst: r.dst,
        sport: r.sport,
        dport: r.dport,
        proto: r.proto,
        start_ns: r.start_ms * 1_000_000,
        end_ns: r.end_ms * 1_000_000,
        pkts_toserver: r.packets,
        bytes_toserver: r.octets,
        pkts_toclient: rev.packets,
        bytes_toclient: rev.octets,
        tcp_flags_ts: r.tcp_flags,
        tcp_flags_tc: rev.tcp_flags,
        reason: r.end.name(),
    }
}

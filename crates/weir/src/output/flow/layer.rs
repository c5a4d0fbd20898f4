//! The exporter's side of the stream layer: the settings of a layer that
//! makes flow records ([`FlowSettings::stream_config`]), and what it hands
//! out made into flow records ([`FlowRecord::of`], [`EndReason::of_close`],
//! [`FlowRecord::joined`]). `weir flows`, the sensor's `[flows]` and the
//! Python package's `weir.flows` all run the layer these settings make.
//!
//! Contract: the layer runs in flows mode at cutoff 0 (statistics only: no
//! payload is kept, so it needs no reassembly memory), every IP datagram is
//! in a flow, and both timeouts are packet time; a stream the layer hands out
//! becomes exactly one record, carrying its counts unchanged (times cut to
//! the millisecond).

use super::encode::{EndReason, FlowRecord, Reverse};
use crate::stream::{CloseReason, Mode, Stream, StreamConfig, PREALLOC_CONNECTIONS};
use std::time::Duration;

/// What a flow exporter sets of its stream layer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FlowSettings {
    /// A record of a flow still going after this long (packet time) is
    /// handed out; the flow goes on in a next record.
    pub active_timeout: Duration,
    /// A flow's records are handed out after this long without a packet of
    /// its connection (packet time).
    pub inactive_timeout: Duration,
    /// Most connections tracked at once, all queues together; past it the
    /// least recently seen is handed out early.
    pub max_flows: usize,
    /// Connections (all queues together) whose memory is made before the
    /// first packet (see [`StreamConfig::prealloc_connections`]).
    pub prealloc: usize,
}

impl FlowSettings {
    /// nfdump's exporter's (nfpcapd) timeouts, active 300 s and inactive
    /// 60 s (the active timeout matches nfcapd's default file rotation of 5
    /// minutes, so a long flow shows in every file it lasts through), with a
    /// million flows and the stream layer's preallocation.
    pub const DEFAULT: FlowSettings = FlowSettings {
        active_timeout: Duration::from_secs(300),
        inactive_timeout: Duration::from_secs(60),
        max_flows: 1_000_000,
        prealloc: PREALLOC_CONNECTIONS,
    };

    /// The stream layer's settings: flows mode at cutoff 0, no reassembly
    /// memory, these timeouts and limits; the rest
    /// [`StreamConfig::default`]'s (the caller sets what else it needs, as
    /// the kernel cutoff, with `..` on this).
    pub fn stream_config(&self) -> StreamConfig {
        StreamConfig {
            mode: Mode::Packets,
            cutoff: Some(0),
            flows: true,
            idle_timeout_ns: nanos(self.inactive_timeout),
            active_timeout_ns: Some(nanos(self.active_timeout)),
            max_connections: self.max_flows,
            prealloc_connections: self.prealloc,
            // No payload is kept: no reassembly memory is needed.
            memory: 0,
            ..StreamConfig::default()
        }
    }
}

impl Default for FlowSettings {
    fn default() -> FlowSettings {
        FlowSettings::DEFAULT
    }
}

/// `d` in ns, at most `u64::MAX` (585 years).
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl EndReason {
    /// Why the record of a stream that closed for `closed` is exported (a
    /// record handed out by the active timeout is [`EndReason::Active`]):
    /// FIN, RST and a SYN that reused the ports end the flow; `None` (no
    /// reason kept) counts as the end of input.
    pub fn of_close(closed: Option<CloseReason>) -> EndReason {
        match closed {
            Some(CloseReason::Fin | CloseReason::Rst | CloseReason::Reused) => EndReason::EndOfFlow,
            Some(CloseReason::Idle) => EndReason::Idle,
            Some(CloseReason::Evicted) => EndReason::LackOfResources,
            Some(CloseReason::EndOfInput) | None => EndReason::Forced,
        }
    }
}

impl FlowRecord {
    /// The record of the direction `s` the layer handed out, exported for
    /// `end`: its counts, its times in ms, its queue plus one as the ingress
    /// interface; no reverse direction.
    pub fn of(s: &Stream, end: EndReason) -> FlowRecord {
        FlowRecord {
            src: s.src,
            dst: s.dst,
            sport: s.sport,
            dport: s.dport,
            proto: s.proto,
            tcp_flags: s.tcp_flags,
            packets: s.packets,
            octets: s.octets,
            start_ms: s.first_ns / 1_000_000,
            end_ms: s.last_ns / 1_000_000,
            ingress: s.queue.0 as u32 + 1,
            end,
            reverse: None,
        }
    }

    /// A biflow record: this direction with `rev` as its reverse direction,
    /// over the time of both (see [`super::encode`] for why), ended for
    /// `end` (the end of the record that completed the pair: the later one
    /// handed out).
    pub fn joined(&self, rev: &FlowRecord, end: EndReason) -> FlowRecord {
        let reverse = Reverse { tcp_flags: rev.tcp_flags, packets: rev.packets, octets: rev.octets };
        FlowRecord { start_ms: self.start_ms.min(rev.start_ms), end_ms: self.end_ms.max(rev.end_ms), end, reverse: Some(reverse), ..*self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    #[test]
    fn a_biflow_is_the_initiator_forward_over_the_time_of_both() {
        let (client, server) = (IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)), IpAddr::V4(Ipv4Addr::new(198, 19, 0, 1)));
        let fwd = FlowRecord {
            src: client,
            dst: server,
            sport: 40000,
            dport: 443,
            proto: 6,
            tcp_flags: 0x02,
            packets: 3,
            octets: 300,
            start_ms: 200,
            end_ms: 210,
            ingress: 1,
            end: EndReason::Idle,
            reverse: None,
        };
        let rev = FlowRecord {
            src: server,
            dst: client,
            sport: 443,
            dport: 40000,
            tcp_flags: 0x12,
            packets: 5,
            octets: 500,
            start_ms: 100,
            end_ms: 205,
            ..fwd
        };
        let joined = fwd.joined(&rev, EndReason::EndOfFlow);
        let reverse = Reverse { tcp_flags: 0x12, packets: 5, octets: 500 };
        assert_eq!(joined, FlowRecord { start_ms: 100, end_ms: 210, end: EndReason::EndOfFlow, reverse: Some(reverse), ..fwd });
    }

    #[test]
    fn the_settings_are_flows_mode_at_cutoff_0_with_the_timeouts_in_ns() {
        let cfg = FlowSettings { active_timeout: Duration::from_secs(7), ..FlowSettings::DEFAULT }.stream_config();
        assert!(cfg.flows && cfg.mode == Mode::Packets && cfg.cutoff == Some(0) && cfg.memory == 0);
        assert_eq!((cfg.idle_timeout_ns, cfg.active_timeout_ns), (60_000_000_000, Some(7_000_000_000)));
        assert_eq!((cfg.max_connections, cfg.prealloc_connections), (1_000_000, PREALLOC_CONNECTIONS));
        assert!(cfg.check().is_ok());
        // Past u64's ns: the most, as the seconds' saturating product was.
        let far = FlowSettings { inactive_timeout: Duration::from_secs(u64::MAX), ..FlowSettings::DEFAULT }.stream_config();
        assert_eq!(far.idle_timeout_ns, u64::MAX);
    }

    #[test]
    fn fin_rst_and_reuse_end_the_flow_and_no_reason_is_the_end_of_input() {
        let cases = [
            (Some(CloseReason::Fin), EndReason::EndOfFlow),
            (Some(CloseReason::Rst), EndReason::EndOfFlow),
            (Some(CloseReason::Reused), EndReason::EndOfFlow),
            (Some(CloseReason::Idle), EndReason::Idle),
            (Some(CloseReason::Evicted), EndReason::LackOfResources),
            (Some(CloseReason::EndOfInput), EndReason::Forced),
            (None, EndReason::Forced),
        ];
        for (closed, end) in cases {
            assert_eq!(EndReason::of_close(closed), end, "{closed:?}");
        }
    }
}

//! EVE-style JSON lines: one object per event, in the shape of Suricata's
//! EVE log, so tools that read Suricata's read weir's. The schema is
//! `schema/eve.schema.json` in the repository; the tests validate the
//! output against it.
//!
//! Every event opens with `timestamp` (ISO 8601, microseconds, `+0000`),
//! `flow_id`, `event_type`, the endpoints (`src_ip`, `src_port`, `dest_ip`,
//! `dest_port`; for ICMP and ICMPv6 `icmp_type` and `icmp_code` instead of
//! ports, for other protocols neither), `proto` (Suricata's names: `TCP`,
//! `UDP`, `SCTP`, `ICMP`, `IPv6-ICMP`, else the number), and
//! `community_id` (Community ID v1, seed 0), then an object named after its
//! type. `flow_id` is the Community ID's first 63 bits as a number: the same
//! for every record of one flow, from either direction and any sensor.
//!
//! Written by hand into one reused buffer, numbers with `itoa`, no
//! allocation per event, and out to the writer in blocks of
//! [`EveWriter::BLOCK`] bytes: a JSON library would build and free a
//! document per event, which costs more than the rest of a flow record's
//! path (the stream-layer issue measured about 8 µs a record). Every string
//! written is weir's own (addresses, names, base64), so none needs escaping.

use crate::stream::community_id::{CommunityId, L4};
use crate::stream::{Direction, Stream};
use std::io::{self, Write};
use std::net::IpAddr;

/// One flow record as an EVE `flow` event: the initiator's direction
/// (`toserver`) and, when known, the responder's (`toclient`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FlowEvent {
    /// The initiator's address and port (source of the toserver direction).
    pub src: IpAddr,
    /// The responder's.
    pub dst: IpAddr,
    /// Ports as the stream layer keys the flow: for ICMP and ICMPv6 in
    /// flows mode, source 0 and destination `type << 8 | code`.
    pub sport: u16,
    /// See `sport`.
    pub dport: u16,
    /// The IP protocol number.
    pub proto: u8,
    /// First and last packet of either direction, ns since the epoch.
    pub start_ns: u64,
    /// See `start_ns`.
    pub end_ns: u64,
    /// Packets and IP bytes from the initiator.
    pub pkts_toserver: u64,
    /// See `pkts_toserver`.
    pub bytes_toserver: u64,
    /// Packets and IP bytes from the responder (0 for a uniflow record).
    pub pkts_toclient: u64,
    /// See `pkts_toclient`.
    pub bytes_toclient: u64,
    /// TCP flags OR'ed, each direction.
    pub tcp_flags_ts: u8,
    /// See `tcp_flags_ts`.
    pub tcp_flags_tc: u8,
    /// Why the record was made (`idle`, `active`, `end-of-flow`,
    /// `end-of-input`, `evicted`).
    pub reason: &'static str,
}

/// Formats one event at a time into a caller's buffer, with no line end:
/// the events file ([`EveWriter`]) adds one per event and gathers them in
/// blocks; a message bus (the CLI's Kafka output) sends each event as one
/// message. Each method returns the event's Community ID digest (`None`
/// for `stats`, and for a key that lacks what the ID needs), which a bus
/// uses as the message key.
#[derive(Default)]
pub struct EveEncoder {
    ids: CommunityId,
}

impl EveEncoder {
    /// Appends one `flow` event to `b`.
    pub fn flow(&self, b: &mut Vec<u8>, e: &FlowEvent) -> Option<[u8; 20]> {
        let l4 = L4::of_key(e.proto, e.sport, e.dport, true);
        let digest = self.header(b, e.end_ns, "flow", e.src, e.dst, e.proto, l4);
        b.extend_from_slice(b",\"flow\":{\"pkts_toserver\":");
        number(b, e.pkts_toserver);
        b.extend_from_slice(b",\"pkts_toclient\":");
        number(b, e.pkts_toclient);
        b.extend_from_slice(b",\"bytes_toserver\":");
        number(b, e.bytes_toserver);
        b.extend_from_slice(b",\"bytes_toclient\":");
        number(b, e.bytes_toclient);
        b.extend_from_slice(b",\"start\":\"");
        timestamp(b, e.start_ns);
        b.extend_from_slice(b"\",\"end\":\"");
        timestamp(b, e.end_ns);
        b.extend_from_slice(b"\",\"age\":");
        number(b, e.end_ns.saturating_sub(e.start_ns) / 1_000_000_000);
        b.extend_from_slice(b",\"reason\":\"");
        b.extend_from_slice(e.reason.as_bytes());
        b.push(b'"');
        b.push(b'}');
        if e.proto == 6 {
            b.extend_from_slice(b",\"tcp\":{\"tcp_flags\":\"");
            hex(b, e.tcp_flags_ts | e.tcp_flags_tc);
            b.extend_from_slice(b"\",\"tcp_flags_ts\":\"");
            hex(b, e.tcp_flags_ts);
            b.extend_from_slice(b"\",\"tcp_flags_tc\":\"");
            hex(b, e.tcp_flags_tc);
            b.extend_from_slice(b"\"}");
        }
        b.push(b'}');
        digest
    }

    /// Appends one `stream` event: a stream (one direction of a connection)
    /// the stream layer closed, with what became of its bytes.
    pub fn stream(&self, b: &mut Vec<u8>, s: &Stream) -> Option<[u8; 20]> {
        // Streams mode keys ICMP by its addresses alone: no ports, no types.
        let l4 = L4::of_key(s.proto, s.sport, s.dport, false);
        let digest = self.header(b, s.last_ns, "stream", s.src, s.dst, s.proto, l4);
        b.extend_from_slice(b",\"stream\":{\"direction\":\"");
        b.extend_from_slice(direction(s.direction));
        b.extend_from_slice(b"\",\"start\":\"");
        timestamp(b, s.first_ns);
        b.extend_from_slice(b"\",\"end\":\"");
        timestamp(b, s.last_ns);
        b.push(b'"');
        for (name, v) in [
            (&b"pkts"[..], s.packets),
            (b"bytes", s.bytes),
            (b"delivered", s.delivered),
            (b"gap", s.gap),
            (b"duplicate", s.duplicate),
            (b"discarded", s.discarded),
            (b"dropped", s.dropped),
            (b"refused", s.refused),
        ] {
            b.extend_from_slice(b",\"");
            b.extend_from_slice(name);
            b.extend_from_slice(b"\":");
            number(b, v);
        }
        b.extend_from_slice(b",\"mode\":\"");
        b.extend_from_slice(s.mode.name().as_bytes());
        b.extend_from_slice(b"\",\"reason\":\"");
        b.extend_from_slice(s.closed.map_or("end-of-input", |c| c.name()).as_bytes());
        b.extend_from_slice(b"\"}}");
        digest
    }

    /// Appends one `alert` event: rule `rule` matched stream `s`'s data at
    /// stream offset `offset`.
    pub fn alert(&self, b: &mut Vec<u8>, s: &Stream, rule: u32, offset: u64) -> Option<[u8; 20]> {
        let l4 = L4::of_key(s.proto, s.sport, s.dport, false);
        let digest = self.header(b, s.last_ns, "alert", s.src, s.dst, s.proto, l4);
        b.extend_from_slice(b",\"alert\":{\"signature_id\":");
        number(b, u64::from(rule));
        b.extend_from_slice(b",\"direction\":\"");
        b.extend_from_slice(direction(s.direction));
        b.extend_from_slice(b"\",\"offset\":");
        number(b, offset);
        b.extend_from_slice(b",\"stream_start\":\"");
        timestamp(b, s.first_ns);
        b.extend_from_slice(b"\"}}");
        digest
    }

    /// Appends one `stats` event at `ts_ns`: `object` is the counters as
    /// one JSON object, written as it is (the caller makes it, once a period).
    pub fn stats(&self, b: &mut Vec<u8>, ts_ns: u64, object: &str) {
        b.extend_from_slice(b"{\"timestamp\":\"");
        timestamp(b, ts_ns);
        b.extend_from_slice(b"\",\"event_type\":\"stats\",\"stats\":");
        b.extend_from_slice(object.as_bytes());
        b.push(b'}');
    }

    /// The Community ID digest of a flow record's key (flows mode: ICMP
    /// keyed by type and code) or, `icmp_by_type` false, of a stream's.
    pub fn digest(&self, src: IpAddr, dst: IpAddr, proto: u8, sport: u16, dport: u16, icmp_by_type: bool) -> Option<[u8; 20]> {
        L4::of_key(proto, sport, dport, icmp_by_type).and_then(|l4| self.ids.digest(src, dst, proto, l4))
    }

    /// The opening every event with endpoints shares, up to and including
    /// `community_id`. `l4` `None`: the key lacks what the ID needs (ICMP
    /// keyed without its type): no ports, and a null ID.
    #[allow(clippy::too_many_arguments)]
    fn header(
        &self,
        b: &mut Vec<u8>,
        ts_ns: u64,
        event_type: &str,
        src: IpAddr,
        dst: IpAddr,
        proto: u8,
        l4: Option<L4>,
    ) -> Option<[u8; 20]> {
        let digest = l4.and_then(|l4| self.ids.digest(src, dst, proto, l4));
        let l4 = l4.unwrap_or(L4::None);
        b.extend_from_slice(b"{\"timestamp\":\"");
        timestamp(b, ts_ns);
        b.extend_from_slice(b"\",\"flow_id\":");
        number(b, digest.map_or(0, |d| flow_id(&d)));
        b.extend_from_slice(b",\"event_type\":\"");
        b.extend_from_slice(event_type.as_bytes());
        b.extend_from_slice(b"\",\"src_ip\":\"");
        address(b, src);
        b.push(b'"');
        if let L4::Ports(s, _) = l4 {
            b.extend_from_slice(b",\"src_port\":");
            number(b, u64::from(s));
        }
        b.extend_from_slice(b",\"dest_ip\":\"");
        address(b, dst);
        b.push(b'"');
        match l4 {
            L4::Ports(_, d) => {
                b.extend_from_slice(b",\"dest_port\":");
                number(b, u64::from(d));
            }
            L4::Icmp { kind, code } => {
                b.extend_from_slice(b",\"icmp_type\":");
                number(b, u64::from(kind));
                b.extend_from_slice(b",\"icmp_code\":");
                number(b, u64::from(code));
            }
            L4::None => {}
        }
        b.extend_from_slice(b",\"proto\":\"");
        match proto {
            6 => b.extend_from_slice(b"TCP"),
            17 => b.extend_from_slice(b"UDP"),
            132 => b.extend_from_slice(b"SCTP"),
            1 => b.extend_from_slice(b"ICMP"),
            58 => b.extend_from_slice(b"IPv6-ICMP"),
            p => number(b, u64::from(p)),
        }
        b.extend_from_slice(b"\",\"community_id\":");
        match digest {
            Some(d) => {
                b.push(b'"');
                CommunityId::render_into(&d, b);
                b.push(b'"');
            }
            None => b.extend_from_slice(b"null"),
        }
        digest
    }
}

/// `flow_id`: the Community ID digest's first 63 bits as a number.
pub fn flow_id(digest: &[u8; 20]) -> u64 {
    u64::from_be_bytes(digest[..8].try_into().expect("8 of 20 bytes")) >> 1
}

/// Writes events as JSON lines into `out`.
///
/// Events made = [`EveWriter::written`] (the writer took their bytes) +
/// [`EveWriter::pending`] (in the block, not yet handed over) +
/// [`EveWriter::unwritten`] (in a block the writer refused: a line cut
/// short by a full disk is not an event).
pub struct EveWriter<W: Write> {
    out: W,
    buf: Vec<u8>,
    enc: EveEncoder,
    written: u64,
    pending: u64,
    unwritten: u64,
}

impl<W: Write> EveWriter<W> {
    /// Bytes gathered before they go to the writer.
    pub const BLOCK: usize = 256 << 10;

    /// A writer into `out`.
    pub fn new(out: W) -> EveWriter<W> {
        EveWriter {
            out,
            buf: Vec::with_capacity(EveWriter::<W>::BLOCK + 4096),
            enc: EveEncoder::default(),
            written: 0,
            pending: 0,
            unwritten: 0,
        }
    }

    /// Events whose bytes the writer took.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Events in the block, not yet handed to the writer.
    pub fn pending(&self) -> u64 {
        self.pending
    }

    /// Events in blocks the writer failed to take.
    pub fn unwritten(&self) -> u64 {
        self.unwritten
    }

    /// Writes one `flow` event.
    pub fn flow(&mut self, e: &FlowEvent) -> io::Result<()> {
        self.enc.flow(&mut self.buf, e);
        self.end()
    }

    /// Writes one `stream` event (see [`EveEncoder::stream`]).
    pub fn stream(&mut self, s: &Stream) -> io::Result<()> {
        self.enc.stream(&mut self.buf, s);
        self.end()
    }

    /// Writes one `alert` event (see [`EveEncoder::alert`]).
    pub fn alert(&mut self, s: &Stream, rule: u32, offset: u64) -> io::Result<()> {
        self.enc.alert(&mut self.buf, s, rule, offset);
        self.end()
    }

    /// Writes one `stats` event (see [`EveEncoder::stats`]).
    pub fn stats(&mut self, ts_ns: u64, object: &str) -> io::Result<()> {
        self.enc.stats(&mut self.buf, ts_ns, object);
        self.end()
    }

    /// Ends the event's line and hands a full block over.
    fn end(&mut self) -> io::Result<()> {
        self.buf.push(b'\n');
        self.pending += 1;
        if self.buf.len() >= EveWriter::<W>::BLOCK {
            self.write_block()?;
        }
        Ok(())
    }

    fn write_block(&mut self) -> io::Result<()> {
        let r = self.out.write_all(&self.buf);
        // What could not be written is not kept to be written twice.
        self.buf.clear();
        let n = std::mem::take(&mut self.pending);
        match r {
            Ok(()) => self.written += n,
            Err(_) => self.unwritten += n,
        }
        r
    }

    /// Writes what waits in the block and flushes the writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.write_block()?;
        self.out.flush()
    }
}

fn direction(d: Direction) -> &'static [u8] {
    match d {
        Direction::Initiator => b"toserver",
        Direction::Responder => b"toclient",
    }
}

fn number(b: &mut Vec<u8>, n: u64) {
    b.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

fn hex(b: &mut Vec<u8>, v: u8) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    b.push(DIGITS[usize::from(v >> 4)]);
    b.push(DIGITS[usize::from(v & 15)]);
}

fn address(b: &mut Vec<u8>, a: IpAddr) {
    // Display for addresses formats into a stack buffer first: no allocation.
    let _ = write!(b, "{a}");
}

/// `YYYY-MM-DDTHH:MM:SS.uuuuuu+0000` of `ns` since the epoch (UTC).
fn timestamp(b: &mut Vec<u8>, ns: u64) {
    let secs = ns / 1_000_000_000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil(days);
    let two = |b: &mut Vec<u8>, v: u64| {
        b.push(b'0' + (v / 10) as u8);
        b.push(b'0' + (v % 10) as u8);
    };
    // Four digits from 1970 to 9999, as ISO 8601 writes years.
    number(b, y);
    b.push(b'-');
    two(b, m);
    b.push(b'-');
    two(b, d);
    b.push(b'T');
    two(b, rem / 3600);
    b.push(b':');
    two(b, rem % 3600 / 60);
    b.push(b':');
    two(b, rem % 60);
    b.push(b'.');
    let micros = ns % 1_000_000_000 / 1000;
    for div in [100_000, 10_000, 1000, 100, 10, 1] {
        b.push(b'0' + (micros / div % 10) as u8);
    }
    b.extend_from_slice(b"+0000");
}

/// Year, month (1-12) and day (1-31) of a day count since 1970-01-01, in
/// the proleptic Gregorian calendar: days are shifted to an era of 400
/// years that starts on 1 March, where every month's length but
/// February's is fixed and February comes last.
fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};
    use std::net::Ipv4Addr;

    #[test]
    fn timestamps_are_chronos_to_the_microsecond() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..20_000u64 {
            // Spread over 1970 to 2200, with the leap days and year ends.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let ns = if i < 1000 { i * 86_400_000_000_000 / 7 } else { state % 7_258_118_400_000_000_000 };
            let mut b = Vec::new();
            timestamp(&mut b, ns);
            let want = DateTime::<Utc>::from_timestamp_nanos(ns as i64).format("%Y-%m-%dT%H:%M:%S%.6f+0000").to_string();
            assert_eq!(String::from_utf8(b).unwrap(), want, "{ns}");
        }
    }

    fn event(proto: u8, sport: u16, dport: u16) -> String {
        let mut w = EveWriter::new(Vec::new());
        let e = FlowEvent {
            src: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)),
            dst: IpAddr::V4(Ipv4Addr::new(198, 19, 0, 2)),
            sport,
            dport,
            proto,
            start_ns: 1_500_000_000_123_456_789,
            end_ns: 1_500_000_061_000_000_000,
            pkts_toserver: 3,
            bytes_toserver: 300,
            pkts_toclient: 5,
            bytes_toclient: 5000,
            tcp_flags_ts: 0x1b,
            tcp_flags_tc: 0x13,
            reason: "end-of-flow",
        };
        w.flow(&e).unwrap();
        assert_eq!((w.pending(), w.written()), (1, 0));
        w.flush().unwrap();
        assert_eq!((w.pending(), w.written()), (0, 1));
        String::from_utf8(w.out).unwrap()
    }

    #[test]
    fn a_flow_event_is_one_json_object_on_a_line_in_eves_shape() {
        let line = event(6, 40000, 443);
        assert!(line.ends_with("}\n") && line.matches('\n').count() == 1, "{line}");
        let j: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(j["timestamp"], "2017-07-14T02:41:01.000000+0000");
        assert_eq!(j["event_type"], "flow");
        assert_eq!((j["src_port"].as_u64(), j["dest_port"].as_u64(), j["proto"].as_str()), (Some(40000), Some(443), Some("TCP")));
        let id = CommunityId::default().id(
            IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)),
            IpAddr::V4(Ipv4Addr::new(198, 19, 0, 2)),
            6,
            L4::Ports(40000, 443),
        );
        assert_eq!(j["community_id"].as_str(), id.as_deref());
        assert_eq!(j["flow"]["start"], "2017-07-14T02:40:00.123456+0000");
        assert_eq!((j["flow"]["age"].as_u64(), j["flow"]["bytes_toclient"].as_u64()), (Some(60), Some(5000)));
        assert_eq!((j["tcp"]["tcp_flags"].as_str(), j["tcp"]["tcp_flags_tc"].as_str()), (Some("1b"), Some("13")));
        assert!(j["flow_id"].as_u64().is_some_and(|n| n > 0 && n < 1 << 63), "{j}");
    }

    #[test]
    fn a_block_the_writer_refuses_is_counted_unwritten() {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let mut w = EveWriter::new(full);
        let e = FlowEvent {
            src: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)),
            dst: IpAddr::V4(Ipv4Addr::new(198, 19, 0, 2)),
            sport: 1,
            dport: 2,
            proto: 17,
            start_ns: 0,
            end_ns: 0,
            pkts_toserver: 1,
            bytes_toserver: 1,
            pkts_toclient: 0,
            bytes_toclient: 0,
            tcp_flags_ts: 0,
            tcp_flags_tc: 0,
            reason: "idle",
        };
        let mut made = 0u64;
        while w.flow(&e).is_ok() {
            made += 1;
        }
        made += 1;
        assert_eq!((w.written(), w.pending(), w.unwritten()), (0, 0, made));
    }

    #[test]
    fn icmp_has_its_type_and_code_and_other_protocols_no_ports() {
        let j: serde_json::Value = serde_json::from_str(&event(1, 0, 0x0800)).unwrap();
        assert_eq!((j["icmp_type"].as_u64(), j["icmp_code"].as_u64(), j["proto"].as_str()), (Some(8), Some(0), Some("ICMP")));
        assert!(j.get("src_port").is_none() && j.get("tcp").is_none(), "{j}");
        let j: serde_json::Value = serde_json::from_str(&event(47, 0, 0)).unwrap();
        assert_eq!(j["proto"], "47");
        assert!(j.get("src_port").is_none() && j.get("icmp_type").is_none(), "{j}");
    }
}

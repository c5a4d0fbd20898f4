//! What `weir inspect` writes: alerts and flow records, their order, their
//! fixed-size form in spill files, and the merging of a flow's records.
//!
//! Flow records are ordered by key, then first packet time; alerts by time,
//! flow and rule. A flow that left the table before its last packet (evicted
//! from a full table, or timed out while packets of other flows were
//! delivered ahead of its own) comes back as a second record of the same key
//! that starts within the idle timeout of the first one's end: such records are
//! merged when written ([`FlowRecord::continued_by`]), so the output is the
//! key's packets split where they are more than the timeout apart, whatever the
//! table's size, the number of queues or the delivery order.

use super::spill::Fixed;
use std::io::{self, Write};
use weir::flowtable::Flow;
use weir::wire::{FlowTuple, L4Ports};

/// A flow as written.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FlowRecord {
    pub key: FlowTuple,
    pub first_ns: u64,
    pub last_ns: u64,
    pub packets: u64,
    pub bytes: u64,
    pub alerts: u64,
}

impl FlowRecord {
    pub fn of(f: Flow<FlowTuple, super::Counters>) -> FlowRecord {
        let c = f.value;
        FlowRecord { key: f.key, first_ns: f.first_ns, last_ns: f.last_ns, packets: c.packets, bytes: c.bytes, alerts: c.alerts }
    }

    /// `next` (later in order) is more of this flow: same key, starting no more
    /// than the idle timeout after this one's last packet.
    pub fn continued_by(&self, next: &FlowRecord, idle_timeout_ns: u64) -> bool {
        next.key == self.key && next.first_ns <= self.last_ns.saturating_add(idle_timeout_ns)
    }

    pub fn absorb(&mut self, o: &FlowRecord) {
        self.first_ns = self.first_ns.min(o.first_ns);
        self.last_ns = self.last_ns.max(o.last_ns);
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.alerts += o.alerts;
    }

    pub fn write(&self, w: &mut impl Write) -> io::Result<()> {
        writeln!(
            w,
            "{}",
            serde_json::json!({"flow": super::flow_text(&self.key), "community_id": super::community_id(&self.key), "packets": self.packets, "bytes": self.bytes,
                "first_ns": self.first_ns, "last_ns": self.last_ns, "alerts": self.alerts})
        )
    }
}

/// One rule that matched one packet.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct AlertRecord {
    pub ts_ns: u64,
    pub flow: FlowTuple,
    pub rule: u32,
}

/// One match of a rule in a stream's data (`--streams`), ordered by the
/// stream (its first packet's time, its tuple as sent, its direction), then
/// offset and rule: what the stream's packets decide, whatever the queue or
/// the delivery order.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct StreamAlert {
    pub first_ns: u64,
    /// The stream's tuple from its sender to its receiver.
    pub stream: FlowTuple,
    /// Sent by the side that did not open the connection.
    pub responder: bool,
    /// Stream offset of the match's first byte.
    pub offset: u64,
    pub rule: u32,
}

/// Bytes of a flow tuple on disk: family, two 16-byte addresses (IPv4 in the
/// first four), protocol, whether there are ports, and the two ports.
const TUPLE: usize = 1 + 16 + 16 + 1 + 1 + 4;

fn put_tuple(t: &FlowTuple, out: &mut Vec<u8>) {
    let (family, src, dst, proto, ports) = match *t {
        FlowTuple::V4 { src, dst, proto, ports } => {
            let (mut s, mut d) = ([0; 16], [0; 16]);
            s[..4].copy_from_slice(&src);
            d[..4].copy_from_slice(&dst);
            (4u8, s, d, proto, ports)
        }
        FlowTuple::V6 { src, dst, proto, ports } => (6u8, src, dst, proto, ports),
    };
    out.push(family);
    out.extend_from_slice(&src);
    out.extend_from_slice(&dst);
    out.push(proto);
    out.push(u8::from(ports.is_some()));
    let p = ports.unwrap_or(L4Ports { src: 0, dst: 0 });
    out.extend_from_slice(&p.src.to_le_bytes());
    out.extend_from_slice(&p.dst.to_le_bytes());
}

fn get_tuple(b: &[u8]) -> FlowTuple {
    let addr = |at: usize| -> [u8; 16] { b[at..at + 16].try_into().expect("16 bytes") };
    let (src, dst, proto) = (addr(1), addr(17), b[33]);
    let ports = (b[34] == 1).then(|| L4Ports { src: u16::from_le_bytes([b[35], b[36]]), dst: u16::from_le_bytes([b[37], b[38]]) });
    match b[0] {
        4 => FlowTuple::V4 { src: src[..4].try_into().expect("4 bytes"), dst: dst[..4].try_into().expect("4 bytes"), proto, ports },
        _ => FlowTuple::V6 { src, dst, proto, ports },
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl Fixed for FlowRecord {
    const SIZE: usize = TUPLE + 5 * 8;

    fn put(&self, out: &mut Vec<u8>) {
        put_tuple(&self.key, out);
        for v in [self.first_ns, self.last_ns, self.packets, self.bytes, self.alerts] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }

    fn get(b: &[u8]) -> FlowRecord {
        let n = |i: usize| u64_at(b, TUPLE + 8 * i);
        FlowRecord { key: get_tuple(b), first_ns: n(0), last_ns: n(1), packets: n(2), bytes: n(3), alerts: n(4) }
    }
}

impl Fixed for AlertRecord {
    const SIZE: usize = 8 + TUPLE + 4;

    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.ts_ns.to_le_bytes());
        put_tuple(&self.flow, out);
        out.extend_from_slice(&self.rule.to_le_bytes());
    }

    fn get(b: &[u8]) -> AlertRecord {
        let rule = u32::from_le_bytes(b[8 + TUPLE..8 + TUPLE + 4].try_into().expect("4 bytes"));
        AlertRecord { ts_ns: u64_at(b, 0), flow: get_tuple(&b[8..]), rule }
    }
}

impl Fixed for StreamAlert {
    const SIZE: usize = 8 + TUPLE + 1 + 8 + 4;

    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.first_ns.to_le_bytes());
        put_tuple(&self.stream, out);
        out.push(u8::from(self.responder));
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.rule.to_le_bytes());
    }

    fn get(b: &[u8]) -> StreamAlert {
        let at = 8 + TUPLE;
        let rule = u32::from_le_bytes(b[at + 9..at + 13].try_into().expect("4 bytes"));
        StreamAlert { first_ns: u64_at(b, 0), stream: get_tuple(&b[8..]), responder: b[at] == 1, offset: u64_at(b, at + 1), rule }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_their_disk_form() {
        let v4 = FlowTuple::V4 { src: [198, 18, 0, 1], dst: [198, 19, 2, 3], proto: 6, ports: Some(L4Ports { src: 443, dst: 51_000 }) };
        let v6 = FlowTuple::V6 { src: [0x20; 16], dst: [0xfe; 16], proto: 58, ports: None };
        for key in [v4, v6] {
            let f = FlowRecord { key, first_ns: 1, last_ns: u64::MAX, packets: 3, bytes: 4, alerts: 5 };
            let a = AlertRecord { ts_ns: 9, flow: key, rule: u32::MAX };
            let s = StreamAlert { first_ns: 7, stream: key, responder: true, offset: u64::MAX - 1, rule: 3 };
            let (mut fb, mut ab, mut sb) = (Vec::new(), Vec::new(), Vec::new());
            f.put(&mut fb);
            a.put(&mut ab);
            s.put(&mut sb);
            assert_eq!((fb.len(), ab.len(), sb.len()), (FlowRecord::SIZE, AlertRecord::SIZE, StreamAlert::SIZE));
            assert_eq!((FlowRecord::get(&fb), AlertRecord::get(&ab), StreamAlert::get(&sb)), (f, a, s));
        }
    }
}

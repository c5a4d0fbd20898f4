//! The messages read back field by field: headers, set lengths, template
//! contents, sequence numbers, v9's padding and v5's limits. (That real
//! collectors read them is the integration test `tests/flows.rs`.)

use super::*;
use std::net::{Ipv4Addr, Ipv6Addr};

fn rec(v6: bool, n: u64) -> FlowRecord {
    let (src, dst) = if v6 {
        (IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, n as u16)), IpAddr::V6(Ipv6Addr::LOCALHOST))
    } else {
        (IpAddr::V4(Ipv4Addr::new(198, 18, 0, n as u8)), IpAddr::V4(Ipv4Addr::new(198, 19, 0, 1)))
    };
    FlowRecord {
        src,
        dst,
        sport: 40000 + n as u16,
        dport: 443,
        proto: 6,
        tcp_flags: 0x1b,
        packets: 10 + n,
        octets: 1000 + n,
        start_ms: 1_700_000_000_123 + n,
        end_ms: 1_700_000_001_456 + n,
        ingress: 2,
        end: EndReason::Idle,
        reverse: None,
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

/// The sets of an IPFIX or v9 message after its header: (id, body).
fn sets(msg: &[u8], header: usize) -> Vec<(u16, Vec<u8>)> {
    let mut at = header;
    let mut out = Vec::new();
    while at < msg.len() {
        let (id, len) = (be16(msg, at), usize::from(be16(msg, at + 2)));
        assert!(len >= 4 && at + len <= msg.len(), "set at {at}: length {len} runs past the message");
        out.push((id, msg[at + 4..at + len].to_vec()));
        at += len;
    }
    out
}

#[test]
fn ipfix_messages_carry_templates_then_records_with_sequence_numbers_counting_records() {
    let mut e = Encoder::new(Format::Ipfix, 7, false).unwrap();
    e.add_templates();
    assert_eq!(e.add(&rec(false, 1)), Added::Yes);
    assert_eq!(e.add(&rec(false, 2)), Added::Yes);
    assert_eq!(e.add(&rec(true, 3)), Added::Yes);
    let msg = e.finish().to_vec();
    assert_eq!((be16(&msg, 0), usize::from(be16(&msg, 2))), (10, msg.len()));
    assert_eq!((be32(&msg, 8), be32(&msg, 12)), (0, 7), "the first message's sequence number is 0; the domain");
    // Export time: the latest end, rounded up to the second.
    assert_eq!(be32(&msg, 4), 1_700_000_002);
    let s = sets(&msg, 16);
    assert_eq!(s.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [2, 256, 257]);
    // The template set: template 256 with 13 fields, the first sourceIPv4Address (8), 4 bytes.
    let t = &s[0].1;
    assert_eq!((be16(t, 0), be16(t, 2), be16(t, 4), be16(t, 6)), (256, 13, 8, 4));
    let v4_len: usize = IPFIX_V4.iter().map(|f| usize::from(f.spec().1)).sum();
    assert_eq!(s[1].1.len(), 2 * v4_len);
    let r = &s[1].1[v4_len..];
    assert_eq!(&r[0..4], &[198, 18, 0, 2]);
    assert_eq!((be16(r, 8), be16(r, 10), r[12]), (40002, 443, 6));
    assert_eq!(be16(r, 13), 0x1b, "tcpControlBits on 16 bits");
    assert_eq!(u64::from_be_bytes(r[15..23].try_into().unwrap()), 12, "packets");
    assert_eq!(u64::from_be_bytes(r[23..31].try_into().unwrap()), 1002, "octets");
    assert_eq!(u64::from_be_bytes(r[31..39].try_into().unwrap()), 1_700_000_000_125, "start ms");
    assert_eq!((r[v4_len - 3], be16(r, v4_len - 2)), (EndReason::Idle as u8, 0), "end reason; no ICMP type for TCP");
    e.reset();
    assert!(e.is_empty());
    e.add(&rec(false, 4));
    let msg = e.finish().to_vec();
    assert_eq!(be32(&msg, 8), 3, "three data records went before");
    assert_eq!(sets(&msg, 16).len(), 1, "no templates unless asked");
}

#[test]
fn a_message_stops_at_the_mtu_and_v9_pads_its_flowsets_and_counts_packets() {
    let mut e = Encoder::new(Format::V9, 1, false).unwrap();
    e.add_templates();
    let mut n = 0;
    while e.add(&rec(n % 2 == 0, n)) == Added::Yes {
        n += 1;
    }
    let msg = e.finish().to_vec();
    assert!(msg.len() <= MAX_MESSAGE && msg.len() + 60 > MAX_MESSAGE, "{} bytes", msg.len());
    assert_eq!(be16(&msg, 0), 9);
    assert_eq!(u64::from(be16(&msg, 2)), n + 2, "count: the records and the two templates");
    assert_eq!(be32(&msg, 12), 0);
    for (_, body) in sets(&msg, 20) {
        assert_eq!((body.len() + 4) % 4, 0, "every flowset padded to 4 bytes");
    }
    // Uptime and date agree to the ms: date(uptime u) = secs * 1000 - sys_uptime + u.
    let s = sets(&msg, 20);
    let first_v6 = &s[1].1;
    let first_switched = be32(first_v6, 16 + 16 + 2 + 2 + 1 + 1 + 8 + 8);
    let date = u64::from(be32(&msg, 8)) * 1000 - u64::from(be32(&msg, 4)) + u64::from(first_switched);
    assert_eq!(date, rec(true, 0).start_ms);
    e.reset();
    e.add(&rec(false, 0));
    assert_eq!(be32(e.finish(), 12), 1, "v9 counts messages");
}

#[test]
fn v5_takes_ipv4_only_thirty_records_a_message_and_a_16_bit_domain() {
    assert!(Encoder::new(Format::V5, 70_000, false).is_err());
    let mut e = Encoder::new(Format::V5, 0x0102, false).unwrap();
    assert_eq!(e.add(&rec(true, 1)), Added::NotCarried);
    for n in 0..30 {
        assert_eq!(e.add(&rec(false, n)), Added::Yes);
    }
    assert_eq!(e.add(&rec(false, 31)), Added::Full);
    let msg = e.finish().to_vec();
    use offsets::v5 as o;
    assert_eq!(msg.len(), o::HEADER_LEN + 30 * o::RECORD_LEN);
    assert_eq!((be16(&msg, o::VERSION), be16(&msg, o::COUNT), msg[o::ENGINE_TYPE], msg[o::ENGINE_ID]), (5, 30, 1, 2));
    let r = &msg[o::HEADER_LEN + 29 * o::RECORD_LEN..];
    assert_eq!((&r[..4], be32(r, o::PACKETS), be32(r, o::OCTETS), r[o::PROTO]), (&[198, 18, 0, 29][..], 39, 1029, 6));
    e.reset();
    let mut big = rec(false, 0);
    big.octets = 1 << 40;
    assert!(v5_saturates(&big));
    e.add(&big);
    let msg = e.finish().to_vec();
    assert_eq!(be32(&msg, o::SEQUENCE), 30, "v5 counts records");
    assert_eq!(be32(&msg[o::HEADER_LEN..], o::OCTETS), u32::MAX);
}

//! One hand-built file per acceptance rule, each read by weir and by the system
//! libpcap, which must agree; plus the chunking invariance of the walker.
//!
//! Each case also names the error weir must give (if any), so a rule that both
//! readers happen to pass for another reason does not go unnoticed.

use super::*;
use crate::filter::oracle;
use proptest::prelude::*;
use std::io::Write;

const LE: bool = true;
const BE: bool = false;
const MICRO: u32 = 0xA1B2_C3D4;
const NANO: u32 = 0xA1B2_3C4D;
const KUZNETZOV: u32 = 0xA1B2_CD34;
const ETHERNET: u32 = 1;

/// Writes fields in one byte order.
struct Out {
    le: bool,
    bytes: Vec<u8>,
}

impl Out {
    fn new(le: bool) -> Out {
        Out { le, bytes: Vec::new() }
    }
    fn u8(mut self, v: u8) -> Out {
        self.bytes.push(v);
        self
    }
    fn u16(mut self, v: u16) -> Out {
        self.bytes.extend(if self.le { v.to_le_bytes() } else { v.to_be_bytes() });
        self
    }
    fn u32(mut self, v: u32) -> Out {
        self.bytes.extend(if self.le { v.to_le_bytes() } else { v.to_be_bytes() });
        self
    }
    fn u64(mut self, v: u64) -> Out {
        self.bytes.extend(if self.le { v.to_le_bytes() } else { v.to_be_bytes() });
        self
    }
    fn raw(mut self, b: &[u8]) -> Out {
        self.bytes.extend_from_slice(b);
        self
    }
    fn pad4(mut self) -> Out {
        while self.bytes.len() % 4 != 0 {
            self.bytes.push(0);
        }
        self
    }
}

fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + 3) as u8).collect()
}

fn pcap_header(le: bool, magic: u32, version: (u16, u16), snaplen: u32, link_type: u32) -> Vec<u8> {
    Out::new(le).u32(magic).u16(version.0).u16(version.1).u32(0).u32(0).u32(snaplen).u32(link_type).bytes
}

fn pcap_record(le: bool, sec: u32, frac: u32, caplen: u32, wire_len: u32, data: &[u8]) -> Vec<u8> {
    Out::new(le).u32(sec).u32(frac).u32(caplen).u32(wire_len).raw(data).bytes
}

/// A record with Kuznetzov's extra interface index, protocol and packet type.
fn kuznetzov_record(le: bool, sec: u32, caplen: u32, wire_len: u32, data: &[u8]) -> Vec<u8> {
    Out::new(le).u32(sec).u32(0).u32(caplen).u32(wire_len).u32(2).u16(0x0800).u8(0).u8(0).raw(data).bytes
}

/// A plain microsecond pcap with `n` packets of 60 bytes.
fn pcap_file(le: bool, n: u32) -> Vec<u8> {
    let mut f = pcap_header(le, MICRO, (2, 4), 65535, ETHERNET);
    for i in 0..n {
        f.extend(pcap_record(le, 1_700_000_000 + i, 1000 * i, 60, 60, &payload(60)));
    }
    f
}

fn block(le: bool, block_type: u32, body: &[u8]) -> Vec<u8> {
    let len = (12 + body.len().div_ceil(4) * 4) as u32;
    Out::new(le).u32(block_type).u32(len).raw(body).pad4().u32(len).bytes
}

fn shb(le: bool, major: u16, minor: u16) -> Vec<u8> {
    block(le, 0x0A0D_0D0A, &Out::new(le).u32(0x1A2B_3C4D).u16(major).u16(minor).u64(u64::MAX).bytes)
}

fn opt(le: bool, code: u16, value: &[u8]) -> Vec<u8> {
    Out::new(le).u16(code).u16(value.len() as u16).raw(value).pad4().bytes
}

fn idb(le: bool, link_type: u16, snaplen: u32, options: &[Vec<u8>]) -> Vec<u8> {
    block(le, 1, &Out::new(le).u16(link_type).u16(0).u32(snaplen).raw(&options.concat()).bytes)
}

fn epb(le: bool, interface: u32, ts: u64, caplen: u32, wire_len: u32, data: &[u8]) -> Vec<u8> {
    let body = Out::new(le).u32(interface).u32((ts >> 32) as u32).u32(ts as u32).u32(caplen).u32(wire_len).raw(data);
    block(le, 6, &body.bytes)
}

fn pb(le: bool, interface: u16, ts: u64, caplen: u32, wire_len: u32, data: &[u8]) -> Vec<u8> {
    let body = Out::new(le).u16(interface).u16(0).u32((ts >> 32) as u32).u32(ts as u32).u32(caplen).u32(wire_len);
    block(le, 2, &body.raw(data).bytes)
}

fn spb(le: bool, wire_len: u32, data: &[u8]) -> Vec<u8> {
    block(le, 3, &Out::new(le).u32(wire_len).raw(data).bytes)
}

/// Section, Ethernet interface with `options`, then `n` packets of 60 bytes.
fn pcapng_file(le: bool, options: &[Vec<u8>], n: u64) -> Vec<u8> {
    let mut f = [shb(le, 1, 0), idb(le, 1, 0, options)].concat();
    for i in 0..n {
        f.extend(epb(le, 0, 1_700_000_000_123_456 + i * 1_000_001, 60, 60, &payload(60)));
    }
    f
}

fn tsresol(le: bool, v: u8) -> Vec<u8> {
    opt(le, 9, &[v])
}

fn tsoffset(le: bool, seconds: u64) -> Vec<u8> {
    opt(le, 14, &Out::new(le).u64(seconds).bytes)
}

fn end_of_options(le: bool) -> Vec<u8> {
    opt(le, 0, &[])
}

/// What weir made of a file.
#[derive(Debug, PartialEq, Eq)]
struct Walked {
    header: Option<TraceHeader>,
    packets: Vec<(u64, u32, Vec<u8>)>,
    error: Option<FormatError>,
}

/// Feed `bytes` to a walker, growing the window by `chunk()` bytes on each `Need`.
fn walk(bytes: &[u8], mut chunk: impl FnMut() -> usize) -> Walked {
    let mut walker = Walker::new();
    let (mut pos, mut limit) = (0usize, 0usize);
    let mut packets = Vec::new();
    loop {
        let window = &bytes[pos..limit];
        let eof = limit == bytes.len();
        let step = match walker.next(window, pos as u64, eof) {
            Ok(step) => step,
            Err(e) => return Walked { header: walker.header().cloned(), packets, error: Some(e) },
        };
        match step {
            Step::Need { need } => {
                assert!(!eof && need > window.len() && need <= MAX_RECORD_BYTES, "bad Need {need} at {pos}");
                limit = limit.saturating_add(chunk().max(1)).min(bytes.len());
            }
            Step::End => {
                assert!(eof && window.is_empty());
                return Walked { header: walker.header().cloned(), packets, error: None };
            }
            Step::Header { consumed } | Step::Skip { consumed } => {
                assert!(consumed > 0 && consumed <= window.len());
                pos += consumed;
            }
            Step::Packet(r) => {
                assert!(r.consumed > 0 && r.consumed <= window.len() && r.data.end <= r.consumed);
                assert!(r.data.len() <= MAX_CAPLEN);
                packets.push((r.ts_ns, r.wire_len, window[r.data.clone()].to_vec()));
                pos += r.consumed;
            }
        }
    }
}

fn walk_whole(bytes: &[u8]) -> Walked {
    walk(bytes, || usize::MAX)
}

/// What libpcap made of the same bytes: opened or not, packets, stopped by an error or not.
struct Oracle {
    opened: Result<u32, String>,
    packets: Vec<(u64, u32, Vec<u8>)>,
    error: Option<String>,
}

fn oracle(bytes: &[u8]) -> Oracle {
    let lib = oracle::Oracle::system().unwrap_or_else(|e| panic!("the oracle is missing: {e}"));
    let mut file = tempfile::NamedTempFile::new().expect("temporary file");
    file.write_all(bytes).expect("write temporary file");
    let mut handle = match lib.open_offline(file.path()) {
        Ok(h) => h,
        Err(e) => return Oracle { opened: Err(e.to_string()), packets: Vec::new(), error: None },
    };
    let opened = Ok(handle.link_type());
    let mut packets = Vec::new();
    loop {
        match handle.next_packet() {
            Ok(Some(p)) => packets.push((p.ts_ns, p.wire_len, p.data)),
            Ok(None) => return Oracle { opened, packets, error: None },
            Err(e) => return Oracle { opened, packets, error: Some(e.to_string()) },
        }
    }
}

/// What a case must give, besides agreeing with libpcap.
enum Expect {
    /// Read to the end with this many packets.
    Packets(usize),
    /// Refused before any header, with this error.
    Refused(fn(&FormatErrorKind) -> bool),
    /// This many packets, then this error.
    Stops(usize, fn(&FormatErrorKind) -> bool),
}

struct Case {
    name: &'static str,
    bytes: Vec<u8>,
    expect: Expect,
}

fn case(name: &'static str, bytes: Vec<u8>, expect: Expect) -> Case {
    Case { name, bytes, expect }
}

/// Run every case through weir and libpcap; collect every disagreement.
fn check(cases: Vec<Case>) {
    let mut failures = Vec::new();
    for c in &cases {
        let weir = walk_whole(&c.bytes);
        let lib = oracle(&c.bytes);
        let mut fail = |what: String| failures.push(format!("{}: {what}", c.name));
        match (&lib.opened, &weir.header) {
            (Ok(dlt), Some(h)) if *dlt != linktype::dlt_of(h.link_type.0) => {
                fail(format!("link type {} is DLT {dlt} to libpcap", h.link_type.0))
            }
            (Ok(_), None) => fail(format!("libpcap opens it, weir says {:?}", weir.error)),
            (Err(e), Some(_)) => fail(format!("libpcap refuses it ({e}), weir opens it")),
            _ => {}
        }
        if lib.packets != weir.packets {
            fail(format!("packets differ: libpcap {:?}, weir {:?}", summary(&lib.packets), summary(&weir.packets)));
        }
        if lib.opened.is_ok() && lib.error.is_some() != weir.error.is_some() {
            fail(format!("libpcap ends with {:?}, weir with {:?}", lib.error, weir.error));
        }
        let kind = weir.error.as_ref().map(|e| &e.kind);
        let as_expected = match c.expect {
            Expect::Packets(n) => weir.error.is_none() && weir.packets.len() == n,
            Expect::Refused(is) => weir.header.is_none() && kind.is_some_and(is),
            Expect::Stops(n, is) => weir.header.is_some() && weir.packets.len() == n && kind.is_some_and(is),
        };
        if !as_expected {
            fail(format!("unexpected: {} packets, error {:?}", weir.packets.len(), weir.error));
        }
        if let Some(e) = &weir.error {
            assert!(e.to_string().starts_with(&format!("byte offset {}: ", e.offset)));
        }
        let chunked = walk(&c.bytes, || 1);
        if chunked != weir {
            fail(format!("one byte at a time gives {chunked:?}"));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases fail:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

fn summary(packets: &[(u64, u32, Vec<u8>)]) -> Vec<(u64, u32, usize)> {
    packets.iter().map(|(ts, wire, data)| (*ts, *wire, data.len())).collect()
}

#[test]
fn pcap_rules_match_libpcap() {
    use FormatErrorKind as K;
    let rec = |le, caplen, wire_len| pcap_record(le, 1_600_000_000, 5, caplen, wire_len, &payload(caplen as usize));
    // Old versions store the wire length first.
    let old_rec = |le, caplen, wire_len| pcap_record(le, 1_600_000_000, 5, wire_len, caplen, &payload(caplen as usize));
    check(vec![
        case("little-endian microseconds", pcap_file(LE, 3), Expect::Packets(3)),
        case("big-endian microseconds", pcap_file(BE, 3), Expect::Packets(3)),
        case("no packets", pcap_file(LE, 0), Expect::Packets(0)),
        case(
            "little-endian nanoseconds",
            [pcap_header(LE, NANO, (2, 4), 65535, ETHERNET), pcap_record(LE, 5, 999_999_999, 4, 4, b"abcd")].concat(),
            Expect::Packets(1),
        ),
        case(
            "big-endian nanoseconds",
            [pcap_header(BE, NANO, (2, 4), 65535, ETHERNET), pcap_record(BE, 5, 999_999_999, 4, 4, b"abcd")].concat(),
            Expect::Packets(1),
        ),
        case(
            "native-order times are signed",
            [pcap_header(LE, MICRO, (2, 4), 65535, ETHERNET), pcap_record(LE, u32::MAX, u32::MAX, 4, 4, b"abcd")].concat(),
            Expect::Packets(1),
        ),
        case(
            "byte-swapped times are unsigned",
            [pcap_header(BE, MICRO, (2, 4), 65535, ETHERNET), pcap_record(BE, u32::MAX, u32::MAX, 4, 4, b"abcd")].concat(),
            Expect::Packets(1),
        ),
        case(
            "microsecond field past one second",
            [pcap_header(LE, MICRO, (2, 4), 65535, ETHERNET), pcap_record(LE, 1, 3_000_000, 4, 4, b"abcd")].concat(),
            Expect::Packets(1),
        ),
        case(
            "Kuznetzov records",
            [pcap_header(LE, KUZNETZOV, (2, 4), 100, 105), kuznetzov_record(LE, 7, 50, 60, &payload(50))].concat(),
            Expect::Packets(1),
        ),
        case(
            "Kuznetzov Ethernet snapshot grows by 14",
            [
                pcap_header(BE, KUZNETZOV, (2, 4), 60, ETHERNET),
                kuznetzov_record(BE, 7, 74, 80, &payload(74)),
                kuznetzov_record(BE, 8, 80, 80, &payload(80)),
            ]
            .concat(),
            Expect::Packets(2),
        ),
        case(
            "version 1.0 is archaic",
            pcap_header(LE, MICRO, (1, 0), 65535, 1),
            Expect::Refused(|k| matches!(k, K::ArchaicPcapVersion { .. })),
        ),
        case("version 2.5", pcap_header(LE, MICRO, (2, 5), 65535, 1), Expect::Refused(|k| matches!(k, K::UnsupportedPcapVersion { .. }))),
        case("version 3.0", pcap_header(BE, MICRO, (3, 0), 65535, 1), Expect::Refused(|k| matches!(k, K::UnsupportedPcapVersion { .. }))),
        case("version 2.0 swaps lengths", [pcap_header(LE, MICRO, (2, 0), 65535, 1), old_rec(LE, 40, 60)].concat(), Expect::Packets(1)),
        case("DG/UX 543.0 swaps lengths", [pcap_header(BE, MICRO, (543, 0), 65535, 1), old_rec(BE, 40, 60)].concat(), Expect::Packets(1)),
        case(
            "version 2.3 swaps only implausible lengths",
            [pcap_header(LE, MICRO, (2, 3), 65535, 1), rec(LE, 40, 60), old_rec(LE, 40, 60)].concat(),
            Expect::Packets(2),
        ),
        case("543.1", pcap_header(LE, MICRO, (543, 1), 65535, 1), Expect::Refused(|k| matches!(k, K::UnsupportedPcapVersion { .. }))),
        case(
            "FCS bits above the link type",
            [pcap_header(LE, MICRO, (2, 4), 65535, 0x3000_0001), rec(LE, 20, 20)].concat(),
            Expect::Packets(1),
        ),
        case("reserved link type bits", [pcap_header(LE, MICRO, (2, 4), 65535, 0x0200_0065), rec(LE, 20, 20)].concat(), Expect::Packets(1)),
        case(
            "caplen over snaplen is cut",
            [pcap_header(LE, MICRO, (2, 4), 64, 1), rec(LE, 100, 100), rec(LE, 10, 10)].concat(),
            Expect::Packets(2),
        ),
        case("snaplen 0 means the maximum", [pcap_header(LE, MICRO, (2, 4), 0, 1), rec(LE, 3000, 3000)].concat(), Expect::Packets(1)),
        case(
            "snaplen beyond int means the maximum",
            [pcap_header(BE, MICRO, (2, 4), 0x8000_0000, 101), rec(BE, 3000, 3000)].concat(),
            Expect::Packets(1),
        ),
        case(
            "caplen over the maximum",
            [pcap_header(LE, MICRO, (2, 4), 0, 1), rec(LE, 20, 20), Out::new(LE).u32(0).u32(0).u32(262_145).u32(262_145).bytes].concat(),
            Expect::Stops(1, |k| matches!(k, K::CaplenOverMaximum { caplen: 262_145, max: 262_144, .. })),
        ),
        case(
            "caplen over the maximum before the snaplen cut",
            [pcap_header(LE, MICRO, (2, 4), 64, 1), Out::new(LE).u32(0).u32(0).u32(300_000).u32(60).bytes].concat(),
            Expect::Stops(0, |k| matches!(k, K::CaplenOverMaximum { .. })),
        ),
        case(
            "truncated record header",
            [pcap_file(LE, 2), vec![1, 2, 3, 4, 5, 6, 7, 8]].concat(),
            Expect::Stops(2, |k| matches!(k, K::Truncated { item: Item::PcapRecordHeader, have: 8, need: 16 })),
        ),
        case(
            "truncated Kuznetzov record header",
            [pcap_header(LE, KUZNETZOV, (2, 4), 100, 1), Out::new(LE).u32(0).u32(0).u32(4).u32(4).u32(0).bytes].concat(),
            Expect::Stops(0, |k| matches!(k, K::Truncated { item: Item::PcapRecordHeader, have: 20, need: 24 })),
        ),
        case(
            "truncated packet data",
            [pcap_file(BE, 1), pcap_record(BE, 0, 0, 100, 100, &payload(99))].concat(),
            Expect::Stops(1, |k| matches!(k, K::Truncated { item: Item::PcapRecord, have: 115, need: 116 })),
        ),
        case(
            "truncated beyond the snaplen cut",
            [pcap_header(LE, MICRO, (2, 4), 10, 1), pcap_record(LE, 0, 0, 100, 100, &payload(50))].concat(),
            Expect::Stops(0, |k| matches!(k, K::Truncated { .. })),
        ),
        case("empty file", Vec::new(), Expect::Refused(|k| matches!(k, K::TruncatedFileHeader { have: 0, .. }))),
        case("three bytes", vec![0xD4, 0xC3, 0xB2], Expect::Refused(|k| matches!(k, K::TruncatedFileHeader { have: 3, .. }))),
        case(
            "truncated file header",
            pcap_header(LE, MICRO, (2, 4), 65535, 1)[..20].to_vec(),
            Expect::Refused(|k| matches!(k, K::TruncatedFileHeader { item: Item::PcapFileHeader, have: 20, need: 24 })),
        ),
        case("gzip", vec![0x1F, 0x8B, 0x08, 0x00, 0, 0, 0, 0, 0, 3], Expect::Refused(|k| matches!(k, K::Gzip))),
        case("text", b"hello, world\n".to_vec(), Expect::Refused(|k| matches!(k, K::UnknownFormat { magic: [b'h', b'e', b'l', b'l'] }))),
        case(
            "Navtel magic is not pcap",
            pcap_header(LE, 0xA12B_3C4D, (2, 4), 65535, 1),
            Expect::Refused(|k| matches!(k, K::UnknownFormat { .. })),
        ),
    ]);
}

#[test]
fn pcapng_section_rules_match_libpcap() {
    use FormatErrorKind as K;
    let long_shb = block(LE, 0x0A0D_0D0A, &Out::new(LE).u32(0x1A2B_3C4D).u16(1).u16(0).u64(0).raw(&[0; 2_000_000]).bytes);
    let unaligned_shb = {
        let mut b = Out::new(LE).u32(0x0A0D_0D0A).u32(30).u32(0x1A2B_3C4D).u16(1).u16(0).u64(0).raw(&[0, 0]).bytes;
        b.extend(30u32.to_le_bytes());
        b
    };
    // 0x00010100 bytes long: the same number in either byte order.
    let palindromic_shb = block(BE, 0x0A0D_0D0A, &Out::new(BE).u32(0x1A2B_3C4D).u16(1).u16(0).u64(0).raw(&[0; 0x0001_0100 - 28]).bytes);
    let mut bad_trailer_shb = shb(BE, 1, 0);
    let at = bad_trailer_shb.len() - 1;
    bad_trailer_shb[at] ^= 0x40;
    check(vec![
        case("little-endian", pcapng_file(LE, &[], 3), Expect::Packets(3)),
        case("big-endian", pcapng_file(BE, &[], 3), Expect::Packets(3)),
        case("version 1.2", [shb(LE, 1, 2), idb(LE, 1, 0, &[]), epb(LE, 0, 1, 4, 4, b"abcd")].concat(), Expect::Packets(1)),
        case(
            "version 1.1",
            [shb(LE, 1, 1), idb(LE, 1, 0, &[])].concat(),
            Expect::Refused(|k| matches!(k, K::UnsupportedPcapngVersion { .. })),
        ),
        case(
            "version 2.0",
            [shb(BE, 2, 0), idb(BE, 1, 0, &[])].concat(),
            Expect::Refused(|k| matches!(k, K::UnsupportedPcapngVersion { .. })),
        ),
        case(
            "section header shorter than 28",
            Out::new(LE).u32(0x0A0D_0D0A).u32(24).u32(0x1A2B_3C4D).u16(1).u16(0).u64(0).u32(24).bytes,
            Expect::Refused(|k| matches!(k, K::SectionHeaderLength { length: 24 })),
        ),
        case("section header over 1 MiB", long_shb, Expect::Refused(|k| matches!(k, K::SectionHeaderLength { .. }))),
        case("unaligned first section header", [unaligned_shb, idb(LE, 1, 0, &[])].concat(), Expect::Packets(0)),
        case("first section header trailer is not checked", [bad_trailer_shb, idb(BE, 1, 0, &[])].concat(), Expect::Packets(0)),
        case(
            "bad byte-order magic",
            Out::new(LE).u32(0x0A0D_0D0A).u32(28).u32(0x1A2B_3C4E).u16(1).u16(0).u64(0).u32(28).bytes,
            Expect::Refused(|k| matches!(k, K::BadByteOrderMagic { found: 0x1A2B_3C4E })),
        ),
        case("section header cut short", shb(LE, 1, 0)[..20].to_vec(), Expect::Refused(|k| matches!(k, K::TruncatedFileHeader { .. }))),
        case("only the block type", shb(LE, 1, 0)[..8].to_vec(), Expect::Refused(|k| matches!(k, K::TruncatedFileHeader { .. }))),
        case("no interface", shb(LE, 1, 0), Expect::Refused(|k| matches!(k, K::NoInterface))),
        case(
            "packet before any interface",
            [shb(LE, 1, 0), epb(LE, 0, 1, 4, 4, b"abcd"), idb(LE, 1, 0, &[])].concat(),
            Expect::Refused(|k| matches!(k, K::PacketBeforeInterface { .. })),
        ),
        case(
            "simple packet before any interface",
            [shb(BE, 1, 0), spb(BE, 4, b"abcd")].concat(),
            Expect::Refused(|k| matches!(k, K::PacketBeforeInterface { .. })),
        ),
        case(
            "blocks before the first interface are skipped, a section header too",
            [shb(LE, 1, 0), block(LE, 0x99, b"junk"), shb(LE, 7, 7), idb(LE, 1, 0, &[]), epb(LE, 0, 1, 4, 4, b"abcd")].concat(),
            Expect::Packets(1),
        ),
        case(
            "second section",
            [pcapng_file(LE, &[], 2), shb(LE, 1, 0), idb(LE, 1, 0, &[]), epb(LE, 0, 9, 4, 4, b"abcd")].concat(),
            Expect::Packets(3),
        ),
        case(
            "second section minor version is not checked",
            [pcapng_file(BE, &[], 1), shb(BE, 1, 9), idb(BE, 1, 0, &[]), epb(BE, 0, 9, 4, 4, b"abcd")].concat(),
            Expect::Packets(2),
        ),
        case(
            "second section forgets interfaces",
            [pcapng_file(LE, &[], 1), shb(LE, 1, 0), epb(LE, 0, 9, 4, 4, b"abcd")].concat(),
            Expect::Stops(1, |k| matches!(k, K::UnknownInterface { id: 0, count: 0, .. })),
        ),
        case(
            "second section in the other byte order",
            [pcapng_file(LE, &[], 1), shb(BE, 1, 0), idb(BE, 1, 0, &[])].concat(),
            Expect::Stops(1, |k| matches!(k, K::BlockTooLong { .. })),
        ),
        case(
            "second section in the other byte order, with a length that reads alike both ways",
            [pcapng_file(LE, &[], 1), palindromic_shb].concat(),
            Expect::Stops(1, |k| matches!(k, K::ByteOrderChange)),
        ),
        case(
            "second section with major version 2",
            [pcapng_file(LE, &[], 1), shb(LE, 2, 0), idb(LE, 1, 0, &[])].concat(),
            Expect::Stops(1, |k| matches!(k, K::PcapngMajorVersion { major: 2 })),
        ),
        case(
            "second section with a bad magic",
            [pcapng_file(LE, &[], 1), block(LE, 0x0A0D_0D0A, &Out::new(LE).u32(7).u16(1).u16(0).u64(0).bytes)].concat(),
            Expect::Stops(1, |k| matches!(k, K::BadByteOrderMagic { found: 7 })),
        ),
        case(
            "second section header too short",
            [pcapng_file(LE, &[], 1), block(LE, 0x0A0D_0D0A, &Out::new(LE).u32(0x1A2B_3C4D).bytes)].concat(),
            Expect::Stops(1, |k| matches!(k, K::FixedPartTooShort { need: 16, .. })),
        ),
    ]);
}

#[test]
fn pcapng_block_rules_match_libpcap() {
    use FormatErrorKind as K;
    let base = || pcapng_file(LE, &[], 1);
    let mut bad_trailer = epb(LE, 0, 5, 4, 4, b"abcd");
    let at = bad_trailer.len() - 4;
    bad_trailer[at] ^= 4;
    check(vec![
        case(
            "unknown, statistics, name resolution and custom blocks are skipped",
            [base(), block(LE, 0x1234_5678, &[1, 2, 3]), block(LE, 5, &[0; 20]), block(LE, 4, &[0; 8]), block(LE, 0xBAD, &[9; 12])]
                .concat(),
            Expect::Packets(1),
        ),
        case(
            "block shorter than 12",
            [base(), Out::new(LE).u32(6).u32(8).u32(8).bytes].concat(),
            Expect::Stops(1, |k| matches!(k, K::BlockTooShort { length: 8, .. })),
        ),
        case(
            "block length not a multiple of 4",
            [base(), Out::new(LE).u32(0x77).u32(14).u32(0).u16(0).u32(14).bytes].concat(),
            Expect::Stops(1, |k| matches!(k, K::BlockMisaligned { length: 14, .. })),
        ),
        case(
            "block over the size limit",
            [base(), Out::new(LE).u32(0x77).u32(0x0200_0000).u32(0).bytes].concat(),
            Expect::Stops(1, |k| matches!(k, K::BlockTooLong { length: 0x0200_0000, .. })),
        ),
        case("trailer differs from header", [base(), bad_trailer].concat(), Expect::Stops(1, |k| matches!(k, K::TrailerMismatch { .. }))),
        case(
            "truncated block",
            [base(), epb(LE, 0, 5, 4, 4, b"abcd")[..20].to_vec()].concat(),
            Expect::Stops(1, |k| matches!(k, K::Truncated { have: 20, need: 36, .. })),
        ),
        case(
            "truncated block header",
            [base(), vec![6, 0, 0, 0, 36]].concat(),
            Expect::Stops(1, |k| matches!(k, K::Truncated { item: Item::BlockHeader, have: 5, need: 8 })),
        ),
        case(
            "enhanced packet block without room for its fixed part",
            [base(), block(LE, 6, &[0; 16])].concat(),
            Expect::Stops(1, |k| matches!(k, K::FixedPartTooShort { need: 20, .. })),
        ),
        case(
            "interface id out of range",
            [base(), epb(LE, 1, 5, 4, 4, b"abcd")].concat(),
            Expect::Stops(1, |k| matches!(k, K::UnknownInterface { id: 1, count: 1, .. })),
        ),
        case(
            "caplen over the snapshot length",
            [shb(LE, 1, 0), idb(LE, 1, 64, &[]), epb(LE, 0, 5, 65, 65, &payload(65))].concat(),
            Expect::Stops(0, |k| matches!(k, K::CaplenOverSnaplen { caplen: 65, snapshot: 64, .. })),
        ),
        case(
            "caplen beyond the block",
            [base(), Out::new(LE).u32(6).u32(36).u32(0).u32(0).u32(5).u32(8).u32(8).u32(0).u32(36).bytes].concat(),
            Expect::Stops(1, |k| matches!(k, K::PacketDataOverrun { caplen: 8, room: 4, .. })),
        ),
        case(
            "options after the packet are ignored",
            [
                base(),
                block(LE, 6, &Out::new(LE).u32(0).u32(0).u32(5).u32(4).u32(4).raw(b"abcd").raw(&opt(LE, 1, b"hi")).raw(&[0xFF; 8]).bytes),
            ]
            .concat(),
            Expect::Packets(2),
        ),
        case(
            "obsolete packet block",
            [shb(BE, 1, 0), idb(BE, 1, 0, &[]), idb(BE, 1, 0, &[]), pb(BE, 1, 77, 4, 10, b"abcd")].concat(),
            Expect::Packets(1),
        ),
        case(
            "obsolete packet block on an unknown interface",
            [base(), pb(LE, 3, 77, 4, 10, b"abcd")].concat(),
            Expect::Stops(1, |k| matches!(k, K::UnknownInterface { id: 3, .. })),
        ),
        case(
            "simple packet blocks are cut to the snapshot length",
            [shb(LE, 1, 0), idb(LE, 1, 32, &[tsoffset(LE, 100)]), spb(LE, 30, &payload(30)), spb(LE, 50, &payload(32))].concat(),
            Expect::Packets(2),
        ),
        case(
            "simple packet block shorter than its packet",
            [shb(LE, 1, 0), idb(LE, 1, 0, &[]), spb(LE, 50, &payload(20))].concat(),
            Expect::Stops(0, |k| matches!(k, K::PacketDataOverrun { caplen: 50, room: 20, .. })),
        ),
        case(
            "simple packet block in a section without interfaces",
            [base(), shb(LE, 1, 0), spb(LE, 4, b"abcd")].concat(),
            Expect::Stops(1, |k| matches!(k, K::UnknownInterface { id: 0, count: 0, .. })),
        ),
    ]);
}

#[test]
fn pcapng_interface_rules_match_libpcap() {
    use FormatErrorKind as K;
    let one = |le, options: &[Vec<u8>]| pcapng_file(le, options, 2);
    let raw_twice = [shb(LE, 1, 0), idb(LE, 101, 0, &[]), idb(LE, 101, 0, &[]), epb(LE, 0, 1, 20, 20, &payload(20))].concat();
    let raw_then_dlt = [shb(LE, 1, 0), idb(LE, 101, 0, &[]), idb(LE, 12, 0, &[]), epb(LE, 1, 1, 20, 20, &payload(20))].concat();
    check(vec![
        case("nanoseconds", one(LE, &[tsresol(LE, 9)]), Expect::Packets(2)),
        case("milliseconds", one(BE, &[tsresol(BE, 3)]), Expect::Packets(2)),
        case("seconds", one(LE, &[tsresol(LE, 0)]), Expect::Packets(2)),
        case("10^-8", one(LE, &[tsresol(LE, 8)]), Expect::Packets(2)),
        case("picoseconds", one(LE, &[tsresol(LE, 12)]), Expect::Packets(2)),
        case("10^-19", one(LE, &[tsresol(LE, 19)]), Expect::Packets(2)),
        case("10^-20", one(LE, &[tsresol(LE, 20)]), Expect::Refused(|k| matches!(k, K::TsresolTooFine { value: 20 }))),
        case("2^-0", one(LE, &[tsresol(LE, 0x80)]), Expect::Packets(2)),
        case("2^-10", one(LE, &[tsresol(LE, 0x8A)]), Expect::Packets(2)),
        case("2^-20", one(BE, &[tsresol(BE, 0x94)]), Expect::Packets(2)),
        case("2^-30", one(LE, &[tsresol(LE, 0x9E)]), Expect::Packets(2)),
        case("2^-40 wraps like libpcap", one(LE, &[tsresol(LE, 0xA8)]), Expect::Packets(2)),
        case("2^-63", one(LE, &[tsresol(LE, 0xBF)]), Expect::Packets(2)),
        case("2^-64", one(LE, &[tsresol(LE, 0xC0)]), Expect::Refused(|k| matches!(k, K::TsresolTooFine { value: 0xC0 }))),
        case(
            "if_tsresol of length 2",
            one(LE, &[opt(LE, 9, &[6, 0])]),
            Expect::Refused(|k| matches!(k, K::OptionLength { option: "if_tsresol", length: 2, expected: 1 })),
        ),
        case("two if_tsresol", one(LE, &[tsresol(LE, 6), tsresol(LE, 6)]), Expect::Refused(|k| matches!(k, K::DuplicateOption { .. }))),
        case("if_tsoffset", one(BE, &[tsoffset(BE, 1_000_000)]), Expect::Packets(2)),
        case("negative if_tsoffset", one(LE, &[tsoffset(LE, (-5i64) as u64), tsresol(LE, 9)]), Expect::Packets(2)),
        case(
            "if_tsoffset of length 4",
            one(LE, &[opt(LE, 14, &[0; 4])]),
            Expect::Refused(|k| matches!(k, K::OptionLength { option: "if_tsoffset", length: 4, expected: 8 })),
        ),
        case("two if_tsoffset", one(LE, &[tsoffset(LE, 1), tsoffset(LE, 1)]), Expect::Refused(|k| matches!(k, K::DuplicateOption { .. }))),
        case("other options", one(LE, &[opt(LE, 2, b"eth0"), opt(LE, 3, b"x"), opt(LE, 12, b"Linux 6")]), Expect::Packets(2)),
        case("options end at opt_endofopt", one(LE, &[end_of_options(LE), tsresol(LE, 200)]), Expect::Packets(2)),
        case(
            "opt_endofopt with a length",
            one(LE, &[opt(LE, 0, &[0; 4])]),
            Expect::Refused(|k| matches!(k, K::EndOfOptLength { length: 4 })),
        ),
        case(
            "option longer than its block",
            one(LE, &[Out::new(LE).u16(2).u16(40).u32(0).bytes]),
            Expect::Refused(|k| matches!(k, K::OptionOverrun { code: 2, length: 40, .. })),
        ),
        case(
            "interface block without room for its fixed part",
            [shb(LE, 1, 0), block(LE, 1, &[1, 0, 0, 0])].concat(),
            Expect::Refused(|k| matches!(k, K::FixedPartTooShort { need: 8, .. })),
        ),
        case(
            "interfaces with their own clocks",
            [
                shb(LE, 1, 0),
                idb(LE, 1, 0, &[]),
                idb(LE, 1, 0, &[tsresol(LE, 9), tsoffset(LE, 3)]),
                epb(LE, 1, 1_234_567_890_123, 4, 4, b"abcd"),
                epb(LE, 0, 1_234_567_890_123, 4, 4, b"abcd"),
            ]
            .concat(),
            Expect::Packets(2),
        ),
        case(
            "later interface with another link type",
            [pcapng_file(LE, &[], 1), idb(LE, 113, 0, &[])].concat(),
            Expect::Stops(1, |k| matches!(k, K::LinkTypeMismatch { link_type: 113, .. })),
        ),
        case(
            "LINKTYPE_RAW twice is refused, as libpcap refuses it",
            raw_twice,
            Expect::Stops(0, |k| matches!(k, K::LinkTypeMismatch { .. })),
        ),
        case("LINKTYPE_RAW then DLT_RAW is accepted, as libpcap accepts it", raw_then_dlt, Expect::Packets(1)),
        case(
            "later interface with another snapshot length",
            [pcapng_file(LE, &[], 1), idb(LE, 1, 1500, &[])].concat(),
            Expect::Stops(1, |k| matches!(k, K::SnaplenMismatch { snaplen: 1500, first: 262_144 })),
        ),
        case(
            "snapshot length 0 equals the maximum",
            [shb(BE, 1, 0), idb(BE, 1, 262_144, &[]), idb(BE, 1, 0, &[]), epb(BE, 1, 1, 4, 4, b"abcd")].concat(),
            Expect::Packets(1),
        ),
        case(
            "bad later interface options",
            [pcapng_file(LE, &[], 1), idb(LE, 1, 0, &[tsresol(LE, 99)])].concat(),
            Expect::Stops(1, |k| matches!(k, K::TsresolTooFine { .. })),
        ),
    ]);
}

#[test]
fn header_reports_the_file() {
    let header = |bytes: Vec<u8>| walk_whole(&bytes).header.expect("a header");
    let pcap = header([pcap_header(BE, NANO, (2, 4), 0, 0x3000_0001), pcap_record(BE, 0, 0, 4, 4, b"abcd")].concat());
    assert_eq!(
        pcap,
        TraceHeader {
            kind: TraceKind::Pcap,
            link_type: LinkType::ETHERNET,
            snaplen: 0,
            snapshot: 262_144,
            nanosecond: true,
            version: (2, 4),
            swapped: cfg!(target_endian = "little"),
            link_type_ext: 0x3000_0000,
        }
    );
    let pcapng = header([shb(LE, 1, 0), idb(LE, 113, 96, &[tsresol(LE, 0x94)])].concat());
    assert_eq!(
        pcapng,
        TraceHeader {
            kind: TraceKind::PcapNg,
            link_type: LinkType::LINUX_SLL,
            snaplen: 96,
            snapshot: 96,
            nanosecond: true,
            version: (1, 0),
            swapped: cfg!(target_endian = "big"),
            link_type_ext: 0,
        }
    );
    let micro = header(pcapng_file(BE, &[tsresol(BE, 6)], 0));
    assert!(!micro.nanosecond && micro.kind == TraceKind::PcapNg);
    assert!(!header(pcap_file(LE, 0)).nanosecond);
}

#[test]
fn steps_consume_one_record_or_block_each() {
    let file = pcapng_file(LE, &[], 1);
    let mut walker = Walker::new();
    assert_eq!(walker.next(&file[..3], 0, false), Ok(Step::Need { need: 4 }));
    assert_eq!(walker.next(&file[..4], 0, false), Ok(Step::Need { need: 12 }));
    assert_eq!(walker.next(&file[..12], 0, false), Ok(Step::Need { need: 28 }));
    assert_eq!(walker.next(&file, 0, true), Ok(Step::Skip { consumed: 28 }));
    assert!(walker.header().is_none());
    assert_eq!(walker.next(&file[28..], 28, true), Ok(Step::Header { consumed: 20 }));
    let Ok(Step::Packet(r)) = walker.next(&file[48..], 48, true) else { panic!("a packet") };
    assert_eq!((r.consumed, r.data, r.wire_len, r.ts_ns), (92, 28..88, 60, 1_700_000_000_123_456_000));
    assert_eq!(walker.next(&[], 140, true), Ok(Step::End));
    assert_eq!(walker.next(&[], 140, true), Ok(Step::End));
}

#[test]
fn errors_name_the_offset_and_values() {
    let file = [pcap_file(LE, 2), Out::new(LE).u32(0).u32(0).u32(300_000).u32(300_000).bytes].concat();
    let error = walk_whole(&file).error.expect("an error");
    assert_eq!(
        error.to_string(),
        "byte offset 176: packet record claims 300000 captured bytes, more than the 262144 maximum for link type 1"
    );
    let file = [pcapng_file(BE, &[], 1), idb(BE, 113, 0, &[])].concat();
    let error = walk_whole(&file).error.expect("an error");
    assert_eq!(error.offset, 140 + 8);
    assert!(error.to_string().contains("link type 113"), "{error}");
}

/// libpcap takes larger packets in D-Bus traces and in pcapng files with a large
/// snapshot length; weir holds 256 KiB and says so.
#[test]
fn packets_beyond_weirs_limit_are_errors() {
    let dbus = 231;
    let big = payload(300_000);
    let files = [
        [pcap_header(LE, MICRO, (2, 4), 0, dbus), pcap_record(LE, 0, 0, 300_000, 300_000, &big)].concat(),
        [shb(LE, 1, 0), idb(LE, dbus as u16, 0, &[]), epb(LE, 0, 0, 300_000, 300_000, &big)].concat(),
        [shb(BE, 1, 0), idb(BE, 1, 1_000_000, &[]), epb(BE, 0, 0, 300_000, 300_000, &big)].concat(),
    ];
    for file in files {
        let lib = oracle(&file);
        assert_eq!((lib.packets.len(), lib.error), (1, None), "libpcap reads it");
        let kind = walk_whole(&file).error.map(|e| e.kind);
        assert!(matches!(kind, Some(FormatErrorKind::CaplenOverWeirLimit { caplen: 300_000, .. })), "{kind:?}");
    }
}

/// Valid files of every kind, for the chunking properties.
fn valid_files() -> Vec<Vec<u8>> {
    vec![
        pcap_file(LE, 5),
        pcap_file(BE, 3),
        [pcap_header(LE, KUZNETZOV, (2, 4), 40, ETHERNET), kuznetzov_record(LE, 1, 60, 60, &payload(60))].concat(),
        [pcap_header(BE, NANO, (2, 3), 30, 101), pcap_record(BE, 1, 2, 10, 40, &payload(10)), pcap_record(BE, 1, 2, 40, 35, &payload(35))]
            .concat(),
        pcapng_file(LE, &[tsresol(LE, 9)], 4),
        [
            pcapng_file(BE, &[tsresol(BE, 0x94), tsoffset(BE, 7)], 2),
            block(BE, 5, &[0; 28]),
            shb(BE, 1, 0),
            idb(BE, 1, 0, &[]),
            spb(BE, 9, &payload(9)),
        ]
        .concat(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_splitting_gives_the_same_records(which in 0usize..6, steps in proptest::collection::vec(1usize..200, 1..64)) {
        let file = &valid_files()[which];
        let whole = walk_whole(file);
        prop_assert!(whole.error.is_none());
        let mut i = 0;
        let chunked = walk(file, || { i += 1; steps[i % steps.len()] });
        prop_assert_eq!(chunked, whole);
    }

    #[test]
    fn damaged_files_give_the_same_result_in_any_splitting(
        which in 0usize..6,
        damage in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        cut in any::<usize>(),
        steps in proptest::collection::vec(1usize..64, 1..16),
    ) {
        let mut file = valid_files()[which].clone();
        for (at, byte) in damage {
            let at = at % file.len();
            file[at] = byte;
        }
        file.truncate(file.len() - cut % 8);
        let whole = walk_whole(&file);
        let mut i = 0;
        let chunked = walk(&file, || { i += 1; steps[i % steps.len()] });
        prop_assert_eq!(chunked, whole);
    }
}

//! Fragment reassembly against a table of cases, then against a byte-map
//! model on random datagrams cut into random, shuffled, duplicated and
//! overlapping fragments (IPv4 takes overlaps, IPv6 drops the datagram at one
//! unless it is a copy of bytes already received). Fragments are cut from real datagrams (IPv4 headers
//! built by etherparse), so a complete datagram must come back equal to the
//! original byte for byte, and etherparse must read it as unfragmented.

use super::fragment::{Defrag, FragCounters, FragFailure, FragLimits, Malformed, Outcome};
use etherparse::{IpFragOffset, IpNumber, Ipv4Header, Ipv4Options, Ipv4Slice, Ipv6Slice};
use proptest::prelude::*;

const UDP: u8 = 17;
const TCP: u8 = 6;
const SECOND: u64 = 1_000_000_000;

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed)).collect()
}

/// An unfragmented IPv4 datagram carrying `payload`, with header `options`.
fn v4_datagram(id: u16, protocol: u8, options: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut h = Ipv4Header::new(0, 64, IpNumber(protocol), [192, 0, 2, 1], [198, 51, 100, 2]).unwrap();
    h.identification = id;
    h.dont_fragment = false;
    h.options = Ipv4Options::try_from(options).unwrap();
    h.total_len = (h.header_len() + payload.len()) as u16;
    h.header_checksum = h.calc_header_checksum();
    let mut d = h.to_bytes().to_vec();
    d.extend_from_slice(payload);
    d
}

/// The fragment of IPv4 `datagram` with its data from `lo` to `hi` (bytes of
/// the payload), MF set if `more`. Fragments after the first leave the
/// header options out, as options not marked for copying are.
fn v4_fragment(datagram: &[u8], lo: usize, hi: usize, more: bool) -> Vec<u8> {
    let (mut h, payload) = Ipv4Header::from_slice(datagram).unwrap();
    if lo > 0 {
        h.options = Ipv4Options::default();
    }
    h.more_fragments = more;
    h.fragment_offset = IpFragOffset::try_new((lo / 8) as u16).unwrap();
    h.total_len = (h.header_len() + hi - lo) as u16;
    h.header_checksum = h.calc_header_checksum();
    let mut f = h.to_bytes().to_vec();
    f.extend_from_slice(&payload[lo..hi]);
    f
}

/// An unfragmented IPv6 packet: the fixed header, extension headers of the
/// given types and lengths in bytes (multiples of 8), then `payload` as
/// `upper`.
fn v6_datagram(exts: &[(u8, usize)], upper: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x60, 0, 0, 0, 0, 0, exts.first().map_or(upper, |e| e.0), 64];
    p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    for (i, &(_, len)) in exts.iter().enumerate() {
        let next = exts.get(i + 1).map_or(upper, |e| e.0);
        let mut ext = vec![next, (len / 8 - 1) as u8];
        // PadN filling the rest, a valid option for hop-by-hop and
        // destination options; a routing header reads it as type and segments left.
        ext.extend_from_slice(&[1, (len - 4) as u8]);
        ext.resize(len, 0);
        p.extend_from_slice(&ext);
    }
    p.extend_from_slice(payload);
    let payload_len = (p.len() - 40) as u16;
    p[4..6].copy_from_slice(&payload_len.to_be_bytes());
    p
}

/// The fragment of IPv6 `packet`, whose unfragmentable part is its first
/// `unfrag` bytes, with fragmentable bytes `lo..hi`.
fn v6_fragment(packet: &[u8], unfrag: usize, id: u32, lo: usize, hi: usize, more: bool) -> Vec<u8> {
    let mut f = packet[..unfrag].to_vec();
    // The header before the Fragment header points at it; the Fragment
    // header takes over what it pointed at.
    let next_at = last_next_header_at(packet, unfrag);
    let upper = f[next_at];
    f[next_at] = 44;
    f.extend_from_slice(&[upper, 0]);
    f.extend_from_slice(&((lo as u16) | u16::from(more)).to_be_bytes());
    f.extend_from_slice(&id.to_be_bytes());
    f.extend_from_slice(&packet[unfrag + lo..unfrag + hi]);
    let payload_len = (f.len() - 40) as u16;
    f[4..6].copy_from_slice(&payload_len.to_be_bytes());
    f
}

/// Where the next header byte that leads past the first `unfrag` bytes is.
fn last_next_header_at(packet: &[u8], unfrag: usize) -> usize {
    let (mut next_at, mut at) = (6, 40);
    while at < unfrag {
        next_at = at;
        at += (usize::from(packet[at + 1]) + 1) * 8;
    }
    next_at
}

/// `fragment` (IPv4, fixed header only) moved to data offset `offset`.
fn with_offset(fragment: &[u8], offset: u16) -> Vec<u8> {
    let mut f = fragment.to_vec();
    let flags = u16::from_be_bytes([f[6], f[7]]) & 0xe000;
    f[6..8].copy_from_slice(&(flags | (offset / 8)).to_be_bytes());
    f
}

/// Checks that etherparse reads a complete datagram as a whole, unfragmented
/// IP packet with a right header checksum.
fn assert_valid(datagram: &[u8]) {
    match datagram[0] >> 4 {
        4 => {
            let s = Ipv4Slice::from_slice(datagram).expect("etherparse rejects the datagram");
            assert!(!s.payload().fragmented, "still a fragment");
            let h = s.header().to_header();
            assert_eq!(h.header_checksum, h.calc_header_checksum(), "header checksum");
            assert_eq!(usize::from(h.total_len), datagram.len());
        }
        _ => {
            let s = Ipv6Slice::from_slice(datagram).expect("etherparse rejects the packet");
            assert!(!s.payload().fragmented, "still a fragment");
            assert_eq!(usize::from(s.header().payload_length()) + 40, datagram.len());
        }
    }
}

/// What a push should give, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Expect {
    NotFragment,
    Held,
    Complete(Vec<u8>),
    Failed(FragFailure),
}

fn outcome(o: Outcome<'_>) -> Expect {
    match o {
        Outcome::NotFragment => Expect::NotFragment,
        Outcome::Held => Expect::Held,
        Outcome::Complete(d) => {
            assert_valid(d);
            Expect::Complete(d.to_vec())
        }
        Outcome::Failed(f) => Expect::Failed(f),
    }
}

fn assert_identities(c: &FragCounters) {
    assert_eq!(c.fragments, c.fragments_accounted(), "{c:?}");
    assert_eq!(c.datagrams, c.datagrams_accounted(), "{c:?}");
}

struct Case {
    name: &'static str,
    limits: FragLimits,
    /// (packet time, packet, what it should give)
    steps: Vec<(u64, Vec<u8>, Expect)>,
    /// The counters at the end, `bytes_held` aside.
    counters: FragCounters,
}

fn run_case(case: Case) {
    let mut d = Defrag::new(case.limits);
    for (i, (ts, packet, expect)) in case.steps.into_iter().enumerate() {
        let got = outcome(d.push(ts, &packet));
        assert_eq!(got, expect, "case {}: step {i}", case.name);
        assert_identities(&d.counters());
    }
    let c = FragCounters { bytes_held: 0, ..d.counters() };
    assert_eq!(c, case.counters, "case {}: counters", case.name);
}

/// Counters of `n` fragments making `k` reassembled datagrams.
fn reassembled(n: u64, k: u64) -> FragCounters {
    FragCounters { fragments: n, datagrams: k, datagrams_reassembled: k, fragments_reassembled: n, ..FragCounters::default() }
}

#[test]
fn table() {
    use Expect::{Complete, Failed, Held, NotFragment};
    let lim = FragLimits::default();
    let d = v4_datagram(7, UDP, &[], &bytes(40, 1));
    let f = |lo, hi, more| v4_fragment(&d, lo, hi, more);
    let with_options = v4_datagram(8, TCP, &[1, 1, 1, 0], &bytes(24, 2));
    let mut conflicting = f(8, 32, true);
    conflicting[20 + 4] ^= 0xff; // data byte 12, which (0..16) also carries
    let mut padded = f(32, 40, false);
    padded.extend_from_slice(&[0; 6]);
    let mut bad_ihl = f(16, 40, false);
    bad_ihl[0] = 0x44;
    let short = f(0, 16, true);
    let exts = [(0, 8), (43, 24), (60, 16)];
    let v6 = v6_datagram(&exts, UDP, &bytes(100, 3));
    let unfrag = 40 + 48;
    let g = |lo, hi, more| v6_fragment(&v6, unfrag, 99, lo, hi, more);
    let plain_v6 = v6_datagram(&[], TCP, &bytes(30, 4));
    let mut v6_other_bytes = g(0, 16, true);
    v6_other_bytes[unfrag + 8 + 3] ^= 0xff; // data byte 3, which the first copy carries
    let mut v6_cut = g(0, 48, true);
    v6_cut.truncate(40 + 4); // inside the hop-by-hop header
                             // Offset 65528 with 16 bytes: 20 + 65544 bytes.
    let too_big = with_offset(&v4_fragment(&v4_datagram(9, UDP, &[], &bytes(16, 5)), 0, 16, false), 65528);
    // Offset 65512 with 8 bytes, of the datagram `d` is: 20 + 65520 bytes.
    let too_big_last = with_offset(&f(32, 40, false), 65512);
    let d48 = v4_datagram(7, UDP, &[], &bytes(48, 1));
    let d1 = v4_datagram(1, UDP, &[], &bytes(48, 1));
    let z = FragCounters::default();
    let cases = vec![
        Case {
            name: "v4 in order",
            limits: lim,
            steps: vec![(0, f(0, 16, true), Held), (1, f(16, 32, true), Held), (2, f(32, 40, false), Complete(d.clone()))],
            counters: reassembled(3, 1),
        },
        Case {
            name: "v4 in reverse",
            limits: lim,
            steps: vec![(0, f(32, 40, false), Held), (0, f(16, 32, true), Held), (0, f(0, 16, true), Complete(d.clone()))],
            counters: reassembled(3, 1),
        },
        Case {
            name: "v4 overlapping with the same bytes",
            limits: lim,
            steps: vec![(0, f(0, 16, true), Held), (0, f(8, 32, true), Held), (0, f(24, 40, false), Complete(d.clone()))],
            counters: reassembled(3, 1),
        },
        Case {
            name: "v4 overlapping with other bytes: the first copy wins, counted",
            limits: lim,
            steps: vec![(0, f(0, 16, true), Held), (0, conflicting, Held), (0, f(32, 40, false), Complete(d.clone()))],
            counters: FragCounters { overlap_conflicts: 1, ..reassembled(3, 1) },
        },
        Case {
            name: "v4 duplicate, then a late copy starting a datagram of its own",
            limits: lim,
            steps: vec![
                (0, f(0, 16, true), Held),
                (0, f(0, 16, true), Held),
                (0, f(16, 40, false), Complete(d.clone())),
                (0, f(16, 40, false), Held),
            ],
            counters: FragCounters { fragments: 4, datagrams: 2, datagrams_held: 1, fragments_held: 1, ..reassembled(3, 1) },
        },
        Case {
            name: "v4 options kept from the first fragment, padding ignored",
            limits: lim,
            steps: vec![
                (0, v4_fragment(&with_options, 8, 24, false), Held),
                (0, v4_fragment(&with_options, 0, 8, true), Complete(with_options.clone())),
                (0, f(0, 32, true), Held),
                (0, padded, Complete(d.clone())),
            ],
            counters: reassembled(4, 2),
        },
        Case {
            name: "v4 empty last fragment, before and after the data",
            limits: lim,
            steps: vec![
                (0, f(40, 40, false), Held),
                (0, f(0, 40, true), Complete(d.clone())),
                (0, f(0, 40, true), Held),
                (0, f(40, 40, false), Complete(d.clone())),
            ],
            counters: reassembled(4, 2),
        },
        Case {
            name: "v4 missing last, timed out",
            limits: lim,
            steps: vec![(0, f(0, 16, true), Held), (SECOND, f(16, 32, true), Held), (31 * SECOND, d.clone(), NotFragment)],
            counters: FragCounters { fragments: 2, datagrams: 1, datagrams_timed_out: 1, fragments_timed_out: 2, ..z },
        },
        Case {
            name: "v4 not timed out at exactly the timeout",
            limits: lim,
            steps: vec![(5, f(0, 32, true), Held), (30 * SECOND + 5, f(32, 40, false), Complete(d.clone()))],
            counters: reassembled(2, 1),
        },
        Case {
            name: "v4 too big, alone and after fragments",
            limits: lim,
            steps: vec![
                (0, too_big, Failed(FragFailure::TooBig)),
                (0, f(0, 16, true), Held),
                (0, too_big_last, Failed(FragFailure::TooBig)),
            ],
            counters: FragCounters { fragments: 3, datagrams: 2, datagrams_too_big: 2, fragments_too_big: 3, ..z },
        },
        Case {
            name: "v4 end contradicted: first last fragment wins",
            limits: lim,
            steps: vec![
                (0, f(32, 40, false), Held),
                (0, v4_fragment(&d48, 40, 48, false), Failed(FragFailure::Inconsistent)),
                (0, v4_fragment(&d48, 24, 48, true), Failed(FragFailure::Inconsistent)),
                (0, f(0, 32, true), Complete(d.clone())),
            ],
            counters: FragCounters { inconsistent: 2, fragments: 4, ..reassembled(2, 1) },
        },
        Case {
            name: "v4 malformed",
            limits: lim,
            steps: vec![
                (0, v4_fragment(&d, 0, 12, true), Failed(FragFailure::Malformed(Malformed::NotMultipleOf8))),
                (0, short[..30].to_vec(), Failed(FragFailure::Malformed(Malformed::Truncated))),
                (0, bad_ihl, Failed(FragFailure::Malformed(Malformed::HeaderLength))),
                (0, vec![0x45, 0, 0], NotFragment),
                (0, vec![], NotFragment),
            ],
            counters: FragCounters { fragments: 3, malformed: 3, ..z },
        },
        Case {
            name: "v4 same id, other protocol: another datagram",
            limits: lim,
            steps: vec![
                (0, f(0, 16, true), Held),
                (0, v4_fragment(&v4_datagram(7, TCP, &[], &bytes(40, 1)), 16, 40, false), Held),
                (0, f(16, 40, false), Complete(d.clone())),
            ],
            counters: FragCounters { fragments: 3, datagrams: 2, datagrams_held: 1, fragments_held: 1, ..reassembled(2, 1) },
        },
        Case {
            name: "v6 behind hop-by-hop, routing and destination options, reversed",
            limits: lim,
            steps: vec![(0, g(48, 100, false), Held), (0, g(16, 48, true), Held), (0, g(0, 16, true), Complete(v6.clone()))],
            counters: reassembled(3, 1),
        },
        Case {
            name: "v6 atomic fragments: complete alone, never joined",
            limits: lim,
            steps: vec![
                (0, g(0, 16, true), Held),
                (0, g(0, 100, false), Complete(v6.clone())),
                (0, v6_fragment(&plain_v6, 40, 5, 0, 30, false), Complete(plain_v6.clone())),
                (0, plain_v6.clone(), NotFragment),
            ],
            counters: FragCounters { fragments: 3, datagrams: 3, datagrams_held: 1, fragments_held: 1, ..reassembled(2, 2) },
        },
        Case {
            name: "v6 overlapping with the same bytes: the datagram dropped, later fragments begin another",
            limits: lim,
            steps: vec![(0, g(0, 16, true), Held), (0, g(8, 32, true), Failed(FragFailure::Overlap)), (0, g(16, 100, false), Held)],
            counters: FragCounters {
                fragments: 3,
                datagrams: 2,
                datagrams_overlapping: 1,
                fragments_overlapping: 2,
                datagrams_held: 1,
                fragments_held: 1,
                ..z
            },
        },
        Case {
            name: "v6 a copy of received bytes with other bytes: an overlap",
            limits: lim,
            steps: vec![(0, g(48, 100, false), Held), (0, g(0, 16, true), Held), (0, v6_other_bytes, Failed(FragFailure::Overlap))],
            counters: FragCounters { fragments: 3, datagrams: 1, datagrams_overlapping: 1, fragments_overlapping: 3, ..z },
        },
        Case {
            name: "v6 exact duplicates and copies inside received bytes are taken, as copies",
            limits: lim,
            steps: vec![
                (0, g(0, 32, true), Held),
                (0, g(0, 32, true), Held),
                (0, g(8, 16, true), Held),
                (0, g(48, 100, false), Held),
                (0, g(48, 100, false), Held),
                (0, g(56, 64, true), Held),
                (0, g(32, 48, true), Complete(v6.clone())),
            ],
            counters: reassembled(7, 1),
        },
        Case {
            name: "v6 malformed, and a chain cut before the Fragment header",
            limits: lim,
            steps: vec![
                (0, g(0, 20, true), Failed(FragFailure::Malformed(Malformed::NotMultipleOf8))),
                (0, g(0, 48, true)[..140].to_vec(), Failed(FragFailure::Malformed(Malformed::Truncated))),
                (0, v6_cut, NotFragment),
            ],
            counters: FragCounters { fragments: 2, malformed: 2, ..z },
        },
        Case {
            name: "too many pending: the oldest goes",
            limits: FragLimits { max_datagrams: 2, ..lim },
            steps: vec![
                (0, v4_fragment(&v4_datagram(1, UDP, &[], &bytes(40, 1)), 0, 16, true), Held),
                (1, v4_fragment(&v4_datagram(2, UDP, &[], &bytes(40, 1)), 0, 16, true), Held),
                (2, f(0, 16, true), Held),
                (
                    3,
                    v4_fragment(&v4_datagram(2, UDP, &[], &bytes(40, 1)), 16, 40, false),
                    Complete(v4_datagram(2, UDP, &[], &bytes(40, 1))),
                ),
            ],
            counters: FragCounters {
                fragments: 4,
                datagrams: 3,
                datagrams_evicted: 1,
                fragments_evicted: 1,
                datagrams_held: 1,
                fragments_held: 1,
                ..reassembled(2, 1)
            },
        },
        Case {
            name: "no datagram may be pending",
            limits: FragLimits { max_datagrams: 0, ..lim },
            steps: vec![(0, f(0, 16, true), Failed(FragFailure::TooManyPending)), (0, g(0, 100, false), Complete(v6.clone()))],
            counters: FragCounters { fragments: 2, datagrams: 2, datagrams_evicted: 1, fragments_evicted: 1, ..reassembled(1, 1) },
        },
        Case {
            name: "memory: the oldest goes, even the fragment's own",
            limits: FragLimits { max_bytes: 60, ..lim },
            steps: vec![
                (0, f(0, 16, true), Held),
                (0, v4_fragment(&d1, 0, 16, true), Held),
                (0, v4_fragment(&d1, 32, 48, true), Failed(FragFailure::MemoryLimit)),
            ],
            counters: FragCounters { fragments: 3, datagrams: 2, datagrams_over_memory: 2, fragments_over_memory: 3, ..z },
        },
    ];
    for case in cases {
        run_case(case);
    }
}

#[test]
fn expire_alone_and_clock_never_goes_back() {
    let d = v4_datagram(3, UDP, &[], &bytes(40, 9));
    let mut defrag = Defrag::new(FragLimits { timeout_ns: 10, ..FragLimits::default() });
    assert_eq!(outcome(defrag.push(100, &v4_fragment(&d, 0, 16, true))), Expect::Held);
    // Stamped earlier than the clock: taken at the clock's time, 100.
    assert_eq!(outcome(defrag.push(50, &v4_fragment(&d, 16, 24, true))), Expect::Held);
    defrag.expire(110);
    assert_eq!(defrag.counters().datagrams_held, 1);
    defrag.expire(111);
    let c = defrag.counters();
    assert_eq!((c.datagrams_timed_out, c.fragments_timed_out, c.datagrams_held, c.bytes_held), (1, 2, 0, 0));
    // Later fragments of it make a new datagram, which does not complete.
    assert_eq!(outcome(defrag.push(0, &v4_fragment(&d, 24, 40, false))), Expect::Held);
    assert_identities(&defrag.counters());
}

#[test]
fn bytes_held_count_header_and_span() {
    let d = v4_datagram(3, UDP, &[], &bytes(400, 9));
    let mut defrag = Defrag::new(FragLimits::default());
    defrag.push(0, &v4_fragment(&d, 200, 208, true));
    assert_eq!(defrag.counters().bytes_held, 208, "data from offset 0, the hole included");
    defrag.push(0, &v4_fragment(&d, 0, 8, true));
    assert_eq!(defrag.counters().bytes_held, 228, "and the first fragment's header");
}

/// Checks a complete datagram's own lengths and flags (etherparse would also
/// judge the headers after it, which arbitrary bytes need not make valid).
fn assert_whole(d: &[u8]) {
    if d[0] >> 4 == 4 {
        assert_eq!(usize::from(u16::from_be_bytes([d[2], d[3]])), d.len(), "total length");
        assert_eq!(u16::from_be_bytes([d[6], d[7]]) & 0x3fff, 0, "MF or offset left");
        let ihl = usize::from(d[0] & 0xf) * 4;
        let sum: u32 = d[..ihl].chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
        assert_eq!((sum % 0xffff) as u16, 0, "header checksum");
    } else {
        assert_eq!(usize::from(u16::from_be_bytes([d[4], d[5]])) + 40, d.len(), "payload length");
    }
}

/// One fragment of a model run: the data range, and M.
#[derive(Clone, Debug)]
struct Piece {
    lo: usize,
    hi: usize,
}

/// Random cuts of `len` bytes into pieces on 8-byte boundaries, plus extra
/// pieces overlapping them (carrying the same bytes), in a shuffled order
/// with duplicates.
fn pieces(len: usize) -> impl Strategy<Value = Vec<Piece>> {
    let units = len.div_ceil(8);
    let cuts = proptest::collection::vec(1..units.max(2), 0..12);
    let extra = proptest::collection::vec((0..units, 1..units + 1), 0..6);
    (cuts, extra, proptest::collection::vec(any::<prop::sample::Index>(), 0..4), any::<u64>()).prop_map(
        move |(cuts, extra, dups, shuffle)| {
            let mut at: Vec<usize> = cuts.into_iter().filter(|&c| c < units).map(|c| c * 8).collect();
            at.extend([0, len]);
            at.sort_unstable();
            at.dedup();
            let mut v: Vec<Piece> = at.windows(2).map(|w| Piece { lo: w[0], hi: w[1] }).collect();
            for (a, n) in extra {
                let lo = a * 8;
                v.push(Piece { lo, hi: (lo + n * 8).min(len) });
            }
            for d in dups {
                let p = v[d.index(v.len())].clone();
                v.push(p);
            }
            // A seeded Fisher-Yates, so that a failing case shrinks and replays.
            let mut state = shuffle | 1;
            for i in (1..v.len()).rev() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                v.swap(i, (state % (i as u64 + 1)) as usize);
            }
            v
        },
    )
}

fn datagram_and_pieces() -> impl Strategy<Value = (bool, Vec<u8>, usize, Vec<Piece>)> {
    (any::<bool>(), 1usize..3000, any::<u8>(), 0usize..3).prop_flat_map(|(v6, len, seed, exts)| {
        let exts: Vec<(u8, usize)> = [(0, 8), (43, 24), (60, 16)][..exts].to_vec();
        let packet = if v6 { v6_datagram(&exts, UDP, &bytes(len, seed)) } else { v4_datagram(11, UDP, &[], &bytes(len, seed)) };
        let unfrag = if v6 { 40 + exts.iter().map(|e| e.1).sum::<usize>() } else { 20 };
        (Just(v6), Just(packet), Just(unfrag), pieces(len))
    })
}

proptest! {
    #[test]
    fn matches_model((v6, packet, unfrag, pieces) in datagram_and_pieces()) {
        let len = packet.len() - unfrag;
        let mut defrag = Defrag::new(FragLimits::default());
        // The model: which bytes a pending datagram has, whether its first
        // and last fragments came, and how many fragments it took.
        let mut have = vec![false; len];
        let (mut first, mut last, mut taken) = (false, false, 0u64);
        let (mut completes, mut fragments) = (0u64, 0u64);
        // IPv6 datagrams dropped for overlapping, and their fragments.
        let (mut dropped, mut overlapping) = (0u64, 0u64);
        for p in &pieces {
            let more = p.hi < len;
            let fragment = if v6 {
                v6_fragment(&packet, unfrag, 77, p.lo, p.hi, more)
            } else {
                v4_fragment(&packet, p.lo, p.hi, more)
            };
            if p.lo == 0 && !more {
                // The whole datagram in one piece: not a fragment in IPv4,
                // an atomic fragment in IPv6, complete by itself and leaving
                // the pending datagram alone.
                let got = outcome(defrag.push(0, &fragment));
                if v6 {
                    prop_assert_eq!(got, Expect::Complete(packet.clone()));
                    completes += 1;
                    fragments += 1;
                } else {
                    prop_assert_eq!(got, Expect::NotFragment);
                }
                continue;
            }
            fragments += 1;
            taken += 1;
            let had = have[p.lo..p.hi].iter().filter(|&&b| b).count();
            if v6 && had > 0 && had < p.hi - p.lo {
                // Partly new bytes over received ones: RFC 5722 drops the
                // datagram with every fragment it took (all the model's
                // pieces carry the datagram's own bytes, so a piece wholly
                // over received bytes is a copy, and taken).
                prop_assert_eq!(outcome(defrag.push(0, &fragment)), Expect::Failed(FragFailure::Overlap));
                overlapping += taken;
                dropped += 1;
                have.fill(false);
                (first, last, taken) = (false, false, 0);
                assert_identities(&defrag.counters());
                continue;
            }
            have[p.lo..p.hi].fill(true);
            first |= p.lo == 0;
            last |= !more;
            let done = first && last && have.iter().all(|&b| b);
            let got = outcome(defrag.push(0, &fragment));
            if done {
                prop_assert_eq!(got, Expect::Complete(packet.clone()));
                have.fill(false);
                (first, last, taken) = (false, false, 0);
                completes += 1;
            } else {
                prop_assert_eq!(got, Expect::Held);
            }
            assert_identities(&defrag.counters());
        }
        let c = defrag.counters();
        prop_assert_eq!(c.datagrams_reassembled, completes);
        prop_assert_eq!(c.fragments_held, taken);
        prop_assert_eq!(c.datagrams_held, u64::from(taken > 0));
        prop_assert_eq!(c.overlap_conflicts, 0);
        prop_assert_eq!(c.fragments, fragments);
        prop_assert_eq!((c.datagrams_overlapping, c.fragments_overlapping), (dropped, overlapping));
    }

    /// Whatever the bytes, a push never panics (the debug assertions check
    /// the counters and the held datagrams after every call), the identities
    /// hold, and a complete datagram reads as a whole packet.
    #[test]
    fn arbitrary_packets(packets in proptest::collection::vec((0u64..40, proptest::collection::vec(any::<u8>(), 0..120)), 0..60)) {
        let mut defrag = Defrag::new(FragLimits { max_datagrams: 3, max_bytes: 400, timeout_ns: 20 });
        for (ts, mut packet) in packets {
            // Mostly IPv4 or IPv6 fragments of few keys and small offsets,
            // whose lengths agree with the capture, so that they meet.
            if packet.len() > 48 {
                let len = packet.len() as u16;
                if packet[1] & 1 == 0 {
                    packet[0] = 0x45;
                    packet[2..4].copy_from_slice(&len.to_be_bytes());
                    packet[5] = packet[4] & 1;
                    packet[4] = 0;
                    packet[6] &= 0x20;
                    packet[12..20].fill(0);
                } else {
                    packet[0] = 0x60;
                    packet[4..6].copy_from_slice(&(len - 40).to_be_bytes());
                    packet[6] = 44;
                    packet[8..40].fill(0);
                    packet[42] = 0;
                    packet[44..47].fill(0);
                    packet[47] &= 1;
                }
            }
            if let Outcome::Complete(d) = defrag.push(ts, &packet) {
                assert_whole(d);
            }
            assert_identities(&defrag.counters());
        }
    }
}

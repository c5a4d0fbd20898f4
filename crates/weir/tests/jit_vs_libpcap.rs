//! The filter JIT against weir's interpreter and libpcap's own `bpf_filter`
//! (through `pcap_offline_filter`), on thousands of generated expressions.
//!
//! Contract: for every expression the generator makes (combinations of
//! primitives, arithmetic and `and`/`or`/`not`) that libpcap compiles, and
//! for every expression in tcpdump's test list, the JIT returns exactly the
//! interpreter's 32-bit value on every packet tried, and that value is nonzero
//! exactly when libpcap passes the packet. The packets are header stacks built
//! to match the generated constants, then damaged and cut short at random
//! (always run), and the packets of the corpus traces, whole and truncated
//! (`#[ignore]`d like the other corpus tests: `make test` runs them).
//! Each run also asserts that many expressions match some packet and many
//! reject some, so the agreement is not a trivial one.

use std::path::{Path, PathBuf};

use weir::filter::oracle::{Oracle, OraclePacket};
use weir::filter::{Filter, FilterEngine, FilterError};
use weir::LinkType;

const SNAPLEN: u32 = 65535;
/// How many expressions the generator makes for each test.
const EXPRESSIONS: usize = 2500;

fn oracle() -> &'static Oracle {
    Oracle::system().unwrap_or_else(|e| panic!("{e}"))
}

/// splitmix64: a fixed seed gives the same expressions and packets on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len())]
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

// Constants the expressions ask about; the packet builder draws from the same
// pools, so that a fair share of packets match.
const PORTS: [u16; 10] = [22, 25, 53, 80, 123, 443, 1000, 5353, 8080, 33000];
const HOSTS: [[u8; 4]; 6] = [[10, 0, 0, 1], [10, 1, 2, 3], [192, 168, 1, 1], [141, 142, 220, 202], [208, 80, 152, 2], [172, 16, 5, 9]];
const NETS: [(&str, u8); 6] =
    [("10.0.0.0", 8), ("192.168.0.0", 16), ("141.142.0.0", 16), ("172.16.0.0", 12), ("208.80.152.0", 22), ("0.0.0.0", 1)];
const MACS: [[u8; 6]; 3] = [[0, 1, 2, 3, 4, 5], [0xff; 6], [0x01, 0x00, 0x5e, 0, 0, 0xfb]];

fn ip(h: [u8; 4]) -> String {
    format!("{}.{}.{}.{}", h[0], h[1], h[2], h[3])
}

fn mac(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// One primitive of the filter language, with its constants drawn at random.
fn primitive(r: &mut Rng) -> String {
    let port = |r: &mut Rng| if r.chance(80) { r.pick(&PORTS) } else { r.next() as u16 };
    let host = |r: &mut Rng| ip(if r.chance(85) { r.pick(&HOSTS) } else { (r.next() as u32).to_be_bytes() });
    let small = |r: &mut Rng, n: u64| r.next() % n;
    match r.below(40) {
        0 => "tcp".into(),
        1 => "udp".into(),
        2 => "icmp".into(),
        3 => r.pick(&["ip", "ip6", "arp", "icmp6", "mpls", "ip multicast", "ether broadcast", "ether multicast"]).into(),
        4 => {
            if r.chance(50) {
                "vlan".into()
            } else {
                format!("vlan {}", small(r, 8))
            }
        }
        5 => format!("port {}", port(r)),
        6 => format!("{} port {}", r.pick(&["tcp", "udp"]), port(r)),
        7 => format!("{} port {}", r.pick(&["src", "dst"]), port(r)),
        8 => {
            let a = port(r);
            let b = a.saturating_add(small(r, 2000) as u16);
            format!("{}portrange {a}-{b}", r.pick(&["", "tcp ", "udp ", "dst "]))
        }
        9 => format!("host {}", host(r)),
        10 => format!("{} host {}", r.pick(&["src", "dst", "ip"]), host(r)),
        11 => {
            let (n, m) = r.pick(&NETS);
            format!("{}net {n}/{m}", r.pick(&["", "src ", "dst "]))
        }
        12 => format!("ether {} {}", r.pick(&["host", "src", "dst"]), mac(r.pick(&MACS))),
        13 => format!("len {} {}", r.pick(&["<", ">", "<=", ">=", "="]), small(r, 1600)),
        14 => format!("{} {}", r.pick(&["greater", "less"]), small(r, 1600)),
        15 => format!("ip[{}] & {:#x} != 0", small(r, 24), small(r, 256)),
        16 => format!("ip[{}:2] {} {}", small(r, 20), r.pick(&[">", "<", "="]), small(r, 65536)),
        17 => format!("tcp[tcpflags] & ({}) != 0", r.pick(&["tcp-syn", "tcp-fin|tcp-rst", "tcp-syn|tcp-ack", "tcp-push", "tcp-urg"])),
        18 => format!("tcp[13] = {}", r.pick(&[2, 16, 18, 24, 17, 4])),
        19 => format!("ip[2:2] - ((ip[0]&0xf)<<2) > {}", small(r, 1500)),
        20 => format!("ip proto {}", r.pick(&[1, 6, 17, 47, 50, 89])),
        21 => format!("ip6 protochain {}", r.pick(&[6, 17, 58, 44])),
        22 => "ip[6:2] & 0x1fff != 0".into(),
        23 => format!("udp[8:2] = {}", small(r, 4)),
        24 => "tcp[((tcp[12:1] & 0xf0) >> 2):4] = 0x47455420".into(),
        25 => format!("ip[2:2] * {} + {} > {}", small(r, 5) + 1, small(r, 100), small(r, 5000)),
        26 => format!("(ip[0] & 0xf) / {} = {}", small(r, 4) + 1, small(r, 6)),
        27 => format!("ip[8] % {} = {}", small(r, 7) + 1, small(r, 3)),
        28 => format!("ip[1] ^ {:#x} > {}", small(r, 256), small(r, 256)),
        29 => format!("ip[4:2] >> {} = {}", small(r, 16), small(r, 16)),
        30 => format!("-ip[9] != {}", small(r, 3)),
        31 => format!("len - 14 > {}", small(r, 1500)),
        32 => format!("ip[{}] / ip[{}] > {}", small(r, 20), small(r, 20), small(r, 4)),
        33 => format!("ip[{}] % ip[{}] = {}", small(r, 20), small(r, 20), small(r, 3)),
        34 => format!("ip[0] << ip[{}] > {}", small(r, 20), small(r, 1000)),
        35 => format!("ip6 {} 2001:db8::/{}", r.pick(&["net", "src net", "dst net"]), r.pick(&[32, 48, 64])),
        36 => format!("icmp[icmptype] = {}", r.pick(&["icmp-echo", "icmp-echoreply", "icmp-unreach"])),
        37 => format!("ether proto {:#x}", r.pick(&[0x0800, 0x86dd, 0x0806, 0x8100, 0x88cc])),
        38 => format!("ether[{}] & 1 = 1", small(r, 14)),
        _ => {
            // A long `or` chain, for programs of 50 instructions and more.
            let n = 4 + r.below(12);
            (0..n).map(|_| format!("port {}", port(r))).collect::<Vec<_>>().join(" or ")
        }
    }
}

/// An expression: a primitive, or up to `depth` levels of `and`, `or` and `not`.
fn expression(r: &mut Rng, depth: u32) -> String {
    if depth == 0 || r.chance(35) {
        return primitive(r);
    }
    match r.below(5) {
        0 => format!("not ({})", expression(r, depth - 1)),
        1 | 2 => format!("({}) and ({})", expression(r, depth - 1), expression(r, depth - 1)),
        _ => format!("({}) or ({})", expression(r, depth - 1), expression(r, depth - 1)),
    }
}

/// An Ethernet frame (maybe VLAN-tagged) carrying IPv4 or IPv6 with TCP, UDP
/// or ICMP, its fields drawn from the pools above, then damaged in a few
/// random bytes and cut short at a random length half the time.
fn packet(r: &mut Rng) -> (Vec<u8>, u32) {
    let mut p = Vec::with_capacity(128);
    p.extend(r.pick(&MACS));
    p.extend(r.pick(&MACS));
    if r.chance(20) {
        p.extend([0x81, 0x00, 0, r.below(8) as u8]);
    }
    let proto = r.pick(&[6u8, 17, 1, 58, 47]);
    let l4_len = match proto {
        6 => 20 + 4 * r.below(3),
        17 => 8,
        _ => 8,
    };
    let payload = r.below(40);
    if r.chance(70) {
        p.extend([0x08, 0x00]);
        let ihl = if r.chance(85) { 5 } else { 5 + r.below(3) };
        let total = (ihl * 4 + l4_len + payload) as u16;
        p.extend([0x40 | ihl as u8, r.next() as u8]);
        p.extend(total.to_be_bytes());
        p.extend([0, 1, if r.chance(90) { 0 } else { 0x20 }, 0, 64, proto, 0, 0]);
        p.extend(r.pick(&HOSTS));
        p.extend(r.pick(&HOSTS));
        p.extend(std::iter::repeat_n(0u8, (ihl - 5) * 4));
    } else {
        p.extend([0x86, 0xdd, 0x60, 0, 0, 0]);
        p.extend(((l4_len + payload) as u16).to_be_bytes());
        p.extend([if proto == 1 { 58 } else { proto }, 64]);
        for _ in 0..2 {
            p.extend([0x20, 0x01, 0x0d, 0xb8]);
            p.extend((0..12).map(|_| r.below(3) as u8));
        }
    }
    let (sport, dport) = (r.pick(&PORTS), r.pick(&PORTS));
    p.extend(sport.to_be_bytes());
    p.extend(dport.to_be_bytes());
    if proto == 6 {
        p.extend([0, 0, 0, 1, 0, 0, 0, 0, ((l4_len / 4) as u8) << 4, r.pick(&[2u8, 16, 18, 24, 17, 4]), 0x20, 0, 0, 0, 0, 0]);
        p.extend(std::iter::repeat_n(1u8, l4_len - 20));
    } else {
        p.extend([0, 8, 0, 0]);
    }
    p.extend((0..payload).map(|_| if r.chance(50) { r.below(4) as u8 } else { r.next() as u8 }));
    for _ in 0..r.below(3) {
        let at = r.below(p.len());
        p[at] = r.next() as u8;
    }
    let wire = p.len() as u32 + if r.chance(20) { r.below(1500) as u32 } else { 0 };
    if r.chance(50) {
        p.truncate(r.below(p.len() + 1));
    }
    (p, wire)
}

/// What one run of the comparison saw.
#[derive(Default, Debug)]
struct Tally {
    compiled: usize,
    refused: usize,
    verdicts: usize,
    /// Expressions that passed at least one packet, and that rejected at least one.
    matched_some: usize,
    rejected_some: usize,
    /// The largest program compiled, in instructions.
    longest: usize,
}

/// Compile `expr` for `link` and compare the three engines on every packet.
/// An expression libpcap refuses is counted, not compared.
fn compare(expr: &str, link: u32, packets: &[(Vec<u8>, u32)], tally: &mut Tally) {
    let jit = match Filter::compile(expr, LinkType(link), SNAPLEN) {
        Ok(f) => f,
        Err(FilterError::Compile { .. }) => {
            tally.refused += 1;
            return;
        }
        Err(e) => panic!("{expr:?}: {e}"),
    };
    if cfg!(target_arch = "x86_64") {
        assert_eq!(jit.engine(), FilterEngine::Jit, "{expr:?}: {:?}", jit.jit_unavailable());
    }
    let interp = jit.clone().with_engine(FilterEngine::Interp);
    tally.compiled += 1;
    tally.longest = tally.longest.max(jit.len());
    let (mut passed, mut rejected) = (false, false);
    for (n, (data, wire)) in packets.iter().enumerate() {
        let got = jit.run(data, *wire);
        let expected = interp.run(data, *wire);
        assert_eq!(
            got,
            expected,
            "{expr:?} on packet {n} ({} of {wire} bytes {data:02x?}): JIT {got:#x}, interpreter {expected:#x}",
            data.len()
        );
        let libpcap = oracle().offline_filter(jit.program(), data, *wire);
        assert_eq!(
            got != 0,
            libpcap,
            "{expr:?} on packet {n} ({} of {wire} bytes {data:02x?}): weir {got:#x}, libpcap {libpcap}",
            data.len()
        );
        passed |= libpcap;
        rejected |= !libpcap;
    }
    tally.verdicts += packets.len();
    tally.matched_some += usize::from(passed);
    tally.rejected_some += usize::from(rejected);
}

fn check(tally: &Tally, expressions: usize) {
    println!("{tally:?}");
    assert_eq!(tally.compiled + tally.refused, expressions);
    assert!(tally.compiled >= 2000, "only {} expressions compiled", tally.compiled);
    assert!(tally.matched_some >= tally.compiled / 3, "too few expressions matched anything: {tally:?}");
    assert!(tally.rejected_some >= tally.compiled / 2, "too few expressions rejected anything: {tally:?}");
    assert!(tally.longest >= 50, "no program of 50 instructions or more: {tally:?}");
}

#[test]
fn generated_expressions_on_built_and_damaged_packets() {
    let mut r = Rng(22);
    let packets: Vec<(Vec<u8>, u32)> = (0..300).map(|_| packet(&mut r)).chain([(vec![], 0), (vec![], 60)]).collect();
    let mut tally = Tally::default();
    for _ in 0..EXPRESSIONS {
        let expr = expression(&mut r, 3);
        compare(&expr, 1, &packets, &mut tally);
    }
    check(&tally, EXPRESSIONS);
}

/// `../shared/corpus`; a test asked for without it fails and says where it looked.
fn corpus() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus");
    assert!(dir.is_dir(), "this test needs the corpus, and ../shared/corpus is not there (looked at {})", dir.display());
    dir
}

/// The packets of a trace as libpcap reads them, and libpcap's `DLT_` value for it.
fn read_trace(path: &Path) -> (u32, Vec<OraclePacket>) {
    let mut handle = oracle().open_offline(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut packets = Vec::new();
    while let Some(p) = handle.next_packet().unwrap_or_else(|e| panic!("{}: {e}", path.display())) {
        packets.push(p);
    }
    (handle.link_type(), packets)
}

/// Ethernet traces of the corpus: VLAN stacks, MPLS, PPPoE, GRE, IPv6
/// extension headers (protochain's loop), fragments and truncated captures.
const ETHERNET_TRACES: &[&str] = &[
    "zeek-traces/wikipedia.pcap",
    "zeek-traces/vlan-qinqinq.pcap",
    "zeek-traces/mixed-vlan-mpls.pcap",
    "zeek-traces/pppoe-over-qinq.pcap",
    "zeek-traces/tunnels/gre-sample.pcap",
    "zeek-traces/ipv4/fragmented-3.pcap",
    "zeek-traces/ipv6-fragmented-dns.pcap",
    "zeek-traces/tcp/truncated-header.pcap",
    "zeek-traces/http/bro.org.pcap",
    "tcpdump-4.99.3/OSPFv3_with_AH.pcap",
    "tcpdump-4.99.3/icmpv6.pcap",
    "tcpdump-4.99.3/ipv6-routing-header.pcap",
    "tcpdump-4.99.3/IGMP_V2.pcap",
];

/// Packets taken from each Ethernet trace, whole and cut short.
const PER_TRACE: usize = 120;

#[test]
#[ignore = "needs the corpus in ../shared/corpus"]
fn generated_expressions_on_corpus_packets_whole_and_truncated() {
    let corpus = corpus();
    let mut r = Rng(0x22_0022);
    let mut packets = Vec::new();
    for file in ETHERNET_TRACES {
        let (dlt, trace) = read_trace(&corpus.join(file));
        assert_eq!(dlt, 1, "{file} is Ethernet");
        assert!(!trace.is_empty(), "{file} has no packets");
        let step = trace.len().div_ceil(PER_TRACE);
        for p in trace.iter().step_by(step) {
            packets.push((p.data.clone(), p.wire_len));
            let cut = r.below(p.data.len().min(80) + 1);
            packets.push((p.data[..cut].to_vec(), p.wire_len));
        }
    }
    println!("{} packets from {} traces", packets.len(), ETHERNET_TRACES.len());
    let mut tally = Tally::default();
    for _ in 0..EXPRESSIONS {
        let expr = expression(&mut r, 3);
        compare(&expr, 1, &packets, &mut tally);
    }
    check(&tally, EXPRESSIONS);
}

/// The filter expressions of tcpdump's test list (`TESTLIST`: name, trace,
/// expected output, then options and the expression), with their traces.
fn tcpdump_tests(dir: &Path) -> Vec<(String, PathBuf)> {
    let list = std::fs::read_to_string(dir.join("TESTLIST")).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut tests = Vec::new();
    for line in list.lines().filter(|l| !l.trim_start().starts_with('#')) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let Some(rest) = fields.get(3..) else { continue };
        let mut expr = Vec::new();
        let mut skip = false;
        for &f in rest {
            if std::mem::take(&mut skip) {
                continue;
            }
            if f.starts_with('-') {
                // -T is the only option of the list that takes a separate argument.
                skip = f == "-T";
                continue;
            }
            expr.push(f.trim_matches('"'));
        }
        if !expr.is_empty() {
            tests.push((expr.join(" "), dir.join(fields[1])));
        }
    }
    tests
}

#[test]
#[ignore = "needs the corpus in ../shared/corpus"]
fn every_expression_of_tcpdumps_test_list() {
    let tests = tcpdump_tests(&corpus().join("tcpdump-4.99.3"));
    assert!(tests.len() >= 3, "tcpdump 4.99.3's list has three filtered tests: {tests:?}");
    let mut tally = Tally::default();
    for (expr, trace) in &tests {
        let (dlt, whole) = read_trace(trace);
        // The list's filtered tests are on Ethernet, whose DLT_ and LINKTYPE_ values are both 1.
        assert_eq!(dlt, 1, "{}", trace.display());
        let mut packets: Vec<(Vec<u8>, u32)> = Vec::new();
        for p in &whole {
            packets.extend((0..=p.data.len()).step_by(7).map(|cut| (p.data[..cut].to_vec(), p.wire_len)));
            packets.push((p.data.clone(), p.wire_len));
        }
        compare(expr, 1, &packets, &mut tally);
    }
    println!("{tally:?}");
    assert_eq!(tally.compiled, tests.len(), "libpcap compiles every expression of the list: {tally:?}");
    assert_eq!(tally.matched_some, tests.len(), "every expression of the list matches some packet of its trace: {tally:?}");
}

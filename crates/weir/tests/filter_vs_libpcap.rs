//! weir's filter against libpcap's own `pcap_offline_filter`, on real traffic.
//!
//! Contract: for every expression below that libpcap compiles for a trace's link
//! type, every packet of the trace (as the system libpcap reads it) gets the same
//! verdict from weir's interpreter as from libpcap, the program weir compiles from
//! the trace's `LINKTYPE_` value is the one libpcap compiles from its `DLT_`
//! value, and at least 20 expressions match some packet somewhere, so the
//! agreement is not just "everything rejected". Expressions libpcap refuses give
//! `FilterError::Compile` carrying libpcap's message unchanged.
//!
//! The corpus lives outside the repository, at `../shared/corpus`; the tests
//! that read it are ignored by a plain `cargo test` and run in `make test`'s
//! privileged step (`cargo test -- --ignored`), where its absence is a failure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use weir::filter::libpcap::Libpcap;
use weir::filter::oracle::{Oracle, OraclePacket};
use weir::filter::{Filter, FilterError};
use weir::LinkType;

const SNAPLEN: u32 = 65535;

/// The traces, with the `LINKTYPE_` value of each: Ethernet with VLAN stacks,
/// MPLS, PPPoE, GRE, LLDP, IPv6 extension headers, truncated captures and pcapng,
/// then BSD loopback, Linux cooked v1 and v2, raw IP, raw IPv4 and IPv6, 802.11
/// with and without radiotap, PPP, FDDI, Cisco HDLC and NFLOG.
const TRACES: &[(&str, u32)] = &[
    ("zeek-traces/wikipedia.pcap", 1),
    ("zeek-traces/modbus/modbusBig.pcap", 1),
    ("zeek-traces/quic/chromium-115.0.5790.110-google-de-fragmented.pcap", 1),
    ("zeek-traces/vlan-qinqinq.pcap", 1),
    ("zeek-traces/mixed-vlan-mpls.pcap", 1),
    ("zeek-traces/pppoe-over-qinq.pcap", 1),
    ("zeek-traces/pppoe.pcap", 1),
    ("zeek-traces/tunnels/gre-sample.pcap", 1),
    ("zeek-traces/ipv4/fragmented-3.pcap", 1),
    ("zeek-traces/ipv6-fragmented-dns.pcap", 1),
    ("zeek-traces/arp-leak.pcap", 1),
    ("zeek-traces/tcp/timestamp.pcap", 1),
    ("zeek-traces/tcp/truncated-header.pcap", 1),
    ("zeek-traces/vlan-pcp-dei.pcapng", 1),
    ("tcpdump-4.99.3/LLDP_and_CDP.pcap", 1),
    ("tcpdump-4.99.3/OSPFv3_with_AH.pcap", 1),
    ("tcpdump-4.99.3/icmpv6.pcap", 1),
    ("tcpdump-4.99.3/ipv6-routing-header.pcap", 1),
    ("tcpdump-4.99.3/IGMP_V2.pcap", 1),
    ("zeek-traces/http/connect-with-header.pcap", 0),
    ("tcpdump-4.99.3/mptcp-v1.pcap", 113),
    ("zeek-traces/linux_dlt_sll2.pcap", 276),
    ("zeek-traces/tls/ml-dsa-44-cert.pcap", 101),
    ("zeek-traces/sip/sip-long-request-response-paths.pcap", 228),
    ("zeek-traces/icmp/icmp6-mldv2.pcap", 229),
    ("tcpdump-4.99.3/ieee802.11_exthdr.pcap", 127),
    ("zeek-traces/wlanmon.pcap", 105),
    ("zeek-traces/ppp/quic-interop-retry.pcap", 9),
    ("zeek-traces/llc.pcap", 10),
    ("tcpdump-4.99.3/ISIS_p2p_adjacency.pcap", 104),
    ("zeek-traces/nflog-http.pcap", 239),
];

const EXPRESSIONS: &[&str] = &[
    "tcp port 80",
    "udp and port 53",
    "host 192.168.1.1 or host 141.142.220.202",
    "net 10.0.0.0/8",
    "ip6",
    "vlan and tcp",
    "tcp[tcpflags] & (tcp-syn|tcp-fin) != 0",
    "icmp or icmp6",
    "ether broadcast",
    "ether multicast",
    "ip[6:2] & 0x1fff != 0",
    "len > 1000",
    "greater 500",
    "less 64",
    "not arp",
    "arp or rarp",
    "portrange 1000-2000",
    "dst portrange 1-1023",
    "ip proto 47",
    "tcp and (dst port 443 or src port 443)",
    "ether proto 0x88cc",
    "mpls",
    "vlan and mpls",
    "pppoes or pppoed",
    "vlan and vlan and pppoes and tcp port 443",
    "ip multicast",
    "ip6 multicast",
    "udp[8:4] = 0",
    "ip6 protochain 6",
    "ip6 protochain 17",
    "ip6 protochain 44",
    "ip6 and (udp or tcp) and not port 22",
    "ip and ip[0] & 0xf > 5",
    "ip[2:2] / 4 > 300 and ip[8] % 2 = 1",
    "udp[0:2] ^ udp[2:2] > 100",
    "tcp[13] & 2 != 0 and tcp[2:2] < 1024",
    "icmp[icmptype] = icmp-echo",
    "ip6[6] = 58",
    "link[0] & 1 = 1",
    "wlan type data",
    "type mgt subtype probe-req",
    "inbound",
    "not outbound",
    "ifindex 1",
];

/// `../shared/corpus`; a test asked for without it fails and says where it looked.
fn corpus() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus");
    assert!(dir.is_dir(), "this test needs the corpus, and ../shared/corpus is not there (looked at {})", dir.display());
    dir
}

fn lib() -> &'static Libpcap {
    Libpcap::system().unwrap_or_else(|e| panic!("{e}"))
}

fn oracle() -> &'static Oracle {
    Oracle::system().unwrap_or_else(|e| panic!("{e}"))
}

/// Every packet of a trace as libpcap reads it, and libpcap's `DLT_` value for it.
fn read_trace(path: &Path) -> (u32, Vec<OraclePacket>) {
    let mut handle = oracle().open_offline(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut packets = Vec::new();
    while let Some(p) = handle.next_packet().unwrap_or_else(|e| panic!("{}: {e}", path.display())) {
        packets.push(p);
    }
    (handle.link_type(), packets)
}

/// Whether the program loads from a Linux ancillary offset (`SKF_AD_OFF` and up),
/// directly or indexed.
fn loads_ancillary_data(filter: &Filter) -> bool {
    filter.program().iter().any(|i| matches!(i.code, 0x20 | 0x28 | 0x30 | 0x40 | 0x48 | 0x50) && i.k >= 0xffff_f000)
}

/// What one expression did across the corpus.
#[derive(Default)]
struct Tally {
    traces: usize,
    packets: usize,
    matched: usize,
}

#[test]
#[ignore = "needs the corpus in ../shared/corpus"]
fn every_packet_of_the_corpus_gets_libpcaps_verdict() {
    let corpus = corpus();
    let mut tallies: BTreeMap<&str, Tally> = BTreeMap::new();
    let mut disagreements = Vec::new();
    let (mut compared, mut weir_matched, mut libpcap_matched, mut refused) = (0usize, 0usize, 0usize, 0usize);
    let mut total_packets = 0usize;
    let mut ancillary = Vec::new();
    for &(file, link) in TRACES {
        let path = corpus.join(file);
        let (dlt, packets) = read_trace(&path);
        assert!(!packets.is_empty(), "{file} has no packets");
        total_packets += packets.len();
        for &expr in EXPRESSIONS {
            let filter = match Filter::compile(expr, LinkType(link), SNAPLEN) {
                Ok(f) => f,
                Err(FilterError::Compile { message, .. }) => {
                    assert_eq!(
                        lib().compile(expr, dlt, SNAPLEN, true).map_err(|e| e.to_string()),
                        Err(message),
                        "{file}: weir and libpcap disagree on compiling {expr:?}"
                    );
                    refused += 1;
                    continue;
                }
                Err(e) => panic!("{file}: {expr:?}: {e}"),
            };
            assert_eq!(
                Ok(filter.program().to_vec()),
                lib().compile(expr, dlt, SNAPLEN, true).map_err(|e| e.to_string()),
                "{file}: LINKTYPE {link} and DLT {dlt} compile {expr:?} differently"
            );
            if loads_ancillary_data(&filter) {
                ancillary.push(format!("{file}: {expr:?}"));
            }
            let tally = tallies.entry(expr).or_default();
            tally.traces += 1;
            for (n, p) in packets.iter().enumerate() {
                let ours = filter.matches(&p.data, p.wire_len);
                let theirs = oracle().offline_filter(filter.program(), &p.data, p.wire_len);
                if ours != theirs {
                    disagreements.push(format!("{file} packet {n}: {expr:?}: weir {ours}, libpcap {theirs}"));
                }
                compared += 1;
                tally.packets += 1;
                weir_matched += usize::from(ours);
                libpcap_matched += usize::from(theirs);
                tally.matched += usize::from(ours);
            }
        }
    }
    println!("{:<45} {:>6} {:>8} {:>8}", "expression", "traces", "packets", "matched");
    for (expr, t) in &tallies {
        println!("{expr:<45} {:>6} {:>8} {:>8}", t.traces, t.packets, t.matched);
    }
    println!(
        "{} traces, {total_packets} packets, {} expressions: {compared} verdicts compared, {refused} compilations refused by libpcap",
        TRACES.len(),
        EXPRESSIONS.len()
    );
    // pcap_open_dead handles get the live-Linux code for these: the packet type or
    // interface index from the kernel, which an offline packet lacks.
    println!("programs with Linux ancillary loads ({}): {}", ancillary.len(), ancillary.join(", "));
    assert!(!ancillary.is_empty());
    assert!(disagreements.is_empty(), "{} disagreements:\n{}", disagreements.len(), disagreements.join("\n"));
    assert_eq!(weir_matched, libpcap_matched);
    assert!(TRACES.len() >= 15 && EXPRESSIONS.len() >= 24);
    let compiled_everywhere = tallies.values().filter(|t| t.traces > 0).count();
    assert!(compiled_everywhere >= 24, "only {compiled_everywhere} expressions compiled for any trace");
    assert_eq!(compared, tallies.values().map(|t| t.packets).sum::<usize>());
    assert!(compared > 20 * total_packets, "{compared} verdicts for {total_packets} packets");
    let matching = tallies.values().filter(|t| t.matched > 0).count();
    assert!(matching >= 20, "only {matching} expressions matched any packet");
}

#[test]
fn bad_expressions_carry_libpcaps_message() {
    // Link types whose LINKTYPE_ and DLT_ values are the same, so both sides get one number.
    for (expr, link) in [("tcp port eighty", 1), ("host", 1), ("ip and", 113), ("mpls", 113), ("wlan type data", 1)] {
        let expected = lib().compile(expr, link, SNAPLEN, true).expect_err(expr).to_string();
        let err = Filter::compile(expr, LinkType(link), SNAPLEN).expect_err(expr);
        assert!(err.to_string().contains(&expected), "{err}");
        match err {
            FilterError::Compile { expr: got, message } => {
                assert_eq!(got, expr);
                assert_eq!(message, expected);
            }
            other => panic!("{expr:?}: {other:?}"),
        }
    }
}

#[test]
#[ignore = "needs the corpus in ../shared/corpus"]
fn the_snap_length_is_what_a_match_returns() {
    let corpus = corpus();
    let (_, packets) = read_trace(&corpus.join("zeek-traces/wikipedia.pcap"));
    let filter = Filter::compile("tcp or udp", LinkType::ETHERNET, 96).unwrap();
    assert_eq!(filter.expression(), Some("tcp or udp"));
    let kept: Vec<u32> = packets.iter().map(|p| filter.run(&p.data, p.wire_len)).filter(|&v| v != 0).collect();
    assert!(!kept.is_empty());
    assert!(kept.iter().all(|&v| v == 96), "{kept:?}");
}

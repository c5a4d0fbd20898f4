//! `weir flows` against a trusted exporter, through a real collector: weir
//! and softflowd export the same trace over UDP on 127.0.0.1 to two nfcapd
//! processes, and `nfdump` reads both back. The flows must agree on the
//! 5-tuple, packets, octets and TCP flags, in IPFIX, NetFlow v9 and v5;
//! every difference must be one of the kinds listed in [`Why`], each
//! checked on the packets themselves (read by the system libpcap and parsed
//! by etherparse, neither of them weir's), and is printed. weir's own
//! records are also held to the packets: counts exact, start and end within
//! 1 ms.
//!
//! Timeouts are matched by making them longer than any trace, in both:
//! softflowd run on a file checks its timeouts on the wall clock (every
//! `expint` seconds) and reads a trace in less than that, so it expires
//! nothing before the end of input; weir applies them in packet time (the
//! layer's tests check that). nfcapd, nfdump and softflowd come from
//! scripts/setup; a test that finds one missing fails and says so.
//!
//! nfdump's own exporter, `nfpcapd -r`, is the second peer (`flows/nfpcapd.rs`).
//!
//! The IPFIX files of `-w` are read by an independent reader, ipfixDump
//! (libfixbuf-tools, also from scripts/setup), file by file, and held field
//! by field to the records nfcapd stored from the same run.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use weir::filter::oracle::Oracle;

#[path = "support/collector.rs"]
mod collector;
#[path = "support/ipfix.rs"]
mod ipfix;
#[path = "flows/nfpcapd.rs"]
mod nfpcapd;
use collector::{nfcapd_files, stored_lines, text, tool, Collector};
use ipfix::ipfix_dump;
use nfpcapd::{compare_nfpcapd, NfpWhy};

/// Longer than any trace: one year, in seconds.
const FOREVER: &str = "31536000";

fn weir(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir")).args(args).stdin(Stdio::null()).output().expect("weir runs")
}

/// What the comparisons read from a collector: its flows as [`Row`]s.
trait Finish {
    /// Stops nfcapd and returns the flows it stored and its closing report.
    fn finish(self) -> (Vec<Row>, String);
}

impl Finish for Collector {
    fn finish(self) -> (Vec<Row>, String) {
        let (dir, report) = self.stop();
        (stored_rows(dir.path()), report)
    }
}

/// The flows of every nfcapd file in `dir` (written by nfcapd or nfpcapd).
fn stored_rows(dir: &Path) -> Vec<Row> {
    stored_lines(dir, "fmt:%ts|%te|%pr|%sa|%sp|%da|%dp|%pkt|%byt|%flg").iter().map(|l| Row::parse(l)).collect()
}

/// The exporters nfcapd kept apart (`nfdump -E`), by observation domain:
/// (sequence failures, flows).
fn exporters(dir: &tempfile::TempDir) -> BTreeMap<u32, (u64, u64)> {
    let mut out = BTreeMap::new();
    for path in nfcapd_files(dir.path()) {
        let o = tool("nfdump").args(["-E", path.to_str().unwrap()]).output().unwrap();
        assert!(o.status.success(), "nfdump -E {}: {}", path.display(), text(&o.stderr));
        // SysID: 1, IP:  127.0.0.1, version: 10, ID: 12, Sequence failures: 0, packets: 27, flows: 684
        for line in text(&o.stdout).lines().filter(|l| l.starts_with("SysID")) {
            let field = |name: &str| -> u64 {
                let at = line.find(name).unwrap_or_else(|| panic!("no `{name}` in `{line}`")) + name.len();
                line[at..].split(',').next().unwrap().trim().parse().unwrap()
            };
            let e: &mut (u64, u64) = out.entry(field(", ID:") as u32).or_default();
            e.0 += field("Sequence failures:");
            e.1 += field("flows:");
        }
    }
    out
}

/// A flow's key: protocol name as nfdump prints it, addresses and ports
/// (ICMP's port is `type.code`).
type Key = (String, String, String, String, String);

/// One flow as nfdump prints it.
#[derive(Clone, Debug)]
struct Row {
    start_ms: u64,
    end_ms: u64,
    key: Key,
    packets: u64,
    bytes: u64,
    flags: String,
}

fn ms(date: &str) -> u64 {
    let t = chrono::NaiveDateTime::parse_from_str(date, "%Y-%m-%d %H:%M:%S%.3f").unwrap_or_else(|e| panic!("`{date}`: {e}"));
    t.and_utc().timestamp_millis() as u64
}

impl Row {
    fn parse(line: &str) -> Row {
        let f: Vec<&str> = line.split('|').map(str::trim).collect();
        assert_eq!(f.len(), 10, "nfdump line `{line}`");
        let n = |s: &str| s.parse::<u64>().unwrap_or_else(|_| panic!("`{s}` in `{line}` is not a count"));
        Row {
            start_ms: ms(f[0]),
            end_ms: ms(f[1]),
            key: (f[2].into(), f[3].into(), f[4].into(), f[5].into(), f[6].into()),
            packets: n(f[7]),
            bytes: n(f[8]),
            flags: f[9].into(),
        }
    }
}

/// What the packets of one direction add up to, read without weir.
#[derive(Default, Debug)]
struct Truth {
    packets: u64,
    /// IP bytes (what IPFIX's octetDeltaCount counts).
    ip_bytes: u64,
    /// Bytes of the frame on the wire from the IP header on: link padding
    /// included, and what a snapshot length cut off.
    frame_bytes: u64,
    flags: u8,
    first_ns: u64,
    last_ns: u64,
    /// Its packets under two VLAN tags, and their bytes from the IP header on.
    two_tags: (u64, u64),
    /// Its SYNs (without ACK).
    syns: u64,
}

/// The packets of a trace, by direction, and what sets some apart.
#[derive(Default)]
struct Packets {
    flows: BTreeMap<Key, Truth>,
    /// Address pairs (either order) with IP fragments.
    fragmented: BTreeSet<(String, String)>,
    /// The fragments' packets and IP bytes, by (source, destination).
    fragments: BTreeMap<(String, String), (u64, u64)>,
    /// Packets libpcap read that etherparse could not: none expected.
    unparsed: u64,
    /// Time of the trace's first packet, ms.
    first_ms: u64,
}

fn proto_name(p: u8) -> String {
    match p {
        1 => "ICMP".into(),
        2 => "IGMP".into(),
        6 => "TCP".into(),
        17 => "UDP".into(),
        58 => "ICMP6".into(),
        47 => "GRE".into(),
        n => n.to_string(),
    }
}

fn read_packets(trace: &Path) -> Packets {
    use etherparse::{NetSlice, SlicedPacket, TransportSlice, VlanSlice};
    let lib = Oracle::system().expect("the system libpcap");
    let mut h = lib.open_offline(trace).unwrap();
    assert_eq!(h.link_type(), 1, "{}: these comparisons read Ethernet traces", trace.display());
    let mut out = Packets::default();
    while let Some(p) = h.next_packet().unwrap() {
        if out.first_ms == 0 {
            out.first_ms = p.ts_ns / 1_000_000;
        }
        let Ok(s) = SlicedPacket::from_ethernet(&p.data) else {
            out.unparsed += 1;
            continue;
        };
        let Some(net) = &s.net else { continue };
        let (src, dst, ip_len, ip_at): (IpAddr, IpAddr, u64, usize) = match net {
            NetSlice::Ipv4(v4) => {
                let h = v4.header();
                (h.source_addr().into(), h.destination_addr().into(), u64::from(h.total_len()), h.slice().as_ptr() as usize)
            }
            NetSlice::Ipv6(v6) => {
                let h = v6.header();
                (h.source_addr().into(), h.destination_addr().into(), 40 + u64::from(h.payload_length()), h.slice().as_ptr() as usize)
            }
        };
        let payload = net.ip_payload_ref().expect("an IP packet has a payload slice");
        let (a, b) = (src.to_string(), dst.to_string());
        if payload.fragmented {
            let f = out.fragments.entry((a.clone(), b.clone())).or_default();
            (f.0, f.1) = (f.0 + 1, f.1 + ip_len);
            out.fragmented.insert((a.clone().min(b.clone()), a.max(b)));
            continue;
        }
        let (sport, dport, flags) = match &s.transport {
            Some(TransportSlice::Tcp(t)) => (t.source_port().to_string(), t.destination_port().to_string(), t.slice()[13]),
            Some(TransportSlice::Udp(u)) => (u.source_port().to_string(), u.destination_port().to_string(), 0),
            Some(TransportSlice::Icmpv4(i)) => ("0".into(), format!("{}.{}", i.type_u8(), i.code_u8()), 0),
            Some(TransportSlice::Icmpv6(i)) => ("0".into(), format!("{}.{}", i.type_u8(), i.code_u8()), 0),
            None => ("0".into(), "0".into(), 0),
        };
        let key = (proto_name(payload.ip_number.0), src.to_string(), sport, dst.to_string(), dport);
        let t = out.flows.entry(key).or_insert(Truth { first_ns: p.ts_ns, ..Truth::default() });
        let frame_bytes = u64::from(p.wire_len) - (ip_at - p.data.as_ptr() as usize) as u64;
        if matches!(s.vlan, Some(VlanSlice::DoubleVlan(_))) {
            t.two_tags = (t.two_tags.0 + 1, t.two_tags.1 + frame_bytes);
        }
        if let Some(TransportSlice::Tcp(tcp)) = &s.transport {
            t.syns += u64::from(tcp.syn() && !tcp.ack());
        }
        t.packets += 1;
        t.ip_bytes += ip_len;
        t.frame_bytes += frame_bytes;
        t.flags |= flags;
        t.last_ns = p.ts_ns;
    }
    out
}

/// nfdump's flags column from a flag byte (CWR ECE URG ACK PSH RST SYN FIN).
fn flag_text(f: u8) -> String {
    "CEUAPRSF".chars().enumerate().map(|(i, c)| if f & (0x80 >> i) != 0 { c } else { '.' }).collect()
}

/// Why a flow of softflowd's differs from weir's: each is checked on the packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Why {
    /// softflowd counts the frame's length on the wire after the link
    /// header, Ethernet padding included (and, on a frame whose IP length
    /// is less than what follows it, that rest); weir counts the IP length
    /// (RFC 7012's octetDeltaCount: "IP header(s) and IP payload"). Checked:
    /// softflowd's octets are the frame's bytes from the IP header on,
    /// weir's the sum of IP lengths.
    LinkPadding,
    /// IP fragments: weir rebuilds a datagram to find its ports and counts
    /// every fragment in that flow; softflowd puts the fragments after the
    /// first in a flow without ports. The fragments of a datagram that never
    /// completes are in no weir record (it counts them apart); softflowd
    /// exports them. Checked: the address pair has fragments, and weir's
    /// records with the fragments it counted apart hold every packet of it.
    Fragments,
    /// softflowd reads one VLAN tag; a frame with two (QinQ, or 802.1Q
    /// twice) is "non-IP" to it. Checked: its packets and octets are the
    /// flow's without those under two tags.
    TwoVlanTags,
    /// A SYN on ports whose connection ended (a RST, or a FIN, seen) or
    /// with a new initial sequence number starts a new connection, and so
    /// new records, in weir (a refused connection tried again is two
    /// attempts); softflowd goes on with the old flow. Checked: the
    /// connection has more than one SYN, and weir's records add up to
    /// softflowd's packets, which are the flow's.
    NewSyn,
}

/// Rows grouped by their flow's key, in the order they came.
fn by_key(rows: &[Row]) -> BTreeMap<Key, Vec<Row>> {
    let mut m: BTreeMap<Key, Vec<Row>> = BTreeMap::new();
    for r in rows {
        m.entry(r.key.clone()).or_default().push(r.clone());
    }
    m
}

/// A key's records as what the comparisons hold equal: packets, octets and
/// flags, in order.
fn counts(rows: &[Row]) -> Vec<(u64, u64, String)> {
    let mut v: Vec<_> = rows.iter().map(|r| (r.packets, r.bytes, r.flags.clone())).collect();
    v.sort();
    v
}

/// Compares one trace's flows, exported as `format` by weir and softflowd,
/// and returns the differences found (each with its reason) after checking
/// weir's records against the packets.
fn compare(trace: &Path, queues: Option<&str>, format: &str, extra: &[&str]) -> (usize, Vec<(Why, Key)>) {
    let name = trace.display();
    let truth = read_packets(trace);
    assert_eq!(truth.unparsed, 0, "{name}: packets etherparse could not read");
    let w = Collector::start();
    let (source, addr) = (format!("{}{}", trace.display(), queues.unwrap_or("")), w.addr());
    let mut args = vec!["flows", &source, "-q", "-n", &addr, "--format", format];
    args.extend_from_slice(&["--active-timeout", FOREVER, "--inactive-timeout", FOREVER]);
    args.extend_from_slice(extra);
    let o = weir(&args);
    let stderr = text(&o.stderr);
    assert!(o.status.success(), "weir {args:?}: {stderr}");
    let (weir_rows, report) = w.finish();
    // Every record weir says it exported reached the collector, in sequence.
    let exported = exported(&stderr);
    assert_eq!(weir_rows.len() as u64, exported, "{name} {format}: nfcapd stored {} of {exported} records", weir_rows.len());
    assert!(report.contains("Sequence Errors: 0") || weir_rows.is_empty(), "{name} {format}: nfcapd saw sequence errors: {report}");

    let s = Collector::start();
    let version = match format {
        "ipfix" => "10",
        "v9" => "9",
        _ => "5",
    };
    let timeouts = ["maxlife", "tcp", "tcp.rst", "tcp.fin", "udp", "icmp", "general"].map(|t| format!("{t}={FOREVER}"));
    let addr = s.addr();
    let mut sargs = vec!["-r", trace.to_str().unwrap(), "-a", "-v", version, "-n", &addr];
    for t in &timeouts {
        sargs.extend_from_slice(&["-t", t]);
    }
    let so = tool("softflowd").args(&sargs).output().unwrap();
    assert!(so.status.success(), "softflowd {sargs:?}: {}", text(&so.stderr));
    let (peer_rows, _) = s.finish();

    let (ours, theirs) = (by_key(&weir_rows), by_key(&peer_rows));
    let fragmented = |k: &Key| truth.fragmented.contains(&(k.1.clone().min(k.3.clone()), k.1.clone().max(k.3.clone())));
    // weir against the packets: every flow of the packets is weir's, exact.
    for (k, t) in &truth.flows {
        let v6 = k.1.contains(':');
        if fragmented(k) || (format == "v5" && v6) {
            continue;
        }
        let rows = ours.get(k).unwrap_or_else(|| panic!("{name} {format}: weir has no flow {k:?} ({t:?})"));
        let sum = |f: fn(&Row) -> u64| rows.iter().map(f).sum::<u64>();
        assert_eq!((sum(|r| r.packets), sum(|r| r.bytes)), (t.packets, t.ip_bytes), "{name} {format} {k:?}: packets and IP bytes");
        if k.0 == "TCP" {
            assert!(rows.iter().all(|r| r.flags == flag_text(t.flags)), "{name} {format} {k:?}: flags {rows:?}, packets {:#x}", t.flags);
        }
        let first = rows.iter().map(|r| r.start_ms).min().unwrap();
        let last = rows.iter().map(|r| r.end_ms).max().unwrap();
        assert!(
            first.abs_diff(t.first_ns / 1_000_000) <= 1 && last.abs_diff(t.last_ns / 1_000_000) <= 1,
            "{name} {format} {k:?}: times {first}..{last} ms, packets {t:?}"
        );
    }
    // Fragmented traffic, from each address to the other: weir's records
    // hold every packet and IP byte of it, each fragment counted as sent.
    // The fragments of a datagram that never completed are in no record:
    // weir counts them apart, and they must make up the difference.
    let unrecorded: u64 = stderr
        .split(" IP fragments in no record")
        .next()
        .filter(|s| s.len() < stderr.len())
        .and_then(|s| s.rsplit(' ').next())
        .map_or(0, |n| n.parse().unwrap());
    let (mut want_all, mut got_all) = (0, 0);
    for ((src, dst), (fp, fb)) in &truth.fragments {
        if format == "v5" && src.contains(':') {
            continue;
        }
        let mut want = (*fp, *fb);
        for (_, t) in truth.flows.iter().filter(|(k, _)| (&k.1, &k.3) == (src, dst)) {
            (want.0, want.1) = (want.0 + t.packets, want.1 + t.ip_bytes);
        }
        let got = weir_rows.iter().filter(|r| (&r.key.1, &r.key.3) == (src, dst)).fold((0, 0), |(p, b), r| (p + r.packets, b + r.bytes));
        assert!(
            got.0 <= want.0 && got.1 <= want.1,
            "{name} {format} {src} -> {dst}: {got:?} packets and IP bytes with fragments, of {want:?}"
        );
        (want_all, got_all) = (want_all + want.0, got_all + got.0);
    }
    if format != "v5" {
        assert_eq!(got_all + unrecorded, want_all, "{name} {format}: packets of fragmented traffic, in records and not");
    }
    // softflowd's times against the packets. It keeps one first and last
    // time per connection (both directions), and writes them in the order
    // nfdump shows as end before start for some IPFIX records: so its span
    // is compared with the connection's (or, for a flow with no reverse, as
    // ICMP's, the direction's). Its v9 dates are not compared: its v9
    // header dates the uptime in whole seconds and its uptimes are not
    // taken on the second, which shifts every date of a message by up to
    // a second (weir's v9 dates are exact: checked above). It dates a flow
    // by ms of uptime since the trace's first packet, and nfdump takes an
    // uptime of 0 for no date (1970): such a date stands for that packet.
    if format != "v9" {
        for (k, rows) in &theirs {
            let Some(t) = truth.flows.get(k).filter(|_| !fragmented(k)) else { continue };
            let back = truth.flows.get(&(k.0.clone(), k.3.clone(), k.4.clone(), k.1.clone(), k.2.clone()));
            let span = |t: &Truth| (t.first_ns / 1_000_000, t.last_ns / 1_000_000);
            let (own, conn) = (span(t), back.map_or(span(t), |b| (span(t).0.min(span(b).0), span(t).1.max(span(b).1))));
            for r in rows {
                let date = |ms: u64| if ms == 0 { truth.first_ms } else { ms };
                let (a, b) = (date(r.start_ms), date(r.end_ms));
                let got = (a.min(b), a.max(b));
                let near = |want: (u64, u64)| got.0.abs_diff(want.0) <= 1 && got.1.abs_diff(want.1) <= 1;
                assert!(
                    near(conn) || near(own),
                    "{name} {format} {k:?}: softflowd's times {got:?} ms, the connection's {conn:?}, the flow's {own:?}"
                );
            }
        }
    }
    // softflowd against weir: the same, or different for a reason checked here.
    let mut diffs = Vec::new();
    for k in ours.keys().chain(theirs.keys()).collect::<BTreeSet<_>>() {
        let (a, b) = (ours.get(k).map_or(&[][..], Vec::as_slice), theirs.get(k).map_or(&[][..], Vec::as_slice));
        if counts(a) == counts(b) {
            continue;
        }
        let t = truth.flows.get(k);
        let packets = |rows: &[Row]| rows.iter().map(|r| r.packets).sum::<u64>();
        let why = if fragmented(k) {
            Why::Fragments
        } else if let Some(t) = t.filter(|t| t.two_tags.0 > 0) {
            let (p, o) = (t.packets - t.two_tags.0, t.frame_bytes - t.two_tags.1);
            assert!(
                b.is_empty() && p == 0 || matches!(b, [y] if (y.packets, y.bytes) == (p, o)),
                "{name} {format} {k:?}: softflowd {b:?}, not the packets {t:?} without those under two tags"
            );
            Why::TwoVlanTags
        } else if let Some(t) = t.filter(|t| {
            let back = truth.flows.get(&(k.0.clone(), k.3.clone(), k.4.clone(), k.1.clone(), k.2.clone()));
            t.syns.max(back.map_or(0, |b| b.syns)) > 1 && a.len() > 1
        }) {
            assert!(
                matches!(b, [y] if y.packets == packets(a) && packets(a) == t.packets),
                "{name} {format} {k:?}: weir {a:?}, softflowd {b:?}"
            );
            Why::NewSyn
        } else if let (Some(t), [x], [y]) = (t, a, b) {
            assert!(
                x.packets == y.packets
                    && x.flags == y.flags
                    && x.bytes == t.ip_bytes
                    && y.bytes == t.frame_bytes
                    && t.frame_bytes > t.ip_bytes,
                "{name} {format} {k:?}: weir {x:?}, softflowd {y:?}, packets {t:?}: a difference with no reason"
            );
            Why::LinkPadding
        } else {
            panic!("{name} {format} {k:?}: weir {a:?}, softflowd {b:?}: a difference with no reason");
        };
        eprintln!("{name} {format}: {why:?} {k:?}: weir {:?}, softflowd {:?}", counts(a), counts(b));
        diffs.push((why, k.clone()));
    }
    (weir_rows.len(), diffs)
}

fn synth(dir: &Path, packets: &str, flows: &str) -> PathBuf {
    let trace = dir.join("t.pcap");
    let o = weir(&["synth", "-o", trace.to_str().unwrap(), "-n", packets, "-c", flows, "--seed", "21"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    trace
}

#[test]
fn a_synthesized_trace_exports_as_softflowd_does_in_ipfix_v9_and_v5() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synth(dir.path(), "20000", "600");
    for format in ["ipfix", "v9", "v5"] {
        // Two queues: both workers feed the one exporter, in sequence.
        let (records, diffs) = compare(&trace, Some("@0-1"), format, &["--pool", "64,16"]);
        assert!(records > 500, "{format}: {records} records: the trace must have many flows");
        assert!(diffs.iter().all(|(w, _)| *w == Why::LinkPadding), "{format}: {diffs:?}");
    }
}

#[test]
fn a_synthesized_trace_exports_as_nfpcapd_does_but_for_its_dns_records() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synth(dir.path(), "20000", "600");
    let diffs = compare_nfpcapd(&trace, Some("@0-1"));
    // synth's DNS lookups are the only flows nfpcapd cuts differently.
    assert!(!diffs.is_empty() && diffs.iter().all(|(w, k)| *w == NfpWhy::DnsPerPacket && k.0 == "UDP"), "{diffs:?}");
}

/// The records weir says it exported, from its summary line.
fn exported(stderr: &str) -> u64 {
    stderr
        .split(" exported as ")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no export count in `{stderr}`"))
}

/// A collector port nothing listens on answers with ICMP port unreachable:
/// the connected socket hears it, the run names the collector and fails.
#[test]
fn a_collector_port_nothing_listens_on_is_named_and_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synth(dir.path(), "20000", "600");
    // A port free a moment ago, closed again.
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let closed = format!("127.0.0.1:{port}");
    let stats = dir.path().join("stats.json");
    let o = weir(&["flows", trace.to_str().unwrap(), "-q", "-n", &closed, "--stats", stats.to_str().unwrap()]);
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("error: nothing listens at {closed}")), "{stderr}");
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    let c = &j["export"]["collectors"][0];
    assert_eq!(c["collector"], closed.as_str(), "{j}");
    assert!(c["bounced"].as_u64() >= Some(1) && c["nothing_listens"] == true, "{j}");
    // With a listening collector beside it, the other still gets everything,
    // and the closed one is still reported.
    let good = Collector::start();
    let o = weir(&["flows", trace.to_str().unwrap(), "-q", "-n", &good.addr(), "-n", &closed]);
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("nothing listens at {closed}")), "{stderr}");
    let (rows, _) = good.finish();
    assert_eq!(rows.len() as u64, exported(&stderr));
}

#[test]
fn every_collector_gets_every_record_and_v5_counts_the_ipv6_it_cannot_carry() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synth(dir.path(), "3000", "100");
    let (a, b) = (Collector::start(), Collector::start());
    let o = weir(&["flows", &format!("{}@0-1", trace.display()), "-q", "-n", &a.addr(), "-n", &b.addr(), "--domain", "9"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let ((ra, report_a), (rb, _)) = (a.finish(), b.finish());
    let line = |rows: &[Row]| {
        let mut v: Vec<String> =
            rows.iter().map(|r| format!("{:?}", (r.start_ms, r.end_ms, &r.key, r.packets, r.bytes, &r.flags))).collect();
        v.sort();
        v
    };
    assert!(!ra.is_empty() && line(&ra) == line(&rb), "the two collectors differ");
    assert!(report_a.contains("Sequence Errors: 0"), "{report_a}");
    // A collector's bad address is named.
    let o = weir(&["flows", trace.to_str().unwrap(), "-n", "no-such-host.invalid:9995"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("-n no-such-host.invalid:9995"), "{}", text(&o.stderr));
    let o = weir(&["flows", trace.to_str().unwrap(), "-n", "127.0.0.1:9", "--format", "v5", "--domain", "65536"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("65535"), "{}", text(&o.stderr));
}

/// `../shared/corpus/zeek-traces`; a test asked for without it fails and says where it looked.
fn corpus() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus/zeek-traces");
    assert!(p.is_dir(), "this test needs the corpus, and ../shared/corpus is not there (looked at {})", p.display());
    p
}

#[test]
#[ignore = "needs the corpus in ../shared/corpus"]
fn corpus_traces_export_as_softflowd_does_and_every_difference_has_a_reason() {
    let dir = corpus();
    // Ethernet traces of many kinds: IPv4 and IPv6, TCP, UDP, ICMP and
    // ICMPv6, GRE, link padding, fragments (IPv4 and IPv6), two VLAN tags.
    let traces = [
        "wikipedia.pcap",
        "http/bro.org-filtered.pcap",
        "dce-rpc/mapi.pcap",
        "communityid/icmp.pcap",
        "ipv4/fragmented-2.pcap",
        "ipv6-fragmented-dns.pcap",
        "erspan.pcap",
        "dns/loc-29-trunc.pcap",
        "http-qinq-0.pcap",
        "ftp/ipv6-retr-samba.pcap",
        "dnp3/dnp3_udp_en_spon.pcap",
        "vlan-pcp-dei.pcapng",
        "pop3/pop3.pcap",
        "igmp/multicast-igmp-version-membership-query-and-report.pcap",
        "tunnels/geneve-truncated.pcapng",
    ];
    let (mut seen, mut seen_nfp) = (BTreeSet::new(), BTreeSet::new());
    for t in traces {
        let p = dir.join(t);
        assert!(p.is_file(), "{} is not in the corpus", p.display());
        for format in ["ipfix", "v9", "v5"] {
            let (_, diffs) = compare(&p, None, format, &[]);
            seen.extend(diffs.into_iter().map(|(w, _)| w));
        }
        seen_nfp.extend(compare_nfpcapd(&p, None).into_iter().map(|(w, _)| w));
    }
    // Each reason listed is one these traces show: none is dead.
    assert_eq!(seen, BTreeSet::from([Why::LinkPadding, Why::Fragments, Why::TwoVlanTags, Why::NewSyn]));
    assert_eq!(seen_nfp, BTreeSet::from([NfpWhy::DnsPerPacket, NfpWhy::IcmpPerPacket, NfpWhy::NewSyn, NfpWhy::Fragments, NfpWhy::Tunnel]));
}

/// The `-` source split at a record boundary near the middle: the pcap
/// header with the first half of the records, and the rest.
fn halves(trace: &[u8]) -> (&[u8], &[u8]) {
    assert_eq!(trace[..4], [0xd4, 0xc3, 0xb2, 0xa1], "a little-endian pcap");
    let mut at = 24;
    while at < trace.len() / 2 {
        at += 16 + u32::from_le_bytes(trace[at + 8..at + 12].try_into().unwrap()) as usize;
    }
    trace.split_at(at)
}

#[test]
fn a_live_run_exports_as_flows_go_idle_refreshes_templates_and_flushes_on_sigint() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synth(dir.path(), "4000", "200");
    let truth = read_packets(&trace);
    assert!(truth.fragmented.is_empty());
    let bytes = std::fs::read(&trace).unwrap();
    let (first, rest) = halves(&bytes);
    let c = Collector::start();
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["flows", "-", "-q", "-n", &c.addr(), "--inactive-timeout", "1", "--template-refresh", "1"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    use std::io::Write;
    // Half the trace, then a pause: on a quiet source packet time moves on
    // with the wall clock, so its flows go idle and are exported, in a first
    // message with the templates; the second half's flows come after the
    // refresh interval, in messages that carry them again.
    stdin.write_all(first).unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    stdin.write_all(rest).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // The input is still open: SIGINT ends the run, and what is open is flushed.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    drop(stdin);
    let stderr = text(&out.stderr);
    assert!(out.status.success() && stderr.contains("stopping"), "{stderr}");
    let (rows, report) = c.finish();
    let with_templates: u64 = stderr
        .split(" with templates")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no template count in `{stderr}`"));
    assert!(with_templates >= 2, "templates sent {with_templates} times: {stderr}");
    assert!(report.contains("Sequence Errors: 0"), "{report}");
    // Every IP packet of the trace is in a record the collector stored.
    let packets: u64 = truth.flows.values().map(|t| t.packets).sum();
    assert_eq!(rows.iter().map(|r| r.packets).sum::<u64>(), packets, "{stderr}");
}

/// A data record of ipfixDump's as nfdump prints the same flow, in the
/// shape of [`Row`], with its ingress interface and end reason.
fn ipfix_row(r: &BTreeMap<String, String>) -> (Row, u32, u8) {
    let f = |name: &str| r.get(name).unwrap_or_else(|| panic!("no {name} in {r:?}")).as_str();
    let n = |name: &str| f(name).parse::<u64>().unwrap_or_else(|_| panic!("{name} `{}` is not a number", f(name)));
    let (src, dst, icmp) = match r.get("sourceIPv4Address") {
        Some(_) => (f("sourceIPv4Address"), f("destinationIPv4Address"), n("icmpTypeCodeIPv4")),
        None => (f("sourceIPv6Address"), f("destinationIPv6Address"), n("icmpTypeCodeIPv6")),
    };
    let proto = n("protocolIdentifier") as u8;
    let (sport, dport) = match proto {
        1 | 58 => ("0".to_string(), format!("{}.{}", icmp >> 8, icmp & 0xff)),
        _ => (f("sourceTransportPort").to_string(), f("destinationTransportPort").to_string()),
    };
    let addr = |a: &str| a.parse::<IpAddr>().unwrap_or_else(|e| panic!("`{a}`: {e}")).to_string();
    let row = Row {
        start_ms: ms(f("flowStartMilliseconds")),
        end_ms: ms(f("flowEndMilliseconds")),
        key: (proto_name(proto), addr(src), sport, addr(dst), dport),
        packets: n("packetDeltaCount"),
        bytes: n("octetDeltaCount"),
        flags: flag_text(n("tcpControlBits") as u8),
    };
    (row, n("ingressInterface") as u32, n("flowEndReason") as u8)
}

/// Rows in one comparable form, sorted: addresses through `IpAddr` (nfdump
/// and ipfixDump write IPv6 alike only by chance).
fn row_lines(rows: &[Row]) -> Vec<String> {
    let mut v: Vec<String> = rows.iter().map(row_line).collect();
    v.sort();
    v
}

fn row_line(r: &Row) -> String {
    let (p, sa, sp, da, dp) = &r.key;
    let addr = |a: &str| a.parse::<IpAddr>().map_or(a.to_string(), |a| a.to_string());
    format!("{} {} {p} {} {sp} {} {dp} {} {} {}", r.start_ms, r.end_ms, addr(sa), addr(da), r.packets, r.bytes, r.flags)
}

/// The files of a rotation named `f.N.ipfix`, in the order written.
fn rotated(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (p.file_name().unwrap().to_str().unwrap().split('.').nth(1).unwrap().parse().unwrap(), p))
        .collect();
    files.sort();
    files.into_iter().map(|(_, p)| p).collect()
}

/// weir's count of exported records by end reason, from its closing line,
/// in flowEndReason's order (1 idle to 5 evicted).
fn reasons(stderr: &str) -> [u64; 5] {
    let mut out = [0; 5];
    for (i, name) in ["idle", "active", "end-of-flow", "end-of-input", "evicted"].iter().enumerate() {
        let at = stderr
            .find(&format!(" {name},"))
            .or_else(|| stderr.find(&format!(" {name})")))
            .unwrap_or_else(|| panic!("no {name} in {stderr}"));
        out[i] = stderr[..at].rsplit(['(', ' ']).next().unwrap().parse().unwrap();
    }
    out
}

/// Checks the IPFIX files of one run, in the order written, and returns
/// their data records, field name to value: each file read alone by ipfixDump without complaint, each
/// opening with both templates before any data, and the sequence numbers of
/// `domain` counting every data record before the message, on across files.
fn read_ipfix_files(files: &[PathBuf], domain: u32) -> Vec<BTreeMap<String, String>> {
    let mut records = Vec::new();
    let mut sequence = 0u32;
    for file in files {
        let msgs = ipfix_dump(file);
        let first = msgs.first().unwrap_or_else(|| panic!("{} holds no message", file.display()));
        assert!(first.templates == 2 && first.templates_first, "{} does not open with the templates: {first:?}", file.display());
        for m in &msgs {
            assert_eq!(m.domain, domain, "{}", file.display());
            assert_eq!(m.sequence, sequence, "{}: the sequence number counts the data records before", file.display());
            sequence = sequence.wrapping_add(m.records.len() as u32);
            records.extend(m.records.iter().cloned());
        }
    }
    records
}

#[test]
fn ipfix_files_rotate_and_ipfixdump_reads_them_as_nfcapd_stores_the_same_run() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synth(dir.path(), "20000", "600");
    let out = dir.path().join("files");
    std::fs::create_dir(&out).unwrap();
    let c = Collector::start();
    // Files of at most 20,000 bytes: several, so records split across them.
    let pattern = out.join("f.ipfix");
    let o = weir(&[
        "flows",
        &format!("{}@0-1", trace.display()),
        "-q",
        "-n",
        &c.addr(),
        "-w",
        pattern.to_str().unwrap(),
        "-C",
        "0.02",
        "--domain",
        "7",
        "--pool",
        "64,16",
    ]);
    let stderr = text(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let (rows, report) = c.finish();
    assert!(report.contains("Sequence Errors: 0"), "{report}");
    let files = rotated(&out);
    assert!(files.len() >= 4, "{} files: {stderr}", files.len());
    assert!(files.iter().all(|f| std::fs::metadata(f).unwrap().len() <= 20_000), "a file is over -C");
    let records: Vec<(Row, u32, u8)> = read_ipfix_files(&files, 7).iter().map(ipfix_row).collect();
    // Field by field, the records nfcapd stored: none lost or repeated
    // across the files.
    let from_files: Vec<Row> = records.iter().map(|(r, _, _)| r.clone()).collect();
    assert!(rows.len() > 1000, "{} records", rows.len());
    assert_eq!(row_lines(&from_files), row_lines(&rows));
    // And the fields nfdump does not show: end reasons as weir counted
    // them, and both queues as interfaces 1 and 2.
    let mut by_reason = [0u64; 5];
    for (_, _, why) in &records {
        by_reason[usize::from(*why) - 1] += 1;
    }
    assert_eq!(by_reason, reasons(&stderr), "{stderr}");
    let interfaces: BTreeSet<u32> = records.iter().map(|(_, i, _)| *i).collect();
    assert_eq!(interfaces, BTreeSet::from([1, 2]));
}

/// The number just before `what` in `stderr`.
fn count_before(stderr: &str, what: &str) -> u64 {
    let at = stderr.find(what).unwrap_or_else(|| panic!("no `{what}` in {stderr}"));
    stderr[..at].trim_end().rsplit([' ', '(']).next().unwrap().parse().unwrap_or_else(|_| panic!("no count before `{what}` in {stderr}"))
}

#[test]
fn ipfix_files_that_cannot_be_written_are_named_and_their_records_counted() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synth(dir.path(), "20000", "600");
    let t = trace.to_str().unwrap();
    // A directory that does not exist: named, exit 2, before any export.
    let o = weir(&["flows", t, "-w", "/no/such/dir/f.ipfix"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("/no/such/dir/f.ipfix: No such file or directory"), "{}", text(&o.stderr));
    // A full disk from the first byte.
    let o = weir(&["flows", t, "-w", "/dev/full"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("/dev/full: No space left on device"), "{}", text(&o.stderr));
    // Nowhere to export to, and a format without files.
    let o = weir(&["flows", t]);
    assert!(o.status.code() == Some(2) && text(&o.stderr).contains("-n HOST:PORT"), "{}", text(&o.stderr));
    let o = weir(&["flows", t, "-w", "x.ipfix", "--format", "v9"]);
    assert!(o.status.code() == Some(2) && text(&o.stderr).contains("NetFlow v9 has no file format"), "{}", text(&o.stderr));
    // A file that fills up during the run (a file size limit of 32 KiB,
    // with SIGXFSZ ignored so the write fails with EFBIG): the collector
    // still gets every record, the error names the file, the records not
    // written are counted, and the file ends on a whole message.
    let c = Collector::start();
    let file = dir.path().join("f.ipfix");
    let script =
        format!("trap '' XFSZ; ulimit -f 64; exec {} flows {t} -q -n {} -w {}", env!("CARGO_BIN_EXE_weir"), c.addr(), file.display());
    let o = Command::new("sh").args(["-c", &script]).stdin(Stdio::null()).output().unwrap();
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("cannot write {}: File too large", file.display())), "{stderr}");
    let (rows, _) = c.finish();
    let total = count_before(&stderr, "records (");
    let (written, unwritten) = (count_before(&stderr, "records written to"), count_before(&stderr, "records were not written"));
    assert!(written > 0 && unwritten > 0 && written + unwritten == total, "{stderr}");
    assert_eq!(rows.len() as u64, total, "{stderr}");
    assert_eq!(read_ipfix_files(&[file], 0).len() as u64, written);
    // Files alone, and a source that does not end (standard input kept
    // open): once the file cannot be written there is nowhere to export
    // to, and the run stops by itself, as `weir record` does.
    let file = dir.path().join("alone.ipfix");
    let script =
        format!("trap '' XFSZ; ulimit -f 1; exec {} flows - -q --inactive-timeout 1 -w {}", env!("CARGO_BIN_EXE_weir"), file.display());
    let mut child = Command::new("sh").args(["-c", &script]).stdin(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    use std::io::Write;
    stdin.write_all(&std::fs::read(&trace).unwrap()).unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(t.elapsed() < Duration::from_secs(20), "the run goes on with nowhere to export to");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    drop(stdin);
    let stderr = text(&out.stderr);
    assert!(out.status.code() == Some(1) && stderr.contains("no collector either: stopping"), "{stderr}");
    assert!(stderr.contains(&format!("cannot write {}: File too large", file.display())), "{stderr}");
}

/// A flow's direction without its times: key (ICMP's ports left out: a
/// biflow carries the forward direction's type and code only), packets,
/// octets, flags.
type Part = (Key, u64, u64, String);

fn part(key: &Key, packets: u64, bytes: u64, flags: String) -> Part {
    let mut key = key.clone();
    if key.0.starts_with("ICMP") {
        (key.2, key.4) = (String::new(), String::new());
    }
    (key, packets, bytes, flags)
}

#[test]
fn biflows_hold_the_two_uniflows_of_each_connection_and_nfdump_reads_their_reverse_counters() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synth(dir.path(), "20000", "600");
    let source = format!("{}@0-1", trace.display());
    let paired = check_biflows(&source, dir.path());
    assert!(paired > 500, "{paired} connections paired");
    // NetFlow has no reverse elements: --biflow with v9 or v5 is refused.
    for format in ["v9", "v5"] {
        let o = weir(&["flows", &source, "--biflow", "--format", format, "-n", "127.0.0.1:9"]);
        assert!(o.status.code() == Some(2) && text(&o.stderr).contains("--biflow"), "{}", text(&o.stderr));
    }
}

/// Runs `source` into IPFIX files as uniflows and as biflows (the biflows to
/// an nfcapd too), and holds the biflows to the uniflows: every uniflow
/// record in exactly one biflow, as its forward part or (the key turned
/// round) its reverse part, each paired biflow over the time of its two
/// uniflows, and nfdump's records of the biflow run the files' (in and out
/// counters, flags, times). Returns how many biflows are pairs.
fn check_biflows(source: &str, dir: &Path) -> usize {
    let (uni_file, bi_file) = (dir.join("uni.ipfix"), dir.join("bi.ipfix"));
    let o = weir(&["flows", source, "-q", "-w", uni_file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let c = Collector::start();
    let o = weir(&["flows", source, "-q", "--biflow", "-w", bi_file.to_str().unwrap(), "-n", &c.addr()]);
    let stderr = text(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let (lines, report) = c.finish_as("fmt:%ts|%te|%pr|%sa|%sp|%da|%dp|%pkt|%byt|%flg|%opkt|%obyt");
    assert!(report.contains("Sequence Errors: 0"), "{report}");
    let uni: Vec<Row> = read_ipfix_files(&[uni_file], 0).iter().map(|r| ipfix_row(r).0).collect();
    let bi = read_ipfix_files(&[bi_file], 0);
    // Each uniflow's times, by the rest of it.
    let mut times: BTreeMap<Part, Vec<(u64, u64)>> = BTreeMap::new();
    for r in &uni {
        times.entry(part(&r.key, r.packets, r.bytes, r.flags.clone())).or_default().push((r.start_ms, r.end_ms));
    }
    let (mut parts, mut paired, mut nfdump_view) = (Vec::new(), 0, Vec::new());
    for b in &bi {
        let (fwd, _, _) = ipfix_row(b);
        let n = |name: &str| b.get(name).unwrap_or_else(|| panic!("no {name} in {b:?}")).parse::<u64>().unwrap();
        let (rp, ro, rf) = (n("reversePacketDeltaCount"), n("reverseOctetDeltaCount"), n("reverseTcpControlBits"));
        let f = part(&fwd.key, fwd.packets, fwd.bytes, fwd.flags.clone());
        let f_times = times.get(&f).unwrap_or_else(|| panic!("the forward part of {fwd:?} is no uniflow record"));
        if rp == 0 {
            // Seen one way: the uniflow record itself.
            assert!(ro == 0 && rf == 0 && f_times.contains(&(fwd.start_ms, fwd.end_ms)), "{fwd:?}");
        } else {
            // The two uniflows of a connection: the reverse one's key is
            // the forward one's turned round, and the biflow spans both.
            let (p, sa, sp, da, dp) = fwd.key.clone();
            let r = part(&(p, da, dp, sa, sp), rp, ro, flag_text(rf as u8));
            let r_times = times.get(&r).unwrap_or_else(|| panic!("the reverse part of {fwd:?} is no uniflow record"));
            let spans = f_times.iter().any(|f| r_times.iter().any(|r| (f.0.min(r.0), f.1.max(r.1)) == (fwd.start_ms, fwd.end_ms)));
            assert!(spans, "{fwd:?}: not the span of its two uniflows");
            parts.push(r);
            paired += 1;
        }
        nfdump_view.push((fwd, rp, ro));
        parts.push(f);
    }
    // Every uniflow record is in exactly one biflow: none lost, none twice.
    let mut uni_parts: Vec<Part> = uni.iter().map(|r| part(&r.key, r.packets, r.bytes, r.flags.clone())).collect();
    uni_parts.sort();
    parts.sort();
    assert_eq!(parts, uni_parts);
    assert_eq!(bi.len() + paired, uni.len(), "{source}: {paired} paired of {} biflows", bi.len());
    assert!(stderr.contains(&format!("biflows: {paired} of the {} records", uni.len())), "{stderr}");
    // nfdump reads the reverse counters as the flow's out packets and
    // bytes, the rest as the forward flow's.
    let from_nfdump: Vec<(Row, u64, u64)> = lines
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            assert_eq!(f.len(), 12, "nfdump line `{l}`");
            let n = |s: &str| s.trim().parse::<u64>().unwrap_or_else(|_| panic!("`{s}` in `{l}`"));
            (Row::parse(&f[..10].join("|")), n(f[10]), n(f[11]))
        })
        .collect();
    let view = |v: &[(Row, u64, u64)]| {
        let mut lines: Vec<String> = v.iter().map(|(r, p, o)| format!("{} {p} {o}", row_line(r))).collect();
        lines.sort();
        lines
    };
    let (a, b) = (view(&from_nfdump), view(&nfdump_view));
    let only_nfdump: Vec<&String> = a.iter().filter(|l| !b.contains(l)).take(5).collect();
    let only_files: Vec<&String> = b.iter().filter(|l| !a.contains(l)).take(5).collect();
    assert!(a == b, "{source}: nfdump's records differ from the files': {only_nfdump:?} against {only_files:?}");
    paired
}

#[test]
fn per_queue_exporters_and_a_fleet_of_sensors_keep_each_domain_in_sequence_at_one_nfcapd() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synth(dir.path(), "20000", "600");
    let source = format!("{}@0-2", trace.display());
    // The one-exporter run, for the records.
    let c = Collector::start();
    let o = weir(&["flows", &source, "-q", "-n", &c.addr(), "--domain", "10"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let (single, _) = c.finish();
    for format in ["ipfix", "v9"] {
        // Three queues, three exporters: domains 10, 11 and 12, each with its
        // own sequence, none out of order at the collector.
        let c = Collector::start();
        let addr = c.addr();
        let pattern = dir.path().join(format!("{format}-{{queue}}.ipfix"));
        let mut args = vec!["flows", &source, "-q", "-n", &addr, "--export", "per-queue", "--domain", "10", "--format", format];
        let pattern = pattern.to_str().unwrap().to_string();
        if format == "ipfix" {
            args.extend(["-w", &pattern]);
        }
        let o = weir(&args);
        let stderr = text(&o.stderr);
        assert!(o.status.success() && stderr.contains("3 exporters, one per queue, as observation domains 10 to 12"), "{stderr}");
        let (nfdir, report) = c.stop();
        assert!(report.contains("Sequence Errors: 0"), "{report}");
        let by_domain = exporters(&nfdir);
        assert_eq!(by_domain.keys().copied().collect::<Vec<_>>(), [10, 11, 12], "{format}: {by_domain:?}");
        assert!(by_domain.values().all(|&(failures, flows)| failures == 0 && flows > 100), "{format}: {by_domain:?}");
        assert_eq!(by_domain.values().map(|v| v.1).sum::<u64>() as usize, single.len(), "{format}");
        if format == "ipfix" {
            // Each queue's files: its own domain, its sequence from 0, the
            // records nfcapd counted for it.
            for q in 0..3u32 {
                let file = PathBuf::from(pattern.replace("{queue}", &q.to_string()));
                assert_eq!(read_ipfix_files(&[file], 10 + q).len() as u64, by_domain[&(10 + q)].1);
            }
        }
        // The same records as the one exporter's.
        let c = Collector::start();
        let o = weir(&["flows", &source, "-q", "-n", &c.addr(), "--export", "per-queue", "--format", format]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let (rows, _) = c.finish();
        if format == "ipfix" {
            assert_eq!(row_lines(&rows), row_lines(&single));
        } else {
            assert_eq!(rows.len(), single.len());
        }
    }
    // A fleet: two sensors at once into one nfcapd, told apart by domain.
    let c = Collector::start();
    let addr = c.addr();
    let sensors: Vec<Child> = ["1", "2"]
        .iter()
        .map(|d| {
            Command::new(env!("CARGO_BIN_EXE_weir"))
                .args(["flows", &source, "-q", "-n", &addr, "--domain", d])
                .stdin(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut s in sensors {
        assert!(s.wait().unwrap().success());
    }
    let (nfdir, report) = c.stop();
    assert!(report.contains("Sequence Errors: 0"), "{report}");
    let by_domain = exporters(&nfdir);
    assert_eq!(by_domain, BTreeMap::from([(1, (0, single.len() as u64)), (2, (0, single.len() as u64))]));
    // Per-queue files need the queue in their name.
    let o = weir(&["flows", &source, "--export", "per-queue", "-w", dir.path().join("x.ipfix").to_str().unwrap()]);
    assert!(o.status.code() == Some(2) && text(&o.stderr).contains("{queue}"), "{}", text(&o.stderr));
    let o = weir(&["flows", &source, "-w", dir.path().join("x-{queue}.ipfix").to_str().unwrap()]);
    assert!(o.status.code() == Some(2) && text(&o.stderr).contains("--export per-queue"), "{}", text(&o.stderr));
}

#[test]
#[ignore = "needs the corpus in ../shared/corpus"]
fn corpus_traces_in_ipfix_files_are_read_by_ipfixdump_as_nfcapd_stores_them() {
    let corpus = corpus();
    // IPv4 and IPv6 (both templates), TCP, UDP, ICMP and ICMPv6, GRE,
    // fragments, two VLAN tags, a trace with no record.
    let traces = [
        "wikipedia.pcap",
        "communityid/icmp.pcap",
        "communityid/icmp6.pcap",
        "ipv6-fragmented-dns.pcap",
        "ftp/ipv6-retr-samba.pcap",
        "ipv4/fragmented-2.pcap",
        "http-qinq-0.pcap",
        "erspan.pcap",
    ];
    let mut seen = BTreeSet::new();
    for t in traces {
        let trace = corpus.join(t);
        let dir = tempfile::tempdir().unwrap();
        let c = Collector::start();
        let pattern = dir.path().join("f.ipfix");
        let o = weir(&["flows", trace.to_str().unwrap(), "-q", "-n", &c.addr(), "-w", pattern.to_str().unwrap(), "-C", "0.004"]);
        assert!(o.status.success(), "{t}: {}", text(&o.stderr));
        let (rows, _) = c.finish();
        let records = read_ipfix_files(&rotated(dir.path()), 0);
        seen.extend(records.iter().map(|r| (r.contains_key("sourceIPv6Address"), ipfix_row(r).0.key.0)));
        let from_files: Vec<Row> = records.iter().map(|r| ipfix_row(r).0).collect();
        // (fragmented-2's fragments complete no datagram: no record, and
        // still one file, holding the templates.)
        assert!(!rows.is_empty() || t == "ipv4/fragmented-2.pcap", "{t}");
        assert_eq!(row_lines(&from_files), row_lines(&rows), "{t}");
        // And as biflows (IPv6's biflow template too).
        check_biflows(trace.to_str().unwrap(), dir.path());
    }
    for want in [(false, "ICMP"), (true, "ICMP6"), (false, "TCP"), (true, "TCP"), (false, "UDP"), (true, "UDP")] {
        assert!(seen.contains(&(want.0, want.1.to_string())), "no {want:?} record in {seen:?}");
    }
}

/// `-w -` writes the IPFIX messages to standard output, the bytes `-w FILE`
/// writes (but for the wall-clock export time of the opening templates),
/// and creates no file named `-`; rotating it, or sharing it between
/// per-queue exporters, is refused.
#[test]
fn ipfix_to_standard_output_is_the_file_s_bytes_and_is_never_rotated() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synth(dir.path(), "5000", "100");
    let t = trace.to_str().unwrap();
    let file = dir.path().join("f.ipfix");
    let o = weir(&["flows", t, "-w", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let mut want = std::fs::read(&file).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_weir")).args(["flows", t, "-w", "-"]).current_dir(dir.path()).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!dir.path().join("-").exists(), "-w - wrote a file named -");
    let mut got = o.stdout;
    assert!(want.len() > 1000 && got.len() == want.len(), "{} bytes to standard output, {} to the file", got.len(), want.len());
    // The first message holds the templates alone, dated by the wall clock.
    got[4..8].fill(0);
    want[4..8].fill(0);
    assert!(got == want, "-w - wrote other bytes than -w FILE");
    for (extra, says) in [
        (&["-G", "60"][..], "cannot be rotated"),
        (&["-C", "1"], "cannot be rotated"),
        (&["-W", "2"], "cannot be rotated"),
        (&["--export", "per-queue"], "--export per-queue"),
    ] {
        let mut args = vec!["flows", t, "-w", "-"];
        args.extend_from_slice(extra);
        let o = weir(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains(says) && text(&o.stderr).contains("standard output"), "{args:?}: {}", text(&o.stderr));
    }
}

//! `weir synth` as a user runs it: the built binary writes real trace files, which the
//! system libpcap reads back. Checked: determinism, exact packet counts, benchmark
//! addresses only, correct IPv4/TCP/UDP checksums (verified with etherparse), TCP
//! sequence and acknowledgement bookkeeping per flow, concurrency held at --flows,
//! pcapng/nanosecond/snaplen output, `--from` keeping server ports, sizes and
//! checksum verdicts of the real flows, a summary that says what the file shows
//! (flows and concurrency counted here by 5-tuple), and exit code 2 with a clear
//! message, and no file, for bad input and for flows the packets cannot start;
//! `-o -` writes the same bytes to standard output.

use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use weir::filter::oracle::Oracle;

fn synth(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir")).arg("synth").args(args).stdin(Stdio::null()).output().expect("weir runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Run synth into `dir/name` and insist it succeeded; returns the path and stderr.
fn make(dir: &Path, name: &str, args: &[&str]) -> (PathBuf, String) {
    let path = dir.join(name);
    let mut all = vec!["-o", path.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = synth(&all);
    let err = text(&out.stderr);
    assert!(out.status.success(), "weir synth {all:?} failed: {err}");
    (path, err)
}

/// Packets as libpcap reads them: (ts_ns, wire_len, data).
fn libpcap_read(path: &Path) -> Vec<(u64, u32, Vec<u8>)> {
    let lib = Oracle::system().expect("system libpcap");
    let mut h = lib.open_offline(path).expect("libpcap opens the output");
    assert_eq!(h.link_type(), 1, "Ethernet");
    let mut out = Vec::new();
    while let Some(p) = h.next_packet().expect("libpcap reads every packet") {
        out.push((p.ts_ns, p.wire_len, p.data));
    }
    out
}

type Endpoint = ([u8; 4], u16);

/// One packet's flow-relevant fields.
#[derive(Clone, Debug)]
struct Pkt {
    proto: u8,
    src: Endpoint,
    dst: Endpoint,
    /// TCP flags, sequence and acknowledgement numbers.
    tcp: Option<(u8, u32, u32)>,
    payload_len: u32,
}

/// Dissect a whole Ethernet frame and verify its IPv4 and TCP/UDP checksums with etherparse.
fn dissect_checked(frame: &[u8]) -> Pkt {
    let p = SlicedPacket::from_ethernet(frame).expect("a well-formed frame");
    let Some(NetSlice::Ipv4(ip)) = &p.net else { panic!("not IPv4") };
    let h = ip.header().to_header();
    assert_eq!(h.header_checksum, h.calc_header_checksum(), "IPv4 header checksum");
    match &p.transport {
        Some(TransportSlice::Tcp(t)) => {
            assert_eq!(t.checksum(), t.calc_checksum_ipv4(h.source, h.destination).unwrap(), "TCP checksum");
            let flags = frame[14 + usize::from(h.ihl()) * 4 + 13];
            Pkt {
                proto: 6,
                src: (h.source, t.source_port()),
                dst: (h.destination, t.destination_port()),
                tcp: Some((flags, t.sequence_number(), t.acknowledgment_number())),
                payload_len: t.payload().len() as u32,
            }
        }
        Some(TransportSlice::Udp(u)) => {
            let uh = u.to_header();
            assert_eq!(uh.checksum, uh.calc_checksum_ipv4_raw(h.source, h.destination, u.payload()).unwrap(), "UDP checksum");
            Pkt {
                proto: 17,
                src: (h.source, uh.source_port),
                dst: (h.destination, uh.destination_port),
                tcp: None,
                payload_len: u.payload().len() as u32,
            }
        }
        other => panic!("unexpected transport {other:?}"),
    }
}

fn flow_key(p: &Pkt) -> (u8, Endpoint, Endpoint) {
    (p.proto, p.src.min(p.dst), p.src.max(p.dst))
}

fn seq_le(a: u32, b: u32) -> bool {
    b.wrapping_sub(a) as i32 >= 0
}

/// Handshake ISN + 1, in-order data, acknowledgements that advance and never cover unsent bytes.
fn check_tcp_flow(pkts: &[&Pkt]) {
    const SYN: u8 = 0x02;
    const ACK: u8 = 0x10;
    const FIN: u8 = 0x01;
    const RST: u8 = 0x04;
    let (flags, isn, _) = pkts[0].tcp.unwrap();
    assert_eq!(flags, SYN, "every synthetic TCP flow starts with its SYN");
    let client = pkts[0].src;
    assert_eq!(client.0[..2], [198, 18], "the client is in 198.18/16");
    let mut next = [isn.wrapping_add(1), 0];
    let mut acked = [None, None];
    for (i, p) in pkts.iter().enumerate().skip(1) {
        let (flags, seq, ack) = p.tcp.unwrap();
        let side = usize::from(p.src != client);
        if i == 1 {
            assert_eq!((side, ack), (1, isn.wrapping_add(1)), "the server answers the SYN with ISN + 1");
            assert!(flags == SYN | ACK || flags == RST | ACK, "SYN-ACK or refusal, not {flags:#x}");
            next[1] = seq.wrapping_add(1);
            continue;
        }
        if i == 2 {
            assert_eq!((side, flags, seq, ack), (0, ACK, isn.wrapping_add(1), next[1]), "the handshake's ACK");
        }
        assert_eq!(seq, next[side], "packet {i} continues its side's byte stream");
        assert!(flags & ACK != 0);
        assert!(seq_le(ack, next[1 - side]), "packet {i} acknowledges only bytes that were sent");
        if let Some(prev) = acked[side] {
            assert!(seq_le(prev, ack), "packet {i}: acknowledgement went back");
        }
        acked[side] = Some(ack);
        next[side] = next[side].wrapping_add(p.payload_len + u32::from(flags & FIN != 0));
    }
}

fn in_benchmark_range(ip: [u8; 4]) -> bool {
    ip[0] == 198 && (ip[1] == 18 || ip[1] == 19)
}

#[test]
fn same_seed_same_bytes_other_seed_other_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["-n", "4000", "-c", "100", "--seed", "7"];
    let (a, _) = make(dir.path(), "a.pcap", &args);
    let (b, _) = make(dir.path(), "b.pcap", &args);
    let (c, _) = make(dir.path(), "c.pcap", &["-n", "4000", "-c", "100", "--seed", "8"]);
    let (a, b, c) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap(), std::fs::read(c).unwrap());
    assert!(a == b, "the same seed writes the same bytes");
    assert!(a != c, "another seed writes another trace");
}

#[test]
fn built_in_trace_is_valid_consistent_and_concurrent() {
    let dir = tempfile::tempdir().unwrap();
    const N: usize = 40_000;
    const C: usize = 300;
    let (path, err) = make(dir.path(), "t.pcap", &["-n", &N.to_string(), "-c", &C.to_string(), "--seed", "3"]);
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with(&format!("wrote {N} packets, ")), "{err}");
    assert!(last.contains(&format!("(peak concurrency {C}), ")) && last.contains(&format!(" bytes to {} in ", path.display())), "{err}");
    assert!(err.contains("concurrency as the trace shows it"), "{err}");

    let packets = libpcap_read(&path);
    assert_eq!(packets.len(), N, "exactly --packets packets");
    assert!(packets.windows(2).all(|w| w[0].0 <= w[1].0), "timestamps never go back");
    let mut flows: HashMap<(u8, Endpoint, Endpoint), Vec<usize>> = HashMap::new();
    let mut pkts = Vec::with_capacity(N);
    let mut directions = HashSet::new();
    for (i, (_, wire, data)) in packets.iter().enumerate() {
        assert_eq!(*wire as usize, data.len(), "captured whole at the default snaplen");
        let p = dissect_checked(data);
        assert!(in_benchmark_range(p.src.0) && in_benchmark_range(p.dst.0), "{p:?}");
        assert_ne!(p.src.0[1], p.dst.0[1], "one end is a client, the other a server");
        directions.insert(p.src.0[1]);
        flows.entry(flow_key(&p)).or_default().push(i);
        pkts.push(p);
    }
    assert_eq!(directions.len(), 2, "both directions present");

    let mut two_way = 0;
    let mut multi = 0;
    for idx in flows.values() {
        let f: Vec<&Pkt> = idx.iter().map(|&i| &pkts[i]).collect();
        if f[0].proto == 6 {
            check_tcp_flow(&f);
        }
        if f.len() >= 2 {
            multi += 1;
            two_way += usize::from(f.iter().any(|p| p.src != f[0].src));
        }
    }
    assert!(two_way * 100 >= multi * 95, "{two_way} of {multi} flows carry both directions");

    // Open from its first to its last packet; in the middle of the trace C flows are open.
    let mut delta = vec![0i64; N + 1];
    for idx in flows.values() {
        delta[idx[0]] += 1;
        delta[*idx.last().unwrap() + 1] -= 1;
    }
    let mut open = 0i64;
    let mut steady_min = i64::MAX;
    for (i, d) in delta.iter().take(N).enumerate() {
        open += d;
        assert!(open as usize <= C, "never more than --flows open");
        if (N / 4..3 * N / 4).contains(&i) {
            steady_min = steady_min.min(open);
        }
    }
    assert!(steady_min as f64 >= 0.9 * C as f64, "steady-state concurrency {steady_min} of {C}");
}

#[test]
fn pcapng_nanoseconds_and_snaplen() {
    let dir = tempfile::tempdir().unwrap();
    let (ng, _) = make(dir.path(), "t.pcapng", &["-n", "3000", "-c", "50", "--format", "pcapng", "--nanos", "--snaplen", "200"]);
    assert_eq!(&std::fs::read(&ng).unwrap()[..4], b"\x0a\x0d\x0d\x0a", "a pcapng section header");
    let p = libpcap_read(&ng);
    assert_eq!(p.len(), 3000);
    assert!(p.iter().any(|(ts, _, _)| ts % 1000 != 0), "nanosecond timestamps");
    assert!(p.iter().all(|(_, _, d)| d.len() <= 200), "--snaplen caps the captured bytes");
    assert!(p.iter().any(|(_, wire, d)| *wire as usize > d.len()), "the wire length stays whole");
    let (micro, _) = make(dir.path(), "t.pcap", &["-n", "3000", "-c", "50"]);
    let q = libpcap_read(&micro);
    assert!(q.iter().all(|(ts, _, _)| ts % 1000 == 0), "microsecond timestamps by default");
    for ((ta, wa, da), (tb, wb, db)) in p.iter().zip(&q) {
        assert_eq!((ta / 1000, wa, &da[..]), (tb / 1000, wb, &db[..da.len()]), "the same packets either way");
    }
}

/// What a flow's packets look like, address-free: direction, IP-layer captured and wire
/// lengths, and (for packets captured whole) whether the checksums verify.
type Shape = Vec<(bool, u32, u32, Option<bool>)>;

/// Checksum verdict of a whole IPv4 TCP/UDP packet, computed here from scratch.
fn checksums_ok(ip: &[u8]) -> Option<bool> {
    let ihl = usize::from(ip[0] & 15) * 4;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    if total > ip.len() || total < ihl {
        return None;
    }
    let sum = |data: &[u8], mut acc: u64| {
        for c in data.chunks(2) {
            acc += u64::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc
    };
    let l4 = &ip[ihl..total];
    let at = if ip[9] == 6 { 16 } else { 6 };
    if l4.len() < at + 2 {
        return None;
    }
    let pseudo = sum(&ip[12..20], u64::from(ip[9]) + l4.len() as u64);
    let l4_ok = (ip[9] == 17 && l4[6..8] == [0, 0]) || sum(l4, pseudo) == 0xffff;
    Some(sum(&ip[..ihl], 0) == 0xffff && l4_ok)
}

/// (protocol, source, destination, is a bare SYN) of an unfragmented IPv4 TCP/UDP packet with ports.
fn ports_of(ip: &[u8]) -> Option<(u8, Endpoint, Endpoint, bool)> {
    let ihl = usize::from(*ip.first()? & 15) * 4;
    if ip[0] >> 4 != 4 || ihl < 20 || ip.len() < ihl + 4 || u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 || !matches!(ip[9], 6 | 17) {
        return None;
    }
    let port = |at: usize| u16::from_be_bytes([ip[ihl + at], ip[ihl + at + 1]]);
    let syn = ip[9] == 6 && ip.get(ihl + 13).is_some_and(|f| f & 0x12 == 0x02);
    Some((ip[9], ([ip[12], ip[13], ip[14], ip[15]], port(0)), ([ip[16], ip[17], ip[18], ip[19]], port(2)), syn))
}

/// Flows of every trace under `dir`, read with weir's reader: (protocol, server port) → shapes.
fn corpus_shapes(dir: &Path) -> HashMap<(u8, u16), Vec<Shape>> {
    fn files(p: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(p).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                files(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    let mut all = Vec::new();
    files(dir, &mut all);
    let mut shapes: HashMap<(u8, u16), Vec<Shape>> = HashMap::new();
    for f in all {
        type Building = ((Endpoint, Endpoint), Option<Endpoint>, u8, Vec<(Endpoint, u32, u32, Option<bool>)>);
        let mut flows: HashMap<(u8, Endpoint, Endpoint), Building> = HashMap::new();
        let _ = weir::tracefile::for_each_packet(&f, |h, r, data| {
            let Some(weir::wire::link::Network::Ipv4(ip)) = weir::wire::link::network_layer(h.link_type, data) else { return };
            let Some((proto, src, dst, syn)) = ports_of(ip) else { return };
            let link = (data.len() - ip.len()) as u32;
            let e = flows.entry((proto, src.min(dst), src.max(dst))).or_insert(((src, dst), None, proto, Vec::new()));
            if syn && e.1.is_none() {
                e.1 = Some(dst);
            }
            let whole = r.wire_len as usize == data.len();
            e.3.push((src, ip.len() as u32, r.wire_len.max(data.len() as u32) - link, if whole { checksums_ok(ip) } else { None }));
        });
        for (_, (first, syn_dst, proto, pkts)) in flows {
            let server = syn_dst.unwrap_or(first.1);
            let client = if server == first.1 { first.0 } else { first.1 };
            // A flow from an endpoint to itself (loopback captures) counts as all client to server.
            let shape = pkts.iter().map(|(src, cap, wire, ok)| (*src != server || client == server, *cap, *wire, *ok)).collect();
            shapes.entry((proto, server.1)).or_default().push(shape);
        }
    }
    shapes
}

#[test]
#[ignore = "needs the corpus in ../shared/corpus"]
fn from_corpus_keeps_server_ports_sizes_and_checksum_verdicts() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus");
    assert!(corpus.is_dir(), "this test needs the corpus, and ../shared/corpus is not there (looked at {})", corpus.display());
    let zeek = corpus.join("zeek-traces");
    let dir = tempfile::tempdir().unwrap();
    let (path, err) = make(dir.path(), "z.pcap", &["--from", zeek.to_str().unwrap(), "-n", "20000", "-c", "200", "--seed", "5"]);
    assert!(err.contains("trace files (") && err.contains("IPv4 TCP/UDP flows"), "{err}");
    let reference = corpus_shapes(&zeek);
    let packets = libpcap_read(&path);
    assert_eq!(packets.len(), 20_000);
    let mut flows: HashMap<(u8, Endpoint, Endpoint), (Endpoint, Shape)> = HashMap::new();
    for (_, wire, data) in &packets {
        assert_eq!(data[12..14], [0x08, 0x00], "a new Ethernet header");
        let ip = &data[14..];
        let (proto, src, dst, _) = ports_of(ip).expect("only IPv4 TCP/UDP with ports are copied");
        assert!(in_benchmark_range(src.0) && in_benchmark_range(dst.0));
        let server = if dst.0[1] == 19 { dst } else { src };
        let whole = *wire as usize == data.len();
        let e = flows.entry((proto, src.min(dst), src.max(dst))).or_insert((server, Vec::new()));
        assert_eq!(e.0, server, "a copy keeps its server");
        e.1.push((src.0[1] == 18, ip.len() as u32, wire - 14, if whole { checksums_ok(ip) } else { None }));
    }
    assert!(flows.len() > 200, "{} flows", flows.len());
    let mut ports = HashSet::new();
    for ((proto, _, _), (server, shape)) in &flows {
        let candidates = reference.get(&(*proto, server.1)).unwrap_or_else(|| panic!("server port {} is not in the corpus", server.1));
        assert!(
            candidates.iter().any(|c| c.len() >= shape.len() && c[..shape.len()] == shape[..]),
            "a copy to port {} matches no corpus flow's packet sizes, directions and checksum verdicts: {shape:?}",
            server.1
        );
        ports.insert(server.1);
    }
    assert!(ports.len() > 20, "many services: {ports:?}");
}

/// What a reader finds in a trace: flows by 5-tuple, the most open at one packet
/// (each from its first to its last packet), and the time-weighted mean.
fn shown(packets: &[(u64, u32, Vec<u8>)]) -> (usize, usize, f64) {
    /// First and last packet index, first and last timestamp.
    type Span = (usize, usize, u64, u64);
    let mut span: HashMap<(u8, Endpoint, Endpoint), Span> = HashMap::new();
    for (i, (ts, _, data)) in packets.iter().enumerate() {
        let p = dissect_checked(data);
        let e = span.entry(flow_key(&p)).or_insert((i, i, *ts, *ts));
        e.1 = i;
        e.3 = *ts;
    }
    let mut delta = vec![0i64; packets.len() + 1];
    for &(first, last, _, _) in span.values() {
        delta[first] += 1;
        delta[last + 1] -= 1;
    }
    let (mut open, mut peak) = (0i64, 0i64);
    for d in &delta {
        open += d;
        peak = peak.max(open);
    }
    let open_ns: u64 = span.values().map(|&(_, _, a, b)| b - a).sum();
    let trace_ns = packets.last().unwrap().0 - packets[0].0;
    (span.len(), peak as usize, open_ns as f64 / trace_ns as f64)
}

#[test]
fn the_summary_says_what_the_file_shows() {
    let dir = tempfile::tempdir().unwrap();
    // Enough packets per flow to reach the concurrency, and too few (it says so).
    for (n, c, reaches) in [(40_000usize, 300usize, true), (20_000, 1_000, false)] {
        let (path, err) = make(dir.path(), "s.pcap", &["-n", &n.to_string(), "-c", &c.to_string()]);
        let (flows, peak, mean) = shown(&libpcap_read(&path));
        assert_eq!(peak == c, reaches, "{n} packets, {c} flows: peak {peak}");
        assert!(
            err.contains(&format!("wrote {n} packets, {flows} flows (peak concurrency {peak}), ")),
            "{flows} flows, peak {peak}: {err}"
        );
        assert!(err.contains(&format!("... ({flows} flows)")), "the service mix counts the file's flows: {err}");
        let said: f64 = err.split("mean ").nth(1).and_then(|r| r.split(';').next()).unwrap().parse().unwrap();
        assert!((said - mean).abs() <= 1.0, "mean concurrency {said}, the file shows {mean:.1}");
        assert_eq!(err.contains(&format!("shows at most {peak} of the {c} flows")), !reaches, "{err}");
    }
}

#[test]
fn more_flows_than_the_packets_can_start_are_refused_without_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.pcap");
    std::fs::write(&out, b"an older file").unwrap();
    let o = out.to_str().unwrap();
    // The first 15,000 flows start over a ramp that 30,000 packets do not cover.
    let r = synth(&["-o", o, "-n", "30000", "-c", "15000"]);
    let err = text(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{err}");
    let number_after = |text: &str| -> u64 { err.split(text).nth(1).and_then(|r| r.split(' ').next()).unwrap().parse().unwrap() };
    assert!(number_after("in which only ") < 15_000, "{err}");
    // What it says is possible is: those packets start every flow, and those flows fit these packets.
    let (path, _) = make(dir.path(), "more.pcap", &["-n", &number_after("(about ").to_string(), "-c", "15000"]);
    assert!(shown(&libpcap_read(&path)).0 >= 15_000, "every flow started, so the file holds at least 15,000");
    make(dir.path(), "fewer.pcap", &["-n", "30000", "-c", &number_after("Ask for about ").to_string()]);
    let r = synth(&["-o", o, "-n", "100", "-c", "1000"]);
    assert_eq!(r.status.code(), Some(2));
    assert!(text(&r.stderr).contains("100 packets hold at most 100 flows"), "{}", text(&r.stderr));
    assert_eq!(std::fs::read(&out).unwrap(), b"an older file", "a refused run leaves the older file as it was");
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 3, "no temporary file left behind: {names:?}");
}

/// `-o -` writes to standard output the bytes `-o FILE` writes, a trace
/// `weir count -` reads whole, and makes no file named "-". A trace refused
/// after it went out still exits 2, and says what its reader got.
#[test]
fn a_dash_writes_the_trace_to_standard_output() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["-n", "2000", "-c", "50", "--seed", "3"];
    let (path, _) = make(dir.path(), "t.pcap", &args);
    let weir = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
        c.current_dir(dir.path());
        c
    };
    let out = weir().args(["synth", "-o", "-"]).args(args).stdin(Stdio::null()).output().unwrap();
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(out.stdout == std::fs::read(&path).unwrap(), "standard output holds {} bytes, not the file's", out.stdout.len());
    assert!(err.contains("2000 packets") && err.contains("to standard output"), "{err}");
    let mut synth = weir().args(["synth", "-o", "-"]).args(args).stdin(Stdio::null()).stdout(Stdio::piped()).spawn().unwrap();
    let count = weir().args(["count", "--json", "-"]).stdin(synth.stdout.take().unwrap()).output().unwrap();
    assert!(synth.wait().unwrap().success());
    assert!(count.status.success(), "{}", text(&count.stderr));
    let v: serde_json::Value = serde_json::from_slice(&count.stdout).unwrap();
    assert_eq!(v["packets"], 2000, "{v}");
    // The first 15,000 flows start over a ramp that 30,000 packets do not cover.
    let refused = weir().args(["synth", "-o", "-", "-n", "30000", "-c", "15000"]).stdin(Stdio::null()).output().unwrap();
    let err = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(err.contains("What went to standard output is that trace: discard it."), "{err}");
    assert!(refused.stdout.len() > 24, "the refused trace went out: {} bytes", refused.stdout.len());
    assert!(!dir.path().join("-").exists(), "no file named -");
}

#[test]
fn bad_input_exits_2_and_says_what() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.pcap");
    let o = out.to_str().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let cases: [(&[&str], &str); 7] = [
        (&["-o", o, "--format", "pcapx"], "pcapx"),
        (&["-o", o, "-n", "0"], "invalid value '0' for '--packets <N>'"),
        (&["-o", o, "-c", "0"], "--flows must be between 1"),
        (&["-o", o, "--mbps=0"], "invalid value '0' for '--mbps <R>'"),
        (&["-o", o, "--from", "/nonexistent/weir-synth-corpus"], "cannot read --from /nonexistent/weir-synth-corpus"),
        (&["-o", o, "--from", empty.path().to_str().unwrap()], "no IPv4 TCP or UDP flows found"),
        (&["-o", o, "--from", empty.path().to_str().unwrap(), "--mbps", "100"], "cannot be used with"),
    ];
    for (args, says) in cases {
        let r = synth(args);
        let err = text(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?} should say {says:?}: {err}");
        assert!(!out.exists(), "{args:?}: no output file on bad input");
    }
}

#[test]
fn help_explains_every_option_and_default() {
    let r = Command::new(env!("CARGO_BIN_EXE_weir")).args(["synth", "--help"]).output().unwrap();
    let help = text(&r.stdout);
    assert!(r.status.success());
    for s in [
        "--output",
        "--packets",
        "--flows",
        "--seed",
        "--format",
        "--nanos",
        "--mbps",
        "--from",
        "--snaplen",
        "198.18.0.0/16",
        "198.19.0.0/16",
    ] {
        assert!(help.contains(s), "help mentions {s}: {help}");
    }
    for d in ["[default: 1000000]", "[default: 10000]", "[default: 1]", "[default: pcap]", "[default: 1000]", "[default: 262144]"] {
        assert!(help.contains(d), "help shows {d}");
    }
}

//! The C example (`examples/stream_dump.c`) compiled with `cc` against
//! `include/weir_stream.h` and the built `libweirstream.so`, run on a trace
//! this test writes: TCP connections with known payloads, one of them SSH
//! (port 22, discarded by the example's created callback), one over IPv6 and
//! left open at the end. Its printed figures must be the ones the payloads
//! and the cutoff give.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use weir::sink::{FileFormat, TraceWriter, TsPrecision};
use weir::LinkType;

mod layout;
mod support;
use layout::Layout;

const SYN: u8 = 0x02;
const FIN: u8 = 0x01;
const ACK: u8 = 0x10;
const PSH: u8 = 0x08;

/// An Ethernet frame holding a TCP segment of connection `c`, from the
/// client (`up`) or the server, over IPv4 or IPv6 (checksums 0: the stream
/// layer does not check them).
fn segment(c: &Conn, up: bool, seq: u32, ack: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let (src, dst, sport, dport) = if up { (c.client, c.server, c.cport, c.sport) } else { (c.server, c.client, c.sport, c.cport) };
    let mut tcp = Vec::new();
    tcp.extend_from_slice(&sport.to_be_bytes());
    tcp.extend_from_slice(&dport.to_be_bytes());
    tcp.extend_from_slice(&seq.to_be_bytes());
    tcp.extend_from_slice(&ack.to_be_bytes());
    tcp.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    tcp.extend_from_slice(payload);
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            f.extend_from_slice(&[0x08, 0x00]);
            let len = (20 + tcp.len()) as u16;
            f.extend_from_slice(&[0x45, 0, (len >> 8) as u8, len as u8, 0, 0, 0x40, 0, 64, 6, 0, 0]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            f.extend_from_slice(&[0x86, 0xdd]);
            f.extend_from_slice(&[0x60, 0, 0, 0]);
            f.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
            f.extend_from_slice(&[6, 64]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
        }
        _ => panic!("one family per segment"),
    }
    f.extend_from_slice(&tcp);
    f
}

/// A connection: addresses, ports, the payload segments each side sends,
/// whether it ends with FINs.
struct Conn {
    client: IpAddr,
    server: IpAddr,
    cport: u16,
    sport: u16,
    to_server: Vec<Vec<u8>>,
    to_client: Vec<Vec<u8>>,
    fin: bool,
}

fn payload(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed)).collect()
}

fn conns() -> Vec<Conn> {
    let v4 = |d: u8| IpAddr::from([10, 0, 0, d]);
    let v6 = |d: u16| IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, d]);
    vec![
        // HTTP-like: 3 x 1000 up, 2 x 1500 down, closed by FINs.
        Conn {
            client: v4(1),
            server: v4(2),
            cport: 40001,
            sport: 80,
            to_server: vec![payload(1, 1000), payload(2, 1000), payload(3, 1000)],
            to_client: vec![payload(4, 1500), payload(5, 1500)],
            fin: true,
        },
        // SSH: discarded by the example as it is created.
        Conn {
            client: v4(1),
            server: v4(3),
            cport: 40002,
            sport: 22,
            to_server: vec![payload(6, 500)],
            to_client: vec![payload(7, 700)],
            fin: true,
        },
        // IPv6, left open at the end of the trace.
        Conn {
            client: v6(1),
            server: v6(2),
            cport: 40003,
            sport: 443,
            to_server: vec![payload(8, 1400), payload(9, 1100)],
            to_client: vec![payload(10, 300)],
            fin: false,
        },
    ]
}

fn write_trace(path: &Path, conns: &[Conn]) {
    let mut w =
        TraceWriter::new(std::fs::File::create(path).unwrap(), FileFormat::Pcap, LinkType::ETHERNET, 65535, TsPrecision::Nano).unwrap();
    let mut ts = 1_700_000_000_000_000_000u64;
    let mut put = |f: Vec<u8>| {
        ts += 1_000_000;
        w.write_packet(ts, &f, f.len() as u32).unwrap();
    };
    for (i, c) in conns.iter().enumerate() {
        let (mut cs, mut ss) = (1000 + i as u32 * 100_000, 5_000_000 + i as u32 * 100_000);
        let up = |seq, ack, flags, p: &[u8]| segment(c, true, seq, ack, flags, p);
        let down = |seq, ack, flags, p: &[u8]| segment(c, false, seq, ack, flags, p);
        put(up(cs, 0, SYN, &[]));
        put(down(ss, cs + 1, SYN | ACK, &[]));
        cs += 1;
        ss += 1;
        put(up(cs, ss, ACK, &[]));
        for k in 0..c.to_server.len().max(c.to_client.len()) {
            if let Some(p) = c.to_server.get(k) {
                put(up(cs, ss, ACK | PSH, p));
                cs += p.len() as u32;
            }
            if let Some(p) = c.to_client.get(k) {
                put(down(ss, cs, ACK | PSH, p));
                ss += p.len() as u32;
            }
        }
        if c.fin {
            put(up(cs, ss, FIN | ACK, &[]));
            put(down(ss, cs + 1, FIN | ACK, &[]));
            put(up(cs + 1, ss + 1, ACK, &[]));
        }
    }
    w.finish().unwrap();
}

fn compile_example(out: &Path) -> PathBuf {
    support::compile(&Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/stream_dump.c"), out)
}

/// Runs the example, returns its `key=value` figures.
fn run(bin: &Path, source: &str, cutoff: i64) -> HashMap<String, u64> {
    let out = support::command(bin).arg(source).arg(cutoff.to_string()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "stream_dump {source} {cutoff}: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    eprintln!("stream_dump {source} {cutoff}: {stdout}");
    assert_eq!(stdout.lines().count(), 1, "one line: {stdout}");
    stdout
        .split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or_else(|| panic!("`{kv}` in {stdout}"));
            (k.to_string(), v.parse().unwrap_or_else(|_| panic!("`{kv}` in {stdout}")))
        })
        .collect()
}

/// The figures the example must print for `conns` under `cutoff`.
fn expected(conns: &[Conn], cutoff: Option<u64>) -> HashMap<&'static str, u64> {
    let mut e: HashMap<&'static str, u64> = HashMap::new();
    for c in conns {
        let ssh = c.sport == 22;
        for dir in [&c.to_server, &c.to_client] {
            let bytes: Vec<u8> = dir.concat();
            let keep = if ssh { 0 } else { cutoff.map_or(bytes.len(), |k| (k as usize).min(bytes.len())) };
            let sum: u64 = bytes[..keep].iter().map(|&b| u64::from(b)).sum();
            let reason = if c.fin { "fin" } else { "end" };
            *e.entry("streams").or_default() += 1;
            *e.entry("delivered").or_default() += keep as u64;
            *e.entry("sum").or_default() += sum;
            *e.entry("discarded").or_default() += (bytes.len() - keep) as u64;
            *e.entry(reason).or_default() += 1;
            *e.entry(if c.fin { "fin_bytes" } else { "end_bytes" }).or_default() += keep as u64;
            if ssh {
                *e.entry("ssh_streams").or_default() += 1;
                *e.entry("ssh_discarded").or_default() += bytes.len() as u64;
            }
        }
    }
    for k in ["rst", "idle", "evicted", "reused", "order_errors", "mismatches", "cutoff_violations", "failures"] {
        e.insert(k, 0);
    }
    e.insert("stats_streams", e["streams"]);
    e.insert("stats_connections", conns.len() as u64);
    e.insert("stats_delivered", e["delivered"]);
    e.insert("stats_discarded", e["discarded"]);
    e.insert("stats_closed_fin", e["fin"]);
    e.insert("stats_closed_end", e["end"]);
    e
}

fn check(got: &HashMap<String, u64>, want: &HashMap<&'static str, u64>, what: &str) {
    for (k, v) in want {
        assert_eq!(got.get(*k), Some(v), "{what}: `{k}` (got {got:?})");
    }
}

#[test]
fn stream_dump_prints_the_figures_of_the_payloads() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("conns.pcap");
    let conns = conns();
    write_trace(&trace, &conns);
    let bin = compile_example(dir.path());
    let trace = trace.to_str().unwrap();

    // A cutoff below some streams' length: they are cut, the rest counted as discarded.
    let want = expected(&conns, Some(1200));
    assert_eq!((want["delivered"], want["discarded"], want["ssh_discarded"]), (3900, 6100, 1200));
    let got = run(&bin, trace, 1200);
    check(&got, &want, "cutoff 1200");
    // The layer saw every packet: 3 connections of 3 handshake packets, their data, 3 FIN/ACK packets for two.
    assert_eq!(got["stats_packets"], 3 * 3 + 5 + 2 + 3 + 2 * 3);

    // No cutoff: everything but the SSH streams delivered.
    let want = expected(&conns, None);
    assert_eq!((want["delivered"], want["discarded"]), (8800, 1200));
    check(&run(&bin, trace, -1), &want, "no cutoff");

    // Two queues, two workers calling back at once: the same figures.
    check(&run(&bin, &format!("{trace}@0-1"), 1200), &expected(&conns, Some(1200)), "two queues");

    // Statistics only: nothing delivered, every byte discarded.
    let want = expected(&conns, Some(0));
    assert_eq!(want["delivered"], 0);
    check(&run(&bin, trace, 0), &want, "cutoff 0");
}

#[test]
fn stream_dump_reports_a_missing_trace() {
    let dir = tempfile::tempdir().unwrap();
    let bin = compile_example(dir.path());
    let out = support::command(&bin).arg(dir.path().join("missing.pcap")).arg("-1").output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("missing.pcap"), "{err}");
}

/// The header's structs and the library's agree field by field: a C program
/// prints every field's offset and each struct's size, compared with Rust's.
#[test]
fn the_header_structs_match_the_library() {
    use std::mem::{offset_of, size_of};
    use weirstream::handler::StreamInfo as I;
    use weirstream::CStats as S;
    let info: Vec<(&str, usize)> = vec![
        ("family", offset_of!(I, family)),
        ("src", offset_of!(I, src)),
        ("dst", offset_of!(I, dst)),
        ("sport", offset_of!(I, sport)),
        ("dport", offset_of!(I, dport)),
        ("protocol", offset_of!(I, protocol)),
        ("direction", offset_of!(I, direction)),
        ("queue", offset_of!(I, queue)),
        ("first_ns", offset_of!(I, first_ns)),
        ("last_ns", offset_of!(I, last_ns)),
        ("packets", offset_of!(I, packets)),
        ("bytes", offset_of!(I, bytes)),
        ("delivered", offset_of!(I, delivered)),
        ("gap", offset_of!(I, gap)),
        ("duplicate", offset_of!(I, duplicate)),
        ("discarded", offset_of!(I, discarded)),
        ("dropped", offset_of!(I, dropped)),
        ("refused", offset_of!(I, refused)),
        ("cutoff", offset_of!(I, cutoff)),
        ("priority", offset_of!(I, priority)),
        ("mode", offset_of!(I, mode)),
        ("close_reason", offset_of!(I, close_reason)),
    ];
    let stats = [
        "packets",
        "not_ip",
        "malformed",
        "fragments",
        "untracked",
        "to_stream",
        "discarded_packets",
        "dropped_packets",
        "streams",
        "connections",
        "closed_fin",
        "closed_rst",
        "closed_idle",
        "evicted",
        "closed_end",
        "closed_reused",
        "bytes",
        "delivered",
        "gap",
        "duplicate",
        "discarded",
        "dropped",
        "refused",
        "pieces",
        "memory_peak",
    ];
    // CStats is all u64s, in the header's order.
    assert_eq!(size_of::<S>(), stats.len() * 8);
    assert_eq!(offset_of!(S, memory_peak), (stats.len() - 1) * 8);
    let stats: Vec<(&str, usize)> = stats.iter().enumerate().map(|(i, f)| (*f, i * 8)).collect();
    layout::assert_c_layout(
        "weir_stream.h",
        &[
            Layout { label: "info", c_type: "weir_stream_info_t", size: size_of::<I>(), fields: &info },
            Layout { label: "stats", c_type: "weir_stream_stats_t", size: size_of::<S>(), fields: &stats },
        ],
    );
}

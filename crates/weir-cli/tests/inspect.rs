//! `weir inspect`: the same alerts and per-flow counters, byte for byte, with the
//! locality buffer on and off, on every balance mode, on a synthesized trace and
//! on real ones, and whatever the flow table's size; flows ended by the idle
//! timeout in packet time and evictions from a full table, counted; records
//! spilled to disk come back whole; rule files with mistakes are refused with the
//! line named. With `--streams`: contents split across segments and pieces
//! found exactly once, a cutoff that leaves what is past it unscanned and
//! counts its bytes exactly, and the same alerts whatever the queues, the
//! locality buffer and the piece size.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn weir(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir")).args(args).stdin(Stdio::null()).output().expect("weir runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Run inspect on `source` with `extra` options; return what it wrote.
fn inspect(dir: &Path, source: &str, extra: &[&str]) -> String {
    let out = dir.join("out.jsonl");
    let mut args = vec!["inspect", "-q", source, "-o", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = weir(&args);
    assert!(o.status.success(), "weir {args:?}: {}", text(&o.stderr));
    std::fs::read_to_string(out).unwrap()
}

/// `../shared/corpus/zeek-traces`; a test asked for without it fails and says where it looked.
fn corpus() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus/zeek-traces");
    assert!(p.is_dir(), "this test needs the corpus, and ../shared/corpus is not there (looked at {})", p.display());
    p
}

#[test]
fn alerts_and_flow_counters_are_the_same_with_the_locality_buffer_on_and_off() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.pcap");
    let o = weir(&["synth", "-o", trace.to_str().unwrap(), "-n", "40000", "-c", "3000"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let t = trace.to_str().unwrap();
    let off = inspect(dir.path(), t, &[]);
    let alerts = off.lines().filter(|l| l.starts_with("{\"alert\"")).count();
    let flows = off.lines().filter(|l| l.starts_with("{\"alerts\"")).count();
    assert!(alerts > 100 && flows > 1000, "{alerts} alerts, {flows} flows: the workload must do something");
    let split = format!("{t}@0-1");
    for (source, extra) in [
        (t, vec!["--locality", "1000"]),
        (t, vec!["--locality", "8000", "--locality-double"]),
        (split.as_str(), vec!["--locality", "500", "--balance", "rebalance"]),
        (split.as_str(), vec!["--locality", "500", "--balance", "offload:50"]),
        (split.as_str(), vec![]),
    ] {
        assert!(inspect(dir.path(), source, &extra) == off, "{source} {extra:?}: output differs from the buffer off");
    }
    // The automata are a choice of speed and memory, not of what matches.
    for extra in [vec!["--automaton", "nfa"], vec!["--split-any"], vec!["--automaton", "nfa", "--split-any", "--locality", "1000"]] {
        assert!(inspect(dir.path(), t, &extra) == off, "{extra:?}: output differs from the default automata");
    }
    // The flow-table workload alone writes the same counters, without alerts.
    let flows_only = inspect(dir.path(), t, &["--work", "flows", "--locality", "1000"]);
    assert_eq!(flows_only.lines().count(), flows);
}

#[test]
#[ignore = "needs the corpus in ../shared/corpus"]
fn real_traces_give_the_same_output_with_the_buffer_on() {
    let dir = corpus();
    let tmp = tempfile::tempdir().unwrap();
    let mut tried = 0;
    for name in ["http/bro.org.pcap", "http-vlan-0.pcap", "dns-caa.pcap", "smtp.pcap", "ssl-and-ssh-using-sslh.pcap"] {
        let p = dir.join(name);
        if !p.is_file() {
            continue;
        }
        tried += 1;
        let s = p.to_str().unwrap();
        assert_eq!(inspect(tmp.path(), s, &["--locality", "64"]), inspect(tmp.path(), s, &[]), "{name}");
    }
    assert_eq!(tried, 5, "a trace named here is missing from the corpus");
}

#[test]
fn a_rule_file_with_a_mistake_is_refused_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("r.rules");
    std::fs::write(&rules, "# ok\n1 80 \"GET\"\n2 80 GET\n").unwrap();
    let o = weir(&["inspect", "--rules", rules.to_str().unwrap(), "/dev/null"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("r.rules:3") && text(&o.stderr).contains("double quotes"), "{}", text(&o.stderr));
    let p = weir(&["inspect", "--print-rules"]);
    assert!(p.status.success() && text(&p.stdout).lines().count() > 4000);
}

/// Run inspect with `--json`; return the records it wrote and its summary.
fn inspect_json(dir: &Path, source: &str, extra: &[&str]) -> (String, serde_json::Value) {
    let out = dir.join("records.jsonl");
    let mut args = vec!["inspect", "-q", "--json", source, "-o", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = weir(&args);
    assert!(o.status.success(), "weir {args:?}: {}", text(&o.stderr));
    (std::fs::read_to_string(out).unwrap(), serde_json::from_slice(&o.stdout).unwrap())
}

fn synth(dir: &Path, packets: &str, flows: &str) -> PathBuf {
    let trace = dir.join("t.pcap");
    let o = weir(&["synth", "-o", trace.to_str().unwrap(), "-n", packets, "-c", flows]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    trace
}

#[test]
fn a_small_table_evicts_and_still_writes_every_flow_as_a_large_one_does() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synth(dir.path(), "40000", "3000");
    let t = trace.to_str().unwrap();
    let (all, big) = inspect_json(dir.path(), t, &[]);
    assert_eq!(big["flow_table"]["evictions"], 0, "{big}");
    let flows = all.lines().filter(|l| l.starts_with("{\"alerts\"")).count() as u64;
    assert_eq!(big["flow_records"], flows);
    assert!(flows > 3000, "{flows} flows");
    // Nothing is lost: every packet with a flow is in exactly one record.
    let packets: u64 = all
        .lines()
        .filter(|l| l.starts_with("{\"alerts\""))
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["packets"].as_u64().unwrap())
        .sum();
    assert_eq!(packets + big["packets_without_flow"].as_u64().unwrap(), 40_000);

    let split = format!("{t}@0-1");
    for (source, extra) in [
        (t, vec!["--max-flows", "64"]),
        (t, vec!["--max-flows", "1", "--locality", "1000"]),
        (split.as_str(), vec!["--max-flows", "64", "--locality", "500", "--balance", "offload:50"]),
    ] {
        let (got, summary) = inspect_json(dir.path(), source, &extra);
        assert!(got == all, "{source} {extra:?}: the records differ from the table that held every flow");
        let table = &summary["flow_table"];
        let per_queue = table["max_flows_per_queue"].as_u64().unwrap();
        assert!(table["peak_flows_per_queue"].as_u64().unwrap() <= per_queue, "{summary}");
        assert!(table["evictions"].as_u64().unwrap() > 0, "{extra:?}: {summary}");
        assert_eq!(
            table["flows_created"].as_u64().unwrap(),
            table["evictions"].as_u64().unwrap() + table["timeouts"].as_u64().unwrap() + table_held(&summary),
            "every flow made either left (counted) or was still held: {summary}"
        );
    }
}

/// Flows the tables still held at the end: those made and not counted as leaving.
fn table_held(summary: &serde_json::Value) -> u64 {
    summary["flow_table"]["flows_held_at_end"].as_u64().unwrap()
}

/// A pcap (Ethernet) of (seconds, frame) records.
fn write_pcap(path: &Path, frames: &[(u32, Vec<u8>)]) {
    let mut b = Vec::new();
    for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65535, 1] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for (sec, f) in frames {
        for v in [*sec, 0, f.len() as u32, f.len() as u32] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(f);
    }
    std::fs::write(path, b).unwrap();
}

/// A pcap of (seconds, flow) UDP packets: flow n goes from port 1000 + n to 53.
fn timed_trace(path: &Path, packets: &[(u32, u16)]) {
    let frames: Vec<(u32, Vec<u8>)> = packets
        .iter()
        .map(|&(sec, flow)| {
            let mut f =
                vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 8, 0, 0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 198, 18, 0, 1, 198, 19, 0, 1];
            f.extend_from_slice(&(1000 + flow).to_be_bytes());
            f.extend_from_slice(&[0, 53, 0, 8, 0, 0]);
            (sec, f)
        })
        .collect();
    write_pcap(path, &frames);
}

#[test]
fn flows_idle_past_the_timeout_end_in_packet_time_and_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("idle.pcap");
    // Flow 0 at 0, 1, 100 and 101 s; flow 1 at 50 s. Packet time only: the run takes milliseconds.
    timed_trace(&trace, &[(0, 0), (1, 0), (50, 1), (100, 0), (101, 0)]);
    let t = trace.to_str().unwrap();
    let records = |out: &str| -> Vec<(String, u64, u64)> {
        out.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .map(|v| {
                (v["flow"].as_str().unwrap().to_string(), v["packets"].as_u64().unwrap(), v["first_ns"].as_u64().unwrap() / 1_000_000_000)
            })
            .collect()
    };
    let (out, summary) = inspect_json(dir.path(), t, &["--work", "flows", "--idle-timeout", "10"]);
    let f0 = "198.18.0.1:1000 198.19.0.1:53 17".to_string();
    let f1 = "198.18.0.1:1001 198.19.0.1:53 17".to_string();
    assert_eq!(records(&out), [(f0.clone(), 2, 0), (f0.clone(), 2, 100), (f1.clone(), 1, 50)]);
    // Flow 0 timed out at 50 s (when flow 1's packet moved the clock), flow 1 at 100 s.
    assert_eq!(summary["flow_table"]["timeouts"], 2, "{summary}");
    assert_eq!(summary["flow_table"]["evictions"], 0, "{summary}");
    let (out, summary) = inspect_json(dir.path(), t, &["--work", "flows", "--idle-timeout", "1000"]);
    assert_eq!(records(&out), [(f0, 4, 0), (f1, 1, 50)]);
    assert_eq!(summary["flow_table"]["timeouts"], 0, "{summary}");
}

#[test]
fn records_spilled_to_disk_come_back_sorted_and_whole() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synth(dir.path(), "300000", "20000");
    let t = trace.to_str().unwrap();
    // A 1 ms timeout ends flows at most pauses: far more records than a worker keeps in memory.
    let (one, summary) = inspect_json(dir.path(), t, &["--idle-timeout", "0.001", "--max-flows", "500"]);
    assert!(summary["records_spilled_to_disk"].as_u64().unwrap() > 0, "{summary}");
    assert!(summary["flow_records"].as_u64().unwrap() > 70_000, "{summary}");
    let (two, _) = inspect_json(dir.path(), &format!("{t}@0-1"), &["--idle-timeout", "0.001", "--locality", "4000"]);
    assert!(one == two, "the same records from a spilling small table and from two large ones");
    let keys: Vec<(String, u64)> = one
        .lines()
        .filter(|l| l.starts_with("{\"alerts\""))
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|v| (v["flow"].as_str().unwrap().to_string(), v["first_ns"].as_u64().unwrap()))
        .collect();
    assert!(keys.windows(2).all(|w| w[0] != w[1]), "no record repeated");
}

#[test]
fn the_table_is_reported_at_the_start_and_its_options_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("one.pcap");
    timed_trace(&trace, &[(0, 0)]);
    let t = trace.to_str().unwrap();
    let o = weir(&["inspect", "--work", "flows", "--max-flows", "1000", t, "-o", dir.path().join("o").to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.contains("flow table of at most 1000 flows") && err.contains("MiB at most"), "{err}");
    assert!(err.contains("0 timed out, 0 evicted"), "{err}");
    for (args, says) in [
        (vec!["--json", t], "--json writes the summary to standard output"),
        (vec!["--idle-timeout", "0", t], "invalid value '0' for '--idle-timeout <SECS>'"),
        (vec!["--max-flows", "0", t], "--max-flows"),
    ] {
        let mut all = vec!["inspect", "-q"];
        all.extend_from_slice(&args);
        let o = weir(&all);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains(says), "{args:?}: {}", text(&o.stderr));
    }
    let help = text(&weir(&["inspect", "--help"]).stdout);
    for s in ["--max-flows", "[default: 1000000]", "--idle-timeout", "[default: 300]", "packet time", "--json"] {
        assert!(help.contains(s), "inspect --help mentions {s}");
    }
}

const CLIENT: [u8; 4] = [198, 18, 0, 1];
const SERVER: [u8; 4] = [198, 19, 0, 1];

fn eth() -> etherparse::PacketBuilderStep<etherparse::Ethernet2Header> {
    etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
}

/// One TCP connection from CLIENT:40000 to SERVER:`port`, a frame a second:
/// the handshake, the client's `client` segments, the server's `server`
/// segments, and both FINs.
fn tcp_connection(port: u16, client: &[&[u8]], server: &[&[u8]]) -> Vec<(u32, Vec<u8>)> {
    let (c_isn, s_isn) = (1000u32, 5000u32);
    let c_len: u32 = client.iter().map(|s| s.len() as u32).sum();
    let s_len: u32 = server.iter().map(|s| s.len() as u32).sum();
    let mut frames = Vec::new();
    let mut push = |b: etherparse::PacketBuilderStep<etherparse::TcpHeader>, payload: &[u8]| {
        let mut f = Vec::new();
        b.write(&mut f, payload).unwrap();
        frames.push((frames.len() as u32, f));
    };
    let from_client = |seq: u32| eth().ipv4(CLIENT, SERVER, 64).tcp(40000, port, seq, 65535);
    let from_server = |seq: u32| eth().ipv4(SERVER, CLIENT, 64).tcp(port, 40000, seq, 65535);
    push(from_client(c_isn).syn(), &[]);
    push(from_server(s_isn).syn().ack(c_isn + 1), &[]);
    push(from_client(c_isn + 1).ack(s_isn + 1), &[]);
    let mut seq = c_isn + 1;
    for seg in client {
        push(from_client(seq).ack(s_isn + 1), seg);
        seq += seg.len() as u32;
    }
    let mut seq = s_isn + 1;
    for seg in server {
        push(from_server(seq).ack(c_isn + 1 + c_len), seg);
        seq += seg.len() as u32;
    }
    push(from_client(c_isn + 1 + c_len).fin().ack(s_isn + 1 + s_len), &[]);
    push(from_server(s_isn + 1 + s_len).fin().ack(c_isn + 2 + c_len), &[]);
    frames
}

/// A UDP datagram from CLIENT:40001 to SERVER:`port`.
fn udp_datagram(port: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    eth().ipv4(CLIENT, SERVER, 64).udp(40001, port).write(&mut f, payload).unwrap();
    f
}

/// (rule, offset) of each stream-mode alert, in the order written; the
/// offset is None for packet alerts.
fn alerts(out: &str) -> Vec<(u64, Option<u64>)> {
    out.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v.get("alert").is_some())
        .map(|v| (v["alert"].as_u64().unwrap(), v["offset"].as_u64()))
        .collect()
}

fn rules_file(dir: &Path, text: &str) -> String {
    let p = dir.join("test.rules");
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn with_streams_a_content_split_across_segments_or_datagrams_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let rules = rules_file(dir.path(), "1 80 \"SPLITPATTERN\"\n2 53 \"UDPSPLIT\"\n");
    let trace = dir.path().join("split.pcap");
    let mut frames = tcp_connection(80, &[b"GET /SPLIT", b"PATTERN HTTP/1.1\r\n"], &[b"HTTP/1.1 200 OK\r\n"]);
    frames.push((100, udp_datagram(53, b"xxUDP")));
    frames.push((101, udp_datagram(53, b"SPLITyy")));
    write_pcap(&trace, &frames);
    let t = trace.to_str().unwrap();
    let whole = tcp_connection(80, &[b"GET /SPLITPATTERN HTTP/1.1\r\n"], &[]);
    let whole_trace = dir.path().join("whole.pcap");
    write_pcap(&whole_trace, &whole);

    // Packets: neither segment nor datagram holds a whole content; in one segment it is found.
    assert_eq!(alerts(&inspect(dir.path(), t, &["--rules", &rules])), vec![]);
    assert_eq!(alerts(&inspect(dir.path(), whole_trace.to_str().unwrap(), &["--rules", &rules])), vec![(1, None)]);
    // Streams: both, at their stream offsets.
    let (out, summary) = inspect_json(dir.path(), t, &["--rules", &rules, "--streams"]);
    assert_eq!(alerts(&out), vec![(1, Some(5)), (2, Some(2))]);
    let first: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(first["stream"], "198.18.0.1:40000 198.19.0.1:80 6", "{first}");
    assert_eq!(first["direction"], "initiator", "{first}");
    assert_eq!(summary["mode"], "streams", "{summary}");
    assert_eq!(summary["alerts"], 2, "{summary}");
    assert_eq!(summary["delivered_bytes"], 10 + 18 + 17 + 5 + 7, "{summary}");
    assert_eq!(summary["stream_layer"]["packets"], frames.len(), "{summary}");
}

#[test]
fn a_content_across_two_pieces_is_found_once_and_one_inside_the_overlap_is_not_repeated() {
    let dir = tempfile::tempdir().unwrap();
    // The overlap is 11 bytes (the longest content less one): the short
    // content lies in the repeated bytes of several pieces.
    let rules = rules_file(dir.path(), "1 80 \"ABCDEFGHIJKL\"\n2 80 \"wxyz\"\n3 any \"zzzz\"\n");
    let mut data = [b'.'; 200];
    let mut want = Vec::new();
    for at in [10usize, 30, 47, 100, 150] {
        data[at..at + 12].copy_from_slice(b"ABCDEFGHIJKL");
        want.push((1, Some(at as u64)));
    }
    for at in [25usize, 60, 64, 70, 90, 120, 131, 196] {
        data[at..at + 4].copy_from_slice(b"wxyz");
        want.push((2, Some(at as u64)));
    }
    // Overlapping matches count each: "zzzzzz" holds three.
    data[170..176].copy_from_slice(b"zzzzzz");
    want.extend([(3, Some(170)), (3, Some(171)), (3, Some(172))]);
    want.sort_by_key(|&(rule, at)| (at, rule));
    // Segments of 7 bytes: contents cross segment boundaries too.
    let segments: Vec<&[u8]> = data.chunks(7).collect();
    let trace = dir.path().join("pieces.pcap");
    write_pcap(&trace, &tcp_connection(80, &segments, &[]));
    let t = trace.to_str().unwrap();
    let two = format!("{t}@0-1");
    for (source, piece) in [(t, "12"), (t, "13"), (t, "16"), (t, "29"), (t, "16384"), (two.as_str(), "16")] {
        let (out, summary) = inspect_json(dir.path(), source, &["--rules", &rules, "--streams", "--piece", piece]);
        assert_eq!(alerts(&out), want, "--piece {piece} on {source}");
        assert_eq!(summary["piece_overlap"], 11, "{summary}");
        let pieces = summary["stream_layer"]["pieces"].as_u64().unwrap();
        assert!(piece != "12" || pieces >= 180, "--piece 12 delivers a piece per new byte: {summary}");
    }
    // A piece no longer than the overlap could not hold a straddling match.
    let o = weir(&["inspect", "-q", "--rules", &rules, "--streams", "--piece", "11", t, "-o", "/dev/null"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("--piece 11") && text(&o.stderr).contains("last 11 bytes"), "{}", text(&o.stderr));
}

#[test]
fn a_cutoff_leaves_contents_past_it_unfound_and_counts_its_bytes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let rules = rules_file(dir.path(), "1 80 \"NEEDLE\"\n");
    let mut request = vec![b'-'; 3000];
    request[100..106].copy_from_slice(b"NEEDLE");
    // Straddles the cutoff (1000): its first bytes are delivered, the rest is not.
    request[997..1003].copy_from_slice(b"NEEDLE");
    request[2500..2506].copy_from_slice(b"NEEDLE");
    let mut response = vec![b'+'; 700];
    response[600..606].copy_from_slice(b"NEEDLE");
    let segments: Vec<&[u8]> = request.chunks(1400).collect();
    let trace = dir.path().join("cut.pcap");
    write_pcap(&trace, &tcp_connection(80, &segments, &[&response]));
    let t = trace.to_str().unwrap();

    let (all, s_all) = inspect_json(dir.path(), t, &["--rules", &rules, "--streams"]);
    // Sorted by stream (the request's first), then offset.
    assert_eq!(alerts(&all), vec![(1, Some(100)), (1, Some(997)), (1, Some(2500)), (1, Some(600))]);
    assert_eq!((s_all["delivered_bytes"].as_u64(), s_all["discarded_bytes"].as_u64()), (Some(3700), Some(0)), "{s_all}");

    let (cut, s_cut) = inspect_json(dir.path(), t, &["--rules", &rules, "--streams", "--cutoff", "1000"]);
    assert_eq!(alerts(&cut), vec![(1, Some(100)), (1, Some(600))]);
    assert_eq!(s_cut["stream_bytes"], 3700, "{s_cut}");
    assert_eq!(s_cut["delivered_bytes"], 1000 + 700, "{s_cut}");
    assert_eq!(s_cut["discarded_bytes"], 2000, "{s_cut}");
    assert_eq!(s_cut["stream_layer"]["discarded_bytes"], 2000, "{s_cut}");
    // The second and third segments (1400..2800, 2800..3000) are past the cutoff whole: discarded packets.
    assert_eq!(s_cut["stream_layer"]["discarded_packets"], 2, "{s_cut}");
    assert_eq!(s_cut["cutoff"], 1000, "{s_cut}");

    // A class cutoff of 0 for the port leaves nothing to scan.
    let (none, s_none) = inspect_json(dir.path(), t, &["--rules", &rules, "--streams", "--cutoff-class", "port 80=0"]);
    assert_eq!(alerts(&none), vec![]);
    assert_eq!((s_none["delivered_bytes"].as_u64(), s_none["discarded_bytes"].as_u64()), (Some(0), Some(3700)), "{s_none}");
}

#[test]
fn stream_alerts_are_the_same_whatever_the_queues_locality_and_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synth(dir.path(), "20000", "1500");
    let t = trace.to_str().unwrap();
    let (one, summary) = inspect_json(dir.path(), t, &["--streams"]);
    let found = alerts(&one);
    assert!(found.len() > 500, "{} alerts: the workload must find something: {summary}", found.len());
    assert_eq!(summary["stream_layer"]["evicted"], 0, "{summary}");
    let split = format!("{t}@0-1");
    for (source, extra) in [
        (split.as_str(), vec![]),
        (split.as_str(), vec!["--locality", "500"]),
        (t, vec!["--locality", "1000", "--piece", "100"]),
        (t, vec!["--automaton", "nfa", "--split-any"]),
    ] {
        let mut args = vec!["--streams"];
        args.extend_from_slice(&extra);
        let (got, _) = inspect_json(dir.path(), source, &args);
        assert!(got == one, "{source} {extra:?}: the alerts differ");
    }
    // Every payload byte in one category, every packet in one.
    let s = &summary["stream_layer"];
    let n = |k: &str| s[k].as_u64().unwrap();
    assert_eq!(n("bytes"), n("delivered_bytes") + n("duplicate_bytes") + n("discarded_bytes") + n("dropped_bytes") + n("refused_bytes"));
    assert_eq!(n("packets"), 20_000);
}

#[test]
fn stream_options_need_streams_and_streams_need_rules() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("one.pcap");
    timed_trace(&trace, &[(0, 0)]);
    let t = trace.to_str().unwrap();
    for (args, says) in [
        (vec!["--cutoff", "10", t], "--streams"),
        (vec!["--max-streams", "10", t], "--streams"),
        (vec!["--streams", "--work", "flows", t], "--work flows has no rules"),
        (vec!["--streams", "--max-flows", "10", t], "--max-flows"),
        (vec!["--streams", "--mode", "tcp-slow", t], "tcp-slow"),
    ] {
        let mut all = vec!["inspect", "-q", "-o", "/dev/null"];
        all.extend_from_slice(&args);
        let o = weir(&all);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains(says), "{args:?}: {}", text(&o.stderr));
    }
}

fn small_trace(dir: &Path) -> String {
    let t = dir.join("small.pcap");
    let o = weir(&["synth", "-o", t.to_str().unwrap(), "--packets", "200", "--flows", "10"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    t.to_str().unwrap().to_string()
}

/// A rule file that starts with a UTF-8 byte order mark is read as without
/// it; one with bytes that are not UTF-8 (a binary file) is refused naming
/// the file, the line and the byte.
#[test]
fn a_bom_is_skipped_and_bytes_that_are_not_text_are_named_by_line() {
    let dir = tempfile::tempdir().unwrap();
    let t = small_trace(dir.path());
    let rules = dir.path().join("r.rules");
    std::fs::write(&rules, "\u{feff}1 80 \"GET\"\n2 any \"x\"\n").unwrap();
    let o = weir(&["inspect", "-q", "--rules", rules.to_str().unwrap(), &t, "-o", "/dev/null"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    std::fs::write(&rules, b"# rules\n1 80 \"GET\"\n2 80 \"ab\xff\xfe\"\n").unwrap();
    let o = weir(&["inspect", "-q", "--rules", rules.to_str().unwrap(), &t, "-o", "/dev/null"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("{}:3:9: byte 0xff", rules.display())) && err.contains("not UTF-8"), "{err}");
}

/// One rule of 100,000 bytes of `A`: its DFA's build walks failure links
/// from every state (29 s in a release build, minutes in a debug one), so
/// it is built as an NFA, with a warning, in moments.
#[test]
fn a_content_whose_dfa_would_take_minutes_is_built_as_an_nfa() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("long.rules");
    std::fs::write(&rules, format!("1 any \"{}\"\n2 80 \"GET\"\n", "A".repeat(100_000))).unwrap();
    let t = small_trace(dir.path());
    let started = std::time::Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["inspect", "--rules", rules.to_str().unwrap(), &t, "-o", "/dev/null"])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed().as_secs() > 20 {
            child.kill().unwrap();
            panic!("weir inspect was still building its automata after 20 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("built as an NFA") && err.contains("100000 bytes"), "{err}");
}

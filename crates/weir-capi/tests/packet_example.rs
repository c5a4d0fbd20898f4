//! The packet API's C example (`examples/packet_count.c`) compiled with `cc`
//! against `include/weir_packet.h` and the built `libweirstream.so`, run on a
//! trace this test writes, in both ways it takes packets (callbacks on the
//! workers, and a thread of its own per queue pulling), with and without a
//! filter. What it counts per queue must be what weir's Rust API counts on
//! the same trace, queue by queue; the totals what the trace holds; its
//! statistics must add up; and a filter must take away exactly the packets
//! it counts as filtered. A bad source and a bad filter end it with their
//! text, not a crash.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use weir::{Engine, Handler, Packet, QueueId};

mod layout;
mod packet_trace;
mod support;
use layout::Layout;

fn compile_example(out: &Path) -> PathBuf {
    support::compile(&Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/packet_count.c"), out)
}

/// One line of the example's output: its label and its `key=value` figures.
type Line = (String, HashMap<String, u64>);

/// Runs the example; its lines, `queue ...` ones first, then `total ...`.
fn run(bin: &Path, args: &[&str]) -> Vec<Line> {
    let out = support::command(bin).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "packet_count {args:?}: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    eprintln!("packet_count {args:?}:\n{stdout}");
    stdout
        .lines()
        .map(|l| {
            let mut words = l.split_whitespace();
            let label = words.next().unwrap_or_default().to_string();
            let figures = words
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap_or_else(|| panic!("`{kv}` in {l}"));
                    (k.to_string(), v.parse().unwrap_or_else(|_| panic!("`{kv}` in {l}")))
                })
                .collect();
            (label, figures)
        })
        .collect()
}

/// What weir's Rust API counts per queue: packets and captured bytes.
#[derive(Default)]
struct Count {
    packets: u64,
    bytes: u64,
}

impl Handler for Count {
    fn packet(&mut self, p: &Packet<'_>) {
        self.packets += 1;
        self.bytes += u64::from(p.caplen());
    }
}

/// The Rust API's count of `source` under `filter`, per queue: (queue,
/// packets, bytes, received).
fn rust_count(source: &str, filter: Option<&str>) -> Vec<(QueueId, u64, u64, u64)> {
    let mut b = Engine::builder().source(source).unwrap();
    if let Some(f) = filter {
        b = b.filter(f);
    }
    let report = b.build().unwrap().run(|_| Count::default()).unwrap();
    assert!(report.errors.is_empty());
    report.handlers.iter().zip(&report.stats.queues).map(|((q, c), s)| (*q, c.packets, c.bytes, s.received)).collect()
}

/// Checks the example's lines against the Rust API's count and the trace's
/// facts (`want`: packets and bytes it must deliver in all); returns its total line.
fn check(lines: &[Line], rust: &[(QueueId, u64, u64, u64)], want: (u64, u64), what: &str) -> HashMap<String, u64> {
    let (queues, total): (Vec<_>, Vec<_>) = lines.iter().partition(|(label, _)| label == "queue");
    assert_eq!(total.len(), 1, "{what}: one total line");
    assert_eq!(queues.len(), rust.len(), "{what}: a line per queue");
    for (i, ((_, got), &(queue, packets, bytes, received))) in queues.iter().zip(rust).enumerate() {
        let g = |k: &str| *got.get(k).unwrap_or_else(|| panic!("{what}: no {k} in {got:?}"));
        assert_eq!((g("index"), g("queue")), (i as u64, u64::from(queue.0)), "{what}");
        assert_eq!((g("packets"), g("bytes")), (packets, bytes), "{what}: queue {queue} against the Rust API");
        // weir's own counters for the queue say the same, and add up.
        assert_eq!((g("received"), g("delivered"), g("delivered_bytes")), (received, packets, bytes), "{what}: queue {queue}");
        assert_eq!(g("filtered"), received - packets, "{what}: queue {queue}");
        for zero in ["capture_drops", "delivery_drops", "unread", "in_flight", "order_errors", "misplaced"] {
            assert_eq!(g(zero), 0, "{what}: queue {queue}: {zero}");
        }
    }
    let t = total[0].1.clone();
    assert_eq!((t["queues"], t["linktype"], t["failures"]), (rust.len() as u64, 1, 0), "{what}");
    assert_eq!((t["packets"], t["bytes"], t["delivered"]), (want.0, want.1, want.0), "{what}: the totals");
    assert_eq!(t["packets"], queues.iter().map(|(_, q)| q["packets"]).sum::<u64>(), "{what}");
    assert_eq!(t["received"], t["delivered"] + t["filtered"], "{what}");
    t
}

#[test]
fn packet_count_counts_every_queue_as_the_rust_api_does_by_callback_and_by_pull() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("mixed.pcap");
    let facts = packet_trace::write(&trace, 6_000, 300);
    let bin = compile_example(dir.path());
    let trace = trace.to_str().unwrap();
    assert!(facts.udp > 0 && facts.udp < facts.packets);

    for queues in ["@0-1", "@0-2"] {
        let source = format!("{trace}{queues}");
        let all = rust_count(&source, None);
        let udp = rust_count(&source, Some("udp"));
        assert!(all.iter().all(|q| q.1 > 0), "{source}: the split gives every queue packets");
        for pull in [false, true] {
            let mode = if pull { "pull" } else { "callback" };
            let args = |filter: Option<&'static str>| {
                let mut a: Vec<&str> = if pull { vec!["--pull"] } else { Vec::new() };
                a.push(&source);
                a.extend(filter);
                a
            };
            let unfiltered = check(&run(&bin, &args(None)), &all, (facts.packets, facts.bytes), &format!("{source} {mode}"));
            assert_eq!((unfiltered["received"], unfiltered["filtered"]), (facts.packets, 0));
            let filtered = check(&run(&bin, &args(Some("udp"))), &udp, (facts.udp, facts.udp_bytes), &format!("{source} {mode} udp"));
            // The filter takes away exactly what it counts as filtered.
            assert_eq!(filtered["received"], facts.packets);
            assert_eq!(filtered["filtered"], facts.packets - facts.udp);
            assert_eq!(unfiltered["packets"] - filtered["packets"], filtered["filtered"]);
        }
    }
}

#[test]
fn packet_count_reports_a_bad_source_and_a_bad_filter() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.pcap");
    packet_trace::write(&trace, 10, 2);
    let bin = compile_example(dir.path());
    let missing = dir.path().join("missing.pcap");
    let cases: [(Vec<&str>, &str); 4] = [
        (vec![missing.to_str().unwrap()], "missing.pcap"),
        (vec!["afxdp:"], "not a valid interface name"),
        (vec![trace.to_str().unwrap(), "udp and"], "\"udp and\""),
        (vec!["--pull", trace.to_str().unwrap(), "port 99999"], "port 99999"),
    ];
    for (args, says) in cases {
        let out = support::command(&bin).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        // Exit status 1 and the text: no signal, no abort.
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.starts_with("packet_count: ") && err.contains(says), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// The header's structs and the library's agree field by field: a C program
/// prints every field's offset and each struct's size, compared with Rust's.
#[test]
fn the_packet_header_structs_match_the_library() {
    use std::mem::{offset_of, size_of};
    use weirstream::packet::{CPacket as P, CQueueStats as S};
    let packet = [
        ("data", offset_of!(P, data)),
        ("ts_ns", offset_of!(P, ts_ns)),
        ("caplen", offset_of!(P, caplen)),
        ("wire_len", offset_of!(P, wire_len)),
        ("queue", offset_of!(P, queue)),
        ("queue_index", offset_of!(P, queue_index)),
    ];
    let stats = [
        ("queue", offset_of!(S, queue)),
        ("queue_index", offset_of!(S, queue_index)),
        ("received", offset_of!(S, received)),
        ("delivered", offset_of!(S, delivered)),
        ("filtered", offset_of!(S, filtered)),
        ("capture_drops", offset_of!(S, capture_drops)),
        ("delivery_drops", offset_of!(S, delivery_drops)),
        ("unread", offset_of!(S, unread)),
        ("in_flight", offset_of!(S, in_flight)),
        ("received_bytes", offset_of!(S, received_bytes)),
        ("delivered_bytes", offset_of!(S, delivered_bytes)),
        ("offloaded", offset_of!(S, offloaded)),
        ("bad_recycles", offset_of!(S, bad_recycles)),
    ];
    layout::assert_c_layout(
        "weir_packet.h",
        &[
            Layout { label: "packet", c_type: "struct weir_packet", size: size_of::<P>(), fields: &packet },
            Layout { label: "stats", c_type: "weir_queue_stats_t", size: size_of::<S>(), fields: &stats },
        ],
    );
}

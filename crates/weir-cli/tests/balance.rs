//! Imbalance with real threads and `weir handle` as the application: a trace
//! whose flows put most of the load on one of two queues, replayed at its
//! recorded timing, `weir handle --wait-us 100` on both workers (a worker
//! finishes exactly 10,000 packets/s while busy, sleeping rather than spinning:
//! two spinning workers and the capture thread on a 2-core machine would measure
//! the scheduler), and `--flow-order` checking every flow packet by packet.
//!
//! Basic mode must drop on the hot queue; offloading and rebalancing must drop
//! less; rebalancing must move flows without ever running one on two workers at
//! once or out of order.
//!
//! The same holds live, on an AF_XDP capture of the veth test bed where the
//! sender's XPS puts every packet on one RX queue (root and tcpreplay: ignored
//! by a plain `cargo test`, run by `make test`'s privileged step).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use testbed::TestBed;
use weir::sim::workload::{Skewed, Workload};
use weir::sink::{FileFormat, TraceWriter, TsPrecision};
use weir::{LinkType, Rss};

/// Worker capacity with `--wait-us 100`.
const CAPACITY_PPS: f64 = 10_000.0;
/// Offered load: 90% of both workers together.
const LOAD: f64 = 0.9;
const SECONDS: f64 = 4.0;

/// The least-skewed Zipf mix of 100 flows (exponent from 1.0 up) that gives the
/// busier queue 68% to 80% of the packets: more than one worker can do at this
/// load, while the largest flow alone fits in one.
fn skewed_mix(packets: u64, pps: f64) -> Skewed {
    let rss = Rss::new(LinkType::ETHERNET, 2);
    for step in 0..40 {
        let exponent = 1.0 + 0.05 * f64::from(step);
        let mut w = Skewed::new(packets, 100, exponent, pps, 1).unwrap();
        let mut per_queue = [0u64; 2];
        while let Some(a) = w.next() {
            per_queue[usize::from(rss.queue(a.data).0)] += 1;
        }
        let share = *per_queue.iter().max().unwrap() as f64 / packets as f64;
        if (0.68..0.80).contains(&share) {
            return Skewed::new(packets, 100, exponent, pps, 1).unwrap();
        }
    }
    panic!("no Zipf exponent from 1.0 to 3.0 gives the skew this test needs");
}

/// Write the skewed trace; return the share of packets RSS gives the busier queue.
fn write_trace(path: &Path) -> f64 {
    let pps = LOAD * 2.0 * CAPACITY_PPS;
    let packets = (pps * SECONDS) as u64;
    let mut w = skewed_mix(packets, pps);
    let rss = Rss::new(LinkType::ETHERNET, 2);
    let mut per_queue = [0u64; 2];
    let file = std::fs::File::create(path).unwrap();
    let mut out = TraceWriter::new(std::io::BufWriter::new(file), FileFormat::Pcap, LinkType::ETHERNET, 65535, TsPrecision::Nano).unwrap();
    while let Some(a) = w.next() {
        per_queue[usize::from(rss.queue(a.data).0)] += 1;
        out.write_packet(1_700_000_000_000_000_000 + a.t_ns, a.data, a.wire_len).unwrap();
    }
    out.finish().unwrap();
    *per_queue.iter().max().unwrap() as f64 / packets as f64
}

#[derive(Debug)]
struct Outcome {
    drops: u64,
    offloaded: u64,
    buckets_moved: u64,
    flows_changed_worker: u64,
    reorders: u64,
    concurrent: u64,
}

fn handle(trace: &Path, balance: &str) -> Outcome {
    let src = format!("{}@0-1", trace.display());
    let args =
        ["handle", "-x", "1", "--wait-us", "100", "--flow-order", "--speed", "1", "--pool", "64,32", "--balance", balance, "--json", &src];
    let out = Command::new(env!("CARGO_BIN_EXE_weir")).args(args).stdin(Stdio::null()).output().expect("weir runs");
    assert!(out.status.success(), "weir {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    outcome(&out.stdout)
}

fn outcome(stdout: &[u8]) -> Outcome {
    let v: serde_json::Value = serde_json::from_slice(stdout).expect("one JSON object");
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"));
    let order = &v["flow_order"];
    Outcome {
        drops: n(&v["capture_drops"]) + n(&v["delivery_drops"]),
        offloaded: n(&v["offloaded"]),
        buckets_moved: v["rebalance"]["buckets_moved"].as_u64().unwrap_or(0),
        flows_changed_worker: n(&order["flows_changed_worker"]),
        reorders: n(&order["reorder_events"]),
        concurrent: n(&order["concurrent"]),
    }
}

#[test]
fn modes_under_lasting_imbalance_with_weir_handle_on_real_threads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("skewed.pcap");
    let hot = write_trace(&path);
    // The busier queue's load must exceed one worker while the total fits two.
    assert!(hot * LOAD * 2.0 > 1.1, "trace not skewed enough: busier queue has {hot:.2} of the packets");

    // Drops depend on how the two CPUs are shared while it runs: a stall of
    // the machine during one mode's run (CI once saw rebalance drop 12,779
    // against basic's 10,978, where it drops 0-300 against 8,000-14,000
    // otherwise) is not the mode's doing. The three modes are run again once
    // if the drop comparisons fail; the order and concurrency checks, which
    // no timing excuses, hold on every run.
    let mut failed = Vec::new();
    for attempt in 1..=2 {
        let basic = handle(&path, "basic");
        let offload = handle(&path, "offload:50");
        let rebalance = handle(&path, "rebalance");
        eprintln!("attempt {attempt}:\nbasic {basic:?}\noffload {offload:?}\nrebalance {rebalance:?}");
        assert_eq!(basic.reorders + basic.concurrent + basic.flows_changed_worker, 0, "{basic:?}");
        assert!(rebalance.buckets_moved > 0 && rebalance.flows_changed_worker > 0, "rebalancing moved no flow: {rebalance:?}");
        assert_eq!(rebalance.reorders, 0, "rebalancing reordered a flow: {rebalance:?}");
        assert_eq!(rebalance.concurrent, 0, "rebalancing ran a flow on two workers at once: {rebalance:?}");
        let drops = [
            (basic.drops > 0, format!("basic mode must drop on the hot queue: {basic:?}")),
            (offload.offloaded > 0 && offload.drops < basic.drops, format!("offloading: {offload:?} against basic {basic:?}")),
            (rebalance.drops < basic.drops, format!("rebalancing: {rebalance:?} against basic {basic:?}")),
        ];
        let wrong: Vec<String> = drops.into_iter().filter(|(ok, _)| !ok).map(|(_, why)| why).collect();
        if wrong.is_empty() {
            return;
        }
        failed.push(format!("attempt {attempt}: {}", wrong.join("; ")));
    }
    panic!("the drop comparisons failed twice:\n{}", failed.join("\n"));
}

/// Live: all of the test bed's traffic arrives on RX queue 0 of a 2-queue
/// AF_XDP capture, at 8,000 packets/s, where each worker finishes 5,000/s
/// (`--wait-us 200`): queue 0 gets 160% of its worker, both together 80%.
const LIVE_PPS: u32 = 8_000;
const LIVE_PACKETS: u64 = 40_000;

/// Start `weir handle` on the capturing end and wait until it listens.
fn start_live(tb: &TestBed, balance: &str, seconds: u32) -> Child {
    let src = format!("afxdp:{}@0-1", tb.rx_if);
    let d = seconds.to_string();
    let args = [
        "handle",
        "-x",
        "1",
        "--wait-us",
        "200",
        "--flow-order",
        "--pool",
        "32,256",
        "--balance",
        balance,
        "-d",
        &d,
        "--json",
        "--take-host-traffic",
        &src,
    ];
    let mut child =
        tb.in_rx(env!("CARGO_BIN_EXE_weir")).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("weir starts");
    let lines = testbed::wait_listening(&mut child, &format!("weir {args:?}"));
    std::thread::spawn(move || lines.for_each(drop));
    child
}

#[test]
#[ignore = "needs root: AF_XDP capture on a veth test bed, with tcpreplay"]
fn modes_under_lasting_imbalance_on_a_live_afxdp_capture() {
    let tb = TestBed::new(2);
    testbed::require_tools(&["tcpreplay"]);
    tb.all_on_queue_zero().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flows.pcap");
    let mut w = Skewed::new(LIVE_PACKETS, 300, 1.0, f64::from(LIVE_PPS), 7).unwrap();
    let file = std::fs::File::create(&path).unwrap();
    let mut out = TraceWriter::new(std::io::BufWriter::new(file), FileFormat::Pcap, LinkType::ETHERNET, 65535, TsPrecision::Nano).unwrap();
    while let Some(a) = w.next() {
        out.write_packet(1_700_000_000_000_000_000 + a.t_ns, a.data, a.wire_len).unwrap();
    }
    out.finish().unwrap();
    // Sending takes 5 s; the rest is for the backlog to drain.
    let seconds = (LIVE_PACKETS / u64::from(LIVE_PPS)) as u32 + 5;
    let run = |balance: &str| {
        let child = start_live(&tb, balance, seconds);
        let sent = tb.in_tx("tcpreplay").args(["-q", "-i", &tb.tx_if, "--pps", &LIVE_PPS.to_string()]).arg(&path).output().unwrap();
        assert!(sent.status.success(), "tcpreplay: {}", String::from_utf8_lossy(&sent.stderr));
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "weir handle --balance {balance}: {}", String::from_utf8_lossy(&out.stdout));
        outcome(&out.stdout)
    };
    let basic = run("basic");
    let offload = run("offload:50");
    let rebalance = run("rebalance");
    eprintln!("live afxdp:\nbasic {basic:?}\noffload {offload:?}\nrebalance {rebalance:?}");

    assert!(basic.drops > 0, "basic mode must drop on the hot queue: {basic:?}");
    assert_eq!(basic.reorders + basic.concurrent + basic.flows_changed_worker, 0, "{basic:?}");
    assert!(offload.offloaded > 0 && offload.drops < basic.drops, "offloading: {offload:?} against basic {basic:?}");
    assert!(offload.reorders > 0, "offloading splits flows, so it reorders some: {offload:?}");
    assert_eq!(rebalance.drops, 0, "rebalancing: {rebalance:?}");
    assert!(rebalance.buckets_moved > 0 && rebalance.flows_changed_worker > 0, "rebalancing moved no flow: {rebalance:?}");
    assert!(rebalance.flows_changed_worker < offload.flows_changed_worker, "rebalance {rebalance:?} against offload {offload:?}");
    assert_eq!((rebalance.reorders, rebalance.concurrent), (0, 0), "rebalancing split or reordered a flow: {rebalance:?}");
}

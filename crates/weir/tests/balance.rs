//! Imbalance with real threads: a trace whose flows put most of the load on one
//! of two queues, replayed at its recorded timing, with a worker that spends a
//! fixed time on every packet. The worker sleeps rather than spinning (on a
//! 2-core machine two spinning workers and the capture threads would compete
//! for the cores, and the test would measure the scheduler), and it sleeps to a
//! schedule: packet n of a backlog is done COST after packet n-1 was due, so a
//! sleep that overshoots is made up and a worker finishes exactly 1/COST
//! packets per second while it has work. Basic mode must drop on the hot queue; offloading
//! and rebalancing must drop less; rebalancing must never run a flow on two
//! workers at once or out of order, which a shared per-flow record checks packet
//! by packet.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weir::balance::{ControllerConfig, Mode};
use weir::pool::{OffloadThreshold, PoolConfig};
use weir::rss::Rss;
use weir::sink::{FileFormat, TraceWriter, TsPrecision};
use weir::source::sim::workload::{Skewed, Workload};
use weir::source::Pacing;
use weir::wire::FlowTuple;
use weir::{Engine, LinkType, Packet, QueueId};

/// Time each worker spends on a packet: a capacity of 10,000 packets/s.
const COST: Duration = Duration::from_micros(100);
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
    let start = 1_700_000_000_000_000_000u64;
    while let Some(a) = w.next() {
        per_queue[usize::from(rss.queue(a.data).0)] += 1;
        out.write_packet(start + a.t_ns, a.data, a.wire_len).unwrap();
    }
    out.finish().unwrap();
    *per_queue.iter().max().unwrap() as f64 / packets as f64
}

#[derive(Default)]
struct Flows {
    /// Per flow: latest timestamp processed, the worker, and whether one is processing it now.
    state: HashMap<FlowTuple, (u64, QueueId, bool)>,
    reorders: u64,
    concurrent: u64,
    worker_changes: u64,
}

#[derive(Debug)]
struct Outcome {
    drops: u64,
    offloaded: u64,
    reorders: u64,
    concurrent: u64,
    worker_changes: u64,
}

fn run(path: &Path, mode: Mode) -> Outcome {
    let flows = Arc::new(Mutex::new(Flows::default()));
    let engine = Engine::builder()
        .source(&format!("{}@0-1", path.display()))
        .unwrap()
        .pool(PoolConfig::new(64, 32).unwrap())
        .pacing(Pacing::Speed(1.0))
        .balance(mode)
        .build()
        .unwrap();
    let report = engine
        .run(|worker| {
            let flows = Arc::clone(&flows);
            let mut done_at: Option<Instant> = None;
            move |p: &Packet<'_>| {
                let key = FlowTuple::parse(LinkType::ETHERNET, p.data()).map(|t| t.canonical());
                if let Some(k) = key {
                    let mut f = flows.lock().unwrap();
                    let prev = f.state.get(&k).copied();
                    if let Some((latest, w, busy)) = prev {
                        if busy {
                            f.concurrent += 1;
                        }
                        if p.ts_ns() < latest {
                            f.reorders += 1;
                        }
                        if w != worker {
                            f.worker_changes += 1;
                        }
                    }
                    let latest = prev.map_or(p.ts_ns(), |(l, _, _)| l.max(p.ts_ns()));
                    f.state.insert(k, (latest, worker, true));
                }
                // Behind by less than a millisecond: the overshoot of the last
                // sleep, made up now. More: the worker was idle, start afresh.
                let now = Instant::now();
                let start = match done_at {
                    Some(d) if now.saturating_duration_since(d) < Duration::from_millis(1) => d,
                    _ => now,
                };
                let done = start + COST;
                std::thread::sleep(done.saturating_duration_since(now));
                done_at = Some(done);
                if let Some(k) = key {
                    if let Some(s) = flows.lock().unwrap().state.get_mut(&k) {
                        s.2 = false;
                    }
                }
            }
        })
        .unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let total = report.stats.total();
    assert!(total.balanced() && total.in_flight == 0, "{total:?}");
    let f = flows.lock().unwrap();
    Outcome {
        drops: total.capture_drops + total.delivery_drops,
        offloaded: total.offloaded,
        reorders: f.reorders,
        concurrent: f.concurrent,
        worker_changes: f.worker_changes,
    }
}

#[test]
fn modes_under_lasting_imbalance_with_real_threads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("skewed.pcap");
    let hot = write_trace(&path);
    // The busier queue's load must exceed one worker while the total fits two.
    assert!(hot * LOAD * 2.0 > 1.1, "trace not skewed enough: busier queue has {hot:.2} of the packets");

    let basic = run(&path, Mode::Basic);
    let offload = run(&path, Mode::Advanced(OffloadThreshold::new(50).unwrap()));
    let rebalance = run(&path, Mode::Rebalance { controller: ControllerConfig::default(), offload: None });
    eprintln!("basic {basic:?}\noffload {offload:?}\nrebalance {rebalance:?}");

    assert!(basic.drops > 0, "basic mode must drop on the hot queue: {basic:?}");
    assert!(offload.offloaded > 0 && offload.drops < basic.drops, "offloading: {offload:?} against basic {basic:?}");
    assert!(rebalance.drops < basic.drops, "rebalancing: {rebalance:?} against basic {basic:?}");
    assert!(rebalance.worker_changes > 0, "rebalancing moved no flow: {rebalance:?}");
    assert_eq!(rebalance.reorders, 0, "rebalancing reordered a flow: {rebalance:?}");
    assert_eq!(rebalance.concurrent, 0, "rebalancing ran a flow on two workers at once: {rebalance:?}");
    assert_eq!(basic.reorders + basic.concurrent + basic.worker_changes, 0, "{basic:?}");
}

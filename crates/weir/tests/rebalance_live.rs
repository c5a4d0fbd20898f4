//! Rebalancing on a live capture, the controller moving buckets while traffic
//! flows: on AF_PACKET in the kernel's table (weir's eBPF fanout), on AF_XDP in
//! the capture threads' tables (over one shared UMEM), on `xdp:` in the table
//! of the one thread that spreads its ring's packets by weir's hash.
//!
//! The test bed sends UDP flows at a steady rate. On AF_PACKET and `xdp:` three
//! quarters of the packets are in flows whose buckets start on queue 0; on AF_XDP the
//! sender's XPS puts every packet on TX queue 0, so they all arrive on RX queue
//! 0, whose thread starts with every bucket it receives. Each worker spends a fixed time per
//! packet (sleeping to a schedule, as `weir handle --wait-us` does), so queue 0 gets more than
//! its worker can do while both workers together keep up. The controller must
//! see the lasting overload and move buckets from queue 0 to queue 1; every
//! packet must still be delivered exactly once, and every flow processed by one
//! worker at a time and in the order it was sent (checked packet by packet from
//! the sequence number each frame carries). Needs root and tcpreplay: ignored
//! by a plain `cargo test`, run by `make test`'s privileged step.

mod support;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::frames::{Frame, Rng};
use testbed::TestBed;
use weir::sink::{FileFormat, TraceWriter, TsPrecision};
use weir::source::afpacket::BucketSteering;
use weir::source::{AfPacketOptions, AfXdpOptions, Fanout, LiveOptions, XdpOptions};
use weir::{BalanceMode, ControllerConfig, Engine, LinkType, Packet, PoolConfig, QueueId, Rss};

const MARK: [u8; 6] = [0x02, b'w', b'e', b'i', b'r', 0x02];
const DST: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// Each worker's time per packet: 5,000 packets/s.
const COST: Duration = Duration::from_micros(200);
const CAPACITY_PPS: u32 = 5_000;
/// Offered load: 80% of both workers, three quarters of it on queue 0 (1.2 workers' worth).
const RATE_PPS: u32 = 8_000;
const HOT_SHARE: f64 = 0.75;
const PACKETS: u32 = 24_000;

/// The sequence number in one of our frames.
fn seq_of(data: &[u8]) -> Option<u32> {
    if data.len() < 46 || data[6..12] != MARK {
        return None;
    }
    Some(u32::from_be_bytes(data[42..46].try_into().ok()?))
}

/// UDP flows of the test bed's /24, 40 whose bucket starts on queue 0 (even
/// buckets) and 40 on queue 1, and frames of them: `HOT_SHARE` of the packets
/// from the first 40.
fn skewed_frames(tb: &TestBed) -> (Vec<Vec<u8>>, Vec<usize>) {
    let net: Vec<u8> = tb.tx_ip.split('.').map(|p| p.parse().unwrap()).collect();
    let rss = Rss::new(LinkType::ETHERNET, 1);
    let mut rng = Rng(41);
    let (mut hot, mut cold) = (Vec::new(), Vec::new());
    while hot.len() < 40 || cold.len() < 40 {
        let r = rng.next();
        let f = Frame {
            dst_mac: DST,
            src_mac: MARK,
            src: [net[0], net[1], net[2], 10 + (r % 200) as u8],
            dst: [net[0], net[1], net[2], 220 + (r >> 8) as u8 % 30],
            sport: 1024 + (r >> 16) as u16 % 60000,
            dport: 5000 + (r >> 32) as u16 % 1000,
            udp: true,
        };
        let list = if rss.bucket(&f.build(&[], 0, 32)) % 2 == 0 { &mut hot } else { &mut cold };
        if list.len() < 40 {
            list.push(f);
        }
    }
    let mut frames = Vec::new();
    let mut flow_of = Vec::new();
    for seq in 0..PACKETS {
        let r = rng.next();
        let pick_hot = (r % 1000) as f64 / 1000.0 < HOT_SHARE;
        let i = (r >> 16) as usize % 40;
        let (f, id) = if pick_hot { (hot[i], i) } else { (cold[i], 40 + i) };
        frames.push(f.build(&[], seq, 32));
        flow_of.push(id);
    }
    (frames, flow_of)
}

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let file = std::fs::File::create(path).unwrap();
    let mut w = TraceWriter::new(file, FileFormat::Pcap, LinkType::ETHERNET, 65535, TsPrecision::Micro).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(1_700_000_000_000_000_000 + i as u64 * 1000, f, f.len() as u32).unwrap();
    }
    w.finish().unwrap();
}

/// Per flow: the last sequence number processed, its worker, and whether a
/// worker is processing it now.
#[derive(Default)]
struct Flows {
    state: HashMap<usize, (u32, QueueId, bool)>,
    seen: HashSet<u32>,
    doubles: u64,
    reorders: u64,
    concurrent: u64,
    worker_changes: u64,
    per_worker: HashMap<QueueId, u64>,
}

#[derive(Copy, Clone, Debug, PartialEq)]
enum Backend {
    AfPacket,
    AfXdp,
    Xdp,
}

#[test]
#[ignore = "needs root: live capture on a veth test bed, with tcpreplay"]
fn the_controller_moves_buckets_of_a_live_afpacket_capture_keeping_every_flow_whole() {
    rebalance_live(Backend::AfPacket);
}

#[test]
#[ignore = "needs root: live capture on a veth test bed, with tcpreplay"]
fn the_capture_threads_move_buckets_of_a_live_afxdp_capture_keeping_every_flow_whole() {
    rebalance_live(Backend::AfXdp);
}

#[test]
#[ignore = "needs root: live capture on a veth test bed, with tcpreplay"]
fn the_capture_thread_moves_buckets_of_a_live_xdp_capture_keeping_every_flow_whole() {
    rebalance_live(Backend::Xdp);
}

fn rebalance_live(backend: Backend) {
    let tb = TestBed::new(2);
    testbed::require_tools(&["tcpreplay"]);
    let dir = tempfile::tempdir().unwrap();
    let (frames, flow_of) = skewed_frames(&tb);
    let pcap = dir.path().join("skewed.pcap");
    write_pcap(&pcap, &frames);
    let flow_of = Arc::new(flow_of);
    let flows = Arc::new(Mutex::new(Flows::default()));

    // The test's own table, so it can read where buckets ended up.
    let steering = (backend == Backend::AfPacket).then(|| BucketSteering::new().expect("loading weir's fanout program"));
    let live = LiveOptions {
        netns: Some(tb.rx_ns.clone().into()),
        afpacket: AfPacketOptions { fanout: steering.as_ref().map_or(Fanout::Hash, BucketSteering::fanout), ..AfPacketOptions::default() },
        afxdp: AfXdpOptions { take_host_traffic: true, ..AfXdpOptions::default() },
        xdp: XdpOptions { take_host_traffic: true, ..XdpOptions::default() },
        ..LiveOptions::default()
    };
    // Queue 1's share before anything moves.
    let initial_share = match backend {
        Backend::AfPacket => 1.0 - HOT_SHARE,
        // Spread by weir's hash, whatever RX queue: as afpacket's buckets, with
        // every frame on RX queue 0 to show that the RX queue plays no part.
        Backend::Xdp => {
            tb.all_on_queue_zero().unwrap();
            1.0 - HOT_SHARE
        }
        Backend::AfXdp => {
            tb.all_on_queue_zero().unwrap();
            0.0
        }
    };
    let kind = match backend {
        Backend::AfPacket => "afpacket",
        Backend::AfXdp => "afxdp",
        Backend::Xdp => "xdp",
    };
    let engine = Engine::builder()
        .source(&format!("{kind}:{}@0-1", tb.rx_if))
        .unwrap()
        .live(live)
        // Small chunks: at 5,000 packets/s a worker gives back a 256-cell chunk every
        // 50 ms, too coarse for the controller to learn its rate in a few ticks.
        .pool(PoolConfig::new(32, 1024).unwrap())
        .balance(BalanceMode::Rebalance { controller: ControllerConfig::default(), offload: None })
        .build()
        .unwrap();
    let running = engine
        .start(|worker| {
            let flows = Arc::clone(&flows);
            let flow_of = Arc::clone(&flow_of);
            let mut done_at: Option<Instant> = None;
            move |p: &Packet<'_>| {
                let Some(seq) = seq_of(p.data()) else { return };
                let flow = flow_of[seq as usize];
                {
                    let mut f = flows.lock().unwrap();
                    if !f.seen.insert(seq) {
                        f.doubles += 1;
                    }
                    *f.per_worker.entry(worker).or_default() += 1;
                    if let Some((last, w, busy)) = f.state.get(&flow).copied() {
                        f.concurrent += u64::from(busy);
                        f.reorders += u64::from(seq < last);
                        f.worker_changes += u64::from(w != worker);
                    }
                    let last = f.state.get(&flow).map_or(seq, |s| s.0.max(seq));
                    f.state.insert(flow, (last, worker, true));
                }
                // Packet n of a backlog is done COST after packet n-1: a sleep that
                // overshoots is made up, so a busy worker finishes 1/COST per second.
                let now = Instant::now();
                let start = match done_at {
                    Some(d) if now.saturating_duration_since(d) < Duration::from_millis(1) => d,
                    _ => now,
                };
                let done = start + COST;
                std::thread::sleep(done.saturating_duration_since(now));
                done_at = Some(done);
                if let Some(s) = flows.lock().unwrap().state.get_mut(&flow) {
                    s.2 = false;
                }
            }
        })
        .unwrap();

    let before = tb.rx_link_packets();
    let out =
        tb.in_tx("tcpreplay").args(["-q", &format!("--pps={RATE_PPS}"), "-i", &tb.tx_if]).arg(&pcap).output().expect("running tcpreplay");
    assert!(out.status.success(), "tcpreplay: {}", String::from_utf8_lossy(&out.stderr));
    let arrived = tb.rx_link_packets() - before;
    assert_eq!(arrived, u64::from(PACKETS), "the veth pair lost packets: the test bed, not weir");
    // Drain: whatever backlog is left, both workers together finish it.
    let until = Instant::now() + Duration::from_secs(30);
    while flows.lock().unwrap().seen.len() < PACKETS as usize && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    running.stop_handle().stop();
    let report = running.join();
    assert!(report.errors.is_empty(), "{:?}", report.errors);

    let f = flows.lock().unwrap();
    let b = report.balance.expect("a rebalancing run reports what it moved");
    let total = report.stats.total();
    eprintln!(
        "rebalance live ({kind}): {b:?}; per worker {:?}; worker changes {}, reorders {}, concurrent {}; {total:?}",
        f.per_worker, f.worker_changes, f.reorders, f.concurrent
    );
    for q in &report.stats.queues {
        assert!(q.balanced() && q.in_flight == 0, "{q:?}");
    }
    assert_eq!(total.capture_drops + total.delivery_drops, 0, "packets lost: {total:?}");
    assert_eq!((f.seen.len(), f.doubles), (PACKETS as usize, 0), "every packet exactly once");
    assert_eq!(total.delivered, u64::from(PACKETS), "the engine's count and the workers' agree");
    let hot = if backend == Backend::AfXdp { 1.0 } else { HOT_SHARE };
    assert!(
        b.buckets_moved > 0,
        "queue 0 at {:.0}% of its worker and nothing moved",
        100.0 * hot * f64::from(RATE_PPS) / f64::from(CAPACITY_PPS)
    );
    assert_eq!(b.park_drops + b.handover_drops, 0, "{b:?}");
    assert!(f.worker_changes > 0, "buckets moved but no flow changed worker");
    assert_eq!(f.reorders, 0, "a flow was reordered");
    assert_eq!(f.concurrent, 0, "a flow ran on two workers at once");
    if let Some(steering) = steering {
        assert!(steering.queues().is_empty(), "the capture is over, so the kernel's table is free again");
    }
    let on_one = f.per_worker.get(&QueueId(1)).copied().unwrap_or(0) as f64 / f64::from(PACKETS);
    assert!(on_one > initial_share + 0.02, "queue 1 took {on_one:.3} of the packets: no more than its initial share");
}

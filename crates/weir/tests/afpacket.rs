//! The AF_PACKET source on real sockets and real traffic: a test bed of two
//! network namespaces joined by a multi-queue veth pair, frames written to a pcap
//! here and sent with tcpreplay from the other namespace, captured by the engine.
//!
//! The `buckets` fanout tests also check where each packet went: the bucket weir's
//! RSS gives the frame, looked up in the table the test reads and changes through
//! a `BucketSteering`.
//!
//! Every frame carries a marker source MAC and its sequence number in the payload,
//! so a handler can tell the test's packets from anything else and check each one
//! byte for byte against what was sent. Tests need root and tcpreplay: they are
//! ignored by a plain `cargo test`, run by `make test`'s privileged step, and
//! fail saying why when asked for without them.

mod support;

use support::frames::{Frame, Rng};

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use testbed::TestBed;
use weir::engine::{BuildError, Report, Running, StopReason};
use weir::sink::{FileFormat, TraceWriter, TsPrecision};
use weir::source::afpacket::{BucketSteering, SteerError, BUCKETS};
use weir::source::{AfPacketOptions, Fanout, LiveOptions, Pacing};
use weir::stats::QueueStats;
use weir::{Engine, Handler, LinkType, Packet, PoolConfig, QueueId, Rss};

/// Source MAC of every frame a test sends.
const MARK: [u8; 6] = [0x02, b'w', b'e', b'i', b'r', 0x01];
/// Destination MAC: not the capturing end's, so its stack ignores the frames.
const DST: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

/// A flow: client and server address and port, UDP or TCP.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
struct Flow {
    client: [u8; 4],
    server: [u8; 4],
    cport: u16,
    sport: u16,
    udp: bool,
}

/// One frame sent: its bytes, its flow, and whether it goes client to server.
struct Sent {
    bytes: Vec<u8>,
    flow: Flow,
    forward: bool,
}

/// An Ethernet/IPv4/TCP-or-UDP frame marked as ours, whose payload starts with `seq`.
fn frame(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16, udp: bool, seq: u32, payload: usize) -> Vec<u8> {
    Frame { dst_mac: DST, src_mac: MARK, src, dst, sport: sp, dport: dp, udp }.build(&[], seq, payload)
}

/// `f` with an 802.1Q tag between the addresses and the EtherType.
fn tagged(f: &[u8], tci: u16) -> Vec<u8> {
    let mut t = f[..12].to_vec();
    t.extend_from_slice(&[0x81, 0x00]);
    t.extend_from_slice(&tci.to_be_bytes());
    t.extend_from_slice(&f[12..]);
    t
}

/// The sequence number of one of our frames, or `None` for anything else.
fn seq_of(data: &[u8]) -> Option<u32> {
    if data.len() < 14 || data[6..12] != MARK {
        return None;
    }
    let ip = if data[12..14] == [0x81, 0x00] { 18 } else { 14 };
    let l4 = if *data.get(ip + 9)? == 17 { 8 } else { 20 };
    let at = ip + 20 + l4;
    Some(u32::from_be_bytes(data.get(at..at + 4)?.try_into().ok()?))
}

/// `n` frames of `flows` flows of the test bed's /24, both directions interleaved at random.
fn traffic(tb: &TestBed, n: u32, flows: usize, seed: u64, payload: usize) -> Vec<Sent> {
    let mut rng = Rng(seed);
    let flows = random_flows(tb, flows, &mut rng);
    frames_of(&flows, 0..n, &mut rng, payload)
}

/// `n` flows of the test bed's /24, TCP or UDP.
fn random_flows(tb: &TestBed, n: usize, rng: &mut Rng) -> Vec<Flow> {
    let net: Vec<u8> = tb.tx_ip.split('.').map(|p| p.parse().unwrap()).collect();
    (0..n)
        .map(|_| {
            let r = rng.next();
            let host = |b: u64| [net[0], net[1], net[2], 10 + (b % 240) as u8];
            Flow {
                client: host(r),
                server: host(r >> 8),
                cport: 1024 + (r >> 16) as u16 % 60000,
                sport: [80, 443, 53, 22][(r >> 40) as usize % 4],
                udp: r >> 62 == 0,
            }
        })
        .collect()
}

/// Frames with sequence numbers `seqs` of `flows`, both directions interleaved at random.
fn frames_of(flows: &[Flow], seqs: std::ops::Range<u32>, rng: &mut Rng, payload: usize) -> Vec<Sent> {
    seqs.map(|seq| {
        let r = rng.next();
        let flow = flows[(r >> 8) as usize % flows.len()];
        let forward = (r >> 40) & 1 == 0;
        let len = (r >> 20) as usize % payload.max(1);
        let bytes = if forward {
            frame(flow.client, flow.server, flow.cport, flow.sport, flow.udp, seq, len)
        } else {
            frame(flow.server, flow.client, flow.sport, flow.cport, flow.udp, seq, len)
        };
        Sent { bytes, flow, forward }
    })
    .collect()
}

fn write_pcap(dir: &Path, frames: &[&[u8]]) -> PathBuf {
    let path = dir.join("send.pcap");
    let file = std::fs::File::create(&path).unwrap();
    let mut w = TraceWriter::new(file, FileFormat::Pcap, LinkType::ETHERNET, 65535, TsPrecision::Micro).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(1_700_000_000_000_000_000 + i as u64 * 1000, f, f.len() as u32).unwrap();
    }
    w.finish().unwrap();
    path
}

/// Send the frames from the sending namespace at top speed; returns how many the
/// capturing end's device received meanwhile.
fn send(tb: &TestBed, dir: &Path, frames: &[&[u8]]) -> u64 {
    let path = write_pcap(dir, frames);
    let before = tb.rx_link_packets();
    let out = tb.in_tx("tcpreplay").args(["-q", "-t", "-i", &tb.tx_if]).arg(&path).output().expect("tcpreplay (apt-get install tcpreplay)");
    assert!(out.status.success(), "tcpreplay: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    tb.rx_link_packets() - before
}

fn opts(tb: &TestBed) -> LiveOptions {
    LiveOptions { netns: Some(tb.rx_ns.clone().into()), ..LiveOptions::default() }
}

/// What one queue's worker saw of the test's frames.
struct Seen {
    sent: Arc<Vec<Vec<u8>>>,
    snaplen: usize,
    queue: Option<QueueId>,
    seqs: Vec<u32>,
    /// Packets that were not the test's.
    others: u64,
    bytes: u64,
    mismatches: Vec<String>,
}

impl Seen {
    fn new(sent: &Arc<Vec<Vec<u8>>>, snaplen: usize) -> Seen {
        Seen { sent: Arc::clone(sent), snaplen, queue: None, seqs: Vec::new(), others: 0, bytes: 0, mismatches: Vec::new() }
    }
}

impl Handler for Seen {
    fn packet(&mut self, p: &Packet<'_>) {
        if self.queue.is_some_and(|q| q != p.queue()) {
            self.mismatches.push(format!("queue {} packet on the worker of queue {:?}", p.queue(), self.queue));
        }
        self.queue = Some(p.queue());
        self.bytes += u64::from(p.wire_len());
        let Some(seq) = seq_of(p.data()) else {
            self.others += 1;
            return;
        };
        self.seqs.push(seq);
        let Some(want) = self.sent.get(seq as usize) else {
            self.mismatches.push(format!("unknown sequence number {seq}"));
            return;
        };
        let keep = want.len().min(self.snaplen);
        if p.data() != &want[..keep] || p.wire_len() as usize != want.len() {
            self.mismatches.push(format!("packet {seq}: {} of {} bytes captured, sent {keep} of {}", p.caplen(), p.wire_len(), want.len()));
        }
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
        if p.ts_ns().abs_diff(now) > 60_000_000_000 {
            self.mismatches.push(format!("packet {seq}: timestamp {} ns is not the time of capture ({now})", p.ts_ns()));
        }
    }
}

/// Wait (at most 20 s) until the queues have accounted for `n` packets, then stop.
fn stop_after<H: Handler>(running: &Running<H>, n: u64) {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let t = running.stats().total();
        for q in &running.stats().queues {
            assert!(q.balanced(), "identity broken mid-run: {q:?}");
        }
        if t.delivered + t.delivery_drops >= n || Instant::now() > until {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Anything late (there should be nothing) would show up as a mismatch below.
    std::thread::sleep(Duration::from_millis(100));
    running.stop_handle().stop();
}

/// The identity, nothing in flight, and the workers' counts equal the stats.
/// Capture with `engine` while `frames` are sent, stop once every packet that
/// arrived is delivered, and check that the run ended cleanly with its books
/// balanced. Returns the packets that arrived and the report.
fn capture_sent(tb: &TestBed, dir: &Path, engine: Engine, frames: &Arc<Vec<Vec<u8>>>, snaplen: usize) -> (u64, Report<Seen>) {
    let running = engine.start(|_| Seen::new(frames, snaplen)).unwrap();
    let arrived = send(tb, dir, &frames.iter().map(Vec::as_slice).collect::<Vec<_>>());
    stop_after(&running, arrived);
    let report = running.join();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    check_accounting(&report.stats.queues, &report.handlers);
    (arrived, report)
}

fn check_accounting(stats: &[QueueStats], handlers: &[(QueueId, Seen)]) {
    for (q, (queue, seen)) in stats.iter().zip(handlers) {
        assert_eq!(q.queue, *queue);
        assert!(q.balanced(), "identity broken: {q:?}");
        assert_eq!(q.in_flight, 0, "{q:?}");
        assert_eq!(q.capture_drops, 0, "a live ring never drops for want of a cell: {q:?}");
        assert_eq!(q.delivered, seen.seqs.len() as u64 + seen.others, "queue {queue}: stats and worker disagree");
        assert_eq!(q.delivered_bytes, seen.bytes, "queue {queue}: bytes");
        assert!(seen.mismatches.is_empty(), "queue {queue}: {:?}", &seen.mismatches[..seen.mismatches.len().min(5)]);
    }
}

/// Every sequence number once across all queues; returns the queue of each.
/// Every flow on one queue, and enough flows seen in both directions
/// (more than `min_both`) for that to mean something. Returns each flow's queue.
fn flows_stay_together(at: &HashMap<u32, QueueId>, sent: &[Sent], min_both: usize) -> HashMap<Flow, QueueId> {
    let mut queue_of_flow: HashMap<Flow, QueueId> = HashMap::new();
    let mut directions: HashMap<Flow, HashSet<bool>> = HashMap::new();
    for (seq, queue) in at {
        let s = &sent[*seq as usize];
        let q = *queue_of_flow.entry(s.flow).or_insert(*queue);
        assert_eq!(q, *queue, "flow {:?} on queues {q} and {queue}", s.flow);
        directions.entry(s.flow).or_default().insert(s.forward);
    }
    let both = directions.values().filter(|d| d.len() == 2).count();
    assert!(both > min_both, "only {both} flows went both ways: the test proves little");
    queue_of_flow
}

fn queue_of_each(handlers: &[(QueueId, Seen)]) -> HashMap<u32, QueueId> {
    let mut at = HashMap::new();
    for (queue, seen) in handlers {
        for &s in &seen.seqs {
            if let Some(q) = at.insert(s, *queue) {
                panic!("packet {s} counted twice: on queue {q} and on queue {queue}");
            }
        }
    }
    at
}

#[test]
#[ignore = "needs root: AF_PACKET capture on a veth test bed, with tcpreplay"]
fn every_packet_once_across_queues_in_every_fanout_mode() {
    let tb = TestBed::new(2);
    let dir = tempfile::tempdir().unwrap();
    let sent = traffic(&tb, 4000, 200, 7, 1400);
    let frames: Arc<Vec<Vec<u8>>> = Arc::new(sent.iter().map(|s| s.bytes.clone()).collect());
    for (fanout, rollover) in [(Fanout::Hash, false), (Fanout::Hash, true), (Fanout::LoadBalance, false), (Fanout::Cpu, false)] {
        let live = LiveOptions { afpacket: AfPacketOptions { fanout, rollover, ..AfPacketOptions::default() }, ..opts(&tb) };
        let engine = Engine::builder().source(&format!("afpacket:{}@0-1", tb.rx_if)).unwrap().live(live).build().unwrap();
        assert_eq!(engine.info().link_type, LinkType::ETHERNET);
        assert_eq!(engine.info().queues, [QueueId(0), QueueId(1)]);
        assert_eq!(engine.info().iface.as_deref(), Some(tb.rx_if.as_str()));
        let running = engine.start(|_| Seen::new(&frames, usize::MAX)).unwrap();
        let arrived = send(&tb, dir.path(), &frames.iter().map(Vec::as_slice).collect::<Vec<_>>());
        assert_eq!(arrived, frames.len() as u64, "the veth pair lost packets: the test bed, not weir");
        stop_after(&running, arrived);
        let report = running.join();
        assert!(report.errors.is_empty(), "{fanout:?}: {:?}", report.errors);
        assert_eq!(report.stop, StopReason::Requested);
        check_accounting(&report.stats.queues, &report.handlers);
        let at = queue_of_each(&report.handlers);
        assert_eq!(at.len(), frames.len(), "{fanout:?}: packets lost");
        assert_eq!(report.stats.total().delivery_drops, 0);
        // By CPU, everything may arrive on the one CPU that runs the sender.
        if fanout != Fanout::Cpu {
            for (queue, seen) in &report.handlers {
                assert!(!seen.seqs.is_empty(), "{fanout:?}: queue {queue} got nothing of 200 flows");
            }
        }
    }
}

#[test]
#[ignore = "needs root: AF_PACKET capture on a veth test bed, with tcpreplay"]
fn both_directions_of_every_flow_share_a_queue() {
    let tb = TestBed::new(4);
    let dir = tempfile::tempdir().unwrap();
    let sent = traffic(&tb, 6000, 400, 11, 200);
    let frames: Arc<Vec<Vec<u8>>> = Arc::new(sent.iter().map(|s| s.bytes.clone()).collect());
    let engine = Engine::builder().source(&format!("afpacket:{}@0-3", tb.rx_if)).unwrap().live(opts(&tb)).build().unwrap();
    let (_, report) = capture_sent(&tb, dir.path(), engine, &frames, usize::MAX);
    let at = queue_of_each(&report.handlers);
    assert_eq!(at.len(), frames.len(), "packets lost");
    let queue_of_flow = flows_stay_together(&at, &sent, 300);
    let used: HashSet<_> = queue_of_flow.values().collect();
    assert_eq!(used.len(), 4, "400 flows left a queue empty");
}

#[test]
#[ignore = "needs root: AF_PACKET capture on a veth test bed, with tcpreplay"]
fn a_kernel_filter_delivers_exactly_the_udp_packets_truncated_to_snaplen() {
    let tb = TestBed::new(2);
    let dir = tempfile::tempdir().unwrap();
    let sent = traffic(&tb, 3000, 100, 5, 600);
    let frames: Arc<Vec<Vec<u8>>> = Arc::new(sent.iter().map(|s| s.bytes.clone()).collect());
    let udp: HashSet<u32> = (0..sent.len() as u32).filter(|&s| sent[s as usize].flow.udp).collect();
    assert!(!udp.is_empty() && udp.len() < sent.len());
    let snaplen = 96;
    let live = LiveOptions { snaplen: snaplen as u32, ..opts(&tb) };
    let engine = Engine::builder().source(&format!("afpacket:{}@0-1", tb.rx_if)).unwrap().live(live).filter("udp").build().unwrap();
    let running = engine.start(|_| Seen::new(&frames, snaplen)).unwrap();
    send(&tb, dir.path(), &frames.iter().map(Vec::as_slice).collect::<Vec<_>>());
    stop_after(&running, udp.len() as u64);
    let report = running.join();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    check_accounting(&report.stats.queues, &report.handlers);
    let got: HashSet<u32> = queue_of_each(&report.handlers).into_keys().collect();
    assert_eq!(got, udp, "the filter let through something else or lost UDP packets");
    assert!(report.handlers.iter().all(|(_, s)| s.others == 0));
    assert_eq!(report.stats.total().filtered, 0, "the kernel filters: rejected packets are never seen");
}

#[test]
#[ignore = "needs root: AF_PACKET capture on a veth test bed, with tcpreplay"]
fn vlan_tags_the_kernel_took_out_are_put_back() {
    let tb = TestBed::new(2);
    let dir = tempfile::tempdir().unwrap();
    let sent = traffic(&tb, 600, 20, 3, 300);
    // Two in three tagged, with priority 1 and varying VLAN ids.
    let frames: Vec<Vec<u8>> = sent
        .iter()
        .enumerate()
        .map(|(i, s)| if i % 3 == 0 { s.bytes.clone() } else { tagged(&s.bytes, (i % 4095) as u16 | 0x2000) })
        .collect();
    let frames = Arc::new(frames);
    // No filter: the kernel truncates with `ret #snaplen`, before the tag goes back in.
    let snaplen = 128;
    let live = LiveOptions { snaplen: snaplen as u32, ..opts(&tb) };
    let engine = Engine::builder().source(&format!("afpacket:{}@0-1", tb.rx_if)).unwrap().live(live).build().unwrap();
    let (_, report) = capture_sent(&tb, dir.path(), engine, &frames, snaplen);
    assert_eq!(queue_of_each(&report.handlers).len(), frames.len(), "packets lost");
}

/// Counts ICMP echo requests and replies.
#[derive(Default)]
struct Echoes {
    requests: u64,
    replies: u64,
    others: u64,
}

impl Handler for Echoes {
    fn packet(&mut self, p: &Packet<'_>) {
        let d = p.data();
        // Ethernet, IPv4 with a 20-byte header, ICMP: the type is the first byte after it.
        match (d.get(12..14), d.get(23), d.get(34)) {
            (Some([0x08, 0x00]), Some(1), Some(8)) => self.requests += 1,
            (Some([0x08, 0x00]), Some(1), Some(0)) => self.replies += 1,
            _ => self.others += 1,
        }
    }
}

/// Loopback hands every packet to packet sockets twice (out, and back in); each is counted once.
#[test]
#[ignore = "needs root: AF_PACKET capture on a veth test bed"]
fn loopback_packets_are_seen_once() {
    let tb = TestBed::new(1);
    let engine = Engine::builder().source("afpacket:lo").unwrap().live(opts(&tb)).build().unwrap();
    assert_eq!(engine.info().link_type, LinkType::ETHERNET);
    let running = engine.start(|_| Echoes::default()).unwrap();
    let ping = tb.in_rx("ping").args(["-c", "5", "-i", "0.05", "-W", "1", "127.0.0.1"]).output().unwrap();
    assert!(ping.status.success(), "{}", String::from_utf8_lossy(&ping.stdout));
    stop_after(&running, 10);
    let report = running.join();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let (_, echoes) = &report.handlers[0];
    assert_eq!((echoes.requests, echoes.replies, echoes.others), (5, 5, 0));
    assert_eq!(report.stats.total().delivered, 10);
}

/// A handler that takes a while per packet: the slow application of an overload test.
struct Slow(Seen, Duration);
impl Handler for Slow {
    fn packet(&mut self, p: &Packet<'_>) {
        self.0.packet(p);
        let until = Instant::now() + self.1;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    }
}

#[test]
#[ignore = "needs root: AF_PACKET capture on a veth test bed, with tcpreplay"]
fn overload_shows_as_kernel_delivery_drops_only() {
    let tb = TestBed::new(2);
    let dir = tempfile::tempdir().unwrap();
    let sent = traffic(&tb, 30_000, 300, 13, 200);
    let frames: Arc<Vec<Vec<u8>>> = Arc::new(sent.iter().map(|s| s.bytes.clone()).collect());
    let live = LiveOptions {
        snaplen: 1500,
        afpacket: AfPacketOptions { block_bytes: 16 << 10, block_count: 4, ..AfPacketOptions::default() },
        ..opts(&tb)
    };
    let engine = Engine::builder()
        .source(&format!("afpacket:{}@0-1", tb.rx_if))
        .unwrap()
        .live(live)
        .pool(PoolConfig::new(32, 4).unwrap())
        .build()
        .unwrap();
    let running = engine.start(|_| Slow(Seen::new(&frames, usize::MAX), Duration::from_micros(50))).unwrap();
    let arrived = send(&tb, dir.path(), &frames.iter().map(Vec::as_slice).collect::<Vec<_>>());
    stop_after(&running, arrived);
    let report = running.join();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let seen: Vec<(QueueId, Seen)> = report.handlers.into_iter().map(|(q, s)| (q, s.0)).collect();
    check_accounting(&report.stats.queues, &seen);
    queue_of_each(&seen);
    let t = report.stats.total();
    println!("overload: {arrived} arrived, {} delivered, {} delivery drops", t.delivered, t.delivery_drops);
    assert!(t.delivery_drops > 0, "no overload: {t:?}");
    assert_eq!(t.delivered + t.delivery_drops, arrived, "every packet that arrived is delivered or a delivery drop: {t:?}");
    assert_eq!(t.received, arrived);
}

/// Packets sent on each TX queue of the sending end, from its mq qdisc's classes.
fn tx_queue_packets(tb: &TestBed) -> Vec<u64> {
    let out = tb.in_tx("tc").args(["-s", "class", "show", "dev", &tb.tx_if]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().filter_map(|l| l.trim().strip_prefix("Sent ")).map(|l| l.split_whitespace().nth(2).unwrap().parse().unwrap()).collect()
}

/// qm fanout keys on `skb->queue_mapping`, which a veth without NAPI leaves at the
/// sender's TX queue t; the kernel reads that as RX queue t - 1 (t = 0: none, which
/// the demux hands to the last queue). So capture queue q gets TX queue (q + 1) mod 4.
#[test]
#[ignore = "needs root: AF_PACKET capture on a veth test bed, with tcpreplay"]
fn qm_fanout_splits_the_queues_between_two_captures() {
    let tb = TestBed::new(4);
    let mq = tb.in_tx("tc").args(["qdisc", "replace", "dev", &tb.tx_if, "root", "mq"]).status().unwrap();
    assert!(mq.success(), "tc qdisc replace ... mq");
    let dir = tempfile::tempdir().unwrap();
    let sent = traffic(&tb, 4000, 300, 17, 200);
    let frames: Arc<Vec<Vec<u8>>> = Arc::new(sent.iter().map(|s| s.bytes.clone()).collect());
    let live = LiveOptions { afpacket: AfPacketOptions { fanout: Fanout::QueueMapping, ..AfPacketOptions::default() }, ..opts(&tb) };
    let start = |range: &str| {
        let engine = Engine::builder().source(&format!("afpacket:{}@{range}", tb.rx_if)).unwrap().live(live.clone()).build().unwrap();
        engine.start(|_| Seen::new(&frames, usize::MAX)).unwrap()
    };
    let (low, high) = (start("0-1"), start("2-3"));
    let arrived = send(&tb, dir.path(), &frames.iter().map(Vec::as_slice).collect::<Vec<_>>());
    let until = Instant::now() + Duration::from_secs(20);
    while low.stats().total().delivered + high.stats().total().delivered < arrived && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(100));
    low.stop_handle().stop();
    high.stop_handle().stop();
    let (low, high) = (low.join(), high.join());
    assert!(low.errors.is_empty() && high.errors.is_empty(), "{:?} {:?}", low.errors, high.errors);
    check_accounting(&low.stats.queues, &low.handlers);
    check_accounting(&high.stats.queues, &high.handlers);
    let per_queue: Vec<u64> = low.stats.queues.iter().chain(&high.stats.queues).map(|q| q.delivered).collect();
    let tx = tx_queue_packets(&tb);
    assert_eq!(tx.iter().sum::<u64>(), frames.len() as u64, "tc counted {tx:?}");
    assert_eq!(per_queue, [tx[1], tx[2], tx[3], tx[0]], "capture queue q gets TX queue q + 1 (sent per TX queue: {tx:?})");
    let mut handlers = low.handlers;
    handlers.extend(high.handlers);
    assert_eq!(queue_of_each(&handlers).len(), frames.len(), "between them, the two captures lost packets");
}

#[test]
#[ignore = "needs root: AF_PACKET capture on a veth test bed, with tcpreplay"]
fn a_packet_limit_stops_capture_after_exactly_that_many() {
    let tb = TestBed::new(2);
    let dir = tempfile::tempdir().unwrap();
    let sent = traffic(&tb, 2000, 50, 19, 100);
    let frames: Arc<Vec<Vec<u8>>> = Arc::new(sent.iter().map(|s| s.bytes.clone()).collect());
    let engine =
        Engine::builder().source(&format!("afpacket:{}@0-1", tb.rx_if)).unwrap().live(opts(&tb)).packet_limit(500).build().unwrap();
    let running = engine.start(|_| Seen::new(&frames, usize::MAX)).unwrap();
    send(&tb, dir.path(), &frames.iter().map(Vec::as_slice).collect::<Vec<_>>());
    assert!(running.wait_for(Duration::from_secs(20)), "the packet limit did not stop the run");
    let report = running.join();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.stop, StopReason::PacketLimit);
    check_accounting(&report.stats.queues, &report.handlers);
    assert_eq!(report.stats.total().delivered, 500);
}

fn build_error(source: &str, live: LiveOptions) -> String {
    match Engine::builder().source(source).unwrap().live(live).build() {
        Ok(_) => panic!("{source} opened"),
        Err(e) => {
            let bad_input = e.is_bad_input();
            format!("{}{e}", if bad_input { "[bad input] " } else { "" })
        }
    }
}

#[test]
fn bad_interfaces_and_options_are_refused_clearly() {
    // Checked before anything is opened: no privileges needed.
    let small = LiveOptions { afpacket: AfPacketOptions { block_bytes: 3000, ..AfPacketOptions::default() }, ..LiveOptions::default() };
    let e = build_error("afpacket:lo", small);
    assert!(e.starts_with("[bad input]") && e.contains("power of two"), "{e}");
    let one = LiveOptions { afpacket: AfPacketOptions { block_count: 1, ..AfPacketOptions::default() }, ..LiveOptions::default() };
    assert!(build_error("afpacket:lo", one).contains("at least 2"));
    let e = build_error("afpacket:weirnope0", LiveOptions::default());
    assert!(e.contains("no network interface \"weirnope0\""), "{e}");
}

#[test]
#[ignore = "needs root: AF_PACKET capture on a veth test bed"]
fn another_namespaces_interface_missing_queues_and_pacing_are_refused_clearly() {
    let tb = TestBed::new(2);
    // The test bed's interface does not exist here, only in its namespace.
    let e = build_error(&format!("afpacket:{}", tb.rx_if), LiveOptions::default());
    assert!(e.contains("no network interface"), "{e}");
    let qm = LiveOptions { afpacket: AfPacketOptions { fanout: Fanout::QueueMapping, ..AfPacketOptions::default() }, ..opts(&tb) };
    let e = build_error(&format!("afpacket:{}@0-3", tb.rx_if), qm);
    assert!(e.contains("has 2 RX queue(s)"), "{e}");
    let paced = Engine::builder().source(&format!("afpacket:{}", tb.rx_if)).unwrap().live(opts(&tb)).pacing(Pacing::Pps(1000.0));
    let engine = paced.build().unwrap();
    assert_eq!(engine.info().queues.len(), 2, "no range: one queue per RX queue of the device");
    let e = engine.start(|_| |_: &Packet<'_>| {}).err().expect("paced live capture started").to_string();
    assert!(e.contains("only trace files can be paced, not live interfaces"), "{e}");
}

/// Set in the child that `without_cap_net_raw_the_error_names_it` starts: the
/// test binary re-run, inside the test bed's namespace, without CAP_NET_RAW.
const NO_CAP_CHILD: &str = "WEIR_AFPACKET_NO_CAP_CHILD";

/// What the child reports, each on a line of its own: its effective
/// capabilities, and what came of opening a packet socket.
const CHILD_CAPS: &str = "child CapEff: ";
const CHILD_OUTCOME: &str = "child outcome: ";

/// The text after `key` on each line of `stdout` that has it (libtest may have
/// printed the test's name on the same line first).
fn child_said<'a>(stdout: &'a str, key: &str) -> Vec<&'a str> {
    stdout.lines().filter_map(|l| l.find(key).map(|at| &l[at + key.len()..])).collect()
}

#[test]
#[ignore = "needs root: a veth test bed, and re-runs itself there without CAP_NET_RAW under setpriv"]
fn without_cap_net_raw_the_error_names_it() {
    if std::env::var_os(NO_CAP_CHILD).is_some() {
        // The child: report what it holds and what opening did; the parent judges.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let caps = status.lines().find_map(|l| l.strip_prefix("CapEff:")).expect("no CapEff in /proc/self/status").trim();
        println!("{CHILD_CAPS}{caps}");
        let outcome = match Engine::builder().source("afpacket:lo").unwrap().build() {
            Err(BuildError::Source(e)) => format!("refused: {e}"),
            Err(e) => format!("refused otherwise: {e}"),
            Ok(_) => "opened".to_string(),
        };
        println!("{CHILD_OUTCOME}{outcome}");
        return;
    }
    let tb = TestBed::new(1);
    testbed::require_tools(&["setpriv"]);
    // In the test bed's namespace, so the `lo` the child opens is that namespace's.
    let out = tb
        .in_rx("setpriv")
        .args(["--inh-caps=-net_raw", "--bounding-set=-net_raw", "--"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "without_cap_net_raw_the_error_names_it", "--ignored", "--nocapture", "--test-threads=1"])
        .env(NO_CAP_CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let all = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the child ended with {}: {all}", out.status);
    assert!(stdout.contains("test result: ok. 1 passed"), "the child did not run this test: {all}");
    let caps = child_said(&stdout, CHILD_CAPS);
    assert_eq!(caps.len(), 1, "the child did not say what it holds: {all}");
    let caps = u64::from_str_radix(caps[0], 16).unwrap_or_else(|e| panic!("CapEff {:?}: {e}", caps[0]));
    assert_eq!(caps & (1 << 13), 0, "the child still held CAP_NET_RAW ({caps:x}): the check proves nothing");
    let outcome = child_said(&stdout, CHILD_OUTCOME);
    assert_eq!(outcome.len(), 1, "the child did not say what opening did: {all}");
    assert!(
        outcome[0].starts_with("refused: afpacket:lo: opening a packet socket: packet sockets need CAP_NET_RAW"),
        "the child, without CAP_NET_RAW: {}",
        outcome[0]
    );
}

// Buckets fanout: weir's eBPF program steers each flow by its bucket in a table
// the test reads and changes through a `BucketSteering`.

/// `n` UDP flows of the test bed's /24.
fn udp_flows(tb: &TestBed, n: usize, rng: &mut Rng) -> Vec<Flow> {
    random_flows(tb, n, rng).into_iter().map(|f| Flow { udp: true, ..f }).collect()
}

/// Live options that capture in `ns` with buckets fanout on `steering`'s table.
fn bucket_opts(ns: &str, steering: &BucketSteering) -> LiveOptions {
    LiveOptions {
        netns: Some(ns.into()),
        afpacket: AfPacketOptions { fanout: steering.fanout(), ..AfPacketOptions::default() },
        ..LiveOptions::default()
    }
}

/// Wait (at most 20 s) until the queues have delivered `n` packets.
fn wait_delivered<H: Handler>(running: &Running<H>, n: u64) {
    let until = Instant::now() + Duration::from_secs(20);
    while running.stats().total().delivered < n && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Each packet on the queue the table gives its bucket (the bucket weir's RSS
/// gives the frame), once; returns the packets per bucket.
fn check_steered(at: &HashMap<u32, QueueId>, frames: &[Vec<u8>], queue_of: impl Fn(u32, usize) -> QueueId) -> Vec<u64> {
    let rss = Rss::new(LinkType::ETHERNET, 1);
    let mut per_bucket = vec![0u64; BUCKETS];
    for (&seq, &queue) in at {
        let b = rss.bucket(&frames[seq as usize]);
        per_bucket[b] += 1;
        assert_eq!(queue, queue_of(seq, b), "packet {seq} (bucket {b}) on the wrong queue");
    }
    per_bucket
}

#[test]
#[ignore = "needs root: AF_PACKET capture on a veth test bed, with tcpreplay"]
fn bucket_fanout_steers_each_flow_by_its_bucket_and_counts_it() {
    let tb = TestBed::new(2);
    let dir = tempfile::tempdir().unwrap();
    let steering = BucketSteering::new().expect("loading weir's fanout program");
    let mut rng = Rng(23);
    let flows = udp_flows(&tb, 300, &mut rng);
    let sent = frames_of(&flows, 0..4000, &mut rng, 300);
    // One in five tagged: the kernel takes the tag out before the program runs,
    // weir puts it back, and weir's RSS skips it; the bucket must not change.
    let frames: Vec<Vec<u8>> = sent
        .iter()
        .enumerate()
        .map(|(i, s)| if i % 5 == 0 { tagged(&s.bytes, (i % 4095) as u16 | 0x2000) } else { s.bytes.clone() })
        .collect();
    let frames = Arc::new(frames);
    let engine =
        Engine::builder().source(&format!("afpacket:{}@0-1", tb.rx_if)).unwrap().live(bucket_opts(&tb.rx_ns, &steering)).build().unwrap();
    assert_eq!(steering.queues(), [QueueId(0), QueueId(1)], "opening binds the table to the capture");
    let table = steering.table().unwrap();
    assert!(table.iter().enumerate().all(|(b, q)| usize::from(q.0) == b % 2), "the table starts as bucket b → queue b mod 2");
    let (arrived, report) = capture_sent(&tb, dir.path(), engine, &frames, usize::MAX);
    assert_eq!(arrived, frames.len() as u64, "the veth pair lost packets: the test bed, not weir");
    assert_eq!(report.stats.total().delivery_drops, 0);
    let at = queue_of_each(&report.handlers);
    assert_eq!(at.len(), frames.len(), "packets lost");
    let per_bucket = check_steered(&at, &frames, |_, b| table[b]);
    flows_stay_together(&at, &sent, 250);
    for (queue, seen) in &report.handlers {
        assert!(!seen.seqs.is_empty(), "queue {queue} got nothing of 300 flows");
    }
    let hits = steering.hits().unwrap();
    assert_eq!(hits.iter().sum::<u64>(), frames.len() as u64, "the program counts every packet once");
    assert_eq!(hits, per_bucket, "the program counts each packet in its bucket");
    // The capture is over: the table is free again, and the handle says so.
    assert!(steering.queues().is_empty());
    assert!(matches!(steering.move_bucket(0, QueueId(1)), Err(SteerError::NoCapture)));
}

#[test]
#[ignore = "needs root: AF_PACKET capture on a veth test bed, with tcpreplay"]
fn moved_buckets_go_to_their_new_queue_and_nothing_is_lost_or_doubled() {
    let tb = TestBed::new(2);
    let dir = tempfile::tempdir().unwrap();
    let steering = BucketSteering::new().expect("loading weir's fanout program");
    let mut rng = Rng(29);
    let flows = udp_flows(&tb, 200, &mut rng);
    let mut sent = frames_of(&flows, 0..2000, &mut rng, 300);
    sent.extend(frames_of(&flows, 2000..4000, &mut rng, 300));
    let frames: Arc<Vec<Vec<u8>>> = Arc::new(sent.iter().map(|s| s.bytes.clone()).collect());
    let (first, second) = frames.split_at(2000);
    let source = format!("afpacket:{}@0-1", tb.rx_if);
    let engine = Engine::builder().source(&source).unwrap().live(bucket_opts(&tb.rx_ns, &steering)).build().unwrap();
    let e = build_error(&source, bucket_opts(&tb.rx_ns, &steering));
    assert!(e.contains("already steers"), "a second capture took the table: {e}");
    let running = engine.start(|_| Seen::new(&frames, usize::MAX)).unwrap();

    let arrived = send(&tb, dir.path(), &first.iter().map(Vec::as_slice).collect::<Vec<_>>());
    assert_eq!(arrived, first.len() as u64, "the veth pair lost packets: the test bed, not weir");
    wait_delivered(&running, arrived);
    let before = steering.table().unwrap();
    let on_zero: Vec<usize> = (0..BUCKETS).filter(|&b| before[b] == QueueId(0)).collect();
    assert_eq!(on_zero.len(), BUCKETS / 2);
    for &b in &on_zero {
        steering.move_bucket(b, QueueId(1)).unwrap();
    }
    assert!(steering.table().unwrap().iter().all(|&q| q == QueueId(1)), "every bucket on queue 1 now");
    let e = steering.move_bucket(BUCKETS, QueueId(0)).unwrap_err().to_string();
    assert!(e.contains("bucket 512 does not exist"), "{e}");
    let e = steering.move_bucket(0, QueueId(2)).unwrap_err().to_string();
    assert!(e.contains(&format!("queue 2 is not a queue of {source} (its queues: 0, 1)")), "{e}");
    assert!(matches!(steering.queue_of(BUCKETS), Err(SteerError::NoSuchBucket { bucket: 512 })));

    let arrived2 = send(&tb, dir.path(), &second.iter().map(Vec::as_slice).collect::<Vec<_>>());
    assert_eq!(arrived2, second.len() as u64, "the veth pair lost packets: the test bed, not weir");
    stop_after(&running, arrived + arrived2);
    let report = running.join();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    check_accounting(&report.stats.queues, &report.handlers);
    let at = queue_of_each(&report.handlers);
    assert_eq!(at.len(), frames.len(), "packets lost");
    let first_batch = first.len() as u32;
    let per_bucket = check_steered(&at, &frames, |seq, b| if seq < first_batch { before[b] } else { QueueId(1) });
    let (_, zero) = &report.handlers[0];
    assert!(!zero.seqs.is_empty(), "queue 0 had its share of the first batch");
    assert!(zero.seqs.iter().all(|&s| s < first_batch), "queue 0 got packets after its buckets moved away");
    let hits = steering.hits().unwrap();
    assert_eq!(hits, per_bucket, "hits per bucket, both batches");
    assert_eq!(hits.iter().sum::<u64>(), frames.len() as u64);
}

/// Outgoing packets reach the program with their Ethernet header in front
/// (received ones start at the IP header): captured on the sending end, they are
/// steered by the same buckets.
#[test]
#[ignore = "needs root: AF_PACKET capture on a veth test bed, with tcpreplay"]
fn outgoing_packets_are_steered_by_the_same_buckets() {
    let tb = TestBed::new(2);
    let dir = tempfile::tempdir().unwrap();
    let steering = BucketSteering::new().expect("loading weir's fanout program");
    let sent = traffic(&tb, 2000, 200, 31, 300);
    let frames: Vec<Vec<u8>> =
        sent.iter().enumerate().map(|(i, s)| if i % 4 == 0 { tagged(&s.bytes, (i % 4095) as u16) } else { s.bytes.clone() }).collect();
    let frames = Arc::new(frames);
    let engine =
        Engine::builder().source(&format!("afpacket:{}@0-1", tb.tx_if)).unwrap().live(bucket_opts(&tb.tx_ns, &steering)).build().unwrap();
    let table = steering.table().unwrap();
    let running = engine.start(|_| Seen::new(&frames, usize::MAX)).unwrap();
    send(&tb, dir.path(), &frames.iter().map(Vec::as_slice).collect::<Vec<_>>());
    stop_after(&running, frames.len() as u64);
    let report = running.join();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    check_accounting(&report.stats.queues, &report.handlers);
    let at = queue_of_each(&report.handlers);
    assert_eq!(at.len(), frames.len(), "packets lost");
    let per_bucket = check_steered(&at, &frames, |_, b| table[b]);
    assert_eq!(steering.hits().unwrap(), per_bucket);
}

/// `--fanout buckets` without a handle: the capture makes its own table, which
/// steers as a caller's does. And devices without Ethernet headers are refused.
#[test]
#[ignore = "needs root: AF_PACKET capture on a veth test bed, with tcpreplay"]
fn a_private_bucket_table_steers_too_and_non_ethernet_devices_are_refused() {
    let tb = TestBed::new(2);
    let dir = tempfile::tempdir().unwrap();
    let sent = traffic(&tb, 2000, 150, 37, 300);
    let frames: Arc<Vec<Vec<u8>>> = Arc::new(sent.iter().map(|s| s.bytes.clone()).collect());
    let live = LiveOptions { afpacket: AfPacketOptions { fanout: "buckets".parse().unwrap(), ..AfPacketOptions::default() }, ..opts(&tb) };
    let engine = Engine::builder().source(&format!("afpacket:{}@0-1", tb.rx_if)).unwrap().live(live.clone()).build().unwrap();
    let (_, report) = capture_sent(&tb, dir.path(), engine, &frames, usize::MAX);
    let at = queue_of_each(&report.handlers);
    assert_eq!(at.len(), frames.len(), "packets lost");
    check_steered(&at, &frames, |_, b| QueueId((b % 2) as u16));

    let tun = tb.in_rx("ip").args(["tuntap", "add", "dev", "weirtun0", "mode", "tun"]).output().unwrap();
    assert!(tun.status.success(), "making a tun device: {}", String::from_utf8_lossy(&tun.stderr));
    let e = build_error("afpacket:weirtun0", live);
    // Deleting the namespace would remove it too; this is sooner.
    let _ = tb.in_rx("ip").args(["tuntap", "del", "dev", "weirtun0", "mode", "tun"]).status();
    assert!(e.starts_with("[bad input]") && e.contains("buckets fanout parses Ethernet frames"), "{e}");
}

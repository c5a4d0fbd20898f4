//! The engine end to end on real trace files written for each test: every packet
//! delivered once, flows kept on one queue, the stats identity under overload,
//! and every way a run can stop.

mod support;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::frames::{Frame, Rng};
use weir::engine::{RunError, StopReason};
use weir::sink::{FileFormat, TraceWriter, TsPrecision};
use weir::source::Pacing;
use weir::wire::FlowTuple;
use weir::{Engine, Handler, LinkType, Packet, PoolConfig, QueueId};

/// An Ethernet/IPv4/TCP-or-UDP frame whose payload starts with `seq`.
fn frame(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, udp: bool, seq: u32, payload: usize) -> Vec<u8> {
    let macs = ([0x02, 0, 0, 0, 0, 1], [0x02, 0, 0, 0, 0, 2]);
    Frame { dst_mac: macs.0, src_mac: macs.1, src, dst, sport, dport, udp }.build(&[], seq, payload)
}

/// An ARP request: not IP, so it must land on queue 0.
fn arp(seq: u32) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 3, 0x08, 0x06]);
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&seq.to_be_bytes());
    f.resize(60, 0);
    f
}

fn seq_of(data: &[u8]) -> u32 {
    if data.len() >= 12 + 2 && data[12..14] == [0x08, 0x06] {
        return u32::from_be_bytes(data[22..26].try_into().unwrap());
    }
    let l4 = if data[23] == 17 { 8 } else { 20 };
    let at = 14 + 20 + l4;
    u32::from_be_bytes(data[at..at + 4].try_into().unwrap())
}

/// Client address, server address, client port, server port, UDP?
type Endpoints = ([u8; 4], [u8; 4], u16, u16, bool);

/// A trace of `flows` bidirectional flows interleaved at random, plus some ARP.
/// Returns the path and each packet's canonical flow (None for ARP), by sequence number.
fn write_trace(dir: &Path, name: &str, format: FileFormat, packets: u32, flows: usize, seed: u64) -> (PathBuf, Vec<Option<FlowTuple>>) {
    let mut rng = Rng(seed);
    let tuples: Vec<Endpoints> = (0..flows)
        .map(|_| {
            let r = rng.next();
            (
                [198, 18, (r >> 8) as u8, r as u8],
                [198, 19, (r >> 16) as u8, (r >> 24) as u8],
                1024 + (r >> 32) as u16 % 60000,
                [80, 443, 53, 22][(r >> 50) as usize % 4],
                r >> 60 == 0,
            )
        })
        .collect();
    let path = dir.join(name);
    let file = std::fs::File::create(&path).unwrap();
    let mut w = TraceWriter::new(file, format, LinkType::ETHERNET, 65535, TsPrecision::Nano).unwrap();
    let mut truth = Vec::new();
    for seq in 0..packets {
        let r = rng.next();
        let data = if r % 50 == 0 {
            truth.push(None);
            arp(seq)
        } else {
            let (a, b, sp, dp, udp) = tuples[(r >> 8) as usize % flows];
            let reply = (r >> 40) & 1 == 1;
            let f = if reply {
                frame(b, a, dp, sp, udp, seq, (r >> 20) as usize % 1400)
            } else {
                frame(a, b, sp, dp, udp, seq, (r >> 20) as usize % 1400)
            };
            truth.push(Some(FlowTuple::parse(LinkType::ETHERNET, &f).unwrap().canonical()));
            f
        };
        let len = data.len() as u32;
        w.write_packet(1_700_000_000_000_000_000 + u64::from(seq) * 1000, &data, len).unwrap();
    }
    w.finish().unwrap();
    (path, truth)
}

/// Records what one queue's worker saw, in order.
#[derive(Default)]
struct Seen {
    seqs: Vec<u32>,
    queue: Option<QueueId>,
    bytes: u64,
}

impl Handler for Seen {
    fn packet(&mut self, p: &Packet<'_>) {
        self.seqs.push(seq_of(p.data()));
        assert!(self.queue.is_none_or(|q| q == p.queue()), "a worker got another queue's packet");
        self.queue = Some(p.queue());
        self.bytes += u64::from(p.wire_len());
        assert!(p.caplen() <= p.wire_len());
    }
}

#[test]
fn every_packet_once_in_order_with_flows_on_one_queue() {
    let dir = tempfile::tempdir().unwrap();
    for (format, queues) in [(FileFormat::Pcap, 1u16), (FileFormat::Pcap, 4), (FileFormat::PcapNg, 3)] {
        let (path, truth) = write_trace(dir.path(), &format!("t{queues}.trace"), format, 20_000, 300, 7 + u64::from(queues));
        let name = format!("{}@0-{}", path.display(), queues - 1);
        let report = Engine::builder()
            .source(&name)
            .unwrap()
            .pool(PoolConfig::new(16, 4).unwrap())
            .build()
            .unwrap()
            .run(|_| Seen::default())
            .unwrap();
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        assert_eq!(report.stop, StopReason::EndOfInput);

        let mut queue_of_flow: HashMap<FlowTuple, QueueId> = HashMap::new();
        let mut all = HashSet::new();
        for ((queue, seen), stats) in report.handlers.iter().zip(&report.stats.queues) {
            assert_eq!(stats.queue, *queue);
            assert!(seen.seqs.windows(2).all(|w| w[0] < w[1]), "queue {queue} reordered packets");
            assert_eq!(stats.delivered, seen.seqs.len() as u64);
            assert_eq!(stats.delivered_bytes, seen.bytes);
            assert_eq!((stats.received, stats.in_flight, stats.capture_drops), (stats.delivered, 0, 0));
            for &s in &seen.seqs {
                assert!(all.insert(s), "packet {s} delivered twice");
                match truth[s as usize] {
                    None => assert_eq!(*queue, QueueId(0), "non-IP packet {s} not on queue 0"),
                    Some(flow) => {
                        let q = *queue_of_flow.entry(flow).or_insert(*queue);
                        assert_eq!(q, *queue, "flow {flow:?} split across queues {q} and {queue}");
                    }
                }
            }
        }
        assert_eq!(all.len(), truth.len(), "{queues} queues: packets lost");
        if queues > 1 {
            let used: HashSet<_> = queue_of_flow.values().collect();
            assert_eq!(used.len(), usize::from(queues), "RSS left a queue empty with 300 flows");
        }
    }
}

#[test]
fn a_queue_subset_receives_only_its_share() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_trace(dir.path(), "t.pcap", FileFormat::Pcap, 5_000, 100, 3);
    let all = Engine::builder().source(&format!("{}@0-2", path.display())).unwrap().build().unwrap().run(|_| Seen::default()).unwrap();
    // `@2` is queue 2 of 3: the last queue named sets how many there are.
    let one = Engine::builder().source(&format!("{}@2", path.display())).unwrap().build().unwrap().run(|_| Seen::default()).unwrap();
    assert_eq!(one.handlers.len(), 1);
    assert_eq!(one.handlers[0].0, QueueId(2));
    assert!(!one.handlers[0].1.seqs.is_empty());
    assert_eq!(one.handlers[0].1.seqs, all.handlers[2].1.seqs, "queue 2 of 3 alone sees what it sees among all three");
    assert_eq!(one.stats.total().received, one.stats.total().delivered, "other queues' packets are not received");
}

/// A handler that takes a while per packet: the slow application of an overload test.
struct Slow(u64, Duration);
impl Handler for Slow {
    fn packet(&mut self, _: &Packet<'_>) {
        self.0 += 1;
        let until = std::time::Instant::now() + self.1;
        while std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
    }
}

#[test]
fn identity_holds_at_every_read_under_overload() {
    let dir = tempfile::tempdir().unwrap();
    let (path, truth) = write_trace(dir.path(), "t.pcap", FileFormat::Pcap, 30_000, 50, 11);
    let engine = Engine::builder()
        .source(&format!("{}@0-1", path.display()))
        .unwrap()
        .pool(PoolConfig::new(8, 2).unwrap())
        .pacing(Pacing::Pps(200_000.0))
        .build()
        .unwrap();
    let running = engine.start(|_| Slow(0, Duration::from_micros(20))).unwrap();
    let mut reads = 0;
    while !running.wait_for(Duration::from_micros(200)) {
        let s = running.stats();
        for q in &s.queues {
            assert!(q.balanced(), "identity broken mid-run: {q:?}");
        }
        reads += 1;
    }
    let report = running.join();
    let t = report.stats.total();
    assert!(reads > 10, "the run was too short to observe");
    assert!(t.capture_drops > 0, "a 20 µs/packet worker at 200 kpps with 16 cells must drop: {t:?}");
    assert_eq!(t.received, truth.len() as u64);
    assert_eq!(t.delivered + t.capture_drops, t.received);
    assert_eq!((t.in_flight, t.filtered, t.delivery_drops), (0, 0, 0));
    let handled: u64 = report.handlers.iter().map(|(_, h)| h.0).sum();
    assert_eq!(handled, t.delivered);
    for q in &report.stats.queues {
        assert!(q.balanced());
    }
}

#[test]
fn top_speed_waits_for_a_slow_worker_instead_of_dropping() {
    let dir = tempfile::tempdir().unwrap();
    let (path, truth) = write_trace(dir.path(), "t.pcap", FileFormat::Pcap, 3_000, 20, 5);
    let report = Engine::builder()
        .source(path.to_str().unwrap())
        .unwrap()
        .pool(PoolConfig::new(4, 2).unwrap())
        .build()
        .unwrap()
        .run(|_| Slow(0, Duration::from_micros(5)))
        .unwrap();
    let t = report.stats.total();
    assert_eq!((t.delivered, t.capture_drops, t.in_flight), (truth.len() as u64, 0, 0));
}

#[test]
fn packet_limit_delivers_exactly_n_across_queues() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_trace(dir.path(), "t.pcap", FileFormat::Pcap, 10_000, 100, 13);
    for limit in [1u64, 999, 10_000, 20_000] {
        let report = Engine::builder()
            .source(&format!("{}@0-1", path.display()))
            .unwrap()
            .packet_limit(limit)
            .build()
            .unwrap()
            .run(|_| Seen::default())
            .unwrap();
        let t = report.stats.total();
        assert_eq!(t.delivered, limit.min(10_000), "limit {limit}");
        assert_eq!(t.in_flight, 0);
        assert!(report.stats.queues.iter().all(|q| q.balanced()));
        let want = if limit < 10_000 { StopReason::PacketLimit } else { StopReason::EndOfInput };
        assert_eq!(report.stop, want, "limit {limit}");
    }
}

#[test]
fn filter_counts_what_it_rejects() {
    let dir = tempfile::tempdir().unwrap();
    let (path, truth) = write_trace(dir.path(), "t.pcap", FileFormat::Pcap, 8_000, 40, 17);
    let report = Engine::builder()
        .source(&format!("{}@0-1", path.display()))
        .unwrap()
        .filter("tcp")
        .build()
        .unwrap()
        .run(|_| Seen::default())
        .unwrap();
    let t = report.stats.total();
    let tcp = truth.iter().filter(|f| f.is_some_and(|f| f.protocol() == 6)).count() as u64;
    assert_eq!(t.delivered, tcp);
    assert_eq!(t.filtered, truth.len() as u64 - tcp);
    assert_eq!(t.received, truth.len() as u64);
    let bad = Engine::builder().source(path.to_str().unwrap()).unwrap().filter("tcp port eighty").build();
    assert!(matches!(bad, Err(ref e) if e.is_bad_input() && e.to_string().contains("eighty")), "{:?}", bad.err());
}

#[test]
fn time_limit_and_stop_handle_end_a_paced_run_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let (path, truth) = write_trace(dir.path(), "t.pcap", FileFormat::Pcap, 100_000, 10, 19);
    let paced = || Engine::builder().source(&format!("{}@0-1", path.display())).unwrap().pacing(Pacing::Pps(20_000.0));

    let report = paced().time_limit(Duration::from_millis(300)).build().unwrap().run(|_| Seen::default()).unwrap();
    let t = report.stats.total();
    assert_eq!(report.stop, StopReason::TimeLimit);
    assert!(t.delivered > 0 && t.delivered < truth.len() as u64, "{t:?}");
    assert_eq!(t.in_flight, 0);

    let running = paced().build().unwrap().start(|_| Seen::default()).unwrap();
    let stop = running.stop_handle();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        stop.stop();
    });
    let report = running.join();
    let t = report.stats.total();
    assert_eq!(report.stop, StopReason::Requested);
    assert!(t.delivered > 0 && t.delivered < truth.len() as u64);
    assert_eq!(t.in_flight, 0);
    assert!(report.stats.queues.iter().all(|q| q.balanced()));
}

#[test]
fn a_truncated_trace_delivers_what_came_before_then_reports_the_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_trace(dir.path(), "t.pcap", FileFormat::Pcap, 1_000, 10, 23);
    let full = std::fs::read(&path).unwrap();
    // Cut inside the last record's data.
    std::fs::write(&path, &full[..full.len() - 3]).unwrap();
    let report = Engine::builder().source(&format!("{}@0-1", path.display())).unwrap().build().unwrap().run(|_| Seen::default()).unwrap();
    assert_eq!(report.stats.total().delivered, 999);
    assert_eq!(report.stats.total().in_flight, 0);
    assert!(report.failed_on_bad_input());
    let msg = report.error().unwrap().to_string();
    assert!(msg.contains("t.pcap") && msg.contains("offset"), "{msg}");
}

#[test]
fn a_panicking_handler_is_reported_and_the_run_ends() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_trace(dir.path(), "t.pcap", FileFormat::Pcap, 50_000, 10, 29);
    let boom = Arc::new(AtomicBool::new(false));
    let b = Arc::clone(&boom);
    let report = Engine::builder()
        .source(&format!("{}@0-1", path.display()))
        .unwrap()
        .pool(PoolConfig::new(8, 2).unwrap())
        .build()
        .unwrap()
        .run(move |q| {
            let b = Arc::clone(&b);
            let mut n = 0;
            move |_: &Packet<'_>| {
                n += 1;
                if q == QueueId(1) && n == 100 {
                    b.store(true, Ordering::Relaxed);
                    panic!("application bug");
                }
            }
        })
        .unwrap();
    assert!(boom.load(Ordering::Relaxed));
    assert_eq!(report.stop, StopReason::Failed);
    assert!(report
        .errors
        .iter()
        .any(|e| matches!(e, RunError::HandlerPanicked { queue: QueueId(1), message } if message == "application bug")));
    assert!(report.stats.queues.iter().all(|q| q.balanced()));
}

/// What one queue's handler saw, and the thread it ran on.
#[derive(Default)]
struct SeenOn {
    seen: Seen,
    threads: HashSet<String>,
}

impl Handler for SeenOn {
    fn packet(&mut self, p: &Packet<'_>) {
        self.seen.packet(p);
        if self.threads.is_empty() || self.seen.seqs.len() % 1000 == 0 {
            self.threads.insert(std::thread::current().name().unwrap_or("?").to_string());
        }
    }
}

#[test]
fn inline_handlers_run_on_the_capture_thread_and_see_what_workers_see() {
    let dir = tempfile::tempdir().unwrap();
    for queues in [1u16, 3] {
        let (path, truth) = write_trace(dir.path(), &format!("i{queues}.pcap"), FileFormat::Pcap, 30_000, 200, 41 + u64::from(queues));
        let name = format!("{}@0-{}", path.display(), queues - 1);
        let run = |inline: bool| {
            let engine = Engine::builder().source(&name).unwrap().pool(PoolConfig::new(16, 4).unwrap()).inline(inline).build().unwrap();
            let report = engine.run(|_| SeenOn::default()).unwrap();
            assert!(report.errors.is_empty(), "{:?}", report.errors);
            assert_eq!(report.stop, StopReason::EndOfInput);
            report
        };
        let (threaded, inline) = (run(false), run(true));
        assert_eq!(threaded.stats, inline.stats, "{queues} queues: the counters differ");
        let total: usize = inline.handlers.iter().map(|(_, h)| h.seen.seqs.len()).sum();
        assert_eq!(total, truth.len(), "{queues} queues: inline lost packets");
        for ((qa, a), (qb, b)) in threaded.handlers.iter().zip(&inline.handlers) {
            assert_eq!(qa, qb);
            assert_eq!(a.seen.seqs, b.seen.seqs, "queue {qa}: inline delivered other packets, or in another order");
            assert!(a.threads.iter().all(|t| t.starts_with("weir-worker")), "threaded ran on {:?}", a.threads);
            // A trace is one capture unit for all its queues: one thread runs them all.
            assert!(b.threads.len() == 1 && b.threads.iter().all(|t| t.starts_with("weir-capture")), "inline ran on {:?}", b.threads);
        }
        let inline_threads: HashSet<_> = inline.handlers.iter().flat_map(|(_, h)| h.threads.iter()).collect();
        assert_eq!(inline_threads.len(), 1, "{queues} queues inline ran on {inline_threads:?}");
    }
}

#[test]
fn an_inline_handler_that_panics_is_reported_and_the_run_ends() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_trace(dir.path(), "t.pcap", FileFormat::Pcap, 50_000, 10, 31);
    let report = Engine::builder()
        .source(&format!("{}@0-1", path.display()))
        .unwrap()
        .pool(PoolConfig::new(8, 2).unwrap())
        .inline(true)
        .build()
        .unwrap()
        .run(move |q| {
            let mut n = 0;
            move |_: &Packet<'_>| {
                n += 1;
                if q == QueueId(1) && n == 100 {
                    panic!("inline bug");
                }
            }
        })
        .unwrap();
    assert_eq!(report.stop, StopReason::Failed);
    assert!(report.errors.iter().any(|e| matches!(e, RunError::HandlerPanicked { queue: QueueId(1), message } if message == "inline bug")));
    assert_eq!(report.handlers.len(), 1, "queue 0's handler comes back");
    assert!(report.stats.queues.iter().all(|q| q.balanced()));
}

#[test]
fn inline_is_refused_where_handlers_need_worker_threads() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_trace(dir.path(), "t.pcap", FileFormat::Pcap, 100, 2, 3);
    let trace = format!("{}@0-1", path.display());
    let refused = |b: weir::engine::EngineBuilder| match b.inline(true).build() {
        Err(e) => e.to_string(),
        Ok(_) => panic!("an inline engine was built where it cannot run"),
    };
    let live = refused(Engine::builder().source("afpacket:lo").unwrap());
    assert!(live.contains("traces only"), "{live}");
    let offload = refused(Engine::builder().source(&trace).unwrap().balance("offload:50".parse().unwrap()));
    assert!(offload.contains("inline handlers have none"), "{offload}");
    let batch = weir::locality::BatchSize::new(64).unwrap();
    let locality = refused(Engine::builder().source(&trace).unwrap().locality(Some(weir::locality::LocalityConfig {
        batch,
        timeout: Duration::from_millis(5),
        double_buffer: false,
    })));
    assert!(locality.contains("inline handler"), "{locality}");
}

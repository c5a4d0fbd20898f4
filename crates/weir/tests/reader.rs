//! The pulling reader (`Engine::start_reader`), from traces: capture order on
//! one queue, every packet once over several, packets left unread counted as
//! such when the application stops early, and a damaged trace reported after
//! the packets before the damage. Live, on the test bed: the reader's
//! descriptor is readable exactly when there is something to read, and a
//! filter replaced while reading judges what is captured after it (afpacket,
//! where the kernel's socket filter is swapped, and afxdp, where the capture
//! threads filter).

mod support;

use std::os::fd::RawFd;
use std::path::Path;
use std::time::{Duration, Instant};
use support::frames::Frame;
use testbed::TestBed;
use weir::engine::Read;
use weir::sink::{FileFormat, TraceWriter, TsPrecision};
use weir::source::{AfXdpOptions, LiveOptions};
use weir::{Engine, LinkType, PoolConfig};

fn write_trace(path: &Path, packets: u32) {
    let file = std::fs::File::create(path).unwrap();
    let mut w = TraceWriter::new(file, FileFormat::Pcap, LinkType::ETHERNET, 65535, TsPrecision::Micro).unwrap();
    for seq in 0..packets {
        let f = Frame {
            dst_mac: [2, 0, 0, 0, 0, 1],
            src_mac: [2, 0, 0, 0, 0, 2],
            src: [198, 18, 0, (seq % 200) as u8 + 1],
            dst: [198, 19, 0, 1],
            sport: 1024 + (seq % 977) as u16,
            dport: 80,
            udp: seq % 3 == 0,
        };
        let frame = f.build(&[], seq, 60 + (seq % 50) as usize);
        w.write_packet(1_700_000_000_000_000_000 + u64::from(seq) * 1000, &frame, frame.len() as u32).unwrap();
    }
    w.finish().unwrap();
}

fn seq_of(data: &[u8]) -> u32 {
    let l4 = if data[23] == 17 { 8 } else { 20 };
    u32::from_be_bytes(data[34 + l4..38 + l4].try_into().unwrap())
}

fn reader(source: &str, pool: PoolConfig) -> weir::engine::Reader {
    Engine::builder().source(source).unwrap().pool(pool).build().unwrap().start_reader().unwrap()
}

#[test]
fn the_reader_says_why_capture_ended() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pcap");
    write_trace(&path, 2_000);
    let drain = |r: &mut weir::engine::Reader| {
        let mut n = 0;
        while let Read::Packet(_) = r.next(Duration::from_secs(5)) {
            n += 1;
        }
        n
    };
    let mut r = reader(&path.display().to_string(), PoolConfig::new(16, 4).unwrap());
    assert_eq!(drain(&mut r), 2_000);
    assert_eq!(r.stop_reason(), Some(weir::StopReason::EndOfInput));
    let mut r = Engine::builder().source(&path.display().to_string()).unwrap().packet_limit(500).build().unwrap().start_reader().unwrap();
    assert_eq!(drain(&mut r), 500);
    assert_eq!(r.stop_reason(), Some(weir::StopReason::PacketLimit));
    // Stopped while capture runs: the pool (4 chunks of 16) holds it back.
    let mut r = reader(&path.display().to_string(), PoolConfig::new(16, 4).unwrap());
    assert!(matches!(r.next(Duration::from_secs(5)), Read::Packet(_)));
    assert_eq!(r.stop_reason(), None, "capture is still going");
    r.stop_handle().stop();
    drain(&mut r);
    assert_eq!(r.stop_reason(), Some(weir::StopReason::Requested));
    let report = r.finish();
    let t = report.stats.total();
    assert!(t.delivered < 2_000 && t.in_flight == 0 && t.received == t.delivered + t.unread, "{t:?}");
}

#[test]
fn every_packet_once_in_capture_order_per_queue() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pcap");
    write_trace(&path, 5_000);
    for queues in ["", "@0-3"] {
        // Small chunks and few of them: the reader turns between queues often and
        // the capture thread waits for what it holds.
        let mut r = reader(&format!("{}{queues}", path.display()), PoolConfig::new(16, 4).unwrap());
        let mut seen = vec![0u32; 5_000];
        let mut last = std::collections::HashMap::new();
        loop {
            match r.next(Duration::from_secs(10)) {
                Read::Packet(p) => {
                    let seq = seq_of(p.data());
                    seen[seq as usize] += 1;
                    if let Some(prev) = last.insert(p.queue(), seq) {
                        assert!(prev < seq, "queue {} reordered: {seq} after {prev}", p.queue());
                    }
                }
                Read::Idle => panic!("a trace never idles for 10 s"),
                Read::End => break,
            }
        }
        assert!(matches!(r.next(Duration::ZERO), Read::End), "End stays End");
        assert!(seen.iter().all(|&n| n == 1), "{queues}: every packet exactly once");
        let rep = r.finish();
        assert!(rep.errors.is_empty(), "{:?}", rep.errors);
        let t = rep.stats.total();
        assert_eq!((t.received, t.delivered, t.unread, t.in_flight), (5_000, 5_000, 0, 0), "{t:?}");
    }
}

#[test]
fn a_reader_per_queue_each_on_its_own_thread_gets_its_queues_packets_once_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pcap");
    write_trace(&path, 5_000);
    let engine = Engine::builder().source(&format!("{}@0-2", path.display())).unwrap().pool(PoolConfig::new(16, 4).unwrap());
    let readers = engine.build().unwrap().start_readers().unwrap();
    assert_eq!(readers.len(), 3);
    // Each thread reads its queue to the end: the packets it sees are its
    // queue's, in capture order; the pools are small, so a queue read slowly
    // holds the capture thread back and the others wait with it.
    let threads: Vec<_> = readers
        .into_iter()
        .enumerate()
        .map(|(i, mut r)| {
            std::thread::spawn(move || {
                let mut seqs = Vec::new();
                loop {
                    match r.next(Duration::from_secs(10)) {
                        Read::Packet(p) => {
                            assert_eq!(p.queue(), weir::QueueId(i as u16), "reader {i} got another queue's packet");
                            seqs.push(seq_of(p.data()));
                        }
                        Read::Idle => panic!("a trace never idles for 10 s"),
                        Read::End => break,
                    }
                }
                assert!(seqs.windows(2).all(|w| w[0] < w[1]), "queue {i} reordered");
                let rep = r.finish();
                assert!(rep.errors.is_empty(), "{:?}", rep.errors);
                (seqs, rep.stats)
            })
        })
        .collect();
    let mut seen = vec![0u32; 5_000];
    for (i, t) in threads.into_iter().enumerate() {
        let (seqs, stats) = t.join().unwrap();
        assert_eq!(stats.queues.len(), 1, "a reader's counters are its queue's");
        let q = stats.queues[0];
        assert_eq!(q.queue, weir::QueueId(i as u16));
        assert!(!seqs.is_empty(), "the split gives every queue packets");
        assert_eq!((q.received, q.delivered, q.unread, q.in_flight), (seqs.len() as u64, seqs.len() as u64, 0, 0), "{q:?}");
        seqs.iter().for_each(|&s| seen[s as usize] += 1);
    }
    assert!(seen.iter().all(|&n| n == 1), "every packet exactly once over the queues");
}

#[test]
fn closing_one_queues_reader_early_stops_capture_on_every_queue() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pcap");
    write_trace(&path, 20_000);
    let engine = Engine::builder().source(&format!("{}@0-1", path.display())).unwrap().pool(PoolConfig::new(16, 4).unwrap());
    let mut readers = engine.build().unwrap().start_readers().unwrap();
    let mut second = readers.pop().unwrap();
    let first = readers.pop().unwrap();
    let reading = std::thread::spawn(move || {
        let mut n = 0u64;
        while let Read::Packet(_) = second.next(Duration::from_secs(10)) {
            n += 1;
        }
        (n, second.stop_reason(), second.finish().stats.total())
    });
    // The first queue's reader closes before its queue ended: capture stops.
    let t0 = first.finish().stats.total();
    let (n, reason, t1) = reading.join().unwrap();
    assert_eq!(reason, Some(weir::StopReason::Requested));
    assert_eq!(t1.delivered, n);
    assert!(t0.received + t1.received < 20_000, "capture stopped early: {t0:?} {t1:?}");
    for t in [t0, t1] {
        assert!(t.balanced() && t.in_flight == 0 && t.received == t.delivered + t.unread, "{t:?}");
    }
}

#[test]
fn packets_left_when_the_reader_stops_are_counted_unread_not_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pcap");
    write_trace(&path, 20_000);
    let mut r = reader(path.to_str().unwrap(), PoolConfig::new(64, 8).unwrap());
    for _ in 0..100 {
        assert!(matches!(r.next(Duration::from_secs(10)), Read::Packet(_)));
    }
    let rep = r.finish();
    let t = rep.stats.total();
    assert_eq!(t.delivered, 100, "{t:?}");
    assert!(t.unread > 0, "the chunk being read held more: {t:?}");
    assert!(t.balanced() && t.in_flight == 0, "{t:?}");
    // Dropping a reader mid-chunk does the same, without a report.
    let mut r = reader(path.to_str().unwrap(), PoolConfig::new(64, 8).unwrap());
    assert!(matches!(r.next(Duration::from_secs(10)), Read::Packet(_)));
    drop(r);
}

#[test]
fn a_truncated_trace_ends_with_its_error_after_the_whole_packets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pcap");
    write_trace(&path, 300);
    let len = std::fs::metadata(&path).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(len - 30).unwrap();
    let mut r = reader(path.to_str().unwrap(), PoolConfig::default());
    let mut n = 0;
    while let Read::Packet(_) = r.next(Duration::from_secs(10)) {
        n += 1;
    }
    assert_eq!(n, 299, "every whole packet before the damage");
    let e = r.error().expect("the damage is reported").to_string();
    assert!(e.contains("truncated") || e.contains("offset"), "{e}");
}

#[test]
fn records_from_a_pipe_are_delivered_while_its_writer_pauses() {
    // A capture writing to a pipe (`tcpdump -w - | prog -r -`) pauses between
    // packets: those written must come out without waiting for a block's worth.
    let dir = tempfile::tempdir().unwrap();
    let (trace, fifo) = (dir.path().join("t.pcap"), dir.path().join("fifo"));
    write_trace(&trace, 10);
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let bytes = std::fs::read(&trace).unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
            std::io::Write::write_all(&mut w, &bytes).unwrap();
            // Held open, as a writer that has nothing more to say yet.
            let _ = done_rx.recv_timeout(Duration::from_secs(30));
        })
    };
    let mut r = reader(fifo.to_str().unwrap(), PoolConfig::default());
    let until = Instant::now() + Duration::from_secs(10);
    let mut n = 0;
    while n < 10 && Instant::now() < until {
        if let Read::Packet(_) = r.next(Duration::from_millis(100)) {
            n += 1;
        }
    }
    assert_eq!(n, 10, "every record written, while the writer still holds the pipe open");
    done_tx.send(()).unwrap();
    writer.join().unwrap();
    assert!(matches!(r.next(Duration::from_secs(10)), Read::End), "the end once the writer closes");
}

#[test]
fn a_locality_reader_stopped_mid_batch_counts_the_rest_of_the_batch_unread() {
    use weir::locality::{BatchSize, LocalityConfig};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pcap");
    write_trace(&path, 20_000);
    let cfg = LocalityConfig { batch: BatchSize::new(1_000).unwrap(), timeout: Duration::from_secs(30), double_buffer: false };
    let engine = Engine::builder().source(path.to_str().unwrap()).unwrap().pool(PoolConfig::new(64, 40).unwrap()).locality(Some(cfg));
    let mut r = engine.build().unwrap().start_reader().unwrap();
    for _ in 0..1_100 {
        assert!(matches!(r.next(Duration::from_secs(10)), Read::Packet(_)));
    }
    let t = r.finish().stats.total();
    assert_eq!(t.delivered, 1_100, "{t:?}");
    assert!(t.unread > 0, "the second batch was being handed out: {t:?}");
    assert!(t.balanced() && t.in_flight == 0, "{t:?}");
}

/// A caller that judges packets itself tells the reader, which counts them
/// filtered in the queue that captured them, with their bytes, in capture order
/// and in a locality batch, read to the end or stopped midway: one tally, and the
/// identity holds with nothing in flight.
#[test]
fn packets_the_caller_rejects_are_counted_filtered_by_the_engine() {
    use weir::locality::{BatchSize, LocalityConfig};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pcap");
    write_trace(&path, 6_000);
    let batch = LocalityConfig { batch: BatchSize::new(500).unwrap(), timeout: Duration::from_secs(30), double_buffer: false };
    for (locality, stop_after) in [(None, None), (Some(batch), None), (None, Some(2_500)), (Some(batch), Some(2_500))] {
        let source = format!("{}@0-1", path.display());
        let b = Engine::builder().source(&source).unwrap().pool(PoolConfig::new(64, 40).unwrap()).locality(locality);
        let mut r = b.build().unwrap().start_reader().unwrap();
        let (mut kept, mut rejected, mut rejected_bytes) = (0u64, [0u64; 2], 0u64);
        let mut handed = 0;
        while stop_after.is_none_or(|n| handed < n) {
            let (queue, udp, len) = match r.next(Duration::from_secs(10)) {
                Read::Packet(p) => (usize::from(p.queue().0), p.data()[23] == 17, u64::from(p.wire_len())),
                Read::Idle => panic!("a trace never idles for 10 s"),
                Read::End => break,
            };
            handed += 1;
            if udp {
                r.reject_last();
                r.reject_last(); // a second call for the same packet does nothing
                rejected[queue] += 1;
                rejected_bytes += len;
            } else {
                kept += 1;
            }
        }
        let rep = r.finish();
        let what = format!("locality {}, stopped after {stop_after:?}", locality.is_some());
        for q in &rep.stats.queues {
            assert_eq!(q.filtered, rejected[usize::from(q.queue.0)], "{what}: queue {}: {q:?}", q.queue);
        }
        let t = rep.stats.total();
        assert_eq!(t.delivered, kept, "{what}: {t:?}");
        assert!(t.balanced() && t.in_flight == 0, "{what}: {t:?}");
        assert!(t.received_bytes - t.delivered_bytes >= rejected_bytes, "{what}: rejected bytes are not delivered: {t:?}");
        if stop_after.is_none() {
            assert_eq!((t.filtered, t.unread), (2_000, 0), "{what}: every third packet is UDP: {t:?}");
            assert_eq!(t.received_bytes - t.delivered_bytes, rejected_bytes, "{what}: {t:?}");
        }
    }
}

/// Whether `fd` turns readable within `ms` milliseconds (poll(2)).
#[allow(unsafe_code)]
fn readable(fd: RawFd, ms: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: FFI with one live pollfd, as poll(2) asks.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    n == 1 && p.revents & libc::POLLIN != 0
}

/// Read without waiting until nothing is left; how many packets came.
fn drain(r: &mut weir::engine::Reader) -> usize {
    let mut n = 0;
    loop {
        match r.next(Duration::ZERO) {
            Read::Packet(_) => n += 1,
            Read::Idle => return n,
            Read::End => panic!("capture ended while packets were expected"),
        }
    }
}

#[test]
#[ignore = "needs root: live capture on a veth test bed"]
fn a_live_readers_descriptor_is_readable_exactly_when_something_waits() {
    let tb = TestBed::new(2);
    for locality in [None, Some(64)] {
        let live = LiveOptions {
            netns: Some(tb.rx_ns.clone().into()),
            afxdp: AfXdpOptions { take_host_traffic: true, ..AfXdpOptions::default() },
            ..LiveOptions::default()
        };
        let mut b = Engine::builder().source(&format!("afpacket:{}@0-1", tb.rx_if)).unwrap().live(live);
        if let Some(batch) = locality {
            let cfg = weir::locality::LocalityConfig::new(weir::locality::BatchSize::new(batch).unwrap());
            b = b.locality(Some(cfg));
        }
        let mut r = b.build().unwrap().start_reader().unwrap();
        let fd = r.ready_fd().unwrap();
        assert_eq!(r.select_timeout().is_some(), locality.is_some());
        assert!(readable(fd, 0), "readable before the first read: the caller has not looked yet");
        drain(&mut r);
        assert!(!readable(fd, 300), "readable with nothing sent ({locality:?})");

        let ping = tb.in_tx("ping").args(["-q", "-c", "3", "-i", "0.2", &tb.rx_ip]).output().expect("ping (apt-get install iputils-ping)");
        assert!(ping.status.success(), "ping: {}", String::from_utf8_lossy(&ping.stderr));
        let until = Instant::now() + Duration::from_secs(5);
        let mut got = 0;
        // Read on every wake-up until 300 ms pass without one (the ARP exchange
        // may add packets). With locality, a poller wakes at least every
        // select_timeout, so that a batch of a source gone quiet is handed out.
        let wait = r.select_timeout().map_or(300, |t| t.as_millis() as i32);
        let mut quiet_since = Instant::now();
        while Instant::now() < until {
            let woke = readable(fd, wait);
            if woke || locality.is_some() {
                let n = drain(&mut r);
                got += n;
                if n > 0 {
                    quiet_since = Instant::now();
                }
            }
            if got >= 6 && !woke && quiet_since.elapsed() >= Duration::from_millis(300) {
                break;
            }
            assert!(woke || locality.is_some() || got >= 6, "nothing became readable after the ping ({got} read)");
        }
        assert!(got >= 6, "3 echo requests and 3 replies, got {got} ({locality:?})");
        if locality.is_none() {
            assert!(!readable(fd, 300), "readable once everything was read");
        }

        r.stop_handle().stop();
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            assert!(Instant::now() < until, "no end after a stop");
            if let Read::End = r.next(Duration::from_millis(100)) {
                break;
            }
        }
        assert!(readable(fd, 0), "the end leaves the descriptor readable");
        let report = r.finish();
        assert_eq!(report.stats.total().delivered, got as u64, "{:?}", report.stats.total());
    }
}

/// A stop that keeps what was captured makes each live unit take what its
/// kernel ring holds; a reader that neither reads nor closes lets no cell
/// free, so after its patience the unit gives up and counts the rest as
/// delivery drops. Every frame sent is then accounted for: none is left in
/// the kernel uncounted.
#[test]
#[ignore = "needs root: live capture on a veth test bed, with tcpreplay"]
fn what_a_stopped_reader_never_takes_is_counted_as_delivery_drops() {
    let tb = TestBed::new(1);
    testbed::require_tools(&["tcpreplay"]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pcap");
    let sent = 3000;
    write_trace(&path, sent);
    for kind in ["afpacket", "afxdp", "xdp"] {
        let live = LiveOptions {
            netns: Some(tb.rx_ns.clone().into()),
            afxdp: AfXdpOptions { take_host_traffic: true, ..AfXdpOptions::default() },
            ..LiveOptions::default()
        };
        // 512 cells: far fewer than the frames sent, which afpacket's ring and
        // xdp's ring buffer hold; afxdp's UMEM is the pool, so the excess is
        // lost before the stop, as capture drops.
        let engine = Engine::builder().source(&format!("{kind}:{}", tb.rx_if)).unwrap().live(live).pool(PoolConfig::new(64, 8).unwrap());
        let r = engine.build().unwrap().start_reader().unwrap();
        let out = tb.in_tx("tcpreplay").args(["-q", "-i", &tb.tx_if, "--pps", "20000"]).arg(&path).output().expect("tcpreplay runs");
        assert!(out.status.success(), "tcpreplay: {}", String::from_utf8_lossy(&out.stderr));
        std::thread::sleep(Duration::from_millis(300));
        r.stop_handle().stop();
        // Past the units' patience (1 s, plus afpacket's 100 ms block timeout).
        std::thread::sleep(Duration::from_millis(2500));
        let t = r.finish().stats.total();
        assert!(t.balanced(), "{kind}: {t:?}");
        assert_eq!(t.received, u64::from(sent), "{kind}: every frame sent is accounted for: {t:?}");
        assert_eq!(t.delivered, 0, "{kind}: {t:?}");
        if kind == "afxdp" {
            assert!(t.capture_drops > 0, "{kind}: the pool was the UMEM: {t:?}");
        } else {
            assert!(t.delivery_drops > 0 && t.capture_drops == 0, "{kind}: what the ring held beyond the pool: {t:?}");
        }
    }
}

/// IPv4 protocol numbers of the packets read until 300 ms pass without one.
fn protocols_until_quiet(r: &mut weir::engine::Reader) -> Vec<u8> {
    let mut got = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        match r.next(Duration::from_millis(300)) {
            Read::Packet(p) => {
                let d = p.data();
                got.push(if d.len() > 23 && d[12..14] == [8, 0] { d[23] } else { 0 });
            }
            Read::Idle => break,
            Read::End => panic!("capture ended while packets were expected"),
        }
    }
    got
}

#[test]
#[ignore = "needs root: live capture on a veth test bed"]
fn a_replaced_filter_judges_what_is_captured_after_it() {
    let tb = TestBed::new(2);
    const ICMP: u8 = 1;
    const UDP: u8 = 17;
    // Three echo requests, and three UDP datagrams (to a port nobody serves:
    // ICMP errors coming back are not UDP). Under afxdp the kernel never sees
    // what the XDP program redirects, so nothing answers and ping fails.
    let send = || {
        tb.in_tx("ping").args(["-q", "-c", "3", "-i", "0.05", "-W", "0.2", &tb.rx_ip]).output().expect("ping");
        for _ in 0..3 {
            let udp = tb.in_tx("bash").args(["-c", &format!("echo weir > /dev/udp/{}/9", tb.rx_ip)]).status().expect("bash");
            assert!(udp.success());
        }
    };
    // xdp: the filter is replaced in its XDP program too, and the host keeps its traffic.
    for kind in ["afpacket", "afxdp", "xdp"] {
        let live = LiveOptions {
            netns: Some(tb.rx_ns.clone().into()),
            afxdp: AfXdpOptions { take_host_traffic: true, ..AfXdpOptions::default() },
            ..LiveOptions::default()
        };
        let b = Engine::builder().source(&format!("{kind}:{}@0-1", tb.rx_if)).unwrap().live(live).filter("icmp");
        let mut r = b.build().unwrap().start_reader().unwrap();
        protocols_until_quiet(&mut r);
        send();
        let before = protocols_until_quiet(&mut r);
        assert!(before.len() >= 3 && before.iter().all(|&p| p == ICMP), "{kind}: with `icmp`, read {before:?}");

        let udp = weir::filter::Filter::compile("udp", r.info().link_type, r.info().snaplen).unwrap();
        r.replace_filter(Some(udp)).unwrap();
        send();
        let after = protocols_until_quiet(&mut r);
        assert_eq!(after, vec![UDP; 3], "{kind}: after the switch to `udp`, exactly the three datagrams");
        r.stop_handle().stop();
        while !matches!(r.next(Duration::from_millis(100)), Read::End) {}
        let t = r.finish().stats.total();
        assert_eq!(t.delivered, (before.len() + after.len()) as u64, "{kind}: {t:?}");
    }
}

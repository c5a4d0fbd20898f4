//! The pulling reader (`Engine::start_reader`), from traces: capture order on
//! one queue, every packet once over several, packets left unread counted as
//! such when the application stops early, and a damaged trace reported after
//! the packets before the damage.

mod support;

use std::path::Path;
use std::time::Duration;
use support::frames::Frame;
use weir::engine::Read;
use weir::pool::PoolConfig;
use weir::sink::{FileFormat, TraceWriter, TsPrecision};
use weir::{Engine, LinkType};

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

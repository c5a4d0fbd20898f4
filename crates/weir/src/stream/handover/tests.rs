//! Streams under every balance mode, through the engine on a real trace
//! file: the bytes and records of every stream are the same on one queue,
//! on two, and when rebalancing moves buckets between two (with and without
//! locality), and offloading is refused.
//!
//! Rebalancing is made to act every few ticks (a controller that moves the
//! busiest bucket to the other queue whatever the load), while the trace is
//! replayed at a fixed rate and queue 0's handler is slow (it sleeps on each
//! packet), so the old queue has a backlog and the moving bucket's packets
//! are parked; every stream of the trace runs from near its start to near
//! its end, so each moved bucket carries streams in the middle of their data.

use crate::balance::{BalanceMode as Balance, ControllerConfig};
use crate::engine::{Engine, Report};
use crate::locality::{BatchSize, LocalityConfig};
use crate::sink::{FileFormat, TraceWriter, TsPrecision};
use crate::source::Pacing;
use crate::stream::layer::tests::frame;
use crate::stream::{Piece, Stream, StreamConfig, StreamCtl, StreamHandler, StreamStats, Streams};
use crate::{LinkType, Packet, QueueId};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

type Key = (IpAddr, u16, IpAddr, u16);

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const FIN: u8 = 0x01;
const PSH: u8 = 0x08;

/// TCP connections, each with data both ways, interleaved round by round so
/// that every one is open from near the start to near the end of the trace;
/// and UDP flows likewise. 120 TCP connections of 2 × 20 segments and 30 UDP
/// flows of 40 datagrams: about 6,600 packets.
fn write_trace(path: &Path) {
    let (conns, rounds, udp) = (120u16, 20u32, 30u16);
    let client = |i: u16| ((i % 200) as u8 + 1, 20_000 + i * 7);
    let mut frames: Vec<Vec<u8>> = Vec::new();
    for i in 0..conns {
        let (c, port) = client(i);
        frames.push(frame(c, port, false, Some((1000, SYN)), &[]));
        frames.push(frame(c, port, true, Some((5000, SYN | ACK)), &[]));
        frames.push(frame(c, port, false, Some((1001, ACK)), &[]));
    }
    for r in 0..rounds {
        for i in 0..conns {
            let (c, port) = client(i);
            let up: Vec<u8> = (0..100 + (i as usize % 50)).map(|k| (k as u32 * 7 + r + u32::from(i)) as u8).collect();
            let down: Vec<u8> = (0..60 + (i as usize % 30)).map(|k| (k as u32 * 13 + r * 3 + u32::from(i)) as u8).collect();
            let up_seq = 1001 + r * up.len() as u32;
            let down_seq = 5001 + r * down.len() as u32;
            frames.push(frame(c, port, false, Some((up_seq, ACK | PSH)), &up));
            frames.push(frame(c, port, true, Some((down_seq, ACK | PSH)), &down));
        }
        for u in 0..udp {
            let (c, port) = client(conns + u);
            frames.push(frame(c, port, r % 2 == 1, None, &[r as u8, u as u8, 0xaa, 0x55]));
            frames.push(frame(c, port, false, None, &[u as u8; 30]));
        }
    }
    for i in 0..conns {
        let (c, port) = client(i);
        let up_len = 100 + (i as u32 % 50);
        let down_len = 60 + (i as u32 % 30);
        frames.push(frame(c, port, false, Some((1001 + rounds * up_len, FIN | ACK)), &[]));
        frames.push(frame(c, port, true, Some((5001 + rounds * down_len, FIN | ACK)), &[]));
    }
    let file = std::fs::File::create(path).unwrap();
    let mut w = TraceWriter::new(std::io::BufWriter::new(file), FileFormat::Pcap, LinkType::ETHERNET, 65535, TsPrecision::Nano).unwrap();
    for (n, f) in frames.iter().enumerate() {
        w.write_packet(1_700_000_000_000_000_000 + n as u64 * 50_000, f, f.len() as u32).unwrap();
    }
    w.finish().unwrap();
}

/// What one queue saw of one stream: whether it was made here, its pieces
/// (offset, bytes) and gaps, and its record if it was closed here (with the
/// queue left out).
#[derive(Debug, Default, Clone)]
struct Seen {
    created: u32,
    pieces: Vec<(u64, Vec<u8>)>,
    gaps: Vec<(u64, u64)>,
    closed: Option<Stream>,
}

/// A whole stream, merged from every queue that ran part of it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Whole {
    bytes: Vec<u8>,
    gaps: Vec<(u64, u64)>,
    closed: Stream,
}

/// Rebuilds each stream; sleeps on every packet when `slow`.
struct Gather {
    slow: Option<Duration>,
    streams: BTreeMap<Key, Seen>,
}

impl StreamHandler for Gather {
    type State = Key;

    fn created(&mut self, ctl: &mut StreamCtl<'_>) -> Key {
        // Every stream's packets come to `packet`, where a slow queue sleeps.
        ctl.want_packets(true);
        let s = ctl.stream();
        let key = (s.src, s.sport, s.dst, s.dport);
        self.streams.entry(key).or_default().created += 1;
        key
    }

    fn packet(&mut self, _: &mut StreamCtl<'_>, _: &mut Key, _: &Packet<'_>) {
        if let Some(d) = self.slow {
            std::thread::sleep(d);
        }
    }

    // A stream handed over from another queue has no entry here until its
    // first event: its parts are merged over the queues below.
    fn data(&mut self, _: &mut StreamCtl<'_>, key: &mut Key, piece: &Piece<'_>) {
        let new = &piece.data[piece.overlap..];
        self.streams.entry(*key).or_default().pieces.push((piece.offset + piece.overlap as u64, new.to_vec()));
    }

    fn gap(&mut self, _: &mut StreamCtl<'_>, key: &mut Key, offset: u64, len: u64) {
        self.streams.entry(*key).or_default().gaps.push((offset, len));
    }

    fn closed(&mut self, stream: &Stream, key: Key) {
        let seen = self.streams.entry(key).or_default();
        assert!(seen.closed.is_none(), "stream {key:?} closed twice on one queue");
        seen.closed = Some(Stream { queue: QueueId(0), ..*stream });
    }
}

/// Every stream of the run, merged over the queues that ran parts of it.
/// Fails if a stream was made or closed twice, or an offset was delivered
/// twice or not at all: what a stream split between two workers does.
fn merged(report: &Report<Streams<Gather>>) -> (BTreeMap<Key, Whole>, StreamStats) {
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let mut parts: BTreeMap<Key, Seen> = BTreeMap::new();
    let mut total = StreamStats::default();
    for (q, layer) in &report.handlers {
        let s = layer.stats();
        assert!(s.packets_add_up(), "queue {q}: {s:?}");
        total.add(&s);
        for (key, seen) in &layer.handler().streams {
            let into = parts.entry(*key).or_default();
            into.created += seen.created;
            into.pieces.extend(seen.pieces.iter().cloned());
            into.gaps.extend(&seen.gaps);
            if let Some(c) = seen.closed {
                assert!(into.closed.replace(c).is_none(), "stream {key:?} closed on two queues");
            }
        }
    }
    assert_eq!(total.packets, report.stats.total().delivered);
    let whole = parts
        .into_iter()
        .map(|(key, mut seen)| {
            assert_eq!(seen.created, 1, "stream {key:?} made on {} queues", seen.created);
            seen.pieces.sort_by_key(|p| p.0);
            seen.gaps.sort_unstable();
            let mut bytes = Vec::new();
            for (at, piece) in &seen.pieces {
                assert_eq!(*at, bytes.len() as u64, "stream {key:?}: a piece at {at} after {} bytes", bytes.len());
                bytes.extend_from_slice(piece);
            }
            (key, Whole { bytes, gaps: seen.gaps, closed: seen.closed.unwrap_or_else(|| panic!("stream {key:?} never closed")) })
        })
        .collect();
    (whole, total)
}

fn run(source: &str, balance: Balance, locality: bool, slow: Option<Duration>, paced: bool) -> Report<Streams<Gather>> {
    let mut b = Engine::builder().source(source).unwrap().balance(balance);
    if paced {
        b = b.pacing(Pacing::Pps(10_000.0).checked().unwrap());
    }
    if locality {
        b = b.locality(Some(LocalityConfig::new(BatchSize::new(256).unwrap())));
    }
    let cfg = StreamConfig { piece: 64, ..StreamConfig::default() };
    b.build().unwrap().run_streams(&cfg, |q| Gather { slow: slow.filter(|_| q == QueueId(0)), streams: BTreeMap::new() }).unwrap()
}

fn rebalance() -> Balance {
    Balance::Rebalance { controller: ControllerConfig::churning(3), offload: None }
}

#[test]
fn every_stream_is_the_same_whatever_the_queues_balance_and_locality() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("streams.pcap");
    write_trace(&path);
    let one = path.to_str().unwrap().to_string();
    let two = format!("{one}@0-1");

    let (reference, ref_stats) = merged(&run(&one, Balance::Basic, false, None, false));
    assert_eq!(reference.len(), 2 * (120 + 30), "each connection and each UDP flow is two streams");
    assert!(reference.values().filter(|s| s.closed.proto == 6).all(|s| s.bytes.len() > 1000), "the TCP streams carry data");
    let slow = Some(Duration::from_micros(100));
    for (name, balance, locality, slow, paced) in [
        ("basic on two queues", Balance::Basic, false, None, false),
        ("rebalance", rebalance(), false, slow, true),
        ("rebalance with locality", rebalance(), true, slow, true),
    ] {
        let report = run(&two, balance, locality, slow, paced);
        let (streams, stats) = merged(&report);
        assert_eq!(streams.keys().collect::<Vec<_>>(), reference.keys().collect::<Vec<_>>(), "{name}: other streams");
        for (key, seen) in &streams {
            assert_eq!(seen, &reference[key], "{name}: stream {key:?} differs");
        }
        assert_eq!(
            (stats.streams, stats.connections, stats.delivered, stats.bytes),
            (ref_stats.streams, ref_stats.connections, ref_stats.delivered, ref_stats.bytes),
            "{name}"
        );
        if slow.is_some() {
            let moves = report.balance.expect("rebalancing reports its moves");
            eprintln!("{name}: {moves:?}, {} connections handed over", stats.handed_in);
            assert!(moves.buckets_moved >= 5 && moves.parked > 0, "{name}: too little moved to show anything: {moves:?}");
            assert!(stats.handed_in >= 5, "{name}: {moves:?}, but only {} connections with them", stats.handed_in);
        }
    }
}

#[test]
fn offloading_is_refused_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("streams.pcap");
    write_trace(&path);
    let two = format!("{}@0-1", path.display());
    let threshold = crate::pool::OffloadThreshold::new(50).unwrap();
    for balance in [Balance::Advanced(threshold), Balance::Rebalance { controller: ControllerConfig::default(), offload: Some(threshold) }]
    {
        let engine = Engine::builder().source(&two).unwrap().balance(balance).build().unwrap();
        let err = engine.run_streams(&StreamConfig::default(), |_| Gather { slow: None, streams: BTreeMap::new() }).err().expect("refused");
        let msg = err.to_string();
        assert!(msg.contains("offloading") && msg.contains("two workers at once"), "{msg}");
    }
}

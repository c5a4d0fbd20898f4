//! The kernel cutoff's accounting: what the kernel counts, added back into
//! the records, gives the records weir makes without it.
//!
//! The user-space arithmetic is checked on its own; the rest runs weir's
//! real socket filter (`ebpf/weir_cutoff_filter.c`) in the kernel with
//! BPF_PROG_TEST_RUN on the frames of a connection, over its real flow
//! map, and hands the layer only the frames the program let through, late
//! by as many frames as a capture ring may hold them: the records must be
//! those of a layer that saw every frame. Root only, as loading the program
//! needs CAP_BPF.

use super::*;
use crate::source::afpacket::cutoff::CutoffFilter;
use crate::stream::layer::tests::frame;
use crate::stream::{Mode, Stream, StreamConfig, StreamStats, Streams};
use crate::{Handler, LinkType, Packet, QueueId};
use std::net::IpAddr;

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const FIN: u8 = 0x01;
const RST: u8 = 0x04;

/// Every record handed out, in order.
#[derive(Default)]
struct Records(Vec<Stream>);

impl StreamHandler for Records {
    type State = ();
    fn created(&mut self, _: &mut crate::stream::StreamCtl<'_>) {}
    fn data(&mut self, _: &mut crate::stream::StreamCtl<'_>, _: &mut (), _: &crate::stream::Piece<'_>) {}
    fn active(&mut self, s: &Stream, _: &mut ()) {
        self.0.push(*s);
    }
    fn closed(&mut self, s: &Stream, _: ()) {
        self.0.push(*s);
    }
}

/// A direction of 198.18.0.1:1000 to 198.19.0.1:80 that counted these.
fn record(packets: u64, octets: u64, bytes: u64, last_ns: u64) -> Dir<()> {
    let mut rec = Rec::new(1, crate::stream::Direction::Initiator, Mode::TcpFast, 0);
    (rec.packets, rec.octets, rec.bytes, rec.discarded, rec.last_ns, rec.tcp_flags) = (packets, octets, bytes, bytes, last_ns, SYN);
    let mut d = Dir::new(rec, false, None);
    d.set_cutoff(Some(0), &mut Spare::preallocated(0));
    d
}

/// What the application sees of a direction made by [`record`].
fn seen(d: &Dir<()>) -> Stream {
    let ports = Some(crate::wire::L4Ports { src: 1000, dst: 80 });
    d.stream(&FlowTuple::V4 { src: [198, 18, 0, 1], dst: [198, 19, 0, 1], proto: 6, ports }, QueueId(0))
}

#[test]
fn the_kernels_counts_add_to_a_record_as_its_packets_would() {
    let mut d = record(3, 180, 100, 5_000);
    let c = Counters { packets: 4, octets: 4 * 1500, payload: 4 * 1448, last_ns: 9_000, tcp_flags: ACK | 0x08, stopped: true };
    merge(&mut d.rec, &c);
    let r = seen(&d);
    assert_eq!(
        (r.packets, r.octets, r.bytes, r.discarded, r.tcp_flags, r.last_ns),
        (7, 6180, 100 + 5792, 100 + 5792, SYN | ACK | 0x08, 9_000)
    );
    assert_eq!((r.src, r.sport, r.dst, r.dport, r.proto), (IpAddr::from([198, 18, 0, 1]), 1000, IpAddr::from([198, 19, 0, 1]), 80, 6));
    // No packet counted: its time is not one.
    let mut d = record(3, 180, 100, 5_000);
    merge(&mut d.rec, &Counters { last_ns: 0, ..Counters::default() });
    assert_eq!(seen(&d), seen(&record(3, 180, 100, 5_000)));
    // After the end: as a closed stream's packets, refused.
    let mut spare = Spare::preallocated(0);
    let mut d = record(3, 180, 100, 5_000);
    after_close(&mut d, &Counters { packets: 1, octets: 52, payload: 0, last_ns: 9_000, tcp_flags: ACK, stopped: false }, &mut spare);
    let r = seen(&d);
    assert_eq!((r.packets, r.octets, r.bytes, r.refused, r.tcp_flags), (4, 232, 100, 0, SYN));
    assert!(d.delivery.is_none(), "no payload: nothing to count in a delivery");
    after_close(&mut d, &Counters { packets: 2, octets: 1100, payload: 1000, last_ns: 9_500, tcp_flags: ACK, stopped: false }, &mut spare);
    let r = seen(&d);
    assert_eq!((r.packets, r.octets, r.bytes, r.refused, r.discarded), (6, 1332, 1100, 1000, 100));
}

#[test]
fn only_tcp_and_udp_of_one_family_have_a_kernel_key() {
    let (a4, b4) = (IpAddr::from([198, 18, 0, 1]), IpAddr::from([198, 19, 0, 2]));
    let a6: IpAddr = "2001:db8::1".parse().unwrap();
    assert!(FlowKey::new(a4, b4, 1, 2, 6).is_some() && FlowKey::new(a4, b4, 1, 2, 17).is_some());
    assert!(FlowKey::new(a4, b4, 0, 0, 1).is_none(), "ICMP stays in user space");
    assert!(FlowKey::new(a4, a6, 1, 2, 6).is_none());
    assert_ne!(FlowKey::new(a4, b4, 1, 2, 6), FlowKey::new(b4, a4, 2, 1, 6), "one entry per direction");
}

/// A connection: handshake, `n` segments of 1000 bytes each way, then a
/// close by FINs or by a RST; ts 1 ms apart from `t0`.
fn connection(c: u8, n: u32, rst: bool, t0: u64) -> Vec<(u64, Vec<u8>)> {
    let (ci, si) = (1000u32, 5000u32);
    let data = [7u8; 1000];
    let mut v = vec![
        frame(c, 4000, false, Some((ci, SYN)), b""),
        frame(c, 4000, true, Some((si, SYN | ACK)), b""),
        frame(c, 4000, false, Some((ci + 1, ACK)), b""),
    ];
    for i in 0..n {
        v.push(frame(c, 4000, false, Some((ci + 1 + i * 1000, ACK | 0x08)), &data));
        v.push(frame(c, 4000, true, Some((si + 1 + i * 1000, ACK | 0x08)), &data));
    }
    if rst {
        v.push(frame(c, 4000, true, Some((si + 1 + n * 1000, RST | ACK)), b""));
        v.push(frame(c, 4000, false, Some((ci + 1 + n * 1000, ACK)), b""));
    } else {
        v.push(frame(c, 4000, false, Some((ci + 1 + n * 1000, FIN | ACK)), b""));
        v.push(frame(c, 4000, true, Some((si + 1 + n * 1000, ACK)), b""));
        v.push(frame(c, 4000, true, Some((si + 1 + n * 1000, FIN | ACK)), b""));
        v.push(frame(c, 4000, false, Some((ci + 2 + n * 1000, ACK)), b""));
        // A late copy, after the end.
        v.push(frame(c, 4000, true, Some((si + 2 + n * 1000, ACK)), b""));
    }
    v.into_iter().enumerate().map(|(i, f)| (t0 + i as u64 * 1_000_000, f)).collect()
}

fn config(flows: bool, cutoff: u64) -> StreamConfig {
    StreamConfig {
        mode: if flows { Mode::Packets } else { Mode::TcpFast },
        cutoff: Some(cutoff),
        flows,
        idle_timeout_ns: 1_000_000_000,
        memory: 1 << 20,
        // Installed at once, so that short test connections exercise the map.
        kernel_install_after: 1,
        ..StreamConfig::default()
    }
}

/// The records of a layer that saw every frame.
fn reference(cfg: &StreamConfig, frames: &[(u64, Vec<u8>)]) -> Vec<Stream> {
    let mut l = Streams::new(cfg, LinkType::ETHERNET, QueueId(0), 1, Records::default()).unwrap();
    for (ts, f) in frames {
        l.packet(&Packet::new(f, f.len() as u32, *ts, QueueId(0)));
    }
    l.finish();
    l.into_handler().0
}

/// The records of a layer with the kernel cutoff: every frame goes through
/// the kernel program first, and the layer reads those it let through
/// `lag` frames later (a capture ring's delay). Returns the layer's stats too.
fn with_kernel(cfg: &StreamConfig, frames: &[(u64, Vec<u8>)], lag: usize, entries: u32) -> (Vec<Stream>, StreamStats) {
    let filter = CutoffFilter::load(entries, 65_535).expect("loading weir's socket filter (needs root)");
    let mut l = Streams::new(cfg, LinkType::ETHERNET, QueueId(0), 1, Records::default()).unwrap();
    l.set_kernel_cutoff(filter.flows().handle().unwrap());
    let mut ring = std::collections::VecDeque::new();
    for (ts, f) in frames {
        if filter.test_run(f).unwrap() != 0 {
            ring.push_back((*ts, f));
        }
        while ring.len() > lag {
            let (ts, f) = ring.pop_front().unwrap();
            l.packet(&Packet::new(f, f.len() as u32, ts, QueueId(0)));
        }
    }
    for (ts, f) in ring {
        l.packet(&Packet::new(f, f.len() as u32, ts, QueueId(0)));
    }
    l.finish();
    let stats = l.stats();
    (l.into_handler().0, stats)
}

/// Records equal but for their last time, which the kernel's clock gives
/// for packets it counted.
fn same(a: &[Stream], b: &[Stream]) -> bool {
    let strip = |v: &[Stream]| v.iter().map(|s| Stream { last_ns: 0, ..*s }).collect::<Vec<_>>();
    strip(a) == strip(b)
}

#[test]
#[ignore = "needs root: loads weir's kernel cutoff socket filter and runs it with BPF_PROG_TEST_RUN"]
fn records_are_the_same_when_the_kernel_counts_the_packets_past_the_cutoff() {
    testbed::require_root();
    let mut frames = connection(1, 6, false, 1_000_000_000);
    frames.extend(connection(2, 4, true, 2_000_000_000));
    for (flows, cutoff) in [(true, 0), (false, 0), (false, 2500)] {
        let cfg = config(flows, cutoff);
        let want = reference(&cfg, &frames);
        assert_eq!(want.len(), 4);
        for lag in [0, 3, 8, frames.len()] {
            let (got, stats) = with_kernel(&cfg, &frames, lag, 64);
            let k = stats.kernel;
            assert!(same(&got, &want), "flows {flows}, cutoff {cutoff}, lag {lag}:\n{got:#?}\nwant\n{want:#?}");
            assert_eq!((k.taken, k.lost, k.in_map()), (k.installed, 0, 0), "flows {flows}, cutoff {cutoff}, lag {lag}: {k:?}");
            if lag < 8 {
                assert!(k.packets >= 4, "the kernel dropped the packets past the cutoff: {k:?}");
            }
        }
    }
}

#[test]
#[ignore = "needs root: loads weir's kernel cutoff socket filter and runs it with BPF_PROG_TEST_RUN"]
fn only_directions_with_enough_packets_are_installed_and_records_stay_exact() {
    testbed::require_root();
    // A short connection (3 packets a direction before its FIN) and a long
    // one (14 a direction), interleaved.
    let mut frames = connection(1, 0, false, 1_000_000_000);
    frames.extend(connection(2, 12, false, 1_000_500_000));
    frames.sort_by_key(|(ts, _)| *ts);
    for flows in [true, false] {
        let cfg = StreamConfig { kernel_install_after: 4, ..config(flows, 0) };
        let want = reference(&cfg, &frames);
        let (got, stats) = with_kernel(&cfg, &frames, 0, 64);
        let k = stats.kernel;
        assert!(same(&got, &want), "flows {flows}:\n{got:#?}\nwant\n{want:#?}");
        assert_eq!((k.installed, k.taken, k.full, k.in_map()), (2, 2, 0, 0), "flows {flows}: only the long connection: {k:?}");
        // Each of its directions from its fifth packet to its FIN: the 9
        // segments after the first three, less the one that installs it.
        assert!(k.packets >= 16, "flows {flows}: the long connection's later packets stayed in the kernel: {k:?}");
    }
}

#[test]
#[ignore = "needs root: loads weir's kernel cutoff socket filter and runs it with BPF_PROG_TEST_RUN"]
fn a_full_map_makes_room_with_the_connection_seen_least_recently_and_counts_it() {
    testbed::require_root();
    let mut frames = connection(1, 6, false, 1_000_000_000);
    frames.extend(connection(2, 6, false, 1_000_500_000));
    frames.sort_by_key(|(ts, _)| *ts);
    let cfg = config(true, 0);
    let want = reference(&cfg, &frames);
    // Room for three directions: connection 2's second finds the map full,
    // and connection 1, seen least recently, leaves it (both directions);
    // its packets then reach weir, its records exact all the same.
    let (got, stats) = with_kernel(&cfg, &frames, 0, 3);
    let k = stats.kernel;
    assert!(same(&got, &want), "{got:#?}\nwant\n{want:#?}");
    assert_eq!((k.installed, k.full, k.failed, k.displaced, k.taken), (4, 1, 0, 2, 4), "{k:?}");
    assert!(k.packets > 0 && k.in_map() == 0);
}

#[test]
#[ignore = "needs root: loads weir's kernel cutoff socket filter and runs it with BPF_PROG_TEST_RUN"]
fn an_idle_connection_the_kernel_still_sees_is_kept_and_one_it_does_not_is_closed() {
    testbed::require_root();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    let filter = CutoffFilter::load(16, 65_535).unwrap();
    // Idle timeout 1 s, active 3 s.
    let cfg = StreamConfig { active_timeout_ns: Some(3_000_000_000), ..config(true, 0) };
    let mut l = Streams::new(&cfg, LinkType::ETHERNET, QueueId(0), 1, Records::default()).unwrap();
    l.set_kernel_cutoff(filter.flows().handle().unwrap());
    let feed = |l: &mut Streams<Records>, ts: u64, f: &[u8]| l.packet(&Packet::new(f, f.len() as u32, ts, QueueId(0)));
    // Two connections weir saw open 5 s ago: both installed.
    for c in [1, 2] {
        feed(&mut l, now - 5_000_000_000, &frame(c, 4000, false, Some((1000, SYN)), b""));
        feed(&mut l, now - 5_000_000_000, &frame(c, 4000, true, Some((5000, SYN | ACK)), b""));
    }
    assert_eq!(l.stats().kernel.installed, 4);
    // Connection 1 goes on in the kernel only, now.
    assert_eq!(filter.test_run(&frame(1, 4000, false, Some((1001, ACK)), &[1u8; 100])).unwrap(), 0, "dropped");
    // A packet of a third connection moves packet time on: the table finds
    // both idle; the kernel saw 1 within the timeout, not 2.
    feed(&mut l, now, &frame(3, 4000, false, None, b"x"));
    let k = l.stats().kernel;
    assert_eq!(k.refreshed, 1, "{k:?}");
    let one = IpAddr::from([198, 18, 0, 1]);
    let records = &l.handler().0;
    assert_eq!(records.len(), 4, "{records:#?}");
    // Connection 2's streams closed idle; connection 1's, kept, handed out
    // their active-timeout records, the kernel's packet in its own.
    assert!(records.iter().filter(|s| s.src != one && s.dst != one).all(|s| s.closed == Some(CloseReason::Idle)));
    let active: Vec<_> = records.iter().filter(|s| s.src == one || s.dst == one).collect();
    assert_eq!(active.len(), 2);
    assert!(active.iter().all(|s| s.closed.is_none()));
    let up = active.iter().find(|s| s.src == one).unwrap();
    assert_eq!((up.packets, up.bytes, up.tcp_flags), (2, 100, SYN | ACK));
    // Installed again (with connection 3's UDP stream, seven): their next
    // record starts empty.
    l.finish();
    let k = l.stats().kernel;
    assert_eq!((k.installed, k.taken, k.in_map()), (7, 7, 0), "{k:?}");
    let last: Vec<_> = l.handler().0.iter().skip(4).filter(|s| s.proto == 6).collect();
    assert!(last.iter().all(|s| s.packets == 0 && s.closed == Some(CloseReason::EndOfInput)), "{last:#?}");
}

/// An Ethernet/IPv6/TCP frame from 2001:db8::1 port 4000 to 2001:db8::2
/// port 443 (or back, with `back`).
fn frame6(back: bool, seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let (mut src, mut dst) =
        ([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1u8], [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2u8]);
    let (mut sp, mut dp) = (4000u16, 443u16);
    if back {
        std::mem::swap(&mut src, &mut dst);
        std::mem::swap(&mut sp, &mut dp);
    }
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
    f.extend_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[6, 64]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&sp.to_be_bytes());
    f.extend_from_slice(&dp.to_be_bytes());
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    f.extend_from_slice(payload);
    f
}

#[test]
#[ignore = "needs root: loads weir's kernel cutoff socket filter and runs it with BPF_PROG_TEST_RUN"]
fn an_ipv6_stream_is_keyed_and_counted_by_the_kernel_as_weir_counts_it() {
    testbed::require_root();
    let frames: Vec<(u64, Vec<u8>)> = [
        frame6(false, 1000, SYN, b""),
        frame6(true, 5000, SYN | ACK, b""),
        frame6(false, 1001, ACK, &[1; 700]),
        frame6(true, 5001, ACK, &[2; 1200]),
        frame6(false, 1701, ACK, &[3; 300]),
        frame6(false, 2001, FIN | ACK, b""),
        frame6(true, 6201, FIN | ACK, b""),
        frame6(false, 2002, ACK, b""),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, f)| (1_000_000_000 + i as u64 * 1_000_000, f))
    .collect();
    let cfg = config(true, 0);
    let want = reference(&cfg, &frames);
    let (got, stats) = with_kernel(&cfg, &frames, 0, 16);
    assert!(same(&got, &want), "{got:#?}\nwant\n{want:#?}");
    // The three data segments: IP bytes are the IPv6 payload length (TCP
    // header and data) plus the 40-byte header.
    assert_eq!((stats.kernel.installed, stats.kernel.packets, stats.kernel.octets), (2, 3, 760 + 1260 + 360), "{:?}", stats.kernel);
}

//! The stream layer driven with real frames: events, cutoffs, classes,
//! eviction, memory pressure and the accounting identities, each against
//! what the frames sent.

use crate::stream::*;
use crate::{Handler, LinkType, Packet, QueueId};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::net::IpAddr;

type Key = (IpAddr, u16, IpAddr, u16);

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const FIN: u8 = 0x01;
const RST: u8 = 0x04;
const PSH: u8 = 0x08;

/// An Ethernet/IPv4 frame from 198.18.0.`c`:`cport` to 198.19.0.1:80 (or
/// back, with `back`), carrying TCP or UDP.
pub(in crate::stream) fn frame(c: u8, cport: u16, back: bool, tcp: Option<(u32, u8)>, payload: &[u8]) -> Vec<u8> {
    let (mut src, mut dst) = ([198, 18, 0, c], [198, 19, 0, 1]);
    let (mut sp, mut dp) = (cport, 80u16);
    if back {
        std::mem::swap(&mut src, &mut dst);
        std::mem::swap(&mut sp, &mut dp);
    }
    let l4 = if tcp.is_some() { 20 } else { 8 };
    let total = 20 + l4 + payload.len();
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&[0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0x40, 0, 64, if tcp.is_some() { 6 } else { 17 }, 0, 0]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&sp.to_be_bytes());
    f.extend_from_slice(&dp.to_be_bytes());
    match tcp {
        Some((seq, flags)) => {
            f.extend_from_slice(&seq.to_be_bytes());
            f.extend_from_slice(&[0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        }
        None => f.extend_from_slice(&[((8 + payload.len()) >> 8) as u8, (8 + payload.len()) as u8, 0, 0]),
    }
    f.extend_from_slice(payload);
    // Link padding up to Ethernet's minimum: never payload.
    f.resize(f.len().max(60), 0);
    f
}

/// What a test handler saw of one stream.
#[derive(Debug, Default, Clone)]
struct Seen {
    bytes: Vec<u8>,
    gaps: Vec<(u64, u64)>,
    pieces: usize,
    closed: Option<Stream>,
}

/// Rebuilds each stream from its pieces and gaps, checking that they come
/// in order; optionally steers streams from callbacks.
#[derive(Default)]
struct Collect {
    streams: BTreeMap<Key, Seen>,
    order: Vec<Key>,
    /// Streams whose key a later connection took.
    earlier: Vec<Seen>,
    /// Discard the rest of a stream after this many delivered bytes.
    discard_after: Option<u64>,
    /// Priority for streams whose client port is odd.
    odd_priority: Option<u8>,
    /// Records handed out by the active timeout, in order.
    actives: Vec<Stream>,
}

impl StreamHandler for Collect {
    type State = Key;

    fn created(&mut self, ctl: &mut StreamCtl<'_>) -> Key {
        let s = ctl.stream();
        let key = (s.src, s.sport, s.dst, s.dport);
        if let Some(p) = self.odd_priority {
            if (s.sport.min(s.dport)) % 2 == 1 {
                ctl.set_priority(p);
            }
        }
        // A key comes back only as a new connection, after the old one closed.
        if let Some(old) = self.streams.insert(key, Seen::default()) {
            assert!(old.closed.is_some(), "created twice while open: {key:?}");
            self.earlier.push(old);
        }
        self.order.push(key);
        key
    }

    fn data(&mut self, ctl: &mut StreamCtl<'_>, key: &mut Key, piece: &Piece<'_>) {
        let seen = self.streams.get_mut(key).expect("created");
        let fresh = &piece.data[piece.overlap..];
        let at = piece.offset as usize + piece.overlap;
        assert_eq!(at, seen.bytes.len(), "pieces out of order");
        assert!(
            piece.overlap == 0 || seen.bytes[at - piece.overlap..] == piece.data[..piece.overlap],
            "the overlap is not the end of the previous piece"
        );
        seen.bytes.extend_from_slice(fresh);
        seen.pieces += 1;
        if self.discard_after.is_some_and(|n| seen.bytes.len() as u64 >= n) {
            ctl.discard();
        }
    }

    fn gap(&mut self, _: &mut StreamCtl<'_>, key: &mut Key, offset: u64, len: u64) {
        let seen = self.streams.get_mut(key).expect("created");
        assert_eq!(offset, seen.bytes.len() as u64, "a gap out of order");
        seen.gaps.push((offset, len));
        seen.bytes.resize(seen.bytes.len() + len as usize, 0);
    }

    fn active(&mut self, stream: &Stream, _: &mut Key) {
        self.actives.push(*stream);
    }

    fn closed(&mut self, stream: &Stream, key: Key) {
        let seen = self.streams.get_mut(&key).expect("created");
        assert!(seen.closed.is_none(), "closed twice");
        seen.closed = Some(*stream);
    }
}

fn layer(cfg: &StreamConfig, h: Collect) -> Streams<Collect> {
    Streams::new(cfg, LinkType::ETHERNET, QueueId(0), 1, h).expect("valid config")
}

fn feed(l: &mut Streams<Collect>, frames: &[(u64, Vec<u8>)]) {
    for (ts, f) in frames {
        l.packet(&Packet::new(f, f.len() as u32, *ts, QueueId(0)));
    }
    l.finish();
}

fn client(c: u8, port: u16) -> Key {
    (IpAddr::from([198, 18, 0, c]), port, IpAddr::from([198, 19, 0, 1]), 80)
}

fn server(c: u8, port: u16) -> Key {
    (IpAddr::from([198, 19, 0, 1]), 80, IpAddr::from([198, 18, 0, c]), port)
}

/// A whole connection: handshake, `up` from the client in segments of
/// `mss`, `down` back, FINs; ts from `t0`, 1 µs apart.
fn connection(c: u8, port: u16, up: &[u8], down: &[u8], mss: usize, t0: u64) -> Vec<(u64, Vec<u8>)> {
    let (ci, si) = (1000u32, 5000u32);
    let mut v = vec![
        frame(c, port, false, Some((ci, SYN)), b""),
        frame(c, port, true, Some((si, SYN | ACK)), b""),
        frame(c, port, false, Some((ci + 1, ACK)), b""),
    ];
    for (i, seg) in up.chunks(mss).enumerate() {
        v.push(frame(c, port, false, Some((ci + 1 + (i * mss) as u32, ACK | PSH)), seg));
    }
    for (i, seg) in down.chunks(mss).enumerate() {
        v.push(frame(c, port, true, Some((si + 1 + (i * mss) as u32, ACK | PSH)), seg));
    }
    v.push(frame(c, port, false, Some((ci + 1 + up.len() as u32, FIN | ACK)), b""));
    v.push(frame(c, port, true, Some((si + 1 + down.len() as u32, FIN | ACK)), b""));
    v.push(frame(c, port, false, Some((ci + 2 + up.len() as u32, ACK)), b""));
    v.into_iter().enumerate().map(|(i, f)| (t0 + i as u64 * 1000, f)).collect()
}

fn text(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn a_connection_is_two_streams_delivered_in_pieces_and_closed_by_fin() {
    // (A retransmitted FIN with data after the close is refused, not a new
    // connection: see `a_late_fin_with_data_is_not_a_new_connection`.)
    let (up, down) = (text(5000, 1), text(40_000, 2));
    let cfg = StreamConfig { piece: 4096, ..StreamConfig::default() };
    let mut l = layer(&cfg, Collect::default());
    feed(&mut l, &connection(1, 40000, &up, &down, 1460, 0));
    let h = l.handler();
    assert_eq!(h.streams[&client(1, 40000)].bytes, up);
    assert_eq!(h.streams[&server(1, 40000)].bytes, down);
    assert_eq!(h.streams[&server(1, 40000)].pieces, 40_000usize.div_ceil(4096));
    assert_eq!(h.order, vec![client(1, 40000), server(1, 40000)], "the SYN's sender first");
    for s in h.streams.values() {
        let rec = s.closed.expect("closed");
        assert_eq!(rec.closed, Some(CloseReason::Fin));
        assert_eq!(rec.delivered, rec.bytes);
    }
    assert_eq!(h.streams[&client(1, 40000)].closed.unwrap().direction, Direction::Initiator);
    let st = l.stats();
    assert!(st.packets_add_up(), "{st:?}");
    assert_eq!((st.streams, st.connections, st.closed_fin, st.bytes, st.delivered), (2, 1, 2, 45_000, 45_000));
    // The last ACK after both FINs still finds the closed connection.
    assert_eq!(st.untracked, 0);
}

#[test]
fn flows_mode_keeps_a_record_open_past_its_fin_with_ip_octets_and_or_ed_flags() {
    let up = text(3000, 5);
    let frames = connection(1, 40000, &up, b"ok", 1460, 0);
    let cfg = StreamConfig { cutoff: Some(0), flows: true, ..StreamConfig::default() };
    let mut l = layer(&cfg, Collect::default());
    feed(&mut l, &frames);
    let h = l.handler();
    let c = h.streams[&client(1, 40000)].closed.expect("closed");
    let s = h.streams[&server(1, 40000)].closed.expect("closed");
    // Client: SYN, ACK, 3 data segments, FIN, and the last ACK after both
    // FINs, which a stream closed at its FIN would not count.
    assert_eq!((c.packets, c.bytes, c.closed), (7, 3000, Some(CloseReason::Fin)));
    assert_eq!(c.octets, 7 * 40 + 3000, "IP bytes: 40 bytes of headers a packet, and the payload");
    assert_eq!(c.tcp_flags, SYN | ACK | PSH | FIN);
    assert_eq!((c.first_ns, c.last_ns), (0, frames.last().unwrap().0));
    assert_eq!((s.packets, s.octets, s.tcp_flags), (3, 3 * 40 + 2, SYN | ACK | PSH | FIN));
    let st = l.stats();
    assert!(st.packets_add_up(), "{st:?}");
    assert_eq!((st.closed_fin, st.untracked, st.active_records), (2, 0, 0));
    // Without flows mode the last ACK is not in the record.
    let mut l = layer(&StreamConfig { cutoff: Some(0), ..StreamConfig::default() }, Collect::default());
    feed(&mut l, &frames);
    assert_eq!(l.handler().streams[&client(1, 40000)].closed.unwrap().packets, 6);
}

#[test]
fn flows_mode_tracks_a_connection_seen_midway_and_a_rst_marks_both_records() {
    let frames = [
        (0, frame(2, 41000, false, Some((100, ACK)), b"")),
        (10, frame(2, 41000, true, Some((900, ACK | RST)), b"")),
        (20, frame(2, 41000, false, Some((100, ACK)), b"")),
    ];
    let cfg = StreamConfig { cutoff: Some(0), flows: true, ..StreamConfig::default() };
    let mut l = layer(&cfg, Collect::default());
    feed(&mut l, &frames);
    let h = l.handler();
    let c = h.streams[&client(2, 41000)].closed.expect("closed");
    let s = h.streams[&server(2, 41000)].closed.expect("closed");
    assert_eq!((c.packets, c.closed, c.direction), (2, Some(CloseReason::Rst), Direction::Initiator));
    assert_eq!((s.packets, s.closed, s.tcp_flags), (1, Some(CloseReason::Rst), ACK | RST));
    assert_eq!(l.stats().untracked, 0);
}

/// The IPv4 packet of an Ethernet `frame` in two fragments, the first
/// carrying `cut` bytes of its payload (a multiple of 8).
fn two_fragments(frame: &[u8], cut: usize) -> [Vec<u8>; 2] {
    let total = usize::from(u16::from_be_bytes([frame[16], frame[17]]));
    let (link, ip) = frame.split_at(14);
    let (header, data) = ip[..total].split_at(20);
    let piece = |lo: usize, hi: usize, more: bool| {
        let mut f = link.to_vec();
        f.extend_from_slice(header);
        f[16..18].copy_from_slice(&(20 + hi - lo).to_be_bytes()[6..]);
        f[20..22].copy_from_slice(&((lo / 8) as u16 | if more { 0x2000 } else { 0 }).to_be_bytes());
        f.extend_from_slice(&data[lo..hi]);
        f
    };
    [piece(0, cut, true), piece(cut, data.len(), false)]
}

#[test]
fn flows_mode_counts_each_fragment_of_a_rebuilt_datagram_as_sent() {
    let whole = frame(4, 43000, false, None, &text(100, 7));
    let [a, b] = two_fragments(&whole, 56);
    let frames = [(10, a), (20, b), (30, whole)];
    let run = |flows: bool| {
        let cfg = StreamConfig { cutoff: Some(0), flows, ..StreamConfig::default() };
        let mut l = layer(&cfg, Collect::default());
        feed(&mut l, &frames);
        let rec = l.handler().streams[&client(4, 43000)].closed.expect("closed");
        (rec.packets, rec.octets, rec.first_ns, rec.last_ns)
    };
    // Fragments of 20 + 56 and 20 + 52 bytes, then the datagram whole (20 + 8 + 100).
    assert_eq!(run(true), (3, 76 + 72 + 128, 10, 30));
    assert_eq!(run(false), (2, 2 * 128, 20, 30), "a stream counts the rebuilt datagram once");
}

#[test]
fn the_active_timeout_hands_out_a_record_and_starts_it_again() {
    // UDP from the client every 40 s for 200 s; active timeout 60 s.
    let frames: Vec<_> = (0..6u64).map(|i| (i * 40_000_000_000, frame(3, 42000, false, None, b"abcd"))).collect();
    let cfg = StreamConfig { cutoff: Some(0), flows: true, active_timeout_ns: Some(60_000_000_000), ..StreamConfig::default() };
    let mut l = layer(&cfg, Collect::default());
    feed(&mut l, &frames);
    let h = l.handler();
    let spans: Vec<_> = h.actives.iter().map(|r| (r.first_ns / 1_000_000_000, r.last_ns / 1_000_000_000, r.packets, r.octets)).collect();
    // At 80 s the record of 0 and 40 s is 80 s old: handed out; at 160 s, that of 80 and 120 s.
    assert_eq!(spans, [(0, 40, 2, 2 * 32), (80, 120, 2, 2 * 32)]);
    let last = h.streams[&client(3, 42000)].closed.expect("closed");
    assert_eq!((last.first_ns / 1_000_000_000, last.packets, last.closed), (160, 2, Some(CloseReason::EndOfInput)));
    let st = l.stats();
    assert_eq!((st.active_records, st.bytes, st.discarded), (2, 24, 24), "every part's bytes counted once");
}

#[test]
fn the_cutoff_discards_exactly_the_bytes_past_it_and_counts_them() {
    let up = text(10_000, 3);
    for cutoff in [0u64, 1, 1459, 1460, 4000, 9999, 10_000, 20_000] {
        let cfg = StreamConfig { cutoff: Some(cutoff), piece: 1000, ..StreamConfig::default() };
        let mut l = layer(&cfg, Collect::default());
        feed(&mut l, &connection(1, 40000, &up, b"", 1460, 0));
        let kept = cutoff.min(10_000) as usize;
        let seen = &l.handler().streams[&client(1, 40000)];
        assert_eq!(seen.bytes, up[..kept], "cutoff {cutoff}");
        let rec = seen.closed.unwrap();
        assert_eq!((rec.delivered, rec.discarded), (kept as u64, 10_000 - kept as u64), "cutoff {cutoff}");
        let st = l.stats();
        assert_eq!(st.discarded, 10_000 - kept as u64);
        assert!(st.packets_add_up());
        // Segments wholly past the cutoff are discarded packets.
        let whole_past = (0..10_000usize.div_ceil(1460)).filter(|i| (i * 1460) as u64 >= cutoff).count() as u64;
        assert_eq!(st.discarded_packets, whole_past, "cutoff {cutoff}");
    }
}

#[test]
fn a_class_cutoff_applies_to_its_streams_only() {
    let up = text(3000, 4);
    let mut frames = connection(1, 40001, &up, b"", 1000, 0);
    frames.extend(connection(2, 40002, &up, b"", 1000, 1_000_000));
    let cfg = StreamConfig {
        classes: vec![Class::parse_cutoff("src host 198.18.0.2 or dst host 198.18.0.2=100").unwrap()],
        ..StreamConfig::default()
    };
    let mut l = layer(&cfg, Collect::default());
    feed(&mut l, &frames);
    let h = l.handler();
    assert_eq!(h.streams[&client(1, 40001)].bytes, up);
    assert_eq!(h.streams[&client(2, 40002)].bytes, up[..100]);
    assert_eq!(h.streams[&client(2, 40002)].closed.unwrap().cutoff, Some(100));
    assert!(Streams::new(
        &StreamConfig { classes: vec![Class::new("not a filter (")], ..StreamConfig::default() },
        LinkType::ETHERNET,
        QueueId(0),
        1,
        Collect::default()
    )
    .is_err());
}

#[test]
fn a_class_in_packets_mode_tracks_its_streams_without_their_bytes() {
    let up = text(3000, 4);
    let mut frames = connection(1, 40001, &up, &up, 1000, 0);
    frames.extend(connection(2, 40002, &up, &up, 1000, 1_000_000));
    let cfg = StreamConfig { classes: vec![Class::parse("host 198.18.0.2;mode=packets,priority=2").unwrap()], ..StreamConfig::default() };
    let mut l = layer(&cfg, Collect::default());
    feed(&mut l, &frames);
    let h = l.handler();
    for key in [client(1, 40001), server(1, 40001)] {
        assert_eq!(h.streams[&key].bytes, up, "{key:?}");
        assert_eq!(h.streams[&key].closed.unwrap().mode, Mode::TcpFast);
    }
    for key in [client(2, 40002), server(2, 40002)] {
        let seen = &h.streams[&key];
        let rec = seen.closed.unwrap();
        assert_eq!((seen.pieces, rec.delivered, rec.bytes, rec.discarded), (0, 0, 3000, 3000), "{key:?}");
        assert_eq!((rec.mode, rec.priority, rec.closed), (Mode::Packets, 2, Some(CloseReason::Fin)), "{key:?}");
    }
    let st = l.stats();
    assert_eq!((st.streams, st.delivered, st.discarded), (4, 6000, 6000));
}

#[test]
fn a_callback_discards_the_rest_of_its_stream() {
    let up = text(20_000, 5);
    let cfg = StreamConfig { piece: 1000, ..StreamConfig::default() };
    let mut l = layer(&cfg, Collect { discard_after: Some(3000), ..Collect::default() });
    feed(&mut l, &connection(1, 40000, &up, b"", 1460, 0));
    let seen = &l.handler().streams[&client(1, 40000)];
    // The discard takes effect after the packet whose piece asked for it.
    let rec = seen.closed.unwrap();
    assert_eq!(seen.bytes, up[..rec.delivered as usize]);
    assert!(rec.delivered >= 3000 && rec.delivered < 3000 + 1460 + 1000, "{rec:?}");
    assert_eq!(rec.delivered + rec.discarded, 20_000);
}

#[test]
fn out_of_order_segments_are_reordered_and_a_lost_one_is_a_gap() {
    let up = text(6000, 6);
    let mut frames = connection(1, 40000, &up, b"", 1000, 0);
    // Segments are frames 3..9: send 5 before 4, lose 7.
    frames.swap(4, 5);
    frames.remove(7);
    let mut l = layer(&StreamConfig::default(), Collect::default());
    feed(&mut l, &frames);
    let seen = &l.handler().streams[&client(1, 40000)];
    assert_eq!(seen.gaps, vec![(4000, 1000)]);
    let mut want = up.clone();
    want[4000..5000].fill(0);
    assert_eq!(seen.bytes, want);
    let rec = seen.closed.unwrap();
    // The FIN cannot be reached across the hole: the stream ends with the input.
    assert_eq!((rec.delivered, rec.gap, rec.closed), (5000, 1000, Some(CloseReason::EndOfInput)));
}

#[test]
fn a_rst_closes_both_directions_and_later_data_is_not_taken() {
    let mut frames = connection(1, 40000, b"hello", b"world", 1000, 0);
    frames.truncate(5);
    frames.push((9000, frame(1, 40000, true, Some((5006, RST | ACK)), b"")));
    frames.push((9001, frame(1, 40000, false, Some((1006, ACK)), b"late")));
    let mut l = layer(&StreamConfig::default(), Collect::default());
    feed(&mut l, &frames);
    let h = l.handler();
    assert_eq!(h.streams[&server(1, 40000)].closed.unwrap().closed, Some(CloseReason::Rst));
    let c = &h.streams[&client(1, 40000)];
    assert_eq!(c.closed.unwrap().closed, Some(CloseReason::Rst));
    assert_eq!(c.bytes, b"hello");
    // "late" came after the RST: refused, counted, no new connection.
    assert_eq!(l.stats().refused, 4);
    assert!(h.earlier.is_empty());
    assert_eq!(l.stats().connections, 1);
}

#[test]
fn a_late_fin_with_data_is_not_a_new_connection_but_a_new_syn_is() {
    let mut frames = connection(1, 40000, b"hello", b"", 1000, 0);
    // The client's FIN again, with its last bytes, after the close.
    frames.push((50_000, frame(1, 40000, false, Some((1003, FIN | ACK | PSH)), b"llo")));
    frames.extend(connection(1, 40000, b"again", b"", 1000, 100_000));
    let mut l = layer(&StreamConfig::default(), Collect::default());
    feed(&mut l, &frames);
    let h = l.handler();
    let st = l.stats();
    // Both streams of the first connection made way for the second's.
    assert_eq!(h.earlier.len(), 2, "{st:?}");
    assert!(h.earlier.iter().any(|s| s.bytes == b"hello"));
    assert_eq!(st.refused, 3);
    assert_eq!(h.streams[&client(1, 40000)].bytes, b"again");
    assert_eq!((st.connections, st.closed_reused), (2, 0));
    assert!(st.packets_add_up());
}

#[test]
fn a_closed_connection_keeps_its_slot_but_lets_go_of_its_streams() {
    let frames = connection(1, 40000, b"hello", b"world", 1000, 0);
    let mut l = layer(&StreamConfig::default(), Collect::default());
    let push = |l: &mut Streams<Collect>, frames: &[(u64, Vec<u8>)]| {
        for (ts, f) in frames {
            l.packet(&Packet::new(f, f.len() as u32, *ts, QueueId(0)));
        }
    };
    push(&mut l, &frames[..5]);
    assert_eq!(l.held(), (1, 2), "open: both streams held");
    push(&mut l, &frames[5..]);
    assert_eq!(l.held(), (1, 0), "closed both ways: the slot stays, the streams go");
    let st = l.stats();
    assert_eq!((st.delivered, st.closed_fin), (10, 2), "{st:?}");
    // A late copy of the client's last segment is still not a connection.
    push(&mut l, &[(50_000, frame(1, 40000, false, Some((1001, ACK | PSH)), b"hello"))]);
    l.finish();
    let st = l.stats();
    assert_eq!((st.connections, st.refused, st.closed_fin), (1, 5, 2), "{st:?}");
    assert!(st.packets_add_up());
}

/// A TCP frame as [`frame`] makes it, with its acknowledgment number and
/// window set, and on a SYN a window scale option of `shift` if given.
fn windowed(back: bool, seq: u32, flags: u8, ack: u32, window: u16, shift: Option<u8>, payload: &[u8]) -> Vec<u8> {
    let options: &[u8] = match shift {
        Some(s) => &[1, 3, 3, s],
        None => &[],
    };
    let mut f = frame(1, 40000, back, Some((seq, flags)), &[options, payload].concat());
    let tcp = 14 + 20;
    f[tcp + 8..tcp + 12].copy_from_slice(&ack.to_be_bytes());
    f[tcp + 12] = (((20 + options.len()) / 4) << 4) as u8;
    f[tcp + 14..tcp + 16].copy_from_slice(&window.to_be_bytes());
    f
}

#[test]
fn tcp_strict_refuses_what_lies_past_the_receivers_scaled_window() {
    let (ci, si) = (1000u32, 5000u32);
    let up = b"0123456789abcdefWXYZ";
    let frames: Vec<(u64, Vec<u8>)> = [
        // The client scales by 3, the server by 1; the SYN-ACK's window of 10
        // is not scaled (RFC 7323): the client may send 10 bytes.
        windowed(false, ci, SYN, 0, 100, Some(3), b""),
        windowed(true, si, SYN | ACK, ci + 1, 10, Some(1), b""),
        windowed(false, ci + 1, ACK | PSH, si + 1, 100, None, &up[..16]),
        // 3 << 1 = 6 more bytes: up to offset 16.
        windowed(true, si + 1, ACK, ci + 11, 3, None, b""),
        windowed(false, ci + 11, ACK | PSH, si + 1, 100, None, &up[10..16]),
        windowed(false, ci + 17, ACK | PSH, si + 1, 100, None, &up[16..]),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, f)| (i as u64 * 1000, f))
    .collect();
    // Checked: the 6 bytes past the first window and the 4 past the second
    // are refused, and the 6 sent again in the second window are delivered.
    // Not checked: all 20 are delivered, and the 6 sent again are duplicates.
    for (mode, receive_window, kept, refused, duplicate) in
        [(Mode::TcpStrict, true, 16, 10, 0), (Mode::TcpStrict, false, 20, 0, 6), (Mode::TcpFast, true, 20, 0, 6)]
    {
        let cfg = StreamConfig { mode, receive_window, ..StreamConfig::default() };
        let mut l = layer(&cfg, Collect::default());
        feed(&mut l, &frames);
        let seen = &l.handler().streams[&client(1, 40000)];
        let rec = seen.closed.expect("closed at the end");
        assert_eq!(seen.bytes, &up[..kept], "{mode:?} {receive_window}");
        assert_eq!((rec.delivered, rec.refused, rec.duplicate), (kept as u64, refused, duplicate), "{mode:?} {receive_window}");
        assert!(l.stats().packets_add_up());
    }
}

#[test]
fn without_the_handshake_the_largest_window_scale_is_assumed() {
    // Picked up midstream: the scale is unknown, so a window of 1 lets
    // 1 << 14 bytes through and only what lies past them is refused.
    let (ci, si) = (1000u32, 5000u32);
    let frames: Vec<(u64, Vec<u8>)> = [
        windowed(false, ci, ACK | PSH, si, 1, None, b"abcd"),
        windowed(true, si, ACK, ci + 4, 1, None, b""),
        windowed(false, ci + 4 + (1 << 14) - 1, ACK | PSH, si, 1, None, b"yz"),
        windowed(false, ci + 4, ACK | PSH, si, 1, None, b"ef"),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, f)| (i as u64 * 1000, f))
    .collect();
    let cfg = StreamConfig { mode: Mode::TcpStrict, midstream: true, ..StreamConfig::default() };
    let mut l = layer(&cfg, Collect::default());
    feed(&mut l, &frames);
    let seen = &l.handler().streams[&client(1, 40000)];
    let rec = seen.closed.expect("closed at the end");
    assert_eq!(&seen.bytes[..6], b"abcdef");
    assert_eq!(seen.bytes[seen.bytes.len() - 1], b'y');
    assert_eq!(seen.bytes.len(), 4 + (1 << 14));
    assert_eq!((rec.delivered, rec.refused), (7, 1));
}

#[test]
fn a_full_table_evicts_the_least_recently_seen_and_counts_it() {
    let mut frames = Vec::new();
    for c in 0..10u8 {
        frames.push((u64::from(c), frame(c, 40000, false, Some((1, ACK)), b"data")));
    }
    let cfg = StreamConfig { max_connections: 4, ..StreamConfig::default() };
    let mut l = layer(&cfg, Collect::default());
    feed(&mut l, &frames);
    let st = l.stats();
    assert_eq!((st.connections, st.evicted, st.closed_end), (10, 6, 4));
    let h = l.handler();
    for c in 0..6u8 {
        assert_eq!(h.streams[&client(c, 40000)].closed.unwrap().closed, Some(CloseReason::Evicted));
    }
    assert_eq!(h.streams[&client(9, 40000)].closed.unwrap().closed, Some(CloseReason::EndOfInput));
}

#[test]
fn an_idle_stream_is_closed_in_packet_time() {
    let frames = vec![(0, frame(1, 40000, false, Some((1, ACK)), b"a")), (10_000_000_000, frame(2, 40000, false, Some((1, ACK)), b"b"))];
    let cfg = StreamConfig { idle_timeout_ns: 5_000_000_000, ..StreamConfig::default() };
    let mut l = layer(&cfg, Collect::default());
    feed(&mut l, &frames);
    assert_eq!(l.handler().streams[&client(1, 40000)].closed.unwrap().closed, Some(CloseReason::Idle));
    assert_eq!(l.stats().closed_idle, 1);
}

#[test]
fn a_waiting_piece_is_flushed_by_a_later_packet_of_another_stream_or_an_idle_worker() {
    let ms = 1_000_000u64;
    let cfg = StreamConfig { flush_timeout_ns: Some(50 * ms), idle_timeout_ns: 2000 * ms, ..StreamConfig::default() };
    let at = |t: u64, f: &[u8], l: &mut Streams<Collect>| l.packet(&Packet::new(f, f.len() as u32, t, QueueId(0)));
    let hello = |c: u8| frame(c, 40000, false, Some((1, ACK | PSH)), b"hello");
    let bytes = |l: &Streams<Collect>, c: u8| l.handler().streams[&client(c, 40000)].bytes.clone();

    // Another stream's packet past the timeout delivers the piece.
    let mut l = layer(&cfg, Collect::default());
    at(1000 * ms, &hello(1), &mut l);
    at(1049 * ms, &hello(2), &mut l);
    assert_eq!(bytes(&l, 1), b"");
    at(1050 * ms, &hello(2), &mut l);
    assert_eq!((bytes(&l, 1), bytes(&l, 2)), (b"hello".to_vec(), b"".to_vec()));
    assert_eq!(l.flush_queue_len(), 1, "only stream 2's piece waits");

    // A quiet queue: the worker's idle calls move packet time on by the
    // wall clock from the first of them.
    let mut l = layer(&cfg, Collect::default());
    l.idle();
    at(1000 * ms, &hello(1), &mut l);
    l.idle();
    assert_eq!(bytes(&l, 1), b"", "the clock starts at the first idle call");
    std::thread::sleep(std::time::Duration::from_millis(60));
    l.idle();
    let seen = &l.handler().streams[&client(1, 40000)];
    assert_eq!((seen.bytes.as_slice(), seen.pieces, seen.closed.is_none()), (&b"hello"[..], 1, true));
    assert_eq!(l.flush_queue_len(), 0);
    // More data, a new piece, a new wait.
    at(1001 * ms, &frame(1, 40000, false, Some((6, ACK | PSH)), b" world"), &mut l);
    l.idle();
    assert_eq!(bytes(&l, 1), b"hello");
    std::thread::sleep(std::time::Duration::from_millis(60));
    l.idle();
    assert_eq!(bytes(&l, 1), b"hello world");
    assert_eq!(l.stats().pieces, 2);

    // Idle past the idle timeout: closed as idle, without a packet.
    let cfg = StreamConfig { idle_timeout_ns: 30 * ms, ..cfg };
    let mut l = layer(&cfg, Collect::default());
    at(1000 * ms, &hello(1), &mut l);
    l.idle();
    std::thread::sleep(std::time::Duration::from_millis(40));
    l.idle();
    let rec = l.handler().streams[&client(1, 40000)].closed.expect("closed while idle");
    assert_eq!((rec.closed, rec.delivered), (Some(CloseReason::Idle), 5));
    l.finish();
    assert_eq!(l.stats().closed_idle, 1);
    assert!(l.stats().packets_add_up());
}

#[test]
fn the_flush_queue_holds_one_entry_per_waiting_direction() {
    // Streams that send many small segments fill and deliver many pieces;
    // each keeps at most one entry queued.
    let ms = 1_000_000u64;
    let cfg = StreamConfig { piece: 1000, flush_timeout_ns: Some(10 * ms), ..StreamConfig::default() };
    let mut l = layer(&cfg, Collect::default());
    for i in 0..2000u32 {
        for c in 1..=5u8 {
            let f = frame(c, 40000, false, Some((1 + 300 * i, ACK)), &text(300, c));
            l.packet(&Packet::new(&f, f.len() as u32, u64::from(i) * 100_000, QueueId(0)));
        }
        assert!(l.flush_queue_len() <= 5, "{} entries", l.flush_queue_len());
    }
    l.finish();
    for c in 1..=5u8 {
        assert_eq!(l.handler().streams[&client(c, 40000)].bytes, text(300, c).repeat(2000));
    }
}

/// Twenty streams that each hold 2000 bytes out of order (their first
/// segment is lost until the end), for an arena of 40,000 bytes.
fn pressure_frames() -> Vec<(u64, Vec<u8>)> {
    // The streams open midstream at their first segment seen, so each is
    // seeded with a byte at sequence 0 first.
    let mut frames: Vec<_> = (1..=20u8).map(|c| (0, frame(c, 40000 + u16::from(c), false, Some((0, ACK)), b"s"))).collect();
    let mut t = 0;
    for c in 1..=20u8 {
        for i in 1..3u32 {
            t += 1;
            frames.push((t, frame(c, 40000 + u16::from(c), false, Some((1 + 1000 * i, ACK)), &text(1000, c))));
        }
    }
    for c in 1..=20u8 {
        t += 1;
        frames.push((t, frame(c, 40000 + u16::from(c), false, Some((1, ACK)), &text(1000, c))));
    }
    frames
}

#[test]
fn memory_pressure_drops_low_priority_streams_first() {
    // The arena takes 40,000 bytes, base 50%.
    let seeded = pressure_frames();
    let cfg = StreamConfig { memory: 40_000, base_percent: 50, overload_percent: 90, overload_keep: 0, ..StreamConfig::default() };
    let mut l = layer(&cfg, Collect { odd_priority: Some(3), ..Collect::default() });
    feed(&mut l, &seeded);
    let h = l.handler();
    let dropped = |odd: bool| -> u64 {
        h.streams.values().filter_map(|s| s.closed).filter(|r| (r.sport.min(r.dport) % 2 == 1) == odd).map(|r| r.dropped).sum()
    };
    let st = l.stats();
    assert!(st.dropped > 0, "no pressure: {st:?}");
    assert!(dropped(false) > dropped(true), "low priority lost {} bytes, high {}", dropped(false), dropped(true));
    assert_eq!(dropped(false) + dropped(true), st.dropped);
    assert!(st.memory_peak <= 40_000);
    assert!(st.packets_add_up());
    assert_eq!(st.bytes, st.delivered + st.duplicate + st.discarded + st.dropped + st.refused);
}

#[test]
fn a_class_priority_decides_who_loses_data_under_memory_pressure() {
    // As above, but the priority comes from a class on the odd client
    // ports, and the even ones get an explicit 0; swapping the classes'
    // priorities swaps who loses.
    let frames = pressure_frames();
    let odd = "tcp[0:2] & 1 = 1 and src net 198.18.0.0/16";
    let even = "tcp[0:2] & 1 = 0 and src net 198.18.0.0/16";
    for (odd_p, even_p) in [(3u8, 0u8), (0, 3)] {
        let classes =
            vec![Class::parse(&format!("{odd};priority={odd_p}")).unwrap(), Class::parse(&format!("{even};priority={even_p}")).unwrap()];
        let cfg = StreamConfig { classes, memory: 40_000, overload_keep: 0, ..StreamConfig::default() };
        let mut l = layer(&cfg, Collect::default());
        feed(&mut l, &frames);
        let recs: Vec<Stream> = l.handler().streams.values().filter_map(|s| s.closed).collect();
        assert!(recs.iter().all(|r| r.priority == if r.sport % 2 == 1 { odd_p } else { even_p }), "{recs:?}");
        let dropped = |p: u8| recs.iter().filter(|r| r.priority == p).map(|r| r.dropped).sum::<u64>();
        let st = l.stats();
        assert!(dropped(0) > dropped(3), "odd {odd_p}: priority 0 lost {} bytes, 3 lost {}", dropped(0), dropped(3));
        assert_eq!(dropped(0) + dropped(3), st.dropped);
        assert_eq!(st.bytes, st.delivered + st.duplicate + st.discarded + st.dropped + st.refused);
    }
}

#[test]
fn udp_is_a_datagram_stream_with_the_same_events() {
    let mut frames = Vec::new();
    for i in 0..5u64 {
        frames.push((i, frame(1, 5353, i % 2 == 1, None, &text(300, i as u8))));
    }
    let cfg = StreamConfig { cutoff: Some(500), ..StreamConfig::default() };
    let mut l = layer(&cfg, Collect::default());
    feed(&mut l, &frames);
    let h = l.handler();
    let up: Vec<u8> = [text(300, 0), text(300, 2)].concat();
    assert_eq!(h.streams[&client(1, 5353)].bytes, up[..500]);
    let rec = h.streams[&client(1, 5353)].closed.unwrap();
    assert_eq!((rec.proto, rec.packets, rec.discarded, rec.closed), (17, 3, 400, Some(CloseReason::EndOfInput)));
}

#[test]
fn pieces_carry_the_configured_overlap() {
    let up = text(10_000, 7);
    let cfg = StreamConfig { piece: 1000, piece_overlap: 100, ..StreamConfig::default() };
    let mut l = layer(&cfg, Collect::default());
    feed(&mut l, &connection(1, 40000, &up, b"", 1460, 0));
    // Collect checks every overlap against the bytes before it.
    assert_eq!(l.handler().streams[&client(1, 40000)].bytes, up);
}

#[test]
fn non_ip_malformed_and_fragments_are_counted_apart() {
    let mut bad = frame(1, 40000, false, Some((1, ACK)), b"x");
    bad[14 + 20 + 12] = 0x10; // a 4-byte TCP header
    let mut arp = vec![0u8; 60];
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    let mut frag = frame(1, 40000, false, Some((1, ACK)), b"12345678");
    frag[14 + 6] = 0x20; // more fragments follow
    let mut l = layer(&StreamConfig::default(), Collect::default());
    feed(&mut l, &[(0, bad), (1, arp), (2, frag)]);
    let st = l.stats();
    assert_eq!((st.packets, st.malformed, st.not_ip, st.fragments, st.streams), (3, 1, 1, 1, 0));
    assert!(st.packets_add_up());
}

#[test]
fn settings_are_checked_against_each_other() {
    for (cfg, says) in [
        (StreamConfig { flows: true, ..StreamConfig::default() }, "its cutoff must be 0"),
        (StreamConfig { cutoff: Some(0), active_timeout_ns: Some(1), ..StreamConfig::default() }, "flows mode only"),
        (StreamConfig { cutoff: Some(0), flows: true, active_timeout_ns: Some(0), ..StreamConfig::default() }, "more than 0"),
    ] {
        let e = cfg.check().expect_err(says).to_string();
        assert!(e.contains(says), "{e}");
    }
    for bad in [
        StreamConfig { piece: 0, ..StreamConfig::default() },
        StreamConfig { piece: 100, piece_overlap: 100, ..StreamConfig::default() },
        StreamConfig { max_connections: 0, ..StreamConfig::default() },
        StreamConfig { base_percent: 90, overload_percent: 50, ..StreamConfig::default() },
        StreamConfig { idle_timeout_ns: 0, ..StreamConfig::default() },
    ] {
        let e = bad.check().unwrap_err();
        assert_eq!(e.setting, crate::Setting::Streams);
    }
    assert!(StreamConfig::default().check().is_ok());
    assert!(Class::parse_cutoff("tcp port 80=x").is_err() && Class::parse_cutoff("=5").is_err());
    assert_eq!(Class::parse_cutoff("len >= 100=5").unwrap().expression, "len >= 100");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random connections, their segments shuffled, some duplicated: every
    /// stream's delivered bytes are its bytes, under any piece size, and
    /// every packet and byte is in one category.
    #[test]
    fn shuffled_connections_deliver_their_bytes(
        sizes in prop::collection::vec((0usize..5000, 0usize..5000), 1..6),
        piece in 1usize..3000,
        mss in 100usize..1500,
        seed in any::<u64>(),
    ) {
        let mut frames = Vec::new();
        for (i, (u, d)) in sizes.iter().enumerate() {
            let conn = connection(i as u8 + 1, 40000 + i as u16, &text(*u, i as u8), &text(*d, 100 + i as u8), mss, 0);
            // Keep the handshake first and the FINs last; shuffle the data.
            let n = conn.len();
            let (head, rest) = conn.split_at(3);
            let (data, tail) = rest.split_at(n - 6);
            let mut data = data.to_vec();
            let mut r = seed.wrapping_add(i as u64);
            for k in (1..data.len()).rev() {
                r = r.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                data.swap(k, (r >> 33) as usize % (k + 1));
            }
            if let Some(first) = data.first().cloned() {
                data.push(first);
            }
            frames.extend(head.iter().cloned().chain(data).chain(tail.iter().cloned()));
        }
        let frames: Vec<(u64, Vec<u8>)> = frames.into_iter().enumerate().map(|(t, (_, f))| (t as u64, f)).collect();
        let cfg = StreamConfig { piece, ..StreamConfig::default() };
        let mut l = layer(&cfg, Collect::default());
        feed(&mut l, &frames);
        let h = l.handler();
        for (i, (u, d)) in sizes.iter().enumerate() {
            let got = |k: Key| h.streams.get(&k).map(|s| s.bytes.clone()).unwrap_or_default();
            prop_assert_eq!(got(client(i as u8 + 1, 40000 + i as u16)), text(*u, i as u8));
            prop_assert_eq!(got(server(i as u8 + 1, 40000 + i as u16)), text(*d, 100 + i as u8));
        }
        let st = l.stats();
        prop_assert!(st.packets_add_up());
        prop_assert_eq!(st.bytes, st.delivered + st.duplicate + st.discarded + st.dropped + st.refused);
        prop_assert_eq!(st.gap, 0);
    }
}

proptest! {
    /// The engine hands the layer runs of packets (`Handler::packets`, which
    /// decodes and prefetches the run first): every event, record and count
    /// is what handing the same packets over one at a time gives, whatever
    /// the runs' lengths, with a table small enough to evict and a cutoff.
    #[test]
    fn runs_of_packets_are_handled_as_packets_one_at_a_time(
        sizes in prop::collection::vec((0usize..3000, 0usize..3000), 1..8),
        runs in prop::collection::vec(1usize..=crate::PACKETS_PER_RUN, 1..64),
        max_connections in 1usize..6,
        cutoff in prop::option::of(0u64..4000),
        seed in any::<u64>(),
    ) {
        let mut frames = Vec::new();
        for (i, (u, d)) in sizes.iter().enumerate() {
            frames.extend(connection(i as u8 + 1, 40000 + i as u16, &text(*u, i as u8), &text(*d, 7 + i as u8), 536, 0));
        }
        // Interleave the connections: a random rotation of each one's place.
        let mut r = seed;
        for k in (1..frames.len()).rev() {
            r = r.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            if (r >> 40) % 4 == 0 {
                frames.swap(k, (r >> 33) as usize % (k + 1));
            }
        }
        let frames: Vec<(u64, Vec<u8>)> = frames.into_iter().enumerate().map(|(t, (_, f))| (t as u64 * 1000, f)).collect();
        let cfg = StreamConfig { max_connections, cutoff, ..StreamConfig::default() };
        let mut one = layer(&cfg, Collect::default());
        feed(&mut one, &frames);
        let mut batched = layer(&cfg, Collect::default());
        let packets: Vec<Packet<'_>> = frames.iter().map(|(ts, f)| Packet::new(f, f.len() as u32, *ts, QueueId(0))).collect();
        let mut at = 0;
        for n in runs.iter().cycle() {
            if at == packets.len() {
                break;
            }
            let end = (at + n).min(packets.len());
            batched.packets(&packets[at..end]);
            at = end;
        }
        batched.finish();
        let (a, b) = (one.handler(), batched.handler());
        prop_assert_eq!(format!("{:?}", a.streams), format!("{:?}", b.streams));
        prop_assert_eq!(format!("{:?}", a.earlier), format!("{:?}", b.earlier));
        prop_assert_eq!(&a.order, &b.order);
        prop_assert_eq!(one.stats(), batched.stats());
    }
}

#[test]
fn preallocated_directions_are_used_first_and_change_nothing_the_application_sees() {
    let mut frames = Vec::new();
    for c in 0..20u8 {
        // All open at once: 40 directions at the peak.
        frames.extend(connection(c, 40000 + u16::from(c), &text(3000, c), &text(9000, c + 1), 1460, u64::from(c) * 10));
    }
    frames.sort_by_key(|(ts, _)| *ts);
    let run = |prealloc_connections| {
        let cfg = StreamConfig { piece: 4096, prealloc_connections, ..StreamConfig::default() };
        let mut l = layer(&cfg, Collect::default());
        let made = l.spare.deliveries.len();
        feed(&mut l, &frames);
        let h = l.handler();
        let seen: Vec<_> = h.order.iter().map(|k| (*k, h.streams[k].bytes.clone(), h.streams[k].closed)).collect();
        (made, l.spare.deliveries.len(), seen)
    };
    let (none, _, want) = run(0);
    assert_eq!(none, 0);
    // Room for 8 connections' directions: the first 8 connections take them,
    // the rest are made as they come, and every box comes back at the end.
    let (made, kept, got) = run(8);
    assert_eq!((made, kept), (16, 40));
    assert_eq!(got, want);
    // More than the table may hold is cut to its size.
    let cfg = StreamConfig { max_connections: 4, prealloc_connections: 100, ..StreamConfig::default() };
    assert_eq!(layer(&cfg, Collect::default()).spare.deliveries.len(), 8);
}

//! Unit tests of the synth pieces: the model's mix and sizes, TCP bookkeeping, checksums
//! (against etherparse as an independent implementation), payload formats,
//! re-addressing, corpus extraction from real pcap files, and the scheduler.

use super::flow::Generator;
use super::from_traces::{readdress, Corpus, Replayer};
use super::model::{self, response_size, SERVICES};
use super::packet::{
    build_tcp, build_udp, fold, internet_checksum, l4_checksum, pseudo_header_sum, sum_words, tcp_flags, update_checksum, Ipv4Fields,
    TcpFields, PROTO_TCP, PROTO_UDP,
};
use super::payload::session::{LineProto, SessionMsg};
use super::payload::udp::UdpMsg;
use super::payload::web::{WebMsg, QUIC_DATAGRAM};
use super::payload::{self, Body, FlowCtx, Msg, Pools, Side};
use super::rng::FlowRng;
use super::sched::{self, Opener};
use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use rand::Rng;
use std::collections::{HashMap, HashSet};
use weir::sink::{FileFormat, TraceWriter, TsPrecision};

const T0: u64 = 1_704_067_200_000_000_000;

fn service(name: &str) -> usize {
    SERVICES.iter().position(|s| s.name == name).unwrap_or_else(|| panic!("no service {name}"))
}

/// Every frame of one flow of `service`, with its time.
fn play(gen: &mut Generator, service: usize) -> Vec<(u64, Vec<u8>)> {
    let mut f = gen.open_service(0, T0, service);
    let mut frames = Vec::new();
    let mut buf = Vec::new();
    while Generator::next_ts(&f).is_some() {
        let (ts, wire) = gen.emit(&mut f, &mut buf);
        assert_eq!(wire as usize, buf.len(), "synthetic frames are captured whole");
        frames.push((ts, buf.clone()));
    }
    gen.closed(0, &f);
    frames
}

/// A packet as the checks need it, after verifying its checksums with etherparse.
#[derive(Debug)]
struct Seen {
    src: ([u8; 4], u16),
    dst: ([u8; 4], u16),
    tcp: Option<(u8, u32, u32)>,
    payload: Vec<u8>,
}

fn parse(frame: &[u8]) -> Seen {
    let p = SlicedPacket::from_ethernet(frame).expect("parses");
    let Some(NetSlice::Ipv4(ip)) = &p.net else { panic!("not IPv4") };
    let h = ip.header().to_header();
    assert_eq!(h.header_checksum, h.calc_header_checksum(), "IPv4 header checksum");
    assert_eq!(frame[0] & 0x03, 0x02, "locally administered unicast MAC");
    match &p.transport {
        Some(TransportSlice::Tcp(t)) => {
            assert_eq!(t.checksum(), t.calc_checksum_ipv4(h.source, h.destination).unwrap(), "TCP checksum");
            let flags = frame[14 + 20 + 13];
            Seen {
                src: (h.source, t.source_port()),
                dst: (h.destination, t.destination_port()),
                tcp: Some((flags, t.sequence_number(), t.acknowledgment_number())),
                payload: t.payload().to_vec(),
            }
        }
        Some(TransportSlice::Udp(u)) => {
            let uh = u.to_header();
            assert_eq!(uh.checksum, uh.calc_checksum_ipv4_raw(h.source, h.destination, u.payload()).unwrap(), "UDP checksum");
            Seen { src: (h.source, uh.source_port), dst: (h.destination, uh.destination_port), tcp: None, payload: u.payload().to_vec() }
        }
        other => panic!("unexpected transport {other:?}"),
    }
}

fn seq_le(a: u32, b: u32) -> bool {
    b.wrapping_sub(a) as i32 >= 0
}

/// Check one TCP flow: handshake, in-order sequence numbers, acknowledgements that never
/// go back and never cover unsent data. Returns the payload bytes each side sent.
fn check_tcp(pkts: &[Seen]) -> [Vec<u8>; 2] {
    use tcp_flags::{ACK, FIN, RST, SYN};
    let (flags, isn_c, _) = pkts[0].tcp.expect("TCP");
    assert_eq!(flags, SYN, "a flow starts with a bare SYN");
    let client = pkts[0].src;
    let mut next = [isn_c.wrapping_add(1), 0];
    let mut acked: [Option<u32>; 2] = [None, None];
    let mut sent = [Vec::new(), Vec::new()];
    for (i, p) in pkts.iter().enumerate().skip(1) {
        let (flags, seq, ack) = p.tcp.expect("TCP");
        let side = usize::from(p.src != client);
        if flags & SYN != 0 {
            assert_eq!((i, side, flags), (1, 1, SYN | ACK), "SYN-ACK answers the SYN");
            assert_eq!(ack, isn_c.wrapping_add(1), "SYN-ACK acknowledges ISN + 1");
            next[1] = seq.wrapping_add(1);
            continue;
        }
        if i == 1 {
            assert_eq!((side, flags, ack), (1, RST | ACK, isn_c.wrapping_add(1)), "refused: RST|ACK to the SYN");
            continue;
        }
        if i == 2 {
            assert_eq!((side, flags, seq, ack), (0, ACK, isn_c.wrapping_add(1), next[1]), "handshake ACK");
        }
        assert_eq!(seq, next[side], "packet {i}: sequence number continues the stream");
        assert!(flags & ACK != 0, "packet {i}: everything after the SYN acknowledges");
        assert!(seq_le(ack, next[1 - side]), "packet {i}: acknowledges only what was sent");
        if let Some(prev) = acked[side] {
            assert!(seq_le(prev, ack), "packet {i}: acknowledgement went back");
        }
        acked[side] = Some(ack);
        sent[side].extend_from_slice(&p.payload);
        next[side] = next[side].wrapping_add(p.payload.len() as u32 + u32::from(flags & FIN != 0));
        if flags & RST != 0 {
            assert!(pkts[i + 1..].iter().all(|q| q.src != p.src), "nothing follows a RST from its sender");
        }
    }
    sent
}

#[test]
fn service_table_is_the_documented_mix() {
    assert_eq!(SERVICES.iter().map(|s| s.weight).sum::<u32>(), 10_000);
    let share = |n: &str| f64::from(SERVICES[service(n)].weight) / 100.0;
    assert_eq!((share("https"), share("http"), share("quic"), share("dns")), (45.0, 12.0, 8.0, 10.0));
    for n in ["ssh", "smtp", "submission", "imaps", "ntp", "microsoft-ds", "ms-wbt-server", "mysql"] {
        assert!(share(n) >= 0.5, "{n}");
    }
    assert!(SERVICES.len() >= 40, "a few dozen services");
    let hosts: u32 = SERVICES.iter().map(|s| u32::from(s.servers)).sum();
    assert!(hosts <= 65_534, "server pools fit 198.19.0.0/16: {hosts}");
    let names: HashSet<_> = SERVICES.iter().map(|s| s.name).collect();
    assert_eq!(names.len(), SERVICES.len());
    assert_eq!(model::host_octets(0), [0, 1]);
    assert_eq!(model::host_octets(65_533), [255, 254]);
}

#[test]
fn response_sizes_are_heavy_tailed() {
    let mut rng = FlowRng::new(3, 3);
    let mut v: Vec<u32> = (0..200_000).map(|_| response_size(&mut rng)).collect();
    v.sort_unstable();
    let median = v[v.len() / 2];
    let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len() as f64;
    let big = v.iter().filter(|&&x| x > 1_448_000).count() as f64 / v.len() as f64;
    assert!((3_000..12_000).contains(&median), "median {median}");
    assert!(mean > 4.0 * f64::from(median), "mean {mean} vs median {median}");
    assert!((0.002..0.03).contains(&big), "share of 1000-segment responses {big}");
    assert!(*v.last().unwrap() > 20_000_000);
}

#[test]
fn most_flows_are_small_and_a_few_are_elephants() {
    let mut gen = Generator::new(5, 1, 1e9);
    let mut sizes: Vec<usize> = (0..1500)
        .map(|_| {
            let mut f = Opener::open(&mut gen, 0, T0);
            let mut n = 0;
            let mut buf = Vec::new();
            while Generator::next_ts(&f).is_some() {
                gen.emit(&mut f, &mut buf);
                n += 1;
            }
            gen.closed(0, &f);
            n
        })
        .collect();
    sizes.sort_unstable();
    let median = sizes[sizes.len() / 2];
    assert!((2..=30).contains(&median), "median flow {median} packets");
    let elephants = sizes.iter().filter(|&&n| n >= 1000).count();
    assert!((3..=60).contains(&elephants), "{elephants} flows of 1000+ packets");
}

#[test]
fn tcp_flows_keep_their_books_for_every_service() {
    let mut gen = Generator::new(11, 1, 1e9);
    let mut closes = HashSet::new();
    for (i, s) in SERVICES.iter().enumerate() {
        for _ in 0..8 {
            let frames = play(&mut gen, i);
            assert!(frames.windows(2).all(|w| w[0].0 <= w[1].0), "{}: time order", s.name);
            let pkts: Vec<Seen> = frames.iter().map(|(_, f)| parse(f)).collect();
            for p in &pkts {
                assert_eq!([p.src.0[0], p.src.0[1] & 0xfe, p.dst.0[0], p.dst.0[1] & 0xfe], [198, 18, 198, 18]);
            }
            let client = pkts[0].src;
            assert_eq!(client.0[..2], [198, 18], "{}: the client speaks first", s.name);
            if s.port != 0 {
                assert_eq!(pkts[0].dst.1, s.port, "{}: server port", s.name);
            }
            if s.transport != model::Transport::Tcp {
                assert!(pkts.iter().all(|p| p.tcp.is_none()));
                continue;
            }
            let sent = check_tcp(&pkts);
            let last = pkts.last().unwrap().tcp.unwrap().0;
            closes.insert(if pkts.len() == 2 {
                "refused"
            } else if last & tcp_flags::FIN != 0 || last == tcp_flags::ACK {
                "fin"
            } else {
                "rst"
            });
            if pkts.len() > 2 {
                assert!(!sent[0].is_empty() && !sent[1].is_empty(), "{}: both sides talk", s.name);
                let fins = pkts.iter().filter(|p| p.tcp.unwrap().0 & tcp_flags::FIN != 0).count();
                let rst = pkts.iter().any(|p| p.tcp.unwrap().0 & tcp_flags::RST != 0);
                assert!(fins == 2 || rst, "{}: FIN from both sides or a RST", s.name);
            }
        }
    }
    assert_eq!(closes.len(), 3, "FIN, RST and refused connections all occur: {closes:?}");
}

#[test]
fn bulk_data_uses_full_segments_and_delayed_acks() {
    let mut gen = Generator::new(2, 1, 1e9);
    let https = service("https");
    let frames = (0..200).map(|_| play(&mut gen, https)).max_by_key(Vec::len).unwrap();
    let pkts: Vec<Seen> = frames.iter().map(|(_, f)| parse(f)).collect();
    assert!(pkts.len() > 200, "found a big flow");
    let server = pkts[1].src;
    let from_server: Vec<&Seen> = pkts.iter().filter(|p| p.src == server && !p.payload.is_empty()).collect();
    let mss = from_server.iter().map(|p| p.payload.len()).max().unwrap();
    assert!(mss >= 1300, "segments of {mss} bytes");
    let full = from_server.iter().filter(|p| p.payload.len() == mss).count();
    assert!(full * 10 >= from_server.len() * 8, "most server segments are MSS-sized");
    let pure_acks = pkts.iter().filter(|p| p.src != server && p.payload.is_empty()).count();
    assert!(pure_acks * 3 >= from_server.len() && pure_acks <= from_server.len(), "about one ACK per two segments");
}

#[test]
fn checksums_agree_with_etherparse_and_rfc1624() {
    let mut rng = FlowRng::new(9, 9);
    for len in [0usize, 1, 2, 3, 17, 1448, 1471] {
        let mut payload = vec![0u8; len];
        rng.fill(&mut payload[..]);
        let ip = Ipv4Fields { src: [198, 18, 1, 2], dst: [198, 19, 3, 4], ttl: 64, id: rng.gen(), dont_fragment: true, dscp: 0 };
        let opts = [1, 1, 8, 10, 1, 2, 3, 4, 5, 6, 7, 8];
        let tcp = TcpFields {
            src_port: 50_000,
            dst_port: 443,
            seq: rng.gen(),
            ack: rng.gen(),
            flags: tcp_flags::ACK,
            window: 501,
            options: &opts,
        };
        let mut frame = Vec::new();
        build_tcp(&mut frame, ([2; 6], [2; 6]), &ip, &tcp, len, |b| b.copy_from_slice(&payload));
        parse(&frame);
        build_udp(&mut frame, ([2; 6], [2; 6]), &ip, (5353, 53), len, |b| b.copy_from_slice(&payload));
        parse(&frame);
        assert_eq!(internet_checksum(&frame[14..34]), 0, "a header with its checksum sums to zero");
    }
    // RFC 1624's own example: a word changes from 0x5555 to 0x3285 under checksum 0xDD2F.
    assert_eq!(update_checksum(0xdd2f, 0x5555, 0x3285), 0x0000);
    for _ in 0..1000 {
        let mut words: Vec<u8> = (0..40).map(|_| rng.gen()).collect();
        let hc = internet_checksum(&words);
        let at = rng.gen_range(0..20) * 2;
        let old = u16::from_be_bytes([words[at], words[at + 1]]);
        let new: u16 = rng.gen();
        words[at..at + 2].copy_from_slice(&new.to_be_bytes());
        // 0x0000 and 0xffff are the same number in ones' complement.
        let norm = |x: u16| if x == 0xffff { 0 } else { x };
        assert_eq!(norm(update_checksum(hc, old, new)), norm(internet_checksum(&words)));
    }
}

/// A TCP frame between two arbitrary hosts, as a captured packet would be.
fn sample_tcp(rng: &mut FlowRng, len: usize) -> Vec<u8> {
    let ip = Ipv4Fields { src: [10, 1, 2, 3], dst: [172, 16, 9, 9], ttl: 57, id: rng.gen(), dont_fragment: true, dscp: 0 };
    let tcp = TcpFields {
        src_port: 41_000,
        dst_port: 8080,
        seq: rng.gen(),
        ack: rng.gen(),
        flags: tcp_flags::ACK | tcp_flags::PSH,
        window: 1000,
        options: &[],
    };
    let mut frame = Vec::new();
    let mut payload = vec![0u8; len];
    rng.fill(&mut payload[..]);
    build_tcp(&mut frame, ([2; 6], [2; 6]), &ip, &tcp, len, |b| b.copy_from_slice(&payload));
    frame
}

/// The ones' complement sum a receiver checks: 0xffff for a correct checksum.
fn verify_sums(ip: &[u8]) -> (u16, u16) {
    let ihl = usize::from(ip[0] & 15) * 4;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let src = [ip[12], ip[13], ip[14], ip[15]];
    let dst = [ip[16], ip[17], ip[18], ip[19]];
    let l4 = &ip[ihl..total];
    (fold(sum_words(&ip[..ihl])), fold(pseudo_header_sum(src, dst, ip[9], l4.len()) + sum_words(l4)))
}

#[test]
fn readdressing_adjusts_checksums_incrementally() {
    let mut rng = FlowRng::new(4, 4);
    let old = (([10, 1, 2, 3], 41_000), ([172, 16, 9, 9], 8080));
    let new = (([198, 18, 7, 7], 51_234), ([198, 19, 0, 1], 8080));
    for len in [0, 1, 100, 1448] {
        let frame = sample_tcp(&mut rng, len);
        let mut ip = frame[14..].to_vec();
        readdress(&mut ip, old, new);
        // Same as building the packet from scratch with the new addresses.
        let mut fresh = frame[14..].to_vec();
        fresh[12..16].copy_from_slice(&new.0 .0);
        fresh[16..20].copy_from_slice(&new.1 .0);
        fresh[20..22].copy_from_slice(&new.0 .1.to_be_bytes());
        fresh[10..12].fill(0);
        fresh[36..38].fill(0);
        let h = internet_checksum(&fresh[..20]);
        fresh[10..12].copy_from_slice(&h.to_be_bytes());
        let c = l4_checksum(new.0 .0, new.1 .0, PROTO_TCP, &fresh[20..]);
        fresh[36..38].copy_from_slice(&c.to_be_bytes());
        assert_eq!(ip, fresh, "len {len}");
        assert_eq!(verify_sums(&ip), (0xffff, 0xffff));

        // A wrong checksum stays wrong by exactly as much.
        let mut bad = frame[14..].to_vec();
        bad[11] ^= 0x5a;
        bad[37] ^= 0x33;
        let before = verify_sums(&bad);
        readdress(&mut bad, old, new);
        assert_eq!(verify_sums(&bad), before);
        assert_ne!(before.0, 0xffff);

        // A snaplen-truncated capture gets the same header bytes as the whole packet.
        let mut cut = frame[14..14 + 40].to_vec();
        readdress(&mut cut, old, new);
        assert_eq!(cut[..], ip[..40]);
        let mut tiny = frame[14..14 + 22].to_vec();
        readdress(&mut tiny, old, new);
        assert_eq!(tiny[..], ip[..22], "only the source port was captured");
    }
    let mut frame = Vec::new();
    let ip = Ipv4Fields { src: old.0 .0, dst: old.1 .0, ttl: 64, id: 1, dont_fragment: false, dscp: 0 };
    build_udp(&mut frame, ([2; 6], [2; 6]), &ip, (old.0 .1, old.1 .1), 30, |b| b.fill(7));
    frame[14 + 26..14 + 28].fill(0);
    let mut udp = frame[14..].to_vec();
    readdress(&mut udp, old, new);
    assert_eq!(udp[26..28], [0, 0], "UDP without a checksum stays without");
}

fn ctx(name: &str, port: u16) -> FlowCtx {
    FlowCtx {
        seed: 77,
        client_ip: [198, 18, 3, 4],
        server_ip: [198, 19, 5, 6],
        server_port: port,
        server_name: name.to_string(),
        site: 42,
        start_ns: T0,
    }
}

fn whole(body: &Body, pools: &Pools) -> Vec<u8> {
    let mut v = vec![0u8; body.len() as usize];
    body.fill(pools, 0, &mut v);
    v
}

#[test]
fn bodies_fill_the_same_in_any_pieces() {
    let pools = Pools::new(1);
    let c = ctx("www.example-site.com", 443);
    for (msg, size) in [
        (Msg::Web(WebMsg::HttpResponse { download: false }), 70_000),
        (Msg::Web(WebMsg::TlsData), 100_000),
        (Msg::Web(WebMsg::QuicData), 10_000),
        (Msg::Session(SessionMsg::Line { proto: LineProto::Smtp, part: 1, step: 6 }), 50_000),
        (Msg::Opaque, 5000),
    ] {
        let b = payload::build(msg, &c, 3, 0, size, Side::Server);
        let all = whole(&b, &pools);
        let mut rng = FlowRng::new(2, 2);
        let mut off = 0usize;
        while off < all.len() {
            let n = rng.gen_range(1..3000).min(all.len() - off);
            let mut piece = vec![0u8; n];
            b.fill(&pools, off as u64, &mut piece);
            assert_eq!(piece, all[off..off + n], "{msg:?} at {off}");
            off += n;
        }
    }
}

#[test]
fn tls_client_hello_carries_the_sni_and_records_frame_the_data() {
    let pools = Pools::new(1);
    for seed in 0..40 {
        let mut c = ctx("api.falconridge.com", 443);
        c.seed = seed;
        let hello = whole(&payload::build(Msg::Web(WebMsg::TlsClientHello), &c, 0, 0, 0, Side::Client), &pools);
        assert_eq!(hello[..3], [0x16, 0x03, 0x01]);
        assert_eq!(usize::from(u16::from_be_bytes([hello[3], hello[4]])), hello.len() - 5);
        assert_eq!(hello[5], 1, "ClientHello");
        let hs_len = u32::from_be_bytes([0, hello[6], hello[7], hello[8]]) as usize;
        assert_eq!(hs_len, hello.len() - 9);
        let mut at = 9 + 2 + 32;
        at += 1 + usize::from(hello[at]);
        at += 2 + usize::from(u16::from_be_bytes([hello[at], hello[at + 1]]));
        at += 1 + usize::from(hello[at]);
        let ext_end = at + 2 + usize::from(u16::from_be_bytes([hello[at], hello[at + 1]]));
        assert_eq!(ext_end, hello.len());
        at += 2;
        let mut sni = None;
        while at < ext_end {
            let ty = u16::from_be_bytes([hello[at], hello[at + 1]]);
            let len = usize::from(u16::from_be_bytes([hello[at + 2], hello[at + 3]]));
            if ty == 0 {
                let name_len = usize::from(u16::from_be_bytes([hello[at + 7], hello[at + 8]]));
                sni = Some(String::from_utf8(hello[at + 9..at + 9 + name_len].to_vec()).unwrap());
            }
            at += 4 + len;
        }
        assert_eq!(at, ext_end);
        assert_eq!(sni.as_deref(), Some("api.falconridge.com"));

        let data = whole(&payload::build(Msg::Web(WebMsg::TlsData), &c, 1, 0, 40_000, Side::Server), &pools);
        let (mut at, mut app) = (0, 0);
        while at < data.len() {
            assert_eq!(data[at..at + 3], [0x17, 0x03, 0x03]);
            let n = usize::from(u16::from_be_bytes([data[at + 3], data[at + 4]]));
            assert!((1..=16_401).contains(&n));
            app += n;
            at += 5 + n;
        }
        assert_eq!((at, app), (data.len(), 40_000));
    }
}

#[test]
fn quic_packets_have_long_then_short_headers() {
    let pools = Pools::new(1);
    let c = ctx("video.helixwren.io", 443);
    let initial = whole(&payload::build(Msg::Web(WebMsg::QuicClientInitial), &c, 0, 0, 0, Side::Client), &pools);
    assert_eq!((initial.len(), initial[0] & 0xf0, &initial[1..5]), (1250, 0xc0, &[0, 0, 0, 1][..]));
    let data = whole(&payload::build(Msg::Web(WebMsg::QuicData), &c, 4, 0, 5000, Side::Server), &pools);
    let client_cid = &initial[15..23];
    for d in data.chunks(usize::from(QUIC_DATAGRAM)) {
        assert_eq!(d[0] & 0xc0, 0x40, "short header");
        assert_eq!(&d[1..9], client_cid, "addressed to the client's connection ID");
        assert!(d.len() >= 40);
    }
}

#[test]
fn http_messages_are_well_formed_and_agree() {
    let pools = Pools::new(1);
    let c = ctx("www.tidalcrest.com", 80);
    for txn in 0..200 {
        for download in [false, true] {
            let upload = if txn % 5 == 0 { 300 } else { 0 };
            let req = whole(&payload::build(Msg::Web(WebMsg::HttpRequest { download }), &c, 2 * txn, txn, upload, Side::Client), &pools);
            let req = String::from_utf8_lossy(&req).into_owned();
            assert!(req.starts_with(if upload > 0 { "POST /" } else { "GET /" }), "{req}");
            assert!(req.contains(" HTTP/1.1\r\nHost: www.tidalcrest.com\r\nUser-Agent: "));
            let head_end = req.find("\r\n\r\n").unwrap() + 4;
            assert_eq!(req.len() - head_end, upload as usize);
            let resp =
                whole(&payload::build(Msg::Web(WebMsg::HttpResponse { download }), &c, 2 * txn + 1, txn, 9000, Side::Server), &pools);
            let head_end = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            let head = String::from_utf8(resp[..head_end].to_vec()).unwrap();
            assert!(head.starts_with("HTTP/1.1 "));
            let cl: usize = head.split("Content-Length: ").nth(1).unwrap().split("\r\n").next().unwrap().parse().unwrap();
            assert_eq!(cl, resp.len() - head_end, "{head}");
            if head.starts_with("HTTP/1.1 200") && head.contains("image/png") {
                assert_eq!(&resp[head_end..head_end + 4], b"\x89PNG");
            }
        }
    }
}

/// Walk a DNS name (with compression) at `at`; returns the position after it.
fn skip_name(m: &[u8], mut at: usize) -> usize {
    loop {
        let n = m[at];
        if n & 0xc0 == 0xc0 {
            return at + 2;
        }
        at += 1 + usize::from(n);
        if n == 0 {
            return at;
        }
    }
}

#[test]
fn dns_answers_echo_their_queries_and_stay_in_benchmark_ranges() {
    let pools = Pools::new(1);
    let c = ctx("resolver1.oakfrost.net", 53);
    let mut types = HashSet::new();
    for txn in 0..300 {
        let q = whole(&payload::build(Msg::Udp(UdpMsg::DnsQuery), &c, 0, txn, 0, Side::Client), &pools);
        let a = whole(&payload::build(Msg::Udp(UdpMsg::DnsResponse), &c, 1, txn, 0, Side::Server), &pools);
        assert_eq!(q[..2], a[..2], "same ID");
        assert_eq!((q[2] & 0x80, a[2] & 0x80), (0, 0x80), "QR bit");
        let q_end = skip_name(&q, 12) + 4;
        assert_eq!(q[12..q_end], a[12..q_end], "the question is echoed");
        let ancount = u16::from_be_bytes([a[6], a[7]]);
        let rcode = a[3] & 15;
        assert!(rcode != 0 || ancount > 0);
        let mut at = q_end;
        for _ in 0..ancount {
            at = skip_name(&a, at);
            let ty = u16::from_be_bytes([a[at], a[at + 1]]);
            let rdlen = usize::from(u16::from_be_bytes([a[at + 8], a[at + 9]]));
            let rdata = &a[at + 10..at + 10 + rdlen];
            types.insert(ty);
            match ty {
                1 => assert_eq!(rdata[..2], [198, 19]),
                28 => assert_eq!(rdata[..6], [0x20, 0x01, 0x00, 0x02, 0x00, 0x00]),
                _ => {}
            }
            at += 10 + rdlen;
        }
        let arcount = u16::from_be_bytes([a[10], a[11]]);
        let nscount = u16::from_be_bytes([a[8], a[9]]);
        for _ in 0..nscount + arcount {
            at = skip_name(&a, at);
            at += 10 + usize::from(u16::from_be_bytes([a[at + 8], a[at + 9]]));
        }
        assert_eq!(at, a.len(), "every record accounted for");
    }
    assert!(types.is_superset(&HashSet::from([1, 28, 5])), "{types:?}");
}

#[test]
fn session_protocols_speak_their_formats() {
    let pools = Pools::new(1);
    let c = ctx("mx1.emberlake.com", 25);
    let line = |proto, part, step, size| {
        whole(&payload::build(Msg::Session(SessionMsg::Line { proto, part, step }), &c, step.into(), 3, size, Side::Server), &pools)
    };
    assert!(line(LineProto::Smtp, 0, 0, 0).starts_with(b"220 mx1.emberlake.com ESMTP"));
    assert!(line(LineProto::Smtp, 1, 0, 9000).starts_with(b"MAIL FROM:<"));
    let mail = line(LineProto::Smtp, 1, 6, 20_000);
    assert!(mail.ends_with(b"\r\n.\r\n") && mail.starts_with(b"Received: from "));
    let imap = line(LineProto::Imap, 1, 1, 12_345);
    let open = imap.windows(9).position(|w| w == b"{12345}\r\n").unwrap() + 9;
    assert_eq!(imap.len() - open - 3, 12_345, "the IMAP literal is as long as it says");
    assert!(imap.ends_with(b")\r\n"));
    for s in [Side::Client, Side::Server] {
        let b = whole(&payload::build(Msg::Session(SessionMsg::SshBanner), &c, 0, 0, 0, s), &pools);
        assert!(b.starts_with(b"SSH-2.0-") && b.ends_with(b"\r\n"));
        let k = whole(&payload::build(Msg::Session(SessionMsg::SshKexInit), &c, 1, 0, 0, s), &pools);
        assert_eq!(u32::from_be_bytes([k[0], k[1], k[2], k[3]]) as usize + 4, k.len());
        assert!(k.len() % 8 == 0 && k[4] >= 4 && k[5] == 20);
        let smb = whole(&payload::build(Msg::Session(SessionMsg::SmbNegotiate), &c, 1, 0, 0, s), &pools);
        assert_eq!(&smb[4..8], b"\xfeSMB");
        assert_eq!(u32::from_be_bytes([0, smb[1], smb[2], smb[3]]) as usize + 4, smb.len());
    }
    let rdp = whole(&payload::build(Msg::Session(SessionMsg::RdpConnect), &c, 0, 0, 0, Side::Client), &pools);
    assert_eq!(usize::from(u16::from_be_bytes([rdp[2], rdp[3]])), rdp.len());
    assert!(String::from_utf8_lossy(&rdp).contains("Cookie: mstshash="));
    let q = whole(&payload::build(Msg::Session(SessionMsg::MysqlQuery), &c, 0, 5, 0, Side::Client), &pools);
    assert_eq!(u32::from_le_bytes([q[0], q[1], q[2], 0]) as usize + 4, q.len());
    assert_eq!(q[4], 3, "COM_QUERY");
}

#[test]
fn scheduler_holds_concurrency_and_time_order_deterministically() {
    let digest = |seed: u64| {
        let mut gen = Generator::new(seed, 50, 1e9);
        let mut last = 0;
        let mut hash = 0xcbf2_9ce4_8422_2325u64;
        let out = sched::run(&mut gen, 50, 6000, T0, 1_000_000, seed, |ts, frame, wire| {
            assert!(ts >= last);
            last = ts;
            assert_eq!(wire as usize, frame.len());
            for b in frame.iter().chain(&ts.to_le_bytes()) {
                hash = (hash ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(out.packets, 6000);
        assert_eq!((out.slots_started, out.peak_concurrency), (50, 50));
        assert!(out.mean_concurrency > 45.0, "{}", out.mean_concurrency);
        assert!(out.flows > 50);
        hash
    };
    assert_eq!(digest(1), digest(1));
    assert_ne!(digest(1), digest(2));
}

/// Write frames (Ethernet) to a pcap file.
fn write_pcap(path: &std::path::Path, frames: &[(u64, Vec<u8>, u32)]) {
    let mut w =
        TraceWriter::new(std::fs::File::create(path).unwrap(), FileFormat::Pcap, weir::LinkType::ETHERNET, 65_535, TsPrecision::Nano)
            .unwrap();
    for (ts, f, wire) in frames {
        w.write_packet(*ts, f, *wire).unwrap();
    }
    w.finish().unwrap();
}

fn frame_tcp(src: ([u8; 4], u16), dst: ([u8; 4], u16), flags: u8, seq: u32, len: usize) -> Vec<u8> {
    let ip = Ipv4Fields { src: src.0, dst: dst.0, ttl: 64, id: seq as u16, dont_fragment: true, dscp: 0 };
    let tcp = TcpFields { src_port: src.1, dst_port: dst.1, seq, ack: 1, flags, window: 100, options: &[] };
    let mut f = Vec::new();
    build_tcp(&mut f, ([2; 6], [2; 6]), &ip, &tcp, len, |b| b.fill(0x61));
    f
}

#[test]
fn corpus_groups_real_files_into_flows_and_copies_keep_them() {
    let dir = tempfile::tempdir().unwrap();
    let c = ([10, 0, 0, 1], 40_000);
    let s = ([10, 0, 0, 2], 80);
    let dns_c = ([10, 0, 0, 3], 5353);
    let dns_s = ([10, 0, 0, 4], 53);
    let mut udp = Vec::new();
    let ip = Ipv4Fields { src: dns_c.0, dst: dns_s.0, ttl: 64, id: 1, dont_fragment: false, dscp: 0 };
    build_udp(&mut udp, ([2; 6], [2; 6]), &ip, (dns_c.1, dns_s.1), 33, |b| b.fill(1));
    let mut frag = frame_tcp(c, s, tcp_flags::ACK, 9, 10);
    frag[14 + 6] = 0x20;
    let mut v6 = vec![2u8; 12];
    v6.extend_from_slice(&[0x86, 0xdd, 0x60]);
    v6.resize(60, 0);
    let mut arp = vec![2u8; 12];
    arp.extend_from_slice(&[0x08, 0x06]);
    arp.resize(42, 0);
    let big = frame_tcp(s, c, tcp_flags::ACK, 5000, 1000);
    let frames = vec![
        // The capture starts mid-flow, server first; the later SYN still decides who serves.
        (T0, frame_tcp(s, c, tcp_flags::ACK, 77, 20), 0),
        (T0 + 10, frame_tcp(c, s, tcp_flags::SYN, 1000, 0), 0),
        (T0 + 5, udp.clone(), 0),
        (T0 + 20, big[..60].to_vec(), big.len() as u32),
        (T0 + 30, frag, 0),
        (T0 + 40, v6, 0),
        (T0 + 50, arp, 0),
        (T0 + 3_000_000, udp.clone(), 0),
    ];
    let frames: Vec<_> = frames
        .into_iter()
        .map(|(t, f, w)| {
            let w = if w == 0 { f.len() as u32 } else { w };
            (t, f, w)
        })
        .collect();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    write_pcap(&dir.path().join("sub/a.pcap"), &frames);
    write_pcap(&dir.path().join("b.pcap"), &frames[2..3]);
    std::fs::write(dir.path().join("README"), "not a trace").unwrap();

    let corpus = Corpus::load(dir.path()).unwrap();
    let st = &corpus.stats;
    assert_eq!((st.files, st.unreadable, st.damaged, st.packets), (3, 1, 0, 9));
    assert_eq!((st.ipv6, st.other, st.flows), (1, 2, 3));
    let tcp = &corpus.flows[1];
    assert_eq!((tcp.client, tcp.server), (c, s), "the SYN's receiver serves");
    assert_eq!(tcp.pkts.iter().map(|p| p.to_server).collect::<Vec<_>>(), [false, true, false]);
    assert_eq!(tcp.pkts[2].len as usize, 60 - 14, "captured length kept");
    assert_eq!(tcp.pkts[2].ip_wire_len as usize, big.len() - 14, "wire length kept");
    let dns = &corpus.flows[2];
    assert_eq!((dns.client, dns.server), (dns_c, dns_s), "a UDP flow is served by its first destination");
    assert_eq!(dns.pkts.iter().map(|p| p.rel_ns).collect::<Vec<_>>(), [0, 2_999_995]);

    let mut rep = Replayer::new(&corpus, 1);
    let mut pairs = HashSet::new();
    let mut buf = Vec::new();
    for _ in 0..30 {
        let mut copy = Replayer::open(&mut rep, 0, T0);
        let mut rel = None;
        let mut seen = Vec::new();
        while let Some(next) = Replayer::next_ts(&copy) {
            let (ts, wire) = rep.emit(&mut copy, &mut buf);
            assert_eq!(ts, next);
            seen.push((ts - *rel.get_or_insert(ts), buf.len(), wire, buf.clone()));
        }
        let flow = corpus.flows.iter().find(|f| f.pkts.len() == seen.len() && f.pkts[0].len as usize + 14 == seen[0].1).unwrap();
        let mut ends = HashSet::new();
        for ((rel, caplen, wire, frame), p) in seen.iter().zip(&flow.pkts) {
            assert_eq!((*rel, *caplen, *wire), (p.rel_ns, p.len as usize + 14, p.ip_wire_len + 14));
            assert_eq!(frame[12..14], [0x08, 0x00]);
            let (src, dst) = ([frame[26], frame[27], frame[28], frame[29]], [frame[30], frame[31], frame[32], frame[33]]);
            let sport = u16::from_be_bytes([frame[34], frame[35]]);
            let dport = u16::from_be_bytes([frame[36], frame[37]]);
            let (client, server) = if p.to_server { ((src, sport), (dst, dport)) } else { ((dst, dport), (src, sport)) };
            assert_eq!([client.0[0], client.0[1], server.0[0], server.0[1]], [198, 18, 198, 19]);
            assert_eq!(server.1, flow.server.1, "server port kept");
            assert!(client.1 >= 32_768, "fresh ephemeral client port");
            // Everything but addresses, ports and checksums is as captured.
            let (mut now, mut was) = (frame[14..].to_vec(), corpus.ip_bytes(p).to_vec());
            let l4_sum = if now[9] == PROTO_TCP { 36..38 } else { 26..28 };
            for r in [10..24, l4_sum] {
                let r = r.start.min(now.len())..r.end.min(now.len());
                now[r.clone()].fill(0);
                was[r].fill(0);
            }
            assert_eq!(now, was, "payload kept");
            if frame.len() as u32 == *wire {
                parse(frame);
            }
            ends.insert((client, server));
        }
        assert_eq!(ends.len(), 1);
        let pair = ends.into_iter().next().unwrap();
        assert!(pairs.insert((pair.0 .0, pair.1 .0)), "every copy has its own addresses");
        Replayer::closed(&mut rep, 0, &copy);
    }
}

#[test]
fn corpus_refuses_a_missing_directory() {
    let err = Corpus::load(std::path::Path::new("/nonexistent/weir-synth")).err().unwrap();
    assert!(err.to_string().contains("/nonexistent/weir-synth"), "{err}");
}

#[test]
fn flows_of_one_service_reuse_popular_servers_and_keep_host_traits() {
    let mut gen = Generator::new(8, 1, 1e9);
    let https = service("https");
    let mut servers: HashMap<[u8; 4], usize> = HashMap::new();
    let mut ttl_by_client: HashMap<[u8; 4], u8> = HashMap::new();
    for _ in 0..400 {
        let frames = play(&mut gen, https);
        let syn = &frames[0].1;
        *servers.entry([syn[30], syn[31], syn[32], syn[33]]).or_default() += 1;
        let client = [syn[26], syn[27], syn[28], syn[29]];
        assert_eq!(*ttl_by_client.entry(client).or_insert(syn[22]), syn[22], "a host keeps its TTL");
    }
    assert!(servers.values().max().unwrap() >= &10, "a popular server gets many flows");
    assert!(servers.len() > 50, "and there are many servers");
}

#[test]
fn udp_request_response_services_answer_each_request() {
    let mut gen = Generator::new(6, 1, 1e9);
    for name in ["dns", "ntp", "snmp", "sip"] {
        for _ in 0..20 {
            let pkts: Vec<Seen> = play(&mut gen, service(name)).iter().map(|(_, f)| parse(f)).collect();
            let client = pkts[0].src;
            let asked = pkts.iter().filter(|p| p.src == client).count();
            assert_eq!(asked * 2, pkts.len(), "{name}: one answer per request");
            if name == "ntp" {
                assert!(pkts.iter().all(|p| p.payload.len() == 48));
            }
        }
    }
    let quic: Vec<Seen> = (0..30).flat_map(|_| play(&mut gen, service("quic"))).map(|(_, f)| parse(&f)).collect();
    assert!(quic.iter().any(|p| p.payload.len() < 100 && p.src.0[1] == 18), "clients acknowledge");
    assert_eq!(PROTO_UDP, 17);
}

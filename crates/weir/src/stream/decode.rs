//! From a captured frame to what the stream layer needs of it: the flow it
//! belongs to and its transport payload.
//!
//! Contract: [`frame`] accepts any bytes and never panics. It looks through
//! the link header and VLAN/QinQ tags ([`network_layer`]), cuts the IP packet
//! to the length its header states (so Ethernet padding is never taken for
//! payload), and answers one of: not IP, malformed (named), an IP fragment
//! (for [`super::fragment`] to reassemble first), or a datagram with its
//! [`FlowTuple`] and transport. [`ip`] does the same from the first byte of
//! an IP header, for datagrams that fragment reassembly rebuilt.
//!
//! A payload cut short by the snapshot length is handed on as far as it was
//! captured, with the number of bytes missing, so the stream layer can tell
//! a capture cut from the sender's data.

use crate::wire::ip::{Ipv4Packet, Ipv6Packet};
use crate::wire::link::{network_layer, Network};
use crate::wire::{be16, field, ip_proto, FlowTuple, L4Ports};
use crate::LinkType;

/// What a frame is to the stream layer.
#[derive(Debug)]
pub(crate) enum Frame<'a> {
    /// Not IPv4 or IPv6 (ARP, LLDP, a link type weir does not read).
    NotIp,
    /// IP whose IP or transport header is not whole or not consistent.
    Malformed,
    /// An IPv4 or IPv6 fragment, from the first byte of its IP header, cut to
    /// its stated length.
    Fragment(&'a [u8]),
    /// A whole datagram.
    Datagram(Datagram<'a>),
}

/// A whole IP datagram, as the stream layer reads it.
#[derive(Debug)]
pub(crate) struct Datagram<'a> {
    /// Addresses, protocol, and ports for TCP, UDP, SCTP, DCCP and UDP-Lite.
    pub(crate) tuple: FlowTuple,
    /// What it carries.
    pub(crate) transport: Transport<'a>,
    /// Its IP length as sent, headers included (IPv4's total length, IPv6's
    /// 40 bytes plus its payload length): what flow records count as octets.
    pub(crate) ip_len: u32,
}

/// The transport layer of a datagram.
#[derive(Debug)]
pub(crate) enum Transport<'a> {
    /// A TCP segment.
    Tcp(TcpSegment<'a>),
    /// Anything else: the UDP payload, or the whole IP payload of other
    /// protocols.
    Datagram {
        /// The payload as captured.
        payload: &'a [u8],
        /// Payload bytes sent but not captured (snapshot length).
        missing: u32,
    },
}

/// A TCP segment's fields that reassembly uses.
#[derive(Debug)]
pub(crate) struct TcpSegment<'a> {
    pub(crate) seq: u32,
    /// The acknowledgment number (meaningful with the ACK flag).
    pub(crate) ack: u32,
    /// The window field, unscaled.
    pub(crate) window: u16,
    /// The shift count of a window scale option, read on SYN segments only
    /// (RFC 7323 allows it nowhere else).
    pub(crate) window_scale: Option<u8>,
    /// The flag byte (FIN, SYN, RST, PSH, ACK, URG, ECE, CWR).
    pub(crate) flags: u8,
    /// The payload as captured.
    pub(crate) payload: &'a [u8],
    /// Payload bytes sent but not captured (snapshot length).
    pub(crate) missing: u32,
}

/// Reads a captured frame of link type `link`.
pub(crate) fn frame(link: LinkType, data: &[u8]) -> Frame<'_> {
    match network_layer(link, data) {
        None => Frame::NotIp,
        Some(Network::Ipv4(b)) => ipv4(b),
        Some(Network::Ipv6(b)) => ipv6(b),
    }
}

/// Reads an IP packet from the first byte of its header (version by the
/// first nibble).
pub(crate) fn ip(data: &[u8]) -> Frame<'_> {
    match data.first().map(|b| b >> 4) {
        Some(4) => ipv4(data),
        Some(6) => ipv6(data),
        _ => Frame::Malformed,
    }
}

fn ipv4(b: &[u8]) -> Frame<'_> {
    let Ok(ip) = Ipv4Packet::new_checked(b) else { return Frame::Malformed };
    let total = ip.total_len();
    if total < ip.header_len() {
        return Frame::Malformed;
    }
    // Cut to the stated length: what follows is link padding, not payload.
    let sent_payload = total - ip.header_len();
    let b = &b[..total.min(b.len())];
    if ip.is_fragment() {
        return Frame::Fragment(b);
    }
    let payload = &b[ip.header_len()..];
    let missing = sent_payload - payload.len();
    let ip_len = total as u32;
    transport(ip.protocol(), payload, missing, ip_len, |ports| FlowTuple::V4 { src: ip.src(), dst: ip.dst(), proto: ip.protocol(), ports })
}

fn ipv6(b: &[u8]) -> Frame<'_> {
    if b.len() < field::ipv6::HEADER_LEN || b[0] >> 4 != 6 {
        return Frame::Malformed;
    }
    let stated = usize::from(be16(b, field::ipv6::PAYLOAD_LEN));
    // A jumbogram (payload length 0) is taken as captured.
    let sent = if stated == 0 { b.len() } else { field::ipv6::HEADER_LEN + stated };
    let b = &b[..sent.min(b.len())];
    let Ok(ip) = Ipv6Packet::new_checked(b) else { return Frame::Malformed };
    if ip.is_fragment() {
        return Frame::Fragment(b);
    }
    let Some((proto, payload)) = ip.upper_layer() else { return Frame::Malformed };
    let missing = sent.saturating_sub(b.len());
    let ip_len = u32::try_from(sent).unwrap_or(u32::MAX);
    transport(proto, payload, missing, ip_len, |ports| FlowTuple::V6 { src: ip.src(), dst: ip.dst(), proto, ports })
}

fn transport<'a>(proto: u8, l4: &'a [u8], missing: usize, ip_len: u32, tuple: impl FnOnce(Option<L4Ports>) -> FlowTuple) -> Frame<'a> {
    let ports = || L4Ports { src: be16(l4, field::l4::SRC_PORT), dst: be16(l4, field::l4::DST_PORT) };
    let missing = u32::try_from(missing).unwrap_or(u32::MAX);
    match proto {
        ip_proto::TCP => {
            if l4.len() < field::tcp::MIN_HEADER_LEN {
                return Frame::Malformed;
            }
            let header_len = usize::from(l4[field::tcp::DATA_OFFSET] >> 4) * 4;
            if header_len < field::tcp::MIN_HEADER_LEN || header_len > l4.len() {
                return Frame::Malformed;
            }
            let number = |r: std::ops::Range<usize>| u32::from_be_bytes([l4[r.start], l4[r.start + 1], l4[r.start + 2], l4[r.start + 3]]);
            let flags = l4[field::tcp::FLAGS];
            let window_scale = if flags & field::tcp::SYN != 0 { window_scale(&l4[field::tcp::MIN_HEADER_LEN..header_len]) } else { None };
            let segment = TcpSegment {
                seq: number(field::tcp::SEQ),
                ack: number(field::tcp::ACK_NUM),
                window: be16(l4, field::tcp::WINDOW),
                window_scale,
                flags,
                payload: &l4[header_len..],
                missing,
            };
            Frame::Datagram(Datagram { tuple: tuple(Some(ports())), transport: Transport::Tcp(segment), ip_len })
        }
        ip_proto::UDP | ip_proto::UDPLITE => {
            if l4.len() < field::udp::HEADER_LEN {
                return Frame::Malformed;
            }
            let payload = &l4[field::udp::HEADER_LEN..];
            Frame::Datagram(Datagram { tuple: tuple(Some(ports())), transport: Transport::Datagram { payload, missing }, ip_len })
        }
        ip_proto::SCTP | ip_proto::DCCP if l4.len() >= field::l4::PORTS_LEN => {
            Frame::Datagram(Datagram { tuple: tuple(Some(ports())), transport: Transport::Datagram { payload: l4, missing }, ip_len })
        }
        _ => Frame::Datagram(Datagram { tuple: tuple(None), transport: Transport::Datagram { payload: l4, missing }, ip_len }),
    }
}

/// Keys an ICMP or ICMPv6 datagram by its type and code as flow exporters
/// do (NetFlow's convention, which nfdump shows as `type.code`): source port
/// 0, destination port `type << 8 | code`. So an echo request and its reply
/// are two flows, as in softflowd and nfpcapd, rather than one stream per
/// address pair. Other datagrams, and an ICMP message too short for its
/// code, are left as they are.
pub(crate) fn icmp_as_ports(frame: Frame<'_>) -> Frame<'_> {
    let Frame::Datagram(mut d) = frame else { return frame };
    let proto = match d.tuple {
        FlowTuple::V4 { proto, .. } | FlowTuple::V6 { proto, .. } => proto,
    };
    if let (ip_proto::ICMP | ip_proto::ICMPV6, Transport::Datagram { payload: &[kind, code, ..], .. }) = (proto, &d.transport) {
        let ports = Some(L4Ports { src: 0, dst: u16::from_be_bytes([kind, code]) });
        match &mut d.tuple {
            FlowTuple::V4 { ports: p, .. } | FlowTuple::V6 { ports: p, .. } => *p = ports,
        }
    }
    Frame::Datagram(d)
}

/// The shift count of the window scale option among TCP `options`, if there
/// is one whole; a malformed list ends the search.
fn window_scale(options: &[u8]) -> Option<u8> {
    let mut at = 0;
    while let Some(&kind) = options.get(at) {
        match kind {
            field::tcp::OPT_END => return None,
            field::tcp::OPT_NOP => at += 1,
            _ => {
                let len = usize::from(*options.get(at + 1)?);
                if len < 2 || at + len > options.len() {
                    return None;
                }
                if kind == field::tcp::OPT_WINDOW_SCALE && len == 3 {
                    return Some(options[at + 2]);
                }
                at += len;
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp_frame(payload: &[u8], pad: usize) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x81, 0x00, 0, 7, 0x08, 0x00]); // one VLAN tag
        let total = 20 + 20 + payload.len();
        f.extend_from_slice(&[0x45, 0, (total >> 8) as u8, total as u8, 0, 1, 0x40, 0, 64, 6, 0, 0, 198, 18, 0, 1, 198, 19, 0, 2]);
        f.extend_from_slice(&[0x30, 0x39, 0, 80, 0, 0, 0, 100, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
        f.extend_from_slice(payload);
        f.resize(f.len() + pad, 0xee);
        f
    }

    #[test]
    fn tcp_through_a_vlan_tag_without_the_link_padding() {
        let f = tcp_frame(b"hi", 10);
        let Frame::Datagram(d) = frame(LinkType::ETHERNET, &f) else { panic!("not a datagram") };
        assert_eq!(d.tuple.ports(), Some(L4Ports { src: 12345, dst: 80 }));
        assert_eq!(d.ip_len, 42, "the IP total length, without the padding");
        let Transport::Tcp(s) = d.transport else { panic!("not TCP") };
        assert_eq!((s.seq, s.payload, s.missing), (100, &b"hi"[..], 0));
        assert_eq!(s.flags, field::tcp::ACK | 0x08);
    }

    #[test]
    fn a_payload_cut_by_the_snapshot_length_says_how_much_is_missing() {
        let f = tcp_frame(b"hello", 0);
        let Frame::Datagram(d) = frame(LinkType::ETHERNET, &f[..f.len() - 3]) else { panic!() };
        let Transport::Tcp(s) = d.transport else { panic!() };
        assert_eq!((s.payload, s.missing), (&b"he"[..], 3));
    }

    #[test]
    fn a_syn_gives_its_window_scale_and_every_segment_its_ack_and_window() {
        // A SYN with MSS, NOP, window scale 7 and the end of the list: a
        // 32-byte TCP header.
        let mut f = tcp_frame(b"", 0);
        let tcp = 18 + 20;
        f[tcp + 12] = 0x80;
        f[tcp + 13] = field::tcp::SYN | field::tcp::ACK;
        f[tcp + 8..tcp + 12].copy_from_slice(&0x0102_0304u32.to_be_bytes());
        f.extend_from_slice(&[2, 4, 0x05, 0xb4, 1, 3, 3, 7, 0, 0, 0, 0]);
        f[18 + 3] += 12; // the IPv4 total length
        let Frame::Datagram(d) = frame(LinkType::ETHERNET, &f) else { panic!("not a datagram") };
        let Transport::Tcp(s) = d.transport else { panic!("not TCP") };
        assert_eq!((s.ack, s.window, s.window_scale, s.payload.len()), (0x0102_0304, 0xffff, Some(7), 0));
        // The same options on a segment without SYN are not read.
        f[tcp + 13] = field::tcp::ACK;
        let Frame::Datagram(d) = frame(LinkType::ETHERNET, &f) else { panic!("not a datagram") };
        let Transport::Tcp(s) = d.transport else { panic!("not TCP") };
        assert_eq!(s.window_scale, None);
        // Option lists cut short or with a length below 2 give no scale.
        assert_eq!(window_scale(&[1, 1, 3, 3, 14]), Some(14));
        assert_eq!(window_scale(&[3, 3]), None);
        assert_eq!(window_scale(&[8, 1, 3, 3, 5]), None);
        assert_eq!(window_scale(&[0, 3, 3, 5]), None);
    }

    #[test]
    fn flows_key_icmp_by_type_and_code_and_leave_the_rest() {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 28, 0, 1, 0, 0, 64, 1, 0, 0, 198, 18, 0, 1, 198, 19, 0, 2]);
        f.extend_from_slice(&[3, 3, 0, 0, 0, 0, 0, 0]); // port unreachable
        let Frame::Datagram(d) = icmp_as_ports(frame(LinkType::ETHERNET, &f)) else { panic!("not a datagram") };
        assert_eq!((d.tuple.ports(), d.ip_len), (Some(L4Ports { src: 0, dst: 0x0303 }), 28));
        let Frame::Datagram(d) = frame(LinkType::ETHERNET, &f) else { panic!("not a datagram") };
        assert_eq!(d.tuple.ports(), None, "only flows mode keys ICMP by type");
        f[14 + 9] = 99; // another protocol keeps no ports
        let Frame::Datagram(d) = icmp_as_ports(frame(LinkType::ETHERNET, &f)) else { panic!("not a datagram") };
        assert_eq!(d.tuple.ports(), None);
        let t = tcp_frame(b"x", 0);
        let Frame::Datagram(d) = icmp_as_ports(frame(LinkType::ETHERNET, &t)) else { panic!("not a datagram") };
        assert_eq!(d.tuple.ports(), Some(L4Ports { src: 12345, dst: 80 }));
    }

    #[test]
    fn bad_headers_are_named_and_fragments_set_apart() {
        let mut f = tcp_frame(b"", 0);
        f[18 + 20 + 12] = 0x40; // a 16-byte TCP header
        assert!(matches!(frame(LinkType::ETHERNET, &f), Frame::Malformed));
        let mut f = tcp_frame(b"x", 0);
        f[18 + 6] = 0x20; // more fragments
        assert!(matches!(frame(LinkType::ETHERNET, &f), Frame::Fragment(b) if b.len() == 41));
        assert!(matches!(frame(LinkType::ETHERNET, &f[..20]), Frame::Malformed));
        assert!(matches!(frame(LinkType::ETHERNET, &[0u8; 60]), Frame::NotIp));
        assert!(matches!(ip(&[0x70; 40]), Frame::Malformed));
    }
}

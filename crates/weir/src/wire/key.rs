//! The locality sort key of a frame: min(src port, dst port) of a TCP or UDP
//! packet. The capture thread computes it as it fills a cell (the headers are
//! in cache there), the locality stage delivers by it; both read it from here.

use super::{ethertype, field, ip_proto, FlowTuple};
use crate::LinkType;

/// The key a packet is delivered by, in the locality stage: min(src port, dst port) of a TCP or UDP
/// packet, `None` for every other packet, a fragment, or one cut before its
/// ports. The same as [`FlowTuple::parse`] followed by [`L4Ports::min_port`](super::L4Ports::min_port)
/// for TCP and UDP, faster for untagged Ethernet and IPv4.
#[inline]
pub fn sort_key(link: LinkType, frame: &[u8]) -> Option<u16> {
    match untagged_ipv4_key(link, frame) {
        Some(key) => key,
        None => general_key(link, frame),
    }
}

/// Every link type, VLAN tags, IPv6 and its extension headers: through the
/// flow tuple.
fn general_key(link: LinkType, frame: &[u8]) -> Option<u16> {
    let t = FlowTuple::parse(link, frame)?;
    match t.protocol() {
        ip_proto::TCP | ip_proto::UDP => t.ports().map(|p| p.min_port()),
        _ => None,
    }
}

/// The common case read in place, `None` when the frame is not untagged
/// Ethernet carrying IPv4. The stage runs this once per packet on the worker,
/// and building a whole [`FlowTuple`] (addresses included) cost more than the
/// rest of the stage together; the tests hold it to [`general_key`]'s answer.
#[inline]
fn untagged_ipv4_key(link: LinkType, frame: &[u8]) -> Option<Option<u16>> {
    const IP: usize = field::ethernet::HEADER_LEN;
    if link != LinkType::ETHERNET || frame.len() < IP {
        return None;
    }
    if u16::from_be_bytes([frame[12], frame[13]]) != ethertype::IPV4 {
        return None;
    }
    let ip = &frame[IP..];
    let Some(&first) = ip.first() else { return Some(None) };
    let header_len = usize::from(first & 0x0f) * 4;
    if first >> 4 != 4 || header_len < field::ipv4::MIN_HEADER_LEN || ip.len() < header_len {
        return Some(None);
    }
    let frag = u16::from_be_bytes([ip[6], ip[7]]) & field::ipv4::MF_AND_OFFSET_MASK;
    let proto = ip[field::ipv4::PROTOCOL];
    if frag != 0 || !(proto == ip_proto::TCP || proto == ip_proto::UDP) || ip.len() < header_len + field::l4::PORTS_LEN {
        return Some(None);
    }
    let l4 = &ip[header_len..];
    Some(Some(u16::from_be_bytes([l4[0], l4[1]]).min(u16::from_be_bytes([l4[2], l4[3]]))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_key_is_the_smaller_port_of_tcp_and_udp_only() {
        // Ethernet + IPv4 (20 bytes) + the first 8 bytes of the transport header.
        let frame = |proto: u8, sport: u16, dport: u16| {
            let mut f = vec![0u8; 14 + 20 + 8];
            f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            f[14] = 0x45;
            f[16..18].copy_from_slice(&28u16.to_be_bytes());
            f[22] = 64;
            f[23] = proto;
            f[26..30].copy_from_slice(&[198, 18, 0, 1]);
            f[30..34].copy_from_slice(&[198, 19, 0, 1]);
            f[34..36].copy_from_slice(&sport.to_be_bytes());
            f[36..38].copy_from_slice(&dport.to_be_bytes());
            f
        };
        assert_eq!(sort_key(LinkType::ETHERNET, &frame(ip_proto::TCP, 40000, 80)), Some(80));
        assert_eq!(sort_key(LinkType::ETHERNET, &frame(ip_proto::UDP, 53, 40000)), Some(53));
        assert_eq!(sort_key(LinkType::ETHERNET, &frame(132, 1000, 2000)), None, "SCTP goes on the keyless list");
        assert_eq!(sort_key(LinkType::ETHERNET, &frame(ip_proto::TCP, 1, 2)[..30]), None, "a cut header has no key");
    }

    proptest! {
        /// The in-place path gives the flow tuple's answer on every frame it takes:
        /// random bytes behind an untagged IPv4 Ethernet header, with the version,
        /// header length, fragment field, protocol and length drawn to hit each edge.
        #[test]
        fn the_in_place_key_agrees_with_the_flow_tuple(
            ver_ihl in prop_oneof![Just(0x45u8), Just(0x46), Just(0x4f), Just(0x44), Just(0x65), any::<u8>()],
            frag in prop_oneof![Just(0u16), Just(0x4000), Just(0x2000), Just(1), any::<u16>()],
            proto in prop_oneof![Just(ip_proto::TCP), Just(ip_proto::UDP), Just(132u8), any::<u8>()],
            body in proptest::collection::vec(any::<u8>(), 0..80),
            cut in 0usize..100,
        ) {
            let mut f = vec![0u8; 14];
            f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            f.extend_from_slice(&body);
            if f.len() > 14 { f[14] = ver_ihl; }
            if f.len() > 21 { f[20..22].copy_from_slice(&frag.to_be_bytes()); }
            if f.len() > 23 { f[23] = proto; }
            f.truncate(f.len().min(14 + cut));
            prop_assert!(untagged_ipv4_key(LinkType::ETHERNET, &f).is_some());
            prop_assert_eq!(sort_key(LinkType::ETHERNET, &f), general_key(LinkType::ETHERNET, &f));
        }

        /// Every other frame falls through to the flow tuple.
        #[test]
        fn other_frames_take_the_general_path(ether in any::<u16>(), body in proptest::collection::vec(any::<u8>(), 0..80)) {
            prop_assume!(ether != 0x0800);
            let mut f = vec![0u8; 12];
            f.extend_from_slice(&ether.to_be_bytes());
            f.extend_from_slice(&body);
            prop_assert!(untagged_ipv4_key(LinkType::ETHERNET, &f).is_none());
            prop_assert!(untagged_ipv4_key(LinkType::RAW, &f).is_none());
        }
    }
}

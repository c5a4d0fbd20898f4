//! The flow tuple of a packet: what RSS hashes and what locality buffering sorts by.

use super::link::{network_layer, Network};
use super::{be16, field, ip_proto, Ipv4Packet, Ipv6Packet};
use crate::LinkType;

/// Source and destination ports of a TCP, UDP, UDP-Lite, SCTP or DCCP packet,
/// as numbers (the wire's big-endian bytes already decoded).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct L4Ports {
    /// The sender's port.
    pub src: u16,
    /// The receiver's port.
    pub dst: u16,
}

impl L4Ports {
    /// The smaller of the two ports: the key of locality buffering.
    pub fn min_port(&self) -> u16 {
        self.src.min(self.dst)
    }
}

/// Addresses, protocol and (when present and reliable) ports of an IP packet.
///
/// The derived order is a total order on tuples with no meaning of its own;
/// [`canonical`](Self::canonical) uses it to pick one orientation of a flow.
/// Hashed by hand (see `impl Hash`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FlowTuple {
    /// An IPv4 packet.
    V4 {
        /// Source address, in wire (network) byte order.
        src: [u8; 4],
        /// Destination address, in wire (network) byte order.
        dst: [u8; 4],
        /// The header's protocol field ([`ip_proto`]).
        proto: u8,
        /// `None` when `proto` carries no ports, the ports were not captured,
        /// or the packet is a fragment (first or not): only whole datagrams
        /// carry ports that are reliable for every packet of the flow.
        ports: Option<L4Ports>,
    },
    /// An IPv6 packet.
    V6 {
        /// Source address, in wire (network) byte order.
        src: [u8; 16],
        /// Destination address, in wire (network) byte order.
        dst: [u8; 16],
        /// The protocol after the extension headers; 44 (the fragment header)
        /// when the chain holds a fragment header, was cut by the snaplen, or
        /// is longer than the 8 headers weir walks.
        proto: u8,
        /// As for [`FlowTuple::V4`]: `None` without reliable ports, and for
        /// every packet whose `proto` is 44.
        ports: Option<L4Ports>,
    },
}

impl FlowTuple {
    /// Extract the tuple of a captured frame of link type `link`, or `None` when it
    /// is not IP (see [`network_layer`](super::link::network_layer) for the link
    /// types read) or its IP header was not captured whole.
    pub fn parse(link: LinkType, frame: &[u8]) -> Option<FlowTuple> {
        match network_layer(link, frame)? {
            Network::Ipv4(b) => {
                let ip = Ipv4Packet::new_checked(b).ok()?;
                let proto = ip.protocol();
                let ports = if ip.is_fragment() { None } else { ports(proto, ip.payload()) };
                Some(FlowTuple::V4 { src: ip.src(), dst: ip.dst(), proto, ports })
            }
            Network::Ipv6(b) => {
                let ip = Ipv6Packet::new_checked(b).ok()?;
                let (proto, ports) = match ip.upper_layer() {
                    Some((p, rest)) => (p, ports(p, rest)),
                    None => (ip_proto::FRAGMENT, None),
                };
                Some(FlowTuple::V6 { src: ip.src(), dst: ip.dst(), proto, ports })
            }
        }
    }

    /// The ports, when the packet carries reliable ones (see [`FlowTuple::V4`]).
    pub fn ports(&self) -> Option<L4Ports> {
        match self {
            FlowTuple::V4 { ports, .. } | FlowTuple::V6 { ports, .. } => *ports,
        }
    }

    /// The source and destination as addresses, and the ports, 0 and 0
    /// when the packet carries no reliable ones: the endpoints as records
    /// and the kernel's flow map name them.
    pub fn endpoints(&self) -> (std::net::IpAddr, std::net::IpAddr, u16, u16) {
        let (src, dst) = match *self {
            FlowTuple::V4 { src, dst, .. } => (src.into(), dst.into()),
            FlowTuple::V6 { src, dst, .. } => (src.into(), dst.into()),
        };
        let (sport, dport) = self.ports().map_or((0, 0), |p| (p.src, p.dst));
        (src, dst, sport, dport)
    }

    /// The IP protocol number ([`ip_proto`]; see the variants' `proto`).
    pub fn protocol(&self) -> u8 {
        match self {
            FlowTuple::V4 { proto, .. } | FlowTuple::V6 { proto, .. } => *proto,
        }
    }

    /// One key for both directions of a flow: the smaller of the two orientations.
    pub fn canonical(&self) -> FlowTuple {
        if self.ordered() {
            *self
        } else {
            self.reversed()
        }
    }

    /// Whether `self <= self.reversed()` in the derived order, worked out
    /// without building the reversed tuple: the addresses decide, then the
    /// ports (the protocol is the same both ways). A stream table computes
    /// this for every packet.
    fn ordered(&self) -> bool {
        let ports = |p: Option<L4Ports>| p.is_none_or(|p| p.src <= p.dst);
        match self {
            FlowTuple::V4 { src, dst, ports: p, .. } => src < dst || (src == dst && ports(*p)),
            FlowTuple::V6 { src, dst, ports: p, .. } => src < dst || (src == dst && ports(*p)),
        }
    }

    /// The same flow seen from the other side.
    pub(crate) fn reversed(&self) -> FlowTuple {
        let rev = |p: Option<L4Ports>| p.map(|p| L4Ports { src: p.dst, dst: p.src });
        match *self {
            FlowTuple::V4 { src, dst, proto, ports } => FlowTuple::V4 { src: dst, dst: src, proto, ports: rev(ports) },
            FlowTuple::V6 { src, dst, proto, ports } => FlowTuple::V6 { src: dst, dst: src, proto, ports: rev(ports) },
        }
    }
}

/// Two or five words instead of the derived field-by-field writes (a length
/// for each address array, a discriminant for each enum): with foldhash a
/// stream table's hash of a tuple took 55 instructions a packet derived.
/// Equal tuples write equal words, as `Eq` requires.
impl std::hash::Hash for FlowTuple {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let (proto, ports) = match self {
            FlowTuple::V4 { proto, ports, .. } | FlowTuple::V6 { proto, ports, .. } => (*proto, *ports),
        };
        // Protocol, whether ports are present, the ports, and the family:
        // no two different tails write the same word.
        let tail = |v6: bool| {
            let p = ports.map_or(0, |p| 1 << 32 | u64::from(p.src) << 16 | u64::from(p.dst));
            u64::from(proto) << 40 | u64::from(v6) << 48 | p
        };
        match self {
            FlowTuple::V4 { src, dst, .. } => {
                state.write_u64(u64::from(u32::from_ne_bytes(*src)) << 32 | u64::from(u32::from_ne_bytes(*dst)));
                state.write_u64(tail(false));
            }
            FlowTuple::V6 { src, dst, .. } => {
                for half in [&src[..8], &src[8..], &dst[..8], &dst[8..]] {
                    state.write_u64(u64::from_ne_bytes(half.try_into().expect("8 bytes")));
                }
                state.write_u64(tail(true));
            }
        }
    }
}

fn ports(proto: u8, l4: &[u8]) -> Option<L4Ports> {
    let carries_ports = matches!(proto, ip_proto::TCP | ip_proto::UDP | ip_proto::SCTP | ip_proto::DCCP | ip_proto::UDPLITE);
    if !carries_ports || l4.len() < field::l4::PORTS_LEN {
        return None;
    }
    Some(L4Ports { src: be16(l4, field::l4::SRC_PORT), dst: be16(l4, field::l4::DST_PORT) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_over_ethernet() {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(&[0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0, 198, 18, 0, 1, 198, 19, 0, 2]);
        f.extend_from_slice(&[0x30, 0x39, 0, 80, 0, 0, 0, 0]);
        let t = FlowTuple::parse(LinkType::ETHERNET, &f).unwrap();
        assert_eq!(t.ports(), Some(L4Ports { src: 12345, dst: 80 }));
        assert_eq!(t.ports().unwrap().min_port(), 80);
        assert_eq!(t.reversed().reversed(), t);
        assert_eq!(t.canonical(), t.reversed().canonical());
        // Cut inside the ports: still IP, but no ports.
        let t = FlowTuple::parse(LinkType::ETHERNET, &f[..36]).unwrap();
        assert_eq!(t.ports(), None);
        assert_eq!(t.protocol(), 6);
    }

    /// `canonical` picks the smaller orientation in the derived order, and
    /// equal tuples hash equally, over tuples whose fields collide often.
    #[test]
    fn canonical_is_the_minimum_and_hash_agrees_with_eq() {
        use std::hash::BuildHasher;
        let h = foldhash::fast::FixedState::with_seed(7);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let r = next();
            let small = |v: u64| (v % 3) as u8;
            let ports = (r & 1 == 0).then_some(L4Ports { src: (r >> 8) as u16 % 3, dst: (r >> 16) as u16 % 3 });
            let t = if r >> 24 & 1 == 0 {
                FlowTuple::V4 { src: [198, 18, 0, small(r >> 32)], dst: [198, 18, 0, small(r >> 40)], proto: 6, ports }
            } else {
                let mut src = [0u8; 16];
                let mut dst = [0u8; 16];
                src[15] = small(r >> 32);
                dst[15] = small(r >> 40);
                FlowTuple::V6 { src, dst, proto: 17, ports }
            };
            assert_eq!(t.canonical(), t.min(t.reversed()), "{t:?}");
            assert_eq!(t.canonical(), t.reversed().canonical());
            assert_eq!(h.hash_one(t.canonical()), h.hash_one(t.reversed().canonical()));
        }
        let v4 = FlowTuple::V4 { src: [0; 4], dst: [0; 4], proto: 6, ports: None };
        let other = [
            FlowTuple::V4 { src: [0; 4], dst: [0; 4], proto: 17, ports: None },
            FlowTuple::V4 { src: [0; 4], dst: [0; 4], proto: 6, ports: Some(L4Ports { src: 0, dst: 0 }) },
            FlowTuple::V6 { src: [0; 16], dst: [0; 16], proto: 6, ports: None },
        ];
        for o in other {
            assert_ne!(h.hash_one(v4), h.hash_one(o), "{o:?}");
        }
    }

    #[test]
    fn icmp_has_no_ports() {
        let b = [0x45, 0, 0, 28, 0, 0, 0, 0, 64, 1, 0, 0, 198, 18, 0, 1, 198, 19, 0, 2, 8, 0, 0, 0, 0, 0, 0, 0];
        let t = FlowTuple::parse(LinkType::RAW, &b).unwrap();
        assert_eq!(t.ports(), None);
    }
}

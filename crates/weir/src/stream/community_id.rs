//! Community ID v1 (corelight/community-id-spec): the flow hash that
//! Suricata, Zeek, Arkime and Elastic put on their records, so that records
//! of one flow join across tools and sensors, whichever direction each saw.
//!
//! Contract: [`CommunityId::id`] gives `1:` and the base64 of the SHA-1 of
//! the seed (2 bytes, network order), the two addresses, the IP protocol, a
//! zero byte, and (for TCP, UDP, SCTP, ICMP and ICMPv6) the two ports, both
//! endpoints ordered so that either direction gives the same input: the
//! smaller address first, or with equal addresses the smaller port. ICMP and
//! ICMPv6 hash their type and code as ports; a request type and its reply
//! type are made one two-way pair (echo and echo reply, and the others the
//! spec lists), and any other message is one-way, hashed as it was seen.
//!
//! SHA-1 and base64 come from the RustCrypto `sha1` and the `base64` crates:
//! a well-kept implementation of each, nothing of weir's own.

use crate::wire::FlowTuple;
use base64::Engine;
use sha1::{Digest, Sha1};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Bytes of an ID: `1:` and 28 of base64 for the 20 of a SHA-1.
const RENDERED: usize = 30;

/// IP protocol numbers the hash gives ports to.
mod proto {
    pub const ICMP: u8 = 1;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const ICMPV6: u8 = 58;
    pub const SCTP: u8 = 132;
}

/// What follows the protocol in the hash input.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum L4 {
    /// TCP, UDP or SCTP ports, source and destination.
    Ports(u16, u16),
    /// An ICMP or ICMPv6 message's type and code.
    Icmp {
        /// The message type.
        kind: u8,
        /// Its code.
        code: u8,
    },
    /// No ports: another protocol, or a packet cut before its ports (a
    /// later IP fragment).
    None,
}

impl L4 {
    /// What the hash takes from the key the stream layer gave a flow: its
    /// `sport` and `dport` for TCP, UDP and SCTP; for ICMP and ICMPv6, in
    /// flows mode (`icmp_by_type`), the type and code the layer keyed it by
    /// (destination port `type << 8 | code`), and elsewhere nothing, as the
    /// layer keyed such a flow by its addresses alone: `None`, no ID can be
    /// given. Other protocols hash no ports.
    pub fn of_key(protocol: u8, sport: u16, dport: u16, icmp_by_type: bool) -> Option<L4> {
        match protocol {
            proto::TCP | proto::UDP | proto::SCTP => Some(L4::Ports(sport, dport)),
            proto::ICMP | proto::ICMPV6 if icmp_by_type => {
                let [kind, code] = dport.to_be_bytes();
                Some(L4::Icmp { kind, code })
            }
            proto::ICMP | proto::ICMPV6 => None,
            _ => Some(L4::None),
        }
    }
}

/// The type an ICMP (`v6` false) or ICMPv6 request or reply type pairs
/// with, if it is one of the spec's two-way messages.
fn icmp_counterpart(kind: u8, v6: bool) -> Option<u8> {
    let pairs: &[(u8, u8)] = if v6 {
        // Echo, multicast listener query/report, router and neighbour
        // solicitation/advertisement, node information, home agent discovery.
        &[(128, 129), (130, 131), (133, 134), (135, 136), (139, 140), (144, 145)]
    } else {
        // Echo, timestamp, information, router solicitation/advertisement,
        // address mask.
        &[(8, 0), (13, 14), (15, 16), (10, 9), (17, 18)]
    };
    pairs.iter().find_map(|&(a, b)| {
        if kind == a {
            Some(b)
        } else if kind == b {
            Some(a)
        } else {
            None
        }
    })
}

/// A Community ID hasher with its seed (0 unless the sites that join
/// records agree on another).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CommunityId {
    /// Hashed first: sites that join records must use the same.
    pub seed: u16,
}

impl CommunityId {
    /// A hasher with this seed.
    pub fn new(seed: u16) -> CommunityId {
        CommunityId { seed }
    }

    /// The ID of the flow from `src` to `dst` (`None` if one address is
    /// IPv4 and the other IPv6, which no packet has).
    pub fn id(&self, src: IpAddr, dst: IpAddr, protocol: u8, l4: L4) -> Option<String> {
        Some(CommunityId::render(&self.digest(src, dst, protocol, l4)?))
    }

    /// The ID of a flow the stream layer keyed (see [`L4::of_key`]).
    pub fn of_key(&self, src: IpAddr, dst: IpAddr, protocol: u8, sport: u16, dport: u16, icmp_by_type: bool) -> Option<String> {
        self.id(src, dst, protocol, L4::of_key(protocol, sport, dport, icmp_by_type)?)
    }

    /// The ID of a packet's flow as [`FlowTuple`] keys it: `None` where the
    /// tuple lacks what the hash needs (the ports of a TCP, UDP or SCTP
    /// fragment, an ICMP message's type and code).
    pub fn of_tuple(&self, t: &FlowTuple) -> Option<String> {
        let (src, dst, protocol, ports) = match *t {
            FlowTuple::V4 { src, dst, proto, ports } => (IpAddr::V4(Ipv4Addr::from(src)), IpAddr::V4(Ipv4Addr::from(dst)), proto, ports),
            FlowTuple::V6 { src, dst, proto, ports } => (IpAddr::V6(Ipv6Addr::from(src)), IpAddr::V6(Ipv6Addr::from(dst)), proto, ports),
        };
        let l4 = match (protocol, ports) {
            (proto::TCP | proto::UDP | proto::SCTP, Some(p)) => L4::Ports(p.src, p.dst),
            (proto::TCP | proto::UDP | proto::SCTP | proto::ICMP | proto::ICMPV6, _) => return None,
            _ => L4::None,
        };
        self.id(src, dst, protocol, l4)
    }

    /// `1:` and the base64 of a [`CommunityId::digest`].
    pub fn render(digest: &[u8; 20]) -> String {
        let mut out = Vec::with_capacity(RENDERED);
        CommunityId::render_into(digest, &mut out);
        String::from_utf8(out).expect("base64 is ASCII")
    }

    /// [`CommunityId::render`] appended to `out`, with no allocation of its own.
    pub fn render_into(digest: &[u8; 20], out: &mut Vec<u8>) {
        let mut b64 = [0u8; RENDERED - 2];
        let n = base64::engine::general_purpose::STANDARD.encode_slice(digest, &mut b64).expect("28 bytes hold 20 in base64");
        out.extend_from_slice(b"1:");
        out.extend_from_slice(&b64[..n]);
    }

    /// The SHA-1 of the hash input.
    pub fn digest(&self, src: IpAddr, dst: IpAddr, protocol: u8, l4: L4) -> Option<[u8; 20]> {
        let (v4, v6);
        let (a, b): (&[u8], &[u8]) = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                v4 = [s.octets(), d.octets()];
                (&v4[0], &v4[1])
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                v6 = [s.octets(), d.octets()];
                (&v6[0], &v6[1])
            }
            _ => return None,
        };
        let ports = match (protocol, l4) {
            (proto::TCP | proto::UDP | proto::SCTP, L4::Ports(s, d)) => Some((s, d, false)),
            (proto::ICMP | proto::ICMPV6, L4::Icmp { kind, code }) => Some(match icmp_counterpart(kind, protocol == proto::ICMPV6) {
                Some(other) => (u16::from(kind), u16::from(other), false),
                None => (u16::from(kind), u16::from(code), true),
            }),
            _ => None,
        };
        let one_way = ports.is_some_and(|p| p.2);
        let ordered = one_way || a < b || (a == b && ports.is_some_and(|(s, d, _)| s < d));
        let (first, second, ports) = if ordered { (a, b, ports) } else { (b, a, ports.map(|(s, d, w)| (d, s, w))) };
        let mut h = Sha1::new();
        h.update(self.seed.to_be_bytes());
        h.update(first);
        h.update(second);
        h.update([protocol, 0]);
        if let Some((s, d, _)) = ports {
            h.update(s.to_be_bytes());
            h.update(d.to_be_bytes());
        }
        Some(h.finalize().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(a: [u8; 4]) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(a))
    }

    #[test]
    fn both_directions_give_one_id() {
        let c = CommunityId::default();
        let (a, b) = (v4([198, 18, 0, 1]), v4([198, 19, 0, 2]));
        assert_eq!(c.id(a, b, 6, L4::Ports(40000, 443)), c.id(b, a, 6, L4::Ports(443, 40000)));
        // Echo and its reply are one flow; a one-way message is not turned round.
        assert_eq!(c.id(a, b, 1, L4::Icmp { kind: 8, code: 0 }), c.id(b, a, 1, L4::Icmp { kind: 0, code: 0 }));
        assert_ne!(c.id(a, b, 1, L4::Icmp { kind: 3, code: 3 }), c.id(b, a, 1, L4::Icmp { kind: 3, code: 3 }));
        // Equal addresses are ordered by port.
        assert_eq!(c.id(a, a, 17, L4::Ports(53, 5353)), c.id(a, a, 17, L4::Ports(5353, 53)));
        // The seed changes it, and so does the protocol.
        assert_ne!(c.id(a, b, 6, L4::Ports(1, 2)), CommunityId::new(1).id(a, b, 6, L4::Ports(1, 2)));
        assert_ne!(c.id(a, b, 6, L4::Ports(1, 2)), c.id(a, b, 17, L4::Ports(1, 2)));
    }

    #[test]
    fn an_id_is_the_version_and_a_base64_sha1() {
        let id = CommunityId::default().id(v4([198, 18, 0, 1]), v4([198, 18, 0, 2]), 47, L4::None).unwrap();
        assert!(id.starts_with("1:") && id.len() == 2 + 28 && id.ends_with('='), "{id}");
    }

    #[test]
    fn flows_mode_icmp_keys_give_type_and_code_and_other_modes_none() {
        let (a, b) = (v4([198, 18, 0, 1]), v4([198, 19, 0, 2]));
        let c = CommunityId::default();
        assert_eq!(c.of_key(a, b, 1, 0, 0x0800, true), c.id(a, b, 1, L4::Icmp { kind: 8, code: 0 }));
        assert_eq!(c.of_key(a, b, 1, 0, 0x0800, false), None);
        assert_eq!(c.of_key(a, b, 6, 1, 2, false), c.id(a, b, 6, L4::Ports(1, 2)));
        // UDP-Lite's ports are in weir's key, not in the hash.
        assert_eq!(c.of_key(a, b, 136, 1, 2, false), c.id(a, b, 136, L4::None));
    }

    #[test]
    fn mixed_families_have_none() {
        let c = CommunityId::default();
        assert_eq!(c.id(v4([198, 18, 0, 1]), IpAddr::V6(Ipv6Addr::LOCALHOST), 6, L4::Ports(1, 2)), None);
    }
}

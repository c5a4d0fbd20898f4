//! Link-layer headers: find where the network layer starts and what it is.
//!
//! Supports the link types traces from Linux and BSD hosts actually carry:
//! Ethernet (through up to four 802.1Q/802.1ad tags), Linux cooked v1 and v2,
//! BSD and OpenBSD loopback, and raw IP. Anything else is "not IP".

use super::{be16, ethertype, field, Truncated};
use crate::LinkType;

/// The network-layer protocol found under the link header, with the frame's
/// bytes from the start of that header on. The link header (for raw IP, the
/// version field) said which protocol follows; nothing else is checked, and the
/// bytes may be cut short.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Network<'a> {
    /// IPv4.
    Ipv4(&'a [u8]),
    /// IPv6.
    Ipv6(&'a [u8]),
}

/// Most VLAN tags weir will look through before giving up on a frame.
const MAX_VLAN_TAGS: usize = 4;

/// Strip the link header of `data` (of link type `link`) and return what follows
/// it: `None` for a link type not listed above, a frame shorter than its link
/// header, or one that carries neither IPv4 nor IPv6.
pub fn network_layer(link: LinkType, data: &[u8]) -> Option<Network<'_>> {
    match link {
        LinkType::ETHERNET => ethernet(data).ok().flatten(),
        LinkType::LINUX_SLL => {
            let proto = data.get(field::sll::V1_PROTOCOL).map(|_| be16(data, field::sll::V1_PROTOCOL))?;
            by_ethertype(proto, &data[field::sll::V1_HEADER_LEN.min(data.len())..])
        }
        LinkType::LINUX_SLL2 => {
            if data.len() < field::sll::V2_HEADER_LEN {
                return None;
            }
            by_ethertype(be16(data, field::sll::V2_PROTOCOL), &data[field::sll::V2_HEADER_LEN..])
        }
        LinkType::NULL | LinkType::LOOP => {
            let family = data.get(..field::null::HEADER_LEN)?;
            let family = [family[0], family[1], family[2], family[3]];
            // NULL is in the capturing host's byte order, so accept either.
            let fam = if link == LinkType::LOOP {
                u32::from_be_bytes(family)
            } else {
                let le = u32::from_le_bytes(family);
                if le < 256 {
                    le
                } else {
                    u32::from_be_bytes(family)
                }
            };
            let rest = &data[field::null::HEADER_LEN..];
            match fam {
                2 => Some(Network::Ipv4(rest)),
                // AF_INET6 differs by OS: Linux 10, BSDs 24, 28 and 30.
                10 | 24 | 28 | 30 => Some(Network::Ipv6(rest)),
                _ => None,
            }
        }
        LinkType::RAW | LinkType(12) | LinkType(14) => match data.first()? >> 4 {
            4 => Some(Network::Ipv4(data)),
            6 => Some(Network::Ipv6(data)),
            _ => None,
        },
        LinkType::IPV4 => Some(Network::Ipv4(data)),
        LinkType::IPV6 => Some(Network::Ipv6(data)),
        _ => None,
    }
}

fn ethernet(data: &[u8]) -> Result<Option<Network<'_>>, Truncated> {
    if data.len() < field::ethernet::HEADER_LEN {
        return Err(Truncated);
    }
    let mut ty = be16(data, field::ethernet::ETHERTYPE);
    let mut at = field::ethernet::HEADER_LEN;
    for _ in 0..MAX_VLAN_TAGS {
        if !matches!(ty, ethertype::VLAN | ethertype::QINQ | ethertype::QINQ_OLD) {
            break;
        }
        if data.len() < at + field::ethernet::VLAN_TAG_LEN {
            return Err(Truncated);
        }
        ty = be16(data, at + 2..at + 4);
        at += field::ethernet::VLAN_TAG_LEN;
    }
    Ok(by_ethertype(ty, &data[at..]))
}

fn by_ethertype(ty: u16, rest: &[u8]) -> Option<Network<'_>> {
    match ty {
        ethertype::IPV4 => Some(Network::Ipv4(rest)),
        ethertype::IPV6 => Some(Network::Ipv6(rest)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ethernet_with_two_vlan_tags() {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x88, 0xa8, 0, 1, 0x81, 0x00, 0, 2, 0x08, 0x00, 0x45]);
        assert_eq!(network_layer(LinkType::ETHERNET, &f), Some(Network::Ipv4(&[0x45][..])));
    }

    #[test]
    fn truncated_and_unknown_are_not_ip() {
        assert_eq!(network_layer(LinkType::ETHERNET, &[0u8; 13]), None);
        let mut arp = vec![0u8; 12];
        arp.extend_from_slice(&[0x08, 0x06, 0]);
        assert_eq!(network_layer(LinkType::ETHERNET, &arp), None);
        assert_eq!(network_layer(LinkType(147), &[0x45; 40]), None);
        assert_eq!(network_layer(LinkType::LINUX_SLL, &[0u8; 10]), None);
        assert_eq!(network_layer(LinkType::RAW, &[]), None);
    }

    #[test]
    fn loopback_families_in_either_byte_order() {
        assert_eq!(network_layer(LinkType::NULL, &[2, 0, 0, 0, 0x45]), Some(Network::Ipv4(&[0x45][..])));
        assert_eq!(network_layer(LinkType::NULL, &[0, 0, 0, 30, 0x60]), Some(Network::Ipv6(&[0x60][..])));
        assert_eq!(network_layer(LinkType::LOOP, &[0, 0, 0, 2, 0x45]), Some(Network::Ipv4(&[0x45][..])));
    }
}

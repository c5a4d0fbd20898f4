//! IPv4 and IPv6 header views.
//!
//! `new_checked` verifies the fixed header and the header length field against the
//! buffer, so every accessor afterwards is infallible. The views do not check
//! checksums or total length against the buffer: snaplen-truncated captures are
//! normal in monitoring and must still be classified.

use super::{be16, field, ip_proto, Truncated};

/// A checked view of an IPv4 header.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Ipv4Packet<'a> {
    buf: &'a [u8],
    header_len: usize,
}

impl<'a> Ipv4Packet<'a> {
    /// Check that `buf` holds a whole IPv4 header (including options) of version 4.
    pub(crate) fn new_checked(buf: &'a [u8]) -> Result<Self, Truncated> {
        let first = *buf.get(field::ipv4::VER_IHL).ok_or(Truncated)?;
        let header_len = usize::from(first & 0x0f) * 4;
        if first >> 4 != 4 || header_len < field::ipv4::MIN_HEADER_LEN || buf.len() < header_len {
            return Err(Truncated);
        }
        Ok(Ipv4Packet { buf, header_len })
    }

    pub(crate) fn src(&self) -> [u8; 4] {
        self.addr(field::ipv4::SRC)
    }

    pub(crate) fn dst(&self) -> [u8; 4] {
        self.addr(field::ipv4::DST)
    }

    fn addr(&self, r: std::ops::Range<usize>) -> [u8; 4] {
        let b = &self.buf[r];
        [b[0], b[1], b[2], b[3]]
    }

    pub(crate) fn protocol(&self) -> u8 {
        self.buf[field::ipv4::PROTOCOL]
    }

    /// True for any fragment, first or not: only unfragmented packets carry reliable ports.
    pub(crate) fn is_fragment(&self) -> bool {
        be16(self.buf, field::ipv4::FLAGS_FRAG) & field::ipv4::MF_AND_OFFSET_MASK != 0
    }

    /// Bytes after the header that were captured.
    pub(crate) fn payload(&self) -> &'a [u8] {
        &self.buf[self.header_len..]
    }

    /// The header's length, options included.
    pub(crate) fn header_len(&self) -> usize {
        self.header_len
    }

    /// The total length field: header and payload as sent.
    pub(crate) fn total_len(&self) -> usize {
        usize::from(be16(self.buf, field::ipv4::TOTAL_LEN))
    }
}

/// A checked view of an IPv6 header, with its extension headers walked.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Ipv6Packet<'a> {
    buf: &'a [u8],
    /// Where the extension headers lead.
    chain: Chain,
}

/// The end of an IPv6 extension chain.
#[derive(Copy, Clone, Debug)]
enum Chain {
    /// The upper-layer protocol and where it starts.
    Upper(u8, usize),
    /// A fragment header (captured whole).
    Fragment,
    /// Cut by the snaplen, or longer than weir walks.
    Opaque,
}

/// Most extension headers weir walks before treating the packet as opaque.
const MAX_EXTENSION_HEADERS: usize = 8;

impl<'a> Ipv6Packet<'a> {
    /// Check the fixed header and walk extension headers as far as they were captured.
    pub(crate) fn new_checked(buf: &'a [u8]) -> Result<Self, Truncated> {
        if buf.len() < field::ipv6::HEADER_LEN || buf[0] >> 4 != 6 {
            return Err(Truncated);
        }
        Ok(Ipv6Packet { buf, chain: walk_extensions(buf) })
    }

    pub(crate) fn src(&self) -> [u8; 16] {
        self.addr(field::ipv6::SRC)
    }

    pub(crate) fn dst(&self) -> [u8; 16] {
        self.addr(field::ipv6::DST)
    }

    fn addr(&self, r: std::ops::Range<usize>) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buf[r]);
        a
    }

    /// The upper-layer protocol and its bytes, or `None` for a non-first fragment or an
    /// extension chain that was cut off by the snaplen.
    pub(crate) fn upper_layer(&self) -> Option<(u8, &'a [u8])> {
        match self.chain {
            Chain::Upper(p, at) => Some((p, &self.buf[at..])),
            Chain::Fragment | Chain::Opaque => None,
        }
    }

    /// True when the extension chain holds a fragment header: a fragment,
    /// first or not (or an atomic one), for fragment reassembly to take.
    pub(crate) fn is_fragment(&self) -> bool {
        matches!(self.chain, Chain::Fragment)
    }
}

fn walk_extensions(buf: &[u8]) -> Chain {
    let mut next = buf[field::ipv6::NEXT_HEADER];
    let mut at = field::ipv6::HEADER_LEN;
    for _ in 0..MAX_EXTENSION_HEADERS {
        let unit_len = match next {
            ip_proto::HOPOPT | ip_proto::ROUTING | ip_proto::DSTOPTS => |len: usize| (len + 1) * 8,
            ip_proto::AH => |len: usize| (len + 2) * 4,
            ip_proto::FRAGMENT => {
                // Only the first fragment carries the upper-layer header; and we treat
                // every fragment alike (as NICs do) so all pieces of a datagram hash alike.
                let whole = buf.get(at..at + field::ipv6::FRAG_HEADER_LEN).is_some();
                return if whole { Chain::Fragment } else { Chain::Opaque };
            }
            _ => return if at <= buf.len() { Chain::Upper(next, at) } else { Chain::Opaque },
        };
        let Some(&len) = buf.get(at + field::ipv6::EXT_LEN) else { return Chain::Opaque };
        next = buf[at + field::ipv6::EXT_NEXT];
        at += unit_len(usize::from(len));
    }
    Chain::Opaque
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(proto: u8, frag: u16) -> Vec<u8> {
        let mut h = vec![0x45, 0, 0, 40, 0, 0, 0, 0, 64, proto, 0, 0, 198, 18, 0, 1, 198, 19, 0, 2];
        h[6..8].copy_from_slice(&frag.to_be_bytes());
        h.extend_from_slice(&[0x30, 0x39, 0, 80]);
        h
    }

    #[test]
    fn ipv4_fields() {
        let b = v4(6, 0);
        let p = Ipv4Packet::new_checked(&b).unwrap();
        assert_eq!(p.src(), [198, 18, 0, 1]);
        assert_eq!(p.dst(), [198, 19, 0, 2]);
        assert_eq!(p.protocol(), 6);
        assert!(!p.is_fragment());
        assert_eq!(p.payload(), &[0x30, 0x39, 0, 80]);
        assert!(Ipv4Packet::new_checked(&v4(6, 0x2000)).unwrap().is_fragment());
        assert!(Ipv4Packet::new_checked(&v4(6, 0x4000)).map(|p| !p.is_fragment()).unwrap(), "DF is not a fragment");
    }

    #[test]
    fn ipv4_rejects_short_or_bad_ihl() {
        assert!(Ipv4Packet::new_checked(&[0x45; 19]).is_err());
        assert!(Ipv4Packet::new_checked(&[0x44; 40]).is_err());
        assert!(Ipv4Packet::new_checked(&[0x4f; 40]).is_err(), "60-byte header in 40 bytes");
        assert!(Ipv4Packet::new_checked(&[0x65; 40]).is_err());
    }

    #[test]
    fn ipv6_walks_extension_headers() {
        let mut b = vec![0x60, 0, 0, 0, 0, 16, 0 /* hop-by-hop */, 64];
        b.extend_from_slice(&[1; 16]);
        b.extend_from_slice(&[2; 16]);
        b.extend_from_slice(&[17, 0, 0, 0, 0, 0, 0, 0]); // hop-by-hop, 8 bytes, then UDP
        b.extend_from_slice(&[0, 53, 0x30, 0x39]);
        let p = Ipv6Packet::new_checked(&b).unwrap();
        assert_eq!(p.upper_layer(), Some((17, &[0, 53, 0x30, 0x39][..])));
        b[40] = 44; // the hop-by-hop header is now followed by a fragment header
        b.truncate(48);
        b.extend_from_slice(&[17, 0, 0, 0, 0, 0, 0, 1]);
        let b2 = b.clone();
        assert_eq!(Ipv6Packet::new_checked(&b2).unwrap().upper_layer(), None);
    }
}

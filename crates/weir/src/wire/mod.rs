//! Zero-copy views over packet headers.
//!
//! Every view is built by a `new_checked` constructor that verifies, once, that the
//! buffer holds the whole fixed header; after that no accessor can panic. Header
//! offsets are named in [`field`] and nowhere else. The views never copy and never
//! allocate: they are what the capture path uses to find a flow's 5-tuple for RSS
//! and the key locality buffering delivers by ([`sort_key`]).
//!
//! Written by hand rather than with etherparse because this runs once per packet on
//! the capture thread, needs only a handful of fields, and must accept anything
//! (truncated snaplen captures, bad checksums, odd options) without a verdict.

pub mod flow;
pub mod ip;
mod key;
pub mod link;

pub use flow::{FlowTuple, L4Ports};
pub use ip::{Ipv4Packet, Ipv6Packet};
pub use key::sort_key;
pub use link::network_layer;

/// A header was shorter than its fixed part.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Truncated;

/// Byte offsets of the header fields weir reads.
pub mod field {
    use std::ops::Range;

    /// Ethernet II.
    pub mod ethernet {
        use super::Range;
        pub const DST: Range<usize> = 0..6;
        pub const SRC: Range<usize> = 6..12;
        pub const ETHERTYPE: Range<usize> = 12..14;
        pub const HEADER_LEN: usize = 14;
        /// An 802.1Q / 802.1ad tag: TCI then the inner EtherType.
        pub const VLAN_TAG_LEN: usize = 4;
    }

    /// Linux cooked capture v1 (16 bytes) and v2 (20 bytes).
    pub mod sll {
        use super::Range;
        pub const V1_PROTOCOL: Range<usize> = 14..16;
        pub const V1_HEADER_LEN: usize = 16;
        pub const V2_PROTOCOL: Range<usize> = 0..2;
        pub const V2_HEADER_LEN: usize = 20;
    }

    /// BSD / OpenBSD loopback: a 4-byte address family.
    pub mod null {
        pub const HEADER_LEN: usize = 4;
    }

    /// IPv4.
    pub mod ipv4 {
        use super::Range;
        pub const VER_IHL: usize = 0;
        pub const TOTAL_LEN: Range<usize> = 2..4;
        pub const FLAGS_FRAG: Range<usize> = 6..8;
        pub const PROTOCOL: usize = 9;
        pub const SRC: Range<usize> = 12..16;
        pub const DST: Range<usize> = 16..20;
        pub const MIN_HEADER_LEN: usize = 20;
        /// More-fragments flag and fragment offset within [`FLAGS_FRAG`].
        pub const MF_AND_OFFSET_MASK: u16 = 0x3fff;
    }

    /// IPv6 and its extension headers.
    pub mod ipv6 {
        use super::Range;
        pub const NEXT_HEADER: usize = 6;
        pub const SRC: Range<usize> = 8..24;
        pub const DST: Range<usize> = 24..40;
        pub const HEADER_LEN: usize = 40;
        /// Generic extension header: next header, length in 8-octet units past the first 8.
        pub const EXT_NEXT: usize = 0;
        pub const EXT_LEN: usize = 1;
        pub const FRAG_HEADER_LEN: usize = 8;
        /// Fragment offset and M flag within the fragment header.
        pub const FRAG_OFFSET: Range<usize> = 2..4;
    }

    /// The first four bytes of TCP, UDP, SCTP and DCCP are the two ports.
    pub mod l4 {
        use super::Range;
        pub const SRC_PORT: Range<usize> = 0..2;
        pub const DST_PORT: Range<usize> = 2..4;
        pub const PORTS_LEN: usize = 4;
    }
}

/// EtherType values weir looks at.
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const IPV6: u16 = 0x86dd;
    pub const VLAN: u16 = 0x8100;
    pub const QINQ: u16 = 0x88a8;
    pub const QINQ_OLD: u16 = 0x9100;
}

/// IP protocol numbers weir looks at.
pub mod ip_proto {
    pub const HOPOPT: u8 = 0;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const ROUTING: u8 = 43;
    pub const FRAGMENT: u8 = 44;
    pub const AH: u8 = 51;
    pub const DSTOPTS: u8 = 60;
    pub const SCTP: u8 = 132;
    pub const UDPLITE: u8 = 136;
    pub const DCCP: u8 = 33;
}

#[inline]
pub(crate) fn be16(b: &[u8], at: std::ops::Range<usize>) -> u16 {
    debug_assert_eq!(at.len(), 2);
    u16::from_be_bytes([b[at.start], b[at.start + 1]])
}

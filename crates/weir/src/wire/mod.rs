//! Packet headers read in place: a frame's flow tuple ([`FlowTuple::parse`]),
//! its locality key ([`sort_key`]) and where its network layer starts
//! ([`link::network_layer`]). The capture path uses them for RSS and locality
//! buffering; an application can use them on the packets it is handed.
//!
//! Contract: every function here accepts any bytes (a frame cut by the snaplen,
//! bad checksums, odd options, garbage) and answers without panicking, copying
//! or allocating. A frame that is not IP, or whose headers were not captured as
//! far as the answer needs, gets `None` (or a tuple without ports), never an
//! error. Nothing is validated beyond finding the fields: checksums and the IP
//! total length are not looked at.
//!
//! Inside, each header view checks once, when it is made, that the buffer holds
//! the whole fixed header, so no accessor can panic afterwards; header offsets
//! are named in one place (`field`) and nowhere else.
//!
//! Written by hand rather than with etherparse because this runs once per packet on
//! the capture thread, needs only a handful of fields, and must accept anything
//! (truncated snaplen captures, bad checksums, odd options) without a verdict.

pub(crate) mod flow;
pub(crate) mod ip;
mod key;
pub mod link;

pub use flow::{FlowTuple, L4Ports};
use ip::{Ipv4Packet, Ipv6Packet};
pub use key::sort_key;

/// A header was shorter than its fixed part.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Truncated;

/// Byte offsets of the header fields weir reads.
pub(crate) mod field {
    use std::ops::Range;

    /// Ethernet II.
    pub(crate) mod ethernet {
        use super::Range;
        pub(crate) const ETHERTYPE: Range<usize> = 12..14;
        pub(crate) const HEADER_LEN: usize = 14;
        /// An 802.1Q / 802.1ad tag: TCI then the inner EtherType.
        pub(crate) const VLAN_TAG_LEN: usize = 4;
    }

    /// Linux cooked capture v1 (16 bytes) and v2 (20 bytes).
    pub(crate) mod sll {
        use super::Range;
        pub(crate) const V1_PROTOCOL: Range<usize> = 14..16;
        pub(crate) const V1_HEADER_LEN: usize = 16;
        pub(crate) const V2_PROTOCOL: Range<usize> = 0..2;
        pub(crate) const V2_HEADER_LEN: usize = 20;
    }

    /// BSD / OpenBSD loopback: a 4-byte address family.
    pub(crate) mod null {
        pub(crate) const HEADER_LEN: usize = 4;
    }

    /// IPv4.
    pub(crate) mod ipv4 {
        use super::Range;
        pub(crate) const VER_IHL: usize = 0;
        pub(crate) const TOTAL_LEN: Range<usize> = 2..4;
        pub(crate) const FLAGS_FRAG: Range<usize> = 6..8;
        pub(crate) const PROTOCOL: usize = 9;
        pub(crate) const SRC: Range<usize> = 12..16;
        pub(crate) const DST: Range<usize> = 16..20;
        pub(crate) const MIN_HEADER_LEN: usize = 20;
        /// More-fragments flag and fragment offset within [`FLAGS_FRAG`].
        pub(crate) const MF_AND_OFFSET_MASK: u16 = 0x3fff;
    }

    /// IPv6 and its extension headers.
    pub(crate) mod ipv6 {
        use super::Range;
        pub(crate) const PAYLOAD_LEN: Range<usize> = 4..6;
        pub(crate) const NEXT_HEADER: usize = 6;
        pub(crate) const SRC: Range<usize> = 8..24;
        pub(crate) const DST: Range<usize> = 24..40;
        pub(crate) const HEADER_LEN: usize = 40;
        /// Generic extension header: next header, length in 8-octet units past the first 8.
        pub(crate) const EXT_NEXT: usize = 0;
        pub(crate) const EXT_LEN: usize = 1;
        pub(crate) const FRAG_HEADER_LEN: usize = 8;
    }

    /// The first four bytes of TCP, UDP, SCTP and DCCP are the two ports.
    pub(crate) mod l4 {
        use super::Range;
        pub(crate) const SRC_PORT: Range<usize> = 0..2;
        pub(crate) const DST_PORT: Range<usize> = 2..4;
        pub(crate) const PORTS_LEN: usize = 4;
    }
    /// TCP, past the ports.
    pub(crate) mod tcp {
        use super::Range;
        pub(crate) const SEQ: Range<usize> = 4..8;
        pub(crate) const ACK_NUM: Range<usize> = 8..12;
        pub(crate) const WINDOW: Range<usize> = 14..16;
        /// Data offset in the high nibble, in 32-bit words.
        pub(crate) const DATA_OFFSET: usize = 12;
        pub(crate) const FLAGS: usize = 13;
        pub(crate) const MIN_HEADER_LEN: usize = 20;
        pub(crate) const FIN: u8 = 0x01;
        pub(crate) const SYN: u8 = 0x02;
        pub(crate) const RST: u8 = 0x04;
        pub(crate) const ACK: u8 = 0x10;
        /// Option kinds: end of the list, no-operation, window scale (RFC 7323).
        pub(crate) const OPT_END: u8 = 0;
        pub(crate) const OPT_NOP: u8 = 1;
        pub(crate) const OPT_WINDOW_SCALE: u8 = 3;
    }
    /// UDP's fixed header.
    pub(crate) mod udp {
        pub(crate) const HEADER_LEN: usize = 8;
    }
}

/// EtherType values weir looks at.
pub(crate) mod ethertype {
    pub(crate) const IPV4: u16 = 0x0800;
    pub(crate) const IPV6: u16 = 0x86dd;
    pub(crate) const VLAN: u16 = 0x8100;
    pub(crate) const QINQ: u16 = 0x88a8;
    pub(crate) const QINQ_OLD: u16 = 0x9100;
}

/// IP protocol numbers weir looks at, as [`FlowTuple::protocol`] returns them.
pub mod ip_proto {
    pub(crate) const HOPOPT: u8 = 0;
    /// TCP: its packets carry ports and a locality key ([`sort_key`](super::sort_key)).
    pub const TCP: u8 = 6;
    /// UDP: its packets carry ports and a locality key ([`sort_key`](super::sort_key)).
    pub const UDP: u8 = 17;
    pub(crate) const ROUTING: u8 = 43;
    pub(crate) const FRAGMENT: u8 = 44;
    pub(crate) const AH: u8 = 51;
    pub(crate) const DSTOPTS: u8 = 60;
    pub(crate) const SCTP: u8 = 132;
    pub(crate) const UDPLITE: u8 = 136;
    pub(crate) const DCCP: u8 = 33;
    pub(crate) const ICMP: u8 = 1;
    pub(crate) const ICMPV6: u8 = 58;
}

#[inline]
pub(crate) fn be16(b: &[u8], at: std::ops::Range<usize>) -> u16 {
    debug_assert_eq!(at.len(), 2);
    u16::from_be_bytes([b[at.start], b[at.start + 1]])
}

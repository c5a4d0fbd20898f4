//! Receive-side scaling: a Toeplitz hash of the flow tuple, then an indirection table
//! from hash bucket to queue, as a multi-queue NIC does it.
//!
//! The default key repeats the 16-bit pattern `0x6d5a`, which makes the Toeplitz
//! hash symmetric (Woo and Park, 2012): swapping source and destination, addresses
//! and ports together, leaves the hash unchanged, so both directions of a flow land
//! on one queue. Packets without an IP header go to bucket 0, hence queue 0.
//!
//! [`Rss`] is how a trace's packets are split into queues (`trace.pcap@0-3`),
//! and what a program can use to predict that split. The hash input is the
//! flow tuple of [`FlowTuple::parse`]: the addresses, then the ports when it
//! has them, in the order a NIC hashes them.
//!
//! The hash is computed from per-byte lookup tables (one 256-entry table per input
//! byte position) so one IPv4 4-tuple costs 12 loads and XORs.

use crate::wire::FlowTuple;
use crate::{FlowBucket, LinkType, QueueId};
use crate::{Setting, SettingError};

/// Length of a Toeplitz key: enough for the 36-byte IPv6 4-tuple.
pub(crate) const KEY_LEN: usize = 40;
/// Longest input the key covers: IPv6 addresses and ports.
const MAX_INPUT: usize = 36;

/// The symmetric key: `0x6d5a` repeated.
pub(crate) const SYMMETRIC_KEY: [u8; KEY_LEN] = {
    let mut k = [0u8; KEY_LEN];
    let mut i = 0;
    while i < KEY_LEN {
        k[i] = if i % 2 == 0 { 0x6d } else { 0x5a };
        i += 1;
    }
    k
};

/// A Toeplitz hash function for one key.
pub(crate) struct Toeplitz {
    /// `table[i][v]`: contribution of byte value `v` at input position `i`.
    table: Box<[[u32; 256]; MAX_INPUT]>,
}

impl Toeplitz {
    pub(crate) fn new(key: &[u8; KEY_LEN]) -> Self {
        let mut table = Box::new([[0u32; 256]; MAX_INPUT]);
        for (pos, row) in table.iter_mut().enumerate() {
            // The 32-bit key window that starts at each of this byte's 8 bit positions.
            let windows: [u32; 8] = std::array::from_fn(|bit| key_window(key, pos * 8 + bit));
            for (v, slot) in row.iter_mut().enumerate() {
                *slot = (0..8).filter(|bit| v & (0x80 >> bit) != 0).fold(0, |acc, bit| acc ^ windows[bit]);
            }
        }
        Toeplitz { table }
    }

    pub(crate) fn symmetric() -> Self {
        Self::new(&SYMMETRIC_KEY)
    }

    /// Hash up to 36 bytes of input; longer input is cut to 36.
    #[inline]
    pub(crate) fn hash(&self, input: &[u8]) -> u32 {
        input.iter().zip(self.table.iter()).fold(0, |h, (&b, row)| h ^ row[usize::from(b)])
    }

    /// Hash a flow tuple in NIC order: source address, destination address, then the
    /// source and destination ports when the packet carries reliable ones.
    #[inline]
    pub(crate) fn hash_tuple(&self, t: &FlowTuple) -> u32 {
        let mut buf = [0u8; MAX_INPUT];
        let len = match t {
            FlowTuple::V4 { src, dst, ports, .. } => {
                buf[..4].copy_from_slice(src);
                buf[4..8].copy_from_slice(dst);
                ports_into(&mut buf[8..12], *ports, 8)
            }
            FlowTuple::V6 { src, dst, ports, .. } => {
                buf[..16].copy_from_slice(src);
                buf[16..32].copy_from_slice(dst);
                ports_into(&mut buf[32..36], *ports, 32)
            }
        };
        self.hash(&buf[..len])
    }
}

fn ports_into(out: &mut [u8], ports: Option<crate::wire::L4Ports>, addr_len: usize) -> usize {
    match ports {
        Some(p) => {
            out[..2].copy_from_slice(&p.src.to_be_bytes());
            out[2..4].copy_from_slice(&p.dst.to_be_bytes());
            addr_len + 4
        }
        None => addr_len,
    }
}

/// The 32 key bits starting at bit `start` (bit 0 is the MSB of key[0]).
fn key_window(key: &[u8; KEY_LEN], start: usize) -> u32 {
    (0..32).fold(0u32, |w, i| {
        let bit = start + i;
        let set = bit < KEY_LEN * 8 && key[bit / 8] & (0x80 >> (bit % 8)) != 0;
        (w << 1) | u32::from(set)
    })
}

/// Buckets of an indirection table unless told otherwise, and of each queue's
/// table in the live sources' steering: `WEIR_BUCKETS` in `ebpf/weir_fanout.c`
/// is the same number.
pub const BUCKETS: usize = 512;

/// Number of hash buckets in an indirection table: a power of two, at least [`BUCKETS`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct BucketCount(usize);

impl BucketCount {
    pub(crate) const DEFAULT: BucketCount = BucketCount(BUCKETS);

    pub(crate) fn new(n: usize) -> Result<Self, SettingError> {
        if n < BUCKETS || !n.is_power_of_two() || n > 1 << 16 {
            return Err(SettingError::new(
                Setting::Queues,
                format!("indirection table size {n}: must be a power of two from {BUCKETS} to 65536"),
            ));
        }
        Ok(BucketCount(n))
    }

    pub(crate) fn get(self) -> usize {
        self.0
    }
}

/// Maps each hash bucket to a queue. Initially bucket `b` goes to queue `b mod n`.
///
/// [`Rss`] and the sources make one, and [`crate::balance`] moves buckets in
/// it between queues; only the crate can change or read one.
#[derive(Clone, Debug)]
pub(crate) struct IndirectionTable {
    queues: Box<[u16]>,
    mask: u32,
}

impl IndirectionTable {
    pub(crate) fn new(buckets: BucketCount, n_queues: u16) -> Self {
        assert!(n_queues > 0, "an indirection table needs at least one queue");
        let queues = (0..buckets.get()).map(|b| (b % usize::from(n_queues)) as u16).collect();
        IndirectionTable { queues, mask: (buckets.get() - 1) as u32 }
    }

    #[inline]
    pub(crate) fn bucket(&self, hash: u32) -> usize {
        (hash & self.mask) as usize
    }

    #[inline]
    pub(crate) fn queue_of_bucket(&self, bucket: usize) -> u16 {
        self.queues[bucket]
    }

    pub(crate) fn len(&self) -> usize {
        self.queues.len()
    }

    /// Point `bucket` at `queue`.
    pub(crate) fn assign(&mut self, bucket: usize, queue: u16) {
        self.queues[bucket] = queue;
    }
}

/// A NIC's RSS: the hash and the table, for a fixed link type.
pub struct Rss {
    toeplitz: Toeplitz,
    table: IndirectionTable,
    link: LinkType,
}

impl Rss {
    /// RSS over `n_queues` queues for frames of link type `link`, with the
    /// symmetric key and a table of [`BUCKETS`] buckets in its initial state.
    ///
    /// # Panics
    /// If `n_queues` is 0.
    pub fn new(link: LinkType, n_queues: u16) -> Self {
        Rss { toeplitz: Toeplitz::symmetric(), table: IndirectionTable::new(BucketCount::DEFAULT, n_queues), link }
    }

    /// The bucket of a frame, below [`BUCKETS`]: frames without a flow tuple
    /// land in bucket 0.
    #[inline]
    pub fn bucket(&self, frame: &[u8]) -> usize {
        self.flow_hash(frame).map_or(0, |h| self.table.bucket(h))
    }

    /// The symmetric hash of a frame's flow (both directions alike), or `None`
    /// for a frame without one.
    #[inline]
    pub(crate) fn flow_hash(&self, frame: &[u8]) -> Option<u32> {
        if let Some(h) = self.fast_hash(frame) {
            return Some(h);
        }
        FlowTuple::parse(self.link, frame).map(|t| self.toeplitz.hash_tuple(&t))
    }

    /// The common case without building a tuple: untagged Ethernet, IPv4 without
    /// options, TCP or UDP, not a fragment. The 12 input bytes (addresses, then
    /// ports) sit contiguously at offset 26 in such a frame, so they are hashed in
    /// place; `None` sends every other frame down the general path, which gives
    /// the same hash for this case (the tests hold the two to that).
    #[inline]
    fn fast_hash(&self, frame: &[u8]) -> Option<u32> {
        use crate::wire::{ethertype, field, ip_proto};
        const IP: usize = field::ethernet::HEADER_LEN;
        const TUPLE: std::ops::Range<usize> = IP + field::ipv4::SRC.start..IP + field::ipv4::MIN_HEADER_LEN + field::l4::PORTS_LEN;
        if self.link != LinkType::ETHERNET || frame.len() < TUPLE.end {
            return None;
        }
        let ether = u16::from_be_bytes([frame[12], frame[13]]);
        let proto = frame[IP + field::ipv4::PROTOCOL];
        let frag = u16::from_be_bytes([frame[IP + 6], frame[IP + 7]]) & field::ipv4::MF_AND_OFFSET_MASK;
        if ether != ethertype::IPV4 || frame[IP] != 0x45 || frag != 0 || !(proto == ip_proto::TCP || proto == ip_proto::UDP) {
            return None;
        }
        Some(self.toeplitz.hash(&frame[TUPLE]))
    }

    /// Whether the flow of `frame` is in `bucket`, a bucket rebalancing moves
    /// ([`Handler::export`](crate::Handler::export)): the steering's own hash,
    /// so the answer is the steering's.
    pub fn in_bucket(&self, frame: &[u8], bucket: &FlowBucket) -> bool {
        bucket.holds(self.flow_hash(frame).unwrap_or(0))
    }

    /// The queue of a frame: its bucket's, so both directions of a flow get
    /// the same one.
    #[inline]
    pub fn queue(&self, frame: &[u8]) -> QueueId {
        QueueId(self.table.queue_of_bucket(self.bucket(frame)))
    }

    pub(crate) fn table(&self) -> &IndirectionTable {
        &self.table
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::L4Ports;
    use proptest::prelude::*;

    /// The key of Microsoft's RSS verification suite.
    const MS_KEY: [u8; KEY_LEN] = [
        0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b,
        0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
    ];

    /// Source, source port, destination, destination port, hash with ports, hash without.
    type Vector = ([u8; 4], u16, [u8; 4], u16, u32, u32);

    /// Microsoft's published IPv4 verification vectors.
    const VECTORS: [Vector; 5] = [
        ([66, 9, 149, 187], 2794, [161, 142, 100, 80], 1766, 0x51ccc178, 0x323e8fc2),
        ([199, 92, 111, 2], 14230, [65, 69, 140, 83], 4739, 0xc626b0ea, 0xd718262a),
        ([24, 19, 198, 95], 12898, [12, 22, 207, 184], 38024, 0x5c2b394a, 0xd2d0a5de),
        ([38, 27, 205, 30], 48228, [209, 142, 163, 6], 2217, 0xafc7327f, 0x82989176),
        ([153, 39, 163, 191], 44251, [202, 188, 127, 2], 1303, 0x10e828a2, 0x5d1809c5),
    ];

    #[test]
    fn microsoft_verification_vectors() {
        let t = Toeplitz::new(&MS_KEY);
        for (src, sport, dst, dport, with, without) in VECTORS {
            let ports = Some(L4Ports { src: sport, dst: dport });
            assert_eq!(t.hash_tuple(&FlowTuple::V4 { src, dst, proto: 6, ports }), with, "{src:?}:{sport}");
            assert_eq!(t.hash_tuple(&FlowTuple::V4 { src, dst, proto: 6, ports: None }), without, "{src:?}");
        }
    }

    proptest! {
        #[test]
        fn symmetric_key_is_symmetric_v4(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16, has_ports: bool) {
            let t = Toeplitz::symmetric();
            let f = FlowTuple::V4 { src, dst, proto: 6, ports: has_ports.then_some(L4Ports { src: sp, dst: dp }) };
            prop_assert_eq!(t.hash_tuple(&f), t.hash_tuple(&f.reversed()));
        }

        #[test]
        fn symmetric_key_is_symmetric_v6(src: [u8; 16], dst: [u8; 16], sp: u16, dp: u16) {
            let t = Toeplitz::symmetric();
            let f = FlowTuple::V6 { src, dst, proto: 17, ports: Some(L4Ports { src: sp, dst: dp }) };
            prop_assert_eq!(t.hash_tuple(&f), t.hash_tuple(&f.reversed()));
        }

        #[test]
        fn table_lookup_equals_bitwise_definition(input in proptest::collection::vec(any::<u8>(), 0..36)) {
            let t = Toeplitz::new(&MS_KEY);
            // The textbook definition: for every set input bit, XOR in the key window at that bit.
            let mut naive = 0u32;
            for (i, byte) in input.iter().enumerate() {
                for bit in 0..8 {
                    if byte & (0x80 >> bit) != 0 {
                        naive ^= key_window(&MS_KEY, i * 8 + bit);
                    }
                }
            }
            prop_assert_eq!(t.hash(&input), naive);
        }
    }

    proptest! {
        /// The in-place fast path and the general path agree on every frame.
        #[test]
        fn fast_path_equals_general_path(
            src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16,
            proto in prop_oneof![Just(6u8), Just(17), Just(1), any::<u8>()],
            frag in prop_oneof![Just(0u16), Just(0x4000), any::<u16>()],
            ihl in prop_oneof![Just(0x45u8), Just(0x46)],
            cut in 0usize..60,
        ) {
            let mut f = vec![0u8; 12];
            f.extend_from_slice(&[0x08, 0x00, ihl, 0, 0, 60, 0, 0]);
            f.extend_from_slice(&frag.to_be_bytes());
            f.extend_from_slice(&[64, proto, 0, 0]);
            f.extend_from_slice(&src);
            f.extend_from_slice(&dst);
            if ihl == 0x46 {
                f.extend_from_slice(&[1, 1, 1, 0]);
            }
            f.extend_from_slice(&sp.to_be_bytes());
            f.extend_from_slice(&dp.to_be_bytes());
            f.resize(f.len() + 20, 0);
            f.truncate(f.len().saturating_sub(cut));
            let rss = Rss::new(LinkType::ETHERNET, 4);
            let general = FlowTuple::parse(LinkType::ETHERNET, &f)
                .map_or(0, |t| rss.table.bucket(rss.toeplitz.hash_tuple(&t)));
            prop_assert_eq!(rss.bucket(&f), general);
        }
    }

    #[test]
    fn indirection_table_spreads_and_validates() {
        assert!(BucketCount::new(256).is_err());
        assert!(BucketCount::new(1000).is_err());
        let t = IndirectionTable::new(BucketCount::DEFAULT, 3);
        let mut per_queue = [0; 3];
        for b in 0..t.len() {
            per_queue[usize::from(t.queue_of_bucket(b))] += 1;
        }
        assert_eq!(per_queue, [171, 171, 170]);
    }
}

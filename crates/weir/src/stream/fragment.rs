//! IPv4 and IPv6 fragment reassembly, before the stream layer looks for TCP.
//!
//! A `Defrag` takes IP packets in arrival order, one worker's share, and
//! gives back for each an `Outcome`: not a fragment (hand the packet on as
//! it is), held (a fragment was taken and its datagram is still missing
//! bytes), complete (this fragment finished its datagram, returned whole as
//! if it had never been fragmented), or failed (this fragment was dropped,
//! and why).
//!
//! # The contract
//!
//! Fragments belong to one datagram when they share the key RFC 791 and RFC
//! 8200 give: source, destination, protocol and 16-bit identification for
//! IPv4; source, destination and 32-bit identification for IPv6 (not the
//! next header: RFC 8200 lets it differ between fragments and takes the
//! offset-zero fragment's). The complete datagram is built from the
//! offset-zero fragment's header (IPv4, options included) or unfragmentable
//! part (IPv6: the fixed header and the hop-by-hop, routing and destination
//! options headers before the Fragment header), followed by the fragment
//! data. IPv4 gets its total length set, MF and the offset cleared (DF kept)
//! and its header checksum recomputed; IPv6 loses the Fragment header, the
//! header before it takes the Fragment header's next header, and the payload
//! length is set. An IPv6 atomic fragment (offset 0, M clear) is complete by
//! itself and never joins other fragments (RFC 6946).
//!
//! Overlapping fragments are treated by IP version.
//!
//! - **IPv6**: RFC 5722 (and RFC 8200 section 4.5) has a datagram with
//!   overlapping fragments discarded whole, since the two copies of a byte let
//!   a sender show a monitor other bytes than the host reassembles. A fragment
//!   that overlaps data already received drops its datagram with every
//!   fragment taken so far, counted as overlapping. The exception is a
//!   duplicate: a fragment that lies wholly inside data already received and
//!   carries the same bytes there (a copy the network made, which RFC 8200
//!   lets an implementation keep apart from overlaps) is taken, as a copy,
//!   and changes nothing. Linux (`inet_frag_queue_insert`, shared by IPv4 and
//!   IPv6) ignores a fragment inside a run received whatever its bytes, and
//!   drops the datagram on any other overlap; weir compares the bytes, so a
//!   copy that differs is an overlap. Fragments of the same key that arrive
//!   after the drop begin a new datagram, as in Linux.
//! - **IPv4**: RFC 791 does not forbid overlaps. They are resolved
//!   first-copy-wins, as the TCP reassembler resolves segments
//!   ([`super::reassembly::OverlapPolicy`]): a byte already held is kept,
//!   and a later fragment that carries different bytes there is still taken
//!   for its new bytes, and counted in `overlap_conflicts`. (Linux since 4.19
//!   drops such IPv4 datagrams as it drops IPv6 ones; a monitor that must see
//!   what one particular host would see has to know that host's policy.)
//!
//! Where a datagram ends is decided first-copy-wins for both: the first last
//! fragment (MF or M clear) fixes the end, and a later fragment that
//! contradicts it (another end, or bytes past it) is refused alone as
//! inconsistent, before any overlap is looked at.
//!
//! Header checksums are not verified, as the rest of weir's parsing
//! ([`crate::wire`]) does not verify them: traces and offloading NICs leave
//! them unset, and a monitor sees what the wire carried.
//!
//! # Limits
//!
//! A datagram waits at most [`FragLimits::timeout_ns`] in packet time from
//! its first fragment (as Linux's `ipfrag_time`, not refreshed by later
//! fragments). Packet time is the latest timestamp seen: a packet stamped
//! earlier than one before it neither ages nor rejuvenates anything. When
//! more than [`FragLimits::max_datagrams`] datagrams are pending, or they
//! hold more than [`FragLimits::max_bytes`], the oldest is dropped until the
//! rest fit. Oldest rather than newest because a datagram normally completes
//! within a few packets: the oldest pending one is the most likely to have
//! lost a fragment for good, and refusing new datagrams instead would let a
//! burst of never-completed ones stop all reassembly for a whole timeout.
//! Bytes held count what each pending datagram has allocated: its kept
//! header and its data buffer from offset 0 to the furthest byte seen,
//! holes included. Its list of received ranges is not counted: as every
//! range and every hole but the last is at least 8 bytes, the list holds at
//! most one 16-byte range per 16 bytes of the span, so at worst (a datagram
//! cut into 8-byte fragments, every other one missing) it doubles what the
//! datagram really takes.
//!
//! # Counting
//!
//! Every fragment pushed (every packet that is not `Outcome::NotFragment`)
//! is counted in exactly one of: the fragments of reassembled datagrams, the
//! fragments held now, the fragments dropped with their datagram (timed out,
//! evicted for too many pending, evicted for memory, too big, overlapping), or
//! the fragments refused alone (malformed, inconsistent). So
//!
//! ```text
//! fragments = fragments_reassembled + fragments_held
//!           + fragments_timed_out + fragments_evicted + fragments_over_memory + fragments_too_big
//!           + fragments_overlapping + malformed + inconsistent
//! ```
//!
//! and likewise every datagram begun is reassembled, held, or dropped for
//! one of those five reasons. Both are checked after every call in debug
//! builds.

// Written by hand for weir, not adapted from another defragmenter. Offsets
// into headers are named once, below; each packet's lengths are checked once
// in `parse`, and everything after works on slices whose lengths are known.

use std::collections::{HashMap, VecDeque};
use std::fmt;

/// Where the fields are, and the sizes the protocols fix.
mod layout {
    /// The largest datagram an IPv4 total length or an IPv6 payload length
    /// (plus the fixed header's 40 bytes) can describe.
    pub(super) const MAX_LEN: usize = 65535;

    pub(super) mod v4 {
        use std::ops::Range;
        pub(crate) const VERSION_IHL: usize = 0;
        pub(crate) const TOTAL_LEN: Range<usize> = 2..4;
        pub(crate) const ID: Range<usize> = 4..6;
        pub(crate) const FLAGS_OFFSET: Range<usize> = 6..8;
        pub(crate) const PROTOCOL: usize = 9;
        pub(crate) const CHECKSUM: Range<usize> = 10..12;
        pub(crate) const SRC: Range<usize> = 12..16;
        pub(crate) const DST: Range<usize> = 16..20;
        pub(crate) const MIN_HEADER: usize = 20;
        /// More fragments.
        pub(crate) const MF: u16 = 0x2000;
        /// The fragment offset, in units of 8 bytes.
        pub(crate) const OFFSET: u16 = 0x1fff;
    }

    pub(super) mod v6 {
        use std::ops::Range;
        pub(crate) const PAYLOAD_LEN: Range<usize> = 4..6;
        pub(crate) const NEXT_HEADER: usize = 6;
        pub(crate) const SRC: Range<usize> = 8..24;
        pub(crate) const DST: Range<usize> = 24..40;
        pub(crate) const HEADER: usize = 40;
        pub(crate) const HOP_BY_HOP: u8 = 0;
        pub(crate) const ROUTING: u8 = 43;
        pub(crate) const FRAGMENT: u8 = 44;
        pub(crate) const DESTINATION_OPTIONS: u8 = 60;
        /// In an extension header: its next header, and its length in units
        /// of 8 bytes not counting the first 8.
        pub(crate) const EXT_NEXT: usize = 0;
        pub(crate) const EXT_LEN: usize = 1;
        /// The Fragment header: next header, reserved, offset and M, identification.
        pub(crate) const FRAG_HEADER: usize = 8;
        pub(crate) const FRAG_NEXT: usize = 0;
        pub(crate) const FRAG_OFFSET_M: Range<usize> = 2..4;
        pub(crate) const FRAG_ID: Range<usize> = 4..8;
        /// The offset in bytes (its 13 bits already sit in units of 8).
        pub(crate) const OFFSET: u16 = 0xfff8;
        pub(crate) const M: u16 = 0x0001;
    }
}

use layout::{v4, v6, MAX_LEN};

/// How much a `Defrag` may hold.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FragLimits {
    /// Datagrams pending at once; past it the oldest is dropped. 0 holds none.
    pub max_datagrams: usize,
    /// Bytes pending datagrams may hold; past it the oldest is dropped.
    pub max_bytes: u64,
    /// How long a datagram waits for its missing fragments, in packet time
    /// from its first fragment.
    pub timeout_ns: u64,
}

impl Default for FragLimits {
    /// 4096 datagrams, 16 MiB, 30 s (Linux's `ipfrag_time`).
    fn default() -> FragLimits {
        FragLimits { max_datagrams: 4096, max_bytes: 16 << 20, timeout_ns: 30_000_000_000 }
    }
}

/// What became of one packet.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome<'a> {
    /// Not a fragment: hand the packet on unchanged. Packets too short for
    /// their fixed header, of another IP version, or whose extension headers
    /// end before a Fragment header could be found are here too: their
    /// faults are for the layer that parses them.
    NotFragment,
    /// The fragment was taken; its datagram is still incomplete.
    Held,
    /// The fragment completed its datagram: the whole datagram, from its IP
    /// header, as if it had never been fragmented. Valid until the next call.
    Complete(&'a [u8]),
    /// The fragment was dropped (alone, or with its datagram).
    Failed(FragFailure),
}

/// Why a fragment was dropped.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum FragFailure {
    /// The fragment itself is not well formed; dropped alone.
    Malformed(Malformed),
    /// The fragment contradicts where its datagram ends; dropped alone, the
    /// first copy of the end wins.
    Inconsistent,
    /// The datagram would be longer than an IP length field can say; it is
    /// dropped with all its fragments.
    TooBig,
    /// An IPv6 fragment overlaps data its datagram already holds, other than
    /// as a duplicate; the datagram is dropped with all its fragments (RFC 5722).
    Overlap,
    /// Its datagram was the oldest when too many were pending (only when the
    /// limit is 0, as a new datagram is never the oldest).
    TooManyPending,
    /// Its datagram was the oldest when the bytes held passed their limit.
    MemoryLimit,
}

/// What is wrong with a malformed fragment.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Malformed {
    /// IPv4 header length below 20 bytes or past the total length.
    HeaderLength,
    /// The capture ends before the length the header declares: the
    /// fragment's data is not all there.
    Truncated,
    /// A fragment other than the last whose data is empty or not a multiple
    /// of 8 bytes, so that the next fragment's offset cannot follow it.
    NotMultipleOf8,
}

impl fmt::Display for FragFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FragFailure::Malformed(Malformed::HeaderLength) => f.write_str("malformed fragment: bad header length"),
            FragFailure::Malformed(Malformed::Truncated) => f.write_str("malformed fragment: truncated capture"),
            FragFailure::Malformed(Malformed::NotMultipleOf8) => f.write_str("malformed fragment: not the last, not a multiple of 8 bytes"),
            FragFailure::Inconsistent => f.write_str("fragment contradicts its datagram's end"),
            FragFailure::TooBig => f.write_str("reassembled datagram longer than 65535 bytes"),
            FragFailure::Overlap => f.write_str("overlapping IPv6 fragments: datagram dropped (RFC 5722)"),
            FragFailure::TooManyPending => f.write_str("too many datagrams pending"),
            FragFailure::MemoryLimit => f.write_str("fragment memory limit reached"),
        }
    }
}

impl std::error::Error for FragFailure {}

/// Where every fragment went; see the module doc for the identities.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct FragCounters {
    /// Packets found to be fragments (atomic ones included).
    pub fragments: u64,
    /// Datagrams begun: by their first fragment to arrive, or an atomic one.
    pub datagrams: u64,
    /// Datagrams returned complete.
    pub datagrams_reassembled: u64,
    /// The fragments taken into them, duplicates included.
    pub fragments_reassembled: u64,
    /// Datagrams pending now.
    pub datagrams_held: u64,
    /// Fragments taken into pending datagrams.
    pub fragments_held: u64,
    /// Bytes pending datagrams hold now (see the module doc).
    pub bytes_held: u64,
    /// Datagrams dropped incomplete at their timeout.
    pub datagrams_timed_out: u64,
    /// The fragments lost with them.
    pub fragments_timed_out: u64,
    /// Datagrams dropped as the oldest when too many were pending.
    pub datagrams_evicted: u64,
    /// The fragments lost with them.
    pub fragments_evicted: u64,
    /// Datagrams dropped as the oldest when the bytes held passed the limit.
    pub datagrams_over_memory: u64,
    /// The fragments lost with them.
    pub fragments_over_memory: u64,
    /// Datagrams dropped for being longer than 65535 bytes.
    pub datagrams_too_big: u64,
    /// The fragments lost with them.
    pub fragments_too_big: u64,
    /// IPv6 datagrams dropped because a fragment overlapped data already
    /// received, other than as a duplicate (RFC 5722).
    pub datagrams_overlapping: u64,
    /// The fragments lost with them, the overlapping one included.
    pub fragments_overlapping: u64,
    /// Fragments refused alone as malformed.
    pub malformed: u64,
    /// Fragments refused alone for contradicting their datagram's end.
    pub inconsistent: u64,
    /// Fragments taken whose overlap with bytes already held carried other
    /// bytes (the held ones were kept).
    pub overlap_conflicts: u64,
}

impl FragCounters {
    /// Fragments in some category: equal to `fragments` (the first identity).
    pub fn fragments_accounted(&self) -> u64 {
        self.fragments_reassembled
            + self.fragments_held
            + self.fragments_timed_out
            + self.fragments_evicted
            + self.fragments_over_memory
            + self.fragments_too_big
            + self.fragments_overlapping
            + self.malformed
            + self.inconsistent
    }

    /// Datagrams in some category: equal to `datagrams` (the second identity).
    pub fn datagrams_accounted(&self) -> u64 {
        self.datagrams_reassembled
            + self.datagrams_held
            + self.datagrams_timed_out
            + self.datagrams_evicted
            + self.datagrams_over_memory
            + self.datagrams_too_big
            + self.datagrams_overlapping
    }

    /// Adds another reassembler's counts.
    pub fn add(&mut self, o: &FragCounters) {
        self.fragments += o.fragments;
        self.datagrams += o.datagrams;
        self.datagrams_reassembled += o.datagrams_reassembled;
        self.fragments_reassembled += o.fragments_reassembled;
        self.datagrams_held += o.datagrams_held;
        self.fragments_held += o.fragments_held;
        self.bytes_held += o.bytes_held;
        self.datagrams_timed_out += o.datagrams_timed_out;
        self.fragments_timed_out += o.fragments_timed_out;
        self.datagrams_evicted += o.datagrams_evicted;
        self.fragments_evicted += o.fragments_evicted;
        self.datagrams_over_memory += o.datagrams_over_memory;
        self.fragments_over_memory += o.fragments_over_memory;
        self.datagrams_too_big += o.datagrams_too_big;
        self.fragments_too_big += o.fragments_too_big;
        self.datagrams_overlapping += o.datagrams_overlapping;
        self.fragments_overlapping += o.fragments_overlapping;
        self.malformed += o.malformed;
        self.inconsistent += o.inconsistent;
        self.overlap_conflicts += o.overlap_conflicts;
    }
}

/// What identifies a datagram's fragments.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    V4 { src: [u8; 4], dst: [u8; 4], protocol: u8, id: u16 },
    V6 { src: [u8; 16], dst: [u8; 16], id: u32 },
}

/// One fragment, its lengths checked.
struct Fragment<'p> {
    key: Key,
    /// The IPv4 header, or the IPv6 unfragmentable part.
    header: &'p [u8],
    /// IPv6: the next header the header before the Fragment header takes,
    /// and where in `header` that byte is.
    next_header: Option<(usize, u8)>,
    /// Where the data goes in the datagram, in bytes.
    offset: usize,
    more: bool,
    data: &'p [u8],
}

/// A packet, read as far as reassembly needs.
enum Parsed<'p> {
    NotFragment,
    Malformed(Malformed),
    Fragment(Fragment<'p>),
}

fn be16(buf: &[u8], at: std::ops::Range<usize>) -> u16 {
    u16::from_be_bytes([buf[at.start], buf[at.start + 1]])
}

fn parse(ip: &[u8]) -> Parsed<'_> {
    match ip.first().map(|b| b >> 4) {
        Some(4) if ip.len() >= v4::MIN_HEADER => parse_v4(ip),
        Some(6) if ip.len() >= v6::HEADER => parse_v6(ip),
        _ => Parsed::NotFragment,
    }
}

/// `ip` holds at least the 20-byte fixed header.
fn parse_v4(ip: &[u8]) -> Parsed<'_> {
    let flags_offset = be16(ip, v4::FLAGS_OFFSET);
    let more = flags_offset & v4::MF != 0;
    let offset = usize::from(flags_offset & v4::OFFSET) * 8;
    if !more && offset == 0 {
        return Parsed::NotFragment;
    }
    let header_len = usize::from(ip[v4::VERSION_IHL] & 0x0f) * 4;
    let total = usize::from(be16(ip, v4::TOTAL_LEN));
    if header_len < v4::MIN_HEADER || header_len > total {
        return Parsed::Malformed(Malformed::HeaderLength);
    }
    if ip.len() < total {
        return Parsed::Malformed(Malformed::Truncated);
    }
    // Bytes past the total length are link-layer padding, not data.
    let data = &ip[header_len..total];
    if more && (data.is_empty() || data.len() % 8 != 0) {
        return Parsed::Malformed(Malformed::NotMultipleOf8);
    }
    let addr = |r: std::ops::Range<usize>| [ip[r.start], ip[r.start + 1], ip[r.start + 2], ip[r.start + 3]];
    let key = Key::V4 { src: addr(v4::SRC), dst: addr(v4::DST), protocol: ip[v4::PROTOCOL], id: be16(ip, v4::ID) };
    Parsed::Fragment(Fragment { key, header: &ip[..header_len], next_header: None, offset, more, data })
}

/// `ip` holds at least the 40-byte fixed header.
fn parse_v6(ip: &[u8]) -> Parsed<'_> {
    let declared = v6::HEADER + usize::from(be16(ip, v6::PAYLOAD_LEN));
    // The Fragment header must lie within both the capture and the packet;
    // a header chain that leaves either first says nothing about fragments.
    let bound = declared.min(ip.len());
    let mut next = ip[v6::NEXT_HEADER];
    let mut next_at = v6::NEXT_HEADER;
    let mut at = v6::HEADER;
    loop {
        match next {
            v6::HOP_BY_HOP | v6::ROUTING | v6::DESTINATION_OPTIONS => {
                if at + 8 > bound {
                    return Parsed::NotFragment;
                }
                next_at = at + v6::EXT_NEXT;
                next = ip[next_at];
                at += (usize::from(ip[at + v6::EXT_LEN]) + 1) * 8;
            }
            v6::FRAGMENT if at + v6::FRAG_HEADER <= bound => break,
            _ => return Parsed::NotFragment,
        }
    }
    if ip.len() < declared {
        return Parsed::Malformed(Malformed::Truncated);
    }
    let frag = &ip[at..at + v6::FRAG_HEADER];
    let offset_m = be16(frag, v6::FRAG_OFFSET_M);
    let more = offset_m & v6::M != 0;
    let data = &ip[at + v6::FRAG_HEADER..declared];
    if more && (data.is_empty() || data.len() % 8 != 0) {
        return Parsed::Malformed(Malformed::NotMultipleOf8);
    }
    let mut id = [0; 4];
    id.copy_from_slice(&frag[v6::FRAG_ID]);
    let mut src = [0; 16];
    let mut dst = [0; 16];
    src.copy_from_slice(&ip[v6::SRC]);
    dst.copy_from_slice(&ip[v6::DST]);
    Parsed::Fragment(Fragment {
        key: Key::V6 { src, dst, id: u32::from_be_bytes(id) },
        header: &ip[..at],
        next_header: Some((next_at, frag[v6::FRAG_NEXT])),
        offset: usize::from(offset_m & v6::OFFSET),
        more,
        data,
    })
}

/// A datagram waiting for fragments. Its buffers come from, and go back to,
/// the `Defrag`'s spares.
#[derive(Debug, Default)]
struct Pending {
    /// Its place in the age order.
    serial: u64,
    /// Packet time of its first fragment.
    created_ns: u64,
    /// Fragments taken.
    fragments: u64,
    /// Their IP lengths, as stated in their headers, added up.
    ip_bytes: u64,
    /// The data, by offset, up to the furthest byte seen; holes are zeros.
    data: Vec<u8>,
    /// The ranges of `data` received: sorted, none touching another.
    ranges: Vec<(usize, usize)>,
    /// Bytes in `ranges`.
    received: usize,
    /// The data's length, once a last fragment said it.
    end: Option<usize>,
    /// The offset-zero fragment's header or unfragmentable part; empty until it came.
    header: Vec<u8>,
    /// IPv6: the byte of `header` to set, and to what.
    next_header: Option<(usize, u8)>,
}

impl Pending {
    fn bytes(&self) -> u64 {
        (self.data.len() + self.header.len()) as u64
    }

    /// Copies the bytes of `data` at `offset` that no earlier fragment
    /// brought, and says whether the ones it did bring differ.
    fn insert(&mut self, offset: usize, data: &[u8]) -> bool {
        if data.is_empty() {
            // An empty last fragment says where the end is, and brings no range.
            return false;
        }
        let (lo, hi) = (offset, offset + data.len());
        if self.data.len() < hi {
            self.data.resize(hi, 0);
        }
        let mut conflict = false;
        // The ranges that overlap or touch [lo, hi) are merged with it.
        let first = self.ranges.partition_point(|&(_, e)| e < lo);
        let mut last = first;
        let (mut merged_lo, mut merged_hi) = (lo, hi);
        let mut at = lo;
        while let Some(&(s, e)) = self.ranges.get(last).filter(|&&(s, _)| s <= hi) {
            if s > at {
                self.data[at..s].copy_from_slice(&data[at - lo..s - lo]);
                self.received += s - at;
            }
            let (ov_lo, ov_hi) = (s.max(lo), e.min(hi));
            if ov_lo < ov_hi && self.data[ov_lo..ov_hi] != data[ov_lo - lo..ov_hi - lo] {
                conflict = true;
            }
            at = at.max(ov_hi);
            merged_lo = merged_lo.min(s);
            merged_hi = merged_hi.max(e);
            last += 1;
        }
        if at < hi {
            self.data[at..hi].copy_from_slice(&data[at - lo..]);
            self.received += hi - at;
        }
        if last == first {
            self.ranges.insert(first, (merged_lo, merged_hi));
        } else {
            self.ranges[first] = (merged_lo, merged_hi);
            self.ranges.drain(first + 1..last);
        }
        conflict
    }

    /// Whether `data` at `offset` overlaps the bytes received other than as
    /// a copy of them: a copy lies wholly inside one received range (ranges
    /// never touch) and carries the same bytes there.
    fn overlaps(&self, offset: usize, data: &[u8]) -> bool {
        let (lo, hi) = (offset, offset + data.len());
        // The first range that ends after `lo`: the only one that can hold [lo, hi).
        let first = self.ranges.partition_point(|&(_, e)| e <= lo);
        match self.ranges.get(first) {
            Some(&(s, e)) if s < hi => !(s <= lo && hi <= e && self.data[lo..hi] == *data),
            _ => false,
        }
    }

    fn is_complete(&self) -> bool {
        !self.header.is_empty() && self.end == Some(self.received)
    }
}

/// Why a pending datagram is dropped.
#[derive(Copy, Clone)]
enum Loss {
    Timeout,
    TooMany,
    Memory,
    TooBig,
    Overlap,
}

/// Buffers kept for reuse: enough for a burst of datagrams pending at once,
/// few enough that their memory (up to 64 KiB each) stays small.
const SPARES: usize = 32;

/// Reassembles the IPv4 and IPv6 fragments of one worker's packets.
#[derive(Debug)]
pub(crate) struct Defrag {
    limits: FragLimits,
    pending: HashMap<Key, Pending>,
    /// Pending datagrams oldest first, as (serial, key). A datagram that
    /// left other than from the front leaves its entry behind, recognised by
    /// its serial and skipped; the queue is compacted when such entries pile
    /// up behind a long-pending one.
    order: VecDeque<(u64, Key)>,
    next_serial: u64,
    /// The latest packet time seen.
    clock: u64,
    spares: Vec<Pending>,
    /// The last datagram completed.
    out: Vec<u8>,
    /// What the fragments of the last datagram completed were.
    whole: Whole,
    counters: FragCounters,
}

/// The fragments a completed datagram was rebuilt from, for flow records,
/// which count packets and IP bytes as they were on the wire.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Whole {
    /// Fragments taken into it (each copy of a fragment sent twice counts).
    pub(crate) fragments: u64,
    /// Their IP lengths as their headers state them, added up.
    pub(crate) ip_bytes: u64,
    /// Packet time of its first fragment (the latest time seen then).
    pub(crate) first_ns: u64,
}

impl Defrag {
    /// A defragmenter holding nothing.
    pub(crate) fn new(limits: FragLimits) -> Defrag {
        Defrag {
            limits,
            pending: HashMap::new(),
            order: VecDeque::new(),
            next_serial: 0,
            clock: 0,
            spares: Vec::new(),
            out: Vec::new(),
            whole: Whole::default(),
            counters: FragCounters::default(),
        }
    }

    /// The fragments of the datagram the last [`Outcome::Complete`] handed out.
    pub(crate) fn whole(&self) -> Whole {
        self.whole
    }

    /// Where every fragment went so far.
    pub(crate) fn counters(&self) -> FragCounters {
        self.counters
    }

    /// Takes one packet: `ip` from the first byte of its IPv4 or IPv6 header
    /// (the caller has looked through Ethernet and VLAN tags), cut to the
    /// capture length; `ts_ns` its packet time. Expires what has timed out
    /// first.
    pub(crate) fn push<'a>(&'a mut self, ts_ns: u64, ip: &'a [u8]) -> Outcome<'a> {
        self.expire(ts_ns);
        let outcome = match parse(ip) {
            Parsed::NotFragment => Outcome::NotFragment,
            Parsed::Malformed(why) => {
                self.counters.fragments += 1;
                self.counters.malformed += 1;
                Outcome::Failed(FragFailure::Malformed(why))
            }
            Parsed::Fragment(fragment) => {
                self.counters.fragments += 1;
                match self.take(fragment, stated_len(ip)) {
                    Ok(true) => {
                        self.check();
                        return Outcome::Complete(&self.out);
                    }
                    Ok(false) => Outcome::Held,
                    Err(failure) => Outcome::Failed(failure),
                }
            }
        };
        self.check();
        outcome
    }

    /// Drops the pending datagrams whose first fragment is older than the
    /// timeout at packet time `now_ns` (or the latest time seen, if later).
    pub(crate) fn expire(&mut self, now_ns: u64) {
        self.clock = self.clock.max(now_ns);
        while let Some(key) = self.oldest() {
            let created = self.pending[&key].created_ns;
            if self.clock - created <= self.limits.timeout_ns {
                break;
            }
            self.drop_pending(key, Loss::Timeout);
        }
        self.check();
    }

    /// Takes a fragment into its datagram; true when that completed it, the
    /// datagram then in `out`.
    fn take(&mut self, f: Fragment<'_>, ip_len: u64) -> Result<bool, FragFailure> {
        if f.offset == 0 && !f.more {
            self.whole = Whole { fragments: 1, ip_bytes: ip_len, first_ns: self.clock };
            // An IPv6 atomic fragment (IPv4 has none: offset 0 without MF is
            // not a fragment): a datagram by itself, whatever is pending.
            self.counters.datagrams += 1;
            self.counters.datagrams_reassembled += 1;
            self.counters.fragments_reassembled += 1;
            self.build(f.header, f.next_header, f.data);
            return Ok(true);
        }
        let hi = f.offset + f.data.len();
        if let Some(p) = self.pending.get(&f.key) {
            let contradicts = match p.end {
                Some(end) => hi > end || (!f.more && hi != end),
                None => !f.more && p.data.len() > hi,
            };
            if contradicts {
                self.counters.inconsistent += 1;
                return Err(FragFailure::Inconsistent);
            }
        } else {
            let mut p = self.spares.pop().unwrap_or_default();
            p.serial = self.next_serial;
            p.created_ns = self.clock;
            self.next_serial += 1;
            self.order.push_back((p.serial, f.key));
            self.pending.insert(f.key, p);
            self.counters.datagrams += 1;
            self.counters.datagrams_held += 1;
        }
        let p = self.pending.get_mut(&f.key).expect("inserted above");
        p.fragments += 1;
        p.ip_bytes += ip_len;
        self.counters.fragments_held += 1;
        let is_first = f.offset == 0 && p.header.is_empty();
        // Bytes the datagram's length counts besides its data: the IPv4
        // header (20 at least, until the first fragment says), or the IPv6
        // extension headers before the Fragment header.
        let header_len = if is_first { f.header.len() } else { p.header.len() };
        let overhead = match f.key {
            Key::V4 { .. } => header_len.max(v4::MIN_HEADER),
            Key::V6 { .. } => header_len.saturating_sub(v6::HEADER),
        };
        let extent = hi.max(p.data.len()).max(p.end.unwrap_or(0));
        if overhead + extent > MAX_LEN {
            self.drop_pending(f.key, Loss::TooBig);
            return Err(FragFailure::TooBig);
        }
        if matches!(f.key, Key::V6 { .. }) && p.overlaps(f.offset, f.data) {
            self.drop_pending(f.key, Loss::Overlap);
            return Err(FragFailure::Overlap);
        }
        let before = p.bytes();
        if p.insert(f.offset, f.data) {
            self.counters.overlap_conflicts += 1;
        }
        if is_first {
            p.header.extend_from_slice(f.header);
            p.next_header = f.next_header;
        }
        if !f.more {
            p.end = Some(hi);
        }
        self.counters.bytes_held += p.bytes() - before;
        if p.is_complete() {
            let p = self.remove(f.key);
            self.counters.datagrams_reassembled += 1;
            self.counters.fragments_reassembled += p.fragments;
            debug_assert_eq!(p.ranges, [(0, p.received)], "a complete datagram with a hole");
            self.whole = Whole { fragments: p.fragments, ip_bytes: p.ip_bytes, first_ns: p.created_ns };
            self.build(&p.header, p.next_header, &p.data[..p.received]);
            self.recycle(p);
            return Ok(true);
        }
        self.enforce_limits(f.key)?;
        Ok(false)
    }

    /// Drops the oldest datagrams until the rest fit the limits; fails if
    /// `own`, the datagram just added to, was one of them.
    fn enforce_limits(&mut self, own: Key) -> Result<(), FragFailure> {
        let mut failure = Ok(());
        loop {
            let (why, reason) = if self.pending.len() > self.limits.max_datagrams {
                (Loss::TooMany, FragFailure::TooManyPending)
            } else if self.counters.bytes_held > self.limits.max_bytes {
                (Loss::Memory, FragFailure::MemoryLimit)
            } else {
                return failure;
            };
            let key = self.oldest().expect("over a limit with nothing pending");
            if key == own {
                failure = Err(reason);
            }
            self.drop_pending(key, why);
        }
    }

    /// The key of the oldest pending datagram, skipping the entries of
    /// those gone.
    fn oldest(&mut self) -> Option<Key> {
        while let Some(&(serial, key)) = self.order.front() {
            if self.pending.get(&key).is_some_and(|p| p.serial == serial) {
                return Some(key);
            }
            self.order.pop_front();
        }
        None
    }

    fn drop_pending(&mut self, key: Key, why: Loss) {
        let p = self.remove(key);
        let c = &mut self.counters;
        let (datagrams, fragments) = match why {
            Loss::Timeout => (&mut c.datagrams_timed_out, &mut c.fragments_timed_out),
            Loss::TooMany => (&mut c.datagrams_evicted, &mut c.fragments_evicted),
            Loss::Memory => (&mut c.datagrams_over_memory, &mut c.fragments_over_memory),
            Loss::TooBig => (&mut c.datagrams_too_big, &mut c.fragments_too_big),
            Loss::Overlap => (&mut c.datagrams_overlapping, &mut c.fragments_overlapping),
        };
        *datagrams += 1;
        *fragments += p.fragments;
        self.recycle(p);
    }

    /// Takes a datagram out of the pending ones and their counts.
    fn remove(&mut self, key: Key) -> Pending {
        let p = self.pending.remove(&key).expect("removing a datagram that is not pending");
        self.counters.datagrams_held -= 1;
        self.counters.fragments_held -= p.fragments;
        self.counters.bytes_held -= p.bytes();
        // Entries of datagrams gone pile up behind a long-pending one; drop
        // them once they outnumber the live ones, which keeps this amortised
        // constant time.
        if self.order.len() > 2 * self.pending.len() + SPARES {
            let pending = &self.pending;
            self.order.retain(|(serial, key)| pending.get(key).is_some_and(|p| p.serial == *serial));
        }
        p
    }

    fn recycle(&mut self, mut p: Pending) {
        if self.spares.len() < SPARES {
            p.fragments = 0;
            p.ip_bytes = 0;
            p.data.clear();
            p.ranges.clear();
            p.received = 0;
            p.end = None;
            p.header.clear();
            p.next_header = None;
            self.spares.push(p);
        }
    }

    /// Writes the whole datagram into `out`: `header` (IPv4) or the
    /// unfragmentable part (IPv6, with `next_header` set), then `data`.
    fn build(&mut self, header: &[u8], next_header: Option<(usize, u8)>, data: &[u8]) {
        let out = &mut self.out;
        out.clear();
        out.extend_from_slice(header);
        out.extend_from_slice(data);
        debug_assert!(out.len() <= MAX_LEN + usize::from(next_header.is_some()) * v6::HEADER, "a datagram too long");
        match next_header {
            Some((at, next)) => {
                out[at] = next;
                let payload = (out.len() - v6::HEADER) as u16;
                out[v6::PAYLOAD_LEN].copy_from_slice(&payload.to_be_bytes());
            }
            None => {
                let total = out.len() as u16;
                out[v4::TOTAL_LEN].copy_from_slice(&total.to_be_bytes());
                let flags = be16(out, v4::FLAGS_OFFSET) & !(v4::MF | v4::OFFSET);
                out[v4::FLAGS_OFFSET].copy_from_slice(&flags.to_be_bytes());
                out[v4::CHECKSUM].fill(0);
                let checksum = ipv4_checksum(&out[..header.len()]);
                out[v4::CHECKSUM].copy_from_slice(&checksum.to_be_bytes());
            }
        }
    }

    /// The invariants, checked in debug builds after every public call.
    fn check(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        let c = &self.counters;
        debug_assert_eq!(c.fragments, c.fragments_accounted(), "a fragment in no category: {c:?}");
        debug_assert_eq!(c.datagrams, c.datagrams_accounted(), "a datagram in no category: {c:?}");
        debug_assert_eq!(c.datagrams_held, self.pending.len() as u64, "the held datagrams counter is not what is held");
        debug_assert_eq!(c.fragments_held, self.pending.values().map(|p| p.fragments).sum::<u64>(), "the held fragments counter");
        debug_assert_eq!(c.bytes_held, self.pending.values().map(Pending::bytes).sum::<u64>(), "the held bytes counter");
        debug_assert!(self.pending.len() <= self.limits.max_datagrams, "more datagrams pending than the limit");
        debug_assert!(c.bytes_held <= self.limits.max_bytes, "more bytes held than the limit");
        for p in self.pending.values() {
            debug_assert!(!p.is_complete(), "a complete datagram left pending");
            debug_assert!(p.ranges.iter().all(|(s, e)| s < e), "an empty received range");
            debug_assert!(p.ranges.windows(2).all(|w| w[0].1 < w[1].0), "received ranges overlap, touch or are out of order");
            debug_assert_eq!(p.received, p.ranges.iter().map(|(s, e)| e - s).sum::<usize>(), "received is not the ranges' bytes");
            debug_assert!(p.end.is_none_or(|end| p.data.len() <= end), "data past the end");
            debug_assert!(self.clock - p.created_ns <= self.limits.timeout_ns, "a datagram kept past its timeout");
        }
    }
}

/// The IPv4 header checksum (RFC 791, RFC 1071) of `header`, its checksum
/// field zero.
fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header.chunks_exact(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A fragment's IP length as its header states it (IPv4's total length,
/// IPv6's 40 bytes and payload length), however much of it was captured;
/// `ip` holds a whole fixed header (parsing it found a fragment).
fn stated_len(ip: &[u8]) -> u64 {
    let be16 = |r: std::ops::Range<usize>| u64::from(u16::from_be_bytes([ip[r.start], ip[r.start + 1]]));
    if ip[v4::VERSION_IHL] >> 4 == 4 {
        be16(v4::TOTAL_LEN)
    } else {
        v6::HEADER as u64 + be16(v6::PAYLOAD_LEN)
    }
}

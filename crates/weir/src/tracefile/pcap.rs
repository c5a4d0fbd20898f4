//! Legacy pcap: a 24-byte file header, then packet records back to back.
//!
//! Accepts exactly what libpcap 1.10.3 accepts: the micro- and nanosecond
//! magics and Kuznetzov's patched format, in either byte order; versions 2.0 to
//! 2.4 and DG/UX's 543.0, with the captured and wire lengths swapped where those
//! versions wrote them swapped. A record whose captured length exceeds the
//! snapshot length (but not the link type's maximum) is cut to the snapshot
//! length and its surplus skipped, as libpcap does.
//!
//! The per-record path is a length check, four loads and a few compares.

use super::error::{FormatError, FormatErrorKind, Item};
use super::fields::{ByteOrder, Fixed};
use super::linktype::{dlt_of, effective_snapshot, max_snaplen};
use super::{Opening, Record, Step, TraceHeader, TraceKind, MAX_CAPLEN, NS_PER_SEC};
use crate::LinkType;

/// Magic numbers as read in the file's own byte order.
const MAGIC_MICRO: u32 = 0xA1B2_C3D4;
const MAGIC_NANO: u32 = 0xA1B2_3C4D;
/// Alexey Kuznetzov's patched libpcap: microseconds, longer record headers.
const MAGIC_KUZNETZOV: u32 = 0xA1B2_CD34;

/// File header layout.
pub(super) const FILE_HEADER_LEN: usize = 24;
const VERSION_MAJOR: usize = 4;
const VERSION_MINOR: usize = 6;
const SNAPLEN: usize = 16;
const LINKTYPE: usize = 20;
/// The upper six bits of the link type field carry FCS information, not the type.
const LINKTYPE_MASK: u32 = 0x03FF_FFFF;

/// Record header layout: the fields every variant shares.
const RECORD_HEADER_LEN: usize = 16;
/// Kuznetzov's records add an interface index, protocol and packet type.
const KUZNETZOV_RECORD_HEADER_LEN: usize = 24;
const TS_SEC: usize = 0;
const TS_FRAC: usize = 4;
const CAPLEN: usize = 8;
const WIRE_LEN: usize = 12;

const DLT_EN10MB: u32 = 1;

/// How a version stores the captured and wire lengths.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum LengthOrder {
    /// Captured length first, as since 2.3.
    Normal,
    /// Before 2.3 (and DG/UX 543.0) the two were the other way round.
    Swapped,
    /// Some 2.3 writers kept the old order; a captured length above the wire
    /// length gives them away.
    Guess,
}

/// The first four bytes name a pcap file: its byte order and timestamp unit.
#[derive(Copy, Clone, Debug)]
pub(super) struct Magic {
    order: ByteOrder,
    nanosecond: bool,
    kuznetzov: bool,
}

impl Magic {
    pub(super) fn parse(bytes: [u8; 4]) -> Option<Magic> {
        [ByteOrder::Little, ByteOrder::Big].into_iter().find_map(|order| {
            let (nanosecond, kuznetzov) = match order.u32(bytes) {
                MAGIC_MICRO => (false, false),
                MAGIC_NANO => (true, false),
                MAGIC_KUZNETZOV => (false, true),
                _ => return None,
            };
            Some(Magic { order, nanosecond, kuznetzov })
        })
    }
}

/// Reads the records of a pcap file whose header has been read.
#[derive(Clone, Debug)]
pub(super) struct Reader {
    pub(super) header: TraceHeader,
    order: ByteOrder,
    record_header_len: usize,
    lengths: LengthOrder,
    /// XOR-and-subtract mask that sign-extends the 32-bit time fields, or leaves
    /// them unsigned: libpcap on a little-endian host reads native-order fields
    /// as signed and byte-swapped ones as unsigned.
    sign_mask: u64,
    /// Nanoseconds per unit of the fraction field.
    frac_ns: u64,
    /// Captured bytes kept per record.
    snapshot: u32,
    /// Captured lengths above this are errors.
    max_caplen: u32,
    /// libpcap's own limit, for the message when weir's is the lower one.
    libpcap_max: u32,
}

/// Parse the file header at the start of `buf`, which is at `offset` in the file.
pub(super) fn open(magic: Magic, buf: &[u8], offset: u64, eof: bool) -> Result<Opening<Reader>, FormatError> {
    let Some(h) = Fixed::<FILE_HEADER_LEN>::new(buf, magic.order) else {
        if eof {
            let kind = FormatErrorKind::TruncatedFileHeader { item: Item::PcapFileHeader, have: buf.len(), need: FILE_HEADER_LEN };
            return Err(FormatError::at(offset, kind));
        }
        return Ok(Opening::Need(FILE_HEADER_LEN));
    };
    let (major, minor) = (h.u16::<VERSION_MAJOR>(), h.u16::<VERSION_MINOR>());
    let version_error = |kind| Err(FormatError::at(offset.saturating_add(VERSION_MAJOR as u64), kind));
    let lengths = match (major, minor) {
        (0..=1, _) => return version_error(FormatErrorKind::ArchaicPcapVersion { major, minor }),
        (2, 0..=2) | (543, 0) => LengthOrder::Swapped,
        (2, 3) => LengthOrder::Guess,
        (2, 4) => LengthOrder::Normal,
        _ => return version_error(FormatErrorKind::UnsupportedPcapVersion { major, minor }),
    };
    let snaplen = h.u32::<SNAPLEN>();
    let link_type = h.u32::<LINKTYPE>() & LINKTYPE_MASK;
    let dlt = dlt_of(link_type);
    let mut snapshot = effective_snapshot(dlt, snaplen);
    if magic.kuznetzov && dlt == DLT_EN10MB {
        // Patched libpcap captured in cooked mode and then prepended a fake
        // Ethernet header, so its records may exceed the snapshot by 14.
        // As libpcap: only where the sum still fits its int.
        if snapshot <= i32::MAX as u32 - 14 {
            snapshot += 14;
        }
    }
    let libpcap_max = max_snaplen(dlt);
    Ok(Opening::Read(Reader {
        header: TraceHeader {
            kind: TraceKind::Pcap,
            link_type: LinkType(link_type),
            snaplen,
            snapshot,
            nanosecond: magic.nanosecond,
            version: (major, minor),
            swapped: !magic.order.is_native(),
            link_type_ext: h.u32::<LINKTYPE>() & !LINKTYPE_MASK,
        },
        order: magic.order,
        record_header_len: if magic.kuznetzov { KUZNETZOV_RECORD_HEADER_LEN } else { RECORD_HEADER_LEN },
        lengths,
        sign_mask: if magic.order == ByteOrder::Little { 0x8000_0000 } else { 0 },
        frac_ns: if magic.nanosecond { 1 } else { 1_000 },
        snapshot,
        max_caplen: libpcap_max.min(MAX_CAPLEN as u32),
        libpcap_max,
    }))
}

impl Reader {
    #[inline]
    pub(super) fn next(&self, buf: &[u8], offset: u64, eof: bool) -> Result<Step, FormatError> {
        let Some(h) = Fixed::<RECORD_HEADER_LEN>::new(buf, self.order).filter(|_| buf.len() >= self.record_header_len) else {
            return self.short(buf, offset, eof, Item::PcapRecordHeader, self.record_header_len);
        };
        let (mut caplen, mut wire_len) = (h.u32::<CAPLEN>(), h.u32::<WIRE_LEN>());
        if self.lengths != LengthOrder::Normal && (self.lengths == LengthOrder::Swapped || caplen > wire_len) {
            (caplen, wire_len) = (wire_len, caplen);
        }
        if caplen > self.max_caplen {
            return Err(self.oversized(caplen, offset));
        }
        let data_start = self.record_header_len;
        let consumed = data_start + caplen as usize;
        if buf.len() < consumed {
            return self.short(buf, offset, eof, Item::PcapRecord, consumed);
        }
        let kept = caplen.min(self.snapshot) as usize;
        let sec = self.widen(h.u32::<TS_SEC>());
        let frac = self.widen(h.u32::<TS_FRAC>());
        let frac_ns = frac.wrapping_mul(self.frac_ns);
        let ts_ns = sec.wrapping_mul(NS_PER_SEC).wrapping_add(frac_ns);
        // Floor division of the signed fraction: a 32-bit fraction in µs carries
        // at most ±4,295 s, which fits; stored as the bits of an i32.
        let ts_carry = (frac_ns as i64).div_euclid(NS_PER_SEC as i64) as i32 as u32;
        Ok(Step::Packet(Record { consumed, data: data_start..data_start + kept, wire_len, ts_ns, ts_carry }))
    }

    #[inline(always)]
    fn widen(&self, v: u32) -> u64 {
        (u64::from(v) ^ self.sign_mask).wrapping_sub(self.sign_mask)
    }

    /// Fewer bytes than the record needs: ask for more, end cleanly between
    /// records, or report the truncation.
    #[cold]
    fn short(&self, buf: &[u8], offset: u64, eof: bool, item: Item, need: usize) -> Result<Step, FormatError> {
        match (eof, buf.len()) {
            (false, _) => Ok(Step::Need { need }),
            (true, 0) => Ok(Step::End),
            (true, have) => Err(FormatError::at(offset, FormatErrorKind::Truncated { item, have, need: need as u64 })),
        }
    }

    #[cold]
    fn oversized(&self, caplen: u32, offset: u64) -> FormatError {
        let kind = if caplen > self.libpcap_max {
            FormatErrorKind::CaplenOverMaximum { caplen, max: self.libpcap_max, link_type: self.header.link_type.0 }
        } else {
            FormatErrorKind::CaplenOverWeirLimit { item: Item::PcapRecord, caplen, allowed: self.libpcap_max }
        };
        FormatError::at(offset, kind)
    }
}

//! pcapng: sections of blocks, each block framed by its type and total length.
//!
//! Accepts exactly what libpcap 1.10.3 accepts, including its quirks:
//! - The first section header is read leniently (no trailer or alignment
//!   check, any options); it fixes the byte order, and a later section in the
//!   other order is an error.
//! - The first interface description block fixes the link type, snapshot
//!   length and block size limit for the whole file. Every later one, in any
//!   section, must repeat them, where the link type written in the later block
//!   is compared with the first one's DLT_ number (so a second `LINKTYPE_RAW`
//!   interface is refused, as libpcap refuses it).
//! - Each interface has its own timestamp resolution (`if_tsresol`, a power of
//!   10 or 2) and offset (`if_tsoffset`); timestamps are converted to
//!   nanoseconds with libpcap's integer arithmetic, wrap-arounds included.
//! - Enhanced, simple and obsolete packet blocks carry packets; blocks of any
//!   other type before the first interface, and after it any type other than
//!   section headers and interfaces, are skipped unread.
//!
//! The first section header and the blocks before the first interface are
//! reported as [`Step::Skip`]; that interface as [`Step::Header`].

use super::error::{FormatError, FormatErrorKind, Item};
use super::fields::{ByteOrder, Fixed};
use super::linktype::{dlt_of, effective_snapshot, max_snaplen};
use super::{Opening, Record, Step, TraceHeader, TraceKind, MAX_CAPLEN, MAX_RECORD_BYTES, NS_PER_SEC};
use crate::LinkType;

/// Block types.
pub(super) const SHB: u32 = 0x0A0D_0D0A;
const IDB: u32 = 1;
const PB: u32 = 2;
const SPB: u32 = 3;
const EPB: u32 = 6;

/// Every block: type, total length, body, total length again.
const BLOCK_HEADER_LEN: usize = 8;
const BLOCK_TYPE: usize = 0;
const BLOCK_LENGTH: usize = 4;
const TRAILER_LEN: usize = 4;
const MIN_BLOCK_LEN: u32 = (BLOCK_HEADER_LEN + TRAILER_LEN) as u32;

/// Section header block, positions from the start of the block.
const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;
const SHB_MAGIC: usize = 8;
const SHB_MAJOR: usize = 12;
const SHB_MINOR: usize = 14;
/// Header, magic, versions and the 64-bit section length.
const SHB_FIXED_END: usize = 24;
/// libpcap's bounds on the first section header's length.
const SHB_MIN_LEN: u32 = (SHB_FIXED_END + TRAILER_LEN) as u32;
const SHB_MAX_LEN: u32 = 1024 * 1024;

/// Interface description block.
const IDB_LINKTYPE: usize = 8;
const IDB_SNAPLEN: usize = 12;
const IDB_FIXED_END: usize = 16;
const OPTION_HEADER_LEN: usize = 4;
const OPT_CODE: usize = 0;
const OPT_LENGTH: usize = 2;
const OPT_ENDOFOPT: u16 = 0;
const IF_TSRESOL: u16 = 9;
const IF_TSOFFSET: u16 = 14;

/// Enhanced packet block and the obsolete packet block share one layout,
/// except that the latter's interface is 16 bits followed by a drop count.
const PKT_INTERFACE: usize = 8;
const PKT_TS_HIGH: usize = 12;
const PKT_TS_LOW: usize = 16;
const PKT_CAPLEN: usize = 20;
const PKT_WIRE_LEN: usize = 24;
const PKT_DATA: usize = 28;

/// Simple packet block: the wire length, then data cut to the snapshot length.
const SPB_WIRE_LEN: usize = 8;
const SPB_DATA: usize = 12;

/// libpcap's block size limit until the first interface is known.
const INITIAL_MAX_BLOCK: u32 = 16 * 1024 * 1024;
/// Room libpcap allows for options beside a largest packet.
const MAX_OPTIONS_LEN: u32 = 128 * 1024;

const US_PER_SEC: u64 = 1_000_000;

/// How one interface's timestamp units become nanoseconds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Clock {
    /// 10^-6 s, the pcapng default.
    Micro,
    /// 10^-9 s.
    Nano,
    /// 10^-k s for k < 9: fractions are multiplied up.
    DecimalUp { units: u64, factor: u64 },
    /// 10^-k s for k > 9: fractions are divided down.
    DecimalDown { units: u64, factor: u64 },
    /// 2^-shift s.
    Binary { shift: u32 },
}

impl Clock {
    fn from_tsresol(value: u8) -> Option<Clock> {
        let exponent = u32::from(value & 0x7F);
        if value & 0x80 != 0 {
            return (exponent <= 63).then_some(Clock::Binary { shift: exponent });
        }
        let units = 10u64.checked_pow(exponent)?;
        Some(match exponent {
            6 => Clock::Micro,
            9 => Clock::Nano,
            0..=8 => Clock::DecimalUp { units, factor: NS_PER_SEC / units },
            _ => Clock::DecimalDown { units, factor: units / NS_PER_SEC },
        })
    }

    fn finer_than_micro(self) -> bool {
        match self {
            Clock::Micro => false,
            Clock::Nano | Clock::DecimalDown { .. } => true,
            Clock::DecimalUp { units, .. } => units > US_PER_SEC,
            Clock::Binary { shift } => 1u64 << shift > US_PER_SEC,
        }
    }
}

/// What a packet needs from its interface.
#[derive(Copy, Clone, Debug)]
struct Interface {
    clock: Clock,
    /// Seconds added to every timestamp.
    tsoffset: u64,
}

impl Interface {
    /// libpcap's conversion: whole seconds plus offset, then the fraction scaled
    /// to nanoseconds, all in wrapping 64-bit arithmetic.
    #[inline]
    fn ts_ns(&self, t: u64) -> u64 {
        let (sec, frac_ns) = match self.clock {
            Clock::Micro => (t / US_PER_SEC, t % US_PER_SEC * 1_000),
            Clock::Nano => (t / NS_PER_SEC, t % NS_PER_SEC),
            Clock::DecimalUp { units, factor } => (t / units, t % units * factor),
            Clock::DecimalDown { units, factor } => (t / units, t % units / factor),
            Clock::Binary { shift } => (t >> shift, (t & ((1u64 << shift) - 1)).wrapping_mul(NS_PER_SEC) >> shift),
        };
        sec.wrapping_add(self.tsoffset).wrapping_mul(NS_PER_SEC).wrapping_add(frac_ns)
    }
}

/// Reads the blocks of a pcapng file after its first section header.
#[derive(Clone, Debug)]
pub(super) struct Reader {
    order: ByteOrder,
    /// The first section header's version, which libpcap reports.
    version: (u16, u16),
    /// Known once the first interface description block has been read.
    pub(super) header: Option<TraceHeader>,
    /// The first interface's link type as written, and as libpcap numbers it.
    first_link_type: u32,
    first_dlt: u32,
    /// The first interface's effective snapshot length, which all must share.
    snapshot: u32,
    /// libpcap's block size limit.
    max_block: u32,
    /// The interfaces of the current section, by interface id.
    interfaces: Vec<Interface>,
}

/// Parse the first section header block, at the start of `buf` and at `offset`
/// in the file. On success returns the reader and the header's length.
pub(super) fn open(buf: &[u8], offset: u64, eof: bool) -> Result<Opening<(Reader, usize)>, FormatError> {
    let Some(probe) = Fixed::<{ SHB_MAGIC + 4 }>::new(buf, ByteOrder::Little) else {
        return short_section_header(buf, offset, eof, SHB_MAGIC + 4);
    };
    let (found, length) = (probe.u32::<SHB_MAGIC>(), probe.u32::<BLOCK_LENGTH>());
    let (order, length) = if found == BYTE_ORDER_MAGIC {
        (ByteOrder::Little, length)
    } else if found.swap_bytes() == BYTE_ORDER_MAGIC {
        (ByteOrder::Big, length.swap_bytes())
    } else {
        return Err(FormatError::at(offset.saturating_add(SHB_MAGIC as u64), FormatErrorKind::BadByteOrderMagic { found }));
    };
    if !(SHB_MIN_LEN..=SHB_MAX_LEN).contains(&length) {
        return Err(FormatError::at(offset, FormatErrorKind::SectionHeaderLength { length }));
    }
    let total = length as usize;
    let Some(shb) = buf.get(..total).and_then(|b| Fixed::<SHB_FIXED_END>::new(b, order)) else {
        return short_section_header(buf, offset, eof, total);
    };
    let (major, minor) = (shb.u16::<SHB_MAJOR>(), shb.u16::<SHB_MINOR>());
    if major != 1 || !(minor == 0 || minor == 2) {
        let kind = FormatErrorKind::UnsupportedPcapngVersion { major, minor };
        return Err(FormatError::at(offset.saturating_add(SHB_MAJOR as u64), kind));
    }
    let reader = Reader {
        order,
        version: (major, minor),
        header: None,
        first_link_type: 0,
        first_dlt: 0,
        snapshot: 0,
        max_block: INITIAL_MAX_BLOCK,
        interfaces: Vec::new(),
    };
    Ok(Opening::Read((reader, total)))
}

fn short_section_header(buf: &[u8], offset: u64, eof: bool, need: usize) -> Result<Opening<(Reader, usize)>, FormatError> {
    if eof {
        let kind = FormatErrorKind::TruncatedFileHeader { item: Item::Block(SHB), have: buf.len(), need };
        return Err(FormatError::at(offset, kind));
    }
    Ok(Opening::Need(need))
}

impl Reader {
    #[inline]
    pub(super) fn next(&mut self, buf: &[u8], offset: u64, eof: bool) -> Result<Step, FormatError> {
        let Some(head) = Fixed::<BLOCK_HEADER_LEN>::new(buf, self.order) else {
            return self.short(buf, offset, eof, Item::BlockHeader, BLOCK_HEADER_LEN);
        };
        let block_type = head.u32::<BLOCK_TYPE>();
        let length = head.u32::<BLOCK_LENGTH>();
        if length < MIN_BLOCK_LEN || length % 4 != 0 || length > self.max_block.min(MAX_RECORD_BYTES as u32) {
            return Err(self.bad_length(block_type, length, offset));
        }
        let consumed = length as usize;
        let Some((content, trailer)) = buf.get(..consumed).and_then(<[u8]>::split_last_chunk::<TRAILER_LEN>) else {
            return self.short(buf, offset, eof, Item::Block(block_type), consumed);
        };
        let trailer = self.order.u32(*trailer);
        if trailer != length {
            let kind = FormatErrorKind::TrailerMismatch { block: Item::Block(block_type), header: length, trailer };
            return Err(FormatError::at(offset, kind));
        }
        if self.header.is_none() {
            return self.before_first_interface(block_type, content, offset);
        }
        match block_type {
            EPB => self.enhanced_packet(content, offset),
            SPB => self.simple_packet(content, offset),
            PB => self.obsolete_packet(content, offset),
            IDB => self.later_interface(content, offset).map(|()| Step::Skip { consumed }),
            SHB => self.later_section(content, offset).map(|()| Step::Skip { consumed }),
            _ => Ok(Step::Skip { consumed }),
        }
    }

    /// Fewer bytes than the block needs: ask for more, end cleanly between
    /// blocks, or report the truncation.
    #[cold]
    fn short(&self, buf: &[u8], offset: u64, eof: bool, item: Item, need: usize) -> Result<Step, FormatError> {
        match (eof, buf.len()) {
            (false, _) => Ok(Step::Need { need }),
            (true, 0) if self.header.is_some() => Ok(Step::End),
            (true, 0) => Err(FormatError::at(offset, FormatErrorKind::NoInterface)),
            (true, have) => Err(FormatError::at(offset, FormatErrorKind::Truncated { item, have, need: need as u64 })),
        }
    }

    #[cold]
    fn bad_length(&self, block_type: u32, length: u32, offset: u64) -> FormatError {
        let block = Item::Block(block_type);
        let kind = if length < MIN_BLOCK_LEN {
            FormatErrorKind::BlockTooShort { block, length }
        } else if length % 4 != 0 {
            FormatErrorKind::BlockMisaligned { block, length }
        } else if length > self.max_block {
            FormatErrorKind::BlockTooLong { block, length, max: self.max_block }
        } else {
            FormatErrorKind::BlockOverWeirLimit { block, length, allowed: self.max_block }
        };
        FormatError::at(offset, kind)
    }

    /// Until the first interface, packets cannot be read and other blocks,
    /// section headers included, are passed over.
    #[cold]
    fn before_first_interface(&mut self, block_type: u32, content: &[u8], offset: u64) -> Result<Step, FormatError> {
        let consumed = content.len() + TRAILER_LEN;
        match block_type {
            IDB => {
                let (link_type, snaplen) = self.interface_fixed(content, offset)?;
                let interface = self.interface_options(content, offset)?;
                let dlt = dlt_of(u32::from(link_type));
                self.first_link_type = u32::from(link_type);
                self.first_dlt = dlt;
                self.snapshot = effective_snapshot(dlt, snaplen);
                let epb_limit = (PKT_DATA + TRAILER_LEN) as u32 + max_snaplen(dlt) + MAX_OPTIONS_LEN;
                self.max_block = self.max_block.max(epb_limit);
                self.interfaces.push(interface);
                self.header = Some(TraceHeader {
                    kind: TraceKind::PcapNg,
                    link_type: LinkType(u32::from(link_type)),
                    snaplen,
                    snapshot: self.snapshot,
                    nanosecond: interface.clock.finer_than_micro(),
                    version: self.version,
                    swapped: !self.order.is_native(),
                    link_type_ext: 0,
                });
                Ok(Step::Header { consumed })
            }
            EPB | SPB | PB => Err(FormatError::at(offset, FormatErrorKind::PacketBeforeInterface { block: Item::Block(block_type) })),
            _ => Ok(Step::Skip { consumed }),
        }
    }

    /// An interface after the first: it must match the first, then it joins the section.
    fn later_interface(&mut self, content: &[u8], offset: u64) -> Result<(), FormatError> {
        let (link_type, snaplen) = self.interface_fixed(content, offset)?;
        if u32::from(link_type) != self.first_dlt {
            let kind = FormatErrorKind::LinkTypeMismatch { link_type, first: self.first_link_type, first_dlt: self.first_dlt };
            return Err(FormatError::at(offset.saturating_add(IDB_LINKTYPE as u64), kind));
        }
        if effective_snapshot(self.first_dlt, snaplen) != self.snapshot {
            let kind = FormatErrorKind::SnaplenMismatch { snaplen, first: self.snapshot };
            return Err(FormatError::at(offset.saturating_add(IDB_SNAPLEN as u64), kind));
        }
        let interface = self.interface_options(content, offset)?;
        self.interfaces.push(interface);
        Ok(())
    }

    fn interface_fixed(&self, content: &[u8], offset: u64) -> Result<(u16, u32), FormatError> {
        let f = self.fixed::<IDB_FIXED_END>(IDB, content, offset)?;
        Ok((f.u16::<IDB_LINKTYPE>(), f.u32::<IDB_SNAPLEN>()))
    }

    /// The timestamp options of an interface; others are passed over, as is
    /// everything after `opt_endofopt`.
    fn interface_options(&self, content: &[u8], offset: u64) -> Result<Interface, FormatError> {
        let block = Item::Block(IDB);
        let mut tsresol: Option<Clock> = None;
        let mut tsoffset: Option<u64> = None;
        let mut at = IDB_FIXED_END;
        while let Some(rest) = content.get(at..).filter(|rest| !rest.is_empty()) {
            let here = offset.saturating_add(at as u64);
            let Some(opt) = Fixed::<OPTION_HEADER_LEN>::new(rest, self.order) else {
                let kind = FormatErrorKind::OptionHeaderTruncated { block, remaining: rest.len() };
                return Err(FormatError::at(here, kind));
            };
            let (code, length) = (opt.u16::<OPT_CODE>(), opt.u16::<OPT_LENGTH>());
            let padded = (usize::from(length) + 3) & !3;
            let Some(value) = rest.get(OPTION_HEADER_LEN..OPTION_HEADER_LEN + padded) else {
                let remaining = rest.len() - OPTION_HEADER_LEN;
                return Err(FormatError::at(here, FormatErrorKind::OptionOverrun { block, code, length, padded, remaining }));
            };
            let wrong_length =
                |option: &'static str, expected: u16| FormatError::at(here, FormatErrorKind::OptionLength { option, length, expected });
            let duplicate = |option: &'static str| FormatError::at(here, FormatErrorKind::DuplicateOption { option });
            match code {
                OPT_ENDOFOPT if length != 0 => {
                    return Err(FormatError::at(here, FormatErrorKind::EndOfOptLength { length }));
                }
                OPT_ENDOFOPT => break,
                IF_TSRESOL => {
                    let (1, Some(&value)) = (length, value.first()) else {
                        return Err(wrong_length("if_tsresol", 1));
                    };
                    if tsresol.is_some() {
                        return Err(duplicate("if_tsresol"));
                    }
                    let clock =
                        Clock::from_tsresol(value).ok_or_else(|| FormatError::at(here, FormatErrorKind::TsresolTooFine { value }))?;
                    tsresol = Some(clock);
                }
                IF_TSOFFSET => {
                    let (8, Some(&bytes)) = (length, value.first_chunk::<8>()) else {
                        return Err(wrong_length("if_tsoffset", 8));
                    };
                    if tsoffset.is_some() {
                        return Err(duplicate("if_tsoffset"));
                    }
                    tsoffset = Some(self.order.u64(bytes));
                }
                _ => {}
            }
            at += OPTION_HEADER_LEN + padded;
        }
        Ok(Interface { clock: tsresol.unwrap_or(Clock::Micro), tsoffset: tsoffset.unwrap_or(0) })
    }

    /// A later section header: same byte order and major version, fresh interfaces.
    fn later_section(&mut self, content: &[u8], offset: u64) -> Result<(), FormatError> {
        let f = self.fixed::<SHB_FIXED_END>(SHB, content, offset)?;
        let found = f.u32::<SHB_MAGIC>();
        if found != BYTE_ORDER_MAGIC {
            let kind = if found.swap_bytes() == BYTE_ORDER_MAGIC {
                FormatErrorKind::ByteOrderChange
            } else {
                FormatErrorKind::BadByteOrderMagic { found }
            };
            return Err(FormatError::at(offset.saturating_add(SHB_MAGIC as u64), kind));
        }
        let major = f.u16::<SHB_MAJOR>();
        if major != 1 {
            return Err(FormatError::at(offset.saturating_add(SHB_MAJOR as u64), FormatErrorKind::PcapngMajorVersion { major }));
        }
        self.interfaces.clear();
        Ok(())
    }

    #[inline]
    fn enhanced_packet(&self, content: &[u8], offset: u64) -> Result<Step, FormatError> {
        let f = self.fixed::<PKT_DATA>(EPB, content, offset)?;
        let ts = u64::from(f.u32::<PKT_TS_HIGH>()) << 32 | u64::from(f.u32::<PKT_TS_LOW>());
        let id = f.u32::<PKT_INTERFACE>();
        self.packet(EPB, content, offset, id, ts, f.u32::<PKT_CAPLEN>(), f.u32::<PKT_WIRE_LEN>(), PKT_DATA)
    }

    fn obsolete_packet(&self, content: &[u8], offset: u64) -> Result<Step, FormatError> {
        let f = self.fixed::<PKT_DATA>(PB, content, offset)?;
        let ts = u64::from(f.u32::<PKT_TS_HIGH>()) << 32 | u64::from(f.u32::<PKT_TS_LOW>());
        let id = u32::from(f.u16::<PKT_INTERFACE>());
        self.packet(PB, content, offset, id, ts, f.u32::<PKT_CAPLEN>(), f.u32::<PKT_WIRE_LEN>(), PKT_DATA)
    }

    /// A packet on the first interface with no timestamp, captured up to the snapshot length.
    fn simple_packet(&self, content: &[u8], offset: u64) -> Result<Step, FormatError> {
        let f = self.fixed::<SPB_DATA>(SPB, content, offset)?;
        let wire_len = f.u32::<SPB_WIRE_LEN>();
        self.packet(SPB, content, offset, 0, 0, wire_len.min(self.snapshot), wire_len, SPB_DATA)
    }

    /// The checks every packet block shares, in libpcap's order.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn packet(
        &self,
        block_type: u32,
        content: &[u8],
        offset: u64,
        id: u32,
        ts: u64,
        caplen: u32,
        wire_len: u32,
        data_start: usize,
    ) -> Result<Step, FormatError> {
        let Some(interface) = self.interfaces.get(id as usize) else {
            let kind = FormatErrorKind::UnknownInterface { block: Item::Block(block_type), id, count: self.interfaces.len() };
            return Err(FormatError::at(offset, kind));
        };
        let room = content.len() - data_start;
        if caplen > self.snapshot || caplen as usize > room || caplen as usize > MAX_CAPLEN {
            return Err(self.bad_caplen(block_type, offset, caplen, room));
        }
        let data = data_start..data_start + caplen as usize;
        Ok(Step::Packet(Record { consumed: content.len() + TRAILER_LEN, data, wire_len, ts_ns: interface.ts_ns(ts), ts_carry: 0 }))
    }

    #[cold]
    fn bad_caplen(&self, block_type: u32, offset: u64, caplen: u32, room: usize) -> FormatError {
        let block = Item::Block(block_type);
        let kind = if caplen > self.snapshot {
            FormatErrorKind::CaplenOverSnaplen { block, caplen, snapshot: self.snapshot }
        } else if caplen as usize > room {
            FormatErrorKind::PacketDataOverrun { block, caplen, room }
        } else {
            FormatErrorKind::CaplenOverWeirLimit { item: block, caplen, allowed: self.snapshot }
        };
        FormatError::at(offset, kind)
    }

    /// The fixed part of a block, or an error if the block is too short for it.
    #[inline(always)]
    fn fixed<'a, const N: usize>(&self, block_type: u32, content: &'a [u8], offset: u64) -> Result<Fixed<'a, N>, FormatError> {
        Fixed::<N>::new(content, self.order).ok_or_else(|| {
            let kind = FormatErrorKind::FixedPartTooShort {
                block: Item::Block(block_type),
                length: (content.len() + TRAILER_LEN) as u32,
                need: (N - BLOCK_HEADER_LEN) as u32,
            };
            FormatError::at(offset, kind)
        })
    }
}

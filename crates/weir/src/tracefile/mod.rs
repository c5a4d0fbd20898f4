//! Trace file formats: a push parser for pcap and pcapng.
//!
//! [`Walker`] turns file bytes into [`Step`]s without copying or allocating per
//! packet: the caller owns the buffer, hands the walker the unconsumed bytes
//! with their absolute file offset, and advances by what each step consumed.
//! The walker never reads past what it is given, so a caller can fill its
//! buffer by `read()`, by mapping, or byte by byte; the same bytes give the
//! same steps however they are split, and a `Need` asks for no more than
//! [`MAX_RECORD_BYTES`].
//!
//! What is accepted, and the packets and timestamps reported, are those of
//! Debian 12's libpcap 1.10.3 opened with nanosecond precision: every file it
//! refuses to open fails before the first [`Step::Header`], and every file it
//! stops reading midway gives the same packets and then an error. Differences:
//! - weir holds at most [`MAX_CAPLEN`] captured bytes per packet and
//!   [`MAX_RECORD_BYTES`] per record or block. libpcap allows more in pcap
//!   files of three link types (D-Bus, EBHSCR, USBPcap) and in pcapng files
//!   whose snapshot length is larger; such packets are errors here.
//! - Packet bytes are reported as stored. libpcap rewrites the pseudo-header of
//!   a few link types (Linux SLL/SLL2, USB, NFLOG, PFLOG) in byte-swapped files
//!   into host order, and adjusts the wire length of some isochronous Linux USB
//!   transfers; weir leaves both as in the file.
//! - A gzip-compressed file is named as such rather than as an unknown format.
//!
//! Malformed input never panics and never loops: each step other than `Need`
//! and `End` consumes at least one byte, and errors name the byte offset of the
//! header, record, block or option at fault.

mod error;
mod fields;
mod linktype;
mod pcap;
mod pcapng;
mod read;
#[cfg(test)]
mod tests;

pub use error::{FormatError, FormatErrorKind, Item, ReadError};
pub use read::for_each_packet;

use crate::LinkType;
use std::ops::Range;

/// Upper bound, in bytes, of a single record or block the walker will ever ask
/// for: libpcap's pcapng block limit, which also covers the largest pcap record.
/// A buffer this large always satisfies a [`Step::Need`].
pub const MAX_RECORD_BYTES: usize = 16 * 1024 * 1024;

/// Largest captured length, in bytes, any [`Record`] can have: libpcap's
/// `MAXIMUM_SNAPLEN` (256 KiB).
pub const MAX_CAPLEN: usize = linktype::MAXIMUM_SNAPLEN as usize;

/// Timestamps are nanoseconds; both formats store seconds and a fraction.
const NS_PER_SEC: u64 = 1_000_000_000;

/// The two container formats.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TraceKind {
    /// Classic pcap (libpcap's savefile): a file header, then packet records.
    Pcap,
    /// pcapng: sections of typed blocks.
    PcapNg,
}

/// What the file header says, known after [`Walker`] has returned its first [`Step::Header`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceHeader {
    /// The container format.
    pub kind: TraceKind,
    /// The LINKTYPE_ value, without the FCS bits a pcap header may carry above it.
    pub link_type: LinkType,
    /// Snapshot length from the header (pcap) or the first IDB (pcapng; 0 means unlimited there).
    pub(crate) snaplen: u32,
    /// The snapshot length libpcap reports (`pcap_snapshot`), in bytes: the one
    /// the file declares, or the link type's maximum when that is 0 or does
    /// not fit a C `int`; 14 more in Kuznetzov's patched pcap format on
    /// Ethernet. No record's captured bytes exceed it.
    pub snapshot: u32,
    /// True when the file stores timestamps finer than microseconds (pcap nsec
    /// magic; pcapng `if_tsresol` of its first interface). [`Record::ts_ns`]
    /// is in nanoseconds either way.
    pub nanosecond: bool,
    /// The format version: the pcap file header's, or the first section header's.
    pub version: (u16, u16),
    /// Whether the file (its first section, for pcapng) is in the other byte order than this machine.
    pub swapped: bool,
    /// The upper bits of a pcap header's link type field (FCS length; libpcap's
    /// `pcap_datalink_ext`); 0 for pcapng.
    pub link_type_ext: u32,
}

/// One packet record, relative to the `buf` passed to [`Walker::next`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Bytes of `buf` this record occupies (header, data, padding, trailer).
    pub consumed: usize,
    /// Where the captured bytes are in `buf` (caplen = data.len()).
    pub data: Range<usize>,
    /// Length of the packet on the wire, in bytes, as the file states it: it
    /// may be below the captured length in a damaged or crafted file.
    pub wire_len: u32,
    /// Nanoseconds since the Unix epoch, exactly what libpcap reports in nano
    /// precision (seconds × 10⁹ + fraction, wrapping as libpcap's 64-bit sum does).
    pub ts_ns: u64,
    /// Whole seconds (an i32's bits, floor division) an out-of-range pcap
    /// fraction (a microsecond field of a million or more, or negative) carried
    /// into `ts_ns`; libpcap hands such a record over uncarried, and its
    /// compatible API must too ([`crate::Packet::ts_carry`]).
    pub(crate) ts_carry: u32,
}

/// What the next bytes of a trace are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// The header is now known: [`Walker::header`] returns it.
    Header {
        /// Bytes of `buf` used: the pcap file header, or the first pcapng
        /// interface description block.
        consumed: usize,
    },
    /// A packet.
    Packet(Record),
    /// A record or block without a packet: the pcapng section headers, the
    /// blocks before the first interface description block, later interface
    /// description blocks, ISB, NRB, DSB, custom and unknown blocks.
    Skip {
        /// Bytes of `buf` the record or block occupies.
        consumed: usize,
    },
    /// Not enough bytes (only when `eof` was false); nothing was consumed.
    Need {
        /// Call again with at least this many bytes in `buf`, counted from the
        /// same offset: more than it held, and at most [`MAX_RECORD_BYTES`].
        need: usize,
    },
    /// Clean end: `buf` is empty and `eof` is true.
    End,
}

/// Parses a trace one record or block at a time; see the module documentation.
#[derive(Clone, Debug)]
pub struct Walker {
    state: State,
}

#[derive(Clone, Debug)]
enum State {
    /// Nothing read yet.
    Start,
    Pcap(pcap::Reader),
    PcapNg(pcapng::Reader),
}

/// A file header read, or how many bytes reading it takes.
enum Opening<T> {
    Read(T),
    Need(usize),
}

/// Length of the magic number that tells the formats apart.
const MAGIC_LEN: usize = 4;
const GZIP_MAGIC: [u8; 2] = [0x1F, 0x8B];

impl Default for Walker {
    fn default() -> Self {
        Walker::new()
    }
}

impl Walker {
    /// A walker at the start of a file.
    pub fn new() -> Walker {
        Walker { state: State::Start }
    }

    /// Parse the next item. `buf` holds the unconsumed file bytes, starting at
    /// absolute file offset `offset`; `eof` says no bytes exist after `buf`.
    /// Never panics, never loops forever, never returns `Need` when `eof` is
    /// true (a truncation error instead, or `End` when `buf` is empty).
    ///
    /// # Errors
    ///
    /// A [`FormatError`] where libpcap refuses or stops reading the file, or
    /// the file exceeds weir's limits. The walker has not moved: the same call
    /// gives the same error.
    #[inline]
    pub fn next(&mut self, buf: &[u8], offset: u64, eof: bool) -> Result<Step, FormatError> {
        match &mut self.state {
            State::Pcap(reader) => reader.next(buf, offset, eof),
            State::PcapNg(reader) => reader.next(buf, offset, eof),
            State::Start => self.start(buf, offset, eof),
        }
    }

    /// The file's header, from the first [`Step::Header`] on; `None` before.
    pub fn header(&self) -> Option<&TraceHeader> {
        match &self.state {
            State::Start => None,
            State::Pcap(reader) => Some(&reader.header),
            State::PcapNg(reader) => reader.header.as_ref(),
        }
    }

    /// Tell the formats apart by their first bytes and read the file header.
    #[cold]
    fn start(&mut self, buf: &[u8], offset: u64, eof: bool) -> Result<Step, FormatError> {
        let Some(&magic) = buf.first_chunk::<MAGIC_LEN>() else {
            if !eof {
                return Ok(Step::Need { need: MAGIC_LEN });
            }
            let kind = FormatErrorKind::TruncatedFileHeader { item: Item::PcapFileHeader, have: buf.len(), need: MAGIC_LEN };
            return Err(FormatError::at(offset, kind));
        };
        if let Some(magic) = pcap::Magic::parse(magic) {
            return Ok(match pcap::open(magic, buf, offset, eof)? {
                Opening::Read(reader) => {
                    self.state = State::Pcap(reader);
                    Step::Header { consumed: pcap::FILE_HEADER_LEN }
                }
                Opening::Need(need) => Step::Need { need },
            });
        }
        if u32::from_le_bytes(magic) == pcapng::SHB {
            return Ok(match pcapng::open(buf, offset, eof)? {
                Opening::Read((reader, consumed)) => {
                    self.state = State::PcapNg(reader);
                    Step::Skip { consumed }
                }
                Opening::Need(need) => Step::Need { need },
            });
        }
        let kind = if magic.starts_with(&GZIP_MAGIC) { FormatErrorKind::Gzip } else { FormatErrorKind::UnknownFormat { magic } };
        Err(FormatError::at(offset, kind))
    }
}

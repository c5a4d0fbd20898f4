//! What can be wrong with a trace, and where.
//!
//! Every [`FormatError`] carries the absolute byte offset of the record, block,
//! option or header it is about, and a message that names the values seen, so a
//! user can find the damage with a hex dump. [`ReadError`] adds the file name.

use super::{MAX_CAPLEN, MAX_RECORD_BYTES};
use std::fmt;
use std::path::PathBuf;

/// A trace that libpcap would not read (or that exceeds weir's limits), and where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("byte offset {offset}: {kind}")]
pub struct FormatError {
    /// Absolute file offset of the header, record, block or option at fault.
    pub offset: u64,
    pub kind: FormatErrorKind,
}

impl FormatError {
    pub(super) fn at(offset: u64, kind: FormatErrorKind) -> FormatError {
        FormatError { offset, kind }
    }
}

/// The part of a trace an error is about.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Item {
    PcapFileHeader,
    PcapRecordHeader,
    PcapRecord,
    /// The type and length that start every pcapng block.
    BlockHeader,
    /// A pcapng block, by block type.
    Block(u32),
}

impl fmt::Display for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match *self {
            Item::PcapFileHeader => "pcap file header",
            Item::PcapRecordHeader => "packet record header",
            Item::PcapRecord => "packet record",
            Item::BlockHeader => "pcapng block header",
            Item::Block(0x0A0D_0D0A) => "section header block",
            Item::Block(1) => "interface description block",
            Item::Block(2) => "packet block",
            Item::Block(3) => "simple packet block",
            Item::Block(4) => "name resolution block",
            Item::Block(5) => "interface statistics block",
            Item::Block(6) => "enhanced packet block",
            Item::Block(10) => "decryption secrets block",
            Item::Block(0x0000_0BAD | 0x4000_0BAD) => "custom block",
            Item::Block(other) => return write!(f, "block of type {other:#010x}"),
        };
        f.write_str(name)
    }
}

/// What was wrong. Messages name the values seen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatErrorKind {
    #[error("the file is gzip-compressed; decompress it first (weir, like libpcap, reads only uncompressed pcap and pcapng)")]
    Gzip,
    #[error("not a pcap or pcapng file: it starts with bytes {:02x} {:02x} {:02x} {:02x}", magic[0], magic[1], magic[2], magic[3])]
    UnknownFormat { magic: [u8; 4] },
    #[error("{}", truncated_file_header(*item, *have, *need))]
    TruncatedFileHeader { item: Item, have: usize, need: usize },
    #[error("pcap version {major}.{minor} is archaic (older than 2.0) and not supported")]
    ArchaicPcapVersion { major: u16, minor: u16 },
    #[error("unsupported pcap version {major}.{minor} (readable: 2.0 to 2.4, and 543.0)")]
    UnsupportedPcapVersion { major: u16, minor: u16 },
    #[error("file ends {have} bytes into a {need}-byte {item}")]
    Truncated { item: Item, have: usize, need: u64 },
    #[error("packet record claims {caplen} captured bytes, more than the {max} maximum for link type {link_type}")]
    CaplenOverMaximum { caplen: u32, max: u32, link_type: u32 },
    #[error("{item} claims {caplen} captured bytes, more than the {MAX_CAPLEN} weir holds (libpcap's limit here is {allowed})")]
    CaplenOverWeirLimit { item: Item, caplen: u32, allowed: u32 },
    #[error("section header block has byte-order magic {found:#010x}, neither 0x1a2b3c4d nor its byte swap")]
    BadByteOrderMagic { found: u32 },
    #[error("section header block claims length {length}, outside the 28 to 1048576 bytes libpcap accepts")]
    SectionHeaderLength { length: u32 },
    #[error("unsupported pcapng version {major}.{minor} (readable: 1.0 and 1.2)")]
    UnsupportedPcapngVersion { major: u16, minor: u16 },
    #[error("section header block has major version {major}; only pcapng 1.x is readable")]
    PcapngMajorVersion { major: u16 },
    #[error("section header block switches the byte order; libpcap requires every section to keep the first one's")]
    ByteOrderChange,
    #[error("the file has no interface description block, so its link type is unknown")]
    NoInterface,
    #[error("{block} comes before any interface description block, so its link type is unknown")]
    PacketBeforeInterface { block: Item },
    #[error("{block} claims length {length}, less than the 12-byte minimum")]
    BlockTooShort { block: Item, length: u32 },
    #[error("{block} claims length {length}, not a multiple of 4")]
    BlockMisaligned { block: Item, length: u32 },
    #[error("{block} claims length {length}, more than the {max}-byte maximum")]
    BlockTooLong { block: Item, length: u32, max: u32 },
    #[error("{block} claims length {length}, more than the {MAX_RECORD_BYTES} bytes weir holds (libpcap's limit here is {allowed})")]
    BlockOverWeirLimit { block: Item, length: u32, allowed: u32 },
    #[error("{block} has length {header} in its header but {trailer} in its trailer")]
    TrailerMismatch { block: Item, header: u32, trailer: u32 },
    #[error("{block} of {length} bytes is too short for its {need}-byte fixed part")]
    FixedPartTooShort { block: Item, length: u32, need: u32 },
    #[error("{block} has {remaining} bytes after its last option, too few for an option header")]
    OptionHeaderTruncated { block: Item, remaining: usize },
    #[error("{block} option {code} claims {length} bytes ({padded} padded), but only {remaining} remain in the block")]
    OptionOverrun { block: Item, code: u16, length: u16, padded: usize, remaining: usize },
    #[error("interface description block has opt_endofopt with length {length}, not 0")]
    EndOfOptLength { length: u16 },
    #[error("interface description block has an {option} option of length {length}, not {expected}")]
    OptionLength { option: &'static str, length: u16, expected: u16 },
    #[error("interface description block has more than one {option} option")]
    DuplicateOption { option: &'static str },
    #[error(
        "interface description block has if_tsresol {value:#04x}: a resolution of {}^-{} seconds is finer than 64-bit timestamps can count",
        if value & 0x80 != 0 { 2 } else { 10 },
        value & 0x7f
    )]
    TsresolTooFine { value: u8 },
    #[error("{}", link_type_mismatch(*link_type, *first, *first_dlt))]
    LinkTypeMismatch { link_type: u16, first: u32, first_dlt: u32 },
    #[error("interface description block has snapshot length {snaplen}, different from the first interface's {first}")]
    SnaplenMismatch { snaplen: u32, first: u32 },
    #[error("{block} names interface {id}, but the section has {count} interface description blocks")]
    UnknownInterface { block: Item, id: u32, count: usize },
    #[error("{block} claims {caplen} captured bytes, more than the snapshot length {snapshot}")]
    CaplenOverSnaplen { block: Item, caplen: u32, snapshot: u32 },
    #[error("{block} claims {caplen} captured bytes but has room for only {room}")]
    PacketDataOverrun { block: Item, caplen: u32, room: usize },
}

fn truncated_file_header(item: Item, have: usize, need: usize) -> String {
    match have {
        0 => "the file is empty".to_string(),
        _ => format!("file ends after {have} bytes, inside its {need}-byte {item}"),
    }
}

/// libpcap compares a later interface's link type, as written, with the first
/// one's DLT_ number; where the two numberings differ, say so.
fn link_type_mismatch(link_type: u16, first: u32, first_dlt: u32) -> String {
    if first == first_dlt {
        format!("interface description block has link type {link_type}, different from the first interface's {first}")
    } else {
        format!(
            "interface description block has link type {link_type}, but libpcap requires {first_dlt}: the first \
             interface's link type {first} in its DLT numbering"
        )
    }
}

/// [`for_each_packet`](super::for_each_packet) failed: the file could not be read, or is malformed.
/// The cause is shown in the message, not chained as a source, so printing
/// the chain does not say it twice.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{}: {error}", path.display())]
    Io { path: PathBuf, error: std::io::Error },
    #[error("{}: {error}", path.display())]
    Format { path: PathBuf, error: FormatError },
}

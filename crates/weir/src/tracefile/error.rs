//! What can be wrong with a trace, and where.
//!
//! Every [`FormatError`] carries the absolute byte offset of the record, block,
//! option or header it is about, and a message that names the values seen, so a
//! user can find the damage with a hex dump. [`ReadError`] adds the file name.

use super::{MAX_CAPLEN, MAX_RECORD_BYTES};
use std::fmt;
use std::path::PathBuf;

/// A trace that libpcap would not read (or that exceeds weir's limits), and
/// where: the message starts with the absolute byte offset of the header,
/// record, block or option at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("byte offset {offset}: {kind}")]
pub struct FormatError {
    /// Absolute file offset of the header, record, block or option at fault.
    pub(super) offset: u64,
    /// What is wrong.
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
    /// The 24-byte header that starts a pcap file.
    PcapFileHeader,
    /// The header of a pcap packet record: its timestamp and lengths.
    PcapRecordHeader,
    /// A pcap packet record: its header and captured bytes.
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

/// What was wrong. Messages name the values seen; lengths are in bytes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatErrorKind {
    /// The file is gzip-compressed, which libpcap does not read either.
    #[error("the file is gzip-compressed; decompress it first (weir, like libpcap, reads only uncompressed pcap and pcapng)")]
    Gzip,
    /// The file starts with neither a pcap magic number nor a pcapng section header.
    #[error("not a pcap or pcapng file: it starts with bytes {:02x} {:02x} {:02x} {:02x}", magic[0], magic[1], magic[2], magic[3])]
    UnknownFormat {
        /// The file's first four bytes.
        magic: [u8; 4],
    },
    /// The file ends inside its pcap file header or first pcapng section header.
    #[error("{}", truncated_file_header(*item, *have, *need))]
    TruncatedFileHeader {
        /// [`Item::PcapFileHeader`], or the section header as an [`Item::Block`].
        item: Item,
        /// Bytes the file holds: 0 for an empty file.
        have: usize,
        /// Bytes needed to go on: the magic number's, those up to the length
        /// of a section header, or the whole header's.
        need: usize,
    },
    /// A pcap version before 2.0.
    #[error("pcap version {major}.{minor} is archaic (older than 2.0) and not supported")]
    ArchaicPcapVersion {
        /// The file header's major version.
        major: u16,
        /// The file header's minor version.
        minor: u16,
    },
    /// A pcap version libpcap does not read: not 2.0 to 2.4, nor DG/UX's 543.0.
    #[error("unsupported pcap version {major}.{minor} (readable: 2.0 to 2.4, and 543.0)")]
    UnsupportedPcapVersion {
        /// The file header's major version.
        major: u16,
        /// The file header's minor version.
        minor: u16,
    },
    /// The file ends inside a record, a block or their header.
    #[error("file ends {have} bytes into a {need}-byte {item}")]
    Truncated {
        /// What is cut short.
        item: Item,
        /// Bytes the file holds from the item's start.
        have: usize,
        /// Bytes it needs: a header's length, or the length a record or block claims.
        need: u64,
    },
    /// A pcap record captured more than libpcap allows for the link type.
    #[error("packet record claims {caplen} captured bytes, more than the {max} maximum for link type {link_type}")]
    CaplenOverMaximum {
        /// The record's captured length.
        caplen: u32,
        /// libpcap's maximum for the link type (256 KiB for most).
        max: u32,
        /// The file's LINKTYPE_ value.
        link_type: u32,
    },
    /// A packet libpcap reads, but with more than [`MAX_CAPLEN`] captured bytes.
    #[error("{item} claims {caplen} captured bytes, more than the {MAX_CAPLEN} weir holds (libpcap's limit here is {allowed})")]
    CaplenOverWeirLimit {
        /// The pcap record or pcapng packet block.
        item: Item,
        /// Its captured length.
        caplen: u32,
        /// The largest captured length libpcap accepts there.
        allowed: u32,
    },
    /// A section header's byte-order magic is neither 0x1A2B3C4D nor its byte swap.
    #[error("section header block has byte-order magic {found:#010x}, neither 0x1a2b3c4d nor its byte swap")]
    BadByteOrderMagic {
        /// The value read: little-endian in the first section header, in the
        /// file's byte order in a later one.
        found: u32,
    },
    /// The first section header claims a length libpcap refuses.
    #[error("section header block claims length {length}, outside the 28 to 1048576 bytes libpcap accepts")]
    SectionHeaderLength {
        /// The length it claims.
        length: u32,
    },
    /// The first section header's pcapng version is neither 1.0 nor 1.2.
    #[error("unsupported pcapng version {major}.{minor} (readable: 1.0 and 1.2)")]
    UnsupportedPcapngVersion {
        /// The section header's major version.
        major: u16,
        /// The section header's minor version.
        minor: u16,
    },
    /// A later section header's major version is not 1.
    #[error("section header block has major version {major}; only pcapng 1.x is readable")]
    PcapngMajorVersion {
        /// The section header's major version.
        major: u16,
    },
    /// A later section is in the other byte order than the first.
    #[error("section header block switches the byte order; libpcap requires every section to keep the first one's")]
    ByteOrderChange,
    /// A pcapng file ends before its first interface description block.
    #[error("the file has no interface description block, so its link type is unknown")]
    NoInterface,
    /// A packet block comes before the first interface description block.
    #[error("{block} comes before any interface description block, so its link type is unknown")]
    PacketBeforeInterface {
        /// The packet block.
        block: Item,
    },
    /// A block claims less than the 12 bytes of its header and trailer.
    #[error("{block} claims length {length}, less than the 12-byte minimum")]
    BlockTooShort {
        /// The block, by its type.
        block: Item,
        /// The length it claims.
        length: u32,
    },
    /// A block's length is not a multiple of 4.
    #[error("{block} claims length {length}, not a multiple of 4")]
    BlockMisaligned {
        /// The block, by its type.
        block: Item,
        /// The length it claims.
        length: u32,
    },
    /// A block is longer than libpcap accepts.
    #[error("{block} claims length {length}, more than the {max}-byte maximum")]
    BlockTooLong {
        /// The block, by its type.
        block: Item,
        /// The length it claims.
        length: u32,
        /// libpcap's limit: 16 MiB, or more once the first interface's link
        /// type allows larger packets.
        max: u32,
    },
    /// A block libpcap reads, but longer than [`MAX_RECORD_BYTES`].
    #[error("{block} claims length {length}, more than the {MAX_RECORD_BYTES} bytes weir holds (libpcap's limit here is {allowed})")]
    BlockOverWeirLimit {
        /// The block, by its type.
        block: Item,
        /// The length it claims.
        length: u32,
        /// libpcap's limit there.
        allowed: u32,
    },
    /// A block's trailing length differs from the one in its header.
    #[error("{block} has length {header} in its header but {trailer} in its trailer")]
    TrailerMismatch {
        /// The block, by its type.
        block: Item,
        /// The length in its header.
        header: u32,
        /// The length in its trailer.
        trailer: u32,
    },
    /// A block is too short for the fields every block of its type has.
    #[error("{block} of {length} bytes is too short for its {need}-byte fixed part")]
    FixedPartTooShort {
        /// The block, by its type.
        block: Item,
        /// The block's length.
        length: u32,
        /// Bytes of those fields, after the 8-byte block header.
        need: u32,
    },
    /// An interface description block has 1 to 3 bytes left after its last option.
    #[error("{block} has {remaining} bytes after its last option, too few for an option header")]
    OptionHeaderTruncated {
        /// The interface description block.
        block: Item,
        /// Bytes left after the last option.
        remaining: usize,
    },
    /// An option of an interface description block runs past the block's end.
    #[error("{block} option {code} claims {length} bytes ({padded} padded), but only {remaining} remain in the block")]
    OptionOverrun {
        /// The interface description block.
        block: Item,
        /// The option's code.
        code: u16,
        /// The value length it claims.
        length: u16,
        /// That length rounded up to a multiple of 4, as options are stored.
        padded: usize,
        /// Bytes left in the block after the option's header.
        remaining: usize,
    },
    /// An interface description block's `opt_endofopt` has a value.
    #[error("interface description block has opt_endofopt with length {length}, not 0")]
    EndOfOptLength {
        /// The length it claims.
        length: u16,
    },
    /// A timestamp option of an interface description block has the wrong length.
    #[error("interface description block has an {option} option of length {length}, not {expected}")]
    OptionLength {
        /// The option: `if_tsresol` or `if_tsoffset`.
        option: &'static str,
        /// The length it claims.
        length: u16,
        /// Its type's length.
        expected: u16,
    },
    /// An interface description block has a timestamp option twice.
    #[error("interface description block has more than one {option} option")]
    DuplicateOption {
        /// The option: `if_tsresol` or `if_tsoffset`.
        option: &'static str,
    },
    /// An `if_tsresol` so fine that a second has more units than 64 bits count.
    #[error(
        "interface description block has if_tsresol {value:#04x}: a resolution of {}^-{} seconds is finer than 64-bit timestamps can count",
        if value & 0x80 != 0 { 2 } else { 10 },
        value & 0x7f
    )]
    TsresolTooFine {
        /// The option's byte: the top bit picks base 2 over 10, the others are
        /// the negative exponent.
        value: u8,
    },
    /// A later interface's link type differs from the first one's, compared
    /// as libpcap compares them.
    #[error("{}", link_type_mismatch(*link_type, *first, *first_dlt))]
    LinkTypeMismatch {
        /// The later interface's link type, as written.
        link_type: u16,
        /// The first interface's link type, as written (LINKTYPE_).
        first: u32,
        /// The first interface's link type as libpcap numbers it (DLT_), which
        /// is what the later one is compared with.
        first_dlt: u32,
    },
    /// A later interface's snapshot length differs from the first one's.
    #[error("interface description block has snapshot length {snaplen}, different from the first interface's {first}")]
    SnaplenMismatch {
        /// The later interface's snapshot length, as written.
        snaplen: u32,
        /// The first interface's, as libpcap reads it (0 becomes the link type's maximum).
        first: u32,
    },
    /// A packet block names an interface its section has not described.
    #[error("{block} names interface {id}, but the section has {count} interface description blocks")]
    UnknownInterface {
        /// The packet block.
        block: Item,
        /// The interface id it names.
        id: u32,
        /// Interfaces the section has described so far.
        count: usize,
    },
    /// A packet block captured more than the snapshot length.
    #[error("{block} claims {caplen} captured bytes, more than the snapshot length {snapshot}")]
    CaplenOverSnaplen {
        /// The packet block.
        block: Item,
        /// Its captured length.
        caplen: u32,
        /// The file's snapshot length, [`TraceHeader::snapshot`](super::TraceHeader::snapshot).
        snapshot: u32,
    },
    /// A packet block's captured bytes run past its end.
    #[error("{block} claims {caplen} captured bytes but has room for only {room}")]
    PacketDataOverrun {
        /// The packet block.
        block: Item,
        /// Its captured length.
        caplen: u32,
        /// Bytes between its fixed fields and its trailer.
        room: usize,
    },
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
#[non_exhaustive]
pub enum ReadError {
    /// The file could not be opened or read.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        error: std::io::Error,
    },
    /// The file is malformed, or exceeds weir's limits.
    #[error("{}: {error}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where.
        error: FormatError,
    },
}

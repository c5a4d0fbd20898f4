//! libpcap's words for what went wrong with a savefile.
//!
//! Programs print `pcap_open_offline`'s errbuf and `pcap_geterr` after a read
//! as they are (tcpdump: "tcpdump: truncated dump file; ..."), and scripts
//! and test suites compare that text. So the shim says what libpcap 1.10.3
//! says, word for word, with libpcap's numbers: no file name (libpcap names
//! the file only when it cannot open it; the program names it otherwise),
//! no byte offset. Where weir refuses what libpcap would read (its size
//! limits) there are no libpcap words, and weir's own message is given,
//! without the file name.

use crate::types::{PCAP_ERROR, PCAP_ERROR_NO_SUCH_DEVICE, PCAP_ERROR_PERM_DENIED};
use std::io;
use std::path::Path;
use weir::engine::{BuildError, RunError, SourceError, SourceErrorKind};
use weir::tracefile::{FormatError, FormatErrorKind, Item, TraceHeader};
use weir::Setting;

/// `pcap_open_offline`'s message for a file it cannot open: libpcap's
/// fopen or its first fread failed. `None` when the file opens and reads.
pub fn unopenable(path: &Path, shown: &str) -> Option<String> {
    match std::fs::File::open(path) {
        Err(e) => Some(format!("{shown}: {}", strerror(&e))),
        // fopen opens a directory; the first fread fails.
        Ok(_) if path.is_dir() => Some(format!("error reading dump file: {}", strerror(&io::Error::from_raw_os_error(libc::EISDIR)))),
        Ok(_) => None,
    }
}

/// The C library's text for an error number, as libpcap prints it.
fn strerror(e: &io::Error) -> String {
    match e.raw_os_error() {
        // SAFETY: strerror returns a NUL-terminated string that stays valid
        // until the next strerror call on this thread; it is copied at once.
        Some(n) => unsafe { std::ffi::CStr::from_ptr(libc::strerror(n)) }.to_string_lossy().into_owned(),
        None => e.to_string(),
    }
}

/// The message for a file that could not be opened as a savefile.
pub fn open_error(e: &BuildError) -> String {
    match e {
        BuildError::Source(SourceError::Malformed { error, .. }) => at_open(error).unwrap_or_else(|| error.kind.to_string()),
        BuildError::Source(SourceError::Io { error, .. }) => format!("error reading dump file: {}", strerror(error)),
        other => said(other),
    }
}

/// `pcap_activate`'s message and code for a live capture that could not start:
/// libpcap's codes for a refused privilege and a missing device, by the kind
/// of the source's error.
pub fn activate_error(e: &BuildError) -> (String, i32) {
    match e {
        BuildError::Source(s) => match s.kind() {
            SourceErrorKind::NoSuchDevice => {
                ("No such device exists (weir opens interfaces of this network namespace)".into(), PCAP_ERROR_NO_SUCH_DEVICE)
            }
            SourceErrorKind::Permission => (said(e), PCAP_ERROR_PERM_DENIED),
            _ => (said(e), PCAP_ERROR),
        },
        _ => (said(e), PCAP_ERROR),
    }
}

/// How the library's users set weir's settings: by environment variable,
/// where there is one; otherwise in weir's words.
fn variable(s: Setting) -> &'static str {
    match s {
        Setting::Pool => "WEIR_POOL",
        Setting::Locality => "WEIR_LOCALITY",
        Setting::Queues => "WEIR_QUEUES",
        other => other.name(),
    }
}

/// An error, a refused setting named by its variable.
fn said(e: &BuildError) -> String {
    match e.setting_error() {
        Some(s) => format!("{}: {}", variable(s.setting), s.problem),
        None => e.to_string(),
    }
}

/// The message for a read that failed midway.
pub fn read_error(e: &RunError, header: Option<&TraceHeader>) -> String {
    match e {
        RunError::Source { error: SourceError::Malformed { error, .. }, .. } => {
            when_read(error, header).unwrap_or_else(|| error.kind.to_string())
        }
        RunError::Source { error: SourceError::Io { error, .. }, .. } => format!("error reading dump file: {}", strerror(error)),
        other => other.to_string(),
    }
}

const UNKNOWN: &str = "unknown file format";
/// The fixed part of a pcapng section header libpcap reads first: type,
/// length, byte-order magic.
const SHB_PROBE: usize = 12;
/// The pcap file header libpcap reads after the magic number.
const PCAP_HEADER: usize = 24;
const MAGIC: usize = 4;
/// A pcapng block's type and length.
const BLOCK_HEADER: usize = 8;
/// A pcap record's header.
const PCAP_RECORD_HEADER: usize = 16;

/// libpcap's words for an error while opening (reading the file header).
fn at_open(error: &FormatError) -> Option<String> {
    use FormatErrorKind::*;
    Some(match &error.kind {
        // libpcap tries each format on the magic number; none claims it.
        Gzip | UnknownFormat { .. } | BadByteOrderMagic { .. } => UNKNOWN.into(),
        TruncatedFileHeader { item: Item::PcapFileHeader, have, .. } if *have < MAGIC => {
            format!("truncated dump file; tried to read {MAGIC} file header bytes, only got {have}")
        }
        TruncatedFileHeader { item: Item::PcapFileHeader, have, .. } => {
            format!("truncated dump file; tried to read {PCAP_HEADER} file header bytes, only got {}", have - MAGIC)
        }
        // A section header too short to probe is no pcapng file to libpcap.
        TruncatedFileHeader { have, .. } if *have < SHB_PROBE => UNKNOWN.into(),
        TruncatedFileHeader { have, need, .. } => {
            format!("truncated pcapng dump file; tried to read {} bytes, only got {}", need - SHB_PROBE, have - SHB_PROBE)
        }
        ArchaicPcapVersion { .. } => "archaic pcap savefile format".into(),
        UnsupportedPcapVersion { major, minor } => format!("unsupported pcap savefile version {major}.{minor}"),
        SectionHeaderLength { length } => {
            format!("Section Header Block in pcapng dump file has invalid length 28 < _{length}_ < 1048576 (BT_SHB_INSANE_MAX)")
        }
        UnsupportedPcapngVersion { major, minor } => format!("unsupported pcapng savefile version {major}.{minor}"),
        NoInterface => "the capture file has no Interface Description Blocks".into(),
        _ => return when_read(error, None),
    })
}

/// libpcap's words for an error in a record or block.
fn when_read(error: &FormatError, header: Option<&TraceHeader>) -> Option<String> {
    use FormatErrorKind::*;
    let too_short = |block: &Item| match block {
        Item::Block(t) => Some(format!("block of type {t} in pcapng dump file is too short")),
        _ => None,
    };
    Some(match &error.kind {
        Truncated { item: Item::PcapRecordHeader, have, need } => {
            format!("truncated dump file; tried to read {need} header bytes, only got {have}")
        }
        Truncated { item: Item::PcapRecord, have, need } => {
            // `need` and `have` count the record header too; libpcap, only the
            // captured bytes. (Kuznetzov's files have 24-byte record headers,
            // which the error does not tell apart: there the numbers are 8 high.)
            format!(
                "truncated dump file; tried to read {} captured bytes, only got {}",
                need.saturating_sub(PCAP_RECORD_HEADER as u64),
                have.saturating_sub(PCAP_RECORD_HEADER)
            )
        }
        Truncated { item: Item::BlockHeader, have, .. } => {
            format!("truncated pcapng dump file; tried to read {BLOCK_HEADER} bytes, only got {have}")
        }
        Truncated { have, need, .. } => format!(
            "truncated pcapng dump file; tried to read {} bytes, only got {}",
            need.saturating_sub(BLOCK_HEADER as u64),
            have.saturating_sub(BLOCK_HEADER)
        ),
        CaplenOverMaximum { caplen, max, .. } => match header.map(|h| h.snapshot) {
            Some(snapshot) if caplen > &snapshot => {
                format!("invalid packet capture length {caplen}, bigger than snaplen of {snapshot}")
            }
            _ => format!("invalid packet capture length {caplen}, bigger than maximum of {max}"),
        },
        CaplenOverSnaplen { caplen, snapshot, .. } => {
            format!("invalid packet capture length {caplen}, bigger than snaplen of {snapshot}")
        }
        ByteOrderChange => "the file has sections with different byte orders".into(),
        BadByteOrderMagic { .. } => "the file has a section with a bad byte order magic field".into(),
        PcapngMajorVersion { major } => format!("unknown pcapng savefile major version number {major}"),
        NoInterface => "the capture file has no Interface Description Blocks".into(),
        PacketBeforeInterface { .. } => "the capture file has a packet block before any Interface Description Blocks".into(),
        BlockTooShort { length, .. } => format!("block in pcapng dump file has a length of {length} < 12"),
        BlockMisaligned { length, .. } => format!("block in pcapng dump file has a length of {length} that is not a multiple of 4"),
        BlockTooLong { length, max, .. } => format!("pcapng block size {length} > maximum {max}"),
        TrailerMismatch { .. } => "block total length in header and trailer don't match".into(),
        FixedPartTooShort { block, .. }
        | OptionHeaderTruncated { block, .. }
        | OptionOverrun { block, .. }
        | PacketDataOverrun { block, .. } => too_short(block)?,
        EndOfOptLength { length } => format!("Interface Description Block has opt_endofopt option with length {length} != 0"),
        OptionLength { option, length, expected } => {
            format!("Interface Description Block has {option} option with length {length} != {expected}")
        }
        DuplicateOption { option } => format!("Interface Description Block has more than one {option} option"),
        TsresolTooFine { value } if value & 0x80 != 0 => {
            format!("Interface Description Block if_tsresol option resolution 2^-{} is too high", value & 0x7f)
        }
        TsresolTooFine { value } => format!("Interface Description Block if_tsresol option resolution 10^-{value} is too high"),
        LinkTypeMismatch { link_type, .. } => {
            format!("an interface has a type {link_type} different from the type of the first interface")
        }
        SnaplenMismatch { snaplen, .. } => {
            format!("an interface has a snapshot length {snaplen} different from the snapshot length of the first interface")
        }
        UnknownInterface { id, .. } => {
            format!("a packet arrived on interface {id}, but there's no Interface Description Block for that interface")
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir::engine::CpuPlan;
    use weir::locality::{BatchSize, LocalityConfig};
    use weir::source::{QueueRange, SourceSpec};
    use weir::PoolConfig;

    /// A setting the engine refuses is said with the variable that set it, never
    /// with a flag of weir's command line; one without a variable in weir's words.
    #[test]
    fn a_refused_setting_is_named_by_its_variable() {
        // Refused before the source is opened: the file need not exist.
        let spec = || SourceSpec::File { path: Some("never-opened.pcap".into()), queues: QueueRange::single() };
        let builder = || weir::Engine::builder().source_spec(spec());
        let small = builder()
            .pool(PoolConfig::new(32, 16).unwrap())
            .locality(Some(LocalityConfig::new(BatchSize::new(481).unwrap())))
            .build()
            .err()
            .expect("a batch the pool cannot hold");
        let said = open_error(&small);
        assert!(said.starts_with("WEIR_LOCALITY: a batch of 481 packets"), "{said}");
        assert!(!said.contains("--"), "{said}");
        let cpus = builder().cpus(CpuPlan::List(vec![4096])).build().err().expect("a CPU that is not there");
        let said = open_error(&cpus);
        assert!(said.starts_with("CPU list: CPU 4096 is not available"), "{said}");
        let (said, code) = activate_error(&cpus);
        assert_eq!((said.starts_with("CPU list:"), code), (true, PCAP_ERROR), "{said}");
    }

    /// pcap_activate's codes come from the kind of the source's error, not its text.
    #[test]
    fn activation_codes_follow_the_kind_of_error() {
        let missing = weir::Engine::builder().source("afpacket:weirnope0").unwrap().build().err().expect("no such interface");
        assert_eq!(activate_error(&missing).1, PCAP_ERROR_NO_SUCH_DEVICE, "{missing}");
        let denied = BuildError::Source(SourceError::Io { what: "opening".into(), error: io::Error::from_raw_os_error(libc::EPERM) });
        assert_eq!(activate_error(&denied).1, PCAP_ERROR_PERM_DENIED);
        let busy = BuildError::Source(SourceError::Io { what: "attaching".into(), error: io::Error::from_raw_os_error(libc::EBUSY) });
        assert_eq!(activate_error(&busy).1, PCAP_ERROR);
    }
}

//! Flow records on the wire: IPFIX (RFC 7011), NetFlow v9 (RFC 3954) and
//! NetFlow v5 (Cisco's fixed format), one export message at a time.
//!
//! Written here rather than taken from a crate: the Rust crates for these
//! formats read them (collectors, parsers); none writes all three with
//! template refresh and per-domain sequence numbers, and what an exporter
//! needs of them is small: a header, a template per address family, and
//! fixed-size data records. The field lists are shared (`Field`): IPFIX
//! information elements 1 to 127 are NetFlow v9's field types, so one record
//! writer serves both.
//!
//! Biflows (RFC 5103, IPFIX only): a record may carry the opposite
//! direction of its connection as reverse information elements, the same
//! elements under the reverse enterprise number 29305 (packets, octets, TCP
//! flags), in templates of their own (258, 259); its first and last packet
//! times are the connection's, of either direction. No reverse times are
//! sent: nfdump 1.7 takes reverseFlowStartMilliseconds and
//! reverseFlowEndMilliseconds for the flow's own first and last times, so
//! with them it would date a biflow by its reverse direction alone. It does
//! the same with reverseTcpControlBits, the last value written winning in
//! template order: the reverse flags come just before the forward ones, so
//! nfdump keeps the forward flags (and reads the reverse counters as its out
//! packets and bytes), while a reader of RFC 5103 gets both. A biflow
//! template is used for every record of a biflow run, one seen in one
//! direction only included: its reverse counters are 0.
//!
//! An [`Encoder`] fills one message in a buffer it keeps (reused from message
//! to message, never grown past [`MAX_MESSAGE`]); [`Encoder::finish`] writes
//! the header (lengths, counts, time and sequence number) in place and hands
//! out the bytes to send. Every byte offset of a header is named in
//! [`offsets`].
//!
//! Contract:
//! - every record [`Encoder::add`] is given is in exactly one message
//!   ([`Added::Yes`]), refused by the format ([`Added::NotCarried`]: IPv6 in
//!   NetFlow v5, for the caller to count), or refused by this message only
//!   ([`Added::Full`]: finish and send it, then add the record again, which
//!   an empty message always takes);
//! - no message is longer than [`MAX_MESSAGE`] (no IP fragmentation on the
//!   way to a collector over an Ethernet MTU);
//! - an encoder's sequence numbers count as its format says (IPFIX and v5:
//!   the data records of the messages before; v9: the messages), with no gap
//!   between messages it finished, so a collector counts none lost;
//! - a message's time is the records' own (the latest end among them), never
//!   the wall clock: the same records make the same bytes.

use std::net::IpAddr;

/// Which format messages are written in.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Format {
    /// IPFIX (RFC 7011): version 10.
    Ipfix,
    /// NetFlow version 9 (RFC 3954).
    V9,
    /// NetFlow version 5: IPv4 only, 30 records a message at most.
    V5,
}

impl Format {
    /// Its name: `ipfix`, `v9` or `v5` (what `str::parse` takes).
    pub fn name(self) -> &'static str {
        match self {
            Format::Ipfix => "ipfix",
            Format::V9 => "v9",
            Format::V5 => "v5",
        }
    }
}

impl std::str::FromStr for Format {
    type Err = ParseFormatError;
    fn from_str(s: &str) -> Result<Format, ParseFormatError> {
        [Format::Ipfix, Format::V9, Format::V5].into_iter().find(|f| f.name() == s).ok_or_else(|| ParseFormatError { given: s.to_owned() })
    }
}

/// A name that is not a flow export [`Format`]'s (`ipfix`, `v9` or `v5`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{given}` is not a flow export format (ipfix, v9, v5)")]
pub struct ParseFormatError {
    given: String,
}

impl ParseFormatError {
    /// The name as given.
    pub fn given(&self) -> &str {
        &self.given
    }
}

/// Why a flow record was exported (IPFIX's flowEndReason, RFC 7011's IANA
/// registry values).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum EndReason {
    /// No packet for the inactive timeout.
    Idle = 1,
    /// Open for the active timeout: the flow goes on in a next record.
    Active = 2,
    /// The flow ended: FIN or RST seen, or a new SYN reused its ports.
    EndOfFlow = 3,
    /// The input ended or the run was stopped.
    Forced = 4,
    /// The flow table was full and it was the least recently seen.
    LackOfResources = 5,
}

impl EndReason {
    /// Every reason, in the order statistics list them.
    pub const ALL: [EndReason; 5] =
        [EndReason::Idle, EndReason::Active, EndReason::EndOfFlow, EndReason::Forced, EndReason::LackOfResources];

    /// Its name in statistics.
    pub fn name(self) -> &'static str {
        match self {
            EndReason::Idle => "idle",
            EndReason::Active => "active",
            EndReason::EndOfFlow => "end-of-flow",
            EndReason::Forced => "end-of-input",
            EndReason::LackOfResources => "evicted",
        }
    }
}

/// One flow record: one direction of a connection over one export interval.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FlowRecord {
    /// Source address of the direction.
    pub src: IpAddr,
    /// Destination address of the direction.
    pub dst: IpAddr,
    /// Source port (0 for protocols without ports).
    pub sport: u16,
    /// Destination port (0 for protocols without ports; ICMP's type and
    /// code as `type << 8 | code`, as the stream layer keys ICMP flows).
    pub dport: u16,
    /// IP protocol number.
    pub proto: u8,
    /// The TCP flags of its packets, OR'ed.
    pub tcp_flags: u8,
    /// Its packets.
    pub packets: u64,
    /// IP bytes, headers included.
    pub octets: u64,
    /// Time of its first packet, ms since the epoch.
    pub start_ms: u64,
    /// Time of its last packet, ms since the epoch.
    pub end_ms: u64,
    /// The interface index it came in on (its queue number plus one).
    pub ingress: u32,
    /// Why it was exported.
    pub end: EndReason,
    /// In a biflow: the opposite direction of the connection (the source
    /// and destination swapped), when it was seen.
    pub reverse: Option<Reverse>,
}

/// The opposite direction of a biflow: its counters.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Reverse {
    /// The TCP flags of its packets, OR'ed.
    pub tcp_flags: u8,
    /// Its packets.
    pub packets: u64,
    /// Its IP bytes, headers included.
    pub octets: u64,
}

/// Largest message: an Ethernet MTU of 1500 less the IPv6 and UDP headers,
/// so no message is fragmented on the way to a collector.
pub const MAX_MESSAGE: usize = 1500 - 40 - 8;

/// NetFlow v5's own limit of records per message.
const V5_MAX_RECORDS: usize = 30;

/// The byte offsets of the headers, each format's in one place.
pub mod offsets {
    /// IPFIX message header (RFC 7011 3.1).
    pub mod ipfix {
        /// Version number: 10.
        pub const VERSION: usize = 0;
        /// Length of the message in bytes, header included.
        pub const LENGTH: usize = 2;
        /// Export time, seconds since the epoch.
        pub const EXPORT_TIME: usize = 4;
        /// Sequence number: data records sent before this message.
        pub const SEQUENCE: usize = 8;
        /// Observation domain id.
        pub const DOMAIN: usize = 12;
        /// Length of the header.
        pub const HEADER_LEN: usize = 16;
    }
    /// NetFlow v9 packet header (RFC 3954 5.1).
    pub mod v9 {
        /// Version number: 9.
        pub const VERSION: usize = 0;
        /// Records in the packet, template and data.
        pub const COUNT: usize = 2;
        /// The exporter's uptime at export, ms.
        pub const UPTIME: usize = 4;
        /// Export time, seconds since the epoch.
        pub const UNIX_SECS: usize = 8;
        /// Sequence number: packets sent before this one.
        pub const SEQUENCE: usize = 12;
        /// Source id (the observation domain).
        pub const SOURCE_ID: usize = 16;
        /// Length of the header.
        pub const HEADER_LEN: usize = 20;
    }
    /// NetFlow v5 header and record.
    pub mod v5 {
        /// Version number: 5.
        pub const VERSION: usize = 0;
        /// Records in the packet.
        pub const COUNT: usize = 2;
        /// The exporter's uptime at export, ms.
        pub const UPTIME: usize = 4;
        /// Export time, seconds since the epoch.
        pub const UNIX_SECS: usize = 8;
        /// Export time, the nanoseconds past the second.
        pub const UNIX_NSECS: usize = 12;
        /// Sequence number: records sent before this packet.
        pub const SEQUENCE: usize = 16;
        /// Engine type (the domain's high byte).
        pub const ENGINE_TYPE: usize = 20;
        /// Engine id (the domain's low byte).
        pub const ENGINE_ID: usize = 21;
        /// Sampling mode and interval (0: none).
        pub const SAMPLING: usize = 22;
        /// Length of the header.
        pub const HEADER_LEN: usize = 24;
        /// Offsets within one 48-byte record: its source address.
        pub const SRC_ADDR: usize = 0;
        /// Destination address.
        pub const DST_ADDR: usize = 4;
        /// Input interface index.
        pub const INPUT: usize = 12;
        /// Packets.
        pub const PACKETS: usize = 16;
        /// Octets.
        pub const OCTETS: usize = 20;
        /// Uptime at the first packet, ms.
        pub const FIRST: usize = 24;
        /// Uptime at the last packet, ms.
        pub const LAST: usize = 28;
        /// Source port.
        pub const SRC_PORT: usize = 32;
        /// Destination port.
        pub const DST_PORT: usize = 34;
        /// TCP flags, OR'ed.
        pub const TCP_FLAGS: usize = 37;
        /// IP protocol.
        pub const PROTO: usize = 38;
        /// Length of a record.
        pub const RECORD_LEN: usize = 48;
    }
    /// A set (IPFIX) or flowset (v9) header: its id,
    pub const SET_ID: usize = 0;
    /// its length in bytes, header included,
    pub const SET_LENGTH: usize = 2;
    /// and the header's length.
    pub const SET_HEADER_LEN: usize = 4;
}

/// A field of a template, with its information element (IPFIX) or field
/// type (v9) number and its length on the wire.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Field {
    SrcV4,
    DstV4,
    SrcV6,
    DstV6,
    SrcPort,
    DstPort,
    Proto,
    /// IPFIX's tcpControlBits is 16 bits (RFC 7125); v9's TCP_FLAGS 8.
    TcpFlags16,
    TcpFlags8,
    Packets,
    Octets,
    /// IPFIX: flowStartMilliseconds and flowEndMilliseconds.
    StartMs,
    EndMs,
    /// v9: FIRST_SWITCHED and LAST_SWITCHED, ms of system uptime.
    StartUptime,
    EndUptime,
    Ingress,
    /// IPFIX's flowEndReason.
    EndReason,
    /// ICMP type and code (`type << 8 | code`, 0 for other protocols):
    /// IPFIX's icmpTypeCodeIPv4 and icmpTypeCodeIPv6, v9's ICMP_TYPE (for
    /// both; nfdump reads an ICMP flow's type from it in v9, not from the
    /// destination port, which carries the same value).
    IcmpV4,
    IcmpV6,
    IcmpV9,
    /// RFC 5103's reverse elements: the element of the same number under
    /// the reverse enterprise number.
    RevTcpFlags,
    RevPackets,
    RevOctets,
}

/// RFC 5103's private enterprise number for reverse information elements.
pub const REVERSE_PEN: u32 = 29305;

impl Field {
    /// (element or field type number, length in bytes).
    fn spec(self) -> (u16, u16) {
        match self {
            Field::Octets => (1, 8),
            Field::Packets => (2, 8),
            Field::Proto => (4, 1),
            Field::TcpFlags16 => (6, 2),
            Field::TcpFlags8 => (6, 1),
            Field::SrcPort => (7, 2),
            Field::SrcV4 => (8, 4),
            Field::Ingress => (10, 4),
            Field::DstPort => (11, 2),
            Field::DstV4 => (12, 4),
            Field::EndUptime => (21, 4),
            Field::StartUptime => (22, 4),
            Field::SrcV6 => (27, 16),
            Field::DstV6 => (28, 16),
            Field::EndReason => (136, 1),
            Field::IcmpV4 | Field::IcmpV9 => (32, 2),
            Field::IcmpV6 => (139, 2),
            Field::StartMs => (152, 8),
            Field::EndMs => (153, 8),
            Field::RevTcpFlags => (6, 2),
            Field::RevPackets => (2, 8),
            Field::RevOctets => (1, 8),
        }
    }

    /// The enterprise number of a reverse element, `None` for IANA's.
    fn enterprise(self) -> Option<u32> {
        matches!(self, RevTcpFlags | RevPackets | RevOctets).then_some(REVERSE_PEN)
    }
}

use Field::*;
const IPFIX_V4: &[Field] =
    &[SrcV4, DstV4, SrcPort, DstPort, Proto, TcpFlags16, Packets, Octets, StartMs, EndMs, Ingress, EndReason, IcmpV4];
const IPFIX_V6: &[Field] =
    &[SrcV6, DstV6, SrcPort, DstPort, Proto, TcpFlags16, Packets, Octets, StartMs, EndMs, Ingress, EndReason, IcmpV6];
const IPFIX_BI_V4: &[Field] = &[
    SrcV4,
    DstV4,
    SrcPort,
    DstPort,
    Proto,
    RevTcpFlags,
    TcpFlags16,
    Packets,
    Octets,
    StartMs,
    EndMs,
    Ingress,
    EndReason,
    IcmpV4,
    RevPackets,
    RevOctets,
];
const IPFIX_BI_V6: &[Field] = &[
    SrcV6,
    DstV6,
    SrcPort,
    DstPort,
    Proto,
    RevTcpFlags,
    TcpFlags16,
    Packets,
    Octets,
    StartMs,
    EndMs,
    Ingress,
    EndReason,
    IcmpV6,
    RevPackets,
    RevOctets,
];
const V9_V4: &[Field] = &[SrcV4, DstV4, SrcPort, DstPort, Proto, TcpFlags8, Packets, Octets, StartUptime, EndUptime, Ingress, IcmpV9];
const V9_V6: &[Field] = &[SrcV6, DstV6, SrcPort, DstPort, Proto, TcpFlags8, Packets, Octets, StartUptime, EndUptime, Ingress, IcmpV9];

/// Template ids: 256 is the first a data set may use.
const TEMPLATE_V4: u16 = 256;
const TEMPLATE_V6: u16 = 257;
const TEMPLATE_BI_V4: u16 = 258;
const TEMPLATE_BI_V6: u16 = 259;

/// Set ids of template sets.
const IPFIX_TEMPLATE_SET: u16 = 2;
const V9_TEMPLATE_SET: u16 = 0;

/// NetFlow v9 and v5 give times as ms of the exporter's uptime (32 bits),
/// with the header's uptime and wall time to turn them into dates. Weir
/// "boots" one day before the first record it exports starts, so the records
/// of other queues, which may have started earlier, still have a positive
/// uptime; uptimes wrap after 49.7 days, as a router's do.
const BOOT_BEFORE_MS: u64 = 86_400_000;

/// What [`Encoder::add`] did with a record.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Added {
    /// It is in the message.
    Yes,
    /// The message is full: finish and send it, then add the record again.
    Full,
    /// The format cannot carry it (NetFlow v5 and an IPv6 flow).
    NotCarried,
}

/// Why [`Encoder::new`] refused its settings.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncoderError {
    /// Biflows were asked of a format other than IPFIX.
    #[error("biflows (RFC 5103) are IPFIX's: NetFlow {} has no reverse fields", .0.name())]
    BiflowNotIpfix(Format),
    /// NetFlow v5 and an observation domain past 16 bits.
    #[error("NetFlow v5 carries the observation domain in two bytes (engine type and id): {0} is more than 65535")]
    V5Domain(u32),
}

/// Builds the messages of one observation domain in one format.
pub struct Encoder {
    format: Format,
    domain: u32,
    /// Biflow templates (IPFIX only).
    biflow: bool,
    buf: Vec<u8>,
    /// The open set: where its header is and its id.
    set: Option<(usize, u16)>,
    /// Data records in the message.
    records: usize,
    /// v9's count: template and data records.
    v9_count: u16,
    /// IPFIX and v5: data records sent before this message; v9: messages.
    sequence: u32,
    boot_ms: Option<u64>,
    /// Latest record end in the message, ms: the message's export time.
    latest_ms: u64,
}

impl Encoder {
    /// An encoder for `format`, with `domain` as IPFIX's observation domain,
    /// v9's source id, or v5's engine type (high byte) and id (low byte);
    /// with biflow templates if `biflow` (IPFIX only).
    pub fn new(format: Format, domain: u32, biflow: bool) -> Result<Encoder, EncoderError> {
        if biflow && format != Format::Ipfix {
            return Err(EncoderError::BiflowNotIpfix(format));
        }
        if format == Format::V5 && domain > 0xffff {
            return Err(EncoderError::V5Domain(domain));
        }
        let mut e = Encoder {
            format,
            domain,
            biflow,
            buf: Vec::with_capacity(MAX_MESSAGE),
            set: None,
            records: 0,
            v9_count: 0,
            sequence: 0,
            boot_ms: None,
            latest_ms: 0,
        };
        e.clear();
        Ok(e)
    }

    fn header_len(&self) -> usize {
        match self.format {
            Format::Ipfix => offsets::ipfix::HEADER_LEN,
            Format::V9 => offsets::v9::HEADER_LEN,
            Format::V5 => offsets::v5::HEADER_LEN,
        }
    }

    /// Starts an empty message.
    fn clear(&mut self) {
        self.buf.clear();
        self.buf.resize(self.header_len(), 0);
        (self.set, self.records, self.v9_count, self.latest_ms) = (None, 0, 0, 0);
    }

    /// Data records in the message being built.
    pub fn records(&self) -> usize {
        self.records
    }

    /// Whether the message holds anything (records or templates).
    pub fn is_empty(&self) -> bool {
        self.buf.len() == self.header_len()
    }

    /// Adds the template set (both templates) to the message; v5 has none.
    /// Call it on an empty message, before any record.
    pub fn add_templates(&mut self) {
        let set_id = match self.format {
            Format::Ipfix => IPFIX_TEMPLATE_SET,
            Format::V9 => V9_TEMPLATE_SET,
            Format::V5 => return,
        };
        self.close_set();
        self.open_set(set_id);
        for (id, fields) in [self.template(true), self.template(false)] {
            put16(&mut self.buf, id);
            put16(&mut self.buf, fields.len() as u16);
            for f in fields {
                let (number, len) = f.spec();
                match f.enterprise() {
                    // RFC 7011 3.2: the enterprise bit, then the number.
                    Some(pen) => {
                        put16(&mut self.buf, number | 0x8000);
                        put16(&mut self.buf, len);
                        put32(&mut self.buf, pen);
                    }
                    None => {
                        put16(&mut self.buf, number);
                        put16(&mut self.buf, len);
                    }
                }
            }
            self.v9_count += 1;
        }
        self.close_set();
    }

    /// The template (id and fields) for IPv4 (`v4`) or IPv6 records.
    fn template(&self, v4: bool) -> (u16, &'static [Field]) {
        match (self.format, self.biflow, v4) {
            (Format::Ipfix, false, true) => (TEMPLATE_V4, IPFIX_V4),
            (Format::Ipfix, false, false) => (TEMPLATE_V6, IPFIX_V6),
            (Format::Ipfix, true, true) => (TEMPLATE_BI_V4, IPFIX_BI_V4),
            (Format::Ipfix, true, false) => (TEMPLATE_BI_V6, IPFIX_BI_V6),
            (_, _, true) => (TEMPLATE_V4, V9_V4),
            (_, _, false) => (TEMPLATE_V6, V9_V6),
        }
    }

    /// A message holding the templates only, with sequence number 0 and
    /// export time 0 (a file writer sets both, see [`super::files`]).
    pub fn templates_message(&self) -> Vec<u8> {
        let mut e = Encoder { buf: Vec::new(), ..*self };
        e.clear();
        e.add_templates();
        e.sequence = 0;
        e.finish().to_vec()
    }

    /// Adds one record to the message.
    pub fn add(&mut self, r: &FlowRecord) -> Added {
        if self.format == Format::V5 {
            return self.add_v5(r);
        }
        let (id, fields) = self.template(r.src.is_ipv4() && r.dst.is_ipv4());
        let len: usize = fields.iter().map(|f| usize::from(f.spec().1)).sum();
        let same_set = self.set.is_some_and(|(_, s)| s == id);
        // Room for the record, a set header if one opens, and v9's padding of
        // the set to 4 bytes.
        let need = len + if same_set { 0 } else { offsets::SET_HEADER_LEN } + 3;
        if self.buf.len() + need > MAX_MESSAGE {
            return Added::Full;
        }
        if !same_set {
            self.close_set();
            self.open_set(id);
        }
        self.note_times(r);
        for &f in fields {
            self.put_field(f, r);
        }
        self.records += 1;
        self.v9_count += 1;
        Added::Yes
    }

    fn add_v5(&mut self, r: &FlowRecord) -> Added {
        use offsets::v5 as o;
        let (IpAddr::V4(src), IpAddr::V4(dst)) = (r.src, r.dst) else { return Added::NotCarried };
        if self.records == V5_MAX_RECORDS {
            return Added::Full;
        }
        self.note_times(r);
        let at = self.buf.len();
        self.buf.resize(at + o::RECORD_LEN, 0);
        let (first, last) = (self.uptime(r.start_ms), self.uptime(r.end_ms));
        let b = &mut self.buf[at..];
        b[o::SRC_ADDR..o::SRC_ADDR + 4].copy_from_slice(&src.octets());
        b[o::DST_ADDR..o::DST_ADDR + 4].copy_from_slice(&dst.octets());
        // The input interface has 16 bits in v5.
        set16(b, o::INPUT, u16::try_from(r.ingress).unwrap_or(u16::MAX));
        // v5's counters have 32 bits: a larger count is sent as the largest
        // (the statistics count such records).
        set32(b, o::PACKETS, saturate32(r.packets));
        set32(b, o::OCTETS, saturate32(r.octets));
        set32(b, o::FIRST, first);
        set32(b, o::LAST, last);
        set16(b, o::SRC_PORT, r.sport);
        set16(b, o::DST_PORT, r.dport);
        b[o::TCP_FLAGS] = r.tcp_flags;
        b[o::PROTO] = r.proto;
        self.records += 1;
        Added::Yes
    }

    fn note_times(&mut self, r: &FlowRecord) {
        self.boot_ms.get_or_insert(r.start_ms.saturating_sub(BOOT_BEFORE_MS));
        self.latest_ms = self.latest_ms.max(r.end_ms);
    }

    /// `ms` as ms of uptime, wrapping as a 32-bit uptime does.
    fn uptime(&self, ms: u64) -> u32 {
        ms.wrapping_sub(self.boot_ms.unwrap_or(0)) as u32
    }

    fn put_field(&mut self, f: Field, r: &FlowRecord) {
        let b = &mut self.buf;
        match f {
            SrcV4 | SrcV6 => put_addr(b, r.src),
            DstV4 | DstV6 => put_addr(b, r.dst),
            SrcPort => put16(b, r.sport),
            DstPort => put16(b, r.dport),
            Proto => b.push(r.proto),
            TcpFlags16 => put16(b, u16::from(r.tcp_flags)),
            TcpFlags8 => b.push(r.tcp_flags),
            Packets => b.extend_from_slice(&r.packets.to_be_bytes()),
            Octets => b.extend_from_slice(&r.octets.to_be_bytes()),
            StartMs => b.extend_from_slice(&r.start_ms.to_be_bytes()),
            EndMs => b.extend_from_slice(&r.end_ms.to_be_bytes()),
            StartUptime => {
                let t = self.uptime(r.start_ms);
                put32(&mut self.buf, t);
            }
            EndUptime => {
                let t = self.uptime(r.end_ms);
                put32(&mut self.buf, t);
            }
            Ingress => put32(b, r.ingress),
            EndReason => b.push(r.end as u8),
            // The stream layer keys ICMP flows by type and code as the
            // destination port: the same value.
            IcmpV4 | IcmpV6 | IcmpV9 => put16(b, if matches!(r.proto, 1 | 58) { r.dport } else { 0 }),
            RevTcpFlags => put16(b, u16::from(r.reverse.unwrap_or_default().tcp_flags)),
            RevPackets => b.extend_from_slice(&r.reverse.unwrap_or_default().packets.to_be_bytes()),
            RevOctets => b.extend_from_slice(&r.reverse.unwrap_or_default().octets.to_be_bytes()),
        }
    }

    fn open_set(&mut self, id: u16) {
        let at = self.buf.len();
        self.set = Some((at, id));
        self.buf.resize(at + offsets::SET_HEADER_LEN, 0);
        set16(&mut self.buf, at + offsets::SET_ID, id);
    }

    /// Writes the open set's length, after padding a v9 flowset to 4 bytes
    /// (RFC 3954 5.3: the collector takes the padding for no record, as it
    /// is shorter than one).
    fn close_set(&mut self) {
        let Some((at, _)) = self.set.take() else { return };
        if self.format == Format::V9 {
            let pad = (4 - (self.buf.len() - at) % 4) % 4;
            self.buf.resize(self.buf.len() + pad, 0);
        }
        let len = (self.buf.len() - at) as u16;
        set16(&mut self.buf, at + offsets::SET_LENGTH, len);
    }

    /// Completes the message, its export time the latest end of its
    /// records (packet time, see [`super::export`]), and returns its bytes; call
    /// [`reset`](Self::reset) before the next record. The sequence number
    /// moves on by the records (IPFIX, v5) or by one message (v9).
    pub fn finish(&mut self) -> &[u8] {
        self.close_set();
        // The export time on a whole second (the latest record end, rounded
        // up): v9's header dates its uptime in seconds only, so a collector
        // turns an uptime into a date as `unix_secs * 1000 - sys_uptime +
        // uptime`, and an uptime taken at a fraction of a second would shift
        // every date by that fraction.
        let now = self.latest_ms.div_ceil(1000) * 1000;
        let len = self.buf.len();
        let (secs, uptime) = ((now / 1000) as u32, self.uptime(now));
        let b = &mut self.buf;
        match self.format {
            Format::Ipfix => {
                use offsets::ipfix as o;
                set16(b, o::VERSION, 10);
                set16(b, o::LENGTH, len as u16);
                set32(b, o::EXPORT_TIME, secs);
                set32(b, o::SEQUENCE, self.sequence);
                set32(b, o::DOMAIN, self.domain);
                self.sequence = self.sequence.wrapping_add(self.records as u32);
            }
            Format::V9 => {
                use offsets::v9 as o;
                set16(b, o::VERSION, 9);
                set16(b, o::COUNT, self.v9_count);
                set32(b, o::UPTIME, uptime);
                set32(b, o::UNIX_SECS, secs);
                set32(b, o::SEQUENCE, self.sequence);
                set32(b, o::SOURCE_ID, self.domain);
                self.sequence = self.sequence.wrapping_add(1);
            }
            Format::V5 => {
                use offsets::v5 as o;
                set16(b, o::VERSION, 5);
                set16(b, o::COUNT, self.records as u16);
                set32(b, o::UPTIME, uptime);
                set32(b, o::UNIX_SECS, secs);
                set32(b, o::UNIX_NSECS, (now % 1000) as u32 * 1_000_000);
                set32(b, o::SEQUENCE, self.sequence);
                b[o::ENGINE_TYPE] = (self.domain >> 8) as u8;
                b[o::ENGINE_ID] = self.domain as u8;
                set16(b, o::SAMPLING, 0);
                self.sequence = self.sequence.wrapping_add(self.records as u32);
            }
        }
        (self.set, self.records, self.v9_count, self.latest_ms) = (None, 0, 0, 0);
        &self.buf
    }

    /// Empties the message after [`finish`](Self::finish), for the next.
    pub fn reset(&mut self) {
        self.clear();
    }
}

/// Whether v5 has to cut a count of `r` to 32 bits.
pub fn v5_saturates(r: &FlowRecord) -> bool {
    r.packets > u64::from(u32::MAX) || r.octets > u64::from(u32::MAX)
}

fn saturate32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn put16(b: &mut Vec<u8>, v: u16) {
    b.extend_from_slice(&v.to_be_bytes());
}

fn put32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_be_bytes());
}

fn put_addr(b: &mut Vec<u8>, a: IpAddr) {
    match a {
        IpAddr::V4(a) => b.extend_from_slice(&a.octets()),
        IpAddr::V6(a) => b.extend_from_slice(&a.octets()),
    }
}

fn set16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

fn set32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

#[cfg(test)]
mod tests;

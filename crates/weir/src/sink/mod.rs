//! Writing packets out: pcap and pcapng files, and rotation across files.
//!
//! Writers take packets as (timestamp in ns, captured bytes, wire length), the
//! same shape the engine delivers, and produce files that libpcap, tshark and
//! capinfos read back with identical packet counts and bytes. Written by hand:
//! both formats are a few fixed headers, and writing them is on the hot path of
//! `weir record`.
//!
//! Lengths are written as given, as libpcap's `pcap_dump` (and so `tcpdump -w`)
//! writes them: a record whose captured length exceeds its wire length (which
//! `pcap_next_ex` reports as it is in the file) keeps both, so `weir record`
//! writes the wire bytes `weir count` sums. Link types are checked before a
//! file is started: both formats hold 0 to 65535, and a larger one is refused
//! ([`LinkTypeError`]) rather than written as another type.

mod pcap;
mod pcapng;
pub mod rotate;

use crate::LinkType;
use std::io::{self, BufWriter, Write};

/// The on-disk format to write.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FileFormat {
    /// Classic pcap, version 2.4, with the microsecond or nanosecond magic.
    Pcap,
    /// pcapng, version 1.0: one section, one interface, an enhanced packet block per packet.
    PcapNg,
}

impl std::fmt::Display for FileFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FileFormat::Pcap => "pcap",
            FileFormat::PcapNg => "pcapng",
        })
    }
}

/// A link type a file format cannot hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("link type {} cannot be written to {format}: {}", link.0, match format {
    FileFormat::Pcap => "a pcap file header holds link types 0 to 65535 in the lower 16 bits of its link-type field; the upper 16 bits carry FCS-length flags",
    FileFormat::PcapNg => "an interface description block's link-type field is 16 bits: 0 to 65535",
})]
pub struct LinkTypeError {
    link: LinkType,
    format: FileFormat,
}

/// The 16-bit value `format` records `link` as, or why it cannot. weir's pcap reader keeps the
/// upper bits it does not know (all but the FCS flags) in the link type, so a
/// type above 65535 reaches here from a damaged or foreign header: writing it
/// cut to 16 bits (pcapng) or with those bits in the flags (pcap) would label
/// the packets as another link type.
fn check_link_type(format: FileFormat, link: LinkType) -> Result<u16, LinkTypeError> {
    u16::try_from(link.0).map_err(|_| LinkTypeError { link, format })
}

/// The link type as its 16-bit field, or the writer's refusal.
fn link_field(format: FileFormat, link: LinkType) -> io::Result<u16> {
    check_link_type(format, link).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

/// Timestamp resolution of the written file.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TsPrecision {
    /// Microseconds: the sub-microsecond part of a timestamp is dropped.
    Micro,
    /// Nanoseconds: timestamps are written whole.
    Nano,
}

/// A pcap or pcapng writer over any byte sink.
///
/// Output goes through a 1 MiB buffer: [`finish`](Self::finish) writes out
/// the rest and reports its errors. Dropping the writer also writes it out,
/// but loses any error.
pub enum TraceWriter<W: Write> {
    /// Writing classic pcap.
    Pcap(pcap::PcapWriter<W>),
    /// Writing pcapng.
    PcapNg(pcapng::PcapNgWriter<W>),
}

impl<W: Write> TraceWriter<W> {
    /// Start a file: writes the file header (pcap) or section and interface
    /// blocks (pcapng) that declare `link` and `snaplen` (in bytes; packets
    /// are not cut to it).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a link type the format cannot hold; the sink's own.
    pub fn new(w: W, format: FileFormat, link: LinkType, snaplen: u32, precision: TsPrecision) -> io::Result<Self> {
        Ok(match format {
            FileFormat::Pcap => TraceWriter::Pcap(pcap::PcapWriter::new(w, link, snaplen, precision)?),
            FileFormat::PcapNg => TraceWriter::PcapNg(pcapng::PcapNgWriter::new(w, link, snaplen, precision)?),
        })
    }

    /// Append one packet: `ts_ns` nanoseconds since the Unix epoch, `data` its
    /// captured bytes, `wire_len` its length on the wire (written as given, as
    /// libpcap does, even below `data.len()`). pcap holds seconds up to 2106:
    /// later times are clamped to its last second.
    ///
    /// # Errors
    ///
    /// The sink's, when the buffer is handed to it.
    #[inline]
    pub fn write_packet(&mut self, ts_ns: u64, data: &[u8], wire_len: u32) -> io::Result<()> {
        match self {
            TraceWriter::Pcap(w) => w.write_packet(ts_ns, data, wire_len),
            TraceWriter::PcapNg(w) => w.write_packet(ts_ns, data, wire_len),
        }
    }

    /// Bytes the next packet of `caplen` captured bytes will add to the file.
    fn record_len(&self, caplen: usize) -> u64 {
        match self {
            TraceWriter::Pcap(_) => pcap::record_len(caplen),
            TraceWriter::PcapNg(_) => pcapng::record_len(caplen),
        }
    }

    fn counted(&self) -> &Counted<W> {
        match self {
            TraceWriter::Pcap(w) => &w.out,
            TraceWriter::PcapNg(w) => &w.out,
        }
    }

    /// Bytes written so far, headers included.
    pub fn bytes_written(&self) -> u64 {
        self.counted().bytes
    }

    /// Packets written so far.
    pub fn packets_written(&self) -> u64 {
        self.counted().packets
    }

    /// Hand everything buffered to the underlying sink (the kernel, for a file).
    fn flush(&mut self) -> io::Result<()> {
        match self {
            TraceWriter::Pcap(w) => w.out.out.flush(),
            TraceWriter::PcapNg(w) => w.out.out.flush(),
        }
    }

    /// Write out the buffer and hand back the underlying sink.
    ///
    /// # Errors
    ///
    /// The sink's, for what was still buffered.
    pub fn finish(self) -> io::Result<W> {
        let out = match self {
            TraceWriter::Pcap(w) => w.out,
            TraceWriter::PcapNg(w) => w.out,
        };
        out.out.into_inner().map_err(|e| e.into_error())
    }
}

/// A buffered sink that counts the bytes and packets written through it.
struct Counted<W: Write> {
    out: BufWriter<W>,
    bytes: u64,
    packets: u64,
}

impl<W: Write> Counted<W> {
    fn new(w: W) -> Self {
        Counted { out: BufWriter::with_capacity(1 << 20, w), bytes: 0, packets: 0 }
    }

    #[inline]
    fn write(&mut self, b: &[u8]) -> io::Result<()> {
        self.out.write_all(b)?;
        self.bytes += b.len() as u64;
        Ok(())
    }
}

/// A timestamp past 2106 (pcap's unsigned 32-bit seconds) cannot be written to pcap.
fn split_ts(ts_ns: u64) -> (u32, u32) {
    let secs = ts_ns / 1_000_000_000;
    ((secs.min(u64::from(u32::MAX))) as u32, (ts_ns % 1_000_000_000) as u32)
}

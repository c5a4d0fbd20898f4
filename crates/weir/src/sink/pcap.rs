//! The classic pcap format: a 24-byte file header, then a 16-byte header per packet.
//!
//! Written in the host's byte order with the microsecond or nanosecond magic, as
//! libpcap itself writes. Timestamps past 2106 are clamped to the last second
//! pcap can hold.

use super::{link_field, split_ts, Counted, FileFormat, TsPrecision};
use crate::LinkType;
use std::io::{self, Write};

const MAGIC_MICRO: u32 = 0xa1b2_c3d4;
const MAGIC_NANO: u32 = 0xa1b2_3c4d;
const VERSION_MAJOR: u16 = 2;
const VERSION_MINOR: u16 = 4;
const FILE_HEADER_LEN: u64 = 24;
const RECORD_HEADER_LEN: u64 = 16;

/// Bytes one packet of `caplen` bytes takes in a pcap file.
pub(super) fn record_len(caplen: usize) -> u64 {
    RECORD_HEADER_LEN + caplen as u64
}

/// A classic pcap file being written; used through [`TraceWriter::Pcap`](super::TraceWriter::Pcap).
pub struct PcapWriter<W: Write> {
    pub(super) out: Counted<W>,
    nanos: bool,
}

impl<W: Write> PcapWriter<W> {
    pub(super) fn new(w: W, link: LinkType, snaplen: u32, precision: TsPrecision) -> io::Result<Self> {
        let nanos = precision == TsPrecision::Nano;
        let link = link_field(FileFormat::Pcap, link)?;
        let mut out = Counted::new(w);
        let mut h = [0u8; FILE_HEADER_LEN as usize];
        h[0..4].copy_from_slice(&(if nanos { MAGIC_NANO } else { MAGIC_MICRO }).to_ne_bytes());
        h[4..6].copy_from_slice(&VERSION_MAJOR.to_ne_bytes());
        h[6..8].copy_from_slice(&VERSION_MINOR.to_ne_bytes());
        // thiszone and sigfigs stay zero, as every modern writer leaves them.
        h[16..20].copy_from_slice(&snaplen.to_ne_bytes());
        // No FCS flags in the upper half: weir does not know an FCS length.
        h[20..24].copy_from_slice(&u32::from(link).to_ne_bytes());
        out.write(&h)?;
        Ok(PcapWriter { out, nanos })
    }

    #[inline]
    pub(super) fn write_packet(&mut self, ts_ns: u64, data: &[u8], wire_len: u32) -> io::Result<()> {
        let (secs, ns) = split_ts(ts_ns);
        let frac = if self.nanos { ns } else { ns / 1000 };
        let mut h = [0u8; RECORD_HEADER_LEN as usize];
        h[0..4].copy_from_slice(&secs.to_ne_bytes());
        h[4..8].copy_from_slice(&frac.to_ne_bytes());
        h[8..12].copy_from_slice(&(data.len() as u32).to_ne_bytes());
        h[12..16].copy_from_slice(&wire_len.to_ne_bytes());
        self.out.write(&h)?;
        self.out.write(data)?;
        self.out.packets += 1;
        Ok(())
    }
}

//! pcapng: one Section Header Block, one Interface Description Block, then an
//! Enhanced Packet Block per packet, in the host's byte order.
//!
//! The interface's `if_tsresol` is 9 (nanoseconds) or left at the default
//! microseconds. The section length is written as -1 (unknown), which lets the
//! file be written in one pass.

use super::{link_field, Counted, FileFormat, TsPrecision};
use crate::LinkType;
use std::io::{self, Write};

const SHB: u32 = 0x0a0d_0d0a;
const IDB: u32 = 0x0000_0001;
const EPB: u32 = 0x0000_0006;
const BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;
const OPT_END: u16 = 0;
const SHB_USERAPPL: u16 = 4;
const IF_TSRESOL: u16 = 9;
/// EPB: type, length, interface, ts high, ts low, caplen, wire length ... length.
const EPB_OVERHEAD: u64 = 32;

fn pad4(n: usize) -> usize {
    (n + 3) & !3
}

/// Bytes one packet of `caplen` bytes takes in an EPB.
pub(super) fn record_len(caplen: usize) -> u64 {
    EPB_OVERHEAD + pad4(caplen) as u64
}

/// A pcapng file being written; used through [`TraceWriter::PcapNg`](super::TraceWriter::PcapNg).
pub struct PcapNgWriter<W: Write> {
    pub(super) out: Counted<W>,
    nanos: bool,
}

/// Append an option (code, length, value padded to 4) to a block body.
fn option(body: &mut Vec<u8>, code: u16, value: &[u8]) {
    body.extend_from_slice(&code.to_ne_bytes());
    body.extend_from_slice(&(value.len() as u16).to_ne_bytes());
    body.extend_from_slice(value);
    body.resize(pad4(body.len()), 0);
}

fn block<W: Write>(out: &mut Counted<W>, ty: u32, body: &[u8]) -> io::Result<()> {
    let total = (12 + body.len()) as u32;
    out.write(&ty.to_ne_bytes())?;
    out.write(&total.to_ne_bytes())?;
    out.write(body)?;
    out.write(&total.to_ne_bytes())
}

impl<W: Write> PcapNgWriter<W> {
    pub(super) fn new(w: W, link: LinkType, snaplen: u32, precision: TsPrecision) -> io::Result<Self> {
        let nanos = precision == TsPrecision::Nano;
        let link = link_field(FileFormat::PcapNg, link)?;
        let mut out = Counted::new(w);

        let mut shb = Vec::new();
        shb.extend_from_slice(&BYTE_ORDER_MAGIC.to_ne_bytes());
        shb.extend_from_slice(&1u16.to_ne_bytes());
        shb.extend_from_slice(&0u16.to_ne_bytes());
        shb.extend_from_slice(&(-1i64).to_ne_bytes());
        option(&mut shb, SHB_USERAPPL, concat!("weir ", env!("CARGO_PKG_VERSION")).as_bytes());
        option(&mut shb, OPT_END, &[]);
        block(&mut out, SHB, &shb)?;

        let mut idb = Vec::new();
        idb.extend_from_slice(&link.to_ne_bytes());
        idb.extend_from_slice(&0u16.to_ne_bytes());
        idb.extend_from_slice(&snaplen.to_ne_bytes());
        if nanos {
            option(&mut idb, IF_TSRESOL, &[9]);
        }
        option(&mut idb, OPT_END, &[]);
        block(&mut out, IDB, &idb)?;
        Ok(PcapNgWriter { out, nanos })
    }

    #[inline]
    pub(super) fn write_packet(&mut self, ts_ns: u64, data: &[u8], wire_len: u32) -> io::Result<()> {
        let ts = if self.nanos { ts_ns } else { ts_ns / 1000 };
        let padded = pad4(data.len());
        let total = (EPB_OVERHEAD as usize + padded) as u32;
        let mut h = [0u8; 28];
        h[0..4].copy_from_slice(&EPB.to_ne_bytes());
        h[4..8].copy_from_slice(&total.to_ne_bytes());
        // Interface 0: the only one.
        h[12..16].copy_from_slice(&((ts >> 32) as u32).to_ne_bytes());
        h[16..20].copy_from_slice(&(ts as u32).to_ne_bytes());
        h[20..24].copy_from_slice(&(data.len() as u32).to_ne_bytes());
        h[24..28].copy_from_slice(&wire_len.to_ne_bytes());
        self.out.write(&h)?;
        self.out.write(data)?;
        self.out.write(&[0u8; 3][..padded - data.len()])?;
        self.out.write(&total.to_ne_bytes())?;
        self.out.packets += 1;
        Ok(())
    }
}

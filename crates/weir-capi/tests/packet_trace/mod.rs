//! A trace for the packet API's tests: TCP, UDP and ARP frames of many
//! flows and sizes, in time order, and what it holds.

use std::path::Path;
use weir::sink::{FileFormat, TraceWriter, TsPrecision};
use weir::LinkType;

/// What a trace written by [`write`] holds.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    pub packets: u64,
    pub bytes: u64,
    pub udp: u64,
    pub udp_bytes: u64,
}

/// `packets` frames over `flows` flows (1: every frame of one TCP/UDP flow
/// pair, which a split puts on one queue): every third UDP, every
/// seventeenth ARP (not IP), the rest TCP; 60 to about 1,400 bytes each.
pub fn write(path: &Path, packets: u32, flows: u32) -> Facts {
    let mut w =
        TraceWriter::new(std::fs::File::create(path).unwrap(), FileFormat::Pcap, LinkType::ETHERNET, 65535, TsPrecision::Nano).unwrap();
    let mut facts = Facts::default();
    for i in 0..packets {
        let flow = i % flows;
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        let udp = i % 3 == 0;
        if i % 17 == 5 {
            // ARP request, padded to the minimum frame.
            f.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
            f.resize(60, 0);
        } else {
            let payload = (i as usize * 37) % 1300;
            let l4 = if udp { 8 } else { 20 };
            let total = (20 + l4 + payload) as u16;
            f.extend_from_slice(&[0x08, 0x00, 0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0x40, 0, 64, if udp { 17 } else { 6 }, 0, 0]);
            f.extend_from_slice(&[10, (flow >> 8) as u8, flow as u8, 1, 10, 200, 0, 1]);
            f.extend_from_slice(&(1024 + (flow % 50_000) as u16).to_be_bytes());
            f.extend_from_slice(&80u16.to_be_bytes());
            if udp {
                f.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
                f.extend_from_slice(&[0, 0]);
            } else {
                f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
            }
            f.resize(14 + usize::from(total), i as u8);
            if udp {
                facts.udp += 1;
                facts.udp_bytes += f.len() as u64;
            }
        }
        facts.packets += 1;
        facts.bytes += f.len() as u64;
        w.write_packet(1_700_000_000_000_000_000 + u64::from(i) * 10_000, &f, f.len() as u32).unwrap();
    }
    w.finish().unwrap();
    facts
}

//! Test traffic: a deterministic generator, and Ethernet/IPv4 TCP or UDP frames
//! that carry a sequence number so a test can follow each packet end to end.

/// A tiny deterministic generator (xorshift), so tests need no extra crates.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Where a frame goes, at both layers.
#[derive(Copy, Clone, Debug)]
pub struct Frame {
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub sport: u16,
    pub dport: u16,
    pub udp: bool,
}

impl Frame {
    /// The frame with IPv4 lengths and checksum right, whose payload is `head`,
    /// then `seq` (big-endian), then filler up to `payload` bytes.
    pub fn build(&self, head: &[u8], seq: u32, payload: usize) -> Vec<u8> {
        let l4 = if self.udp { 8 } else { 20 };
        let payload = payload.max(head.len() + 4);
        let total = 20 + l4 + payload;
        let mut f = self.dst_mac.to_vec();
        f.extend_from_slice(&self.src_mac);
        f.extend_from_slice(&[0x08, 0x00]);
        let mut ip = vec![0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0x40, 0, 64, if self.udp { 17 } else { 6 }, 0, 0];
        ip.extend_from_slice(&self.src);
        ip.extend_from_slice(&self.dst);
        let sum = ip.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum::<u32>();
        let sum = !(((sum & 0xffff) + (sum >> 16)) as u16);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&self.sport.to_be_bytes());
        f.extend_from_slice(&self.dport.to_be_bytes());
        if self.udp {
            f.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
            f.extend_from_slice(&[0, 0]);
        } else {
            f.extend_from_slice(&[0; 8]);
            f.extend_from_slice(&[0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
        }
        f.extend_from_slice(head);
        f.extend_from_slice(&seq.to_be_bytes());
        f.resize(14 + total, (seq % 251) as u8);
        f
    }

    /// The other direction of the same flow.
    pub fn reply(&self) -> Frame {
        Frame {
            dst_mac: self.dst_mac,
            src_mac: self.src_mac,
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            udp: self.udp,
        }
    }
}

//! Ethernet / IPv4 / TCP / UDP frames with correct checksums, and the RFC 1624 update.
//!
//! Builders write a whole frame into a reused buffer: headers first, then the payload
//! through a callback (so payload generators write in place), then the IPv4 header
//! checksum and the TCP or UDP checksum over the pseudo-header and the whole
//! segment. [`update_checksum`] adjusts a stored checksum for a changed 16-bit word
//! without looking at the rest of the packet, which is what re-addressing captured
//! packets needs: it keeps correct checksums correct and wrong ones exactly as wrong.

pub const ETH_HEADER_LEN: usize = 14;
pub const IPV4_HEADER_LEN: usize = 20;
pub const TCP_HEADER_LEN: usize = 20;
pub const UDP_HEADER_LEN: usize = 8;
pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;

/// Offset of the checksum within the TCP and the UDP header.
pub const TCP_CHECKSUM_AT: usize = 16;
pub const UDP_CHECKSUM_AT: usize = 6;
pub const IPV4_CHECKSUM_AT: usize = 10;

pub mod tcp_flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
}

/// A locally administered unicast MAC derived from an IPv4 address, so a host keeps
/// one MAC for the whole trace and never collides with a real vendor's.
pub fn mac_for(ip: [u8; 4]) -> [u8; 6] {
    [0x02, 0x00, ip[0], ip[1], ip[2], ip[3]]
}

/// The IPv4 header fields that vary between packets.
#[derive(Copy, Clone, Debug)]
pub struct Ipv4Fields {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub ttl: u8,
    pub id: u16,
    pub dont_fragment: bool,
    pub dscp: u8,
}

/// The TCP header fields that vary between segments; `options` is padded to 32 bits by the caller.
#[derive(Copy, Clone, Debug)]
pub struct TcpFields<'a> {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
    pub options: &'a [u8],
}

/// Ones' complement sum of `data` as big-endian 16-bit words (an odd last byte is
/// padded with zero), not yet folded. Summing 32-bit words is equivalent because
/// 2^16 ≡ 1 modulo 2^16 − 1, and twice as fast.
pub fn sum_words(data: &[u8]) -> u64 {
    let mut sum = 0u64;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        sum += u64::from(u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
    }
    let rest = chunks.remainder();
    let mut i = 0;
    while i + 1 < rest.len() {
        sum += u64::from(u16::from_be_bytes([rest[i], rest[i + 1]]));
        i += 2;
    }
    if i < rest.len() {
        sum += u64::from(rest[i]) << 8;
    }
    sum
}

/// Fold a partial sum to 16 bits with end-around carry.
pub fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The Internet checksum of `data`.
pub fn internet_checksum(data: &[u8]) -> u16 {
    !fold(sum_words(data))
}

/// Partial sum of the IPv4 pseudo-header for a TCP or UDP segment of `len` bytes.
pub fn pseudo_header_sum(src: [u8; 4], dst: [u8; 4], proto: u8, len: usize) -> u64 {
    sum_words(&src) + sum_words(&dst) + u64::from(proto) + len as u64
}

/// The TCP or UDP checksum of `segment` (its checksum field must hold zero).
/// UDP sends a computed zero as 0xffff, because zero means "no checksum".
pub fn l4_checksum(src: [u8; 4], dst: [u8; 4], proto: u8, segment: &[u8]) -> u16 {
    let c = !fold(pseudo_header_sum(src, dst, proto, segment.len()) + sum_words(segment));
    if proto == PROTO_UDP && c == 0 {
        0xffff
    } else {
        c
    }
}

/// RFC 1624 eqn. 3: the checksum `hc` after one covered 16-bit word changes from `old` to `new`.
pub fn update_checksum(hc: u16, old: u16, new: u16) -> u16 {
    !fold(u64::from(!hc) + u64::from(!old) + u64::from(new))
}

/// [`update_checksum`] for a 4-byte field (an IPv4 address) at an even offset.
pub fn update_checksum_addr(hc: u16, old: [u8; 4], new: [u8; 4]) -> u16 {
    let hc = update_checksum(hc, u16::from_be_bytes([old[0], old[1]]), u16::from_be_bytes([new[0], new[1]]));
    update_checksum(hc, u16::from_be_bytes([old[2], old[3]]), u16::from_be_bytes([new[2], new[3]]))
}

fn push_ethernet(out: &mut Vec<u8>, src_mac: [u8; 6], dst_mac: [u8; 6]) {
    out.extend_from_slice(&dst_mac);
    out.extend_from_slice(&src_mac);
    out.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
}

fn push_ipv4(out: &mut Vec<u8>, ip: &Ipv4Fields, proto: u8, payload_len: usize) {
    let total = (IPV4_HEADER_LEN + payload_len) as u16;
    let start = out.len();
    let flags: u16 = if ip.dont_fragment { 0x4000 } else { 0 };
    out.extend_from_slice(&[0x45, ip.dscp << 2]);
    out.extend_from_slice(&total.to_be_bytes());
    out.extend_from_slice(&ip.id.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&[ip.ttl, proto, 0, 0]);
    out.extend_from_slice(&ip.src);
    out.extend_from_slice(&ip.dst);
    let c = internet_checksum(&out[start..start + IPV4_HEADER_LEN]);
    out[start + IPV4_CHECKSUM_AT..start + IPV4_CHECKSUM_AT + 2].copy_from_slice(&c.to_be_bytes());
}

/// Grow `out` by `len` bytes and let `fill` write them.
fn push_payload(out: &mut Vec<u8>, len: usize, fill: impl FnOnce(&mut [u8])) {
    let at = out.len();
    out.resize(at + len, 0);
    fill(&mut out[at..]);
}

/// Write a whole Ethernet/IPv4/TCP frame into `out` (cleared first).
pub fn build_tcp(
    out: &mut Vec<u8>,
    macs: ([u8; 6], [u8; 6]),
    ip: &Ipv4Fields,
    tcp: &TcpFields<'_>,
    payload_len: usize,
    fill: impl FnOnce(&mut [u8]),
) {
    debug_assert_eq!(tcp.options.len() % 4, 0);
    let header_len = TCP_HEADER_LEN + tcp.options.len();
    out.clear();
    push_ethernet(out, macs.0, macs.1);
    push_ipv4(out, ip, PROTO_TCP, header_len + payload_len);
    let l4 = out.len();
    out.extend_from_slice(&tcp.src_port.to_be_bytes());
    out.extend_from_slice(&tcp.dst_port.to_be_bytes());
    out.extend_from_slice(&tcp.seq.to_be_bytes());
    out.extend_from_slice(&tcp.ack.to_be_bytes());
    out.extend_from_slice(&[((header_len / 4) as u8) << 4, tcp.flags]);
    out.extend_from_slice(&tcp.window.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(tcp.options);
    push_payload(out, payload_len, fill);
    let c = l4_checksum(ip.src, ip.dst, PROTO_TCP, &out[l4..]);
    out[l4 + TCP_CHECKSUM_AT..l4 + TCP_CHECKSUM_AT + 2].copy_from_slice(&c.to_be_bytes());
}

/// Write a whole Ethernet/IPv4/UDP frame into `out` (cleared first).
pub fn build_udp(
    out: &mut Vec<u8>,
    macs: ([u8; 6], [u8; 6]),
    ip: &Ipv4Fields,
    ports: (u16, u16),
    payload_len: usize,
    fill: impl FnOnce(&mut [u8]),
) {
    let udp_len = UDP_HEADER_LEN + payload_len;
    out.clear();
    push_ethernet(out, macs.0, macs.1);
    push_ipv4(out, ip, PROTO_UDP, udp_len);
    let l4 = out.len();
    out.extend_from_slice(&ports.0.to_be_bytes());
    out.extend_from_slice(&ports.1.to_be_bytes());
    out.extend_from_slice(&(udp_len as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    push_payload(out, payload_len, fill);
    let c = l4_checksum(ip.src, ip.dst, PROTO_UDP, &out[l4..]);
    out[l4 + UDP_CHECKSUM_AT..l4 + UDP_CHECKSUM_AT + 2].copy_from_slice(&c.to_be_bytes());
}

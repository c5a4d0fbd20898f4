//! IPv4 and IPv6 fragments, well made or not, through the stream layer's
//! fragment reassembly (`weir::stream::fragment`).
//!
//! Input: three bytes of limits (pending datagrams, bytes, timeout), then
//! operations. Each starts with a byte whose top two bits say what it is:
//! a raw packet (a length byte and that many bytes, pushed as they are), a
//! step of packet time with an `expire`, or a fragment made from the next
//! four bytes (version, identification, offset, length, MF, extension
//! headers or options) of a datagram whose bytes are a function of its key
//! and offset, so that fragments of it agree wherever they overlap.
//!
//! The reassembly must never panic (its debug assertions check its counters,
//! limits and held ranges after every call, and fuzz builds keep them); after
//! every push the counters' identities must hold; a complete datagram must
//! be a whole packet (IPv4: total length, MF and offset clear, a right header
//! checksum; IPv6: payload length, no Fragment header left). When every
//! packet was made, every complete datagram must carry its key's bytes, and
//! no overlap may conflict.

#![no_main]

use libfuzzer_sys::fuzz_target;

// As the TCP reassembler's target does: the stream layer is pub(crate)
// until the engine wires it in, and this file needs nothing else of weir.
#[path = "../../crates/weir/src/stream/fragment.rs"]
#[allow(dead_code)]
mod fragment;

use fragment::{Defrag, FragCounters, FragLimits, Outcome};

const UDP: u8 = 17;

/// The byte at `offset` of the data of made datagram `id`.
fn pattern(v6: bool, id: u8, offset: usize) -> u8 {
    (offset as u8).wrapping_mul(31) ^ id.wrapping_mul(53) ^ u8::from(v6)
}

fn checksum_ok(header: &[u8]) -> bool {
    let mut sum: u32 = header.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

/// A fragment of made datagram `id`: data `offset..offset + len`, MF, and
/// `extra` (IPv4: 4-byte words of options; IPv6: how many of hop-by-hop,
/// routing, destination options come first).
fn make(v6: bool, id: u8, offset: usize, len: usize, more: bool, extra: u8) -> Vec<u8> {
    let data = (offset..offset + len).map(|i| pattern(v6, id, i));
    if !v6 {
        let ihl = 5 + usize::from(extra % 4);
        let mut p = vec![0x40 | ihl as u8, 0, 0, 0, 0, id, 0, 0, 64, UDP, 0, 0, 192, 0, 2, 1, 198, 51, 100, 2];
        p.resize(ihl * 4, 1); // NOP options
        let total = (p.len() + len) as u16;
        p[2..4].copy_from_slice(&total.to_be_bytes());
        let flags = ((offset / 8) as u16 & 0x1fff) | if more { 0x2000 } else { 0 };
        p[6..8].copy_from_slice(&flags.to_be_bytes());
        let sum: u32 = p.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
        let sum = (sum & 0xffff) + (sum >> 16);
        let sum = (sum & 0xffff) + (sum >> 16);
        p[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        p.extend(data);
        return p;
    }
    let exts = [0u8, 43, 60];
    let exts = &exts[..usize::from(extra % 4).min(3)];
    let mut p = vec![0x60, 0, 0, 0, 0, 0, exts.first().copied().unwrap_or(44), 64];
    p.extend_from_slice(&[0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    p.extend_from_slice(&[0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    for (i, _) in exts.iter().enumerate() {
        let next = exts.get(i + 1).copied().unwrap_or(44);
        p.extend_from_slice(&[next, 0, 1, 4, 0, 0, 0, 0]);
    }
    p.extend_from_slice(&[UDP, 0]);
    p.extend_from_slice(&((offset as u16 & 0xfff8) | u16::from(more)).to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, id]);
    p.extend(data);
    let payload = (p.len() - 40) as u16;
    p[4..6].copy_from_slice(&payload.to_be_bytes());
    p
}

fn identities(c: &FragCounters) {
    assert_eq!(c.fragments, c.fragments_accounted(), "{c:?}");
    assert_eq!(c.datagrams, c.datagrams_accounted(), "{c:?}");
}

/// Checks a complete datagram is whole; when `made`, that it carries its
/// key's bytes.
fn check_complete(d: &[u8], made: bool) {
    if d[0] >> 4 == 4 {
        let ihl = usize::from(d[0] & 0x0f) * 4;
        assert!(ihl >= 20 && ihl <= d.len());
        assert_eq!(usize::from(u16::from_be_bytes([d[2], d[3]])), d.len(), "total length");
        assert_eq!(u16::from_be_bytes([d[6], d[7]]) & 0x3fff, 0, "MF or offset left");
        assert!(checksum_ok(&d[..ihl]), "header checksum");
        if made {
            for (i, &b) in d[ihl..].iter().enumerate() {
                assert_eq!(b, pattern(false, d[5], i), "IPv4 data byte {i}");
            }
        }
        return;
    }
    assert!(d.len() >= 40);
    assert_eq!(usize::from(u16::from_be_bytes([d[4], d[5]])) + 40, d.len(), "payload length");
    if made {
        let (mut next, mut at) = (d[6], 40);
        while matches!(next, 0 | 43 | 60) {
            next = d[at];
            at += (usize::from(d[at + 1]) + 1) * 8;
        }
        assert_eq!(next, UDP, "the Fragment header left, or the wrong next header");
        // The made fragments carry no address that tells the id but the
        // Fragment header's, gone now: find it from the first data byte.
        let id = (0..=255u8).find(|&id| d.len() == at || pattern(true, id, 0) == d[at]).expect("some id");
        for (i, &b) in d[at..].iter().enumerate() {
            assert_eq!(b, pattern(true, id, i), "IPv6 data byte {i}");
        }
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((head, mut rest)) = input.split_first_chunk::<3>() else { return };
    // Small limits, where evictions happen.
    let limits =
        FragLimits { max_datagrams: usize::from(head[0] % 8), max_bytes: u64::from(head[1]) * 256, timeout_ns: u64::from(head[2]) * 10 };
    let mut defrag = Defrag::new(limits);
    let mut ts = 0u64;
    let mut made = true;
    while let Some((&op, tail)) = rest.split_first() {
        rest = tail;
        match op >> 6 {
            0 => {
                let Some((&len, tail)) = rest.split_first() else { break };
                let packet = &tail[..usize::from(len).min(tail.len())];
                rest = &tail[packet.len()..];
                made = false;
                if let Outcome::Complete(d) = defrag.push(ts, packet) {
                    check_complete(d, false);
                }
            }
            1 => {
                ts += u64::from(op & 0x3f);
                defrag.expire(ts);
            }
            _ => {
                let Some((&[sel, off, len, extra], tail)) = rest.split_first_chunk::<4>() else { break };
                rest = tail;
                let v6 = op & 0x40 != 0;
                let id = sel & 3;
                let more = op & 1 != 0;
                // Offsets mostly small, where fragments meet; sometimes near
                // the top, where datagrams grow too big.
                let offset = if op & 2 != 0 { 65535 - usize::from(off) * 8 } else { usize::from(off) * 8 } & !7;
                let len = usize::from(len) * if op & 4 != 0 { 8 } else { 1 } + usize::from(op >> 3 & 7) * 64;
                let packet = make(v6, id, offset, len, more, extra);
                if let Outcome::Complete(d) = defrag.push(ts, &packet) {
                    check_complete(d, made);
                }
            }
        }
        let c = defrag.counters();
        identities(&c);
        if made {
            assert_eq!(c.overlap_conflicts, 0, "made fragments agree wherever they overlap");
        }
    }
});

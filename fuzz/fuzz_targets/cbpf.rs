//! Classic BPF programs as a C caller hands them to `pcap_setfilter` (a
//! `struct bpf_program` it made itself), through `Filter::from_program`, then
//! run on packets.
//!
//! Input: one byte n, then n + 1 instructions of 8 bytes each (`struct
//! bpf_insn` in this machine's order), then the packet. A program
//! `from_program` accepts must never panic, loop or read outside the packet,
//! whatever the packet: it is run on the packet, on every shorter capture of
//! it down to none, and with wire lengths below, at and far above the
//! captured one, and must answer the same every time it is asked the same.

#![no_main]

use libfuzzer_sys::fuzz_target;
use weir::filter::{BpfInsn, Filter, MAX_INSNS};

/// Captured lengths tried below the packet's own: all of them up to this,
/// then a few, so a long packet does not make one input slow.
const EVERY_CAPLEN_UP_TO: usize = 64;

fn insn(b: &[u8]) -> BpfInsn {
    BpfInsn { code: u16::from_ne_bytes([b[0], b[1]]), jt: b[2], jf: b[3], k: u32::from_ne_bytes([b[4], b[5], b[6], b[7]]) }
}

fuzz_target!(|input: &[u8]| {
    let Some((&n, rest)) = input.split_first() else { return };
    let len = (usize::from(n) + 1).min(MAX_INSNS);
    let Some(code) = rest.get(..len * 8) else { return };
    let packet = &rest[len * 8..];
    let insns: Vec<BpfInsn> = code.chunks_exact(8).map(insn).collect();
    let Ok(filter) = Filter::from_program(&insns) else { return };
    assert_eq!(filter.program(), &insns[..], "the program kept is the one given");
    let caplens = (0..=packet.len().min(EVERY_CAPLEN_UP_TO)).chain([packet.len() / 2, packet.len().saturating_sub(1), packet.len()]);
    for caplen in caplens {
        let data = &packet[..caplen];
        for wire in [caplen as u32, caplen as u32 + 1, u32::MAX, 0] {
            let verdict = filter.run(data, wire);
            assert_eq!(filter.run(data, wire), verdict, "the same packet, another answer");
            assert_eq!(filter.matches(data, wire), verdict != 0);
        }
    }
});

//! The filter JIT against the interpreter, on random valid classic BPF
//! programs and packets.
//!
//! Input: one byte n, then n + 1 instructions of 8 bytes each, then the
//! packet. Each instruction's bytes are made valid rather than thrown away:
//! the first byte picks one of the opcodes weir runs, scratch indices are
//! taken modulo 16, a constant divisor of 0 becomes 1, jump offsets are
//! folded into the program (`ja` may go backward, as `protochain`'s does; a
//! `jeq` may be made one of a chain to one of the last instructions, as `port a
//! or port b or ...` compiles), and a return ends the program. `Filter::from_program` must accept the
//! result, and the JIT must return the interpreter's exact value on the
//! packet, on every shorter capture of it down to none, and with wire lengths
//! below, at and far above the captured one; and both engines' batch entry
//! (`Filter::run_batch`) must give all those verdicts again in one call.

#![no_main]

use libfuzzer_sys::fuzz_target;
use weir::filter::{BatchInput, BpfInsn, Filter, FilterEngine, MAX_INSNS};

/// Every opcode `decode` accepts (`<linux/filter.h>` values).
const CODES: [u16; 49] = [
    0x20, 0x28, 0x30, 0x40, 0x48, 0x50, 0x80, 0x00, 0x60, 0x01, 0x61, 0x81, 0xb1, 0x02, 0x03, 0x04, 0x14, 0x24, 0x34, 0x44, 0x54, 0x64,
    0x74, 0x94, 0xa4, 0x0c, 0x1c, 0x2c, 0x3c, 0x4c, 0x5c, 0x6c, 0x7c, 0x9c, 0xac, 0x84, 0x05, 0x15, 0x25, 0x35, 0x45, 0x1d, 0x2d, 0x3d,
    0x4d, 0x06, 0x16, 0x07, 0x87,
];

/// Captured lengths tried below the packet's own: all of them up to this.
const EVERY_CAPLEN_UP_TO: usize = 64;

/// Instruction `at` of a program of `len`, made valid from 8 raw bytes.
fn insn(b: &[u8], at: usize, len: usize) -> BpfInsn {
    // A quarter of the instructions are jeq, so that chains of them are common.
    let code = if b[0] >= 0xc0 { 0x15 } else { CODES[usize::from(b[0]) % CODES.len()] };
    let k = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    // Small offsets most of the time, so loads land inside the packet.
    let k = if b[1] & 0x80 == 0 { k % 64 } else { k };
    let ahead = (len - at - 1) as u32;
    let fold = |off: u8| if ahead == 0 { 0 } else { (u32::from(off) % ahead) as u8 };
    match code {
        0x60 | 0x61 | 0x02 | 0x03 => BpfInsn { code, jt: 0, jf: 0, k: k % 16 },
        0x34 | 0x94 => BpfInsn { code, jt: 0, jf: 0, k: k.max(1) },
        // ja: forward inside the program, or back to this or an earlier instruction.
        0x05 if b[1] & 1 == 1 => BpfInsn { code, jt: 0, jf: 0, k: (-1 - (k % (at as u32 + 1)) as i32) as u32 },
        0x05 => BpfInsn { code, jt: 0, jf: 0, k: k % ahead.max(1) },
        // Often a jeq whose true branch goes to one of the last four
        // instructions and false branch (mostly) to the next: runs of them make
        // the chains the JIT tests without branching, ending just before their
        // target or not, with the last false branch elsewhere or not.
        0x15 if b[1] & 0x40 != 0 && ahead > 0 => {
            let jt = (ahead - 1).saturating_sub(u32::from(b[2] % 4)).min(255) as u8;
            let jf = if b[1] & 0x20 != 0 { fold(b[3]) } else { 0 };
            BpfInsn { code, jt, jf, k: k % 8 }
        }
        c if c & 0x07 == 0x05 => BpfInsn { code, jt: fold(b[2]), jf: fold(b[3]), k },
        _ => BpfInsn { code, jt: 0, jf: 0, k },
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&n, rest)) = input.split_first() else { return };
    let len = (usize::from(n) + 1).min(MAX_INSNS);
    let Some(code) = rest.get(..len * 8) else { return };
    let packet = &rest[len * 8..];
    let mut insns: Vec<BpfInsn> = code.chunks_exact(8).enumerate().map(|(at, b)| insn(b, at, len + 1)).collect();
    insns.push(BpfInsn { code: if n & 1 == 0 { 0x16 } else { 0x06 }, jt: 0, jf: 0, k: 0xffff });
    let interp = match Filter::from_program(&insns) {
        Ok(f) => f.with_engine(FilterEngine::Interp),
        Err(e) => panic!("a program made valid was refused: {e}\n{insns:?}"),
    };
    let jit = interp.clone().with_engine(FilterEngine::Jit);
    assert_eq!(jit.engine(), FilterEngine::Jit, "{:?}", jit.jit_unavailable());
    let caplens = (0..=packet.len().min(EVERY_CAPLEN_UP_TO)).chain([packet.len() / 2, packet.len()]);
    // Every run again as one batch on each engine: the same verdicts, in order.
    let mut inputs = Vec::new();
    let mut expected = Vec::new();
    for caplen in caplens {
        let data = &packet[..caplen];
        for wire in [caplen as u32, caplen as u32 + 1, u32::MAX, 0] {
            let want = interp.run(data, wire);
            assert_eq!(jit.run(data, wire), want, "{caplen}/{wire} bytes {data:02x?}\n{insns:?}");
            inputs.push(BatchInput::new(data, wire));
            expected.push(want);
        }
    }
    for engine in [&jit, &interp] {
        let mut out = vec![u32::MAX; inputs.len()];
        engine.run_batch(&inputs, &mut out);
        assert_eq!(out, expected, "{} batch\n{insns:?}", engine.engine());
    }
});

//! Unit and model tests of the filter against the system libpcap.
//!
//! Contract: every result weir's interpreter gives here is also checked against
//! libpcap's `pcap_offline_filter` on the same program and packet, down to the
//! full 32-bit return value (see [`libpcap_returns`]); the only exceptions are
//! the cases where libpcap would not terminate, which are asserted on weir alone.
//! Every result is also asked of the JIT (on x86-64), which must give the
//! interpreter's exact value (see [`engines`]).

use proptest::prelude::*;

use super::oracle::Oracle;
use super::program::{code::*, MEMWORDS, SKF_AD_OFF};
use super::*;

fn oracle() -> &'static Oracle {
    Oracle::system().unwrap_or_else(|e| panic!("{e}"))
}

pub(super) fn stmt(code: u16, k: u32) -> BpfInsn {
    BpfInsn { code, jt: 0, jf: 0, k }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> BpfInsn {
    BpfInsn { code, jt, jf, k }
}

/// A `ja` from instruction `from` to instruction `to`, in either direction.
fn ja(from: usize, to: usize) -> BpfInsn {
    stmt(JMP_JA, (to as i64 - from as i64 - 1) as i32 as u32)
}

/// Whether libpcap's full return value for `prog` on the packet is `expected`.
///
/// `pcap_offline_filter` says only zero or not, so for a nonzero `expected` the
/// program is rewritten so every return instead jumps to a final check,
/// `A == expected`, that returns 1 or 0. The rewrite keeps every original
/// instruction at its index, so libpcap runs the same path up to the return.
pub(super) fn libpcap_returns(prog: &[BpfInsn], data: &[u8], wire_len: u32, expected: u32) -> bool {
    if expected == 0 {
        return !oracle().offline_filter(prog, data, wire_len);
    }
    let n = prog.len();
    let ret_k = prog.iter().filter(|i| i.code == RET_K).count();
    let check = n + 2 * ret_k;
    let mut probe = prog.to_vec();
    for (i, insn) in prog.iter().enumerate() {
        match insn.code {
            RET_A => probe[i] = ja(i, check),
            RET_K => {
                let block = probe.len();
                probe[i] = ja(i, block);
                probe.push(stmt(LD_IMM, insn.k));
                probe.push(ja(block + 1, check));
            }
            _ => {}
        }
    }
    probe.push(jump(JMP_JEQ_K, expected, 0, 1));
    probe.push(stmt(RET_K, 1));
    probe.push(stmt(RET_K, 0));
    oracle().offline_filter(&probe, data, wire_len)
}

/// Run `filter` on the packet with the interpreter and, on x86-64, with the
/// JIT; check they give the same value, and return it.
pub(super) fn engines(filter: &Filter, data: &[u8], wire_len: u32) -> u32 {
    let interp = filter.clone().with_engine(FilterEngine::Interp);
    assert_eq!(interp.engine(), FilterEngine::Interp);
    let expected = interp.run(data, wire_len);
    let jit = filter.clone().with_engine(FilterEngine::Jit);
    if cfg!(target_arch = "x86_64") {
        assert_eq!(jit.engine(), FilterEngine::Jit, "{:?}", jit.jit_unavailable());
    }
    let got = jit.run(data, wire_len);
    assert_eq!(
        got,
        expected,
        "the JIT gives {got:#x}, the interpreter {expected:#x}, on a {}/{wire_len} byte packet {data:02x?}\n{}",
        data.len(),
        filter.disassemble()
    );
    assert_eq!(jit.matches(data, wire_len), expected != 0);
    batches(&[&interp, &jit], data, wire_len, expected);
    got
}

/// Both engines' batch entry give `expected` for the packet wherever it sits
/// in a batch: alone, and between a shorter and a longer copy of itself,
/// whose verdicts must be their own one-packet runs'.
fn batches(filters: &[&Filter], data: &[u8], wire_len: u32, expected: u32) {
    let mut longer = data.to_vec();
    longer.extend_from_slice(&[0xa5; 9]);
    let shorter = &data[..data.len() / 2];
    let inputs = [BatchInput::new(shorter, wire_len), BatchInput::new(data, wire_len), BatchInput::new(&longer, wire_len.wrapping_add(9))];
    for f in filters {
        let mut one = [u32::MAX];
        f.run_batch(&inputs[1..2], &mut one);
        assert_eq!(one[0], expected, "{} batch of one", f.engine());
        let mut out = [u32::MAX; 4];
        f.run_batch(&inputs, &mut out);
        let want = [f.run(shorter, wire_len), expected, f.run(&longer, wire_len.wrapping_add(9)), u32::MAX];
        assert_eq!(out, want, "{} batch of three (the fourth place untouched)", f.engine());
        f.run_batch(&[], &mut []);
    }
}

/// Run `prog` on the packet with weir (both engines), check libpcap agrees, and return the result.
fn both(prog: &[BpfInsn], data: &[u8], wire_len: u32) -> u32 {
    let filter = Filter::from_program(prog).unwrap_or_else(|e| panic!("{e}\n{prog:?}"));
    let got = engines(&filter, data, wire_len);
    assert!(
        libpcap_returns(prog, data, wire_len, got),
        "libpcap disagrees with weir's {got:#x} on a {}/{wire_len} byte packet\n{}",
        data.len(),
        filter.disassemble()
    );
    got
}

/// Bytes 0, 1, 2, ... so that every load shows which offset it read.
fn counting(len: usize) -> Vec<u8> {
    (0..len).map(|i| i as u8).collect()
}

/// `prog` followed by `ret a`.
fn then_ret_a(prog: &[BpfInsn]) -> Vec<BpfInsn> {
    let mut p = prog.to_vec();
    p.push(stmt(RET_A, 0));
    p
}

#[test]
fn packet_loads_at_absolute_offsets_stop_at_the_captured_length() {
    let pkt = counting(10);
    let cases: &[(u16, u32, u32)] = &[
        (LD_W_ABS, 0, 0x0001_0203),
        (LD_W_ABS, 6, 0x0607_0809),
        (LD_W_ABS, 7, 0),
        (LD_W_ABS, 10, 0),
        (LD_W_ABS, u32::MAX, 0),
        (LD_W_ABS, u32::MAX - 2, 0),
        (LD_H_ABS, 8, 0x0809),
        (LD_H_ABS, 9, 0),
        (LD_H_ABS, u32::MAX, 0),
        (LD_B_ABS, 9, 9),
        (LD_B_ABS, 10, 0),
        (LD_B_ABS, u32::MAX, 0),
        // Linux ancillary data: vlan tag present, vlan tag, protocol. Offline there
        // is none, and libpcap rejects the packet.
        (LD_B_ABS, SKF_AD_OFF + 48, 0),
        (LD_B_ABS, SKF_AD_OFF + 44, 0),
        (LD_H_ABS, SKF_AD_OFF, 0),
        (LD_W_ABS, SKF_AD_OFF + 4, 0),
    ];
    for &(code, k, expected) in cases {
        let prog = then_ret_a(&[stmt(code, k)]);
        assert_eq!(both(&prog, &pkt, 100), expected, "code {code:#x} k {k:#x}");
    }
    let prog = then_ret_a(&[stmt(LD_B_ABS, 0)]);
    assert_eq!(both(&prog, &[], 60), 0, "an empty capture has no byte 0");
}

#[test]
fn packet_loads_at_indexed_offsets_never_wrap() {
    let pkt = counting(10);
    let cases: &[(u16, u32, u32, u32)] = &[
        (LD_W_IND, 2, 3, 0x0506_0708),
        (LD_W_IND, 3, 3, 0x0607_0809),
        (LD_W_IND, 4, 3, 0),
        (LD_W_IND, u32::MAX, 1, 0),
        (LD_W_IND, 1, u32::MAX, 0),
        (LD_W_IND, 0x8000_0000, 0x8000_0000, 0),
        (LD_H_IND, 4, 4, 0x0809),
        (LD_H_IND, 5, 4, 0),
        (LD_H_IND, u32::MAX, 2, 0),
        (LD_H_IND, 0, u32::MAX, 0),
        (LD_B_IND, 0, 9, 9),
        (LD_B_IND, 9, 0, 9),
        (LD_B_IND, 9, 1, 0),
        (LD_B_IND, u32::MAX, 1, 0),
        (LD_B_IND, 1, u32::MAX, 0),
    ];
    for &(code, x, k, expected) in cases {
        let prog = then_ret_a(&[stmt(LDX_IMM, x), stmt(code, k)]);
        assert_eq!(both(&prog, &pkt, 10), expected, "code {code:#x} x {x:#x} k {k:#x}");
    }
}

#[test]
fn msh_loads_the_ip_header_length_into_x() {
    let mut pkt = counting(20);
    pkt[14] = 0x45;
    let prog = then_ret_a(&[stmt(LDX_MSH_B, 14), stmt(MISC_TXA, 0)]);
    assert_eq!(both(&prog, &pkt, 20), 20);
    pkt[14] = 0xff;
    assert_eq!(both(&prog, &pkt, 20), 60);
    let prog = then_ret_a(&[stmt(LD_IMM, 7), stmt(LDX_MSH_B, 20)]);
    assert_eq!(both(&prog, &pkt, 20), 0, "out of bounds");
}

#[test]
fn len_is_the_wire_length_not_the_captured_one() {
    let pkt = counting(10);
    assert_eq!(both(&then_ret_a(&[stmt(LD_W_LEN, 0)]), &pkt, 1514), 1514);
    assert_eq!(both(&then_ret_a(&[stmt(LDX_W_LEN, 0), stmt(MISC_TXA, 0)]), &pkt, u32::MAX), u32::MAX);
}

#[test]
fn alu_with_a_constant() {
    let a = 0x8765_4321;
    let cases: &[(u16, u32)] = &[
        (ALU_ADD_K, 0x8000_0000),
        (ALU_SUB_K, 0x9000_0000),
        (ALU_MUL_K, 0x1234_5679),
        (ALU_DIV_K, 7),
        (ALU_DIV_K, u32::MAX),
        (ALU_MOD_K, 7),
        (ALU_MOD_K, 0x8765_4322),
        (ALU_AND_K, 0xf0f0_f0f0),
        (ALU_OR_K, 0x0f0f_0f0f),
        (ALU_XOR_K, 0xffff_0000),
        (ALU_LSH_K, 0),
        (ALU_LSH_K, 4),
        (ALU_LSH_K, 31),
        (ALU_RSH_K, 31),
        // pcap_compile refuses shifts past 31, but raw programs may have them.
        (ALU_LSH_K, 32),
        (ALU_LSH_K, 36),
        (ALU_LSH_K, u32::MAX),
        (ALU_RSH_K, 32),
        (ALU_RSH_K, 35),
        (ALU_NEG, 0),
    ];
    for &(code, k) in cases {
        let prog = then_ret_a(&[stmt(LD_IMM, a), stmt(code, k)]);
        both(&prog, &[], 0);
    }
    let shift = |code, k| both(&then_ret_a(&[stmt(LD_IMM, a), stmt(code, k)]), &[], 0);
    assert_eq!(shift(ALU_LSH_K, 36), a << 4, "x86-64 uses the low five bits of the count");
    assert_eq!(shift(ALU_RSH_K, 32), a);
    assert_eq!(shift(ALU_NEG, 0), a.wrapping_neg());
}

#[test]
fn alu_with_x() {
    let a = 0x8765_4321;
    let codes = [ALU_ADD_X, ALU_SUB_X, ALU_MUL_X, ALU_DIV_X, ALU_MOD_X, ALU_AND_X, ALU_OR_X, ALU_XOR_X, ALU_LSH_X, ALU_RSH_X];
    let xs = [0, 1, 7, 31, 32, 33, 0x8000_0000, u32::MAX];
    for code in codes {
        for x in xs {
            let prog = then_ret_a(&[stmt(LD_IMM, a), stmt(LDX_IMM, x), stmt(code, 0)]);
            both(&prog, &[], 0);
        }
    }
    let with_x = |code, x| both(&then_ret_a(&[stmt(LD_IMM, a), stmt(LDX_IMM, x), stmt(code, 0)]), &[], 0);
    assert_eq!(with_x(ALU_DIV_X, 0), 0, "division by X = 0 rejects the packet");
    assert_eq!(with_x(ALU_MOD_X, 0), 0, "modulo by X = 0 rejects the packet");
    assert_eq!(with_x(ALU_LSH_X, 32), 0, "by X, libpcap gives 0 from 32 on");
    assert_eq!(with_x(ALU_RSH_X, 33), 0);
    assert_eq!(with_x(ALU_LSH_X, 31), a << 31);
}

#[test]
fn conditional_jumps_take_both_branches() {
    let conds = [JMP_JEQ_K, JMP_JGT_K, JMP_JGE_K, JMP_JSET_K, JMP_JEQ_X, JMP_JGT_X, JMP_JGE_X, JMP_JSET_X];
    for code in conds {
        for (a, b) in [(5, 5), (5, 6), (6, 5), (0, 0), (u32::MAX, 0), (0x10, 0x30)] {
            let prog = [stmt(LD_IMM, a), stmt(LDX_IMM, b), jump(code, b, 1, 0), stmt(RET_K, 100), stmt(RET_K, 200)];
            let taken = match code & 0xf0 {
                0x10 => a == b,
                0x20 => a > b,
                0x30 => a >= b,
                _ => a & b != 0,
            };
            assert_eq!(both(&prog, &[], 0), if taken { 200 } else { 100 }, "code {code:#x} a {a} b {b}");
        }
    }
}

#[test]
fn jumps_reach_the_far_end_of_their_range() {
    let mut prog = vec![stmt(LD_IMM, 1), jump(JMP_JEQ_K, 1, 255, 0), stmt(JMP_JA, 256)];
    prog.extend([stmt(RET_K, 1); 254]);
    prog.extend([stmt(RET_K, 2), stmt(RET_K, 1), stmt(RET_K, 3)]);
    assert_eq!(prog.len(), 260);
    assert_eq!(both(&prog, &[], 0), 2, "jt 255 from instruction 1 lands on 257");
    prog[0] = stmt(LD_IMM, 0);
    assert_eq!(both(&prog, &[], 0), 3, "ja 256 from instruction 2 lands on 259");
}

/// A and X start at 0: every use of X before any write sees 0, and so does
/// an instruction that uses A first (the JIT clears each only where that
/// can be seen).
#[test]
fn registers_start_at_zero() {
    let pkt = counting(8);
    let cases: Vec<(Vec<BpfInsn>, u32)> = vec![
        (vec![stmt(MISC_TXA, 0), stmt(RET_A, 0)], 0),
        (vec![stmt(ALU_ADD_K, 7), stmt(RET_A, 0)], 7),
        (vec![stmt(LD_IMM, 5), stmt(ALU_ADD_X, 0), stmt(RET_A, 0)], 5),
        (vec![stmt(LD_IMM, 5), stmt(ALU_OR_X, 0), stmt(RET_A, 0)], 5),
        (vec![stmt(LD_IMM, 5), stmt(ALU_LSH_X, 0), stmt(RET_A, 0)], 5),
        (vec![stmt(LD_IMM, 5), stmt(ALU_DIV_X, 0), stmt(RET_K, 9)], 0),
        (vec![stmt(LD_B_IND, 3), stmt(RET_A, 0)], 3),
        (vec![stmt(STX, 4), stmt(LD_MEM, 4), stmt(RET_A, 0)], 0),
        (vec![jump(JMP_JEQ_X, 0, 0, 1), stmt(RET_K, 1), stmt(RET_K, 2)], 1),
        (vec![stmt(LD_IMM, 1), jump(JMP_JGT_X, 0, 0, 1), stmt(RET_K, 1), stmt(RET_K, 2)], 1),
    ];
    for (prog, expected) in cases {
        assert_eq!(both(&prog, &pkt, 8), expected, "{prog:?}");
    }
}

/// Chains of `jeq` to one place (the JIT tests them without branching) give
/// the chain's answer, also when a jump enters the chain in the middle.
#[test]
fn chains_of_equality_tests_and_jumps_into_them() {
    let to = |from: usize, target: usize| (target - from - 1) as u8;
    let mut prog = vec![
        stmt(LD_B_ABS, 0),
        jump(JMP_JGT_K, 200, 0, 2),
        stmt(LD_IMM, 5),
        // Into the chain's second half, past the comparisons with 1, 2 and 3.
        ja(3, 7),
    ];
    for (i, k) in (4..10).zip(1..=6) {
        prog.push(jump(JMP_JEQ_K, k, to(i, 11), 0));
    }
    prog.push(stmt(RET_K, 50));
    prog.push(stmt(RET_K, 100));
    for (byte, expected) in [(1, 100), (3, 100), (4, 100), (6, 100), (0, 50), (7, 50), (201, 100), (200, 50)] {
        assert_eq!(both(&prog, &[byte], 1), expected, "byte 0 = {byte}");
    }
    assert_eq!(both(&prog, &[], 1), 0, "no byte 0");
    // The same chain entered only at its start: one run of six.
    prog[3] = stmt(JMP_JA, 0);
    for (byte, expected) in [(3, 100), (6, 100), (7, 50), (201, 100), (200, 50)] {
        assert_eq!(both(&prog, &[byte], 1), expected, "byte 0 = {byte}");
    }
    // A chain whose true branch is the instruction right after it, and whose
    // last false branch goes further.
    let prog = [
        stmt(LD_B_ABS, 0),
        jump(JMP_JEQ_K, 1, 2, 0),
        jump(JMP_JEQ_K, 2, 1, 0),
        jump(JMP_JEQ_K, 3, 0, 1),
        stmt(RET_K, 100),
        stmt(RET_K, 50),
    ];
    for (byte, expected) in [(1, 100), (2, 100), (3, 100), (0, 50), (4, 50)] {
        assert_eq!(both(&prog, &[byte], 1), expected, "byte 0 = {byte}");
    }
}

/// The JIT finds libpcap's chains of `jeq` to one target: the protocol list
/// and the source and destination port lists of a ten-port filter, where a
/// chain is entered only at its start (the IPv6 chain's last port jumps
/// into the middle of the IPv4 one, which splits it).
#[cfg(target_arch = "x86_64")]
#[test]
fn the_jit_finds_the_chains_of_equality_tests() {
    let expr = "port 21 or port 22 or port 23 or port 25 or port 53 or port 80 or port 110 or port 143 or port 443 or port 993";
    let f = Filter::compile(expr, crate::LinkType::ETHERNET, 65535).unwrap();
    let runs = jit::equality_runs(&f.ops);
    let mut lens: Vec<usize> = runs.iter().filter_map(|r| if let jit::Run::Head { len, .. } = *r { Some(len) } else { None }).collect();
    lens.sort_unstable();
    assert_eq!(lens, [3, 3, 9, 10, 10], "{runs:?}\n{}", f.disassemble());
}

#[test]
fn scratch_memory_and_register_moves() {
    let prog = [
        stmt(LD_IMM, 11),
        stmt(ST, 0),
        stmt(LDX_IMM, 22),
        stmt(STX, 15),
        stmt(LD_MEM, 15),
        stmt(LDX_MEM, 0),
        stmt(ALU_MUL_X, 0),
        stmt(MISC_TAX, 0),
        stmt(LD_IMM, 0),
        stmt(MISC_TXA, 0),
        stmt(RET_A, 0),
    ];
    assert_eq!(both(&prog, &[], 0), 242);
}

#[test]
fn returns_give_the_snap_length() {
    assert_eq!(both(&[stmt(RET_K, u32::MAX)], &[], 0), u32::MAX);
    assert_eq!(both(&[stmt(RET_K, 0)], &counting(4), 4), 0);
    assert_eq!(both(&[stmt(LD_IMM, 96), stmt(RET_A, 0)], &[], 0), 96);
    let early = [stmt(RET_K, 7), stmt(LD_B_ABS, 1000), stmt(RET_K, 8)];
    assert_eq!(both(&early, &[], 0), 7, "a return in the middle ends the program");
}

#[test]
fn backward_jumps_run_like_libpcap_while_the_budget_lasts() {
    // M[0] counts passes up to the packet's first byte: one backward jump between passes.
    let prog = [
        stmt(LD_IMM, 0),
        stmt(ST, 0),
        stmt(LD_MEM, 0),
        stmt(ALU_ADD_K, 1),
        stmt(ST, 0),
        stmt(LD_B_ABS, 0),
        stmt(MISC_TAX, 0),
        stmt(LD_MEM, 0),
        jump(JMP_JGE_X, 0, 1, 0),
        ja(9, 2),
        stmt(RET_A, 0),
    ];
    let filter = Filter::from_program(&prog).unwrap();
    let mut pkt = vec![0u8; 64];
    for passes in [1u8, 2, 40, 66] {
        pkt[0] = passes;
        assert_eq!(both(&prog, &pkt, 64), u32::from(passes), "the loop ran to its end");
    }
    // A 64-byte packet allows 65 backward jumps: 66 passes fit, 67 are cut off
    // where libpcap would still finish.
    pkt[0] = 67;
    assert_eq!(engines(&filter, &pkt, 64), 0);
    let spin = [stmt(LD_IMM, 1), ja(1, 1), stmt(RET_K, 1)];
    assert_eq!(engines(&Filter::from_program(&spin).unwrap(), &counting(1500), 1500), 0, "a self-loop ends");
    assert_eq!(engines(&Filter::from_program(&spin).unwrap(), &[], 0), 0, "one jump for an empty capture, then the end");
}

/// An Ethernet + IPv6 packet whose only extension header is an AH that names AH
/// as the next header and whose length field sends libpcap's protochain walk
/// back to the same offset.
fn ipv6_ah_pointing_at_itself() -> Vec<u8> {
    let mut pkt = vec![0u8; 12];
    pkt.extend([0x86, 0xdd, 0x60, 0, 0, 0, 0, 16, 51, 64]);
    pkt.extend([0x11; 16]);
    pkt.extend([0x22; 16]);
    pkt.extend([51, 8]);
    pkt.extend([0; 14]);
    pkt
}

#[test]
fn protochain_walks_extension_headers_and_cannot_spin() {
    let f = Filter::compile("ip6 protochain 6", crate::LinkType::ETHERNET, 65535).unwrap();
    assert!(f.program().iter().any(|i| i.code == JMP_JA && (i.k as i32) < 0), "{}", f.disassemble());
    let mut pkt = vec![0u8; 12];
    pkt.extend([0x86, 0xdd, 0x60, 0, 0, 0, 0, 36, 0, 64]);
    pkt.extend([0x11; 16]);
    pkt.extend([0x22; 16]);
    // Hop-by-hop (8 bytes), destination options (16 bytes), then TCP.
    pkt.extend([60, 0, 0, 0, 0, 0, 0, 0]);
    pkt.extend([6, 1]);
    pkt.extend([0; 14]);
    pkt.extend([0; 20]);
    assert_ne!(both(f.program(), &pkt, pkt.len() as u32), 0);
    pkt[54 + 8] = 17;
    assert_eq!(both(f.program(), &pkt, pkt.len() as u32), 0, "UDP, not TCP");
    for cut in [20, 54, 55, 62, 63, 70] {
        both(f.program(), &pkt[..cut], pkt.len() as u32);
    }
    // libpcap 1.10.3 loops forever here, so only weir runs it.
    let spin = ipv6_ah_pointing_at_itself();
    assert_eq!(engines(&f, &spin, spin.len() as u32), 0);
}

/// Programs weir must refuse, with the instruction and reason it gives.
#[test]
fn invalid_programs_are_rejected_with_a_reason() {
    let ret = stmt(RET_K, 0);
    let long = vec![ret; MAX_INSNS + 1];
    let cases: Vec<(&str, Vec<BpfInsn>, usize, &str)> = vec![
        ("empty", vec![], 0, "empty"),
        ("too long", long, MAX_INSNS, "4097 instructions"),
        ("ld of a byte immediate", vec![stmt(0x10, 0), ret], 0, "unknown opcode 0x10"),
        ("ret x", vec![stmt(0x0e, 0)], 0, "unknown opcode 0x0e"),
        ("misc other than tax/txa", vec![stmt(0x27, 0), ret], 0, "unknown opcode 0x27"),
        ("neg with the X bit", vec![stmt(0x8c, 0), ret], 0, "unknown opcode 0x8c"),
        ("alu op 0xb0", vec![stmt(0xb4, 0), ret], 0, "unknown opcode 0xb4"),
        ("ja with the X bit", vec![stmt(0x0d, 0), ret], 0, "unknown opcode 0x0d"),
        ("jmp op 0x50", vec![jump(0x55, 0, 0, 0), ret], 0, "unknown opcode 0x55"),
        ("ldx of a word at an absolute offset", vec![stmt(0x21, 0), ret], 0, "unknown opcode 0x21"),
        ("class 0xff", vec![stmt(0xff, 0), ret], 0, "unknown opcode 0xff"),
        ("jt past the end", vec![jump(JMP_JEQ_K, 0, 1, 0), ret], 0, "instruction 2 is outside"),
        ("jf past the end", vec![ret, jump(JMP_JGT_X, 0, 0, 1), ret], 1, "instruction 3 is outside"),
        ("ja past the end", vec![stmt(JMP_JA, 1), ret], 0, "instruction 2 is outside"),
        ("ja far forward", vec![stmt(JMP_JA, i32::MAX as u32), ret], 0, "instruction 2147483648 is outside"),
        ("ja before the start", vec![ret, ret, stmt(JMP_JA, (-4i32) as u32), ret], 2, "instruction -1 is outside"),
        ("ld M[16]", vec![stmt(LD_MEM, 16), ret], 0, "index 16 is out of range"),
        ("ldx M[2^32-1]", vec![stmt(LDX_MEM, u32::MAX), ret], 0, "index 4294967295"),
        ("st M[256]", vec![stmt(ST, 256), ret], 0, "index 256"),
        ("stx M[16]", vec![stmt(STX, 16), ret], 0, "index 16"),
        ("div #0", vec![stmt(ALU_DIV_K, 0), ret], 0, "division by the constant 0"),
        ("mod #0", vec![stmt(ALU_MOD_K, 0), ret], 0, "modulo by the constant 0"),
        ("no return at the end", vec![stmt(LD_IMM, 1)], 0, "not a return"),
        ("a return, but not last", vec![ret, stmt(MISC_TAX, 0)], 1, "not a return"),
    ];
    for (name, prog, at, reason) in cases {
        match Filter::from_program(&prog) {
            Err(FilterError::Invalid { at: got_at, reason: got }) => {
                assert_eq!(got_at, at, "{name}: {got}");
                assert!(got.contains(reason), "{name}: {got:?} lacks {reason:?}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    let longest = vec![ret; MAX_INSNS];
    assert_eq!(Filter::from_program(&longest).unwrap().len(), MAX_INSNS);
}

/// The JIT compiles only what `decode` made of a program, so a refused
/// program never gets to it: the count of compilations does not move for
/// any of them, and does for a valid one.
#[cfg(target_arch = "x86_64")]
#[test]
fn refused_programs_never_reach_the_jit() {
    let compiled = || jit::COMPILED.with(std::cell::Cell::get);
    let before = compiled();
    let ret = stmt(RET_K, 0);
    let refused: [&[BpfInsn]; 6] =
        [&[], &[stmt(0x10, 0), ret], &[stmt(LD_MEM, 16), ret], &[stmt(ALU_DIV_K, 0), ret], &[stmt(JMP_JA, 1), ret], &[stmt(LD_IMM, 1)]];
    for prog in refused {
        assert!(matches!(Filter::from_program(prog), Err(FilterError::Invalid { .. })), "{prog:?}");
    }
    assert_eq!(compiled(), before, "a refused program was compiled");
    let f = Filter::from_program(&[ret]).unwrap();
    assert_eq!((f.engine(), compiled()), (FilterEngine::Jit, before + 1));
}

#[test]
fn the_engine_is_chosen_per_filter() {
    let f = Filter::compile("tcp port 80", crate::LinkType::ETHERNET, 65535).unwrap();
    let expected = if cfg!(target_arch = "x86_64") { FilterEngine::Jit } else { FilterEngine::Interp };
    assert_eq!(f.engine(), expected, "the default: the JIT where there is one");
    assert_eq!(f.jit_unavailable().is_some(), !cfg!(target_arch = "x86_64"));
    let interp = f.clone().with_engine(FilterEngine::Interp);
    assert_eq!((interp.engine(), interp.jit_unavailable()), (FilterEngine::Interp, None));
    assert_eq!(interp.with_engine(FilterEngine::Jit).engine(), expected);
    assert_eq!(f.engine(), expected, "a clone's engine is its own");
    assert_eq!("jit".parse::<FilterEngine>(), Ok(FilterEngine::Jit));
    assert_eq!("interp".parse::<FilterEngine>(), Ok(FilterEngine::Interp));
    let err = "bpf".parse::<FilterEngine>().unwrap_err();
    assert_eq!(err.given(), "bpf");
    assert!(err.to_string().contains("jit or interp"), "{err}");
    assert_eq!(FilterEngine::default().to_string(), "jit");
}

#[test]
fn disassembly_matches_tcpdump() {
    let listing = |expr: &str| Filter::compile(expr, crate::LinkType::ETHERNET, 65535).unwrap().disassemble();
    // Each expected listing is `tcpdump -d` output from tcpdump 4.99.3 with libpcap 1.10.3.
    assert_eq!(listing("tcp port 80"), TCP_PORT_80);
    assert_eq!(listing("ip6 protochain 6"), PROTOCHAIN);
    assert_eq!(listing(MISC_EXPR), MISC);
}

#[test]
fn disassembly_of_what_pcap_compile_does_not_emit() {
    let prog = [
        stmt(LD_W_ABS, SKF_AD_OFF + 48),
        stmt(LD_H_ABS, SKF_AD_OFF + 2),
        stmt(LD_B_ABS, SKF_AD_OFF + 60),
        stmt(LD_W_IND, u32::MAX),
        stmt(LDX_W_LEN, 0),
        stmt(LDX_IMM, 0xabc),
        stmt(ALU_LSH_K, 3),
        stmt(ALU_MOD_X, 0),
        stmt(ALU_OR_X, 0),
        jump(JMP_JGE_X, 0, 0, 1),
        stmt(ALU_ADD_K, u32::MAX),
        stmt(RET_K, u32::MAX),
        stmt(RET_A, 0),
    ];
    let expected = "\
(000) ld       [vlanp]
(001) ldh      [-4094]
(002) ldb      [vlan_tpid]
(003) ld       [x + -1]
(004) ldx      #pktlen
(005) ldx      #0xabc
(006) lsh      #3
(007) mod      x
(008) or       x
(009) jge      x                jt 10\tjf 11
(010) add      #-1
(011) ret      #-1
(012) ret      \n";
    assert_eq!(Filter::from_program(&prog).unwrap().disassemble(), expected);
}

const TCP_PORT_80: &str = "\
(000) ldh      [12]
(001) jeq      #0x86dd          jt 2\tjf 8
(002) ldb      [20]
(003) jeq      #0x6             jt 4\tjf 19
(004) ldh      [54]
(005) jeq      #0x50            jt 18\tjf 6
(006) ldh      [56]
(007) jeq      #0x50            jt 18\tjf 19
(008) jeq      #0x800           jt 9\tjf 19
(009) ldb      [23]
(010) jeq      #0x6             jt 11\tjf 19
(011) ldh      [20]
(012) jset     #0x1fff          jt 19\tjf 13
(013) ldxb     4*([14]&0xf)
(014) ldh      [x + 14]
(015) jeq      #0x50            jt 18\tjf 16
(016) ldh      [x + 16]
(017) jeq      #0x50            jt 18\tjf 19
(018) ret      #65535
(019) ret      #0
";

const PROTOCHAIN: &str = "\
(000) ldh      [12]
(001) jeq      #0x86dd          jt 2\tjf 35
(002) ldb      [20]
(003) ldx      #0x28
(004) jeq      #0x6             jt 32\tjf 5
(005) jeq      #0x3b            jt 32\tjf 6
(006) jeq      #0x0             jt 10\tjf 7
(007) jeq      #0x3c            jt 10\tjf 8
(008) jeq      #0x2b            jt 10\tjf 9
(009) jeq      #0x2c            jt 10\tjf 19
(010) ldb      [x + 14]
(011) st       M[0]
(012) ldb      [x + 15]
(013) add      #1
(014) mul      #8
(015) add      x
(016) tax      \n\
(017) ld       M[0]
(018) ja       4
(019) jeq      #0x33            jt 20\tjf 32
(020) txa      \n\
(021) ldb      [x + 14]
(022) st       M[0]
(023) txa      \n\
(024) add      #1
(025) tax      \n\
(026) ldb      [x + 14]
(027) add      #2
(028) mul      #4
(029) tax      \n\
(030) ld       M[0]
(031) ja       4
(032) add      #0
(033) jeq      #0x6             jt 34\tjf 35
(034) ret      #65535
(035) ret      #0
";

const MISC_EXPR: &str = "ether[0] % 3 = 1 or ether[1] ^ 5 = 2 or -ether[2] = 7 or ether[3] >> ether[4] = 1 \
    or len > 100 or ether[5] - 2 > 3 or ether[6] / ether[7] > 2 or ether[8] & 3 != 0";

const MISC: &str = "\
(000) ldb      [0]
(001) mod      #3
(002) jeq      #0x1             jt 30\tjf 3
(003) ldb      [1]
(004) xor      #0x5
(005) jeq      #0x2             jt 30\tjf 6
(006) ldb      [2]
(007) neg      \n\
(008) jeq      #0x7             jt 30\tjf 9
(009) ldb      [3]
(010) st       M[9]
(011) ldb      [4]
(012) tax      \n\
(013) ld       M[9]
(014) rsh      x
(015) jeq      #0x1             jt 30\tjf 16
(016) ld       #pktlen
(017) jgt      #0x64            jt 30\tjf 18
(018) ldb      [5]
(019) sub      #2
(020) jgt      #0x3             jt 30\tjf 21
(021) ldb      [6]
(022) st       M[1]
(023) ldb      [7]
(024) tax      \n\
(025) ld       M[1]
(026) div      x
(027) jgt      #0x2             jt 30\tjf 28
(028) ldb      [8]
(029) jset     #0x3             jt 30\tjf 31
(030) ret      #65535
(031) ret      #0
";

/// Every opcode weir runs, for the random program generator.
const ALL_CODES: [u16; 49] = [
    LD_W_ABS, LD_H_ABS, LD_B_ABS, LD_W_IND, LD_H_IND, LD_B_IND, LD_W_LEN, LD_IMM, LD_MEM, LDX_IMM, LDX_MEM, LDX_W_LEN, LDX_MSH_B, ST, STX,
    ALU_ADD_K, ALU_SUB_K, ALU_MUL_K, ALU_DIV_K, ALU_OR_K, ALU_AND_K, ALU_LSH_K, ALU_RSH_K, ALU_MOD_K, ALU_XOR_K, ALU_ADD_X, ALU_SUB_X,
    ALU_MUL_X, ALU_DIV_X, ALU_OR_X, ALU_AND_X, ALU_LSH_X, ALU_RSH_X, ALU_MOD_X, ALU_XOR_X, ALU_NEG, JMP_JA, JMP_JEQ_K, JMP_JGT_K,
    JMP_JGE_K, JMP_JSET_K, JMP_JEQ_X, JMP_JGT_X, JMP_JGE_X, JMP_JSET_X, RET_K, RET_A, MISC_TAX, MISC_TXA,
];

/// Constants that mostly land inside small packets, with the edges mixed in.
pub(super) fn arb_k() -> impl Strategy<Value = u32> {
    prop_oneof![
        6 => 0u32..48,
        2 => any::<u32>(),
        1 => prop::sample::select(vec![
            0, 1, 31, 32, 33, 0x7fff_ffff, 0x8000_0000, u32::MAX - 3, u32::MAX, SKF_AD_OFF, SKF_AD_OFF + 48,
        ]),
    ]
}

/// Raw material for one instruction: opcode, k, jt, jf.
pub(super) fn arb_insn() -> impl Strategy<Value = (u16, u32, u8, u8)> {
    (prop::sample::select(&ALL_CODES[..]), arb_k(), any::<u8>(), any::<u8>())
}

/// A valid program: every scratch word written first (libpcap leaves them
/// uninitialised), then `body` made valid in place, then a return.
pub(super) fn valid_program(init: &[u32; MEMWORDS], x: u32, body: &[(u16, u32, u8, u8)], ret_a: bool) -> Vec<BpfInsn> {
    let mut prog: Vec<BpfInsn> = init.iter().enumerate().flat_map(|(i, &v)| [stmt(LD_IMM, v), stmt(ST, i as u32)]).collect();
    prog.push(stmt(LDX_IMM, x));
    prog.push(stmt(LD_IMM, 0));
    let len = prog.len() + body.len() + 1;
    for &(code, k, jt, jf) in body {
        // Instructions after this one; at least the final return.
        let ahead = len - prog.len() - 1;
        let forward = |off: u32| off % ahead as u32;
        let insn = match code {
            LD_MEM | LDX_MEM | ST | STX => stmt(code, k % MEMWORDS as u32),
            ALU_DIV_K | ALU_MOD_K => stmt(code, k.max(1)),
            JMP_JA => stmt(code, forward(k)),
            c if c & 0x07 == 0x05 => jump(c, k, forward(jt.into()) as u8, forward(jf.into()) as u8),
            _ => stmt(code, k),
        };
        prog.push(insn);
    }
    prog.push(if ret_a { stmt(RET_A, 0) } else { stmt(RET_K, 0xffff) });
    prog
}

/// A packet of `caplen` captured bytes from a small alphabet, so that comparisons
/// with small constants come out true as well as false, and a wire length at least as long.
fn arb_packet() -> impl Strategy<Value = (Vec<u8>, u32)> {
    let byte = prop_oneof![3 => 0u8..4, 1 => any::<u8>()];
    let extra = prop_oneof![Just(0u32), 0u32..1600, any::<u32>()];
    (prop::collection::vec(byte, 0..96), extra).prop_map(|(data, extra)| {
        let wire = (data.len() as u32).saturating_add(extra);
        (data, wire)
    })
}

/// Expressions for the compiled-program model test, with their link types.
pub(super) const EXPRESSIONS: &[(&str, u32)] = &[
    ("tcp port 80 or udp port 53", 1),
    ("tcp[tcpflags] & (tcp-syn|tcp-fin) != 0", 1),
    ("ip[6:2] & 0x1fff != 0 or ip6 protochain 17", 1),
    ("vlan and (ip or ip6) and udp[8:4] = 0", 1),
    ("(ip and tcp[13] = 2) or ip6 multicast", 101),
    ("icmp or icmp6", 113),
];

proptest! {
    // Failures are not persisted: a regression file would land outside the filter module.
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    /// The model test: any valid forward-jumping program on any packet gives
    /// libpcap's exact return value.
    #[test]
    fn random_programs_agree_with_libpcap(
        init: [u32; MEMWORDS],
        x in arb_k(),
        body in prop::collection::vec(arb_insn(), 1..48),
        ret_a: bool,
        (data, wire_len) in arb_packet(),
    ) {
        let prog = valid_program(&init, x, &body, ret_a);
        let filter = Filter::from_program(&prog).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let got = engines(&filter, &data, wire_len);
        prop_assert!(
            libpcap_returns(&prog, &data, wire_len, got),
            "weir returned {:#x}\n{}", got, filter.disassemble()
        );
    }

    /// Programs with backward jumps, which libpcap may run forever: the JIT
    /// against the interpreter alone, budget exhaustion included.
    #[test]
    fn random_looping_programs_run_the_same_on_both_engines(
        init: [u32; MEMWORDS],
        x in arb_k(),
        body in prop::collection::vec(arb_insn(), 1..48),
        ret_a: bool,
        back in prop::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>()), 1..4),
        (data, wire_len) in arb_packet(),
    ) {
        let mut prog = valid_program(&init, x, &body, ret_a);
        // Turn a few instructions (never the final return) into jumps back to
        // an earlier or the same instruction.
        let last = prog.len() - 1;
        for (from, to) in back {
            let from = from.index(last);
            prog[from] = ja(from, to.index(from + 1));
        }
        let filter = Filter::from_program(&prog).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(filter.program().iter().any(|i| i.code == JMP_JA && (i.k as i32) < 0));
        engines(&filter, &data, wire_len);
    }

    /// Compiled programs on packets that start as real headers and are then
    /// damaged and cut short anywhere.
    #[test]
    fn compiled_programs_agree_on_damaged_packets(
        which in 0..EXPRESSIONS.len(),
        template in 0..TEMPLATES.len(),
        damage in prop::collection::vec((0usize..128, any::<u8>()), 0..6),
        cut in 0usize..128,
        extra in 0u32..100,
    ) {
        let (expr, link) = EXPRESSIONS[which];
        let filter = Filter::compile(expr, crate::LinkType(link), 65535).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut pkt = TEMPLATES[template].to_vec();
        for (at, byte) in damage {
            if let Some(b) = pkt.get_mut(at) {
                *b = byte;
            }
        }
        let wire_len = pkt.len() as u32 + extra;
        pkt.truncate(cut);
        let got = engines(&filter, &pkt, wire_len);
        prop_assert!(libpcap_returns(filter.program(), &pkt, wire_len, got), "{} gave {:#x}", expr, got);
    }
}

/// Header stacks for the damaged-packet test: Ethernet/IPv4/TCP SYN,
/// Ethernet/802.1Q/IPv6/UDP, and Ethernet/IPv6/hop-by-hop/UDP.
pub(super) const TEMPLATES: [&[u8]; 3] = [
    &[
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x08, 0x00, 0x45, 0, 0, 40, 0, 1, 0, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0x30, 0x39, 0,
        80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0x20, 0, 0, 0, 0, 0,
    ],
    &[
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x81, 0x00, 0, 5, 0x86, 0xdd, 0x60, 0, 0, 0, 0, 12, 17, 64, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
        11, 12, 13, 14, 15, 16, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17, 0x30, 0x39, 0, 53, 0, 12, 0, 0, 0, 0, 0, 0,
    ],
    &[
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x86, 0xdd, 0x60, 0, 0, 0, 0, 20, 0, 64, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
        16, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17, 17, 0, 0, 0, 0, 0, 0, 0, 0x30, 0x39, 0, 53, 0, 12, 0, 0, 0, 0, 0, 0,
    ],
];

#[test]
fn a_filter_can_be_shared_between_capture_threads() {
    fn shareable<T: Send + Sync + Clone + 'static>() {}
    shareable::<Filter>();
    let f = Filter::compile("udp", crate::LinkType::ETHERNET, 128).unwrap();
    let copy = f.clone();
    let handle = std::thread::spawn(move || copy.len());
    assert_eq!(handle.join().unwrap(), f.len());
    assert!(!f.is_empty());
    assert_eq!(f.expression(), Some("udp"));
    assert_eq!(Filter::from_program(f.program()).unwrap().expression(), None);
}

#[test]
fn linux_ancillary_loads_are_found_and_explained() {
    for (expr, reads) in [("inbound", true), ("outbound", true), ("ifindex 3", true), ("tcp port 80", false), ("vlan 7", false)] {
        let f = Filter::compile(expr, crate::LinkType::ETHERNET, 65535).unwrap();
        assert_eq!(f.reads_linux_ancillary(), reads, "{expr}\n{}", f.disassemble());
        assert_eq!(f.ancillary_note(expr).is_some(), reads, "{expr}");
    }
}

//! A filter translated to eBPF, to run in an XDP program before a packet is
//! taken from the host: what it rejects can go on up the stack.
//!
//! Contract: [`Filter::to_xdp`] gives an XDP program body that computes, for
//! every packet, exactly the verdict the interpreter gives (accept when
//! [`Filter::run`] is not 0), and then runs the caller's `accept` or `reject`
//! block. Everything the interpreter pins down is kept: loads past the packet,
//! and division or modulo by an X of zero, reject; a shift by X of 32 or more
//! gives 0, by a constant it uses the constant's low five bits; scratch memory
//! starts zeroed; `len` is the packet's whole length. Programs with a backward
//! jump (only `protochain` makes them) are refused: the verifier would have to
//! bound the walk, and the interpreter's bound depends on the packet. The tests
//! hold the translation to the interpreter in the kernel itself, on random
//! programs and packets (`BPF_PROG_TEST_RUN`).
//!
//! Written by hand rather than with an assembler crate: the translation is a
//! few dozen instruction shapes, and what matters (the verdict being the
//! interpreter's) is tested against the kernel directly.
//!
//! Register use: r6 holds the context, r7 is A and r8 is X (callee-saved, so
//! helper calls keep them), r9 is free for the blocks. The stack holds the
//! scratch words at `fp-64..fp-1` and a load buffer at `fp-72`; below
//! [`BLOCK_STACK`] is free for the blocks.
//!
//! Packet bytes are read with `bpf_xdp_load_bytes`, which checks the bounds
//! itself and reads fragments too: an offset computed from X is then one the
//! verifier need not prove in range.

use super::program::Op;
use super::Filter;
use crate::sys::bpf::EbpfInsn as Insn;

#[cfg(test)]
mod tests;

/// Registers, as the eBPF calling convention names them (r5, the fifth
/// argument, is never used: no helper called here takes five).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reg {
    R0 = 0,
    R1 = 1,
    R2 = 2,
    R3 = 3,
    R4 = 4,
    R6 = 6,
    R7 = 7,
    R8 = 8,
    R9 = 9,
    Fp = 10,
}

/// The context (`struct xdp_md *`) while the program runs.
pub(crate) const CTX: Reg = Reg::R6;
const A: Reg = Reg::R7;
const X: Reg = Reg::R8;
/// Stack offsets below this one are the blocks' to use.
pub(crate) const BLOCK_STACK: i16 = -72;
const MEM: i16 = -64;
const LOAD_BUF: i16 = -72;

/// `struct xdp_md`'s `data` and `data_end`.
const XDP_MD_DATA: i16 = 0;
const XDP_MD_DATA_END: i16 = 4;
/// Loads that end at or below this offset are read directly when the bytes
/// are in the packet's linear part: it fits an instruction's signed 16-bit
/// offset, and the verifier bounds a packet pointer plus a scalar below
/// 64 KiB.
const DIRECT_MAX: u32 = 0x7fff;

/// `struct xdp_md`'s `rx_queue_index`.
pub(crate) const XDP_MD_RX_QUEUE: i16 = 16;

/// Helper function numbers (`enum bpf_func_id`).
pub(crate) mod helper {
    pub(crate) const MAP_LOOKUP_ELEM: i32 = 1;
    pub(crate) const TAIL_CALL: i32 = 12;
    pub(crate) const REDIRECT_MAP: i32 = 51;
    pub(crate) const XDP_GET_BUFF_LEN: i32 = 188;
    pub(crate) const XDP_LOAD_BYTES: i32 = 189;
}

// Instruction classes, sizes, modes and operations (linux/bpf_common.h, linux/bpf.h).
const LD: u8 = 0x00;
const LDX: u8 = 0x01;
const ST: u8 = 0x02;
const STX: u8 = 0x03;
const ALU: u8 = 0x04;
const JMP: u8 = 0x05;
const JMP32: u8 = 0x06;
const ALU64: u8 = 0x07;
const W: u8 = 0x00;
const H: u8 = 0x08;
const B: u8 = 0x10;
const DW: u8 = 0x18;
const IMM: u8 = 0x00;
const MEMORY: u8 = 0x60;
const K: u8 = 0x00;
const SRC_X: u8 = 0x08;
const ADD: u8 = 0x00;
const SUB: u8 = 0x10;
const MUL: u8 = 0x20;
const DIV: u8 = 0x30;
const OR: u8 = 0x40;
const AND: u8 = 0x50;
const LSH: u8 = 0x60;
const RSH: u8 = 0x70;
const NEG: u8 = 0x80;
const MOD: u8 = 0x90;
const XOR: u8 = 0xa0;
const MOV: u8 = 0xb0;
const END: u8 = 0xd0;
const TO_BE: u8 = 0x08;
const JA: u8 = 0x00;
const JEQ: u8 = 0x10;
const JGT: u8 = 0x20;
const JGE: u8 = 0x30;
const JSET: u8 = 0x40;
const JNE: u8 = 0x50;
const JLT: u8 = 0xa0;
const CALL: u8 = 0x80;
const EXIT: u8 = 0x90;
const PSEUDO_MAP_FD: u8 = 1;

/// The load size code for 1, 2 or 4 bytes.
fn width(size: u8) -> u8 {
    match size {
        1 => B,
        2 => H,
        _ => W,
    }
}

fn insn(code: u8, dst: Reg, src: Reg, off: i16, imm: i32) -> Insn {
    Insn { code, regs: (dst as u8) | ((src as u8) << 4), off, imm }
}

/// The instructions the blocks are built from.
pub(crate) mod asm {
    use super::*;

    pub(crate) fn mov64(dst: Reg, src: Reg) -> Insn {
        insn(ALU64 | MOV | SRC_X, dst, src, 0, 0)
    }
    pub(crate) fn mov32_imm(dst: Reg, imm: u32) -> Insn {
        insn(ALU | MOV | K, dst, Reg::R0, 0, imm as i32)
    }
    pub(crate) fn add64_imm(dst: Reg, imm: i32) -> Insn {
        insn(ALU64 | ADD | K, dst, Reg::R0, 0, imm)
    }
    pub(crate) fn add64(dst: Reg, src: Reg) -> Insn {
        insn(ALU64 | ADD | SRC_X, dst, src, 0, 0)
    }
    /// `dst = *(u32 *)(src + off)`
    pub(crate) fn ldx_w(dst: Reg, src: Reg, off: i16) -> Insn {
        insn(LDX | W | MEMORY, dst, src, off, 0)
    }
    /// `dst = *(u64 *)(src + off)`
    pub(crate) fn ldx_dw(dst: Reg, src: Reg, off: i16) -> Insn {
        insn(LDX | DW | MEMORY, dst, src, off, 0)
    }
    /// `*(u32 *)(dst + off) = src`
    pub(crate) fn stx_w(dst: Reg, off: i16, src: Reg) -> Insn {
        insn(STX | W | MEMORY, dst, src, off, 0)
    }
    /// `*(u64 *)(dst + off) = src`
    pub(crate) fn stx_dw(dst: Reg, off: i16, src: Reg) -> Insn {
        insn(STX | DW | MEMORY, dst, src, off, 0)
    }
    /// The two instructions that load map `fd`'s address into `dst`.
    pub(crate) fn ld_map_fd(dst: Reg, fd: i32) -> [Insn; 2] {
        let first = Insn { code: LD | DW | IMM, regs: (dst as u8) | (PSEUDO_MAP_FD << 4), off: 0, imm: fd };
        [first, insn(0, Reg::R0, Reg::R0, 0, 0)]
    }
    pub(crate) fn call(helper: i32) -> Insn {
        insn(JMP | CALL, Reg::R0, Reg::R0, 0, helper)
    }
    /// Count a packet in the entry of map `fd` (an array, per CPU or not)
    /// whose u32 key is at `fp + key_at`: 1 more in its u64 at byte `at`, r9
    /// (its bytes) more in the u64 after. No entry: nothing counted. r0-r5
    /// are changed, r6-r9 kept.
    pub(crate) fn count(fd: i32, key_at: i16, at: i16) -> Vec<Insn> {
        let mut out = Vec::with_capacity(13);
        out.extend(ld_map_fd(Reg::R1, fd));
        out.push(mov64(Reg::R2, Reg::Fp));
        out.push(add64_imm(Reg::R2, i32::from(key_at)));
        out.push(call(helper::MAP_LOOKUP_ELEM));
        out.push(jeq_imm(Reg::R0, 0, 6));
        out.push(ldx_dw(Reg::R1, Reg::R0, at));
        out.push(add64_imm(Reg::R1, 1));
        out.push(stx_dw(Reg::R0, at, Reg::R1));
        out.push(ldx_dw(Reg::R1, Reg::R0, at + 8));
        out.push(add64(Reg::R1, Reg::R9));
        out.push(stx_dw(Reg::R0, at + 8, Reg::R1));
        out
    }
    /// `if dst == imm` skip `off` instructions.
    pub(crate) fn jeq_imm(dst: Reg, imm: i32, off: i16) -> Insn {
        insn(JMP | JEQ | K, dst, Reg::R0, off, imm)
    }
    pub(crate) fn exit() -> Insn {
        insn(JMP | EXIT, Reg::R0, Reg::R0, 0, 0)
    }
}

/// Why a filter has no eBPF form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Untranslatable(pub(crate) String);

/// Where a jump goes, before addresses are known.
#[derive(Copy, Clone, Debug)]
enum Label {
    Op(usize),
    Accept,
    Reject,
}

struct Emitter {
    out: Vec<Insn>,
    /// (instruction index, its target), patched once every label has an address.
    fixups: Vec<(usize, Label)>,
}

impl Emitter {
    fn push(&mut self, i: Insn) {
        self.out.push(i);
    }

    /// A jump whose offset is filled in later.
    fn jump(&mut self, i: Insn, to: Label) {
        self.fixups.push((self.out.len(), to));
        self.out.push(i);
    }

    fn ja(&mut self, to: Label) {
        self.jump(insn(JMP | JA, Reg::R0, Reg::R0, 0, 0), to);
    }

    /// Load `size` bytes (1, 2 or 4) at the offset in r2 into A, big-endian, or
    /// reject: through the helper, which reads fragments too.
    fn load_at_r2(&mut self, size: u8) {
        self.push(asm::mov64(Reg::R1, CTX));
        self.push(asm::mov64(Reg::R3, Reg::Fp));
        self.push(asm::add64_imm(Reg::R3, i32::from(LOAD_BUF)));
        self.push(asm::mov32_imm(Reg::R4, u32::from(size)));
        self.push(asm::call(helper::XDP_LOAD_BYTES));
        self.jump(insn(JMP | JNE | K, Reg::R0, Reg::R0, 0, 0), Label::Reject);
        self.push(insn(LDX | width(size) | MEMORY, A, Reg::Fp, LOAD_BUF, 0));
        self.swap_a_to_big_endian(size);
    }

    fn swap_a_to_big_endian(&mut self, size: u8) {
        if size > 1 {
            self.push(insn(ALU | END | TO_BE, A, Reg::R0, 0, i32::from(size) * 8));
        }
    }

    /// Instructions `load_at_r2` emits, which the fast paths jump over.
    fn helper_load_len(size: u8) -> i16 {
        7 + i16::from(size > 1)
    }

    /// The fast path's end, with the loaded bytes in A: swap them and jump
    /// over the helper's path (`after` instructions more before it).
    fn direct_done(&mut self, size: u8, after: i16) {
        self.swap_a_to_big_endian(size);
        self.push(insn(JMP | JA, Reg::R0, Reg::R0, Self::helper_load_len(size) + after, 0));
    }

    /// The packet's start in r1 and end in `end`, as the verifier types them.
    fn packet_bounds(&mut self, end: Reg) {
        self.push(asm::ldx_w(Reg::R1, CTX, XDP_MD_DATA));
        self.push(asm::ldx_w(end, CTX, XDP_MD_DATA_END));
    }

    /// A constant offset: read directly where the bytes are in the linear
    /// part (one bounds check, no call: a helper call per load was most of a
    /// filter's cost), through the helper otherwise.
    fn load_abs(&mut self, k: u32, size: u8) {
        let end = u64::from(k) + u64::from(size);
        if end <= u64::from(DIRECT_MAX) {
            self.packet_bounds(Reg::R2);
            self.push(asm::mov64(Reg::R3, Reg::R1));
            self.push(asm::add64_imm(Reg::R3, end as i32));
            // Past the linear part: the helper's path, which also rejects.
            let fast = 2 + i16::from(size > 1);
            self.push(insn(JMP | JGT | SRC_X, Reg::R3, Reg::R2, fast, 0));
            self.push(insn(LDX | width(size) | MEMORY, A, Reg::R1, k as i16, 0));
            self.direct_done(size, 1);
        }
        self.push(asm::mov32_imm(Reg::R2, k));
        self.load_at_r2(size);
    }

    /// X + k, which the interpreter refuses when it passes u32: computed in
    /// 64 bits. Read directly as a constant offset is, when it is small
    /// enough for the verifier to bound the pointer.
    fn load_ind(&mut self, k: u32, size: u8) {
        self.push(insn(ALU | MOV | SRC_X, Reg::R2, X, 0, 0));
        self.push(asm::mov32_imm(Reg::R3, k));
        self.push(asm::add64(Reg::R2, Reg::R3));
        self.push(asm::mov64(Reg::R3, Reg::R2));
        self.push(insn(ALU64 | RSH | K, Reg::R3, Reg::R0, 0, 32));
        self.jump(insn(JMP | JNE | K, Reg::R3, Reg::R0, 0, 0), Label::Reject);
        let fast = 8 + i16::from(size > 1);
        self.push(insn(JMP | JGT | K, Reg::R2, Reg::R0, fast, (DIRECT_MAX - u32::from(size)) as i32));
        self.packet_bounds(Reg::R4);
        self.push(asm::add64(Reg::R1, Reg::R2));
        self.push(asm::mov64(Reg::R3, Reg::R1));
        self.push(asm::add64_imm(Reg::R3, i32::from(size)));
        self.push(insn(JMP | JGT | SRC_X, Reg::R3, Reg::R4, 2 + i16::from(size > 1), 0));
        self.push(insn(LDX | width(size) | MEMORY, A, Reg::R1, 0, 0));
        self.direct_done(size, 0);
        self.load_at_r2(size);
    }

    /// The packet's whole length into `dst` (A or X).
    fn len(&mut self, dst: Reg) {
        self.push(asm::mov64(Reg::R1, CTX));
        self.push(asm::call(helper::XDP_GET_BUFF_LEN));
        self.push(insn(ALU | MOV | SRC_X, dst, Reg::R0, 0, 0));
    }

    fn alu_k(&mut self, op: u8, k: u32) {
        self.push(insn(ALU | op | K, A, Reg::R0, 0, k as i32));
    }

    fn alu_x(&mut self, op: u8) {
        self.push(insn(ALU | op | SRC_X, A, X, 0, 0));
    }

    /// A shift by X: the interpreter gives 0 from 32 on, where eBPF's is undefined.
    fn shift_x(&mut self, op: u8) {
        self.push(insn(JMP32 | JLT | K, X, Reg::R0, 2, 32));
        self.push(asm::mov32_imm(A, 0));
        self.push(insn(JMP | JA, Reg::R0, Reg::R0, 1, 0));
        self.alu_x(op);
    }

    fn branch(&mut self, op: u8, x: bool, k: u32, jt: usize, jf: usize, next: usize) {
        let code = JMP32 | op | if x { SRC_X } else { K };
        let src = if x { X } else { Reg::R0 };
        let imm = if x { 0 } else { k as i32 };
        self.jump(insn(code, A, src, 0, imm), Label::Op(jt));
        if jf != next {
            self.ja(Label::Op(jf));
        }
    }

    fn ret(&mut self, value: Option<u32>) {
        match value {
            Some(0) => self.ja(Label::Reject),
            Some(_) => self.ja(Label::Accept),
            None => {
                self.jump(insn(JMP32 | JNE | K, A, Reg::R0, 0, 0), Label::Accept);
                self.ja(Label::Reject);
            }
        }
    }
}

/// Which ops some path from the first reaches. Every jump goes forward, so
/// one pass in order sees each op's predecessors before the op.
fn reachable(ops: &[Op]) -> Vec<bool> {
    let mut live = vec![false; ops.len()];
    if let Some(first) = live.first_mut() {
        *first = true;
    }
    for (pc, op) in ops.iter().enumerate() {
        if !live[pc] {
            continue;
        }
        let mut mark = |t: usize| {
            if let Some(l) = live.get_mut(t) {
                *l = true;
            }
        };
        match *op {
            Op::Ja(t) | Op::Loop(t) => mark(t.into()),
            Op::JeqK { jt, jf, .. }
            | Op::JgtK { jt, jf, .. }
            | Op::JgeK { jt, jf, .. }
            | Op::JsetK { jt, jf, .. }
            | Op::JeqX { jt, jf }
            | Op::JgtX { jt, jf }
            | Op::JgeX { jt, jf }
            | Op::JsetX { jt, jf } => {
                mark(jt.into());
                mark(jf.into());
            }
            Op::RetK(_) | Op::RetA => {}
            _ => mark(pc + 1),
        }
    }
    live
}

/// The stack offset of scratch word `index`.
fn mem(index: usize) -> i16 {
    MEM + 4 * index as i16
}

impl Filter {
    /// This filter as the body of an XDP program (see the module's contract):
    /// each packet ends in `accept` or `reject`, which must end in `exit` and
    /// find the context in [`CTX`].
    pub(crate) fn to_xdp(&self, accept: &[Insn], reject: &[Insn]) -> Result<Vec<Insn>, Untranslatable> {
        let ops: &[Op] = &self.ops;
        let mut e = Emitter { out: Vec::with_capacity(ops.len() * 4 + 32), fixups: Vec::new() };
        e.push(asm::mov64(CTX, Reg::R1));
        e.push(asm::mov32_imm(A, 0));
        e.push(asm::mov32_imm(X, 0));
        for word in (0..super::program::MEMWORDS).step_by(2) {
            e.push(insn(ST | DW | MEMORY, Reg::Fp, Reg::R0, mem(word), 0));
        }
        let live = reachable(ops);
        let mut starts = Vec::with_capacity(ops.len());
        for (pc, op) in ops.iter().enumerate() {
            starts.push(e.out.len());
            // The verifier refuses code nothing reaches, which classic BPF allows.
            if !live[pc] {
                continue;
            }
            let next = pc + 1;
            match *op {
                Op::LdAbsW(k) => e.load_abs(k, 4),
                Op::LdAbsH(k) => e.load_abs(k, 2),
                Op::LdAbsB(k) => e.load_abs(k, 1),
                Op::LdIndW(k) => e.load_ind(k, 4),
                Op::LdIndH(k) => e.load_ind(k, 2),
                Op::LdIndB(k) => e.load_ind(k, 1),
                Op::LdLen => e.len(A),
                Op::LdxLen => e.len(X),
                Op::LdImm(k) => e.push(asm::mov32_imm(A, k)),
                Op::LdxImm(k) => e.push(asm::mov32_imm(X, k)),
                Op::LdMem(s) => e.push(insn(LDX | W | MEMORY, A, Reg::Fp, mem(s.index()), 0)),
                Op::LdxMem(s) => e.push(insn(LDX | W | MEMORY, X, Reg::Fp, mem(s.index()), 0)),
                Op::LdxMsh(k) => {
                    // The byte goes through A, which is put back after.
                    e.push(asm::mov64(Reg::R9, A));
                    e.load_abs(k, 1);
                    e.push(insn(ALU | AND | K, A, Reg::R0, 0, 0xf));
                    e.push(insn(ALU | LSH | K, A, Reg::R0, 0, 2));
                    e.push(insn(ALU | MOV | SRC_X, X, A, 0, 0));
                    e.push(insn(ALU | MOV | SRC_X, A, Reg::R9, 0, 0));
                }
                Op::St(s) => e.push(asm::stx_w(Reg::Fp, mem(s.index()), A)),
                Op::Stx(s) => e.push(asm::stx_w(Reg::Fp, mem(s.index()), X)),
                Op::AddK(k) => e.alu_k(ADD, k),
                Op::SubK(k) => e.alu_k(SUB, k),
                Op::MulK(k) => e.alu_k(MUL, k),
                Op::DivK(k) => e.alu_k(DIV, k.get()),
                Op::ModK(k) => e.alu_k(MOD, k.get()),
                Op::AndK(k) => e.alu_k(AND, k),
                Op::OrK(k) => e.alu_k(OR, k),
                Op::XorK(k) => e.alu_k(XOR, k),
                Op::LshK(k) => e.alu_k(LSH, k & 31),
                Op::RshK(k) => e.alu_k(RSH, k & 31),
                Op::AddX => e.alu_x(ADD),
                Op::SubX => e.alu_x(SUB),
                Op::MulX => e.alu_x(MUL),
                Op::DivX | Op::ModX => {
                    e.jump(insn(JMP32 | JEQ | K, X, Reg::R0, 0, 0), Label::Reject);
                    e.alu_x(if matches!(op, Op::DivX) { DIV } else { MOD });
                }
                Op::AndX => e.alu_x(AND),
                Op::OrX => e.alu_x(OR),
                Op::XorX => e.alu_x(XOR),
                Op::LshX => e.shift_x(LSH),
                Op::RshX => e.shift_x(RSH),
                Op::Neg => e.push(insn(ALU | NEG, A, Reg::R0, 0, 0)),
                Op::Ja(t) => e.ja(Label::Op(usize::from(t))),
                Op::Loop(_) => {
                    return Err(Untranslatable(format!(
                        "instruction {pc} jumps backwards (protochain's header walk), which the kernel's verifier cannot bound"
                    )))
                }
                Op::JeqK { k, jt, jf } => e.branch(JEQ, false, k, jt.into(), jf.into(), next),
                Op::JgtK { k, jt, jf } => e.branch(JGT, false, k, jt.into(), jf.into(), next),
                Op::JgeK { k, jt, jf } => e.branch(JGE, false, k, jt.into(), jf.into(), next),
                Op::JsetK { k, jt, jf } => e.branch(JSET, false, k, jt.into(), jf.into(), next),
                Op::JeqX { jt, jf } => e.branch(JEQ, true, 0, jt.into(), jf.into(), next),
                Op::JgtX { jt, jf } => e.branch(JGT, true, 0, jt.into(), jf.into(), next),
                Op::JgeX { jt, jf } => e.branch(JGE, true, 0, jt.into(), jf.into(), next),
                Op::JsetX { jt, jf } => e.branch(JSET, true, 0, jt.into(), jf.into(), next),
                Op::RetK(k) => e.ret(Some(k)),
                Op::RetA => e.ret(None),
                Op::Tax => e.push(insn(ALU | MOV | SRC_X, X, A, 0, 0)),
                Op::Txa => e.push(insn(ALU | MOV | SRC_X, A, X, 0, 0)),
            }
        }
        // A block no path reaches is left out, for the same reason.
        let used = |l: fn(&Label) -> bool| e.fixups.iter().any(|(_, to)| l(to));
        let (accepts, rejects) = (used(|l| matches!(l, Label::Accept)), used(|l| matches!(l, Label::Reject)));
        let accept_at = e.out.len();
        if accepts {
            e.out.extend_from_slice(accept);
        }
        let reject_at = e.out.len();
        if rejects {
            e.out.extend_from_slice(reject);
        }
        for (at, label) in std::mem::take(&mut e.fixups) {
            let to = match label {
                // Decode checked every target is inside the program.
                Label::Op(pc) => starts[pc],
                Label::Accept => accept_at,
                Label::Reject => reject_at,
            };
            let off = to as i64 - at as i64 - 1;
            e.out[at].off = i16::try_from(off)
                .map_err(|_| Untranslatable(format!("the translated program is too long for a jump of {off} instructions")))?;
        }
        Ok(e.out)
    }
}

//! Validation of classic BPF programs and their decoding into [`Op`]s.
//!
//! Contract: [`decode`] accepts only programs the interpreter in
//! [`super::interp`] can run without panicking, and returns the decoded form it
//! runs. Accepted programs are non-empty, at most [`MAX_INSNS`] long, use
//! only the opcodes libpcap 1.10.3's `bpf_filter` executes (its `switch` aborts
//! on any other), address scratch memory below [`MEMWORDS`], never divide by a
//! constant zero, keep every jump inside the program and end in a return. With
//! those rules the program counter can only ever index a valid instruction.
//!
//! This is stricter than libpcap's own `bpf_validate`, which checks only the
//! instruction class for `BPF_RET` and `BPF_MISC` and the mode for loads, and so
//! lets through codes (say `ret x` or a byte-sized `ld #k`) on which
//! `bpf_filter` would abort.
//!
//! One thing libpcap allows and the kernel does not is kept: `ja` with a
//! negative offset. libpcap's `protochain` walks IPv6 extension headers with a
//! backward jump, so those become [`Op::Loop`] and the interpreter bounds them.

use std::num::NonZeroU32;

use super::libpcap::BpfInsn;

/// `BPF_MAXINSNS`: the longest program the kernel accepts, and weir with it.
pub const MAX_INSNS: usize = 4096;
/// `BPF_MEMWORDS`: the number of scratch memory words.
pub(super) const MEMWORDS: usize = 16;
/// `SKF_AD_OFF`: absolute load offsets from here up name Linux ancillary data.
pub(crate) const SKF_AD_OFF: u32 = 0xffff_f000;

/// The opcodes `bpf_filter` executes, by their `<linux/filter.h>` names.
pub(crate) mod code {
    pub(crate) const LD_W_ABS: u16 = 0x20;
    pub(crate) const LD_H_ABS: u16 = 0x28;
    pub(crate) const LD_B_ABS: u16 = 0x30;
    pub(crate) const LD_W_IND: u16 = 0x40;
    pub(crate) const LD_H_IND: u16 = 0x48;
    pub(crate) const LD_B_IND: u16 = 0x50;
    pub(crate) const LD_W_LEN: u16 = 0x80;
    pub(crate) const LD_IMM: u16 = 0x00;
    pub(crate) const LD_MEM: u16 = 0x60;
    pub(crate) const LDX_IMM: u16 = 0x01;
    pub(crate) const LDX_MEM: u16 = 0x61;
    pub(crate) const LDX_W_LEN: u16 = 0x81;
    pub(crate) const LDX_MSH_B: u16 = 0xb1;
    pub(crate) const ST: u16 = 0x02;
    pub(crate) const STX: u16 = 0x03;
    pub(crate) const ALU_ADD_K: u16 = 0x04;
    pub(crate) const ALU_SUB_K: u16 = 0x14;
    pub(crate) const ALU_MUL_K: u16 = 0x24;
    pub(crate) const ALU_DIV_K: u16 = 0x34;
    pub(crate) const ALU_OR_K: u16 = 0x44;
    pub(crate) const ALU_AND_K: u16 = 0x54;
    pub(crate) const ALU_LSH_K: u16 = 0x64;
    pub(crate) const ALU_RSH_K: u16 = 0x74;
    pub(crate) const ALU_MOD_K: u16 = 0x94;
    pub(crate) const ALU_XOR_K: u16 = 0xa4;
    pub(crate) const ALU_ADD_X: u16 = 0x0c;
    pub(crate) const ALU_SUB_X: u16 = 0x1c;
    pub(crate) const ALU_MUL_X: u16 = 0x2c;
    pub(crate) const ALU_DIV_X: u16 = 0x3c;
    pub(crate) const ALU_OR_X: u16 = 0x4c;
    pub(crate) const ALU_AND_X: u16 = 0x5c;
    pub(crate) const ALU_LSH_X: u16 = 0x6c;
    pub(crate) const ALU_RSH_X: u16 = 0x7c;
    pub(crate) const ALU_MOD_X: u16 = 0x9c;
    pub(crate) const ALU_XOR_X: u16 = 0xac;
    pub(crate) const ALU_NEG: u16 = 0x84;
    pub(crate) const JMP_JA: u16 = 0x05;
    pub(crate) const JMP_JEQ_K: u16 = 0x15;
    pub(crate) const JMP_JGT_K: u16 = 0x25;
    pub(crate) const JMP_JGE_K: u16 = 0x35;
    pub(crate) const JMP_JSET_K: u16 = 0x45;
    pub(crate) const JMP_JEQ_X: u16 = 0x1d;
    pub(crate) const JMP_JGT_X: u16 = 0x2d;
    pub(crate) const JMP_JGE_X: u16 = 0x3d;
    pub(crate) const JMP_JSET_X: u16 = 0x4d;
    pub(crate) const RET_K: u16 = 0x06;
    pub(crate) const RET_A: u16 = 0x16;
    pub(crate) const MISC_TAX: u16 = 0x07;
    pub(crate) const MISC_TXA: u16 = 0x87;
}

/// A scratch memory index, below [`MEMWORDS`] by construction.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct Slot(u8);

impl Slot {
    fn new(k: u32) -> Option<Slot> {
        u8::try_from(k).ok().filter(|&i| usize::from(i) < MEMWORDS).map(Slot)
    }

    #[inline(always)]
    pub(super) fn index(self) -> usize {
        // The mask is a no-op for validated slots; it lets the compiler drop the
        // bounds check on `[u32; MEMWORDS]`.
        usize::from(self.0) & (MEMWORDS - 1)
    }
}

/// An instruction index inside the program, checked by [`decode`].
pub(super) type Target = u16;

/// One decoded instruction. Jump targets are absolute instruction indices.
///
/// Each conditional jump is its own variant, rather than one variant carrying a
/// condition, so the interpreter dispatches once per instruction.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Op {
    LdAbsW(u32),
    LdAbsH(u32),
    LdAbsB(u32),
    LdIndW(u32),
    LdIndH(u32),
    LdIndB(u32),
    LdLen,
    LdImm(u32),
    LdMem(Slot),
    LdxImm(u32),
    LdxMem(Slot),
    LdxLen,
    LdxMsh(u32),
    St(Slot),
    Stx(Slot),
    AddK(u32),
    SubK(u32),
    MulK(u32),
    DivK(NonZeroU32),
    ModK(NonZeroU32),
    AndK(u32),
    OrK(u32),
    XorK(u32),
    LshK(u32),
    RshK(u32),
    AddX,
    SubX,
    MulX,
    DivX,
    ModX,
    AndX,
    OrX,
    XorX,
    LshX,
    RshX,
    Neg,
    /// A forward `ja`.
    Ja(Target),
    /// A `ja` to itself or an earlier instruction.
    Loop(Target),
    JeqK {
        k: u32,
        jt: Target,
        jf: Target,
    },
    JgtK {
        k: u32,
        jt: Target,
        jf: Target,
    },
    JgeK {
        k: u32,
        jt: Target,
        jf: Target,
    },
    JsetK {
        k: u32,
        jt: Target,
        jf: Target,
    },
    JeqX {
        jt: Target,
        jf: Target,
    },
    JgtX {
        jt: Target,
        jf: Target,
    },
    JgeX {
        jt: Target,
        jf: Target,
    },
    JsetX {
        jt: Target,
        jf: Target,
    },
    RetK(u32),
    RetA,
    Tax,
    Txa,
}

/// Why a program was refused, and at which instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Rejection {
    pub(super) at: usize,
    pub(super) reason: String,
}

impl Rejection {
    fn new(at: usize, reason: impl Into<String>) -> Rejection {
        Rejection { at, reason: reason.into() }
    }
}

/// Validate `insns` and decode them; see the module documentation for the rules.
pub(super) fn decode(insns: &[BpfInsn]) -> Result<Box<[Op]>, Rejection> {
    if insns.is_empty() {
        return Err(Rejection::new(0, "the program is empty"));
    }
    if insns.len() > MAX_INSNS {
        return Err(Rejection::new(MAX_INSNS, format!("the program has {} instructions, more than the limit of {MAX_INSNS}", insns.len())));
    }
    let ops = insns
        .iter()
        .enumerate()
        .map(|(at, insn)| decode_one(at, insn, insns.len()).map_err(|reason| Rejection::new(at, reason)))
        .collect::<Result<Box<[Op]>, Rejection>>()?;
    let last = insns.len() - 1;
    if !matches!(ops[last], Op::RetK(_) | Op::RetA) {
        return Err(Rejection::new(last, "the last instruction is not a return"));
    }
    Ok(ops)
}

fn decode_one(at: usize, insn: &BpfInsn, len: usize) -> Result<Op, String> {
    use code::*;
    let k = insn.k;
    let slot = || Slot::new(k).ok_or_else(|| format!("scratch memory index {k} is out of range (M[0] to M[{}])", MEMWORDS - 1));
    let nonzero = |what: &str| NonZeroU32::new(k).ok_or_else(|| format!("{what} by the constant 0"));
    // `at < len <= MAX_INSNS`, so these sums cannot overflow and fit a Target once below `len`.
    let target = |offset: usize| {
        let t = at + 1 + offset;
        if t < len {
            Ok(t as Target)
        } else {
            Err(format!("jump to instruction {t} is outside the program of {len} instructions"))
        }
    };
    let branches = || -> Result<(Target, Target), String> { Ok((target(insn.jt.into())?, target(insn.jf.into())?)) };
    let op = match insn.code {
        LD_W_ABS => Op::LdAbsW(k),
        LD_H_ABS => Op::LdAbsH(k),
        LD_B_ABS => Op::LdAbsB(k),
        LD_W_IND => Op::LdIndW(k),
        LD_H_IND => Op::LdIndH(k),
        LD_B_IND => Op::LdIndB(k),
        LD_W_LEN => Op::LdLen,
        LD_IMM => Op::LdImm(k),
        LD_MEM => Op::LdMem(slot()?),
        LDX_IMM => Op::LdxImm(k),
        LDX_MEM => Op::LdxMem(slot()?),
        LDX_W_LEN => Op::LdxLen,
        LDX_MSH_B => Op::LdxMsh(k),
        ST => Op::St(slot()?),
        STX => Op::Stx(slot()?),
        ALU_ADD_K => Op::AddK(k),
        ALU_SUB_K => Op::SubK(k),
        ALU_MUL_K => Op::MulK(k),
        ALU_DIV_K => Op::DivK(nonzero("division")?),
        ALU_MOD_K => Op::ModK(nonzero("modulo")?),
        ALU_AND_K => Op::AndK(k),
        ALU_OR_K => Op::OrK(k),
        ALU_XOR_K => Op::XorK(k),
        ALU_LSH_K => Op::LshK(k),
        ALU_RSH_K => Op::RshK(k),
        ALU_ADD_X => Op::AddX,
        ALU_SUB_X => Op::SubX,
        ALU_MUL_X => Op::MulX,
        ALU_DIV_X => Op::DivX,
        ALU_MOD_X => Op::ModX,
        ALU_AND_X => Op::AndX,
        ALU_OR_X => Op::OrX,
        ALU_XOR_X => Op::XorX,
        ALU_LSH_X => Op::LshX,
        ALU_RSH_X => Op::RshX,
        ALU_NEG => Op::Neg,
        JMP_JA => {
            // libpcap adds k to the program counter as a signed 32-bit offset.
            let t = at as i64 + 1 + i64::from(k as i32);
            if !(0..len as i64).contains(&t) {
                return Err(format!("jump to instruction {t} is outside the program of {len} instructions"));
            }
            if t as usize > at {
                Op::Ja(t as Target)
            } else {
                Op::Loop(t as Target)
            }
        }
        JMP_JEQ_K => {
            let (jt, jf) = branches()?;
            Op::JeqK { k, jt, jf }
        }
        JMP_JGT_K => {
            let (jt, jf) = branches()?;
            Op::JgtK { k, jt, jf }
        }
        JMP_JGE_K => {
            let (jt, jf) = branches()?;
            Op::JgeK { k, jt, jf }
        }
        JMP_JSET_K => {
            let (jt, jf) = branches()?;
            Op::JsetK { k, jt, jf }
        }
        JMP_JEQ_X => {
            let (jt, jf) = branches()?;
            Op::JeqX { jt, jf }
        }
        JMP_JGT_X => {
            let (jt, jf) = branches()?;
            Op::JgtX { jt, jf }
        }
        JMP_JGE_X => {
            let (jt, jf) = branches()?;
            Op::JgeX { jt, jf }
        }
        JMP_JSET_X => {
            let (jt, jf) = branches()?;
            Op::JsetX { jt, jf }
        }
        RET_K => Op::RetK(k),
        RET_A => Op::RetA,
        MISC_TAX => Op::Tax,
        MISC_TXA => Op::Txa,
        other => return Err(format!("unknown opcode {other:#04x}")),
    };
    Ok(op)
}

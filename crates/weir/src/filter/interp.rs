//! The classic BPF interpreter.
//!
//! Contract: for every program [`super::program::decode`] accepts and every
//! packet, [`run`] returns what libpcap 1.10.3's `bpf_filter` (the engine of
//! `pcap_offline_filter`) returns, never panics and always terminates. The two
//! places where libpcap's behaviour is not defined or not finite are pinned down:
//!
//! - Scratch memory starts zeroed; libpcap leaves it uninitialised. Programs from
//!   `pcap_compile` never read a word before writing it.
//! - Backward jumps ([`Op::Loop`], only from `protochain`) may be taken at most
//!   once per captured byte, plus once; past that the packet is rejected. Each
//!   pass of libpcap's extension-header walk moves at least 8 bytes further into
//!   the packet, so honest walks stay far inside the budget, while a crafted
//!   packet can make libpcap 1.10.3 spin forever (its AH step sets X instead of
//!   adding to it, so an AH header that points at itself is revisited endlessly).
//!
//! Out-of-bounds packet loads, and division or modulo by an X of zero, end the
//! program with 0, as in libpcap. Linux ancillary offsets (`SKF_AD_OFF` and up)
//! are ordinary absolute offsets here: they lie beyond any captured packet, so the
//! load fails and the result is 0, which is what `pcap_offline_filter` does with
//! them too (it runs without the kernel's auxiliary data).
//!
//! Every check that does not depend on the packet was made once by `decode`, so
//! the loop is one `match` per instruction; compiling the same [`Op`]s to machine
//! code is the later JIT step.

use super::program::{Op, Target, MEMWORDS};

/// Run decoded `ops` on one packet; the result is 0 to reject, or the snap length.
pub(super) fn run(ops: &[Op], data: &[u8], wire_len: u32) -> u32 {
    let mut a: u32 = 0;
    let mut x: u32 = 0;
    let mut mem = [0u32; MEMWORDS];
    let mut loops_left = data.len().saturating_add(1);
    let mut pc: usize = 0;
    loop {
        // In range: decode checked every jump target, and the last op returns.
        let op = ops[pc];
        pc += 1;
        match op {
            Op::LdAbsW(k) => match word(data, k as usize) {
                Some(v) => a = v,
                None => return 0,
            },
            Op::LdAbsH(k) => match half(data, k as usize) {
                Some(v) => a = v,
                None => return 0,
            },
            Op::LdAbsB(k) => match data.get(k as usize) {
                Some(&v) => a = u32::from(v),
                None => return 0,
            },
            Op::LdIndW(k) => match indexed(x, k).and_then(|at| word(data, at)) {
                Some(v) => a = v,
                None => return 0,
            },
            Op::LdIndH(k) => match indexed(x, k).and_then(|at| half(data, at)) {
                Some(v) => a = v,
                None => return 0,
            },
            Op::LdIndB(k) => match indexed(x, k).and_then(|at| data.get(at)) {
                Some(&v) => a = u32::from(v),
                None => return 0,
            },
            Op::LdLen => a = wire_len,
            Op::LdImm(k) => a = k,
            Op::LdMem(s) => a = mem[s.index()],
            Op::LdxImm(k) => x = k,
            Op::LdxMem(s) => x = mem[s.index()],
            Op::LdxLen => x = wire_len,
            Op::LdxMsh(k) => match data.get(k as usize) {
                Some(&v) => x = u32::from(v & 0xf) << 2,
                None => return 0,
            },
            Op::St(s) => mem[s.index()] = a,
            Op::Stx(s) => mem[s.index()] = x,
            Op::AddK(k) => a = a.wrapping_add(k),
            Op::SubK(k) => a = a.wrapping_sub(k),
            Op::MulK(k) => a = a.wrapping_mul(k),
            Op::DivK(k) => a /= k,
            Op::ModK(k) => a %= k,
            Op::AndK(k) => a &= k,
            Op::OrK(k) => a |= k,
            Op::XorK(k) => a ^= k,
            // libpcap shifts by a constant with C's `<<=`, which x86-64 compiles to a
            // shift that uses the low five bits of the count: wrapping_shl does the same.
            Op::LshK(k) => a = a.wrapping_shl(k),
            Op::RshK(k) => a = a.wrapping_shr(k),
            Op::AddX => a = a.wrapping_add(x),
            Op::SubX => a = a.wrapping_sub(x),
            Op::MulX => a = a.wrapping_mul(x),
            Op::DivX => match a.checked_div(x) {
                Some(v) => a = v,
                None => return 0,
            },
            Op::ModX => match a.checked_rem(x) {
                Some(v) => a = v,
                None => return 0,
            },
            Op::AndX => a &= x,
            Op::OrX => a |= x,
            Op::XorX => a ^= x,
            // By X, libpcap tests the count and gives 0 from 32 on.
            Op::LshX => a = a.checked_shl(x).unwrap_or(0),
            Op::RshX => a = a.checked_shr(x).unwrap_or(0),
            Op::Neg => a = a.wrapping_neg(),
            Op::Ja(t) => pc = usize::from(t),
            Op::Loop(t) => {
                if loops_left == 0 {
                    return 0;
                }
                loops_left -= 1;
                pc = usize::from(t);
            }
            Op::JeqK { k, jt, jf } => pc = branch(a == k, jt, jf),
            Op::JgtK { k, jt, jf } => pc = branch(a > k, jt, jf),
            Op::JgeK { k, jt, jf } => pc = branch(a >= k, jt, jf),
            Op::JsetK { k, jt, jf } => pc = branch(a & k != 0, jt, jf),
            Op::JeqX { jt, jf } => pc = branch(a == x, jt, jf),
            Op::JgtX { jt, jf } => pc = branch(a > x, jt, jf),
            Op::JgeX { jt, jf } => pc = branch(a >= x, jt, jf),
            Op::JsetX { jt, jf } => pc = branch(a & x != 0, jt, jf),
            Op::RetK(k) => return k,
            Op::RetA => return a,
            Op::Tax => x = a,
            Op::Txa => a = x,
        }
    }
}

#[inline(always)]
fn branch(taken: bool, jt: Target, jf: Target) -> usize {
    usize::from(if taken { jt } else { jf })
}

/// The offset X + k, which libpcap checks without wrapping: a sum past u32 is out of bounds.
#[inline(always)]
fn indexed(x: u32, k: u32) -> Option<usize> {
    x.checked_add(k).map(|at| at as usize)
}

#[inline(always)]
fn word(data: &[u8], at: usize) -> Option<u32> {
    data.get(at..)?.first_chunk::<4>().map(|b| u32::from_be_bytes(*b))
}

#[inline(always)]
fn half(data: &[u8], at: usize) -> Option<u32> {
    data.get(at..)?.first_chunk::<2>().map(|b| u32::from(u16::from_be_bytes(*b)))
}

//! The eBPF translation of filters, run by the kernel itself
//! (`BPF_PROG_TEST_RUN` on an XDP program), against the interpreter.
//!
//! Contract: for random valid forward-jumping programs, for libpcap's own
//! programs on damaged real headers, and for the edges the interpreter pins
//! down (loads past the end, X-indexed loads that would wrap, division by an X
//! of zero, shifts by 32 and more), the kernel's verdict is the interpreter's.
//! XDP has no separate wire length: every packet here is whole, so `len` is
//! its length in both. The tests need root (loading programs): they are
//! ignored otherwise, and `make privileged` runs them.

use super::super::program::{code::*, MEMWORDS};
use super::super::tests::{arb_insn, arb_k, valid_program, EXPRESSIONS, TEMPLATES};
use super::super::*;
use super::{asm, Reg};
use crate::sys::bpf::{load_xdp, test_run};
use proptest::prelude::*;
use std::os::fd::AsFd;

const XDP_DROP: u32 = 1;
const XDP_TX: u32 = 3;
/// The kernel's test run wants an Ethernet header's worth at least.
const MIN_FRAME: usize = 14;

/// The kernel's verdict on `data`: true when the translated filter accepts.
fn kernel_accepts(filter: &Filter, data: &[u8]) -> Result<bool, String> {
    let accept = [asm::mov32_imm(Reg::R0, XDP_TX), asm::exit()];
    let reject = [asm::mov32_imm(Reg::R0, XDP_DROP), asm::exit()];
    let prog = filter.to_xdp(&accept, &reject).map_err(|e| e.0)?;
    let fd = load_xdp("weir_test", &prog).map_err(|e| format!("load: {e}"))?;
    match test_run(fd.as_fd(), data, 1, 0, 0).map_err(|e| format!("test run: {e}"))? {
        XDP_TX => Ok(true),
        XDP_DROP => Ok(false),
        other => Err(format!("the program returned {other}, neither verdict")),
    }
}

fn check(filter: &Filter, data: &[u8]) -> Result<(), String> {
    let want = filter.run(data, data.len() as u32) != 0;
    let got = kernel_accepts(filter, data)?;
    if got == want {
        Ok(())
    } else {
        Err(format!("the kernel {} where the interpreter {}\n{}", verdict(got), verdict(want), filter.disassemble()))
    }
}

fn verdict(accepts: bool) -> &'static str {
    if accepts {
        "accepts"
    } else {
        "rejects"
    }
}

fn stmt(code: u16, k: u32) -> BpfInsn {
    BpfInsn { code, jt: 0, jf: 0, k }
}

fn from(prog: &[BpfInsn]) -> Filter {
    Filter::from_program(prog).expect("valid program")
}

/// A frame of `len` bytes counting up from 1, so no byte is zero.
fn frame(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 255 + 1) as u8).collect()
}

#[test]
#[ignore = "needs root: loads XDP programs"]
fn the_edges_the_interpreter_pins_down_hold_in_the_kernel() {
    let data = frame(60);
    let cases: Vec<Vec<BpfInsn>> = vec![
        // Loads at, before and past the end, in every width.
        vec![stmt(LD_W_ABS, 56), stmt(RET_A, 0)],
        vec![stmt(LD_W_ABS, 57), stmt(RET_K, 1)],
        vec![stmt(LD_H_ABS, 58), stmt(RET_A, 0)],
        vec![stmt(LD_H_ABS, 59), stmt(RET_K, 1)],
        vec![stmt(LD_B_ABS, 59), stmt(RET_A, 0)],
        vec![stmt(LD_B_ABS, 60), stmt(RET_K, 1)],
        vec![stmt(LD_B_ABS, u32::MAX), stmt(RET_K, 1)],
        vec![stmt(LD_B_ABS, SKF_AD_OFF), stmt(RET_K, 1)],
        // X + k wrapping past u32 is out of bounds, not a small offset.
        vec![stmt(LDX_IMM, u32::MAX), stmt(LD_B_IND, 2), stmt(RET_K, 1)],
        vec![stmt(LDX_IMM, 50), stmt(LD_W_IND, 6), stmt(RET_A, 0)],
        vec![stmt(LDX_IMM, 50), stmt(LD_W_IND, 7), stmt(RET_K, 1)],
        // MSH keeps A.
        vec![stmt(LD_IMM, 7), stmt(LDX_MSH_B, 14), stmt(RET_A, 0)],
        vec![stmt(LDX_MSH_B, 14), stmt(MISC_TXA, 0), stmt(ALU_SUB_K, 60), stmt(RET_A, 0)],
        // Division and modulo by an X of zero reject.
        vec![stmt(LD_IMM, 7), stmt(ALU_DIV_X, 0), stmt(RET_K, 1)],
        vec![stmt(LD_IMM, 7), stmt(ALU_MOD_X, 0), stmt(RET_K, 1)],
        vec![stmt(LD_IMM, 7), stmt(LDX_IMM, 2), stmt(ALU_DIV_X, 0), stmt(ALU_SUB_K, 3), stmt(RET_A, 0)],
        // Shifts by X from 32 on give 0; by a constant, its low five bits count.
        vec![stmt(LD_IMM, 1), stmt(LDX_IMM, 32), stmt(ALU_LSH_X, 0), stmt(RET_A, 0)],
        vec![stmt(LD_IMM, 1), stmt(LDX_IMM, 31), stmt(ALU_LSH_X, 0), stmt(RET_A, 0)],
        vec![stmt(LD_IMM, 1), stmt(ALU_LSH_K, 32), stmt(RET_A, 0)],
        vec![stmt(LD_IMM, u32::MAX), stmt(LDX_IMM, 40), stmt(ALU_RSH_X, 0), stmt(RET_A, 0)],
        // len is the whole packet.
        vec![stmt(LD_W_LEN, 0), stmt(ALU_SUB_K, 60), stmt(RET_A, 0)],
        vec![stmt(LDX_W_LEN, 0), stmt(MISC_TXA, 0), stmt(ALU_SUB_K, 59), stmt(RET_A, 0)],
        // Scratch memory starts zeroed.
        vec![stmt(LD_MEM, 15), stmt(RET_A, 0)],
        vec![stmt(LD_IMM, 9), stmt(ST, 3), stmt(LD_IMM, 0), stmt(LDX_MEM, 3), stmt(MISC_TXA, 0), stmt(RET_A, 0)],
        // Comparisons are unsigned 32-bit.
        vec![stmt(LD_IMM, 0x8000_0000), BpfInsn { code: JMP_JGT_K, jt: 0, jf: 1, k: 1 }, stmt(RET_K, 1), stmt(RET_K, 0)],
        vec![stmt(LD_IMM, u32::MAX), stmt(ALU_NEG, 0), stmt(RET_A, 0)],
    ];
    let mut failures = Vec::new();
    for (i, prog) in cases.iter().enumerate() {
        if let Err(e) = check(&from(prog), &data) {
            failures.push(format!("case {i}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
#[ignore = "needs root: loads XDP programs"]
fn filters_bound_to_an_interface_judge_in_the_kernel_as_in_the_interpreter() {
    let link = LinkMeta { ifindex: 7, address: [0x02, 0x00, 0x5e, 0x10, 0x20, 0x30] };
    let destinations = [link.address, [0xff; 6], [0x01, 0x00, 0x5e, 0, 0, 0xfb], [0x02, 0x00, 0x5e, 0x10, 0x20, 0x31]];
    let mut filters: Vec<Filter> = (0..4)
        .map(|p| from(&[stmt(LD_H_ABS, SKF_AD_OFF + 4), BpfInsn { code: JMP_JEQ_K, jt: 0, jf: 1, k: p }, stmt(RET_K, 1), stmt(RET_K, 0)]))
        .collect();
    filters.extend(
        ["inbound and udp", "outbound", "ifindex 7 and not outbound", "ifindex 8"]
            .map(|e| Filter::compile(e, crate::LinkType::ETHERNET, 65535).expect("compiles")),
    );
    let mut failures = Vec::new();
    for (i, filter) in filters.iter().enumerate() {
        let bound = filter.bind(link).expect("binds");
        let mut accepted = 0;
        for dst in destinations {
            let mut data = TEMPLATES[0].to_vec();
            data[..6].copy_from_slice(&dst);
            data[23] = 17;
            accepted += usize::from(bound.matches(&data, data.len() as u32));
            if let Err(e) = check(&bound, &data) {
                failures.push(format!("filter {i} on a frame to {dst:02x?}: {e}"));
            }
        }
        // Each packet type is one destination's; the expressions take all or none.
        let want = [1, 1, 1, 1, 4, 0, 4, 0][i];
        assert_eq!(accepted, want, "filter {i}\n{}", bound.disassemble());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn backward_jumps_are_not_translated_and_say_why() {
    let prog = [stmt(LD_IMM, 1), stmt(JMP_JA, u32::MAX), stmt(RET_A, 0)];
    let err = from(&prog).to_xdp(&[asm::exit()], &[asm::exit()]).unwrap_err();
    assert!(err.0.contains("instruction 1 jumps backwards"), "{}", err.0);
    let protochain = Filter::compile("ip6 protochain 17", crate::LinkType::ETHERNET, 65535).unwrap();
    assert!(protochain.to_xdp(&[asm::exit()], &[asm::exit()]).is_err());
}

#[test]
#[ignore = "needs root: loads XDP programs"]
fn compiled_programs_agree_in_the_kernel_on_damaged_packets() {
    let mut failures = Vec::new();
    for (expr, link) in EXPRESSIONS.iter().copied().filter(|(_, link)| *link == 1) {
        let filter = Filter::compile(expr, crate::LinkType(link), 65535).unwrap();
        if filter.to_xdp(&[asm::exit()], &[asm::exit()]).is_err() {
            continue;
        }
        for (t, template) in TEMPLATES.iter().enumerate() {
            for cut in MIN_FRAME..=template.len() {
                for damage in [None, Some(cut / 2)] {
                    let mut pkt = template[..cut].to_vec();
                    if let Some(at) = damage {
                        pkt[at] ^= 0x5a;
                    }
                    if let Err(e) = check(&filter, &pkt) {
                        failures.push(format!("{expr} on template {t} cut at {cut}, damaged at {damage:?}: {e}"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    /// The model test: any valid forward-jumping program on any whole packet
    /// gets the interpreter's verdict from the kernel.
    #[test]
    #[ignore = "needs root: loads XDP programs"]
    fn random_programs_get_the_interpreters_verdict_in_the_kernel(
        init: [u32; MEMWORDS],
        x in arb_k(),
        body in prop::collection::vec(arb_insn(), 1..48),
        ret_a: bool,
        data in prop::collection::vec(prop_oneof![3 => 0u8..4, 1 => any::<u8>()], MIN_FRAME..96),
    ) {
        let prog = valid_program(&init, x, &body, ret_a);
        let filter = Filter::from_program(&prog).map_err(|e| TestCaseError::fail(e.to_string()))?;
        check(&filter, &data).map_err(TestCaseError::fail)?;
    }
}

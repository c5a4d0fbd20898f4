//! A filter bound to the interface its packets arrive on, so `inbound`,
//! `outbound` and `ifindex` mean on AF_XDP and XDP what they mean in a kernel
//! socket filter.
//!
//! libpcap compiles those qualifiers to loads of Linux ancillary data
//! (`SKF_AD_PKTTYPE`, `SKF_AD_IFINDEX`), which only a socket filter has. An
//! XDP program runs before the kernel has looked at the packet, and user space
//! has no socket filter at all, so unbound those loads fail and reject every
//! packet (see [`Filter::ancillary_note`]). But every packet an XDP hook or an
//! AF_XDP socket sees arrived on one known interface, so both values are
//! known there:
//!
//! - the interface index is that interface's;
//! - the packet type is what `eth_type_trans` would give it on that interface:
//!   `PACKET_HOST` when the destination is the interface's own address, else
//!   `PACKET_BROADCAST` for ff:ff:ff:ff:ff:ff, `PACKET_MULTICAST` for another
//!   group address, and `PACKET_OTHERHOST` for someone else's unicast address.
//!   Never `PACKET_OUTGOING`: XDP sees only what comes in.
//!
//! Contract: [`Filter::bind`] rewrites the decoded program so each ancillary
//! load of the index becomes a constant and each of the packet type becomes a
//! short computation from the destination address, leaving X and scratch
//! memory as they were. Every engine (interpreter, JIT, the XDP translation)
//! then runs the bound program as it runs any other. On an Ethernet frame of
//! at least 6 bytes the bound program gives the verdict the unbound one gives
//! in a socket filter on a packet received on that interface (the live test
//! holds it to the kernel's own socket filter); a shorter frame, which no
//! Ethernet device delivers, is rejected where the type is asked. Other
//! ancillary loads (queue, hash, VLAN tag...) are left as they are, and
//! binding twice changes nothing.
//!
//! The address is read once, when the capture opens: a capture that outlives
//! a change of the interface's address keeps judging by the old one.

use std::sync::Arc;

use super::program::{Op, Target, MAX_INSNS, SKF_AD_OFF};
use super::{Filter, FilterError, Runner};

/// `SKF_AD_PKTTYPE` and `SKF_AD_IFINDEX`, as offsets past [`SKF_AD_OFF`].
const PKTTYPE: u32 = SKF_AD_OFF + 4;
const IFINDEX: u32 = SKF_AD_OFF + 8;

/// `<linux/if_packet.h>`'s packet types that an arriving frame can have.
const PACKET_HOST: u32 = 0;
const PACKET_BROADCAST: u32 = 1;
const PACKET_MULTICAST: u32 = 2;
const PACKET_OTHERHOST: u32 = 3;

/// Ops that stand for one packet-type load.
const PKTTYPE_OPS: usize = 17;

/// The interface every packet of a capture arrived on: what a kernel socket
/// filter would know about each of them.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct LinkMeta {
    /// The interface's index in its network namespace.
    pub ifindex: u32,
    /// Its hardware address, which tells a packet for this host from others.
    pub address: [u8; 6],
}

impl LinkMeta {
    /// The packet type `eth_type_trans` gives a frame to `dst` on this interface.
    pub fn packet_type(&self, dst: [u8; 6]) -> u32 {
        if dst == self.address {
            PACKET_HOST
        } else if dst[0] & 1 == 0 {
            PACKET_OTHERHOST
        } else if dst == [0xff; 6] {
            PACKET_BROADCAST
        } else {
            PACKET_MULTICAST
        }
    }
}

fn ancillary(op: Op) -> Option<u32> {
    match op {
        Op::LdAbsW(k) | Op::LdAbsH(k) | Op::LdAbsB(k) if k == PKTTYPE || k == IFINDEX => Some(k),
        _ => None,
    }
}

impl Filter {
    /// Whether the program asks what [`bind`](Self::bind) gives: the packet
    /// type or the interface index.
    pub(crate) fn asks_link(&self) -> bool {
        self.ops.iter().any(|&op| ancillary(op).is_some())
    }

    /// This filter with the packet type and interface index of
    /// [`link`](LinkMeta) in place of the kernel's (see the module's
    /// contract). A filter that asks neither comes back as it is.
    ///
    /// # Errors
    ///
    /// [`FilterError::Invalid`] if the bound program would be longer than
    /// [`MAX_INSNS`] (each packet-type load becomes 17 instructions).
    pub fn bind(&self, link: LinkMeta) -> Result<Filter, FilterError> {
        if !self.asks_link() {
            return Ok(self.clone());
        }
        let ops = bind_ops(&self.ops, link)?;
        let runner = match &self.runner {
            Runner::Interp { jit_unavailable: None } => Runner::Interp { jit_unavailable: None },
            _ => Runner::new(&ops, super::FilterEngine::Jit),
        };
        Ok(Filter { insns: Arc::clone(&self.insns), ops: ops.into(), expression: self.expression.clone(), runner })
    }

    /// This filter [bound](Self::bind) to `link` where the capture knows the
    /// interface its packets arrive on (and no socket filter does), else as
    /// it is.
    ///
    /// # Errors
    ///
    /// As [`bind`](Self::bind).
    pub fn bind_where_known(self, link: Option<LinkMeta>) -> Result<Filter, FilterError> {
        match link {
            Some(link) => self.bind(link),
            None => Ok(self),
        }
    }
}

fn bind_ops(ops: &[Op], link: LinkMeta) -> Result<Vec<Op>, FilterError> {
    // Where each old op starts in the new program; one past the end too, which
    // no jump reaches (the last op returns) but keeps the map total.
    let mut at = Vec::with_capacity(ops.len() + 1);
    let mut len = 0usize;
    for &op in ops {
        at.push(len);
        len += if ancillary(op) == Some(PKTTYPE) { PKTTYPE_OPS } else { 1 };
    }
    at.push(len);
    if len > MAX_INSNS {
        return Err(FilterError::Invalid {
            at: MAX_INSNS,
            reason: format!(
                "bound to the interface, the program's packet-type tests make it {len} instructions, more than the limit of {MAX_INSNS}"
            ),
        });
    }
    // In range: every target was below ops.len(), and len <= MAX_INSNS < u16::MAX.
    let to = |t: Target| at[usize::from(t)] as Target;
    let mut out = Vec::with_capacity(len);
    for &op in ops {
        match ancillary(op) {
            Some(PKTTYPE) => packet_type(&mut out, link.address),
            Some(_) => out.push(Op::LdImm(link.ifindex)),
            None => out.push(match op {
                Op::Ja(t) => Op::Ja(to(t)),
                Op::Loop(t) => Op::Loop(to(t)),
                Op::JeqK { k, jt, jf } => Op::JeqK { k, jt: to(jt), jf: to(jf) },
                Op::JgtK { k, jt, jf } => Op::JgtK { k, jt: to(jt), jf: to(jf) },
                Op::JgeK { k, jt, jf } => Op::JgeK { k, jt: to(jt), jf: to(jf) },
                Op::JsetK { k, jt, jf } => Op::JsetK { k, jt: to(jt), jf: to(jf) },
                Op::JeqX { jt, jf } => Op::JeqX { jt: to(jt), jf: to(jf) },
                Op::JgtX { jt, jf } => Op::JgtX { jt: to(jt), jf: to(jf) },
                Op::JgeX { jt, jf } => Op::JgeX { jt: to(jt), jf: to(jf) },
                Op::JsetX { jt, jf } => Op::JsetX { jt: to(jt), jf: to(jf) },
                other => other,
            }),
        }
    }
    debug_assert_eq!(out.len(), len);
    Ok(out)
}

/// A = the packet type of the frame, from its destination address (bytes 0
/// to 5), in [`PKTTYPE_OPS`] ops that touch only A, in
/// [`LinkMeta::packet_type`]'s order; the last falls through to the next op.
fn packet_type(out: &mut Vec<Op>, address: [u8; 6]) {
    let b = out.len();
    let t = |i: usize| (b + i) as Target;
    let (host, broadcast, multicast, otherhost, next) = (t(10), t(12), t(14), t(16), t(PKTTYPE_OPS));
    let hi = u32::from_be_bytes([address[0], address[1], address[2], address[3]]);
    let lo = u32::from(u16::from_be_bytes([address[4], address[5]]));
    out.extend([
        Op::LdAbsW(0),
        Op::JeqK { k: hi, jt: t(2), jf: t(4) },
        Op::LdAbsH(4),
        Op::JeqK { k: lo, jt: host, jf: t(4) },
        Op::LdAbsB(0),
        Op::JsetK { k: 1, jt: t(6), jf: otherhost },
        Op::LdAbsW(0),
        Op::JeqK { k: u32::MAX, jt: t(8), jf: multicast },
        Op::LdAbsH(4),
        Op::JeqK { k: 0xffff, jt: broadcast, jf: multicast },
        Op::LdImm(PACKET_HOST),
        Op::Ja(next),
        Op::LdImm(PACKET_BROADCAST),
        Op::Ja(next),
        Op::LdImm(PACKET_MULTICAST),
        Op::Ja(next),
        Op::LdImm(PACKET_OTHERHOST),
    ]);
    debug_assert_eq!(out.len(), b + PKTTYPE_OPS);
}

#[cfg(test)]
mod tests {
    //! The bound program against the unbound one given each packet's values
    //! as constants, run by libpcap itself (the naive model: one program per
    //! packet), and against what each qualifier means.

    use super::super::program::{code::*, MEMWORDS};
    use super::super::tests::{arb_insn, arb_k, engines, libpcap_returns, stmt, valid_program};
    use super::super::BpfInsn;
    use super::*;
    use proptest::prelude::*;

    const LINK: LinkMeta = LinkMeta { ifindex: 7, address: [0x02, 0x00, 0x5e, 0x10, 0x20, 0x30] };

    /// Destinations of every packet type, and near misses of each.
    const DESTINATIONS: [([u8; 6], u32); 8] = [
        (LINK.address, PACKET_HOST),
        ([0xff; 6], PACKET_BROADCAST),
        ([0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb], PACKET_MULTICAST),
        ([0x33, 0x33, 0x00, 0x00, 0x00, 0x01], PACKET_MULTICAST),
        ([0xff, 0xff, 0xff, 0xff, 0xff, 0xfe], PACKET_MULTICAST),
        ([0x02, 0x00, 0x5e, 0x10, 0x20, 0x31], PACKET_OTHERHOST),
        ([0x02, 0x00, 0x5e, 0x11, 0x20, 0x30], PACKET_OTHERHOST),
        ([0x00, 0x00, 0x00, 0x00, 0x00, 0x00], PACKET_OTHERHOST),
    ];

    fn frame(dst: [u8; 6], rest: &[u8]) -> Vec<u8> {
        dst.iter().chain(rest).copied().collect()
    }

    /// `prog` with each packet-type and index load replaced by the value the
    /// kernel would load for a packet to `dst`: the same length, so every
    /// jump stays where it was.
    fn given(prog: &[BpfInsn], dst: [u8; 6]) -> Vec<BpfInsn> {
        prog.iter()
            .map(|i| match (i.code, i.k) {
                (LD_W_ABS | LD_H_ABS | LD_B_ABS, PKTTYPE) => stmt(LD_IMM, LINK.packet_type(dst)),
                (LD_W_ABS | LD_H_ABS | LD_B_ABS, IFINDEX) => stmt(LD_IMM, LINK.ifindex),
                _ => *i,
            })
            .collect()
    }

    #[test]
    fn each_destination_gets_the_type_eth_type_trans_gives_it() {
        for (dst, want) in DESTINATIONS {
            assert_eq!(LINK.packet_type(dst), want, "{dst:02x?}");
        }
    }

    #[test]
    fn bound_loads_give_the_packet_type_and_the_index_in_every_width_and_keep_x() {
        let rest = [0x08, 0x00, 0x45, 0, 0, 20];
        for code in [LD_W_ABS, LD_H_ABS, LD_B_ABS] {
            let pkttype = [stmt(LDX_IMM, 0x55), stmt(code, PKTTYPE), stmt(ALU_ADD_K, 1), stmt(ALU_ADD_X, 0), stmt(RET_A, 0)];
            let index = [stmt(code, IFINDEX), stmt(RET_A, 0)];
            let bound_type = Filter::from_program(&pkttype).unwrap().bind(LINK).unwrap();
            let bound_index = Filter::from_program(&index).unwrap().bind(LINK).unwrap();
            assert!(!bound_type.reads_linux_ancillary() && !bound_index.reads_linux_ancillary());
            for (dst, want) in DESTINATIONS {
                let data = frame(dst, &rest);
                assert_eq!(engines(&bound_type, &data, 100), want + 1 + 0x55, "{code:#x} to {dst:02x?}");
                assert_eq!(engines(&bound_index, &data, 100), LINK.ifindex, "{code:#x} to {dst:02x?}");
            }
        }
    }

    #[test]
    fn qualifiers_mean_what_they_mean_on_the_interface() {
        let udp = [0x08, 0x00, 0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0, 53, 0, 53, 0, 8, 0, 0];
        let tcp: Vec<u8> = udp.iter().enumerate().map(|(i, &b)| if i == 11 { 6 } else { b }).collect();
        // (expression, accepts the UDP frame, accepts the TCP frame), whatever the destination.
        let cases = [
            ("inbound", true, true),
            ("outbound", false, false),
            ("not inbound", false, false),
            ("not outbound", true, true),
            ("ifindex 7", true, true),
            ("ifindex 8", false, false),
            ("inbound and udp", true, false),
            ("outbound or tcp", false, true),
            ("ifindex 7 and not outbound and udp port 53", true, false),
        ];
        for (expr, on_udp, on_tcp) in cases {
            let unbound = Filter::compile(expr, crate::LinkType::ETHERNET, 65535).unwrap();
            assert!(unbound.asks_link(), "{expr}");
            let f = unbound.bind(LINK).unwrap();
            assert!(!f.reads_linux_ancillary() && f.ancillary_note(expr).is_none(), "{expr}");
            assert_eq!(f.expression(), Some(expr));
            for (dst, _) in DESTINATIONS {
                let src = [0x02, 0, 0, 0, 0, 1];
                let (u, t) = (frame(dst, &[&src[..], &udp].concat()), frame(dst, &[&src[..], &tcp].concat()));
                assert_eq!(engines(&f, &u, u.len() as u32) != 0, on_udp, "{expr} on UDP to {dst:02x?}");
                assert_eq!(engines(&f, &t, t.len() as u32) != 0, on_tcp, "{expr} on TCP to {dst:02x?}");
            }
        }
    }

    #[test]
    fn binding_what_asks_nothing_or_binding_again_changes_nothing() {
        let plain = Filter::compile("udp port 53", crate::LinkType::ETHERNET, 65535).unwrap();
        assert!(!plain.asks_link());
        assert_eq!(plain.bind(LINK).unwrap().ops[..], plain.ops[..]);
        let unbound = Filter::compile("inbound and udp", crate::LinkType::ETHERNET, 65535).unwrap();
        let once = unbound.bind(LINK).unwrap();
        assert_eq!(once.ops.len(), unbound.ops.len() + PKTTYPE_OPS - 1, "{}", once.disassemble());
        assert_eq!(once.bind(LINK).unwrap().ops[..], once.ops[..]);
        // What a kernel socket filter would be given stays the original.
        assert_eq!(once.program(), unbound.program());
        // Other ancillary data stays unknown, and is still reported.
        let queue = Filter::from_program(&[stmt(LD_W_ABS, SKF_AD_OFF + 16), stmt(RET_K, 1)]).unwrap().bind(LINK).unwrap();
        assert!(queue.reads_linux_ancillary() && !queue.asks_link());
        assert_eq!(engines(&queue, &[0; 60], 60), 0);
    }

    #[test]
    fn a_program_too_long_once_bound_is_refused_with_its_length() {
        let loads = MAX_INSNS / PKTTYPE_OPS + 1;
        let mut prog = vec![stmt(LD_B_ABS, PKTTYPE); loads];
        prog.push(stmt(RET_A, 0));
        let err = Filter::from_program(&prog).unwrap().bind(LINK).unwrap_err().to_string();
        assert!(err.contains(&format!("{} instructions", loads * PKTTYPE_OPS + 1)) && err.contains("4096"), "{err}");
        prog.drain(..2);
        Filter::from_program(&prog).unwrap().bind(LINK).expect("fits");
    }

    /// An instruction of a random program turned into a packet-type or index load.
    fn arb_ancillary() -> impl Strategy<Value = (prop::sample::Index, u16, u32)> {
        (
            any::<prop::sample::Index>(),
            prop::sample::select(vec![LD_W_ABS, LD_H_ABS, LD_B_ABS]),
            prop::sample::select(vec![PKTTYPE, IFINDEX]),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

        /// The model test: on any packet, the bound program returns exactly
        /// what libpcap returns for the program given that packet's type and
        /// the index as constants; the JIT and the interpreter agree.
        #[test]
        fn bound_random_programs_agree_with_the_program_given_each_packets_values(
            init: [u32; MEMWORDS],
            x in arb_k(),
            body in prop::collection::vec(arb_insn(), 1..40),
            loads in prop::collection::vec(arb_ancillary(), 1..6),
            ret_a: bool,
            dst in prop::sample::select(DESTINATIONS.map(|(d, _)| d).to_vec()),
            rest in prop::collection::vec(prop_oneof![3 => 0u8..4, 1 => any::<u8>()], 0..60),
            extra in 0u32..100,
        ) {
            let mut prog = valid_program(&init, x, &body, ret_a);
            let first = prog.len() - body.len() - 1;
            for (at, code, k) in loads {
                prog[first + at.index(body.len())] = stmt(code, k);
            }
            let data = frame(dst, &rest);
            let wire_len = data.len() as u32 + extra;
            let bound = Filter::from_program(&prog).map_err(|e| TestCaseError::fail(e.to_string()))?.bind(LINK)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let got = engines(&bound, &data, wire_len);
            let model = given(&prog, dst);
            prop_assert!(libpcap_returns(&model, &data, wire_len, got), "weir returned {:#x}\n{}", got, bound.disassemble());
        }
    }
}

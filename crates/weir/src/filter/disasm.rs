//! A `tcpdump -d` style listing of a decoded program.
//!
//! Contract: one line per instruction, each ended by a newline, laid out as
//! libpcap 1.10.3's `bpf_image` lays it out (so a listing can be diffed against
//! `tcpdump -d`): the index, the mnemonic padded to 8 columns, the operand, and
//! for conditional jumps the operand padded to 16 columns and the absolute
//! targets. Constants print in the base and signedness `bpf_image` uses, and
//! absolute loads from Linux ancillary offsets print by name (`[vlanp]`).
//! The one departure: `ldx` of the packet length, which `bpf_image` has no case
//! for and shows as `unimp 0x81`, prints as `ldx #pktlen`.

use std::fmt::Write;

use super::program::{Op, Target, SKF_AD_OFF};

/// The listing of `ops`; see the module documentation for the format.
pub(super) fn listing(ops: &[Op]) -> String {
    let mut out = String::with_capacity(ops.len() * 40);
    for (n, op) in ops.iter().enumerate() {
        line(&mut out, n, op);
        out.push('\n');
    }
    out
}

fn line(out: &mut String, n: usize, op: &Op) {
    let signed = |k: u32| (k as i32).to_string();
    let hex = |k: u32| format!("#{k:#x}");
    let dec = |k: u32| format!("#{}", k as i32);
    let (mnemonic, operand) = match *op {
        Op::LdAbsW(k) => ("ld", absolute(k)),
        Op::LdAbsH(k) => ("ldh", absolute(k)),
        Op::LdAbsB(k) => ("ldb", absolute(k)),
        Op::LdIndW(k) => ("ld", format!("[x + {}]", signed(k))),
        Op::LdIndH(k) => ("ldh", format!("[x + {}]", signed(k))),
        Op::LdIndB(k) => ("ldb", format!("[x + {}]", signed(k))),
        Op::LdLen => ("ld", "#pktlen".into()),
        Op::LdImm(k) => ("ld", hex(k)),
        Op::LdMem(s) => ("ld", format!("M[{}]", s.index())),
        Op::LdxImm(k) => ("ldx", hex(k)),
        Op::LdxMem(s) => ("ldx", format!("M[{}]", s.index())),
        Op::LdxLen => ("ldx", "#pktlen".into()),
        Op::LdxMsh(k) => ("ldxb", format!("4*([{}]&0xf)", signed(k))),
        Op::St(s) => ("st", format!("M[{}]", s.index())),
        Op::Stx(s) => ("stx", format!("M[{}]", s.index())),
        Op::AddK(k) => ("add", dec(k)),
        Op::SubK(k) => ("sub", dec(k)),
        Op::MulK(k) => ("mul", dec(k)),
        Op::DivK(k) => ("div", dec(k.get())),
        Op::ModK(k) => ("mod", dec(k.get())),
        Op::AndK(k) => ("and", hex(k)),
        Op::OrK(k) => ("or", hex(k)),
        Op::XorK(k) => ("xor", hex(k)),
        Op::LshK(k) => ("lsh", dec(k)),
        Op::RshK(k) => ("rsh", dec(k)),
        Op::AddX => ("add", "x".into()),
        Op::SubX => ("sub", "x".into()),
        Op::MulX => ("mul", "x".into()),
        Op::DivX => ("div", "x".into()),
        Op::ModX => ("mod", "x".into()),
        Op::AndX => ("and", "x".into()),
        Op::OrX => ("or", "x".into()),
        Op::XorX => ("xor", "x".into()),
        Op::LshX => ("lsh", "x".into()),
        Op::RshX => ("rsh", "x".into()),
        Op::Neg => ("neg", String::new()),
        Op::Ja(t) | Op::Loop(t) => ("ja", t.to_string()),
        Op::JeqK { k, jt, jf } => return jump(out, n, "jeq", &hex(k), jt, jf),
        Op::JgtK { k, jt, jf } => return jump(out, n, "jgt", &hex(k), jt, jf),
        Op::JgeK { k, jt, jf } => return jump(out, n, "jge", &hex(k), jt, jf),
        Op::JsetK { k, jt, jf } => return jump(out, n, "jset", &hex(k), jt, jf),
        Op::JeqX { jt, jf } => return jump(out, n, "jeq", "x", jt, jf),
        Op::JgtX { jt, jf } => return jump(out, n, "jgt", "x", jt, jf),
        Op::JgeX { jt, jf } => return jump(out, n, "jge", "x", jt, jf),
        Op::JsetX { jt, jf } => return jump(out, n, "jset", "x", jt, jf),
        Op::RetK(k) => ("ret", dec(k)),
        Op::RetA => ("ret", String::new()),
        Op::Tax => ("tax", String::new()),
        Op::Txa => ("txa", String::new()),
    };
    // Writing to a String cannot fail.
    let _ = write!(out, "({n:03}) {mnemonic:<8} {operand}");
}

fn jump(out: &mut String, n: usize, mnemonic: &str, operand: &str, jt: Target, jf: Target) {
    let _ = write!(out, "({n:03}) {mnemonic:<8} {operand:<16} jt {jt}\tjf {jf}");
}

/// `[offset]`, or `[name]` for the Linux ancillary data libpcap knows by name.
fn absolute(k: u32) -> String {
    const NAMES: [&str; 16] = [
        "proto",
        "type",
        "ifidx",
        "nla",
        "nlan",
        "mark",
        "queue",
        "hatype",
        "rxhash",
        "cpu",
        "xor_x",
        "vlan_tci",
        "vlanp",
        "poff",
        "random",
        "vlan_tpid",
    ];
    let name = k.checked_sub(SKF_AD_OFF).filter(|off| off % 4 == 0).and_then(|off| NAMES.get((off / 4) as usize));
    match name {
        Some(name) => format!("[{name}]"),
        None => format!("[{}]", k as i32),
    }
}

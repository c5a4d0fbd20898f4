//! Filters: libpcap expressions, compiled by the system libpcap, run by weir.
//!
//! weir never writes a BPF compiler: [`Filter::compile`] hands the expression to
//! libpcap's own `pcap_compile` (optimizer on, netmask unknown, on a
//! `pcap_open_dead` handle of the source's link type and snap length). The
//! resulting classic BPF program, or one given directly to
//! [`Filter::from_program`], is validated and decoded once into a compact form,
//! and [`Filter::run`] interprets that form on each packet.
//!
//! Contract: for every program `pcap_compile` produces and every packet, `run`
//! returns exactly what libpcap 1.10.3's `pcap_offline_filter` engine
//! (`bpf_filter`) returns: 0 to reject, otherwise the number of bytes to keep.
//! A validated filter cannot panic or run forever on any input. Where libpcap
//! itself is undefined or does not terminate, weir picks an answer: scratch
//! memory starts zeroed (libpcap leaves it uninitialised, and compiled programs
//! never read it before writing), and backward jumps, which only `protochain`
//! emits, may be taken once per captured byte plus once before the packet is
//! rejected (libpcap 1.10.3 spins forever on an IPv6 AH header that points at
//! itself). The tests hold weir to this against the system libpcap, on
//! handcrafted and random programs and on the corpus traces.
//!
//! Programs from a `pcap_open_dead` handle can still read Linux ancillary data:
//! on every link type but the Linux cooked ones, `inbound`, `outbound` and
//! `ifindex` compile to loads of the kernel's packet type or interface index.
//! Out of the kernel those loads fail, so such a filter rejects every packet
//! (`not inbound` included), exactly as `pcap_offline_filter` does; in a kernel
//! socket filter they work.
//!
//! The interpreter is the first step; a user-space JIT of the decoded form comes
//! later. Live sources attach [`Filter::program`] to the kernel socket instead.

#[cfg(test)]
mod disasm;
mod interp;
pub mod libpcap;
#[cfg(any(test, feature = "oracle"))]
pub mod oracle;
mod program;
mod switch;
#[cfg(test)]
mod tests;

use std::sync::Arc;

pub use libpcap::BpfInsn;
pub use program::MAX_INSNS;
pub(crate) use program::{code, SKF_AD_OFF};
pub(crate) use switch::FilterSwitch;
pub(crate) use switch::FilterWatch;

use program::Op;

/// A validated classic BPF program, ready to run.
#[derive(Clone, Debug)]
pub struct Filter {
    insns: Arc<[BpfInsn]>,
    ops: Arc<[Op]>,
    expression: Option<Arc<str>>,
}

/// Why a filter could not be built.
#[derive(Clone, Debug, thiserror::Error)]
pub enum FilterError {
    /// libpcap refused the expression; `message` is libpcap's own.
    #[error("invalid filter expression {expr:?}: {message}")]
    Compile {
        /// The expression as given.
        expr: String,
        /// libpcap's message.
        message: String,
    },
    /// The program is one weir cannot run safely.
    #[error("invalid BPF program at instruction {at}: {reason}")]
    Invalid {
        /// Index of the instruction at fault; [`MAX_INSNS`] for a program longer than that.
        at: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The system libpcap, which compiles expressions, is not available.
    #[error(transparent)]
    Library(#[from] libpcap::LoadError),
}

impl Filter {
    /// Compile `expr` with libpcap (optimizer on, netmask unknown) for this link type and snaplen.
    ///
    /// `link` is a `LINKTYPE_` value, as in a trace's header; it is turned into the
    /// `DLT_` value libpcap's compiler expects.
    ///
    /// # Errors
    ///
    /// [`FilterError::Library`] without a system libpcap,
    /// [`FilterError::Compile`] for an expression libpcap refuses, and
    /// [`FilterError::Invalid`] for a program longer than [`MAX_INSNS`].
    pub fn compile(expr: &str, link: crate::LinkType, snaplen: u32) -> Result<Filter, FilterError> {
        let lib = libpcap::Libpcap::system()?;
        let insns =
            lib.compile(expr, link.dlt(), snaplen, true).map_err(|message| FilterError::Compile { expr: expr.to_owned(), message })?;
        let mut filter = Filter::from_program(&insns)?;
        filter.expression = Some(expr.into());
        Ok(filter)
    }

    /// Validate a raw program (as from libpcap or a user).
    ///
    /// # Errors
    ///
    /// [`FilterError::Invalid`] for anything the interpreter could not run
    /// safely, or on which libpcap's `bpf_filter` aborts. A valid program has 1
    /// to [`MAX_INSNS`] instructions, all of opcodes `bpf_filter` runs, scratch
    /// memory indices below 16, no division by a constant 0, every jump inside
    /// the program, and a return last.
    pub fn from_program(insns: &[BpfInsn]) -> Result<Filter, FilterError> {
        let ops = program::decode(insns).map_err(|r| FilterError::Invalid { at: r.at, reason: r.reason })?;
        Ok(Filter { insns: insns.into(), ops: ops.into(), expression: None })
    }

    /// Run on one packet: `data` are the captured bytes, `wire_len` the length on the wire.
    /// Returns libpcap's result: 0 = reject, otherwise the snap length to keep.
    #[inline]
    pub fn run(&self, data: &[u8], wire_len: u32) -> u32 {
        interp::run(&self.ops, data, wire_len)
    }

    /// Whether the packet passes the filter.
    #[inline]
    pub fn matches(&self, data: &[u8], wire_len: u32) -> bool {
        self.run(data, wire_len) != 0
    }

    /// The original instructions, for attaching to a kernel socket.
    pub fn program(&self) -> &[BpfInsn] {
        &self.insns
    }

    /// The expression the filter was compiled from, if it was.
    pub fn expression(&self) -> Option<&str> {
        self.expression.as_deref()
    }

    /// The number of instructions.
    pub fn len(&self) -> usize {
        self.insns.len()
    }

    /// Always false: a validated program has at least one instruction.
    pub fn is_empty(&self) -> bool {
        self.insns.is_empty()
    }

    /// `tcpdump -d` style listing, one instruction per line.
    #[cfg(test)]
    fn disassemble(&self) -> String {
        disasm::listing(&self.ops)
    }
}

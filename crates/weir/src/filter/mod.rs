//! Filters: libpcap expressions, compiled by the system libpcap, run by weir.
//!
//! weir never writes a BPF compiler: [`Filter::compile`] hands the expression to
//! libpcap's own `pcap_compile` (optimizer on, netmask unknown, on a
//! `pcap_open_dead` handle of the source's link type and snap length). The
//! resulting classic BPF program, or one given directly to
//! [`Filter::from_program`], is validated and decoded once into a compact form,
//! and [`Filter::run`] runs that form on each packet with the engine the filter
//! was built for ([`FilterEngine`]): on x86-64, machine code compiled from it
//! (the JIT, the default), elsewhere, or when asked, the interpreter.
//!
//! Contract: for every program `pcap_compile` produces and every packet, `run`
//! returns exactly what libpcap 1.10.3's `pcap_offline_filter` engine
//! (`bpf_filter`) returns: 0 to reject, otherwise the number of bytes to keep.
//! [`Filter::run_batch`] gives each packet of a batch exactly `run`'s answer,
//! in one call (the JIT's batch entry pays the call once for the batch).
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
//! socket filter they work. Where every packet arrived on one known interface
//! (AF_XDP, XDP), [`Filter::bind`] gives them that interface's values
//! (`link.rs`).
//!
//! The JIT gives exactly the interpreter's answers, choices above included; the
//! interpreter stays the reference it is tested against, and the engine of
//! other architectures. When the JIT's executable mapping cannot be made, the
//! filter runs on the interpreter and [`Filter::jit_unavailable`] says why.
//! AF_PACKET sources attach [`Filter::program`] to the kernel socket instead;
//! AF_XDP runs it translated to eBPF in its XDP program (`ebpf.rs`), so what
//! it rejects goes on to the host's stack.

mod batch;
#[cfg(test)]
mod disasm;
mod ebpf;
mod interp;
#[cfg(target_arch = "x86_64")]
mod jit;
pub mod libpcap;
mod link;
#[cfg(any(test, feature = "oracle"))]
pub mod oracle;
mod program;
mod switch;
#[cfg(test)]
mod tests;

use std::sync::Arc;

pub(crate) use crate::sys::bpf::EbpfInsn;
pub use batch::BatchInput;
pub(crate) use ebpf::{asm, helper, Reg, BLOCK_STACK, CTX, XDP_MD_RX_QUEUE};
pub use libpcap::BpfInsn;
pub use link::LinkMeta;
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
    runner: Runner,
}

/// What runs a filter's program on each packet.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum FilterEngine {
    /// Machine code compiled from the program (x86-64 only): several times
    /// faster than interpreting it. The default.
    #[default]
    Jit,
    /// weir's interpreter, the reference the JIT is held to.
    Interp,
}

impl FilterEngine {
    /// The engine's name, as `--filter-engine` takes it.
    pub fn name(self) -> &'static str {
        match self {
            FilterEngine::Jit => "jit",
            FilterEngine::Interp => "interp",
        }
    }
}

impl std::fmt::Display for FilterEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for FilterEngine {
    type Err = ParseFilterEngineError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "jit" => Ok(FilterEngine::Jit),
            "interp" => Ok(FilterEngine::Interp),
            other => Err(ParseFilterEngineError { given: other.to_owned() }),
        }
    }
}

/// A name that is not a [`FilterEngine`]'s (`jit` or `interp`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown filter engine {given:?} (jit or interp)")]
pub struct ParseFilterEngineError {
    given: String,
}

impl ParseFilterEngineError {
    /// The name as given.
    pub fn given(&self) -> &str {
        &self.given
    }
}

/// The engine a filter runs on: the interpreter (with why, when the JIT was
/// asked for and could not be had), or the compiled code.
#[derive(Clone, Debug)]
enum Runner {
    Interp {
        jit_unavailable: Option<Arc<str>>,
    },
    #[cfg(target_arch = "x86_64")]
    Jit(jit::Jit),
}

impl Runner {
    fn new(ops: &[Op], engine: FilterEngine) -> Runner {
        match engine {
            FilterEngine::Interp => Runner::Interp { jit_unavailable: None },
            #[cfg(target_arch = "x86_64")]
            FilterEngine::Jit => match jit::Jit::compile(ops) {
                Ok(jit) => Runner::Jit(jit),
                Err(why) => Runner::Interp { jit_unavailable: Some(why.into()) },
            },
            #[cfg(not(target_arch = "x86_64"))]
            FilterEngine::Jit => {
                let _ = ops;
                Runner::Interp { jit_unavailable: Some("weir's filter JIT emits x86-64 code only".into()) }
            }
        }
    }
}

/// Why a filter could not be built.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
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
        let insns = lib
            .compile(expr, link.dlt(), snaplen, true)
            .map_err(|e| FilterError::Compile { expr: expr.to_owned(), message: e.to_string() })?;
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
        let ops: Arc<[Op]> = program::decode(insns).map_err(|r| FilterError::Invalid { at: r.at, reason: r.reason })?.into();
        let runner = Runner::new(&ops, FilterEngine::default());
        Ok(Filter { insns: insns.into(), ops, expression: None, runner })
    }

    /// The same program on `engine`. Asking for the JIT where it cannot be had
    /// (another architecture, or no executable mapping) gives the interpreter,
    /// and [`jit_unavailable`](Self::jit_unavailable) says why.
    pub fn with_engine(mut self, engine: FilterEngine) -> Filter {
        if engine != self.engine() {
            self.runner = Runner::new(&self.ops, engine);
        }
        self
    }

    /// The engine that runs the program.
    pub fn engine(&self) -> FilterEngine {
        match self.runner {
            Runner::Interp { .. } => FilterEngine::Interp,
            #[cfg(target_arch = "x86_64")]
            Runner::Jit(_) => FilterEngine::Jit,
        }
    }

    /// Whether the program loads Linux ancillary data (`inbound`, `outbound`,
    /// `ifindex`) that it was not [bound](Self::bind) to: only a kernel socket
    /// filter has it. Run anywhere else (a trace, user space) those loads fail
    /// and the program rejects every packet that reaches them, as
    /// `pcap_offline_filter` does, which a user should be told rather than
    /// find out from an empty capture.
    pub fn reads_linux_ancillary(&self) -> bool {
        self.ops.iter().any(|op| matches!(*op, Op::LdAbsW(k) | Op::LdAbsH(k) | Op::LdAbsB(k) if k >= SKF_AD_OFF))
    }

    /// What to tell a user whose filter [reads Linux ancillary
    /// data](Self::reads_linux_ancillary) where no kernel socket filter runs it.
    pub fn ancillary_note(&self, expression: &str) -> Option<String> {
        self.reads_linux_ancillary().then(|| {
            format!(
                "the filter {expression:?} asks the kernel's packet metadata (inbound, outbound, ifindex, or other \
                 ancillary data), which only a kernel socket filter has (afpacket capture; afxdp and xdp captures know \
                 the interface, direction and packet type, nothing else); here it is run without it, so those tests \
                 fail and reject every packet that reaches them, as libpcap's pcap_offline_filter does"
            )
        })
    }

    /// Why the JIT was asked for and the interpreter runs instead, if it was.
    pub fn jit_unavailable(&self) -> Option<&str> {
        match &self.runner {
            Runner::Interp { jit_unavailable } => jit_unavailable.as_deref(),
            #[cfg(target_arch = "x86_64")]
            Runner::Jit(_) => None,
        }
    }

    /// Run on one packet: `data` are the captured bytes, `wire_len` the length on the wire.
    /// Returns libpcap's result: 0 = reject, otherwise the snap length to keep.
    #[inline]
    pub fn run(&self, data: &[u8], wire_len: u32) -> u32 {
        match &self.runner {
            #[cfg(target_arch = "x86_64")]
            Runner::Jit(jit) => jit.run(data, wire_len),
            Runner::Interp { .. } => interp::run(&self.ops, data, wire_len),
        }
    }

    /// Run on every packet of `inputs`, each verdict ([`run`](Self::run)'s)
    /// into the same place of `out`. The JIT does it in one call, so a short
    /// program pays its call, argument loads and return once per batch
    /// instead of once per packet; the interpreter runs them in turn.
    ///
    /// # Panics
    ///
    /// If `out` is shorter than `inputs`.
    #[inline]
    pub fn run_batch(&self, inputs: &[BatchInput<'_>], out: &mut [u32]) {
        assert!(out.len() >= inputs.len(), "run_batch: {} verdicts asked into {} places", inputs.len(), out.len());
        match &self.runner {
            #[cfg(target_arch = "x86_64")]
            Runner::Jit(jit) => jit.run_batch(inputs, out),
            Runner::Interp { .. } => {
                for (input, verdict) in inputs.iter().zip(out.iter_mut()) {
                    *verdict = interp::run(&self.ops, input.data(), input.wire_len());
                }
            }
        }
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

//! The kernel cutoff on AF_PACKET: weir's eBPF socket filter
//! (`ebpf/weir_cutoff_filter.c`) and its flow map, loaded when the source
//! opens and attached to every capturing socket when capture starts.
//!
//! The contract:
//! - A socket holds one filter. With the kernel cutoff this program takes
//!   the place of weir's classic BPF program: it refuses the packets of the
//!   streams installed in its map (counting them there) and keeps every
//!   other packet up to the snaplen, as the classic program without a user
//!   filter does. So it is used only where that classic program would be
//!   exactly `ret #snaplen`: on an Ethernet device that is not loopback,
//!   without a libpcap filter (the engine then gives the stream layer no
//!   handle either: with a filter the kernel cutoff is off, because a filter
//!   may tell apart packets of one stream, which the kernel's counts could
//!   not).
//! - SO_ATTACH_BPF replaces the reject-all program a socket starts with in
//!   one step, as SO_ATTACH_FILTER does, so no packet is seen unfiltered.
//!   A later filter replacement puts a classic program back; the entries then
//!   stay in the map uncounted and every packet comes up, exact as before.

use crate::capture::SourceError;
use crate::source::live::bpf_error;
use crate::source::live::cutoff::{self, FlowMap};
use aya::programs::SocketFilter;
use aya::{Ebpf, EbpfLoader};
use std::os::fd::AsFd;

/// The program's name in the kernel.
const PROGRAM_NAME: &str = "weir_cutoff_filter";

/// The object built by build.rs; aligned because the ELF reader needs it.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/weir_cutoff_filter.o"));

/// The loaded socket filter and its flow map.
pub(crate) struct CutoffFilter {
    ebpf: Ebpf,
    flows: FlowMap,
}

impl CutoffFilter {
    /// Loads the program with a map of `entries` entries, keeping `snaplen`
    /// bytes of the packets it takes.
    pub(crate) fn load(entries: u32, snaplen: u32) -> Result<CutoffFilter, SourceError> {
        let needs = "CAP_BPF (or CAP_SYS_ADMIN)";
        let mut ebpf = EbpfLoader::new()
            .set_max_entries(cutoff::MAP_NAME, entries.max(1))
            .set_global("weir_snaplen", &snaplen, true)
            .load(OBJECT)
            .map_err(|e| bpf_error("loading weir's kernel cutoff socket filter", &e, needs))?;
        let flows = FlowMap::take_from(&mut ebpf)?;
        let prog: &mut SocketFilter = ebpf
            .program_mut(PROGRAM_NAME)
            .ok_or_else(|| SourceError::Invalid(format!("weir's socket filter object has no program {PROGRAM_NAME:?}")))?
            .try_into()
            .map_err(|e| bpf_error("weir's kernel cutoff socket filter", &e, needs))?;
        prog.load().map_err(|e| bpf_error("loading weir's kernel cutoff socket filter", &e, needs))?;
        Ok(CutoffFilter { ebpf, flows })
    }

    /// The flow map.
    pub(crate) fn flows(&self) -> &FlowMap {
        &self.flows
    }

    /// Makes the program `socket`'s filter (SO_ATTACH_BPF), in place of
    /// whatever it had. The socket holds the program from then on.
    pub(crate) fn attach(&mut self, socket: impl AsFd) -> Result<(), SourceError> {
        let prog: &mut SocketFilter = self
            .ebpf
            .program_mut(PROGRAM_NAME)
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| SourceError::Invalid(format!("weir's socket filter object has no program {PROGRAM_NAME:?}")))?;
        prog.attach(socket).map(drop).map_err(|e| bpf_error("attaching weir's kernel cutoff socket filter", &e, "CAP_NET_RAW"))
    }
}

#[cfg(test)]
impl CutoffFilter {
    /// Runs the program once on `frame` (an Ethernet frame) as the kernel
    /// runs it on a packet a socket receives, and returns what it returned
    /// (0: refused, dropped by the cutoff). BPF_PROG_TEST_RUN takes the
    /// Ethernet header off before a socket filter runs, where a packet
    /// socket's filter sees it: so the frame goes in behind a second one.
    pub(crate) fn test_run(&self, frame: &[u8]) -> std::io::Result<u32> {
        let prog: &SocketFilter = self.ebpf.program(PROGRAM_NAME).and_then(|p| p.try_into().ok()).expect("loaded");
        let mut framed = frame[..14].to_vec();
        framed.extend_from_slice(frame);
        crate::sys::bpf::test_run(prog.fd().map_err(|e| std::io::Error::other(e.to_string()))?.as_fd(), &framed, 1, 0, 0)
    }
}

//! `ebpf/weir_xring.c` on an interface: loaded with its ring buffer sized,
//! its store program in slot 1 of `weir_slots`, the captured queues marked,
//! and attached with a bpf_link.
//!
//! The contract:
//! - What is attached already is cleared as for afxdp
//!   (`afxdp::program::clear_the_way`): weir's own stale programs are
//!   replaced, anyone else's is an error unless `replace_foreign`.
//! - Native mode where the driver has it, generic mode otherwise.
//! - The queues are marked before the program is attached, so no packet is
//!   stored for a queue weir does not read.
//! - The program array `weir_slots` empties when its last descriptor closes:
//!   the [`KernelFilter`] holds it (slot 0 its filter, slot 1 the store
//!   program) for the capture's lifetime.
//! - The bpf_link is the only thing that keeps the program on the interface:
//!   when its descriptor closes (on drop, exit or SIGKILL) the kernel
//!   detaches it.

use crate::capture::SourceError;
use crate::source::afxdp::kfilter::{Accept, KernelFilter};
use crate::source::afxdp::program::{attach, clear_the_way, duplicate_fd};
use crate::source::live::bpf_error;
use crate::source::live::cutoff::{self, FlowMap};
use crate::sys::bpf::{map_set, Filtered};
use crate::sys::netlink::XdpMode;
use crate::QueueId;
use aya::maps::{Array, Map, MapData, PerCpuArray, RingBuf};
use aya::programs::xdp::XdpLink;
use aya::programs::Xdp;
use aya::EbpfLoader;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

// The program's name in the kernel: how weir knows a program is its own
// (`afxdp::program` keeps the list of weir's programs).
use crate::source::afxdp::program::XRING_PROGRAM_NAME as PROGRAM_NAME;
const STORE_PROGRAM: &str = "weir_xring_store";
const RING_MAP: &str = "weir_ring";
const QUEUES_MAP: &str = "weir_queues";
const SLOTS_MAP: &str = "weir_slots";
const FILTERED_MAP: &str = "weir_filtered";
const LOST_MAP: &str = "weir_lost";
/// The slot of `weir_slots` that holds the store program.
const STORE_SLOT: u32 = 1;
/// The most bytes of a packet a record keeps (`WEIR_SCRATCH`).
pub(crate) const MAX_SNAPLEN: u32 = 16_384;
/// Bytes of `struct weir_rec`, ahead of a record's packet bytes.
pub(crate) const RECORD_HEAD: usize = 16;
/// XDP_PASS and XDP_DROP, the verdicts after storing.
const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;

/// weir's program, attached. Dropping it detaches it.
pub(crate) struct XringProgram {
    /// Declared first so it is dropped first: the program leaves the
    /// interface before its maps go.
    _link: XdpLink,
    ring: Option<(RingBuf<MapData>, OwnedFd)>,
    filter: Option<KernelFilter>,
    lost: PerCpuArray<MapData, Filtered>,
    flows: FlowMap,
    cutoff: bool,
    mode: XdpMode,
    notes: Vec<String>,
}

/// How the program is set up.
pub(crate) struct Setup<'a> {
    pub(crate) iface: &'a str,
    pub(crate) ifindex: u32,
    pub(crate) queues: &'a [QueueId],
    pub(crate) ring_bytes: u32,
    pub(crate) snaplen: u32,
    /// Drop what was stored instead of passing it to the host.
    pub(crate) take: bool,
    pub(crate) replace_foreign: bool,
    pub(crate) kernel_flows: u32,
}

impl XringProgram {
    pub(crate) fn attach(s: &Setup<'_>) -> Result<XringProgram, SourceError> {
        let iface = s.iface;
        let verdict = if s.take { XDP_DROP } else { XDP_PASS };
        let mut ebpf = EbpfLoader::new()
            .set_max_entries(RING_MAP, s.ring_bytes)
            .set_max_entries(cutoff::MAP_NAME, s.kernel_flows.max(1))
            .set_global("weir_snaplen", &s.snaplen, true)
            .set_global("weir_verdict", &verdict, true)
            .load(OBJECT)
            .map_err(|e| bpf_error(&format!("{iface}: creating the XDP program's ring buffer and maps"), &e, CAPS))?;
        let ring = match ebpf.take_map(RING_MAP) {
            Some(Map::RingBuf(m)) => {
                let fd = duplicate_fd(&m, RING_MAP)?;
                (RingBuf::try_from(Map::RingBuf(m)).map_err(|e| bpf_error("mapping the ring buffer", &e, CAPS))?, fd)
            }
            _ => return Err(missing(RING_MAP)),
        };
        let mut queues: Array<MapData, u32> = match ebpf.take_map(QUEUES_MAP) {
            Some(m) => Array::try_from(m).map_err(|e| bpf_error("the XDP program's queue map", &e, CAPS))?,
            None => return Err(missing(QUEUES_MAP)),
        };
        for q in s.queues {
            queues.set(u32::from(q.0), 1, 0).map_err(|e| bpf_error(&format!("marking queue {} as captured", q.0), &e, CAPS))?;
        }
        let Some(Map::ProgramArray(slots)) = ebpf.take_map(SLOTS_MAP) else { return Err(missing(SLOTS_MAP)) };
        let slots_fd = duplicate_fd(&slots, SLOTS_MAP)?;
        let filtered = ebpf.take_map(FILTERED_MAP).ok_or_else(|| missing(FILTERED_MAP))?;
        let filtered_fd = match &filtered {
            Map::PerCpuArray(d) => duplicate_fd(d, FILTERED_MAP)?,
            _ => return Err(missing(FILTERED_MAP)),
        };
        let filtered = PerCpuArray::try_from(filtered).map_err(|e| bpf_error("the filter's counts", &e, CAPS))?;
        let lost = ebpf.take_map(LOST_MAP).ok_or_else(|| missing(LOST_MAP))?;
        let lost = PerCpuArray::try_from(lost).map_err(|e| bpf_error("the ring's loss counts", &e, CAPS))?;
        let flows = FlowMap::take_from(&mut ebpf)?;
        let store: &mut Xdp = ebpf
            .program_mut(STORE_PROGRAM)
            .ok_or_else(|| missing(STORE_PROGRAM))?
            .try_into()
            .map_err(|e| bpf_error("the store program", &e, CAPS))?;
        store.load().map_err(|e| bpf_error(&format!("{iface}: loading weir's XDP store program"), &e, CAPS))?;
        let store_fd = store.fd().map_err(|e| bpf_error("the store program", &e, CAPS))?;
        let value = u32::try_from(store_fd.as_fd().as_raw_fd()).unwrap_or(u32::MAX).to_ne_bytes();
        map_set(slots.fd().as_fd(), &STORE_SLOT.to_ne_bytes(), Some(&value))
            .map_err(|e| SourceError::Io { what: "putting the store program in its slot".into(), error: e })?;
        let filter = KernelFilter::new(slots, Accept::TailCall(slots_fd, STORE_SLOT), filtered_fd, filtered);
        let prog: &mut Xdp = ebpf
            .program_mut(PROGRAM_NAME)
            .ok_or_else(|| missing(PROGRAM_NAME))?
            .try_into()
            .map_err(|e| bpf_error("weir's XDP program", &e, CAPS))?;
        prog.load().map_err(|e| bpf_error(&format!("{iface}: loading weir's XDP program"), &e, CAPS))?;
        let notes = clear_the_way(iface, s.ifindex, s.replace_foreign)?;
        let (id, mode) = attach(prog, iface, s.ifindex, false)?;
        let link = prog.take_link(id).map_err(|e| bpf_error("weir's XDP link", &e, "CAP_NET_ADMIN"))?;
        Ok(XringProgram { _link: link, ring: Some(ring), filter: Some(filter), lost, flows, cutoff: s.kernel_flows > 0, mode, notes })
    }

    pub(crate) fn notes(&self) -> &[String] {
        &self.notes
    }

    pub(crate) fn mode(&self) -> XdpMode {
        self.mode
    }

    /// The ring buffer and a descriptor of its map, for the capture unit to
    /// read and wait on (once).
    pub(crate) fn take_ring(&mut self) -> Option<(RingBuf<MapData>, OwnedFd)> {
        self.ring.take()
    }

    /// The filter's slot, for the capture to install its filter in (once).
    pub(crate) fn take_filter(&mut self) -> Option<KernelFilter> {
        self.filter.take()
    }

    /// Packets and bytes of `queue` the ring had no room for, so far.
    pub(crate) fn lost(&self, queue: u16) -> std::io::Result<Filtered> {
        crate::source::afxdp::kfilter::sum_per_cpu(&self.lost, queue)
    }

    /// The kernel cutoff's flow map, if it was asked for.
    pub(crate) fn flows(&self) -> Option<&FlowMap> {
        self.cutoff.then_some(&self.flows)
    }
}

/// The privileges loading and attaching need.
const CAPS: &str = "CAP_BPF and CAP_NET_ADMIN (or CAP_SYS_ADMIN)";

/// The object built by build.rs; aligned because the ELF reader needs it.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/weir_xring.o"));

fn missing(what: &str) -> SourceError {
    SourceError::Invalid(format!("weir's XDP object has no {what:?}: ebpf/weir_xring.c and the loader disagree"))
}

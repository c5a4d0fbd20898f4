//! weir's XDP program on an interface: loaded from the object that clang built
//! from `ebpf/weir_xdp.c`, attached with a bpf_link, and its XSKMAP filled with
//! the capture sockets, one per queue.
//!
//! The contract:
//! - One program per interface, never stacked: what is attached already is
//!   looked at first, in every mode.
//! - A program named `weir_xdp` (or `weir_fwd`, the in-kernel forwarder's) is
//!   weir's, left by a run that ended without detaching it (one that attached
//!   by netlink, or `ip link set ... obj`): it is replaced, with a message on
//!   stderr.
//! - Anyone else's program is an error that names it, unless `replace_foreign`.
//! - A program held by a bpf_link cannot be replaced at all: its owner is alive
//!   (for weir's own: another capture on the same interface).
//! - Native (driver) mode where the driver has it, generic mode otherwise.
//! - The program also runs the kernel cutoff (`ebpf/weir_cutoff.h`) on the
//!   captured queues; its flow map is handed to the stream layer.
//! - It tail-calls the capture filter, when one runs in the kernel: its slot
//!   and counts are handed over as a [`KernelFilter`] (`kfilter.rs`).
//! - The bpf_link is the only thing that keeps the program on the interface and
//!   nothing is pinned: when the link's file descriptor closes, on drop, on exit
//!   or on SIGKILL, the kernel detaches the program.

use super::kfilter::{Accept, KernelFilter};
use crate::capture::SourceError;
use crate::source::live::cutoff::{self, FlowMap};
use crate::source::live::{bpf_error, chain, denied, os_error};
use crate::sys::netlink::{self, XdpMode};
use aya::maps::{Map, MapData, PerCpuArray, XskMap};
use aya::programs::xdp::{XdpLink, XdpLinkId};
use aya::programs::{loaded_programs, ProgramFd, Xdp, XdpFlags};
use aya::EbpfLoader;
use std::error::Error;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// The program's name in the kernel: how weir knows a program is its own.
pub(crate) const PROGRAM_NAME: &str = "weir_xdp";
/// Every XDP program weir attaches (afxdp and xdp capture, and `weir forward --backend xdp`):
/// one of these left on an interface is weir's to replace.
const OWN_PROGRAMS: &[&str] = &[PROGRAM_NAME, FORWARD_PROGRAM_NAME, XRING_PROGRAM_NAME];
/// The `xdp:` capture's program (`ebpf/weir_xring.c`).
pub(crate) const XRING_PROGRAM_NAME: &str = "weir_xring";
/// The in-kernel forwarder's program (`ebpf/weir_fwd.c`).
pub(crate) const FORWARD_PROGRAM_NAME: &str = "weir_fwd";
/// The XSKMAP: queue index → socket.
const MAP_NAME: &str = "weir_xsks";
/// The program array holding the translated filter.
const FILTER_MAP: &str = "weir_filter";
/// What the translated filter passed to the stack, per queue.
const FILTERED_MAP: &str = "weir_filtered";

/// The object built by build.rs; aligned because the ELF reader needs it.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/weir_xdp.o"));

/// weir's program, attached. Dropping it detaches it.
pub(crate) struct XdpProgram {
    /// Declared first so it is dropped first: the program leaves the interface
    /// before its map goes.
    _link: XdpLink,
    xsks: XskMap<MapData>,
    /// The filter's slot in the program, taken by the capture once.
    filter: Option<KernelFilter>,
    /// The kernel cutoff's flow map: the program refers to it, so it is
    /// loaded (with one entry, never installed into) also when not asked for.
    flows: FlowMap,
    /// Whether the kernel cutoff was asked for.
    cutoff: bool,
    mode: XdpMode,
    /// Programs replaced to make room, for the user to hear about.
    notes: Vec<String>,
}

impl XdpProgram {
    /// Load the program and attach it to `iface` (index `ifindex`, in the calling
    /// thread's namespace), after clearing the way as the module says. With
    /// `native_only`, generic mode is not an option (zero-copy needs native).
    /// With `kernel_flows` above 0 the program's flow map has that many
    /// entries and is kept for the stream layer (the kernel cutoff); with 0
    /// it has one, never installed into, and the program drops nothing.
    pub(crate) fn attach(
        iface: &str,
        ifindex: u32,
        replace_foreign: bool,
        native_only: bool,
        kernel_flows: u32,
    ) -> Result<XdpProgram, SourceError> {
        let mut ebpf = EbpfLoader::new().set_max_entries(cutoff::MAP_NAME, kernel_flows.max(1)).load(OBJECT).map_err(|e| {
            bpf_error(&format!("{iface}: creating the XDP program's socket map"), &e, "CAP_BPF and CAP_NET_ADMIN (or CAP_SYS_ADMIN)")
        })?;
        let map = ebpf.take_map(MAP_NAME).ok_or_else(|| missing(MAP_NAME))?;
        let xsks_fd = duplicate(&map, MAP_NAME)?;
        let xsks = XskMap::try_from(map).map_err(|e| bpf_error("the XDP program's socket map", &e, "CAP_BPF"))?;
        let filter = {
            let Map::ProgramArray(slot) = ebpf.take_map(FILTER_MAP).ok_or_else(|| missing(FILTER_MAP))? else {
                return Err(missing("program array weir_filter"));
            };
            let counts = ebpf.take_map(FILTERED_MAP).ok_or_else(|| missing(FILTERED_MAP))?;
            let counts_fd = duplicate(&counts, FILTERED_MAP)?;
            let counts = PerCpuArray::try_from(counts).map_err(|e| bpf_error("the XDP program's filter counts", &e, "CAP_BPF"))?;
            KernelFilter::new(slot, Accept::Redirect(xsks_fd), counts_fd, counts)
        };
        let flows = FlowMap::take_from(&mut ebpf)?;
        let prog: &mut Xdp = ebpf
            .program_mut(PROGRAM_NAME)
            .ok_or_else(|| missing(PROGRAM_NAME))?
            .try_into()
            .map_err(|e| bpf_error("weir's XDP program", &e, "CAP_BPF"))?;
        prog.load()
            .map_err(|e| bpf_error(&format!("{iface}: loading weir's XDP program"), &e, "CAP_BPF and CAP_NET_ADMIN (or CAP_SYS_ADMIN)"))?;
        let notes = clear_the_way(iface, ifindex, replace_foreign)?;
        let (id, mode) = attach(prog, iface, ifindex, native_only)?;
        let link = prog.take_link(id).map_err(|e| bpf_error("weir's XDP link", &e, "CAP_NET_ADMIN"))?;
        Ok(XdpProgram { _link: link, xsks, filter: Some(filter), flows, cutoff: kernel_flows > 0, mode, notes })
    }

    /// What attaching replaced, if anything.
    pub(crate) fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The filter's slot, for the capture to install its filter in (once).
    pub(crate) fn take_filter(&mut self) -> Option<KernelFilter> {
        self.filter.take()
    }

    /// The kernel cutoff's flow map, if it was asked for.
    pub(crate) fn flows(&self) -> Option<&FlowMap> {
        self.cutoff.then_some(&self.flows)
    }

    /// The mode the program runs in.
    pub(crate) fn mode(&self) -> XdpMode {
        self.mode
    }

    /// Steer `queue`'s packets to `socket`, which must be bound to that queue.
    pub(crate) fn register(&mut self, queue: u16, socket: BorrowedFd<'_>) -> Result<(), SourceError> {
        self.xsks
            .set(u32::from(queue), socket, 0)
            .map_err(|e| bpf_error(&format!("registering the socket of queue {queue}"), &e, "CAP_BPF"))
    }
}

/// Attach `prog` to `ifindex` in native mode, or in generic mode where the
/// driver has none and `native_only` is not asked.
pub(crate) fn attach(prog: &mut Xdp, iface: &str, ifindex: u32, native_only: bool) -> Result<(XdpLinkId, XdpMode), SourceError> {
    let attach_in = |prog: &mut Xdp, mode: XdpMode| {
        let flags = if mode == XdpMode::Drv { XdpFlags::DRV_MODE } else { XdpFlags::SKB_MODE };
        prog.attach_to_if_index(ifindex, flags)
    };
    let r = match attach_in(prog, XdpMode::Drv) {
        Ok(id) => (id, XdpMode::Drv),
        Err(e) if os_error(&e) == Some(libc::EOPNOTSUPP) && !native_only => {
            let id = attach_in(prog, XdpMode::Skb).map_err(|e| attach_error(iface, &e))?;
            (id, XdpMode::Skb)
        }
        Err(e) if os_error(&e) == Some(libc::EOPNOTSUPP) => {
            return Err(SourceError::Invalid(format!(
                "{iface}: the driver has no native XDP, which zero-copy needs: use zero-copy auto or off"
            )))
        }
        Err(e) => return Err(attach_error(iface, &e)),
    };
    Ok(r)
}

/// Remove what is attached to `ifindex` if it may be replaced, or say why not.
/// Returns a note for each program it replaced.
pub(crate) fn clear_the_way(iface: &str, ifindex: u32, replace_foreign: bool) -> Result<Vec<String>, SourceError> {
    let mut notes = Vec::new();
    let attached = netlink::xdp_programs(ifindex).map_err(|e| denied(format!("{iface}: reading its XDP programs"), e, "CAP_NET_ADMIN"))?;
    for (mode, id) in attached {
        let (name, fd) = program_by_id(id)?;
        let ours = OWN_PROGRAMS.contains(&name.as_str());
        if !ours && !replace_foreign {
            return Err(SourceError::Invalid(format!(
                "{iface} already has an XDP program weir did not load: {name:?} (id {id}, {mode} mode). \
                 Remove it (ip link set dev {iface} xdp off) or let weir replace it (--replace-xdp)"
            )));
        }
        match netlink::detach_xdp(ifindex, mode, fd.as_fd()) {
            Ok(()) if ours => {
                notes.push(format!("{iface}: replaced weir's XDP program (id {id}, {mode} mode) left attached by an earlier run"))
            }
            Ok(()) => notes.push(format!("{iface}: replaced XDP program {name:?} (id {id}, {mode} mode), as asked")),
            Err(e) if e.kind() == io::ErrorKind::ResourceBusy => {
                let owner = if ours { "another weir capture is running on it" } else { "a running program owns it" };
                return Err(SourceError::Invalid(format!(
                    "{iface}: XDP program {name:?} (id {id}, {mode} mode) is held by a bpf_link, so {owner} and it cannot be replaced"
                )));
            }
            Err(e) => return Err(denied(format!("{iface}: removing XDP program {name:?} (id {id})"), e, "CAP_NET_ADMIN")),
        }
    }
    Ok(notes)
}

/// The name of loaded program `id` and a descriptor for it.
fn program_by_id(id: u32) -> Result<(String, ProgramFd), SourceError> {
    let looking = "looking up the XDP program already attached";
    for info in loaded_programs() {
        let info = info.map_err(|e| bpf_error(looking, &e, "CAP_SYS_ADMIN"))?;
        if info.id() == id {
            let name = info.name_as_str().unwrap_or("?").to_string();
            let fd = info.fd().map_err(|e| bpf_error(looking, &e, "CAP_SYS_ADMIN"))?;
            return Ok((name, fd));
        }
    }
    Err(SourceError::Invalid(format!("XDP program id {id} went away while weir looked at it; try again")))
}

/// A descriptor of `map`'s, which outlives the typed map made from it.
fn duplicate(map: &Map, name: &str) -> Result<OwnedFd, SourceError> {
    match map {
        Map::XskMap(d) | Map::PerCpuArray(d) | Map::ProgramArray(d) => duplicate_fd(d, name),
        _ => Err(missing(name)),
    }
}

/// A descriptor of map `name`'s, which outlives the typed map made from it.
pub(crate) fn duplicate_fd(data: &MapData, name: &str) -> Result<OwnedFd, SourceError> {
    data.fd()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| SourceError::Io { what: format!("duplicating the descriptor of map {name}"), error: e })
}

fn missing(what: &str) -> SourceError {
    SourceError::Invalid(format!("weir's XDP object has no {what:?}: ebpf/weir_xdp.c and the loader disagree"))
}

fn attach_error(iface: &str, e: &(dyn Error + 'static)) -> SourceError {
    if os_error(e) == Some(libc::EBUSY) || os_error(e) == Some(libc::EEXIST) {
        return SourceError::Invalid(format!("{iface}: another XDP program was attached while weir was attaching its own: {}", chain(e)));
    }
    bpf_error(&format!("{iface}: attaching weir's XDP program"), e, "CAP_NET_ADMIN")
}

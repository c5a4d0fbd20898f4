//! xdp lanes: forwarding done inside the kernel by weir's XDP program
//! (`ebpf/weir_fwd.c`), one lane per direction over all queues.
//!
//! The program runs the user's filter (translated to eBPF, as the afxdp
//! capture's kernel filter is) and redirects what it accepts to the other
//! interface through a device map: no socket, no copy, no system call per
//! packet, and no weir thread in the packet's way. A lane's thread only
//! reads the program's counters (every [`POLL`]) until it is told to stop,
//! then detaches its program and reports.
//!
//! What this backend cannot do, it refuses at open or start: an application
//! verdict (nothing of weir runs per packet), a filter the kernel cannot run
//! (a backward jump, or the verifier's refusal), and an input whose driver
//! has no native XDP (generic XDP redirects skbs, which the device map's
//! transmit tracepoint never sees, so they could not be counted).
//!
//! A frame the sending device cannot carry (longer than its MTU plus the
//! Ethernet header, 4 bytes more tagged, or shorter than an Ethernet header)
//! is counted in `tx_failed` and dropped by the program, as afpacket and afxdp
//! count it: the limits are the device's MTU through [`longest_frames`], set
//! in the program before it loads, and checked after the filter passed the
//! frame (the filter's accept block tail-calls the program's send, so the
//! check is in one place).
//!
//! Counting (see the program's comment): forwarded and tx_failed come from
//! the kernel's `xdp_devmap_xmit` tracepoint, redirect errors from
//! `xdp_redirect_err`; both are attached while any lane runs. `tx_failed`
//! sums what the program dropped (a frame the device cannot carry, or a
//! redirect refused at once), the redirects that failed after the program,
//! and what the device gave back.
//! `forwarded_bytes` is exact while the device gives nothing back, and an
//! estimate after ([`forwarded_bytes`]): the tracepoints give packets, not bytes.
//! `kernel_drops` stays 0: no ring of weir's is between the device and the
//! program (what the device itself drops is the driver's to count).

use super::{check_interface, Control, Counters, Direction, ForwardOptions, Judge, LaneStats, LaneWork, Opened};
use crate::capture::SourceError;
use crate::filter::{asm, helper, EbpfInsn, Filter, Reg, BLOCK_STACK, CTX};
use crate::source::afxdp::check_host_addresses;
use crate::source::afxdp::program::{clear_the_way, FORWARD_PROGRAM_NAME};
use crate::source::live::{bpf_error, denied, os_error};
use crate::sys::bpf::{load_xdp, map_set};
use crate::sys::packet::Promiscuous;
use crate::tx::longest_frames;
use aya::maps::{Array, DevMap, Map, MapData, PerCpuArray};
use aya::programs::tp_btf::BtfTracePointLink;
use aya::programs::xdp::XdpLink;
use aya::programs::{BtfTracePoint, Xdp, XdpFlags};
use aya::{Btf, EbpfLoader};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::time::Duration;

/// How often a lane reads the program's counters.
const POLL: Duration = Duration::from_millis(10);
/// How long a lane waits, after detaching its program, for the last flush's
/// tracepoint (the interface's poll that ran the program ends within it).
const SETTLE: Duration = Duration::from_millis(20);

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/weir_fwd.o"));
const PROGRAM: &str = FORWARD_PROGRAM_NAME;
/// What the filter's accept block tail-calls: the check and the redirect.
const SEND_PROGRAM: &str = "weir_fwd_send";
const COUNTS: &str = "weir_fwd_counts";
const OUT_MAP: &str = "weir_fwd_out";
/// The program array: the filter in [`FILTER_SLOT`], the send program in [`SEND_SLOT`].
const SLOTS_MAP: &str = "weir_fwd_slots";
const FILTER_SLOT: u32 = 0;
const SEND_SLOT: u32 = 1;
const TAKEN: &str = "weir_fwd_taken";
/// The name the kernel shows for the loaded filter.
const FILTER_NAME: &str = "weir_fwd_filter";

/// `struct weir_fwd_counts`, as words: the index of each field.
mod field {
    pub(super) const RECEIVED: usize = 0;
    pub(super) const RECEIVED_BYTES: usize = 1;
    pub(super) const FILTERED: usize = 2;
    pub(super) const FILTERED_BYTES: usize = 3;
    pub(super) const FAILED: usize = 4;
    pub(super) const FAILED_BYTES: usize = 5;
    pub(super) const FORWARDED: usize = 6;
    pub(super) const TX_FAILED: usize = 7;
    pub(super) const REDIRECT_ERR: usize = 8;
    pub(super) const WORDS: usize = 9;
}
type Counts = [u64; field::WORDS];

const XDP_DROP: u32 = 1;
/// `struct xdp_md`'s `ingress_ifindex`.
const XDP_MD_INGRESS_IFINDEX: i16 = 12;

/// What stays loaded while any lane runs: the tracepoints that count sending,
/// the maps the program and the filter use, the promiscuous memberships.
struct Shared {
    _tracepoints: Vec<BtfTracePointLink>,
    counts: PerCpuArray<MapData, Counts>,
    taken: Array<MapData, u64>,
    limit: u64,
    /// The program array of the filter and the send program: its entries
    /// live while a descriptor of it is open.
    _slots: MapData,
    _promiscuous: Vec<Promiscuous>,
}

impl Shared {
    fn read(&self, dir: u32) -> Result<Counts, SourceError> {
        let per_cpu = self.counts.get(&dir, 0).map_err(|e| bpf_error("reading the forwarder's counters", &e, "CAP_BPF"))?;
        Ok(per_cpu.iter().fold([0; field::WORDS], |mut t, c| {
            for (t, c) in t.iter_mut().zip(c) {
                *t += c;
            }
            t
        }))
    }

    fn limit_reached(&self) -> bool {
        self.limit > 0 && self.taken.get(&0, 0).is_ok_and(|t| t >= self.limit)
    }
}

/// Load the program, install the filter, attach to IN (and OUT when
/// bidirectional), in the calling thread's namespace.
pub(super) fn open(opts: &ForwardOptions, filter: Option<&Filter>) -> Result<Opened, SourceError> {
    // XDP sees frames of any length the device gives it; the device refuses
    // to attach where its MTU is too large for native XDP.
    let (in_index, in_mtu) = check_interface(&opts.input, usize::MAX, "")?;
    let (out_index, out_mtu) = check_interface(&opts.output, usize::MAX, "")?;
    // The longest frames the program sends to each, as the other backends check them.
    let limits = |mtu: u32| {
        let (untagged, tagged) = longest_frames(mtu);
        (untagged as u64, tagged as u64)
    };
    let (out_longest, out_longest_tagged) = limits(out_mtu);
    let (in_longest, in_longest_tagged) = limits(in_mtu);
    check_host_addresses(&opts.input, opts.take_host_traffic)?;
    if opts.bidirectional {
        check_host_addresses(&opts.output, opts.take_host_traffic)?;
    }
    let limit = opts.packet_limit.unwrap_or(0);
    let needs = "CAP_BPF and CAP_NET_ADMIN (or CAP_SYS_ADMIN)";
    let mut ebpf = EbpfLoader::new()
        .set_global("weir_in_ifindex", &in_index, true)
        .set_global("weir_out_ifindex", &out_index, true)
        .set_global("weir_limit", &limit, true)
        .set_global("weir_out_longest", &out_longest, true)
        .set_global("weir_out_longest_tagged", &out_longest_tagged, true)
        .set_global("weir_in_longest", &in_longest, true)
        .set_global("weir_in_longest_tagged", &in_longest_tagged, true)
        .load(OBJECT)
        .map_err(|e| bpf_error("loading weir's forwarding program", &e, needs))?;
    let take = |ebpf: &mut aya::Ebpf, name: &str| {
        ebpf.take_map(name).ok_or_else(|| SourceError::Invalid(format!("ebpf/weir_fwd.c has no map {name:?} (a bug in weir)")))
    };
    let dup = |m: &MapData, what: &str| {
        m.fd()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|error| SourceError::Io { what: format!("duplicating the descriptor of {what}"), error })
    };
    let counts = take(&mut ebpf, COUNTS)?;
    let Map::PerCpuArray(counts_data) = &counts else {
        return Err(SourceError::Invalid(format!("{COUNTS} is not a per-CPU array (a bug in weir)")));
    };
    let counts_fd = dup(counts_data, COUNTS)?;
    let counts = PerCpuArray::try_from(counts).map_err(|e| bpf_error("the forwarder's counters", &e, "CAP_BPF"))?;
    let taken = Array::try_from(take(&mut ebpf, TAKEN)?).map_err(|e| bpf_error("the forwarder's packet count", &e, "CAP_BPF"))?;
    let Map::ProgramArray(slots) = take(&mut ebpf, SLOTS_MAP)? else {
        return Err(SourceError::Invalid(format!("{SLOTS_MAP} is not a program array (a bug in weir)")));
    };
    let devmap = take(&mut ebpf, OUT_MAP)?;
    // aya sizes the map's values for the kernel (an index, and a program
    // where the kernel takes one), so it writes them too.
    let mut devmap = DevMap::try_from(devmap).map_err(|e| bpf_error("the forwarder's device map", &e, "CAP_BPF"))?;
    let mut set_out = |dir: u32, ifindex: u32, iface: &str| {
        devmap
            .set(dir, ifindex, None, 0)
            .map_err(|e| bpf_error(&format!("{iface}: putting it in the forwarder's device map"), &e, "CAP_BPF"))
    };
    set_out(0, out_index, &opts.output)?;
    if opts.bidirectional {
        set_out(1, in_index, &opts.input)?;
    }
    // The send program goes in its slot before anything can tail-call it.
    let send: &mut Xdp = ebpf
        .program_mut(SEND_PROGRAM)
        .ok_or_else(|| SourceError::Invalid(format!("ebpf/weir_fwd.c has no program {SEND_PROGRAM} (a bug in weir)")))?
        .try_into()
        .map_err(|e| bpf_error(SEND_PROGRAM, &e, "CAP_BPF"))?;
    send.load().map_err(|e| bpf_error("loading weir's forwarding program (its send)", &e, needs))?;
    let send_fd = send.fd().map_err(|e| bpf_error(SEND_PROGRAM, &e, "CAP_BPF"))?;
    let value = u32::try_from(send_fd.as_fd().as_raw_fd()).unwrap_or(u32::MAX).to_ne_bytes();
    // The array takes its own reference to the program.
    map_set(slots.fd().as_fd(), &SEND_SLOT.to_ne_bytes(), Some(&value))
        .map_err(|e| denied("installing the forwarder's send program".into(), e, "CAP_BPF"))?;
    if let Some(filter) = filter {
        let blocks = Blocks { slots: slots.fd().as_fd().as_raw_fd(), counts: counts_fd.as_raw_fd(), in_index };
        let program = filter.to_xdp(&blocks.accept(), &blocks.reject()).map_err(|why| {
            SourceError::Invalid(format!(
                "the filter cannot run in the kernel, which --backend xdp needs: {}; use afxdp or afpacket",
                why.0
            ))
        })?;
        let fd = load_xdp(FILTER_NAME, &program).map_err(|e| {
            SourceError::Invalid(format!(
                "the kernel refused the filter's eBPF form, which --backend xdp needs: {e}; use afxdp or afpacket"
            ))
        })?;
        let value = u32::try_from(fd.as_raw_fd()).unwrap_or(u32::MAX).to_ne_bytes();
        // The array takes its own reference to the program.
        map_set(slots.fd().as_fd(), &FILTER_SLOT.to_ne_bytes(), Some(&value))
            .map_err(|e| denied("installing the filter".into(), e, "CAP_BPF"))?;
    }

    let btf = Btf::from_sys_fs().map_err(|e| {
        SourceError::Invalid(format!(
            "--backend xdp counts what it sends with the kernel's XDP tracepoints, which need the kernel's BTF \
             (/sys/kernel/btf/vmlinux): {e}"
        ))
    })?;
    let mut tracepoints = Vec::new();
    for (name, point) in [("weir_fwd_xmit", "xdp_devmap_xmit"), ("weir_fwd_redirect_err", "xdp_redirect_err")] {
        let prog: &mut BtfTracePoint = ebpf
            .program_mut(name)
            .ok_or_else(|| SourceError::Invalid(format!("ebpf/weir_fwd.c has no program {name} (a bug in weir)")))?
            .try_into()
            .map_err(|e| bpf_error(name, &e, "CAP_BPF"))?;
        prog.load(point, &btf).map_err(|e| bpf_error(&format!("loading the {point} tracepoint's counter"), &e, needs))?;
        let id = prog.attach().map_err(|e| bpf_error(&format!("attaching to the {point} tracepoint"), &e, needs))?;
        tracepoints.push(prog.take_link(id).map_err(|e| bpf_error(point, &e, "CAP_BPF"))?);
    }

    let prog: &mut Xdp = ebpf
        .program_mut(PROGRAM)
        .ok_or_else(|| SourceError::Invalid(format!("ebpf/weir_fwd.c has no program {PROGRAM} (a bug in weir)")))?
        .try_into()
        .map_err(|e| bpf_error(PROGRAM, &e, "CAP_BPF"))?;
    prog.load().map_err(|e| bpf_error("loading weir's forwarding program", &e, needs))?;
    let mut notes = Vec::new();
    let receivers: Vec<(Direction, &str, u32, &str)> = if opts.bidirectional {
        vec![(Direction::InToOut, &opts.input, in_index, &opts.output), (Direction::OutToIn, &opts.output, out_index, &opts.input)]
    } else {
        vec![(Direction::InToOut, &opts.input, in_index, &opts.output)]
    };
    let mut links = Vec::new();
    for (dir, iface, ifindex, to) in &receivers {
        notes.extend(clear_the_way(iface, *ifindex, opts.replace_foreign)?);
        let id = prog.attach_to_if_index(*ifindex, XdpFlags::DRV_MODE).map_err(|e| match os_error(&e) {
            Some(libc::EOPNOTSUPP) => SourceError::Invalid(format!(
                "{iface}: its driver has no native XDP, which --backend xdp needs (generic XDP's redirects cannot be \
                 counted); use afxdp or afpacket"
            )),
            _ => bpf_error(&format!("{iface}: attaching weir's forwarding program"), &e, "CAP_NET_ADMIN"),
        })?;
        let link = prog.take_link(id).map_err(|e| bpf_error("the forwarding program's link", &e, "CAP_NET_ADMIN"))?;
        links.push((*dir, format!("{iface} -> {to}"), link));
    }
    notes.push(format!(
        "forwarding in the kernel: every packet of {} is judged and sent by XDP, none reaches weir; a veth's peer must \
         have an XDP program or GRO on (ethtool -K PEER gro on) to take the frames, else they are counted in tx_failed",
        receivers.iter().map(|r| r.1).collect::<Vec<_>>().join(" and ")
    ));
    let mut promiscuous = Vec::new();
    if opts.promisc {
        for (_, _, ifindex, _) in &receivers {
            promiscuous
                .push(crate::sys::packet::promiscuous(*ifindex).map_err(|e| denied("entering promiscuous mode".into(), e, "CAP_NET_RAW"))?);
        }
    }
    let shared = Arc::new(Shared { _tracepoints: tracepoints, counts, taken, limit, _slots: slots, _promiscuous: promiscuous });
    let lanes = links
        .into_iter()
        .map(|(dir, name, link)| {
            let lane = Lane { name, dir: u32::from(dir == Direction::OutToIn), link: Some(link), shared: Arc::clone(&shared) };
            (dir, 0, Box::new(lane) as Box<dyn LaneWork>)
        })
        .collect();
    Ok((lanes, notes))
}

/// The filter's accept and reject blocks (see [`Filter::to_xdp`]).
struct Blocks {
    /// The program array whose [`SEND_SLOT`] the accept block tail-calls.
    slots: i32,
    counts: i32,
    in_index: u32,
}

impl Blocks {
    /// r2 = the packet's direction, also stored at `key_at`.
    fn direction(&self, out: &mut Vec<EbpfInsn>, key_at: i16) {
        out.push(asm::mov32_imm(Reg::R2, 0));
        out.push(asm::ldx_w(Reg::R1, CTX, XDP_MD_INGRESS_IFINDEX));
        out.push(asm::jeq_imm(Reg::R1, self.in_index as i32, 1));
        out.push(asm::mov32_imm(Reg::R2, 1));
        out.push(asm::stx_w(Reg::Fp, key_at, Reg::R2));
    }

    /// Add 1 to counter `packets` and r9 to the next word, for the direction
    /// stored at `key_at` (both directions have an entry).
    fn count(&self, out: &mut Vec<EbpfInsn>, key_at: i16, packets: usize) {
        out.extend(asm::count(self.counts, key_at, (packets * 8) as i16));
    }

    /// Tail-call the program's send (the MTU check and the redirect, as
    /// without a filter); a tail call does not return, so what follows runs
    /// only if it failed (the slot were empty): count the packet as failed
    /// and drop it.
    fn accept(&self) -> Vec<EbpfInsn> {
        let key_at = BLOCK_STACK - 4;
        let mut out = Vec::with_capacity(32);
        out.push(asm::mov64(Reg::R1, CTX));
        out.extend(asm::ld_map_fd(Reg::R2, self.slots));
        out.push(asm::mov32_imm(Reg::R3, SEND_SLOT));
        out.push(asm::call(helper::TAIL_CALL));
        out.push(asm::mov64(Reg::R1, CTX));
        out.push(asm::call(helper::XDP_GET_BUFF_LEN));
        out.push(asm::mov64(Reg::R9, Reg::R0));
        self.direction(&mut out, key_at);
        self.count(&mut out, key_at, field::FAILED);
        out.push(asm::mov32_imm(Reg::R0, XDP_DROP));
        out.push(asm::exit());
        out
    }

    /// Count the packet as filtered, and drop it.
    fn reject(&self) -> Vec<EbpfInsn> {
        let key_at = BLOCK_STACK - 4;
        let mut out = Vec::with_capacity(32);
        out.push(asm::mov64(Reg::R1, CTX));
        out.push(asm::call(helper::XDP_GET_BUFF_LEN));
        out.push(asm::mov64(Reg::R9, Reg::R0));
        self.direction(&mut out, key_at);
        self.count(&mut out, key_at, field::FILTERED);
        out.push(asm::mov32_imm(Reg::R0, XDP_DROP));
        out.push(asm::exit());
        out
    }
}

/// The bytes of the frames the device took. The program knows the bytes it
/// redirected; the tracepoints say how many of those frames were sent and
/// how many given back, not their lengths, so where some were given back the
/// redirected bytes are shared out in proportion (exact when none were).
fn forwarded_bytes(c: &Counts) -> u64 {
    let redirected = c[field::RECEIVED_BYTES].saturating_sub(c[field::FILTERED_BYTES] + c[field::FAILED_BYTES]);
    let lost = c[field::TX_FAILED] + c[field::REDIRECT_ERR];
    match c[field::FORWARDED] + lost {
        0 => 0,
        _ if lost == 0 => redirected,
        handed => (u128::from(redirected) * u128::from(c[field::FORWARDED]) / u128::from(handed)) as u64,
    }
}

/// One direction: its program's attachment, and the counters it reports.
struct Lane {
    name: String,
    dir: u32,
    /// Detached (dropped) when the lane stops.
    link: Option<XdpLink>,
    shared: Arc<Shared>,
}

impl Lane {
    fn stats(&self) -> Result<LaneStats, SourceError> {
        let c = self.shared.read(self.dir)?;
        let failed = c[field::FAILED] + c[field::TX_FAILED] + c[field::REDIRECT_ERR];
        let received = c[field::RECEIVED];
        Ok(LaneStats {
            lane: self.name.clone(),
            received,
            received_bytes: c[field::RECEIVED_BYTES],
            forwarded: c[field::FORWARDED],
            forwarded_bytes: forwarded_bytes(&c),
            filtered: c[field::FILTERED],
            dropped: 0,
            tx_failed: failed,
            // Per-CPU words are read one CPU at a time while packets flow:
            // a flush may be seen before the packets it sent.
            in_flight: received.saturating_sub(c[field::FORWARDED] + c[field::FILTERED] + failed),
            kernel_drops: 0,
        })
    }
}

impl LaneWork for Lane {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn run(
        mut self: Box<Self>,
        _judge: &mut dyn Judge,
        _filter: Option<&Filter>,
        ctl: &Control,
        counters: &Counters,
    ) -> Result<LaneStats, SourceError> {
        let result = loop {
            match self.stats() {
                Ok(s) => counters.publish(&s),
                Err(e) => break Err(e),
            }
            if self.shared.limit_reached() {
                // Relaxed: the stop flag publishes nothing (as in Control).
                ctl.stop.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            if ctl.stopping() {
                break Ok(());
            }
            std::thread::sleep(POLL);
        };
        drop(self.link.take());
        std::thread::sleep(SETTLE);
        let last = self.stats();
        if let Ok(s) = &last {
            counters.publish(s);
        }
        result.and(last)
    }
}

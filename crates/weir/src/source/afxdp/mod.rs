//! AF_XDP live capture: one XSK socket per RX queue, over a UMEM that *is* the
//! queue's pool (WireCAP's ring-buffer pool on stock Linux).
//!
//! The contract:
//! - [`open`] works in the network namespace the options name: it checks the
//!   interface, decides the queues (every RX queue when none are named), creates
//!   the sockets, holds the interface promiscuous if asked (through a membership
//!   that the kernel drops when weir ends, however it ends), and loads and
//!   attaches weir's XDP program (`ebpf/weir_xdp.c`) as
//!   `program.rs` describes: a stale weir program is replaced, anyone else's is
//!   an error unless `replace_foreign`, nothing is ever stacked.
//! - [`Source::into_units`] gives each queue a UMEM of the pool's R×M frames
//!   (more than the RX ring holds, or the pool could never absorb a burst the
//!   ring cannot), binds its socket (zero-copy where the options and the driver
//!   allow, copy mode otherwise), registers it in the program's XSKMAP, and
//!   returns one capture unit per queue. A packet's cell points into the UMEM
//!   frame the kernel wrote: no copy in weir. Frame accounting is in `xsk.rs`.
//! - The program steers a packet to the socket of its RX queue, or lets it pass
//!   up the stack when that queue is not captured.
//! - The host's stack: a redirected packet never reaches it. An interface
//!   with an IP address (but IPv6 link-local ones) is refused unless
//!   `take_host_traffic`, since capturing it would take the host's own
//!   sessions away, and the start notes say what is taken.
//! - The user's filter runs in the XDP program, translated to eBPF
//!   (`kfilter.rs`): what it rejects goes on up the stack and is counted as
//!   filtered. It runs again in user space on the capture thread (a filter
//!   replaced meanwhile judges what waits on the RX ring); packets it rejects
//!   there are counted as filtered and their frames reused at once. A filter
//!   that cannot run in the kernel runs in user space only, and the notes say
//!   that the host then loses every packet of the captured queues.
//! - Kernel drops are read from XDP_STATISTICS and counted as capture or
//!   delivery drops (see `unit.rs`); nothing is lost uncounted.
//! - Detach is the kernel's: the program hangs on a bpf_link whose only
//!   descriptor weir holds, so it leaves the interface when the last unit (or
//!   the unopened source) is dropped, when weir exits, and when it is killed.
//! - Under offloading or rebalancing the sockets share one UMEM, each queue's
//!   share of it R×M frames and its fill ring fed only from its share.
//!   Rebalancing's capture threads steer buckets between queues over it (see
//!   `rebalance.rs`).
//! - Live sources cannot be paced; `snaplen` is cut to what fits a frame after
//!   the kernel's headroom.

pub(crate) mod kfilter;
pub(crate) mod program;
mod rebalance;
mod unit;
pub(crate) mod xsk;

use crate::capture::{CaptureUnit, Progress, SourceError, SourceInfo};
use crate::clock::{Timestamps, TscClock};
use crate::filter::Filter;
use crate::memory::{Budget, Bytes, Plan};
use crate::source::live;
use crate::source::live::denied;
use crate::source::{ifindex, AfXdpOptions, CaptureOptions, LiveOptions, QueueRange, Source, ZeroCopy};
use crate::sys::netlink::{self, XdpMode};
use crate::sys::xsk::{XskFd, XDP_PACKET_HEADROOM};
use crate::sys::{netdev, packet};
use crate::{LinkType, QueueId};
use kfilter::KernelFilter;
use program::XdpProgram;
use std::sync::Arc;
use unit::{Attachment, XskUnit};
use xsk::{BindTo, UmemOf, Xsk};

/// Open `iface` (queues `queues`, or every RX queue) for capture.
pub(crate) fn open(
    iface: &str,
    queues: Option<QueueRange>,
    opts: &LiveOptions,
    name: String,
    budget: &Budget,
) -> Result<Box<dyn Source>, SourceError> {
    check_options(&opts.afxdp)?;
    check_timestamps(opts.timestamps)?;
    opts.in_netns(|| {
        let index = ifindex(iface)?;
        check_host_addresses(iface, opts.afxdp.take_host_traffic)?;
        let queues = live::rx_queue_range(iface, queues)?;
        budget.check(queues.len(), memory(&opts.afxdp, budget.pool_cells(), queues.len(), opts.kernel_flows))?;
        let sockets = queues
            .iter()
            .map(|q| XskFd::new().map(|fd| (QueueId(q), fd)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| denied(format!("{iface}: creating an AF_XDP socket"), e, "CAP_NET_RAW"))?;
        let promiscuous = match opts.promisc {
            true => Some(packet::promiscuous(index).map_err(|e| denied(format!("{iface}: entering promiscuous mode"), e, "CAP_NET_RAW"))?),
            false => None,
        };
        let native_only = opts.afxdp.zero_copy == ZeroCopy::On;
        let mut program = XdpProgram::attach(iface, index, opts.afxdp.replace_foreign, native_only, opts.kernel_flows)?;
        let kernel_filter = program.take_filter().map(Arc::new);
        let snaplen = opts.snaplen.min((opts.afxdp.frame_size - XDP_PACKET_HEADROOM) as u32);
        let info = SourceInfo {
            name,
            link_type: LinkType::ETHERNET,
            snaplen,
            queues: sockets.iter().map(|(q, _)| *q).collect(),
            iface: Some(iface.to_string()),
            trace: None,
            notes: program.notes().iter().cloned().chain(copy_mode_note(iface, index, opts.afxdp.zero_copy, program.mode())).collect(),
            link: Some(live::link_meta(iface, index)?),
        };
        Ok(Box::new(AfXdpSource {
            info,
            iface: iface.to_string(),
            ifindex: index,
            sockets,
            program,
            kernel_filter,
            promiscuous,
            opts: opts.afxdp.clone(),
            timestamps: opts.timestamps,
        }) as Box<dyn Source>)
    })
}

/// What `queues` sockets take: a UMEM each of a frame per pool cell (one arena
/// of them all for a buddy group; the same bytes), pinned by the kernel, and
/// each socket's rings.
fn memory(o: &AfXdpOptions, pool_cells: u64, queues: usize, kernel_flows: u32) -> Plan {
    let n = queues as u64;
    let mut plan = Plan::new();
    plan.add(
        format!("AF_XDP UMEM: {pool_cells} frames of {} per queue (a frame per pool cell), x {queues} queues", Bytes(o.frame_size as u64)),
        pool_cells.saturating_mul(o.frame_size as u64).saturating_mul(n),
    );
    let frames = usize::try_from(pool_cells).unwrap_or(usize::MAX);
    let (rx, fill) = xsk::ring_sizes(o.ring_size, frames);
    plan.add(
        format!("AF_XDP RX ring of {rx} entries and fill ring of {fill}, x {queues} queues"),
        xsk::ring_bytes(o.ring_size, frames).saturating_mul(n),
    );
    live::cutoff::plan_map(&mut plan, kernel_flows);
    plan
}

/// Reject options the kernel would refuse with a bare EINVAL.
fn check_options(o: &AfXdpOptions) -> Result<(), SourceError> {
    if o.frame_size != 2048 && o.frame_size != 4096 {
        return Err(SourceError::Invalid(format!("AF_XDP frame size {}: must be 2048 or 4096", o.frame_size)));
    }
    if let Some(r) = o.ring_size.filter(|r| !r.is_power_of_two()) {
        return Err(SourceError::Invalid(format!("AF_XDP ring size {r}: must be a power of two")));
    }
    Ok(())
}

/// Refuse `iface` when it carries an IP address the host may be using, unless
/// the user said to take its traffic anyway.
pub(crate) fn check_host_addresses(iface: &str, take_host_traffic: bool) -> Result<(), SourceError> {
    if take_host_traffic {
        return Ok(());
    }
    let addresses =
        netdev::host_addresses(iface).map_err(|error| SourceError::Io { what: format!("{iface}: reading its IP addresses"), error })?;
    if let Some(first) = addresses.first() {
        let more = match addresses.len() {
            1 => String::new(),
            n => format!(" and {} more", n - 1),
        };
        return Err(SourceError::Invalid(format!(
            "{iface} has IP address {first}{more}, so this host uses it: AF_XDP capture takes the packets it captures \
             away from the host's stack (an SSH session over {iface} would hang, ARP would stop answering); a filter \
             leaves what it rejects to the host. Capture anyway with --take-host-traffic (WEIR_TAKE_HOST_TRAFFIC=1 for \
             weir's libpcap), or use afpacket:{iface}, which copies packets and takes nothing"
        )));
    }
    Ok(())
}

/// Where zero-copy was left to the driver (`auto`) and the driver has none,
/// the user hears that the kernel will copy every packet into the UMEM.
/// (With `on` such a driver is refused at bind; with `off` copying was asked.)
fn copy_mode_note(iface: &str, ifindex: u32, zero_copy: ZeroCopy, mode: XdpMode) -> Option<String> {
    if zero_copy != ZeroCopy::Auto {
        return None;
    }
    let why = match (mode, netlink::xdp_features(ifindex)) {
        (XdpMode::Skb, _) => "its driver has no native XDP, so weir's program runs in generic mode",
        (_, Ok(Some(f))) if !f.zero_copy => "its driver has no AF_XDP zero-copy",
        (_, Ok(Some(_))) => return None,
        (_, Ok(None)) => {
            return Some(format!(
                "{iface}: copy mode unless its driver has AF_XDP zero-copy, which this kernel cannot say (no netdev netlink family)"
            ))
        }
        (_, Err(e)) => return Some(format!("{iface}: copy mode unless its driver has AF_XDP zero-copy; asking failed: {e}")),
    };
    Some(format!("{iface}: copy mode: {why}; the kernel copies each packet into the UMEM"))
}

fn check_timestamps(t: Option<Timestamps>) -> Result<(), SourceError> {
    if t == Some(Timestamps::Kernel) {
        return Err(SourceError::Invalid(
            "--timestamps kernel: AF_XDP hands packets over without a kernel timestamp (weir does not read the driver's \
             RX metadata); use tsc (per packet) or clock (per batch)"
                .into(),
        ));
    }
    Ok(())
}

/// An interface opened for AF_XDP capture, its program attached, sockets unbound.
struct AfXdpSource {
    info: SourceInfo,
    iface: String,
    ifindex: u32,
    sockets: Vec<(QueueId, XskFd)>,
    program: XdpProgram,
    /// The filter's slot in the program; the units keep it (and the filter
    /// in it) for the capture's lifetime.
    kernel_filter: Option<Arc<KernelFilter>>,
    promiscuous: Option<packet::Promiscuous>,
    opts: AfXdpOptions,
    /// `--timestamps`, checked.
    timestamps: Option<Timestamps>,
}

impl Source for AfXdpSource {
    fn info(&self) -> &SourceInfo {
        &self.info
    }

    fn progress(&self) -> Option<Arc<Progress>> {
        None
    }

    /// See `ThreadTables::flow_bucket` in the `rebalance` module.
    fn handover_refusal(&self) -> Option<&'static str> {
        Some(
            "afxdp rebalances per RX queue (a moving entry is one bucket of the flows the NIC put on one RX queue), \
             and a packet does not say which RX queue it came in on, so a worker cannot give up exactly the moving \
             entry's streams",
        )
    }

    fn kernel_flows(&self) -> Option<&crate::source::live::cutoff::FlowMap> {
        self.program.flows()
    }

    fn place_filter(&mut self, filter: Option<&Filter>) -> Result<Option<String>, SourceError> {
        let iface = &self.iface;
        let Some(kernel) = &self.kernel_filter else {
            return Ok(None);
        };
        let not_in_kernel =
            kernel.install(filter).map_err(|e| denied(format!("{iface}: putting the filter in the XDP program"), e, "CAP_BPF"))?;
        Ok(Some(match (filter, not_in_kernel) {
            (None, _) => format!(
                "{iface}: every packet of the captured queues is taken from the host's network stack (AF_XDP redirects \
                 it); a filter would leave what it rejects to the host"
            ),
            (Some(_), None) => format!(
                "{iface}: packets the filter accepts are taken from the host's network stack; the filter runs in the \
                 XDP program, and what it rejects goes on to the host"
            ),
            (Some(_), Some(why)) => format!(
                "{iface}: every packet of the captured queues is taken from the host's network stack: the filter runs \
                 in user space only, since {why}"
            ),
        }))
    }

    fn into_units(self: Box<Self>, opts: CaptureOptions) -> Result<Vec<Box<dyn CaptureUnit>>, SourceError> {
        super::live::refuse_pacing(opts.pacing)?;
        let frames = opts.pool.capacity();
        if let Some(ring) = self.opts.ring_size.map(|r| r as usize).filter(|&r| frames <= r) {
            return Err(SourceError::Invalid(format!(
                "the pool {} has {frames} cells per queue, which must be more than the AF_XDP RX ring's {ring} entries \
                 (each cell is a UMEM frame): raise R or M, or lower the ring size",
                opts.pool
            )));
        }
        let AfXdpSource { info, iface, ifindex, sockets, mut program, kernel_filter, promiscuous, opts: xdp, timestamps } = *self;
        if let Some(kernel) = &kernel_filter {
            // Again: the filter may have been replaced since `place_filter`.
            kernel
                .install(opts.filter.current().as_ref())
                .map_err(|e| denied(format!("{iface}: putting the filter in the XDP program"), e, "CAP_BPF"))?;
            let kernel = Arc::clone(kernel);
            let label = format!("afxdp:{iface}");
            // A replacement that cannot run in the kernel empties the slot, so
            // every packet is taken and judged in user space: still correct, but
            // the host loses what it used to keep, which the user must hear. The
            // start notes are long printed by then, so this goes to stderr.
            opts.filter.on_replace(Box::new(move |f| {
                if let Some(why) = kernel.install(f)? {
                    eprintln!(
                        "weir: {label}: the new filter runs in user space only, since {why}: every packet of the captured \
                         queues is now taken from the host's network stack"
                    );
                }
                Ok(())
            }));
        }
        // Calibrated once (it takes CALIBRATION), copied to every queue's unit.
        let clock = match timestamps {
            None => TscClock::new().ok(),
            Some(Timestamps::Tsc) => Some(TscClock::new().map_err(|e| SourceError::Invalid(format!("--timestamps tsc: {e}")))?),
            Some(Timestamps::Clock | Timestamps::Kernel) => None,
        };
        let native = program.mode() == XdpMode::Drv;
        let n = sockets.len();
        let rebalance = match opts.balance.controller() {
            Some(_) if n > rebalance::MAX_QUEUES => {
                return Err(SourceError::Invalid(format!(
                    "rebalancing moves buckets between at most {} queues, not {n}",
                    rebalance::MAX_QUEUES
                )))
            }
            Some(cfg) => Some(rebalance::Shared::new(
                rebalance::ThreadTables::new(n),
                n,
                cfg,
                Arc::clone(&opts.balance_counters),
                opts.handovers.clone(),
            )),
            None => None,
        };
        // A buddy group's sockets share one UMEM (WireCAP's advanced mode on one
        // memory): rebalancing hands frames between queues; offloading hands chunks
        // whose frames then go back to the queue that received them.
        let grouped = n > 1 && (rebalance.is_some() || opts.balance.offload().is_some());
        let group = match grouped {
            true => Some(
                crate::pool::FrameArena::new(frames * n, xdp.frame_size)
                    .map_err(|error| SourceError::Io { what: format!("{iface}: mapping the shared UMEM of {n} queues"), error })?,
            ),
            false => None,
        };
        let mut xsks: Vec<Xsk> = Vec::with_capacity(n);
        for (home, (queue, fd)) in sockets.into_iter().enumerate() {
            let umem_of = match &group {
                None => UmemOf::Own,
                Some(arena) => UmemOf::Group { arena: Arc::clone(arena), home, first: xsks.first().map(Xsk::socket) },
            };
            let xsk = Xsk::bind(fd, &BindTo { iface: &iface, ifindex, queue, frames, native }, &xdp, umem_of)?;
            program.register(queue.0, xsk.socket())?;
            xsks.push(xsk);
        }
        let counts = kernel_filter.as_ref().map(|k| Arc::clone(k.counts()));
        let attachment = Arc::new(Attachment::new(program, kernel_filter, promiscuous));
        let mut links = rebalance.as_ref().map(|_| rebalance::links(n, frames, frames).into_iter());
        let mut units: Vec<Box<dyn CaptureUnit>> = Vec::with_capacity(n + 1);
        for (me, xsk) in xsks.into_iter().enumerate() {
            let role = match (&rebalance, links.as_mut().and_then(Iterator::next)) {
                (Some(r), Some(l)) => Some(rebalance::QueueRole::new(Arc::clone(r), me, l, frames, xdp.frame_size)),
                _ => None,
            };
            let unit = XskUnit::new(xsk, Arc::clone(&attachment), opts.filter.watch(), info.snaplen, role, &iface, clock);
            units.push(Box::new(unit.kernel_filtered(counts.clone()).profiled_by(opts.profiler.clone())));
        }
        if let Some(r) = rebalance {
            units.push(Box::new(crate::balance::threaded::ControllerUnit::new(r, format!("afxdp:{iface} rebalancer"))));
        }
        Ok(units)
    }
}

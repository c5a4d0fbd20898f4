//! `xdp:` live capture: weir's XDP program copies every packet of the
//! captured RX queues into one BPF ring buffer, packed end to end, and one
//! capture thread moves them into the queues' pools.
//!
//! Why a third live backend: AF_XDP gives each packet a UMEM frame of at
//! least 2 KiB, so a paused afxdp reader holds an eighth of what afpacket's
//! blocks hold in the same memory when packets are small. This ring holds a
//! 64-byte frame in 88 bytes (afpacket: 160), so a reader stalled by a burst
//! is covered by nearly twice afpacket's packets at equal memory, and the
//! kernel fills it while weir's threads do not run at all.
//!
//! The contract:
//! - [`open`] works in the network namespace the options name: it checks the
//!   interface, decides the queues (every RX queue when none are named),
//!   checks the ring against the memory available, holds the interface
//!   promiscuous if asked, and loads and attaches `ebpf/weir_xring.c` (see
//!   `program.rs`).
//! - The host keeps its traffic: a stored packet goes on up the stack,
//!   unless `take_host_traffic`, which drops it after the copy so that the
//!   stack spends nothing on it. Queues not captured are never touched.
//! - The user's filter runs in the XDP program, translated to eBPF: what it
//!   rejects is not stored, goes on to the host and is counted as filtered.
//!   A filter the kernel cannot run runs in user space only (every packet is
//!   stored), and the notes say so.
//! - The ring is one for all the queues; the unit (`unit.rs`) spreads the
//!   records over the queues' pools: by weir's symmetric RSS hash, the
//!   default, whatever RX queue a packet came on (so rebalancing moves its
//!   buckets, as on a trace), or by RX queue (`XdpSpread::Queue`, where the
//!   engine refuses rebalancing). Offloading works, as on every source.
//! - Every packet the ring could not take is counted per queue as a
//!   delivery drop; nothing is lost uncounted.
//! - Timestamps are the kernel's (the program's CLOCK_TAI, made wall-clock
//!   time); `--timestamps tsc` or `clock` is refused.
//! - An interface that goes down or away ends the capture with an error
//!   (seen within a quiet wait of the unit's).
//! - Detach is the kernel's: the program hangs on a bpf_link whose only
//!   descriptor weir holds.

mod program;
mod unit;

use crate::capture::{CaptureUnit, Progress, SourceError, SourceInfo};
use crate::clock::Timestamps;
use crate::filter::Filter;
use crate::memory::{Budget, Plan};
use crate::rss::Rss;
use crate::source::afxdp::kfilter::KernelFilter;
use crate::source::live::{self, denied};
use crate::source::{ifindex, CaptureOptions, LiveOptions, QueueRange, Source, XdpSpread};
use crate::sys::netdev::LinkWatch;
use crate::sys::netlink::XdpMode;
use crate::sys::packet;
use crate::{LinkType, QueueId};
use program::{Setup, XringProgram, MAX_SNAPLEN};
use std::sync::Arc;
use unit::{Attachment, Routing, XringUnit};

/// The default ring: afpacket's default memory per queue.
const DEFAULT_BYTES_PER_QUEUE: u64 = 64 << 20;
/// The kernel's ring buffer size is a 32-bit count of bytes (and at most
/// what `vmalloc` gives it): this is the largest power of two below.
const MAX_RING_BYTES: u64 = 1 << 31;

/// Open `iface` (queues `queues`, or every RX queue) for capture.
pub(crate) fn open(
    iface: &str,
    queues: Option<QueueRange>,
    opts: &LiveOptions,
    name: String,
    budget: &Budget,
) -> Result<Box<dyn Source>, SourceError> {
    if let Some(t @ (Timestamps::Tsc | Timestamps::Clock)) = opts.timestamps {
        return Err(SourceError::Invalid(format!(
            "--timestamps {t}: xdp: packets are stamped by weir's XDP program as the kernel receives them (kernel)"
        )));
    }
    opts.in_netns(|| {
        let index = ifindex(iface)?;
        let queues = live::rx_queue_range(iface, queues)?;
        let queue_ids: Vec<QueueId> = queues.iter().map(QueueId).collect();
        let ring_bytes = ring_bytes(opts.xdp.ring_bytes, queue_ids.len())?;
        budget.check(queue_ids.len(), memory(ring_bytes, opts.kernel_flows))?;
        let promiscuous = match opts.promisc {
            true => Some(packet::promiscuous(index).map_err(|e| denied(format!("{iface}: entering promiscuous mode"), e, "CAP_NET_RAW"))?),
            false => None,
        };
        let snaplen = opts.snaplen.min(MAX_SNAPLEN);
        let mut program = XringProgram::attach(&Setup {
            iface,
            ifindex: index,
            queues: &queue_ids,
            ring_bytes: u32::try_from(ring_bytes).unwrap_or(u32::MAX),
            snaplen,
            take: opts.xdp.take_host_traffic,
            replace_foreign: opts.xdp.replace_foreign,
            kernel_flows: opts.kernel_flows,
        })?;
        let kernel_filter = program.take_filter().map(Arc::new);
        let link = LinkWatch::new(index).map_err(|error| SourceError::Io { what: format!("{iface}: a socket to watch it"), error })?;
        let mut notes: Vec<String> = program.notes().to_vec();
        if program.mode() == XdpMode::Skb {
            notes.push(format!(
                "{iface}: its driver has no native XDP, so weir's program runs in generic mode (after the kernel made an skb)"
            ));
        }
        let info = SourceInfo {
            name,
            link_type: LinkType::ETHERNET,
            snaplen,
            queues: queue_ids,
            iface: Some(iface.to_string()),
            trace: None,
            notes,
            link: Some(live::link_meta(iface, index)?),
        };
        Ok(Box::new(XringSource {
            info,
            iface: iface.to_string(),
            ring_bytes,
            program,
            kernel_filter,
            promiscuous,
            link,
            take: opts.xdp.take_host_traffic,
            spread: opts.xdp.spread,
        }) as Box<dyn Source>)
    })
}

/// The ring's size: as asked (checked), or the default for `queues` queues.
fn ring_bytes(asked: Option<u64>, queues: usize) -> Result<u64, SourceError> {
    let page = crate::sys::mem::page_size() as u64;
    match asked {
        Some(b) if !b.is_power_of_two() || b < page || b > MAX_RING_BYTES => Err(SourceError::Invalid(format!(
            "xdp: ring buffer of {b} bytes: it must be a power of two from a page ({page} bytes) to {} MiB",
            MAX_RING_BYTES >> 20
        ))),
        Some(b) => Ok(b),
        None => Ok(DEFAULT_BYTES_PER_QUEUE.saturating_mul(queues as u64).next_power_of_two().min(MAX_RING_BYTES)),
    }
}

/// What the source takes besides the engine's pools.
fn memory(ring_bytes: u64, kernel_flows: u32) -> Plan {
    let mut plan = Plan::new();
    plan.add(format!("XDP ring buffer of {}", crate::memory::Bytes(ring_bytes)), ring_bytes);
    live::cutoff::plan_map(&mut plan, kernel_flows);
    plan
}

/// An interface with weir's ring program attached, before capture starts.
struct XringSource {
    info: SourceInfo,
    iface: String,
    ring_bytes: u64,
    program: XringProgram,
    kernel_filter: Option<Arc<KernelFilter>>,
    promiscuous: Option<packet::Promiscuous>,
    link: LinkWatch,
    take: bool,
    spread: XdpSpread,
}

impl Source for XringSource {
    fn info(&self) -> &SourceInfo {
        &self.info
    }

    fn progress(&self) -> Option<Arc<Progress>> {
        None
    }

    fn kernel_flows(&self) -> Option<&crate::source::live::cutoff::FlowMap> {
        self.program.flows()
    }

    fn place_filter(&mut self, filter: Option<&Filter>) -> Result<Option<String>, SourceError> {
        let iface = &self.iface;
        let not_in_kernel = match &self.kernel_filter {
            Some(k) => k.install(filter).map_err(|e| denied(format!("{iface}: putting the filter in the XDP program"), e, "CAP_BPF"))?,
            None => None,
        };
        let host = match self.take {
            true => "taken from the host's network stack (--take-host-traffic)",
            false => "copied, and go on to the host",
        };
        Ok(Some(match (filter, not_in_kernel) {
            (None, _) => format!("{iface}: packets of the captured queues are {host}"),
            (Some(_), None) => format!("{iface}: packets the filter accepts are {host}; the filter runs in the XDP program"),
            (Some(_), Some(why)) => format!(
                "{iface}: every packet of the captured queues is stored in the ring and {host}: the filter runs in user space only, since {why}"
            ),
        }))
    }

    fn into_units(self: Box<Self>, opts: CaptureOptions) -> Result<Vec<Box<dyn CaptureUnit>>, SourceError> {
        super::live::refuse_pacing(opts.pacing)?;
        let XringSource { info, iface, ring_bytes, mut program, kernel_filter, promiscuous, link, take: _, spread } = *self;
        if let Some(kernel) = &kernel_filter {
            // Again: the filter may have been replaced since `place_filter`.
            kernel
                .install(opts.filter.current().as_ref())
                .map_err(|e| denied(format!("{iface}: putting the filter in the XDP program"), e, "CAP_BPF"))?;
            let kernel = Arc::clone(kernel);
            let label = info.name.clone();
            opts.filter.on_replace(Box::new(move |f| {
                if let Some(why) = kernel.install(f)? {
                    eprintln!("weir: {label}: the new filter runs in user space only, since {why}: every packet is stored in the ring");
                }
                Ok(())
            }));
        }
        let n = u16::try_from(info.queues.len()).map_err(|_| SourceError::Invalid(format!("{}: too many queues", info.name)))?;
        let routing = match (spread, opts.balance.controller()) {
            (XdpSpread::Hash, Some(cfg)) if n > 1 => Routing::steered(n, cfg, opts.handovers.clone(), Arc::clone(&opts.balance_counters)),
            (XdpSpread::Hash, _) if n > 1 => Routing::Hash(Rss::new(LinkType::ETHERNET, n)),
            // The engine refuses rebalancing by RX queue before this.
            _ => Routing::Queue,
        };
        let ring = program.take_ring().ok_or_else(|| SourceError::Invalid("xdp: the ring buffer was taken twice".into()))?;
        let attachment = Arc::new(Attachment { program, link, filter: kernel_filter, _promiscuous: promiscuous });
        let unit = XringUnit::new(
            info.name.clone(),
            info.queues.clone(),
            ring,
            ring_bytes,
            attachment,
            opts.filter.watch(),
            opts.profiler.clone(),
        )
        .routed(routing);
        Ok(vec![Box::new(unit)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_is_a_checked_power_of_two() {
        assert_eq!(ring_bytes(None, 1).unwrap(), 64 << 20);
        assert_eq!(ring_bytes(None, 2).unwrap(), 128 << 20);
        assert_eq!(ring_bytes(None, 3).unwrap(), 256 << 20, "rounded up");
        assert_eq!(ring_bytes(None, 1000).unwrap(), MAX_RING_BYTES);
        assert_eq!(ring_bytes(Some(1 << 20), 4).unwrap(), 1 << 20);
        for bad in [3 << 20, 100, 1 << 32] {
            let e = ring_bytes(Some(bad), 1).unwrap_err().to_string();
            assert!(e.contains(&bad.to_string()) && e.contains("power of two"), "{e}");
        }
    }
}

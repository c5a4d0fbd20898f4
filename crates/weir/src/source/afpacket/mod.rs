//! AF_PACKET live capture: one TPACKET_V3 ring per queue, the queues' sockets in
//! one PACKET_FANOUT group, packets delivered from the kernel's ring blocks
//! without a copy.
//!
//! **Opening** (when the engine is built, inside the network namespace the options name): the
//! options are checked before anything is touched, then the interface is looked
//! up, the queues decided (one per RX queue of the device, or the range named),
//! and per queue one socket made: TPACKET_V3, a ring of `block_count` blocks of
//! `block_bytes` mapped into a `BlockArena` shared with
//! the kernel, promiscuous membership if asked. The sockets receive nothing yet.
//! Everything that needs a privilege (CAP_NET_RAW) happens here, so a caller may
//! drop privileges before capture starts.
//!
//! **Starting** (when the engine starts): each socket gets a reject-all filter,
//! is bound to the interface and joins the group, and only then is its real
//! filter swapped in (SO_ATTACH_FILTER replaces atomically). So no packet is
//! ever seen unfiltered, and none twice: a socket bound but not yet in the group
//! would get its own copy of packets the group also hands to a member. The real
//! filter is the user's libpcap program (compiled with our snaplen, so its RET
//! values truncate in the kernel), or `ret #snaplen` without one. Packets a
//! filter rejects never reach user space, so live sources count no `filtered`.
//!
//! **Queues and fanout members.** In `hash`, `cpu`, `lb` and `buckets` modes the group is
//! exactly the opened sockets, and a queue number is a label: `eth0@0-3` is four
//! sockets sharing eth0's traffic, whatever queue a packet arrived on, and a
//! partial range `eth0@2-3` is two sockets sharing all of it. In `qm` mode the
//! kernel's demux picks member `skb->queue_mapping mod n`, where the mapping is
//! q + 1 for a packet a driver recorded on RX queue q and 0 when it recorded none.
//! So the group always has one member per RX queue of the device (n = all of
//! them), socket q joining as member `(q + 1) mod n`, and queues outside the range
//! are placeholders: bound, in the group, rejecting everything, with no ring. A
//! partial range then takes exactly its queues' share, and two captures of
//! disjoint ranges split the traffic between them, each packet to one. Packets
//! with no recorded queue go where the demux sends them: to the last queue.
//! Outgoing packets carry their TX queue in the same field and land accordingly.
//! (Admitting queue q with an `SKF_AD_QUEUE` test in each socket's filter would
//! not need placeholders, but that load reads 0 in socket filters on Linux 6.18
//! even where the qm demux sees the mapping: measured on veth, where outgoing
//! packets on four TX queues all read 0. The demux is the only reliable reader.)
//!
//! **Hash mode is symmetric.** The kernel's `fanout_demux_hash` is
//! `reciprocal_scale(__skb_get_hash_symmetric(skb), n)`: the flow dissector's
//! hash over addresses and ports put in a canonical order, computed afresh (never
//! the NIC's RSS hash, which need not be symmetric). Both directions of a flow
//! reach one socket; the live test `both_directions_of_every_flow_share_a_queue`
//! checks it for hundreds of TCP and UDP flows. IP fragments after the first carry
//! no ports and may land elsewhere (PACKET_FANOUT_FLAG_DEFRAG would cure that by
//! reassembling, which would change what is captured).
//!
//! **Buckets mode steers flows by a table.** The group's demux is weir's eBPF
//! program (PACKET_FANOUT_EBPF, `ebpf/weir_fanout.c`): it puts each packet in one
//! of 512 buckets by weir's own symmetric RSS hash (the bucket
//! [`Rss::bucket`](crate::Rss::bucket) gives the frame) and hands it to the
//! member a table names for the bucket, initially bucket b → queue b mod n. The
//! table lives in the kernel and changes while capturing: [`BucketSteering`]
//! moves buckets and reads how many packets each one steered (its contract is on [`BucketSteering`]). The
//! program is loaded when the source opens (so `-Z` may drop root afterwards) and
//! becomes the group's demux right after the first socket founds the group, before
//! any other joins. Ethernet and loopback devices only: the program parses
//! Ethernet.
//!
//! **Counting.** A packet is received when it is pushed into a cell (see
//! the `unit` module); packets the kernel could not put into a full ring are read from
//! PACKET_STATISTICS (`tp_drops`) and counted as delivery drops of that queue.
//! Packets still in the ring when a stop is requested are not counted: they were
//! not received yet, as packets arriving after the stop are not.
//!
//! **Link types.** Ethernet and loopback devices capture as Ethernet, with VLAN
//! tags the kernel took out put back in front of the EtherType (as libpcap does);
//! raw-IP devices (tun, wireguard) as LINKTYPE_RAW; radiotap as 802.11 radiotap.
//! On loopback every packet passes the tap twice, going out and coming back in;
//! as libpcap does, the outgoing copy is dropped, here by a test in front of the
//! filter so it never takes room in the ring.

pub(crate) mod cutoff;
mod rebalance;
pub(crate) mod ring;
mod steer;
mod unit;

pub use steer::{BucketSteering, SteerError, SteeringId, BUCKETS};

use crate::capture::{CaptureUnit, Progress, SourceError, SourceInfo};
use crate::filter::{BpfInsn, Filter};
use crate::memory::{Budget, Bytes, Plan};
use crate::source::{ifindex, rx_queues, AfPacketOptions, CaptureOptions, Fanout, LiveOptions, QueueRange, Source};
use crate::sys::packet::{self as sys, PacketSocket};
use crate::{LinkType, QueueId, Setting, SettingError};
use ring::Ring;
use std::io;
use std::sync::Arc;

/// Largest block the kernel takes (`tp_block_size` must be a positive C int; a power of two).
const MAX_BLOCK_BYTES: usize = 1 << 30;

/// The ring of one queue, checked against the kernel's rules before any socket exists.
#[derive(Copy, Clone, Debug)]
struct RingShape {
    block_bytes: u32,
    block_count: u32,
    timeout_ms: u32,
}

impl RingShape {
    fn check(o: &AfPacketOptions, snaplen: u32) -> Result<RingShape, SourceError> {
        let bad = |m: String| Err(SourceError::Invalid(format!("afpacket: {m}")));
        let page = crate::sys::mem::page_size();
        let b = o.block_bytes;
        if !b.is_power_of_two() || b < page || b > MAX_BLOCK_BYTES {
            return bad(format!(
                "ring block size {b} bytes: must be a power of two from the page size ({page}) to {MAX_BLOCK_BYTES} bytes"
            ));
        }
        if snaplen == 0 || snaplen as usize > crate::pool::MAX_CAPLEN {
            return bad(format!("snaplen {snaplen}: must be from 1 to {}", crate::pool::MAX_CAPLEN));
        }
        let need = snaplen as usize + sys::FRAME_OVERHEAD;
        if b < need {
            return bad(format!(
                "ring block size {b} bytes cannot hold one packet of snaplen {snaplen} ({need} bytes with headers): \
                 use blocks of at least {} bytes or a smaller snaplen",
                need.next_power_of_two()
            ));
        }
        let n = o.block_count;
        if n < 2 || u32::try_from(n).is_err() || b.checked_mul(n).is_none() {
            return bad(format!("{n} ring blocks: need at least 2 (the kernel fills one while weir reads another), at most {}", u32::MAX));
        }
        let ms = o.block_timeout.as_millis();
        if ms == 0 || ms > u128::from(u32::MAX) {
            return bad(format!("block timeout {:?}: must be from 1 ms to {} ms", o.block_timeout, u32::MAX));
        }
        if o.rollover && o.fanout == Fanout::QueueMapping {
            return bad("rollover would move packets to other queues' sockets, undoing qm fanout: use one or the other".into());
        }
        Ok(RingShape { block_bytes: b as u32, block_count: n as u32, timeout_ms: ms as u32 })
    }
}

/// What the hardware type of a device means for capturing it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Device {
    link_type: LinkType,
    /// Put VLAN tags the kernel took out back in.
    vlan: bool,
    /// Loopback: drop the outgoing copy of every packet.
    loopback: bool,
}

/// The device kind for an ARPHRD_ hardware type.
fn device(iface: &str, hatype: u16) -> Result<Device, SourceError> {
    let d = |link_type, vlan, loopback| Ok(Device { link_type, vlan, loopback });
    match hatype {
        sys::ARPHRD_ETHER => d(LinkType::ETHERNET, true, false),
        sys::ARPHRD_LOOPBACK => d(LinkType::ETHERNET, false, true),
        sys::ARPHRD_NONE | sys::ARPHRD_RAWIP => d(LinkType::RAW, false, false),
        sys::ARPHRD_IEEE80211_RADIOTAP => d(LinkType(127), false, false),
        other => Err(SourceError::Invalid(format!(
            "afpacket: {iface} has hardware type {other} (ARPHRD_*), which weir does not capture: \
             Ethernet, loopback, raw IP and 802.11 radiotap devices are supported"
        ))),
    }
}

/// An I/O error with what was being done; a refused privilege names the capability.
fn io_error(what: String, e: io::Error) -> SourceError {
    let what = if e.kind() == io::ErrorKind::PermissionDenied {
        format!(
            "{what}: packet sockets need CAP_NET_RAW (run as root, or grant it with \
             `setcap cap_net_raw+ep` on the weir binary)"
        )
    } else {
        what
    };
    SourceError::Io { what, error: e }
}

/// One queue's socket and ring, opened but not yet receiving.
struct QueueSocket {
    queue: u16,
    /// Shared only with the filter switch's applier, which holds it weakly.
    socket: Arc<PacketSocket>,
    ring: Ring,
}

/// An interface opened for AF_PACKET capture.
struct AfPacketSource {
    info: SourceInfo,
    iface: String,
    ifindex: u32,
    fanout: Fanout,
    rollover: bool,
    loopback: bool,
    queues: Vec<QueueSocket>,
    /// qm mode: sockets of the device's other RX queues, so the group has a member
    /// for every queue (see the module doc).
    placeholders: Vec<(u16, PacketSocket)>,
    /// buckets mode: the table (and the loaded program), bound to this capture.
    steering: Option<steer::Binding>,
    /// The kernel cutoff's socket filter and flow map (`cutoff.rs`), when
    /// asked for on a device it can run on.
    cutoff: Option<cutoff::CutoffFilter>,
}

/// What the units of one capture keep alive until the last of them is gone.
struct Shared {
    /// qm mode: the group's placeholder members; the demux divides by the group's size.
    _placeholders: Vec<PacketSocket>,
    /// buckets mode: the program and its table, bound to this capture.
    _steering: Option<steer::Binding>,
    /// The kernel cutoff's program and flow map.
    _cutoff: Option<cutoff::CutoffFilter>,
}

/// Open `iface` (queues `queues`, or every RX queue) for capture.
pub(crate) fn open(
    iface: &str,
    queues: Option<QueueRange>,
    opts: &LiveOptions,
    name: String,
    budget: &Budget,
) -> Result<Box<dyn Source>, SourceError> {
    if let Some(t) = opts.timestamps.filter(|&t| t != crate::clock::Timestamps::Kernel) {
        return Err(SourceError::Invalid(format!(
            "--timestamps {t}: on afpacket the kernel stamps every packet as it receives it, and that is the only choice \
             (tsc and clock are for afxdp, which gets no kernel timestamp)"
        )));
    }
    let shape = RingShape::check(&opts.afpacket, opts.snaplen)?;
    let fanout = opts.afpacket.fanout;
    let label = format!("afpacket:{iface}");
    opts.in_netns(|| {
        let ifindex = ifindex(iface)?;
        let device_queues = rx_queues(iface)?;
        let queues: Vec<u16> = match queues {
            None => (0..device_queues).collect(),
            Some(r) => r.iter().collect(),
        };
        // The kernel allocates each ring whole, outside any memory limit of this
        // process: it must fit before the first socket asks for one.
        let mut plan = Plan::new();
        let a = &opts.afpacket;
        plan.add(
            format!("afpacket rings: {} blocks of {} per queue, x {} queues", a.block_count, Bytes(a.block_bytes as u64), queues.len()),
            (a.block_count as u64).saturating_mul(a.block_bytes as u64).saturating_mul(queues.len() as u64),
        );
        crate::source::live::cutoff::plan_map(&mut plan, opts.kernel_flows);
        budget.check(queues.len(), plan)?;
        let last = queues.last().copied().unwrap_or(0);
        if fanout == Fanout::QueueMapping && last >= device_queues {
            return Err(SourceError::Invalid(format!(
                "{label}@{last}: {iface} has {device_queues} RX queue(s), so qm fanout can open queues 0 to {}",
                device_queues - 1
            )));
        }
        let first = PacketSocket::new().map_err(|e| io_error(format!("{label}: opening a packet socket"), e))?;
        let hatype = first.hardware_type(iface).map_err(|e| io_error(format!("{label}: reading the hardware type"), e))?;
        let dev = device(iface, hatype)?;
        let steering = match fanout {
            Fanout::Buckets(id) => {
                if dev.link_type != LinkType::ETHERNET {
                    return Err(SourceError::Invalid(format!(
                        "{label}: buckets fanout parses Ethernet frames, and {iface} is not an Ethernet device \
                         (link type {}): use hash fanout",
                        dev.link_type
                    )));
                }
                let table = match id {
                    Some(id) => BucketSteering::find(id)?,
                    None => BucketSteering::new()?,
                };
                let members: Vec<QueueId> = queues.iter().copied().map(QueueId).collect();
                Some(table.bind(&name, &members)?)
            }
            _ => None,
        };
        // The socket filter parses Ethernet, and on loopback weir's classic
        // program must stay to drop the outgoing copies (`cutoff.rs`).
        let cutoff = match opts.kernel_flows {
            n if n > 0 && dev.link_type == LinkType::ETHERNET && !dev.loopback => Some(cutoff::CutoffFilter::load(n, opts.snaplen)?),
            _ => None,
        };
        let mut sockets = vec![first];
        for _ in 1..queues.len() {
            sockets.push(PacketSocket::new().map_err(|e| io_error(format!("{label}: opening a packet socket"), e))?);
        }
        let mut opened = Vec::with_capacity(queues.len());
        for (&q, socket) in queues.iter().zip(sockets) {
            let ring = set_up(&socket, shape, opts, ifindex, dev.vlan).map_err(|(step, e)| io_error(format!("{label}@{q}: {step}"), e))?;
            opened.push(QueueSocket { queue: q, socket: Arc::new(socket), ring });
        }
        let mut placeholders = Vec::new();
        if fanout == Fanout::QueueMapping {
            for q in (0..device_queues).filter(|q| !queues.contains(q)) {
                let socket = PacketSocket::new().map_err(|e| io_error(format!("{label}: opening a packet socket"), e))?;
                placeholders.push((q, socket));
            }
        }
        let info = SourceInfo {
            name,
            link_type: dev.link_type,
            snaplen: opts.snaplen,
            queues: queues.iter().copied().map(QueueId).collect(),
            iface: Some(iface.to_string()),
            trace: None,
            notes: Vec::new(),
            link: None,
        };
        let source = AfPacketSource {
            info,
            iface: iface.to_string(),
            ifindex,
            fanout,
            rollover: opts.afpacket.rollover,
            loopback: dev.loopback,
            queues: opened,
            placeholders,
            steering,
            cutoff,
        };
        Ok(Box::new(source) as Box<dyn Source>)
    })
}

/// Version, ring, mapping and promiscuous mode of one socket; on failure, which step failed.
fn set_up(s: &PacketSocket, shape: RingShape, opts: &LiveOptions, ifindex: u32, vlan: bool) -> Result<Ring, (String, io::Error)> {
    s.use_tpacket_v3().map_err(|e| ("TPACKET_V3 (Linux 3.2 or later)".to_string(), e))?;
    if vlan {
        s.reserve(sys::VLAN_TAG_LEN).map_err(|e| ("reserving room for VLAN tags".to_string(), e))?;
    }
    let ring = Ring::map(s, shape.block_bytes, shape.block_count, shape.timeout_ms, opts.snaplen, vlan).map_err(|e| {
        let step = format!(
            "a ring of {} blocks of {} bytes ({} MiB)",
            shape.block_count,
            shape.block_bytes,
            (u64::from(shape.block_count) * u64::from(shape.block_bytes)) >> 20
        );
        (step, e)
    })?;
    if opts.promisc {
        s.add_promisc(ifindex).map_err(|e| ("promiscuous mode".to_string(), e))?;
    }
    Ok(ring)
}

// The opcodes are the filter's (linux/filter.h); the ancillary offset and the
// packet type are linux/filter.h's and linux/if_packet.h's.
use crate::filter::code::{JMP_JEQ_K as BPF_JEQ_K, LD_IMM as BPF_LD_IMM, LD_W_ABS as BPF_LD_W_ABS, RET_K as BPF_RET_K};
const SKF_AD_PKTTYPE: u32 = crate::filter::SKF_AD_OFF + 4;
const PACKET_OUTGOING: u32 = 4;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> BpfInsn {
    BpfInsn { code, jt, jf, k }
}

/// `ret #k`: a whole program that keeps `k` bytes of every packet (0: rejects it).
fn ret(k: u32) -> BpfInsn {
    insn(BPF_RET_K, 0, 0, k)
}

/// The program attached to each capturing socket: on loopback a test that rejects
/// outgoing packets, then the user's filter (compiled with our snaplen), or
/// `ret #snaplen` so the kernel truncates even without one.
fn socket_program(filter: Option<&[BpfInsn]>, snaplen: u32, loopback: bool) -> Vec<BpfInsn> {
    let mut prog = Vec::new();
    if loopback {
        prog.extend([
            insn(BPF_LD_W_ABS, 0, 0, SKF_AD_PKTTYPE),
            insn(BPF_JEQ_K, 0, 1, PACKET_OUTGOING),
            ret(0),
            // The filter starts as the kernel starts a program: A = 0.
            insn(BPF_LD_IMM, 0, 0, 0),
        ]);
    }
    match filter {
        Some(f) => prog.extend_from_slice(f),
        None => prog.push(ret(snaplen)),
    }
    prog
}

/// Attach the socket program of `filter` to each queue's socket: at the start
/// and on every replacement. A refusal says which queue's and how long the
/// program was.
fn attach_program<S: std::ops::Deref<Target = PacketSocket>>(
    sockets: impl Iterator<Item = (u16, S)>,
    filter: Option<&Filter>,
    snaplen: u32,
    loopback: bool,
    iface: &str,
) -> Result<(), (String, io::Error)> {
    let program = socket_program(filter.map(|f| f.program()), snaplen, loopback);
    for (q, s) in sockets {
        s.attach_filter(&program)
            .map_err(|e| (format!("afpacket:{iface}@{q}: the kernel refused the filter program ({} instructions)", program.len()), e))?;
    }
    Ok(())
}

impl AfPacketSource {
    /// The fanout mode and flags of the group.
    fn fanout_mode(&self) -> u16 {
        let mode = match self.fanout {
            Fanout::Hash => sys::PACKET_FANOUT_HASH,
            Fanout::Cpu => sys::PACKET_FANOUT_CPU,
            Fanout::QueueMapping => sys::PACKET_FANOUT_QM,
            Fanout::LoadBalance => sys::PACKET_FANOUT_LB,
            Fanout::Buckets(_) => sys::PACKET_FANOUT_EBPF,
        };
        if self.rollover {
            mode | sys::PACKET_FANOUT_FLAG_ROLLOVER
        } else {
            mode
        }
    }

    /// The fanout member index of queue `q`'s socket in qm mode (see the module doc).
    fn member_of(&self, q: u16) -> usize {
        (usize::from(q) + 1) % (self.queues.len() + self.placeholders.len())
    }
}

impl Source for AfPacketSource {
    fn info(&self) -> &SourceInfo {
        &self.info
    }

    fn progress(&self) -> Option<Arc<Progress>> {
        None
    }

    fn kernel_flows(&self) -> Option<&crate::source::live::cutoff::FlowMap> {
        self.cutoff.as_ref().map(cutoff::CutoffFilter::flows)
    }

    fn into_units(mut self: Box<Self>, opts: CaptureOptions) -> Result<Vec<Box<dyn CaptureUnit>>, SourceError> {
        super::live::refuse_pacing(opts.pacing)?;
        let label = |q: u16| format!("afpacket:{}@{q}", self.iface);
        // Every member: (queue, socket), capturing sockets first.
        let members: Vec<(u16, &PacketSocket)> =
            self.queues.iter().map(|s| (s.queue, &*s.socket)).chain(self.placeholders.iter().map(|(q, s)| (*q, s))).collect();
        for &(q, s) in &members {
            s.attach_filter(&[ret(0)]).map_err(|e| io_error(format!("{}: attaching a filter", label(q)), e))?;
            s.bind(self.ifindex).map_err(|e| io_error(format!("{}: binding to the interface", label(q)), e))?;
        }
        // Join in member order: in qm mode the member index is what the demux uses.
        let mut order = members.clone();
        if self.fanout == Fanout::QueueMapping {
            order.sort_by_key(|&(q, _)| self.member_of(q));
        }
        let mode = self.fanout_mode();
        let joining = |q: u16| format!("{}: joining the fanout group", label(q));
        let (first_q, first) = order[0];
        let group = first.found_fanout(mode).map_err(|e| io_error(joining(first_q), e))?;
        // The program steers from the group's first packet: until it is in place
        // the kernel's demux sends everything to member 0.
        if let Some(binding) = &self.steering {
            binding.attach(first).map_err(|source| SourceError::Io {
                what: format!("{}: making weir's fanout program the group's demux", label(first_q)),
                error: source,
            })?;
        }
        for &(q, s) in &order[1..] {
            s.join_fanout(group, mode).map_err(|e| io_error(joining(q), e))?;
        }
        let (snaplen, loopback) = (self.info.snaplen, self.loopback);
        let filter = opts.filter.current();
        match (self.cutoff.as_mut(), filter.as_ref()) {
            // The kernel cutoff's socket filter keeps what `ret #snaplen` keeps (`cutoff.rs`).
            (Some(cutoff), None) => {
                for s in &self.queues {
                    cutoff.attach(&*s.socket)?;
                }
            }
            _ => {
                let opened = self.queues.iter().map(|s| (s.queue, &*s.socket));
                attach_program(opened, filter.as_ref(), snaplen, loopback, &self.iface).map_err(|(what, e)| io_error(what, e))?;
            }
        }
        // A replacement goes on every socket still open before the caller's
        // `replace` returns; the units own the sockets, this only looks at them.
        let sockets: Vec<_> = self.queues.iter().map(|s| (s.queue, Arc::downgrade(&s.socket))).collect();
        let iface = self.iface.clone();
        opts.filter.on_replace(Box::new(move |f| {
            let open = sockets.iter().filter_map(|(q, s)| Some((*q, s.upgrade()?)));
            attach_program(open, f, snaplen, loopback, &iface).map_err(|(what, e)| io::Error::new(e.kind(), format!("{what}: {e}")))
        }));
        let rebalance = match (opts.balance.controller(), &self.steering) {
            (None, _) => None,
            (Some(cfg), Some(binding)) => {
                let queues = self.info.queues.clone();
                let table = rebalance::KernelTable { steering: binding.steering().clone(), queues };
                Some(crate::balance::threaded::Rebalance::new(table, self.info.queues.len(), cfg, opts.balance_counters, opts.handovers))
            }
            (Some(_), None) => {
                return Err(SettingError::new(
                    Setting::Fanout,
                    format!(
                        "{}: rebalancing moves buckets through weir's bucket table, so it needs buckets fanout (this capture uses {})",
                        self.info.name, self.fanout
                    ),
                )
                .into())
            }
        };
        let shared = Arc::new(Shared {
            _placeholders: self.placeholders.into_iter().map(|(_, s)| s).collect(),
            _steering: self.steering,
            _cutoff: self.cutoff,
        });
        let iface = self.iface;
        let mut units: Vec<Box<dyn CaptureUnit>> = self
            .queues
            .into_iter()
            .enumerate()
            .map(|(member, s)| {
                let name = format!("afpacket:{iface}@{}", s.queue);
                let role = rebalance.as_ref().map(|r| rebalance::QueueRole::new(Arc::clone(r), member as u16));
                let unit = unit::QueueUnit::new(QueueId(s.queue), name, s.socket, s.ring, Arc::clone(&shared), role, opts.profiler.clone());
                Box::new(unit) as Box<dyn CaptureUnit>
            })
            .collect();
        if let Some(r) = rebalance {
            units.push(Box::new(crate::balance::threaded::ControllerUnit::new(r, format!("afpacket:{iface} rebalancer"))));
        }
        Ok(units)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A change to the default options.
    type Edit = fn(&mut AfPacketOptions);

    fn shape(f: Edit, snaplen: u32) -> Result<RingShape, String> {
        let mut o = AfPacketOptions::default();
        f(&mut o);
        RingShape::check(&o, snaplen).map_err(|e| e.to_string())
    }

    #[test]
    fn ring_options_are_checked_with_reasons() {
        assert!(shape(|_| {}, 262_144).is_ok(), "the defaults are valid");
        let cases: &[(Edit, u32, &str)] = &[
            (|o| o.block_bytes = 3 << 20, 1500, "power of two"),
            (|o| o.block_bytes = 1024, 64, "page size"),
            (|o| o.block_bytes = 1 << 31, 64, "power of two"),
            (|o| o.block_bytes = 1 << 16, 262_144, "cannot hold one packet of snaplen 262144"),
            (|o| o.block_count = 1, 1500, "at least 2"),
            (|o| o.block_timeout = Duration::ZERO, 1500, "from 1 ms"),
            (|o| o.block_timeout = Duration::from_micros(500), 1500, "from 1 ms"),
            (|_| {}, 0, "snaplen 0"),
            (
                |o| {
                    o.fanout = Fanout::QueueMapping;
                    o.rollover = true;
                },
                1500,
                "rollover",
            ),
        ];
        for (f, snaplen, want) in cases {
            let err = shape(*f, *snaplen).unwrap_err();
            assert!(err.contains(want), "{err:?} does not say {want:?}");
        }
    }

    #[test]
    fn loopback_programs_reject_outgoing_packets_first() {
        let user = [insn(BPF_LD_IMM, 0, 0, 7), ret(96)];
        let prog = socket_program(Some(&user), 96, true);
        assert_eq!(prog[..4], [insn(BPF_LD_W_ABS, 0, 0, 0xffff_f004), insn(BPF_JEQ_K, 0, 1, 4), ret(0), insn(BPF_LD_IMM, 0, 0, 0)]);
        assert_eq!(prog[4..], user, "then the user's program, unchanged (its jumps are relative)");
        assert_eq!(socket_program(None, 1500, false), [ret(1500)]);
    }

    #[test]
    fn link_types_follow_the_hardware_type() {
        let dev = |hatype| device("if", hatype).unwrap();
        assert_eq!(dev(sys::ARPHRD_ETHER), Device { link_type: LinkType::ETHERNET, vlan: true, loopback: false });
        assert_eq!(dev(sys::ARPHRD_LOOPBACK), Device { link_type: LinkType::ETHERNET, vlan: false, loopback: true });
        assert_eq!(dev(sys::ARPHRD_NONE).link_type, LinkType::RAW);
        let err = device("ppp0", 512).unwrap_err().to_string();
        assert!(err.contains("hardware type 512"), "{err}");
    }
}

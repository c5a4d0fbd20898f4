//! What live capture shares across backends: options, network namespaces,
//! facts about devices, and the errors of the kernel and of the BPF loader
//! (aya) as live sources report them: one line with every cause, the OS error
//! kind kept, and the capability named when the kernel refused.

pub(crate) mod cutoff;
pub(crate) mod drain;
pub(crate) mod gather;

use crate::capture::SourceError;
use crate::source::Pacing;
use crate::sys::netdev;
use crate::{Setting, SettingError};
use std::error::Error;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// Options of a live source; the defaults are sized for monitoring a busy link.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveOptions {
    /// Bytes kept of each packet.
    pub snaplen: u32,
    /// Put the interface in promiscuous mode while capturing.
    pub promisc: bool,
    /// Open the interface inside this network namespace (a name under
    /// /var/run/netns, or a path like /proc/PID/ns/net).
    pub netns: Option<PathBuf>,
    /// Used by `afpacket:` sources only.
    pub afpacket: AfPacketOptions,
    /// Used by `afxdp:` sources only.
    pub afxdp: AfXdpOptions,
    /// Used by `xdp:` sources only.
    pub xdp: XdpOptions,
    /// The kernel cutoff: entries of the flow map the source's kernel program
    /// consults (a stream layer installs a stream there once it passed its
    /// cutoff, and the kernel then drops its packets before the pool; see
    /// `ebpf/weir_cutoff.h`). 0, the default: no map, no kernel cutoff.
    /// afxdp and afpacket have it; each entry takes about 160 bytes of kernel
    /// memory, checked with the rest before anything is allocated.
    pub kernel_flows: u32,
    /// What stamps packets; `None`: each source's best. afpacket: the
    /// kernel's, per packet (the only choice). afxdp, which gets no kernel
    /// timestamp (weir does not read the driver's RX metadata): the TSC per
    /// packet where it is invariant, else `CLOCK_REALTIME` per batch.
    pub timestamps: Option<crate::clock::Timestamps>,
}

impl Default for LiveOptions {
    fn default() -> Self {
        LiveOptions {
            snaplen: 262_144,
            promisc: true,
            netns: None,
            afpacket: AfPacketOptions::default(),
            afxdp: AfXdpOptions::default(),
            xdp: XdpOptions::default(),
            kernel_flows: 0,
            timestamps: None,
        }
    }
}

/// How AF_PACKET sockets of one capture share the traffic (PACKET_FANOUT modes).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Fanout {
    /// By the kernel's flow hash, which is symmetric: both directions together.
    #[default]
    Hash,
    /// By the CPU that received the packet.
    Cpu,
    /// By the RX queue the packet arrived on (skb queue mapping).
    QueueMapping,
    /// Round robin.
    LoadBalance,
    /// By flow bucket, in the kernel: weir's eBPF fanout program puts each packet
    /// in one of 512 buckets by weir's own symmetric RSS hash (so both directions
    /// of a flow share a bucket, and a bucket holds the same flows as in a trace
    /// split by [`Rss`](crate::Rss)) and hands it to the queue a table gives that
    /// bucket. The table can be changed while capturing, which is how buckets
    /// move between queues (see [`BucketSteering`](crate::source::afpacket::BucketSteering)).
    /// `None` (what `"buckets"` parses to): the capture makes a table of its own,
    /// which nobody else can reach. `Some(id)`: the table of a `BucketSteering`
    /// the caller holds ([`BucketSteering::fanout`](crate::source::afpacket::BucketSteering::fanout)).
    Buckets(Option<SteeringId>),
}

/// Which table a [`Fanout::Buckets`] capture uses: the id of a
/// [`BucketSteering`](crate::source::afpacket::BucketSteering).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SteeringId(pub(crate) u64);

impl std::str::FromStr for Fanout {
    type Err = SettingError;

    fn from_str(s: &str) -> Result<Self, SettingError> {
        match s {
            "hash" => Ok(Fanout::Hash),
            "cpu" => Ok(Fanout::Cpu),
            "qm" => Ok(Fanout::QueueMapping),
            "lb" => Ok(Fanout::LoadBalance),
            "buckets" | "ebpf" => Ok(Fanout::Buckets(None)),
            _ => Err(SettingError::new(Setting::Fanout, format!("{s:?}: expected hash, cpu, qm, lb or buckets"))),
        }
    }
}

/// The name [`FromStr`](std::str::FromStr) takes; a caller's table is not shown.
impl std::fmt::Display for Fanout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Fanout::Hash => "hash",
            Fanout::Cpu => "cpu",
            Fanout::QueueMapping => "qm",
            Fanout::LoadBalance => "lb",
            Fanout::Buckets(_) => "buckets",
        })
    }
}

/// Live interfaces deliver packets as they come: pacing is for trace files.
pub(crate) fn refuse_pacing(pacing: Pacing) -> Result<(), SettingError> {
    if pacing.is_paced() {
        return Err(SettingError::new(Setting::Pacing, "only trace files can be paced, not live interfaces"));
    }
    Ok(())
}

/// AF_PACKET (TPACKET_V3) ring and fanout.
#[derive(Clone, Debug, PartialEq)]
pub struct AfPacketOptions {
    /// Bytes per ring block (a power of two, a multiple of the page size).
    pub block_bytes: usize,
    /// Blocks per queue's ring.
    pub block_count: usize,
    /// The kernel hands a block over when it is full or this old.
    pub block_timeout: Duration,
    /// How the group's sockets share the traffic.
    pub fanout: Fanout,
    /// PACKET_FANOUT_FLAG_ROLLOVER: a full socket's packets go to the next one.
    pub rollover: bool,
}

impl Default for AfPacketOptions {
    fn default() -> Self {
        // 64 MiB per queue: 32 times libpcap's default 2 MiB, so bursts of tens of
        // thousands of full-size packets fit before the kernel drops. The block
        // timeout decides how much of that a stalled application can use: the
        // kernel retires a block when it is full *or* this old, so with 64 blocks
        // the ring holds at most 64 timeouts of traffic. At 10 ms a paused reader
        // lost bursts of 200,000 small packets that tcpdump (1 s timeout) kept in
        // the same memory (bench/live.py); 100 ms lets blocks fill by size above
        // about 70,000 small packets/s per queue, at the price of up to 100 ms
        // before a quiet queue's packets are seen.
        AfPacketOptions {
            block_bytes: 1 << 20,
            block_count: 64,
            block_timeout: Duration::from_millis(100),
            fanout: Fanout::Hash,
            rollover: false,
        }
    }
}

/// Whether AF_XDP runs zero-copy.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum ZeroCopy {
    /// Zero-copy where the driver supports it, copy mode otherwise.
    #[default]
    Auto,
    /// Zero-copy, or opening fails on a driver without it.
    On,
    /// Copy mode: the kernel copies each packet into the UMEM.
    Off,
}

/// AF_XDP sockets and UMEM.
#[derive(Clone, Debug, PartialEq)]
pub struct AfXdpOptions {
    /// UMEM frame size: 2048 or 4096.
    pub frame_size: usize,
    /// Entries of the RX ring (a power of two), the fill ring twice as many.
    /// `None` (the default): both hold the whole pool, its R×M frames rounded
    /// up to a power of two, so the kernel can fill every frame of the pool
    /// while weir's threads do not run (a paused or descheduled reader loses
    /// nothing until the pool is full), as a TPACKET ring of the pool's size would.
    pub ring_size: Option<u32>,
    /// Whether the UMEM is the NIC's receive memory.
    pub zero_copy: ZeroCopy,
    /// XDP_USE_NEED_WAKEUP: the kernel asks for a wake-up only when it needs one.
    pub need_wakeup: bool,
    /// Replace an XDP program on the interface that weir did not load.
    pub replace_foreign: bool,
    /// Capture an interface that has an IP address. AF_XDP takes the packets
    /// it captures from the host's stack (what the filter rejects stays), so
    /// an interface the host uses is refused unless this is set.
    pub take_host_traffic: bool,
}

impl Default for AfXdpOptions {
    fn default() -> Self {
        AfXdpOptions {
            frame_size: 2048,
            ring_size: None,
            zero_copy: ZeroCopy::Auto,
            need_wakeup: true,
            replace_foreign: false,
            take_host_traffic: false,
        }
    }
}

/// Options of `xdp:` capture (weir's XDP program copying packets into a BPF
/// ring buffer).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct XdpOptions {
    /// Bytes of the ring buffer, shared by all the captured queues: a power
    /// of two, at least a page. `None` (the default): 64 MiB per queue, as
    /// afpacket's default ring, rounded up to a power of two.
    pub ring_bytes: Option<u64>,
    /// Replace an XDP program on the interface that weir did not load.
    pub replace_foreign: bool,
    /// Drop the captured packets after copying them, so that the host's
    /// stack spends nothing on them. By default they go on to the host.
    pub take_host_traffic: bool,
    /// How the capture thread spreads packets over the queues.
    pub spread: XdpSpread,
}

/// How an `xdp:` source's capture thread, which reads every captured RX
/// queue's packets from one ring, spreads them over the capture's queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum XdpSpread {
    /// By weir's own symmetric RSS hash ([`Rss`](crate::Rss)), whatever RX queue
    /// the NIC put a packet on: both directions of a flow go to one queue
    /// (a NIC's RSS key need not be symmetric), the queues share the work
    /// even when the NIC piles every flow on one RX queue, and a trace split
    /// over as many queues puts every flow where this does. Rebalancing moves
    /// its buckets.
    #[default]
    Hash,
    /// By the RX queue the NIC put the packet on, as afxdp's sockets are.
    Queue,
}

impl std::str::FromStr for XdpSpread {
    type Err = SettingError;

    fn from_str(s: &str) -> Result<Self, SettingError> {
        match s {
            "hash" => Ok(XdpSpread::Hash),
            "queue" => Ok(XdpSpread::Queue),
            _ => Err(SettingError::new(Setting::XdpSpread, format!("{s:?}: expected hash or queue"))),
        }
    }
}

impl std::fmt::Display for XdpSpread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            XdpSpread::Hash => "hash",
            XdpSpread::Queue => "queue",
        })
    }
}

impl LiveOptions {
    /// Run `f` in the namespace these options name (or where we are).
    pub(crate) fn in_netns<T>(&self, f: impl FnOnce() -> Result<T, SourceError>) -> Result<T, SourceError> {
        match &self.netns {
            None => f(),
            Some(ns) => netdev::in_netns(ns, f).map_err(|source| SourceError::Io { what: "network namespace".into(), error: source })?,
        }
    }
}

/// The queues of `iface` a capture takes: those asked for, checked against
/// the RX queues it has, or all of them.
pub(crate) fn rx_queue_range(iface: &str, asked: Option<crate::source::QueueRange>) -> Result<crate::source::QueueRange, SourceError> {
    let available = rx_queues(iface)?;
    match asked {
        Some(q) if q.last() >= available => Err(SourceError::Invalid(format!(
            "{iface} has {available} RX queue{}: there is no queue {}",
            if available == 1 { "" } else { "s" },
            q.last()
        ))),
        Some(q) => Ok(q),
        None => crate::source::QueueRange::new(0, available - 1).map_err(|e| SourceError::Invalid(format!("{iface}: {e}"))),
    }
}

/// The RX queues of `iface`, asked of the kernel in the calling thread's namespace.
pub(crate) fn rx_queues(iface: &str) -> Result<u16, SourceError> {
    netdev::rx_queue_count(iface).map_err(|source| SourceError::Io { what: iface.to_string(), error: source })
}

/// The index of `iface` in the calling thread's namespace.
pub(crate) fn ifindex(iface: &str) -> Result<u32, SourceError> {
    netdev::ifindex(iface).map_err(|error| match error.raw_os_error() {
        Some(libc::ENODEV) => SourceError::NoSuchDevice { iface: iface.to_string() },
        _ if error.kind() == std::io::ErrorKind::InvalidInput => SourceError::Invalid(error.to_string()),
        _ => SourceError::Io { what: format!("looking up interface {iface:?}"), error },
    })
}

/// What a kernel socket filter would know of every packet arriving on
/// `iface` (index `ifindex`), for a capture that has no socket filter (XDP,
/// AF_XDP) to [bind](crate::filter::Filter::bind) its filter to; in the
/// calling thread's namespace.
pub(crate) fn link_meta(iface: &str, ifindex: u32) -> Result<crate::filter::LinkMeta, SourceError> {
    let address = netdev::hw_address(iface).map_err(|error| SourceError::Io { what: format!("{iface}: its hardware address"), error })?;
    Ok(crate::filter::LinkMeta { ifindex, address })
}

/// The first OS error code in `e`'s chain of causes.
pub(crate) fn os_error(e: &(dyn Error + 'static)) -> Option<i32> {
    std::iter::successors(Some(e), |e| (*e).source()).find_map(|e| e.downcast_ref::<io::Error>().and_then(io::Error::raw_os_error))
}

/// `e` and its causes, as one line; a cause whose text its parent already
/// includes is left out.
pub(crate) fn chain(e: &(dyn Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    for text in std::iter::successors(Some(e), |e| (*e).source()).map(ToString::to_string) {
        if !parts.last().is_some_and(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ")
}

/// `e` as an `io::Error` of the kind its OS error has, with every cause in its text.
pub(crate) fn io_error(e: &(dyn Error + 'static)) -> io::Error {
    let kind = os_error(e).map_or(io::ErrorKind::Other, |c| io::Error::from_raw_os_error(c).kind());
    io::Error::new(kind, chain(e))
}

/// An error from the BPF loader, with the capability it needs when it was refused.
pub(crate) fn bpf_error(what: &str, e: &(dyn Error + 'static), needs: &str) -> SourceError {
    denied(what.to_string(), io_error(e), needs)
}

/// An OS error; when it is a refusal (EPERM, EACCES), say which capability is missing.
pub(crate) fn denied(what: String, e: io::Error, needs: &str) -> SourceError {
    if e.kind() == io::ErrorKind::PermissionDenied {
        SourceError::Io { what: format!("{what}: needs {needs} (run as root, or grant it with setcap)"), error: e }
    } else {
        SourceError::Io { what, error: e }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fanout_modes_parse_and_print_by_name() {
        for name in ["hash", "cpu", "qm", "lb", "buckets"] {
            let mode: Fanout = name.parse().unwrap();
            assert_eq!(mode.to_string(), name);
        }
        assert_eq!("ebpf".parse::<Fanout>(), Ok(Fanout::Buckets(None)), "ebpf names the same mode");
        let err = "rr".parse::<Fanout>().unwrap_err();
        assert_eq!(err.setting, crate::Setting::Fanout);
        assert!(err.problem.contains("expected hash, cpu, qm, lb or buckets"), "{err}");
    }

    #[test]
    fn xdp_spreads_parse_and_print_by_name_and_hash_is_the_default() {
        for name in ["hash", "queue"] {
            assert_eq!(name.parse::<XdpSpread>().unwrap().to_string(), name);
        }
        assert_eq!(XdpOptions::default().spread, XdpSpread::Hash);
        let err = "qm".parse::<XdpSpread>().unwrap_err();
        assert_eq!(err.setting, crate::Setting::XdpSpread);
        assert_eq!(err.to_string(), "xdp spread: \"qm\": expected hash or queue");
    }
}

//! Inline forwarding (`weir forward IN OUT`): packets received on one
//! interface are judged and sent out of another (or back out of the same one),
//! as a bump in the wire.
//!
//! ```text
//!  IN queue q ──► RX ──► filter ──► the application's verdict ──pass──► TX on OUT queue q
//!                  ▲        │reject          │drop                          │
//!                  │        ▼                ▼                              ▼
//!                  └──────────── free frame ◄──────────────────── completion (afxdp)
//! ```
//!
//! The contract:
//! - A **lane** is one direction of one queue: RX on `IN@q`, TX on `OUT@q`.
//!   Each lane runs on a thread of its own and owns every ring it touches, so
//!   no lane takes a lock or shares a frame. With `bidirectional`, each queue
//!   has a second lane from OUT to IN. IN must not have more RX queues than
//!   OUT has queues.
//! - **afxdp** ([`Backend::AfXdp`], `xsk.rs`): every socket shares one UMEM
//!   (XDP_SHARED_UMEM). A received frame goes onto the TX ring by its UMEM
//!   address, with no copy in weir, and back onto its lane's fill ring once
//!   the kernel returns it on the completion ring. weir's XDP program
//!   (`ebpf/weir_xdp.c`) steers IN's queues to the RX sockets (and OUT's, when
//!   bidirectional). The TX socket is woken with sendto only when the kernel
//!   asks (XDP_USE_NEED_WAKEUP on the TX ring).
//! - **afpacket** ([`Backend::AfPacket`], `packet.rs`): a TPACKET_V3 RX ring on
//!   IN, packets sent out of OUT through a PACKET_TX_RING ([`crate::tx`]): one
//!   copy, from the RX block into the TX slot. The RX socket ignores outgoing
//!   packets, so what a lane sends out of an interface never comes back to it.
//! - **xdp** ([`Backend::Xdp`], `kernel.rs`): no packet reaches weir. weir's
//!   forwarding program (`ebpf/weir_fwd.c`) runs the filter, translated to
//!   eBPF, on IN and redirects what it passes to OUT through a device map;
//!   the kernel's XDP tracepoints count what OUT took and gave back. A lane is
//!   a direction over all queues, and its thread only reads counters. No
//!   judge that sees packets can run, and a filter the kernel cannot run is
//!   refused, as is an input without native XDP.
//! - The **filter** (libpcap's language) runs in user space on each received
//!   packet; what it rejects is dropped by policy (`filtered`). What it passes
//!   goes to the application's [`Judge`], whose [`Verdict::Drop`] is counted in
//!   `dropped`. What both pass is sent.
//! - **Counting**, per lane ([`LaneStats`]): every packet taken off the RX ring
//!   is `received` and then exactly one of `forwarded` (the device took it),
//!   `filtered`, `dropped`, `tx_failed` (OUT cannot carry it: longer than its
//!   MTU plus 14 bytes, 18 with a VLAN tag, or shorter than an Ethernet header,
//!   on every backend; or the kernel or device gave up on it) or
//!   `in_flight` (handed to TX, not yet completed):
//!   `received = forwarded + filtered + dropped + tx_failed + in_flight`, checked
//!   in debug builds after every batch. `kernel_drops` are packets the kernel
//!   lost before the RX ring (no free frame or ring slot), outside `received`.
//! - **Back-pressure**: a lane takes no more packets off its RX ring than its
//!   TX ring has room for, so a slow OUT fills the RX ring and the kernel counts
//!   the excess in `kernel_drops`; nothing is lost uncounted.
//! - **Stopping**: [`StopHandle::stop`], the packet limit or the time limit;
//!   each lane then stops receiving, waits (at most [`DRAIN`]) for what it sent
//!   to complete, and reports. An error on one lane (the interface went down or
//!   away) stops the others.
//! - Interfaces are checked before anything is attached: they exist, are up,
//!   and their MTU fits a frame (afxdp: the UMEM frame less the kernel's
//!   headroom). IN and OUT may be the same interface, except with
//!   `bidirectional`.

mod kernel;
mod packet;
mod xsk;

use crate::capture::SourceError;
use crate::filter::{Filter, FilterEngine};
use crate::source::ZeroCopy;
use crate::{LinkType, Packet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a stopping lane waits for the frames it handed to TX.
pub const DRAIN: Duration = Duration::from_secs(1);
/// Packets a lane takes off its RX ring at once.
const BATCH: u32 = 64;
/// Longest sleep without looking at the stop flag.
const IDLE_WAIT: Duration = Duration::from_millis(20);

/// What the application decides for one packet.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Send it on.
    Pass,
    /// Drop it (counted in [`LaneStats::dropped`]).
    Drop,
}

/// The application of a forwarder: one per lane, called on the lane's thread
/// for every packet the filter passed, before it is sent. The packet's bytes
/// are only borrowed, and are not to be changed.
pub trait Judge: Send + 'static {
    /// The verdict on one packet.
    fn verdict(&mut self, packet: &Packet<'_>) -> Verdict;

    /// Whether this judge needs to see packets at all. One that passes every
    /// packet says no, and may then run where no packet reaches weir
    /// ([`Backend::Xdp`]).
    fn sees_packets(&self) -> bool {
        true
    }
}

impl<F: FnMut(&Packet<'_>) -> Verdict + Send + 'static> Judge for F {
    fn verdict(&mut self, packet: &Packet<'_>) -> Verdict {
        self(packet)
    }
}

/// Passes every packet: a forwarder decided by its filter alone.
#[derive(Copy, Clone, Debug, Default)]
pub struct PassAll;

impl Judge for PassAll {
    #[inline]
    fn verdict(&mut self, _: &Packet<'_>) -> Verdict {
        Verdict::Pass
    }

    fn sees_packets(&self) -> bool {
        false
    }
}

/// How packets are received and sent.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// AF_XDP sockets over one shared UMEM: no copy in weir.
    AfXdp,
    /// A TPACKET_V3 RX ring and a PACKET_TX_RING: one copy.
    AfPacket,
    /// In the kernel: weir's XDP program runs the filter and redirects what
    /// it passes to the other interface; no packet reaches weir, so no
    /// application verdict (only [`PassAll`]).
    Xdp,
}

impl std::str::FromStr for Backend {
    type Err = ParseBackendError;
    fn from_str(s: &str) -> Result<Backend, ParseBackendError> {
        match s {
            "afxdp" => Ok(Backend::AfXdp),
            "afpacket" => Ok(Backend::AfPacket),
            "xdp" => Ok(Backend::Xdp),
            _ => Err(ParseBackendError { given: s.to_owned() }),
        }
    }
}

/// A name that is not a [`Backend`]'s (`afxdp`, `afpacket` or `xdp`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{given:?}: afxdp, afpacket or xdp")]
pub struct ParseBackendError {
    given: String,
}

impl ParseBackendError {
    /// The name as given.
    pub fn given(&self) -> &str {
        &self.given
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::AfXdp => "afxdp",
            Backend::AfPacket => "afpacket",
            Backend::Xdp => "xdp",
        })
    }
}

/// What to forward, and how.
#[derive(Clone, Debug)]
pub struct ForwardOptions {
    /// The interface packets come in on.
    pub input: String,
    /// The interface they go out of (may be `input`).
    pub output: String,
    /// Also forward from `output` to `input`.
    pub bidirectional: bool,
    /// The backend.
    pub backend: Backend,
    /// A libpcap filter expression: what it rejects is not forwarded.
    pub filter: Option<String>,
    /// What runs the filter.
    pub filter_engine: FilterEngine,
    /// Work inside this network namespace (a name under /var/run/netns, or a path).
    pub netns: Option<PathBuf>,
    /// Stop after this many packets received (all lanes together).
    pub packet_limit: Option<u64>,
    /// Stop after this long.
    pub time_limit: Option<Duration>,
    /// Put the receiving interfaces in promiscuous mode.
    pub promisc: bool,
    /// afxdp: bytes per UMEM frame, 2048 or 4096.
    pub frame_size: usize,
    /// afxdp: frames per lane (a power of two); every ring of a lane has as many
    /// entries, so only running out of frames stops the kernel.
    /// afpacket: slots of the TX ring, and the RX ring's blocks hold as many packets.
    pub frames: usize,
    /// afxdp: zero-copy mode where the driver has it.
    pub zero_copy: ZeroCopy,
    /// afxdp: replace an XDP program weir did not load.
    pub replace_foreign: bool,
    /// afxdp: forward from an interface that has an IP address. What weir's
    /// XDP program redirects never reaches the host's stack, so such an
    /// interface is refused unless this is set (as for capture).
    pub take_host_traffic: bool,
}

impl Default for ForwardOptions {
    fn default() -> Self {
        ForwardOptions {
            input: String::new(),
            output: String::new(),
            bidirectional: false,
            backend: Backend::AfXdp,
            filter: None,
            filter_engine: FilterEngine::default(),
            netns: None,
            packet_limit: None,
            time_limit: None,
            promisc: true,
            frame_size: 2048,
            frames: 4096,
            zero_copy: ZeroCopy::Auto,
            replace_foreign: false,
            take_host_traffic: false,
        }
    }
}

/// One lane's direction.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Direction {
    /// From the input interface to the output one.
    InToOut,
    /// Back, with `bidirectional`.
    OutToIn,
}

/// The counters of one lane; see the module's contract for what each counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaneStats {
    /// `IN@q -> OUT@q`.
    pub lane: String,
    /// Packets taken off the RX ring.
    pub received: u64,
    /// Bytes of those packets.
    pub received_bytes: u64,
    /// Packets the device took for sending.
    pub forwarded: u64,
    /// Bytes of those packets.
    pub forwarded_bytes: u64,
    /// Packets the filter rejected (dropped by policy).
    pub filtered: u64,
    /// Packets the application's verdict dropped.
    pub dropped: u64,
    /// Packets the kernel or the device gave up sending.
    pub tx_failed: u64,
    /// Packets handed to TX and not yet completed.
    pub in_flight: u64,
    /// Packets the kernel lost before the RX ring.
    pub kernel_drops: u64,
}

impl LaneStats {
    /// Whether the counts add up: `received = forwarded + filtered + dropped + tx_failed + in_flight`.
    pub fn balanced(&self) -> bool {
        self.received == self.forwarded + self.filtered + self.dropped + self.tx_failed + self.in_flight
    }

    /// The sum of several lanes.
    pub fn sum<'a>(name: &str, lanes: impl IntoIterator<Item = &'a LaneStats>) -> LaneStats {
        lanes.into_iter().fold(LaneStats { lane: name.into(), ..LaneStats::default() }, |mut t, l| {
            t.received += l.received;
            t.received_bytes += l.received_bytes;
            t.forwarded += l.forwarded;
            t.forwarded_bytes += l.forwarded_bytes;
            t.filtered += l.filtered;
            t.dropped += l.dropped;
            t.tx_failed += l.tx_failed;
            t.in_flight += l.in_flight;
            t.kernel_drops += l.kernel_drops;
            t
        })
    }
}

/// A lane's counters, written by its thread only and readable at any time.
#[derive(Default)]
struct Counters {
    received: AtomicU64,
    received_bytes: AtomicU64,
    forwarded: AtomicU64,
    forwarded_bytes: AtomicU64,
    filtered: AtomicU64,
    dropped: AtomicU64,
    tx_failed: AtomicU64,
    in_flight: AtomicU64,
    kernel_drops: AtomicU64,
}

impl Counters {
    fn publish(&self, s: &LaneStats) {
        // Relaxed: display values, each written by one thread; the final
        // figures are taken after the thread is joined.
        let set = |a: &AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
        set(&self.received, s.received);
        set(&self.received_bytes, s.received_bytes);
        set(&self.forwarded, s.forwarded);
        set(&self.forwarded_bytes, s.forwarded_bytes);
        set(&self.filtered, s.filtered);
        set(&self.dropped, s.dropped);
        set(&self.tx_failed, s.tx_failed);
        set(&self.in_flight, s.in_flight);
        set(&self.kernel_drops, s.kernel_drops);
    }

    fn read(&self, lane: &str) -> LaneStats {
        // Relaxed: as in `publish`.
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LaneStats {
            lane: lane.into(),
            received: get(&self.received),
            received_bytes: get(&self.received_bytes),
            forwarded: get(&self.forwarded),
            forwarded_bytes: get(&self.forwarded_bytes),
            filtered: get(&self.filtered),
            dropped: get(&self.dropped),
            tx_failed: get(&self.tx_failed),
            in_flight: get(&self.in_flight),
            kernel_drops: get(&self.kernel_drops),
        }
    }
}

/// What every lane shares: the stop flag, the packet budget, the first error.
struct Control {
    stop: AtomicBool,
    /// Packets still to receive, when limited.
    budget: Option<AtomicU64>,
    error: Mutex<Option<SourceError>>,
    deadline: Option<Instant>,
}

impl Control {
    fn stopping(&self) -> bool {
        // Relaxed: a flag polled between batches; nothing is published through it.
        self.stop.load(Ordering::Relaxed) || self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Take up to `want` packets of the budget; how many may be received.
    fn take(&self, want: u32) -> u32 {
        let Some(b) = &self.budget else { return want };
        // Relaxed: the budget is a counter on its own; fetch_update makes each take exact.
        let before = b.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| Some(left.saturating_sub(u64::from(want)))).unwrap_or(0);
        let got = before.min(u64::from(want)) as u32;
        if u64::from(want) >= before {
            self.stop.store(true, Ordering::Relaxed);
        }
        got
    }

    fn fail(&self, e: SourceError) {
        let mut first = self.error.lock().unwrap_or_else(|p| p.into_inner());
        first.get_or_insert(e);
        // Relaxed: as in `stopping`.
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Stops a running forwarder from any thread.
#[derive(Clone)]
pub struct StopHandle(Arc<Control>);

impl StopHandle {
    /// Ask every lane to stop; they drain and end.
    pub fn stop(&self) {
        // Relaxed: as in `Control::stopping`.
        self.0.stop.store(true, Ordering::Relaxed);
    }
}

/// What a backend opens: its lanes, each with its direction and queue, and
/// notes for the user.
type Opened = (Vec<(Direction, u16, Box<dyn LaneWork>)>, Vec<String>);

/// The work of one lane, once its sockets are open: run until stopped.
trait LaneWork: Send {
    fn name(&self) -> String;
    fn run(
        self: Box<Self>,
        judge: &mut dyn Judge,
        filter: Option<&Filter>,
        ctl: &Control,
        counters: &Counters,
    ) -> Result<LaneStats, SourceError>;
}

/// `filter` bound to the input interface and to the output one, in the
/// calling thread's namespace (see [`Filter::bind`]): `inbound` and
/// `ifindex` then mean what they would in a socket filter on that interface.
/// The xdp backend runs one filter in both directions, so a filter that asks
/// which interface or packet type is refused there with `bidirectional`.
fn bind_each_way(filter: Option<&Filter>, opts: &ForwardOptions) -> Result<[Option<Filter>; 2], SourceError> {
    let Some(filter) = filter else { return Ok([None, None]) };
    let bind = |iface: &str| -> Result<Filter, SourceError> {
        let link = crate::source::live::link_meta(iface, crate::source::ifindex(iface)?)?;
        filter.bind(link).map_err(|e| SourceError::Invalid(e.to_string()))
    };
    if opts.bidirectional && opts.backend == Backend::Xdp && filter.asks_link() {
        return Err(SourceError::Invalid(format!(
            "the filter {:?} asks which interface a packet came in on or its packet type (inbound, outbound, \
             ifindex), and the xdp backend runs one filter for both directions of --bidirectional: use afxdp or \
             afpacket, which bind it to each input",
            opts.filter.as_deref().unwrap_or("")
        )));
    }
    let back = if opts.bidirectional { Some(bind(&opts.output)?) } else { None };
    Ok([Some(bind(&opts.input)?), back])
}

/// Interfaces opened for forwarding, nothing running yet.
pub struct Forwarder {
    lanes: Vec<(Direction, u16, Box<dyn LaneWork>)>,
    /// The filter bound to the input interface, then to the output one (for
    /// the way back): every packet a lane receives came in on its input.
    filters: [Option<Filter>; 2],
    opts: ForwardOptions,
    notes: Vec<String>,
}

impl Forwarder {
    /// Check the interfaces, compile the filter, open the sockets (in
    /// `opts.netns`) and attach what the backend needs. Nothing is received
    /// before [`start`](Self::start).
    pub fn open(opts: ForwardOptions) -> Result<Forwarder, SourceError> {
        if opts.bidirectional && opts.input == opts.output {
            return Err(SourceError::Invalid(format!(
                "--bidirectional forwards between two interfaces; {} both ways is the same as forwarding it back out \
                 of itself (leave out --bidirectional)",
                opts.input
            )));
        }
        let filter = match &opts.filter {
            Some(e) => Some(
                Filter::compile(e, LinkType::ETHERNET, crate::pool::MAX_CAPLEN as u32)
                    .map_err(|e| SourceError::Invalid(e.to_string()))?
                    .with_engine(opts.filter_engine),
            ),
            None => None,
        };
        let mut notes = Vec::new();
        if let Some(why) = filter.as_ref().and_then(Filter::jit_unavailable) {
            notes.push(format!("the filter runs on the interpreter: {why}"));
        }
        let live = crate::source::LiveOptions { netns: opts.netns.clone(), ..crate::source::LiveOptions::default() };
        let (lanes, more, filters) = live.in_netns(|| {
            let filters = bind_each_way(filter.as_ref(), &opts)?;
            let (lanes, more) = match opts.backend {
                Backend::AfXdp => xsk::open(&opts),
                Backend::AfPacket => packet::open(&opts),
                Backend::Xdp => kernel::open(&opts, filters[0].as_ref()),
            }?;
            Ok((lanes, more, filters))
        })?;
        // No backend has a kernel socket filter's metadata: what the binding
        // did not give stays unknown.
        notes.extend(filters[0].as_ref().zip(opts.filter.as_deref()).and_then(|(f, e)| f.ancillary_note(e)));
        notes.extend(more);
        Ok(Forwarder { lanes, filters, opts, notes })
    }

    /// What opening found worth telling the user (a replaced XDP program, copy mode).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The lanes, by name (`IN@q -> OUT@q`).
    pub fn lanes(&self) -> Vec<String> {
        self.lanes.iter().map(|(_, _, l)| l.name()).collect()
    }

    /// Start one thread per lane, each with the judge `make` gives for its
    /// direction and queue.
    pub fn start<J: Judge>(self, mut make: impl FnMut(Direction, u16) -> J) -> Result<Running, SourceError> {
        let ctl = Arc::new(Control {
            stop: AtomicBool::new(false),
            budget: self.opts.packet_limit.map(AtomicU64::new),
            error: Mutex::new(None),
            deadline: self.opts.time_limit.map(|d| Instant::now() + d),
        });
        let filters = self.filters.map(|f| f.map(Arc::new));
        let started = Instant::now();
        let judges: Vec<J> = self.lanes.iter().map(|(dir, q, _)| make(*dir, *q)).collect();
        if self.opts.backend == Backend::Xdp && judges.iter().any(Judge::sees_packets) {
            return Err(SourceError::Invalid(
                "the xdp backend forwards inside the kernel, where no application verdict can run: use afxdp or \
                 afpacket for a judge that sees packets"
                    .into(),
            ));
        }
        let mut lanes = Vec::with_capacity(self.lanes.len());
        for ((dir, q, work), mut judge) in self.lanes.into_iter().zip(judges) {
            let name = work.name();
            let counters = Arc::new(Counters::default());
            let filter = &filters[usize::from(dir == Direction::OutToIn)];
            let (ctl2, counters2, filter2) = (Arc::clone(&ctl), Arc::clone(&counters), filter.clone());
            let thread = std::thread::Builder::new()
                .name(format!("weir-fwd-{q}{}", if dir == Direction::InToOut { "" } else { "r" }))
                .spawn(move || {
                    let r = work.run(&mut judge, filter2.as_deref(), &ctl2, &counters2);
                    if let Err(e) = &r {
                        ctl2.fail(SourceError::Invalid(e.to_string()));
                    }
                    r
                })
                .map_err(|e| SourceError::Io { what: "starting a forwarding thread".into(), error: e })?;
            lanes.push(RunningLane { name, counters, thread });
        }
        Ok(Running { ctl, lanes, started })
    }
}

struct RunningLane {
    name: String,
    counters: Arc<Counters>,
    thread: JoinHandle<Result<LaneStats, SourceError>>,
}

/// Every lane's counters, readable from any thread ([`Running::watch`]):
/// what an exporter serves (`weir forward --metrics`). A lane publishes its
/// counters every 10 ms while busy and at every idle wait, so a read lags by
/// at most that.
#[derive(Clone)]
pub struct LaneWatch(Vec<(String, Arc<Counters>)>);

impl LaneWatch {
    /// Every lane's counters now, in lane order.
    pub fn stats(&self) -> Vec<LaneStats> {
        self.0.iter().map(|(name, c)| c.read(name)).collect()
    }
}

/// A forwarder at work.
pub struct Running {
    ctl: Arc<Control>,
    lanes: Vec<RunningLane>,
    started: Instant,
}

/// How a forwarder ended.
#[derive(Debug)]
pub struct ForwardReport {
    /// Each lane's final counters.
    pub lanes: Vec<LaneStats>,
    /// How long it ran.
    pub elapsed: Duration,
    /// The first error, if a lane failed.
    pub error: Option<SourceError>,
}

impl Running {
    /// A handle that stops it.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(Arc::clone(&self.ctl))
    }

    /// Counters as they stand.
    pub fn stats(&self) -> Vec<LaneStats> {
        self.lanes.iter().map(|l| l.counters.read(&l.name)).collect()
    }

    /// A handle that reads the counters from any thread, while the lanes run
    /// and after (each lane publishes its final counts as it ends).
    pub fn watch(&self) -> LaneWatch {
        LaneWatch(self.lanes.iter().map(|l| (l.name.clone(), Arc::clone(&l.counters))).collect())
    }

    /// Time since it started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Whether every lane has ended (stopped, limited or failed).
    pub fn finished(&self) -> bool {
        self.lanes.iter().all(|l| l.thread.is_finished())
    }

    /// Wait for every lane to end, and report.
    pub fn join(self) -> ForwardReport {
        let mut lanes = Vec::new();
        let mut error = None;
        for l in self.lanes {
            match l.thread.join() {
                Ok(Ok(s)) => lanes.push(s),
                Ok(Err(e)) => {
                    lanes.push(l.counters.read(&l.name));
                    error.get_or_insert(e);
                }
                Err(_) => {
                    lanes.push(l.counters.read(&l.name));
                    error.get_or_insert(SourceError::Invalid(format!("{}: the application's judge panicked", l.name)));
                }
            }
        }
        let first = self.ctl.error.lock().unwrap_or_else(|p| p.into_inner()).take();
        ForwardReport { lanes, elapsed: self.started.elapsed(), error: error.or(first) }
    }
}

/// Checked facts about an interface: it exists, is up, and frames of its MTU
/// fit in `room` bytes. Returns its index and MTU.
fn check_interface(iface: &str, room: usize, what: &str) -> Result<(u32, u32), SourceError> {
    let dev = crate::tx::device_facts(iface).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::InvalidInput => SourceError::NoSuchDevice { iface: iface.into() },
        _ if crate::privileges::is_permission_error(&e) => SourceError::Io {
            what: format!("{iface}: {}", crate::privileges::missing_capability(crate::privileges::Operation::PacketSocket)),
            error: e,
        },
        _ => SourceError::Io { what: format!("{iface}: asking its flags and MTU"), error: e },
    })?;
    if !dev.up {
        return Err(SourceError::Invalid(format!("interface {iface} is down (bring it up with: ip link set {iface} up)")));
    }
    // An Ethernet header and one VLAN tag on top of the MTU.
    let longest = dev.mtu as usize + 18;
    if longest > room {
        return Err(SourceError::Invalid(format!(
            "{iface}: its MTU {} (frames up to {longest} bytes with a VLAN tag) does not fit {what} ({room} bytes); \
             lower the MTU (ip link set {iface} mtu {}){}",
            dev.mtu,
            room.saturating_sub(18),
            if what.contains("UMEM") { " or use --frame-size 4096" } else { "" }
        )));
    }
    let index = crate::source::ifindex(iface)?;
    Ok((index, dev.mtu))
}

/// The lanes' queues: every RX queue of `input`, which `output` must have too.
fn queues(opts: &ForwardOptions) -> Result<u16, SourceError> {
    let n = crate::source::rx_queues(&opts.input)?;
    let m = crate::source::rx_queues(&opts.output)?;
    if n > m || (opts.bidirectional && m > n) {
        return Err(SourceError::Invalid(format!(
            "{} has {n} queue(s) and {} has {m}: each queue of one is forwarded to the same queue of the other, \
             so {} (set with: ethtool -L IFACE combined N)",
            opts.input,
            opts.output,
            if opts.bidirectional { "both must have as many" } else { "the output needs at least as many" }
        )));
    }
    Ok(n)
}

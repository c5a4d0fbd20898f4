//! afxdp lanes: AF_XDP sockets over one shared UMEM, a received frame sent by
//! its address.
//!
//! Sockets: one per (interface, queue) that a lane receives on or sends from:
//! `IN@q` with an RX ring (and a TX ring when IN is also OUT, or for the
//! return lane), `OUT@q` with a TX ring (and an RX ring when bidirectional).
//! The first socket registers the UMEM; every other one joins it
//! (XDP_SHARED_UMEM) with fill and completion rings of its own, which the
//! kernel requires of a socket on another interface or queue.
//!
//! A lane owns the RX and fill rings of the socket it receives on and the TX
//! and completion rings of the socket it sends from, and `frames` frames of the
//! UMEM. Each frame is in exactly one place: free (ours), on the fill ring (or
//! the kernel's), on the RX ring, on the TX ring (or being sent), or on the
//! completion ring. The completion ring of a lane's TX socket only ever gives
//! back frames that lane sent, so frames never change lanes.
//!
//! A frame OUT cannot carry (longer than its MTU plus the link header, or
//! shorter than an Ethernet header) is not put on the TX ring: in copy mode
//! the kernel would hand it to the device, which drops it unseen (a veth's
//! peer), and it would count as forwarded. It is `tx_failed`, as the afpacket
//! backend's TX ring refuses it.

use super::{
    check_interface, queues, Control, Counters, Direction, ForwardOptions, Judge, LaneStats, LaneWork, Opened, Verdict, BATCH, DRAIN,
    IDLE_WAIT,
};
use crate::capture::SourceError;
use crate::filter::Filter;
use crate::memory::{Bytes, Plan};
use crate::pool::FrameArena;
use crate::source::afxdp::check_host_addresses;
use crate::source::afxdp::program::XdpProgram;
use crate::source::afxdp::xsk::{bind_error, umem_error};
use crate::source::live::denied;
use crate::source::ZeroCopy;
use crate::sys::netlink::XdpMode;
use crate::sys::packet::Promiscuous;
use crate::sys::xsk::{self as sys, RingKind, XdpDesc, XdpStatistics, XskFd, XDP_PACKET_HEADROOM};
use crate::sys::xsk_ring::{CompletionRing, FillRing, RxRing, TxRing};
use crate::tx::longest_frame;
use crate::{Packet, QueueId};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Ring entries of a socket's rings a lane does not use: the smallest the kernel takes.
const UNUSED_RING: u32 = 1;
/// Most sendto calls per batch while the kernel keeps asking for more (copy
/// mode sends a bounded batch per call).
const MAX_KICKS: u32 = 16;

/// What keeps the lanes' XDP programs attached and interfaces promiscuous
/// until the last lane ends.
struct Attachment {
    _programs: Vec<XdpProgram>,
    _promiscuous: Vec<Promiscuous>,
}

/// One socket being set up, its rings mapped as its lanes need them.
struct Sock {
    fd: Arc<XskFd>,
    rx: Option<RxRing>,
    fill: Option<FillRing>,
    tx: Option<TxRing>,
    comp: Option<CompletionRing>,
}

fn io(what: String, error: std::io::Error) -> SourceError {
    SourceError::Io { what, error }
}

/// Open every socket and lane for `opts`, in the calling thread's namespace.
pub(super) fn open(opts: &ForwardOptions) -> Result<Opened, SourceError> {
    let frames = opts.frames;
    if !frames.is_power_of_two() || frames < 64 {
        return Err(SourceError::Invalid(format!("--frames {frames}: a power of two, at least 64")));
    }
    if opts.frame_size != 2048 && opts.frame_size != 4096 {
        return Err(SourceError::Invalid(format!("--frame-size {}: 2048 or 4096", opts.frame_size)));
    }
    let room = opts.frame_size - XDP_PACKET_HEADROOM;
    let what = format!("a UMEM frame of {} bytes less the kernel's headroom of {XDP_PACKET_HEADROOM}", opts.frame_size);
    let (in_index, in_mtu) = check_interface(&opts.input, room, &what)?;
    let (out_index, out_mtu) = check_interface(&opts.output, room, &what)?;
    let same = in_index == out_index;
    let nq = queues(opts)?;
    let lanes = usize::from(nq) * if opts.bidirectional { 2 } else { 1 };
    let mut plan = Plan::new();
    plan.add(
        format!("AF_XDP UMEM: {frames} frames of {} per lane (--frames), x {lanes} lanes", Bytes(opts.frame_size as u64)),
        (frames * opts.frame_size * lanes) as u64,
    );
    plan.add(format!("AF_XDP rings of {frames} entries, 4 per lane, x {lanes} lanes"), (frames * 48 * lanes) as u64);
    plan.check()?;

    // What an XDP program takes from an interface never reaches the host.
    check_host_addresses(&opts.input, opts.take_host_traffic)?;
    if opts.bidirectional {
        check_host_addresses(&opts.output, opts.take_host_traffic)?;
    }
    let mut notes = Vec::new();
    let native_only = opts.zero_copy == ZeroCopy::On;
    let mut programs = vec![XdpProgram::attach(&opts.input, in_index, opts.replace_foreign, native_only, 0)?];
    if opts.bidirectional {
        programs.push(XdpProgram::attach(&opts.output, out_index, opts.replace_foreign, native_only, 0)?);
    }
    for p in &programs {
        notes.extend(p.notes().iter().cloned());
    }
    let native = programs.iter().all(|p| p.mode() == XdpMode::Drv);
    let mut promiscuous = Vec::new();
    if opts.promisc {
        for index in if opts.bidirectional { vec![in_index, out_index] } else { vec![in_index] } {
            promiscuous
                .push(crate::sys::packet::promiscuous(index).map_err(|e| denied("entering promiscuous mode".into(), e, "CAP_NET_RAW"))?);
        }
    }
    let arena = FrameArena::new(frames * lanes, opts.frame_size).map_err(|e| io("mapping the UMEM".into(), e))?;
    let mode = match (opts.zero_copy, native) {
        (ZeroCopy::On, _) => sys::BIND_ZEROCOPY,
        (ZeroCopy::Off, _) | (ZeroCopy::Auto, false) => sys::BIND_COPY,
        (ZeroCopy::Auto, true) => 0,
    };
    let size = frames as u32;
    let mut first: Option<Arc<XskFd>> = None;
    let mut open_sock = |iface: &str, index: u32, q: u16, rx: bool, tx: bool| -> Result<Sock, SourceError> {
        let at = |what: &str| format!("{iface} queue {q}: {what}");
        let fd = XskFd::new().map_err(|e| denied(at("creating an AF_XDP socket"), e, "CAP_NET_RAW"))?;
        if first.is_none() {
            fd.register_umem(arena.region(), arena.frame_size()).map_err(|e| umem_error(at("registering the UMEM"), e, arena.len()))?;
        }
        let sized = |kind: RingKind, used: bool| fd.set_ring_size(kind, if used { size } else { UNUSED_RING });
        sized(RingKind::Fill, rx).map_err(|e| io(at("sizing the fill ring"), e))?;
        sized(RingKind::Completion, tx).map_err(|e| io(at("sizing the completion ring"), e))?;
        if rx {
            fd.set_ring_size(RingKind::Rx, size).map_err(|e| io(at("sizing the RX ring"), e))?;
        }
        if tx {
            fd.set_ring_size(RingKind::Tx, size).map_err(|e| io(at("sizing the TX ring"), e))?;
        }
        let off = fd.mmap_offsets().map_err(|e| io(at("asking for the ring layout"), e))?;
        let fd = Arc::new(fd);
        let map = |kind: RingKind, desc: u64, entry: usize| fd.map_ring(kind, desc as usize + frames * entry);
        let mut s = Sock { fd: Arc::clone(&fd), rx: None, fill: None, tx: None, comp: None };
        if rx {
            let m = map(RingKind::Rx, off.rx.desc, size_of::<XdpDesc>()).map_err(|e| io(at("mapping the RX ring"), e))?;
            s.rx = Some(RxRing::new(m, &off.rx, size).map_err(|e| io(at("the RX ring"), e))?);
            let m = map(RingKind::Fill, off.fr.desc, 8).map_err(|e| io(at("mapping the fill ring"), e))?;
            s.fill = Some(FillRing::new(m, &off.fr, size).map_err(|e| io(at("the fill ring"), e))?);
        }
        if tx {
            let m = map(RingKind::Tx, off.tx.desc, size_of::<XdpDesc>()).map_err(|e| io(at("mapping the TX ring"), e))?;
            s.tx = Some(TxRing::new(m, &off.tx, size).map_err(|e| io(at("the TX ring"), e))?);
            let m = map(RingKind::Completion, off.cr.desc, 8).map_err(|e| io(at("mapping the completion ring"), e))?;
            s.comp = Some(CompletionRing::new(m, &off.cr, size).map_err(|e| io(at("the completion ring"), e))?);
        }
        let bound = match &first {
            Some(owner) => s.fd.bind_shared(index, u32::from(q), owner.fd()),
            None => s.fd.bind(index, u32::from(q), mode | sys::BIND_NEED_WAKEUP),
        };
        bound.map_err(|e| bind_error(iface, q, opts.zero_copy, e))?;
        first.get_or_insert_with(|| Arc::clone(&s.fd));
        Ok(s)
    };
    let mut built: Vec<(Direction, u16, Lane)> = Vec::with_capacity(lanes);
    let mut ins = Vec::new();
    for q in 0..nq {
        let mut a = open_sock(&opts.input, in_index, q, true, same || opts.bidirectional)?;
        let mut b = match same {
            true => None,
            false => Some(open_sock(&opts.output, out_index, q, opts.bidirectional, true)?),
        };
        let name = |from: &str, to: &str| format!("{from}@{q} -> {to}@{q}");
        let (tx_sock, tx_fd) = match &mut b {
            Some(b) => (&mut b.tx, Arc::clone(&b.fd)),
            None => (&mut a.tx, Arc::clone(&a.fd)),
        };
        let (tx, comp) = (tx_sock.take(), b.as_mut().map_or_else(|| a.comp.take(), |b| b.comp.take()));
        let forth = Lane::new(name(&opts.input, &opts.output), q, out_mtu, Arc::clone(&a.fd), a.rx.take(), a.fill.take(), tx_fd, tx, comp)?;
        built.push((Direction::InToOut, q, forth));
        if let (true, Some(b)) = (opts.bidirectional, &mut b) {
            let back = Lane::new(
                name(&opts.output, &opts.input),
                q,
                in_mtu,
                Arc::clone(&b.fd),
                b.rx.take(),
                b.fill.take(),
                Arc::clone(&a.fd),
                a.tx.take(),
                a.comp.take(),
            )?;
            built.push((Direction::OutToIn, q, back));
            ins.push((1usize, q, Arc::clone(&b.fd)));
        }
        ins.push((0usize, q, Arc::clone(&a.fd)));
    }
    if let Some(fd) = &first {
        if !fd.is_zero_copy().map_err(|e| io("asking for the sockets' mode".into(), e))? {
            notes.push(format!(
                "afxdp runs in copy mode here ({} XDP): the kernel copies each packet into the UMEM and out of it; \
                 weir itself copies nothing",
                programs[0].mode()
            ));
        }
    }
    let fs = opts.frame_size as u64;
    for (i, (_, _, lane)) in built.iter_mut().enumerate() {
        // Frame 0 of the lane last, so it is the first on the fill ring; every
        // free frame is there before the socket receives its first packet.
        lane.free = ((i * frames) as u64..((i + 1) * frames) as u64).rev().map(|f| f * fs).collect();
        lane.frame_mask = !(fs - 1);
        lane.fill.produce(&mut lane.free, lane.frame_mask);
        lane.umem = Some(Arc::clone(&arena));
    }
    for (which, q, fd) in &ins {
        programs[*which].register(*q, fd.fd())?;
    }
    let attachment = Arc::new(Attachment { _programs: programs, _promiscuous: promiscuous });
    let out = built
        .into_iter()
        .map(|(dir, q, mut lane)| {
            lane.attachment = Some(Arc::clone(&attachment));
            (dir, q, Box::new(lane) as Box<dyn LaneWork>)
        })
        .collect();
    Ok((out, notes))
}

/// One direction of one queue.
struct Lane {
    name: String,
    queue: QueueId,
    /// The MTU of the interface the lane sends on.
    mtu: u32,
    /// Rings first: unmapped before the sockets close.
    rx: RxRing,
    fill: FillRing,
    tx: TxRing,
    comp: CompletionRing,
    rx_fd: Arc<XskFd>,
    tx_fd: Arc<XskFd>,
    umem: Option<Arc<FrameArena>>,
    free: Vec<u64>,
    frame_mask: u64,
    /// Last, so the program leaves the interface after the sockets closed.
    attachment: Option<Arc<Attachment>>,
}

impl Lane {
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: String,
        q: u16,
        mtu: u32,
        rx_fd: Arc<XskFd>,
        rx: Option<RxRing>,
        fill: Option<FillRing>,
        tx_fd: Arc<XskFd>,
        tx: Option<TxRing>,
        comp: Option<CompletionRing>,
    ) -> Result<Lane, SourceError> {
        let missing = || SourceError::Invalid(format!("{name}: a ring of the lane was not set up (a bug in weir)"));
        Ok(Lane {
            queue: QueueId(q),
            mtu,
            rx: rx.ok_or_else(missing)?,
            fill: fill.ok_or_else(missing)?,
            tx: tx.ok_or_else(missing)?,
            comp: comp.ok_or_else(missing)?,
            rx_fd,
            tx_fd,
            umem: None,
            free: Vec::new(),
            frame_mask: !0,
            attachment: None,
            name,
        })
    }
}

/// The lane's own counts, besides what the kernel counts.
#[derive(Default)]
struct Tally {
    stats: LaneStats,
    /// Descriptors put on the TX ring.
    submitted: u64,
    /// Addresses taken off the completion ring.
    completed: u64,
    /// Frames the device dropped (sendto's EBUSY, one frame each).
    busy_drops: u64,
    /// Frames that passed but that OUT cannot carry, never put on the TX ring.
    unfit: u64,
    /// What the kernel counted on the sockets, as last read.
    rx_seen: XdpStatistics,
    tx_seen: XdpStatistics,
}

impl Tally {
    /// Bring the derived counters up to date.
    fn settle(&mut self, zero_copy: bool) {
        let s = &mut self.stats;
        let rx = &self.rx_seen;
        // As the capture unit counts them: in copy mode an empty fill ring is in rx_dropped too.
        s.kernel_drops = rx.rx_dropped + rx.rx_ring_full + rx.rx_invalid_descs + if zero_copy { rx.rx_fill_ring_empty_descs } else { 0 };
        // A descriptor the kernel refused never comes back on the completion ring.
        let invalid = self.tx_seen.tx_invalid_descs;
        s.tx_failed = self.busy_drops + invalid + self.unfit;
        s.forwarded = self.completed.saturating_sub(self.busy_drops);
        s.in_flight = self.submitted.saturating_sub(self.completed + invalid);
    }
}

impl LaneWork for Lane {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn run(
        mut self: Box<Self>,
        judge: &mut dyn Judge,
        filter: Option<&Filter>,
        ctl: &Control,
        counters: &Counters,
    ) -> Result<LaneStats, SourceError> {
        let mut t = Tally { stats: LaneStats { lane: self.name.clone(), ..LaneStats::default() }, ..Tally::default() };
        let zero_copy = self.rx_fd.is_zero_copy().unwrap_or(false);
        // Lengths of what is on the TX ring, oldest first, to count bytes at completion.
        let mut lens: std::collections::VecDeque<u32> = std::collections::VecDeque::new();
        let result = self.forward(judge, filter, ctl, counters, &mut t, &mut lens, zero_copy);
        self.drain(&mut t, &mut lens, zero_copy);
        counters.publish(&t.stats);
        result.map(|()| t.stats)
    }
}

impl Lane {
    /// Reclaim completed frames onto the free list and the fill ring.
    #[inline]
    fn recycle(&mut self, t: &mut Tally, lens: &mut std::collections::VecDeque<u32>) {
        let n = self.comp.take(&mut self.free, u32::MAX);
        if n > 0 {
            t.completed += u64::from(n);
            for _ in 0..n {
                t.stats.forwarded_bytes += u64::from(lens.pop_front().unwrap_or(0));
            }
        }
        if self.fill.produce(&mut self.free, self.frame_mask) > 0 && self.fill.needs_wakeup() {
            self.rx_fd.wake_rx();
        }
    }

    /// Ask the kernel to send what the TX ring holds, as long as it asks to be
    /// woken and there is something; counts the device's drops.
    fn kick(&mut self, t: &mut Tally, lens: &mut std::collections::VecDeque<u32>, force: bool) -> Result<(), SourceError> {
        for _ in 0..MAX_KICKS {
            if !(force || self.tx.needs_wakeup()) || self.tx.pending() == 0 {
                return Ok(());
            }
            match self.tx_fd.kick_tx() {
                Ok(false) => return Ok(()),
                // The batch limit, or a full completion ring: take completions, go on.
                Ok(true) => self.recycle(t, lens),
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => t.busy_drops += 1,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => self.recycle(t, lens),
                Err(e) => {
                    let gone = matches!(e.raw_os_error(), Some(libc::ENETDOWN | libc::ENXIO | libc::ENODEV));
                    let what = if gone { "the interface went down or away" } else { "sending" };
                    return Err(io(format!("{}: {what}", self.name), e));
                }
            }
        }
        Ok(())
    }

    fn read_stats(&mut self, t: &mut Tally, zero_copy: bool) -> Result<(), SourceError> {
        t.rx_seen = self.rx_fd.statistics().map_err(|e| io(format!("{}: reading AF_XDP statistics", self.name), e))?;
        t.tx_seen = self.tx_fd.statistics().map_err(|e| io(format!("{}: reading AF_XDP statistics", self.name), e))?;
        t.settle(zero_copy);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn forward(
        &mut self,
        judge: &mut dyn Judge,
        filter: Option<&Filter>,
        ctl: &Control,
        counters: &Counters,
        t: &mut Tally,
        lens: &mut std::collections::VecDeque<u32>,
        zero_copy: bool,
    ) -> Result<(), SourceError> {
        let umem = Arc::clone(self.umem.as_ref().expect("set when the lane is opened"));
        let mut stats_at = Instant::now();
        // Frames onto the fill ring before the first packet.
        self.recycle(t, lens);
        loop {
            if ctl.stopping() {
                return Ok(());
            }
            self.recycle(t, lens);
            let room = self.tx.room(BATCH);
            let n = self.rx.peek(BATCH.min(room));
            if n == 0 {
                self.kick(t, lens, false)?;
                self.read_stats(t, zero_copy)?;
                counters.publish(&t.stats);
                stats_at = Instant::now();
                if room == 0 {
                    // OUT is slow: wait for completions, not for packets.
                    std::thread::sleep(Duration::from_micros(50));
                    continue;
                }
                match self.rx_fd.wait_readable(IDLE_WAIT) {
                    Ok(true) => {}
                    Ok(false) => self.rx_fd.check_bound().map_err(|e| io(format!("{}: the interface went down or away", self.name), e))?,
                    Err(e) => return Err(io(format!("{}: waiting for packets", self.name), e)),
                }
                continue;
            }
            let n = ctl.take(n);
            let ts = crate::clock::realtime_ns();
            let mut sent = 0;
            for i in 0..n {
                let (desc, data) = self.rx.packet(i, umem.region(), umem.frame_size(), usize::MAX);
                t.stats.received += 1;
                t.stats.received_bytes += u64::from(desc.len);
                let pass = match filter {
                    Some(f) if !f.matches(data, desc.len) => {
                        t.stats.filtered += 1;
                        false
                    }
                    _ => match judge.verdict(&Packet::new(data, desc.len, ts, self.queue)) {
                        Verdict::Pass => true,
                        Verdict::Drop => {
                            t.stats.dropped += 1;
                            false
                        }
                    },
                };
                if pass && !fits(self.mtu, data) {
                    t.unfit += 1;
                    self.free.push(desc.addr);
                } else if pass {
                    // The frame goes out as it came in: its address and length.
                    self.tx.write(sent, XdpDesc { addr: desc.addr, len: desc.len, options: 0 });
                    lens.push_back(desc.len);
                    sent += 1;
                } else {
                    self.free.push(desc.addr);
                }
            }
            self.rx.release(n);
            self.tx.submit(sent);
            t.submitted += u64::from(sent);
            self.kick(t, lens, false)?;
            if stats_at.elapsed() >= Duration::from_millis(10) {
                self.read_stats(t, zero_copy)?;
                counters.publish(&t.stats);
                stats_at = Instant::now();
            }
            t.settle(zero_copy);
            debug_assert!(t.stats.balanced(), "{}: counts do not add up: {:?}", self.name, t.stats);
        }
    }

    /// After the last batch: wait (at most [`DRAIN`]) for what was sent to
    /// complete, then take the kernel's final counts.
    fn drain(&mut self, t: &mut Tally, lens: &mut std::collections::VecDeque<u32>, zero_copy: bool) {
        let until = Instant::now() + DRAIN;
        loop {
            self.recycle(t, lens);
            let _ = self.read_stats(t, zero_copy);
            if t.stats.in_flight == 0 || Instant::now() >= until {
                break;
            }
            if self.kick(t, lens, true).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        t.settle(zero_copy);
        debug_assert!(t.stats.balanced(), "{}: counts do not add up: {:?}", self.name, t.stats);
    }
}

/// Whether an interface of this MTU can carry `frame`: a whole Ethernet
/// header, and no longer than the MTU allows (see [`longest_frame`]).
fn fits(mtu: u32, frame: &[u8]) -> bool {
    frame.len() >= 14 && frame.len() <= longest_frame(mtu, frame)
}

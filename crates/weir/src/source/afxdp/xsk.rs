//! One AF_XDP socket bound to one RX queue, with its UMEM, its fill and RX
//! rings, and the frames that are ours.
//!
//! Frame accounting: each of the UMEM's R×M frames is in exactly one place:
//! - **free**: in `free`, ours;
//! - **fill**: on the fill ring or taken from it by the kernel, waiting for a packet;
//! - **RX**: on the RX ring, holding a packet we have not consumed;
//! - **held**: pointed at by a cell of the queue's pool, until its chunk is recycled.
//!
//! The fill ring is fed only from `free`; a consumed frame either goes into a
//! cell (held) or, when the filter rejects its packet, straight back to `free`;
//! held frames come back to `free` when the worker recycles their chunk
//! ([`CaptureSide::take_frames`]). So the fill ring never holds a frame a cell
//! points at, and the pool's capacity is the UMEM's: when every frame is held,
//! the fill ring runs dry and the kernel counts the drops.
//!
//! The completion ring exists because `bind` requires one, but nothing is ever
//! sent, so it is neither mapped nor read.

use crate::capture::SourceError;
use crate::pool::{CaptureSide, FrameArena};
use crate::source::live::denied;
use crate::source::{AfXdpOptions, ZeroCopy};
use crate::sys::xsk::{self as sys, RingKind, XdpDesc, XdpStatistics, XskFd};
use crate::sys::xsk_ring::{FillRing, RxRing};
use crate::QueueId;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Duration;

/// Fill ring entries per RX ring entry, for a ring size the user chose. With
/// a fill ring twice the RX ring, a stalled capture thread overflows the RX
/// ring (a delivery drop) before the kernel runs out of frames, so an empty
/// fill ring (a capture drop) means what it should: the pool had no free frame
/// left to give. Sized from the pool (the default), both rings hold every
/// frame: the RX ring never overflows, and the fill ring runs dry exactly when
/// the pool is full.
const FILL_PER_RX: u32 = 2;

/// How long a bind keeps retrying a queue the kernel still releases (see `bind`).
const BUSY_RETRY: Duration = Duration::from_secs(1);

/// Entries of the unused completion ring: the smallest the kernel accepts.
const COMPLETION_RING_ENTRIES: u32 = 1;

/// A bound socket and the frames of its UMEM.
pub(crate) struct Xsk {
    queue: QueueId,
    /// The rings are declared before the socket, so they are unmapped before it closes.
    rx: RxRing,
    fill: FillRing,
    fd: XskFd,
    umem: Arc<FrameArena>,
    /// Free frames (addresses), most recently freed at the end.
    free: Vec<u64>,
    frame_mask: u64,
    need_wakeup: bool,
    zero_copy: bool,
}

/// Entries of the RX and fill rings of a socket whose pool has `frames`
/// frames: what the user chose (and twice that for the fill ring), or both
/// the pool's frames rounded up to a power of two (the kernel's rule).
pub(crate) fn ring_sizes(ring_size: Option<u32>, frames: usize) -> (u32, u32) {
    match ring_size {
        Some(r) => (r, r.saturating_mul(FILL_PER_RX).max(r)),
        None => {
            let all = u32::try_from(frames.max(1).next_power_of_two()).unwrap_or(1 << 31);
            (all, all)
        }
    }
}

/// The most memory the RX, fill and completion rings take (see [`ring_sizes`]).
pub(crate) fn ring_bytes(ring_size: Option<u32>, frames: usize) -> u64 {
    let (rx, fill) = ring_sizes(ring_size, frames);
    u64::from(rx) * size_of::<XdpDesc>() as u64 + u64::from(fill) * 8 + u64::from(COMPLETION_RING_ENTRIES) * 8
}

/// Whose UMEM a socket uses.
pub(crate) enum UmemOf<'a> {
    /// Its own, of [`BindTo::frames`] frames.
    Own,
    /// A group's, one arena for every socket of the capture, so a frame one
    /// queue received can be held by another queue's pool. Each socket's own
    /// frames (its fill ring's) are share number `home`, of [`BindTo::frames`]
    /// frames. The first socket registers the arena (`first` is `None`); the
    /// others bind to it with XDP_SHARED_UMEM and a fill ring of their own.
    Group { arena: Arc<FrameArena>, home: usize, first: Option<BorrowedFd<'a>> },
}

/// What a bind needs to know besides the socket.
pub(crate) struct BindTo<'a> {
    pub(crate) iface: &'a str,
    pub(crate) ifindex: u32,
    pub(crate) queue: QueueId,
    pub(crate) frames: usize,
    /// Zero-copy may be tried (the program runs in native mode).
    pub(crate) native: bool,
}

impl Xsk {
    /// Register a UMEM of `to.frames` frames on `fd` (or join a group's), size
    /// and map its rings, put its free frames on the fill ring, and bind it to the queue.
    pub(crate) fn bind(fd: XskFd, to: &BindTo<'_>, opts: &AfXdpOptions, umem_of: UmemOf<'_>) -> Result<Xsk, SourceError> {
        let (iface, q) = (to.iface, to.queue.0);
        let at = |what: &str| format!("{iface} queue {q}: {what}");
        let (umem, first_frame, share) = match umem_of {
            UmemOf::Own => (FrameArena::new(to.frames, opts.frame_size).map_err(|e| io(at("mapping the UMEM"), e))?, 0, None),
            UmemOf::Group { arena, home, first } => (arena, (home * to.frames) as u64, first),
        };
        if share.is_none() {
            fd.register_umem(umem.region(), umem.frame_size()).map_err(|e| umem_error(at("registering the UMEM"), e, umem.len()))?;
        }
        let (ring_size, fill_size) = ring_sizes(opts.ring_size, to.frames);
        fd.set_ring_size(RingKind::Fill, fill_size).map_err(|e| io(at("sizing the fill ring"), e))?;
        fd.set_ring_size(RingKind::Completion, COMPLETION_RING_ENTRIES).map_err(|e| io(at("sizing the completion ring"), e))?;
        fd.set_ring_size(RingKind::Rx, ring_size).map_err(|e| io(at("sizing the RX ring"), e))?;
        let off = fd.mmap_offsets().map_err(|e| io(at("asking for the ring layout"), e))?;
        let rx_len = off.rx.desc as usize + ring_size as usize * size_of::<XdpDesc>();
        let fill_len = off.fr.desc as usize + fill_size as usize * size_of::<u64>();
        let rx_map = fd.map_ring(RingKind::Rx, rx_len).map_err(|e| io(at("mapping the RX ring"), e))?;
        let fill_map = fd.map_ring(RingKind::Fill, fill_len).map_err(|e| io(at("mapping the fill ring"), e))?;
        let rx = RxRing::new(rx_map, &off.rx, ring_size).map_err(|e| io(at("the RX ring"), e))?;
        let fill = FillRing::new(fill_map, &off.fr, fill_size).map_err(|e| io(at("the fill ring"), e))?;

        let frame_size = umem.frame_size() as u64;
        // Frame 0 last, so it is the first on the fill ring.
        let free = (first_frame..first_frame + to.frames as u64).rev().map(|i| i * frame_size).collect::<Vec<_>>();
        let mut xsk = Xsk {
            queue: to.queue,
            rx,
            fill,
            fd,
            umem,
            free,
            frame_mask: !(frame_size - 1),
            need_wakeup: opts.need_wakeup,
            zero_copy: false,
        };
        // Frames are on the fill ring before the socket is bound, so the first
        // packets find somewhere to go (a zero-copy driver fills its ring at bind).
        xsk.fill.produce(&mut xsk.free, xsk.frame_mask);

        let wakeup = if opts.need_wakeup { sys::BIND_NEED_WAKEUP } else { 0 };
        let mode = match (opts.zero_copy, to.native) {
            (ZeroCopy::On, _) => sys::BIND_ZEROCOPY,
            (ZeroCopy::Off, _) | (ZeroCopy::Auto, false) => sys::BIND_COPY,
            // Neither flag: the kernel tries zero-copy and falls back to copy mode.
            (ZeroCopy::Auto, true) => 0,
        };
        // The kernel frees a closed socket's hold on its queue from a work queue, a
        // little after close(2): a capture started right after another one ended
        // finds the queue busy for a moment, so EBUSY is retried for a while.
        let busy_until = std::time::Instant::now() + BUSY_RETRY;
        let bound = loop {
            let r = match share {
                // A socket joining a UMEM takes the mode of the socket that registered it.
                Some(first) => xsk.fd.bind_shared(to.ifindex, u32::from(q), first),
                None => xsk.fd.bind(to.ifindex, u32::from(q), mode | wakeup),
            };
            match r {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && std::time::Instant::now() < busy_until => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                r => break r,
            }
        };
        bound.map_err(|e| bind_error(iface, q, opts.zero_copy, e))?;
        xsk.zero_copy = xsk.fd.is_zero_copy().map_err(|e| io(at("asking for the socket's mode"), e))?;
        // The statistics weir accounts from must be readable before capture starts.
        xsk.fd.statistics().map_err(|e| io(at("reading AF_XDP statistics"), e))?;
        Ok(xsk)
    }

    pub(crate) fn queue(&self) -> QueueId {
        self.queue
    }

    pub(crate) fn socket(&self) -> BorrowedFd<'_> {
        self.fd.fd()
    }

    pub(crate) fn is_zero_copy(&self) -> bool {
        self.zero_copy
    }

    pub(crate) fn umem(&self) -> &Arc<FrameArena> {
        &self.umem
    }

    /// Entries of the RX ring.
    pub(crate) fn rx_entries(&self) -> u32 {
        self.rx.size()
    }

    /// Descriptors ready on the RX ring, at most `max`.
    #[inline]
    pub(crate) fn peek(&mut self, max: u32) -> u32 {
        self.rx.peek(max)
    }

    /// Descriptor `i` of those peeked and its packet, cut to `max_len` bytes.
    #[inline]
    pub(crate) fn packet<'a>(&'a self, i: u32, umem: &'a FrameArena, max_len: usize) -> (XdpDesc, &'a [u8]) {
        self.rx.packet(i, umem.region(), umem.frame_size(), max_len)
    }

    /// Give the first `n` peeked descriptors back to the kernel.
    #[inline]
    pub(crate) fn release(&mut self, n: u32) {
        self.rx.release(n);
    }

    /// A consumed frame whose packet took no cell: free again.
    #[inline]
    pub(crate) fn free_frame(&mut self, addr: u64) {
        self.free.push(addr);
    }

    /// Take back the frames of recycled chunks and top the fill ring up from the
    /// free frames, waking the driver if it asked for it.
    #[inline]
    pub(crate) fn refill(&mut self, side: &mut CaptureSide) {
        side.take_frames(&mut self.free);
        self.top_up();
    }

    /// Make `frames` free (emptying it) and top the fill ring up, for a unit
    /// that sorts the frames coming back itself (a group's UMEM).
    #[inline]
    pub(crate) fn refill_with(&mut self, frames: &mut Vec<u64>) {
        self.free.append(frames);
        self.top_up();
    }

    #[inline]
    fn top_up(&mut self) {
        if self.fill.produce(&mut self.free, self.frame_mask) > 0 && self.need_wakeup && self.fill.needs_wakeup() {
            self.fd.wake_rx();
        }
    }

    /// Sleep until packets arrive or `timeout` passes; true if they arrived.
    pub(crate) fn wait(&self, timeout: Duration) -> Result<bool, SourceError> {
        self.fd.wait_readable(timeout).map_err(|e| io(format!("waiting on queue {}", self.queue.0), e))
    }

    /// An error naming the queue once its interface is gone or down.
    pub(crate) fn check_bound(&self) -> Result<(), SourceError> {
        self.fd.check_bound().map_err(|e| io("the interface went down or away".into(), e))
    }

    pub(crate) fn statistics(&self) -> Result<XdpStatistics, SourceError> {
        self.fd.statistics().map_err(|e| io(format!("reading AF_XDP statistics of queue {}", self.queue.0), e))
    }
}

fn io(what: String, source: io::Error) -> SourceError {
    SourceError::Io { what, error: source }
}

pub(crate) fn umem_error(what: String, e: io::Error, bytes: usize) -> SourceError {
    match e.raw_os_error() {
        // The kernel pins the UMEM and charges it to RLIMIT_MEMLOCK unless the
        // caller has CAP_IPC_LOCK: ENOBUFS when over the limit.
        Some(libc::ENOBUFS) | Some(libc::ENOMEM) => io(
            format!(
                "{what} ({} MiB pinned): over RLIMIT_MEMLOCK without CAP_IPC_LOCK, or out of memory; lower R or M, or raise the limit",
                bytes >> 20
            ),
            e,
        ),
        _ => denied(what, e, "CAP_IPC_LOCK"),
    }
}

pub(crate) fn bind_error(iface: &str, queue: u16, zero_copy: ZeroCopy, e: io::Error) -> SourceError {
    let what = format!("{iface} queue {queue}: binding the AF_XDP socket");
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) if zero_copy == ZeroCopy::On => {
            SourceError::Invalid(format!("{iface}: the driver has no AF_XDP zero-copy support: use zero-copy auto or off"))
        }
        Some(libc::EBUSY) => SourceError::Invalid(format!("{iface} queue {queue} already has an AF_XDP socket or zero-copy user")),
        _ => denied(what, e, "CAP_NET_RAW"),
    }
}
